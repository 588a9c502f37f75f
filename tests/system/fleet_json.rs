//! `fleet send --json` and `fleet capture --json` against a real agent on a real mosquitto: one
//! JSON object per lifecycle line, the board's identity judged, and the written bundle's size
//! and SHA-256 those of the file.

use super::operator::{keyed_board, npu_agent};
use crate::support::mqtt::*;
use serde_json::Value;
use std::time::Duration;

const CASE: &str = "own-rk3588-opi5plus-rknpu-0.9.8-healthy";

/// Every stdout line as JSON.
fn lines(out: &str) -> Vec<Value> {
    out.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l:?}\n{out}")))
        .collect()
}

#[test]
fn fleet_send_and_capture_print_json_lines() {
    if !require_tool("mosquitto") || !require_tool("sha256sum") {
        return;
    }
    let broker = Broker::start();
    let (board, _keys, key) = keyed_board(&broker, CASE, "b1", "");
    let agent = Agent::start(&board);
    let c = Client::connect(broker.port, &["npu-fleet/b1/status"]);
    c.wait_for(Duration::from_secs(15), "b1's status", |m| {
        !m.payload.is_empty()
    });
    let tmp = tempfile::tempdir().unwrap();
    let known = tmp.path().join("known_boards");
    let k = known.display().to_string();
    let env = [("NPU_AGENT_KNOWN_BOARDS", k.as_str())];
    let url = broker.url();

    let args = [
        "fleet", "send", "rescan", "--board", "b1", "--broker", &url, "--json",
    ];
    let (code, out, err) = npu_agent(&args, &env);
    assert_eq!(code, 0, "{out}{err}\n{}", agent.log_text());
    let l = lines(&out);
    assert_eq!(
        (l[0]["board"].as_str(), l[0]["status"].as_str()),
        (Some("b1"), Some("init"))
    );
    let cmd_id = l[0]["cmd_id"].as_str().unwrap();
    assert!(l.iter().all(|x| x["cmd_id"] == cmd_id), "{out}");
    let last = l.last().unwrap();
    assert_eq!(last["status"], "successful", "{out}");
    // The board's status came first in this run and set its key (recorded): its answer is
    // sealed by that key.
    assert_eq!(
        (last["identity"].as_str(), last["trusted"].as_bool()),
        (Some("signed"), Some(true))
    );
    assert!(std::fs::read_to_string(&known).unwrap().starts_with("b1 "));
    assert!(last["result"].is_object(), "{out}");

    let bundle = tmp.path().join("b1.tar.gz");
    let (code, out, err) = npu_agent(
        &[
            "fleet",
            "capture",
            "--board",
            "b1",
            "--broker",
            &url,
            "--key",
            key.to_str().unwrap(),
            "--out",
            bundle.to_str().unwrap(),
            "--json",
        ],
        &env,
    );
    assert_eq!(code, 0, "{out}{err}\n{}", agent.log_text());
    let l = lines(&out);
    let answer = l.iter().find(|x| x["status"] == "successful").expect(&out);
    assert_eq!(answer["identity"], "signed", "{out}");
    let wrote = l.last().unwrap();
    assert_eq!(wrote["file"].as_str(), bundle.to_str());
    let len = std::fs::metadata(&bundle).unwrap().len();
    assert_eq!(wrote["bytes"].as_u64(), Some(len));
    assert_eq!(answer["result"]["sha256"], wrote["sha256"], "{out}");
    let o = std::process::Command::new("sha256sum")
        .arg(&bundle)
        .output()
        .unwrap();
    let sum = String::from_utf8_lossy(&o.stdout);
    assert_eq!(sum.split_whitespace().next(), wrote["sha256"].as_str());
}
