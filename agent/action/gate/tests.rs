use super::*;
use crate::mqtt::command::SigningKey;
use crate::mqtt::command::{sign, InitMessage};
use crate::mqtt::incoming::Incoming;
use crate::mqtt::topics::CommandTopic;
use serde_json::Value;

pub(super) fn key() -> SigningKey {
    SigningKey::from_bytes(&[7u8; 32])
}

pub(crate) fn policy() -> Policy {
    Policy {
        board: "b1".into(),
        trusted_keys: vec![key().verifying_key()],
        allow_unsigned: vec![ActionKind::Compact, ActionKind::Rescan],
        max_command_age_s: 300,
        topic_root: "npu-fleet".into(),
        accept_v1: false,
        refused: BTreeMap::new(),
    }
}

/// The wire names of `kinds`, for comparing with the documented lists.
pub(super) fn names(kinds: Vec<ActionKind>) -> Vec<&'static str> {
    kinds.into_iter().map(ActionKind::as_str).collect()
}

/// Admits `payload` on `t` at `now` as the daemon does: live, no new clock reading.
pub(super) fn admit(g: &mut Gate, t: &CommandTopic, payload: &[u8], now: i64) -> Admission {
    admit_read(g, t, payload, now, None, None)
}

/// [`admit`] with the clock readings the daemon passes with a message.
pub(super) fn admit_read(
    g: &mut Gate,
    t: &CommandTopic,
    payload: &[u8],
    now: i64,
    mono_s: Option<u64>,
    clock: Option<crate::model::ClockSync>,
) -> Admission {
    let m = Incoming::new(t.clone(), payload, false);
    g.admit_command(&m, &MessageContext { now, mono_s, clock })
}

pub(super) fn topic(board: &str, action: &str, id: &str) -> CommandTopic {
    CommandTopic::new(board, action, id)
}

pub(super) fn init(board: &str, args: Value, now: i64) -> InitMessage {
    InitMessage {
        status: CmdStatus::Init,
        board: board.into(),
        args: args.as_object().cloned().unwrap_or_default(),
        issued_at: now,
        expires_at: now + 60,
        signature: None,
    }
}

pub(super) fn signed(action: &str, id: &str, args: Value, now: i64) -> Vec<u8> {
    let mut m = init("b1", args, now);
    sign(&key(), "npu-fleet", action, id, &mut m);
    serde_json::to_vec(&m).unwrap()
}

pub(super) fn bytes(m: &InitMessage) -> Vec<u8> {
    serde_json::to_vec(m).unwrap()
}

pub(super) const NOW: i64 = 1_764_400_000;

pub(super) fn gate() -> Gate {
    Gate::new(policy(), None, 600)
}

pub(super) fn rejected(a: Admission) -> String {
    match a {
        Admission::Rejected { reason, .. } => reason,
        other => panic!("expected a rejection, got {other:?}"),
    }
}

pub(super) fn run_all(g: &mut Gate) -> Vec<Job> {
    let mut out = Vec::new();
    while let Some(j) = g.next_job() {
        g.finish(
            &j,
            &Outcome {
                ok: true,
                ran: true,
                detail: "done".into(),
                pending: j.action.kind().answered_after_restart(),
            },
        );
        out.push(j);
    }
    out
}

#[test]
fn signed_set_cma_executes_once_and_replay_keeps_the_record() {
    let mut g = gate();
    let b = signed("set_cma", "c1", serde_json::json!({"size": "256M"}), NOW);
    let t = topic("b1", "set_cma", "c1");
    assert!(matches!(
        admit(&mut g, &t, &b, NOW),
        Admission::Queued(Some(_))
    ));
    assert_eq!(run_all(&mut g).len(), 1);
    match admit(&mut g, &t, &b, NOW + 1) {
        Admission::Answered { cmd, record } => {
            assert_eq!(
                (cmd.action.as_str(), cmd.cmd_id.as_str()),
                ("set_cma", "c1")
            );
            assert_eq!(record.status, CmdStatus::Successful);
        }
        other => panic!("a finished command delivered again is answered again: {other:?}"),
    }
    let again = signed(
        "set_cma",
        "c1",
        serde_json::json!({"size": "512M"}),
        NOW + 5,
    );
    match admit(&mut g, &t, &again, NOW + 40) {
        Admission::Replay { record, reason, .. } => {
            assert_eq!(record.status, CmdStatus::Successful);
            assert!(reason.contains("replay"));
        }
        other => panic!("{other:?}"),
    }
    // Junk or an unsigned init on the used id's topic: the record, not a rejection.
    for junk in [
        &b"not json"[..],
        br#"{"status":"init","board":"b1","args":{}}"#,
    ] {
        match admit(&mut g, &t, junk, NOW + 41) {
            Admission::Replay { record, reason, .. } => {
                assert_eq!(record.status, CmdStatus::Successful);
                assert!(reason.contains("replay"), "{reason}");
            }
            other => panic!("{other:?}"),
        }
    }
    // The same junk on an unused id is a plain rejection.
    assert!(matches!(
        admit(&mut g, &topic("b1", "set_cma", "c2"), b"not json", NOW + 41),
        Admission::Rejected { .. }
    ));
}

/// Item 1: unsigned traffic cannot evict a signed id inside its validity window.
#[test]
fn unsigned_flood_never_evicts_a_signed_id() {
    let mut g = gate();
    let b = signed("set_cma", "sig", serde_json::json!({"size": "512M"}), NOW);
    let t = topic("b1", "set_cma", "sig");
    assert!(matches!(admit(&mut g, &t, &b, NOW), Admission::Queued(_)));
    run_all(&mut g);
    // 3 × MAX_UNSIGNED_IDS unsigned rescans, each allowed by the rate limit.
    for i in 0..(3 * MAX_UNSIGNED_IDS as i64) {
        let t2 = topic("b1", "rescan", &format!("r{i}"));
        let m = init("b1", serde_json::json!({}), NOW);
        g.ledger.last_run.clear(); // every rescan passes the rate limit
        let _ = admit(&mut g, &t2, &bytes(&m), NOW + 10);
        run_all(&mut g);
    }
    assert!(g.ledger.commands.contains_key("sig"));
    assert!(g.ledger.commands.values().filter(|e| !e.signed).count() <= MAX_UNSIGNED_IDS);
    // Still remembered: the same bytes are answered from the record, never run again.
    assert!(matches!(
        admit(&mut g, &t, &b, NOW + 100),
        Admission::Answered { .. }
    ));
    // Pruned only after expires_at + skew, when the gate refuses it as expired anyway.
    g.ledger.prune(NOW + 60 + CLOCK_SKEW_S + 1);
    assert!(!g.ledger.commands.contains_key("sig"));
    assert!(rejected(admit(&mut g, &t, &b, NOW + 60 + CLOCK_SKEW_S + 1)).contains("expired"));
}

/// Item 1: a corrupt ledger fails closed and is never overwritten.
#[test]
fn unreadable_ledger_refuses_signed_commands() {
    let dir = tempfile::tempdir().unwrap();
    let root = crate::root::SysRoot::new(dir.path());
    let state = StateDir::new(&root, "/var/lib/npu-agent");
    std::fs::create_dir_all(dir.path().join("var/lib/npu-agent")).unwrap();
    let file = dir.path().join("var/lib/npu-agent/commands.json");
    std::fs::write(&file, b"{\"commands\": [garbage").unwrap();
    let mut g = Gate::new(policy(), Some(state), 600);
    assert!(g.ledger_error().unwrap().contains("corrupt"));
    let b = signed("set_cma", "c1", serde_json::json!({"size": "256M"}), NOW);
    let r = rejected(admit(&mut g, &topic("b1", "set_cma", "c1"), &b, NOW));
    assert!(r.contains("ledger is unreadable"), "{r}");
    // Unsigned ones cannot be remembered either: refused, and the file is left alone.
    let m = init("b1", serde_json::json!({}), NOW);
    let r = rejected(admit(&mut g, &topic("b1", "rescan", "r1"), &bytes(&m), NOW));
    assert!(r.contains("cannot save"), "{r}");
    assert_eq!(
        std::fs::read(&file).unwrap(),
        b"{\"commands\": [garbage".to_vec()
    );
    assert_eq!(g.queued(), 0);
}

/// Item 2: extreme and overflowing times are refused, signed or not.
#[test]
fn time_arithmetic_is_checked() {
    let mut g = gate();
    let cases: &[(i64, i64, &str)] = &[
        (
            -9_223_372_036_854_775_807,
            9_000_000_000_000_000_000,
            "lifetime",
        ),
        (i64::MIN, i64::MAX, "lifetime"),
        (NOW, i64::MAX, "lifetime"),
        (i64::MAX, i64::MAX, "future"),
        (i64::MIN, i64::MIN, "expired"),
        (NOW, NOW - 1, "before issued_at"),
        (NOW - 1000, NOW - 900, "expired"),
        (NOW, NOW + 301, "lifetime"),
    ];
    for (i, (issued, expires, want)) in cases.iter().enumerate() {
        let mut m = init("b1", serde_json::json!({}), NOW);
        m.issued_at = *issued;
        m.expires_at = *expires;
        let r = rejected(admit(
            &mut g,
            &topic("b1", "rescan", &format!("t{i}")),
            &bytes(&m),
            NOW,
        ));
        assert!(r.contains(want), "case {i}: {r}");
        sign(&key(), "npu-fleet", "set_cma", &format!("s{i}"), &mut m);
        m.args = serde_json::json!({"size": "256M"})
            .as_object()
            .unwrap()
            .clone();
        sign(&key(), "npu-fleet", "set_cma", &format!("s{i}"), &mut m);
        let r = rejected(admit(
            &mut g,
            &topic("b1", "set_cma", &format!("s{i}")),
            &bytes(&m),
            NOW,
        ));
        assert!(r.contains(want), "signed case {i}: {r}");
    }
    assert!(g.ledger.commands.is_empty());
}

/// Item 5: signed commands have their own lane; unsigned ones are rate limited and get
/// `busy`, never silence.
#[test]
fn signed_commands_are_not_starved() {
    let mut g = gate();
    let mut busy = 0;
    let mut limited = 0;
    for i in 0..50 {
        let m = init("b1", serde_json::json!({}), NOW);
        match admit(
            &mut g,
            &topic("b1", "rescan", &format!("u{i}")),
            &bytes(&m),
            NOW,
        ) {
            Admission::Queued(_) => {}
            Admission::Rejected { reason, .. } if reason.starts_with("busy") => busy += 1,
            Admission::Rejected { reason, .. } if reason.starts_with("rate limited") => {
                limited += 1
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(limited, 49, "one unsigned rescan per 5 s");
    assert_eq!(busy, 0);
    // Fill the other lane with button presses and planner runs.
    for _ in 0..MAX_QUEUED_OTHER {
        g.other_queue.push_back(Job {
            origin: Origin::HomeAssistant,
            cmd: None,
            action: Action::Rescan,
            signed: false,
            slot: None,
        });
    }
    assert!(g
        .admit_local(Origin::Planner, Action::Compact { drop_caches: false }, NOW)
        .unwrap_err()
        .starts_with("busy"));
    let b = signed("set_cma", "s1", serde_json::json!({"size": "256M"}), NOW);
    assert!(matches!(
        admit(&mut g, &topic("b1", "set_cma", "s1"), &b, NOW),
        Admission::Queued(_)
    ));
    let first = g.next_job().unwrap();
    assert!(first.signed, "the signed command runs first");
}

/// Item 6: buttons pass the allow-list and the unsigned rate limit.
#[test]
fn buttons_go_through_the_gate() {
    let mut g = gate();
    let mut ran = 0;
    for i in 0..3000 {
        if g.admit_local(
            Origin::HomeAssistant,
            Action::Compact { drop_caches: false },
            NOW + i / 100,
        )
        .is_ok()
        {
            ran += 1;
        }
        run_all(&mut g);
    }
    assert_eq!(ran, 1, "30 s between compactions: one in 30 s of presses");
    assert!(g
        .admit_local(
            Origin::HomeAssistant,
            Action::Reboot { reason: "x".into() },
            NOW
        )
        .unwrap_err()
        .contains("allow_unsigned"));
    let mut p = policy();
    p.allow_unsigned = vec![ActionKind::Rescan];
    p.refused
        .insert(ActionKind::Rescan, "this profile has no checks".into());
    let g = Gate::new(p, None, 600);
    assert!(g.button_actions().is_empty());
}

/// Item 8: busy, unsaved and refused-before-acting commands use up nothing; a crash leaves
/// no command `executing`.
#[test]
fn only_what_ran_is_recorded() {
    let mut g = gate();
    let b = signed("set_cma", "big", serde_json::json!({"size": "64G"}), NOW);
    assert!(matches!(
        admit(&mut g, &topic("b1", "set_cma", "big"), &b, NOW),
        Admission::Queued(_)
    ));
    let j = g.next_job().unwrap();
    g.finish(
        &j,
        &Outcome {
            ok: false,
            ran: false,
            detail: "64G is above the RAM".into(),
            pending: false,
        },
    );
    assert_eq!(g.ledger.commands["big"].status, CmdStatus::Failed);
    let b2 = signed(
        "set_cma",
        "ok",
        serde_json::json!({"size": "256M"}),
        NOW + 1,
    );
    assert!(
        matches!(
            admit(&mut g, &topic("b1", "set_cma", "ok"), &b2, NOW + 1),
            Admission::Queued(_)
        ),
        "a refused set_cma does not use up the rate limit"
    );
    // Busy: not recorded.
    for i in 0..MAX_QUEUED_SIGNED {
        let b = signed("rescan", &format!("q{i}"), serde_json::json!({}), NOW + 1);
        let _ = admit(
            &mut g,
            &topic("b1", "rescan", &format!("q{i}")),
            &b,
            NOW + 1,
        );
    }
    let b = signed("rescan", "late", serde_json::json!({}), NOW + 1);
    assert!(
        rejected(admit(&mut g, &topic("b1", "rescan", "late"), &b, NOW + 1)).starts_with("busy")
    );
    assert!(!g.ledger.commands.contains_key("late"));
    // Crash: every executing entry is failed on the next start.
    let mut restarted = Gate::new(policy(), None, 600);
    restarted.ledger = g.ledger.clone();
    let done = restarted.finish_interrupted();
    assert!(done.len() >= 2, "{done:?}");
    assert!(done
        .iter()
        .all(|(_, e)| e.status == CmdStatus::Failed
            && e.reason.as_deref() == Some("agent restarted")));
}

#[test]
fn version_1_ledgers_are_read() {
    let v1 =
        r#"{"seen":{"old":1764400000},"last_run":{"set_cma":1764400000},"payload_hash":{"old":5}}"#;
    let mut l: Ledger = serde_json::from_str(v1).unwrap();
    l.upgrade(300);
    assert!(l.commands["old"].signed);
    assert_eq!(l.schema, 2);
    l.prune(1_764_400_100);
    assert!(l.commands.contains_key("old"));
}

#[test]
fn hostile_commands_are_rejected_with_reasons() {
    let mut g = gate();
    let t = topic("b1", "reboot", "r1");
    let unsigned = init("b1", serde_json::json!({}), NOW);
    assert!(rejected(admit(&mut g, &t, &bytes(&unsigned), NOW)).contains("unsigned reboot refused"));
    let mut forged = unsigned.clone();
    sign(
        &SigningKey::from_bytes(&[9u8; 32]),
        "npu-fleet",
        "reboot",
        "r1",
        &mut forged,
    );
    assert!(rejected(admit(&mut g, &t, &bytes(&forged), NOW)).contains("bad signature"));
    let mut moved = unsigned.clone();
    sign(&key(), "npu-fleet", "reboot", "other", &mut moved);
    assert!(rejected(admit(&mut g, &t, &bytes(&moved), NOW)).contains("bad signature"));
    let extra = br#"{"status":"init","board":"b1","issued_at":1764400000,"expires_at":1764400060,"shell":"rm -rf /"}"#;
    assert!(
        rejected(admit(&mut g, &topic("b1", "compact", "x"), extra, NOW)).contains("unknown field")
    );
    // A secret-looking value in a wrong-typed field is not echoed.
    let typed = br#"{"status":"init","board":"b1","issued_at":"hunter2-secret","expires_at":1}"#;
    let r = rejected(admit(&mut g, &topic("b1", "compact", "x"), typed, NOW));
    assert!(!r.contains("hunter2"), "{r}");
    assert!(rejected(admit(
        &mut g,
        &topic("b1", "compact", "x"),
        &vec![b'{'; 5000],
        NOW
    ))
    .contains("exceeds"));
    assert!(g.ledger.commands.is_empty());
}

/// A fix button only where the config lists `fix` unsigned; a press is admitted then, and the
/// same press is refused without it (the gate decides, not the button's presence).
#[test]
fn a_fix_button_and_its_press_only_where_fix_is_allowed_unsigned() {
    let fix = Action::Fix {
        checks: Vec::new(),
        dry_run: false,
    };
    let mut g = Gate::new(policy(), None, 600);
    assert_eq!(names(g.button_actions()), ["compact", "rescan"]);
    let why = g
        .admit_local(Origin::HomeAssistant, fix.clone(), NOW)
        .unwrap_err();
    assert!(why.contains("fix"), "{why}");
    let mut p = policy();
    p.allow_unsigned.push(ActionKind::Fix);
    let mut g = Gate::new(p, None, 600);
    assert_eq!(names(g.button_actions()), ["compact", "rescan", "fix"]);
    assert!(g.admit_local(Origin::HomeAssistant, fix, NOW).is_ok());
}

/// `[actions] disabled` refuses the action for every origin, and a profile's refusals set
/// after a diagnosis do not wipe it.
#[test]
fn config_disabled_actions_are_refused_for_every_origin() {
    let mut p = policy();
    p.refused = config_refusals(&[ActionKind::Compact]);
    let mut g = Gate::new(p, None, 600);
    g.set_refused(BTreeMap::from([(
        ActionKind::ReleaseNpu,
        "nothing to release".to_string(),
    )]));
    let m = init("b1", serde_json::json!({}), NOW);
    let why = rejected(admit(
        &mut g,
        &topic("b1", "compact", "c1"),
        &bytes(&m),
        NOW,
    ));
    assert!(why.contains("compact is disabled on this board"), "{why}");
    let compact = Action::Compact { drop_caches: false };
    for origin in [Origin::HomeAssistant, Origin::Planner, Origin::Cli] {
        let why = g.admit_local(origin, compact.clone(), NOW).unwrap_err();
        assert!(why.contains("[actions] disabled"), "{origin:?}: {why}");
    }
    assert_eq!(names(g.button_actions()), ["rescan"]);
    assert!(g.policy().refused.contains_key(&ActionKind::ReleaseNpu));
    assert_eq!(g.queued(), 0);
}

/// The daemon's gate saving its ledger keeps a run the admin's process recorded meanwhile.
#[test]
fn a_cli_run_recorded_by_another_process_survives_the_daemons_save() {
    let dir = tempfile::tempdir().unwrap();
    let root = crate::root::SysRoot::new(dir.path());
    let state = StateDir::new(&root, "/var/lib/npu-agent");
    let mut daemon = Gate::new(policy(), Some(state.clone()), 600);
    let mut cli = Gate::new(policy(), Some(state.clone()), 600);
    let compact = Action::Compact { drop_caches: false };
    cli.admit_local(Origin::Cli, compact.clone(), NOW).unwrap();
    cli.record_local(&compact, NOW).unwrap();
    let b = signed("set_cma", "c1", serde_json::json!({"size": "256M"}), NOW);
    assert!(matches!(
        admit(&mut daemon, &topic("b1", "set_cma", "c1"), &b, NOW + 1),
        Admission::Queued(_)
    ));
    let saved: Ledger = state.load(LEDGER_FILE).unwrap().unwrap();
    assert_eq!(saved.last_run.get("compact/cli"), Some(&NOW));
    assert!(saved.commands.contains_key("c1"));
    // And the admin's next record keeps the daemon's command id.
    cli.record_local(&compact, NOW + 5).unwrap();
    let saved: Ledger = state.load(LEDGER_FILE).unwrap().unwrap();
    assert_eq!(saved.last_run.get("compact/cli"), Some(&(NOW + 5)));
    assert!(saved.commands.contains_key("c1"));
}

/// Issue 28 item 1: a re-delivery while the command still runs is ignored (its answer is still
/// to come); after it finished it is answered again with the recorded final state and reason.
#[test]
fn a_redelivered_init_is_ignored_while_running_and_answered_once_finished() {
    let mut g = gate();
    let b = signed("set_cma", "c9", serde_json::json!({"size": "256M"}), NOW);
    let t = topic("b1", "set_cma", "c9");
    assert!(matches!(
        admit(&mut g, &t, &b, NOW),
        Admission::Queued(Some(_))
    ));
    let j = g.next_job().expect("the job");
    assert_eq!(
        admit(&mut g, &t, &b, NOW + 1),
        Admission::Ignored("duplicate delivery")
    );
    g.finish(
        &j,
        &Outcome {
            ok: false,
            ran: true,
            detail: "the boot file is read-only".into(),
            pending: false,
        },
    );
    match admit(&mut g, &t, &b, NOW + 2) {
        Admission::Answered { record, .. } => {
            assert_eq!(record.status, CmdStatus::Failed);
            assert_eq!(record.reason.as_deref(), Some("the boot file is read-only"));
        }
        other => panic!("{other:?}"),
    }
}

/// Issue 26 item 1: an unsigned message that reuses a signed command's id (any subscriber sees
/// it) neither blocks the signed command on a board that was offline nor replays it.
#[test]
fn an_unsigned_message_never_consumes_a_signed_commands_id() {
    let mut g = gate();
    let rescan = bytes(&init("b1", serde_json::json!({}), NOW));
    assert!(matches!(
        admit(&mut g, &topic("b1", "rescan", "c9"), &rescan, NOW),
        Admission::Queued(Some(_))
    ));
    assert_eq!(run_all(&mut g).len(), 1);
    let mut fleet_wide = init("all", serde_json::json!({"size": "256M"}), NOW);
    sign(&key(), "npu-fleet", "set_cma", "c9", &mut fleet_wide);
    let t = topic("all", "set_cma", "c9");
    assert!(matches!(
        admit(&mut g, &t, &bytes(&fleet_wide), NOW + 1),
        Admission::Queued(Some(_))
    ));
    assert_eq!(run_all(&mut g).len(), 1, "the signed command runs");
    // The same unsigned bytes again are a re-delivery of the unsigned command, answered as such.
    assert!(matches!(
        admit(&mut g, &topic("b1", "rescan", "c9"), &rescan, NOW + 2),
        Admission::Answered { .. }
    ));
    // An unsigned init for this board with the signed command's id and action: the signed
    // record, never a run (and on the fleet-wide topic, nothing).
    let unsigned = init("b1", serde_json::json!({"size": "256M"}), NOW + 3);
    match admit(
        &mut g,
        &topic("b1", "set_cma", "c9"),
        &bytes(&unsigned),
        NOW + 3,
    ) {
        Admission::Replay { record, reason, .. } => {
            assert!(record.signed && record.action == "set_cma", "{record:?}");
            assert_eq!(record.status, CmdStatus::Successful);
            assert!(reason.contains("replay"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    let unsigned_all = init("all", serde_json::json!({"size": "256M"}), NOW + 3);
    assert!(matches!(
        admit(&mut g, &t, &bytes(&unsigned_all), NOW + 3),
        Admission::Ignored(_)
    ));
    // A ledger written before the split keeps working: its unsigned ids move to their key.
    let mut old = Ledger::default();
    old.commands.insert(
        "c1".into(),
        LedgerEntry {
            action: "rescan".into(),
            signed: false,
            accepted_unix_s: NOW,
            keep_until_unix_s: NOW + 60,
            payload_hash: 1,
            status: CmdStatus::Successful,
            reason: None,
        },
    );
    old.upgrade(300);
    assert!(old.commands.contains_key("u:c1") && !old.commands.contains_key("c1"));
}

/// Issue 26 item 4: a wiped state directory (a re-flashed board) forgets every id it ran, so a
/// signed command captured inside its window is refused when it was issued before the fresh
/// ledger began; one issued after runs, and a ledger file from before the field is unaffected.
#[test]
fn a_fresh_ledger_refuses_signed_commands_issued_before_it() {
    let dir = tempfile::tempdir().unwrap();
    let root = crate::root::SysRoot::new(dir.path());
    let state = StateDir::new(&root, "/var/lib/npu-agent");
    let mut g = Gate::new(policy(), Some(state.clone()), 600);
    let captured = signed(
        "set_cma",
        "c1",
        serde_json::json!({"size": "256M"}),
        NOW - 120,
    );
    let why = rejected(admit(&mut g, &topic("b1", "set_cma", "c1"), &captured, NOW));
    assert!(why.contains("started afresh"), "{why}");
    let fresh = signed(
        "set_cma",
        "c2",
        serde_json::json!({"size": "256M"}),
        NOW - 5,
    );
    assert!(matches!(
        admit(&mut g, &topic("b1", "set_cma", "c2"), &fresh, NOW),
        Admission::Queued(Some(_))
    ));
    // The creation time is kept in the file: a restart does not move it.
    let mut again = Gate::new(policy(), Some(state.clone()), 600);
    let later = signed(
        "set_cma",
        "c3",
        serde_json::json!({"size": "256M"}),
        NOW - 100,
    );
    let why = rejected(admit(
        &mut again,
        &topic("b1", "set_cma", "c3"),
        &later,
        NOW,
    ));
    assert!(why.contains("started afresh"), "{why}");
    // A ledger written before the field: no such refusal.
    let old = dir.path().join("var/lib/npu-agent/commands.json");
    std::fs::write(&old, r#"{"schema":2,"commands":{},"last_run":{}}"#).unwrap();
    let mut upgraded = Gate::new(policy(), Some(state), 600);
    let old_issue = signed(
        "set_cma",
        "c4",
        serde_json::json!({"size": "256M"}),
        NOW - 120,
    );
    assert!(matches!(
        admit(
            &mut upgraded,
            &topic("b1", "set_cma", "c4"),
            &old_issue,
            NOW
        ),
        Admission::Queued(Some(_))
    ));
}

/// Issue 26 item 2: the signature binds the fleet. A `set_cma` signed for `staging` does not
/// run on the same board id under `npu-fleet`; a v1 signature (no topic root) runs only where
/// `security.accept_v1_signatures` allows it.
#[test]
fn a_signature_binds_the_topic_root_and_v1_only_where_allowed() {
    let mut g = gate();
    let mut staging = init("b1", serde_json::json!({"size": "256M"}), NOW);
    sign(&key(), "staging", "set_cma", "c1", &mut staging);
    let t = topic("b1", "set_cma", "c1");
    let why = rejected(admit(&mut g, &t, &bytes(&staging), NOW));
    assert!(why.contains("bad signature"), "{why}");
    let mut v1 = init("b1", serde_json::json!({"size": "256M"}), NOW);
    let old = crate::mqtt::command::signed_for("npu-fleet", "set_cma", "c2", &v1).bytes_v1();
    let sig = key().sign(&old);
    v1.signature = Some(base64::Engine::encode(
        &base64::engine::general_purpose::STANDARD,
        sig,
    ));
    let t2 = topic("b1", "set_cma", "c2");
    let why = rejected(admit(&mut g, &t2, &bytes(&v1), NOW));
    assert!(
        why.contains("v1 form") && why.contains("accept_v1_signatures"),
        "{why}"
    );
    let mut p = policy();
    p.accept_v1 = true;
    let mut lenient = Gate::new(p, None, 600);
    assert!(matches!(
        admit(&mut lenient, &t2, &bytes(&v1), NOW),
        Admission::Queued(Some(_))
    ));
}

/// A reboot's result settles the reboot's own record, even when an unsigned reboot reused the
/// id of a signed command of another action; and a config reload keeps the board's own
/// refusals (the profile's) whatever the new config disables.
#[test]
fn a_reboot_settles_its_own_record_and_a_reload_keeps_the_board_refusals() {
    let mut p = policy();
    p.allow_unsigned.push(ActionKind::Reboot);
    let mut g = Gate::new(p, None, 600);
    let b = signed("set_cma", "x1", serde_json::json!({"size": "256M"}), NOW);
    assert!(matches!(
        admit(&mut g, &topic("b1", "set_cma", "x1"), &b, NOW),
        Admission::Queued(Some(_))
    ));
    assert_eq!(run_all(&mut g).len(), 1);
    let reboot = bytes(&init("b1", serde_json::json!({}), NOW + 1));
    assert!(matches!(
        admit(&mut g, &topic("b1", "reboot", "x1"), &reboot, NOW + 1),
        Admission::Queued(Some(_))
    ));
    let j = g.next_job().unwrap();
    let started = Outcome {
        ok: true,
        ran: true,
        detail: "rebooting".into(),
        pending: true,
    };
    g.finish(&j, &started);
    g.settle_reboot("x1", true, "new boot_id");
    let c = &g.ledger().commands;
    assert_eq!(c["u:x1"].status, CmdStatus::Successful, "{c:?}");
    assert_eq!(c["x1"].action, "set_cma");
    assert_eq!(c["x1"].reason.as_deref(), Some("done"), "{c:?}");
    // The reload.
    let mut p = policy();
    p.refused
        .insert(ActionKind::SetCma, "disabled in the config".into());
    let mut g = Gate::new(p, None, 600);
    g.set_refused(BTreeMap::from([
        (ActionKind::SetCma, "the profile refuses it".into()),
        (ActionKind::ReleaseNpu, "no Hailo here".into()),
    ]));
    g.set_policy(policy());
    let r = &g.policy().refused;
    assert_eq!(r[&ActionKind::SetCma], "the profile refuses it");
    assert_eq!(r[&ActionKind::ReleaseNpu], "no Hailo here");
}

/// An update left `executing` waits for the agent that comes back while its pending record is
/// there; without one (cut off before the install) it is failed like any other.
#[test]
fn an_interrupted_update_waits_only_with_its_pending_record() {
    let entry = |action: &str| LedgerEntry {
        action: action.into(),
        signed: true,
        accepted_unix_s: NOW,
        keep_until_unix_s: NOW + 600,
        payload_hash: 1,
        status: CmdStatus::Executing,
        reason: None,
    };
    let mut g = Gate::new(policy(), None, 600);
    g.ledger.commands.insert("u1".into(), entry("update"));
    g.ledger.commands.insert("c1".into(), entry("compact"));
    let mut pending = Gate::new(policy(), None, 600);
    pending.ledger = g.ledger.clone();
    let done = pending.finish_interrupted_but(&[ActionKind::Reboot, ActionKind::Update]);
    let ids: Vec<&str> = done.iter().map(|(c, _)| c.cmd_id.as_str()).collect();
    assert_eq!(ids, ["c1"]);
    let done = g.finish_interrupted();
    let mut ids: Vec<&str> = done.iter().map(|(c, _)| c.cmd_id.as_str()).collect();
    ids.sort();
    assert_eq!(ids, ["c1", "u1"]);
}
