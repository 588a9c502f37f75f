//! Atomic file replacement for boot files and state files: optional backup beside the file,
//! temp file in the same directory, `fsync`, rename over the target, `fsync` of the directory.
//!
//! A power cut at any step leaves the target either as it was or completely new, and the backup
//! (once its own rename is done) complete: the backup is itself written with temp + rename, and
//! the target is only ever replaced by a rename of a fully written and synced temp file. The
//! backup is kept (the Pi boot partition is FAT, where rename is not journalled).
//!
//! The primitive operations go through [`Storage`], so a test can stop the sequence after any
//! [`Step`] or make a write fail with `ENOSPC`; [`RealStorage`] is `std::fs`.

// The one place that writes files on a board (clippy.toml: disallowed_methods).
#![allow(clippy::disallowed_methods)]

use std::fmt;
use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Suffix of the backup kept beside an edited file (`armbianEnv.txt.npu-agent.bak`).
pub const BACKUP_SUFFIX: &str = ".npu-agent.bak";
/// Suffix of the temporary files (`.armbianEnv.txt.<pid>-<n>-<random>.npu-agent.tmp`, hidden,
/// same directory; unique per write, created `O_EXCL|O_NOFOLLOW`).
pub const TEMP_SUFFIX: &str = ".npu-agent.tmp";
/// Mode of a new file when there is no old one to copy it from.
pub const DEFAULT_MODE: u32 = 0o644;

/// One step of [`write_atomic`], in order. A failure names the step it happened in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Step {
    /// Create the backup's temp file.
    BackupCreate,
    /// Write the old content into it.
    BackupWrite,
    /// `fsync` it.
    BackupSync,
    /// Rename it to `<file>.npu-agent.bak`.
    BackupRename,
    /// `fsync` the directory so the backup's name is durable.
    BackupDirSync,
    /// Create the temp file for the new content.
    TempCreate,
    /// Write the new content.
    TempWrite,
    /// `fsync` the temp file.
    TempSync,
    /// Rename the temp file over the target.
    Rename,
    /// `fsync` the directory so the rename is durable.
    DirSync,
}

impl Step {
    /// Lowercase words for messages (`temp write`).
    pub fn as_str(self) -> &'static str {
        match self {
            Step::BackupCreate => "backup create",
            Step::BackupWrite => "backup write",
            Step::BackupSync => "backup fsync",
            Step::BackupRename => "backup rename",
            Step::BackupDirSync => "backup directory fsync",
            Step::TempCreate => "temp file create",
            Step::TempWrite => "temp file write",
            Step::TempSync => "temp file fsync",
            Step::Rename => "rename",
            Step::DirSync => "directory fsync",
        }
    }
}

/// An open file being written by [`write_atomic`].
pub trait StorageFile {
    /// Writes all of `bytes` (a short write is an error, e.g. `ENOSPC`).
    fn write_all(&mut self, bytes: &[u8]) -> io::Result<()>;
    /// `fsync`: data and metadata on stable storage.
    fn sync(&mut self) -> io::Result<()>;
}

/// The filesystem primitives [`write_atomic`] uses; host paths (already resolved under the
/// root with [`crate::root::SysRoot::write_path`]).
pub trait Storage {
    /// Creates the new file `path` for writing with permission bits `mode` (subject to the
    /// umask; ignored by FAT). [`RealStorage`] refuses an existing file or symlink there
    /// (`O_CREAT|O_EXCL|O_NOFOLLOW`): a planted link is never followed.
    fn create(&mut self, path: &Path, mode: u32) -> io::Result<Box<dyn StorageFile>>;
    /// Renames `from` to `to`, replacing `to`.
    fn rename(&mut self, from: &Path, to: &Path) -> io::Result<()>;
    /// `fsync` of a directory (makes a rename in it durable).
    fn sync_dir(&mut self, dir: &Path) -> io::Result<()>;
    /// Removes a file (cleanup of a temp file after a failure).
    fn remove_file(&mut self, path: &Path) -> io::Result<()>;
    /// Overwrites the regular file `path` in place with zeros and syncs it, so that its old
    /// bytes do not stay in the clusters a later unlink frees (FAT writes in place). A symlink
    /// is not followed (`ELOOP`): its target is not the file being removed.
    fn scrub(&mut self, path: &Path) -> io::Result<()> {
        let mut f = fs::OpenOptions::new()
            .write(true)
            .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
            .open(path)?;
        let len = f.metadata()?.len();
        let zeros = [0u8; 4096];
        let mut left = len;
        while left > 0 {
            let n = left.min(zeros.len() as u64) as usize;
            f.write_all(&zeros[..n])?;
            left -= n as u64;
        }
        f.sync_all()
    }
}

/// [`Storage`] on the real filesystem (`std::fs`).
#[derive(Debug, Default, Clone, Copy)]
pub struct RealStorage;

struct RealFile(fs::File);

impl StorageFile for RealFile {
    fn write_all(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.0.write_all(bytes)?;
        self.0.flush()
    }
    fn sync(&mut self) -> io::Result<()> {
        self.0.sync_all()
    }
}

impl Storage for RealStorage {
    fn create(&mut self, path: &Path, mode: u32) -> io::Result<Box<dyn StorageFile>> {
        let file = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
            .mode(mode & 0o7777)
            .open(path)?;
        Ok(Box::new(RealFile(file)))
    }
    fn rename(&mut self, from: &Path, to: &Path) -> io::Result<()> {
        fs::rename(from, to)
    }
    fn sync_dir(&mut self, dir: &Path) -> io::Result<()> {
        fs::File::open(dir)?.sync_all()
    }
    fn remove_file(&mut self, path: &Path) -> io::Result<()> {
        fs::remove_file(path)
    }
}

/// A failed atomic write: the step, the host path it worked on, the OS error.
#[derive(Debug)]
pub struct WriteError {
    /// Step that failed.
    pub step: Step,
    /// Host path of the file that step worked on.
    pub path: PathBuf,
    /// The OS error.
    pub source: io::Error,
}

impl WriteError {
    /// The error with its path shown as the host path it stood for, when it went through the
    /// pinned directory of `target`.
    pub fn unpinned(mut self, target: &crate::root::WriteTarget) -> WriteError {
        self.path = target.dir.shown(&self.path);
        self
    }

    /// The errno, when the error came from the OS (`28` = `ENOSPC`, `30` = `EROFS`).
    pub fn errno(&self) -> Option<i32> {
        self.source.raw_os_error()
    }

    /// A sentence for people: what the errno means for the edit.
    pub fn reason(&self) -> String {
        match self.errno() {
            Some(28) => "no space left on the device (ENOSPC)".into(),
            Some(30) => "the filesystem is mounted read-only (EROFS); remount it read-write".into(),
            Some(13) | Some(1) => "permission denied: run as root".into(),
            _ => self.source.to_string(),
        }
    }
}

impl fmt::Display for WriteError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {} failed: {}",
            self.path.display(),
            self.step.as_str(),
            self.reason()
        )
    }
}

impl std::error::Error for WriteError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.source)
    }
}

/// What [`write_atomic`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteReport {
    /// The replaced (or created) file, host path.
    pub target: PathBuf,
    /// The backup beside it, when one was asked for.
    pub backup: Option<PathBuf>,
    /// Bytes written to the target.
    pub bytes: usize,
}

/// Host path of the backup of `target`: `<dir>/<name>.npu-agent.bak`.
pub fn backup_path(target: &Path) -> PathBuf {
    sibling(target, "", BACKUP_SUFFIX)
}

/// A fresh host path for a temp file beside `target`:
/// `<dir>/.<name>.<pid>-<n>-<random>.npu-agent.tmp`. Unique per call (process id, a counter and
/// 32 random bits), so two writers never share one, and a name planted in advance is not
/// guessed.
pub fn temp_path(target: &Path) -> PathBuf {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let mut r = [0u8; 4];
    let _ = getrandom::fill(&mut r);
    let tag = format!(
        ".{}-{}-{:08x}{TEMP_SUFFIX}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed),
        u32::from_le_bytes(r)
    );
    sibling(target, ".", &tag)
}

/// Removes temp files a cut-off write left beside `target` (its own and its backup's). Call it
/// only while holding the lock that serialises writers of `target` (a live writer's temp file
/// would go too). `unlink` never follows a link: a planted one is removed, its target stays.
/// Returns how many were removed.
pub fn remove_stale_temps(target: &Path) -> usize {
    let (Some(dir), Some(name)) = (target.parent(), target.file_name()) else {
        return 0;
    };
    let name = name.to_string_lossy();
    let prefixes = [format!(".{name}."), format!(".{name}{BACKUP_SUFFIX}.")];
    let Ok(entries) = fs::read_dir(dir) else {
        return 0;
    };
    let mut n = 0;
    for e in entries.flatten() {
        let f = e.file_name().to_string_lossy().into_owned();
        if is_temp_name(&f)
            && prefixes.iter().any(|p| f.starts_with(p.as_str()))
            && fs::remove_file(e.path()).is_ok()
        {
            n += 1;
        }
    }
    n
}

/// True for a temp file name this module makes (`.<name>.<tag>.npu-agent.tmp`).
pub fn is_temp_name(name: &str) -> bool {
    name.starts_with('.') && name.ends_with(TEMP_SUFFIX)
}

fn sibling(target: &Path, prefix: &str, suffix: &str) -> PathBuf {
    let name = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    target.with_file_name(format!("{prefix}{name}{suffix}"))
}

/// Permission bits of an existing file (to give the replacement the same), `None` when it does
/// not exist.
pub fn existing_mode(path: &Path) -> Option<u32> {
    // The entry itself (a link planted there lends no mode), and never set-id or sticky bits.
    fs::symlink_metadata(path)
        .ok()
        .filter(|m| m.is_file())
        .map(|m| m.permissions().mode() & 0o777)
}

fn at(step: Step, path: &Path) -> impl FnOnce(io::Error) -> WriteError + '_ {
    move |source| WriteError {
        step,
        path: path.to_path_buf(),
        source,
    }
}

/// Writes `bytes` to `tmp` and renames it to `dest`, then syncs the directory: the steps
/// `create`, `write`, `sync`, `rename`, `dir_sync`.
fn replace_via(
    storage: &mut dyn Storage,
    dest: &Path,
    tmp: &Path,
    bytes: &[u8],
    mode: u32,
    steps: [Step; 5],
) -> Result<(), WriteError> {
    let [create, write, sync, rename, dir_sync] = steps;
    let dir = dest.parent().unwrap_or(Path::new("/"));
    let result = (|| {
        let mut file = storage.create(tmp, mode).map_err(at(create, tmp))?;
        file.write_all(bytes).map_err(at(write, tmp))?;
        file.sync().map_err(at(sync, tmp))?;
        drop(file);
        storage.rename(tmp, dest).map_err(at(rename, dest))
    })();
    if let Err(e) = result {
        // Leave no half-written temp file behind (best effort; a dead machine cannot).
        let _ = storage.remove_file(tmp);
        return Err(e);
    }
    storage.sync_dir(dir).map_err(at(dir_sync, dir))
}

/// Replaces `target` (a host path) with `bytes` atomically.
///
/// With `backup_of = Some(old)`, first writes `old` (the current content, as read by the caller)
/// to `<target>.npu-agent.bak` with the same temp + fsync + rename sequence, so the backup is
/// complete before the target is touched. The new file gets permission bits `mode`.
///
/// Errors: the first failing [`Step`] with its OS error; the temp file is removed on failure.
/// After a failure the target is either unchanged or (for a failed [`Step::DirSync`]) already
/// new but not confirmed durable.
pub fn write_atomic(
    storage: &mut dyn Storage,
    target: &Path,
    bytes: &[u8],
    backup_of: Option<&[u8]>,
    mode: u32,
) -> Result<WriteReport, WriteError> {
    let backup = match backup_of {
        Some(old) => {
            let bak = backup_path(target);
            let tmp = temp_path(&backup_path(target));
            replace_via(
                storage,
                &bak,
                &tmp,
                old,
                mode,
                [
                    Step::BackupCreate,
                    Step::BackupWrite,
                    Step::BackupSync,
                    Step::BackupRename,
                    Step::BackupDirSync,
                ],
            )?;
            Some(bak)
        }
        None => None,
    };
    replace_via(
        storage,
        target,
        &temp_path(target),
        bytes,
        mode,
        [
            Step::TempCreate,
            Step::TempWrite,
            Step::TempSync,
            Step::Rename,
            Step::DirSync,
        ],
    )?;
    Ok(WriteReport {
        target: target.to_path_buf(),
        backup,
        bytes: bytes.len(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replaces_keeps_backup_and_mode() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("cmdline.txt");
        fs::write(&target, "old\n").unwrap();
        fs::set_permissions(&target, fs::Permissions::from_mode(0o600)).unwrap();
        let mode = existing_mode(&target).unwrap();
        let r = write_atomic(&mut RealStorage, &target, b"new\n", Some(b"old\n"), mode).unwrap();
        assert_eq!(fs::read_to_string(&target).unwrap(), "new\n");
        assert_eq!(fs::read_to_string(r.backup.unwrap()).unwrap(), "old\n");
        assert_eq!(existing_mode(&target), Some(0o600));
        let left: Vec<_> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| is_temp_name(n))
            .collect();
        assert!(left.is_empty(), "{left:?}");
        assert_eq!(
            backup_path(&target),
            dir.path().join("cmdline.txt.npu-agent.bak")
        );
    }

    /// A symlink planted where a temp file could go is never followed, and temp names differ.
    #[test]
    fn temp_files_are_exclusive_and_unique() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let victim = outside.path().join("victim");
        fs::write(&victim, "outside\n").unwrap();
        let target = dir.path().join("armbianEnv.txt");
        fs::write(&target, "old\n").unwrap();
        let a = temp_path(&target);
        assert_ne!(a, temp_path(&target));
        std::os::unix::fs::symlink(&victim, &a).unwrap();
        let e = RealStorage.create(&a, 0o644).err().unwrap();
        assert_eq!(e.kind(), io::ErrorKind::AlreadyExists);
        write_atomic(&mut RealStorage, &target, b"new\n", Some(b"old\n"), 0o644).unwrap();
        assert_eq!(fs::read_to_string(&victim).unwrap(), "outside\n");
        assert_eq!(fs::read_to_string(&target).unwrap(), "new\n");
        assert!(!fs::symlink_metadata(&target)
            .unwrap()
            .file_type()
            .is_symlink());
    }

    #[test]
    fn missing_directory_fails_at_temp_create() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("nope/state.json");
        let e = write_atomic(&mut RealStorage, &target, b"{}", None, DEFAULT_MODE).unwrap_err();
        assert_eq!(e.step, Step::TempCreate);
        assert_eq!(e.errno(), Some(2));
    }

    #[test]
    fn an_existing_mode_is_the_entrys_own_and_never_set_id() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let suid = dir.path().join("passwd");
        fs::write(&suid, "x").unwrap();
        fs::set_permissions(&suid, fs::Permissions::from_mode(0o4755)).unwrap();
        assert_eq!(existing_mode(&suid), Some(0o755));
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&suid, &link).unwrap();
        assert_eq!(existing_mode(&link), None, "a planted link lends no mode");
        assert_eq!(existing_mode(&dir.path().join("missing")), None);
    }
}
