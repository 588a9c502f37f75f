//! Property tests of the command gate and the config loader under hostile input.
//!
//! Gate: sequences of arbitrary and near-miss commands (extreme times, forged, moved and valid
//! signatures, unknown actions and arguments, reused ids, button presses and planner runs) must
//! never panic, never execute a cmd_id twice, never run a signed-only action without a valid
//! signature, never queue past the bound, and never accept a lifetime above the limit.
//!
//! Config loader: arbitrary and near-miss TOML with a planted secret in value positions must
//! never panic and never echo the secret in an error.
//!
//! The normal suite runs a short version. The long run prints its execution counts:
//!
//! ```text
//! FUZZ_EXECUTIONS=1000000 cargo test --release --test fast fuzz_gate:: -- --ignored --nocapture
//! ```

use npu_agent::action::gate::MessageContext;
use npu_agent::action::gate::{
    Admission, Gate, Origin, Outcome, MAX_QUEUED_OTHER, MAX_QUEUED_SIGNED,
};
use npu_agent::model::action::Action;
use npu_agent::mqtt::command::SigningKey;
use npu_agent::mqtt::command::{sign, CmdStatus, InitMessage, Policy};
use npu_agent::mqtt::incoming::Incoming;
use npu_agent::mqtt::topics::CommandTopic;
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};
use std::collections::{BTreeMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};

const NOW: i64 = 1_764_400_000;
const MAX_AGE: u64 = 300;
const SECRET: &str = "Zq9-SECRET-vAlUe-77";

fn key() -> SigningKey {
    SigningKey::from_bytes(&[7u8; 32])
}

fn policy() -> Policy {
    Policy {
        board: "b1".into(),
        trusted_keys: vec![key().verifying_key()],
        allow_unsigned: vec![
            npu_agent::model::action::ActionKind::Compact,
            npu_agent::model::action::ActionKind::Rescan,
        ],
        max_command_age_s: MAX_AGE,
        topic_root: "npu-fleet".into(),
        accept_v1: false,
        refused: BTreeMap::new(),
    }
}

/// One step of an attack sequence.
#[derive(Debug, Clone)]
enum Step {
    /// An MQTT command: topic parts, payload, time offset.
    Command {
        board: String,
        action: String,
        cmd_id: String,
        payload: Vec<u8>,
        dt: i64,
    },
    Button(u8),
    Planner,
    /// Run the next queued job to completion.
    Run {
        ok: bool,
        ran: bool,
    },
}

fn time() -> impl Strategy<Value = i64> {
    prop_oneof![
        (-400i64..400).prop_map(|d| NOW + d),
        Just(i64::MIN),
        Just(i64::MAX),
        Just(-9_223_372_036_854_775_807),
        Just(9_000_000_000_000_000_000),
        any::<i64>(),
    ]
}

fn action() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("compact".to_string()),
        Just("set_cma".to_string()),
        Just("reboot".to_string()),
        Just("rescan".to_string()),
        Just("release_npu".to_string()),
        "[a-z_]{0,12}",
    ]
}

fn args() -> impl Strategy<Value = serde_json::Value> {
    prop_oneof![
        Just(serde_json::json!({})),
        Just(serde_json::json!({"size": "256M"})),
        Just(serde_json::json!({"size": "99999999999T"})),
        Just(serde_json::json!({"drop_caches": true})),
        Just(serde_json::json!({"drop_caches": "yes"})),
        Just(serde_json::json!({"model": SECRET})),
        Just(serde_json::json!({"shell": "rm -rf /"})),
        "[ -~]{0,30}".prop_map(|s| serde_json::json!({ "size": s })),
    ]
}

fn command() -> impl Strategy<Value = Step> {
    (
        prop_oneof![
            Just("b1".to_string()),
            Just("all".to_string()),
            "[a-z0-9]{1,4}"
        ],
        action(),
        prop_oneof!["[a-z0-9]{1,3}", "[ -~]{0,70}"],
        args(),
        time(),
        time(),
        0u8..6,
        -100i64..700,
        proptest::collection::vec(any::<u8>(), 0..200),
    )
        .prop_map(
            |(board, action, cmd_id, args, issued, expires, form, dt, junk)| {
                let mut m = InitMessage {
                    status: CmdStatus::Init,
                    board: board.clone(),
                    args: args.as_object().cloned().unwrap_or_default(),
                    issued_at: issued,
                    expires_at: expires,
                    signature: None,
                };
                let payload = match form {
                    // Valid signature over this exact message.
                    0 | 1 => {
                        sign(&key(), "npu-fleet", &action, &cmd_id, &mut m);
                        serde_json::to_vec(&m).unwrap()
                    }
                    // Signed for another cmd_id (moved).
                    2 => {
                        sign(&key(), "npu-fleet", &action, "elsewhere", &mut m);
                        serde_json::to_vec(&m).unwrap()
                    }
                    // Forged key.
                    3 => {
                        sign(
                            &SigningKey::from_bytes(&[9u8; 32]),
                            "npu-fleet",
                            &action,
                            &cmd_id,
                            &mut m,
                        );
                        serde_json::to_vec(&m).unwrap()
                    }
                    4 => serde_json::to_vec(&m).unwrap(),
                    _ => junk,
                };
                Step::Command {
                    board,
                    action,
                    cmd_id,
                    payload,
                    dt,
                }
            },
        )
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        6 => command(),
        1 => (0u8..3).prop_map(Step::Button),
        1 => Just(Step::Planner),
        2 => (any::<bool>(), any::<bool>()).prop_map(|(ok, ran)| Step::Run { ok, ran }),
    ]
}

/// Runs one sequence through a fresh gate, checking the invariants. Returns the gate calls.
fn run_sequence(steps: &[Step]) -> Result<u64, TestCaseError> {
    let mut g = Gate::new(policy(), None, 600);
    let mut queued_ids: HashSet<String> = HashSet::new();
    let mut calls = 0u64;
    let mut now = NOW;
    for s in steps {
        calls += 1;
        match s {
            Step::Command {
                board,
                action,
                cmd_id,
                payload,
                dt,
            } => {
                now = now.saturating_add(*dt);
                let m = Incoming::new(CommandTopic::new(board, action, cmd_id), payload, false);
                match g.admit_command(&m, &MessageContext::at(now)) {
                    Admission::Queued(_) => {
                        prop_assert!(
                            queued_ids.insert(cmd_id.clone()),
                            "cmd_id {cmd_id:?} admitted twice"
                        );
                        let m: InitMessage = serde_json::from_slice(payload).unwrap();
                        let life = i128::from(m.expires_at) - i128::from(m.issued_at);
                        prop_assert!((0..=MAX_AGE as i128).contains(&life), "lifetime {life}");
                        prop_assert!(i128::from(now) <= i128::from(m.expires_at) + 60);
                        let e = &g.ledger().commands[cmd_id];
                        if !["compact", "rescan"].contains(&action.as_str()) {
                            prop_assert!(e.signed, "{action} ran unsigned");
                        }
                    }
                    Admission::Rejected { reason, .. } | Admission::ClockHeld { reason, .. } => {
                        prop_assert!(!reason.contains(SECRET), "{reason}");
                    }
                    Admission::Answered { cmd, record } => {
                        prop_assert!(record.status.is_final(), "answered before it finished");
                        prop_assert_eq!(&cmd.cmd_id, cmd_id);
                    }
                    Admission::Replay { .. } | Admission::Ignored(_) => {}
                }
            }
            Step::Button(b) => {
                let a = match b {
                    0 => Action::Compact { drop_caches: false },
                    1 => Action::Rescan,
                    _ => Action::Reboot {
                        reason: "press".into(),
                    },
                };
                let reboot = matches!(a, Action::Reboot { .. });
                let r = g.admit_local(Origin::HomeAssistant, a, now);
                prop_assert!(!(reboot && r.is_ok()), "a button rebooted");
            }
            Step::Planner => {
                let _ = g.admit_local(Origin::Planner, Action::Compact { drop_caches: false }, now);
            }
            Step::Run { ok, ran } => {
                if let Some(j) = g.next_job() {
                    g.finish(
                        &j,
                        &Outcome {
                            ok: *ok,
                            ran: *ran,
                            detail: "x".into(),
                            pending: j.action.kind().answered_after_restart() && *ok,
                        },
                    );
                }
            }
        }
        prop_assert!(g.queued() <= MAX_QUEUED_SIGNED + MAX_QUEUED_OTHER);
    }
    Ok(calls)
}

fn config_text() -> impl Strategy<Value = String> {
    let value = prop_oneof![
        Just(format!("\"{SECRET}\"")),
        Just("918273645".to_string()),
        Just(format!("[\"{SECRET}\"]")),
        Just(format!("'''{SECRET}'''")),
        Just("true".to_string()),
        Just("3.5".to_string()),
        Just("{ a = 1 }".to_string()),
        "[ -~]{0,20}",
    ];
    let key = prop_oneof![
        Just("url"),
        Just("topic_root"),
        Just("username"),
        Just("password_file"),
        Just("keep_alive_s"),
        Just("interval_s"),
        Just("max_command_age_s"),
        Just("allow_unsigned"),
        Just("trusted_keys"),
        Just("reboot_command"),
        Just("board_id"),
        Just("enabled"),
        Just("mqtt_password"),
    ];
    let section = prop_oneof![
        Just(""),
        Just("[mqtt]\n"),
        Just("[report]\n"),
        Just("[actions]\n"),
        Just("[security]\n"),
        Just("[home_assistant]\n"),
        Just("[secrets]\n"),
    ];
    prop_oneof![
        3 => proptest::collection::vec((section, key, value), 0..8).prop_map(|lines| {
            lines
                .into_iter()
                .map(|(s, k, v)| format!("{s}{k} = {v}\n"))
                .collect()
        }),
        1 => proptest::collection::vec(any::<u8>(), 0..300)
            .prop_map(|b| String::from_utf8_lossy(&b).into_owned()),
    ]
}

fn check_config(text: &str) -> Result<(), TestCaseError> {
    if let Err(e) = npu_agent::config::check_layer("fuzz.toml", text, &[]) {
        let shown = e.to_string();
        prop_assert!(!shown.contains(SECRET), "{shown}");
    }
    let env = vec![("NPU_AGENT_MQTT_PASSWORD_FILE".to_string(), text.to_string())];
    let root = npu_agent::root::SysRoot::new("/nonexistent-fuzz-root");
    if let Err(e) = npu_agent::config::load(&root, None, &env) {
        prop_assert!(!e.to_string().contains(SECRET), "{e}");
    }
    Ok(())
}

static GATE_CALLS: AtomicU64 = AtomicU64::new(0);
static CONFIG_CALLS: AtomicU64 = AtomicU64::new(0);

fn fuzz_gate(executions: u64) -> u64 {
    let before = GATE_CALLS.load(Ordering::Relaxed);
    let per_case = 64u64;
    let mut runner = TestRunner::new(Config {
        cases: u32::try_from(executions.div_ceil(per_case)).unwrap_or(u32::MAX),
        failure_persistence: None,
        ..Config::default()
    });
    runner
        .run(
            &proptest::collection::vec(step(), per_case as usize),
            |steps| {
                let n = run_sequence(&steps)?;
                GATE_CALLS.fetch_add(n, Ordering::Relaxed);
                Ok(())
            },
        )
        .unwrap();
    GATE_CALLS.load(Ordering::Relaxed) - before
}

fn fuzz_config(executions: u64) -> u64 {
    let before = CONFIG_CALLS.load(Ordering::Relaxed);
    let mut runner = TestRunner::new(Config {
        cases: u32::try_from(executions).unwrap_or(u32::MAX),
        failure_persistence: None,
        ..Config::default()
    });
    runner
        .run(&config_text(), |text| {
            check_config(&text)?;
            CONFIG_CALLS.fetch_add(1, Ordering::Relaxed);
            Ok(())
        })
        .unwrap();
    CONFIG_CALLS.load(Ordering::Relaxed) - before
}

#[test]
fn gate_holds_under_hostile_sequences() {
    // A short run in the normal (debug) suite; the long run below is the benchmark-style one.
    let n = fuzz_gate(5_000);
    assert!(n >= 5_000, "{n}");
}

#[test]
fn config_loader_holds_under_hostile_text() {
    let n = fuzz_config(1_000);
    assert!(n >= 1_000, "{n}");
}

/// The long run (see the module docs): at least `FUZZ_EXECUTIONS` (default 1,000,000) gate
/// calls and config loads; prints the counts.
#[test]
#[ignore]
fn fuzz_gate_and_config_long_run() {
    let want: u64 = std::env::var("FUZZ_EXECUTIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let t0 = std::time::Instant::now();
    let gate = fuzz_gate(want);
    let t_gate = t0.elapsed();
    println!(
        "fuzz: gate executions={gate} in {:.0} s; failures=0",
        t_gate.as_secs_f64()
    );
    let config = fuzz_config(want);
    println!(
        "fuzz: gate executions={gate} in {:.0} s; config loader executions={config} in {:.0} s; failures=0",
        t_gate.as_secs_f64(),
        (t0.elapsed() - t_gate).as_secs_f64()
    );
    assert!(gate >= want && config >= want);
}
