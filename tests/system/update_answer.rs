//! `update` over a real mosquitto with a real agent: the agent that comes back after an update
//! answers the pending command once connected (the new version `successful` with its version,
//! the old one after a rollback `failed` with the reason) and removes the pending record; an
//! unsigned `update` is rejected (issue 39).

use crate::support::mqtt::*;
use serde_json::json;
use std::time::Duration;

const CASE: &str = "own-rk3588-opi5plus-rknpu-0.9.8-healthy";
const T: Duration = Duration::from_secs(15);
const PENDING: &str = "/var/lib/npu-agent/update-pending.json";

/// Board b1 with the agent's package at `installed` and a pending update 0.1.0-1 -> 0.2.0-1
/// (command `cmd_id`) whose deadline is `deadline_in_s` from now.
fn board_after_update(
    installed: &str,
    cmd_id: &str,
    deadline_in_s: i64,
) -> Option<(Broker, Board)> {
    let (broker, board) = broker_and_board(CASE, "b1", "")?;
    board.write(
        "/var/lib/dpkg/status",
        &format!("Package: npu-agent\nStatus: install ok installed\nVersion: {installed}\nArchitecture: arm64\n\n"),
    );
    let pending = json!({"old": "0.1.0-1", "new": "0.2.0-1", "cmd_id": cmd_id,
        "deadline_unix_s": now_s() + deadline_in_s});
    board.write(PENDING, &pending.to_string());
    Some((broker, board))
}

fn final_answer(c: &Client) -> serde_json::Value {
    c.wait_for(T, "the update's final answer", |m| {
        !m.payload.is_empty()
            && matches!(m.json()["status"].as_str(), Some("successful" | "failed"))
    })
    .json()
}

#[test]
fn the_new_agent_answers_the_pending_update_successful_with_its_version() {
    let Some((broker, board)) = board_after_update("0.2.0-1", "u1", 300) else {
        return;
    };
    let c = Client::connect(broker.port, &["npu-fleet/b1/cmd/update/u1"]);
    let _agent = Agent::start(&board);
    let a = final_answer(&c);
    assert_eq!(a["status"], "successful", "{a}");
    assert_eq!(
        a["reason"],
        format!(
            "updated from 0.1.0-1 to 0.2.0-1; agent {} is running",
            env!("CARGO_PKG_VERSION")
        ),
        "{a}"
    );
    assert_eq!(
        a["result"]["agent_version"],
        env!("CARGO_PKG_VERSION"),
        "{a}"
    );
    assert_eq!(board.read(PENDING), None, "the pending record stays");
}

#[test]
fn the_old_agent_after_a_rollback_answers_failed_with_the_reason() {
    let Some((broker, board)) = board_after_update("0.1.0-1", "u2", -1) else {
        return;
    };
    let c = Client::connect(broker.port, &["npu-fleet/b1/cmd/update/u2"]);
    let _agent = Agent::start(&board);
    let a = final_answer(&c);
    assert_eq!(a["status"], "failed", "{a}");
    assert_eq!(
        a["reason"],
        "rolled back to 0.1.0-1: 0.2.0-1 did not come back healthy and connected within the deadline",
        "{a}"
    );
    assert_eq!(board.read(PENDING), None);
}

#[test]
fn an_unsigned_update_is_rejected() {
    let Some((broker, board)) = broker_and_board(CASE, "b1", "") else {
        return;
    };
    let _agent = Agent::start(&board);
    let c = Client::connect(
        broker.port,
        &["npu-fleet/b1/status", "npu-fleet/b1/cmd/update/u3"],
    );
    c.wait_for(T, "a status", |m| {
        m.topic.ends_with("/status") && !m.payload.is_empty()
    });
    let init = init_payload(
        "b1",
        "update",
        "u3",
        json!({"version": "9.9-1"}),
        now_s(),
        120,
        None,
    );
    c.publish("npu-fleet/b1/cmd/update/u3", &init, true);
    let a = c
        .wait_for(T, "the rejection", |m| {
            m.topic.ends_with("/u3") && m.json()["status"] == "rejected"
        })
        .json();
    let reason = a["reason"].as_str().unwrap_or("");
    assert!(reason.contains("sign"), "{a}");
    assert_eq!(board.read(PENDING), None);
}
