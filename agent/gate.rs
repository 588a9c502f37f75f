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
//!   `set_cma` size above the RAM) gives its slot back.
//! - Every admitted command gets a final state; one left `executing` by a crash is finished as
//!   `failed: agent restarted` on the next start (a reboot is settled by its `boot_id` instead).
//! - A replay never overwrites the record of the real outcome: it is answered with that record.
//! - Signed commands have their own queue lane and rate-limit slots: unsigned traffic cannot
//!   make them `busy` or rate limited.

use crate::action::state::StateDir;
use crate::mqtt::command::{self, Action, CmdStatus, Policy, Verdict, CLOCK_SKEW_S};
use crate::mqtt::topics::{CommandTopic, ALL};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, VecDeque};

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

/// One remembered command.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LedgerEntry {
    /// Action name.
    pub action: String,
    /// Verified by a trusted key.
    pub signed: bool,
    /// Unix seconds when accepted.
    pub accepted_unix_s: i64,
    /// Unix seconds until which the id is kept (`expires_at` + skew).
    pub keep_until_unix_s: i64,
    /// FNV-1a of the accepted payload (the same bytes again are a re-delivery).
    pub payload_hash: u64,
    /// `executing`, then the final state.
    pub status: CmdStatus,
    /// Reason of a failure, or a short summary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

fn schema_2() -> u32 {
    2
}

/// Seen command ids (persisted in [`LEDGER_FILE`]) and the last run of each rate-limit slot.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Ledger {
    /// Format version (2).
    #[serde(default = "schema_2")]
    pub schema: u32,
    /// cmd_id → what happened to it.
    #[serde(default)]
    pub commands: BTreeMap<String, LedgerEntry>,
    /// Rate-limit slot (`set_cma`, `set_cma/unsigned`) → unix seconds of the last run.
    #[serde(default)]
    pub last_run: BTreeMap<String, i64>,
    /// Version 1's ids (cmd_id → accepted at); read once and converted.
    #[serde(default, skip_serializing)]
    seen: BTreeMap<String, i64>,
}

impl Ledger {
    /// Converts a version-1 file: every old id is kept as signed (never evicted by count) for the
    /// longest lifetime a command may have had.
    fn upgrade(&mut self, max_age_s: u64) {
        let keep = i64::try_from(max_age_s).unwrap_or(i64::MAX);
        for (id, at) in std::mem::take(&mut self.seen) {
            self.commands.entry(id).or_insert(LedgerEntry {
                action: String::new(),
                signed: true,
                accepted_unix_s: at,
                keep_until_unix_s: at.saturating_add(keep).saturating_add(2 * CLOCK_SKEW_S),
                payload_hash: 0,
                status: CmdStatus::Successful,
                reason: None,
            });
        }
        self.schema = 2;
    }

    /// Drops ids whose keep time has passed (never an `executing` one), then the oldest unsigned
    /// ids above [`MAX_UNSIGNED_IDS`]. Signed ids are only ever dropped by time.
    pub fn prune(&mut self, now: i64) {
        self.commands
            .retain(|_, e| e.status == CmdStatus::Executing || e.keep_until_unix_s >= now);
        let unsigned = self.commands.values().filter(|e| !e.signed).count();
        if unsigned > MAX_UNSIGNED_IDS {
            let mut old: Vec<(i64, String)> = self
                .commands
                .iter()
                .filter(|(_, e)| !e.signed && e.status.is_final())
                .map(|(k, e)| (e.accepted_unix_s, k.clone()))
                .collect();
            old.sort();
            for (_, k) in old.into_iter().take(unsigned - MAX_UNSIGNED_IDS) {
                self.commands.remove(&k);
            }
        }
    }
}

/// The ledger slot recording when `action` last ran from the command line (`compact/cli`).
/// Written by the `npu-agent` process the admin ran, kept by the daemon's gate when it saves
/// the ledger, and read by the planner's cooldown.
pub fn cli_slot(action: &str) -> String {
    format!("{action}/cli")
}

/// The refusals `[actions] disabled` asks for: action → the reason every origin is given.
pub fn config_refusals(disabled: &[String]) -> BTreeMap<String, String> {
    std::collections::BTreeMap::from_iter(disabled.iter().map(|a| {
        (
            a.clone(),
            format!("{a} is disabled on this board ([actions] disabled in the agent's config)"),
        )
    }))
}

/// Rate-limit slot of an action: signed and unsigned traffic never share one.
pub fn rate_slot(action: &str, signed: bool) -> String {
    if signed {
        action.to_string()
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
    /// Nothing to do or publish (a clear, an echo, a re-delivery).
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
    base_refused: BTreeMap<String, String>,
    ledger: Ledger,
    /// Why the ledger could not be read (signed commands are refused while set).
    ledger_error: Option<String>,
    state: Option<StateDir>,
    signed_queue: VecDeque<Job>,
    other_queue: VecDeque<Job>,
    running: bool,
    clock: ClockState,
    compact_cooldown_s: u64,
    last_planner_compact: Option<i64>,
}

impl Gate {
    /// A gate with `policy`, its ledger loaded from `state` ([`LEDGER_FILE`]; `None`: in memory
    /// only). A ledger that exists but cannot be read or decoded is kept aside: the gate then
    /// refuses signed commands and never writes the file ([`Gate::ledger_error`]).
    pub fn new(policy: Policy, state: Option<StateDir>, compact_cooldown_s: u64) -> Gate {
        let (mut ledger, ledger_error) = match &state {
            None => (Ledger::default(), None),
            Some(s) => match s.load::<Ledger>(LEDGER_FILE) {
                Ok(l) => (l.unwrap_or_default(), None),
                Err(e) => (Ledger::default(), Some(e.to_string())),
            },
        };
        ledger.upgrade(policy.max_command_age_s);
        Gate {
            base_refused: policy.refused.clone(),
            policy,
            ledger,
            ledger_error,
            state,
            signed_queue: VecDeque::new(),
            other_queue: VecDeque::new(),
            running: false,
            clock: ClockState::Synchronised,
            compact_cooldown_s,
            last_planner_compact: None,
        }
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

    /// Sets the actions this board refuses (action → reason published as is), e.g. the
    /// profile's [`crate::profile::Profile::refuses_action`] after a diagnosis. The refusals the
    /// gate was made with (the config's) stay, with their own reason.
    pub fn set_refused(&mut self, refused: BTreeMap<String, String>) {
        let mut all = self.base_refused.clone();
        for (a, why) in refused {
            all.entry(a).or_insert(why);
        }
        self.policy.refused = all;
    }

    /// Sets whether the clock is trusted (the `clock.sync` hook).
    pub fn set_clock(&mut self, clock: ClockState) {
        self.clock = clock;
    }

    /// The ledger holds a record of `cmd_id` (it ran, or is running): a later message with that
    /// id is a replay, answered by the gate with the real outcome.
    pub fn has_record(&self, cmd_id: &str) -> bool {
        self.ledger.commands.contains_key(cmd_id)
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
    /// refuses, among `compact` and `rescan`.
    pub fn button_actions(&self) -> Vec<&'static str> {
        ["compact", "rescan"]
            .into_iter()
            .filter(|a| self.policy.allow_unsigned.iter().any(|u| u == a))
            .filter(|a| !self.policy.refused.contains_key(*a))
            .collect()
    }

    fn persist(&mut self) -> Result<(), String> {
        if let Some(e) = &self.ledger_error {
            return Err(format!("the command ledger is unreadable ({e})"));
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
        let Ok(Some(disk)) = s.load::<Ledger>(LEDGER_FILE) else {
            return;
        };
        for (slot, at) in disk.last_run {
            if slot.ends_with("/cli") {
                let e = self.ledger.last_run.entry(slot).or_insert(at);
                *e = (*e).max(at);
            }
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
        self.ledger.last_run.insert(cli_slot(action.name()), now);
        self.persist()
    }

    /// On start: commands a crash left `executing` (other than a reboot, settled by `boot_id`)
    /// are finished as `failed: agent restarted`. Returns them, to publish.
    pub fn finish_interrupted(&mut self) -> Vec<(CmdRef, LedgerEntry)> {
        let mut out = Vec::new();
        for (id, e) in self.ledger.commands.iter_mut() {
            if e.status == CmdStatus::Executing && e.action != "reboot" {
                e.status = CmdStatus::Failed;
                e.reason = Some("agent restarted".into());
                out.push((
                    CmdRef {
                        action: e.action.clone(),
                        cmd_id: id.clone(),
                    },
                    e.clone(),
                ));
            }
        }
        if !out.is_empty() {
            if let Err(e) = self.persist() {
                tracing::error!(error = %e, "cannot save the command ledger");
            }
        }
        out
    }

    fn lane_full(&self, signed: bool) -> Option<String> {
        let (len, max) = if signed {
            (self.signed_queue.len(), MAX_QUEUED_SIGNED)
        } else {
            (self.other_queue.len(), MAX_QUEUED_OTHER)
        };
        (len >= max).then(|| format!("busy: {len} actions are queued; retry later"))
    }

    fn rate_check(&self, action: &str, signed: bool, now: i64) -> Result<String, String> {
        let slot = rate_slot(action, signed);
        if let Some(last) = self.ledger.last_run.get(&slot) {
            let ago = now.saturating_sub(*last);
            let wait = command::rate_limit_s(action, signed).saturating_sub(ago);
            if wait > 0 {
                return Err(format!(
                    "rate limited: {action} ran {ago} s ago; retry in {wait} s"
                ));
            }
        }
        Ok(slot)
    }

    /// Admits an MQTT command on `topic` (already known to be a command topic of this board or
    /// of `all`).
    pub fn admit_command(&mut self, topic: &CommandTopic, payload: &[u8], now: i64) -> Admission {
        let cmd = CmdRef {
            action: topic.action.clone(),
            cmd_id: topic.cmd_id.clone(),
        };
        let reject = |reason: String| Admission::Rejected {
            cmd: Some(cmd.clone()),
            reason,
        };
        let parsed = match command::parse(&self.policy, topic, payload) {
            Ok(p) => p,
            Err(Verdict::Ignore(why)) => return Admission::Ignored(why),
            Err(Verdict::Reject(r)) => {
                // Junk on the topic of a used id: answer with the real record, never overwrite
                // it with a rejection.
                return match self.ledger.commands.get(&topic.cmd_id) {
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
        if let Some(e) = self.ledger.commands.get(&topic.cmd_id) {
            if e.payload_hash == parsed.payload_hash {
                return Admission::Ignored("duplicate delivery");
            }
            if topic.board == ALL {
                // The fleet-wide init stays retained until the requester clears it.
                return Admission::Ignored("fleet-wide command already handled");
            }
            return Admission::Replay {
                cmd,
                record: e.clone(),
                reason: format!("cmd_id {:?} was already used (replay)", topic.cmd_id),
            };
        }
        let signed = match command::authorize(&self.policy, topic, &parsed, now) {
            Ok(s) => s,
            Err(r) => return reject(r),
        };
        if signed {
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
        let slot = match self.rate_check(&topic.action, signed, now) {
            Ok(s) => s,
            Err(r) => return reject(r),
        };
        let keep_until = parsed.msg.expires_at.saturating_add(CLOCK_SKEW_S);
        let before = self.ledger.clone();
        let prev = self.ledger.last_run.insert(slot.clone(), now);
        self.ledger.commands.insert(
            topic.cmd_id.clone(),
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
            self.ledger.prune(now);
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
        let name = action.name();
        if let Some(why) = self.policy.refused.get(name) {
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
                if !self.policy.allow_unsigned.iter().any(|a| a == name) {
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
                // A compaction the admin ran counts for the cooldown too.
                self.merge_cli_runs();
                let cli = self.ledger.last_run.get(&cli_slot(name)).copied();
                if let Some(last) = self.last_planner_compact.max(cli) {
                    let cooldown = i64::try_from(self.compact_cooldown_s).unwrap_or(i64::MAX);
                    if now.saturating_sub(last) < cooldown {
                        return Err("automatic compaction is cooling down".into());
                    }
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
            let reboot_pending = c.action == "reboot" && outcome.ok;
            if let Some(e) = self.ledger.commands.get_mut(&c.cmd_id) {
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
            },
        );
        if let Some(c) = &job.cmd {
            if let Some(e) = self.ledger.commands.get_mut(&c.cmd_id) {
                e.status = CmdStatus::Rejected;
                if job.origin == Origin::Mqtt {
                    if let Err(e) = self.persist() {
                        tracing::error!(error = %e, "cannot save the command ledger");
                    }
                }
            }
        }
    }

    /// Records the settled reboot `cmd_id` (its result is known after the reboot).
    pub fn settle_reboot(&mut self, cmd_id: &str, ok: bool, detail: &str) {
        if let Some(e) = self.ledger.commands.get_mut(cmd_id) {
            e.status = if ok {
                CmdStatus::Successful
            } else {
                CmdStatus::Failed
            };
            e.reason = Some(detail.chars().take(200).collect());
            if let Err(e) = self.persist() {
                tracing::error!(error = %e, "cannot save the command ledger");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mqtt::command::SigningKey;
    use crate::mqtt::command::{sign, InitMessage};
    use serde_json::Value;

    fn key() -> SigningKey {
        SigningKey::from_bytes(&[7u8; 32])
    }

    pub(crate) fn policy() -> Policy {
        Policy {
            board: "b1".into(),
            trusted_keys: vec![key().verifying_key()],
            allow_unsigned: vec!["compact".into(), "rescan".into()],
            max_command_age_s: 300,
            refused: BTreeMap::new(),
        }
    }

    fn topic(board: &str, action: &str, id: &str) -> CommandTopic {
        CommandTopic {
            board: board.into(),
            action: action.into(),
            cmd_id: id.into(),
        }
    }

    fn init(board: &str, args: Value, now: i64) -> InitMessage {
        InitMessage {
            status: CmdStatus::Init,
            board: board.into(),
            args: args.as_object().cloned().unwrap_or_default(),
            issued_at: now,
            expires_at: now + 60,
            signature: None,
        }
    }

    fn signed(action: &str, id: &str, args: Value, now: i64) -> Vec<u8> {
        let mut m = init("b1", args, now);
        sign(&key(), action, id, &mut m);
        serde_json::to_vec(&m).unwrap()
    }

    fn bytes(m: &InitMessage) -> Vec<u8> {
        serde_json::to_vec(m).unwrap()
    }

    const NOW: i64 = 1_764_400_000;

    fn gate() -> Gate {
        Gate::new(policy(), None, 600)
    }

    fn rejected(a: Admission) -> String {
        match a {
            Admission::Rejected { reason, .. } => reason,
            other => panic!("expected a rejection, got {other:?}"),
        }
    }

    fn run_all(g: &mut Gate) -> Vec<Job> {
        let mut out = Vec::new();
        while let Some(j) = g.next_job() {
            g.finish(
                &j,
                &Outcome {
                    ok: true,
                    ran: true,
                    detail: "done".into(),
                },
            );
            out.push(j);
        }
        out
    }

    #[test]
    fn signed_set_cma_executes_once_and_replay_keeps_the_record() {
        let mut g = gate();
        let b = signed("set_cma", "c1", serde_json::json!({"size": "256M"}), NOW);
        let t = topic("b1", "set_cma", "c1");
        assert!(matches!(
            g.admit_command(&t, &b, NOW),
            Admission::Queued(Some(_))
        ));
        assert_eq!(run_all(&mut g).len(), 1);
        assert_eq!(
            g.admit_command(&t, &b, NOW + 1),
            Admission::Ignored("duplicate delivery")
        );
        let again = signed(
            "set_cma",
            "c1",
            serde_json::json!({"size": "512M"}),
            NOW + 5,
        );
        match g.admit_command(&t, &again, NOW + 40) {
            Admission::Replay { record, reason, .. } => {
                assert_eq!(record.status, CmdStatus::Successful);
                assert!(reason.contains("replay"));
            }
            other => panic!("{other:?}"),
        }
        // Junk or an unsigned init on the used id's topic: the record, not a rejection.
        for junk in [
            &b"not json"[..],
            br#"{"status":"init","board":"b1","args":{}}"#,
        ] {
            match g.admit_command(&t, junk, NOW + 41) {
                Admission::Replay { record, reason, .. } => {
                    assert_eq!(record.status, CmdStatus::Successful);
                    assert!(reason.contains("replay"), "{reason}");
                }
                other => panic!("{other:?}"),
            }
        }
        // The same junk on an unused id is a plain rejection.
        assert!(matches!(
            g.admit_command(&topic("b1", "set_cma", "c2"), b"not json", NOW + 41),
            Admission::Rejected { .. }
        ));
    }

    /// Item 1: unsigned traffic cannot evict a signed id inside its validity window.
    #[test]
    fn unsigned_flood_never_evicts_a_signed_id() {
        let mut g = gate();
        let b = signed("set_cma", "sig", serde_json::json!({"size": "512M"}), NOW);
        let t = topic("b1", "set_cma", "sig");
        assert!(matches!(g.admit_command(&t, &b, NOW), Admission::Queued(_)));
        run_all(&mut g);
        // 3 × MAX_UNSIGNED_IDS unsigned rescans, each allowed by the rate limit.
        for i in 0..(3 * MAX_UNSIGNED_IDS as i64) {
            let t2 = topic("b1", "rescan", &format!("r{i}"));
            let m = init("b1", serde_json::json!({}), NOW);
            g.ledger.last_run.clear(); // every rescan passes the rate limit
            let _ = g.admit_command(&t2, &bytes(&m), NOW + 10);
            run_all(&mut g);
        }
        assert!(g.ledger.commands.contains_key("sig"));
        assert!(g.ledger.commands.values().filter(|e| !e.signed).count() <= MAX_UNSIGNED_IDS);
        assert!(matches!(
            g.admit_command(&t, &b, NOW + 100),
            Admission::Ignored(_)
        ));
        // Pruned only after expires_at + skew, when the gate refuses it as expired anyway.
        g.ledger.prune(NOW + 60 + CLOCK_SKEW_S + 1);
        assert!(!g.ledger.commands.contains_key("sig"));
        assert!(rejected(g.admit_command(&t, &b, NOW + 60 + CLOCK_SKEW_S + 1)).contains("expired"));
    }

    /// Item 1: a corrupt ledger fails closed and is never overwritten.
    #[test]
    fn unreadable_ledger_refuses_signed_commands() {
        let dir = tempfile::tempdir().unwrap();
        let root = crate::root::SysRoot::new(dir.path());
        let state = StateDir::new(&root, "/var/lib/npu-agent");
        std::fs::create_dir_all(dir.path().join("var/lib/npu-agent")).unwrap();
        let file = dir.path().join("var/lib/npu-agent/commands.json");
        std::fs::write(&file, b"{\"commands\": [garbage").unwrap();
        let mut g = Gate::new(policy(), Some(state), 600);
        assert!(g.ledger_error().unwrap().contains("corrupt"));
        let b = signed("set_cma", "c1", serde_json::json!({"size": "256M"}), NOW);
        let r = rejected(g.admit_command(&topic("b1", "set_cma", "c1"), &b, NOW));
        assert!(r.contains("ledger is unreadable"), "{r}");
        // Unsigned ones cannot be remembered either: refused, and the file is left alone.
        let m = init("b1", serde_json::json!({}), NOW);
        let r = rejected(g.admit_command(&topic("b1", "rescan", "r1"), &bytes(&m), NOW));
        assert!(r.contains("cannot save"), "{r}");
        assert_eq!(
            std::fs::read(&file).unwrap(),
            b"{\"commands\": [garbage".to_vec()
        );
        assert_eq!(g.queued(), 0);
    }

    /// Item 2: extreme and overflowing times are refused, signed or not.
    #[test]
    fn time_arithmetic_is_checked() {
        let mut g = gate();
        let cases: &[(i64, i64, &str)] = &[
            (
                -9_223_372_036_854_775_807,
                9_000_000_000_000_000_000,
                "lifetime",
            ),
            (i64::MIN, i64::MAX, "lifetime"),
            (NOW, i64::MAX, "lifetime"),
            (i64::MAX, i64::MAX, "future"),
            (i64::MIN, i64::MIN, "expired"),
            (NOW, NOW - 1, "before issued_at"),
            (NOW - 1000, NOW - 900, "expired"),
            (NOW, NOW + 301, "lifetime"),
        ];
        for (i, (issued, expires, want)) in cases.iter().enumerate() {
            let mut m = init("b1", serde_json::json!({}), NOW);
            m.issued_at = *issued;
            m.expires_at = *expires;
            let r = rejected(g.admit_command(
                &topic("b1", "rescan", &format!("t{i}")),
                &bytes(&m),
                NOW,
            ));
            assert!(r.contains(want), "case {i}: {r}");
            sign(&key(), "set_cma", &format!("s{i}"), &mut m);
            m.args = serde_json::json!({"size": "256M"})
                .as_object()
                .unwrap()
                .clone();
            sign(&key(), "set_cma", &format!("s{i}"), &mut m);
            let r = rejected(g.admit_command(
                &topic("b1", "set_cma", &format!("s{i}")),
                &bytes(&m),
                NOW,
            ));
            assert!(r.contains(want), "signed case {i}: {r}");
        }
        assert!(g.ledger.commands.is_empty());
    }

    /// Item 5: signed commands have their own lane; unsigned ones are rate limited and get
    /// `busy`, never silence.
    #[test]
    fn signed_commands_are_not_starved() {
        let mut g = gate();
        let mut busy = 0;
        let mut limited = 0;
        for i in 0..50 {
            let m = init("b1", serde_json::json!({}), NOW);
            match g.admit_command(&topic("b1", "rescan", &format!("u{i}")), &bytes(&m), NOW) {
                Admission::Queued(_) => {}
                Admission::Rejected { reason, .. } if reason.starts_with("busy") => busy += 1,
                Admission::Rejected { reason, .. } if reason.starts_with("rate limited") => {
                    limited += 1
                }
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(limited, 49, "one unsigned rescan per 5 s");
        assert_eq!(busy, 0);
        // Fill the other lane with button presses and planner runs.
        for _ in 0..MAX_QUEUED_OTHER {
            g.other_queue.push_back(Job {
                origin: Origin::HomeAssistant,
                cmd: None,
                action: Action::Rescan,
                signed: false,
                slot: None,
            });
        }
        assert!(g
            .admit_local(Origin::Planner, Action::Compact { drop_caches: false }, NOW)
            .unwrap_err()
            .starts_with("busy"));
        let b = signed("set_cma", "s1", serde_json::json!({"size": "256M"}), NOW);
        assert!(matches!(
            g.admit_command(&topic("b1", "set_cma", "s1"), &b, NOW),
            Admission::Queued(_)
        ));
        let first = g.next_job().unwrap();
        assert!(first.signed, "the signed command runs first");
    }

    /// Item 6: buttons pass the allow-list and the unsigned rate limit.
    #[test]
    fn buttons_go_through_the_gate() {
        let mut g = gate();
        let mut ran = 0;
        for i in 0..3000 {
            if g.admit_local(
                Origin::HomeAssistant,
                Action::Compact { drop_caches: false },
                NOW + i / 100,
            )
            .is_ok()
            {
                ran += 1;
            }
            run_all(&mut g);
        }
        assert_eq!(ran, 1, "30 s between compactions: one in 30 s of presses");
        assert!(g
            .admit_local(
                Origin::HomeAssistant,
                Action::Reboot { reason: "x".into() },
                NOW
            )
            .unwrap_err()
            .contains("allow_unsigned"));
        let mut p = policy();
        p.allow_unsigned = vec!["rescan".into()];
        p.refused
            .insert("rescan".into(), "this profile has no checks".into());
        let g = Gate::new(p, None, 600);
        assert!(g.button_actions().is_empty());
    }

    /// Item 8: busy, unsaved and refused-before-acting commands use up nothing; a crash leaves
    /// no command `executing`.
    #[test]
    fn only_what_ran_is_recorded() {
        let mut g = gate();
        let b = signed("set_cma", "big", serde_json::json!({"size": "64G"}), NOW);
        assert!(matches!(
            g.admit_command(&topic("b1", "set_cma", "big"), &b, NOW),
            Admission::Queued(_)
        ));
        let j = g.next_job().unwrap();
        g.finish(
            &j,
            &Outcome {
                ok: false,
                ran: false,
                detail: "64G is above the RAM".into(),
            },
        );
        assert_eq!(g.ledger.commands["big"].status, CmdStatus::Failed);
        let b2 = signed(
            "set_cma",
            "ok",
            serde_json::json!({"size": "256M"}),
            NOW + 1,
        );
        assert!(
            matches!(
                g.admit_command(&topic("b1", "set_cma", "ok"), &b2, NOW + 1),
                Admission::Queued(_)
            ),
            "a refused set_cma does not use up the rate limit"
        );
        // Busy: not recorded.
        for i in 0..MAX_QUEUED_SIGNED {
            let b = signed("rescan", &format!("q{i}"), serde_json::json!({}), NOW + 1);
            let _ = g.admit_command(&topic("b1", "rescan", &format!("q{i}")), &b, NOW + 1);
        }
        let b = signed("rescan", "late", serde_json::json!({}), NOW + 1);
        assert!(
            rejected(g.admit_command(&topic("b1", "rescan", "late"), &b, NOW + 1))
                .starts_with("busy")
        );
        assert!(!g.ledger.commands.contains_key("late"));
        // Crash: every executing entry is failed on the next start.
        let mut restarted = Gate::new(policy(), None, 600);
        restarted.ledger = g.ledger.clone();
        let done = restarted.finish_interrupted();
        assert!(done.len() >= 2, "{done:?}");
        assert!(done.iter().all(|(_, e)| e.status == CmdStatus::Failed
            && e.reason.as_deref() == Some("agent restarted")));
    }

    #[test]
    fn clock_hook_refuses_signed_commands() {
        let mut g = gate();
        g.set_clock(ClockState::Unsynchronised);
        let b = signed("set_cma", "c1", serde_json::json!({"size": "256M"}), NOW);
        assert!(
            rejected(g.admit_command(&topic("b1", "set_cma", "c1"), &b, NOW)).contains("clock")
        );
        g.set_clock(ClockState::Synchronised);
        assert!(matches!(
            g.admit_command(&topic("b1", "set_cma", "c1"), &b, NOW),
            Admission::Queued(_)
        ));
    }

    #[test]
    fn version_1_ledgers_are_read() {
        let v1 = r#"{"seen":{"old":1764400000},"last_run":{"set_cma":1764400000},"payload_hash":{"old":5}}"#;
        let mut l: Ledger = serde_json::from_str(v1).unwrap();
        l.upgrade(300);
        assert!(l.commands["old"].signed);
        assert_eq!(l.schema, 2);
        l.prune(1_764_400_100);
        assert!(l.commands.contains_key("old"));
    }

    #[test]
    fn hostile_commands_are_rejected_with_reasons() {
        let mut g = gate();
        let t = topic("b1", "reboot", "r1");
        let unsigned = init("b1", serde_json::json!({}), NOW);
        assert!(rejected(g.admit_command(&t, &bytes(&unsigned), NOW))
            .contains("unsigned reboot refused"));
        let mut forged = unsigned.clone();
        sign(
            &SigningKey::from_bytes(&[9u8; 32]),
            "reboot",
            "r1",
            &mut forged,
        );
        assert!(rejected(g.admit_command(&t, &bytes(&forged), NOW)).contains("bad signature"));
        let mut moved = unsigned.clone();
        sign(&key(), "reboot", "other", &mut moved);
        assert!(rejected(g.admit_command(&t, &bytes(&moved), NOW)).contains("bad signature"));
        let extra = br#"{"status":"init","board":"b1","issued_at":1764400000,"expires_at":1764400060,"shell":"rm -rf /"}"#;
        assert!(
            rejected(g.admit_command(&topic("b1", "compact", "x"), extra, NOW))
                .contains("unknown field")
        );
        // A secret-looking value in a wrong-typed field is not echoed.
        let typed =
            br#"{"status":"init","board":"b1","issued_at":"hunter2-secret","expires_at":1}"#;
        let r = rejected(g.admit_command(&topic("b1", "compact", "x"), typed, NOW));
        assert!(!r.contains("hunter2"), "{r}");
        assert!(
            rejected(g.admit_command(&topic("b1", "compact", "x"), &vec![b'{'; 5000], NOW))
                .contains("exceeds")
        );
        assert!(g.ledger.commands.is_empty());
    }

    /// `[actions] disabled` refuses the action for every origin, and a profile's refusals set
    /// after a diagnosis do not wipe it.
    #[test]
    fn config_disabled_actions_are_refused_for_every_origin() {
        let mut p = policy();
        p.refused = config_refusals(&["compact".to_string()]);
        let mut g = Gate::new(p, None, 600);
        g.set_refused(BTreeMap::from([(
            "release_npu".to_string(),
            "nothing to release".to_string(),
        )]));
        let m = init("b1", serde_json::json!({}), NOW);
        let why = rejected(g.admit_command(&topic("b1", "compact", "c1"), &bytes(&m), NOW));
        assert!(why.contains("compact is disabled on this board"), "{why}");
        let compact = Action::Compact { drop_caches: false };
        for origin in [Origin::HomeAssistant, Origin::Planner, Origin::Cli] {
            let why = g.admit_local(origin, compact.clone(), NOW).unwrap_err();
            assert!(why.contains("[actions] disabled"), "{origin:?}: {why}");
        }
        assert_eq!(g.button_actions(), ["rescan"]);
        assert!(g.policy().refused.contains_key("release_npu"));
        assert_eq!(g.queued(), 0);
    }

    /// The daemon's gate saving its ledger keeps a run the admin's process recorded meanwhile.
    #[test]
    fn a_cli_run_recorded_by_another_process_survives_the_daemons_save() {
        let dir = tempfile::tempdir().unwrap();
        let root = crate::root::SysRoot::new(dir.path());
        let state = StateDir::new(&root, "/var/lib/npu-agent");
        let mut daemon = Gate::new(policy(), Some(state.clone()), 600);
        let mut cli = Gate::new(policy(), Some(state.clone()), 600);
        let compact = Action::Compact { drop_caches: false };
        cli.admit_local(Origin::Cli, compact.clone(), NOW).unwrap();
        cli.record_local(&compact, NOW).unwrap();
        let b = signed("set_cma", "c1", serde_json::json!({"size": "256M"}), NOW);
        assert!(matches!(
            daemon.admit_command(&topic("b1", "set_cma", "c1"), &b, NOW + 1),
            Admission::Queued(_)
        ));
        let saved: Ledger = state.load(LEDGER_FILE).unwrap().unwrap();
        assert_eq!(saved.last_run.get("compact/cli"), Some(&NOW));
        assert!(saved.commands.contains_key("c1"));
        // And the admin's next record keeps the daemon's command id.
        cli.record_local(&compact, NOW + 5).unwrap();
        let saved: Ledger = state.load(LEDGER_FILE).unwrap().unwrap();
        assert_eq!(saved.last_run.get("compact/cli"), Some(&(NOW + 5)));
        assert!(saved.commands.contains_key("c1"));
    }
}
