//! `fleet capture` against a real agent on a real mosquitto: the signed command fetches the
//! board's support bundle in chunks, the file verifies and `check --root` on it gives the board's
//! verdicts; an unsigned or too-large capture writes nothing; the board clears its chunks once
//! the requester clears the command.

use crate::support::mqtt::*;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

const T: Duration = Duration::from_secs(20);

fn npu_agent(args: &[&str]) -> (i32, String, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_npu-agent"))
        .args(args)
        .output()
        .expect("run npu-agent");
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// Every check's most severe verdict in `check --root DIR --format json`.
fn verdicts(root: &Path) -> BTreeMap<String, String> {
    let (_, out, err) = npu_agent(&[
        "check",
        "--format",
        "json",
        "--root",
        root.to_str().unwrap(),
    ]);
    let v: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}{err}"));
    let rank = |s: &str| {
        ["pass", "skip", "warn", "fail"]
            .iter()
            .position(|x| *x == s)
    };
    let mut m: BTreeMap<String, String> = BTreeMap::new();
    for f in v["findings"].as_array().unwrap() {
        let (id, st) = (f["id"].as_str().unwrap(), f["status"].as_str().unwrap());
        let worse = m.get(id).is_none_or(|old| rank(st) > rank(old));
        if worse {
            m.insert(id.to_string(), st.to_string());
        }
    }
    m
}

#[test]
fn a_signed_fleet_capture_fetches_a_bundle_that_checks_as_the_board() {
    if !require_tool("mosquitto") || !require_tool("tar") {
        return;
    }
    let broker = Broker::start();
    let (board, _keys, key) = crate::operator::keyed_board(
        &broker,
        "own-pi5-hailo8-16k-pages-max-desc-page-size",
        "c1",
        "\n[actions]\nrate_limit_overrides_s = { capture = 0 }\n",
    );
    let _agent = Agent::start(&board);
    let chunks = Client::connect(
        broker.port,
        &["npu-fleet/c1/status", "npu-fleet/c1/capture/#"],
    );
    chunks.wait_for(T, "a status", |m| m.topic.ends_with("/status"));
    let url = broker.url();
    let out_dir = tempfile::tempdir().unwrap();
    let file = out_dir.path().join("c1.tar.gz");
    let capture = |extra: &[&str]| {
        let mut a = vec![
            "fleet", "capture", "--board", "c1", "--broker", &url, "--out",
        ];
        a.push(file.to_str().unwrap());
        a.extend(["--wait", "30"]);
        a.extend(extra);
        npu_agent(&a)
    };

    let (code, out, err) = capture(&[]);
    assert_eq!(code, 1, "{out}{err}");
    assert!(out.contains("rejected: unsigned capture refused"), "{out}");
    assert!(err.contains("bundle not written"), "{err}");
    assert!(!file.exists());

    let signed = ["--key", key.to_str().unwrap()];
    let (code, out, err) = capture(&[&signed[..], &["--max-bytes", "100"]].concat());
    assert_eq!(code, 1, "{out}{err}");
    assert!(out.contains("over max_bytes (100)"), "{out}");
    assert!(!file.exists());

    let (code, out, err) = capture(&signed);
    assert_eq!(code, 0, "{out}{err}");
    let bytes = std::fs::read(&file).unwrap();
    let sha = npu_agent::mqtt::chunks::sha256_hex(&bytes);
    assert!(
        out.contains(&format!("{} bytes, sha256 {sha}", bytes.len())),
        "{out}"
    );
    // The board signed the size and hash the file has.
    let last = out
        .lines()
        .rev()
        .find(|l| l.contains(" successful"))
        .unwrap();
    assert!(last.contains(&format!("\"sha256\":\"{sha}\"")), "{last}");

    // Unpacked, the bundle gives the board's own verdicts.
    let unpacked = tempfile::tempdir().unwrap();
    let st = Command::new("tar")
        .args(["-xzf", file.to_str().unwrap(), "-C"])
        .arg(unpacked.path())
        .status()
        .unwrap();
    assert!(st.success());
    let board_verdicts = verdicts(board.root());
    assert!(
        board_verdicts.values().any(|s| s == "fail"),
        "{board_verdicts:?}"
    );
    assert_eq!(verdicts(unpacked.path()), board_verdicts);

    // fleet capture cleared its command: the board clears every chunk it published.
    let seen = chunks.drain();
    let published: Vec<&str> = seen
        .iter()
        .filter(|m| m.topic.contains("/capture/") && !m.payload.is_empty())
        .map(|m| m.topic.as_str())
        .collect();
    assert!(!published.is_empty(), "no chunk was published");
    for t in &published {
        let cleared = |m: &Msg| m.topic == *t && m.payload.is_empty();
        if !seen.iter().any(cleared) {
            chunks.wait_for(T, "the chunk cleared", cleared);
        }
    }

    // An existing file is never replaced without --force.
    let (code, _, err) = capture(&signed);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("file exists"), "{err}");
    assert_eq!(std::fs::read(&file).unwrap(), bytes);
}
