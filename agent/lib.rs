//! npu-agent keeps edge AI boards healthy: Raspberry Pi 5 with a Hailo NPU and Rockchip RK3588
//! boards with rknpu.
//!
//! Data flow (one direction):
//!
//! ```text
//! profile (TOML) --> probes (read files under a root; no decisions) --> snapshot
//! snapshot + profile --> checks (pure) --> findings --> report --> stdout | MQTT status
//! ```
//!
//! Modules: [`root`] (the only place that joins board paths under `--root`), [`parse`] (pure
//! parsers), [`probe`] (file reading into a [`probe::Snapshot`]), [`profile`] (board profiles and
//! detection), [`check`] (the checks of README "Checks"), [`report`] (the status object and its
//! text form), [`diagnose`] (the whole pipeline), [`cli`] (the command line).

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod action;
pub mod capture;
pub mod check;
pub mod cli;
pub mod config;
pub mod daemon;
pub mod diagnose;
pub mod fleet;
pub mod model;
pub mod mqtt;
pub mod parse;
pub mod probe;
pub mod profile;
pub mod provision;
pub mod report;
pub mod root;
pub mod standby;
pub mod sys;

// Former top-level paths of the sys/ modules, kept while callers move.
pub use report::prometheus;
pub use sys::{log as logging, runtime, secret, term, time as timefmt};
