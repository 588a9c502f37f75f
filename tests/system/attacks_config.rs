//! Issue 37: the config holes found with broker access, against the real `npu-agent run` and a
//! real mosquitto. A SIGHUP while `agent.toml` is momentarily absent (an editor renaming it away
//! while saving) keeps the running config: unsigned commands stay refused.

use crate::support::mqtt::*;
use serde_json::{json, Value};
use std::process::Command;
use std::time::{Duration, Instant};

const CASE: &str = "own-rk3588-opi5plus-rknpu-0.9.8-healthy";
const T: Duration = Duration::from_secs(15);

/// Waits until `agent`'s log holds `needle` at least `times` times.
fn wait_log_count(agent: &Agent, needle: &str, times: usize) {
    let t0 = Instant::now();
    while agent.log_text().matches(needle).count() < times {
        assert!(
            t0.elapsed() < T,
            "{needle:?} not logged {times} times:\n{}",
            agent.log_text()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Publishes an unsigned `rescan` with id `id` to `b1` and returns its final answer.
fn unsigned_rescan(c: &Client, id: &str) -> Value {
    let topic = format!("npu-fleet/b1/cmd/rescan/{id}");
    let p = init_payload("b1", "rescan", id, json!({}), now_s(), 60, None);
    c.publish(&topic, &p, false);
    c.wait_for(T, &format!("a final answer on {topic}"), |m| {
        m.topic == topic
            && ["successful", "rejected", "failed"]
                .contains(&m.json()["status"].as_str().unwrap_or(""))
    })
    .json()
}

fn hup(pid: u32) {
    let ok = Command::new("kill")
        .args(["-HUP", &pid.to_string()])
        .status()
        .unwrap();
    assert!(ok.success());
}

/// Item 4: the main file renamed away at the moment of a SIGHUP is unreadable, not absent: the
/// built-in defaults (which accept an unsigned `rescan`) never replace the running policy.
#[test]
fn a_sighup_while_agent_toml_is_renamed_away_keeps_the_running_config() {
    let Some((broker, board)) = broker_and_board(
        CASE,
        "b1",
        "[security]\nallow_unsigned = []\n[actions]\ndisabled = [\"set_cma\"]\n",
    ) else {
        return;
    };
    let mut agent = Agent::start(&board);
    let c = Client::connect(broker.port, &["npu-fleet/b1/#"]);
    c.wait_for(T, "a status", |m| {
        m.topic == "npu-fleet/b1/status" && !m.payload.is_empty()
    });
    let pid = agent.pid();
    assert_eq!(unsigned_rescan(&c, "r-before")["status"], "rejected");
    // The editor's save: the file renamed away, then (after the signal) written back.
    let main = board.root().join("etc/npu-agent/agent.toml");
    let aside = board.root().join("etc/npu-agent/agent.toml~");
    std::fs::rename(&main, &aside).unwrap();
    hup(pid);
    wait_log_count(&agent, "SIGHUP: the config was not reloaded", 1);
    let log = agent.log_text();
    assert!(
        log.contains("agent.toml: missing, though it was there"),
        "{log}"
    );
    assert!(!log.contains("SIGHUP: config reloaded"), "{log}");
    assert_eq!(
        unsigned_rescan(&c, "r-absent")["status"],
        "rejected",
        "the defaults' allow_unsigned came back"
    );
    // The file back: a reload applies it again, and the policy is still the file's.
    std::fs::rename(&aside, &main).unwrap();
    hup(pid);
    wait_log_count(&agent, "SIGHUP: config reloaded", 1);
    assert_eq!(unsigned_rescan(&c, "r-back")["status"], "rejected");
    assert!(agent.is_running() && agent.pid() == pid);
}
