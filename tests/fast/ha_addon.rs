//! The Home Assistant add-on (packaging/ha-addon/npu-agent): its config.yaml, read with PyYAML,
//! asks for the host access the agent needs, each with its reason in a comment, and grants no
//! write access to the host; every option it offers reaches one real agent setting through run.sh
//! (run here with jq and this build of the agent's `run --print-config`), its defaults are a
//! config the agent accepts, and the password and keys become files, never printed.
//!
//! Without python3 + PyYAML or jq the test fails under `CI=true` and prints SKIP elsewhere.

use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::Command;

fn addon_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("packaging/ha-addon/npu-agent")
}

/// True when python3 with PyYAML and jq are here; else a failure under CI, a SKIP elsewhere.
fn tools_available() -> bool {
    let yaml = Command::new("python3")
        .args(["-c", "import yaml"])
        .status()
        .is_ok_and(|s| s.success());
    let jq = Command::new("jq")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if yaml && jq {
        return true;
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "python3 with PyYAML and jq are required under CI=true (apt-get install python3-yaml jq)"
    );
    eprintln!("SKIP: python3 -c 'import yaml' or jq missing (set CI=true to make this a failure)");
    false
}

/// config.yaml as JSON, parsed by PyYAML.
fn config_yaml() -> Value {
    let out = Command::new("python3")
        .args([
            "-c",
            "import json, sys, yaml; print(json.dumps(yaml.safe_load(open(sys.argv[1]))))",
        ])
        .arg(addon_dir().join("config.yaml"))
        .output()
        .expect("python3");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("config.yaml as JSON")
}

/// Each option, a value the defaults do not have, and the agent setting (dotted key) it must
/// reach with the value it must have there.
fn mapping(data: &Path) -> Vec<(&'static str, Value, &'static str, Value)> {
    let d = |p: &str| json!(data.join(p).display().to_string());
    vec![
        (
            "mqtt_url",
            json!("mqtts://broker.lan:8883"),
            "mqtt.url",
            json!("mqtts://broker.lan:8883"),
        ),
        (
            "mqtt_username",
            json!("hauser"),
            "mqtt.username",
            json!("hauser"),
        ),
        (
            "mqtt_password",
            json!("s3cret pass"),
            "mqtt.password_file",
            d("mqtt_password"),
        ),
        (
            "topic_root",
            json!("house"),
            "mqtt.topic_root",
            json!("house"),
        ),
        (
            "board_id",
            json!("pi-kitchen"),
            "board_id",
            json!("pi-kitchen"),
        ),
        (
            "report_interval_s",
            json!(45),
            "report.interval_s",
            json!(45),
        ),
        (
            "home_assistant_discovery",
            json!(false),
            "home_assistant.enabled",
            json!(false),
        ),
        (
            "discovery_prefix",
            json!("hass"),
            "home_assistant.discovery_prefix",
            json!("hass"),
        ),
        (
            "allow_unsigned",
            json!(["rescan"]),
            "security.allow_unsigned",
            json!(["rescan"]),
        ),
        (
            "trusted_keys",
            json!(["npu-agent-ed25519 AAAAtestkey"]),
            "security.trusted_keys",
            json!([data.join("trusted_keys/key-0.pub").display().to_string()]),
        ),
        ("log_level", json!("debug"), "log.level", json!("debug")),
    ]
}

/// Runs run.sh with `options` and `run --print-config --root ROOT`; returns the printed config
/// (as JSON) and the raw text.
fn print_config(options: &Value, data: &Path) -> (Value, String) {
    let dir = tempfile::tempdir().unwrap();
    let (bin, root, opts) = (
        dir.path().join("bin"),
        dir.path().join("root"),
        dir.path().join("options.json"),
    );
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::create_dir_all(&root).unwrap();
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_npu-agent"), bin.join("npu-agent")).unwrap();
    std::fs::write(&opts, options.to_string()).unwrap();
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = Command::new("sh")
        .arg(addon_dir().join("run.sh"))
        .args(["run", "--print-config", "--root"])
        .arg(&root)
        .env("PATH", path)
        .env("ADDON_OPTIONS", &opts)
        .env("ADDON_DATA", data)
        .env_remove("RUST_LOG")
        .output()
        .expect("sh run.sh");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "run.sh failed: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let table: toml::Table = toml::from_str(&text).expect("print-config is TOML");
    (serde_json::to_value(table).unwrap(), text)
}

fn dotted<'a>(v: &'a Value, key: &str) -> &'a Value {
    key.split('.').fold(v, |v, k| &v[k])
}

#[test]
fn the_addon_asks_for_read_access_only_and_says_why() {
    if !tools_available() {
        return;
    }
    let c = config_yaml();
    for key in ["host_pid", "journald", "devicetree", "kernel_modules"] {
        assert_eq!(c[key], json!(true), "{key}");
    }
    // No write access to the host, nothing privileged, not the host's network.
    for key in [
        "full_access",
        "privileged",
        "docker_api",
        "hassio_api",
        "apparmor",
        "map",
        "host_network",
    ] {
        assert!(c.get(key).is_none(), "config.yaml asks for {key}");
    }
    // Each host access line has its reason in the comment right above it.
    let raw = std::fs::read_to_string(addon_dir().join("config.yaml")).unwrap();
    let lines: Vec<&str> = raw.lines().collect();
    for key in [
        "host_pid",
        "journald",
        "devicetree",
        "kernel_modules",
        "udev",
    ] {
        let i = lines
            .iter()
            .position(|l| l.starts_with(&format!("{key}:")))
            .unwrap_or_else(|| panic!("{key} not in config.yaml"));
        assert!(
            i > 0 && lines[i - 1].starts_with("# ") && lines[i - 1].len() > 20,
            "{key} has no reason above it"
        );
    }
    assert_eq!(c["version"], json!(env!("CARGO_PKG_VERSION")));
    assert_eq!(
        c["init"],
        json!(false),
        "run.sh execs the agent as the container's process"
    );
}

#[test]
fn every_addon_option_reaches_an_agent_setting() {
    if !tools_available() {
        return;
    }
    let c = config_yaml();
    let options = c["options"].as_object().expect("options");
    let schema = c["schema"].as_object().expect("schema");
    let mut names: Vec<&String> = options.keys().collect();
    let mut typed: Vec<&String> = schema.keys().collect();
    names.sort();
    typed.sort();
    assert_eq!(names, typed, "every option has a schema entry and back");

    let data = tempfile::tempdir().unwrap();
    let map = mapping(data.path());
    let mut mapped: Vec<&str> = map.iter().map(|m| m.0).collect();
    mapped.sort();
    assert_eq!(
        mapped,
        names.iter().map(|s| s.as_str()).collect::<Vec<_>>(),
        "each option needs a line in run.sh and in this test's mapping"
    );
    let given: serde_json::Map<String, Value> =
        map.iter().map(|m| (m.0.to_string(), m.1.clone())).collect();
    let (cfg, text) = print_config(&Value::Object(given), data.path());
    for (option, _, key, want) in &map {
        assert_eq!(dotted(&cfg, key), want, "option {option} -> {key}");
    }
    assert_eq!(
        cfg["state_dir"],
        json!(data.path().join("state").display().to_string()),
        "the state persists in the add-on's /data"
    );
    // The secrets are files; the password is never printed.
    assert!(!text.contains("s3cret"), "{text}");
    let pw = data.path().join("mqtt_password");
    assert_eq!(std::fs::read_to_string(&pw).unwrap(), "s3cret pass");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&pw).unwrap().permissions().mode() & 0o777,
        0o600
    );
    assert_eq!(
        std::fs::read_to_string(data.path().join("trusted_keys/key-0.pub")).unwrap(),
        "npu-agent-ed25519 AAAAtestkey\n"
    );
}

#[test]
fn the_addon_defaults_are_a_config_the_agent_accepts() {
    if !tools_available() {
        return;
    }
    let c = config_yaml();
    let data = tempfile::tempdir().unwrap();
    let (cfg, _) = print_config(&c["options"], data.path());
    assert_eq!(cfg["mqtt"]["url"], c["options"]["mqtt_url"]);
    assert_eq!(
        cfg["mqtt"]["password_file"],
        json!(""),
        "no password set: no file"
    );
    assert_eq!(cfg["security"]["trusted_keys"], json!([]));
    assert_eq!(cfg["home_assistant"]["enabled"], json!(true));
    assert!(!data.path().join("mqtt_password").exists());
}
