//! `npu-agent run`: the daemon. Periodic checks, the planner's automatic actions, retained MQTT
//! status and availability, and remote commands — on one current-thread tokio runtime where the
//! main loop never blocks: checks and actions run on blocking threads and report back over a
//! channel, MQTT publishes use `try_publish` with a latest-wins status slot, and a separate task
//! owns the rumqttc event loop ([`crate::mqtt::link`]).

use crate::action::gate::{Admission, CmdRef, Gate, Job, Origin, Outcome};
use crate::action::{self, state::StateDir, ActionConfig};
use crate::check::Status;
use crate::config::Config;
use crate::diagnose::{self, Diagnosis, ProfileChoice};
use crate::mqtt::command::{self, Action, CmdStatus, Policy};
use crate::mqtt::link::{Link, LinkEvent, LinkOptions, MAX_INCOMING_PACKET_BYTES};
use crate::mqtt::{self, topics};
use crate::root::SysRoot;
use rumqttc::v5::mqttbytes::QoS;
use serde_json::{json, Value};
use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// State file with the seen command ids and per-action last runs.
pub const LEDGER_FILE: &str = crate::action::gate::LEDGER_FILE;
/// Shortest time between two Home Assistant discovery messages.
pub const HA_DISCOVERY_MIN_INTERVAL: Duration = Duration::from_secs(5);
/// How long the command path trusts a clock state read earlier before reading the board's
/// time-sync files again.
pub const CLOCK_REPROBE: Duration = Duration::from_secs(5);

/// Longest time between two check cycles (a changed finding is published within it), seconds.
pub const CHECK_PERIOD_MAX_S: u64 = 15;

/// State file with the MQTT session counter.
pub const SESSION_FILE: &str = "session.json";

/// The daemon's fatal errors (exit code 2).
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// Bad configuration.
    #[error("{0}")]
    Config(String),
    /// The tokio runtime could not start.
    #[error("cannot start the runtime: {0}")]
    Runtime(String),
}

/// Everything resolved at start from the config.
struct Setup {
    cfg: Config,
    root: SysRoot,
    board: String,
    topic_root: String,
    state: StateDir,
    actions: ActionConfig,
    policy: Policy,
    link: LinkOptions,
    profile: ProfileChoice,
    /// Log read positions and the evidence kept this boot (persisted as [`LOG_CURSORS_FILE`]).
    log_cursors: std::sync::Arc<std::sync::Mutex<crate::probe::evidence::LogCursors>>,
}

/// State file of the log cursors (kmsg sequence number, journal cursors, file inode + offset).
const LOG_CURSORS_FILE: &str = "log_cursors.json";

fn now_s() -> i64 {
    action::now_unix_s()
}

/// Reads a secret or key file the config names (`password_file`, `trusted_keys`, `ca_file`,
/// `cert_file`, `key_file`) under the root, as every board file is read: a symlink in a board
/// tree resolves inside it, never outside.
fn read_secret(root: &SysRoot, path: &str) -> Result<Vec<u8>, String> {
    root.read(path).map_err(|e| e.to_string())
}

fn setup(cfg: Config) -> Result<Setup, RunError> {
    let cerr = |m: String| RunError::Config(m);
    if cfg.mqtt.url.is_empty() {
        return Err(cerr(
            "mqtt.url is not set (in /etc/npu-agent/agent.toml, or NPU_AGENT_MQTT_URL)".into(),
        ));
    }
    let url = mqtt::parse_url(&cfg.mqtt.url).map_err(cerr)?;
    let root = SysRoot::new(&cfg.root);
    let board = if cfg.board_id == "auto" {
        let serial = root
            .read("/proc/device-tree/serial-number")
            .ok()
            .map(|b| crate::parse::devicetree::string(&b))
            .filter(|s| !s.is_empty());
        diagnose::auto_board_id(&root, serial.as_deref())
    } else {
        diagnose::sanitize_board_id(&cfg.board_id)
    };
    let mut trusted = Vec::new();
    for path in &cfg.security.trusted_keys {
        let text = String::from_utf8(read_secret(&root, path).map_err(cerr)?)
            .map_err(|_| cerr(format!("{path}: not text")))?;
        trusted
            .push(command::parse_verifying_key(&text).map_err(|e| cerr(format!("{path}: {e}")))?);
    }
    let tls = if url.tls {
        let ca_pem = if cfg.mqtt.ca_file.is_empty() {
            Vec::new()
        } else {
            read_secret(&root, &cfg.mqtt.ca_file).map_err(cerr)?
        };
        let client = match (cfg.mqtt.cert_file.is_empty(), cfg.mqtt.key_file.is_empty()) {
            (true, true) => None,
            (false, false) => Some((
                read_secret(&root, &cfg.mqtt.cert_file).map_err(cerr)?,
                crate::secret::Secret::from_file(
                    &read_secret(&root, &cfg.mqtt.key_file).map_err(cerr)?,
                ),
            )),
            _ => {
                return Err(cerr(
                    "mqtt.cert_file and mqtt.key_file go together (mTLS)".into(),
                ))
            }
        };
        Some(mqtt::tls_config(&mqtt::TlsFiles { ca_pem, client }).map_err(cerr)?)
    } else {
        None
    };
    let credentials = if cfg.mqtt.username.is_empty() {
        None
    } else {
        let password = if cfg.mqtt.password_file.is_empty() {
            crate::secret::Secret::default()
        } else {
            crate::secret::Secret::password_from_file(
                &read_secret(&root, &cfg.mqtt.password_file).map_err(cerr)?,
            )
        };
        Some((cfg.mqtt.username.clone(), password))
    };
    let topic_root = cfg.mqtt.topic_root.clone();
    let link = LinkOptions {
        url,
        tls,
        client_id: format!("npu-agent-{board}"),
        keep_alive: Duration::from_secs(cfg.mqtt.keep_alive_s.max(5)),
        credentials,
        last_will: Some((
            topics::availability(&topic_root, &board),
            b"offline".to_vec(),
        )),
        max_incoming_packet_bytes: MAX_INCOMING_PACKET_BYTES,
        connect_timeout_s: 5,
        lossless: true,
        ack_when_handled: true,
        protocol: crate::mqtt::link::Protocol::from_setting(&cfg.mqtt.protocol).0,
        auto_protocol: crate::mqtt::link::Protocol::from_setting(&cfg.mqtt.protocol).1,
    };
    let actions = ActionConfig {
        auto_compact: cfg.actions.auto_compact,
        compact_cooldown_s: cfg.actions.compact_cooldown_s,
        allow_reboot: cfg.actions.allow_reboot,
        reboot_command: cfg.actions.reboot_command.clone(),
        reboot_timeout_s: cfg.actions.reboot_timeout_s,
        ..ActionConfig::default()
    };
    let policy = Policy {
        board: board.clone(),
        trusted_keys: trusted,
        allow_unsigned: cfg.security.allow_unsigned.clone(),
        max_command_age_s: cfg.security.max_command_age_s,
        refused: crate::action::gate::config_refusals(&cfg.actions.disabled),
    };
    let state = StateDir::new(&root, &cfg.state_dir);
    let profile = ProfileChoice::parse(&cfg.profile);
    let log_cursors = match state.load(LOG_CURSORS_FILE) {
        Ok(c) => c.unwrap_or_default(),
        Err(e) => {
            tracing::warn!(error = %e, "log cursors unreadable: reading this boot's logs afresh");
            Default::default()
        }
    };
    let log_cursors = std::sync::Arc::new(std::sync::Mutex::new(log_cursors));
    Ok(Setup {
        cfg,
        root,
        board,
        topic_root,
        state,
        actions,
        policy,
        link,
        profile,
        log_cursors,
    })
}

/// Work finished on a blocking thread.
enum Done {
    Diagnosed(Result<Arc<Diagnosis>, String>),
    Action {
        job: Box<Job>,
        name: String,
        ok: bool,
        /// It acted (false: refused before touching anything).
        ran: bool,
        detail: String,
        result: Value,
        /// A rescan's diagnosis: published as is, not run again.
        diagnosis: Option<Arc<Diagnosis>>,
    },
}

/// Runs the daemon until SIGTERM/SIGINT. Returns the process exit code.
pub fn run(cfg: Config) -> Result<i32, RunError> {
    crate::logging::init();
    let s = setup(cfg)?;
    let rt = crate::runtime::current_thread().map_err(|e| RunError::Runtime(e.to_string()))?;
    Ok(rt.block_on(main_loop(s)))
}

/// Rejections logged one by one per second at most; the rest are counted and summarised.
pub const REJECTIONS_LOGGED_PER_S: u32 = 20;

/// Housekeeping period while work waits (a reply or status the client's request queue
/// refused, rejections not yet summarised): retried this often.
pub const HOUSEKEEPING_BUSY: Duration = Duration::from_millis(250);

/// Housekeeping period when nothing waits (link-stall check, watchdog feed, takeover reset):
/// this, or a quarter of the systemd watchdog period when that is shorter. An idle agent then
/// wakes for it 12 times a minute instead of 240.
pub const HOUSEKEEPING_IDLE: Duration = Duration::from_secs(5);

/// The journal's view of rejected commands: each one logged (action, cmd_id, reason) up to
/// [`REJECTIONS_LOGGED_PER_S`] a second, then one summary line per second of flood with the
/// count not logged, so a flood costs no journal write per message.
#[derive(Default)]
struct RejectionLog {
    window: Option<Instant>,
    logged: u32,
    suppressed: u64,
    last_reason: String,
}

impl RejectionLog {
    /// Rejections logged or left unlogged in the current window: a summary may be due.
    fn pending(&self) -> bool {
        self.logged > 0 || self.suppressed > 0
    }

    fn log(&mut self, c: &CmdRef, reason: &str, what: &'static str) {
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
    fn roll(&mut self) {
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
enum Outbound {
    /// A retained QoS 1 message (a command's state): topic, payload.
    Retained(String, Vec<u8>),
    /// The acknowledgement of a handled incoming message.
    Ack(crate::mqtt::link::Ack),
}

struct Agent {
    s: Setup,
    link: Option<Link>,
    connected: bool,
    session: u64,
    gate: Gate,
    /// The latest report; its payload form is chosen when it is published.
    status_report: Option<crate::report::Report>,
    status_dirty: bool,
    /// MQTT 5 Maximum Packet Size from the last CONNACK, bytes.
    max_packet_bytes: Option<u32>,
    /// Publish only the compact status for the rest of this run (the broker dropped the
    /// connection right after a full one).
    compact_only: bool,
    /// When the last status went out, and whether it was the full form.
    last_status_sent: Option<(Instant, crate::report::StatusForm)>,
    /// The status that fitted no form, by size, so it is logged once.
    status_unfit_logged: Option<usize>,
    /// The connection-failure cause last logged (logged again only when it changes).
    last_cause: String,
    /// Another client uses this board id (session taken over); cleared after a stable minute.
    taken_over: bool,
    /// `compact_only` was chosen because the broker dropped the connection right after a full
    /// status; a session takeover recognised later explains those drops, and undoes it.
    compact_for_drop: bool,
    /// When the current connection reached CONNACK.
    connected_since: Option<Instant>,
    statuses: BTreeMap<String, Status>,
    last_status_publish: Instant,
    last_action: Option<Value>,
    /// Answers and acknowledgements not yet taken by the client, in the order they were made:
    /// a message is acknowledged only after its answer. Bounded by the link's
    /// [`crate::mqtt::link::RECEIVE_MAXIMUM`]: the broker sends no more until these go out.
    outbox: VecDeque<Outbound>,
    rescan_wanted: bool,
    diagnosing: bool,
    ready_sent: bool,
    summary: String,
    status_dropped: u64,
    // Shared (Arc) with the action that uses it: never copied, and no copy of the whole
    // Diagnosis's Clone code in the binary.
    last_diagnosis: Option<Arc<Diagnosis>>,
    force_publish: bool,
    /// When discovery was last sent (at most once per [`HA_DISCOVERY_MIN_INTERVAL`]).
    last_discovery: Option<Instant>,
    /// Rejection log lines, rate limited (a flood is summarised, not logged line by line).
    rejections: RejectionLog,
    /// The clock state the command path judges by, and when it was read (from the last
    /// diagnosis, or probed again at most every [`CLOCK_REPROBE`]): no file I/O per message.
    clock: Option<(crate::check::clock::ClockSync, Instant)>,
    /// When the running diagnosis started (the watchdog is fed only while diagnoses finish).
    diagnosis_started: Instant,
}

impl Agent {
    /// The clock state for the command path: the last one read if it is younger than
    /// [`CLOCK_REPROBE`], else probed again (a command flood costs no file I/O per message).
    fn clock_state(&mut self) -> crate::check::clock::ClockSync {
        match &self.clock {
            Some((c, at)) if at.elapsed() < CLOCK_REPROBE => c.clone(),
            _ => {
                let c = crate::check::clock::probe(&self.s.root);
                self.clock = Some((c.clone(), Instant::now()));
                c
            }
        }
    }

    fn reply_topic(&self, c: &CmdRef) -> String {
        topics::command(&self.s.topic_root, &self.s.board, &c.action, &c.cmd_id)
    }

    fn lifecycle(&self, c: &CmdRef, status: CmdStatus, extra: Value) -> (String, Vec<u8>) {
        let mut body = json!({
            "status": status,
            "board": self.s.board,
            "action": c.action,
            "cmd_id": c.cmd_id,
            "time": rfc3339_now(),
        });
        if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
            for (k, v) in e {
                b.insert(k.clone(), v.clone());
            }
        }
        (
            self.reply_topic(c),
            serde_json::to_vec(&body).unwrap_or_default(),
        )
    }

    /// Queues a retained QoS 1 message; sent now if connected and nothing waits before it,
    /// else in order on a later flush (the next connect at the latest).
    fn send_retained(&mut self, topic: String, payload: Vec<u8>) {
        self.outbox.push_back(Outbound::Retained(topic, payload));
        self.flush_outbox();
    }

    /// Acknowledges a handled message, after every answer queued before it.
    fn send_ack(&mut self, ack: crate::mqtt::link::Ack) {
        self.outbox.push_back(Outbound::Ack(ack));
        self.flush_outbox();
    }

    /// Hands the outbox to the client in order, until its request queue is full.
    fn flush_outbox(&mut self) {
        if !self.connected {
            return;
        }
        let Some(l) = &self.link else { return };
        while let Some(next) = self.outbox.front() {
            let sent = match next {
                Outbound::Retained(t, p) => l
                    .client
                    .try_publish(t.clone(), QoS::AtLeastOnce, true, p.clone())
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
    /// one-second summary may be due. Housekeeping then runs every [`HOUSEKEEPING_BUSY`].
    fn work_waiting(&self) -> bool {
        !self.outbox.is_empty()
            || (self.connected && self.status_dirty && self.status_report.is_some())
            || self.rejections.pending()
    }

    fn flush(&mut self) {
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
                let limit = self
                    .max_packet_bytes
                    .map(|m| (m as usize).saturating_sub(topic.len() + 10))
                    .unwrap_or(usize::MAX);
                match crate::report::status_payload(r, limit, self.compact_only) {
                    Ok((payload, form)) => {
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

    fn set_report(&mut self, d: Arc<Diagnosis>, force: bool) {
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
        let edit: Option<action::state::BootEditState> = self
            .s
            .state
            .load(action::state::BOOT_EDIT_FILE)
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
        if self.taken_over {
            r.notices.push(format!(
                "another client uses this board id ({})",
                self.s.board
            ));
        }
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

fn rfc3339_now() -> String {
    crate::timefmt::rfc3339_now()
}

impl Agent {
    /// Starts a diagnosis on a blocking thread (the caller checked none is running).
    fn start_diagnosis(&mut self, tx: &mpsc::UnboundedSender<Done>) {
        self.diagnosing = true;
        self.diagnosis_started = Instant::now();
        spawn_diagnose(&self.s, tx);
    }

    /// The main loop is making progress: no diagnosis has been stuck (in the kernel, say) for
    /// longer than `limit`. The systemd watchdog is fed only while this holds.
    fn making_progress(&self, limit: Duration) -> bool {
        !self.diagnosing || self.diagnosis_started.elapsed() < limit
    }
}

fn spawn_diagnose(s: &Setup, tx: &mpsc::UnboundedSender<Done>) {
    let root = s.root.clone();
    let choice = s.profile.clone();
    let tx = tx.clone();
    let state = s.state.clone();
    let opts = diagnose::DiagnoseOptions {
        log_cursors: Some(s.log_cursors.clone()),
        ..Default::default()
    };
    spawn_blocking_job(Box::new(move || {
        let r = diagnose::diagnose_with(&root, &choice, &opts)
            .map(Arc::new)
            .map_err(|e| e.to_string());
        // Logs are read from the cursors on: persist them so a restart neither re-reads nor
        // counts a line twice.
        if let Some(c) = opts.log_cursors.as_ref().and_then(|c| c.lock().ok()) {
            if let Err(e) = state.save(LOG_CURSORS_FILE, &*c) {
                tracing::warn!(error = %e, "cannot persist the log cursors");
            }
        }
        let _ = tx.send(Done::Diagnosed(r));
    }));
}

/// Runs `job` on tokio's blocking thread pool. Every caller passes the same boxed closure type:
/// each distinct closure type given to `spawn_blocking` would make another copy of tokio's
/// blocking-task code (poll, harness, drop).
fn spawn_blocking_job(job: Box<dyn FnOnce() + Send>) {
    tokio::task::spawn_blocking(job);
}

fn spawn_action(s: &Setup, job: Job, d: Option<Arc<Diagnosis>>, tx: &mpsc::UnboundedSender<Done>) {
    let root = s.root.clone();
    let state = s.state.clone();
    let actions = s.actions.clone();
    let choice = s.profile.clone();
    let tx = tx.clone();
    spawn_blocking_job(Box::new(move || {
        let name = job.action.name().to_string();
        let (ok, ran, detail, result, diagnosis) = execute(
            &root,
            &state,
            &actions,
            &choice,
            job.cmd.as_ref(),
            job.action.clone(),
            d,
        );
        let _ = tx.send(Done::Action {
            job: Box::new(job),
            name,
            ok,
            ran,
            detail,
            result,
            diagnosis,
        });
    }));
}

/// Runs one action (blocking). Returns (succeeded, acted at all, reason or summary, result
/// object, and for a rescan the diagnosis it made).
fn execute(
    root: &SysRoot,
    state: &StateDir,
    actions: &ActionConfig,
    choice: &ProfileChoice,
    cmd: Option<&CmdRef>,
    a: Action,
    d: Option<Arc<Diagnosis>>,
) -> (bool, bool, String, Value, Option<Arc<Diagnosis>>) {
    if let Action::Rescan = a {
        return match diagnose::diagnose(root, choice) {
            Ok(d) => {
                let r = &d.report;
                let detail = format!("health {:?}", r.health);
                let fail: Vec<&str> = r
                    .findings
                    .iter()
                    .filter(|f| f.status == Status::Fail)
                    .map(|f| f.id.as_str())
                    .collect();
                let result = json!({"health": r.health, "fail": fail});
                (true, true, detail, result, Some(Arc::new(d)))
            }
            Err(e) => (false, true, e.to_string(), Value::Null, None),
        };
    }
    let (ok, ran, detail, result) = execute_action(root, state, actions, choice, cmd, a, d);
    (ok, ran, detail, result, None)
}

fn execute_action(
    root: &SysRoot,
    state: &StateDir,
    actions: &ActionConfig,
    choice: &ProfileChoice,
    cmd: Option<&CmdRef>,
    a: Action,
    d: Option<Arc<Diagnosis>>,
) -> (bool, bool, String, Value) {
    let now = now_s();
    match a {
        // Handled by `execute`, which keeps the diagnosis.
        Action::Rescan => (false, false, "rescan is run by execute".into(), Value::Null),
        Action::Compact { drop_caches } => {
            use crate::action::compact::{
                run_compaction, CompactOptions, CompactOutcome, RootKnobs,
            };
            let mut knobs = RootKnobs::new(root);
            let opts = CompactOptions {
                drop_caches,
                trigger: if cmd.is_some() {
                    "command".into()
                } else {
                    "planner".into()
                },
                ..CompactOptions::default()
            };
            let r = run_compaction(root, &mut knobs, &opts, state, now);
            let ok = r.outcome == CompactOutcome::Done;
            let ran = r.outcome != CompactOutcome::Refused;
            let detail = if ok {
                format!("compacted in {} ms", r.duration_ms)
            } else {
                r.reason.clone()
            };
            (
                ok,
                ran,
                detail,
                serde_json::to_value(&r).unwrap_or(Value::Null),
            )
        }
        Action::SetCma { size } => {
            use crate::action::atomic::RealStorage;
            use crate::action::cma::{cma_set, CmaSetOutcome};
            let d = match d {
                Some(d) => d,
                None => match diagnose::diagnose(root, choice) {
                    Ok(d) => Arc::new(d),
                    Err(e) => return (false, false, e.to_string(), Value::Null),
                },
            };
            let r = cma_set(root, &d, &size, false, &mut RealStorage, state, now);
            let ok = matches!(r.outcome, CmaSetOutcome::Written | CmaSetOutcome::Unchanged);
            let ran = r.outcome != CmaSetOutcome::Refused;
            let detail = if ok {
                r.explanation.join(" ")
            } else {
                r.error.clone()
            };
            let mut v = serde_json::to_value(&r).unwrap_or(Value::Null);
            if let Some(o) = v.as_object_mut() {
                o.insert(
                    "reboot_required".into(),
                    json!(r.outcome == CmaSetOutcome::Written),
                );
            }
            (ok, ran, detail, v)
        }
        Action::Reboot { reason } => {
            use crate::action::reboot::{request_reboot, ProcessRunner, RebootProgress};
            // Give the event loop a moment to put `executing` on the wire before the board goes
            // down (a lost `executing` is harmless: the retained init is ignored as a
            // re-delivery after the reboot, and `successful` follows).
            std::thread::sleep(Duration::from_millis(500));
            let id = cmd
                .map(|c| c.cmd_id.clone())
                .unwrap_or_else(|| format!("local-{now}"));
            match request_reboot(state, actions, &mut ProcessRunner, &id, &reason, now) {
                // The board is going down: the result is published after the next boot.
                RebootProgress::Pending(i) => (
                    true,
                    true,
                    "reboot started".into(),
                    json!({"pending": true, "boot_id_before": i.boot_id}),
                ),
                RebootProgress::Refused(r) => {
                    (false, false, r.to_string(), json!({"refused": true}))
                }
                RebootProgress::Failed(rec) => (
                    false,
                    true,
                    rec.detail.clone(),
                    serde_json::to_value(&rec).unwrap_or(Value::Null),
                ),
            }
        }
        Action::ReleaseNpu { model } => {
            let (ok, detail, v) = release_npu(root, model);
            (ok, true, detail, v)
        }
    }
}

/// hailo-ollama's port: `server.port` in its config (`/etc/xdg/hailo-ollama/hailo-ollama.json`),
/// else its default 8000.
pub fn hailo_ollama_port(root: &SysRoot) -> u16 {
    root.read_string("/etc/xdg/hailo-ollama/hailo-ollama.json")
        .ok()
        .and_then(|t| serde_json::from_str::<Value>(&t).ok())
        .and_then(|v| v.pointer("/server/port").and_then(Value::as_u64))
        .and_then(|p| u16::try_from(p).ok())
        .unwrap_or(8000)
}

/// One HTTP/1.1 request to 127.0.0.1 (hailo-ollama listens on localhost); returns (status, body).
fn http_local(port: u16, method: &str, path: &str, body: &str) -> Result<(u16, String), String> {
    use std::io::{Read, Write};
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let mut s = std::net::TcpStream::connect_timeout(&addr, Duration::from_secs(2))
        .map_err(|e| format!("hailo-ollama on 127.0.0.1:{port}: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(30)))
        .map_err(|e| e.to_string())?;
    let req = format!("{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len());
    s.write_all(req.as_bytes()).map_err(|e| e.to_string())?;
    let mut resp = Vec::new();
    s.take(1 << 20)
        .read_to_end(&mut resp)
        .map_err(|e| e.to_string())?;
    let text = String::from_utf8_lossy(&resp).into_owned();
    let code = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or("not an HTTP response")?;
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Ok((code, body))
}

/// Asks a local hailo-ollama to unload its model(s): `POST /api/generate` with `keep_alive: 0`
/// and no prompt (its unload form), for the named model or every model `/api/ps` lists.
fn release_npu(root: &SysRoot, model: Option<String>) -> (bool, String, Value) {
    let port = hailo_ollama_port(root);
    let models = match model {
        Some(m) => vec![m],
        None => match http_local(port, "GET", "/api/ps", "") {
            Ok((200, body)) => serde_json::from_str::<Value>(&body)
                .ok()
                .and_then(|v| v.get("models").and_then(Value::as_array).cloned())
                .unwrap_or_default()
                .iter()
                .filter_map(|m| {
                    m.get("name")
                        .or_else(|| m.get("model"))
                        .and_then(Value::as_str)
                        .map(str::to_string)
                })
                .collect(),
            Ok((code, _)) => return (false, format!("GET /api/ps answered {code}"), Value::Null),
            Err(e) => return (false, e, Value::Null),
        },
    };
    let mut unloaded = Vec::new();
    for m in &models {
        let body = json!({"model": m, "keep_alive": 0}).to_string();
        match http_local(port, "POST", "/api/generate", &body) {
            Ok((200, _)) => unloaded.push(m.clone()),
            Ok((code, b)) => {
                return (
                    false,
                    format!(
                        "unloading {m}: HTTP {code}: {}",
                        b.chars().take(200).collect::<String>()
                    ),
                    json!({"unloaded": unloaded}),
                )
            }
            Err(e) => return (false, e, json!({"unloaded": unloaded})),
        }
    }
    (
        true,
        format!("unloaded {} model(s)", unloaded.len()),
        json!({"port": port, "unloaded": unloaded}),
    )
}

fn load_or_default<T: serde::de::DeserializeOwned + Default>(state: &StateDir, name: &str) -> T {
    state.load(name).ok().flatten().unwrap_or_default()
}

async fn main_loop(s: Setup) -> i32 {
    let (tx, mut rx) = mpsc::unbounded_channel::<Done>();
    let gate = Gate::new(
        s.policy.clone(),
        Some(s.state.clone()),
        s.actions.compact_cooldown_s,
    );
    if let Some(e) = gate.ledger_error() {
        tracing::error!(
            error = %e,
            "the command ledger is unreadable: signed commands are refused until it is repaired or removed"
        );
    }
    let session: u64 = load_or_default::<Value>(&s.state, SESSION_FILE)
        .get("session")
        .and_then(Value::as_u64)
        .unwrap_or(0);
    let mut agent = Agent {
        link: None,
        connected: false,
        session,
        gate,
        status_report: None,
        max_packet_bytes: None,
        compact_only: false,
        last_status_sent: None,
        status_unfit_logged: None,
        last_cause: String::new(),
        taken_over: false,
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
        last_diagnosis: None,
        force_publish: false,
        last_discovery: None,
        clock: None,
        rejections: RejectionLog::default(),
        diagnosis_started: Instant::now(),
        s,
    };
    // Commands a crash left `executing`: finished as failed (published on connect).
    for (c, e) in agent.gate.finish_interrupted() {
        tracing::warn!(action = %c.action, cmd_id = %c.cmd_id, "command interrupted by an agent restart: failed");
        let (t, p) = agent.lifecycle(&c, e.status, json!({"reason": e.reason}));
        agent.send_retained(t, p);
    }
    // A reboot asked for before this start: did the board really reboot? And is a boot-file
    // edit now in effect?
    reconcile_reboot(&mut agent, crate::action::reboot::ReconcileWhen::Start);
    if let Err(e) = crate::action::cma::reconcile_boot_edit(&agent.s.state) {
        tracing::error!("cannot reconcile the boot-file edit state: {e}");
    }
    spawn_diagnose(&agent.s, &tx);
    agent.link = Some(Link::start(&agent.s.link));
    let mut interval = tokio::time::interval(Duration::from_secs(
        agent.s.cfg.report.interval_s.min(CHECK_PERIOD_MAX_S),
    ));
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    interval.tick().await;
    let watchdog = sd_notify::watchdog_enabled();
    let housekeeping_idle = watchdog.map_or(HOUSEKEEPING_IDLE, |w| {
        (w / 4).clamp(HOUSEKEEPING_BUSY, HOUSEKEEPING_IDLE)
    });
    let mut housekeeping_at = tokio::time::Instant::now() + HOUSEKEEPING_BUSY;
    let mut last_watchdog = Instant::now();
    let mut sigterm = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
    {
        Ok(s) => s,
        Err(e) => {
            tracing::error!("cannot watch SIGTERM: {e}");
            return 2;
        }
    };
    let signal = loop {
        if agent.work_waiting() {
            housekeeping_at = housekeeping_at.min(tokio::time::Instant::now() + HOUSEKEEPING_BUSY);
        }
        tokio::select! {
            _ = interval.tick() => {
                if !agent.diagnosing {
                    agent.start_diagnosis(&tx);
                }
                reconcile_reboot(&mut agent, crate::action::reboot::ReconcileWhen::Periodic);
            }
            Some(done) = rx.recv() => handle_done(&mut agent, done, &tx),
            ev = next_event(&mut agent.link) => {
                if let Some(ev) = ev {
                    let ack = match &ev {
                        LinkEvent::Message { ack, .. } => *ack,
                        _ => None,
                    };
                    handle_link(&mut agent, ev, &tx);
                    // Handled (a command has its answer queued): the broker may send the next.
                    if let Some(a) = ack {
                        agent.send_ack(a);
                    }
                }
            }
            _ = tokio::time::sleep_until(housekeeping_at) => {
                agent.flush();
                agent.rejections.roll();
                if let Some(w) = watchdog {
                    // Fed only while diagnoses finish: one stuck longer than the watchdog
                    // period lets systemd restart the agent.
                    if last_watchdog.elapsed() >= w / 2 && agent.making_progress(w) {
                        let _ = sd_notify::notify(&[sd_notify::NotifyState::Watchdog]);
                        last_watchdog = Instant::now();
                    }
                }
                restart_stalled_link(&mut agent);
                if agent.taken_over
                    && agent.connected_since.is_some_and(|t| t.elapsed() > Duration::from_secs(60))
                {
                    agent.taken_over = false;
                    tracing::info!("this board id's connection has been stable for a minute");
                }
                housekeeping_at = tokio::time::Instant::now() + housekeeping_idle;
            }
            _ = sigterm.recv() => break "SIGTERM",
            _ = tokio::signal::ctrl_c() => break "SIGINT",
        }
    };
    tracing::info!(signal, "stopping");
    // Clean stop: offline first (a DISCONNECT discards the last will), then disconnect.
    let _ = sd_notify::notify(&[sd_notify::NotifyState::Stopping]);
    let availability = topics::availability(&agent.s.topic_root, &agent.s.board);
    match agent.link.take() {
        Some(l) => {
            let queued = l.client.try_publish(
                availability.clone(),
                QoS::AtLeastOnce,
                true,
                b"offline".to_vec(),
            );
            let connected = agent.connected;
            l.shutdown(Duration::from_secs(2)).await;
            match queued {
                Ok(()) if connected => tracing::info!(
                    signal,
                    topic = %availability,
                    "stopped: published the retained availability offline and disconnected"
                ),
                Ok(()) => tracing::info!(
                    signal,
                    topic = %availability,
                    "stopped while not connected to the broker: its last will marks the board offline"
                ),
                Err(e) => tracing::warn!(
                    signal,
                    topic = %availability,
                    error = %e,
                    "stopped, but offline could not be queued: the broker's last will marks the board offline"
                ),
            }
        }
        None => tracing::info!(signal, "stopped (no MQTT link)"),
    }
    0
}

async fn next_event(link: &mut Option<Link>) -> Option<LinkEvent> {
    match link {
        Some(l) => l.events.recv().await,
        None => std::future::pending().await,
    }
}

fn restart_stalled_link(agent: &mut Agent) {
    let Some(l) = &agent.link else { return };
    // Both stamps on the monotonic clock: a wall-clock jump (NTP on a board without an RTC)
    // neither fakes a stall nor hides one.
    let idle_ms = crate::mqtt::link::now_ms().saturating_sub(l.progress_ms.load(Ordering::Relaxed));
    // With keep-alive pings the loop returns at least every keep-alive; three missed means stuck.
    if agent.connected && idle_ms > 3 * agent.s.link.keep_alive.as_millis() as u64 {
        tracing::warn!(
            idle_ms,
            "MQTT event loop made no progress; restarting the client"
        );
        if let Some(old) = agent.link.take() {
            old.abort();
        }
        agent.connected = false;
        agent.link = Some(Link::start(&agent.s.link));
    }
}

fn reconcile_reboot(agent: &mut Agent, when: crate::action::reboot::ReconcileWhen) {
    match crate::action::reboot::reconcile_state(&agent.s.state, &agent.s.actions, now_s(), when) {
        Ok(Some(rec)) => {
            let c = CmdRef {
                action: "reboot".into(),
                cmd_id: rec.cmd_id.clone(),
            };
            let status = match rec.result {
                crate::action::reboot::RebootResult::Successful => CmdStatus::Successful,
                crate::action::reboot::RebootResult::Failed => CmdStatus::Failed,
            };
            let extra = json!({"reason": rec.detail, "result": rec});
            agent
                .gate
                .settle_reboot(&rec.cmd_id, status == CmdStatus::Successful, &rec.detail);
            agent.last_action = Some(
                json!({"action": "reboot", "cmd_id": rec.cmd_id, "status": status, "time": rfc3339_now()}),
            );
            if !rec.cmd_id.starts_with("local-") {
                let (t, p) = agent.lifecycle(&c, status, extra);
                agent.send_retained(t, p);
            }
        }
        Ok(None) => {}
        Err(e) => tracing::error!("cannot reconcile the reboot state: {e}"),
    }
}

fn handle_link(agent: &mut Agent, ev: LinkEvent, tx: &mpsc::UnboundedSender<Done>) {
    match ev {
        LinkEvent::Connected {
            session_present,
            max_packet_bytes,
        } => {
            agent.connected = true;
            agent.connected_since = Some(Instant::now());
            agent.session += 1;
            agent.max_packet_bytes = max_packet_bytes;
            agent.last_cause.clear();
            tracing::info!(
                broker = %crate::mqtt::redact_url(&agent.s.cfg.mqtt.url),
                board = %agent.s.board,
                session = agent.session,
                session_present,
                protocol = agent.s.link.protocol.as_str(),
                max_packet_bytes,
                "connected"
            );
            let _ = agent
                .s
                .state
                .save(SESSION_FILE, &json!({"session": agent.session}));
            let Some(l) = &agent.link else { return };
            let avail = topics::availability(&agent.s.topic_root, &agent.s.board);
            let _ = l
                .client
                .try_publish(avail, QoS::AtLeastOnce, true, b"online".to_vec());
            if !session_present {
                // rumqttc keeps no subscriptions across a clean session (#250): subscribe again.
                // No Local: the agent's own answers on these topics do not come back to it.
                for f in topics::command_filters(&agent.s.topic_root, &agent.s.board) {
                    let _ = l.client.try_subscribe_no_local(f, QoS::AtLeastOnce);
                }
            }
            // Re-publish the status with the new session counter.
            if let Some(r) = &mut agent.status_report {
                r.session = agent.session;
                agent.status_dirty = true;
            }
            // Discovery names the model: wait for the first diagnosis if it has not come yet.
            if agent.s.cfg.home_assistant.enabled && agent.last_diagnosis.is_some() {
                crate::ha::on_connect(agent_ha(agent), &l.client);
                agent.last_discovery = Some(Instant::now());
            }
            agent.flush();
        }
        LinkEvent::ProtocolRefused { reason } => {
            tracing::warn!(
                broker = %crate::mqtt::redact_url(&agent.s.cfg.mqtt.url),
                %reason,
                "broker refuses MQTT 5 (closed, silent or a 3.1.1 CONNACK after CONNECT); speaking MQTT 3.1.1 from now on"
            );
            agent.last_cause.clear();
            agent.s.link.protocol = crate::mqtt::link::Protocol::V311;
            agent.connected = false;
            agent.link = Some(Link::start(&agent.s.link));
        }
        LinkEvent::SessionTakenOver { reason } => {
            tracing::warn!(
                broker = %crate::mqtt::redact_url(&agent.s.cfg.mqtt.url),
                board = %agent.s.board,
                %reason,
                "another client uses this board id: the broker ends this session when it connects; backing off instead of fighting for it (give each board a unique board_id)"
            );
            agent.taken_over = true;
            // The earlier drops were this takeover, not a status too large for the broker.
            if agent.compact_for_drop {
                agent.compact_for_drop = false;
                agent.compact_only = false;
                tracing::info!(
                    "the drops after a full status were this session takeover, not a packet limit; publishing the full status again"
                );
            }
            if let Some(r) = &mut agent.status_report {
                let note = format!("another client uses this board id ({})", agent.s.board);
                if !r.notices.contains(&note) {
                    r.notices.push(note);
                }
            }
        }
        LinkEvent::Disconnected {
            reason,
            cause,
            after_connack,
            retry_in_ms,
        } => {
            // A status bigger than 4 KiB followed by a drop within 2 s: the broker enforces a
            // packet limit it did not announce (MQTT 3.1.1, or mosquitto message_size_limit).
            // Compact from now on; the compact form is never retried in the full form, unless
            // the drops turn out to be a session takeover (another client with this board id:
            // MQTT 5 reason 0x8E, or kicks right after CONNACK), which is never read as a size.
            if let Some((at, form)) = agent.last_status_sent {
                if after_connack
                    && form == crate::report::StatusForm::Full
                    && at.elapsed() < Duration::from_secs(2)
                    && !agent.compact_only
                    && !agent.taken_over
                {
                    agent.compact_only = true;
                    agent.compact_for_drop = true;
                    tracing::warn!(
                        "the broker dropped the connection right after a full status; publishing the compact status from now on"
                    );
                }
            }
            if cause != agent.last_cause {
                tracing::warn!(
                    broker = %crate::mqtt::redact_url(&agent.s.cfg.mqtt.url),
                    protocol = agent.s.link.protocol.as_str(),
                    %cause,
                    %reason,
                    retry_in_ms,
                    "{}",
                    if agent.connected {
                        "MQTT connection lost"
                    } else {
                        "cannot connect to the MQTT broker"
                    }
                );
                agent.last_cause = cause;
            }
            agent.connected = false;
            agent.connected_since = None;
        }
        LinkEvent::Message { topic, payload, .. } => {
            if agent.s.cfg.home_assistant.enabled {
                match crate::ha::on_message(agent_ha(agent), &topic, &payload) {
                    crate::ha::HaMessage::NotMine => {}
                    crate::ha::HaMessage::Handled => return,
                    crate::ha::HaMessage::HomeAssistantOnline => {
                        send_discovery(agent);
                        return;
                    }
                    crate::ha::HaMessage::Press(action) => {
                        let name = action.name();
                        match agent
                            .gate
                            .admit_local(Origin::HomeAssistant, action, now_s())
                        {
                            Ok(()) => {
                                tracing::info!(
                                    action = name,
                                    origin = "home_assistant",
                                    "button press queued"
                                );
                                start_next(agent, tx);
                            }
                            Err(reason) => {
                                tracing::warn!(action = name, origin = "home_assistant", %reason, "button press rejected");
                            }
                        }
                        return;
                    }
                }
            }
            let Some(t) = topics::parse_command(&agent.s.topic_root, &topic) else {
                return;
            };
            // Clock hook: while the board's clock is known to be unsynchronised, an expiring
            // destructive command would be judged against a clock that may be days off.
            let clock = agent.clock_state();
            agent.gate.set_clock(if clock.is_unsynchronised() {
                crate::action::gate::ClockState::Unsynchronised
            } else {
                crate::action::gate::ClockState::Synchronised
            });
            if (t.board == agent.s.board || t.board == topics::ALL)
                && command::valid_cmd_id(&t.cmd_id)
                && !agent.gate.has_record(&t.cmd_id)
            {
                if let Some(reason) =
                    crate::check::clock::command_hold(&clock, &t.action, &payload, now_s())
                {
                    let c = CmdRef {
                        action: t.action.clone(),
                        cmd_id: t.cmd_id.clone(),
                    };
                    agent.rejections.log(&c, &reason, "command rejected");
                    let (tp, p) =
                        agent.lifecycle(&c, CmdStatus::Rejected, json!({"reason": reason}));
                    agent.send_retained(tp, p);
                    return;
                }
            }
            let admission = agent.gate.admit_command(&t, &payload, now_s());
            route_admission(agent, &t, admission, &clock, tx);
        }
    }
}

/// Publishes what the gate decided about an MQTT command, and logs it.
fn route_admission(
    agent: &mut Agent,
    t: &topics::CommandTopic,
    admission: Admission,
    clock: &crate::check::clock::ClockSync,
    tx: &mpsc::UnboundedSender<Done>,
) {
    // Only a well-formed id gets an answer on its own topic (the topic is built from it).
    let safe_id = |id: &str| command::valid_cmd_id(id);
    match admission {
        Admission::Ignored(why) => {
            tracing::debug!(action = %t.action, why, "command message ignored");
        }
        Admission::Rejected { cmd, reason } => {
            let c = cmd.unwrap_or_else(|| CmdRef {
                action: t.action.clone(),
                cmd_id: t.cmd_id.clone(),
            });
            let c = CmdRef {
                action: c.action,
                cmd_id: if safe_id(&c.cmd_id) {
                    c.cmd_id
                } else {
                    "invalid".into()
                },
            };
            let reason = crate::check::clock::explain_skew(clock, reason);
            agent.rejections.log(&c, &reason, "command rejected");
            if command::ACTIONS.contains(&c.action.as_str()) || t.board == agent.s.board {
                let (tp, p) = agent.lifecycle(&c, CmdStatus::Rejected, json!({"reason": reason}));
                agent.send_retained(tp, p);
            }
        }
        Admission::Replay {
            cmd,
            record,
            reason,
        } => {
            // The retained record keeps the real outcome; the replay is named beside it.
            agent
                .rejections
                .log(&cmd, &reason, "command replay refused");
            let mut extra = json!({"replay_rejected": reason});
            if let Some(r) = &record.reason {
                extra["reason"] = json!(r);
            }
            let (tp, p) = agent.lifecycle(&cmd, record.status, extra);
            agent.send_retained(tp, p);
        }
        Admission::Queued(Some(c)) => {
            // `executing` is published when it starts, after the policy checks of `start_next`.
            tracing::info!(action = %c.action, cmd_id = %c.cmd_id, "command accepted");
            start_next(agent, tx);
        }
        Admission::Queued(None) => start_next(agent, tx),
    }
}

/// Sends the Home Assistant discovery, at most once per [`HA_DISCOVERY_MIN_INTERVAL`] (a flood of
/// `online` announcements costs nothing).
fn send_discovery(agent: &mut Agent) {
    if agent
        .last_discovery
        .is_some_and(|t| t.elapsed() < HA_DISCOVERY_MIN_INTERVAL)
    {
        return;
    }
    let Some(l) = &agent.link else { return };
    crate::ha::publish_discovery(agent_ha(agent), &l.client);
    agent.last_discovery = Some(Instant::now());
}

fn agent_ha(agent: &Agent) -> crate::ha::HaContext<'_> {
    crate::ha::HaContext {
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

/// Starts the next admitted action, if none runs (one at a time, signed commands first, off
/// the main loop). Every policy refusal ([`preflight`]) is decided here, before `executing` is
/// published: a refused command is answered `rejected` with the reason and never `executing`.
fn start_next(agent: &mut Agent, tx: &mpsc::UnboundedSender<Done>) {
    loop {
        let Some(job) = agent.gate.next_job() else {
            return;
        };
        let d = match preflight(
            &agent.s,
            &agent.gate.policy().refused,
            &job.action,
            agent.last_diagnosis.clone(),
        ) {
            Ok(d) => d,
            Err(reason) => {
                agent.gate.refuse(&job, &reason);
                match &job.cmd {
                    Some(c) => {
                        agent.rejections.log(c, &reason, "command rejected");
                        let (tp, p) =
                            agent.lifecycle(c, CmdStatus::Rejected, json!({"reason": reason}));
                        agent.send_retained(tp, p);
                    }
                    None => tracing::warn!(
                        action = job.action.name(),
                        origin = job.origin.as_str(),
                        %reason,
                        "action refused"
                    ),
                }
                continue;
            }
        };
        if let Some(c) = &job.cmd {
            let (tp, p) = agent.lifecycle(c, CmdStatus::Executing, json!({}));
            agent.send_retained(tp, p);
        }
        tracing::info!(
            action = job.action.name(),
            origin = job.origin.as_str(),
            cmd_id = job.cmd.as_ref().map(|c| c.cmd_id.as_str()).unwrap_or("-"),
            "executing"
        );
        if matches!(job.action, Action::Reboot { .. }) {
            // The executing state must reach the broker before the board goes down.
            agent.flush();
        }
        spawn_action(&agent.s, job, d, tx);
        return;
    }
}

/// The policy refusals of `action`, decided without acting: an action this board or the
/// config refuses (`refused`: `[actions] disabled`, the profile's refusals), a reboot its guards
/// refuse (`allow_reboot = false`, an empty `reboot_command`, one pending or too recent, an
/// unverified boot edit, no `boot_id`), a `set_cma` size out of range or a boot file it cannot
/// edit (a dry run of `cma set`), a `release_npu` on a board without hailo-ollama. `d` is the
/// last diagnosis; `set_cma` and `release_npu` make one when there is none yet, and it is
/// returned for the action to use.
///
/// Errors: the reason, published as the command's `rejected` reason.
fn preflight(
    s: &Setup,
    refused: &BTreeMap<String, String>,
    action: &Action,
    d: Option<Arc<Diagnosis>>,
) -> Result<Option<Arc<Diagnosis>>, String> {
    if let Some(why) = refused.get(action.name()) {
        return Err(why.clone());
    }
    let diagnosis = |d: Option<Arc<Diagnosis>>| -> Result<Arc<Diagnosis>, String> {
        match d {
            Some(d) => Ok(d),
            None => diagnose::diagnose(&s.root, &s.profile)
                .map(Arc::new)
                .map_err(|e| e.to_string()),
        }
    };
    match action {
        Action::Reboot { .. } => {
            crate::action::reboot::reboot_preflight(&s.state, &s.actions, now_s())
                .map_err(|r| r.to_string())?;
            Ok(d)
        }
        Action::SetCma { size } => {
            use crate::action::atomic::RealStorage;
            use crate::action::cma::{cma_set, CmaSetOutcome};
            let d = diagnosis(d)?;
            let r = cma_set(&s.root, &d, size, true, &mut RealStorage, &s.state, now_s());
            if r.outcome == CmaSetOutcome::Refused {
                return Err(r.error);
            }
            Ok(Some(d))
        }
        Action::ReleaseNpu { .. } => {
            let d = diagnosis(d)?;
            if let Some(why) = d.profile.refuses_action(action.name()) {
                return Err(why);
            }
            Ok(Some(d))
        }
        Action::Compact { .. } | Action::Rescan => Ok(d),
    }
}

fn handle_done(agent: &mut Agent, done: Done, tx: &mpsc::UnboundedSender<Done>) {
    match done {
        Done::Diagnosed(Ok(d)) => {
            agent.diagnosing = false;
            // Read during this diagnosis (counted from its start, the conservative age).
            agent.clock = Some((d.snapshot.clock.clone(), agent.diagnosis_started));
            // What this board's profile refuses (release_npu without hailo-ollama): the gate
            // rejects it for every origin, and no button offers it.
            agent.gate.set_refused(crate::order::btree_map(
                command::ACTIONS
                    .iter()
                    .filter_map(|a| d.profile.refuses_action(a).map(|r| (a.to_string(), r))),
            ));
            // The planner's automatic actions (compaction when it helps) go through the gate,
            // which allows one per cooldown whatever the outcome: a compaction that fails or is
            // refused (no CONFIG_COMPACTION, read-only /proc/sys) must not retry on every rescan.
            if agent.s.actions.auto_compact && !agent.gate.is_running() {
                let mut compact: action::state::CompactState =
                    load_or_default(&agent.s.state, action::state::COMPACT_FILE);
                let ps = crate::action::planner::PlannerState {
                    compact: compact.clone(),
                };
                let plan = crate::action::planner::plan(
                    &d.report.findings,
                    &d.profile,
                    &ps,
                    &agent.s.actions,
                    now_s(),
                );
                // The trigger cleared: the attempt counter starts again.
                if plan.reset_compact_attempts && compact.consecutive_attempts != 0 {
                    compact.consecutive_attempts = 0;
                    if let Err(e) = agent.s.state.save(action::state::COMPACT_FILE, &compact) {
                        tracing::error!(error = %e, "cannot reset the compaction attempt counter");
                    }
                }
                for p in plan.run {
                    if p.action == crate::action::planner::ActionKind::Compact {
                        let a = Action::Compact {
                            drop_caches: p.drop_caches,
                        };
                        match agent.gate.admit_local(Origin::Planner, a, now_s()) {
                            Ok(()) => start_next(agent, tx),
                            Err(reason) => {
                                tracing::debug!(%reason, "automatic compaction not queued")
                            }
                        }
                    }
                }
            }
            let first = agent.last_diagnosis.is_none();
            let force = std::mem::take(&mut agent.force_publish);
            agent.set_report(d, force);
            if first && agent.connected && agent.s.cfg.home_assistant.enabled {
                if let Some(l) = &agent.link {
                    crate::ha::on_connect(agent_ha(agent), &l.client);
                    agent.last_discovery = Some(Instant::now());
                }
            }
            if !agent.ready_sent {
                let _ = sd_notify::notify(&[sd_notify::NotifyState::Ready]);
                agent.ready_sent = true;
            }
            agent.flush();
            if agent.rescan_wanted {
                agent.rescan_wanted = false;
                agent.start_diagnosis(tx);
            }
        }
        Done::Diagnosed(Err(e)) => {
            agent.diagnosing = false;
            tracing::error!(error = %e, "diagnosis failed");
        }
        Done::Action {
            job,
            name,
            ok,
            ran,
            detail,
            result,
            diagnosis,
        } => {
            agent.gate.finish(
                &job,
                &Outcome {
                    ok,
                    ran,
                    detail: detail.clone(),
                },
            );
            let status = if ok {
                CmdStatus::Successful
            } else {
                CmdStatus::Failed
            };
            let reboot_pending = name == "reboot" && ok;
            let cmd_id = job.cmd.as_ref().map(|c| c.cmd_id.as_str()).unwrap_or("-");
            if ok {
                tracing::info!(action = %name, origin = job.origin.as_str(), cmd_id, %detail, "action successful");
            } else {
                tracing::warn!(action = %name, origin = job.origin.as_str(), cmd_id, reason = %detail, "action failed");
            }
            agent.last_action = Some(
                json!({"action": name, "status": if reboot_pending { CmdStatus::Executing } else { status }, "detail": detail, "time": rfc3339_now(), "cmd_id": job.cmd.as_ref().map(|c| c.cmd_id.clone())}),
            );
            if let Some(c) = &job.cmd {
                if !reboot_pending {
                    let extra = if ok {
                        json!({"result": result})
                    } else {
                        json!({"reason": detail, "result": result})
                    };
                    let (t, p) = agent.lifecycle(c, status, extra);
                    agent.send_retained(t, p);
                }
            }
            // Every action changes what the checks see: publish a fresh diagnosis now (a rescan
            // brought its own; others get one).
            agent.force_publish = true;
            if let Some(d) = diagnosis {
                handle_done(agent, Done::Diagnosed(Ok(d)), tx);
            } else if agent.diagnosing {
                agent.rescan_wanted = true;
            } else {
                agent.start_diagnosis(tx);
            }
            start_next(agent, tx);
        }
    }
}
