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
        let r = crate::report::status::daemon_status(&d.report, &self.status_facts(&d));
        let statuses: BTreeMap<String, Status> = crate::check::worst_by_id(&r.findings);
        let changed = statuses != self.statuses;
        self.statuses = statuses;
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
        let summary = crate::report::status::summary_line(&r, self.connected);
        if summary != self.summary {
            let _ = sd_notify::notify(&[sd_notify::NotifyState::Status(&summary)]);
            self.summary = summary;
        }
        self.last_diagnosis = Some(d);
    }

    /// What only the daemon knows, for the status of diagnosis `d`.
    fn status_facts(&self, d: &Diagnosis) -> crate::report::status::DaemonFacts {
        let incoming_dropped = self
            .link
            .as_ref()
            .map(|l| l.dropped.load(Ordering::Relaxed))
            .unwrap_or(0);
        crate::report::status::DaemonFacts {
            board_id: self.s.board.clone(),
            session: self.session,
            last_action: self.last_action.clone(),
            actions: d.profile.actions(),
            status_coalesced: self.status_dropped,
            incoming_dropped,
            boot_edit_pending_reboot: self.state_files.boot_edit_pending_reboot,
            provisioning: self.s.provisioning.clone(),
            takeover_notice: self.taken_over.is_some().then(|| self.takeover_notice()),
            commands: self.subscription.status_word().to_string(),
            interval_s: self.s.cfg.report.interval_s,
            broker: self.broker.clone(),
            subscription_notices: self.subscription.notice().into_iter().collect(),
        }
    }
}
