//! The files shipped with `fleet serve` (packaging/prometheus/, packaging/grafana/,
//! systemd/fleet/) against what the service writes: every metric the alert rules and the
//! dashboard use is one `/metrics` has, and the unit starts the command the CLI parses.

use npu_agent::fleet::serve::detail::{Detail, Versions};
use npu_agent::fleet::serve::metrics::{render, Cardinality};
use npu_agent::fleet::serve::state::BoardView;
use std::collections::BTreeSet;
use std::path::Path;

fn read(rel: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)).unwrap()
}

/// Every `npu_fleet_…` name in `text`.
fn names(text: &str) -> BTreeSet<String> {
    let re = regex_lite::Regex::new(r"npu_fleet_[a-z_]+").unwrap();
    re.find_iter(text).map(|m| m.as_str().to_string()).collect()
}

/// The families `/metrics` writes for a board with every reading.
fn written() -> BTreeSet<String> {
    let mut v = BoardView {
        row: Default::default(),
        link: "online".into(),
        status_age_s: Some(3),
        detail: Some(Detail {
            health: "fail".into(),
            versions: Versions {
                agent: "0.1.0".into(),
                ..Versions::default()
            },
            checks: [("cma.free".to_string(), "fail".to_string())].into(),
            npu_load_percent: Some(5.0),
            ..Detail::default()
        }),
    };
    v.row.board = "b1".into();
    v.row.health = "fail".into();
    v.row.cma_free_bytes = Some(1);
    v.row.cma_total_bytes = Some(2);
    v.row.soc_temp_c = Some(50.0);
    v.row.undervoltage_now = Some(false);
    let text = render(&[v], Cardinality::All);
    text.lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next())
        .map(String::from)
        .collect()
}

#[test]
fn the_rules_and_the_dashboard_use_only_metrics_the_service_writes() {
    let have = written();
    assert!(have.len() >= 15, "{have:?}");
    for file in [
        "packaging/prometheus/npu-fleet-rules.yml",
        "packaging/prometheus/npu-fleet-rules.test.yml",
        "packaging/grafana/npu-fleet-dashboard.json",
    ] {
        let used = names(&read(file));
        assert!(!used.is_empty(), "{file}");
        let missing: Vec<_> = used.difference(&have).collect();
        assert!(
            missing.is_empty(),
            "{file} uses {missing:?}, not in /metrics"
        );
    }
    let dash: serde_json::Value =
        serde_json::from_str(&read("packaging/grafana/npu-fleet-dashboard.json")).unwrap();
    assert!(dash["panels"].as_array().unwrap().len() >= 10);
}

#[test]
fn the_unit_runs_a_command_the_cli_takes() {
    let unit = read("systemd/fleet/npu-agent-fleet.service");
    let exec = unit
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart=/usr/bin/"))
        .unwrap();
    let args: Vec<&str> = exec
        .split_whitespace()
        .map(|a| {
            if a.starts_with("${") {
                "mqtt://b:1883"
            } else {
                a
            }
        })
        .collect();
    use clap::Parser;
    let cli = npu_agent::cli::Cli::try_parse_from(&args);
    assert!(cli.is_ok(), "{exec}: {:?}", cli.err());
    assert!(exec.contains("--listen 127.0.0.1:9465"), "{exec}");
    assert!(unit.contains("StateDirectory=npu-agent-fleet"));
}
