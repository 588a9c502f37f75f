//! The status the daemon publishes: the last diagnosis's report with what only the daemon
//! knows (board id, session, last action, link counters, notices).

use super::agent::Agent;
use crate::check::Status;
use crate::diagnose::Diagnosis;
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

impl Agent {
    /// Makes the status from diagnosis `d` (board id, session, last action, link counters,
    /// pending boot edit, notices) and marks it for publishing when a finding changed, the
    /// interval is due, or `force`; tells systemd the one-line summary.
    pub fn set_report(&mut self, d: Arc<Diagnosis>, force: bool) {
        let mut r = d.report.clone();
        crate::provision::annotate(&mut r); // the first-boot provisioning outcome, if any
        r.board_id = self.s.board.clone();
        r.session = self.session;
        r.last_action = self.last_action.clone();
        r.actions = d.profile.actions();
        // The link's counters (rumqttc #263: coalesce, never block): status publishes that found
        // the request queue full, and incoming messages dropped on a full channel (0: the
        // agent's link waits for room and holds a flood back on the broker instead).
        r.metrics
            .insert("mqtt_status_coalesced".into(), self.status_dropped.into());
        let incoming = self
            .link
            .as_ref()
            .map(|l| l.dropped.load(Ordering::Relaxed))
            .unwrap_or(0);
        r.metrics
            .insert("mqtt_incoming_dropped".into(), incoming.into());
        let edit: Option<crate::action::state::BootEditState> = self
            .s
            .state
            .load(crate::action::state::BOOT_EDIT_FILE)
            .ok()
            .flatten();
        r.reboot_required =
            r.reboot_required || edit.is_some_and(|e| e.verified && e.reboot_required);
        let statuses: BTreeMap<String, Status> = crate::check::worst_by_id(&r.findings);
        let changed = statuses != self.statuses;
        self.statuses = statuses;
        if r.findings
            .iter()
            .any(|f| f.id == "clock.sync" && f.status == Status::Warn)
        {
            r.notices.push(
                "board clock not synchronised: `time` may be days off, and expiring destructive commands are refused until it is".into(),
            );
        }
        if self.taken_over.is_some() {
            r.notices.push(self.takeover_notice());
        }
        r.commands = Some(self.subscription.status_word().to_string());
        r.interval_s = Some(self.s.cfg.report.interval_s);
        r.broker = Some(self.broker.clone()).filter(|b| !b.is_empty());
        r.notices.extend(self.subscription.notice());
        self.status_report = Some(r.clone());
        // Checks run every CHECK_PERIOD (at most interval_s); the status goes out on start, when
        // a finding's status changed, after an action or rescan (forced), and every interval_s.
        let due = self.last_status_publish.elapsed() + Duration::from_millis(500)
            >= Duration::from_secs(self.s.cfg.report.interval_s);
        if self.status_report.is_some()
            && (changed || due || force || self.last_diagnosis.is_none())
        {
            self.status_dirty = true;
        }
        let fails = r
            .findings
            .iter()
            .filter(|f| f.status == Status::Fail)
            .map(|f| f.id.as_str())
            .collect::<Vec<_>>();
        let warns = r
            .findings
            .iter()
            .filter(|f| f.status == Status::Warn)
            .count();
        let summary = format!(
            "health {:?}; {}{} warn; {}",
            r.health,
            if fails.is_empty() {
                String::new()
            } else {
                format!("fail: {}; ", fails.join(", "))
            },
            warns,
            if self.connected {
                "mqtt connected"
            } else {
                "mqtt offline"
            }
        );
        if summary != self.summary {
            let _ = sd_notify::notify(&[sd_notify::NotifyState::Status(&summary)]);
            self.summary = summary;
        }
        self.last_diagnosis = Some(d);
    }
}
