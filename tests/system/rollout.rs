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

fn rollout(broker: &Broker, waves: &str) -> (i32, String, String) {
    let home = tempfile::tempdir().unwrap();
    let home = home.path().to_str().unwrap().to_string();
    npu_agent(
        &[
            "fleet",
            "send",
            "rescan",
            "--all",
            "--waves",
            waves,
            "--broker",
            &broker.url(),
            "--wait",
            "30",
        ],
        &[("HOME", &home), ("XDG_CONFIG_HOME", &home)],
    )
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
    assert!(!out.contains("b2") && !out.contains("b3"), "{out}");
}
