//! Findings: the check ids, a finding's status, its evidence and the finding itself — what a
//! check returns and what every report (status, text, Prometheus, Home Assistant) is made from.

use super::logs::LogHit;
use super::remedy::Remedy;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;

/// Every check id this agent reports (docs/user-guide.md "Checks"), in report order.
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
    "npu.workload",
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
    /// The remedy as steps the `fix` action can carry out; `remedy` is then its text.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub fix: Option<Remedy>,
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
            fix: None,
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

    /// Sets the remedy as steps; the printed remedy is made from them (with `sudo`; the stack's
    /// last pass renders it again for the board).
    pub fn with_fix(mut self, fix: Remedy) -> Self {
        self.remedy = fix.text(true);
        self.fix = Some(fix);
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
        // Every evidence line reaches the status: secrets in it never do.
        self.evidence.push(Evidence {
            file: file.to_string(),
            line,
            text: crate::sys::redact::redact_text(text)
                .chars()
                .take(300)
                .collect(),
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
