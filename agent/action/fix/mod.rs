//! `fix`: a finding's remedy ([`crate::model::remedy::Remedy`]) carried out as an action.
//!
//! - [`plan`]: which steps would run for which findings on this board, and why a finding has no
//!   automatic fix (pure: diagnosis and stack in, plan out).
//! - [`apply`]: each step carried out under the root — files with backup, atomic write, re-read
//!   and undo; packages through an `apt-get -s` simulation first; systemd through `systemctl`.
//! - [`run`]: the whole action: plan, refusals, apply, diagnose again, verdict.
//! - [`delegate`]: the same action in a transient unit, when the service's sandbox keeps the
//!   files it writes read-only.

pub mod apply;
pub mod delegate;
pub mod plan;
pub mod run;

/// Where a running `fix` tells its current step (`"2 of 4: install ..."`): the daemon publishes
/// it with the command's `executing`.
pub type OnStep = std::sync::Arc<dyn Fn(&str) + Send + Sync>;
