//! The fast integration tests: in-process and quick, with no qemu and no image (run them with
//! `cargo test --test fast`, one part with e.g. `cargo test --test fast cli::`). The board
//! fixtures, the command line, the parsers and the gate under property tests, the GGUF reader,
//! the journal as evidence, `capture`, the Prometheus and Home Assistant outputs, first-boot
//! provisioning and the guarded actions.

// Tests build board trees and fixtures with plain writes (clippy.toml: disallowed_methods).
#![allow(clippy::disallowed_methods)]

#[path = "../support/mod.rs"]
mod support;

mod actions;
mod blind_views;
mod boards;
mod build_cache;
mod capture;
mod capture_encodings;
mod cli;
mod cli_reference;
mod cli_usage;
mod config_bytes;
mod config_edges;
mod fix;
mod fuzz_gate;
mod fuzz_parsers;
mod fuzz_workloads;
mod ha_addon;
mod ha_sensors;
mod journal;
mod json_output;
mod llm;
mod procfs_parsers;
mod prometheus;
mod provision;
#[cfg(feature = "serve")]
mod serve_files;
mod signatures;
mod sleeps;
mod variants;
