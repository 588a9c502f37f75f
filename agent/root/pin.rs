//! Write targets pinned to their directory: the directory is opened once, in the root, and
//! every later step (temp file, rename, directory fsync, lock) goes through that handle, so a
//! directory on the path renamed or exchanged with a symlink meanwhile (`renameat2`
//! `RENAME_EXCHANGE`) cannot send a write outside the tree.

use super::*;
use std::ffi::OsString;
use std::os::fd::{AsRawFd, OwnedFd};

/// A directory under the root, opened once. Paths from [`PinnedDir::path`] go through
/// `/proc/self/fd/<fd>`, which the kernel resolves to the opened directory itself, not to
/// whatever now has its name (as systemd reaches the files of a directory it holds open).
#[derive(Debug)]
pub struct PinnedDir {
    _fd: OwnedFd,
    /// `/proc/self/fd/<fd>`, or the host path when `/proc` is not mounted.
    handle: PathBuf,
    /// The directory's host path when it was opened, for messages.
    shown: PathBuf,
}

impl PinnedDir {
    /// The path of `name` in the directory, through the handle.
    pub fn path(&self, name: &std::ffi::OsStr) -> PathBuf {
        self.handle.join(name)
    }

    /// A path through the handle as the host path it stood for when the directory was opened
    /// (for messages); any other path is returned as it is.
    pub fn shown(&self, p: &Path) -> PathBuf {
        match p.strip_prefix(&self.handle) {
            Ok(rest) => self.shown.join(rest),
            Err(_) => p.to_path_buf(),
        }
    }
}

/// A file to write (or lock) under the root: its directory pinned, and its name.
#[derive(Debug)]
pub struct WriteTarget {
    /// The directory, opened once.
    pub dir: PinnedDir,
    name: OsString,
}

impl WriteTarget {
    /// The file's path through the directory handle: give this to every step.
    pub fn path(&self) -> PathBuf {
        self.dir.path(&self.name)
    }

    /// The file's host path, for messages.
    pub fn shown(&self) -> PathBuf {
        self.dir.shown.join(&self.name)
    }
}

impl SysRoot {
    /// [`write_path`](Self::write_path) with its directory pinned ([`WriteTarget`]).
    ///
    /// Errors: as `write_path`; the directory's open error (`OutsideRoot` when a symlink
    /// appeared on the path since it was resolved).
    pub fn write_target(&self, board_path: &str) -> Result<WriteTarget, ReadError> {
        let host = self.write_path(board_path)?;
        self.pin(board_path, &host)
    }

    /// [`entry_path`](Self::entry_path) with its directory pinned: a symlink at the name itself
    /// is replaced by a rename, never followed.
    ///
    /// Errors: as [`write_target`](Self::write_target).
    pub fn entry_target(&self, board_path: &str) -> Result<WriteTarget, ReadError> {
        let host = self.entry_path(board_path)?;
        self.pin(board_path, &host)
    }

    /// Pins the directory of `host`, a path [`write_path`](Self::write_path) or
    /// [`entry_path`](Self::entry_path) resolved.
    fn pin(&self, board_path: &str, host: &Path) -> Result<WriteTarget, ReadError> {
        let (Some(dir), Some(name)) = (host.parent(), host.file_name()) else {
            return Err(ReadError {
                path: board_path.to_string(),
                kind: ReadErrorKind::OutsideRoot,
                detail: "no file name".into(),
            });
        };
        let dir = dir.to_path_buf();
        let fd = self.open_dir_pinned(board_path, &dir)?;
        let proc = PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()));
        let handle = if proc.is_dir() { proc } else { dir.clone() };
        Ok(WriteTarget {
            dir: PinnedDir {
                _fd: fd,
                handle,
                shown: dir,
            },
            name: name.to_os_string(),
        })
    }

    /// Opens the directory `dir` (a host path with its symlinks resolved). In a captured tree
    /// this is `openat2(RESOLVE_IN_ROOT | RESOLVE_NO_SYMLINKS)` from the root: a symlink that
    /// appeared on the path since it was resolved fails the open (`ELOOP`).
    fn open_dir_pinned(&self, board_path: &str, dir: &Path) -> Result<OwnedFd, ReadError> {
        use rustix::fs::{openat2, Mode, OFlags, ResolveFlags};
        let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
        let swapped = |e: rustix::io::Errno| {
            match e {
            rustix::io::Errno::LOOP | rustix::io::Errno::XDEV => ReadError {
                path: board_path.to_string(),
                kind: ReadErrorKind::OutsideRoot,
                detail: "a directory on its path was replaced by a symbolic link while it was being written".into(),
            },
            e => Self::io_error(board_path, &io::Error::from(e)),
        }
        };
        if let (Some(dirfd), Ok(root)) = (&self.dirfd, self.canonical_root(board_path)) {
            let rel = dir.strip_prefix(&root).unwrap_or(dir);
            let rel = match rel.as_os_str().is_empty() {
                true => Path::new("."),
                false => rel,
            };
            let how = ResolveFlags::IN_ROOT | ResolveFlags::NO_SYMLINKS;
            match openat2(dirfd.as_ref(), rel, flags, Mode::empty(), how) {
                Err(rustix::io::Errno::NOSYS) => {}
                r => return r.map_err(swapped),
            }
        }
        rustix::fs::open(dir, flags | OFlags::NOFOLLOW, Mode::empty()).map_err(swapped)
    }
}
