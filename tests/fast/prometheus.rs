//! `npu-agent check --format prometheus` read back by the Prometheus project's own tools for the
//! text exposition format: the parser of client_python (`prometheus_client.parser`, installed by
//! `.ci/run` with pip) and `promtool check metrics` (parser plus the project's naming lint; from
//! Debian's `prometheus` package, which `.ci/run` unpacks without installing it, so no server is
//! started: `$PATH`, else `~/.cache/npu-agent/prometheus/usr/bin/promtool`). Each board tree's
//! output must pass both, and the parsed samples must carry the values the board's files hold
//! (temperatures, under-voltage, NPU load, one status gauge and one state set per check id).
//!
//! Without Python, `prometheus_client` or promtool the tests fail under `CI=true` and print SKIP
//! elsewhere.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

/// Reads exposition text on stdin, prints one JSON line per sample: [name, labels, value].
const PARSE: &str = r#"
import json, sys
from prometheus_client.parser import text_string_to_metric_families
for fam in text_string_to_metric_families(sys.stdin.read()):
    if fam.type != "gauge":
        raise SystemExit("family %s has type %s" % (fam.name, fam.type))
    if not fam.documentation:
        raise SystemExit("family %s has no HELP" % fam.name)
    for s in fam.samples:
        print(json.dumps([s.name, s.labels, s.value]))
"#;

fn in_ci() -> bool {
    std::env::var_os("CI").is_some()
}

fn parser_available() -> bool {
    let ok = Command::new("python3")
        .args(["-c", "import prometheus_client.parser"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        assert!(
            !in_ci(),
            "python3 with prometheus_client is required under CI=true (pip install prometheus_client)"
        );
        eprintln!("SKIP: python3 -c 'import prometheus_client' failed (set CI=true to make this a failure)");
    }
    ok
}

/// promtool from `$PATH` or where `.ci/run` unpacks it.
fn promtool() -> Option<std::path::PathBuf> {
    let cached = std::env::var_os("HOME")
        .map(|h| Path::new(&h).join(".cache/npu-agent/prometheus/usr/bin/promtool"));
    let found = std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|d| d.join("promtool"))
        .chain(cached)
        .find(|p| p.is_file());
    if found.is_none() {
        assert!(
            !in_ci(),
            "promtool is required under CI=true (.ci/run unpacks Debian's prometheus package)"
        );
        eprintln!("SKIP: promtool not found (set CI=true to make this a failure)");
    }
    found
}

/// Runs `cmd` with `text` on its stdin; its stdout and stderr are captured.
fn piped(cmd: &mut Command, text: &str) -> std::process::Output {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

/// `promtool check metrics` on the text: `Err` with its complaints.
fn promtool_check(tool: &Path, text: &str) -> Result<(), String> {
    let out = piped(Command::new(tool).args(["check", "metrics"]), text);
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

type Sample = (String, BTreeMap<String, String>, f64);

/// Parses exposition text with prometheus_client; `Err` with its message when it rejects it.
fn parse(text: &str) -> Result<Vec<Sample>, String> {
    let out = piped(Command::new("python3").args(["-c", PARSE]), text);
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str::<Sample>(l).expect("parser output"))
        .collect())
}

fn exposition(case: &str, root: &str) -> String {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/boards")
        .join(case)
        .join(root);
    let o = Command::new(env!("CARGO_BIN_EXE_npu-agent"))
        .args(["check", "--format", "prometheus", "--root"])
        .arg(&dir)
        .output()
        .expect("run npu-agent");
    assert!(
        matches!(o.status.code(), Some(0 | 1)),
        "{case}: exit {:?}: {}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).expect("UTF-8")
}

fn value(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    samples
        .iter()
        .find(|(n, l, _)| {
            n == name
                && l.len() == labels.len()
                && labels
                    .iter()
                    .all(|(k, v)| l.get(*k).map(String::as_str) == Some(*v))
        })
        .map(|s| s.2)
}

/// Every check id has one status gauge and a state set with exactly one state at 1.
fn assert_checks_complete(case: &str, samples: &[Sample]) {
    for id in npu_agent::check::CHECK_IDS {
        assert!(
            value(samples, "npu_agent_check_status", &[("check", id)]).is_some(),
            "{case}: no npu_agent_check_status for {id}"
        );
        let on: f64 = samples
            .iter()
            .filter(|(n, l, _)| {
                n == "npu_agent_check_state" && l.get("check").map(String::as_str) == Some(id)
            })
            .map(|s| s.2)
            .sum();
        assert_eq!(on, 1.0, "{case}: state set of {id} sums to {on}");
    }
}

#[test]
fn pi5_undervoltage_tree_parses_and_carries_its_figures() {
    if !parser_available() {
        return;
    }
    let case = "own-pi5-hailo10h-undervoltage-3a-supply";
    let s = parse(&exposition(case, "root")).unwrap_or_else(|e| panic!("{case}: {e}"));
    assert_checks_complete(case, &s);
    let check = |id| value(&s, "npu_agent_check_status", &[("check", id)]);
    assert_eq!(check("board.power"), Some(4.0), "fail = 4");
    assert_eq!(check("board.thermal"), Some(0.0));
    assert_eq!(
        value(
            &s,
            "npu_agent_check_state",
            &[("check", "board.power"), ("state", "fail")]
        ),
        Some(1.0)
    );
    assert_eq!(value(&s, "npu_agent_health", &[]), Some(2.0));
    assert_eq!(value(&s, "npu_agent_undervoltage_now", &[]), Some(1.0));
    assert_eq!(value(&s, "npu_agent_undervoltage_events", &[]), Some(3.0));
    assert_eq!(value(&s, "npu_agent_soc_temp_celsius", &[]), Some(52.7));
    assert_eq!(
        value(
            &s,
            "npu_agent_zone_temp_celsius",
            &[("zone", "cpu-thermal")]
        ),
        Some(52.7)
    );
    assert_eq!(
        value(&s, "npu_agent_cma_total_bytes", &[]),
        Some(268_435_456.0)
    );
}

#[test]
fn rk3588_hot_npu_tree_parses_and_carries_its_figures() {
    if !parser_available() {
        return;
    }
    let case = "own-rk3588-npu-thermal-throttled";
    let s = parse(&exposition(case, "root")).unwrap_or_else(|e| panic!("{case}: {e}"));
    assert_checks_complete(case, &s);
    assert_eq!(
        value(&s, "npu_agent_check_status", &[("check", "board.thermal")]),
        Some(3.0),
        "warn = 3"
    );
    // skip keeps severity 0 but is told apart from pass by the state set.
    assert_eq!(
        value(&s, "npu_agent_check_status", &[("check", "board.power")]),
        Some(0.0)
    );
    assert_eq!(
        value(
            &s,
            "npu_agent_check_state",
            &[("check", "board.power"), ("state", "skip")]
        ),
        Some(1.0)
    );
    assert_eq!(
        value(
            &s,
            "npu_agent_zone_temp_celsius",
            &[("zone", "npu-thermal")]
        ),
        Some(88.5)
    );
    assert_eq!(value(&s, "npu_agent_npu_load_percent", &[]), Some(98.0));
    assert_eq!(
        value(&s, "npu_agent_npu_core_load_percent", &[("core", "2")]),
        Some(99.0)
    );
    assert_eq!(value(&s, "npu_agent_npu_freq_hertz", &[]), Some(3e8));
    // No sensor, no sample (not a 0).
    assert_eq!(value(&s, "npu_agent_undervoltage_now", &[]), None);
}

#[test]
fn every_board_tree_parses() {
    if !parser_available() {
        return;
    }
    let tool = promtool();
    let base = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/boards");
    let mut n = 0;
    for e in std::fs::read_dir(&base).unwrap() {
        let case = e.unwrap().file_name().to_string_lossy().into_owned();
        if !base.join(&case).join("root").is_dir() {
            continue;
        }
        let text = exposition(&case, "root");
        let s = parse(&text).unwrap_or_else(|e| panic!("{case}: {e}\n{text}"));
        assert_checks_complete(&case, &s);
        if let Some(t) = &tool {
            promtool_check(t, &text).unwrap_or_else(|e| panic!("{case}: promtool: {e}\n{text}"));
        }
        n += 1;
    }
    assert!(n >= 20, "only {n} trees");
}

#[test]
fn the_parser_rejects_broken_exposition_text() {
    // The validator is live: it refuses what the format forbids.
    if !parser_available() {
        return;
    }
    assert!(parse("npu_agent_x{a=\"b} 1\n").is_err());
    assert!(parse("npu_agent_x 1 2 3 4\n").is_err());
    assert!(
        parse("# TYPE npu_agent_x gauge\nnpu_agent_x 1\n").is_err(),
        "no HELP"
    );
}

#[test]
fn promtool_rejects_broken_and_badly_named_metrics() {
    let Some(tool) = promtool() else { return };
    assert!(promtool_check(&tool, "npu_agent_x{a=\"b} 1\n").is_err());
    let lint = promtool_check(&tool, "# TYPE npu_agent_x_ms gauge\nnpu_agent_x_ms 1\n")
        .expect_err("abbreviated unit and no HELP");
    assert!(lint.contains("no help text"), "{lint}");
}

/// The shipped service's `ExecStart=` with systemd's `$$` unescaped.
fn unit_exec_start() -> String {
    let unit = include_str!("../../systemd/prometheus/npu-agent-prometheus.service");
    let line = unit
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .expect("ExecStart=");
    line.replace("$$", "$")
}

#[test]
fn the_textfile_unit_writes_a_parsable_file_atomically() {
    // The unit's own command line, run with this build's binary and a temporary textfile
    // directory: the file appears whole under its final name, nothing else is left behind.
    if !parser_available() {
        return;
    }
    let cmd = unit_exec_start();
    let (sh, rest) = cmd.split_once(" -c ").expect("/bin/sh -c '...'");
    assert_eq!(sh, "/bin/sh");
    let script = rest
        .strip_prefix('\'')
        .and_then(|s| s.strip_suffix('\''))
        .expect("quoted script")
        .replace("/usr/bin/npu-agent", env!("CARGO_BIN_EXE_npu-agent"));
    let dir = tempfile::tempdir().unwrap();
    let o = Command::new("/bin/sh")
        .args(["-c", &script])
        .env("NPU_AGENT_TEXTFILE_DIR", dir.path())
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "{:?}: {}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names, vec!["npu-agent.prom".to_string()]);
    let text = std::fs::read_to_string(dir.path().join("npu-agent.prom")).unwrap();
    let s = parse(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert_checks_complete("this host", &s);
    if let Some(t) = promtool() {
        promtool_check(&t, &text).unwrap_or_else(|e| panic!("promtool: {e}\n{text}"));
    }
    // Live root: this very process's footprint and the root file system are reported.
    assert!(value(&s, "npu_agent_agent_rss_bytes", &[]).is_some_and(|v| v > 1e5));
    assert!(value(&s, "npu_agent_root_fs_free_bytes", &[]).is_some());

    // A usage error (exit 2) fails the unit and leaves no file.
    let bad = script.replace("--format prometheus", "--format nonsense");
    let dir2 = tempfile::tempdir().unwrap();
    let o = Command::new("/bin/sh")
        .args(["-c", &bad])
        .env("NPU_AGENT_TEXTFILE_DIR", dir2.path())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(std::fs::read_dir(dir2.path()).unwrap().count(), 0);
}

#[test]
fn the_textfile_units_are_shipped_disabled() {
    // A systemd-units entry of their own, with enable and start off.
    let toml = include_str!("../../Cargo.toml");
    assert!(
        toml.contains(r#"{ unit-name = "npu-agent-prometheus", unit-scripts = "systemd/prometheus/", enable = false, start = false }"#),
        "Cargo.toml [package.metadata.deb] systemd-units"
    );
    let timer = include_str!("../../systemd/prometheus/npu-agent-prometheus.timer");
    assert!(timer.contains("WantedBy=timers.target"));
    assert!(timer.contains("OnUnitActiveSec=1min"));
    // The built packages (packaging/build-debs.sh, run by .ci/run before the tests) carry both
    // units, and no maintainer script enables or starts them on a fresh install.
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("target"));
    let debs: Vec<std::path::PathBuf> = std::fs::read_dir(target.join("debian"))
        .map(|d| {
            d.filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|x| x == "deb"))
                .collect()
        })
        .unwrap_or_default();
    if debs.is_empty() {
        assert!(
            !in_ci(),
            "no .deb in {}/debian under CI=true",
            target.display()
        );
        eprintln!("SKIP: no .deb built (bash packaging/build-debs.sh)");
        return;
    }
    for deb in debs {
        let list = Command::new("dpkg-deb")
            .arg("-c")
            .arg(&deb)
            .output()
            .expect("dpkg-deb");
        let list = String::from_utf8_lossy(&list.stdout);
        for unit in ["npu-agent-prometheus.service", "npu-agent-prometheus.timer"] {
            assert!(
                list.contains(&format!("./usr/lib/systemd/system/{unit}")),
                "{}: {unit} missing",
                deb.display()
            );
        }
        let o = Command::new("dpkg-deb")
            .arg("-I")
            .arg(&deb)
            .arg("postinst")
            .output()
            .expect("dpkg-deb");
        let postinst = String::from_utf8_lossy(&o.stdout);
        // debhelper's "don't enable" form: the timer is enabled again on upgrade only when the
        // admin had enabled it (`debian-installed` guards the block), never on a fresh install;
        // nothing starts it (only a try-restart of a running one on upgrade).
        let first = postinst
            .lines()
            .find(|l| l.contains("npu-agent-prometheus"))
            .unwrap_or_default();
        assert!(
            first.contains("deb-systemd-helper debian-installed npu-agent-prometheus.timer"),
            "{}: first mention is {first:?}:\n{postinst}",
            deb.display()
        );
        for l in postinst
            .lines()
            .filter(|l| l.contains("npu-agent-prometheus"))
        {
            assert!(
                !l.contains("$_dh_action") && !l.contains("invoke start"),
                "{}: starts the textfile units: {l}",
                deb.display()
            );
        }
        // The agent's own service is still enabled and started.
        assert!(postinst.contains("deb-systemd-invoke $_dh_action npu-agent.service"));
    }
}
