//! The daemon's state ([`Agent`]) and its outbox: command answers and acknowledgements handed
//! to the MQTT client in order, the status slot, and the rate-limited rejection log.

use super::clock::Clock;
use super::setup::Setup;
use super::work::Dispatch;
use super::REJECTIONS_LOGGED_PER_S;
use crate::action::gate::{CmdRef, Gate};
use crate::check::Status;
use crate::diagnose::Diagnosis;
use crate::mqtt::board_sig::SEAL_BYTES;
use crate::mqtt::command::CmdStatus;
use crate::mqtt::link::Link;
use crate::mqtt::topics;
use rumqttc::v5::mqttbytes::QoS;
use serde_json::{json, Value};
use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The journal's view of rejected commands: each one logged (action, cmd_id, reason) up to
/// [`REJECTIONS_LOGGED_PER_S`] a second, then one summary line per second of flood with the
/// count not logged, so a flood costs no journal write per message.
#[derive(Default)]
pub(super) struct RejectionLog {
    window: Option<Instant>,
    logged: u32,
    suppressed: u64,
    last_reason: String,
}

impl RejectionLog {
    /// Rejections logged or left unlogged in the current window: a summary may be due.
    pub fn pending(&self) -> bool {
        self.logged > 0 || self.suppressed > 0
    }

    pub fn log(&mut self, c: &CmdRef, reason: &str, what: &'static str) {
        self.roll();
        if self.logged < REJECTIONS_LOGGED_PER_S {
            self.logged += 1;
            tracing::warn!(action = %c.action, cmd_id = %c.cmd_id, %reason, "{what}");
        } else {
            self.suppressed += 1;
            reason.clone_into(&mut self.last_reason);
        }
    }

    /// Starts a new one-second window when the current one is over, summarising what it
    /// left unlogged (also called from housekeeping, so the summary comes when a flood ends).
    pub fn roll(&mut self) {
        if self
            .window
            .is_some_and(|w| w.elapsed() < Duration::from_secs(1))
        {
            return;
        }
        if self.suppressed > 0 {
            tracing::warn!(
                rejected = self.suppressed,
                last_reason = %self.last_reason,
                "more commands rejected in the last second (not logged one by one)"
            );
        }
        self.window = Some(Instant::now());
        self.logged = 0;
        self.suppressed = 0;
    }
}

/// What the agent hands the MQTT client, in order.
pub(super) enum Outbound {
    /// A QoS 1 message (a command's state): topic, payload, retained.
    Publish(String, Vec<u8>, bool),
    /// The acknowledgement of a handled incoming message.
    Ack(crate::mqtt::link::Ack),
}

/// The daemon's state between events.
pub(super) struct Agent {
    pub s: Setup,
    /// Where the routing reads the time (the system clock; a test clock in the unit tests).
    pub time: Arc<dyn Clock>,
    /// How blocking work is started (a thread pool; held for the test to finish in tests).
    pub dispatch: Dispatch,
    pub link: Option<Link>,
    pub connected: bool,
    pub session: u64,
    /// The pending update's record is being read on the blocking pool.
    pub settling_update: bool,
    /// The session counter last written to the state directory (written off the link's thread).
    pub session_saved: Arc<std::sync::Mutex<u64>>,
    pub gate: Gate,
    /// The latest report; its payload form is chosen when it is published.
    pub status_report: Option<crate::report::Report>,
    pub status_dirty: bool,
    /// MQTT 5 Maximum Packet Size from the last CONNACK, bytes.
    pub max_packet_bytes: Option<u32>,
    /// Publish only the compact status for the rest of this run (the broker dropped the
    /// connection right after a full one).
    pub compact_only: bool,
    /// When the last status went out, and whether it was the full form.
    pub last_status_sent: Option<(Instant, crate::report::StatusForm)>,
    /// The status that fitted no form, by size, so it is logged once.
    pub status_unfit_logged: Option<usize>,
    /// The connection-failure cause last logged (logged again only when it changes).
    pub last_cause: String,
    /// The broker kept ending this board's sessions (`Some(true)`: it said another client uses
    /// this board id, MQTT 5 reason 0x8E; `Some(false)`: kicks without a reason); cleared
    /// after a stable minute.
    pub taken_over: Option<bool>,
    /// Answers to clear once their command can no longer be live.
    pub sweep: super::sweep::Sweep,
    /// Where the command subscription stands on this connection (its SUBACK read).
    pub subscription: super::subscribe::Subscription,
    /// Commands left `executing` at start, answered `failed` once the broker had its say.
    pub interrupted: super::interrupted::Interrupted,
    /// The broker of the current connection (one of `[mqtt] url`'s list), redacted.
    pub broker: String,
    /// The first recent connection drop right after a full status (a second within a minute
    /// chooses the compact form).
    pub last_full_drop: Option<Instant>,
    /// `compact_only` was chosen because the broker dropped the connection right after a full
    /// status; a session takeover recognised later explains those drops, and undoes it.
    pub compact_for_drop: bool,
    /// When the current connection reached CONNACK.
    pub connected_since: Option<Instant>,
    pub statuses: BTreeMap<String, Status>,
    pub last_status_publish: Instant,
    pub last_action: Option<Value>,
    /// Answers and acknowledgements not yet taken by the client, in the order they were made:
    /// a message is acknowledged only after its answer. Bounded by the link's
    /// [`crate::mqtt::link::RECEIVE_MAXIMUM`]: the broker sends no more until these go out.
    pub outbox: VecDeque<Outbound>,
    pub rescan_wanted: bool,
    pub diagnosing: bool,
    pub ready_sent: bool,
    pub summary: String,
    pub status_dropped: u64,
    /// The state files as the last blocking job read them (boot edit, compaction counter).
    pub state_files: super::work::StateFiles,
    // Shared (Arc) with the action that uses it: never copied, and no copy of the whole
    // Diagnosis's Clone code in the binary.
    pub last_diagnosis: Option<Arc<Diagnosis>>,
    pub force_publish: bool,
    /// When discovery was last sent (at most once per [`super::HA_DISCOVERY_MIN_INTERVAL`]).
    pub last_discovery: Option<Instant>,
    /// When `online` was last put back after a spoofed availability, and whether one is owed.
    pub reassert: super::availability::Reassert,
    /// Rejection log lines, rate limited (a flood is summarised, not logged line by line).
    pub rejections: RejectionLog,
    /// The clock state the command path judges by, and when it was read (from the last
    /// diagnosis, or probed again at most every [`CLOCK_REPROBE`]): no file I/O per message.
    pub clock: Option<(crate::model::ClockSync, Instant)>,
    /// A fresh read of the clock state runs on the blocking pool.
    pub clock_reading: bool,
    /// When the running diagnosis started (the watchdog is fed only while diagnoses finish).
    pub diagnosis_started: Instant,
}

impl Agent {
    /// A fresh agent for `s`, its gate loaded from the state directory, reading the time from
    /// `time` and starting work through `dispatch`.
    pub fn new(s: Setup, time: Arc<dyn Clock>, dispatch: Dispatch) -> Agent {
        let mut gate = Gate::new(
            s.settings.policy.clone(),
            Some(s.state.clone()),
            s.settings.limits.compact_cooldown_s,
        );
        gate.set_limits(s.settings.limits.clone());
        // The daemon writes the ledger on its blocking pool, never on the link's thread.
        if matches!(dispatch, Dispatch::Blocking) {
            gate.save_behind();
        }
        if let Some(e) = gate.ledger_error() {
            tracing::error!(
                error = %e,
                "the command ledger is unreadable: signed commands are refused until it is repaired or removed"
            );
        }
        let session: u64 = s
            .state
            .load::<Value>(super::SESSION_FILE)
            .ok()
            .flatten()
            .and_then(|v| v.get("session").and_then(Value::as_u64))
            .unwrap_or(0);
        Agent {
            time,
            dispatch,
            link: None,
            connected: false,
            session,
            settling_update: false,
            session_saved: Arc::new(std::sync::Mutex::new(session)),
            gate,
            status_report: None,
            max_packet_bytes: None,
            compact_only: false,
            last_status_sent: None,
            status_unfit_logged: None,
            last_cause: String::new(),
            taken_over: None,
            last_full_drop: None,
            subscription: Default::default(),
            interrupted: Default::default(),
            broker: String::new(),
            sweep: Default::default(),
            compact_for_drop: false,
            connected_since: None,
            status_dirty: false,
            statuses: BTreeMap::new(),
            last_status_publish: Instant::now(),
            last_action: None,
            outbox: VecDeque::new(),
            rescan_wanted: false,
            diagnosing: true,
            ready_sent: false,
            summary: String::new(),
            status_dropped: 0,
            state_files: super::work::StateFiles::default(),
            last_diagnosis: None,
            force_publish: false,
            last_discovery: None,
            reassert: Default::default(),
            clock: None,
            clock_reading: false,
            rejections: RejectionLog::default(),
            diagnosis_started: Instant::now(),
            s,
        }
    }

    /// The status notice for [`Agent::taken_over`] (its reading, by what the broker said).
    pub fn takeover_notice(&self) -> String {
        match self.taken_over {
            Some(true) => format!("another client uses this board id ({})", self.s.board),
            _ => format!(
                "the broker keeps closing this board's connection soon after accepting it: \
                 another client with this board id ({}), or an overloaded broker",
                self.s.board
            ),
        }
    }

    /// Puts where the command subscription stands (`commands`, its notice) on the status now,
    /// and publishes it (the next diagnosis makes the same fields again).
    pub fn refresh_notices(&mut self) {
        let word = self.subscription.status_word();
        let notice = self.subscription.notice();
        if let Some(r) = &mut self.status_report {
            r.commands = Some(word.to_string());
            r.notices
                .retain(|n| !n.contains(super::subscribe::NOTICE_MARK));
            r.notices.extend(notice);
            self.status_dirty = true;
        }
    }

    /// Unix seconds now, by the agent's clock.
    pub fn now(&self) -> i64 {
        self.time.now_s()
    }

    /// Publishes `status` for the command `c`, with `extra` fields (`reason`, `result`).
    pub fn answer(&mut self, c: &CmdRef, status: CmdStatus, extra: Value) {
        let (t, p) = self.lifecycle(c, status, extra);
        self.send_retained(t, p);
    }

    /// Reads the board's clock state now (the time-sync files): at start, before the loop
    /// serves the link, and on the blocking pool after ([`super::jobs::clock_state`]).
    pub fn read_clock(&mut self) -> crate::model::ClockSync {
        let c = crate::probe::clock::probe(&self.s.root);
        self.clock = Some((c.clone(), Instant::now()));
        c
    }

    pub fn reply_topic(&self, c: &CmdRef) -> String {
        topics::command(&self.s.topic_root, &self.s.board, &c.action, &c.cmd_id)
    }

    pub fn lifecycle(&self, c: &CmdRef, status: CmdStatus, mut extra: Value) -> (String, Vec<u8>) {
        // Every answer leaves here: a reason or result quoting a log or a file loses its secrets.
        crate::sys::redact::redact_value(&mut extra);
        let mut body = json!({
            "status": status,
            "board": self.s.board,
            "action": c.action,
            "cmd_id": c.cmd_id,
            "time": crate::sys::time::rfc3339_now(),
        });
        if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
            for (k, v) in e {
                b.insert(k.clone(), v.clone());
            }
        }
        let topic = self.reply_topic(c);
        let payload = self.seal(&topic, serde_json::to_vec(&body).unwrap_or_default());
        (topic, payload)
    }

    /// `payload` sealed with the board's key for `topic` ([`crate::mqtt::board_sig`]), or as
    /// it is without one.
    pub fn seal(&self, topic: &str, payload: Vec<u8>) -> Vec<u8> {
        match &self.s.identity {
            Some(key) => crate::mqtt::board_sig::seal(key, topic, payload),
            None => payload,
        }
    }

    /// Queues a retained QoS 1 message; sent now if connected and nothing waits before it,
    /// else in order on a later flush (the next connect at the latest).
    pub fn send_retained(&mut self, topic: String, payload: Vec<u8>) {
        self.send(topic, payload, true);
    }

    /// Queues a QoS 1 message, retained or not, as [`Agent::send_retained`] does.
    pub fn send(&mut self, topic: String, payload: Vec<u8>, retain: bool) {
        if retain {
            let b = self.s.sweep_board(self.now());
            self.sweep.published(b, &topic, &payload);
        }
        self.outbox
            .push_back(Outbound::Publish(topic, payload, retain));
        self.flush_outbox();
    }

    /// Acknowledges a handled message, after every answer queued before it.
    pub fn send_ack(&mut self, ack: crate::mqtt::link::Ack) {
        self.outbox.push_back(Outbound::Ack(ack));
        self.flush_outbox();
    }

    /// Hands the outbox to the client in order, until its request queue is full.
    pub fn flush_outbox(&mut self) {
        if !self.connected {
            return;
        }
        let Some(l) = &self.link else { return };
        while let Some(next) = self.outbox.front() {
            let sent = match next {
                Outbound::Publish(t, p, retain) => l
                    .client
                    .try_publish(t.clone(), QoS::AtLeastOnce, *retain, p.clone())
                    .is_ok(),
                // A void acknowledgement (an ended connection) is simply dropped.
                Outbound::Ack(a) => l.try_ack(a).is_ok(),
            };
            if !sent {
                return;
            }
            self.outbox.pop_front();
        }
    }

    /// Work that housekeeping retries is waiting: a reply or acknowledgement the client's
    /// request queue refused, a status not yet published while connected, or rejections whose
    /// one-second summary may be due. Housekeeping then runs every [`super::HOUSEKEEPING_BUSY`].
    pub fn work_waiting(&self) -> bool {
        !self.outbox.is_empty()
            || (self.connected && self.status_dirty && self.status_report.is_some())
            || self.rejections.pending()
            || self.reassert.owed()
    }

    pub fn flush(&mut self) {
        if !self.connected {
            return;
        }
        self.flush_outbox();
        let Some(l) = &self.link else { return };
        if self.status_dirty {
            if let Some(r) = &self.status_report {
                let topic = topics::status(&self.s.topic_root, &self.s.board);
                // MQTT 5 Maximum Packet Size covers the whole PUBLISH: fixed header (≤ 5),
                // topic (2 + len), packet id (2) and the property length (1).
                // The seal adds at most SEAL_BYTES.
                let limit = self
                    .max_packet_bytes
                    .map(|m| (m as usize).saturating_sub(topic.len() + 10 + SEAL_BYTES))
                    .unwrap_or(usize::MAX);
                match crate::report::status_payload(r, limit, self.compact_only) {
                    Ok((payload, form)) => {
                        let payload = self.seal(&topic, payload);
                        if l.client
                            .try_publish(topic, QoS::AtLeastOnce, true, payload)
                            .is_ok()
                        {
                            self.status_dirty = false;
                            self.last_status_publish = Instant::now();
                            self.last_status_sent = Some((Instant::now(), form));
                        } else {
                            // Latest wins: the slot keeps only the newest status until the
                            // queue drains.
                            self.status_dropped += 1;
                        }
                    }
                    Err(size) => {
                        // Never retried in a loop: the next report tries again.
                        self.status_dirty = false;
                        if self.status_unfit_logged != Some(size) {
                            tracing::warn!(
                                status_bytes = size,
                                limit_bytes = limit,
                                "the status does not fit the broker's packet limit even in compact form; not published"
                            );
                            self.status_unfit_logged = Some(size);
                        }
                    }
                }
            }
        }
    }

    /// The main loop is making progress: no diagnosis has been stuck (in the kernel, say) for
    /// longer than `limit`. The systemd watchdog is fed only while this holds.
    pub fn making_progress(&self, limit: Duration) -> bool {
        !self.diagnosing || self.diagnosis_started.elapsed() < limit
    }
}

/// The Home Assistant names of this agent (discovery, buttons).
pub(super) fn agent_ha(agent: &Agent) -> crate::report::ha::HaContext<'_> {
    crate::report::ha::HaContext {
        prefix: &agent.s.cfg.home_assistant.discovery_prefix,
        topic_root: &agent.s.topic_root,
        board: &agent.s.board,
        model: agent
            .last_diagnosis
            .as_ref()
            .map(|d| d.report.model.as_str())
            .unwrap_or("edge board"),
        profile: agent
            .last_diagnosis
            .as_ref()
            .map(|d| d.profile.id.as_str())
            .unwrap_or("auto"),
        buttons: agent.gate.button_actions(),
    }
}
