//! The daemon's status: the diagnosis's report with what only the daemon knows, assembled by one
//! pure function ([`daemon_status`]) from literal facts, so that every field a fleet reads has one
//! place it comes from.

use super::{Health, Report};
use crate::model::{Finding, Status};
use serde_json::Value;

/// Why a status says the board clock is off (the `clock.sync` check warns).
pub const CLOCK_NOTICE: &str = "board clock not synchronised: `time` may be days off, and expiring destructive commands are refused until it is";

/// What the daemon knows that a diagnosis does not.
#[derive(Debug, Clone, Default)]
pub struct DaemonFacts {
    /// The board id in topics and statuses.
    pub board_id: String,
    /// This process's MQTT session number (counts reconnects).
    pub session: u64,
    /// The last action's outcome, as published.
    pub last_action: Option<Value>,
    /// The actions the profile allows, in wire order.
    pub actions: Vec<String>,
    /// Status publishes that found the request queue full and were coalesced.
    pub status_coalesced: u64,
    /// Incoming messages dropped on a full channel.
    pub incoming_dropped: u64,
    /// A verified boot-file edit waits for a reboot.
    pub boot_edit_pending_reboot: bool,
    /// The first-boot provisioning's finding, when it has something to say.
    pub provisioning: Option<Finding>,
    /// The notice of a session taken over by another client with this board's id.
    pub takeover_notice: Option<String>,
    /// The command subscription's state in one word (`on`, `refused`, ...).
    pub commands: String,
    /// Seconds between statuses.
    pub interval_s: u64,
    /// The broker this status goes through; empty when unknown.
    pub broker: String,
    /// The command subscription's notices.
    pub subscription_notices: Vec<String>,
}

/// The status the daemon publishes: `report` (the last diagnosis's) with `facts` set in.
/// The provisioning finding goes first (it is about the agent itself), and health is recomputed
/// with it.
pub fn daemon_status(report: &Report, facts: &DaemonFacts) -> Report {
    let mut r = report.clone();
    if let Some(f) = &facts.provisioning {
        r.findings.retain(|x| x.id != f.id);
        r.findings.insert(0, f.clone());
        r.health = Health::of(&r.findings);
    }
    r.board_id = facts.board_id.clone();
    r.session = facts.session;
    r.last_action = facts.last_action.clone();
    r.actions = facts.actions.clone();
    // The link's counters (rumqttc #263: coalesce, never block).
    r.metrics.insert(
        "mqtt_status_coalesced".into(),
        facts.status_coalesced.into(),
    );
    r.metrics.insert(
        "mqtt_incoming_dropped".into(),
        facts.incoming_dropped.into(),
    );
    r.reboot_required = r.reboot_required || facts.boot_edit_pending_reboot;
    let clock_warns = r
        .findings
        .iter()
        .any(|f| f.id == "clock.sync" && f.status == Status::Warn);
    if clock_warns {
        r.notices.push(CLOCK_NOTICE.into());
    }
    r.notices.extend(facts.takeover_notice.clone());
    r.commands = Some(facts.commands.clone());
    r.interval_s = Some(facts.interval_s);
    r.broker = Some(facts.broker.clone()).filter(|b| !b.is_empty());
    r.notices.extend(facts.subscription_notices.iter().cloned());
    r
}

/// The one-line summary systemd shows for the status (`systemctl status npu-agent`).
pub fn summary_line(r: &Report, connected: bool) -> String {
    let fails: Vec<&str> = r
        .findings
        .iter()
        .filter(|f| f.status == Status::Fail)
        .map(|f| f.id.as_str())
        .collect();
    let warns = r
        .findings
        .iter()
        .filter(|f| f.status == Status::Warn)
        .count();
    let fails = if fails.is_empty() {
        String::new()
    } else {
        format!("fail: {}; ", fails.join(", "))
    };
    let link = if connected {
        "mqtt connected"
    } else {
        "mqtt offline"
    };
    format!("health {:?}; {fails}{warns} warn; {link}", r.health)
}

#[cfg(test)]
mod tests;
