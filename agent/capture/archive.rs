//! The capture archive: a tar stream through a minimal gzip writer.

use super::*;

/// The bundle as a `.tar.gz`, in memory (a bundle is a few MB at most: every file is bounded).
pub(super) fn archive(bundle: &Bundle) -> std::io::Result<Vec<u8>> {
    let mut tar = tar::Builder::new(flate2::write::GzEncoder::new(
        Vec::new(),
        flate2::Compression::default(),
    ));
    tar.mode(tar::HeaderMode::Deterministic);
    for (p, e) in &bundle.entries {
        let rel = p.trim_start_matches('/');
        if rel.is_empty() {
            continue;
        }
        let mut h = tar::Header::new_gnu();
        match e {
            Entry::Dir => {
                h.set_entry_type(tar::EntryType::Directory);
                h.set_mode(0o755);
                h.set_size(0);
                tar.append_data(&mut h, format!("{rel}/"), std::io::empty())?;
            }
            Entry::File(b, _, _) => {
                h.set_entry_type(tar::EntryType::Regular);
                h.set_mode(0o644);
                h.set_size(b.len() as u64);
                tar.append_data(&mut h, rel, b.as_slice())?;
            }
        }
    }
    tar.into_inner()?.finish()
}

/// Writes `bytes` to `out` through a temporary file beside it (created new, synced, then
/// renamed), so `out` is either the whole file or absent. Without `replace`, a file that
/// appeared at `out` in the meantime is kept. The fleet's `capture` writes its bundle here too.
///
/// Errors: [`CaptureError::Write`] naming `out` (`File exists` without `replace`); the
/// temporary file is removed.
pub fn write_file(out: &Path, bytes: &[u8], replace: bool) -> Result<(), CaptureError> {
    let werr = |e: &dyn std::fmt::Display| CaptureError::Write {
        path: out.display().to_string(),
        detail: e.to_string(),
    };
    let dir = out
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."));
    let name = out
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "capture.tar.gz".into());
    let tmp = dir.join(format!(".{name}.{}.tmp", std::process::id()));
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&tmp)
        .map_err(|e| {
            // Name the file the user asked for; the temporary name only as the detail.
            werr(&format!(
                "{e} (creating the temporary file {} beside it)",
                tmp.display()
            ))
        })?;
    let written = file
        .write_all(bytes)
        .and_then(|()| file.sync_all())
        .and_then(|()| place(&tmp, out, replace));
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written.map_err(|e| werr(&e))
}

/// Renames `tmp` to `out`; without `replace`, never over a file there (`RENAME_NOREPLACE`;
/// where the file system lacks it, such as NFS, a check just before the rename).
fn place(tmp: &Path, out: &Path, replace: bool) -> std::io::Result<()> {
    if replace {
        return std::fs::rename(tmp, out);
    }
    use rustix::fs::{renameat_with, RenameFlags, CWD};
    match renameat_with(CWD, tmp, CWD, out, RenameFlags::NOREPLACE) {
        Err(e) if e == rustix::io::Errno::INVAL || e == rustix::io::Errno::NOSYS => {
            match std::fs::symlink_metadata(out) {
                Ok(_) => Err(std::io::ErrorKind::AlreadyExists.into()),
                Err(_) => std::fs::rename(tmp, out),
            }
        }
        r => r.map_err(std::io::Error::from),
    }
}
