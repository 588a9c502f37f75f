//! The fleet link against a real mosquitto (started here on a free loopback port) and the real
//! `npu-agent run` process on a temporary board tree: retained status and availability, the last
//! will, broker restart and absence, commands with their lifecycle, hostile payloads, a burst,
//! mTLS, `fleet send` / `fleet watch`, reboot proven by boot_id, Home Assistant discovery.
//! Fixture cases BR-24 (subscriptions lost after reconnect) and BR-26 (a full request channel
//! freezing the loop) are asserted by `br24_*` and `br26_*`.

use crate::support::mqtt::*;
use serde_json::{json, Value};
use std::process::Command;
use std::time::{Duration, Instant};

const CASE: &str = "own-rk3588-opi5plus-rknpu-0.9.8-healthy";
const T: Duration = Duration::from_secs(15);

fn key(seed: u8) -> npu_agent::mqtt::command::SigningKey {
    npu_agent::mqtt::command::SigningKey::from_bytes(&[seed; 32])
}

/// Writes the public key of `seed` into the board and returns the config lines that trust it.
/// For the flood attacks: a mosquitto that keeps every queued message for each client
/// (`max_queued_messages 0`, as the operator guide asks of a fleet broker, so the test clients' own
/// copies are never dropped) and board `b1` of [`CASE`] trusting key 1. `None` when mosquitto
/// is missing outside CI.
fn flood_broker_and_board() -> Option<(Broker, Board)> {
    if !require_tool("mosquitto") {
        return None;
    }
    let broker = Broker::start_with(free_port(), "max_queued_messages 0\n");
    let board = Board::from_fixture(CASE, "b1", "");
    board.write(
        "/etc/npu-agent/agent.toml",
        &agent_config(&broker.url(), "b1", &trust(&board, 1)),
    );
    Some((broker, board))
}

fn trust(board: &Board, seed: u8) -> String {
    use ed25519_dalek::pkcs8::{spki::der::pem::LineEnding, EncodePublicKey};
    // Encoded by an independent implementation (ed25519-dalek) of the same seed.
    let pem = ed25519_dalek::SigningKey::from_bytes(&[seed; 32])
        .verifying_key()
        .to_public_key_pem(LineEnding::LF)
        .unwrap();
    // A board path: key files are read under the root, as every board file is.
    board.write("/etc/npu-agent/operator.pub", &pem);
    "[security]\ntrusted_keys = [\"/etc/npu-agent/operator.pub\"]\n".to_string()
}

fn setup(id: &str, extra: &str) -> Option<(Broker, Board)> {
    broker_and_board(CASE, id, extra)
}

fn status_of(c: &Client, board: &str) -> Msg {
    let topic = format!("npu-fleet/{board}/status");
    c.wait_for(T, "a status", |m| m.topic == topic && !m.payload.is_empty())
}

fn lifecycle(c: &Client, topic: &str, status: &str) -> Value {
    let t = topic.to_string();
    let s = status.to_string();
    c.wait_for(T, &format!("{status} on {topic}"), move |m| {
        m.topic == t && m.json()["status"] == s.as_str()
    })
    .json()
}

/// Publishes an unsigned reboot (always refused; a refusal uses no rate-limit slot) and returns
/// every message received until its `rejected` answer. The agent handles one connection's
/// messages in order, so whatever an earlier message caused was published before this answer:
/// a negative check needs this marker, not a fixed wait. `c` must subscribe to `board`'s commands.
fn until_marker(c: &Client, board: &str, id: &str) -> Vec<Msg> {
    let topic = format!("npu-fleet/{board}/cmd/reboot/{id}");
    let p = init_payload(board, "reboot", id, json!({}), now_s(), 60, None);
    c.publish(&topic, &p, false);
    let t0 = Instant::now();
    let mut seen = Vec::new();
    loop {
        for m in c.drain() {
            let done = m.topic == topic && m.json()["status"] == "rejected";
            seen.push(m);
            if done {
                return seen;
            }
        }
        assert!(t0.elapsed() < T, "no answer to the ordering marker {topic}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Collects `c`'s messages until `enough` holds for all of them or `max` has passed (a settle
/// period that ends as soon as its condition is met).
fn collect_for(c: &Client, max: Duration, enough: impl Fn(&[Msg]) -> bool) -> Vec<Msg> {
    let t0 = Instant::now();
    let mut seen = Vec::new();
    loop {
        seen.extend(c.drain());
        if enough(&seen) || t0.elapsed() >= max {
            return seen;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The last status seen on each topic.
fn last_status(msgs: &[Msg]) -> std::collections::HashMap<String, String> {
    msgs.iter()
        .map(|m| {
            let st = m.json()["status"].as_str().unwrap_or("").to_string();
            (m.topic.clone(), st)
        })
        .collect()
}

/// Waits until the agent's log holds one of `needles` (a link event the test depends on).
fn wait_log(agent: &Agent, needles: &[&str]) {
    let t0 = Instant::now();
    while !needles.iter().any(|n| agent.log_text().contains(n)) {
        assert!(
            t0.elapsed() < T,
            "none of {needles:?} logged:\n{}",
            agent.log_text()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn agent_bin() -> &'static str {
    env!("CARGO_BIN_EXE_npu-agent")
}

#[test]
fn status_arrives_retained_and_parses() {
    let Some((broker, board)) = setup("b1", "") else {
        return;
    };
    let _agent = Agent::start(&board);
    let live = Client::connect(broker.port, &["npu-fleet/b1/#"]);
    let first = status_of(&live, "b1");
    // A client connecting later gets both as retained messages.
    let late = Client::connect(
        broker.port,
        &["npu-fleet/b1/status", "npu-fleet/b1/availability"],
    );
    let retained = late.wait_for(T, "retained status", |m| {
        m.topic == "npu-fleet/b1/status" && m.retain
    });
    let avail = late.wait_for(T, "retained availability", |m| {
        m.topic == "npu-fleet/b1/availability"
    });
    assert_eq!(avail.text(), "online");
    assert!(avail.retain);
    for s in [first.json(), retained.json()] {
        assert_eq!(s["schema"], 1);
        assert_eq!(s["board_id"], "b1");
        assert_eq!(s["profile"], "rk3588-rknpu");
        assert_eq!(s["health"], "ok");
        assert!(s["session"].as_u64().unwrap() >= 1);
        assert_eq!(s["metrics"]["cma_total_bytes"], 268_435_456u64);
        assert_eq!(s["metrics"]["mqtt_incoming_dropped"], 0u64);
        assert!(s["metrics"]["mqtt_status_coalesced"].is_u64());
        assert!(s["findings"].as_array().unwrap().len() >= npu_agent::check::CHECK_IDS.len());
        assert!(time::OffsetDateTime::parse(
            s["time"].as_str().unwrap(),
            &time::format_description::well_known::Rfc3339
        )
        .is_ok());
    }
}

#[test]
fn availability_goes_offline_on_sigkill_and_on_clean_stop() {
    let Some((broker, board)) = setup("b1", "") else {
        return;
    };
    let c = Client::connect(broker.port, &["npu-fleet/b1/availability"]);
    let mut agent = Agent::start(&board);
    c.wait_for(T, "online", |m| m.text() == "online");
    agent.kill();
    // The broker sends the last will after 1.5 keep-alives (5 s).
    c.wait_for(Duration::from_secs(20), "offline (last will)", |m| {
        m.text() == "offline"
    });
    let mut agent = Agent::start(&board);
    c.wait_for(T, "online again", |m| m.text() == "online");
    assert_eq!(
        agent.terminate(),
        Some(0),
        "clean stop exits 0: {}",
        agent.log_text()
    );
    let off = c.wait_for(Duration::from_secs(3), "offline before a clean stop", |m| {
        m.text() == "offline"
    });
    assert!(off.at.elapsed() < Duration::from_secs(3));
    // The clean stop is logged: its cause, and that offline was published.
    let log = agent.log_text();
    let stop = log
        .lines()
        .filter(|l| l.contains("signal=SIGTERM"))
        .collect::<Vec<_>>();
    assert!(
        stop.iter().any(|l| l.contains("stopping")),
        "no stop cause logged:\n{log}"
    );
    assert!(
        stop.iter()
            .any(|l| l.contains("published the retained availability offline")),
        "no offline logged:\n{log}"
    );
}

#[test]
fn br24_broker_restart_restores_subscriptions_and_status() {
    let Some((mut broker, board)) = setup("b1", "") else {
        return;
    };
    let agent = Agent::start(&board);
    let c = Client::connect(broker.port, &["npu-fleet/b1/#"]);
    let s1 = status_of(&c, "b1").json()["session"].as_u64().unwrap();
    broker.stop();
    // The agent has seen the broker go before it comes back empty.
    wait_log(&agent, &["MQTT connection lost"]);
    broker.restart();
    let restarted = Instant::now();
    // The agent cannot know the broker lost everything: it must re-publish and re-subscribe.
    let c = Client::connect(broker.port, &["npu-fleet/b1/#"]);
    c.wait_for(T, "online after restart", |m| {
        m.topic == "npu-fleet/b1/availability" && m.text() == "online"
    });
    let online_ms = restarted.elapsed().as_millis();
    let s2 = status_of(&c, "b1").json();
    assert!(
        s2["session"].as_u64().unwrap() > s1,
        "session counter increments on reconnect: {s1} -> {}",
        s2["session"]
    );
    eprintln!("bench: broker restart -> online + status in {online_ms} ms");
    // A command sent after the restart executes (the subscription was restored).
    let topic = "npu-fleet/b1/cmd/rescan/after-restart";
    c.publish(
        topic,
        &init_payload(
            "b1",
            "rescan",
            "after-restart",
            json!({}),
            now_s(),
            60,
            None,
        ),
        true,
    );
    lifecycle(&c, topic, "successful");
}

#[test]
fn broker_absent_at_start_then_status_arrives() {
    if !require_tool("mosquitto") {
        return;
    }
    let port = free_port();
    let board = Board::from_fixture(CASE, "b1", "");
    board.write(
        "/etc/npu-agent/agent.toml",
        &agent_config(&format!("mqtt://127.0.0.1:{port}"), "b1", ""),
    );
    let mut agent = Agent::start(&board);
    // It has tried and failed to connect (and must survive that).
    wait_log(&agent, &["cannot connect to the MQTT broker"]);
    assert!(
        agent.is_running(),
        "the agent must keep running without a broker: {}",
        agent.log_text()
    );
    let broker = Broker::start_with(port, "");
    let c = Client::connect(broker.port, &["npu-fleet/b1/#"]);
    let s = status_of(&c, "b1");
    assert_eq!(s.json()["board_id"], "b1");
}

#[test]
fn duplicate_delivery_executes_once() {
    let Some((broker, board)) = setup("b1", "") else {
        return;
    };
    let _agent = Agent::start(&board);
    let c = Client::connect(broker.port, &["npu-fleet/b1/#"]);
    status_of(&c, "b1");
    let topic = "npu-fleet/b1/cmd/rescan/dup-1";
    let p = init_payload("b1", "rescan", "dup-1", json!({}), now_s(), 60, None);
    c.publish(topic, &p, false);
    c.publish(topic, &p, false);
    c.publish(topic, &p, false);
    lifecycle(&c, topic, "successful");
    // Any answer to a duplicate would arrive before the marker's.
    let later = until_marker(&c, "b1", "dup-marker");
    let states: Vec<String> = later
        .iter()
        .filter(|m| m.topic == topic)
        .map(|m| m.json()["status"].as_str().unwrap_or("").to_string())
        .collect();
    // A copy that arrives after the command finished is answered again (its answer may have
    // been lost), never run again.
    assert!(
        !states.iter().any(|s| s == "executing" || s == "rejected"),
        "duplicates must never run again, got {states:?}"
    );
}

/// Issue 28 item 1: the link dropped right after `successful`, so the broker still holds the
/// retained `init` and delivers it again. The agent answers it with the recorded final state
/// (without running it again), so the command does not stay unanswered for ever.
#[test]
fn a_finished_command_delivered_again_is_answered_again() {
    let Some((broker, board)) = setup("b1", "") else {
        return;
    };
    let _agent = Agent::start(&board);
    let c = Client::connect(broker.port, &["npu-fleet/b1/#"]);
    status_of(&c, "b1");
    let topic = "npu-fleet/b1/cmd/rescan/lost-1";
    let p = init_payload("b1", "rescan", "lost-1", json!({}), now_s(), 60, None);
    c.publish(topic, &p, true);
    lifecycle(&c, topic, "successful");
    let _ = c.drain();
    // The broker "lost" the answer: the retained message is the init again.
    c.publish(topic, &p, true);
    let again = lifecycle(&c, topic, "successful");
    assert_eq!(again["cmd_id"], "lost-1");
    let later = until_marker(&c, "b1", "lost-marker");
    assert!(
        !later
            .iter()
            .any(|m| m.topic == topic && m.json()["status"] == "executing"),
        "it ran again"
    );
    // What stays retained is the answer, not the init.
    let fresh = Client::connect(broker.port, &[topic]);
    let kept = fresh.wait_for(T, "the retained record", |m| m.topic == topic);
    assert_eq!(kept.json()["status"], "successful");
}

/// Issue 28 item 1, the real fault: the connection dies as the agent publishes `successful`
/// (a proxy cuts it instead of passing that PUBLISH on), so the broker keeps `executing`, not the
/// `init`, and nothing is delivered again. The agent sends the answer again on its next
/// connection (rumqttc alone drops it on a clean start), and the command ran once.
#[test]
fn an_answer_cut_off_by_the_broker_is_sent_again_on_the_next_connection() {
    use crate::support::proxy::{contains, packet_type, Dir, Fault};
    let Some((broker, board)) = setup("b1", "") else {
        return;
    };
    let cut = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let seen = cut.clone();
    let rule = move |dir: Dir, p: &[u8]| {
        let answer = dir == Dir::Up
            && packet_type(p) == 3
            && contains(p, b"cmd/rescan/cut-1")
            && contains(p, b"\"successful\"");
        if answer && !seen.swap(true, std::sync::atomic::Ordering::SeqCst) {
            Fault::Cut
        } else {
            Fault::Pass
        }
    };
    let (_proxy, agent) = behind_proxy(&broker, &board, rule);
    let c = Client::connect(broker.port, &["npu-fleet/b1/#"]);
    status_of(&c, "b1");
    let topic = "npu-fleet/b1/cmd/rescan/cut-1";
    let p = init_payload("b1", "rescan", "cut-1", json!({}), now_s(), 60, None);
    c.publish(topic, &p, true);
    lifecycle(&c, topic, "executing");
    let done = lifecycle(&c, topic, "successful");
    assert!(
        cut.load(std::sync::atomic::Ordering::SeqCst),
        "the proxy never cut"
    );
    assert_eq!(done["cmd_id"], "cut-1");
    // The status of the new connection comes after its subscriptions (the marker is live).
    status_of(&c, "b1");
    let later = until_marker(&c, "b1", "cut-marker");
    assert!(
        !later
            .iter()
            .any(|m| m.topic == topic && m.json()["status"] == "executing"),
        "it ran again"
    );
    let fresh = Client::connect(broker.port, &[topic]);
    let kept = fresh.wait_for(T, "the retained record", |m| m.topic == topic);
    assert_eq!(kept.json()["status"], "successful", "{}", agent.log_text());
    assert!(
        agent
            .log_text()
            .contains("its final state is published again"),
        "{}",
        agent.log_text()
    );
}

#[test]
fn hostile_commands_are_rejected_and_the_agent_keeps_serving() {
    let Some((broker, board)) = setup("b1", "") else {
        return;
    };
    board.write(
        "/etc/npu-agent/agent.toml",
        &agent_config(&broker.url(), "b1", &trust(&board, 1)),
    );
    let mut agent = Agent::start(&board);
    let c = Client::connect(broker.port, &["npu-fleet/b1/#"]);
    status_of(&c, "b1");
    // An oversized retained message on a command topic: the broker must not send it to the
    // agent (MQTT 5 Maximum Packet Size), and the connection must not wedge.
    c.publish("npu-fleet/b1/cmd/compact/huge", &vec![b'x'; 200_000], true);
    let now = now_s();
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        (
            "npu-fleet/b1/cmd/rescan/exp-1",
            init_payload("b1", "rescan", "exp-1", json!({}), now - 1000, 60, None),
            "expired",
        ),
        (
            "npu-fleet/b1/cmd/set_cma/uns-1",
            init_payload(
                "b1",
                "set_cma",
                "uns-1",
                json!({"size": "256M"}),
                now,
                60,
                None,
            ),
            "unsigned set_cma refused",
        ),
        (
            "npu-fleet/b1/cmd/reboot/uns-2",
            init_payload("b1", "reboot", "uns-2", json!({}), now, 60, None),
            "unsigned reboot refused",
        ),
        (
            "npu-fleet/b1/cmd/set_cma/sig-1",
            init_payload(
                "b1",
                "set_cma",
                "sig-1",
                json!({"size": "256M"}),
                now,
                60,
                Some(&key(2)),
            ),
            "bad signature",
        ),
        (
            "npu-fleet/b1/cmd/rescan/wb-1",
            init_payload("b2", "rescan", "wb-1", json!({}), now, 60, None),
            "names board \"b2\"",
        ),
        (
            "npu-fleet/b1/cmd/format_disk/ua-1",
            init_payload("b1", "format_disk", "ua-1", json!({}), now, 60, None),
            "unknown action",
        ),
        (
            "npu-fleet/b1/cmd/rescan/mal-1",
            b"{\"status\":\"init\",".to_vec(),
            "malformed",
        ),
        (
            "npu-fleet/b1/cmd/rescan/mal-2",
            br#"{"status":"init","board":"b1","issued_at":1,"expires_at":2,"shell":"rm -rf /"}"#
                .to_vec(),
            "unknown field",
        ),
        ("npu-fleet/b1/cmd/rescan/big-1", vec![b' '; 6000], "exceeds"),
        (
            "npu-fleet/b1/cmd/compact/arg-1",
            init_payload(
                "b1",
                "compact",
                "arg-1",
                json!({"drop_caches": "please"}),
                now,
                60,
                None,
            ),
            "true or false",
        ),
    ];
    for (topic, payload, reason) in &cases {
        c.publish(topic, payload, true);
        let r = lifecycle(&c, topic, "rejected");
        assert!(
            r["reason"].as_str().unwrap_or("").contains(reason),
            "{topic}: reason {:?} should contain {reason:?}",
            r["reason"]
        );
        c.publish(topic, b"", true);
    }
    // A replay: the same cmd_id again after it ran.
    let topic = "npu-fleet/b1/cmd/rescan/rp-1";
    c.publish(
        topic,
        &init_payload("b1", "rescan", "rp-1", json!({}), now, 60, None),
        true,
    );
    lifecycle(&c, topic, "successful");
    // Issued a second earlier, so the bytes differ from the first (not a redelivery).
    c.publish(
        topic,
        &init_payload("b1", "rescan", "rp-1", json!({}), now - 1, 60, None),
        true,
    );
    // Answered without destroying the record: the retained state stays the real outcome, and
    // the replay is named beside it.
    let r = c
        .wait_for(T, "replay answer", |m| {
            m.topic == topic && m.json().get("replay_rejected").is_some()
        })
        .json();
    assert_eq!(r["status"], "successful", "{r}");
    assert!(
        r["replay_rejected"].as_str().unwrap().contains("replay"),
        "{r}"
    );
    // Still serving: a signed set_cma runs and edits the boot file.
    let topic = "npu-fleet/b1/cmd/set_cma/ok-1";
    c.publish(
        topic,
        &init_payload(
            "b1",
            "set_cma",
            "ok-1",
            json!({"size": "512M"}),
            now_s(),
            60,
            Some(&key(1)),
        ),
        true,
    );
    lifecycle(&c, topic, "executing");
    let done = lifecycle(&c, topic, "successful");
    assert_eq!(done["result"]["reboot_required"], true, "{done}");
    assert!(board
        .read("/boot/armbianEnv.txt")
        .unwrap()
        .contains("cma=512M"));
    assert!(agent.is_running());
    // The giant retained message never reached the agent: no reconnect loop in its log.
    let log = agent.log_text();
    assert!(
        !log.contains("MQTT connection lost"),
        "the connection dropped: {log}"
    );
}

#[test]
fn br26_burst_of_commands_does_not_freeze_the_loop() {
    let Some((broker, board)) = setup("b1", "") else {
        return;
    };
    let mut agent = Agent::start(&board);
    let c = Client::connect(broker.port, &["npu-fleet/b1/#"]);
    status_of(&c, "b1");
    let now = now_s();
    let t0 = Instant::now();
    for i in 0..300 {
        let id = format!("burst-{i}");
        c.publish(
            &format!("npu-fleet/b1/cmd/rescan/{id}"),
            &init_payload("b1", "rescan", &id, json!({}), now, 60, None),
            false,
        );
    }
    // Every command gets an answer (run or rate-limited), and status keeps flowing.
    let mut answered = std::collections::HashSet::new();
    while answered.len() < 300 {
        let m = c.wait_for(
            Duration::from_secs(20),
            &format!("answers ({} of 300 so far)", answered.len()),
            |m| m.topic.contains("/cmd/rescan/burst-"),
        );
        let st = m.json()["status"].as_str().unwrap_or("").to_string();
        if st == "successful" || st == "rejected" || st == "failed" {
            answered.insert(m.topic.clone());
        }
    }
    let burst_ms = t0.elapsed().as_millis();
    status_of(&c, "b1");
    assert!(agent.is_running());
    eprintln!("bench: 300-command burst answered in {burst_ms} ms");
    // Unsigned rescans are rate limited (one per 5 s; a refusal uses no slot): one sent after
    // the window runs. Asked again every 250 ms until one does, within the window plus T.
    let window_from = Instant::now();
    for n in 0.. {
        let id = format!("after-burst-{n}");
        let topic = format!("npu-fleet/b1/cmd/rescan/{id}");
        c.publish(
            &topic,
            &init_payload("b1", "rescan", &id, json!({}), now_s(), 60, None),
            false,
        );
        let t = topic.clone();
        let answer = c.wait_for(T, &format!("an answer on {topic}"), move |m| {
            m.topic == t
                && ["successful", "rejected", "failed"]
                    .contains(&m.json()["status"].as_str().unwrap_or(""))
        });
        let status = answer.json()["status"].clone();
        if status == "successful" {
            break;
        }
        assert!(
            status == "rejected" && window_from.elapsed() < Duration::from_secs(5) + T,
            "no rescan ran {:?} after the burst: {}",
            window_from.elapsed(),
            answer.text()
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

fn run_cli(args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let o = Command::new(agent_bin())
        .args(args)
        .envs(env.iter().copied())
        .output()
        .unwrap();
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn fleet_send_and_watch_end_to_end() {
    let Some((broker, board)) = setup("b1", "") else {
        return;
    };
    let keys = tempfile::tempdir().unwrap();
    let keyfile = keys.path().join("op.key");
    let (code, out, err) = run_cli(&["keygen", "--out", keyfile.to_str().unwrap()], &[]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("op.key.pub"));
    let pubkey = std::fs::read_to_string(keys.path().join("op.key.pub")).unwrap();
    board.write("/etc/npu-agent/op.key.pub", &pubkey);
    board.write(
        "/etc/npu-agent/agent.toml",
        &agent_config(
            &broker.url(),
            "b1",
            "[security]\ntrusted_keys = [\"/etc/npu-agent/op.key.pub\"]\n",
        ),
    );
    let _agent = Agent::start(&board);
    let watcher = Client::connect(broker.port, &["npu-fleet/b1/status"]);
    status_of(&watcher, "b1");
    let url = broker.url();
    let (code, out, err) = run_cli(
        &[
            "fleet", "send", "rescan", "--board", "b1", "--broker", &url, "--wait", "10",
        ],
        &[],
    );
    assert_eq!(code, 0, "{out}{err}");
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[0].ends_with(" init"), "{out}");
    assert!(lines.iter().any(|l| l.contains(" executing")), "{out}");
    assert!(lines.last().unwrap().contains(" successful"), "{out}");
    // The requester clears the retained command at the end.
    let cmd_id = lines[0].split_whitespace().nth(1).unwrap().to_string();
    let marker = "test/marker/retained-probe";
    let probe = Client::connect(
        broker.port,
        &[&format!("npu-fleet/b1/cmd/rescan/{cmd_id}"), marker],
    );
    // The broker sends retained messages when it takes the subscription, so before this echo.
    probe.publish(marker, b"m", false);
    let got = collect_for(&probe, T, |ms| ms.iter().any(|m| m.topic == marker));
    assert!(got.iter().any(|m| m.topic == marker), "no marker echo");
    assert!(
        got.iter()
            .filter(|m| m.topic != marker)
            .all(|m| m.payload.is_empty()),
        "retained command not cleared"
    );
    // Unsigned destructive: rejected, exit 1.
    let (code, out, _) = run_cli(
        &[
            "fleet",
            "send",
            "set_cma",
            "--arg",
            "size=512M",
            "--board",
            "b1",
            "--broker",
            &url,
            "--wait",
            "10",
        ],
        &[],
    );
    assert_eq!(code, 1);
    assert!(out.contains("rejected: unsigned set_cma refused"), "{out}");
    // Signed: runs.
    let (code, out, err) = run_cli(
        &[
            "fleet",
            "send",
            "set_cma",
            "--arg",
            "size=512M",
            "--board",
            "b1",
            "--broker",
            &url,
            "--key",
            keyfile.to_str().unwrap(),
            "--wait",
            "10",
        ],
        &[],
    );
    assert_eq!(code, 0, "{out}{err}");
    assert!(board
        .read("/boot/armbianEnv.txt")
        .unwrap()
        .contains("cma=512M"));
    // The next status says a reboot is required.
    let s = watcher.wait_for(T, "status with reboot_required", |m| {
        m.json()["reboot_required"] == true
    });
    assert_eq!(s.json()["board_id"], "b1");
    // fleet watch --once --format json sees the board.
    let (code, out, err) = run_cli(
        &[
            "fleet", "watch", "--broker", &url, "--once", "--format", "json",
        ],
        &[],
    );
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    let b = &v["boards"][0];
    assert_eq!(b["board"], "b1");
    assert_eq!(b["availability"], "online");
    assert_eq!(b["profile"], "rk3588-rknpu");
    assert!(
        b["worst"].as_array().unwrap().iter().any(|w| w
            .as_str()
            .unwrap()
            .starts_with("reboot.pending")
            || w.as_str().unwrap().starts_with("cma.boot_param")),
        "{b}"
    );
    // --all reaches every board.
    let (code, out, err) = run_cli(
        &[
            "fleet",
            "send",
            "rescan",
            "--all",
            "--broker",
            &url,
            "--wait",
            "10",
            "--key",
            keyfile.to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.lines()
            .any(|l| l.starts_with("b1 ") && l.contains("successful")),
        "{out}"
    );
}

#[test]
fn reboot_is_proven_by_a_changed_boot_id() {
    let Some((broker, board)) = setup("b1", "") else {
        return;
    };
    let extra = format!(
        "{}\n[actions]\nallow_reboot = true\nreboot_command = [\"true\"]\nreboot_timeout_s = 60\n",
        trust(&board, 1)
    );
    board.write(
        "/etc/npu-agent/agent.toml",
        &agent_config(&broker.url(), "b1", &extra),
    );
    let mut agent = Agent::start(&board);
    let c = Client::connect(broker.port, &["npu-fleet/b1/#"]);
    status_of(&c, "b1");
    let before = board.read("/proc/sys/kernel/random/boot_id").unwrap();
    let topic = "npu-fleet/b1/cmd/reboot/rb-1";
    c.publish(
        topic,
        &init_payload(
            "b1",
            "reboot",
            "rb-1",
            json!({"reason": "test"}),
            now_s(),
            120,
            Some(&key(1)),
        ),
        true,
    );
    lifecycle(&c, topic, "executing");
    // The intent (with the boot_id before) is on disk before the reboot command runs.
    let t0 = Instant::now();
    let state: Value = loop {
        if let Some(t) = board.read("/var/lib/npu-agent/reboot.json") {
            break serde_json::from_str(&t).unwrap();
        }
        assert!(t0.elapsed() < T, "no reboot intent persisted");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(state["pending"]["cmd_id"], "rb-1");
    assert_eq!(state["pending"]["boot_id"], before.trim());
    // "The board reboots": the agent goes down, the kernel comes back with a new boot_id.
    assert_eq!(agent.terminate(), Some(0));
    board.write(
        "/proc/sys/kernel/random/boot_id",
        "0b7e6a36-1c52-4f0e-9f7b-7d5c1a3e9e10\n",
    );
    let _agent = Agent::start(&board);
    let done = lifecycle(&c, topic, "successful");
    assert!(
        done["reason"].as_str().unwrap().contains("0b7e6a36"),
        "{done}"
    );
}

#[test]
fn reboot_without_a_reboot_is_failed() {
    let Some((broker, board)) = setup("b1", "") else {
        return;
    };
    let extra = format!(
        "{}\n[actions]\nallow_reboot = true\nreboot_command = [\"true\"]\n",
        trust(&board, 1)
    );
    board.write(
        "/etc/npu-agent/agent.toml",
        &agent_config(&broker.url(), "b1", &extra),
    );
    let mut agent = Agent::start(&board);
    let c = Client::connect(broker.port, &["npu-fleet/b1/#"]);
    status_of(&c, "b1");
    let topic = "npu-fleet/b1/cmd/reboot/rb-2";
    c.publish(
        topic,
        &init_payload(
            "b1",
            "reboot",
            "rb-2",
            json!({}),
            now_s(),
            120,
            Some(&key(1)),
        ),
        true,
    );
    lifecycle(&c, topic, "executing");
    // Only the agent restarts; boot_id stays the same.
    agent.terminate();
    let _agent = Agent::start(&board);
    let r = lifecycle(&c, topic, "failed");
    assert!(r["reason"].as_str().unwrap().contains("agent"), "{r}");
}

/// A CA, a server certificate for 127.0.0.1/localhost and a client certificate, as PEM files.
fn pki(dir: &std::path::Path) -> (String, String, String, String, String) {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "npu-agent test CA");
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca_params, ca_key);
    let server_key = KeyPair::generate().unwrap();
    let server = CertificateParams::new(vec!["localhost".into(), "127.0.0.1".into()])
        .unwrap()
        .signed_by(&server_key, &issuer)
        .unwrap();
    let client_key = KeyPair::generate().unwrap();
    let mut cp = CertificateParams::new(vec!["board-b1".into()]).unwrap();
    cp.distinguished_name.push(DnType::CommonName, "board-b1");
    let client = cp.signed_by(&client_key, &issuer).unwrap();
    let w = |name: &str, text: String| {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p.display().to_string()
    };
    (
        w("ca.pem", ca.pem()),
        w("server.pem", server.pem()),
        w("server.key", server_key.serialize_pem()),
        w("client.pem", client.pem()),
        w("client.key", client_key.serialize_pem()),
    )
}

#[test]
fn mutual_tls_with_generated_certificates() {
    if !require_tool("mosquitto") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (ca, scert, skey, ccert, ckey) = pki(dir.path());
    let tls_port = free_port();
    let plain_port = free_port();
    // One broker: a TLS listener that requires a client certificate, and a plain one to observe.
    let broker = Broker::start_with(
        plain_port,
        &format!("listener {tls_port} 127.0.0.1\ncafile {ca}\ncertfile {scert}\nkeyfile {skey}\nrequire_certificate true\n"),
    );
    let board = Board::from_fixture(CASE, "b1", "");
    let tls_url = format!("mqtts://localhost:{tls_port}");
    // The TLS material in the board tree: the agent reads it under --root.
    for (host, name) in [
        (&ca, "ca.crt"),
        (&ccert, "client.crt"),
        (&ckey, "client.key"),
    ] {
        board.write(
            &format!("/etc/npu-agent/tls/{name}"),
            &std::fs::read_to_string(host).unwrap(),
        );
    }
    board.write(
        "/etc/npu-agent/agent.toml",
        &agent_config(&tls_url, "b1", "").replace("keep_alive_s = 5\n", "keep_alive_s = 5\nca_file = \"/etc/npu-agent/tls/ca.crt\"\ncert_file = \"/etc/npu-agent/tls/client.crt\"\nkey_file = \"/etc/npu-agent/tls/client.key\"\n"),
    );
    let _agent = Agent::start(&board);
    let c = Client::connect(broker.port, &["npu-fleet/b1/#"]);
    assert_eq!(status_of(&c, "b1").json()["board_id"], "b1");
    // The operator over mTLS too (TLS material from the NPU_AGENT_MQTT_* variables).
    let env = tls_client_env(&ca, &ccert, &ckey);
    let (code, out, err) = run_cli(
        &[
            "fleet", "send", "rescan", "--board", "b1", "--broker", &tls_url, "--wait", "10",
        ],
        &env,
    );
    assert_eq!(code, 0, "{out}{err}");
    // Without a client certificate the broker refuses the agent.
    let board2 = Board::from_fixture(CASE, "b2", "");
    board2.write(
        "/etc/npu-agent/ca.crt",
        &std::fs::read_to_string(&ca).unwrap(),
    );
    board2.write(
        "/etc/npu-agent/agent.toml",
        &agent_config(&tls_url, "b2", "").replace(
            "keep_alive_s = 5\n",
            "keep_alive_s = 5\nca_file = \"/etc/npu-agent/ca.crt\"\n",
        ),
    );
    let agent2 = Agent::start(&board2);
    // The refusal has happened (an agent that got in would have published on connect).
    wait_log(
        &agent2,
        &["cannot connect to the MQTT broker", "MQTT connection lost"],
    );
    assert!(
        c.drain()
            .iter()
            .all(|m| !m.topic.starts_with("npu-fleet/b2/")),
        "an agent without a client certificate got in"
    );
    drop(agent2);
}

#[test]
fn home_assistant_discovery_and_buttons() {
    let Some((broker, board)) = setup("b1", "[home_assistant]\nenabled = true\n") else {
        return;
    };
    board.write("/proc/sys/vm/compact_memory", "0\n");
    let c = Client::connect(
        broker.port,
        &[
            "homeassistant/device/b1/config",
            "npu-fleet/b1/status",
            "npu-fleet/b1/cmd/#",
        ],
    );
    let _agent = Agent::start(&board);
    let d = c
        .wait_for(T, "discovery", |m| {
            m.topic == "homeassistant/device/b1/config"
        })
        .json();
    assert_eq!(d["availability_topic"], "npu-fleet/b1/availability");
    assert_eq!(
        d["cmps"]["b1_cma_free"]["state_topic"],
        "npu-fleet/b1/status"
    );
    // A missing metric reads as unknown ('None'), never as 0 B.
    let tpl = d["cmps"]["b1_cma_free"]["value_template"].as_str().unwrap();
    assert!(
        tpl.contains("'cma_free_bytes'") && tpl.contains("'None'") && !tpl.contains("default(0)"),
        "{tpl}"
    );
    assert_eq!(d["cmps"]["b1_cma_free"]["state_class"], "measurement");
    assert_eq!(
        d["cmps"]["b1_compact"]["command_topic"],
        "npu-fleet/b1/ha/compact"
    );
    assert_eq!(d["dev"]["mdl"], "Xunlong Orange Pi 5 Plus");
    // Home Assistant restarts and announces itself: discovery is sent again (once the 5 s since
    // the first one have passed: announced every 250 ms until it is), but a flood of
    // announcements gets one re-send per 5 s, not one each.
    let announced_from = Instant::now();
    c.drain();
    loop {
        c.publish("homeassistant/status", b"online", false);
        let resent = collect_for(&c, Duration::from_millis(250), |ms| {
            ms.iter()
                .any(|m| m.topic == "homeassistant/device/b1/config")
        });
        if resent
            .iter()
            .any(|m| m.topic == "homeassistant/device/b1/config")
        {
            break;
        }
        assert!(
            announced_from.elapsed() < Duration::from_secs(5) + T,
            "discovery not re-sent after Home Assistant announced itself"
        );
    }
    for _ in 0..500 {
        c.publish("homeassistant/status", b"online", false);
    }
    // Any further re-send would be published before the marker's answer.
    let resent = until_marker(&c, "b1", "ha-flood-marker")
        .iter()
        .filter(|m| m.topic == "homeassistant/device/b1/config")
        .count();
    assert_eq!(resent, 0, "500 announcements in 2 s: one discovery only");
    // The compaction button runs compaction (the knob file of this tree gets 1)...
    board.write("/proc/sys/vm/compact_memory", "0\n");
    for _ in 0..300 {
        c.publish("npu-fleet/b1/ha/compact", b"PRESS", false);
    }
    let t0 = Instant::now();
    while board
        .read("/proc/sys/vm/compact_memory")
        .unwrap_or_default()
        .trim()
        != "1"
    {
        assert!(t0.elapsed() < T, "the compact button did nothing");
        std::thread::sleep(Duration::from_millis(50));
    }
    // ... once: the presses pass the same rate limit as unsigned commands (30 s). The marker is
    // an unsigned rescan (the first of this test, so admitted): it queues behind any compaction
    // a press got admitted, and the executor runs one job at a time in that order, so its
    // answer comes after such a compaction has landed.
    board.write("/proc/sys/vm/compact_memory", "0\n");
    let marker = "npu-fleet/b1/cmd/rescan/ha-press-marker";
    c.publish(
        marker,
        &init_payload(
            "b1",
            "rescan",
            "ha-press-marker",
            json!({}),
            now_s(),
            60,
            None,
        ),
        false,
    );
    lifecycle(&c, marker, "successful");
    assert_eq!(
        board.read("/proc/sys/vm/compact_memory").unwrap().trim(),
        "0",
        "300 presses ran more than one compaction"
    );
    // The board refuses reboot unsigned: no button is offered for it, and a press does nothing.
    assert!(d["cmps"].get("b1_reboot").is_none());
    eprintln!("attacks: home-assistant-flood tried=800 held=800");
}

#[test]
fn systemd_notify_ready_status_and_watchdog() {
    let Some((broker, board)) = setup("b1", "") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let sock_path = dir.path().join("notify.sock");
    let sock = std::os::unix::net::UnixDatagram::bind(&sock_path).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
    let mut agent = Agent::start_env(
        &board,
        &[
            ("NOTIFY_SOCKET", sock_path.to_str().unwrap()),
            ("WATCHDOG_USEC", "1000000"),
        ],
    );
    let c = Client::connect(broker.port, &["npu-fleet/b1/status"]);
    status_of(&c, "b1");
    let t0 = Instant::now();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    while t0.elapsed() < Duration::from_secs(5) {
        if let Ok(n) = sock.recv(&mut buf) {
            got.push(String::from_utf8_lossy(&buf[..n]).into_owned());
        }
        let watchdogs = got.iter().filter(|m| m.contains("WATCHDOG=1")).count();
        if got.iter().any(|m| m.contains("READY=1"))
            && got.iter().any(|m| m.starts_with("STATUS=health"))
            && watchdogs >= 3
        {
            break;
        }
    }
    assert!(got.iter().any(|m| m.contains("READY=1")), "{got:?}");
    let status = got.iter().find(|m| m.starts_with("STATUS=")).unwrap();
    assert!(status.contains("health Ok"), "{status}");
    assert!(
        got.iter().filter(|m| m.contains("WATCHDOG=1")).count() >= 3,
        "WATCHDOG=1 at half the 1 s interval: {got:?}"
    );
    assert_eq!(agent.terminate(), Some(0));
}

#[test]
fn run_refuses_a_bad_config_and_prints_the_effective_one() {
    let board = Board::from_fixture(CASE, "b1", "[mqtt]\nurl = \"mqtt://127.0.0.1:1\"\npassword_file = \"/etc/npu-agent/secret\"\nusername = \"u\"\n");
    board.write(
        "/etc/npu-agent/agent.d/50-site.toml",
        "[report]\ninterval_s = 7\n",
    );
    let (code, out, err) = run_cli(
        &[
            "run",
            "--root",
            board.root().to_str().unwrap(),
            "--print-config",
        ],
        &[("NPU_AGENT_MQTT_TOPIC_ROOT", "lab")],
    );
    assert_eq!(code, 0, "{err}");
    let cfg: toml::Table = toml::from_str(out.split_once('\n').unwrap().1).unwrap();
    assert_eq!(cfg["report"]["interval_s"].as_integer(), Some(7));
    assert_eq!(cfg["mqtt"]["topic_root"].as_str(), Some("lab"));
    assert_eq!(
        cfg["mqtt"]["password_file"].as_str(),
        Some("/etc/npu-agent/secret")
    );
    assert!(
        out.lines()
            .next()
            .unwrap()
            .contains("/etc/npu-agent/agent.d/50-site.toml"),
        "{out}"
    );
    // An unknown key is fatal and named.
    board.write(
        "/etc/npu-agent/agent.d/60-typo.toml",
        "[mqtt]\nkeepalive_s = 5\n",
    );
    let (code, _, err) = run_cli(&["run", "--root", board.root().to_str().unwrap()], &[]);
    assert_eq!(code, 2);
    assert!(
        err.contains("/etc/npu-agent/agent.d/60-typo.toml: line 2: unknown key `keepalive_s`"),
        "{err}"
    );
    // No broker URL: refuses to start.
    let empty = Board::from_fixture(CASE, "b1", "");
    let (code, _, err) = run_cli(&["run", "--root", empty.root().to_str().unwrap()], &[]);
    assert_eq!(code, 2);
    assert!(err.contains("mqtt.url is not set"), "{err}");
}

#[test]
fn a_refused_automatic_compaction_is_not_retried_in_a_loop() {
    // Fragmented memory asks for compaction, but this tree has no /proc/sys/vm/compact_memory
    // (a kernel without CONFIG_COMPACTION): one refused attempt per cooldown, not a busy loop.
    if !require_tool("mosquitto") {
        return;
    }
    let broker = Broker::start();
    let board = Board::from_fixture("own-rk3588s-opi5-pending-cma-fragmented", "frag", "");
    board.write(
        "/etc/npu-agent/agent.toml",
        &agent_config(&broker.url(), "frag", ""),
    );
    let c = Client::connect(broker.port, &["npu-fleet/frag/status"]);
    let mut agent = Agent::start(&board);
    let first = status_of(&c, "frag");
    std::thread::sleep(Duration::from_secs(6));
    let later = c.drain();
    assert!(
        later.len() <= 8,
        "{} statuses in 6 s with interval_s = 2: a publish loop",
        later.len()
    );
    let last = later
        .last()
        .map(|m| m.json())
        .unwrap_or_else(|| first.json());
    assert_eq!(
        last["last_action"]["action"], "compact",
        "{}",
        last["last_action"]
    );
    assert_eq!(last["last_action"]["status"], "failed");
    assert!(agent.is_running());
}

async fn next_event(link: &mut npu_agent::mqtt::link::Link) -> npu_agent::mqtt::link::LinkEvent {
    tokio::time::timeout(T, link.events.recv())
        .await
        .expect("link event")
        .expect("channel open")
}

#[test]
fn the_mqtt_311_fallback_link_publishes_and_receives() {
    // The link the agent falls back to when a broker refuses MQTT 5, against a real broker.
    if !require_tool("mosquitto") {
        return;
    }
    use npu_agent::mqtt::link::{Link, LinkEvent, LinkOptions, MqttClient, Protocol};
    let broker = Broker::start();
    let observer = Client::connect(broker.port, &["v311/#"]);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let opts = LinkOptions {
            url: npu_agent::mqtt::parse_url(&broker.url()).unwrap(),
            tls: None,
            client_id: "v311-test".into(),
            keep_alive: Duration::from_secs(5),
            credentials: None,
            last_will: Some(("v311/availability".into(), b"offline".to_vec())),
            max_incoming_packet_bytes: 16 * 1024,
            connect_timeout_s: 5,
            lossless: true,
            ack_when_handled: false,
            protocol: Protocol::V311,
            auto_protocol: false,
            reconnect_max: Duration::from_secs(2),
            fallbacks: Vec::new(),
        };
        let mut link = Link::start(&opts);
        assert!(matches!(link.client, MqttClient::V311(_)));
        assert!(matches!(
            next_event(&mut link).await,
            LinkEvent::Connected { .. }
        ));
        link.client
            .try_subscribe("v311/cmd/#", rumqttc::v5::mqttbytes::QoS::AtLeastOnce)
            .unwrap();
        link.client
            .try_publish(
                "v311/status",
                rumqttc::v5::mqttbytes::QoS::AtLeastOnce,
                true,
                b"hello".to_vec(),
            )
            .unwrap();
        // Let the link's task send SUBSCRIBE and PUBLISH (a blocking sleep here would stall it on
        // this one-thread runtime): the observer seeing the retained status proves both reached
        // the broker, in that order, so the subscription is in place.
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        let mut status = None;
        while status.is_none() && std::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
            status = observer
                .drain()
                .into_iter()
                .find(|m| m.topic == "v311/status");
        }
        let status = status.expect("the 3.1.1 link's publish never reached the broker");
        assert_eq!(status.text(), "hello");
        // A 200 KB message on a subscribed topic is within the 3.1.1 limit: delivered, no wedge.
        observer.publish("v311/cmd/big", &vec![b'x'; 200_000], false);
        observer.publish("v311/cmd/small", b"after", false);
        let mut got = Vec::new();
        while got.len() < 2 {
            if let LinkEvent::Message { topic, payload, .. } = next_event(&mut link).await {
                got.push((topic, payload.len()));
            }
        }
        assert_eq!(
            got,
            vec![
                ("v311/cmd/big".to_string(), 200_000),
                ("v311/cmd/small".to_string(), 5)
            ]
        );
        link.abort();
    });
    // Aborted without DISCONNECT: the broker sends the 3.1.1 last will.
    let w = observer.wait_for(Duration::from_secs(20), "last will", |m| {
        m.topic == "v311/availability"
    });
    assert_eq!(w.text(), "offline");
}

/// The agent's link under a flood (item 5 of the command-path hardening), against a real broker,
/// over MQTT 5 and 3.1.1: with acknowledgements owed until a message is handled, the broker
/// holds back all but a few (MQTT 5 Receive Maximum; mosquitto's `max_inflight_messages` for
/// 3.1.1) — the flood waits on the broker, not in the agent's memory — while the link keeps
/// publishing and the connection stays up past 1.5 keep-alives; once handled and acknowledged,
/// every message arrives exactly once. An acknowledgement owed to an ended connection is void.
#[test]
fn the_agent_link_holds_a_flood_back_on_the_broker_until_each_message_is_handled() {
    if !require_tool("mosquitto") {
        return;
    }
    use npu_agent::mqtt::link::{Ack, Link, LinkEvent, LinkOptions, Protocol, RECEIVE_MAXIMUM};
    use rumqttc::v5::mqttbytes::QoS;
    const FLOOD: usize = 300;
    // mosquitto's default max_inflight_messages: the bound over 3.1.1, which has no Receive Maximum.
    const MOSQUITTO_INFLIGHT: usize = 20;
    let broker = Broker::start();
    let observer = Client::connect(broker.port, &["flood/+/status"]);
    for (protocol, name, held) in [
        (Protocol::V5, "v5", usize::from(RECEIVE_MAXIMUM)),
        (Protocol::V311, "v311", MOSQUITTO_INFLIGHT),
    ] {
        for i in 0..FLOOD {
            observer.publish(
                &format!("flood/{name}/cmd/{i}"),
                i.to_string().as_bytes(),
                true,
            );
        }
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let opts = LinkOptions {
                url: npu_agent::mqtt::parse_url(&broker.url()).unwrap(),
                tls: None,
                client_id: format!("flood-{name}"),
                keep_alive: Duration::from_secs(5),
                credentials: None,
                last_will: None,
                max_incoming_packet_bytes: 16 * 1024,
                connect_timeout_s: 5,
                lossless: true,
                ack_when_handled: true,
                protocol,
                auto_protocol: false,
                reconnect_max: Duration::from_secs(2),
                fallbacks: Vec::new(),
            };
            let mut link = Link::start(&opts);
            assert!(matches!(
                next_event(&mut link).await,
                LinkEvent::Connected { .. }
            ));
            link.client
                .try_subscribe_no_local(&[format!("flood/{name}/cmd/+")], QoS::AtLeastOnce)
                .unwrap();
            // Nothing acknowledged: only the in-flight window arrives, for longer than 1.5
            // keep-alives (the broker would end a connection whose pings stopped).
            let mut owed: Vec<(String, Ack)> = Vec::new();
            // 8 s over MQTT 5 (keep-alive 5 s: mosquitto ends a silent connection after 7.5 s).
            let hold_s = if protocol == Protocol::V5 { 8 } else { 2 };
            let hold = tokio::time::Instant::now() + Duration::from_secs(hold_s);
            let mut status_sent = false;
            loop {
                match tokio::time::timeout_at(hold, link.events.recv()).await {
                    Err(_) => break,
                    Ok(Some(LinkEvent::Message { topic, ack, .. })) => {
                        owed.push((topic, ack.expect("a QoS 1 message owes an ack")));
                        if !status_sent {
                            // The link still publishes while the flood waits.
                            link.client
                                .try_publish(
                                    format!("flood/{name}/status"),
                                    QoS::AtLeastOnce,
                                    false,
                                    b"up".to_vec(),
                                )
                                .unwrap();
                            status_sent = true;
                        }
                    }
                    // The subscription's SUBACK (granted at QoS 1).
                    Ok(Some(LinkEvent::SubAck { codes })) => assert_eq!(codes, [1], "{name}"),
                    Ok(ev) => panic!("{name}: unexpected {ev:?} while the flood is held back"),
                }
            }
            assert_eq!(
                owed.len(),
                held,
                "{name}: messages delivered before any ack"
            );
            let want = format!("flood/{name}/status");
            let status = observer.wait_for(T, "the status published during the flood", |m| {
                m.topic == want
            });
            assert_eq!(status.text(), "up");
            // A void ack (a connection that has ended) sends nothing.
            let void = Ack {
                connection: 0,
                ..owed[0].1
            };
            assert_eq!(owed[0].1.qos, QoS::AtLeastOnce);
            assert_eq!(link.try_ack(&void), Ok(false));
            // Handle and acknowledge each message: the rest of the flood follows, once each.
            let mut seen: std::collections::BTreeSet<String> = std::collections::BTreeSet::new();
            let mut queue: std::collections::VecDeque<(String, Ack)> = owed.into();
            loop {
                while let Some((t, a)) = queue.pop_front() {
                    assert!(seen.insert(t.clone()), "{name}: {t} delivered twice");
                    // The request queue may be full for a moment: retry after a yield.
                    while link.try_ack(&a).is_err() {
                        tokio::task::yield_now().await;
                    }
                }
                if seen.len() == FLOOD {
                    break;
                }
                match next_event(&mut link).await {
                    LinkEvent::Message { topic, ack, .. } => queue.push_back((topic, ack.unwrap())),
                    ev => panic!("{name}: unexpected {ev:?}"),
                }
            }
            // Nothing comes twice.
            let extra = tokio::time::timeout(Duration::from_millis(500), link.events.recv()).await;
            assert!(extra.is_err(), "{name}: {extra:?} after the whole flood");
            assert!(queue.is_empty());
            assert_eq!(link.dropped.load(std::sync::atomic::Ordering::Relaxed), 0);
            link.shutdown(Duration::from_secs(1)).await;
        });
    }
}

/// Item 4 of the command-path hardening: secrets planted in every input — the broker password
/// file, the broker URL, a first-boot provisioning file (an unquoted numeric password), a
/// workload's command line and environment — appear in no status, finding, lifecycle message,
/// Home Assistant payload, log line or CLI output.
#[test]
fn no_planted_secret_leaves_the_board() {
    let Some((broker, board)) = setup("b1", "[home_assistant]\nenabled = true\n") else {
        return;
    };
    const BROKER_PW: &str = "pw-S3CR3T-broker-0042";
    const PROV_PW: &str = "918273645001";
    const API_KEY: &str = "sk-APIKEY-0042";
    const HF_TOKEN: &str = "hf_TOKEN0042";
    const ENV_SECRET: &str = "ENVSECRET0042";
    const URL_PW: &str = "pw-URL-0042";
    let secrets = [BROKER_PW, PROV_PW, API_KEY, HF_TOKEN, ENV_SECRET, URL_PW];
    board.write("/etc/npu-agent/broker.pw", &format!("{BROKER_PW}\n"));
    board.write(
        "/etc/npu-agent/agent.d/50-auth.toml",
        "[mqtt]\nusername = \"agent\"\npassword_file = \"/etc/npu-agent/broker.pw\"\n",
    );
    board.write(
        "/boot/npu-agent.toml",
        &format!("board_id = \"b1\"\n[secrets]\nmqtt_password = {PROV_PW}\n"),
    );
    board.write(
        "/proc/3120/cmdline",
        &format!(
            "python3\0/opt/rkllm_server/flask_server.py\0--target_platform\0rk3588\0--api-key\0{API_KEY}\0--hf-token={HF_TOKEN}\0"
        ),
    );
    board.write(
        "/proc/3120/environ",
        &format!("HF_TOKEN={ENV_SECRET}\0PATH=/usr/bin\0"),
    );
    let c = Client::connect(broker.port, &["#"]);
    let mut agent = Agent::start(&board);
    let st = status_of(&c, "b1");
    // The inputs were read: the provisioning file is reported (without its value).
    assert!(st.text().contains("agent.provisioning"), "{}", st.text());
    // A command the gate refuses, a replay and a button press produce lifecycle messages.
    let now = now_s();
    c.publish(
        "npu-fleet/b1/cmd/reboot/leak-1",
        &init_payload("b1", "reboot", "leak-1", json!({}), now, 60, None),
        true,
    );
    lifecycle(&c, "npu-fleet/b1/cmd/reboot/leak-1", "rejected");
    c.publish("npu-fleet/b1/ha/rescan", b"PRESS", false);
    // The press is handled before the marker; the rescan it runs ends with a status.
    let mut msgs = until_marker(&c, "b1", "leak-marker");
    msgs.extend(collect_for(&c, T, |ms| {
        ms.iter().any(|m| m.topic == "npu-fleet/b1/status")
    }));
    let mut seen: Vec<String> = vec![st.text()];
    seen.extend(msgs.iter().map(|m| format!("{} {}", m.topic, m.text())));
    let _ = agent.terminate();
    seen.push(agent.log_text());
    // The CLI: the effective config, a check, and a refused broker URL with user info.
    let root = board.root().to_str().unwrap().to_string();
    let (_, out, err) = run_cli(&["run", "--print-config", "--root", &root], &[]);
    seen.push(out + &err);
    let (_, out, err) = run_cli(&["check", "--root", &root, "--format", "json"], &[]);
    assert!(out.contains("limits."), "{out}{err}");
    seen.push(out + &err);
    let url = format!("mqtt://agent:{URL_PW}@127.0.0.1:{}", broker.port);
    let (code, out, err) = run_cli(
        &["run", "--print-config", "--root", &root],
        &[("NPU_AGENT_MQTT_URL", url.as_str())],
    );
    assert_ne!(code, 0, "a URL with user info is refused");
    assert!(err.contains("<redacted>"), "{err}");
    seen.push(out + &err);
    let (_, out, err) = run_cli(
        &["run", "--root", &root],
        &[("NPU_AGENT_MQTT_URL", url.as_str())],
    );
    seen.push(out + &err);
    let mut leaks = Vec::new();
    for text in &seen {
        for s in secrets {
            if text.contains(s) {
                leaks.push(format!(
                    "{s} in: {}",
                    text.chars().take(300).collect::<String>()
                ));
            }
        }
    }
    assert!(leaks.is_empty(), "{leaks:#?}");
    eprintln!(
        "attacks: secret-leak outputs={} (6 planted secrets each)",
        seen.len()
    );
}

/// Issue 26 item 10: the agent published `successful`, but a full state directory kept the
/// ledger from recording it; after a restart the ledger says `executing`. The broker's retained
/// `successful` stays (it is not overwritten with `failed: agent restarted`), while a command
/// the broker holds no answer for is still failed.
#[test]
fn a_final_answer_the_ledger_could_not_record_is_kept_after_a_restart() {
    let Some((broker, board)) = setup("b1", "") else {
        return;
    };
    let (n, k) = (now_s(), now_s() + 120);
    let entry = |action: &str| {
        format!(
            r#"{{"action":"{action}","signed":false,"accepted_unix_s":{n},"keep_until_unix_s":{k},"payload_hash":1,"status":"executing"}}"#
        )
    };
    board.write(
        "/var/lib/npu-agent/commands.json",
        &format!(
            r#"{{"schema":2,"commands":{{"lost-1":{},"crashed-2":{}}},"last_run":{{}}}}"#,
            entry("rescan"),
            entry("compact")
        ),
    );
    // The board's identity key, as its first start made it: its answers are sealed with it.
    let key = npu_agent::mqtt::ed25519::SigningKey::from_bytes(&[5; 32]);
    board.write("/var/lib/npu-agent/board_identity.key", &key.to_pkcs8_pem());
    let c = Client::connect(broker.port, &["npu-fleet/b1/cmd/#"]);
    let time = String::from_utf8(
        std::process::Command::new("date")
            .args(["-u", "+%Y-%m-%dT%H:%M:%SZ"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    let answer = format!(
        r#"{{"status":"successful","board":"b1","action":"rescan","cmd_id":"lost-1","time":"{}","result":{{}}}}"#,
        time.trim()
    );
    let lost = "npu-fleet/b1/cmd/rescan/lost-1";
    c.publish(
        lost,
        &npu_agent::mqtt::board_sig::seal(&key, lost, answer.clone().into_bytes()),
        true,
    );
    // Someone else's retained "successful" (not sealed by this board) is not taken.
    let spoof = answer
        .replace("rescan", "compact")
        .replace("lost-1", "crashed-2");
    c.publish("npu-fleet/b1/cmd/compact/crashed-2", spoof.as_bytes(), true);
    let _agent = Agent::start(&board);
    let r = lifecycle(&c, "npu-fleet/b1/cmd/compact/crashed-2", "failed");
    assert_eq!(r["reason"], "agent restarted", "{r}");
    let probe = Client::connect(broker.port, &["npu-fleet/b1/cmd/rescan/lost-1"]);
    let kept = probe.wait_for(T, "lost-1's record", |m| m.topic.ends_with("/lost-1"));
    assert_eq!(kept.json()["status"], "successful", "{}", kept.text());
}

/// Command-path attacks against a real broker (items 1, 2, 5 and 8 of the hardening issue):
/// a captured signed `init` replayed after an unsigned flood never runs again; a command that
/// never expires is refused; every message of a flood gets a final state and a signed command
/// in the middle of it is answered; a command a crash left `executing` is finished as failed;
/// an unreadable ledger refuses signed commands.
#[test]
fn command_path_attacks_hold_against_a_real_broker() {
    // A broker sized for a fleet: its per-client queue does not drop the test client's copies
    // of the flood (the agent's own drops are what is tested).
    let Some((broker, board)) = flood_broker_and_board() else {
        return;
    };
    // Item 8: the previous agent was killed (-9) while a compaction was executing.
    board.write(
        "/var/lib/npu-agent/commands.json",
        &format!(
            r#"{{"schema":2,"commands":{{"crashed-1":{{"action":"compact","signed":false,"accepted_unix_s":{n},"keep_until_unix_s":{k},"payload_hash":1,"status":"executing"}}}},"last_run":{{}}}}"#,
            n = now_s(),
            k = now_s() + 120
        ),
    );
    // The set_cma rate limit (30 s) is not what this test is about: no window to sleep through
    // between the two signed edits.
    board.write(
        "/etc/npu-agent/agent.d/90-test-limits.toml",
        "[actions]\nrate_limit_overrides_s = { set_cma = 0 }\n",
    );
    let c = Client::connect(broker.port, &["npu-fleet/b1/#"]);
    let mut agent = Agent::start(&board);
    let r = lifecycle(&c, "npu-fleet/b1/cmd/compact/crashed-1", "failed");
    assert_eq!(r["reason"], "agent restarted", "{r}");
    status_of(&c, "b1");
    let mut tried = 1;
    // Item 1: set_cma 256M then 512M, both signed; then an unsigned flood; then the captured
    // 256M init again (retained, as an attacker with broker access would).
    let now = now_s();
    let first = init_payload(
        "b1",
        "set_cma",
        "s-256",
        json!({"size": "300M"}),
        now,
        120,
        Some(&key(1)),
    );
    c.publish("npu-fleet/b1/cmd/set_cma/s-256", &first, true);
    lifecycle(&c, "npu-fleet/b1/cmd/set_cma/s-256", "successful");
    let second = init_payload(
        "b1",
        "set_cma",
        "s-512",
        json!({"size": "512M"}),
        now_s(),
        120,
        Some(&key(1)),
    );
    c.publish("npu-fleet/b1/cmd/set_cma/s-512", &second, true);
    lifecycle(&c, "npu-fleet/b1/cmd/set_cma/s-512", "successful");
    // Item 5: 2500 unsigned rescans at full speed, a signed rescan in the middle.
    let flood = 2500;
    for (topic, payload) in rescan_flood("f", flood, 60, "signed-mid") {
        c.publish(&topic, &payload, true);
    }
    tried += flood + 1;
    // Every command's retained record ends in a final state (a fresh subscriber sees them).
    let t0 = Instant::now();
    loop {
        let (done, seen, signed) = retained_rescan_finals(
            broker.port,
            Duration::from_secs(3),
            "npu-fleet/b1/cmd/rescan/signed-mid",
        );
        let signed_mid = signed.as_deref() == Some("successful");
        if done == flood + 1 && signed_mid {
            break;
        }
        if t0.elapsed() > Duration::from_secs(60) {
            panic!(
                "{done} of {} commands have a final state ({seen} topics seen); signed one successful: {signed_mid}\n{}",
                flood + 1,
                agent.log_text()
            );
        }
    }
    // The captured 256M init, replayed: the boot file stays at 512M, the record stays.
    c.publish("npu-fleet/b1/cmd/set_cma/s-256", b"", true);
    c.publish("npu-fleet/b1/cmd/set_cma/s-256", &first, true);
    tried += 1;
    // Ordering marker through the executor: a signed rescan (no rate limit) is admitted after
    // the replay and runs after any job the replay queued, one job at a time in that order.
    let marker = "npu-fleet/b1/cmd/rescan/after-replay";
    c.publish(
        marker,
        &init_payload(
            "b1",
            "rescan",
            "after-replay",
            json!({}),
            now_s(),
            60,
            Some(&key(1)),
        ),
        false,
    );
    lifecycle(&c, marker, "successful");
    assert!(board
        .read("/boot/armbianEnv.txt")
        .unwrap()
        .contains("cma=512M"));
    // Item 2: a command that never expires, signed.
    let mut forever = npu_agent::mqtt::command::InitMessage {
        status: npu_agent::mqtt::command::CmdStatus::Init,
        board: "b1".into(),
        args: json!({"size": "256M"}).as_object().cloned().unwrap(),
        issued_at: -9_223_372_036_854_775_807,
        expires_at: 9_000_000_000_000_000_000,
        signature: None,
    };
    npu_agent::mqtt::command::sign(&key(1), "npu-fleet", "set_cma", "forever", &mut forever);
    c.publish(
        "npu-fleet/b1/cmd/set_cma/forever",
        &serde_json::to_vec(&forever).unwrap(),
        true,
    );
    tried += 1;
    let r = lifecycle(&c, "npu-fleet/b1/cmd/set_cma/forever", "rejected");
    assert!(r["reason"].as_str().unwrap().contains("lifetime"), "{r}");
    assert!(board
        .read("/boot/armbianEnv.txt")
        .unwrap()
        .contains("cma=512M"));
    // Item 1: a corrupt ledger fails closed after a restart.
    let _ = agent.terminate();
    board.write(
        "/var/lib/npu-agent/commands.json",
        "{\"commands\": [garbage",
    );
    let mut agent = Agent::start(&board);
    let id = "after-corrupt";
    c.publish(
        &format!("npu-fleet/b1/cmd/set_cma/{id}"),
        &init_payload(
            "b1",
            "set_cma",
            id,
            json!({"size": "256M"}),
            now_s(),
            60,
            Some(&key(1)),
        ),
        true,
    );
    tried += 1;
    let r = lifecycle(&c, &format!("npu-fleet/b1/cmd/set_cma/{id}"), "rejected");
    assert!(
        r["reason"]
            .as_str()
            .unwrap()
            .contains("ledger is unreadable"),
        "{r}"
    );
    assert_eq!(
        board.read("/var/lib/npu-agent/commands.json").unwrap(),
        "{\"commands\": [garbage"
    );
    assert!(board
        .read("/boot/armbianEnv.txt")
        .unwrap()
        .contains("cma=512M"));
    assert!(agent.is_running());
    eprintln!("attacks: command-path tried={tried} held={tried}");
}

/// Item 5 of the command-path hardening, at start: 1,500 retained unsigned `init`s (and a signed
/// one among them) wait on the broker before the agent connects; every one gets a final state —
/// the first rescan runs, the rest are rate limited — and the signed one runs. The broker keeps
/// every queued message for the agent (`max_queued_messages 0`), as the operator guide asks.
#[test]
fn retained_commands_waiting_at_start_all_get_a_final_state() {
    let Some((broker, board)) = flood_broker_and_board() else {
        return;
    };
    let c = Client::connect(broker.port, &[]);
    let waiting = 1500;
    for (topic, payload) in rescan_flood("w", waiting, 120, "signed-waiting") {
        c.publish(&topic, &payload, true);
    }
    // Every init is on the broker (a retained burst to a fresh subscriber holds all of them).
    let t0 = Instant::now();
    loop {
        let check = Client::connect(broker.port, &["npu-fleet/b1/cmd/rescan/+"]);
        let n = collect_for(&check, Duration::from_secs(2), |ms| ms.len() > waiting).len();
        if n == waiting + 1 {
            break;
        }
        assert!(t0.elapsed() < T, "{n} of {} inits retained", waiting + 1);
    }
    let agent = Agent::start(&board);
    let t0 = Instant::now();
    loop {
        let check = Client::connect(broker.port, &["npu-fleet/b1/cmd/rescan/+"]);
        // One subscriber sees the retained states, then every later change in order.
        let finals = last_status(&collect_for(&check, Duration::from_secs(3), |ms| {
            let f = last_status(ms);
            let done = f
                .values()
                .filter(|v| *v == "successful" || *v == "rejected")
                .count();
            done == waiting + 1
                && f.get("npu-fleet/b1/cmd/rescan/signed-waiting")
                    .map(String::as_str)
                    == Some("successful")
        }));
        let count = |s: &str| finals.values().filter(|v| v.as_str() == s).count();
        let signed = finals
            .get("npu-fleet/b1/cmd/rescan/signed-waiting")
            .map(String::as_str);
        if count("successful") + count("rejected") == waiting + 1 && signed == Some("successful") {
            // Unsigned rescans run at most once per 5 s (the rest are rate limited).
            let unsigned_runs = count("successful") - 1;
            let bound = 1 + t0.elapsed().as_secs() as usize / 5;
            assert!(
                (1..=bound).contains(&unsigned_runs),
                "{unsigned_runs} unsigned rescans ran"
            );
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "{} successful, {} rejected of {} ({} topics); signed one: {signed:?}\n{}",
            count("successful"),
            count("rejected"),
            waiting + 1,
            finals.len(),
            agent.log_text()
        );
    }
    eprintln!(
        "attacks: retained-at-start tried={} held={}",
        waiting + 1,
        waiting + 1
    );
}

/// A board (or anyone on the broker) cannot drive the operator's terminal through `fleet watch`
/// or `fleet send`: a status and a command reply carrying conceal, clear-screen, cursor-home
/// and a newline with a fake row reach the output escaped.
#[test]
fn hostile_statuses_and_replies_cannot_drive_the_operator_terminal() {
    if !require_tool("mosquitto") {
        return;
    }
    let broker = Broker::start();
    let url = broker.url();
    let c = Client::connect(broker.port, &["npu-fleet/evil/cmd/#"]);
    c.publish("npu-fleet/evil/availability", b"online\x1b[8m", true);
    c.publish(
        "npu-fleet/evil/status",
        json!({"health": "ok\u{1b}[2J\u{1b}[H", "profile": "p\nfake-board online ok",
               "model": "m\u{1b}[30;40m", "time": "t", "session": 1,
               "findings": [{"id": "cma.free\u{1b}[8m", "status": "fail"}]})
        .to_string()
        .as_bytes(),
        true,
    );
    let bad: [&[u8]; 5] = [b"\x1b[8m", b"\x1b[2J", b"\x1b[H", b"\x1b[30", b"\x1b[1A"];
    let clean = |what: &str, text: &str| {
        for b in bad {
            let b = String::from_utf8_lossy(b);
            assert!(!text.contains(b.as_ref()), "{what} carries {b:?}: {text:?}");
        }
    };
    let (code, out, err) = run_cli(&["fleet", "watch", "--broker", &url, "--once"], &[]);
    assert_eq!(code, 0, "{err}");
    clean("fleet watch", &out);
    assert!(out.contains("cma.free[8m fail"), "{out}");
    assert_eq!(
        out.lines().filter(|l| l.contains("online")).count(),
        1,
        "{out}"
    );
    // fleet send: the "board" answers the init with a hostile reason.
    let child = Command::new(agent_bin())
        .args([
            "fleet", "send", "rescan", "--board", "evil", "--broker", &url, "--wait", "10",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let init = c.wait_for(T, "the init of fleet send", |m| {
        m.json()["status"] == "init"
    });
    c.publish(
        &init.topic,
        json!({"status": "rejected", "reason": "no\u{1b}[8m hidden\u{1b}[2J\u{1b}[Hfake successful"})
            .to_string()
            .as_bytes(),
        true,
    );
    let o = child.wait_with_output().unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    clean("fleet send", &out);
    assert!(
        out.contains("rejected: no[8m hidden[2J[Hfake successful"),
        "{out}"
    );
    assert_eq!(o.status.code(), Some(1), "{out}");
}

/// Junk published on the topic of a command that already ran (retained, as an attacker on the
/// broker would) is answered with the real record, not with a `rejected` that replaces it: a
/// fresh subscriber still reads `successful`.
#[test]
fn junk_on_a_used_command_topic_keeps_the_real_outcome() {
    let Some((broker, board)) = setup("b1", "") else {
        return;
    };
    let _agent = Agent::start(&board);
    let c = Client::connect(broker.port, &["npu-fleet/b1/#"]);
    status_of(&c, "b1");
    let topic = "npu-fleet/b1/cmd/rescan/ran-1";
    let p = init_payload("b1", "rescan", "ran-1", json!({}), now_s(), 60, None);
    c.publish(topic, &p, true);
    lifecycle(&c, topic, "successful");
    for junk in [&b"not json"[..], br#"{"status":"init","board":"b1"}"#] {
        c.publish(topic, junk, true);
        let v = c
            .wait_for(T, "the agent's answer to junk", |m| {
                m.topic == topic && m.json()["replay_rejected"].is_string()
            })
            .json();
        assert_eq!(v["status"], "successful", "{v}");
    }
    // The answer above came through the broker after the junk, so the retained record is set.
    let fresh = Client::connect(broker.port, &[topic]);
    let v = fresh
        .wait_for(T, "the retained record", |m| m.topic == topic)
        .json();
    assert_eq!(v["status"], "successful", "{v}");
}

/// Publishes, as `n` agents would, a retained availability `online` and a retained status of
/// about 3 KB for `fleet-0000`..., and waits for the last.
fn fill_statuses(broker: &Broker, n: usize) {
    let c = Client::connect(broker.port, &[]);
    let pad = "x".repeat(3000);
    for i in 0..n {
        let body = json!({"health": "pass", "board_id": format!("fleet-{i:04}"),
            "profile": "rk3588-rknpu", "model": "ROCK 5B", "session": 1,
            "metrics": {"cma_free_bytes": 1 << 20}, "note": pad});
        c.publish(
            &format!("npu-fleet/fleet-{i:04}/availability"),
            b"online",
            true,
        );
        c.publish(
            &format!("npu-fleet/fleet-{i:04}/status"),
            body.to_string().as_bytes(),
            true,
        );
    }
    let last = format!("npu-fleet/fleet-{:04}/status", n - 1);
    let probe = Client::connect(broker.port, &[&last]);
    probe.wait_for(T, "the last retained status", |m| m.topic == last);
}

/// When every availability pass still reveals boards no earlier pass had (here: a board joins
/// every 50 ms while `fleet watch --once` reads), the list is said to be INCOMPLETE, with exit 1
/// and the reason in the JSON, instead of passing for the whole fleet.
#[test]
fn fleet_watch_once_says_incomplete_while_passes_keep_revealing_boards() {
    if !require_tool("mosquitto") {
        return;
    }
    let broker = Broker::start();
    fill_statuses(&broker, 50);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let joiner = {
        let stop = stop.clone();
        let port = broker.port;
        std::thread::spawn(move || {
            let c = Client::connect(port, &[]);
            let mut i = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let id = format!("late-{i:04}");
                c.publish(&format!("npu-fleet/{id}/availability"), b"online", true);
                let body = json!({"health": "pass", "board_id": id});
                c.publish(
                    &format!("npu-fleet/{id}/status"),
                    body.to_string().as_bytes(),
                    true,
                );
                i += 1;
                std::thread::sleep(Duration::from_millis(50));
            }
        })
    };
    std::thread::sleep(Duration::from_millis(200));
    let (code, out, err) = run_cli(
        &[
            "fleet",
            "watch",
            "--broker",
            &broker.url(),
            "--once",
            "--format",
            "json",
        ],
        &[],
    );
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    joiner.join().unwrap();
    let v: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}{err}"));
    assert_eq!(code, 1, "{err}");
    assert_eq!(v["incomplete"], true, "{out}");
    let why = v["incomplete_reason"].as_str().unwrap();
    assert!(
        why.contains("after 4 passes") && why.contains("boards are joining"),
        "{why}"
    );
    assert!(err.contains("INCOMPLETE"), "{err}");
    // What it did read is listed: the 50 boards there from the start, and the early joiners.
    let boards = v["boards"].as_array().unwrap();
    assert!(boards.len() > 50, "{}", boards.len());
    for i in 0..50 {
        let b = format!("fleet-{i:04}");
        assert!(
            boards.iter().any(|r| r["board"] == b.as_str()),
            "{b} missing"
        );
    }
}

/// `fleet watch --once` lists every board of a fleet whose retained statuses do not fit in
/// one burst from a mosquitto with its default limits (`max_queued_messages 1000`): the broker's
/// log proves it dropped part of the wildcard burst, and the list still has every board.
#[test]
fn fleet_watch_once_lists_every_board_from_a_broker_with_default_limits() {
    if !require_tool("mosquitto") {
        return;
    }
    const N: usize = 6000;
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("mosquitto.log");
    // mosquitto started as root writes its log as the `mosquitto` user.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    // Default limits; only a log file added, to see the broker drop messages.
    let broker = Broker::start_with(
        free_port(),
        &format!("log_dest file {}\nlog_type notice", log.display()),
    );
    fill_statuses(&broker, N);
    let url = broker.url();
    let t0 = Instant::now();
    let (code, out, err) = run_cli(
        &[
            "fleet", "watch", "--broker", &url, "--once", "--format", "json",
        ],
        &[],
    );
    let took = t0.elapsed();
    let v: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}{err}"));
    assert_eq!(v["incomplete"], false, "{err}");
    assert_eq!(code, 0, "{err}");
    let boards = v["boards"].as_array().unwrap();
    assert_eq!(boards.len(), N, "every board is listed");
    for (i, b) in boards.iter().enumerate() {
        assert_eq!(b["board"], format!("fleet-{i:04}"));
        assert_eq!(b["health"], "pass", "{b}");
        assert_eq!(b["availability"], "online", "{b}");
    }
    assert!(took < Duration::from_secs(30), "took {took:?}");
    // The broker did cut the wildcard burst: the list is complete despite that, not because
    // everything fitted.
    let log = std::fs::read_to_string(&log).unwrap();
    assert!(
        log.contains("Outgoing messages are being dropped for client npu-agent-watch-"),
        "mosquitto dropped nothing, so this test proved nothing: {log}"
    );
}

/// Every policy refusal is decided before `executing`: a signed reboot with `allow_reboot =
/// false`, a signed `set_cma` above the RAM and a `release_npu` on a board without hailo-ollama
/// are answered `rejected` with the reason, and no `executing` is ever published for them.
#[test]
fn policy_refusals_are_rejected_never_executing_first() {
    let Some((broker, board)) = setup("b1", "") else {
        return;
    };
    let extra = format!("{}\n[actions]\nallow_reboot = false\n", trust(&board, 1));
    board.write(
        "/etc/npu-agent/agent.toml",
        &agent_config(&broker.url(), "b1", &extra),
    );
    let _agent = Agent::start(&board);
    let c = Client::connect(broker.port, &["npu-fleet/b1/#"]);
    status_of(&c, "b1");
    let cases = [
        ("reboot", "pr-1", json!({}), "not allowed"),
        ("set_cma", "pr-2", json!({"size": "900G"}), "RAM"),
        ("release_npu", "pr-3", json!({}), "hailo-ollama"),
    ];
    for (action, id, args, why) in cases {
        let topic = format!("npu-fleet/b1/cmd/{action}/{id}");
        c.publish(
            &topic,
            &init_payload("b1", action, id, args, now_s(), 120, Some(&key(1))),
            true,
        );
        let seen = std::cell::RefCell::new(Vec::new());
        let done = c.wait_for(T, &format!("a final state on {topic}"), |m| {
            if m.topic != topic || m.payload.is_empty() {
                return false;
            }
            let s = m.json()["status"].as_str().unwrap_or("").to_string();
            seen.borrow_mut().push(s.clone());
            s == "rejected" || s == "failed" || s == "successful"
        });
        let done = done.json();
        assert_eq!(done["status"], "rejected", "{action}: {done}");
        assert!(
            done["reason"].as_str().unwrap().contains(why),
            "{action}: {done}"
        );
        assert!(
            !seen.borrow().iter().any(|s| s == "executing"),
            "{action} published {:?}",
            seen.borrow()
        );
    }
}

/// Two agents with one `board_id` on one mosquitto: each takes the session over from the other.
/// The drops that follow a full status are that takeover, not a status too large for the
/// broker: once the takeover is recognised, neither agent keeps the compact status.
#[test]
fn a_session_takeover_is_not_read_as_a_status_too_large() {
    let Some((broker, board)) = setup("b1", "") else {
        return;
    };
    let twin = Board::from_fixture(CASE, "b1", &agent_config(&broker.url(), "b1", ""));
    let a = Agent::start(&board);
    let b = Agent::start(&twin);
    let compact = "publishing the compact status from now on";
    let full_again = "publishing the full status again";
    // mosquitto 2.0 ends the session without reason code 0x8E: only the pattern is seen.
    let takeover = "another client may use this board id";
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let logs = [a.log_text(), b.log_text()];
        if logs.iter().all(|l| l.contains(takeover)) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no takeover recognised by both agents:\n{}\n---\n{}",
            logs[0],
            logs[1]
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // The compact form may have been chosen before the takeover was recognised, but then it
    // is undone: the last word on the status form is never "compact".
    let undone = |log: &str| {
        let last_compact = log.rfind(compact);
        last_compact.is_none() || log.rfind(full_again) > last_compact
    };
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(5)
        && ![a.log_text(), b.log_text()].iter().all(|l| undone(l))
    {
        std::thread::sleep(Duration::from_millis(50));
    }
    for log in [a.log_text(), b.log_text()] {
        assert!(
            undone(&log),
            "the compact status stays on after a takeover:\n{log}"
        );
    }
}

/// A proxy rule that cuts the connection in place of the first `n` packets `hit` matches.
fn cut_first(
    n: usize,
    hit: impl Fn(crate::support::proxy::Dir, &[u8]) -> bool + Send + 'static,
) -> crate::support::proxy::Rule {
    use crate::support::proxy::Fault;
    let mut left = n;
    std::sync::Arc::new(std::sync::Mutex::new(move |d, p: &[u8]| {
        if left > 0 && hit(d, p) {
            left -= 1;
            Fault::Cut
        } else {
            Fault::Pass
        }
    }))
}

/// Issue 28 item 3: one broker fault right after a full status (a node crash, a restart) is
/// not read as a packet limit: the next connection publishes the full status again.
#[test]
fn one_drop_after_a_full_status_keeps_the_full_status() {
    use crate::support::proxy::{contains, packet_type, Dir, Proxy};
    let Some((broker, board)) = setup("b1", "") else {
        return;
    };
    let rule = cut_first(1, |d, p| {
        d == Dir::Up && packet_type(p) == 3 && contains(p, b"npu-fleet/b1/status")
    });
    let proxy = Proxy::start(broker.port, rule);
    board.write(
        "/etc/npu-agent/agent.toml",
        &agent_config(&proxy.url(), "b1", ""),
    );
    let agent = Agent::start(&board);
    let c = Client::connect(broker.port, &["npu-fleet/b1/status"]);
    let s = c.wait_for(T, "the status of the second connection", |m| {
        !m.payload.is_empty() && m.json()["session"] == 2
    });
    assert_ne!(s.json()["form"], "compact", "{}", agent.log_text());
    assert!(
        s.json()["findings"].is_array(),
        "the full form has the findings"
    );
    let log = agent.log_text();
    assert!(!log.contains("compact status from now on"), "{log}");
}

/// Issue 28 item 3: connections closed right after CONNACK without a reason code (an overloaded
/// broker, a cluster node going away) are not called "another client uses this board id": the
/// agent backs off and says it may be either.
#[test]
fn kicks_without_a_reason_are_not_named_a_takeover() {
    use crate::support::proxy::{packet_type, Dir, Proxy};
    let Some((broker, board)) = setup("b1", "") else {
        return;
    };
    let rule = cut_first(3, |d, p| d == Dir::Up && packet_type(p) == 8);
    let proxy = Proxy::start(broker.port, rule);
    board.write(
        "/etc/npu-agent/agent.toml",
        &agent_config(&proxy.url(), "b1", ""),
    );
    let agent = Agent::start(&board);
    let c = Client::connect(broker.port, &["npu-fleet/b1/status"]);
    let s = c.wait_for(Duration::from_secs(30), "a status after the kicks", |m| {
        !m.payload.is_empty() && m.json()["session"].as_u64() >= Some(4)
    });
    let log = agent.log_text();
    assert!(log.contains("or the broker is overloaded"), "{log}");
    assert!(!log.contains("another client uses this board id"), "{log}");
    let notices = s.json()["notices"].to_string();
    assert!(notices.contains("or an overloaded broker"), "{notices}");
}

/// Issue 28 item 3, the other side: when the broker does say it (an MQTT 5 DISCONNECT with
/// reason code 0x8E, here put in place of the SUBACK by a proxy), one is enough, and the agent
/// names it.
#[test]
fn a_takeover_the_broker_names_is_reported_as_one_at_once() {
    use crate::support::proxy::{packet_type, Dir, Fault};
    let Some((broker, board)) = setup("b1", "") else {
        return;
    };
    let mut left = 1;
    let rule = move |d: Dir, p: &[u8]| {
        if left > 0 && d == Dir::Down && packet_type(p) == 9 {
            left -= 1;
            return Fault::Replace(vec![0xe0, 0x02, 0x8e, 0x00]);
        }
        Fault::Pass
    };
    let (_proxy, agent) = behind_proxy(&broker, &board, rule);
    let c = Client::connect(broker.port, &["npu-fleet/b1/status"]);
    let s = c.wait_for(T, "a status after the takeover", |m| {
        !m.payload.is_empty() && m.json()["session"].as_u64() >= Some(2)
    });
    let log = agent.log_text();
    assert!(log.contains("another client uses this board id:"), "{log}");
    assert!(!log.contains("or the broker is overloaded"), "{log}");
    let notices = s.json()["notices"].to_string();
    assert!(
        notices.contains("another client uses this board id (b1)"),
        "{notices}"
    );
}

/// `fleet watch --once --format json` through a proxy that cuts the connection at the 20th
/// retained PUBLISH of each of its first `cuts` connections: exit code, the JSON, stderr.
fn watch_cut(broker_port: u16, cuts: usize) -> (i32, Value, String) {
    use crate::support::proxy::{packet_type, Dir, Fault, Proxy};
    let (mut publishes, mut done) = (0, 0);
    let rule = move |d: Dir, p: &[u8]| {
        if d == Dir::Down && packet_type(p) == 3 && done < cuts {
            publishes += 1;
            if publishes == 20 {
                (publishes, done) = (0, done + 1);
                return Fault::Cut;
            }
        }
        Fault::Pass
    };
    let proxy = Proxy::start(
        broker_port,
        std::sync::Arc::new(std::sync::Mutex::new(rule)),
    );
    let url = proxy.url();
    let args = [
        "fleet", "watch", "--once", "--format", "json", "--broker", &url,
    ];
    let (code, out, err) = run_cli(&args, &[]);
    let doc = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}{err}"));
    (code, doc, err)
}

/// Issue 28 item 5: a broker that keeps closing `fleet watch --once`'s connection in the middle
/// of the retained burst (NATS drops a slow consumer) ends the listing with what it has, marked
/// incomplete with the reason, instead of starting over for ever; one reconnect (a broker
/// restart) only starts it over, and the list is complete.
#[test]
fn fleet_watch_once_cut_mid_listing_says_incomplete_and_why() {
    let Some((broker, _board)) = setup("b1", "") else {
        return;
    };
    let c = Client::connect(broker.port, &[]);
    for i in 0..50 {
        c.publish(&format!("npu-fleet/w{i:02}/availability"), b"online", true);
        c.publish(
            &format!("npu-fleet/w{i:02}/status"),
            br#"{"health":"ok","profile":"p","time":"t","session":1}"#,
            true,
        );
    }
    // Every retained message is stored before the listing starts.
    let check = Client::connect(broker.port, &["npu-fleet/w49/status"]);
    check.wait_for(T, "the last retained status", |_| true);
    let (code, doc, err) = watch_cut(broker.port, 1);
    assert_eq!(code, 0, "{doc}{err}");
    assert_eq!(doc["boards"].as_array().map(Vec::len), Some(50), "{doc}");
    let (code, doc, err) = watch_cut(broker.port, 3);
    assert_eq!(code, 1, "{doc}{err}");
    assert_eq!(doc["incomplete"], true, "{doc}");
    let why = doc["incomplete_reason"].as_str().unwrap_or("");
    assert!(
        why.contains("in the middle of the listing 3 times"),
        "{why}"
    );
    assert!(why.contains("max_pending"), "{why}");
    assert!(err.contains("in the middle of the listing"), "{err}");
}

/// Issue 28 item 2: a broker that refuses the command subscription (an ACL, a cluster out of
/// consumers; here a proxy rewrites the first two SUBACKs to 0x87) leaves a board that
/// publishes but hears nothing. The agent reads its SUBACK, says so in the status
/// (`commands: not subscribed`, a notice) and the log, subscribes again with back-off, and
/// hears commands once the broker grants it; `fleet watch` shows the board `deaf` meanwhile.
#[test]
fn a_refused_command_subscription_is_retried_and_shown() {
    use crate::support::proxy::{packet_type, refuse_suback, Dir, Fault};
    let Some((broker, board)) = setup("b1", "") else {
        return;
    };
    let mut left = 2;
    let rule = move |d: Dir, p: &[u8]| {
        if left > 0 && d == Dir::Down && packet_type(p) == 9 {
            left -= 1;
            return Fault::Replace(refuse_suback(p, true, 0x87));
        }
        Fault::Pass
    };
    let (_proxy, agent) = behind_proxy(&broker, &board, rule);
    let c = Client::connect(broker.port, &["npu-fleet/b1/#"]);
    let deaf = c.wait_for(T, "a status saying the commands are not subscribed", |m| {
        m.topic == "npu-fleet/b1/status" && m.json()["commands"] == "not subscribed"
    });
    let notices = deaf.json()["notices"].to_string();
    assert!(
        notices.contains("not authorized, reason code 0x87"),
        "{notices}"
    );
    let watch = Command::new(env!("CARGO_BIN_EXE_npu-agent"))
        .args(["fleet", "watch", "--once", "--broker", &broker.url()])
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&watch.stdout);
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("b1 ") && l.contains(" deaf ")),
        "{table}"
    );
    c.wait_for(T, "a status saying the commands are subscribed", |m| {
        m.topic == "npu-fleet/b1/status" && m.json()["commands"] == "subscribed"
    });
    let topic = "npu-fleet/b1/cmd/rescan/heard-1";
    let p = init_payload("b1", "rescan", "heard-1", json!({}), now_s(), 60, None);
    c.publish(topic, &p, true);
    lifecycle(&c, topic, "successful");
    let log = agent.log_text();
    assert!(log.contains("refused the command subscription"), "{log}");
    // Two refusals, then the third SUBSCRIBE was granted (no third refusal).
    assert_eq!(
        log.matches("the broker refused the command subscription")
            .count(),
        2,
        "{log}"
    );
}

/// `fleet send rescan --board b1` through a proxy to `broker_port` that treats each SUBACK and
/// each PUBLISH to the client with `fault` (with the number of SUBACKs so far: 1 is the
/// replies', 2 the target's): exit code, stdout, stderr.
fn send_through(
    broker_port: u16,
    extra: &[&str],
    fault: impl Fn(u32, &[u8]) -> crate::support::proxy::Fault + Send + 'static,
) -> (i32, String, String) {
    use crate::support::proxy::{packet_type, Dir, Fault, Proxy};
    let mut n = 0;
    let rule = move |d: Dir, p: &[u8]| {
        if d == Dir::Down && [3, 9].contains(&packet_type(p)) {
            n += u32::from(packet_type(p) == 9);
            return fault(n, p);
        }
        Fault::Pass
    };
    let proxy = Proxy::start(
        broker_port,
        std::sync::Arc::new(std::sync::Mutex::new(rule)),
    );
    let url = proxy.url();
    let mut args = vec!["fleet", "send", "rescan", "--board", "b1", "--broker", &url];
    args.extend_from_slice(extra);
    run_cli(&args, &[])
}

/// Issue 28 item 4: `fleet send` waits for the SUBACK before it waits for the board: a broker
/// that takes 4 s per SUBACK (a cluster creating a QoS 1 consumer) is not "no such board"; a
/// refused subscription and a SUBACK that never comes are each named as what did not come.
#[test]
fn fleet_send_waits_for_the_suback_and_says_what_did_not_come() {
    use crate::support::proxy::{packet_type, refuse_suback, Fault};
    let Some((broker, board)) = setup("b1", "") else {
        return;
    };
    let _agent = Agent::start(&board);
    let c = Client::connect(broker.port, &["npu-fleet/b1/status"]);
    status_of(&c, "b1");
    let slow = |_: u32, p: &[u8]| match packet_type(p) {
        9 => Fault::Delay(Duration::from_secs(4)),
        _ => Fault::Pass,
    };
    let (code, out, err) = send_through(broker.port, &["--wait", "30"], slow);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains(" successful"), "{out}");
    // The target's SUBACK refused: named, with the reason code.
    let refuse = |n: u32, p: &[u8]| match (n, packet_type(p)) {
        (2, 9) => Fault::Replace(refuse_suback(p, true, 0x87)),
        _ => Fault::Pass,
    };
    let (code, _, err) = send_through(broker.port, &["--wait", "10"], refuse);
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("the broker refused the subscription to the board's"),
        "{err}"
    );
    assert!(err.contains("not authorized, reason code 0x87"), "{err}");
    // No SUBACK and nothing else either: said so, not "no such board".
    let (code, out, err) = send_through(
        broker.port,
        &["--wait", "3", "--board-wait", "1"],
        |_, _| Fault::Drop,
    );
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        err.contains("did not answer the subscriptions (no SUBACK)"),
        "{out}{err}"
    );
    assert!(!err.contains("no status was ever seen"), "{err}");
    // An unknown board after a granted subscription: the board wait is named.
    let (code, _, err) = run_cli(
        &[
            "fleet",
            "send",
            "rescan",
            "--board",
            "nobody",
            "--broker",
            &broker.url(),
            "--board-wait",
            "1",
        ],
        &[],
    );
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("within 1 s (--board-wait)"), "{err}");
}

/// Publishes at QoS 2 (the test client speaks QoS 1), from its own connection.
/// `once`: the connection ends at its first error (a thief's), else it reconnects.
fn qos2_publisher(
    port: u16,
    client_id: &str,
    once: bool,
) -> (rumqttc::Client, std::thread::JoinHandle<()>) {
    let mut o = rumqttc::MqttOptions::new(client_id, "127.0.0.1", port);
    o.set_keep_alive(Duration::from_secs(5));
    // Within mosquitto's max_inflight_messages (20) for what a client sends.
    o.set_inflight(10);
    let (client, mut conn) = rumqttc::Client::new(o, 1000);
    let thread = std::thread::spawn(move || {
        for ev in conn.iter() {
            match ev {
                Ok(rumqttc::Event::Outgoing(rumqttc::Outgoing::Disconnect)) if once => return,
                Err(_) if once => return,
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
                Ok(_) => {}
            }
        }
    });
    (client, thread)
}

/// QoS 2 and a session takeover: 600 unsigned rescans and a signed one in the middle, published
/// at QoS 2 (the agent subscribes at QoS 1, so the broker delivers them at QoS 1: no PUBREL games
/// reach it), while a client connects twice with the agent's own client id and kicks it off in
/// the middle of the flood (acknowledgements owed on the old connection are void; the broker
/// re-sends the retained `init`s on the new one). Every command gets a final state, and the
/// signed one runs exactly once (one `executing`, one `successful`).
#[test]
fn a_qos2_flood_with_session_takeovers_leaves_no_command_without_a_final_state() {
    let Some((broker, board)) = flood_broker_and_board() else {
        return;
    };
    let signed_topic = "npu-fleet/b1/cmd/rescan/signed-q2";
    let watch = Client::connect(broker.port, &[signed_topic, "npu-fleet/b1/cmd/reboot/+"]);
    let c = Client::connect(broker.port, &["npu-fleet/b1/status"]);
    let agent = Agent::start(&board);
    status_of(&c, "b1");
    let (p, _pt) = qos2_publisher(broker.port, "attacker-q2", false);
    let flood = 600;
    let mut session = 1;
    for (i, (topic, payload)) in rescan_flood("q2", flood, 120, "signed-q2")
        .into_iter()
        .enumerate()
    {
        p.publish(topic, rumqttc::QoS::ExactlyOnce, true, payload)
            .unwrap();
        if i == flood / 3 || i == 2 * flood / 3 {
            // A takeover with the agent's client id, in the middle of the flood.
            let (thief, t) = qos2_publisher(broker.port, "npu-agent-b1", true);
            std::thread::sleep(Duration::from_millis(300));
            let _ = thief.disconnect();
            let _ = t.join();
            // The agent is back (after its back-off) before the flood goes on.
            session += 1;
            let t0 = Instant::now();
            while !agent.log_text().contains(&format!("session={session} ")) {
                assert!(t0.elapsed() < T, "not reconnected: {}", agent.log_text());
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
    let t0 = Instant::now();
    loop {
        let (done, seen, signed) =
            retained_rescan_finals(broker.port, Duration::from_secs(3), signed_topic);
        if done == flood + 1 && signed.as_deref() == Some("successful") {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(90),
            "{done} of {} commands have a final state ({seen} topics); signed one: {signed:?}\n{}",
            flood + 1,
            agent.log_text()
        );
    }
    // A second run of the signed command would be published before the marker's answer.
    let seen: Vec<String> = until_marker(&watch, "b1", "q2-marker")
        .iter()
        .filter(|m| m.topic == signed_topic)
        .map(|m| m.json()["status"].as_str().unwrap_or("").to_string())
        .collect();
    let count = |s: &str| seen.iter().filter(|v| v.as_str() == s).count();
    assert_eq!(count("executing"), 1, "{seen:?}");
    assert_eq!(count("successful"), 1, "{seen:?}");
    assert_eq!(count("rejected"), 0, "{seen:?}");
    // Both takeovers did end the agent's session in the middle of the flood (it connected 3 times).
    let log = agent.log_text();
    assert!(log.contains("session=3 "), "{log}");
    eprintln!(
        "attacks: qos2-takeover tried={} held={}",
        flood + 3,
        flood + 3
    );
}

/// The retained `init`s of an unsigned rescan flood for board `b1`, in publish order:
/// `count` commands `<prefix>-<i>` valid for `lifetime_s` seconds, and after the middle one a
/// rescan `signed_id` signed with key 1. Pairs of (topic, payload).
fn rescan_flood(
    prefix: &str,
    count: usize,
    lifetime_s: i64,
    signed_id: &str,
) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::with_capacity(count + 1);
    for i in 0..count {
        let id = format!("{prefix}-{i}");
        out.push((
            format!("npu-fleet/b1/cmd/rescan/{id}"),
            init_payload("b1", "rescan", &id, json!({}), now_s(), lifetime_s, None),
        ));
        if i == count / 2 {
            out.push((
                format!("npu-fleet/b1/cmd/rescan/{signed_id}"),
                init_payload(
                    "b1",
                    "rescan",
                    signed_id,
                    json!({}),
                    now_s(),
                    lifetime_s,
                    Some(&key(1)),
                ),
            ));
        }
    }
    out
}

/// What a fresh subscriber to `b1`'s retained rescan commands sees within `settle`: how many
/// are in a final state (`successful`, `rejected`, `failed`), how many topics it saw, and the
/// status of `signed_topic`. Returns early once every topic seen is final, the signed one is
/// `successful` and nothing new came for 200 ms (the retained burst has been delivered).
fn retained_rescan_finals(
    port: u16,
    settle: Duration,
    signed_topic: &str,
) -> (usize, usize, Option<String>) {
    let check = Client::connect(port, &["npu-fleet/b1/cmd/rescan/+"]);
    let is_final = |s: &String| ["successful", "rejected", "failed"].contains(&s.as_str());
    let t0 = Instant::now();
    let mut quiet_since = Instant::now();
    let mut finals = std::collections::HashMap::new();
    loop {
        let new = check.drain();
        if !new.is_empty() {
            quiet_since = Instant::now();
        }
        finals.extend(last_status(&new));
        let settled = !finals.is_empty()
            && finals.values().all(is_final)
            && finals.get(signed_topic).map(String::as_str) == Some("successful")
            && quiet_since.elapsed() >= Duration::from_millis(200);
        if settled || t0.elapsed() >= settle {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let done = finals.values().filter(|s| is_final(s)).count();
    (done, finals.len(), finals.get(signed_topic).cloned())
}

/// Issue 26 item 15: SIGHUP (`systemctl reload`) reads the config and the trusted keys again
/// without a restart: a key taken out of `trusted_keys` verifies nothing afterwards, the agent
/// keeps its process and its connection, and a config that cannot be read keeps the running one.
#[test]
fn sighup_reloads_the_trusted_keys_without_a_restart() {
    let Some((broker, board)) = setup("b1", "") else {
        return;
    };
    let config = |extra: &str| agent_config(&broker.url(), "b1", extra);
    board.write("/etc/npu-agent/agent.toml", &config(&trust(&board, 1)));
    let mut agent = Agent::start(&board);
    let c = Client::connect(broker.port, &["npu-fleet/b1/#"]);
    status_of(&c, "b1");
    let pid = agent.pid();
    let rescan = |id: &str| {
        let p = init_payload("b1", "rescan", id, json!({}), now_s(), 60, Some(&key(1)));
        c.publish(&format!("npu-fleet/b1/cmd/rescan/{id}"), &p, true);
    };
    rescan("k-before");
    lifecycle(&c, "npu-fleet/b1/cmd/rescan/k-before", "successful");
    let hup = || {
        let ok = Command::new("kill")
            .args(["-HUP", &pid.to_string()])
            .status()
            .unwrap();
        assert!(ok.success());
    };
    // A broken config: the running one stays (key 1 still trusted).
    board.write("/etc/npu-agent/agent.toml", "board_id = [\n");
    hup();
    wait_log(&agent, &["SIGHUP: the config was not reloaded"]);
    rescan("k-broken");
    lifecycle(&c, "npu-fleet/b1/cmd/rescan/k-broken", "successful");
    // Key 1 taken out, a key 2 trusted instead, and a broker setting that waits for a restart.
    board.write(
        "/etc/npu-agent/agent.toml",
        &config(&trust(&board, 2)).replace("keep_alive_s = 5", "keep_alive_s = 6"),
    );
    hup();
    wait_log(&agent, &["SIGHUP: config reloaded"]);
    assert!(
        agent.log_text().contains("restart_needed: mqtt"),
        "{}",
        agent.log_text()
    );
    rescan("k-after");
    let r = lifecycle(&c, "npu-fleet/b1/cmd/rescan/k-after", "rejected");
    assert!(
        r["reason"].as_str().unwrap_or("").contains("bad signature"),
        "{r}"
    );
    assert!(agent.is_running() && agent.pid() == pid);
}

/// Issue 26 item 16: every board used to answer every junk command with a retained message
/// nobody clears. Under MQTT 5 (Retain As Published) a refusal of a command that was not
/// retained is not retained either; one that was retained is, so it still replaces the junk.
#[test]
fn live_junk_leaves_no_retained_answer_on_the_broker() {
    let Some((broker, board)) = setup("b1", "") else {
        return;
    };
    let _agent = Agent::start(&board);
    let c = Client::connect(broker.port, &["npu-fleet/b1/#"]);
    status_of(&c, "b1");
    let n = 30;
    for i in 0..n {
        let id = format!("junk-{i}");
        let topic = format!("npu-fleet/b1/cmd/set_cma/{id}");
        let p = init_payload(
            "b1",
            "set_cma",
            &id,
            json!({"size": "1G"}),
            now_s(),
            60,
            None,
        );
        c.publish(&topic, &p, false);
        c.publish(
            &format!("npu-fleet/b1/cmd/compact/raw-{i}"),
            b"not json",
            false,
        );
    }
    let kept = "npu-fleet/b1/cmd/set_cma/kept-1";
    let p = init_payload(
        "b1",
        "set_cma",
        "kept-1",
        json!({"size": "1G"}),
        now_s(),
        60,
        None,
    );
    c.publish(kept, &p, true);
    // Every refusal was answered live.
    let seen = collect_for(&c, T, |ms| {
        ms.iter()
            .filter(|m| m.topic.contains("/cmd/") && m.text().contains("\"rejected\""))
            .count()
            > 2 * n
    });
    let rejected = seen
        .iter()
        .filter(|m| m.topic.contains("/cmd/") && m.text().contains("\"rejected\""))
        .count();
    assert_eq!(rejected, 2 * n + 1, "answers seen live");
    // A fresh subscriber finds only the retained command's answer kept.
    let marker = "test/marker/junk-probe";
    let probe = Client::connect(broker.port, &["npu-fleet/b1/cmd/#", marker]);
    probe.publish(marker, b"m", false);
    let got = collect_for(&probe, T, |ms| ms.iter().any(|m| m.topic == marker));
    let stored: Vec<&str> = got
        .iter()
        .filter(|m| m.topic != marker && m.retain && !m.payload.is_empty())
        .map(|m| m.topic.as_str())
        .collect();
    assert_eq!(stored, vec![kept], "retained under npu-fleet/b1/cmd/");
    let last = got.iter().rfind(|m| m.topic == kept).unwrap().json();
    assert_eq!(last["status"], "rejected", "{last}");
}

/// Issue 27, back-off sized for a fleet: a broker that refuses the CONNECT (not authorised)
/// is not asked again for the whole cap (`reconnect_max_s`, default 120 s), where the old
/// policy asked again within 0.1 s and then every 1.6 s.
#[test]
fn a_refused_connect_waits_the_whole_cap() {
    if !require_tool("mosquitto") {
        return;
    }
    let broker = Broker::start_with(free_port(), "allow_anonymous false\n");
    let board = Board::from_fixture(CASE, "b1", "");
    // The default cap: the test helper's short one removed.
    board.write(
        "/etc/npu-agent/agent.toml",
        &agent_config(&broker.url(), "b1", "").replace("reconnect_max_s = 2\n", ""),
    );
    let agent = Agent::start(&board);
    let t0 = Instant::now();
    while !agent.log_text().contains("retry_in_ms") {
        assert!(
            t0.elapsed() < T,
            "no connection failure logged: {}",
            agent.log_text()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let log = agent.log_text();
    assert!(log.contains("NotAuthorized (reason code 0x87)"), "{log}");
    assert!(log.contains("retry_in_ms=120000"), "{log}");
}

/// Issue 27, liveness that does not depend on one node: a board whose retained status is many
/// intervals old is `stale` in `fleet watch` (with the reason in JSON), whatever its retained
/// availability says, and `fleet send` says so when the board does not answer.
#[test]
fn a_board_with_an_old_status_is_stale_whatever_its_availability_says() {
    if !require_tool("mosquitto") {
        return;
    }
    let broker = Broker::start();
    let c = Client::connect(broker.port, &["npu-fleet/ghost/#"]);
    // Its node died with its session: the last will never came, "online" stayed.
    c.publish("npu-fleet/ghost/availability", b"online", true);
    let old = String::from_utf8(
        Command::new("date")
            .args(["-u", "-d", "-1 hour", "+%Y-%m-%dT%H:%M:%SZ"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    let status = format!(
        r#"{{"health":"ok","board_id":"ghost","profile":"rk3588-rknpu","time":"{}","session":1,"interval_s":60,"findings":[]}}"#,
        old.trim()
    );
    c.publish("npu-fleet/ghost/status", status.as_bytes(), true);
    let url = broker.url();
    let (code, out, err) = run_cli(&["fleet", "watch", "--once", "--broker", &url], &[]);
    assert_eq!(code, 0, "{out}{err}");
    let row = out
        .lines()
        .find(|l| l.starts_with("ghost "))
        .unwrap_or_default();
    assert_eq!(row.split_whitespace().nth(1), Some("stale"), "{out}");
    let (code, out, err) = run_cli(
        &[
            "fleet", "watch", "--once", "--format", "json", "--broker", &url,
        ],
        &[],
    );
    assert_eq!(code, 0, "{out}{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    let why = v["boards"][0]["stale"].as_str().unwrap_or_default();
    assert!(why.contains("publishes every 60 s"), "{v}");
    let (code, out, err) = run_cli(
        &[
            "fleet",
            "send",
            "rescan",
            "--board",
            "ghost",
            "--broker",
            &url,
            "--wait",
            "3",
            "--board-wait",
            "1",
        ],
        &[],
    );
    assert_eq!(code, 1, "{out}{err}");
    assert!(err.contains("ghost is stale: its last status is"), "{err}");
}

/// Issue 27, several brokers: `[mqtt] url` lists the nodes in order; the agent connects to the
/// first that answers, fails over to the next when its broker goes away, and says in its status
/// which broker it is on; the fleet tools take the same list.
#[test]
fn the_agent_fails_over_to_the_next_broker_and_says_which() {
    if !require_tool("mosquitto") {
        return;
    }
    let mut a = Broker::start();
    let b = Broker::start();
    let dead = format!("mqtt://127.0.0.1:{}", free_port());
    let list = format!("{dead},{},{}", a.url(), b.url());
    let board = Board::from_fixture(CASE, "b1", "");
    board.write("/etc/npu-agent/agent.toml", &agent_config(&list, "b1", ""));
    let _agent = Agent::start(&board);
    // The first node refuses the connection: the second one has the board.
    let on_a = Client::connect(a.port, &["npu-fleet/b1/status"]);
    let s = on_a.wait_for(T, "a status on the second broker", |m| {
        !m.payload.is_empty()
    });
    assert_eq!(s.json()["broker"], a.url().as_str(), "{}", s.text());
    // The tools take the list too, and use the node that answers.
    let (code, out, err) = run_cli(
        &[
            "fleet",
            "watch",
            "--once",
            "--broker",
            &format!("{dead},{}", a.url()),
        ],
        &[],
    );
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.lines().any(|l| l.starts_with("b1 ")), "{out}");
    // Its node goes away: the board moves on to the third.
    let on_b = Client::connect(b.port, &["npu-fleet/b1/status"]);
    a.stop();
    let s = on_b.wait_for(T, "a status on the third broker", |m| !m.payload.is_empty());
    assert_eq!(s.json()["broker"], b.url().as_str(), "{}", s.text());
}

/// Board `b1`'s agent connected to `broker` through a proxy applying `rule` to every packet.
fn behind_proxy(
    broker: &Broker,
    board: &Board,
    rule: impl FnMut(crate::support::proxy::Dir, &[u8]) -> crate::support::proxy::Fault + Send + 'static,
) -> (crate::support::proxy::Proxy, Agent) {
    let proxy = crate::support::proxy::Proxy::start(
        broker.port,
        std::sync::Arc::new(std::sync::Mutex::new(rule)),
    );
    board.write(
        "/etc/npu-agent/agent.toml",
        &agent_config(&proxy.url(), "b1", ""),
    );
    let agent = Agent::start(board);
    (proxy, agent)
}

/// `fleet send` to a board whose retained availability says `offline` waits out `--wait`, then
/// says the board is offline (not only that no final state came).
#[test]
fn fleet_send_says_a_board_is_offline() {
    if !require_tool("mosquitto") {
        return;
    }
    let broker = Broker::start();
    let c = Client::connect(broker.port, &["npu-fleet/gone/availability"]);
    c.publish("npu-fleet/gone/availability", b"offline", true);
    c.wait_for(Duration::from_secs(10), "the availability", |m| {
        m.payload == b"offline"
    });
    let url = broker.url();
    let (code, out, err) = run_cli(
        &[
            "fleet",
            "send",
            "rescan",
            "--board",
            "gone",
            "--broker",
            &url,
            "--wait",
            "3",
            "--board-wait",
            "2",
        ],
        &[],
    );
    assert_eq!(code, 1, "{out}{err}");
    assert!(err.contains("no final state within 3 s"), "{err}");
    assert!(
        err.contains("gone is offline (its retained availability says so)"),
        "{err}"
    );
}
