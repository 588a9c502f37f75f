//! The reboot state machine with real processes that do not reboot anything (`true`, `false`,
//! `sleep 5` with a 1 s timeout) and state files in a temporary root; `boot_id` changed or not.

use super::util::Tree;
use npu_agent::action::reboot::{
    reconcile_state, request_reboot, CommandRunner, ProcessRunner, RebootPhase, RebootProgress,
    RebootRefusal, RebootResult, RebootState, ReconcileWhen, RunOutcome, REBOOT_FILE,
};
use npu_agent::action::state::StateDir;
use npu_agent::action::ActionConfig;
use std::time::{Duration, Instant};

const BOOT_A: &str = "aaaaaaaa-0000-0000-0000-000000000001";
const BOOT_B: &str = "bbbbbbbb-0000-0000-0000-000000000002";

fn tree() -> Tree {
    let t = Tree::new();
    t.file("/proc/sys/kernel/random/boot_id", format!("{BOOT_A}\n"));
    t
}

fn config(cmd: &[&str], timeout_s: u64) -> ActionConfig {
    ActionConfig {
        allow_reboot: true,
        reboot_command: cmd.iter().map(|s| s.to_string()).collect(),
        reboot_timeout_s: timeout_s,
        ..Default::default()
    }
}

fn saved(t: &Tree) -> RebootState {
    StateDir::default_for(&t.root())
        .load(REBOOT_FILE)
        .unwrap()
        .unwrap()
}

#[test]
fn command_true_then_boot_id_changes_is_successful() {
    let t = tree();
    let state = StateDir::default_for(&t.root());
    let p = request_reboot(
        &state,
        &config(&["true"], 10),
        &mut ProcessRunner,
        "cmd-1",
        "cma edit",
        1000,
    );
    let RebootProgress::Pending(intent) = p else {
        panic!("{p:?}")
    };
    assert_eq!(intent.boot_id, BOOT_A);
    assert_eq!(intent.phase, RebootPhase::CommandReturned);
    assert_eq!(saved(&t).pending, Some(intent));
    // The board came back with a new boot_id.
    t.file("/proc/sys/kernel/random/boot_id", format!("{BOOT_B}\n"));
    let r = reconcile_state(&state, &ActionConfig::default(), 1100, ReconcileWhen::Start)
        .unwrap()
        .unwrap();
    assert_eq!(r.result, RebootResult::Successful);
    assert_eq!(r.cmd_id, "cmd-1");
    assert!(
        r.detail.contains(BOOT_A) && r.detail.contains(BOOT_B),
        "{}",
        r.detail
    );
    let s = saved(&t);
    assert!(s.pending.is_none());
    assert_eq!(s.history.len(), 1);
    // Reconciling again finds nothing to do.
    assert!(
        reconcile_state(&state, &ActionConfig::default(), 1200, ReconcileWhen::Start)
            .unwrap()
            .is_none()
    );
}

#[test]
fn same_boot_id_after_restart_is_failed_with_the_reason() {
    let t = tree();
    let state = StateDir::default_for(&t.root());
    assert!(matches!(
        request_reboot(
            &state,
            &config(&["true"], 10),
            &mut ProcessRunner,
            "cmd-2",
            "test",
            1000
        ),
        RebootProgress::Pending(_)
    ));
    // While running, within the timeout: still pending.
    assert!(reconcile_state(
        &state,
        &config(&["true"], 120),
        1060,
        ReconcileWhen::Periodic
    )
    .unwrap()
    .is_none());
    let r = reconcile_state(&state, &ActionConfig::default(), 1100, ReconcileWhen::Start)
        .unwrap()
        .unwrap();
    assert_eq!(r.result, RebootResult::Failed);
    assert_eq!(r.detail, format!("the agent restarted but the board did not reboot (boot_id {BOOT_A} unchanged after 100 s)"));
    assert!(saved(&t).pending.is_none());
}

#[test]
fn timeout_kills_the_command_and_fails() {
    let t = tree();
    let state = StateDir::default_for(&t.root());
    let start = Instant::now();
    let p = request_reboot(
        &state,
        &config(&["sleep", "5"], 1),
        &mut ProcessRunner,
        "cmd-3",
        "test",
        1000,
    );
    assert!(
        start.elapsed() < Duration::from_secs(4),
        "the command was not cut at the timeout"
    );
    let RebootProgress::Failed(r) = p else {
        panic!("{p:?}")
    };
    assert_eq!(r.result, RebootResult::Failed);
    assert_eq!(
        r.detail,
        "the reboot command `sleep 5` did not finish within 1 s and was killed"
    );
    let s = saved(&t);
    assert!(s.pending.is_none());
    assert_eq!(s.history, vec![r]);
}

#[test]
fn failing_and_missing_commands_fail() {
    let t = tree();
    let state = StateDir::default_for(&t.root());
    let mut c = config(&["false"], 10);
    c.reboot_min_interval_s = 0;
    let RebootProgress::Failed(r) =
        request_reboot(&state, &c, &mut ProcessRunner, "cmd-4", "test", 1000)
    else {
        panic!()
    };
    assert_eq!(r.detail, "the reboot command `false` exited with status 1");
    c.reboot_command = vec!["/nonexistent/reboot-command".into()];
    let RebootProgress::Failed(r) =
        request_reboot(&state, &c, &mut ProcessRunner, "cmd-5", "test", 1001)
    else {
        panic!()
    };
    assert!(
        r.detail
            .starts_with("the reboot command could not be started: /nonexistent/reboot-command"),
        "{}",
        r.detail
    );
    assert_eq!(saved(&t).history.len(), 2);
}

#[test]
fn refusals_persist_nothing_and_run_nothing() {
    let t = tree();
    let state = StateDir::default_for(&t.root());
    let p = request_reboot(
        &state,
        &ActionConfig::default(),
        &mut ProcessRunner,
        "cmd-6",
        "test",
        1000,
    );
    assert!(
        matches!(p, RebootProgress::Refused(RebootRefusal::NotAllowed)),
        "{p:?}"
    );
    assert!(!t.exists("/var/lib/npu-agent/reboot.json"));
    // Rate limit: a failed attempt 100 s ago blocks the next for reboot_min_interval_s.
    let c = config(&["false"], 10);
    assert!(matches!(
        request_reboot(&state, &c, &mut ProcessRunner, "cmd-7", "test", 1000),
        RebootProgress::Failed(_)
    ));
    let p = request_reboot(&state, &c, &mut ProcessRunner, "cmd-8", "test", 1100);
    assert_eq!(
        p,
        RebootProgress::Refused(RebootRefusal::RateLimited {
            since_s: 100,
            // The one reboot interval (README: reboot 300 s).
            wait_s: npu_agent::action::limits::REBOOT_RATE_LIMIT_S as i64 - 100
        })
    );
    // No boot_id: the result could not be verified, so no reboot.
    let t2 = Tree::new();
    let p = request_reboot(
        &StateDir::default_for(&t2.root()),
        &c,
        &mut ProcessRunner,
        "cmd-9",
        "test",
        1000,
    );
    assert_eq!(p, RebootProgress::Refused(RebootRefusal::NoBootId));
}

/// Looks at the state file while the "reboot command" runs.
struct Inspect<'a> {
    tree: &'a Tree,
    seen: Option<RebootState>,
    synced_before_run: bool,
    synced: bool,
}

impl CommandRunner for Inspect<'_> {
    fn sync(&mut self) {
        self.synced = true;
    }
    fn run(&mut self, argv: &[String], timeout: Duration) -> RunOutcome {
        assert_eq!(argv, ["systemctl", "reboot"]);
        assert_eq!(timeout, Duration::from_secs(120));
        self.synced_before_run = self.synced;
        self.seen = Some(saved(self.tree));
        RunOutcome::Signalled
    }
}

#[test]
fn intent_is_persisted_and_synced_before_the_command_runs() {
    let t = tree();
    let state = StateDir::default_for(&t.root());
    let c = ActionConfig {
        allow_reboot: true,
        ..Default::default()
    };
    let mut r = Inspect {
        tree: &t,
        seen: None,
        synced_before_run: false,
        synced: false,
    };
    let p = request_reboot(&state, &c, &mut r, "cmd-10", "operator asked", 1000);
    let seen = r.seen.expect("command ran");
    let intent = seen.pending.expect("intent on disk while the command runs");
    assert_eq!(
        (
            intent.cmd_id.as_str(),
            intent.boot_id.as_str(),
            intent.phase
        ),
        ("cmd-10", BOOT_A, RebootPhase::Requested)
    );
    assert!(r.synced_before_run);
    // Killed by a signal (the reboot killing its caller) is not a failure.
    assert!(matches!(p, RebootProgress::Pending(_)), "{p:?}");
    let again = request_reboot(&state, &c, &mut ProcessRunner, "cmd-11", "test", 5000);
    assert_eq!(
        again,
        RebootProgress::Refused(RebootRefusal::AlreadyPending("cmd-10".into()))
    );
}
