//! The report: what `check --format json` prints and what the MQTT `status` topic carries
//! (DESIGN section 7, `schema: 1`), and its text rendering for people.

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

/// One diagnosis of a board (DESIGN section 7 status JSON).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Report {
    /// Always 1.
    pub schema: u32,
    /// Board id (`[a-z0-9_-]`): configured, else device-tree serial, else `/etc/machine-id`.
    pub board_id: String,
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
    /// Overall health.
    pub health: Health,
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

/// Text colours, on only when writing to a terminal (and `NO_COLOR` is unset).
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
