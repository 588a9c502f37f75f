//! What the daemon's blocking work hands back ([`Done`]) and how it is started ([`Dispatch`]).

use crate::action::gate::Job;
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
