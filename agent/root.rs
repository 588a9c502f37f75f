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

mod paths;
mod pin;
pub use pin::{PinnedDir, WriteTarget};

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
        self.list_dir_max(board_path, usize::MAX)
            .map(|(names, _)| names)
    }

    /// At most `max` names of a directory (sorted), and whether more were left unread: a
    /// directory an attacker or a runaway app filled (a million container directories) costs
    /// no more than `max` entries.
    pub fn list_dir_max(
        &self,
        board_path: &str,
        max: usize,
    ) -> Result<(Vec<String>, bool), ReadError> {
        let mut names: Vec<String> = if self.dirfd.is_some() {
            let dir = self.open_in_root(board_path, true)?;
            let entries = rustix::fs::Dir::read_from(&dir)
                .map_err(|e| Self::io_error(board_path, &io::Error::from(e)))?;
            entries
                .filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n != "." && n != "..")
                .take(max.saturating_add(1))
                .collect()
        } else {
            let host = self.resolve(board_path)?;
            let rd = fs::read_dir(&host).map_err(|e| Self::io_error(board_path, &e))?;
            rd.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .take(max.saturating_add(1))
                .collect()
        };
        let more = names.len() > max;
        names.truncate(max);
        names.sort();
        self.note(board_path);
        Ok((names, more))
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
mod tests;
