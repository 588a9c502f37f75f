//! Checks: pure functions `(profile, snapshot) -> findings`. Each check id of docs/user-guide.md "Checks"
//! yields at least one [`Finding`] on every run (`skip` with the reason when it does not apply or
//! its files are missing), so a report always covers every id.
//!
//! Log lines are classified once ([`LogIndex`]) by errno and status code, and the profile's
//! `[[signature]]` substrings are matched there too; a check raises its finding from log evidence
//! even when the workload is not running now.

mod board;
mod clock;
mod cma;
mod driver_probe;
mod hailo;
mod limits;
mod llm;
mod memory;
mod moe;
mod pi_platform;
mod power;
pub use memory::buddy_summary;
mod rknpu;
pub mod server;
mod sources;
pub mod stack;
pub use sources::{kernel_log_unavailable, KERNEL_LOG_CHECKS};
#[cfg(test)]
pub(crate) mod testkit;
mod thermal;
mod throughput;
mod unseen;
mod workload;

pub use crate::model::finding::{Evidence, Finding, Status, CHECK_IDS};
pub use crate::model::logs::LogHit;
use crate::model::{LogClass, Snapshot};
use crate::parse::logline::{classify, LogEvent};
use crate::profile::{NpuKind, Profile, Signature};
use std::collections::BTreeMap;

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
    /// How the NPU stack is installed (OS, driver, runtime) and the tools a remedy may name.
    pub stack: stack::Stack,
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
        stack: stack::Stack::derive(profile, snap),
    };
    let mut findings = vec![board::identity(&ctx)];
    findings.extend(for_family(&ctx, NpuKind::Hailo, hailo::all));
    findings.extend(for_family(&ctx, NpuKind::Rknpu, rknpu::all));
    findings.extend(limits::all(&ctx));
    findings.extend(cma::all(&ctx));
    findings.extend(memory::all(&ctx));
    findings.extend(server::all(&ctx));
    findings.push(sources::log_sources(&ctx));
    findings.push(clock::sync(&ctx));
    findings.push(power::power(&ctx));
    findings.push(thermal::thermal(&ctx));
    apply_signatures(&ctx, &mut findings);
    let w = workload::workload(&ctx, &mut findings);
    findings.extend(w);
    stack::fit_remedies(&ctx, &mut findings);
    sources::annotate_blind_checks(&ctx, &mut findings);
    findings.sort_by_key(|f| {
        CHECK_IDS
            .iter()
            .position(|id| *id == f.id)
            .unwrap_or(usize::MAX)
    });
    findings
}

/// Runs the checks of one NPU family with the profile as that family sees it: the board's own
/// NPU, or an accelerator of another family joined to it (a Hailo-8 on an RK3588 board's PCIe).
fn for_family(ctx: &Ctx<'_>, kind: NpuKind, checks: fn(&Ctx<'_>) -> Vec<Finding>) -> Vec<Finding> {
    match ctx.profile.for_npu(kind) {
        Some(std::borrow::Cow::Owned(p)) => {
            let sub = Ctx {
                profile: &p,
                snap: ctx.snap,
                logs: ctx.logs.clone(),
                reason: ctx.reason,
                fallback: ctx.fallback,
                stack: stack::Stack::derive(&p, ctx.snap),
            };
            checks(&sub)
        }
        _ => checks(ctx),
    }
}

/// The name of a Hailo chip by its PCI device id (`Hailo-10H`).
pub(crate) fn hailo_chip_name(device: u16) -> &'static str {
    hailo::chip_name(device)
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
