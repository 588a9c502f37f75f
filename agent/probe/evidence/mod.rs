//! Where log evidence comes from, on a live board and in a captured tree, and the page size.
//!
//! Kernel messages, in order (the first source that can be read wins, so a line is never counted
//! from two copies of the same ring buffer):
//! 1. live: `/dev/kmsg` (one record per `read()`, `prio,seq,usec,flags;text`, opened
//!    non-blocking; `EPIPE` = records overwritten while reading); captured tree: the
//!    [`CAPTURE_KERNEL_LOG`] text file `npu-agent capture` writes;
//! 2. the systemd journal's kernel transport (`journalctl -k -b -o json`; in a captured tree
//!    `journalctl -D <tree>/var/log/journal`);
//! 3. the profile's kernel log files (`/var/log/kern.log`, `syslog`, ... where rsyslog exists).
//!
//! Workload messages: the journal of the profile's units (`_SYSTEMD_UNIT=`) and process names
//! (`_COMM=`, `SYSLOG_IDENTIFIER=`) of this boot (captured tree: [`CAPTURE_WORKLOAD_LOG`] or the
//! tree's journal directory), plus the profile's workload log files.
//!
//! The journal is read by running `journalctl --output=json` (with `--after-cursor` in the daemon):
//! it reads every journal file format systemd writes (compact mode, zstd/xz/lz4 compression,
//! sealed files) at no cost in binary size, where a pure-Rust reader would need its own
//! decompressors and follow format changes. Its cost is measured by `bench/logs.sh`.
//!
//! In the daemon every source is read incrementally through [`LogCursors`] (kmsg sequence number,
//! journal cursors, a file's inode + offset), only for this boot (`boot_id`), and the cursors and
//! the evidence lines kept so far are persisted in the state directory, so a restart neither
//! re-reads 16 MiB nor counts a line twice.

use super::{LogClass, LogFile, LOG_TAIL_BYTES};
pub use crate::model::logs::{LogSource, PageSize, SourceState};
use crate::model::workload::{Discovered, LogFormat};
use crate::profile::Profile;
use crate::root::SysRoot;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

mod journal;
mod kmsg;
pub use journal::*;
pub use kmsg::*;

/// Most bytes of one file read in one daemon cycle (the rest comes next cycle).
pub const MAX_READ_PER_CYCLE: u64 = 16 * 1024 * 1024;

/// Directory of a captured tree that holds what `npu-agent capture` recorded.
pub const CAPTURE_DIR: &str = "/npu-agent-capture";
/// The running kernel's page size in bytes, as `capture` recorded it.
pub const CAPTURE_PAGE_SIZE: &str = "/npu-agent-capture/page_size";
/// Kernel messages `capture` read from `/dev/kmsg` or the journal, one per line.
pub const CAPTURE_KERNEL_LOG: &str = "/npu-agent-capture/kernel.log";
/// The workloads' journal lines `capture` read, one per line (`unit[pid]: message`).
pub const CAPTURE_WORKLOAD_LOG: &str = "/npu-agent-capture/workload-journal.log";
/// Page size figures assume where the tree gives none (the arm64 and x86_64 default).
pub const FALLBACK_PAGE_BYTES: u64 = 4096;
/// Name of the kernel ring buffer source.
pub const KMSG: &str = "/dev/kmsg";
/// Name of the journal's kernel transport source.
pub const JOURNAL_KERNEL: &str = "journal:_TRANSPORT=kernel";
/// Name of the workloads' journal source.
pub const JOURNAL_WORKLOAD: &str = "journal:workloads";
/// Most lines kept per source (the newest win).
pub const MAX_LINES_PER_SOURCE: usize = 50_000;
/// Most evidence lines the daemon keeps per source across cycles (the newest win).
pub const MAX_KEPT_PER_SOURCE: usize = 2_000;
/// Lines kept in the daemon although no check classifies them yet: `board.power` counts them.
pub const EXTRA_KEPT: &[&str] = &["Undervoltage detected", "Voltage normalised"];

/// The page size for `root`: the running kernel's on the live system; in a captured tree what
/// `capture` recorded ([`CAPTURE_PAGE_SIZE`]), else what the tree's own evidence says (its
/// kernel release, a driver's `page_size=` line), else unknown — never the page size of the
/// machine running the agent.
pub fn page_size(root: &SysRoot) -> PageSize {
    page_size_from(root, None, &[])
}

/// [`page_size`] with the tree's kernel release and logs to infer it from.
pub fn page_size_from(root: &SysRoot, kernel_release: Option<&str>, logs: &[LogFile]) -> PageSize {
    if root.is_live() {
        return PageSize {
            bytes: rustix::param::page_size() as u64,
            source: "kernel".into(),
        };
    }
    let valid = |b: &u64| b.is_power_of_two() && (1024..=1 << 20).contains(b);
    if let Some(bytes) = root
        .read_string(CAPTURE_PAGE_SIZE)
        .ok()
        .and_then(|t| t.trim().parse::<u64>().ok())
        .filter(valid)
    {
        return PageSize {
            bytes,
            source: CAPTURE_PAGE_SIZE.into(),
        };
    }
    if let Some((bytes, why)) = kernel_release.and_then(crate::parse::kernel::page_size_of_release)
    {
        return PageSize {
            bytes,
            source: format!("kernel release {} ({why})", kernel_release.unwrap_or("")),
        };
    }
    let from_line = logs
        .iter()
        .filter(|l| l.class == LogClass::Kernel)
        .find_map(|l| {
            l.lines.iter().find_map(|t| {
                crate::parse::kernel::page_size_of_line(t)
                    .filter(valid)
                    .map(|b| (b, l.path.clone()))
            })
        });
    if let Some((bytes, path)) = from_line {
        return PageSize {
            bytes,
            source: format!("{path} (a driver's page_size= line)"),
        };
    }
    PageSize {
        bytes: FALLBACK_PAGE_BYTES,
        source: format!(
            "{}: neither a recorded page size nor the kernel release or logs of this tree give it (figures assume 4 KiB pages)",
            PageSize::UNKNOWN
        ),
    }
}

/// A file's read position.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileCursor {
    /// Inode number (a rotated file has a new one).
    pub inode: u64,
    /// Bytes consumed (up to the last complete line).
    pub offset: u64,
}

/// One evidence line the daemon keeps across cycles.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeptLine {
    /// Source name (as in [`LogSource::name`]).
    pub source: String,
    /// Which side wrote it.
    pub class: LogClass,
    /// The line.
    pub text: String,
}

/// Read positions of every source and the evidence lines seen so far in this boot; persisted
/// by the daemon (`log_cursors.json` in the state directory).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogCursors {
    /// `boot_id` the cursors belong to; another boot starts afresh.
    pub boot_id: String,
    /// Last `/dev/kmsg` sequence number consumed.
    pub kmsg_seq: Option<u64>,
    /// Journal cursor of the last kernel entry consumed.
    pub journal_kernel: Option<String>,
    /// Journal cursor of the last workload entry consumed.
    pub journal_workload: Option<String>,
    /// Files by board path.
    pub files: BTreeMap<String, FileCursor>,
    /// Evidence lines kept (those a check classifies or a profile signature matches).
    pub kept: Vec<KeptLine>,
}

/// Lines read from one source this cycle.
struct Batch {
    name: String,
    class: LogClass,
    lines: Vec<String>,
    /// The part read was a tail of a longer file (line numbers unknown).
    cut: bool,
}

/// A line worth keeping in the daemon: a check classifies it, it is a workload's failure line, a
/// catalog or profile signature matches it, or it is one of [`EXTRA_KEPT`].
pub fn is_evidence(line: &str, profile: &Profile) -> bool {
    !crate::parse::logline::classify(line).is_empty()
        || crate::parse::workload::is_failure(line)
        || crate::parse::workload::is_exception(line)
        || crate::probe::workloads::is_npu_line(line)
        || !crate::profile::signature::catalog()
            .matches(line)
            .is_empty()
        || profile
            .signature
            .iter()
            .any(|s| !s.contains.is_empty() && line.contains(&s.contains))
        || EXTRA_KEPT.iter().any(|k| line.contains(k))
}

/// Reads every log source for `profile` under `root`. Without `cursors` (one-shot `check`,
/// `capture`) everything of this boot is read (files: their last [`LOG_TAIL_BYTES`]); with
/// `cursors` (the daemon) only what is new since the cursors, and the returned logs are the
/// evidence lines kept across cycles. `boot_id` resets the cursors when it changed.
pub fn probe_logs(
    root: &SysRoot,
    profile: &Profile,
    discovered: &Discovered,
    cursors: Option<&mut LogCursors>,
    boot_id: Option<&str>,
) -> (Vec<LogFile>, Vec<LogSource>) {
    let mut fresh = LogCursors::default();
    let incremental = cursors.is_some();
    let cur = match cursors {
        Some(c) => {
            // Cursors of another boot (or of none yet) start afresh; an unreadable boot_id
            // keeps what is held.
            let b = boot_id.unwrap_or(if c.boot_id.is_empty() {
                "unknown"
            } else {
                &c.boot_id
            });
            if c.boot_id != b {
                *c = LogCursors {
                    boot_id: b.to_string(),
                    ..LogCursors::default()
                };
            }
            c
        }
        None => &mut fresh,
    };
    let mut sources = Vec::new();
    let mut batches = Vec::new();
    kernel_sources(root, profile, cur, &mut sources, &mut batches);
    workload_sources(root, profile, discovered, cur, &mut sources, &mut batches);
    device_files(root, profile, cur, incremental, &mut sources, &mut batches);
    if !incremental {
        let logs = batches
            .into_iter()
            .filter(|b| !b.lines.is_empty() || !b.name.starts_with("journal:"))
            .map(|b| LogFile {
                path: b.name,
                class: b.class,
                lines: b.lines,
                cut: b.cut,
            })
            .collect();
        return (logs, sources);
    }
    for b in batches {
        for l in b.lines {
            if is_evidence(&l, profile) {
                cur.kept.push(KeptLine {
                    source: b.name.clone(),
                    class: b.class,
                    text: l,
                });
            }
        }
    }
    // Bound what is kept per source, newest first.
    // (source, lines kept): a handful of sources, searched in order.
    let mut per: Vec<(&str, usize)> = Vec::new();
    let mut keep = vec![false; cur.kept.len()];
    for (i, k) in cur.kept.iter().enumerate().rev() {
        let at = match per.iter().position(|(s, _)| *s == k.source) {
            Some(at) => at,
            None => {
                per.push((&k.source, 0));
                per.len() - 1
            }
        };
        let n = &mut per[at].1;
        if *n < MAX_KEPT_PER_SOURCE {
            *n += 1;
            keep[i] = true;
        }
    }
    let mut it = keep.into_iter();
    cur.kept.retain(|_| it.next().unwrap_or(false));
    let mut logs: Vec<LogFile> = Vec::new();
    for k in &cur.kept {
        match logs.iter_mut().find(|l| l.path == k.source) {
            Some(l) => l.lines.push(k.text.clone()),
            None => logs.push(LogFile {
                path: k.source.clone(),
                class: k.class,
                lines: vec![k.text.clone()],
                cut: true,
            }),
        }
    }
    (logs, sources)
}

fn source(name: &str, class: LogClass, state: SourceState, detail: impl Into<String>) -> LogSource {
    let detail = detail.into();
    if matches!(state, SourceState::Denied) {
        tracing::debug!(source = name, "log source not readable: {detail}");
    }
    LogSource {
        name: name.to_string(),
        class,
        state,
        detail,
        lines: 0,
    }
}

fn kernel_sources(
    root: &SysRoot,
    profile: &Profile,
    cur: &mut LogCursors,
    sources: &mut Vec<LogSource>,
    batches: &mut Vec<Batch>,
) {
    let class = LogClass::Kernel;
    let mut used: Option<String> = None;
    // 1. The ring buffer (live) or the text capture wrote (tree).
    if root.is_live() {
        match read_kmsg(cur.kmsg_seq) {
            Ok(k) => {
                let mut detail = format!("{} record(s)", k.lines.len());
                if k.lost > 0 {
                    detail.push_str(&format!(
                        "; {} record(s) overwritten before they were read",
                        k.lost
                    ));
                }
                if let Some(s) = k.last_seq {
                    cur.kmsg_seq = Some(s);
                }
                sources.push(LogSource {
                    lines: k.lines.len(),
                    ..source(KMSG, class, SourceState::Read, detail)
                });
                batches.push(Batch {
                    name: KMSG.into(),
                    class,
                    lines: k.lines,
                    cut: true,
                });
                used = Some(KMSG.into());
            }
            Err((state, why)) => sources.push(source(KMSG, class, state, why)),
        }
    } else if root.exists(CAPTURE_KERNEL_LOG) {
        if let Some(b) = read_file(root, CAPTURE_KERNEL_LOG, class, cur, sources) {
            batches.push(b);
            used = Some(CAPTURE_KERNEL_LOG.into());
        }
    }
    // 2. The journal's kernel transport.
    if let Some(u) = &used {
        sources.push(source(
            JOURNAL_KERNEL,
            class,
            SourceState::Unused,
            format!("kernel messages read from {u}"),
        ));
    } else {
        let matches = vec!["_TRANSPORT=kernel".to_string()];
        match read_journal(root, &matches, cur.journal_kernel.as_deref(), false) {
            Ok(j) => {
                if j.last_cursor.is_some() {
                    cur.journal_kernel = j.last_cursor;
                }
                sources.push(LogSource {
                    lines: j.lines.len(),
                    ..source(
                        JOURNAL_KERNEL,
                        class,
                        SourceState::Read,
                        format!("{} entries ({})", j.lines.len(), j.dir),
                    )
                });
                batches.push(Batch {
                    name: JOURNAL_KERNEL.into(),
                    class,
                    lines: j.lines,
                    cut: true,
                });
                used = Some(JOURNAL_KERNEL.into());
            }
            Err((state, why)) => sources.push(source(JOURNAL_KERNEL, class, state, why)),
        }
    }
    // 3. The profile's kernel log files.
    for path in profile_paths(root, &profile.logs.kernel, profile) {
        if let Some(u) = &used {
            if root.exists(&path) {
                sources.push(source(
                    &path,
                    class,
                    SourceState::Unused,
                    format!("kernel messages read from {u}"),
                ));
            }
            continue;
        }
        if let Some(b) = read_file(root, &path, class, cur, sources) {
            batches.push(b);
        }
    }
}

fn workload_sources(
    root: &SysRoot,
    profile: &Profile,
    discovered: &Discovered,
    cur: &mut LogCursors,
    sources: &mut Vec<LogSource>,
    batches: &mut Vec<Batch>,
) {
    let class = LogClass::Workload;
    let mut matches = workload_matches(profile);
    for m in &discovered.journal_matches {
        if !matches.contains(m) {
            if !matches.is_empty() {
                matches.push("+".to_string());
            }
            matches.push(m.clone());
        }
    }
    if !root.is_live() && root.exists(CAPTURE_WORKLOAD_LOG) {
        if let Some(b) = read_file(root, CAPTURE_WORKLOAD_LOG, class, cur, sources) {
            batches.push(b);
        }
        sources.push(source(
            JOURNAL_WORKLOAD,
            class,
            SourceState::Unused,
            format!("workload journal read from {CAPTURE_WORKLOAD_LOG}"),
        ));
    } else if matches.is_empty() {
        sources.push(source(
            JOURNAL_WORKLOAD,
            class,
            SourceState::Unused,
            "the profile names no workload units or processes",
        ));
    } else {
        match read_journal(root, &matches, cur.journal_workload.as_deref(), true) {
            Ok(j) => {
                if j.last_cursor.is_some() {
                    cur.journal_workload = j.last_cursor;
                }
                sources.push(LogSource {
                    lines: j.lines.len(),
                    ..source(
                        JOURNAL_WORKLOAD,
                        class,
                        SourceState::Read,
                        format!("{} entries ({})", j.lines.len(), j.dir),
                    )
                });
                batches.push(Batch {
                    name: JOURNAL_WORKLOAD.into(),
                    class,
                    lines: j.lines,
                    cut: true,
                });
            }
            Err((state, why)) => sources.push(source(JOURNAL_WORKLOAD, class, state, why)),
        }
    }
    let mut read: Vec<String> = Vec::new();
    for path in profile_paths(root, &profile.logs.workload, profile) {
        if let Some(b) = read_file(root, &path, class, cur, sources) {
            batches.push(b);
        }
        read.push(path);
    }
    // The discovered workloads' logs: container logs in their engine's layout.
    for log in discovered.logs.iter().filter(|l| !read.contains(&l.path)) {
        if let Some(b) = read_log(
            root,
            &log.path,
            class,
            log.format,
            log.max_bytes,
            cur,
            sources,
        ) {
            batches.push(b);
        }
    }
}

fn device_files(
    root: &SysRoot,
    profile: &Profile,
    cur: &mut LogCursors,
    _incremental: bool,
    sources: &mut Vec<LogSource>,
    batches: &mut Vec<Batch>,
) {
    for pat in &profile.logs.device {
        for path in super::files::expand(root, pat) {
            if let Some(b) = read_file(root, &path, LogClass::Device, cur, sources) {
                batches.push(b);
            }
        }
    }
}

/// The profile's log files of one class that exist (globs expanded), leaving out device logs.
fn profile_paths(root: &SysRoot, patterns: &[String], profile: &Profile) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for pat in patterns {
        for path in super::files::expand(root, pat) {
            if !out.contains(&path) && !profile.logs.device.contains(&path) {
                out.push(path);
            }
        }
    }
    out
}

/// `field=value` journal matches for the profile's units and process names, as journalctl
/// arguments (`+` between fields: any of them).
pub fn workload_matches(profile: &Profile) -> Vec<String> {
    let mut groups: Vec<Vec<String>> = Vec::new();
    let units: Vec<String> = profile
        .limits
        .units
        .iter()
        .map(|u| format!("_SYSTEMD_UNIT={u}"))
        .collect();
    // The kernel truncates comm to 15 bytes.
    let comms: Vec<String> = profile
        .limits
        .workloads
        .iter()
        .map(|w| format!("_COMM={}", w.chars().take(15).collect::<String>()))
        .collect();
    let idents: Vec<String> = profile
        .limits
        .workloads
        .iter()
        .map(|w| format!("SYSLOG_IDENTIFIER={w}"))
        .collect();
    for g in [units, comms, idents] {
        if !g.is_empty() {
            groups.push(g);
        }
    }
    let mut out = Vec::new();
    for (i, g) in groups.into_iter().enumerate() {
        if i > 0 {
            out.push("+".to_string());
        }
        out.extend(g);
    }
    out
}

/// Reads a log file: all of it from the cursor when one is held (only complete lines; a new
/// inode or a shorter file starts over), else its last [`LOG_TAIL_BYTES`].
fn read_file(
    root: &SysRoot,
    path: &str,
    class: LogClass,
    cur: &mut LogCursors,
    sources: &mut Vec<LogSource>,
) -> Option<Batch> {
    read_log(
        root,
        path,
        class,
        LogFormat::Plain,
        LOG_TAIL_BYTES,
        cur,
        sources,
    )
}

/// The messages of a log's text in its layout (a container engine's, or one per line).
fn messages(text: &str, format: LogFormat) -> Vec<String> {
    match format {
        LogFormat::Plain => text.lines().map(str::to_string).collect(),
        LogFormat::DockerJson => crate::parse::containerlog::docker_json_log(text).lines,
        LogFormat::Cri => crate::parse::containerlog::cri_log(text).lines,
    }
}

/// [`read_file`] for a log of any layout, reading at most `max_bytes` of its tail.
fn read_log(
    root: &SysRoot,
    path: &str,
    class: LogClass,
    format: LogFormat,
    max_bytes: u64,
    cur: &mut LogCursors,
    sources: &mut Vec<LogSource>,
) -> Option<Batch> {
    let incremental = !cur.boot_id.is_empty();
    let result = if incremental {
        read_file_from(root, path, cur, format)
    } else {
        root.read_tail(path, max_bytes).map(|text| {
            let cut = root.file_len(path).is_some_and(|n| n > max_bytes);
            (messages(&text, format), cut)
        })
    };
    match result {
        Ok((lines, cut)) => {
            sources.push(LogSource {
                lines: lines.len(),
                ..source(
                    path,
                    class,
                    SourceState::Read,
                    format!("{} line(s)", lines.len()),
                )
            });
            Some(Batch {
                name: path.to_string(),
                class,
                lines,
                cut,
            })
        }
        Err(e) => {
            use crate::root::ReadErrorKind::{NotFound, OutsideRoot};
            // A link out of a captured tree is the same as no file: the board's file is not
            // in the tree (kernels with openat2 resolve it inside the tree and find nothing).
            let (state, detail) = match e.kind {
                NotFound | OutsideRoot => (SourceState::Missing, format!("{path}: not found")),
                _ => (SourceState::Denied, e.to_string()),
            };
            sources.push(source(path, class, state, detail));
            None
        }
    }
}

fn read_file_from(
    root: &SysRoot,
    path: &str,
    cur: &mut LogCursors,
    format: LogFormat,
) -> Result<(Vec<String>, bool), crate::root::ReadError> {
    let (inode, len) = root.inode_len(path)?;
    let prev = cur.files.get(path).cloned();
    let start = match &prev {
        Some(c) if c.inode == inode && c.offset <= len => c.offset,
        // First sight or rotated: the tail, like a one-shot check.
        _ => len.saturating_sub(LOG_TAIL_BYTES),
    };
    let cut = start > 0 && prev.as_ref().is_none_or(|c| c.inode != inode);
    let bytes = root.read_range(path, start, MAX_READ_PER_CYCLE)?;
    // Only complete lines; a partial last line is read again next cycle.
    let end = bytes.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
    let mut text = String::from_utf8_lossy(&bytes[..end]).into_owned();
    if cut && prev.is_none() && start > 0 {
        if let Some(nl) = text.find('\n') {
            text.drain(..=nl);
        }
    }
    cur.files.insert(
        path.to_string(),
        FileCursor {
            inode,
            offset: start + end as u64,
        },
    );
    Ok((messages(&text, format), cut))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn captured_page_size_and_fallback() {
        let d = tempfile::tempdir().unwrap();
        let root = SysRoot::new(d.path());
        assert_eq!(page_size(&root).bytes, FALLBACK_PAGE_BYTES);
        assert!(!page_size(&root).known(), "{}", page_size(&root).source);
        std::fs::create_dir_all(d.path().join("npu-agent-capture")).unwrap();
        std::fs::write(d.path().join("npu-agent-capture/page_size"), "16384\n").unwrap();
        assert_eq!(page_size(&root).bytes, 16384);
        std::fs::write(d.path().join("npu-agent-capture/page_size"), "12345\n").unwrap();
        assert_eq!(page_size(&root).bytes, FALLBACK_PAGE_BYTES);
    }

    fn rk_profile(root: &SysRoot) -> Profile {
        crate::profile::load_all(root)
            .0
            .into_iter()
            .find(|p| p.id == "rk3588-rknpu")
            .unwrap()
    }

    fn kernel_lines(logs: &[LogFile]) -> Vec<String> {
        logs.iter()
            .filter(|l| l.class == LogClass::Kernel)
            .flat_map(|l| l.lines.clone())
            .collect()
    }

    const ENOMEM: &str = "kernel: cma: cma_alloc: alloc failed, req-size: 8 pages, ret: -12";

    #[test]
    fn files_are_read_incrementally_and_never_counted_twice() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("var/log")).unwrap();
        let log = d.path().join("var/log/kern.log");
        std::fs::write(&log, format!("boot noise\n{ENOMEM} a\nmore noise\n")).unwrap();
        let root = SysRoot::new(d.path());
        let p = rk_profile(&root);
        let mut c = LogCursors::default();
        let (logs, src) = probe_logs(&root, &p, &Discovered::default(), Some(&mut c), Some("b1"));
        // Only the evidence line is kept, and the file's read position is its length.
        assert_eq!(kernel_lines(&logs), vec![format!("{ENOMEM} a")]);
        assert_eq!(
            c.files["/var/log/kern.log"].offset,
            std::fs::metadata(&log).unwrap().len()
        );
        assert!(src.iter().any(|s| s.name == "/var/log/kern.log"
            && s.state == SourceState::Read
            && s.lines == 3));
        let (logs, src) = probe_logs(&root, &p, &Discovered::default(), Some(&mut c), Some("b1"));
        assert_eq!(kernel_lines(&logs).len(), 1);
        assert!(src
            .iter()
            .any(|s| s.name == "/var/log/kern.log" && s.lines == 0));
        // A new line, and a partial one that is not consumed until it is complete.
        let mut f = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
        use std::io::Write;
        write!(f, "{ENOMEM} b\n{ENOMEM} c").unwrap();
        let (logs, _) = probe_logs(&root, &p, &Discovered::default(), Some(&mut c), Some("b1"));
        assert_eq!(kernel_lines(&logs).len(), 2);
        writeln!(f).unwrap();
        // A restart: the cursors come back from their JSON.
        let mut c: LogCursors = serde_json::from_str(&serde_json::to_string(&c).unwrap()).unwrap();
        let (logs, _) = probe_logs(&root, &p, &Discovered::default(), Some(&mut c), Some("b1"));
        assert_eq!(
            kernel_lines(&logs),
            vec![
                format!("{ENOMEM} a"),
                format!("{ENOMEM} b"),
                format!("{ENOMEM} c")
            ]
        );
        // Rotation (a new inode): the new file is read from its start, the kept lines stay.
        std::fs::remove_file(&log).unwrap();
        std::fs::write(&log, format!("{ENOMEM} d\n")).unwrap();
        let (logs, _) = probe_logs(&root, &p, &Discovered::default(), Some(&mut c), Some("b1"));
        assert_eq!(kernel_lines(&logs).len(), 4);
        // Another boot starts afresh.
        let (logs, _) = probe_logs(&root, &p, &Discovered::default(), Some(&mut c), Some("b2"));
        assert_eq!(kernel_lines(&logs), vec![format!("{ENOMEM} d")]);
        assert_eq!(c.boot_id, "b2");
    }

    #[test]
    fn kept_lines_are_bounded_per_source() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("var/log")).unwrap();
        let text: String = (0..MAX_KEPT_PER_SOURCE + 10)
            .map(|i| format!("{ENOMEM} {i}\n"))
            .collect();
        std::fs::write(d.path().join("var/log/kern.log"), text).unwrap();
        let root = SysRoot::new(d.path());
        let p = rk_profile(&root);
        let mut c = LogCursors::default();
        let (logs, _) = probe_logs(&root, &p, &Discovered::default(), Some(&mut c), Some("b"));
        let k = kernel_lines(&logs);
        assert_eq!(k.len(), MAX_KEPT_PER_SOURCE);
        assert_eq!(
            k.last().unwrap(),
            &format!("{ENOMEM} {}", MAX_KEPT_PER_SOURCE + 9)
        );
    }

    #[test]
    fn live_page_size_is_the_kernels() {
        assert_eq!(
            page_size(&SysRoot::new("/")).bytes,
            rustix::param::page_size() as u64
        );
    }
}
