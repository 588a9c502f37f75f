//! `fleet send --all --waves` against a real mosquitto and three real agents: the waves go out
//! in order and each waits for its answers; a wave with a board that rejects the command stops
//! the rollout, names that board and never sends the later waves (issue 39).

use crate::operator::npu_agent;
use crate::support::mqtt::*;
use std::time::Duration;

const CASE: &str = "own-rk3588-opi5plus-rknpu-0.9.8-healthy";
const T: Duration = Duration::from_secs(15);

/// Boards b1..b3 on one broker; b1's config refuses unsigned rescans when `b1_refuses`.
fn fleet(b1_refuses: bool) -> Option<(Broker, Vec<Board>, Vec<Agent>)> {
    if !require_tool("mosquitto") {
        return None;
    }
    let broker = Broker::start();
    let mut boards = Vec::new();
    for id in ["b1", "b2", "b3"] {
        let extra = if b1_refuses && id == "b1" {
            "[security]\nallow_unsigned = []\n"
        } else {
            ""
        };
        let b = Board::from_fixture(CASE, id, "");
        b.write(
            "/etc/npu-agent/agent.toml",
            &agent_config(&broker.url(), id, extra),
        );
        boards.push(b);
    }
    let agents: Vec<Agent> = boards.iter().map(Agent::start).collect();
    let c = Client::connect(broker.port, &["npu-fleet/+/status"]);
    for id in ["b1", "b2", "b3"] {
        let topic = format!("npu-fleet/{id}/status");
        c.wait_for(T, "every board's status", |m| {
            m.topic == topic && !m.payload.is_empty()
        });
    }
    Some((broker, boards, agents))
}

/// An operator's home whose `known_boards` holds every board online now: `fleet watch --once`
/// records the boards first seen (in the directory beside `fleet.toml`, which the operator has).
fn pinned_home(broker: &Broker) -> tempfile::TempDir {
    let home = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(home.path().join("npu-agent")).unwrap();
    let (code, out, err) = in_home(
        &home,
        &["fleet", "watch", "--once", "--broker", &broker.url()],
    );
    assert_eq!(code, 0, "{out}{err}");
    home
}

/// `npu-agent ARGS` run by the operator whose home is `home`.
fn in_home(home: &tempfile::TempDir, args: &[&str]) -> (i32, String, String) {
    let h = home.path().to_str().unwrap();
    npu_agent(args, &[("HOME", h), ("XDG_CONFIG_HOME", h)])
}

/// A rescan rolled out in `waves` from the home of `pinned`.
fn send_waves(broker: &Broker, pinned: &tempfile::TempDir, waves: &str) -> (i32, String, String) {
    let url = broker.url();
    in_home(
        pinned,
        &[
            "fleet", "send", "rescan", "--all", "--waves", waves, "--broker", &url, "--wait", "30",
        ],
    )
}

/// The operator pins the fleet's keys first, then rolls out from the same home.
fn rollout(broker: &Broker, waves: &str) -> (i32, String, String) {
    send_waves(broker, &pinned_home(broker), waves)
}

#[test]
fn a_rollout_goes_wave_by_wave_to_every_board() {
    let Some((broker, _boards, _agents)) = fleet(false) else {
        return;
    };
    let (code, out, err) = rollout(&broker, "10%,100%");
    assert_eq!(code, 0, "{out}{err}");
    let w1 = out.find("wave 1/2: 1 board(s): b1").expect(&out);
    let w2 = out.find("wave 2/2: 2 board(s): b2, b3").expect(&out);
    assert!(w1 < w2, "{out}");
    // Every board's answer is printed in its wave: b1's before wave 2 starts.
    let b1_ok = out
        .lines()
        .position(|l| l.contains("b1") && l.contains(" successful"))
        .expect(&out);
    let w2_line = out.lines().position(|l| l.starts_with("wave 2/2")).unwrap();
    assert!(b1_ok < w2_line, "{out}");
    for b in ["b2", "b3"] {
        assert!(
            out.lines()
                .any(|l| l.contains(b) && l.contains(" successful")),
            "{b}: {out}"
        );
    }
    assert!(
        out.contains("rollout: 3 board(s) in 2 wave(s), all successful"),
        "{out}"
    );
}

#[test]
fn a_rollout_stops_at_the_first_wave_with_a_failure() {
    let Some((broker, _boards, _agents)) = fleet(true) else {
        return;
    };
    let (code, out, err) = rollout(&broker, "10%,100%");
    assert_eq!(code, 1, "{out}{err}");
    assert!(out.contains("wave 1/2: 1 board(s): b1"), "{out}");
    assert!(
        err.contains(
            "wave 1/2 failed on b1; the rollout stopped (2 board(s) in later waves not sent)"
        ),
        "{err}"
    );
    assert!(!out.contains("wave 2/2"), "{out}");
    // b2 and b3 were never sent the command (no lifecycle line of theirs).
    // (Line by line: a command id's hex may hold "b3".)
    assert!(
        !out.lines()
            .any(|l| l.starts_with("b2 ") || l.starts_with("b3 ")),
        "{out}"
    );
}

/// Someone with broker access announces boards online and would answer for them: a board whose
/// key the operator has not pinned never takes part (it would fill the canary wave, sorted
/// first), and is named.
#[test]
fn a_board_whose_key_is_not_pinned_is_left_out_of_the_rollout() {
    let Some((broker, _boards, _agents)) = fleet(false) else {
        return;
    };
    let home = pinned_home(&broker);
    // Announced after the operator pinned the fleet: a status sealed by a key of its own.
    let fake = Client::connect(broker.port, &["npu-fleet/0fake/cmd/#"]);
    let key = npu_agent::mqtt::ed25519::SigningKey::from_bytes(&[3; 32]);
    let status = br#"{"health":"ok","board_id":"0fake","time":"2099-01-01T00:00:00Z"}"#;
    let topic = "npu-fleet/0fake/status";
    let sealed = npu_agent::mqtt::board_sig::seal(&key, topic, status.to_vec());
    fake.publish(topic, &sealed, true);
    fake.publish("npu-fleet/0fake/availability", b"online", true);
    let (code, out, err) = send_waves(&broker, &home, "10%,100%");
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("wave 1/2: 1 board(s): b1"), "{out}");
    assert!(!out.contains("0fake"), "{out}");
    assert!(
        err.contains("1 online board(s) left out of the rollout") && err.contains("0fake"),
        "{err}"
    );
    assert!(
        fake.drain().iter().all(|m| !m.topic.contains("/cmd/")),
        "0fake was sent a command"
    );
}
