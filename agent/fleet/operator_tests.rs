use super::*;
use std::collections::HashMap;

/// A home directory with `fleet.toml` holding `text` under `.config/npu-agent/`.
fn home_with(text: &[u8]) -> tempfile::TempDir {
    let home = tempfile::tempdir().unwrap();
    let dir = home.path().join(".config/npu-agent");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("fleet.toml"), text).unwrap();
    home
}

/// Resolves `flags` with only the variables in `vars` (and `HOME` = `home`).
fn resolve(home: &Path, vars: &[(&str, &str)], flags: OperatorFlags) -> Result<Operator, String> {
    let mut env: HashMap<String, String> = vars
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    env.insert("HOME".into(), home.display().to_string());
    Operator::resolve_with(flags, &|n| env.get(n).cloned())
}

const FULL: &str = r#"
broker = ["mqtts://a.example:8883", "mqtts://b.example:8883"]
topic_root = "plant-7"
signing_key = "operator.key"
protocol = 5

[tls]
ca_file = "/etc/ssl/fleet-ca.pem"
cert_file = "ops.crt"
key_file = "ops.key"

[auth]
username = "ops"
password_file = "broker.pass"
"#;

#[test]
fn a_full_file_gives_every_setting_with_paths_beside_it() {
    let home = home_with(FULL.as_bytes());
    let dir = home.path().join(".config/npu-agent");
    let op = resolve(home.path(), &[], OperatorFlags::default()).unwrap();
    assert_eq!(op.broker, "mqtts://a.example:8883,mqtts://b.example:8883");
    assert_eq!(op.topic_root, "plant-7");
    assert_eq!(op.signing_key, Some(dir.join("operator.key")));
    assert_eq!(op.ca_file, Some(PathBuf::from("/etc/ssl/fleet-ca.pem")));
    assert_eq!(op.cert_file, Some(dir.join("ops.crt")));
    assert_eq!(op.key_file, Some(dir.join("ops.key")));
    assert_eq!(op.username.as_deref(), Some("ops"));
    assert_eq!(op.password_file, Some(dir.join("broker.pass")));
    assert_eq!(op.protocol.as_str(), "5");
    assert_eq!(op.known_boards, Some(dir.join("known_boards")));
    assert_eq!(op.config_file, Some(dir.join("fleet.toml")));
    assert_eq!(
        op.secrets_set(),
        ["username", "password_file", "TLS key_file"]
    );
}

#[test]
fn flags_beat_variables_and_variables_beat_the_file() {
    let home = home_with(FULL.as_bytes());
    let flags = OperatorFlags {
        broker: Some("mqtt://127.0.0.1:1883".into()),
        topic_root: Some("lab".into()),
        key: Some(PathBuf::from("/k/other.key")),
    };
    let vars = [
        ("NPU_AGENT_MQTT_USERNAME", "env-user"),
        ("NPU_AGENT_MQTT_PROTOCOL", "3.1.1"),
        ("NPU_AGENT_MQTT_CA_FILE", "/env/ca.pem"),
        ("NPU_AGENT_KNOWN_BOARDS", "/env/known"),
    ];
    let op = resolve(home.path(), &vars, flags).unwrap();
    assert_eq!(op.broker, "mqtt://127.0.0.1:1883");
    assert_eq!(op.topic_root, "lab");
    assert_eq!(op.signing_key, Some(PathBuf::from("/k/other.key")));
    assert_eq!(op.username.as_deref(), Some("env-user"));
    assert_eq!(op.protocol.as_str(), "3.1.1");
    assert_eq!(op.ca_file, Some(PathBuf::from("/env/ca.pem")));
    assert_eq!(op.known_boards, Some(PathBuf::from("/env/known")));
}

#[test]
fn without_a_file_the_broker_flag_is_enough_and_its_absence_is_named() {
    let home = tempfile::tempdir().unwrap();
    let op = resolve(
        home.path(),
        &[],
        OperatorFlags {
            broker: Some("mqtt://h".into()),
            ..Default::default()
        },
    )
    .unwrap();
    assert_eq!(
        (op.topic_root.as_str(), op.protocol.as_str()),
        ("npu-fleet", "auto")
    );
    assert_eq!(op.config_file, None);
    assert_eq!(
        op.known_boards,
        Some(home.path().join(".config/npu-agent/known_boards"))
    );
    let e = resolve(home.path(), &[], OperatorFlags::default()).unwrap_err();
    assert!(
        e.starts_with("no broker: give --broker URL, or set broker ="),
        "{e}"
    );
    assert!(e.contains(".config/npu-agent/fleet.toml"), "{e}");
}

#[test]
fn xdg_config_home_and_the_override_variable_move_the_file() {
    let home = tempfile::tempdir().unwrap();
    let xdg = home.path().join("xdg");
    std::fs::create_dir_all(xdg.join("npu-agent")).unwrap();
    std::fs::write(xdg.join("npu-agent/fleet.toml"), "broker = \"mqtt://x\"\n").unwrap();
    let x = xdg.display().to_string();
    let op = resolve(
        home.path(),
        &[("XDG_CONFIG_HOME", &x)],
        OperatorFlags::default(),
    )
    .unwrap();
    assert_eq!(op.broker, "mqtt://x");
    assert_eq!(op.known_boards, Some(xdg.join("npu-agent/known_boards")));
    // A relative XDG_CONFIG_HOME is ignored (the XDG spec): back to ~/.config, which is empty.
    let e = resolve(
        home.path(),
        &[("XDG_CONFIG_HOME", "rel")],
        OperatorFlags::default(),
    );
    assert!(e.unwrap_err().starts_with("no broker"));
    let other = home.path().join("elsewhere.toml");
    std::fs::write(&other, "broker = \"mqtt://o\"\nknown_boards = \"keys\"\n").unwrap();
    let o = other.display().to_string();
    let op = resolve(
        home.path(),
        &[("NPU_AGENT_FLEET_CONFIG", &o)],
        OperatorFlags::default(),
    )
    .unwrap();
    assert_eq!(op.broker, "mqtt://o");
    assert_eq!(op.known_boards, Some(home.path().join("keys")));
}

#[test]
fn bad_files_are_refused_with_their_line_and_no_value_echoed() {
    let cases: &[(&[u8], &str)] = &[
        (
            b"broker = \"mqtt://h\"\npasword_file = \"x\"\n",
            "line 2: unknown key",
        ),
        (
            b"broker = \"mqtt://h\"\n[auth]\npassword = \"hunter2\"\n",
            "line 3: unknown key",
        ),
        (b"broker = 42\n", "line 1:"),
        (b"broker = \"mqtt://h\"\ntopic_root = \"\xff\"\n", "line 2"),
        (b"broker = \"mqtt://h\n", "line 1:"),
        (
            b"broker = \"mqtt://h\"\ntopic_root = \"a/#\"\n",
            "topic_root: an MQTT topic root may not hold",
        ),
        (
            b"broker = \"mqtt://h\"\ntopic_root = \"fleet/\"\n",
            "topic_root: a topic root is not empty",
        ),
        (
            b"broker = \"mqtt://h\"\nprotocol = \"4\"\n",
            "expected one of auto, 5, 3.1.1",
        ),
    ];
    for (text, want) in cases {
        let home = home_with(text);
        let e = resolve(home.path(), &[], OperatorFlags::default()).unwrap_err();
        assert!(e.contains(want), "{:?}: {e}", String::from_utf8_lossy(text));
        assert!(!e.contains("hunter2"), "{e}");
    }
}

#[test]
fn an_unreadable_file_is_an_error_not_an_empty_config() {
    let home = tempfile::tempdir().unwrap();
    // A directory where the file should be: it exists but cannot be read as one.
    std::fs::create_dir_all(home.path().join(".config/npu-agent/fleet.toml")).unwrap();
    let e = resolve(home.path(), &[], OperatorFlags::default()).unwrap_err();
    assert!(e.contains("fleet.toml"), "{e}");
    assert!(!e.starts_with("no broker"), "{e}");
}

#[test]
fn serve_defaults_come_from_the_serve_table_with_paths_beside_the_file() {
    let home = home_with(
        b"broker = \"mqtt://h\"\n[serve]\nlisten = \"127.0.0.1:19465\"\nstate_dir = \"fleet-state\"\nretention_days = 30\nmax_unsealed_boards = 50\nhistory_rows_per_board = 700\n",
    );
    let dir = home.path().join(".config/npu-agent");
    let op = resolve(home.path(), &[], OperatorFlags::default()).unwrap();
    assert_eq!(op.serve.listen, Some("127.0.0.1:19465".parse().unwrap()));
    assert_eq!(op.serve.state_dir, Some(dir.join("fleet-state")));
    assert_eq!(op.serve.retention_days, Some(30));
    assert_eq!(op.serve.max_unsealed_boards, Some(50));
    assert_eq!(op.serve.history_rows_per_board, Some(700));
    let bad = home_with(b"broker = \"mqtt://h\"\n[serve]\nlisten = \"0.0.0.0\"\n");
    let e = resolve(bad.path(), &[], OperatorFlags::default()).unwrap_err();
    assert!(e.contains("line 3"), "{e}");
}

/// The flag-only settings of `fleet serve` as `[serve]` keys (a systemd unit's known_boards
/// starts empty: `accept_new_boards` lets a first start take the whole fleet).
#[test]
fn serve_takes_accept_new_boards_max_boards_metrics_boards_and_stale_after() {
    let home = home_with(
        b"broker = \"mqtt://h\"\n[serve]\naccept_new_boards = 5000\nmax_boards = 300\nmetrics_boards = \"failing\"\nstale_after = 120\n",
    );
    let op = resolve(home.path(), &[], OperatorFlags::default()).unwrap();
    assert_eq!(op.serve.accept_new_boards, Some(5000));
    assert_eq!(op.serve.max_boards, Some(300));
    assert_eq!(op.serve.metrics_boards, Some(MetricsBoards::Failing));
    assert_eq!(op.serve.stale_after, Some(120));
    let bad = home_with(b"broker = \"mqtt://h\"\n[serve]\nmetrics_boards = \"some\"\n");
    let e = resolve(bad.path(), &[], OperatorFlags::default()).unwrap_err();
    assert!(e.contains("line 3"), "{e}");
}
