//! The lock file that serialises boot-file edits.

use super::*;

/// Lock file in the state directory serialising boot-file edits.
pub const BOOT_EDIT_LOCK_FILE: &str = "boot_edit.lock";

/// How long an edit waits for another one to end before it is refused: an edit takes well under
/// a second, so a lock held longer is a stuck process, and waiting for ever would stall every
/// command queued behind it and the agent's stop.
pub const BOOT_EDIT_LOCK_WAIT_S: u64 = 10;

/// Between two tries of a held lock.
const LOCK_POLL: std::time::Duration = std::time::Duration::from_millis(50);

/// An exclusive `flock` on [`BOOT_EDIT_LOCK_FILE`], released when dropped (or when the process
/// dies). The file is opened `O_NOFOLLOW` inside the root and never written.
#[derive(Debug)]
pub struct BootEditLock {
    _file: std::fs::File,
}

impl BootEditLock {
    /// Takes the lock, waiting at most [`BOOT_EDIT_LOCK_WAIT_S`] for another edit to end.
    ///
    /// Errors: a sentence when the state directory or the lock file cannot be opened, or the
    /// lock stays held.
    pub fn acquire(state: &StateDir) -> Result<BootEditLock, String> {
        Self::acquire_within(state, std::time::Duration::from_secs(BOOT_EDIT_LOCK_WAIT_S))
    }

    /// [`BootEditLock::acquire`] with a given longest wait.
    pub fn acquire_within(
        state: &StateDir,
        wait: std::time::Duration,
    ) -> Result<BootEditLock, String> {
        use std::os::unix::fs::OpenOptionsExt;
        let dir = state.board_path("");
        state
            .root()
            .create_dir_all(dir.trim_end_matches('/'))
            .map_err(|e| format!("cannot create the state directory: {e}"))?;
        let path = state.board_path(BOOT_EDIT_LOCK_FILE);
        // Opened through its directory's handle: a directory swapped on the path meanwhile
        // cannot move the lock out of the tree.
        let target = state
            .root()
            .write_target(&path)
            .map_err(|e| e.to_string())?;
        let host = target.path();
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
        let start = std::time::Instant::now();
        loop {
            match rustix::fs::flock(&file, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
                Ok(()) => return Ok(BootEditLock { _file: file }),
                Err(rustix::io::Errno::WOULDBLOCK) if start.elapsed() < wait => {
                    std::thread::sleep(LOCK_POLL)
                }
                Err(rustix::io::Errno::WOULDBLOCK) => {
                    return Err(format!(
                        "another boot-file edit has held {path} for more than {} s; nothing was changed: try again when it ends",
                        wait.as_secs()
                    ))
                }
                Err(rustix::io::Errno::INTR) => {}
                Err(e) => return Err(format!("{path}: cannot lock: {e}")),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_lock_held_elsewhere_is_refused_after_the_wait() {
        let d = tempfile::tempdir().unwrap();
        let root = crate::root::SysRoot::new(d.path());
        let state = StateDir::new(&root, "/var/lib/npu-agent");
        let held = BootEditLock::acquire_within(&state, Duration::ZERO).unwrap();
        // flock locks belong to the open file: a second open is a second holder.
        let e = BootEditLock::acquire_within(&state, Duration::from_millis(120)).unwrap_err();
        assert!(
            e.contains("another boot-file edit") && e.contains("nothing was changed"),
            "{e}"
        );
        drop(held);
        // Another test's child may hold a copy of the descriptor between its fork and exec
        // (CLOEXEC closes it only at exec): the lock is free once that moment has passed.
        assert!(BootEditLock::acquire_within(&state, Duration::from_secs(5)).is_ok());
    }
}
