//! `check --format prometheus`: the report in the Prometheus text exposition format (version
//! 0.0.4), for node_exporter's textfile collector.
//!
//! What is written (every family is a `gauge`):
//!
//! - `npu_agent_board_info{board_id,profile,model,agent_version} 1`;
//! - `npu_agent_health`: 0 ok, 1 warn, 2 fail;
//! - `npu_agent_check_status{check}`: the most severe finding of each check id on one monotone
//!   scale, higher is worse: `pass` 0, `skip` 0, `info` 1, `error` 2, `warn` 3, `fail` 4 (the
//!   order the agent's own health uses: a check that could not run ranks above `info` and below
//!   `warn`). Alert on `>= 3`;
//! - `npu_agent_check_state{check,state}`: the same as a state set, one series per status
//!   (`pass`, `skip`, `info`, `warn`, `fail`, `error`), 1 for the check's status and 0 for the
//!   others, so `skip` and `error` stay distinguishable;
//! - every status metric: `npu_agent_<name>` with the unit suffix spelt out
//!   (`soc_temp_c` -> `npu_agent_soc_temp_celsius`, `uptime_s` -> `npu_agent_uptime_seconds`,
//!   `npu_freq_hz` -> `npu_agent_npu_freq_hertz`; `_bytes` and `_percent` stay), booleans as
//!   0/1, per-zone temperatures as `npu_agent_zone_temp_celsius{zone}`, per-core NPU load as
//!   `npu_agent_npu_core_load_percent{core}`. Text metrics are left out.

use crate::check::{worst_by_id, Status};
use crate::report::{Health, Report};
use serde_json::Value;
use std::fmt::Write as _;

/// Every status a check can have, in the order the state set lists them.
const STATES: [Status; 6] = [
    Status::Pass,
    Status::Skip,
    Status::Info,
    Status::Warn,
    Status::Fail,
    Status::Error,
];

/// The value of `npu_agent_check_status` for a status (monotone in severity; see the module
/// docs).
pub fn status_value(s: Status) -> u8 {
    s.severity()
}

/// Escapes a label value: backslash, double quote and line feed (the exposition format's three
/// escapes); other control characters, bidirectional-text controls and `%` are written visibly
/// as `%XX` / `%uXXXX` (hex), so distinct values never print as the same label.
pub fn escape_label(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            '%' => out.push_str("%25"),
            c if c.is_control() => {
                let _ = write!(out, "%{:02X}", u32::from(c));
            }
            c if is_bidi(c) => {
                let _ = write!(out, "%u{:04X}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out
}

/// Whether `c` is a bidirectional-text control (marks, embeddings, overrides, isolates).
fn is_bidi(c: char) -> bool {
    matches!(c, '\u{200E}' | '\u{200F}' | '\u{061C}' | '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}')
}

/// A metric name from a status metric key: `npu_agent_` + the key with its unit suffix spelt
/// out, characters outside `[a-zA-Z0-9_]` turned into `_`.
pub fn metric_name(key: &str) -> String {
    let spelt = if let Some(stem) = key.strip_suffix("_c") {
        format!("{stem}_celsius")
    } else if let Some(stem) = key.strip_suffix("_s") {
        format!("{stem}_seconds")
    } else if let Some(stem) = key.strip_suffix("_hz") {
        format!("{stem}_hertz")
    } else {
        key.to_string()
    };
    let clean: String = spelt
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("npu_agent_{clean}")
}

/// One-line help for the metrics the agent writes; others get a generic line.
fn help(key: &str) -> String {
    match key {
        "soc_temp_c" => "Hottest thermal zone, degrees Celsius.".into(),
        "zone_temp_c" => "Temperature of each thermal zone by its type, degrees Celsius.".into(),
        "hailo_temp_c" => "Hailo chip temperature from its hwmon, degrees Celsius.".into(),
        "undervoltage_now" => {
            "1 while the supply is under-voltage (rpi_volt alarm or the last kernel line).".into()
        }
        "undervoltage_events" => "Undervoltage detected! kernel lines since boot.".into(),
        "npu_load_percent" => "RK3588 NPU load, mean over its cores, percent.".into(),
        "npu_core_load_percent" => "RK3588 NPU load per core, percent.".into(),
        "npu_freq_hz" => "NPU clock from devfreq cur_freq, hertz.".into(),
        "root_fs_free_bytes" => "Bytes available on the root file system.".into(),
        "boot_fs_free_bytes" => "Bytes available on the boot file system.".into(),
        "uptime_s" => "Seconds since boot.".into(),
        "agent_rss_bytes" => "Resident memory of the npu-agent process, bytes.".into(),
        "agent_cpu_s" => "CPU time used by the npu-agent process, seconds.".into(),
        "cma_total_bytes" => "CmaTotal of /proc/meminfo, bytes.".into(),
        "cma_free_bytes" => "CmaFree of /proc/meminfo, bytes.".into(),
        "mem_total_bytes" => "MemTotal of /proc/meminfo, bytes.".into(),
        "mem_available_bytes" => "MemAvailable of /proc/meminfo, bytes.".into(),
        "largest_free_block_bytes" => "Largest free buddy block, bytes.".into(),
        "free_high_order_bytes" => {
            "Free memory in buddy blocks at or above the profile's order, bytes.".into()
        }
        k => format!("npu-agent status metric {k}."),
    }
}

fn number(v: &Value) -> Option<String> {
    match v {
        Value::Bool(b) => Some(u8::from(*b).to_string()),
        Value::Number(n) => {
            if let Some(u) = n.as_u64() {
                Some(u.to_string())
            } else if let Some(i) = n.as_i64() {
                Some(i.to_string())
            } else {
                n.as_f64().filter(|f| f.is_finite()).map(|f| f.to_string())
            }
        }
        _ => None,
    }
}

fn family(out: &mut String, name: &str, help: &str) {
    let _ = writeln!(
        out,
        "# HELP {name} {}",
        help.replace('\\', "\\\\").replace('\n', " ")
    );
    let _ = writeln!(out, "# TYPE {name} gauge");
}

/// Renders the report in the text exposition format.
pub fn render(r: &Report) -> String {
    let mut out = String::new();
    family(
        &mut out,
        "npu_agent_board_info",
        "The board, its profile and the agent version (always 1).",
    );
    let _ = writeln!(
        out,
        "npu_agent_board_info{{board_id=\"{}\",profile=\"{}\",model=\"{}\",agent_version=\"{}\"}} 1",
        escape_label(&r.board_id),
        escape_label(&r.profile),
        escape_label(&crate::report::clean(&r.model)),
        escape_label(&r.agent_version)
    );
    family(
        &mut out,
        "npu_agent_health",
        "Overall health: 0 ok, 1 warn, 2 fail.",
    );
    let health = match r.health {
        Health::Ok => 0,
        Health::Warn => 1,
        Health::Fail => 2,
    };
    let _ = writeln!(out, "npu_agent_health {health}");
    let worst = worst_by_id(&r.findings);
    // Report order (check-id order), one series per id.
    let mut ids: Vec<&str> = Vec::new();
    for f in &r.findings {
        if !ids.contains(&f.id.as_str()) {
            ids.push(&f.id);
        }
    }
    family(
        &mut out,
        "npu_agent_check_status",
        "Most severe finding per check: pass/skip 0, info 1, error 2, warn 3, fail 4.",
    );
    for id in &ids {
        let _ = writeln!(
            out,
            "npu_agent_check_status{{check=\"{}\"}} {}",
            escape_label(id),
            status_value(worst[*id])
        );
    }
    family(
        &mut out,
        "npu_agent_check_state",
        "1 for the check's status, 0 for the other statuses.",
    );
    for id in &ids {
        for s in STATES {
            let _ = writeln!(
                out,
                "npu_agent_check_state{{check=\"{}\",state=\"{}\"}} {}",
                escape_label(id),
                s.as_str(),
                u8::from(worst[*id] == s)
            );
        }
    }
    for (key, v) in &r.metrics {
        let name = metric_name(key);
        match v {
            Value::Object(map) => {
                let samples: Vec<(String, String)> = map
                    .iter()
                    .filter_map(|(k, v)| number(v).map(|n| (k.clone(), n)))
                    .collect();
                if samples.is_empty() {
                    continue;
                }
                let label = if key == "zone_temp_c" { "zone" } else { "key" };
                family(&mut out, &name, &help(key));
                for (k, n) in samples {
                    let _ = writeln!(out, "{name}{{{label}=\"{}\"}} {n}", escape_label(&k));
                }
            }
            Value::Array(items) => {
                let samples: Vec<String> = items.iter().filter_map(number).collect();
                if samples.is_empty() || samples.len() != items.len() {
                    continue;
                }
                let label = if key == "npu_core_load_percent" {
                    "core"
                } else {
                    "index"
                };
                family(&mut out, &name, &help(key));
                for (i, n) in samples.iter().enumerate() {
                    let _ = writeln!(out, "{name}{{{label}=\"{i}\"}} {n}");
                }
            }
            v => {
                if let Some(n) = number(v) {
                    family(&mut out, &name, &help(key));
                    let _ = writeln!(out, "{name} {n}");
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_escapes() {
        assert_eq!(metric_name("soc_temp_c"), "npu_agent_soc_temp_celsius");
        assert_eq!(metric_name("uptime_s"), "npu_agent_uptime_seconds");
        assert_eq!(metric_name("npu_freq_hz"), "npu_agent_npu_freq_hertz");
        assert_eq!(metric_name("cma_free_bytes"), "npu_agent_cma_free_bytes");
        assert_eq!(metric_name("a.b-c"), "npu_agent_a_b_c");
        assert_eq!(escape_label("a\"b\\c\nd\x1b"), "a\\\"b\\\\c\\nd%1B");
        // Distinct values stay distinct.
        assert_eq!(escape_label("fai\x01l"), "fai%01l");
        assert_eq!(escape_label("fai%01l"), "fai%2501l");
        assert_eq!(escape_label("o\u{202E}k"), "o%u202Ek");
    }

    #[test]
    fn status_scale_is_monotone_in_severity() {
        let order = [
            Status::Pass,
            Status::Info,
            Status::Error,
            Status::Warn,
            Status::Fail,
        ];
        for w in order.windows(2) {
            assert!(status_value(w[0]) < status_value(w[1]), "{w:?}");
        }
        assert_eq!(status_value(Status::Skip), 0);
        assert_eq!(status_value(Status::Fail), 4);
    }
}
