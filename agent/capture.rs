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
//! token/password/key options in command lines and `key=value` text. Links the checks read are
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

/// Replaces personal details in text and paths.
pub struct Redactor {
    literals: Vec<(String, String)>,
    enabled: bool,
}

macro_rules! re {
    ($name:ident, $pat:expr) => {
        fn $name() -> &'static Regex {
            static R: std::sync::OnceLock<Regex> = std::sync::OnceLock::new();
            R.get_or_init(|| Regex::new($pat).expect("valid pattern"))
        }
    };
}
re!(re_mac, r"\b[0-9A-Fa-f]{2}(?::[0-9A-Fa-f]{2}){5}\b");
re!(
    re_ipv4,
    r"\b(?:(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\.){3}(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\b"
);
re!(re_ipv6, r"\b[0-9A-Fa-f]{0,4}(?::[0-9A-Fa-f]{0,4}){2,7}\b");
re!(
    re_url_cred,
    r"([a-zA-Z][a-zA-Z0-9+.-]*://)[^/\s:@]+:[^/\s@]+@"
);
re!(
    re_kv_secret,
    r#"(?i)((?:password|passwd|token|secret|api[_-]?key|apikey|access[_-]?key|auth|credentials?|username|bearer)["']?\s*[=:]\s*["']?)[^\s"',&]+"#
);
re!(re_bearer, r"(?i)(bearer\s+)[A-Za-z0-9._~+/=-]+");

/// Option names whose value is a secret (`--token X`, `--api-key=X`): every name the status's
/// redaction knows ([`crate::sys::secret::is_secret_name`], e.g. llama.cpp's `-hft`) and user names.
fn secret_option(arg: &str) -> bool {
    let a = arg.trim_start_matches('-').to_ascii_lowercase();
    arg.starts_with('-')
        && (crate::sys::secret::is_secret_name(arg)
            || [
                "token",
                "password",
                "passwd",
                "secret",
                "api-key",
                "api_key",
                "apikey",
                "key",
                "auth",
                "username",
                "user",
                "pass",
                "credentials",
            ]
            .iter()
            .any(|k| a == *k || a.ends_with(&format!("-{k}")) || a.ends_with(&format!("_{k}"))))
}

impl Redactor {
    /// A redactor for the board under `root`: learns its host name, user names (`/etc/passwd`
    /// uid >= 1000), device-tree serial and machine id. `enabled = false` changes nothing.
    pub fn new(root: &SysRoot, enabled: bool) -> Self {
        let mut literals = Vec::new();
        if enabled {
            for p in ["/proc/sys/kernel/hostname", "/etc/hostname"] {
                if let Ok(h) = root.read_string(p) {
                    let h = h.trim().to_string();
                    if h.len() >= 2 && h != "localhost" {
                        literals.push((h, "redacted-host".to_string()));
                    }
                }
            }
            for p in [
                "/proc/device-tree/serial-number",
                "/sys/firmware/devicetree/base/serial-number",
            ] {
                if let Ok(b) = root.read(p) {
                    let s = crate::parse::devicetree::string(&b);
                    if s.len() >= 4 {
                        literals.push((s.clone(), "0".repeat(s.len())));
                    }
                }
            }
            if let Ok(m) = root.read_string("/etc/machine-id") {
                let m = m.trim().to_string();
                if m.len() >= 8 {
                    literals.push((m.clone(), "0".repeat(m.len())));
                }
            }
            if let Ok(pw) = root.read_string("/etc/passwd") {
                for l in pw.lines() {
                    let f: Vec<&str> = l.split(':').collect();
                    if let (Some(name), Some(uid)) = (f.first(), f.get(2)) {
                        let uid: u32 = uid.parse().unwrap_or(0);
                        if (1000..60000).contains(&uid) && name.len() >= 2 {
                            literals.push((name.to_string(), "user".to_string()));
                        }
                    }
                }
            }
            literals.sort_by_key(|(a, _)| std::cmp::Reverse(a.len()));
            literals.dedup();
        }
        Redactor { literals, enabled }
    }

    /// A board path with user and host names replaced (`/home/alice/x` -> `/home/user/x`).
    pub fn path(&self, p: &str) -> String {
        if !self.enabled {
            return p.to_string();
        }
        p.split('/')
            .map(|c| {
                self.literals
                    .iter()
                    .find(|(l, _)| l == c)
                    .map(|(_, r)| r.clone())
                    .unwrap_or_else(|| c.to_string())
            })
            .collect::<Vec<_>>()
            .join("/")
    }

    /// Text with every personal detail replaced.
    pub fn text(&self, t: &str) -> String {
        if !self.enabled {
            return t.to_string();
        }
        let mut out = t.to_string();
        for (l, r) in &self.literals {
            if out.contains(l.as_str()) {
                out = replace_word(&out, l, r);
            }
        }
        out = re_url_cred()
            .replace_all(&out, "${1}REDACTED:REDACTED@")
            .into_owned();
        out = re_bearer().replace_all(&out, "${1}REDACTED").into_owned();
        out = re_kv_secret()
            .replace_all(&out, "${1}REDACTED")
            .into_owned();
        out = re_mac().replace_all(&out, "00:00:00:00:00:00").into_owned();
        out = re_ipv4()
            .replace_all(&out, |c: &regex_lite::Captures<'_>| {
                let ip = &c[0];
                if ip.starts_with("127.") || ip == "0.0.0.0" {
                    ip.to_string()
                } else {
                    "192.0.2.0".to_string()
                }
            })
            .into_owned();
        out = re_ipv6()
            .replace_all(&out, |c: &regex_lite::Captures<'_>| {
                let ip = &c[0];
                // Addresses only: "::" compression or eight groups; not times or PCI addresses.
                let groups = ip.split(':').count();
                if ip == "::1" || !(ip.contains("::") || groups == 8) || ip.len() < 3 {
                    ip.to_string()
                } else {
                    "2001:db8::".to_string()
                }
            })
            .into_owned();
        out
    }

    /// A NUL-separated command line with secret option values replaced.
    pub fn cmdline(&self, raw: &[u8]) -> Vec<u8> {
        let args: Vec<String> = raw
            .split(|b| *b == 0)
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        let mut out: Vec<String> = Vec::with_capacity(args.len());
        let mut hide_next = false;
        for a in args {
            if hide_next && !a.is_empty() {
                out.push("REDACTED".into());
                hide_next = false;
                continue;
            }
            hide_next = false;
            if let Some((k, _)) = a.split_once('=').filter(|(k, _)| secret_option(k)) {
                out.push(format!("{k}=REDACTED"));
                continue;
            }
            if secret_option(&a) {
                hide_next = true;
            }
            out.push(self.text(&a));
        }
        out.join("\0").into_bytes()
    }
}

/// Replaces `word` where it is not part of a longer identifier.
fn replace_word(text: &str, word: &str, with: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    while let Some(i) = rest.find(word) {
        let before = rest[..i].chars().next_back();
        let after = rest[i + word.len()..].chars().next();
        out.push_str(&rest[..i]);
        if before.is_some_and(ident) || after.is_some_and(ident) {
            out.push_str(word);
        } else {
            out.push_str(with);
        }
        rest = &rest[i + word.len()..];
    }
    out.push_str(rest);
    out
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
/// byte as read.
///
/// Errors: [`CaptureError::Write`] when the archive cannot be written (a full disk, a read-only
/// directory); nothing is left at `out` then.
pub fn capture(
    root: &SysRoot,
    choice: &ProfileChoice,
    out: &Path,
    redact: bool,
) -> Result<CaptureSummary, CaptureError> {
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
    // A listed directory's names matter (firmware files, libraries, process ids): each name the
    // checks did not open is stored as an empty file or directory.
    for (path, link) in &accessed {
        if *link || !root.is_dir(path) || path.starts_with("/var/log/journal") {
            continue;
        }
        let Ok(names) = root.list_dir(path) else {
            continue;
        };
        for n in names.iter().take(MAX_NAMES_PER_DIR) {
            let child = if path == "/" {
                format!("/{n}")
            } else {
                format!("{path}/{n}")
            };
            let dst = red.path(&child);
            if bundle.entries.contains_key(&dst) || accessed.iter().any(|(p, _)| *p == child) {
                continue;
            }
            let e = if root.is_dir(&child) {
                Entry::Dir
            } else {
                Entry::File(Vec::new(), "file", "name only".into())
            };
            bundle.entries.insert(dst, e);
        }
    }
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
        Ok(d) => {
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
        Err(e) => {
            manifest.profile = format!("diagnosis failed: {e}");
            missing.push(ManifestMissing {
                path: "(diagnosis)".into(),
                reason: e.to_string(),
            });
        }
    }
    let uname = [
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
    .join(" ");
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
    let archive_bytes = write_archive(out, &bundle)?;
    Ok(CaptureSummary {
        manifest,
        archive_bytes,
    })
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
        Err(e) if e.kind == ReadErrorKind::TooLarge => {
            match root.read_tail(path, crate::probe::LOG_TAIL_BYTES) {
                Ok(t) => (t.into_bytes(), "tail"),
                Err(e) => {
                    missing.push(ManifestMissing {
                        path: dst,
                        reason: e.to_string(),
                    });
                    return;
                }
            }
        }
        Err(e) => {
            missing.push(ManifestMissing {
                path: dst,
                reason: e.to_string(),
            });
            return;
        }
    };
    let bytes = if !red.enabled {
        bytes
    } else if path.ends_with("/cmdline") && path.starts_with("/proc/") && path != "/proc/cmdline" {
        red.cmdline(&bytes)
    } else if path.ends_with("/serial-number") || path == "/etc/machine-id" {
        // Keep the shape (a NUL-terminated string / a line) with zeros.
        bytes
            .iter()
            .map(|b| if b.is_ascii_alphanumeric() { b'0' } else { *b })
            .collect()
    } else if is_text(&bytes) {
        red.text(&String::from_utf8_lossy(&bytes)).into_bytes()
    } else {
        bytes
    };
    bundle.file(dst, bytes, "file", note);
}

/// Text = valid UTF-8 with no NUL byte (device-tree strings and ELF files are kept as bytes).
fn is_text(b: &[u8]) -> bool {
    !b.contains(&0) && std::str::from_utf8(b).is_ok()
}

fn write_archive(out: &Path, bundle: &Bundle) -> Result<u64, CaptureError> {
    let werr = |p: &Path, e: &dyn std::fmt::Display| CaptureError::Write {
        path: p.display().to_string(),
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
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&tmp)
        .map_err(|e| {
            // Name the file the user asked for; the temporary name only as the detail.
            let detail = format!(
                "{e} (creating the temporary file {} beside it)",
                tmp.display()
            );
            werr(out, &detail)
        })?;
    let result = (|| -> std::io::Result<u64> {
        let gz = GzipWriter::new(std::io::BufWriter::new(file))?;
        let mut tar = tar::Builder::new(gz);
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
        let gz = tar.into_inner()?;
        let mut w = gz.finish()?;
        w.flush()?;
        let f = w.into_inner().map_err(|e| e.into_error())?;
        f.sync_all()?;
        Ok(f.metadata()?.len())
    })();
    match result {
        Ok(n) => {
            std::fs::rename(&tmp, out).map_err(|e| {
                let _ = std::fs::remove_file(&tmp);
                werr(out, &e)
            })?;
            Ok(n)
        }
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            Err(werr(out, &e))
        }
    }
}

/// The gzip member format (RFC 1952) around flate2's raw deflate stream: a 10-byte header
/// (deflate, no name, mtime 0, unknown OS), the data, then its CRC-32 and length mod 2^32. Written
/// here rather than with `flate2::write::GzEncoder`, whose CRC-32 crate links 24 KB of tables
/// into the static binary; [`crc32`] needs 1 KB and a bundle is a few MB at most.
struct GzipWriter<W: Write> {
    deflate: flate2::write::DeflateEncoder<W>,
    crc: u32,
    len: u32,
}

impl<W: Write> GzipWriter<W> {
    fn new(mut out: W) -> std::io::Result<Self> {
        out.write_all(&[0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff])?;
        Ok(GzipWriter {
            deflate: flate2::write::DeflateEncoder::new(out, flate2::Compression::default()),
            crc: 0,
            len: 0,
        })
    }

    /// Ends the deflate stream, writes the trailer and returns the inner writer.
    fn finish(self) -> std::io::Result<W> {
        let mut out = self.deflate.finish()?;
        out.write_all(&self.crc.to_le_bytes())?;
        out.write_all(&self.len.to_le_bytes())?;
        Ok(out)
    }
}

impl<W: Write> Write for GzipWriter<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.deflate.write(buf)?;
        self.crc = crc32(self.crc, &buf[..n]);
        self.len = self.len.wrapping_add(n as u32);
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.deflate.flush()
    }
}

/// CRC-32 (ISO 3309, reflected polynomial 0xEDB88320, as gzip uses) of `bytes`, continuing from
/// `crc` (0 to start).
fn crc32(crc: u32, bytes: &[u8]) -> u32 {
    const TABLE: [u32; 256] = {
        let mut t = [0u32; 256];
        let mut i = 0;
        while i < 256 {
            let mut c = i as u32;
            let mut k = 0;
            while k < 8 {
                c = if c & 1 != 0 {
                    0xEDB8_8320 ^ (c >> 1)
                } else {
                    c >> 1
                };
                k += 1;
            }
            t[i] = c;
            i += 1;
        }
        t
    };
    let mut c = !crc;
    for &b in bytes {
        c = TABLE[((c ^ b as u32) & 0xff) as usize] ^ (c >> 8);
    }
    !c
}

#[cfg(test)]
mod tests {
    #[test]
    fn gzip_writer_is_read_by_flate2_and_crc32_has_its_check_value() {
        use std::io::{Read, Write};
        // The CRC-32 check value (the CRC of the nine ASCII digits), in one piece and in two.
        assert_eq!(super::crc32(0, b"123456789"), 0xCBF4_3926);
        assert_eq!(
            super::crc32(super::crc32(0, b"1234"), b"56789"),
            0xCBF4_3926
        );
        let data: Vec<u8> = (0..200_000u32).map(|i| (i * 7 % 251) as u8).collect();
        let mut w = super::GzipWriter::new(Vec::new()).unwrap();
        w.write_all(&data).unwrap();
        let gz = w.finish().unwrap();
        let mut back = Vec::new();
        flate2::read::GzDecoder::new(gz.as_slice())
            .read_to_end(&mut back)
            .unwrap();
        assert_eq!(back, data);
        // A flipped data byte is caught by the trailer's CRC.
        let mut bad = gz.clone();
        let n = bad.len();
        bad[n - 8] ^= 1;
        assert!(flate2::read::GzDecoder::new(bad.as_slice())
            .read_to_end(&mut Vec::new())
            .is_err());
    }

    use super::*;

    fn red_with(literals: &[(&str, &str)]) -> Redactor {
        Redactor {
            literals: literals
                .iter()
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .collect(),
            enabled: true,
        }
    }

    #[test]
    fn text_redaction() {
        let r = red_with(&[("pi-kitchen", "redacted-host"), ("alice", "user")]);
        let t = r.text("May 1 pi-kitchen kernel: eth0 dc:a6:32:01:02:03 192.168.1.20 fe80::1ff:fe23:4567:890a /home/alice/m.gguf mqtts://bob:s3cret@broker:8883 password=hunter2 Bearer abc.def alicex");
        assert!(
            !t.contains("pi-kitchen") && t.contains("redacted-host"),
            "{t}"
        );
        assert!(
            !t.contains("dc:a6:32") && !t.contains("192.168.1.20"),
            "{t}"
        );
        assert!(!t.contains("fe80::1ff"), "{t}");
        assert!(t.contains("/home/user/m.gguf"), "{t}");
        assert!(!t.contains("s3cret") && !t.contains("bob:"), "{t}");
        assert!(!t.contains("hunter2") && !t.contains("abc.def"), "{t}");
        // A longer identifier that merely contains a user name is left alone.
        assert!(t.contains("alicex"), "{t}");
    }

    #[test]
    fn evidence_survives_redaction() {
        let r = red_with(&[]);
        for l in [
            "[ 12.345678] cma: cma_alloc: alloc failed, req-size: 8 pages, ret: -12",
            "hailo1x 0001:01:00.0: Probing: Added board 1e60-45c4, /dev/hailo0",
            "May 15 10:02:11 kernel: [drm] Initialized rknpu 0.9.8 20240828 for fdab0000.npu",
            "RKNN Runtime Information, librknnrt version: 2.3.0 (c949ad889d@2024-11-07T11:35:33)",
            "--host 127.0.0.1 --port 8080",
        ] {
            assert_eq!(r.text(l), l);
        }
    }

    #[test]
    fn cmdline_secrets() {
        let r = red_with(&[]);
        let raw = b"llama-server\0--api-key\0sk-123\0--token=abc\0-m\0/models/x.gguf\0--port\08080";
        let out = String::from_utf8(r.cmdline(raw)).unwrap();
        assert_eq!(
            out,
            "llama-server\0--api-key\0REDACTED\0--token=REDACTED\0-m\0/models/x.gguf\0--port\08080"
        );
    }

    /// llama.cpp's short `-hft` and a secret-named option the status already hides are hidden
    /// in a capture too (one list of secret names for both).
    #[test]
    fn short_token_options_are_hidden() {
        let r = red_with(&[]);
        let raw = b"llama-server\0-hf\0org/repo\0-hft\0hf_zq81\0--client-secret\0cs_zq82";
        let out = String::from_utf8(r.cmdline(raw)).unwrap();
        assert_eq!(
            out,
            "llama-server\0-hf\0org/repo\0-hft\0REDACTED\0--client-secret\0REDACTED"
        );
    }

    #[test]
    fn unwritable_output_leaves_nothing() {
        let d = tempfile::tempdir().unwrap();
        let out = d.path().join("no-such-dir/x.tar.gz");
        let e = capture(
            &SysRoot::new(d.path()),
            &ProfileChoice::Id("generic".into()),
            &out,
            true,
        );
        assert!(matches!(e, Err(CaptureError::Write { .. })));
        assert!(!out.exists());
    }
}
