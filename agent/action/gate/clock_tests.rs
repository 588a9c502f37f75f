//! The gate's clock: an unsynchronised clock holds destructive commands, the `clock.sync`
//! hook refuses signed ones, and a wall clock stepped ahead and back prunes no id early — each
//! judged by the readings passed with the message ([`MessageContext`]).

use super::tests::*;
use super::*;

#[test]
fn an_unsynchronised_clock_holds_expiring_destructive_commands_first() {
    use crate::model::ClockSync;
    let mut g = gate();
    let unsynced = ClockSync::NotSynchronised {
        why: "no time server yet".into(),
        file: "/run/systemd/timesync".into(),
    };
    // Issued 120 s ahead of the board's clock: the hold says which clock looks off.
    let b = signed(
        "set_cma",
        "c1",
        serde_json::json!({"size": "256M"}),
        NOW + 120,
    );
    let c1 = topic("b1", "set_cma", "c1");
    match admit_read(&mut g, &c1, &b, NOW, None, Some(unsynced)) {
        Admission::ClockHeld { cmd, reason } => {
            assert_eq!(cmd.cmd_id, "c1");
            assert!(
                reason.starts_with("board clock not synchronised"),
                "{reason}"
            );
            assert!(reason.contains("120 s in the future"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    // Not destructive: judged by the gate as usual.
    let r = signed("rescan", "r1", serde_json::json!({}), NOW);
    assert!(!matches!(
        admit(&mut g, &topic("b1", "rescan", "r1"), &r, NOW),
        Admission::ClockHeld { .. }
    ));
    let synced = ClockSync::Synchronised {
        source: "systemd-timesyncd".into(),
        file: "/run/systemd/timesync/synchronized".into(),
    };
    let b = signed("set_cma", "c2", serde_json::json!({"size": "256M"}), NOW);
    let c2 = topic("b1", "set_cma", "c2");
    assert!(matches!(
        admit_read(&mut g, &c2, &b, NOW, None, Some(synced)),
        Admission::Queued(_)
    ));
}

#[test]
fn clock_hook_refuses_signed_commands() {
    let mut g = gate();
    g.set_clock(ClockState::Unsynchronised);
    let b = signed("set_cma", "c1", serde_json::json!({"size": "256M"}), NOW);
    assert!(rejected(admit(&mut g, &topic("b1", "set_cma", "c1"), &b, NOW)).contains("clock"));
    g.set_clock(ClockState::Synchronised);
    assert!(matches!(
        admit(&mut g, &topic("b1", "set_cma", "c1"), &b, NOW),
        Admission::Queued(_)
    ));
}

/// Issue 26 item 3: the wall clock stepped a day ahead and back. The ids are pruned by a time
/// that never runs ahead of the monotonic clock, so the captured signed command is a replay when
/// the clock is right again; and the rate limit recorded by the clock that was ahead holds one
/// window, not the size of the step.
#[test]
fn a_clock_stepped_ahead_and_back_neither_prunes_ids_nor_sticks_rate_limits() {
    let mut g = gate();
    let b = signed("set_cma", "c1", serde_json::json!({"size": "256M"}), NOW);
    let t = topic("b1", "set_cma", "c1");
    assert!(matches!(
        admit_read(&mut g, &t, &b, NOW, Some(1000), None),
        Admission::Queued(Some(_))
    ));
    assert_eq!(run_all(&mut g).len(), 1);
    // A day ahead, five real seconds later: a compact runs and would prune by that clock.
    let day = 86_400;
    let compact = bytes(&init("b1", serde_json::json!({}), NOW + day));
    let k1 = topic("b1", "compact", "k1");
    assert!(matches!(
        admit_read(&mut g, &k1, &compact, NOW + day, Some(1005), None),
        Admission::Queued(Some(_))
    ));
    assert_eq!(run_all(&mut g).len(), 1);
    // Set right: the captured set_cma is still known.
    assert!(matches!(
        admit_read(&mut g, &t, &b, NOW + 10, Some(1010), None),
        Admission::Answered { .. }
    ));
    // The compact recorded a day ahead: limited for one window, not for a day.
    let again = bytes(&init("b1", serde_json::json!({}), NOW + 11));
    let why = rejected(admit(
        &mut g,
        &topic("b1", "compact", "k2"),
        &again,
        NOW + 11,
    ));
    assert!(why.contains("retry in 29 s"), "{why}");
    let later = bytes(&init("b1", serde_json::json!({}), NOW + 42));
    assert!(matches!(
        admit(&mut g, &topic("b1", "compact", "k3"), &later, NOW + 42),
        Admission::Queued(Some(_))
    ));
}
