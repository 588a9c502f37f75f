//! Issue 37 item 12: every configuration TOML the agent reads is strict UTF-8. A byte that is
//! not UTF-8 (a GBK or Latin-1 editor's save) is an error naming the file, the line, the byte
//! and its column, never a value silently read with U+FFFD in it.

use std::path::Path;
use std::process::{Command, Output};

fn agent(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_npu-agent"))
        .args(args)
        .output()
        .expect("run npu-agent")
}

fn write(root: &Path, rel: &str, bytes: &[u8]) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, bytes).unwrap();
}

/// A config whose third line holds a Latin-1 byte at column 7 inside a `disabled` value.
const BAD: &[u8] = b"[actions]\nallow_reboot = false\nx = [\"\xff\"]\n";
const BAD_DISABLED: &[u8] =
    b"[actions]\nallow_reboot = false\ndisabled = [\"set_cma\", \"reb\xe9oot\"]\n";

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn a_main_file_or_drop_in_with_a_non_utf8_byte_is_refused_with_line_byte_and_column() {
    for (rel, bytes, line, col, byte) in [
        ("etc/npu-agent/agent.toml", BAD, 3, 7, "0xff"),
        ("etc/npu-agent/agent.toml", BAD_DISABLED, 3, 28, "0xe9"),
        ("etc/npu-agent/agent.d/50-site.toml", BAD, 3, 7, "0xff"),
    ] {
        let root = tempfile::tempdir().unwrap();
        write(root.path(), rel, bytes);
        let r = root.path().to_str().unwrap();
        let o = agent(&["run", "--print-config", "--root", r]);
        let e = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{rel}: {e}");
        let want = format!("/{rel}: line {line}: byte {byte} at column {col} is not UTF-8");
        assert!(e.contains(&want), "{rel}: want {want:?} in {e}");
        assert!(o.stdout.is_empty(), "{rel}: printed a config");
    }
}

#[test]
fn a_config_given_on_the_command_line_is_refused_the_same_way() {
    let d = tempfile::tempdir().unwrap();
    let file = d.path().join("agent.toml");
    std::fs::write(&file, BAD).unwrap();
    let root = tempfile::tempdir().unwrap();
    let o = agent(&[
        "run",
        "--print-config",
        "--root",
        root.path().to_str().unwrap(),
        "--config",
        file.to_str().unwrap(),
    ]);
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{e}");
    assert!(
        e.contains("agent.toml: line 3: byte 0xff at column 7 is not UTF-8"),
        "{e}"
    );
}

#[test]
fn a_site_profile_or_app_file_with_a_non_utf8_byte_is_refused() {
    let root = tempfile::tempdir().unwrap();
    write(
        root.path(),
        "etc/npu-agent/profiles.d/site.toml",
        b"id = \"site\"\nname = \"Caf\xe9 board\"\n",
    );
    let o = agent(&["profiles", "list", "--root", root.path().to_str().unwrap()]);
    let e = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{e}");
    assert!(
        e.contains("profiles.d/site.toml: line 2: byte 0xe9 at column 12 is not UTF-8"),
        "{e}"
    );
    write(
        root.path(),
        "etc/npu-agent/apps.d/site.toml",
        b"# \xd6\xd0\xce\xc4 comment\n",
    );
    let (_, errors) =
        npu_agent::profile::apps::load_apps(&npu_agent::root::SysRoot::new(root.path()));
    let shown: Vec<String> = errors.iter().map(|e| e.to_string()).collect();
    assert!(
        shown
            .iter()
            .any(|e| e.contains("apps.d/site.toml: line 1: byte 0xd6 at column 3 is not UTF-8")),
        "{shown:?}"
    );
}

/// The fleet tools' own file: a known-boards file that is not UTF-8 stops `fleet watch` and
/// `fleet send` before they connect (it would make every board's key look new).
#[test]
fn a_known_boards_file_that_is_not_utf8_stops_the_fleet_tools() {
    let d = tempfile::tempdir().unwrap();
    let file = d.path().join("known_boards");
    std::fs::write(&file, b"b1 AAAA\nb2 caf\xe9\n").unwrap();
    for args in [
        vec!["fleet", "watch", "--broker", "mqtt://127.0.0.1:1", "--once"],
        vec![
            "fleet",
            "send",
            "--broker",
            "mqtt://127.0.0.1:1",
            "--board",
            "b1",
            "rescan",
        ],
    ] {
        let o = Command::new(env!("CARGO_BIN_EXE_npu-agent"))
            .args(&args)
            .env("NPU_AGENT_KNOWN_BOARDS", &file)
            .output()
            .unwrap();
        let e = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {e}");
        assert!(
            e.contains("known_boards: line 2: byte 0xe9 at column 7 is not UTF-8"),
            "{args:?}: {e}"
        );
    }
}
