//! What the daemon's blocking work hands back ([`Done`]) and how it is started ([`Dispatch`]).

use crate::action::gate::{CmdRef, Job};
use crate::diagnose::Diagnosis;
use crate::model::action::ActionOutcome;
use std::sync::Arc;

/// The state files the status and the planner use, read on the blocking thread that finished
/// the work (never on the thread that keeps the MQTT link alive).
#[derive(Debug, Clone, Default)]
pub(super) struct StateFiles {
    /// A verified boot-file edit waits for its reboot (`boot_edit.json`).
    pub boot_edit_pending_reboot: bool,
    /// The automatic compaction's attempt counter (`compact.json`).
    pub compact: crate::action::state::CompactState,
    /// The command line's runs in the command ledger (`commands.json`): an admin's compaction
    /// counts for the planner's cooldown.
    pub cli_runs: std::collections::BTreeMap<String, i64>,
}

impl StateFiles {
    /// Reads the files from `state`; a missing or unreadable file counts as its default.
    pub fn read(state: &crate::action::state::StateDir) -> StateFiles {
        use crate::action::state::{BootEditState, CompactState, BOOT_EDIT_FILE, COMPACT_FILE};
        let edit: Option<BootEditState> = state.load(BOOT_EDIT_FILE).ok().flatten();
        let compact: Option<CompactState> = state.load(COMPACT_FILE).ok().flatten();
        StateFiles {
            boot_edit_pending_reboot: edit.is_some_and(|e| e.verified && e.reboot_required),
            compact: compact.unwrap_or_default(),
            cli_runs: crate::action::gate::read_cli_runs(state),
        }
    }
}

/// Work finished on a blocking thread.
pub(super) enum Done {
    /// A diagnosis, or why it failed, with the state files read after it.
    Diagnosed(Result<Arc<Diagnosis>, String>, StateFiles),
    /// An action the executor ran.
    Action {
        /// The gate's job.
        job: Box<Job>,
        /// How it ended.
        outcome: ActionOutcome,
        /// A rescan's diagnosis: published as is, not made again.
        diagnosis: Option<Arc<Diagnosis>>,
        /// The state files after the action (it may have changed them).
        state: StateFiles,
    },
    /// The executor's policy checks of the next job ([`crate::action::executor::Executor::preflight`]):
    /// the diagnosis the action is to use, or the reason it is refused.
    Preflight {
        /// The gate's job.
        job: Box<Job>,
        /// What the checks said.
        checked: Result<Option<Arc<Diagnosis>>, String>,
    },
    /// The periodic reconciliation of the reboot state: a finished reboot's record, or why the
    /// state could not be read or written.
    Reboot(Result<Option<crate::action::reboot::RebootRecord>, String>),
    /// The board's clock state, read at this instant.
    Clock(crate::model::ClockSync, std::time::Instant),
    /// The pending update's record, read and removed (`None`: there was none), or why not.
    UpdateSettled(Result<Option<crate::action::update::Settled>, String>),
    /// A copy of the command ledger was written on the blocking pool (the command line's runs
    /// read from the file), or why it was not.
    LedgerSaved(Result<std::collections::BTreeMap<String, i64>, String>),
    /// A running command's current step (`fix`), published with its `executing` state.
    Step {
        /// The command.
        cmd: CmdRef,
        /// `"2 of 4: install hailo-h10-all=5.1.1"`.
        step: String,
    },
}

/// How blocking work is started.
pub(super) enum Dispatch {
    /// On tokio's blocking thread pool (the daemon).
    Blocking,
    /// Kept for the unit test to finish: the actions started (with the diagnosis they act on)
    /// and the number of diagnoses asked for.
    #[cfg(test)]
    Held {
        actions: Vec<(Job, Option<Arc<Diagnosis>>)>,
        diagnoses: usize,
    },
}
