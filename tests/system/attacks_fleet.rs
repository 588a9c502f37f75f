//! Issue 37: what someone with broker access can do to the fleet tools and the agent, against a
//! real mosquitto and the real agent. Invented boards are bounded in `known_boards` (item 3),
//! a huge status is not kept (5), board ids are printed escaped and cut (6), a never-seen key is
//! named and a bundle sealed by one is refused (8), an unfetched capture and a junk flood's
//! answers are cleared in time (9), a board's own older status replayed is shown `REPLAYED`
//! (10) and a flood of spoofed `offline` gets `online` back at most once a second (13).

use crate::support::mqtt::*;
use std::io::BufRead;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const CASE: &str = "own-rk3588-opi5plus-rknpu-0.9.8-healthy";
const T: Duration = Duration::from_secs(20);

/// Runs `npu-agent ARGS` with `known` as the known-boards file: (exit code, stdout, stderr).
fn cli(args: &[&str], known: &Path) -> (i32, String, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_npu-agent"))
        .args(args)
        .env("NPU_AGENT_KNOWN_BOARDS", known)
        .output()
        .unwrap();
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// A status for `board` sealed by `key`, at `time`.
fn sealed_status(key: &npu_agent::mqtt::ed25519::SigningKey, board: &str, time: &str) -> Vec<u8> {
    let topic = format!("npu-fleet/{board}/status");
    let body = format!(r#"{{"health":"ok","profile":"rk3588-rknpu","time":"{time}"}}"#);
    npu_agent::mqtt::board_sig::seal(key, &topic, body.into_bytes())
}

/// Item 3: 300 invented boards, each with its own key, cost one write of `known_boards` and at
/// most the run's limit of lines; the rest are said, and `--accept-new-boards` takes them.
#[test]
fn invented_boards_are_bounded_in_known_boards() {
    if !require_tool("mosquitto") {
        return;
    }
    let broker = Broker::start();
    let c = Client::connect(broker.port, &[]);
    for i in 0..300u32 {
        let mut seed = [7u8; 32];
        seed[..4].copy_from_slice(&i.to_le_bytes());
        let key = npu_agent::mqtt::ed25519::SigningKey::from_bytes(&seed);
        let b = format!("fake-{i:03}");
        c.publish(
            &format!("npu-fleet/{b}/status"),
            &sealed_status(&key, &b, "2026-12-07T10:00:00Z"),
            true,
        );
    }
    let probe = Client::connect(broker.port, &["npu-fleet/fake-299/status"]);
    probe.wait_for(T, "the last status retained", |_| true);
    let dir = tempfile::tempdir().unwrap();
    let known = dir.path().join("known_boards");
    let url = broker.url();
    let (code, out, err) = cli(&["fleet", "watch", "--once", "--broker", &url], &known);
    assert_eq!(code, 0, "{out}{err}");
    let lines = std::fs::read_to_string(&known).unwrap().lines().count();
    assert_eq!(lines, 20, "the default limit");
    assert!(
        err.contains("280 boards' keys were not recorded") && err.contains("--accept-new-boards"),
        "{err}"
    );
    assert_eq!(out.matches("new unsaved").count(), 280, "{out}");
    let (code, out, err) = cli(
        &[
            "fleet",
            "watch",
            "--once",
            "--broker",
            &url,
            "--accept-new-boards",
            "1000",
        ],
        &known,
    );
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(
        std::fs::read_to_string(&known).unwrap().lines().count(),
        300
    );
    assert_eq!(out.matches(" signed ").count(), 20, "{out}");
    println!("attacks: known-boards-flood tried=300 held=300");
}

/// Items 5 and 6: a status of 3.9 MB is not parsed (its row says `too large`); ids padded with
/// blanks or holding a zero-width space are printed escaped and cut, and draw no row of their
/// own.
#[test]
fn hostile_ids_and_huge_statuses_draw_no_fake_rows() {
    if !require_tool("mosquitto") {
        return;
    }
    let broker = Broker::start();
    let c = Client::connect(broker.port, &[]);
    // Padded within the 128 bytes a board id may have (a longer one makes no row at all:
    // fleet::watch's unit tests).
    let padded = format!("b1{}online signed ok", " ".repeat(100));
    let look_alike = "b1\u{200b}";
    for id in [padded.as_str(), look_alike, "b1"] {
        c.publish(&format!("npu-fleet/{id}/availability"), b"online", true);
    }
    let huge = format!(r#"{{"health":"ok","profile":"{}"}}"#, "p".repeat(3_900_000));
    publish_big(broker.port, "npu-fleet/big/status", huge.into_bytes());
    let dir = tempfile::tempdir().unwrap();
    let known = dir.path().join("known_boards");
    let (code, out, err) = cli(
        &["fleet", "watch", "--once", "--broker", &broker.url()],
        &known,
    );
    assert_eq!(code, 0, "{out}{err}");
    assert_eq!(out.lines().count(), 5, "a header and four rows: {out}");
    for line in out.lines() {
        assert!(line.len() < 200, "{line}");
        assert!(!line.contains("online signed ok"), "{line}");
    }
    assert!(out.contains("b1\\u{200b} "), "{out}");
    assert!(out.contains("b1\\x20\\x20"), "{out}");
    let big = out.lines().find(|l| l.starts_with("big ")).unwrap();
    assert!(big.contains("too large"), "{big}");
    println!("attacks: hostile-ids tried=4 held=4");
}

/// Publishes one retained message past the test client's 1 MiB packet limit (QoS 1, waits
/// for the PUBACK).
fn publish_big(port: u16, topic: &str, payload: Vec<u8>) {
    let mut o = rumqttc::MqttOptions::new("test-big", "127.0.0.1", port);
    o.set_max_packet_size(8 << 20, 8 << 20);
    let (client, mut conn) = rumqttc::Client::new(o, 10);
    client
        .publish(topic, rumqttc::QoS::AtLeastOnce, true, payload)
        .unwrap();
    let t0 = Instant::now();
    for ev in conn.iter() {
        assert!(t0.elapsed() < T, "no PUBACK for the big status");
        if let Ok(rumqttc::Event::Incoming(rumqttc::Packet::PubAck(_))) = ev {
            break;
        }
    }
}

/// Item 9: an unfetched capture's chunks and the answers to 4,300 retained junk commands
/// are all cleared once their window is over (the window is 61 s here: max_command_age_s = 1
/// plus the clock skew allowed), although the clear list holds 4,096 entries.
#[test]
fn a_junk_flood_leaves_no_answer_or_chunk_retained_past_its_window() {
    if !require_tool("mosquitto") {
        return;
    }
    // Every junk command reaches the agent (mosquitto drops QoS 1 messages past 1000 queued).
    let broker = Broker::start_with(free_port(), "max_queued_messages 0\n");
    let extra = "max_command_age_s = 1\n\n[actions]\nrate_limit_overrides_s = { capture = 0 }\n";
    let (board, _keys, key_path) = crate::operator::keyed_board(&broker, CASE, "j1", extra);
    let key = npu_agent::mqtt::command::load_signing_key(&key_path).unwrap();
    let _agent = Agent::start(&board);
    let c = Client::connect(broker.port, &["npu-fleet/j1/status", "npu-fleet/j1/cmd/#"]);
    c.wait_for(T, "a status", |m| m.topic.ends_with("/status"));
    let args = serde_json::json!({"max_bytes": "8388608"});
    let init = init_payload("j1", "capture", "cap-1", args, now_s(), 1, Some(&key));
    c.publish("npu-fleet/j1/cmd/capture/cap-1", &init, true);
    let answer = c.wait_for(T, "the capture's answer", |m| {
        m.topic.ends_with("/cap-1")
            && matches!(
                m.json()["status"].as_str(),
                Some("successful" | "rejected" | "failed")
            )
    });
    assert_eq!(answer.json()["status"], "successful", "{}", answer.text());
    let chunks = answer.json()["result"]["chunks"].as_u64().unwrap();
    assert!(chunks >= 1);
    let junk = 4300;
    for i in 0..junk {
        let id = format!("junk-{i}");
        let p = init_payload(
            "j1",
            "reboot",
            &id,
            serde_json::json!({}),
            now_s(),
            30,
            None,
        );
        c.publish(&format!("npu-fleet/j1/cmd/reboot/{id}"), &p, true);
    }
    let mut refused = 0;
    let t0 = Instant::now();
    while refused < junk {
        assert!(
            t0.elapsed() < Duration::from_secs(300),
            "{refused} refusals"
        );
        refused += c
            .drain()
            .iter()
            .filter(|m| m.topic.contains("/junk-") && m.json()["status"] == "rejected")
            .count();
        std::thread::sleep(Duration::from_millis(50));
    }
    // Past the window (61 s after the last answer, and the scan a second later), nothing of
    // the capture or the flood is retained.
    let deadline = Instant::now() + Duration::from_secs(100);
    let left = loop {
        let probe = Client::connect(
            broker.port,
            &["npu-fleet/j1/cmd/#", "npu-fleet/j1/capture/#"],
        );
        std::thread::sleep(Duration::from_millis(1500));
        let left: Vec<String> = probe
            .drain()
            .into_iter()
            .filter(|m| m.retain && !m.payload.is_empty())
            .map(|m| m.topic)
            .collect();
        if left.is_empty() || Instant::now() > deadline {
            break left;
        }
        std::thread::sleep(Duration::from_secs(3));
    };
    assert!(
        left.is_empty(),
        "{} still retained, e.g. {:?}",
        left.len(),
        &left[..left.len().min(5)]
    );
    println!("attacks: junk-flood-clear tried={junk} held={junk}");
}

/// Item 8: `fleet send` names a key first seen in its run; `fleet capture` writes no bundle
/// sealed by one unless `--accept-new-key`.
#[test]
fn a_never_seen_key_is_named_and_its_bundle_refused() {
    if !require_tool("mosquitto") {
        return;
    }
    let broker = Broker::start();
    let extra = "\n[actions]\nrate_limit_overrides_s = { capture = 0 }\n";
    let (board, _keys, key) = crate::operator::keyed_board(&broker, CASE, "n1", extra);
    let _agent = Agent::start(&board);
    let c = Client::connect(broker.port, &["npu-fleet/n1/status"]);
    c.wait_for(T, "a status", |m| !m.payload.is_empty());
    let dir = tempfile::tempdir().unwrap();
    let url = broker.url();
    let key = key.to_str().unwrap();
    let send = [
        "fleet", "send", "rescan", "--board", "n1", "--broker", &url, "--key", key,
    ];
    let known = dir.path().join("known_boards");
    let (code, out, err) = cli(&send, &known);
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("successful"), "{out}");
    assert!(err.contains("n1: new key, first seen in this run"), "{err}");
    let (code, out, err) = cli(&send, &known);
    assert_eq!(code, 0, "{out}{err}");
    assert!(!err.contains("new key"), "known now: {err}");

    let fresh = dir.path().join("fresh_known_boards");
    let file = dir.path().join("n1.tar.gz");
    let file_s = file.to_str().unwrap();
    let capture = [
        "fleet", "capture", "--board", "n1", "--broker", &url, "--key", key, "--out", file_s,
        "--wait", "30",
    ];
    let (code, out, err) = cli(&capture, &fresh);
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        err.contains("bundle not written") && err.contains("--accept-new-key"),
        "{err}"
    );
    assert!(!file.exists() && !fresh.exists());
    let (code, out, err) = cli(&[&capture[..], &["--accept-new-key"]].concat(), &fresh);
    assert_eq!(code, 0, "{out}{err}");
    assert!(file.exists());
    println!("attacks: never-seen-key tried=2 held=2");
}

/// Lines a child writes to stdout, collected by a thread.
fn collect_stdout(child: &mut std::process::Child) -> Arc<Mutex<String>> {
    let text = Arc::new(Mutex::new(String::new()));
    let out = child.stdout.take().unwrap();
    let t = text.clone();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
            t.lock().unwrap().push_str(&format!("{line}\n"));
        }
    });
    text
}

/// Item 10: the board's own older sealed status, published again, is shown `REPLAYED` by a
/// live `fleet watch`, not as the board's current status.
#[test]
fn a_replayed_older_status_is_not_shown_as_current() {
    let Some((broker, board)) = broker_and_board(CASE, "r1", "") else {
        return;
    };
    let _agent = Agent::start(&board);
    let c = Client::connect(broker.port, &["npu-fleet/r1/status"]);
    let first = c.wait_for(T, "a status", |m| !m.payload.is_empty());
    let t1 = first.json()["time"].as_str().unwrap().to_string();
    c.wait_for(T, "a status a second later", |m| {
        let t = m.json()["time"].as_str().unwrap_or("").to_string();
        t.get(..19) > t1.get(..19)
    });
    let dir = tempfile::tempdir().unwrap();
    let mut watch = Command::new(env!("CARGO_BIN_EXE_npu-agent"))
        .args(["fleet", "watch", "--broker", &broker.url()])
        .env("NPU_AGENT_KNOWN_BOARDS", dir.path().join("known_boards"))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let text = collect_stdout(&mut watch);
    let until = |what: &str, pred: &dyn Fn(&str) -> bool| {
        let t0 = Instant::now();
        while !pred(&text.lock().unwrap()) {
            assert!(t0.elapsed() < T, "no {what}: {}", text.lock().unwrap());
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    // The row shows the board's current status (sealed by its key) before the replay comes.
    until("status row for r1", &|t| {
        t.lines()
            .any(|l| l.starts_with("r1 ") && (l.contains(" new key ") || l.contains(" signed ")))
    });
    c.publish("npu-fleet/r1/status", &first.payload, false);
    until("REPLAYED row", &|t| {
        t.lines()
            .any(|l| l.starts_with("r1 ") && l.contains(" REPLAYED "))
    });
    let _ = watch.kill();
    let _ = watch.wait();
    println!("attacks: replayed-status tried=1 held=1");
}

/// Item 13: 500 spoofed `offline` messages on the board's availability get `online` back at
/// most once a second, and the last retained value is the board's.
#[test]
fn a_flood_of_spoofed_offline_is_answered_once_a_second() {
    let Some((broker, board)) = broker_and_board(CASE, "a1", "") else {
        return;
    };
    let _agent = Agent::start(&board);
    let c = Client::connect(broker.port, &["npu-fleet/a1/availability"]);
    c.wait_for(T, "online", |m| m.payload == b"online");
    let spoofer = Client::connect(broker.port, &[]);
    let started = Instant::now();
    for _ in 0..500 {
        spoofer.publish("npu-fleet/a1/availability", b"offline", true);
    }
    c.wait_for(T, "the first spoofed value", |m| m.payload == b"offline");
    let window = Duration::from_secs(4);
    let mut online = 0;
    while started.elapsed() < window {
        online += c.drain().iter().filter(|m| m.payload == b"online").count();
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!((1..=6).contains(&online), "{online} online in {window:?}");
    let probe = Client::connect(broker.port, &["npu-fleet/a1/availability"]);
    probe.wait_for(T, "online retained", |m| m.payload == b"online");
    println!("attacks: availability-flood tried=500 held=500");
}
