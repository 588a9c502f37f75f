//! The operator config file (`fleet.toml` under `$XDG_CONFIG_HOME/npu-agent/`): with it the
//! fleet tools need no flags against a real mosquitto over mutual TLS, sign with its key, try
//! its broker list in turn and keep `known_boards` beside it; a bad file stops them with its line.

use super::operator::{npu_agent, readme_pki, tls_agent_config, tls_broker};
use crate::support::mqtt::*;
use serde_json::Value;
use std::path::Path;

const CASE: &str = "own-rk3588-opi5plus-rknpu-0.9.8-healthy";

/// A config directory `<xdg>/npu-agent` holding the guide's CA and client pair, a fresh
/// signing key and `fleet.toml` with `broker` (paths relative to the file).
fn config_dir(xdg: &Path, pki: &Path, broker: &str) -> std::path::PathBuf {
    let dir = xdg.join("npu-agent");
    std::fs::create_dir_all(&dir).unwrap();
    for f in ["ca.crt", "client.crt", "client.key"] {
        std::fs::copy(pki.join(f), dir.join(f)).unwrap();
    }
    let key = dir.join("op.key");
    let (code, _, err) = npu_agent(&["keygen", "--out", key.to_str().unwrap()], &[]);
    assert_eq!(code, 0, "{err}");
    std::fs::write(
        dir.join("fleet.toml"),
        format!(
            "broker = {broker}\nsigning_key = \"op.key\"\n\n[tls]\nca_file = \"ca.crt\"\n\
             cert_file = \"client.crt\"\nkey_file = \"client.key\"\n"
        ),
    )
    .unwrap();
    dir
}

#[test]
fn fleet_tools_need_no_flags_with_an_operator_config_file() {
    if !require_tool("mosquitto") || !require_tool("openssl") {
        return;
    }
    let pki = readme_pki();
    let (broker, tls_port) = tls_broker(pki.path(), "server.crt");
    let url = format!("mqtts://127.0.0.1:{tls_port}");
    let home = tempfile::tempdir().unwrap();
    let xdg = home.path().join("xdg");
    // First a node nobody listens on: the list is tried in turn.
    let dead = format!("mqtts://127.0.0.1:{}", free_port());
    let dir = config_dir(&xdg, pki.path(), &format!("[\"{dead}\", \"{url}\"]"));

    let board = Board::from_fixture(CASE, "b1", "");
    board.write(
        "/etc/npu-agent/op.key.pub",
        &std::fs::read_to_string(dir.join("op.key.pub")).unwrap(),
    );
    // Only signed commands: a `successful` rescan shows the file's signing key was used.
    let security =
        "\n[security]\ntrusted_keys = [\"/etc/npu-agent/op.key.pub\"]\nallow_unsigned = []\n";
    let cfg = tls_agent_config(&url, &board, pki.path(), true) + security;
    board.write("/etc/npu-agent/agent.toml", &cfg);
    let agent = Agent::start(&board);

    let h = home.path().display().to_string();
    let x = xdg.display().to_string();
    let env = [("HOME", h.as_str()), ("XDG_CONFIG_HOME", x.as_str())];
    let (code, out, err) = npu_agent(&["fleet", "watch", "--once", "--format", "json"], &env);
    assert_eq!(code, 0, "{out}{err}\n{}", agent.log_text());
    let v: Value = serde_json::from_str(&out).unwrap();
    let b1 = &v["boards"][0];
    assert_eq!(
        (b1["board"].as_str(), b1["identity"].as_str()),
        (Some("b1"), Some("new key")),
        "{out}"
    );
    let known =
        std::fs::read_to_string(dir.join("known_boards")).expect("known_boards beside fleet.toml");
    assert!(known.starts_with("b1 "), "{known}");

    let (code, out, err) = npu_agent(
        &["fleet", "send", "rescan", "--board", "b1", "--wait", "15"],
        &env,
    );
    assert_eq!(code, 0, "{out}{err}\n{}", agent.log_text());
    assert!(out.lines().last().unwrap().contains(" successful"), "{out}");
    // Another file (NPU_AGENT_FLEET_CONFIG) without the signing key: the rescan goes unsigned
    // and the board refuses it.
    let text = std::fs::read_to_string(dir.join("fleet.toml")).unwrap();
    let unsigned = dir.join("unsigned.toml");
    std::fs::write(&unsigned, text.replace("signing_key = \"op.key\"\n", "")).unwrap();
    let u = unsigned.display().to_string();
    let env_u = [env[0], env[1], ("NPU_AGENT_FLEET_CONFIG", u.as_str())];
    let (code, out, err) = npu_agent(
        &["fleet", "send", "rescan", "--board", "b1", "--wait", "15"],
        &env_u,
    );
    assert_eq!(code, 1, "{out}{err}");
    assert!(out.contains(" rejected"), "{out}");
    drop(broker);
}

#[test]
fn a_bad_operator_config_file_stops_the_tools_with_its_line() {
    let home = tempfile::tempdir().unwrap();
    let dir = home.path().join(".config/npu-agent");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("fleet.toml"),
        "broker = \"mqtt://127.0.0.1:1\"\n[auth]\nusername = \"ops\"\npassword = \"hunter2\"\n",
    )
    .unwrap();
    let h = home.path().display().to_string();
    let env = [("HOME", h.as_str()), ("XDG_CONFIG_HOME", "")];
    for args in [
        &["fleet", "watch", "--once"][..],
        &["fleet", "send", "rescan", "--all"],
    ] {
        let (code, out, err) = npu_agent(args, &env);
        assert_eq!(code, 2, "{args:?}: {out}{err}");
        assert!(err.contains("fleet.toml: line 4: unknown key"), "{err}");
        assert!(!err.contains("hunter2"), "{err}");
    }
    std::fs::remove_file(dir.join("fleet.toml")).unwrap();
    let (code, _, err) = npu_agent(&["fleet", "watch", "--once"], &env);
    assert_eq!(code, 2);
    assert!(
        err.contains("no broker: give --broker URL, or set broker ="),
        "{err}"
    );
}
