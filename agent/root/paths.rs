//! Symlink resolution and the write-side paths of a [`SysRoot`], confined to the root.

use super::*;

impl SysRoot {
    /// The target of a link as written (`/dev/hailo0`, `socket:[4711]`), or the text of a plain
    /// file standing for one in a captured tree, when `keep` accepts it; only a kept link is
    /// recorded for a capture (a process's other open files are none of the bundle's business).
    /// The link is never followed.
    pub fn link_target_if(
        &self,
        board_path: &str,
        keep: impl Fn(&str) -> bool,
    ) -> Result<Option<String>, ReadError> {
        let host = self.join(board_path)?;
        let target = match fs::read_link(&host) {
            Ok(t) => t.to_string_lossy().into_owned(),
            Err(e) if e.kind() == io::ErrorKind::InvalidInput => {
                self.read_string(board_path)?.trim().to_string()
            }
            Err(e) => return Err(Self::io_error(board_path, &e)),
        };
        if !keep(&target) {
            return Ok(None);
        }
        self.note_as(board_path, true);
        Ok(Some(target))
    }

    /// The basename a sysfs link points to (`driver` -> `hailo1x`). Captured trees may store the
    /// link target as the content of a plain file instead of a symlink; both are accepted. The
    /// link is never followed.
    pub fn link_basename(&self, board_path: &str) -> Result<String, ReadError> {
        let host = self.join(board_path)?;
        let target = match fs::read_link(&host) {
            Ok(t) => {
                self.note_as(board_path, true);
                t.to_string_lossy().into_owned()
            }
            Err(e) if e.kind() == io::ErrorKind::InvalidInput => {
                // A regular file: its text is the link target.
                self.read_string(board_path)?.trim().to_string()
            }
            Err(e) => return Err(Self::io_error(board_path, &e)),
        };
        let base = target
            .trim_end_matches('/')
            .rsplit('/')
            .next()
            .unwrap_or("")
            .to_string();
        if base.is_empty() || base == ".." || base == "." {
            return Err(ReadError::malformed(
                board_path,
                format!("link target {target:?}"),
            ));
        }
        Ok(base)
    }

    /// The canonical root directory, computed now when it did not exist at construction.
    pub(super) fn canonical_root(&self, board_path: &str) -> Result<PathBuf, ReadError> {
        match &self.canonical {
            Some(c) => Ok(c.clone()),
            None => fs::canonicalize(&self.base).map_err(|e| Self::io_error(board_path, &e)),
        }
    }

    /// Refuses a host path (already canonical) that is not inside the root.
    pub(super) fn inside_root(&self, board_path: &str, real: &Path) -> Result<(), ReadError> {
        let root = self.canonical_root(board_path)?;
        if real.starts_with(&root) {
            Ok(())
        } else {
            Err(ReadError {
                path: board_path.to_string(),
                kind: ReadErrorKind::OutsideRoot,
                detail: format!("resolves to {}", real.display()),
            })
        }
    }

    /// Resolves `board_path` inside a captured tree the way the kernel's `RESOLVE_IN_ROOT` does:
    /// every symlink is followed with the tree as `/` (an absolute link means the board's file),
    /// `..` stops at the root, at most 40 links. With `follow_last = false` a symlink in the last
    /// component is kept as it is (to replace or remove the link itself). Missing components are
    /// taken as they are. Returns a host path that is inside the tree by construction.
    pub(super) fn resolve_in_root(
        &self,
        board_path: &str,
        follow_last: bool,
    ) -> Result<PathBuf, ReadError> {
        self.join(board_path)?; // refuses '..' in the path as given
        let root = self.canonical_root(board_path)?;
        let split = |p: &str| -> Vec<String> {
            p.split('/')
                .filter(|c| !c.is_empty() && *c != ".")
                .map(str::to_string)
                .rev()
                .collect()
        };
        let mut todo = split(board_path);
        let mut cur: Vec<String> = Vec::new();
        let mut links = 0;
        while let Some(name) = todo.pop() {
            if name == ".." {
                cur.pop();
                continue;
            }
            let host: PathBuf = root.join(cur.iter().collect::<PathBuf>()).join(&name);
            let last = todo.is_empty();
            match fs::symlink_metadata(&host) {
                Ok(m) if m.file_type().is_symlink() && (follow_last || !last) => {
                    links += 1;
                    if links > 40 {
                        return Err(ReadError {
                            path: board_path.to_string(),
                            kind: ReadErrorKind::Io,
                            detail: "too many levels of symbolic links".into(),
                        });
                    }
                    let target =
                        fs::read_link(&host).map_err(|e| Self::io_error(board_path, &e))?;
                    let target = target.to_string_lossy();
                    if target.starts_with('/') {
                        cur.clear();
                    }
                    todo.extend(split(&target));
                }
                _ => cur.push(name),
            }
        }
        Ok(root.join(cur.iter().collect::<PathBuf>()))
    }

    /// Host path to write the board path `board_path` to (an atomic replace renames a temp file
    /// onto it). Symlinks are followed inside the root (an absolute link in a captured tree means
    /// the board's file, as for reads), so the rename replaces the link's target, never a file
    /// outside the root. Reads nothing and writes nothing.
    ///
    /// Errors: `OutsideRoot` for a `..` component (or, on the live system, a path that resolves
    /// outside the root); `NotFound` when the directory is missing.
    pub fn write_path(&self, board_path: &str) -> Result<PathBuf, ReadError> {
        if !self.is_live() {
            let real = self.resolve_in_root(board_path, true)?;
            let parent = real.parent().unwrap_or(Path::new("/"));
            if !parent.is_dir() {
                return Err(Self::io_error(
                    board_path,
                    &io::Error::from(io::ErrorKind::NotFound),
                ));
            }
            return Ok(real);
        }
        let host = self.join(board_path)?;
        if fs::symlink_metadata(&host).is_ok() {
            let real = fs::canonicalize(&host).map_err(|e| Self::io_error(board_path, &e))?;
            self.inside_root(board_path, &real)?;
            return Ok(real);
        }
        let (real_parent, name) = Self::real_parent(board_path, &host)?;
        self.inside_root(board_path, &real_parent)?;
        Ok(real_parent.join(name))
    }

    /// `host`'s directory with its symlinks resolved (on the host), and its last component.
    ///
    /// Errors: `OutsideRoot` when `host` has no file name; the directory's I/O error (`NotFound`
    /// when it is missing).
    pub(super) fn real_parent<'h>(
        board_path: &str,
        host: &'h Path,
    ) -> Result<(PathBuf, &'h std::ffi::OsStr), ReadError> {
        let (Some(parent), Some(name)) = (host.parent(), host.file_name()) else {
            return Err(ReadError {
                path: board_path.to_string(),
                kind: ReadErrorKind::OutsideRoot,
                detail: "no file name".into(),
            });
        };
        let real_parent = fs::canonicalize(parent).map_err(|e| Self::io_error(board_path, &e))?;
        Ok((real_parent, name))
    }

    /// Host path of the directory entry `board_path` itself: the directories are resolved in
    /// the root, a symlink in the last component is not followed. For removing a file (a
    /// symlinked provisioning file goes, its target stays).
    ///
    /// Errors: as [`write_path`](Self::write_path).
    pub fn entry_path(&self, board_path: &str) -> Result<PathBuf, ReadError> {
        if !self.is_live() {
            return self.resolve_in_root(board_path, false);
        }
        let host = self.join(board_path)?;
        let (real_parent, name) = Self::real_parent(board_path, &host)?;
        Ok(real_parent.join(name))
    }

    /// Creates the directory `board_path` (e.g. the state directory `/var/lib/npu-agent`) and
    /// its missing parents under the root, mode 0755 subject to the umask, and returns its host
    /// path. An existing directory is fine.
    ///
    /// Errors: `OutsideRoot` when the nearest existing ancestor (or the result) resolves outside
    /// the root; `PermissionDenied` / `Io` from the filesystem.
    pub fn create_dir_all(&self, board_path: &str) -> Result<PathBuf, ReadError> {
        if !self.is_live() {
            let real = self.resolve_in_root(board_path, true)?;
            fs::create_dir_all(&real).map_err(|e| Self::io_error(board_path, &e))?;
            return Ok(real);
        }
        let host = self.join(board_path)?;
        let mut existing = host.as_path();
        while fs::symlink_metadata(existing).is_err() {
            match existing.parent() {
                Some(p) => existing = p,
                None => break,
            }
        }
        let real = fs::canonicalize(existing).map_err(|e| Self::io_error(board_path, &e))?;
        self.inside_root(board_path, &real)?;
        fs::create_dir_all(&host).map_err(|e| Self::io_error(board_path, &e))?;
        let real = fs::canonicalize(&host).map_err(|e| Self::io_error(board_path, &e))?;
        self.inside_root(board_path, &real)?;
        Ok(real)
    }

    /// Writes `bytes` to an existing file under the root, opened write-only with truncation and
    /// never created: the kernel knobs `/proc/sys/vm/compact_memory` and
    /// `/proc/sys/vm/drop_caches` (in a captured tree, plain files). The open resolves in the
    /// root as reads do (one `openat2(RESOLVE_IN_ROOT)`: a link in a directory on the path
    /// stays in the tree, at the moment of the open, not at an earlier check), and the file
    /// itself is never a symlink (`O_NOFOLLOW`): a knob is written as itself or not at all.
    ///
    /// Errors: `NotFound` when the file is missing (for `compact_memory`: no
    /// `CONFIG_COMPACTION`), `PermissionDenied` without the right (root), `OutsideRoot` for an
    /// escaping path or a symlink (the detail says which), `Io` for anything else (the detail
    /// names the OS error).
    pub fn write_existing(&self, board_path: &str, bytes: &[u8]) -> Result<(), ReadError> {
        use rustix::fs::OFlags;
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        let link_refused = |e: io::Error| {
            if e.raw_os_error() == Some(rustix::io::Errno::LOOP.raw_os_error()) {
                ReadError {
                    path: board_path.to_string(),
                    kind: ReadErrorKind::OutsideRoot,
                    detail: "it is a symbolic link; a kernel knob is written only as the file \
                             itself, never through a link"
                        .into(),
                }
            } else {
                Self::io_error(board_path, &e)
            }
        };
        // O_NONBLOCK: a FIFO planted as a knob fails the open (no reader) instead of waiting.
        let flags =
            OFlags::WRONLY | OFlags::TRUNC | OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK;
        let mut opened = None;
        if let Some(dirfd) = &self.dirfd {
            let rel = board_path.trim_start_matches('/');
            // `..` is refused before the kernel sees the path, as for every board path.
            self.join(board_path)?;
            match openat2_in_root(dirfd, rel, flags) {
                Ok(fd) => opened = Some(fs::File::from(fd)),
                Err(e) if e == rustix::io::Errno::NOSYS => {}
                Err(e) => return Err(link_refused(io::Error::from(e))),
            }
        }
        let mut file = match opened {
            Some(f) => f,
            None => {
                // The live system, or a kernel without openat2 (before 5.6).
                let host = self.resolve(board_path)?;
                fs::OpenOptions::new()
                    .write(true)
                    .truncate(true)
                    .custom_flags((OFlags::NOFOLLOW | OFlags::NONBLOCK).bits() as i32)
                    .open(&host)
                    .map_err(link_refused)?
            }
        };
        file.write_all(bytes)
            .map_err(|e| Self::io_error(board_path, &e))
    }
}
