//! Issue 26 item 5: a board speaks with its own key. Its statuses and answers are sealed with
//! an Ed25519 key made on its first start; `fleet watch` and `fleet send` hold them to the key
//! they know for the board (recorded on first use), and say when a status or an answer is
//! unsigned or sealed by another key; a spoofed retained `offline` is put back to `online`.

use crate::support::mqtt::*;
use std::time::Duration;

const CASE: &str = "own-rk3588-opi5plus-rknpu-0.9.8-healthy";
const T: Duration = Duration::from_secs(15);

fn cli(args: &[&str], known: &std::path::Path) -> (i32, String, String) {
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_npu-agent"))
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

/// The IDENTITY cell of `board`'s row in `fleet watch --once`.
fn identity_of(url: &str, board: &str, known: &std::path::Path) -> String {
    let (code, out, err) = cli(&["fleet", "watch", "--once", "--broker", url], known);
    assert_eq!(code, 0, "{out}{err}");
    let row = out
        .lines()
        .find(|l| l.starts_with(&format!("{board} ")))
        .unwrap_or_else(|| panic!("no row for {board}: {out}"));
    let cells: Vec<&str> = row.split_whitespace().collect();
    // BOARD LINK IDENTITY...: "new key" and "KEY CHANGED" are two words.
    match cells[2] {
        "new" | "KEY" => format!("{} {}", cells[2], cells[3]),
        one => one.to_string(),
    }
}

#[test]
fn statuses_and_answers_are_the_boards_own_and_spoofs_are_named() {
    let Some((broker, board)) = broker_and_board(CASE, "b1", "") else {
        return;
    };
    let agent = Agent::start(&board);
    let c = Client::connect(
        broker.port,
        &["npu-fleet/b1/status", "npu-fleet/b1/availability"],
    );
    let s = c.wait_for(T, "a status", |m| {
        m.topic.ends_with("/status") && !m.payload.is_empty()
    });
    // The key on disk is the one in the status, and the seal verifies.
    let key = npu_agent::mqtt::ed25519::SigningKey::from_pkcs8_pem(
        &board.read("/var/lib/npu-agent/board_identity.key").unwrap(),
    )
    .unwrap();
    let own = npu_agent::mqtt::board_sig::key_text(&key.verifying_key());
    assert_eq!(s.json()["board_key"], own.as_str(), "{}", s.text());
    assert_eq!(
        npu_agent::mqtt::board_sig::open(&s.topic, &s.payload),
        npu_agent::mqtt::board_sig::Seal::By(own.clone())
    );
    let dir = tempfile::tempdir().unwrap();
    let known = dir.path().join("known_boards");
    let url = broker.url();
    // First sight: recorded; then held to it.
    assert_eq!(identity_of(&url, "b1", &known), "new key");
    let recorded = std::fs::read_to_string(&known).unwrap();
    assert_eq!(recorded, format!("b1 {own}\n"));
    assert_eq!(identity_of(&url, "b1", &known), "signed");
    // A command's answer is the board's: exit 0.
    let (code, out, err) = cli(
        &[
            "fleet", "send", "rescan", "--board", "b1", "--broker", &url, "--wait", "15",
        ],
        &known,
    );
    assert_eq!(code, 0, "{out}{err}");
    assert!(!out.contains("not taken"), "{out}");
    // A retained "offline" while the board is connected: it says online again.
    c.drain();
    // Twice in quick succession: each one is answered, so the last retained value is online.
    c.publish("npu-fleet/b1/availability", b"offline", true);
    c.publish("npu-fleet/b1/availability", b"offline", true);
    c.wait_for(T, "online again", |m| {
        m.topic.ends_with("/availability") && m.payload == b"online"
    });
    let probe = Client::connect(broker.port, &["npu-fleet/b1/availability"]);
    // The second one is answered within a second (at most one `online` a second).
    let kept = probe.wait_for(T, "online retained", |m| {
        m.topic.ends_with("/availability") && m.payload == b"online"
    });
    assert_eq!(kept.payload, b"online");
    // The board stops (its statuses would replace what follows every interval_s), and someone
    // with broker access publishes a status for b1: named, not shown as the board's.
    drop(agent);
    let spoofed = br#"{"health":"ok","profile":"rk3588-rknpu","time":"2026-12-04T00:00:00Z"}"#;
    c.publish("npu-fleet/b1/status", spoofed, true);
    assert_eq!(identity_of(&url, "b1", &known), "UNSIGNED");
    let other = npu_agent::mqtt::ed25519::SigningKey::from_bytes(&[9; 32]);
    let resealed =
        npu_agent::mqtt::board_sig::seal(&other, "npu-fleet/b1/status", spoofed.to_vec());
    c.publish("npu-fleet/b1/status", &resealed, true);
    assert_eq!(identity_of(&url, "b1", &known), "KEY CHANGED");
}

/// A "board" that is a test client answering `successful` itself: `fleet send` does not exit 0
/// on an answer no board key sealed.
#[test]
fn an_answer_from_a_fake_board_fails_the_send() {
    if !require_tool("mosquitto") {
        return;
    }
    let broker = Broker::start();
    let fake = Client::connect(broker.port, &["npu-fleet/fake/cmd/#"]);
    fake.publish("npu-fleet/fake/availability", b"online", true);
    let dir = tempfile::tempdir().unwrap();
    let known = dir.path().join("known_boards");
    let url = broker.url();
    let sender = std::thread::spawn(move || {
        cli(
            &[
                "fleet", "send", "rescan", "--board", "fake", "--broker", &url, "--wait", "15",
            ],
            &known,
        )
    });
    let init = fake.wait_for(T, "the init", |m| {
        m.topic.contains("/cmd/rescan/") && !m.payload.is_empty()
    });
    let answer = format!(
        r#"{{"status":"successful","board":"fake","action":"rescan","cmd_id":"{}","result":{{}}}}"#,
        init.topic.rsplit('/').next().unwrap()
    );
    fake.publish(&init.topic, answer.as_bytes(), true);
    let (code, out, err) = sender.join().unwrap();
    assert_eq!(code, 1, "{out}{err}");
    assert!(
        out.contains("successful") && out.contains("[UNSIGNED: not taken as the board's answer]"),
        "{out}"
    );
}

/// Without a known-boards file to remember keys, the board's own retained status sets the key
/// its answers are held to: an answer sealed by another key for a board whose status is known
/// fails the send; and `--all` fails while an online board has not answered, whatever a new
/// board answered.
#[test]
fn an_answer_sealed_by_another_key_than_the_boards_status_fails_the_send() {
    let Some((broker, board)) = broker_and_board(CASE, "b1", "") else {
        return;
    };
    let mut agent = Agent::start(&board);
    let c = Client::connect(broker.port, &["npu-fleet/b1/status"]);
    c.wait_for(T, "a status", |m| !m.payload.is_empty());
    // The board stops; its sealed status stays retained, and so does its "online" (killed:
    // the last will says offline, so put online back as a node that died would leave it).
    agent.kill();
    let fake = Client::connect(broker.port, &["npu-fleet/+/cmd/#"]);
    fake.publish("npu-fleet/b1/availability", b"online", true);
    fake.publish("npu-fleet/zz/availability", b"online", true);
    let dir = tempfile::tempdir().unwrap();
    let known = dir.path().join("missing-dir/known_boards");
    let other = npu_agent::mqtt::ed25519::SigningKey::from_bytes(&[9; 32]);
    for (target, answerer) in [("b1", "b1"), ("all", "zz")] {
        let url = broker.url();
        let known = known.clone();
        let sender = std::thread::spawn(move || {
            let to = if target == "all" {
                vec!["--all"]
            } else {
                vec!["--board", target]
            };
            let mut args = vec!["fleet", "send", "rescan", "--broker", &url, "--wait", "6"];
            args.extend(to);
            cli(&args, &known)
        });
        let init = fake.wait_for(T, "the init", |m| {
            m.topic.contains("/cmd/rescan/") && m.json()["status"] == "init"
        });
        let id = init.topic.rsplit('/').next().unwrap().to_string();
        let topic = format!("npu-fleet/{answerer}/cmd/rescan/{id}");
        let answer = format!(
            r#"{{"status":"successful","board":"{answerer}","action":"rescan","cmd_id":"{id}","result":{{}}}}"#
        );
        let sealed = npu_agent::mqtt::board_sig::seal(&other, &topic, answer.into_bytes());
        fake.publish(&topic, &sealed, true);
        let (code, out, err) = sender.join().unwrap();
        assert_eq!(code, 1, "{target}: {out}{err}");
        if target == "b1" {
            assert!(
                out.contains("[KEY CHANGED: not taken as the board's answer]"),
                "{out}"
            );
        }
    }
}
