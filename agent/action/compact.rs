//! Memory compaction (the `compact` action; the kernel's `vm.compact_memory` sysctl): `sync`; with
//! `drop_caches`, write 1 to `/proc/sys/vm/drop_caches` (page cache only, never 3); write 1 to
//! `/proc/sys/vm/compact_memory`; measure `CmaFree`, `MemFree`, buddyinfo and the `compact_*` /
//! `cma_alloc_*` counters before and after, and the time it took.
//!
//! A missing `compact_memory` (no `CONFIG_COMPACTION`) or a missing permission is a refusal
//! with a sentence, not a crash. The kernel writes go through [`Knobs`] so tests can refuse
//! permission; [`RootKnobs`] writes under the [`SysRoot`].

use super::state::{CompactState, StateDir, COMPACT_FILE};
use crate::check::buddy_summary;
use crate::parse::size::human_bytes;
use crate::parse::{buddyinfo, meminfo, vmstat};
use crate::probe::read_parsed;
use crate::root::{ReadError, ReadErrorKind, SysRoot};
use serde::Serialize;
use std::collections::BTreeMap;
use std::time::Instant;

/// The knob that compacts all zones (exists only with `CONFIG_COMPACTION`).
pub const COMPACT_MEMORY: &str = "/proc/sys/vm/compact_memory";
/// The knob that drops clean caches; the agent only ever writes 1 (page cache).
pub const DROP_CACHES: &str = "/proc/sys/vm/drop_caches";
/// Buddy order counted as "large" in the report (9 = 2 MiB blocks with 4 KiB pages).
pub const DEFAULT_HIGH_ORDER: usize = 9;

/// Kernel side effects of a compaction.
pub trait Knobs {
    /// Flushes dirty data of every filesystem (`sync(2)`).
    fn sync(&mut self);
    /// Writes `value` to the existing knob `board_path`.
    ///
    /// Errors: the classified [`ReadError`] (`NotFound`, `PermissionDenied`, `Io`).
    fn write(&mut self, board_path: &str, value: &str) -> Result<(), ReadError>;
}

/// [`Knobs`] that call `sync(2)` and write under a [`SysRoot`].
#[derive(Debug, Clone)]
pub struct RootKnobs {
    root: SysRoot,
}

impl RootKnobs {
    /// Knobs under `root`.
    pub fn new(root: &SysRoot) -> Self {
        RootKnobs { root: root.clone() }
    }
}

impl Knobs for RootKnobs {
    fn sync(&mut self) {
        rustix::fs::sync();
    }
    fn write(&mut self, board_path: &str, value: &str) -> Result<(), ReadError> {
        self.root.write_existing(board_path, value.as_bytes())
    }
}

/// Memory figures at one moment (all bytes; `None` when the file or field is missing).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct MemFigures {
    /// `/proc/meminfo` `CmaFree`.
    pub cma_free_bytes: Option<u64>,
    /// `/proc/meminfo` `MemFree`.
    pub mem_free_bytes: Option<u64>,
    /// Largest free block over all zones (`/proc/buddyinfo`).
    pub largest_free_block_bytes: Option<u64>,
    /// Free memory in blocks of order >= the report's high order (`/proc/buddyinfo`).
    pub free_high_order_bytes: Option<u64>,
    /// Free blocks per order, summed over zones (`/proc/buddyinfo`), order 0 first.
    pub free_blocks_per_order: Vec<u64>,
    /// `/proc/vmstat` counters whose name starts with `compact_` or `cma_alloc_`.
    pub counters: BTreeMap<String, u64>,
}

/// Reads [`MemFigures`] from `/proc/meminfo`, `/proc/buddyinfo` and `/proc/vmstat` under
/// `root`; `high_order` is the buddy order that counts as large. Missing files leave fields
/// `None`/empty.
pub fn read_figures(root: &SysRoot, high_order: usize) -> MemFigures {
    let mut f = MemFigures::default();
    if let Ok(m) = read_parsed(root, "/proc/meminfo", meminfo::parse_meminfo) {
        f.cma_free_bytes = m.cma_free_bytes;
        f.mem_free_bytes = m.mem_free_bytes;
    }
    if let Ok(zones) = read_parsed(root, "/proc/buddyinfo", buddyinfo::parse_buddyinfo) {
        let page = crate::probe::evidence::page_size(root);
        let (_, high, largest) = buddy_summary(&zones, high_order, page.bytes);
        f.largest_free_block_bytes = Some(largest);
        f.free_high_order_bytes = Some(high);
        let orders = zones.iter().map(|z| z.free_blocks.len()).max().unwrap_or(0);
        f.free_blocks_per_order = (0..orders)
            .map(|k| {
                zones
                    .iter()
                    .map(|z| z.free_blocks.get(k).copied().unwrap_or(0))
                    .fold(0, u64::saturating_add)
            })
            .collect();
    }
    if let Ok(v) = read_parsed(root, "/proc/vmstat", vmstat::parse_vmstat) {
        f.counters = std::collections::BTreeMap::from_iter(
            v.into_iter()
                .filter(|(k, _)| k.starts_with("compact_") || k.starts_with("cma_alloc_")),
        );
    }
    f
}

/// What to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompactOptions {
    /// Also write 1 to `drop_caches` (page cache) before compacting.
    pub drop_caches: bool,
    /// Only report what would be done and the current figures; write nothing.
    pub dry_run: bool,
    /// Buddy order that counts as large in the report.
    pub high_order: usize,
    /// Who asked (`cli`, `planner`, `command`); stored in the state file.
    pub trigger: String,
}

impl Default for CompactOptions {
    fn default() -> Self {
        CompactOptions {
            drop_caches: false,
            dry_run: false,
            high_order: DEFAULT_HIGH_ORDER,
            trigger: "cli".into(),
        }
    }
}

/// How a compaction ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CompactOutcome {
    /// Compaction ran.
    Done,
    /// `--dry-run`: nothing was written.
    DryRun,
    /// Not attempted: no `compact_memory`, or no permission.
    Refused,
    /// A write failed for another reason.
    Failed,
}

/// Time one step took.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StepTime {
    /// `sync`, `drop_caches`, `compact_memory`.
    pub step: String,
    /// Milliseconds.
    pub ms: u64,
}

/// The result of [`run_compaction`], with before/after figures.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CompactReport {
    /// How it ended.
    pub outcome: CompactOutcome,
    /// Why it was refused or failed (empty when done).
    pub reason: String,
    /// Whether the page cache was (or would be) dropped.
    pub drop_caches: bool,
    /// Buddy order used for `free_high_order_bytes`.
    pub high_order: usize,
    /// Figures before.
    pub before: MemFigures,
    /// Figures after (only when done).
    pub after: Option<MemFigures>,
    /// `after - before` of each `compact_*` / `cma_alloc_*` counter present in both.
    pub counter_deltas: BTreeMap<String, i64>,
    /// Time of each step.
    pub steps: Vec<StepTime>,
    /// Total time of the side effects (milliseconds).
    pub duration_ms: u64,
    /// Things worth knowing (state not saved, `drop_caches` missing).
    pub warnings: Vec<String>,
    /// When the previous compaction ran (seconds since the epoch), from the state file.
    pub previous_run_unix_s: Option<i64>,
}

fn refusal(e: &ReadError, what: &str, live: bool) -> (CompactOutcome, String) {
    match e.kind {
        ReadErrorKind::NotFound if what == COMPACT_MEMORY && live => (
            CompactOutcome::Refused,
            format!("{COMPACT_MEMORY} does not exist: this kernel has no CONFIG_COMPACTION, so memory cannot be compacted on demand"),
        ),
        // A board tree (`--root`) made by `capture` never holds the knob: say so, and how to
        // rehearse a compaction on a copy, instead of only blaming the board's kernel.
        ReadErrorKind::NotFound if what == COMPACT_MEMORY => (
            CompactOutcome::Refused,
            format!("{COMPACT_MEMORY} does not exist in this tree: either the board's kernel has no CONFIG_COMPACTION, or the tree was captured (capture does not copy the knob); to try a compaction on a copy, create the empty file {COMPACT_MEMORY} in it"),
        ),
        ReadErrorKind::NotFound => (CompactOutcome::Refused, format!("{what} does not exist")),
        ReadErrorKind::PermissionDenied => (
            CompactOutcome::Refused,
            format!("permission denied writing {what}: compaction needs root (sudo npu-agent compact)"),
        ),
        ReadErrorKind::OutsideRoot => (
            CompactOutcome::Refused,
            format!("{what} is not written: {}", e.detail),
        ),
        _ => (CompactOutcome::Failed, format!("writing {what} failed: {e}")),
    }
}

fn ms(since: Instant) -> u64 {
    since.elapsed().as_millis().min(u128::from(u64::MAX)) as u64
}

/// Runs a compaction on the board under `root` and reports before/after figures. Reads
/// `/proc/meminfo`, `/proc/buddyinfo`, `/proc/vmstat`; writes `drop_caches` (only with
/// `opts.drop_caches`, value 1) and `compact_memory` through `knobs`; records the run in
/// `compact.json` in `state` (`now_unix_s`: seconds since the epoch).
///
/// Never fails: a refusal (no `compact_memory`, no permission, not root on a live system) or a
/// failed write is in the report's `outcome` and `reason`.
pub fn run_compaction(
    root: &SysRoot,
    knobs: &mut dyn Knobs,
    opts: &CompactOptions,
    state: &StateDir,
    now_unix_s: i64,
) -> CompactReport {
    let previous: Option<CompactState> = state.load(COMPACT_FILE).ok().flatten();
    let mut report = CompactReport {
        outcome: CompactOutcome::Done,
        reason: String::new(),
        drop_caches: opts.drop_caches,
        high_order: opts.high_order,
        before: read_figures(root, opts.high_order),
        after: None,
        counter_deltas: BTreeMap::new(),
        steps: Vec::new(),
        duration_ms: 0,
        warnings: Vec::new(),
        previous_run_unix_s: previous.as_ref().and_then(|p| p.last_run_unix_s),
    };
    if !root.exists(COMPACT_MEMORY) {
        let e = ReadError {
            path: COMPACT_MEMORY.into(),
            kind: ReadErrorKind::NotFound,
            detail: String::new(),
        };
        (report.outcome, report.reason) = refusal(&e, COMPACT_MEMORY, root.is_live());
        return report;
    }
    if opts.drop_caches && !root.exists(DROP_CACHES) {
        report.warnings.push(format!(
            "{DROP_CACHES} does not exist; the page cache is not dropped"
        ));
    }
    if opts.dry_run {
        report.outcome = CompactOutcome::DryRun;
        return report;
    }
    if root.is_live() && !rustix::process::geteuid().is_root() {
        report.outcome = CompactOutcome::Refused;
        report.reason =
            format!("compaction writes {COMPACT_MEMORY}, which needs root: run it with sudo");
        return report;
    }
    let start = Instant::now();
    let t = Instant::now();
    knobs.sync();
    report.steps.push(StepTime {
        step: "sync".into(),
        ms: ms(t),
    });
    if opts.drop_caches && root.exists(DROP_CACHES) {
        let t = Instant::now();
        if let Err(e) = knobs.write(DROP_CACHES, "1\n") {
            (report.outcome, report.reason) = refusal(&e, DROP_CACHES, root.is_live());
            report.duration_ms = ms(start);
            return report;
        }
        report.steps.push(StepTime {
            step: "drop_caches".into(),
            ms: ms(t),
        });
    }
    let t = Instant::now();
    if let Err(e) = knobs.write(COMPACT_MEMORY, "1\n") {
        (report.outcome, report.reason) = refusal(&e, COMPACT_MEMORY, root.is_live());
        report.duration_ms = ms(start);
        return report;
    }
    report.steps.push(StepTime {
        step: "compact_memory".into(),
        ms: ms(t),
    });
    report.duration_ms = ms(start);
    let after = read_figures(root, opts.high_order);
    report.counter_deltas =
        std::collections::BTreeMap::from_iter(after.counters.iter().filter_map(|(k, a)| {
            report
                .before
                .counters
                .get(k)
                .map(|b| (k.clone(), (*a as i64).wrapping_sub(*b as i64)))
        }));
    report.after = Some(after);
    let next = CompactState {
        schema: 1,
        last_run_unix_s: Some(now_unix_s),
        consecutive_attempts: previous
            .map(|p| p.consecutive_attempts)
            .unwrap_or(0)
            .saturating_add(1),
        last_duration_ms: Some(report.duration_ms),
        last_trigger: opts.trigger.clone(),
    };
    if let Err(e) = state.save(COMPACT_FILE, &next) {
        report.warnings.push(format!(
            "the run was not recorded ({e}); the planner's cooldown will not see it"
        ));
    }
    report
}

fn opt_bytes(v: Option<u64>) -> String {
    v.map(human_bytes).unwrap_or_else(|| "-".into())
}

fn change(before: Option<u64>, after: Option<u64>) -> String {
    match (before, after) {
        (Some(b), Some(a)) if a >= b => format!("+{}", human_bytes(a - b)),
        (Some(b), Some(a)) => format!("-{}", human_bytes(b - a)),
        _ => "-".into(),
    }
}

/// The report as text for people: outcome, timing, a before/after table, counter deltas.
pub fn render_compact_text(r: &CompactReport) -> String {
    let mut out = String::new();
    let secs = |ms: u64| format!("{:.2} s", ms as f64 / 1000.0);
    match r.outcome {
        CompactOutcome::Done => {
            let steps: Vec<String> = r
                .steps
                .iter()
                .map(|s| format!("{} {}", s.step, secs(s.ms)))
                .collect();
            out.push_str(&format!(
                "compaction done in {} ({})\n",
                secs(r.duration_ms),
                steps.join(", ")
            ));
        }
        CompactOutcome::DryRun => {
            out.push_str(&format!(
                "dry run: would run sync{}, then write 1 to {COMPACT_MEMORY}; nothing was written\n",
                if r.drop_caches { format!(", write 1 to {DROP_CACHES} (page cache only)") } else { String::new() }
            ));
        }
        CompactOutcome::Refused => out.push_str(&format!("refused: {}\n", r.reason)),
        CompactOutcome::Failed => out.push_str(&format!("failed: {}\n", r.reason)),
    }
    for w in &r.warnings {
        out.push_str(&format!("warning: {w}\n"));
    }
    let after = r.after.clone().unwrap_or_default();
    let has_after = r.after.is_some();
    out.push_str(&format!("\n{:<28} {:>12}", "", "before"));
    if has_after {
        out.push_str(&format!(" {:>12} {:>12}", "after", "change"));
    }
    out.push('\n');
    let high = format!("free at order >= {}", r.high_order);
    let rows: [(&str, Option<u64>, Option<u64>); 4] = [
        ("CmaFree", r.before.cma_free_bytes, after.cma_free_bytes),
        ("MemFree", r.before.mem_free_bytes, after.mem_free_bytes),
        (
            "largest free block",
            r.before.largest_free_block_bytes,
            after.largest_free_block_bytes,
        ),
        (
            &high,
            r.before.free_high_order_bytes,
            after.free_high_order_bytes,
        ),
    ];
    for (name, b, a) in rows {
        out.push_str(&format!("{name:<28} {:>12}", opt_bytes(b)));
        if has_after {
            out.push_str(&format!(" {:>12} {:>12}", opt_bytes(a), change(b, a)));
        }
        out.push('\n');
    }
    if !r.before.free_blocks_per_order.is_empty() {
        out.push_str(&format!(
            "free blocks per order before: {:?}\n",
            r.before.free_blocks_per_order
        ));
        if has_after {
            out.push_str(&format!(
                "free blocks per order after:  {:?}\n",
                after.free_blocks_per_order
            ));
        }
    }
    if has_after && !r.counter_deltas.is_empty() {
        out.push_str("\ncounters (/proc/vmstat)\n");
        for (k, d) in &r.counter_deltas {
            let b = r.before.counters.get(k).copied().unwrap_or(0);
            let a = after.counters.get(k).copied().unwrap_or(0);
            out.push_str(&format!("  {k:<32} {b:>12} -> {a:>12} ({d:+})\n"));
        }
    }
    out
}
