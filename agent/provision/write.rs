//! Writing the prepared files: directories, modes, atomic writes and rollback.

use super::*;

pub(super) fn io_msg(path: &str, e: impl std::fmt::Display) -> String {
    format!("{path}: {e}")
}

pub(super) fn ensure_dir(root: &SysRoot, dir: &str, mode: Option<u32>) -> Result<PathBuf, String> {
    let host = root.create_dir_all(dir).map_err(|e| io_msg(dir, e))?;
    if let Some(m) = mode {
        std::fs::set_permissions(&host, std::fs::Permissions::from_mode(m))
            .map_err(|e| io_msg(dir, e))?;
    }
    Ok(host)
}

/// Writes every file atomically; on a failure puts back those already written.
pub(super) fn apply(
    root: &SysRoot,
    storage: &mut dyn Storage,
    writes: &[Write],
) -> Result<(), String> {
    let needs = |dir: &str| {
        writes
            .iter()
            .any(|w| w.path.starts_with(&format!("{dir}/")))
    };
    if needs(SECRETS_DIR) {
        ensure_dir(root, SECRETS_DIR, Some(SECRET_DIR_MODE))?;
    }
    if needs(PUBLIC_DIR) {
        ensure_dir(root, PUBLIC_DIR, None)?;
    }
    ensure_dir(root, config::CONFIG_DIR, None)?;
    // Every file written so far, to put back on a failure.
    let mut done: Vec<Written> = Vec::new();
    for w in writes {
        let step = (|| -> Result<(), String> {
            let target = root.write_target(&w.path).map_err(|e| e.to_string())?;
            let host = target.path();
            // Read in the root (a link there means the tree's file, never the host's).
            let old = match root.read(&w.path) {
                Ok(b) => Some((
                    b,
                    crate::action::atomic::existing_mode(&host).unwrap_or(w.mode),
                )),
                Err(e) if e.is_not_found() => None,
                Err(e) => return Err(e.to_string()),
            };
            if let Err(e) = write_atomic(storage, &host, &w.bytes, None, w.mode) {
                let e = e.unpinned(&target);
                if e.step == crate::action::atomic::Step::DirSync {
                    // Renamed already, durability unconfirmed: it counts as written.
                    done.push(Written { target, old });
                }
                return Err(e.to_string());
            }
            done.push(Written { target, old });
            // A replaced file keeps no looser mode than asked (the umask may only tighten it).
            let m = crate::action::atomic::existing_mode(&host).unwrap_or(w.mode);
            if m & !w.mode != 0 {
                // Through a handle on the file itself: a link swapped in is not followed.
                use std::os::unix::fs::OpenOptionsExt;
                std::fs::OpenOptions::new()
                    .read(true)
                    .custom_flags(rustix::fs::OFlags::NOFOLLOW.bits() as i32)
                    .open(&host)
                    .and_then(|f| f.set_permissions(std::fs::Permissions::from_mode(w.mode)))
                    .map_err(|e| io_msg(&w.path, e))?;
            }
            Ok(())
        })();
        if let Err(e) = step {
            rollback(storage, &done);
            return Err(e);
        }
    }
    Ok(())
}

/// A file [`apply`] wrote: where (its directory pinned), and its previous content and mode
/// (`None`: it was new).
pub(super) struct Written {
    target: crate::root::WriteTarget,
    old: Option<(Vec<u8>, u32)>,
}

/// Puts back what [`apply`] replaced, newest first (best effort: a dead disk cannot).
pub(super) fn rollback(storage: &mut dyn Storage, done: &[Written]) {
    for Written { target, old } in done.iter().rev() {
        let host = &target.path();
        match old {
            Some((bytes, mode)) => {
                let _ = write_atomic(storage, host, bytes, None, *mode);
            }
            None => {
                let _ = storage.remove_file(host);
                if let Some(dir) = host.parent() {
                    let _ = storage.sync_dir(dir);
                }
            }
        }
    }
}
