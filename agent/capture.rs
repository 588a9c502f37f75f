//! `npu-agent capture`: the support bundle a user attaches to a bug report.
//!
//! One diagnosis runs on a [`SysRoot`] that records every board path the probes read, list or
//! find existing; the bundle (a `.tar.gz` in the layout of a captured board tree) holds exactly
//! those files, plus, under [`CAPTURE_DIR`]: the kernel messages and the workloads' journal lines
//! the checks saw (`kernel.log`, `workload-journal.log`, only when they came from `/dev/kmsg` or
//! the journal; log files are copied as they are), the page size, `uname`, `chronyc-tracking`
//! (`chronyc -n tracking` on a live board running chronyd), and `manifest.json`
//! (every file with its size, what could not be read and why, the log sources, and the verdict of
//! every check). `npu-agent check --root` on the unpacked bundle gives the same verdicts.
//!
//! Redacted by default: host name, user names (also in paths), the device-tree serial number and
//! `machine-id`, MAC and IP addresses (loopback kept), credentials in URLs, and the values of
//! token/password/key options in command lines and `key=value` text, in a file of any encoding
//! (`encoding`: UTF-16 decoded, other non-UTF-8 text redacted in its ASCII runs). Links the checks read are
//! stored as plain files holding the link target (the tree format accepts both).
//!
//! Bad input never aborts the bundle: an unreadable file is listed in the manifest's `missing`;
//! the archive is written to a temporary file next to `--out` and renamed only when complete.

use crate::diagnose::{self, ProfileChoice};
use crate::probe::evidence::{
    CAPTURE_KERNEL_LOG, CAPTURE_PAGE_SIZE, CAPTURE_WORKLOAD_LOG, JOURNAL_KERNEL, JOURNAL_WORKLOAD,
    KMSG,
};
use crate::root::{ReadErrorKind, SysRoot};
use regex_lite::Regex;
use serde::Serialize;
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};

mod archive;
mod containers;
mod encoding;
pub use archive::write_file;
use archive::*;

mod redact;
pub use redact::*;

/// The manifest's board path in the bundle.
pub const MANIFEST: &str = "/npu-agent-capture/manifest.json";
/// `uname`-like line: kernel name, release, version, machine (host name left out).
pub const UNAME: &str = "/npu-agent-capture/uname";
/// Most names kept per listed directory.
pub const MAX_NAMES_PER_DIR: usize = 20_000;
/// Largest file copied whole; a longer log is cut to its tail (what the checks read anyway).
pub const MAX_COPY_BYTES: u64 = crate::root::MAX_FILE_BYTES;

/// Why a bundle could not be written.
#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    /// The output file could not be created, written or renamed into place.
    #[error("cannot write {path}: {detail}")]
    Write {
        /// The file.
        path: String,
        /// The I/O error.
        detail: String,
    },
    /// `--profile` named a profile that does not exist or a file that is not one: the user's
    /// mistake, so nothing is written (a board whose own files break detection still gets a
    /// partial bundle).
    #[error("{0}")]
    Profile(diagnose::DiagnoseError),
}

/// One file in the bundle.
#[derive(Debug, Clone, Serialize)]
pub struct ManifestFile {
    /// Board path (after redaction).
    pub path: String,
    /// `file`, `dir` or `link` (a link target stored as text).
    pub kind: &'static str,
    /// Bytes stored.
    pub bytes: u64,
    /// `tail` when only the end of a long file was kept.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub note: String,
}

/// A path the checks read that is not in the bundle.
#[derive(Debug, Clone, Serialize)]
pub struct ManifestMissing {
    /// Board path.
    pub path: String,
    /// Why.
    pub reason: String,
}

/// `manifest.json`.
#[derive(Debug, Clone, Serialize)]
pub struct Manifest {
    /// Format version.
    pub schema: u32,
    /// The agent that wrote it.
    pub agent_version: String,
    /// When (RFC 3339 UTC).
    pub time: String,
    /// `live` or `tree` (captured from another tree).
    pub captured_from: &'static str,
    /// True unless `--no-redact`.
    pub redacted: bool,
    /// Profile the diagnosis used, or the error that stopped it.
    pub profile: String,
    /// Page size in bytes, and where it came from.
    pub page_size_bytes: u64,
    /// `kernel`, the tree's record, or the fallback.
    pub page_size_source: String,
    /// The log sources and what happened to each.
    pub log_sources: Vec<crate::probe::evidence::LogSource>,
    /// Every check's verdict at capture time (the most severe per id).
    pub verdicts: BTreeMap<String, String>,
    /// Files in the bundle.
    pub files: Vec<ManifestFile>,
    /// Paths the checks read that could not be stored.
    pub missing: Vec<ManifestMissing>,
}

/// What `capture` did.
#[derive(Debug, Clone)]
pub struct CaptureSummary {
    /// The manifest written into the bundle.
    pub manifest: Manifest,
    /// Bytes of the `.tar.gz`.
    pub archive_bytes: u64,
}

/// Entries being built, in memory (bounded: at most [`MAX_COPY_BYTES`] per file).
struct Bundle {
    entries: BTreeMap<String, Entry>,
}

enum Entry {
    Dir,
    File(Vec<u8>, &'static str, String),
}

impl Bundle {
    fn file(&mut self, path: String, bytes: Vec<u8>, kind: &'static str, note: &str) {
        self.entries
            .insert(path, Entry::File(bytes, kind, note.to_string()));
    }
}

/// Captures the board under `root` into `out` (a `.tar.gz`). `redact = false` keeps every
/// byte as read; `replace = false` never replaces a file at `out`.
///
/// Errors: [`CaptureError::Write`] when the archive cannot be written (a full disk, a read-only
/// directory, `out` exists without `replace`); nothing is left at `out` then.
pub fn capture(
    root: &SysRoot,
    choice: &ProfileChoice,
    out: &Path,
    redact: bool,
    replace: bool,
) -> Result<CaptureSummary, CaptureError> {
    let (bytes, manifest) = bundle(root, choice, redact)?;
    write_file(out, &bytes, replace)?;
    Ok(CaptureSummary {
        manifest,
        archive_bytes: bytes.len() as u64,
    })
}

/// The support bundle of the board under `root`, as `.tar.gz` bytes, with its manifest (what
/// [`capture`] writes, and what the fleet's `capture` command publishes).
///
/// Errors: [`CaptureError::Profile`] for a named profile that does not exist;
/// [`CaptureError::Write`] if the archive cannot be made.
pub fn bundle(
    root: &SysRoot,
    choice: &ProfileChoice,
    redact: bool,
) -> Result<(Vec<u8>, Manifest), CaptureError> {
    let mut rec = root.clone();
    rec.record_access();
    let diag = match (diagnose::diagnose(&rec, choice), choice) {
        (Err(e), ProfileChoice::Id(_) | ProfileChoice::File(_)) => {
            return Err(CaptureError::Profile(e))
        }
        (diag, _) => diag,
    };
    let accessed = rec.accessed();
    let red = Redactor::new(root, redact);
    let mut bundle = Bundle {
        entries: BTreeMap::new(),
    };
    let mut missing = Vec::new();
    let generated = [
        MANIFEST,
        UNAME,
        CAPTURE_PAGE_SIZE,
        CAPTURE_KERNEL_LOG,
        CAPTURE_WORKLOAD_LOG,
    ];
    for (path, link) in &accessed {
        // Generated files are written afresh below (the kernel log from the lines the checks
        // saw); the journal's own files are written as text, not copied.
        if generated.contains(&path.as_str())
            || path == "/"
            || path.is_empty()
            || path == "/var/log/journal"
            || path.starts_with("/var/log/journal/")
        {
            continue;
        }
        copy_one(root, &red, path, *link, &mut bundle, &mut missing);
    }
    add_listed_names(root, &red, &accessed, &mut bundle);
    let mut manifest = Manifest {
        schema: 1,
        agent_version: env!("CARGO_PKG_VERSION").to_string(),
        time: crate::sys::time::rfc3339_now(),
        captured_from: if root.is_live() { "live" } else { "tree" },
        redacted: redact,
        profile: String::new(),
        page_size_bytes: 0,
        page_size_source: String::new(),
        log_sources: Vec::new(),
        verdicts: BTreeMap::new(),
        files: Vec::new(),
        missing: Vec::new(),
    };
    match &diag {
        Ok(d) => add_diagnosis(root, &red, d, &mut manifest, &mut bundle),
        Err(e) => {
            manifest.profile = format!("diagnosis failed: {e}");
            missing.push(ManifestMissing {
                path: "(diagnosis)".into(),
                reason: e.to_string(),
            });
        }
    }
    let uname = uname_line(root);
    bundle.file(
        UNAME.into(),
        format!("{}\n", red.text(&uname)).into_bytes(),
        "file",
        "",
    );
    for (p, e) in &bundle.entries {
        manifest.files.push(match e {
            Entry::Dir => ManifestFile {
                path: p.clone(),
                kind: "dir",
                bytes: 0,
                note: String::new(),
            },
            Entry::File(b, kind, note) => ManifestFile {
                path: p.clone(),
                kind,
                bytes: b.len() as u64,
                note: note.clone(),
            },
        });
    }
    manifest.missing = missing;
    let mut json = serde_json::to_vec_pretty(&manifest).unwrap_or_default();
    json.push(b'\n');
    bundle.file(MANIFEST.into(), json, "file", "");
    let bytes = archive(&bundle).map_err(|e| CaptureError::Write {
        path: "(the archive in memory)".into(),
        detail: e.to_string(),
    })?;
    Ok((bytes, manifest))
}

/// Stores each name in a listed directory that the checks did not open, as an empty file or
/// directory: a listed directory's names matter (firmware files, libraries, process ids).
fn add_listed_names(
    root: &SysRoot,
    red: &Redactor,
    accessed: &[(String, bool)],
    bundle: &mut Bundle,
) {
    for (path, link) in accessed {
        if *link || !root.is_dir(path) || path.starts_with("/var/log/journal") {
            continue;
        }
        let Ok((names, _)) = root.list_dir_max(path, MAX_NAMES_PER_DIR) else {
            continue;
        };
        for n in names.iter() {
            let child = if path == "/" {
                format!("/{n}")
            } else {
                format!("{path}/{n}")
            };
            let dst = red.path(&child);
            if bundle.entries.contains_key(&dst) || accessed.iter().any(|(p, _)| *p == child) {
                continue;
            }
            // A link that leads nowhere in the tree (one to the host's /etc/shadow, say) is not
            // stood for by an empty file: a check would read that as an empty log of the board's.
            let link = dangling_in_tree(root, &child);
            let e = if root.is_dir(&child) {
                Entry::Dir
            } else if link {
                continue;
            } else {
                Entry::File(Vec::new(), "file", "name only".into())
            };
            bundle.entries.insert(dst, e);
        }
    }
}

/// True when `board_path` is a link to an absolute path that is not in the tree (a log linked to
/// `/etc/shadow`, say). A relative link that leads nowhere in the tree (`/dev/rknpu` ->
/// `dri/renderD129` in a tree without that node) still stands for a name the checks look for.
fn dangling_in_tree(root: &SysRoot, board_path: &str) -> bool {
    let Ok(host) = root.join(board_path) else {
        return false;
    };
    match std::fs::read_link(&host) {
        Ok(target) if target.is_absolute() => target
            .to_str()
            .and_then(|t| root.join(t).ok())
            .is_none_or(|p| p.symlink_metadata().is_err()),
        _ => false,
    }
}

/// Fills the manifest from a diagnosis and stores the files made from it: the page size,
/// chronyd's tracking (live boards) and the kernel and workload log lines the checks saw.
fn add_diagnosis(
    root: &SysRoot,
    red: &Redactor,
    d: &diagnose::Diagnosis,
    manifest: &mut Manifest,
    bundle: &mut Bundle,
) {
    manifest.profile = d.profile.id.clone();
    let snap = &d.snapshot;
    manifest.page_size_bytes = snap.page_size.bytes;
    manifest.page_size_source = snap.page_size.source.clone();
    manifest.log_sources = snap.log_sources.clone();
    manifest.verdicts = std::collections::BTreeMap::from_iter(
        crate::check::worst_by_id(&d.report.findings)
            .into_iter()
            .map(|(k, v)| (k, v.as_str().to_string())),
    );
    bundle.file(
        CAPTURE_PAGE_SIZE.to_string(),
        format!("{}\n", snap.page_size.bytes).into_bytes(),
        "file",
        "",
    );
    // chronyd's own verdict on the clock (a live board running chrony): the captured
    // tree's `clock.sync` is judged from it.
    if root.is_live() && root.is_dir(crate::probe::clock::CHRONY_DIR) {
        if let Ok(text) = crate::probe::clock::live_chronyc_tracking() {
            let text: String = text.lines().map(|l| red.text(l) + "\n").collect();
            bundle.file(
                crate::probe::clock::CAPTURE_CHRONYC_TRACKING.into(),
                text.into_bytes(),
                "file",
                "",
            );
        }
    }
    // Kernel messages and workload journal lines the checks saw, as text files.
    let mut kernel = String::new();
    let mut workload = String::new();
    for l in &snap.logs {
        let dst = match l.path.as_str() {
            KMSG | JOURNAL_KERNEL => &mut kernel,
            JOURNAL_WORKLOAD => &mut workload,
            CAPTURE_KERNEL_LOG => &mut kernel,
            CAPTURE_WORKLOAD_LOG => &mut workload,
            _ => continue,
        };
        for line in &l.lines {
            dst.push_str(&red.text(line));
            dst.push('\n');
        }
    }
    let kernel_from_log = snap
        .logs
        .iter()
        .any(|l| matches!(l.path.as_str(), KMSG | JOURNAL_KERNEL | CAPTURE_KERNEL_LOG));
    if kernel_from_log {
        bundle.file(CAPTURE_KERNEL_LOG.into(), kernel.into_bytes(), "file", "");
    }
    if snap
        .logs
        .iter()
        .any(|l| matches!(l.path.as_str(), JOURNAL_WORKLOAD | CAPTURE_WORKLOAD_LOG))
    {
        bundle.file(
            CAPTURE_WORKLOAD_LOG.into(),
            workload.into_bytes(),
            "file",
            "",
        );
    }
}

/// `uname`-like line: kernel name, release, version, machine (`?` for what cannot be read).
fn uname_line(root: &SysRoot) -> String {
    [
        "/proc/sys/kernel/ostype",
        "/proc/sys/kernel/osrelease",
        "/proc/sys/kernel/version",
    ]
    .iter()
    .map(|p| {
        root.read_string(p)
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|_| "?".into())
    })
    .chain(std::iter::once(
        root.read_string("/proc/sys/kernel/arch")
            .map(|s| s.trim().to_string())
            .ok()
            .or_else(|| root.is_live().then(|| std::env::consts::ARCH.to_string()))
            .unwrap_or_else(|| "?".into()),
    ))
    .collect::<Vec<_>>()
    .join(" ")
}

fn copy_one(
    root: &SysRoot,
    red: &Redactor,
    path: &str,
    link: bool,
    bundle: &mut Bundle,
    missing: &mut Vec<ManifestMissing>,
) {
    let dst = red.path(path);
    if link {
        match root.link_basename(path) {
            Ok(_) => {
                let target = root
                    .join(path)
                    .ok()
                    .and_then(|h| std::fs::read_link(h).ok())
                    .map(|t| t.to_string_lossy().into_owned())
                    .or_else(|| root.read_string(path).ok().map(|s| s.trim().to_string()))
                    .unwrap_or_default();
                bundle.file(dst, format!("{target}\n").into_bytes(), "link", "");
            }
            Err(e) => missing.push(ManifestMissing {
                path: dst,
                reason: e.to_string(),
            }),
        }
        return;
    }
    if root.is_dir(path) {
        bundle.entries.entry(dst).or_insert(Entry::Dir);
        return;
    }
    let (bytes, note) = match root.read(path) {
        Ok(b) => (b, ""),
        Err(e) if e.kind == ReadErrorKind::TooLarge => match tail_bytes(root, path) {
            Ok(t) => (t, "tail"),
            Err(e) => {
                missing.push(ManifestMissing {
                    path: dst,
                    reason: e.to_string(),
                });
                return;
            }
        },
        Err(e) => {
            missing.push(ManifestMissing {
                path: dst,
                reason: e.to_string(),
            });
            return;
        }
    };
    let cut = note == "tail";
    let (bytes, how) = if !red.enabled {
        (cut_tail(bytes, cut), "")
    } else if let Some(clean) = containers::sanitized(path, &bytes) {
        (clean, "")
    } else if path.ends_with("/cmdline") && path.starts_with("/proc/") && path != "/proc/cmdline" {
        (red.cmdline(&bytes), "")
    } else if path.ends_with("/serial-number") || path == "/etc/machine-id" {
        // Keep the shape (a NUL-terminated string / a line) with zeros.
        let zeroed = bytes
            .iter()
            .map(|b| if b.is_ascii_alphanumeric() { b'0' } else { *b })
            .collect();
        (zeroed, "")
    } else {
        // Whatever the encoding (issue 37 item 2): see `encoding`.
        match encoding::redact_bytes(red, &bytes, cut) {
            encoding::Redacted::Keep(b, how) => (b, how),
            encoding::Redacted::LeftOut(why) => {
                missing.push(ManifestMissing {
                    path: dst,
                    reason: why.to_string(),
                });
                return;
            }
        }
    };
    let note = match (note, how) {
        (n, "") => n.to_string(),
        ("", h) => h.to_string(),
        (n, h) => format!("{n}; {h}"),
    };
    bundle.file(dst, bytes, "file", &note);
}

/// The last [`crate::probe::LOG_TAIL_BYTES`] of a board file as bytes, from an even offset (a
/// UTF-16 log keeps its code units whole); the partial first line is the caller's to drop.
fn tail_bytes(root: &SysRoot, path: &str) -> Result<Vec<u8>, crate::root::ReadError> {
    let (_, len) = root.inode_len(path)?;
    let start = len.saturating_sub(crate::probe::LOG_TAIL_BYTES) & !1;
    root.read_range(path, start, crate::probe::LOG_TAIL_BYTES)
}

/// `bytes` from after its first line break when `cut` (the tail of a longer file).
fn cut_tail(bytes: Vec<u8>, cut: bool) -> Vec<u8> {
    match (cut, bytes.iter().position(|b| *b == b'\n')) {
        (true, Some(nl)) => bytes[nl + 1..].to_vec(),
        _ => bytes,
    }
}

#[cfg(test)]
mod tests;
