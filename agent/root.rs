//! `SysRoot`: the one place that turns a board path (`/proc/meminfo`) into a host path under
//! `--root DIR`, and reads it with a size cap and a classified error.
//!
//! Every probe reads through this type, so a captured board tree under `DIR` is read exactly as
//! the live system under `/` would be, and no path (a `..` component, or a symlink inside a
//! captured tree) can make a read leave `DIR`.

use std::fmt;
use std::fs;
use std::io::{self, Read, Seek, SeekFrom};
use std::path::{Component, Path, PathBuf};

/// Most bytes read from one file (16 MiB). Larger files are refused with
/// [`ReadErrorKind::TooLarge`]; logs are read from their tail with [`SysRoot::read_tail`].
pub const MAX_FILE_BYTES: u64 = 16 * 1024 * 1024;

/// Why a file under the root could not be read.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ReadErrorKind {
    /// The file (or a directory on its path) does not exist.
    NotFound,
    /// The agent lacks permission (debugfs and `/proc/<pid>/limits` of other users need root).
    PermissionDenied,
    /// The file exists but its content is not what the parser expects.
    Malformed,
    /// The file is bigger than [`MAX_FILE_BYTES`].
    TooLarge,
    /// The path would leave the root (a `..` component or a symlink pointing out of it).
    OutsideRoot,
    /// Any other I/O error.
    Io,
}

/// A failed read or parse of one board file: the board path (as on the board, e.g.
/// `/proc/meminfo`), what went wrong, and a detail sentence.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ReadError {
    /// Path as seen on the board (`/proc/meminfo`), not the host path under `--root`.
    pub path: String,
    /// Class of the failure.
    pub kind: ReadErrorKind,
    /// Human-readable detail (the OS error, or what the parser disliked).
    pub detail: String,
}

impl ReadError {
    /// A `Malformed` error for `path` with `detail`.
    pub fn malformed(path: &str, detail: impl Into<String>) -> Self {
        ReadError {
            path: path.to_string(),
            kind: ReadErrorKind::Malformed,
            detail: detail.into(),
        }
    }

    /// True when the file simply is not there (the usual reason to `skip` a check).
    pub fn is_not_found(&self) -> bool {
        self.kind == ReadErrorKind::NotFound
    }
}

impl fmt::Display for ReadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = match self.kind {
            ReadErrorKind::NotFound => "not found",
            ReadErrorKind::PermissionDenied => "permission denied",
            ReadErrorKind::Malformed => "malformed",
            ReadErrorKind::TooLarge => "too large",
            ReadErrorKind::OutsideRoot => "outside the root",
            ReadErrorKind::Io => "I/O error",
        };
        if self.detail.is_empty() {
            write!(f, "{}: {}", self.path, what)
        } else {
            write!(f, "{}: {} ({})", self.path, what, self.detail)
        }
    }
}

impl std::error::Error for ReadError {}

/// The filesystem root every board path resolves under (`/` on a board, a captured tree in
/// tests). Cheap to clone.
#[derive(Debug, Clone)]
pub struct SysRoot {
    base: PathBuf,
    canonical: Option<PathBuf>,
    /// For a captured tree: the root directory opened `O_PATH`, so reads resolve with
    /// `openat2(RESOLVE_IN_ROOT)` (the kernel confines `..` and symlinks to the tree).
    dirfd: Option<std::sync::Arc<rustix::fd::OwnedFd>>,
    /// Board paths accessed, when recording for `capture`.
    #[allow(clippy::type_complexity)]
    accessed: Option<std::sync::Arc<std::sync::Mutex<std::collections::BTreeMap<String, bool>>>>,
}

impl SysRoot {
    /// A root at `base`. `base` need not exist (every read then reports `NotFound`).
    pub fn new(base: impl Into<PathBuf>) -> Self {
        let base = base.into();
        let canonical = fs::canonicalize(&base).ok();
        let live = canonical.as_deref() == Some(Path::new("/"));
        let dirfd = if live {
            None
        } else {
            use rustix::fs::{open, Mode, OFlags};
            open(
                &base,
                OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC,
                Mode::empty(),
            )
            .ok()
            .map(std::sync::Arc::new)
        };
        SysRoot {
            base,
            canonical,
            dirfd,
            accessed: None,
        }
    }

    /// True when this root is the live system (`/`).
    pub fn is_live(&self) -> bool {
        self.canonical.as_deref() == Some(Path::new("/"))
    }

    /// The root directory as given.
    pub fn base(&self) -> &Path {
        &self.base
    }

    /// Host path for a board path. `board_path` is absolute (`/proc/meminfo`); `..` and
    /// other non-normal components are refused.
    pub fn join(&self, board_path: &str) -> Result<PathBuf, ReadError> {
        let mut out = self.base.clone();
        for comp in Path::new(board_path).components() {
            match comp {
                Component::RootDir | Component::CurDir => {}
                Component::Normal(part) => out.push(part),
                Component::ParentDir | Component::Prefix(_) => {
                    return Err(ReadError {
                        path: board_path.to_string(),
                        kind: ReadErrorKind::OutsideRoot,
                        detail: "path has a '..' component".into(),
                    })
                }
            }
        }
        Ok(out)
    }

    /// Like [`join`](Self::join), and for a non-live root also resolves symlinks and refuses a
    /// target outside the root. A missing file is returned as is (the read reports it).
    fn resolve(&self, board_path: &str) -> Result<PathBuf, ReadError> {
        let host = self.join(board_path)?;
        if self.is_live() {
            return Ok(host);
        }
        if let (Some(root), Ok(real)) = (&self.canonical, fs::canonicalize(&host)) {
            if !real.starts_with(root) {
                return Err(ReadError {
                    path: board_path.to_string(),
                    kind: ReadErrorKind::OutsideRoot,
                    detail: format!("resolves to {}", real.display()),
                });
            }
        }
        Ok(host)
    }

    /// Opens a board path for reading (or, with `dir`, as a directory). Under a captured tree
    /// this is one `openat2(RESOLVE_IN_ROOT)`: an absolute symlink in the tree means the board's
    /// file, and nothing resolves outside the tree. Kernels without openat2 (before 5.6) fall back
    /// to canonicalising the path and refusing one outside the root.
    fn open_in_root(&self, board_path: &str, dir: bool) -> Result<fs::File, ReadError> {
        // A path that exists but cannot be opened is recorded too: `capture` lists it as missing.
        let r = self.open_in_root_inner(board_path, dir);
        if r.as_ref().is_ok() || r.as_ref().is_err_and(|e| !e.is_not_found()) {
            self.note(board_path);
        }
        r
    }

    fn open_in_root_inner(&self, board_path: &str, dir: bool) -> Result<fs::File, ReadError> {
        use rustix::fs::OFlags;
        let host = self.join(board_path)?;
        if let Some(dirfd) = &self.dirfd {
            let rel = board_path.trim_start_matches('/');
            let rel = if rel.is_empty() { "." } else { rel };
            // O_NONBLOCK: opening a FIFO planted in the tree must not wait for a writer.
            let mut flags = OFlags::RDONLY | OFlags::CLOEXEC | OFlags::NONBLOCK;
            if dir {
                flags |= OFlags::DIRECTORY;
            }
            match openat2_in_root(dirfd, rel, flags) {
                Ok(fd) => return Self::refuse_fifo(board_path, fs::File::from(fd)),
                Err(e) if e == rustix::io::Errno::NOSYS => {}
                Err(e) => return Err(Self::io_error(board_path, &io::Error::from(e))),
            }
        }
        let host = if self.is_live() {
            host
        } else {
            self.resolve(board_path)?
        };
        use std::os::unix::fs::OpenOptionsExt;
        let file = fs::OpenOptions::new()
            .read(true)
            .custom_flags(OFlags::NONBLOCK.bits() as i32)
            .open(&host)
            .map_err(|e| Self::io_error(board_path, &e))?;
        Self::refuse_fifo(board_path, file)
    }

    /// A file opened `O_NONBLOCK`: refused when it is a FIFO or a socket (a read would wait
    /// for a writer for ever: a board file is never one), else returned in blocking mode again.
    fn refuse_fifo(board_path: &str, file: fs::File) -> Result<fs::File, ReadError> {
        use std::os::unix::fs::FileTypeExt;
        let kind = file
            .metadata()
            .map_err(|e| Self::io_error(board_path, &e))?
            .file_type();
        if kind.is_fifo() || kind.is_socket() {
            return Err(ReadError {
                path: board_path.to_string(),
                kind: ReadErrorKind::Io,
                detail: "a FIFO or socket, not a file: not read, as that could wait for ever"
                    .into(),
            });
        }
        let flags =
            rustix::fs::fcntl_getfl(&file).map_err(|e| Self::io_error(board_path, &e.into()))?;
        rustix::fs::fcntl_setfl(&file, flags - rustix::fs::OFlags::NONBLOCK)
            .map_err(|e| Self::io_error(board_path, &e.into()))?;
        Ok(file)
    }

    fn io_error(board_path: &str, e: &io::Error) -> ReadError {
        let kind = match e.kind() {
            io::ErrorKind::NotFound => ReadErrorKind::NotFound,
            io::ErrorKind::PermissionDenied => ReadErrorKind::PermissionDenied,
            _ if e.raw_os_error() == Some(20) => ReadErrorKind::NotFound, // ENOTDIR
            _ => ReadErrorKind::Io,
        };
        let detail = match kind {
            ReadErrorKind::NotFound | ReadErrorKind::PermissionDenied => String::new(),
            _ => e.to_string(),
        };
        ReadError {
            path: board_path.to_string(),
            kind,
            detail,
        }
    }

    /// Whole file as bytes, at most [`MAX_FILE_BYTES`].
    pub fn read(&self, board_path: &str) -> Result<Vec<u8>, ReadError> {
        let file = self.open_in_root(board_path, false)?;
        let mut buf = Vec::new();
        // procfs files report size 0, so read up to the cap and one byte more to detect excess.
        file.take(MAX_FILE_BYTES + 1)
            .read_to_end(&mut buf)
            .map_err(|e| Self::io_error(board_path, &e))?;
        if buf.len() as u64 > MAX_FILE_BYTES {
            return Err(ReadError {
                path: board_path.to_string(),
                kind: ReadErrorKind::TooLarge,
                detail: format!("more than {MAX_FILE_BYTES} bytes"),
            });
        }
        Ok(buf)
    }

    /// Whole file as text; invalid UTF-8 is replaced (kernel and vendor logs are not always
    /// clean), so only a read error fails.
    pub fn read_string(&self, board_path: &str) -> Result<String, ReadError> {
        self.read(board_path)
            .map(|b| String::from_utf8_lossy(&b).into_owned())
    }

    /// The first `max_bytes` of a file and the file's length (a GGUF model is hundreds of GB; its
    /// header is at the start).
    pub fn read_head(&self, board_path: &str, max_bytes: u64) -> Result<(Vec<u8>, u64), ReadError> {
        let file = self.open_in_root(board_path, false)?;
        let len = file
            .metadata()
            .map_err(|e| Self::io_error(board_path, &e))?
            .len();
        let mut buf = Vec::new();
        file.take(max_bytes)
            .read_to_end(&mut buf)
            .map_err(|e| Self::io_error(board_path, &e))?;
        Ok((buf, len))
    }

    /// The last `max_bytes` of a file as text (logs grow without bound), starting at a line
    /// boundary when the file was cut.
    pub fn read_tail(&self, board_path: &str, max_bytes: u64) -> Result<String, ReadError> {
        let mut file = self.open_in_root(board_path, false)?;
        let len = file
            .metadata()
            .map_err(|e| Self::io_error(board_path, &e))?
            .len();
        let cut = len > max_bytes;
        if cut {
            file.seek(SeekFrom::Start(len - max_bytes))
                .map_err(|e| Self::io_error(board_path, &e))?;
        }
        let mut buf = Vec::new();
        file.take(max_bytes)
            .read_to_end(&mut buf)
            .map_err(|e| Self::io_error(board_path, &e))?;
        let mut text = String::from_utf8_lossy(&buf).into_owned();
        if cut {
            if let Some(nl) = text.find('\n') {
                text.drain(..=nl);
            }
        }
        Ok(text)
    }

    /// Inode number and length in bytes of a board file (a log's identity for incremental reads).
    pub fn inode_len(&self, board_path: &str) -> Result<(u64, u64), ReadError> {
        use std::os::unix::fs::MetadataExt;
        let m = self
            .open_in_root(board_path, false)?
            .metadata()
            .map_err(|e| Self::io_error(board_path, &e))?;
        Ok((m.ino(), m.len()))
    }

    /// At most `max_bytes` of a board file from byte `start`.
    pub fn read_range(
        &self,
        board_path: &str,
        start: u64,
        max_bytes: u64,
    ) -> Result<Vec<u8>, ReadError> {
        let mut file = self.open_in_root(board_path, false)?;
        self.note(board_path);
        file.seek(SeekFrom::Start(start))
            .map_err(|e| Self::io_error(board_path, &e))?;
        let mut buf = Vec::new();
        file.take(max_bytes)
            .read_to_end(&mut buf)
            .map_err(|e| Self::io_error(board_path, &e))?;
        Ok(buf)
    }

    /// Starts recording every board path this root (and its clones) reads, lists or finds
    /// existing; [`accessed`](Self::accessed) returns them. `capture` copies exactly those.
    pub fn record_access(&mut self) {
        self.accessed = Some(std::sync::Arc::new(std::sync::Mutex::new(
            std::collections::BTreeMap::new(),
        )));
    }

    /// Board paths accessed so far, sorted, each with `true` when it was read as a link
    /// ([`link_basename`](Self::link_basename)); empty unless
    /// [`record_access`](Self::record_access) was called.
    pub fn accessed(&self) -> Vec<(String, bool)> {
        self.accessed
            .as_ref()
            .and_then(|a| {
                a.lock()
                    .ok()
                    .map(|s| s.iter().map(|(k, v)| (k.clone(), *v)).collect())
            })
            .unwrap_or_default()
    }

    fn note(&self, board_path: &str) {
        self.note_as(board_path, false);
    }

    fn note_as(&self, board_path: &str, link: bool) {
        if let Some(a) = &self.accessed {
            if let Ok(mut s) = a.lock() {
                let e = s.entry(board_path.to_string()).or_insert(link);
                *e |= link;
            }
        }
    }

    /// Size in bytes of a board file, `None` when it cannot be opened.
    pub fn file_len(&self, board_path: &str) -> Option<u64> {
        self.open_in_root(board_path, false)
            .ok()
            .and_then(|f| f.metadata().ok())
            .map(|m| m.len())
    }

    /// Names in a directory, sorted. A missing directory is `NotFound`.
    pub fn list_dir(&self, board_path: &str) -> Result<Vec<String>, ReadError> {
        let mut names: Vec<String> = if self.dirfd.is_some() {
            let dir = self.open_in_root(board_path, true)?;
            let entries = rustix::fs::Dir::read_from(&dir)
                .map_err(|e| Self::io_error(board_path, &io::Error::from(e)))?;
            entries
                .filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n != "." && n != "..")
                .collect()
        } else {
            let host = self.resolve(board_path)?;
            let rd = fs::read_dir(&host).map_err(|e| Self::io_error(board_path, &e))?;
            rd.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect()
        };
        names.sort();
        self.note(board_path);
        Ok(names)
    }

    /// True when the board path exists (file, directory or symlink, even a dangling one).
    pub fn exists(&self, board_path: &str) -> bool {
        let found = self
            .join(board_path)
            .map(|p| fs::symlink_metadata(p).is_ok())
            .unwrap_or(false);
        if found {
            self.note(board_path);
        }
        found
    }

    /// True when the board path is a directory.
    pub fn is_dir(&self, board_path: &str) -> bool {
        // The live fallback opens without O_DIRECTORY: ask the opened file what it is.
        self.open_in_root(board_path, true)
            .and_then(|f| f.metadata().map_err(|e| Self::io_error(board_path, &e)))
            .is_ok_and(|m| m.is_dir())
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
    fn canonical_root(&self, board_path: &str) -> Result<PathBuf, ReadError> {
        match &self.canonical {
            Some(c) => Ok(c.clone()),
            None => fs::canonicalize(&self.base).map_err(|e| Self::io_error(board_path, &e)),
        }
    }

    /// Refuses a host path (already canonical) that is not inside the root.
    fn inside_root(&self, board_path: &str, real: &Path) -> Result<(), ReadError> {
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
    fn resolve_in_root(&self, board_path: &str, follow_last: bool) -> Result<PathBuf, ReadError> {
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
    fn real_parent<'h>(
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

/// `openat2(dirfd, rel, flags, RESOLVE_IN_ROOT)`, tried again when the kernel answers `EAGAIN`:
/// it does so when a rename or mount anywhere in the system raced the resolution of a `..`
/// (openat2(2)), which is no fault of the path. Gives up after 64 tries with `EAGAIN`.
fn openat2_in_root(
    dirfd: &std::os::fd::OwnedFd,
    rel: &str,
    flags: rustix::fs::OFlags,
) -> rustix::io::Result<std::os::fd::OwnedFd> {
    use rustix::fs::{openat2, Mode, ResolveFlags};
    let mut tries = 0;
    loop {
        match openat2(dirfd, rel, flags, Mode::empty(), ResolveFlags::IN_ROOT) {
            Err(rustix::io::Errno::AGAIN) if tries < 63 => tries += 1,
            r => return r,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn join_refuses_parent_components() {
        let root = SysRoot::new("/tmp/x");
        assert_eq!(
            root.join("/proc/meminfo").unwrap(),
            PathBuf::from("/tmp/x/proc/meminfo")
        );
        let err = root.join("/proc/../../etc/shadow").unwrap_err();
        assert_eq!(err.kind, ReadErrorKind::OutsideRoot);
    }

    #[test]
    fn symlinks_stay_inside_a_captured_tree() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("proc")).unwrap();
        std::fs::create_dir_all(dir.path().join("etc")).unwrap();
        std::fs::write(dir.path().join("etc/hostname"), "board\n").unwrap();
        // An absolute link means the board's own /etc/hostname, never the host's.
        std::os::unix::fs::symlink("/etc/hostname", dir.path().join("proc/meminfo")).unwrap();
        // A relative link climbing past the root is clamped to the root.
        std::os::unix::fs::symlink(
            "../../../../../../etc/hostname",
            dir.path().join("proc/cmdline"),
        )
        .unwrap();
        std::os::unix::fs::symlink("/etc/shadow", dir.path().join("proc/vmstat")).unwrap();
        let root = SysRoot::new(dir.path());
        assert_eq!(root.read_string("/proc/meminfo").unwrap(), "board\n");
        assert_eq!(root.read_string("/proc/cmdline").unwrap(), "board\n");
        assert!(root.read("/proc/vmstat").unwrap_err().is_not_found());
        assert_eq!(root.list_dir("/etc").unwrap(), vec!["hostname"]);
        assert!(root.is_dir("/etc") && !root.is_dir("/etc/hostname"));
    }

    /// A kernel knob is written in the tree or not at all: a symlinked knob is refused (not
    /// followed out), and a directory link swapped between inside and outside while writes run
    /// never lets one land outside (the open resolves in the root itself, no check-then-open).
    #[test]
    fn knob_writes_never_follow_a_link_out_of_the_root() {
        let dir = tempfile::tempdir().unwrap();
        let tree = dir.path().join("board");
        let outside = dir.path().join("outside");
        std::fs::create_dir_all(tree.join("proc/sys")).unwrap();
        std::fs::create_dir_all(tree.join("real_vm")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("compact_memory"), "untouched").unwrap();
        std::fs::write(tree.join("real_vm/compact_memory"), "").unwrap();
        std::fs::create_dir_all(tree.join("proc/sys/vm")).unwrap();
        let root = SysRoot::new(&tree);
        // The knob itself a link: absolute, relative, or to a file inside the tree.
        for target in [
            outside.join("compact_memory"),
            PathBuf::from("../../../../outside/compact_memory"),
            PathBuf::from("/real_vm/compact_memory"),
        ] {
            let knob = tree.join("proc/sys/vm/compact_memory");
            let _ = std::fs::remove_file(&knob);
            std::os::unix::fs::symlink(&target, &knob).unwrap();
            let e = root
                .write_existing("/proc/sys/vm/compact_memory", b"1\n")
                .unwrap_err();
            assert_eq!(e.kind, ReadErrorKind::OutsideRoot, "{target:?}: {e}");
            assert!(e.to_string().contains("symbolic link"), "{e}");
        }
        assert_eq!(
            std::fs::read_to_string(outside.join("compact_memory")).unwrap(),
            "untouched"
        );
        assert_eq!(
            std::fs::read_to_string(tree.join("real_vm/compact_memory")).unwrap(),
            ""
        );
        // A directory on the path swapped between a link inside and one outside.
        std::fs::remove_dir_all(tree.join("proc/sys/vm")).unwrap();
        let vm = tree.join("proc/sys/vm");
        std::os::unix::fs::symlink("../../real_vm", &vm).unwrap();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let flipper = {
            let (stop, vm, outside) = (stop.clone(), vm.clone(), outside.clone());
            std::thread::spawn(move || {
                let tmp = vm.with_file_name("vm.flip");
                let mut n = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let target = if n % 2 == 0 {
                        outside.clone()
                    } else {
                        PathBuf::from("../../real_vm")
                    };
                    let _ = std::fs::remove_file(&tmp);
                    std::os::unix::fs::symlink(&target, &tmp).unwrap();
                    std::fs::rename(&tmp, &vm).unwrap();
                    n += 1;
                }
            })
        };
        let mut written = 0;
        for _ in 0..3000 {
            if root
                .write_existing("/proc/sys/vm/compact_memory", b"1\n")
                .is_ok()
            {
                written += 1;
            }
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        flipper.join().unwrap();
        assert_eq!(
            std::fs::read_to_string(outside.join("compact_memory")).unwrap(),
            "untouched",
            "a write left the root"
        );
        assert!(written > 0, "writes inside the tree still work");
        assert_eq!(
            std::fs::read_to_string(tree.join("real_vm/compact_memory")).unwrap(),
            "1\n"
        );
    }

    #[test]
    fn missing_file_is_not_found_with_board_path() {
        let dir = tempfile::tempdir().unwrap();
        let root = SysRoot::new(dir.path());
        let err = root.read("/proc/meminfo").unwrap_err();
        assert!(err.is_not_found());
        assert_eq!(err.to_string(), "/proc/meminfo: not found");
    }

    #[test]
    fn link_basename_accepts_symlink_and_plain_file() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join("sys/bus/pci/devices/0001:01:00.0");
        std::fs::create_dir_all(&d).unwrap();
        std::os::unix::fs::symlink("../../../bus/pci/drivers/hailo1x", d.join("driver")).unwrap();
        std::fs::write(d.join("plain"), "../../drivers/hailo\n").unwrap();
        let root = SysRoot::new(dir.path());
        assert_eq!(
            root.link_basename("/sys/bus/pci/devices/0001:01:00.0/driver")
                .unwrap(),
            "hailo1x"
        );
        assert_eq!(
            root.link_basename("/sys/bus/pci/devices/0001:01:00.0/plain")
                .unwrap(),
            "hailo"
        );
    }

    #[test]
    fn tail_starts_at_a_line_boundary() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("var/log")).unwrap();
        std::fs::write(dir.path().join("var/log/kern.log"), "aaaa\nbbbb\ncccc\n").unwrap();
        let root = SysRoot::new(dir.path());
        assert_eq!(root.read_tail("/var/log/kern.log", 8).unwrap(), "cccc\n");
        assert_eq!(
            root.read_tail("/var/log/kern.log", 100).unwrap(),
            "aaaa\nbbbb\ncccc\n"
        );
    }
}
