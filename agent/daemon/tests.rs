//! The routing, without a broker, threads or sleeps: link events go in, the gate and the
//! executor decide, and the command answers come out of the outbox. Blocking work is held
//! ([`Dispatch::Held`]) for the test to finish, and time comes from a [`TestClock`].

use super::agent::{Agent, Outbound};
use super::clock::TestClock;
use super::jobs::{exec_job, handle_done, Dispatch, Done};
use super::link::handle_link;
use super::setup::setup;
use crate::config::Config;
use crate::model::action::{Action, ActionOutcome};
use crate::mqtt::command::{CmdStatus, InitMessage};
use crate::mqtt::link::LinkEvent;
use serde_json::{json, Value};
use std::sync::Arc;
use tokio::sync::mpsc;

const T0: i64 = 1_764_400_000;

struct Rig {
    agent: Agent,
    clock: Arc<TestClock>,
    tx: mpsc::UnboundedSender<Done>,
    _rx: mpsc::UnboundedReceiver<Done>,
    _dir: tempfile::TempDir,
}

/// An agent for board `b1` on an empty board tree (with a `boot_id`), reboots allowed and
/// accepted unsigned, nothing connected: every answer stays in the outbox.
fn rig() -> Rig {
    rig_in(tempfile::tempdir().unwrap())
}

/// [`rig`] on the board tree `dir` (a restart: the state directory of an earlier rig).
fn rig_in(dir: tempfile::TempDir) -> Rig {
    let boot_id = dir.path().join("proc/sys/kernel/random");
    std::fs::create_dir_all(&boot_id).unwrap();
    std::fs::write(boot_id.join("boot_id"), "boot-1\n").unwrap();
    let mut cfg = Config {
        root: dir.path().display().to_string(),
        board_id: "b1".into(),
        ..Config::default()
    };
    cfg.mqtt.url = "mqtt://127.0.0.1:1".into();
    cfg.actions.allow_reboot = true;
    cfg.security.allow_unsigned = vec!["compact".into(), "rescan".into(), "reboot".into()];
    let clock = Arc::new(TestClock::at(T0));
    let held = Dispatch::Held {
        actions: Vec::new(),
        diagnoses: 0,
    };
    let agent = Agent::new(setup(cfg).unwrap(), clock.clone(), held);
    let (tx, rx) = mpsc::unbounded_channel();
    Rig {
        agent,
        clock,
        tx,
        _rx: rx,
        _dir: dir,
    }
}

impl Rig {
    /// An unsigned `init` for `action`/`id`, issued now by the test clock.
    fn command(&mut self, action: &str, id: &str, args: Value) {
        let now = self.clock.now_s();
        let msg = InitMessage {
            status: CmdStatus::Init,
            board: "b1".into(),
            args: args.as_object().cloned().unwrap_or_default(),
            issued_at: now,
            expires_at: now + 60,
            signature: None,
        };
        let ev = LinkEvent::Message {
            topic: format!("npu-fleet/b1/cmd/{action}/{id}"),
            payload: serde_json::to_vec(&msg).unwrap(),
            retain: true,
            ack: None,
        };
        handle_link(&mut self.agent, ev, &self.tx);
    }

    /// The answers published since the last call: (topic, body).
    fn answers(&mut self) -> Vec<(String, Value)> {
        self.agent
            .outbox
            .drain(..)
            .filter_map(|o| match o {
                Outbound::Publish(t, p, _) => Some((t, serde_json::from_slice(&p).unwrap())),
                Outbound::Ack(_) => None,
            })
            .collect()
    }

    /// The jobs the loop started and holds for the test.
    fn started(
        &mut self,
    ) -> Vec<(
        crate::action::gate::Job,
        Option<Arc<crate::diagnose::Diagnosis>>,
    )> {
        match &mut self.agent.dispatch {
            Dispatch::Held { actions, .. } => std::mem::take(actions),
            Dispatch::Blocking => unreachable!("the rig holds its work"),
        }
    }

    fn finish(&mut self, job: crate::action::gate::Job, outcome: ActionOutcome) {
        let done = Done::Action {
            job: Box::new(job),
            outcome,
            diagnosis: None,
            state: super::work::StateFiles::read(&self.agent.s.state),
        };
        handle_done(&mut self.agent, done, &self.tx);
    }
}

use super::clock::Clock;

#[test]
fn an_admitted_command_runs_and_its_outcome_is_published() {
    let mut r = rig();
    r.command("compact", "c1", json!({}));
    let a = r.answers();
    assert_eq!(a.len(), 1, "{a:?}");
    assert_eq!(a[0].0, "npu-fleet/b1/cmd/compact/c1");
    assert_eq!(a[0].1["status"], "executing");
    let mut jobs = r.started();
    assert_eq!(jobs.len(), 1);
    let (job, _) = jobs.remove(0);
    assert_eq!(job.action, Action::Compact { drop_caches: false });
    let details = json!({"outcome": "done", "duration_ms": 7});
    r.finish(
        job,
        ActionOutcome::succeeded("compacted in 7 ms", details.clone()),
    );
    let a = r.answers();
    assert_eq!(a.len(), 1, "{a:?}");
    assert_eq!(a[0].1["status"], "successful");
    assert_eq!(a[0].1["result"], details);
    assert_eq!(a[0].1["cmd_id"], "c1");
    assert_eq!(
        r.agent.last_action.as_ref().unwrap()["status"],
        "successful"
    );
    // A fresh diagnosis follows every action (one is running: it is asked for after it).
    assert!(r.agent.rescan_wanted);
}

#[test]
fn the_executors_refusal_is_published_failed_and_gives_the_slot_back() {
    let mut r = rig();
    r.command("compact", "c1", json!({}));
    r.answers();
    let (job, d) = r.started().remove(0);
    // The real executor on a tree without /proc/sys/vm/compact_memory: refused before acting.
    let e = exec_job(&job, d, r.clock.now_s());
    assert_eq!(e.trigger, "command");
    let outcome = r.agent.s.executor.run(e);
    assert!(!outcome.ok && !outcome.ran, "{outcome:?}");
    r.finish(job, outcome.clone());
    let a = r.answers();
    assert_eq!(a[0].1["status"], "failed");
    assert_eq!(a[0].1["reason"], json!(outcome.message));
    // It did not run: the rate limit does not hold the next one.
    r.clock.advance(1);
    r.command("compact", "c2", json!({}));
    assert_eq!(r.answers()[0].1["status"], "executing");
}

#[test]
fn a_second_reboot_is_rate_limited_by_the_clock() {
    let mut r = rig();
    r.command("reboot", "r1", json!({}));
    assert_eq!(r.answers()[0].1["status"], "executing");
    let (job, _) = r.started().remove(0);
    let pending = ActionOutcome {
        reboot_pending: true,
        ..ActionOutcome::succeeded("reboot started", json!({"pending": true}))
    };
    r.finish(job, pending);
    // The board is going down: no final state until the next boot.
    assert!(r.answers().is_empty());
    assert_eq!(r.agent.last_action.as_ref().unwrap()["status"], "executing");
    r.clock.advance(100);
    r.command("reboot", "r2", json!({}));
    let a = r.answers();
    assert_eq!(a[0].0, "npu-fleet/b1/cmd/reboot/r2");
    assert_eq!(a[0].1["status"], "rejected");
    assert_eq!(
        a[0].1["reason"],
        "rate limited: reboot ran 100 s ago; retry in 200 s"
    );
    assert!(r.started().is_empty());
}

#[test]
fn a_duplicate_cmd_id_is_answered_from_the_ledger() {
    let mut r = rig();
    r.command("compact", "c1", json!({}));
    let (job, _) = r.started().remove(0);
    r.finish(job, ActionOutcome::succeeded("compacted", json!({})));
    r.answers();
    // The same id with other bytes (a later issue time): not run, the record is repeated.
    r.clock.advance(40);
    r.command("compact", "c1", json!({"drop_caches": true}));
    let a = r.answers();
    assert_eq!(a.len(), 1, "{a:?}");
    assert_eq!(a[0].1["status"], "successful");
    assert!(a[0].1["replay_rejected"].is_string(), "{a:?}");
    assert!(r.started().is_empty());
}

/// Issue 26 item 10: the ledger still says `executing` after a restart (the final state was
/// published, but a full state directory kept the ledger from recording it). The broker's
/// retained final answer is kept, not overwritten with `failed: agent restarted`; a command
/// the broker holds no answer for is failed once the retained records had their time.
#[test]
fn a_final_answer_the_broker_holds_survives_a_restart_the_ledger_missed() {
    let mut r = rig();
    r.command("compact", "c1", json!({}));
    let _ = r.started();
    r.command("rescan", "c2", json!({}));
    let _ = r.answers();
    // Restart: the same state directory, both commands still `executing` in the ledger.
    let dir = std::mem::replace(&mut r._dir, tempfile::tempdir().unwrap());
    drop(r);
    let mut r = rig_in(dir);
    super::main_loop::settle_on_start(&mut r.agent);
    assert!(
        r.answers().is_empty(),
        "nothing before the broker had its say"
    );
    let answer = |r: &Rig, action: &str, id: &str, sealed: bool| {
        let topic = format!("npu-fleet/b1/cmd/{action}/{id}");
        let body = format!(
            r#"{{"status":"successful","board":"b1","action":"{action}","cmd_id":"{id}","result":{{}}}}"#
        );
        let payload = match sealed {
            // The answer this board published before the restart, with its own key.
            true => r.agent.seal(&topic, body.into_bytes()),
            false => body.into_bytes(),
        };
        LinkEvent::Message {
            topic,
            payload,
            retain: true,
            ack: None,
        }
    };
    // Someone else's retained "successful" for c2 (no seal of this board): not taken.
    let spoofed = answer(&r, "rescan", "c2", false);
    handle_link(&mut r.agent, spoofed, &r.tx);
    let retained = answer(&r, "compact", "c1", true);
    handle_link(&mut r.agent, retained, &r.tx);
    // The commands subscription granted a while ago: the wait is over.
    r.agent.connected = true;
    r.agent.subscription = super::subscribe::Subscription::Granted;
    let past = std::time::Instant::now() - super::interrupted::RETAINED_GRACE;
    r.agent.interrupted.granted(past);
    super::apply::answer_due(&mut r.agent);
    let a = r.answers();
    assert_eq!(a.len(), 1, "{a:?}");
    assert_eq!(a[0].0, "npu-fleet/b1/cmd/rescan/c2");
    assert_eq!(a[0].1["status"], "failed");
    assert_eq!(a[0].1["reason"], "agent restarted");
    // The ledger took the broker's answer: a replay of c1 is answered `successful`.
    r.clock.advance(5);
    r.command("compact", "c1", json!({"drop_caches": true}));
    let a = r.answers();
    assert_eq!(a.len(), 1, "{a:?}");
    assert_eq!(a[0].1["status"], "successful", "{a:?}");
}

/// Without its own key the board cannot tell its answer from a forged one: an interrupted
/// command is failed whatever the broker holds.
#[test]
fn without_a_board_key_no_answer_from_the_broker_is_taken() {
    let mut r = rig();
    r.command("compact", "c1", json!({}));
    let _ = r.started();
    let _ = r.answers();
    let dir = std::mem::replace(&mut r._dir, tempfile::tempdir().unwrap());
    drop(r);
    let mut r = rig_in(dir);
    r.agent.s.identity = None;
    super::main_loop::settle_on_start(&mut r.agent);
    let forged = LinkEvent::Message {
        topic: "npu-fleet/b1/cmd/compact/c1".into(),
        payload: br#"{"status":"successful","board":"b1","action":"compact","cmd_id":"c1"}"#
            .to_vec(),
        retain: true,
        ack: None,
    };
    handle_link(&mut r.agent, forged, &r.tx);
    r.agent.connected = true;
    r.agent.subscription = super::subscribe::Subscription::Granted;
    r.agent
        .interrupted
        .granted(std::time::Instant::now() - super::interrupted::RETAINED_GRACE);
    super::apply::answer_due(&mut r.agent);
    let a = r.answers();
    assert_eq!(a.len(), 1, "{a:?}");
    assert_eq!(a[0].1["status"], "failed", "{a:?}");
}

#[test]
fn a_refused_action_is_rejected_before_executing() {
    let mut r = rig();
    r.agent.s.executor = crate::action::executor::Executor::new(
        r.agent.s.root.clone(),
        r.agent.s.state.clone(),
        crate::action::ActionConfig::default(), // allow_reboot = false
        r.agent.s.profile.clone(),
    );
    r.command("reboot", "r1", json!({}));
    let a = r.answers();
    assert_eq!(a.len(), 1, "{a:?}");
    assert_eq!(a[0].1["status"], "rejected");
    assert!(
        a[0].1["reason"].as_str().unwrap().contains("allow_reboot"),
        "{a:?}"
    );
    assert!(r.started().is_empty());
}

/// Issue 28 item 1: the broker keeps `executing` for a command whose final answer a dropped
/// connection took with it (rumqttc discards unsent publishes on a clean-start CONNACK).
/// Delivered retained on (re)subscribing, it is answered again with the recorded final state;
/// live, or while the command still runs, it is not.
#[test]
fn a_retained_executing_of_a_finished_command_is_answered_again() {
    let mut r = rig();
    r.command("compact", "c1", json!({}));
    let _ = r.answers();
    let executing = |retain: bool| LinkEvent::Message {
        topic: "npu-fleet/b1/cmd/compact/c1".into(),
        payload: br#"{"status":"executing","board":"b1","action":"compact","cmd_id":"c1"}"#
            .to_vec(),
        retain,
        ack: None,
    };
    handle_link(&mut r.agent, executing(true), &r.tx);
    assert!(r.answers().is_empty(), "still running: nothing to say yet");
    let (job, _) = r.started().remove(0);
    r.finish(job, ActionOutcome::succeeded("compacted", json!({})));
    let _ = r.answers();
    handle_link(&mut r.agent, executing(false), &r.tx);
    assert!(
        r.answers().is_empty(),
        "a live state is not the broker's record"
    );
    handle_link(&mut r.agent, executing(true), &r.tx);
    let a = r.answers();
    assert_eq!(a.len(), 1, "{a:?}");
    assert_eq!(a[0].0, "npu-fleet/b1/cmd/compact/c1");
    assert_eq!(a[0].1["status"], "successful");
    // An id the ledger never saw: ignored.
    let mut unknown = executing(true);
    if let LinkEvent::Message { topic, .. } = &mut unknown {
        *topic = "npu-fleet/b1/cmd/compact/never".into();
    }
    handle_link(&mut r.agent, unknown, &r.tx);
    assert!(r.answers().is_empty());
}

/// Issue 28 item 7: an answer nobody cleared is cleared by the agent once no command can still
/// be live (security.max_command_age_s, 300, plus the 60 s clock skew), a running command's
/// record is kept, and an old answer of an earlier run the broker still holds is cleared on
/// sight.
#[test]
fn answers_are_cleared_once_no_command_can_be_live() {
    let mut r = rig();
    r.command("rescan", "r1", json!({}));
    let (job, _) = r.started().remove(0);
    r.finish(job, ActionOutcome::succeeded("rescanned", json!({})));
    r.command("rescan", "r2", json!({})); // rate limited: rejected
    r.command("compact", "c9", json!({})); // left running
    let answered: Vec<_> = r
        .answers()
        .into_iter()
        .map(|(t, v)| (t, v["status"].clone()))
        .collect();
    assert!(answered.contains(&("npu-fleet/b1/cmd/rescan/r2".into(), json!("rejected"))));
    r.agent.connected = true;
    let clears = |r: &mut Rig| -> Vec<String> {
        super::apply::clear_due(&mut r.agent);
        r.agent
            .outbox
            .drain(..)
            .filter_map(|o| match o {
                Outbound::Publish(t, p, true) if p.is_empty() => Some(t),
                _ => None,
            })
            .collect()
    };
    r.clock.advance(359);
    assert!(
        clears(&mut r).is_empty(),
        "cleared before the command could expire"
    );
    r.clock.advance(2);
    let mut cleared = clears(&mut r);
    cleared.sort();
    assert_eq!(
        cleared,
        ["npu-fleet/b1/cmd/rescan/r1", "npu-fleet/b1/cmd/rescan/r2"],
        "the running compact c9 keeps its record"
    );
    // On a connect the broker delivers an answer of an earlier run: cleared at once.
    let old = json!({"status": "successful", "board": "b1", "action": "rescan", "cmd_id": "old1",
        "time": crate::sys::time::rfc3339_utc((T0 - 3600) as u64, 0)});
    let ev = LinkEvent::Message {
        topic: "npu-fleet/b1/cmd/rescan/old1".into(),
        payload: serde_json::to_vec(&old).unwrap(),
        retain: true,
        ack: None,
    };
    handle_link(&mut r.agent, ev, &r.tx);
    assert_eq!(clears(&mut r), ["npu-fleet/b1/cmd/rescan/old1"]);
    // A recent one stays.
    let recent = json!({"status": "successful", "time": crate::sys::time::rfc3339_utc(r.clock.now_s() as u64, 0)});
    let ev = LinkEvent::Message {
        topic: "npu-fleet/b1/cmd/rescan/new1".into(),
        payload: serde_json::to_vec(&recent).unwrap(),
        retain: true,
        ack: None,
    };
    handle_link(&mut r.agent, ev, &r.tx);
    assert!(clears(&mut r).is_empty());
}
