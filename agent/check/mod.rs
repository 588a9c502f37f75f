//! Checks: pure functions `(profile, snapshot) -> findings`. Each check id of README "Checks"
//! yields at least one [`Finding`] on every run (`skip` with the reason when it does not apply or
//! its files are missing), so a report always covers every id.
//!
//! Log lines are classified once ([`LogIndex`]) by errno and status code, and the profile's
//! `[[signature]]` substrings are matched there too; a check raises its finding from log evidence
//! even when the workload is not running now.

mod board;
pub mod clock;
mod cma;
mod hailo;
mod limits;
mod llm;
mod memory;
mod moe;
mod power;
pub use memory::buddy_summary;
mod rknpu;
mod sources;
pub use sources::{kernel_log_unavailable, KERNEL_LOG_CHECKS};
mod thermal;

use crate::parse::logline::{classify, LogEvent};
use crate::probe::{LogClass, Snapshot};
use crate::profile::{Profile, Signature};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;

/// Every check id this agent reports (README "Checks"), in report order.
pub const CHECK_IDS: &[&str] = &[
    "board.identity",
    "hailo.pci_device",
    "hailo.driver_binding",
    "hailo.stale_driver",
    "hailo.package_generation",
    "hailo.version_mismatch",
    "hailo.runtime_library",
    "hailo.firmware",
    "hailo.firmware_mismatch",
    "hailo.pcie_link",
    "hailo.device_degraded",
    "rknpu.driver_version",
    "rknpu.device_node",
    "limits.nofile",
    "limits.memlock",
    "cma.pool_size",
    "cma.free",
    "cma.boot_param",
    "reboot.pending",
    "memory.fragmentation",
    "memory.compaction",
    "memory.oom",
    "rknpu.runtime_library",
    "kernel.numa_balancing",
    "llm.override_tensor",
    "llm.vram_budget",
    "agent.log_sources",
    "clock.sync",
    "board.power",
    "board.thermal",
];

/// A finding's status. Severity order: `pass` = `skip` < `info` < `error` < `warn` < `fail`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Checked and fine.
    Pass,
    /// Not applicable here, or its inputs are missing (the summary says which).
    Skip,
    /// Worth knowing; nothing to fix.
    Info,
    /// A problem that does not stop the NPU now.
    Warn,
    /// The NPU stack or its memory is broken, or will be.
    Fail,
    /// The check could not run (unreadable or malformed input).
    Error,
}

impl Status {
    /// Rank for "most severe wins": pass/skip 0, info 1, error 2, warn 3, fail 4.
    pub fn severity(self) -> u8 {
        match self {
            Status::Pass | Status::Skip => 0,
            Status::Info => 1,
            Status::Error => 2,
            Status::Warn => 3,
            Status::Fail => 4,
        }
    }

    /// A check "fires" when its finding is `info`, `warn` or `fail`.
    pub fn fires(self) -> bool {
        matches!(self, Status::Info | Status::Warn | Status::Fail)
    }

    /// Lowercase name.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Pass => "pass",
            Status::Skip => "skip",
            Status::Info => "info",
            Status::Warn => "warn",
            Status::Fail => "fail",
            Status::Error => "error",
        }
    }
}

/// Where a finding's evidence comes from: a board file, a line number and the line's text.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Evidence {
    /// Board path (`/var/log/rkllm/llm_demo.log`).
    pub file: String,
    /// 1-based line, when the evidence is one line.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub line: Option<usize>,
    /// The line or value as read (cut to 300 characters).
    #[serde(skip_serializing_if = "String::is_empty", default)]
    pub text: String,
}

/// One check's verdict.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Finding {
    /// Check id (`cma.pool_size`).
    pub id: String,
    /// Verdict.
    pub status: Status,
    /// One line a person reads first.
    pub summary: String,
    /// What was found, units in the key (`cma_total_bytes`).
    #[serde(default)]
    pub observed: BTreeMap<String, Value>,
    /// What the profile expects, same keys where they compare.
    #[serde(default)]
    pub expected: BTreeMap<String, Value>,
    /// Commands or edits a person can paste; empty when there is nothing to do.
    #[serde(skip_serializing_if = "String::is_empty", default)]
    pub remedy: String,
    /// Files and lines the verdict rests on.
    #[serde(default)]
    pub evidence: Vec<Evidence>,
}

impl Finding {
    /// A finding with no observations yet.
    pub fn new(id: &str, status: Status, summary: impl Into<String>) -> Self {
        Finding::with_summary(id, status, summary.into())
    }

    // One copy of the constructor for every caller (the generic `new` only converts).
    #[inline(never)]
    fn with_summary(id: &str, status: Status, summary: String) -> Self {
        Finding {
            id: id.to_string(),
            status,
            summary,
            observed: BTreeMap::new(),
            expected: BTreeMap::new(),
            remedy: String::new(),
            evidence: Vec::new(),
        }
    }

    /// A `skip` with the reason.
    pub fn skip(id: &str, why: impl Into<String>) -> Self {
        Finding::new(id, Status::Skip, why)
    }

    /// Adds an observed value.
    pub fn observed(mut self, key: &str, v: impl Into<Value>) -> Self {
        put_value(&mut self.observed, key, v.into());
        self
    }

    /// Adds an expected value.
    pub fn expected(mut self, key: &str, v: impl Into<Value>) -> Self {
        put_value(&mut self.expected, key, v.into());
        self
    }

    /// Sets the remedy.
    pub fn remedy(self, r: impl Into<String>) -> Self {
        self.with_remedy(r.into())
    }

    #[inline(never)]
    fn with_remedy(mut self, r: String) -> Self {
        self.remedy = r;
        self
    }

    /// Adds evidence.
    pub fn evidence(mut self, file: &str, line: Option<usize>, text: &str) -> Self {
        self.push_evidence(file, line, text);
        self
    }

    /// Adds evidence in place (at most 8 items are kept).
    #[inline(never)]
    pub fn push_evidence(&mut self, file: &str, line: Option<usize>, text: &str) {
        if self.evidence.len() >= 8
            || self.evidence.iter().any(|e| {
                // Without a line number (kernel ring buffer, journal) the text tells lines apart.
                e.file == file && e.line == line && (line.is_some() || e.text == text)
            })
        {
            return;
        }
        self.evidence.push(Evidence {
            file: file.to_string(),
            line,
            text: text.chars().take(300).collect(),
        });
    }

    /// Adds log hits as evidence.
    pub fn with_hits<'a>(mut self, hits: impl IntoIterator<Item = &'a LogHit>) -> Self {
        for h in hits {
            self.push_evidence(&h.file, h.line_no(), &h.text);
        }
        self
    }

    /// Raises the status to `s` if `s` is more severe.
    pub fn raise(&mut self, s: Status) {
        if s.severity() > self.status.severity() {
            self.status = s;
        }
    }
}

// Not inlined: the checks add observed and expected values at more than a hundred places.
#[inline(never)]
fn put_value(map: &mut BTreeMap<String, Value>, key: &str, v: Value) {
    map.insert(key.to_string(), v);
}

/// One classified log line.
#[derive(Debug, Clone)]
pub struct LogHit {
    /// Board path of the log.
    pub file: String,
    /// 1-based line in the part read (the whole file unless `cut`).
    pub line: usize,
    /// The log was longer than the part read: `line` counts from the start of that part.
    pub cut: bool,
    /// The line.
    pub text: String,
    /// Which side wrote it.
    pub class: LogClass,
    /// Its events.
    pub events: Vec<LogEvent>,
}

impl LogHit {
    /// The line number in the file, when known (not for a log read from its tail only).
    pub fn line_no(&self) -> Option<usize> {
        (!self.cut).then_some(self.line)
    }
}

/// Classified lines of every log, and the profile signatures they matched.
#[derive(Debug, Clone, Default)]
pub struct LogIndex {
    /// Lines with at least one event.
    pub hits: Vec<LogHit>,
    /// (signature index in the profile, the line).
    pub signatures: Vec<(usize, LogHit)>,
}

impl LogIndex {
    /// Classifies every line of the snapshot's logs.
    pub fn build(snap: &Snapshot, signatures: &[Signature]) -> Self {
        let mut idx = LogIndex::default();
        // One searcher per signature, built once (not once per line). Signatures match without
        // regard to ASCII case: the kernel spells names its own way (`RKNPU`, `Hailo`).
        let lowered: Vec<String> = signatures
            .iter()
            .map(|s| s.contains.to_ascii_lowercase())
            .collect();
        let finders: Vec<memchr::memmem::Finder<'_>> = lowered
            .iter()
            .map(|s| memchr::memmem::Finder::new(s.as_bytes()))
            .collect();
        for log in &snap.logs {
            for (i, line) in log.lines.iter().enumerate() {
                let lower = if finders.is_empty() {
                    String::new()
                } else {
                    line.to_ascii_lowercase()
                };
                let events = classify(line);
                let hit = || LogHit {
                    file: log.path.clone(),
                    line: i + 1,
                    cut: log.cut,
                    text: line.clone(),
                    class: log.class,
                    events: events.clone(),
                };
                for (si, finder) in finders.iter().enumerate() {
                    if finder.find(lower.as_bytes()).is_some() {
                        idx.signatures.push((si, hit()));
                    }
                }
                if !events.is_empty() {
                    idx.hits.push(hit());
                }
            }
        }
        idx
    }

    /// Hits from logs of `class` (any class when `None`) with an event satisfying `pred`.
    pub fn find(
        &self,
        class: Option<LogClass>,
        pred: impl Fn(&LogEvent) -> bool,
    ) -> std::vec::IntoIter<(&LogHit, &LogEvent)> {
        self.find_dyn(Some(class), &pred)
    }

    /// Hits with an event satisfying `pred`: of `class` (`Some(None)` = any class), or host-side
    /// (not [`LogClass::Device`]) when `class` is `None`. One copy for every predicate.
    #[inline(never)]
    fn find_dyn(
        &self,
        class: Option<Option<LogClass>>,
        pred: &dyn Fn(&LogEvent) -> bool,
    ) -> std::vec::IntoIter<(&LogHit, &LogEvent)> {
        let mut out = Vec::new();
        for h in self.hits.iter().filter(|h| match class {
            Some(c) => c.is_none_or(|c| h.class == c),
            None => h.class != LogClass::Device,
        }) {
            for e in h.events.iter().filter(|e| pred(e)) {
                out.push((h, e));
            }
        }
        out.into_iter()
    }

    /// Host-side (kernel and workload) hits with an event satisfying `pred`.
    pub fn host(
        &self,
        pred: impl Fn(&LogEvent) -> bool,
    ) -> std::vec::IntoIter<(&LogHit, &LogEvent)> {
        self.find_dyn(None, &pred)
    }

    /// Host-side (kernel and workload) hits with what `pick` takes from their events, e.g. the
    /// version an `RknpuTooLow` line wants: `|e| match e { RknpuTooLow { wanted } =>
    /// Some(*wanted), _ => None }`. In log order.
    pub fn host_pick<T>(&self, pick: impl Fn(&LogEvent) -> Option<T>) -> Vec<(&LogHit, T)> {
        let mut out = Vec::new();
        for h in self.hits.iter().filter(|h| h.class != LogClass::Device) {
            out.extend(h.events.iter().filter_map(&pick).map(|t| (h, t)));
        }
        out
    }
}

/// Everything a check may read.
pub struct Ctx<'a> {
    /// The profile in force.
    pub profile: &'a Profile,
    /// The board's files.
    pub snap: &'a Snapshot,
    /// Classified logs.
    pub logs: LogIndex,
    /// Why this profile was chosen.
    pub reason: &'a str,
    /// True when no board profile matched (generic fallback).
    pub fallback: bool,
}

/// Runs every check and folds in the profile's log signatures. The result holds at least one
/// finding for every id in [`CHECK_IDS`], in that order.
pub fn run_all(profile: &Profile, snap: &Snapshot, reason: &str, fallback: bool) -> Vec<Finding> {
    let ctx = Ctx {
        profile,
        snap,
        logs: LogIndex::build(snap, &profile.signature),
        reason,
        fallback,
    };
    let mut findings = vec![board::identity(&ctx)];
    findings.extend(hailo::all(&ctx));
    findings.extend(rknpu::all(&ctx));
    findings.extend(limits::all(&ctx));
    findings.extend(cma::all(&ctx));
    findings.extend(memory::all(&ctx));
    findings.extend(llm::all(&ctx));
    findings.push(sources::log_sources(&ctx));
    findings.push(clock::sync(&ctx));
    findings.push(power::power(&ctx));
    findings.push(thermal::thermal(&ctx));
    apply_signatures(&ctx, &mut findings);
    sources::annotate_blind_checks(&ctx, &mut findings);
    crate::order::sort_by_key(&mut findings, |f| {
        CHECK_IDS
            .iter()
            .position(|id| *id == f.id)
            .unwrap_or(usize::MAX)
    });
    findings
}

fn apply_signatures(ctx: &Ctx<'_>, findings: &mut [Finding]) {
    for (si, hit) in &ctx.logs.signatures {
        let sig = &ctx.profile.signature[*si];
        let Some(f) = findings.iter_mut().find(|f| f.id == sig.check) else {
            continue;
        };
        if sig.status.severity() > f.status.severity() {
            f.status = sig.status;
            f.summary = sig.diagnosis.clone();
            f.remedy = sig.remedy.clone();
        }
        f.push_evidence(&hit.file, hit.line_no(), &hit.text);
    }
}

/// The most severe status per check id.
pub fn worst_by_id(findings: &[Finding]) -> BTreeMap<String, Status> {
    let mut out: BTreeMap<String, Status> = BTreeMap::new();
    for f in findings {
        let e = out.entry(f.id.clone()).or_insert(f.status);
        if f.status.severity() > e.severity() {
            *e = f.status;
        }
    }
    out
}

/// Formats bytes for summaries.
pub(crate) fn mib(bytes: u64) -> String {
    crate::parse::size::human_bytes(bytes)
}
