//! `--json` on every command that prints a result: one JSON document with the documented
//! fields (docs/reference.md, "JSON output"), its values those of the text output.

use crate::cli::{agent, case, stderr, stdout};
use serde_json::Value;

/// Runs `args` (exit `code` expected) and parses its stdout as one JSON document.
fn json(args: &[&str], code: i32) -> Value {
    let o = agent(args);
    assert_eq!(o.status.code(), Some(code), "{args:?}: {}", stderr(&o));
    serde_json::from_str(&stdout(&o)).unwrap_or_else(|e| panic!("{args:?}: {e}: {}", stdout(&o)))
}

/// A copy of a fixture's tree (the commands that may write are run on copies).
fn tree(name: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let src = case(name);
    let ok = std::process::Command::new("cp")
        .args(["-a", &format!("{src}/."), dir.path().to_str().unwrap()])
        .status()
        .unwrap();
    assert!(ok.success());
    dir
}

#[test]
fn profiles_list_and_show_as_json() {
    let v = json(&["profiles", "list", "--json"], 0);
    let ids: Vec<&str> = v["profiles"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["id"].as_str().unwrap())
        .collect();
    assert!(
        ids.contains(&"rpi5-hailo8") && ids.contains(&"rk3588-rknpu"),
        "{v}"
    );
    assert!(v["profiles"]
        .as_array()
        .unwrap()
        .iter()
        .all(|p| p["source"] == "built-in"));
    assert_eq!(v["errors"], serde_json::json!([]));
    let s = json(&["profiles", "show", "rk3588-rknpu", "--json"], 0);
    assert_eq!(
        (s["id"].as_str(), s["source"].as_str()),
        (Some("rk3588-rknpu"), Some("built-in"))
    );
    let text = stdout(&agent(&["profiles", "show", "rk3588-rknpu"]));
    assert_eq!(s["toml"].as_str().unwrap().trim_end(), text.trim_end());
}

#[test]
fn keygen_as_json_names_both_files_and_the_raw_public_key() {
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("op.key");
    let v = json(&["keygen", "--out", key.to_str().unwrap(), "--json"], 0);
    assert_eq!(v["private_key"].as_str(), key.to_str());
    assert_eq!(
        v["public_key"].as_str().map(String::from),
        Some(format!("{}.pub", key.display()))
    );
    use base64::Engine;
    let raw = base64::engine::general_purpose::STANDARD
        .decode(v["public_key_base64"].as_str().unwrap())
        .unwrap();
    assert_eq!(raw.len(), 32);
    // The SPKI PEM's last 32 bytes are that key.
    let pem = std::fs::read_to_string(dir.path().join("op.key.pub")).unwrap();
    let body: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
    let der = base64::engine::general_purpose::STANDARD
        .decode(body)
        .unwrap();
    assert_eq!(&der[der.len() - 32..], &raw[..]);
}

#[test]
fn cma_show_and_set_as_json_carry_the_verdict_and_the_edit() {
    let root = case("own-rk3588-opi5plus-rknpu-0.9.8-healthy");
    let v = json(&["cma", "show", "--root", &root, "--json"], 0);
    assert_eq!(v["verdict"], "in_effect");
    assert_eq!(v["boot_file_cma"], "cma=256M");
    assert_eq!(v["cma_total_bytes"], 268_435_456);
    let t = tree("own-rk3588-opi5plus-rknpu-0.9.8-healthy");
    let r = t.path().to_str().unwrap();
    let before = std::fs::read(t.path().join("boot/armbianEnv.txt")).unwrap();
    let s = json(
        &["cma", "set", "512M", "--dry-run", "--root", r, "--json"],
        0,
    );
    assert_eq!(s["outcome"], "dry_run", "{s}");
    assert_eq!(s["profile"], "rk3588-rknpu");
    let diff = s.to_string();
    assert!(diff.contains("cma=512M"), "{s}");
    assert_eq!(
        std::fs::read(t.path().join("boot/armbianEnv.txt")).unwrap(),
        before
    );
}

#[test]
fn compact_as_json_is_the_remote_result() {
    let t = tree("own-rk3588s-opi5-pending-cma-fragmented");
    // A captured tree has no knob (capture does not copy it): the copy gets one to write.
    let knob = t.path().join("proc/sys/vm/compact_memory");
    std::fs::create_dir_all(knob.parent().unwrap()).unwrap();
    std::fs::write(&knob, "").unwrap();
    let r = t.path().to_str().unwrap();
    let v = json(&["compact", "--dry-run", "--root", r, "--json"], 0);
    assert_eq!(v["outcome"], "dry_run", "{v}");
    assert_eq!(std::fs::read_to_string(&knob).unwrap(), "");
    let v = json(&["compact", "--root", r, "--json"], 0);
    assert_eq!(v["outcome"], "done", "{v}");
    assert_eq!(std::fs::read_to_string(&knob).unwrap().trim(), "1");
}

#[test]
fn capture_as_json_says_what_it_wrote() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("b.tar.gz");
    let root = case("own-pi5-hailo8-4.23-healthy");
    let v = json(
        &[
            "capture",
            "--root",
            &root,
            "--out",
            out.to_str().unwrap(),
            "--json",
        ],
        0,
    );
    assert_eq!(v["file"].as_str(), out.to_str());
    assert_eq!(
        v["archive_bytes"].as_u64(),
        Some(std::fs::metadata(&out).unwrap().len())
    );
    assert!(v["entries"].as_u64().unwrap() > 5, "{v}");
    assert_eq!(
        (v["profile"].as_str(), v["redacted"].as_bool()),
        (Some("rpi5-hailo8"), Some(true))
    );
    assert!(v["missing"].is_array());
}

/// `check --json` is `check --format json` (the report object, as the status carries it), and
/// the two together are a usage error.
#[test]
fn check_json_is_the_report_of_format_json() {
    let root = case("rk3588-rknpu-0.8.2-nofile-1024");
    let short = json(&["check", "--root", &root, "--json"], 1);
    let long = json(&["check", "--root", &root, "--format", "json"], 1);
    let ids = |v: &Value| -> Vec<(String, String)> {
        v["findings"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| (f["id"].to_string(), f["status"].to_string()))
            .collect()
    };
    assert!(
        ids(&short).iter().all(|(id, _)| id.contains(".")),
        "{short}"
    );
    assert_eq!(ids(&short), ids(&long));
    let o = agent(&["check", "--root", &root, "--json", "--format", "text"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
}
