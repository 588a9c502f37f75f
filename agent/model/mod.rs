//! The vocabulary every layer shares: what a probe reads ([`snapshot`], [`logs`], [`sensors`],
//! [`clock`], [`llm`], [`stack`]), what a check says ([`finding`]) and what an action is and did
//! ([`action`]) and how a finding is fixed ([`remedy`]). Plain data and pure helpers; no I/O,
//! no policy.

pub mod action;
pub mod board_id;
pub mod clock;
pub mod finding;
pub mod llm;
pub mod logs;
pub mod probed;
pub mod remedy;
pub mod sensors;
pub mod snapshot;
pub mod stack;
pub mod topics;
pub mod workload;

pub use clock::ClockSync;
pub use finding::{Evidence, Finding, Status, CHECK_IDS};
pub use logs::{LogClass, LogFile, LogHit, LogSource, PageSize, SourceState};
pub use probed::Probed;
pub use snapshot::*;
