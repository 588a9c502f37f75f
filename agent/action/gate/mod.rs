//! The one gate every action passes, whatever its origin (an MQTT command, a Home Assistant
//! button, the planner, the command line): the allow-list and the board's refusals, per-action
//! rate limits, the bounded queue, the planner's cooldown, and the command ledger. The daemon
//! only routes events here and publishes what the gate answers.
//!
//! Invariants (each has a regression test in this module or in `tests/`):
//! - A signed command executes at most once: its `cmd_id` stays in the ledger until its
//!   `expires_at` plus [`CLOCK_SKEW_S`] has passed; unsigned ids are capped at
//!   [`MAX_UNSIGNED_IDS`] and evicting them never touches a signed id.
//! - An unreadable ledger fails closed: signed commands are refused (naming the reason), the
//!   file is left as it is for the operator, and nothing overwrites it.
//! - Only what really runs is recorded: a command refused as `busy`, or whose id could not be
//!   saved, keeps neither its id nor the rate-limit slot; an action refused before acting (a
//!   `set_cma` size above the RAM) gives its slot back. (The daemon saves the ledger behind,
//!   [`Gate::save_behind`]: there an id the disk refused is found in the job's preflight, and
//!   the command ends `rejected` with its slot given back and its id kept in memory.)
//! - A command's id is on disk before its action acts.
//! - Every admitted command gets a final state; one left `executing` by a crash is finished as
//!   `failed: agent restarted` on the next start (a reboot is settled by its `boot_id` instead).
//! - A replay never overwrites the record of the real outcome: it is answered with that record.
//! - Signed commands have their own queue lane and rate-limit slots: unsigned traffic cannot
//!   make them `busy` or rate limited.

use crate::action::limits::Limits;
use crate::action::state::StateDir;
use crate::model::action::{Action, ActionKind};
use crate::model::ClockSync;
use crate::mqtt::command::{self, CmdStatus, Policy, Verdict, CLOCK_SKEW_S};
use crate::mqtt::incoming::Incoming;
use crate::mqtt::topics::ALL;
use serde::Serialize;
use std::collections::{BTreeMap, VecDeque};

mod ledger;
mod replay;
mod save;
pub use ledger::{ledger_key, Ledger, LedgerEntry};
pub use save::{read_cli_runs, LedgerSave, LedgerWriter};

/// State file with the command ledger.
pub const LEDGER_FILE: &str = "commands.json";
/// Most unsigned command ids remembered (the oldest unsigned one goes first; signed ids are
/// never evicted by count).
pub const MAX_UNSIGNED_IDS: usize = 2000;
/// Most signed commands waiting to run; more are rejected `busy`.
pub const MAX_QUEUED_SIGNED: usize = 8;
/// Most other actions (unsigned commands, buttons, planner) waiting to run.
pub const MAX_QUEUED_OTHER: usize = 8;
/// Longest reason kept in the ledger (bytes).
const MAX_REASON_BYTES: usize = 300;

/// Where an action request came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Origin {
    /// A command on `<root>/<board>/cmd/...` or `<root>/all/cmd/...`.
    Mqtt,
    /// A Home Assistant button press.
    HomeAssistant,
    /// The daemon's planner (automatic compaction).
    Planner,
    /// `npu-agent compact` / `cma set` on the command line (its own process).
    Cli,
}

impl Origin {
    /// Lowercase name for logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Origin::Mqtt => "mqtt",
            Origin::HomeAssistant => "home_assistant",
            Origin::Planner => "planner",
            Origin::Cli => "cli",
        }
    }
}

/// A command's reply address: `<root>/<board>/cmd/<action>/<cmd_id>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CmdRef {
    /// Action name on the topic.
    pub action: String,
    /// Command id on the topic.
    pub cmd_id: String,
}

/// The ledger slot recording when `action` last ran from the command line (`compact/cli`).
/// Written by the `npu-agent` process the admin ran, kept by the daemon's gate when it saves
/// the ledger, and read by the planner's cooldown.
pub fn cli_slot(action: ActionKind) -> String {
    format!("{action}/cli")
}

/// The refusals `[actions] disabled` asks for: action → the reason every origin is given.
pub fn config_refusals(disabled: &[ActionKind]) -> BTreeMap<ActionKind, String> {
    std::collections::BTreeMap::from_iter(disabled.iter().map(|a| {
        (
            *a,
            format!("{a} is disabled on this board ([actions] disabled in the agent's config)"),
        )
    }))
}

/// Takes the command line's runs ([`cli_slot`]) of `disk` into `ledger` (the later time of
/// each); returns them.
fn cli_slot_merge(ledger: &mut Ledger, disk: Ledger) -> BTreeMap<String, i64> {
    let cli: BTreeMap<String, i64> = disk
        .last_run
        .into_iter()
        .filter(|(slot, _)| slot.ends_with("/cli"))
        .collect();
    for (slot, at) in &cli {
        let e = ledger.last_run.entry(slot.clone()).or_insert(*at);
        *e = (*e).max(*at);
    }
    cli
}

/// Rate-limit slot of an action: signed and unsigned traffic never share one.
pub fn rate_slot(action: ActionKind, signed: bool) -> String {
    if signed {
        action.as_str().to_string()
    } else {
        format!("{action}/unsigned")
    }
}

/// An admitted action waiting for (or in) execution.
#[derive(Debug, Clone, PartialEq)]
pub struct Job {
    /// Who asked.
    pub origin: Origin,
    /// The command's reply address (MQTT commands only).
    pub cmd: Option<CmdRef>,
    /// What to do.
    pub action: Action,
    /// Verified by a trusted key.
    pub signed: bool,
    /// Rate-limit slot taken, and its value before (given back when the action did not run).
    slot: Option<(String, Option<i64>)>,
}

/// What the gate did with a request.
#[derive(Debug, Clone, PartialEq)]
pub enum Admission {
    /// Queued: `executing` is published when it starts, after the daemon's policy checks.
    Queued(Option<CmdRef>),
    /// Refused before acting: publish `rejected` with the reason (for a command).
    Rejected {
        /// Reply address (MQTT commands only).
        cmd: Option<CmdRef>,
        /// Why.
        reason: String,
    },
    /// A used cmd_id with different bytes: answer with the recorded entry, never overwrite it.
    Replay {
        /// Reply address.
        cmd: CmdRef,
        /// What really happened to that id.
        record: LedgerEntry,
        /// Why this message is not run.
        reason: String,
    },
    /// Refused because the board's clock is not synchronised (an expiring destructive command):
    /// publish `rejected` with the reason, which already says which clock looks off.
    ClockHeld {
        /// Reply address.
        cmd: CmdRef,
        /// Why.
        reason: String,
    },
    /// The same command again (its retained init re-delivered) after it finished: publish the
    /// recorded final state again, since the first one may never have reached the broker.
    Answered {
        /// Reply address.
        cmd: CmdRef,
        /// The recorded final state.
        record: LedgerEntry,
    },
    /// Nothing to do or publish (a clear, an echo, a re-delivery of a running command).
    Ignored(&'static str),
}

/// How an executed action ended.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    /// It did what was asked.
    pub ok: bool,
    /// It acted (false: refused before touching anything, e.g. a size above the RAM).
    pub ran: bool,
    /// Reason or summary.
    pub detail: String,
    /// Its final state is published after the agent's next start (a reboot under way, an
    /// update installed): the command stays `executing`.
    pub pending: bool,
}

/// Whether the board's clock is trusted for expiring commands. The hook a `clock.sync` check
/// sets; until one does, the clock counts as synchronised.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClockState {
    /// Time arithmetic on `issued_at` / `expires_at` is meaningful.
    Synchronised,
    /// Not known to be right: signed (expiring) commands are refused and no id is pruned.
    Unsynchronised,
}

/// The gate and executor queue. See the module docs.
#[derive(Debug)]
pub struct Gate {
    policy: Policy,
    /// The refusals the gate was made with (the config's `[actions] disabled`); kept whatever
    /// [`Gate::set_refused`] adds.
    base_refused: BTreeMap<ActionKind, String>,
    /// The board's own refusals ([`Gate::set_refused`]), kept across a config reload.
    board_refused: BTreeMap<ActionKind, String>,
    ledger: Ledger,
    /// Why the ledger could not be read (signed commands are refused while set).
    ledger_error: Option<String>,
    /// No ledger file existed: its creation time is the first message's (on a synchronised
    /// clock).
    fresh_ledger: bool,
    /// The caller's monotonic seconds ([`MessageContext::mono_s`]) and the wall time first seen
    /// with them: ids are pruned by a wall time that never runs ahead of the monotonic one.
    mono: Option<(u64, Option<(u64, i64)>)>,
    state: Option<StateDir>,
    signed_queue: VecDeque<Job>,
    other_queue: VecDeque<Job>,
    running: bool,
    clock: ClockState,
    /// What the board's files last said about its clock ([`MessageContext::clock`]).
    clock_sync: Option<ClockSync>,
    limits: Limits,
    last_planner_compact: Option<i64>,
    /// Set: the ledger is saved behind ([`Gate::save_behind`]), through this writer.
    writer: Option<std::sync::Arc<LedgerWriter>>,
    /// The number of the gate's last change of the ledger (saved behind).
    gen: u64,
    /// A change not yet handed out as a [`LedgerSave`].
    unsaved: bool,
}

/// What the gate judges one MQTT message by, besides the message: passed with each message.
#[derive(Debug, Clone, Default)]
pub struct MessageContext {
    /// Unix seconds now, by the board's clock.
    pub now: i64,
    /// The caller's monotonic clock, seconds (`None`: the last reading stands; without any,
    /// the wall clock is trusted as it is).
    pub mono_s: Option<u64>,
    /// What the board's files say about its clock (`None`: the last reading stands; without
    /// any, the clock counts as synchronised).
    pub clock: Option<ClockSync>,
}

impl MessageContext {
    /// The context of a message at `now` (Unix seconds) with no new clock reading.
    pub fn at(now: i64) -> MessageContext {
        MessageContext {
            now,
            ..MessageContext::default()
        }
    }
}

impl Gate {
    /// A gate with `policy`, its ledger loaded from `state` ([`LEDGER_FILE`]; `None`: in memory
    /// only). A ledger that exists but cannot be read or decoded is kept aside: the gate then
    /// refuses signed commands and never writes the file ([`Gate::ledger_error`]).
    pub fn new(policy: Policy, state: Option<StateDir>, compact_cooldown_s: u64) -> Gate {
        let (mut ledger, ledger_error, fresh_ledger) = match &state {
            None => (Ledger::default(), None, false),
            Some(s) => match s.load::<Ledger>(LEDGER_FILE) {
                Ok(None) => (Ledger::default(), None, true),
                Ok(Some(l)) => (l, None, false),
                Err(e) => (Ledger::default(), Some(e.to_string()), false),
            },
        };
        ledger.upgrade(policy.max_command_age_s);
        Gate {
            base_refused: policy.refused.clone(),
            board_refused: BTreeMap::new(),
            policy,
            ledger,
            ledger_error,
            fresh_ledger,
            mono: None,
            state,
            signed_queue: VecDeque::new(),
            other_queue: VecDeque::new(),
            running: false,
            clock: ClockState::Synchronised,
            clock_sync: None,
            limits: Limits {
                compact_cooldown_s,
                ..Limits::default()
            },
            last_planner_compact: None,
            writer: None,
            gen: 0,
            unsaved: false,
        }
    }

    /// Replaces the limits (the cooldown and the rate limits, [`Limits`]).
    pub fn set_limits(&mut self, limits: Limits) {
        self.limits = limits;
    }

    /// The policy.
    pub fn policy(&self) -> &Policy {
        &self.policy
    }

    /// The ledger (read only).
    pub fn ledger(&self) -> &Ledger {
        &self.ledger
    }

    /// Why the ledger is unreadable, when it is (signed commands are refused meanwhile).
    pub fn ledger_error(&self) -> Option<&str> {
        self.ledger_error.as_deref()
    }

    /// Replaces the policy (a config reload): trusted keys, `allow_unsigned`, the command age
    /// and the config's refusals; the refusals a diagnosis added ([`Gate::set_refused`]) stay.
    pub fn set_policy(&mut self, policy: Policy) {
        self.base_refused = policy.refused.clone();
        self.policy = policy;
        self.set_refused(self.board_refused.clone());
    }

    /// Sets the actions this board refuses (action → reason published as is), e.g. the
    /// profile's [`crate::profile::Profile::refuses_action`] after a diagnosis. The refusals the
    /// gate was made with (the config's) stay, with their own reason.
    pub fn set_refused(&mut self, refused: BTreeMap<ActionKind, String>) {
        self.board_refused = refused.clone();
        let mut all = self.base_refused.clone();
        for (a, why) in refused {
            all.entry(a).or_insert(why);
        }
        self.policy.refused = all;
    }

    /// Takes what the board's files say about its clock: the one clock check of the command
    /// path. While it is not synchronised, signed commands are refused, no id is pruned, and an
    /// expiring destructive command ([`crate::action::clock_hold::command_hold`]) is rejected with the
    /// reason before anything else is judged against a clock that may be days off.
    fn read_clock_sync(&mut self, clock: ClockSync) {
        self.clock = if clock.is_unsynchronised() {
            ClockState::Unsynchronised
        } else {
            ClockState::Synchronised
        };
        self.clock_sync = Some(clock);
    }

    /// The clock hold of a command for this board (or `all`) on a fresh, well-formed id: the
    /// reason to reject it, when the clock is not synchronised (see [`MessageContext::clock`]).
    fn clock_hold(&self, m: &Incoming, now: i64) -> Option<String> {
        let clock = self.clock_sync.as_ref()?;
        let topic = &m.topic;
        let fresh = (topic.board == self.policy.board || topic.board == ALL)
            && command::valid_cmd_id(&topic.cmd_id)
            && !self.has_record(&topic.cmd_id);
        if !fresh {
            return None;
        }
        crate::action::clock_hold::command_hold(clock, topic.kind?, m, now)
    }

    /// Sets whether the clock is trusted (the `clock.sync` hook).
    pub fn set_clock(&mut self, clock: ClockState) {
        self.clock = clock;
    }

    /// Actions waiting (not counting the one running).
    pub fn queued(&self) -> usize {
        self.signed_queue.len() + self.other_queue.len()
    }

    /// An action is running.
    pub fn is_running(&self) -> bool {
        self.running
    }

    /// Actions a Home Assistant button may offer: the unsigned allow-list, less what this board
    /// refuses, among `compact`, `rescan` and `fix` (every firing finding's planned fix; only
    /// where the config lists `fix`, which it does not by default).
    pub fn button_actions(&self) -> Vec<ActionKind> {
        ActionKind::ALL
            .into_iter()
            .filter(|a| a.button_press().is_some())
            .filter(|a| self.policy.allow_unsigned.contains(a))
            .filter(|a| !self.policy.refused.contains_key(a))
            .collect()
    }

    fn persist(&mut self) -> Result<(), String> {
        if let Some(e) = &self.ledger_error {
            return Err(format!("the command ledger is unreadable ({e})"));
        }
        if self.writer.is_some() {
            self.gen += 1;
            self.unsaved = true;
            return Ok(());
        }
        self.merge_cli_runs();
        match &self.state {
            Some(s) => s.save(LEDGER_FILE, &self.ledger).map_err(|e| e.to_string()),
            None => Ok(()),
        }
    }

    /// Takes the command line's runs ([`cli_slot`]) from the ledger file: another process (the
    /// admin's `npu-agent compact`) may have recorded one since this gate read it.
    fn merge_cli_runs(&mut self) {
        let Some(s) = &self.state else { return };
        if let Ok(Some(disk)) = s.load::<Ledger>(LEDGER_FILE) {
            cli_slot_merge(&mut self.ledger, disk);
        }
    }

    /// Records that `action` ran from the command line at `now` ([`cli_slot`]), re-reading the
    /// ledger first so nothing the daemon saved meanwhile is lost.
    ///
    /// Errors: the ledger cannot be read or saved (the reason).
    pub fn record_local(&mut self, action: &Action, now: i64) -> Result<(), String> {
        if let Some(s) = &self.state {
            let mut fresh = s
                .load::<Ledger>(LEDGER_FILE)
                .map_err(|e| format!("the command ledger is unreadable ({e})"))?
                .unwrap_or_default();
            fresh.upgrade(self.policy.max_command_age_s);
            self.ledger = fresh;
        }
        self.ledger.last_run.insert(cli_slot(action.kind()), now);
        self.persist()
    }

    fn lane_full(&self, signed: bool) -> Option<String> {
        let (len, max) = if signed {
            (self.signed_queue.len(), MAX_QUEUED_SIGNED)
        } else {
            (self.other_queue.len(), MAX_QUEUED_OTHER)
        };
        (len >= max).then(|| format!("busy: {len} actions are queued; retry later"))
    }

    fn rate_check(&self, action: ActionKind, signed: bool, now: i64) -> Result<String, String> {
        let slot = rate_slot(action, signed);
        if let Some(last) = self.ledger.last_run.get(&slot) {
            // A run recorded in the future (the clock was ahead, then set right) counts as now:
            // the wait is one window at most, never the size of the clock step.
            let ago = now.saturating_sub(*last).max(0);
            let wait = self.limits.rate_limit_s(action, signed).saturating_sub(ago);
            if wait > 0 {
                return Err(format!(
                    "rate limited: {action} ran {ago} s ago; retry in {wait} s"
                ));
            }
        }
        Ok(slot)
    }

    /// Admits the MQTT command `m` (on a command topic of this board or of `all`), judged by
    /// `ctx`: the time, and what the board's clocks read for this message.
    pub fn admit_command(&mut self, m: &Incoming, ctx: &MessageContext) -> Admission {
        let (topic, now) = (&m.topic, ctx.now);
        if let Some(mono) = ctx.mono_s {
            self.read_monotonic(mono);
        }
        if let Some(clock) = &ctx.clock {
            self.read_clock_sync(clock.clone());
        }
        let cmd = CmdRef {
            action: topic.action.clone(),
            cmd_id: topic.cmd_id.clone(),
        };
        let reject = |reason: String| Admission::Rejected {
            cmd: Some(cmd.clone()),
            reason,
        };
        // Taken from a clock the board trusts: a clock far ahead would refuse every command
        // until it came back.
        let synced = self.clock == ClockState::Synchronised;
        if self.fresh_ledger && synced && self.ledger.created_unix_s.is_none() {
            self.ledger.created_unix_s = Some(now);
        }
        if synced {
            self.ledger.clamp_runs(now);
        }
        if let Some(reason) = self.clock_hold(m, now) {
            return Admission::ClockHeld { cmd, reason };
        }
        let parsed = match command::parse(&self.policy, m) {
            Ok(p) => p,
            Err(Verdict::Ignore(command::IN_PROGRESS)) if m.retain => {
                return self.in_progress_on_the_broker(&cmd);
            }
            Err(Verdict::Ignore(why)) => return Admission::Ignored(why),
            Err(Verdict::Reject(r)) => {
                // Junk on the topic of a used id: answer with the real record, never overwrite
                // it with a rejection.
                return match self.record(&topic.cmd_id) {
                    Some(e) if e.action == topic.action || e.action.is_empty() => {
                        Admission::Replay {
                            cmd,
                            record: e.clone(),
                            reason: format!(
                                "cmd_id {:?} was already used (replay): {r}",
                                topic.cmd_id
                            ),
                        }
                    }
                    _ => reject(r),
                };
            }
        };
        if let Some(answer) = self.seen_before(topic, &parsed, &cmd) {
            return answer;
        }
        let signed = match command::authorize(&self.policy, topic, &parsed, now) {
            Ok(s) => s,
            Err(r) => return reject(r),
        };
        if signed {
            if let Some(why) = self.before_the_ledger(&parsed) {
                return reject(why);
            }
            if let Some(e) = &self.ledger_error {
                return reject(format!(
                    "signed commands are refused: the command ledger is unreadable ({e}); \
                     remove or repair it"
                ));
            }
            if self.clock == ClockState::Unsynchronised {
                return reject("signed commands are refused: the clock is not synchronised".into());
            }
        }
        if let Some(r) = self.lane_full(signed) {
            return reject(r);
        }
        let slot = match self.rate_check(parsed.action.kind(), signed, now) {
            Ok(s) => s,
            Err(r) => return reject(r),
        };
        let keep_until = parsed.msg.expires_at.saturating_add(CLOCK_SKEW_S);
        let before = self.ledger.clone();
        let prev = self.ledger.last_run.insert(slot.clone(), now);
        self.ledger.commands.insert(
            ledger_key(&topic.cmd_id, signed),
            LedgerEntry {
                action: topic.action.clone(),
                signed,
                accepted_unix_s: now,
                keep_until_unix_s: keep_until,
                payload_hash: parsed.payload_hash,
                status: CmdStatus::Executing,
                reason: None,
            },
        );
        if self.clock == ClockState::Synchronised {
            let t = self.prune_time(now);
            self.ledger.prune(t);
        }
        // Remembered before acting: a restart never runs it twice. Not saved: not run, and
        // neither the id nor the rate-limit slot is used up.
        if let Err(e) = self.persist() {
            self.ledger = before;
            return reject(format!("cannot save the command id: {e}"));
        }
        let job = Job {
            origin: Origin::Mqtt,
            cmd: Some(cmd.clone()),
            action: parsed.action,
            signed,
            slot: Some((slot, prev)),
        };
        if signed {
            self.signed_queue.push_back(job);
        } else {
            self.other_queue.push_back(job);
        }
        Admission::Queued(Some(cmd))
    }

    /// Admits a local request: a Home Assistant button (only what may run unsigned, rate limited
    /// like an unsigned command), the planner (compaction, once per cooldown, counting the
    /// admin's own compactions) or the command line (the board's and the config's refusals only:
    /// the operator is root on the board; the run is then recorded with [`Gate::record_local`]).
    /// Queued for the daemon except for [`Origin::Cli`], which runs in its own process.
    ///
    /// Errors: the reason it is refused.
    pub fn admit_local(&mut self, origin: Origin, action: Action, now: i64) -> Result<(), String> {
        let name = action.kind();
        if let Some(why) = self.policy.refused.get(&name) {
            return Err(why.clone());
        }
        let mut slot = None;
        match origin {
            // The admin is root on the board: no allow-list of unsigned actions, no rate limit,
            // no queue (the action runs in the admin's own process). What runs is recorded
            // ([`Gate::record_local`]); a ledger that cannot be read cannot record it.
            Origin::Cli => {
                return match &self.ledger_error {
                    Some(e) => Err(format!(
                        "the command ledger is unreadable ({e}); remove or repair it"
                    )),
                    None => Ok(()),
                }
            }
            Origin::Mqtt => return Err("MQTT commands go through admit_command".into()),
            Origin::HomeAssistant => {
                if !self.policy.allow_unsigned.contains(&name) {
                    return Err(format!(
                        "{name} is not in security.allow_unsigned; a button cannot run it"
                    ));
                }
                let s = self.rate_check(name, false, now)?;
                let prev = self.ledger.last_run.get(&s).copied();
                slot = Some((s, prev));
            }
            Origin::Planner => {
                if !matches!(action, Action::Compact { .. }) {
                    return Err(format!("the planner does not run {name}"));
                }
                // A compaction the admin ran counts for the cooldown too (saved behind, the
                // daemon reads the file on its blocking pool: [`Gate::absorb_cli_runs`]).
                if self.writer.is_none() {
                    self.merge_cli_runs();
                }
                let cli = self.ledger.last_run.get(&cli_slot(name)).copied();
                let last = self.last_planner_compact.max(cli);
                if self.limits.compact_wait_s(last, now).is_some() {
                    return Err("automatic compaction is cooling down".into());
                }
            }
        }
        if let Some(r) = self.lane_full(false) {
            return Err(r);
        }
        if origin == Origin::Planner {
            self.last_planner_compact = Some(now);
        }
        if let Some((s, _)) = &slot {
            // Kept in memory only: a button press has no id to remember.
            self.ledger.last_run.insert(s.clone(), now);
        }
        self.other_queue.push_back(Job {
            origin,
            cmd: None,
            action,
            signed: false,
            slot,
        });
        Ok(())
    }

    /// The next action to run, signed commands first; `None` while one runs or none waits.
    pub fn next_job(&mut self) -> Option<Job> {
        if self.running {
            return None;
        }
        let job = self
            .signed_queue
            .pop_front()
            .or_else(|| self.other_queue.pop_front())?;
        self.running = true;
        Some(job)
    }

    /// Records how `job` ended: the command's final state in the ledger, and the rate-limit slot
    /// given back when the action did not run.
    pub fn finish(&mut self, job: &Job, outcome: &Outcome) {
        self.running = false;
        let mut changed = false;
        // Only what acted and succeeded keeps the slot: a refusal before acting (a size above
        // the RAM) or a failure (no compact_memory) can be retried at once after the fix.
        if !outcome.ran || !outcome.ok {
            if let Some((slot, prev)) = &job.slot {
                match prev {
                    Some(p) => self.ledger.last_run.insert(slot.clone(), *p),
                    None => self.ledger.last_run.remove(slot),
                };
                changed = true;
            }
        }
        if let Some(c) = &job.cmd {
            let reboot_pending = outcome.ok && outcome.pending;
            let key = ledger_key(&c.cmd_id, job.signed);
            if let Some(e) = self.ledger.commands.get_mut(&key) {
                if !reboot_pending {
                    e.status = if outcome.ok {
                        CmdStatus::Successful
                    } else {
                        CmdStatus::Failed
                    };
                    let mut r = outcome.detail.clone();
                    if r.len() > MAX_REASON_BYTES {
                        let mut cut = MAX_REASON_BYTES;
                        while !r.is_char_boundary(cut) {
                            cut -= 1;
                        }
                        r.truncate(cut);
                    }
                    e.reason = Some(r);
                    changed = true;
                }
            }
        }
        if changed && job.origin == Origin::Mqtt {
            if let Err(e) = self.persist() {
                tracing::error!(error = %e, "cannot save the command ledger");
            }
        }
    }

    /// Records that `job`, taken by [`Gate::next_job`], was refused by policy before it acted
    /// (reboots not allowed, a `set_cma` size out of range, an action this board refuses): its
    /// rate-limit slot is given back and a command's ledger entry ends `rejected` with `reason`.
    pub fn refuse(&mut self, job: &Job, reason: &str) {
        self.finish(
            job,
            &Outcome {
                ok: false,
                ran: false,
                detail: reason.to_string(),
                pending: false,
            },
        );
        if let Some(c) = &job.cmd {
            let key = ledger_key(&c.cmd_id, job.signed);
            if let Some(e) = self.ledger.commands.get_mut(&key) {
                e.status = CmdStatus::Rejected;
                if job.origin == Origin::Mqtt {
                    if let Err(e) = self.persist() {
                        tracing::error!(error = %e, "cannot save the command ledger");
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod clock_tests;
#[cfg(test)]
mod tests;
