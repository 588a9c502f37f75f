//! What the daemon's blocking work hands back ([`Done`]) and how it is started ([`Dispatch`]).

use crate::action::gate::{CmdRef, Job};
use crate::diagnose::Diagnosis;
use crate::model::action::ActionOutcome;
use std::sync::Arc;

/// Work finished on a blocking thread.
pub(super) enum Done {
    /// A diagnosis, or why it failed.
    Diagnosed(Result<Arc<Diagnosis>, String>),
    /// An action the executor ran.
    Action {
        /// The gate's job.
        job: Box<Job>,
        /// How it ended.
        outcome: ActionOutcome,
        /// A rescan's diagnosis: published as is, not made again.
        diagnosis: Option<Arc<Diagnosis>>,
    },
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
