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

/// Runs `cmd` until it exits or `T` passes (then kills it); returns the exit code (`None`: it
/// was still running) and its stderr.
fn run_bounded(cmd: &mut Command) -> (Option<i32>, String) {
    let dir = tempfile::tempdir().unwrap();
    let errf = dir.path().join("stderr");
    let mut child = cmd
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&errf).unwrap())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    let code = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s.code();
        }
        if t0.elapsed() > T {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    (code, std::fs::read_to_string(errf).unwrap_or_default())
}

const PASSWORD: &str = "Pw-in-clear-37";

/// Item 1: a broker list whose TLS node is down and whose plain node is a real mosquitto, with a
/// user and password (or a client key) set. The agent refuses the list at load (exit 2) instead
/// of logging in to the plain node in clear, and the error never quotes the password.
#[test]
fn a_broker_list_mixing_tls_and_plain_with_credentials_is_refused_by_the_agent() {
    let Some((broker, board)) = broker_and_board(CASE, "b1", "") else {
        return;
    };
    let dead_tls = format!("mqtts://127.0.0.1:{}", free_port());
    let list = format!("{dead_tls},{}", broker.url());
    board.write("/etc/npu-agent/mqtt.pass", PASSWORD);
    board.write("/etc/npu-agent/client.key", "not a key");
    for secret in [
        "username = \"fleet\"\npassword_file = \"/etc/npu-agent/mqtt.pass\"\n",
        "cert_file = \"/etc/npu-agent/client.key\"\nkey_file = \"/etc/npu-agent/client.key\"\n",
    ] {
        let cfg = agent_config(&list, "b1", "").replace("[mqtt]\n", &format!("[mqtt]\n{secret}"));
        board.write("/etc/npu-agent/agent.toml", &cfg);
        let (code, err) = run_bounded(
            Command::new(env!("CARGO_BIN_EXE_npu-agent"))
                .args(["run", "--root"])
                .arg(board.root()),
        );
        assert_eq!(
            code,
            Some(2),
            "{secret}: the agent ran with the mixed list: {err}"
        );
        assert!(
            err.contains("mqtt.url mixes mqtts:// and mqtt:// nodes") && err.contains("in clear"),
            "{err}"
        );
        assert!(!err.contains(PASSWORD), "{err}");
    }
    // The same list without anything secret to send is a cluster like any other.
    board.write("/etc/npu-agent/agent.toml", &agent_config(&list, "b1", ""));
    let _agent = Agent::start(&board);
    let c = Client::connect(broker.port, &["npu-fleet/b1/status"]);
    c.wait_for(T, "a status over the plain node", |m| !m.payload.is_empty());
}

/// Item 1 for the operator's tools: `fleet watch`, `fleet send` and `fleet capture` refuse a
/// mixed `--broker` list while `NPU_AGENT_MQTT_USERNAME` / `_PASSWORD_FILE` / `_KEY_FILE` are
/// set (exit 2, before any connection), where they used to log in to the plain node.
#[test]
fn a_broker_list_mixing_tls_and_plain_with_credentials_is_refused_by_the_fleet_tools() {
    if !require_tool("mosquitto") {
        return;
    }
    let broker = Broker::start();
    let list = format!("mqtts://127.0.0.1:{},{}", free_port(), broker.url());
    let dir = tempfile::tempdir().unwrap();
    let pass = dir.path().join("pass");
    std::fs::write(&pass, PASSWORD).unwrap();
    let pass = pass.to_str().unwrap().to_string();
    let out = dir.path().join("bundle.tar.gz");
    let tools: [Vec<&str>; 3] = [
        vec!["fleet", "watch", "--broker", &list, "--once"],
        vec![
            "fleet", "send", "--broker", &list, "--board", "b1", "rescan",
        ],
        vec![
            "fleet",
            "capture",
            "--broker",
            &list,
            "--board",
            "b1",
            "--out",
            out.to_str().unwrap(),
        ],
    ];
    let envs: [Vec<(&str, &str)>; 2] = [
        vec![
            ("NPU_AGENT_MQTT_USERNAME", "op"),
            ("NPU_AGENT_MQTT_PASSWORD_FILE", &pass),
        ],
        vec![("NPU_AGENT_MQTT_KEY_FILE", &pass)],
    ];
    for args in &tools {
        for env in &envs {
            let (code, err) = run_bounded(
                Command::new(env!("CARGO_BIN_EXE_npu-agent"))
                    .args(args)
                    .env_remove("NPU_AGENT_MQTT_USERNAME")
                    .env_remove("NPU_AGENT_MQTT_PASSWORD_FILE")
                    .env_remove("NPU_AGENT_MQTT_KEY_FILE")
                    .envs(env.iter().copied()),
            );
            assert_eq!(code, Some(2), "{args:?} {env:?}: {err}");
            assert!(
                err.contains("--broker mixes mqtts:// and mqtt:// nodes"),
                "{args:?}: {err}"
            );
            assert!(!err.contains(PASSWORD), "{err}");
        }
    }
    // Without credentials the same list is accepted: `fleet watch --once` reads the plain node.
    let (code, err) = run_bounded(
        Command::new(env!("CARGO_BIN_EXE_npu-agent"))
            .args(["fleet", "watch", "--broker", &list, "--once"])
            .env_remove("NPU_AGENT_MQTT_USERNAME")
            .env_remove("NPU_AGENT_MQTT_PASSWORD_FILE")
            .env_remove("NPU_AGENT_MQTT_KEY_FILE"),
    );
    assert_ne!(code, Some(2), "{err}");
    assert!(code.is_some(), "fleet watch --once did not end: {err}");
}
