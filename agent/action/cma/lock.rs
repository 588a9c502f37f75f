//! The lock file that serialises boot-file edits.

use super::*;

/// Lock file in the state directory serialising boot-file edits.
pub const BOOT_EDIT_LOCK_FILE: &str = "boot_edit.lock";

/// An exclusive `flock` on [`BOOT_EDIT_LOCK_FILE`], released when dropped (or when the process
/// dies). The file is opened `O_NOFOLLOW` inside the root and never written.
#[derive(Debug)]
pub struct BootEditLock {
    _file: std::fs::File,
}

impl BootEditLock {
    /// Waits for and takes the lock.
    ///
    /// Errors: a sentence when the state directory or the lock file cannot be opened.
    pub fn acquire(state: &StateDir) -> Result<BootEditLock, String> {
        use std::os::unix::fs::OpenOptionsExt;
        let dir = state.board_path("");
        state
            .root()
            .create_dir_all(dir.trim_end_matches('/'))
            .map_err(|e| format!("cannot create the state directory: {e}"))?;
        let path = state.board_path(BOOT_EDIT_LOCK_FILE);
        let host = state.root().write_path(&path).map_err(|e| e.to_string())?;
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .custom_flags(
                (rustix::fs::OFlags::NOFOLLOW | rustix::fs::OFlags::CLOEXEC).bits() as i32,
            )
            .open(&host)
            .map_err(|e| format!("{path}: cannot open the edit lock: {e}"))?;
        rustix::fs::flock(&file, rustix::fs::FlockOperation::LockExclusive)
            .map_err(|e| format!("{path}: cannot lock: {e}"))?;
        Ok(BootEditLock { _file: file })
    }
}
