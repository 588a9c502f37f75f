//! The fleet link against the brokers fleets run, each started here on a free loopback port:
//! RabbitMQ 3.10 and amqtt (both MQTT 3.1.1 only: RabbitMQ closes the socket on an MQTT 5
//! CONNECT, amqtt never answers it) and mosquitto with a 4 KiB packet limit. The real agent,
//! `fleet send` and `fleet watch` run end to end. Also: two agents with one board id (fixture
//! `mqtt-reconnect-storm-no-backoff-after-broker-kick`, BR-38) and connection failures before the
//! first connect (logged once per cause, with the broker's reason code).

use crate::support::mqtt::{agent_config, require_tool, Agent, Board, Broker, Client};
use crate::support::{brokers, mqtt};
use serde_json::Value;
use std::process::Command;
use std::time::{Duration, Instant};

const CASE: &str = "own-rk3588-opi5plus-rknpu-0.9.8-healthy";
const T: Duration = Duration::from_secs(30);

fn run_cli(args: &[&str]) -> (i32, String, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_npu-agent"))
        .args(args)
        .output()
        .unwrap();
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// Agent, `fleet send` and `fleet watch --once` against a 3.1.1-only broker.
fn end_to_end_on_a_311_broker(url: &str, port: u16, wildcard_retained: bool) {
    let board = Board::from_fixture(CASE, "b1", &agent_config(url, "b1", ""));
    let agent = Agent::start(&board);
    let watcher = Client::connect(port, &["npu-fleet/b1/status", "npu-fleet/b1/availability"]);
    let status = watcher.wait_for(T, "a status", |m| {
        m.topic == "npu-fleet/b1/status" && !m.payload.is_empty()
    });
    // health and board_id first, for a person reading mosquitto_sub.
    assert!(
        status.text().starts_with("{\"health\":\"")
            && status.text().contains("\"board_id\":\"b1\""),
        "{}",
        &status.text()[..status.text().len().min(120)]
    );
    assert_eq!(status.json()["board_id"], "b1");
    let log = agent.log_text();
    assert!(log.contains("broker refuses MQTT 5"), "{log}");
    assert!(
        log.contains("protocol=3.1.1") || log.contains("protocol=\"3.1.1\""),
        "{log}"
    );
    // A command round trip through fleet send (which falls back the same way).
    let (code, out, err) = run_cli(&[
        "fleet", "send", "rescan", "--board", "b1", "--broker", url, "--wait", "30",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.lines().last().unwrap_or("").contains(" successful"),
        "{out}{err}"
    );
    assert!(err.contains("refuses MQTT 5"), "{err}");
    let (code, out, err) = run_cli(&[
        "fleet", "watch", "--broker", url, "--once", "--format", "json",
    ]);
    if wildcard_retained {
        assert_eq!(code, 0, "{out}{err}");
        let v: Value = serde_json::from_str(&out).unwrap();
        assert_eq!(v["boards"][0]["board"], "b1", "{v}");
        assert_eq!(v["boards"][0]["health"], status.json()["health"], "{v}");
    } else {
        // RabbitMQ before 3.13 keeps retained messages but never sends them to a wildcard
        // subscription: an empty list would be a lie, so the tool says why and fails.
        assert_eq!(code, 1, "{out}{err}");
        assert!(err.contains("wildcard"), "{err}");
        assert!(!out.contains("\"boards\": []"), "{out}");
    }
}

#[test]
fn rabbitmq_agent_fleet_send_and_watch() {
    if !brokers::have_rabbitmq() {
        return;
    }
    let r = brokers::RabbitMq::start();
    end_to_end_on_a_311_broker(&r.url(), r.port, false);
    drop(r);
}

#[test]
fn amqtt_agent_fleet_send_and_watch() {
    if !brokers::have_amqtt() {
        return;
    }
    let a = brokers::Amqtt::start();
    end_to_end_on_a_311_broker(&a.url(), a.port, true);
}

/// mosquitto with `max_packet_size 4096`: MQTT 5 announces it in CONNACK; the agent sends the
/// compact status (under 4 KiB) and does not reconnect in a loop. With `protocol = "3.1.1"` the
/// broker cannot announce it and drops the connection on the full status instead: the agent
/// switches to the compact form once.
#[test]
fn a_status_bigger_than_the_broker_allows_goes_out_compact_without_a_storm() {
    if !require_tool("mosquitto") {
        return;
    }
    for (protocol, announced) in [("5", true), ("3.1.1", false)] {
        let broker = Broker::start_with(mqtt::free_port(), "max_packet_size 4096");
        let board = Board::from_fixture(
            CASE,
            "b1",
            &agent_config(&broker.url(), "b1", "").replace(
                "keep_alive_s = 5\n",
                &format!("keep_alive_s = 5\nprotocol = \"{protocol}\"\n"),
            ),
        );
        let agent = Agent::start(&board);
        let watcher = Client::connect(broker.port, &["npu-fleet/b1/#"]);
        let s = watcher.wait_for(T, "a compact status", |m| {
            m.topic == "npu-fleet/b1/status" && m.json()["form"] == "compact"
        });
        assert!(s.payload.len() <= 4096, "{} bytes", s.payload.len());
        assert!(s.text().starts_with("{\"health\":"), "{}", s.text());
        let v = s.json();
        assert!(v["checks"].as_object().unwrap().len() > 5, "{v}");
        assert!(v["metrics"]["cma_total_bytes"].is_number(), "{v}");
        // Watch until two more statuses (4 s at interval_s = 2): few connects (availability
        // "online"), statuses keep arriving.
        let t0 = Instant::now();
        let mut later = Vec::new();
        while later
            .iter()
            .filter(|m: &&mqtt::Msg| m.topic == "npu-fleet/b1/status")
            .count()
            < 2
        {
            later.extend(watcher.drain());
            assert!(
                t0.elapsed() < T,
                "{protocol}: statuses stopped: {}",
                agent.log_text()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        let onlines = later
            .iter()
            .filter(|m| m.topic == "npu-fleet/b1/availability" && m.text() == "online" && m.at > t0)
            .count();
        assert!(
            onlines <= 1,
            "{protocol}: {onlines} reconnects in two status intervals"
        );
        let statuses: Vec<&mqtt::Msg> = later
            .iter()
            .filter(|m| m.topic == "npu-fleet/b1/status")
            .collect();
        assert!(!statuses.is_empty(), "{protocol}: no status");
        let last = statuses.last().unwrap().json();
        assert!(last["session"].as_u64().unwrap() <= 3, "{protocol}: {last}");
        let log = agent.log_text();
        if announced {
            assert!(log.contains("max_packet_bytes=4096"), "{log}");
        } else {
            assert!(
                log.contains("publishing the compact status from now on"),
                "{log}"
            );
        }
    }
}

/// BR-38: two boards with one board id. Before: ~190 connects each in 40 s. Now each side backs
/// off on every kick, says once that another client may use this board id (mosquitto 2.0 gives
/// no reason code for a takeover, so an overloaded broker cannot be ruled out), and does not
/// fight.
#[test]
fn br38_two_agents_with_one_board_id_do_not_storm() {
    if !require_tool("mosquitto") {
        return;
    }
    let case = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/boards/mqtt-reconnect-storm-no-backoff-after-broker-kick");
    let expected = std::fs::read_to_string(case.join("expected.toml")).unwrap();
    assert!(expected.contains("id = \"BR-38\""));
    let broker = Broker::start();
    let observer = Client::connect(broker.port, &["npu-fleet/dup/availability"]);
    let a = Board::from_fixture(CASE, "dup", &agent_config(&broker.url(), "dup", ""));
    let b = Board::from_fixture(CASE, "dup", &agent_config(&broker.url(), "dup", ""));
    let agent_a = Agent::start(&a);
    // The second twin starts once the first is online.
    let first_online = observer.wait_for(T, "the first twin online", |m| m.text() == "online");
    let agent_b = Agent::start(&b);
    let started = Instant::now();
    // Each twin reports the takeover after three kicks in a row; every kick is followed by a
    // back-off (1.6 s doubled per kick, at least 2 x 1.6 s x 0.75 here) and the twins take turns.
    let takeover = "another client may use this board id";
    let deadline = started + Duration::from_secs(60);
    while ![&agent_a, &agent_b]
        .iter()
        .all(|a| a.log_text().contains(takeover))
    {
        assert!(
            Instant::now() < deadline,
            "no takeover reported by both twins in 60 s:\n{}\n---\n{}",
            agent_a.log_text(),
            agent_b.log_text()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let took = started.elapsed();
    let mut msgs = vec![first_online];
    msgs.extend(observer.drain());
    let onlines = msgs.iter().filter(|m| m.text() == "online").count();
    let offlines = msgs.iter().filter(|m| m.text() == "offline").count();
    eprintln!("br38: both twins reported the takeover after {took:?}: {onlines} online, {offlines} offline");
    // Without a back-off the six kicks before both reports take well under a second.
    let two_kick_backoffs = (npu_agent::mqtt::link::KICK_BASE * 2).mul_f64(0.75 * 2.0);
    assert!(
        took >= two_kick_backoffs,
        "both twins reported after {took:?} ({onlines} online messages): no back-off on a kick"
    );
    // "No more than a few connects per minute" per side after the first kicks.
    assert!(onlines <= 16, "{onlines} online messages in {took:?}");
    assert!(offlines <= 16, "{offlines} offline messages in {took:?}");
    let logs = format!("{}{}", agent_a.log_text(), agent_b.log_text());
    let reports = logs.matches(takeover).count();
    assert!(reports >= 1, "{logs}");
    assert!(reports <= 4, "reported {reports} times: {logs}");
}

/// Waits for the first "cannot connect" line, then 4 s more, in which the agent (the tests'
/// `reconnect_max_s = 2`: waits under 1, 2, 2... s) retries about four times: a second line per
/// cause would be there.
/// Returns the log.
fn retried_after_first_failure(agent: &Agent) -> String {
    let t0 = Instant::now();
    while !agent
        .log_text()
        .contains("cannot connect to the MQTT broker")
    {
        assert!(
            t0.elapsed() < T,
            "no connection failure logged: {}",
            agent.log_text()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    std::thread::sleep(Duration::from_secs(4));
    agent.log_text()
}

/// Failures before the first connect are logged, once per cause, with the broker's reason code.
#[test]
fn connection_failures_before_the_first_connect_are_logged_once_per_cause() {
    if !require_tool("mosquitto") {
        return;
    }
    // Nothing listening.
    let port = mqtt::free_port();
    let board = Board::from_fixture(
        CASE,
        "b1",
        &agent_config(&format!("mqtt://127.0.0.1:{port}"), "b1", ""),
    );
    let agent = Agent::start(&board);
    let log = retried_after_first_failure(&agent);
    assert_eq!(
        log.matches("cannot connect to the MQTT broker").count(),
        1,
        "{log}"
    );
    assert!(log.contains("network:"), "{log}");
    drop(agent);
    // A broker that refuses anonymous clients: MQTT 5 reason code 0x87 (not authorized) or 0x86.
    let broker = Broker::start_with(mqtt::free_port(), "allow_anonymous false");
    let board = Board::from_fixture(CASE, "b1", &agent_config(&broker.url(), "b1", ""));
    let agent = Agent::start(&board);
    let log = retried_after_first_failure(&agent);
    assert_eq!(
        log.matches("cannot connect to the MQTT broker").count(),
        1,
        "{log}"
    );
    assert!(
        log.contains("reason code 0x87") || log.contains("reason code 0x86"),
        "{log}"
    );
    assert!(
        !log.contains("refuses MQTT 5"),
        "an auth refusal is no protocol refusal: {log}"
    );
}

/// The MQTT behaviour cases this file asserts are copies of the shared fixtures, unchanged.
#[test]
fn mqtt_fixtures_are_copied_unchanged() {
    let here = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let shared = here.join("../shared/fixtures/boards");
    if !shared.is_dir() {
        eprintln!("SKIP: no ../shared beside the checkout to compare the fixture copies with");
        return;
    }
    for case in [
        "mqtt-reconnect-storm-no-backoff-after-broker-kick",
        "mqtt-board-clock-stepped-back-10-days-expiring-commands",
    ] {
        for file in ["expected.toml", "scenario/events.toml"] {
            let ours =
                std::fs::read_to_string(here.join("tests/fixtures/boards").join(case).join(file));
            let theirs = std::fs::read_to_string(shared.join(case).join(file));
            assert_eq!(ours.unwrap(), theirs.unwrap(), "{case}/{file}");
        }
    }
}

/// BR-37: a board whose clock is not synchronised (systemd-timesyncd runs, no sync yet) reports
/// it (`clock.sync` warn, a notice in the status) and refuses expiring destructive commands with
/// "board clock not synchronised"; once the clock is synchronised the same kind of command runs,
/// and a command issued in the future is refused naming the requester's clock.
#[test]
fn br37_unsynchronised_clock_holds_expiring_destructive_commands() {
    if !require_tool("mosquitto") {
        return;
    }
    let case = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/boards/mqtt-board-clock-stepped-back-10-days-expiring-commands");
    assert!(std::fs::read_to_string(case.join("expected.toml"))
        .unwrap()
        .contains("id = \"BR-37\""));
    use ed25519_dalek::pkcs8::{spki::der::pem::LineEnding, EncodePublicKey};
    let key = npu_agent::mqtt::command::SigningKey::from_bytes(&[37; 32]);
    let broker = Broker::start();
    let board = Board::from_fixture(CASE, "b1", "");
    // Encoded by an independent implementation (ed25519-dalek) of the same seed.
    let pem = ed25519_dalek::SigningKey::from_bytes(&key.to_bytes())
        .verifying_key()
        .to_public_key_pem(LineEnding::LF)
        .unwrap();
    // A board path: key files are read under the root.
    board.write("/etc/npu-agent/operator.pub", &pem);
    board.write(
        "/etc/npu-agent/agent.toml",
        &agent_config(
            &broker.url(),
            "b1",
            "[security]\ntrusted_keys = [\"/etc/npu-agent/operator.pub\"]\n",
        ),
    );
    std::fs::create_dir_all(board.root().join("run/systemd/timesync")).unwrap();
    let _agent = Agent::start(&board);
    let c = Client::connect(broker.port, &["npu-fleet/b1/#"]);
    let s = c.wait_for(T, "a status with the clock notice", |m| {
        m.topic == "npu-fleet/b1/status" && m.text().contains("board clock not synchronised")
    });
    let v = s.json();
    let f = v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["id"] == "clock.sync")
        .unwrap()
        .clone();
    assert_eq!(f["status"], "warn", "{f}");
    let now = mqtt::now_s();
    let send = |id: &str, issued: i64| {
        c.publish(
            &format!("npu-fleet/b1/cmd/set_cma/{id}"),
            &mqtt::init_payload(
                "b1",
                "set_cma",
                id,
                serde_json::json!({"size": "512M"}),
                issued,
                300,
                Some(&key),
            ),
            true,
        );
    };
    send("clk-1", now);
    let r = c.wait_for(T, "clk-1 rejected", |m| {
        m.topic == "npu-fleet/b1/cmd/set_cma/clk-1" && m.json()["status"] == "rejected"
    });
    assert_eq!(
        r.json()["reason"],
        "board clock not synchronised: expiring commands are refused until it is"
    );
    assert!(!board
        .read("/boot/armbianEnv.txt")
        .unwrap()
        .contains("cma=512M"));
    // The clock gets synchronised: the next command runs once the agent has read the clock
    // again (it re-reads it at most every CLOCK_REPROBE, so a flood costs no file I/O per
    // message).
    std::fs::write(board.root().join("run/systemd/timesync/synchronized"), "").unwrap();
    // Sent again under a new id until it runs: each try is refused (no slot used) until the
    // cached clock state expires, which takes at most CLOCK_REPROBE.
    let t0 = Instant::now();
    for i in 0.. {
        let id = format!("clk-2-{i}");
        let topic = format!("npu-fleet/b1/cmd/set_cma/{id}");
        send(&id, now + 1);
        let r = c.wait_for(T, &format!("{id} answered"), |m| {
            m.topic == topic
                && ["rejected", "successful"].contains(&m.json()["status"].as_str().unwrap_or(""))
        });
        if r.json()["status"] == "successful" {
            break;
        }
        assert!(
            t0.elapsed() < npu_agent::daemon::CLOCK_REPROBE + T,
            "still refused after the clock was synchronised: {}",
            r.text()
        );
        std::thread::sleep(Duration::from_millis(250));
    }
    assert!(board
        .read("/boot/armbianEnv.txt")
        .unwrap()
        .contains("cma=512M"));
    // A command issued 10 days ahead of a synchronised board: the requester's clock is ahead.
    send("clk-3", now + 876_457);
    let r = c.wait_for(T, "clk-3 rejected", |m| {
        m.topic == "npu-fleet/b1/cmd/set_cma/clk-3" && m.json()["status"] == "rejected"
    });
    let reason = r.json()["reason"].as_str().unwrap().to_string();
    assert!(reason.contains("requester's clock is ahead"), "{reason}");
}

/// The Home Assistant venv `.ci/run` makes (Home Assistant 2025.4, Python 3.13), or the Python
/// `NPUAGENT_TEST_HA_PYTHON` names (to try another venv).
fn ha_python() -> Option<std::path::PathBuf> {
    if let Some(p) = std::env::var_os("NPUAGENT_TEST_HA_PYTHON") {
        return Some(p.into());
    }
    let p = std::path::Path::new(&std::env::var_os("HOME")?)
        .join(".cache/npu-agent-ci/ha-venv/bin/python");
    p.exists().then_some(p)
}

/// Every discovery payload component validated by Home Assistant's own MQTT discovery schemas,
/// and every value_template rendered by its template engine: a missing metric is unknown (not
/// 0 B), `error`/`skip` checks are unknown (not "no problem"), the compact form reads the same.
#[test]
fn home_assistant_validates_the_discovery_payload_and_its_meaning() {
    let Some(python) = ha_python() else {
        assert!(
            std::env::var_os("CI").is_none(),
            "Home Assistant is required in CI (.ci/run installs it into ~/.cache/npu-agent-ci/ha-venv)"
        );
        eprintln!("SKIP: no Home Assistant venv under ~/.cache/npu-agent-ci/ha-venv");
        return;
    };
    let ctx = npu_agent::report::ha::HaContext {
        prefix: "homeassistant",
        topic_root: "npu-fleet",
        board: "b1",
        model: "Orange Pi 5 Plus",
        profile: "rk3588-rknpu",
        buttons: vec![
            npu_agent::model::action::ActionKind::Compact,
            npu_agent::model::action::ActionKind::Rescan,
        ],
    };
    let payload = npu_agent::report::ha::discovery_payload(&ctx);
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/boards")
        .join(CASE)
        .join("root");
    let (code, out, err) = run_cli(&[
        "check",
        "--format",
        "json",
        "--root",
        root.to_str().unwrap(),
    ]);
    assert!(code == 0 || code == 1, "{err}");
    let full: Value = serde_json::from_str(&out).unwrap();
    let cma_total = full["metrics"]["cma_total_bytes"]
        .as_u64()
        .unwrap()
        .to_string();
    let report: npu_agent::report::Report = serde_json::from_str(&out).unwrap();
    let compact = serde_json::to_value(npu_agent::report::compact(&report, false)).unwrap();
    // A board whose CMA metrics are missing and whose checks could not judge.
    let mut broken = full.clone();
    broken["metrics"] = serde_json::json!({});
    for f in broken["findings"].as_array_mut().unwrap() {
        if f["id"] == "limits.nofile" {
            f["status"] = "error".into();
        }
        if f["id"] == "cma.free" {
            f["status"] = "warn".into();
        }
    }
    let cases = serde_json::json!([
        {"name": "full", "status": full, "expect": {
            "b1_cma_total": cma_total, "b1_health": full["health"],
            "b1_check_limits_nofile": "OFF", "b1_check_clock_sync": "None",
            "b1_check_hailo_pci_device": "None"}},
        {"name": "compact", "status": compact, "expect": {
            "b1_cma_total": cma_total, "b1_check_limits_nofile": "OFF",
            "b1_check_clock_sync": "None"}},
        {"name": "broken", "status": broken, "expect": {
            "b1_cma_total": "None", "b1_cma_free": "None",
            "b1_check_limits_nofile": "None", "b1_check_cma_free": "ON"}},
        {"name": "not a status", "status": {"x": 1}, "expect": {
            "b1_cma_total": "None", "b1_health": "None", "b1_check_limits_nofile": "None"}}
    ]);
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("discovery.json"), payload.to_string()).unwrap();
    std::fs::write(dir.path().join("cases.json"), cases.to_string()).unwrap();
    let o = Command::new(python)
        .arg(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/ha_schema.py"))
        .arg(dir.path().join("discovery.json"))
        .arg(dir.path().join("cases.json"))
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(o.status.success(), "{text}");
    let n = payload["cmps"].as_object().unwrap().len();
    assert!(
        text.contains(&format!("validated {n} components; 15 templates")),
        "{text}"
    );
}
