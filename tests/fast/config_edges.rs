//! Config values at the edges of their types and environments in other encodings: a clear
//! config error (exit 2) or a normal run, never a panic (exit 101) and never the value echoed.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::process::{Command, Output};

fn agent(args: &[&str], env: &[(&OsStr, &OsStr)]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_npu-agent"));
    c.args(args);
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("run npu-agent")
}

fn fixture() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/boards/own-pi5-hailo8-4.23-healthy/root")
        .display()
        .to_string()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn an_unrelated_variable_in_another_encoding_changes_nothing() {
    let root = tempfile::tempdir().unwrap();
    let r = root.path().to_str().unwrap();
    let latin1 = (
        OsStr::new("SOME_LATIN1_NAME"),
        OsStr::from_bytes(b"caf\xe9"),
    );
    for args in [
        vec!["run", "--print-config", "--root", r],
        vec!["cma", "show", "--root", &fixture()],
        vec!["compact", "--dry-run", "--root", r],
    ] {
        let o = agent(&args, &[latin1]);
        let code = o.status.code();
        assert!(
            matches!(code, Some(0..=2)),
            "{args:?}: {code:?} {}",
            stderr(&o)
        );
        assert!(!stderr(&o).contains("panicked"), "{args:?}: {}", stderr(&o));
    }
    let plain = agent(&["run", "--print-config", "--root", r], &[latin1]);
    assert_eq!(plain.status.code(), Some(0), "{}", stderr(&plain));
}

#[test]
fn one_of_ours_in_another_encoding_is_a_config_error_without_its_bytes() {
    let root = tempfile::tempdir().unwrap();
    let bad = (
        OsStr::new("NPU_AGENT_MQTT_URL"),
        OsStr::from_bytes(b"mqtt://user:s3cr\xe9t@broker"),
    );
    let o = agent(
        &[
            "run",
            "--print-config",
            "--root",
            root.path().to_str().unwrap(),
        ],
        &[bad],
    );
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(
        e.contains("NPU_AGENT_MQTT_URL") && e.contains("not UTF-8"),
        "{e}"
    );
    assert!(!e.contains("s3cr"), "{e}");
}

#[test]
fn durations_at_the_edge_of_u64_are_refused_by_name() {
    let root = tempfile::tempdir().unwrap();
    let r = root.path().to_str().unwrap();
    for (var, key, value) in [
        (
            "NPU_AGENT_ACTIONS_REBOOT_TIMEOUT_S",
            "actions.reboot_timeout_s",
            "9223372036854775807",
        ),
        (
            "NPU_AGENT_REPORT_INTERVAL_S",
            "report.interval_s",
            "9223372036854775807",
        ),
        (
            "NPU_AGENT_ACTIONS_COMPACT_COOLDOWN_S",
            "actions.compact_cooldown_s",
            "604801",
        ),
        (
            "NPU_AGENT_ACTIONS_REBOOT_TIMEOUT_S",
            "actions.reboot_timeout_s",
            "0",
        ),
    ] {
        let o = agent(
            &["run", "--print-config", "--root", r],
            &[(OsStr::new(var), OsStr::new(value))],
        );
        assert_eq!(o.status.code(), Some(2), "{var}={value}: {}", stderr(&o));
        assert!(
            stderr(&o).contains(&format!("{key} = {value} is outside")),
            "{}",
            stderr(&o)
        );
    }
    let ok = agent(
        &["run", "--print-config", "--root", r],
        &[(
            OsStr::new("NPU_AGENT_ACTIONS_REBOOT_TIMEOUT_S"),
            OsStr::new("86400"),
        )],
    );
    assert_eq!(ok.status.code(), Some(0), "{}", stderr(&ok));
}

#[test]
fn the_fleet_wide_board_id_is_reserved_in_any_case() {
    let root = tempfile::tempdir().unwrap();
    let r = root.path().to_str().unwrap();
    for id in ["all", "ALL", " All "] {
        let o = agent(
            &["run", "--print-config", "--root", r],
            &[(OsStr::new("NPU_AGENT_BOARD_ID"), OsStr::new(id))],
        );
        assert_eq!(o.status.code(), Some(2), "{id:?}: {}", stderr(&o));
        assert!(stderr(&o).contains("is reserved"), "{}", stderr(&o));
    }
    let o = agent(
        &["run", "--print-config", "--root", r],
        &[(OsStr::new("NPU_AGENT_BOARD_ID"), OsStr::new("allwinner-1"))],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
}

#[test]
fn a_topic_root_with_a_nul_is_a_config_error() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("agent.toml");
    std::fs::write(&file, "[mqtt]\ntopic_root = \"fleet\\u0000x\"\n").unwrap();
    let o = agent(
        &[
            "run",
            "--print-config",
            "--root",
            dir.path().to_str().unwrap(),
            "--config",
            file.to_str().unwrap(),
        ],
        &[],
    );
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("mqtt.topic_root contains a control character"),
        "{}",
        stderr(&o)
    );
}
