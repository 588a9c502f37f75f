//! npu-agent keeps edge AI boards healthy: Raspberry Pi 5 with a Hailo NPU and Rockchip RK3588
//! boards with rknpu.
//!
//! Data flows one way:
//!
//! ```text
//! profile -> probe -> check -> plan -> gate -> execute -> report -> publish
//! ```
//!
//! A board profile says what to look at; probes read the board into a snapshot; pure checks turn
//! snapshot and profile into findings; the planner proposes actions, the gate admits or refuses
//! every action whatever its origin, and one executor runs it; the report is assembled in one
//! place and printed or published over MQTT.
//!
//! The map, bottom layer first: a module imports only from the lines above it
//! (tests/house.rs holds every file to it):
//! - [`sys`]: utilities — the operator log, child processes with a deadline, the runtime shape,
//!   secrets kept out of logs, terminal-safe output, UTC time, bounded file reads.
//! - [`root`]: the only place that joins board paths under `--root`.
//! - [`parse`]: pure parsers of the board's files (text in, typed values out).
//! - [`model`]: the shared vocabulary — snapshot, findings, actions and their outcomes, board
//!   ids and topics.
//! - [`profile`]: board profiles, the catalogs (TOML) and board detection.
//! - [`probe`]: all reading of the board (files, kernel log, journal, clock) into a snapshot.
//! - [`check`]: the pure checks, one finding or more per check id.
//! - [`report`]: the status, its text form, metrics, Prometheus text, Home Assistant discovery.
//! - [`diagnose`]: one pass of profile, probe and check into a report.
//! - [`capture`]: the support bundle.
//! - [`mqtt`]: signed commands, board seals, the connection, Home Assistant on the link.
//! - [`action`]: the planner, the gate, the one executor, rate limits, and each action.
//! - [`config`]: the agent's settings, assembled once from files and environment.
//! - [`provision`]: first-boot provisioning from the boot partition.
//! - [`daemon`]: `npu-agent run`'s event loop: routes link events, finished jobs and timers.
//! - [`standby`]: `npu-agent run` on a board nobody configured yet.
//! - [`fleet`]: the operator side: `fleet send`, `fleet watch` and `fleet capture`.
//! - [`cli`]: the command line, one file per command.

// Unit tests build board trees with plain writes (clippy.toml: disallowed_methods).
#![cfg_attr(test, allow(clippy::disallowed_methods))]

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
