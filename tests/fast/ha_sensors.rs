//! The Home Assistant sensors for power, heat and NPU load render as Home Assistant renders them:
//! each discovery `value_template` goes through Jinja2 (the engine Home Assistant's templates are
//! built on; installed by `.ci/run` with pip) against real statuses — `check --format json` of
//! board trees — and must give the figure when the status has it and `None` (which Home
//! Assistant's MQTT sensors show as unknown) when it does not, never 0.
//!
//! Without Python or Jinja2 the test fails under `CI=true` and prints SKIP elsewhere.

use serde_json::{json, Value};
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

/// Reads {"template": ..., "value_json": ...} lines, prints one rendered line each.
const RENDER: &str = r#"
import json, sys, jinja2
env = jinja2.Environment()
for line in sys.stdin:
    job = json.loads(line)
    print(json.dumps(env.from_string(job["template"]).render(value_json=job["value_json"])))
"#;

fn jinja_available() -> bool {
    let ok = Command::new("python3")
        .args(["-c", "import jinja2"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        assert!(
            std::env::var_os("CI").is_none(),
            "python3 with jinja2 is required under CI=true (pip install Jinja2)"
        );
        eprintln!("SKIP: python3 -c 'import jinja2' failed (set CI=true to make this a failure)");
    }
    ok
}

fn render(jobs: &[(String, Value)]) -> Vec<String> {
    let mut child = Command::new("python3")
        .args(["-c", RENDER])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("python3");
    let mut input = String::new();
    for (t, v) in jobs {
        input.push_str(&json!({"template": t, "value_json": v}).to_string());
        input.push('\n');
    }
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str::<String>(l).unwrap())
        .collect()
}

fn status(case: &str) -> Value {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/boards")
        .join(case)
        .join("root");
    let o = Command::new(env!("CARGO_BIN_EXE_npu-agent"))
        .args(["check", "--format", "json", "--root"])
        .arg(root)
        .output()
        .unwrap();
    serde_json::from_slice(&o.stdout).expect("report")
}

#[test]
fn power_heat_and_load_sensors_show_figures_or_unknown() {
    if !jinja_available() {
        return;
    }
    let ctx = npu_agent::report::ha::HaContext {
        prefix: "homeassistant",
        topic_root: "npu-fleet",
        board: "b1",
        model: "Raspberry Pi 5",
        profile: "rpi5-hailo10h",
        buttons: vec![
            npu_agent::model::action::ActionKind::Compact,
            npu_agent::model::action::ActionKind::Rescan,
        ],
    };
    let payload = npu_agent::report::ha::discovery_payload(&ctx);
    let template = |key: &str| {
        payload["cmps"][key]["value_template"]
            .as_str()
            .unwrap_or_else(|| panic!("{key} has no value_template"))
            .to_string()
    };
    let keys = [
        "b1_soc_temp",
        "b1_npu_load",
        "b1_undervoltage",
        "b1_root_fs_free",
    ];
    for k in &keys[..2] {
        assert_eq!(payload["cmps"][k]["state_class"], "measurement", "{k}");
    }
    let uv = status("own-pi5-hailo10h-undervoltage-3a-supply");
    let rk = status("own-rk3588-npu-thermal-throttled");
    let healthy_pi = status("own-pi5-hailo10h-5.1.1-healthy");
    // A status from an agent that has no metrics object at all.
    let bare = json!({"health": "ok"});
    let mut jobs = Vec::new();
    for s in [&uv, &rk, &healthy_pi, &bare] {
        for k in keys {
            jobs.push((template(k), s.clone()));
        }
    }
    let got = render(&jobs);
    let row = |i: usize| got[i * 4..i * 4 + 4].to_vec();
    // check --root on a tree is not the live system: no file-system figure, so unknown.
    assert_eq!(row(0), ["52.7", "None", "ON", "None"], "Pi 5 under-voltage");
    assert_eq!(row(1), ["88.5", "98.0", "None", "None"], "RK3588 hot NPU");
    assert_eq!(row(2), ["52.7", "None", "OFF", "None"], "healthy Pi 5");
    assert_eq!(row(3), ["None", "None", "None", "None"], "no metrics");
}
