//! The reboot state machine (the `reboot` action).
//!
//! ```text
//! request --guards--> refused(reason)
//!    |  persist intent {cmd_id, reason, boot_id} in reboot.json   (before acting)
//!    v  sync
//! run reboot_command (argv, timeout)
//!    |-- exit 0 / killed by a signal --> pending (the board goes down; phase command_returned)
//!    |-- timeout / exit != 0 / spawn error --> failed(reason), intent cleared
//! next start: reconcile
//!    |-- boot_id changed --> successful
//!    |-- same boot_id    --> failed ("the agent restarted but the board did not reboot")
//! ```
//!
//! Guards: `allow_reboot`, one reboot at a time, a rate limit (`reboot_min_interval_s`), no
//! unverified boot-file edit, a readable `boot_id`. The command runs through [`CommandRunner`]
//! so tests use `["true"]` or `["sleep", "5"]` and never reboot anything.

use super::state::{BootEditState, StateDir, StateError, BOOT_EDIT_FILE};
use super::{read_boot_id, ActionConfig};
use serde::{Deserialize, Serialize};
use std::time::{Duration, Instant};

/// Reboot state file name (in the state directory).
pub const REBOOT_FILE: &str = "reboot.json";
/// Reboot records kept for the rate limit and the report.
pub const HISTORY_LEN: usize = 20;

/// Where a requested reboot is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RebootPhase {
    /// Intent persisted; the command has not returned (the agent may die with the board).
    Requested,
    /// The command returned success (or was killed by a signal): waiting for the board to go
    /// down.
    CommandReturned,
}

/// A persisted reboot intent.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RebootIntent {
    /// Command id (MQTT `cmd_id`, or a local id such as `local-<unix_s>`).
    pub cmd_id: String,
    /// Why the reboot was asked for.
    pub reason: String,
    /// `/proc/sys/kernel/random/boot_id` before the reboot.
    pub boot_id: String,
    /// When it was requested (seconds since the epoch, UTC).
    pub requested_unix_s: i64,
    /// Phase.
    pub phase: RebootPhase,
}

/// How a reboot command ended, in the MQTT lifecycle's terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RebootResult {
    /// The board rebooted (`boot_id` changed).
    Successful,
    /// It did not (reason in the record).
    Failed,
}

/// A finished reboot command.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RebootRecord {
    /// Command id.
    pub cmd_id: String,
    /// Why it was asked for.
    pub reason: String,
    /// When it was requested (seconds since the epoch).
    pub requested_unix_s: i64,
    /// When the result was decided (seconds since the epoch).
    pub finished_unix_s: i64,
    /// Result.
    pub result: RebootResult,
    /// For `failed`, why; for `successful`, the old and new `boot_id`.
    pub detail: String,
}

/// `reboot.json`: the pending intent and recent results.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RebootState {
    /// Format version (1).
    #[serde(default)]
    pub schema: u32,
    /// The reboot in progress, if any.
    #[serde(default)]
    pub pending: Option<RebootIntent>,
    /// Recent results, newest last, at most [`HISTORY_LEN`].
    #[serde(default)]
    pub history: Vec<RebootRecord>,
}

impl RebootState {
    fn push(&mut self, r: RebootRecord) {
        self.history.push(r);
        let excess = self.history.len().saturating_sub(HISTORY_LEN);
        self.history.drain(..excess);
    }
}

/// Why a reboot is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RebootRefusal {
    /// `allow_reboot` is false.
    #[error("reboots are not allowed on this board: set allow_reboot = true in [actions] of /etc/npu-agent/agent.toml")]
    NotAllowed,
    /// Another reboot is in progress.
    #[error("a reboot is already in progress (command {0})")]
    AlreadyPending(String),
    /// The previous reboot request is too recent.
    #[error("rate limit: the last reboot was requested {since_s} s ago; the next is allowed in {wait_s} s (reboot_min_interval_s)")]
    RateLimited {
        /// Seconds since the last request.
        since_s: i64,
        /// Seconds to wait.
        wait_s: i64,
    },
    /// A boot file edit was not verified (e.g. the write was cut off).
    #[error("the boot file edit of {0} is not verified: rebooting could boot a broken configuration; run `npu-agent cma show` and `npu-agent cma set` again")]
    UnverifiedBootEdit(String),
    /// `boot_id` cannot be read, so the result could not be told afterwards.
    #[error("cannot read /proc/sys/kernel/random/boot_id, so the reboot could not be verified afterwards")]
    NoBootId,
    /// `reboot_command` is empty.
    #[error("reboot_command is empty")]
    EmptyCommand,
    /// The state could not be read or written (the intent must be persisted before acting).
    #[error("{0}")]
    State(String),
}

/// The guards, pure: may a reboot start now? `edit` is `boot_edit.json`, `boot_id` the current
/// one, `now_unix_s` seconds since the epoch.
///
/// Errors: the first [`RebootRefusal`] that applies.
pub fn check_reboot_allowed(
    config: &ActionConfig,
    state: &RebootState,
    edit: Option<&BootEditState>,
    boot_id: Option<&str>,
    now_unix_s: i64,
) -> Result<(), RebootRefusal> {
    if !config.allow_reboot {
        return Err(RebootRefusal::NotAllowed);
    }
    if config.reboot_command.is_empty() {
        return Err(RebootRefusal::EmptyCommand);
    }
    if let Some(p) = &state.pending {
        return Err(RebootRefusal::AlreadyPending(p.cmd_id.clone()));
    }
    if let Some(last) = state.history.last() {
        let since = now_unix_s.saturating_sub(last.requested_unix_s);
        let min = i64::try_from(config.reboot_min_interval_s).unwrap_or(i64::MAX);
        if since >= 0 && since < min {
            return Err(RebootRefusal::RateLimited {
                since_s: since,
                wait_s: min - since,
            });
        }
    }
    if let Some(e) = edit.filter(|e| !e.verified) {
        let files: Vec<&str> = e.files.iter().map(|f| f.path.as_str()).collect();
        return Err(RebootRefusal::UnverifiedBootEdit(files.join(", ")));
    }
    if boot_id.is_none_or(str::is_empty) {
        return Err(RebootRefusal::NoBootId);
    }
    Ok(())
}

/// How a command ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunOutcome {
    /// Exited with this status code.
    Exited(i32),
    /// Killed by a signal we did not send (a reboot killing its own caller).
    Signalled,
    /// Ran past the timeout and was killed.
    TimedOut,
    /// Could not be started.
    SpawnFailed(String),
}

/// Runs the reboot command and flushes filesystems; injectable for tests.
pub trait CommandRunner {
    /// `sync(2)`.
    fn sync(&mut self);
    /// Runs `argv` (no shell), waiting at most `timeout`; kills it on timeout.
    fn run(&mut self, argv: &[String], timeout: Duration) -> RunOutcome;
}

/// [`CommandRunner`] with real processes (`std::process`) and `sync(2)`.
#[derive(Debug, Default, Clone, Copy)]
pub struct ProcessRunner;

impl CommandRunner for ProcessRunner {
    fn sync(&mut self) {
        rustix::fs::sync();
    }

    fn run(&mut self, argv: &[String], timeout: Duration) -> RunOutcome {
        use crate::sys::process::{run_with_timeout, RunError};
        use std::os::unix::process::ExitStatusExt;
        let Some((program, args)) = argv.split_first() else {
            return RunOutcome::SpawnFailed("empty command".into());
        };
        let mut cmd = std::process::Command::new(program);
        cmd.args(args);
        match run_with_timeout(&mut cmd, timeout, |_| {}) {
            Ok(done) => match done.status.code() {
                Some(c) => RunOutcome::Exited(c),
                None if done.status.signal().is_some() => RunOutcome::Signalled,
                None => RunOutcome::Exited(-1),
            },
            Err(RunError::TimedOut { .. }) => RunOutcome::TimedOut,
            Err(RunError::NotFound(p)) => {
                RunOutcome::SpawnFailed(format!("{p}: No such file or directory (os error 2)"))
            }
            Err(RunError::Failed(why)) => RunOutcome::SpawnFailed(why),
        }
    }
}

/// Where a reboot request ended up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RebootProgress {
    /// Not started; nothing was persisted.
    Refused(RebootRefusal),
    /// The command returned; the intent is persisted and the board should go down. The result
    /// comes from [`reconcile`] on the next start.
    Pending(RebootIntent),
    /// The command failed or timed out; recorded in the history.
    Failed(RebootRecord),
}

/// The guards of [`request_reboot`] without acting: reads `reboot.json`, `boot_edit.json` and
/// `/proc/sys/kernel/random/boot_id` under the state directory's root and applies
/// [`check_reboot_allowed`]. The daemon asks this before it publishes `executing`, so a reboot
/// the policy refuses is answered `rejected`. Returns the reboot state and the current `boot_id`.
///
/// Errors: the first [`RebootRefusal`] that applies (an unreadable state file is
/// [`RebootRefusal::State`]).
pub fn reboot_preflight(
    state: &StateDir,
    config: &ActionConfig,
    now_unix_s: i64,
) -> Result<(RebootState, Option<String>), RebootRefusal> {
    let rs: RebootState = state
        .load(REBOOT_FILE)
        .map_err(|e| RebootRefusal::State(e.to_string()))?
        .unwrap_or_default();
    let edit: Option<BootEditState> = state
        .load(BOOT_EDIT_FILE)
        .map_err(|e| RebootRefusal::State(e.to_string()))?;
    let boot_id = read_boot_id(state.root());
    check_reboot_allowed(config, &rs, edit.as_ref(), boot_id.as_deref(), now_unix_s)?;
    Ok((rs, boot_id))
}

/// Requests a reboot of the board under the state directory's root: guards, persist the intent
/// (with the current `boot_id`) in `reboot.json`, `sync`, run `config.reboot_command` with
/// `config.reboot_timeout_s`. Reads `/proc/sys/kernel/random/boot_id` and `boot_edit.json`.
///
/// Never panics; every outcome is in [`RebootProgress`].
pub fn request_reboot(
    state: &StateDir,
    config: &ActionConfig,
    runner: &mut dyn CommandRunner,
    cmd_id: &str,
    reason: &str,
    now_unix_s: i64,
) -> RebootProgress {
    let (mut rs, boot_id) = match reboot_preflight(state, config, now_unix_s) {
        Ok(v) => v,
        Err(r) => return RebootProgress::Refused(r),
    };
    let intent = RebootIntent {
        cmd_id: cmd_id.to_string(),
        reason: reason.to_string(),
        boot_id: boot_id.unwrap_or_default(),
        requested_unix_s: now_unix_s,
        phase: RebootPhase::Requested,
    };
    rs.schema = 1;
    rs.pending = Some(intent.clone());
    if let Err(e) = state.save(REBOOT_FILE, &rs) {
        return RebootProgress::Refused(RebootRefusal::State(format!(
            "the intent could not be persisted, so the reboot was not started: {e}"
        )));
    }
    let started = Instant::now();
    runner.sync();
    let timeout = Duration::from_secs(config.reboot_timeout_s);
    let outcome = runner.run(&config.reboot_command, timeout);
    let elapsed_s = i64::try_from(started.elapsed().as_secs()).unwrap_or(i64::MAX);
    let failed = |detail: String| RebootRecord {
        cmd_id: intent.cmd_id.clone(),
        reason: intent.reason.clone(),
        requested_unix_s: intent.requested_unix_s,
        finished_unix_s: now_unix_s.saturating_add(elapsed_s),
        result: RebootResult::Failed,
        detail,
    };
    let cmd = config.reboot_command.join(" ");
    let record = match outcome {
        RunOutcome::Exited(0) | RunOutcome::Signalled => {
            let mut pending = intent;
            pending.phase = RebootPhase::CommandReturned;
            rs.pending = Some(pending.clone());
            // Best effort: the intent is already on disk in phase `requested`, which reconciles
            // the same way.
            let _ = state.save(REBOOT_FILE, &rs);
            return RebootProgress::Pending(pending);
        }
        RunOutcome::TimedOut => failed(format!(
            "the reboot command `{cmd}` did not finish within {} s and was killed",
            config.reboot_timeout_s
        )),
        RunOutcome::Exited(code) => failed(format!(
            "the reboot command `{cmd}` exited with status {code}"
        )),
        RunOutcome::SpawnFailed(e) => {
            failed(format!("the reboot command could not be started: {e}"))
        }
    };
    rs.pending = None;
    rs.push(record.clone());
    let _ = state.save(REBOOT_FILE, &rs);
    RebootProgress::Failed(record)
}

/// When [`reconcile`] runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReconcileWhen {
    /// At agent start: a pending intent with the same `boot_id` means the agent restarted
    /// without a reboot.
    Start,
    /// Periodically while running: the same `boot_id` after the timeout means the board did
    /// not go down.
    Periodic,
}

/// Pure reconciliation of a pending reboot with the current `boot_id` (`now_unix_s`: seconds
/// since the epoch, `timeout_s`: how long the board may take to go down). Returns the new
/// state and the finished record, if the reboot finished.
pub fn reconcile(
    mut state: RebootState,
    current_boot_id: &str,
    now_unix_s: i64,
    timeout_s: u64,
    when: ReconcileWhen,
) -> (RebootState, Option<RebootRecord>) {
    let Some(p) = state.pending.clone() else {
        return (state, None);
    };
    let record = |result, detail: String| RebootRecord {
        cmd_id: p.cmd_id.clone(),
        reason: p.reason.clone(),
        requested_unix_s: p.requested_unix_s,
        finished_unix_s: now_unix_s,
        result,
        detail,
    };
    let r = if !current_boot_id.is_empty() && current_boot_id != p.boot_id {
        record(
            RebootResult::Successful,
            format!("rebooted: boot_id {} -> {current_boot_id}", p.boot_id),
        )
    } else {
        let waited = now_unix_s.saturating_sub(p.requested_unix_s);
        match when {
            ReconcileWhen::Start => record(
                RebootResult::Failed,
                format!("the agent restarted but the board did not reboot (boot_id {} unchanged after {waited} s)", p.boot_id),
            ),
            ReconcileWhen::Periodic if waited > i64::try_from(timeout_s).unwrap_or(i64::MAX) => record(
                RebootResult::Failed,
                format!("the board did not reboot within {timeout_s} s (boot_id {} unchanged)", p.boot_id),
            ),
            ReconcileWhen::Periodic => return (state, None),
        }
    };
    state.pending = None;
    state.push(r.clone());
    (state, Some(r))
}

/// Loads `reboot.json`, reconciles it with the current `/proc/sys/kernel/random/boot_id`
/// under the state directory's root, and saves the result when something finished.
///
/// Errors: [`StateError`] when the state cannot be read or written.
pub fn reconcile_state(
    state: &StateDir,
    config: &ActionConfig,
    now_unix_s: i64,
    when: ReconcileWhen,
) -> Result<Option<RebootRecord>, StateError> {
    let Some(rs) = state.load::<RebootState>(REBOOT_FILE)? else {
        return Ok(None);
    };
    let boot_id = read_boot_id(state.root()).unwrap_or_default();
    let (next, record) = reconcile(rs, &boot_id, now_unix_s, config.reboot_timeout_s, when);
    if record.is_some() {
        state.save(REBOOT_FILE, &next)?;
    }
    Ok(record)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn intent(boot_id: &str) -> RebootState {
        RebootState {
            schema: 1,
            pending: Some(RebootIntent {
                cmd_id: "c1".into(),
                reason: "test".into(),
                boot_id: boot_id.into(),
                requested_unix_s: 1000,
                phase: RebootPhase::CommandReturned,
            }),
            history: Vec::new(),
        }
    }

    #[test]
    fn reconcile_transitions() {
        let (s, r) = reconcile(intent("aaa"), "bbb", 1100, 120, ReconcileWhen::Start);
        let r = r.unwrap();
        assert_eq!(r.result, RebootResult::Successful);
        assert!(s.pending.is_none());
        assert_eq!(s.history.len(), 1);
        let (_, r) = reconcile(intent("aaa"), "aaa", 1100, 120, ReconcileWhen::Start);
        let r = r.unwrap();
        assert_eq!(r.result, RebootResult::Failed);
        assert!(
            r.detail
                .contains("the agent restarted but the board did not reboot"),
            "{}",
            r.detail
        );
        let (s, r) = reconcile(intent("aaa"), "aaa", 1060, 120, ReconcileWhen::Periodic);
        assert!(r.is_none());
        assert!(s.pending.is_some());
        let (_, r) = reconcile(intent("aaa"), "aaa", 1200, 120, ReconcileWhen::Periodic);
        assert!(r.unwrap().detail.contains("within 120 s"));
        let (_, r) = reconcile(RebootState::default(), "x", 0, 1, ReconcileWhen::Start);
        assert!(r.is_none());
    }

    #[test]
    fn guards_in_order() {
        let allowed = ActionConfig {
            allow_reboot: true,
            ..Default::default()
        };
        let empty = RebootState::default();
        assert_eq!(
            check_reboot_allowed(&ActionConfig::default(), &empty, None, Some("b"), 0),
            Err(RebootRefusal::NotAllowed)
        );
        assert_eq!(
            check_reboot_allowed(&allowed, &intent("b"), None, Some("b"), 0),
            Err(RebootRefusal::AlreadyPending("c1".into()))
        );
        let mut recent = empty.clone();
        recent.push(RebootRecord {
            cmd_id: "old".into(),
            reason: String::new(),
            requested_unix_s: 1000,
            finished_unix_s: 1010,
            result: RebootResult::Successful,
            detail: String::new(),
        });
        assert_eq!(
            check_reboot_allowed(&allowed, &recent, None, Some("b"), 1100),
            Err(RebootRefusal::RateLimited {
                since_s: 100,
                wait_s: 200
            })
        );
        assert_eq!(
            check_reboot_allowed(&allowed, &recent, None, Some("b"), 1000 + 300),
            Ok(())
        );
        assert_eq!(
            check_reboot_allowed(&allowed, &empty, None, None, 0),
            Err(RebootRefusal::NoBootId)
        );
    }
}
