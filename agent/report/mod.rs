//! The report: what `check --format json` prints and what the MQTT `status` topic carries
//! (docs/reference.md "MQTT topics and payloads", `schema: 1`), and its text rendering for people.

pub mod ha;
pub mod metrics;
pub mod prometheus;
pub mod status;

use crate::check::{Finding, Status};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// Overall health: `ok` (nothing above info), `warn` (a warning or a check that errored), `fail`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Health {
    /// Nothing to fix.
    Ok,
    /// Something to look at.
    Warn,
    /// Something is broken.
    Fail,
}

impl Health {
    /// Health from the worst finding.
    pub fn of(findings: &[Finding]) -> Health {
        let worst = findings
            .iter()
            .map(|f| f.status.severity())
            .max()
            .unwrap_or(0);
        match worst {
            4 => Health::Fail,
            2 | 3 => Health::Warn,
            _ => Health::Ok,
        }
    }
}

/// One diagnosis of a board (the status JSON of docs/reference.md "MQTT topics and payloads").
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Report {
    /// Overall health (first in the JSON, so a person reading `mosquitto_sub` sees it).
    pub health: Health,
    /// Board id (`[a-z0-9_-]`): configured, else device-tree serial, else `/etc/machine-id`.
    pub board_id: String,
    /// Always 1.
    pub schema: u32,
    /// Profile id in force.
    pub profile: String,
    /// Why that profile was chosen.
    pub profile_reason: String,
    /// `/proc/device-tree/model` (or a description of the machine).
    pub model: String,
    /// This agent's version.
    pub agent_version: String,
    /// When the report was made, RFC 3339 UTC.
    pub time: String,
    /// `/proc/sys/kernel/random/boot_id` (empty when unreadable).
    pub boot_id: String,
    /// Seconds since boot (`/proc/uptime`), when readable.
    pub uptime_s: Option<u64>,
    /// MQTT session counter (0 for a one-shot `check`).
    pub session: u64,
    /// Conditions of the agent itself an operator must know about, as sentences ("another
    /// client uses this board id", "board clock not synchronised…"); absent when none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notices: Vec<String>,
    /// Whether the board hears its commands (`npu-agent run` only): `subscribed`, `subscribing`,
    /// or `not subscribed` (the broker refused or did not answer the command subscription).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commands: Option<String>,
    /// Seconds between statuses (`npu-agent run` only, `report.interval_s`): a reader calls the
    /// board stale when its last status is several intervals old.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub interval_s: Option<u64>,
    /// The broker this status went through (`npu-agent run` only; one of `[mqtt] url`'s list).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub broker: Option<String>,
    /// Every check's findings, in check-id order.
    pub findings: Vec<Finding>,
    /// Figures for dashboards: `cma_total_bytes`, `cma_free_bytes`, `mem_available_bytes`,
    /// `largest_free_block_bytes`, `compact_stall`, `compact_fail`, `cma_alloc_fail`.
    pub metrics: BTreeMap<String, Value>,
    /// A boot-file change waits for a reboot.
    pub reboot_required: bool,
    /// The last action taken (none for `check`).
    pub last_action: Option<Value>,
    /// Profile files that failed to load (they were skipped).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub profile_errors: Vec<String>,
    /// The remote actions this board takes under its profile (`npu-agent run` only; an action
    /// missing here is `rejected` with the reason).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub actions: Vec<String>,
}

impl Report {
    /// The most severe status among the findings.
    pub fn worst(&self) -> Status {
        self.findings
            .iter()
            .map(|f| f.status)
            .max_by_key(|s| s.severity())
            .unwrap_or(Status::Pass)
    }
}

/// The compact status form: what goes out when the full report would not fit the broker's
/// packet limit. Non-passing findings (`info`, `warn`, `fail`, `error`) in full, the others as
/// `id: status` in `checks`, and the metrics; `"form": "compact"` tells readers which it is.
#[derive(Debug, Clone, Serialize)]
pub struct CompactReport<'a> {
    /// Overall health.
    pub health: Health,
    /// Board id.
    pub board_id: &'a str,
    /// Always 1.
    pub schema: u32,
    /// Always `compact`.
    pub form: &'static str,
    /// Profile id in force.
    pub profile: &'a str,
    /// Board model.
    pub model: &'a str,
    /// Agent version.
    pub agent_version: &'a str,
    /// Report time, RFC 3339 UTC.
    pub time: &'a str,
    /// Kernel boot id.
    pub boot_id: &'a str,
    /// Seconds since boot.
    pub uptime_s: Option<u64>,
    /// MQTT session counter.
    pub session: u64,
    /// As in [`Report::notices`].
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notices: Vec<String>,
    /// As in [`Report::commands`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub commands: Option<&'a str>,
    /// As in [`Report::interval_s`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interval_s: Option<u64>,
    /// As in [`Report::broker`].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub broker: Option<&'a str>,
    /// Non-passing findings (evidence dropped when even that does not fit).
    pub findings: Vec<Finding>,
    /// Every other check id and its status (`pass` or `skip`).
    pub checks: BTreeMap<String, Status>,
    /// The metrics, as in the full report.
    pub metrics: &'a BTreeMap<String, Value>,
    /// A boot-file change waits for a reboot.
    pub reboot_required: bool,
    /// The last action taken.
    pub last_action: &'a Option<Value>,
    /// As in [`Report::actions`].
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    pub actions: &'a [String],
}

/// Which form a status payload took.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StatusForm {
    /// The whole report.
    Full,
    /// [`CompactReport`].
    Compact,
    /// [`CompactReport`] with findings cut to id, status and a short summary.
    CompactBrief,
}

/// The size a compact status is kept under when the broker's limit is unknown, bytes
/// (mosquitto `max_packet_size`/`message_size_limit` 4096 is a common setting).
pub const COMPACT_STATUS_MAX_BYTES: usize = 4096;

/// The compact form of `r`; `brief` keeps only id, status and up to 160 characters of summary
/// per non-passing finding.
pub fn compact(r: &Report, brief: bool) -> CompactReport<'_> {
    let mut findings = Vec::new();
    let mut checks = BTreeMap::new();
    for f in &r.findings {
        if f.status.fires() || f.status == Status::Error {
            let mut f = f.clone();
            if brief {
                f.evidence.clear();
                f.observed.clear();
                f.expected.clear();
                f.remedy.clear();
                if f.summary.chars().count() > 160 {
                    f.summary = f.summary.chars().take(159).collect::<String>() + "…";
                }
            }
            findings.push(f);
        } else {
            checks.insert(f.id.clone(), f.status);
        }
    }
    CompactReport {
        health: r.health,
        board_id: &r.board_id,
        schema: r.schema,
        form: "compact",
        profile: &r.profile,
        model: &r.model,
        agent_version: &r.agent_version,
        time: &r.time,
        boot_id: &r.boot_id,
        uptime_s: r.uptime_s,
        session: r.session,
        notices: r.notices.clone(),
        commands: r.commands.as_deref(),
        interval_s: r.interval_s,
        broker: r.broker.as_deref(),
        findings,
        checks,
        metrics: &r.metrics,
        reboot_required: r.reboot_required,
        last_action: &r.last_action,
        actions: &r.actions,
    }
}

/// The status payload for a broker that takes payloads up to `limit_bytes`: the full report
/// when it fits and `compact_only` is false, else the compact form, else the brief compact
/// form. `Err(size of the smallest form)` when none fits: the caller skips the publish (and
/// says so) instead of sending something the broker will drop the connection for.
pub fn status_payload(
    r: &Report,
    limit_bytes: usize,
    compact_only: bool,
) -> Result<(Vec<u8>, StatusForm), usize> {
    if !compact_only {
        if let Ok(full) = serde_json::to_vec(r) {
            if full.len() <= limit_bytes {
                return Ok((full, StatusForm::Full));
            }
        }
    }
    let limit = if compact_only {
        limit_bytes.min(COMPACT_STATUS_MAX_BYTES)
    } else {
        limit_bytes
    };
    let mut smallest = usize::MAX;
    for (brief, form) in [
        (false, StatusForm::Compact),
        (true, StatusForm::CompactBrief),
    ] {
        if let Ok(js) = serde_json::to_vec(&compact(r, brief)) {
            if js.len() <= limit {
                return Ok((js, form));
            }
            smallest = smallest.min(js.len());
        }
    }
    Err(smallest)
}

/// Text colours, on only when writing to a terminal (and `NO_COLOR` is unset or empty).
#[derive(Debug, Clone, Copy)]
pub struct Style {
    /// Emit ANSI colours.
    pub color: bool,
    /// Also print evidence and remedies of passing checks.
    pub verbose: bool,
}

fn paint(style: Style, s: Status, text: &str) -> String {
    if !style.color {
        return text.to_string();
    }
    let code = match s {
        Status::Pass => "32",
        Status::Skip => "2",
        Status::Info => "36",
        Status::Warn => "33",
        Status::Fail => "1;31",
        Status::Error => "35",
    };
    format!("\x1b[{code}m{text}\x1b[0m")
}

/// Text from a board (model, log lines, file names) as it may be shown on a terminal: control
/// characters (escape sequences included) and invalid UTF-8 replacements are dropped, and the
/// text is cut at 400 characters.
pub fn clean(s: &str) -> String {
    let mut out: String = s
        .chars()
        .filter(|c| (!c.is_control() || *c == '\t') && *c != char::REPLACEMENT_CHARACTER)
        .take(400)
        .collect();
    if s.chars().count() > 400 {
        out.push('…');
    }
    out
}

/// Renders the report as a table a person reads at a glance: one line per check, then the remedy
/// and evidence under every check that fired.
pub fn render_text(r: &Report, style: Style) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "npu-agent check: {}", clean(&r.model));
    let health = match r.health {
        Health::Ok => paint(style, Status::Pass, "OK"),
        Health::Warn => paint(style, Status::Warn, "WARN"),
        Health::Fail => paint(style, Status::Fail, "FAIL"),
    };
    let _ = writeln!(
        out,
        "profile {} ({})",
        clean(&r.profile),
        clean(&r.profile_reason)
    );
    let _ = writeln!(
        out,
        "health {health}   board {}   agent {}",
        r.board_id, r.agent_version
    );
    for e in &r.profile_errors {
        let _ = writeln!(out, "profile error (skipped): {}", clean(e));
    }
    let _ = writeln!(out);
    let width = r
        .findings
        .iter()
        .map(|f| f.id.len())
        .max()
        .unwrap_or(10)
        .max(5);
    let _ = writeln!(out, "{:<6}  {:<width$}  SUMMARY", "STATUS", "CHECK");
    let mut i = 0;
    while i < r.findings.len() {
        let f = &r.findings[i];
        // Consecutive skips with one reason (a whole family that does not apply) share a line.
        let run = r.findings[i..]
            .iter()
            .take_while(|g| {
                g.status == Status::Skip && f.status == Status::Skip && g.summary == f.summary
            })
            .count();
        if run > 2 && !style.verbose {
            let family = f.id.split('.').next().unwrap_or("");
            let label = format!("{:<6}", "skip");
            let name = format!("{family}.* ({run} checks)");
            let _ = writeln!(
                out,
                "{}  {:<width$}  {}",
                paint(style, Status::Skip, &label),
                name,
                clean(&f.summary)
            );
            i += run;
            continue;
        }
        i += 1;
        let label = format!("{:<6}", f.status.as_str());
        let _ = writeln!(
            out,
            "{}  {:<width$}  {}",
            paint(style, f.status, &label),
            f.id,
            clean(&f.summary)
        );
        let detail = f.status.fires() || f.status == Status::Error || style.verbose;
        if !detail {
            continue;
        }
        let pad = " ".repeat(8 + width);
        if !f.remedy.is_empty() {
            let _ = writeln!(out, "{pad}fix: {}", clean(&f.remedy));
        }
        for e in f.evidence.iter().take(4) {
            let loc = match e.line {
                Some(l) => format!("{}:{l}", clean(&e.file)),
                None => clean(&e.file),
            };
            if e.text.is_empty() {
                let _ = writeln!(out, "{pad}evidence: {loc}");
            } else {
                let _ = writeln!(out, "{pad}evidence: {loc}: {}", clean(&e.text));
            }
        }
    }
    let count = |s: Status| r.findings.iter().filter(|f| f.status == s).count();
    let _ = writeln!(
        out,
        "\n{} fail, {} warn, {} info, {} pass, {} skip, {} error",
        count(Status::Fail),
        count(Status::Warn),
        count(Status::Info),
        count(Status::Pass),
        count(Status::Skip),
        count(Status::Error)
    );
    out
}

#[cfg(test)]
mod clean_tests {
    use super::clean;

    #[test]
    fn terminal_escapes_are_dropped() {
        assert_eq!(
            clean("6.1\x1b[31m\x07]0;owned\x1b[2J"),
            "6.1[31m]0;owned[2J"
        );
        assert_eq!(clean("a\tb"), "a\tb");
        assert_eq!(clean(&"x".repeat(500)).chars().count(), 401);
    }
}
