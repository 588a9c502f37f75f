//! Compaction on a temporary tree: the knobs get exactly `1`, before/after figures and counter
//! deltas are reported, refusals are sentences, and the run is recorded for the cooldown.

use super::util::{meminfo, Tree};
use npu_agent::action::compact::{
    render_compact_text, run_compaction, CompactOptions, CompactOutcome, Knobs, RootKnobs,
};
use npu_agent::action::state::{CompactState, StateDir, COMPACT_FILE};
use npu_agent::root::{ReadError, ReadErrorKind};

const BUDDY_BEFORE: &str = "Node 0, zone      DMA   900   400   100    20     4     1     0     0     0     0     0\nNode 0, zone   Normal  2000   500   100    20     5     1     0     0     0     0     0\n";
const BUDDY_AFTER: &str = "Node 0, zone      DMA   100    50    10     2     1     1     1     1     2     1     1\nNode 0, zone   Normal   200    50    10     2     1     1     1     1     3     2     4\n";
const VM_BEFORE: &str = "nr_free_pages 5000\ncompact_stall 7\ncompact_fail 5\ncompact_success 2\ncma_alloc_success 10\ncma_alloc_fail 3\n";
const VM_AFTER: &str = "nr_free_pages 5100\ncompact_stall 7\ncompact_fail 5\ncompact_success 2\ncompact_migrate_scanned 100\ncma_alloc_success 12\ncma_alloc_fail 3\n";

fn tree() -> Tree {
    let t = Tree::new();
    t.file("/proc/sys/vm/compact_memory", "")
        .file("/proc/sys/vm/drop_caches", "")
        .file("/proc/meminfo", meminfo(1 << 20, 262_144, 6_796))
        .file("/proc/buddyinfo", BUDDY_BEFORE)
        .file("/proc/vmstat", VM_BEFORE);
    t
}

/// Writes like the real knobs, and plays the kernel: writing compact_memory changes the figures.
struct FakeKernel<'a> {
    inner: RootKnobs,
    tree: &'a Tree,
    synced: bool,
    writes: Vec<(String, String)>,
}

impl Knobs for FakeKernel<'_> {
    fn sync(&mut self) {
        self.synced = true;
    }
    fn write(&mut self, board_path: &str, value: &str) -> Result<(), ReadError> {
        self.inner.write(board_path, value)?;
        self.writes
            .push((board_path.to_string(), value.to_string()));
        if board_path.ends_with("compact_memory") {
            self.tree
                .file("/proc/buddyinfo", BUDDY_AFTER)
                .file("/proc/vmstat", VM_AFTER)
                .file("/proc/meminfo", meminfo(1 << 20, 262_144, 200_000));
        }
        Ok(())
    }
}

#[test]
fn compaction_reports_before_after_and_records_the_run() {
    let t = tree();
    let root = t.root();
    let state = StateDir::default_for(&root);
    let mut k = FakeKernel {
        inner: RootKnobs::new(&root),
        tree: &t,
        synced: false,
        writes: Vec::new(),
    };
    let opts = CompactOptions {
        drop_caches: true,
        ..Default::default()
    };
    let r = run_compaction(&root, &mut k, &opts, &state, 1_700_000_000);
    assert_eq!(r.outcome, CompactOutcome::Done, "{}", r.reason);
    assert!(k.synced);
    // sync, then drop_caches=1 (never 3), then compact_memory=1, in that order.
    assert_eq!(
        k.writes,
        vec![
            ("/proc/sys/vm/drop_caches".to_string(), "1\n".to_string()),
            ("/proc/sys/vm/compact_memory".to_string(), "1\n".to_string())
        ]
    );
    assert_eq!(t.read("/proc/sys/vm/drop_caches"), "1\n");
    assert_eq!(
        r.steps.iter().map(|s| s.step.as_str()).collect::<Vec<_>>(),
        vec!["sync", "drop_caches", "compact_memory"]
    );
    assert_eq!(r.before.cma_free_bytes, Some(6_796 * 1024));
    let after = r.after.clone().unwrap();
    assert_eq!(after.cma_free_bytes, Some(200_000 * 1024));
    // Largest block: order 5 (128 KiB) before, order 10 (4 MiB) after.
    assert_eq!(r.before.largest_free_block_bytes, Some(128 << 10));
    assert_eq!(after.largest_free_block_bytes, Some(4 << 20));
    // Order >= 9 after: DMA 1*512+1*1024, Normal 2*512+4*1024 pages of 4 KiB.
    assert_eq!(r.before.free_high_order_bytes, Some(0));
    assert_eq!(
        after.free_high_order_bytes,
        Some((512 + 1024 + 1024 + 4096) * 4096)
    );
    assert_eq!(r.before.free_blocks_per_order[0], 2900);
    assert_eq!(r.counter_deltas.get("cma_alloc_success"), Some(&2));
    assert_eq!(r.counter_deltas.get("compact_stall"), Some(&0));
    assert!(
        !r.counter_deltas.contains_key("compact_migrate_scanned"),
        "only counters present before and after"
    );
    assert!(!r.counter_deltas.contains_key("nr_free_pages"));
    let st: CompactState = state.load(COMPACT_FILE).unwrap().unwrap();
    assert_eq!(st.last_run_unix_s, Some(1_700_000_000));
    assert_eq!(st.consecutive_attempts, 1);
    let text = render_compact_text(&r);
    assert!(text.starts_with("compaction done in "), "{text}");
    assert!(
        text.contains("CmaFree") && text.contains("6.6 MiB") && text.contains("195.3 MiB"),
        "{text}"
    );
    assert!(
        text.contains("cma_alloc_success") && text.contains("(+2)"),
        "{text}"
    );
    // A second run counts a second attempt.
    let r2 = run_compaction(
        &root,
        &mut RootKnobs::new(&root),
        &CompactOptions::default(),
        &state,
        1_700_000_100,
    );
    assert_eq!(r2.previous_run_unix_s, Some(1_700_000_000));
    assert_eq!(
        state
            .load::<CompactState>(COMPACT_FILE)
            .unwrap()
            .unwrap()
            .consecutive_attempts,
        2
    );
}

#[test]
fn without_drop_caches_the_cache_knob_is_not_touched() {
    let t = tree();
    let root = t.root();
    let r = run_compaction(
        &root,
        &mut RootKnobs::new(&root),
        &CompactOptions::default(),
        &StateDir::default_for(&root),
        1,
    );
    assert_eq!(r.outcome, CompactOutcome::Done);
    assert_eq!(t.read("/proc/sys/vm/drop_caches"), "");
    assert_eq!(t.read("/proc/sys/vm/compact_memory"), "1\n");
}

#[test]
fn missing_compact_memory_is_a_refusal_before_any_write() {
    let t = tree();
    std::fs::remove_file(t.host("/proc/sys/vm/compact_memory")).unwrap();
    let root = t.root();
    let opts = CompactOptions {
        drop_caches: true,
        ..Default::default()
    };
    let r = run_compaction(
        &root,
        &mut RootKnobs::new(&root),
        &opts,
        &StateDir::default_for(&root),
        1,
    );
    assert_eq!(r.outcome, CompactOutcome::Refused);
    assert!(r.reason.contains("no CONFIG_COMPACTION"), "{}", r.reason);
    // A board tree is not a kernel: the reason names the captured-tree case and the way out.
    assert!(
        r.reason.contains("does not exist in this tree")
            && r.reason
                .contains("create the empty file /proc/sys/vm/compact_memory"),
        "{}",
        r.reason
    );
    assert_eq!(
        t.read("/proc/sys/vm/drop_caches"),
        "",
        "caches are not dropped when compaction is impossible"
    );
    assert!(!t.exists("/var/lib/npu-agent"));
    assert!(render_compact_text(&r).starts_with("refused: "));
}

struct Denied;

impl Knobs for Denied {
    fn sync(&mut self) {}
    fn write(&mut self, board_path: &str, _value: &str) -> Result<(), ReadError> {
        Err(ReadError {
            path: board_path.into(),
            kind: ReadErrorKind::PermissionDenied,
            detail: String::new(),
        })
    }
}

#[test]
fn permission_denied_is_a_refusal() {
    let t = tree();
    let root = t.root();
    let r = run_compaction(
        &root,
        &mut Denied,
        &CompactOptions::default(),
        &StateDir::default_for(&root),
        1,
    );
    assert_eq!(r.outcome, CompactOutcome::Refused);
    assert!(
        r.reason
            .contains("permission denied writing /proc/sys/vm/compact_memory")
            && r.reason.contains("needs root"),
        "{}",
        r.reason
    );
    assert!(r.after.is_none());
    assert!(
        !t.exists("/var/lib/npu-agent/compact.json"),
        "a refused run is not recorded"
    );
}

#[test]
fn dry_run_writes_nothing_and_shows_the_figures() {
    let t = tree();
    let root = t.root();
    let opts = CompactOptions {
        dry_run: true,
        drop_caches: true,
        ..Default::default()
    };
    let r = run_compaction(&root, &mut Denied, &opts, &StateDir::default_for(&root), 1);
    assert_eq!(r.outcome, CompactOutcome::DryRun);
    assert_eq!(t.read("/proc/sys/vm/compact_memory"), "");
    let text = render_compact_text(&r);
    assert!(
        text.contains("dry run") && text.contains("drop_caches (page cache only)"),
        "{text}"
    );
    assert!(text.contains("largest free block"), "{text}");
}
