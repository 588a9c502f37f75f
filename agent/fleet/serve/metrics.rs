//! `/metrics`: the whole fleet in one Prometheus text exposition (version 0.0.4). Every family
//! is a gauge, every board series carries `board`:
//!
//! - the service: `npu_fleet_broker_connected` (1: its broker link is up; [`broker_gauge`]);
//! - fleet-wide: `npu_fleet_boards{health}`, `npu_fleet_boards_by_link{link}`,
//!   `npu_fleet_check_firing_boards{check,status}` (boards whose check is `warn` or `fail`),
//!   health and link from fixed word sets, ids that do not look like check ids counted as
//!   `other` and left out of per-board check series,
//!   `npu_fleet_agent_version_boards{agent_version}`;
//! - per board: `npu_fleet_board_health` (0 ok, 1 warn, 2 fail), `npu_fleet_board_check_status
//!   {check}` (pass/skip 0, info 1, error 2, warn 3, fail 4, as the agent's own
//!   `npu_agent_check_status`), `npu_fleet_board_cma_free_bytes`, `npu_fleet_board_cma_total_bytes`,
//!   `npu_fleet_board_soc_temp_celsius` (the hottest zone), `npu_fleet_board_undervoltage`,
//!   `npu_fleet_board_throttling` (the thermal check fires), `npu_fleet_board_npu_load_percent`,
//!   `npu_fleet_board_online`, `npu_fleet_board_stale`, `npu_fleet_board_status_age_seconds`,
//!   `npu_fleet_board_info{profile,model,agent_version,kernel,driver,runtime,firmware} 1`.
//!
//! With [`Cardinality::Failing`] the per-board series are written only for boards that fail,
//! warn or are not online: the series stay bounded by the trouble, not the fleet.

use super::detail::severity;
use super::state::BoardView;
use crate::report::prometheus::escape_label;
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// Which boards get per-board series.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Cardinality {
    /// Every board.
    All,
    /// Only boards that fail, warn or are not online (the counts cover every board).
    Failing,
}

fn family(out: &mut String, name: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge");
}

fn counts(out: &mut String, name: &str, help: &str, label: &str, map: &BTreeMap<String, u64>) {
    family(out, name, help);
    for (k, n) in map {
        let _ = writeln!(out, "{name}{{{label}=\"{}\"}} {n}", escape_label(k));
    }
}

/// A board's health as a label: one of a fixed set, so no status can add or spoof a series.
fn health_word(h: &str) -> &'static str {
    match h {
        "ok" => "ok",
        "warn" => "warn",
        "fail" => "fail",
        "" => "unknown",
        _ => "other",
    }
}

/// A link state as a label or a page's CSS class: one of a fixed set (availability text comes
/// unsealed).
pub fn link_word(l: &str) -> &'static str {
    match l {
        "online" => "online",
        "offline" => "offline",
        "stale" => "stale",
        "deaf" => "deaf",
        "" | "unknown" => "unknown",
        _ => "other",
    }
}

/// Whether `id` looks like a check id (`cma.free`): 3-64 characters of `[a-z0-9_.-]`, a lower
/// case letter first, at least one dot. Other ids get no per-check series of their own.
fn check_id_ok(id: &str) -> bool {
    (3..=64).contains(&id.len())
        && id.starts_with(|c: char| c.is_ascii_lowercase())
        && id.contains('.')
        && id.bytes().all(|b| {
            b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'_' | b'.' | b'-')
        })
}

/// Whether `v` gets per-board series under `c`.
fn shown(v: &BoardView, c: Cardinality) -> bool {
    c == Cardinality::All || v.link != "online" || matches!(v.row.health.as_str(), "warn" | "fail")
}

/// `npu_fleet_broker_connected`: whether this service's own broker link is up (1) or not (0).
pub fn broker_gauge(connected: bool) -> String {
    let mut out = String::new();
    family(
        &mut out,
        "npu_fleet_broker_connected",
        "Whether fleet serve is connected to the broker (1) or not (0).",
    );
    let _ = writeln!(out, "npu_fleet_broker_connected {}", u8::from(connected));
    out
}

/// The exposition of `boards`.
pub fn render(boards: &[BoardView], c: Cardinality) -> String {
    let mut out = String::with_capacity(256 + boards.len() * 1024);
    let (mut health, mut link, mut firing, mut agents) = Default::default();
    fleet_counts(boards, (&mut health, &mut link, &mut firing, &mut agents));
    counts(
        &mut out,
        "npu_fleet_boards",
        "Boards by health.",
        "health",
        &health,
    );
    counts(
        &mut out,
        "npu_fleet_boards_by_link",
        "Boards by link state.",
        "link",
        &link,
    );
    family(
        &mut out,
        "npu_fleet_check_firing_boards",
        "Boards whose check warns or fails.",
    );
    for ((check, status), n) in &firing {
        let _ = writeln!(
            out,
            "npu_fleet_check_firing_boards{{check=\"{}\",status=\"{}\"}} {n}",
            escape_label(check),
            escape_label(status)
        );
    }
    counts(
        &mut out,
        "npu_fleet_agent_version_boards",
        "Boards by agent version.",
        "agent_version",
        &agents,
    );
    let shown: Vec<&BoardView> = boards.iter().filter(|v| shown(v, c)).collect();
    per_board(&mut out, &shown);
    out
}

type Counts<'a> = (
    &'a mut BTreeMap<String, u64>,
    &'a mut BTreeMap<String, u64>,
    &'a mut BTreeMap<(String, String), u64>,
    &'a mut BTreeMap<String, u64>,
);

/// Every `health` label of `npu_fleet_boards` (each written, 0 when no board has it).
pub const HEALTH_WORDS: [&str; 5] = ["ok", "warn", "fail", "unknown", "other"];

/// Every `link` label of `npu_fleet_boards_by_link` (each written, 0 when no board has it).
pub const LINK_WORDS: [&str; 6] = ["online", "offline", "stale", "deaf", "unknown", "other"];

fn fleet_counts(boards: &[BoardView], (health, link, firing, agents): Counts<'_>) {
    for w in HEALTH_WORDS {
        health.insert(w.to_string(), 0);
    }
    for w in LINK_WORDS {
        link.insert(w.to_string(), 0);
    }
    for v in boards {
        *health
            .entry(health_word(&v.row.health).to_string())
            .or_default() += 1;
        *link.entry(link_word(&v.link).to_string()).or_default() += 1;
        let Some(d) = &v.detail else { continue };
        for (check, s) in &d.checks {
            let status = match severity(s) {
                4 => "fail",
                3 => "warn",
                _ => continue,
            };
            let id = if check_id_ok(check) { check } else { "other" };
            *firing
                .entry((id.to_string(), status.to_string()))
                .or_default() += 1;
        }
        if !d.versions.agent.is_empty() {
            *agents.entry(d.versions.agent.clone()).or_default() += 1;
        }
    }
}

/// One per-board family: `value` gives each board's sample, if it has one.
fn gauge(
    out: &mut String,
    boards: &[&BoardView],
    (name, help): (&str, &str),
    value: impl Fn(&BoardView) -> Option<f64>,
) {
    family(out, name, help);
    for v in boards {
        if let Some(x) = value(v).filter(|x| x.is_finite()) {
            let _ = writeln!(
                out,
                "{name}{{board=\"{}\"}} {x}",
                escape_label(&v.row.board)
            );
        }
    }
}

/// A per-board family: name, help, and each board's sample.
type Family<'a> = (&'a str, &'a str, &'a dyn Fn(&BoardView) -> Option<f64>);

fn per_board(out: &mut String, boards: &[&BoardView]) {
    let b = |x: bool| f64::from(u8::from(x));
    let health = |v: &BoardView| match v.row.health.as_str() {
        "ok" => Some(0.0),
        "warn" => Some(1.0),
        "fail" => Some(2.0),
        _ => None,
    };
    gauge(
        out,
        boards,
        ("npu_fleet_board_health", "0 ok, 1 warn, 2 fail."),
        health,
    );
    family(
        out,
        "npu_fleet_board_check_status",
        "pass/skip 0, info 1, error 2, warn 3, fail 4.",
    );
    for v in boards {
        let checks = v.detail.iter().flat_map(|d| &d.checks);
        for (check, s) in checks.filter(|(c, _)| check_id_ok(c)) {
            let _ = writeln!(
                out,
                "npu_fleet_board_check_status{{board=\"{}\",check=\"{}\"}} {}",
                escape_label(&v.row.board),
                escape_label(check),
                severity(s)
            );
        }
    }
    let n = |x: Option<u64>| x.map(|x| x as f64);
    let detail = |v: &BoardView| v.detail.clone().unwrap_or_default();
    let families: [Family<'_>; 9] = [
        ("npu_fleet_board_cma_free_bytes", "CMA free, bytes.", &|v| {
            n(v.row.cma_free_bytes)
        }),
        (
            "npu_fleet_board_cma_total_bytes",
            "CMA pool, bytes.",
            &|v| n(v.row.cma_total_bytes),
        ),
        (
            "npu_fleet_board_soc_temp_celsius",
            "The hottest thermal zone.",
            &|v| v.row.soc_temp_c,
        ),
        (
            "npu_fleet_board_undervoltage",
            "1 under-voltage now.",
            &|v| v.row.undervoltage_now.map(b),
        ),
        (
            "npu_fleet_board_throttling",
            "1 the thermal check fires.",
            &|v| v.detail.as_ref().map(|d| b(d.throttling)),
        ),
        ("npu_fleet_board_npu_load_percent", "Mean NPU load.", &|v| {
            detail(v).npu_load_percent
        }),
        (
            "npu_fleet_board_online",
            "1 online (not offline, stale or unknown).",
            &|v| Some(b(v.link == "online" || v.link == "deaf")),
        ),
        ("npu_fleet_board_stale", "1 its status is too old.", &|v| {
            Some(b(v.link == "stale"))
        }),
        (
            "npu_fleet_board_status_age_seconds",
            "Seconds since its last status's time.",
            &|v| v.status_age_s.map(|s| s as f64),
        ),
    ];
    for (name, help, f) in families {
        gauge(out, boards, (name, help), f);
    }
    family(
        out,
        "npu_fleet_board_info",
        "A board's profile, model and versions.",
    );
    for v in boards {
        let d = detail(v);
        let mut labels = format!(
            "board=\"{}\",profile=\"{}\",model=\"{}\"",
            escape_label(&v.row.board),
            escape_label(&v.row.profile),
            escape_label(&v.row.model)
        );
        for (k, val) in d.versions.pairs() {
            let name = if k == "agent" { "agent_version" } else { k };
            let _ = write!(labels, ",{name}=\"{}\"", escape_label(val));
        }
        let _ = writeln!(out, "npu_fleet_board_info{{{labels}}} 1");
    }
}
