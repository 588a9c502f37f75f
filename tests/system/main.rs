//! The system tests: real brokers (mosquitto, RabbitMQ, amqtt, Home Assistant's schemas), the
//! operator's own tools, the static aarch64 build under qemu-user, virtual boards under
//! qemu-system, the Debian packages and the whole arm64 image (run them with
//! `cargo test --test system`, one part with e.g. `cargo test --test system mqtt::`). Without
//! a tool they need they skip with a printed reason, and fail under `CI=true`.

// Tests build board trees and fixtures with plain writes (clippy.toml: disallowed_methods).
#![allow(clippy::disallowed_methods)]

#[path = "../support/mod.rs"]
mod support;
// The virtual-board harness, at the crate root as in benches/vboard.rs, which includes the same
// files (they name each other as `crate::common`, `crate::newc`).
#[path = "../vboard/common.rs"]
mod common;
#[path = "../vboard/fleet.rs"]
mod fleet;
#[path = "../vboard/harness.rs"]
mod harness;
#[path = "../vboard/newc.rs"]
mod newc;

mod aarch64;
mod apt_signed;
mod attacks_config;
mod attacks_fleet;
mod capture;
mod container;
mod fleet_json;
mod identity;
mod image;
mod interop;
mod mqtt;
mod nats;
mod operator;
mod operator_config;
mod package;
mod package_docs;
mod rollout;
mod update_answer;
// `fleet serve` is the default feature `serve` (the board build leaves it out).
#[cfg(feature = "serve")]
mod serve;
#[cfg(feature = "serve")]
mod serve_bounds;
#[cfg(feature = "serve")]
mod serve_burst;
#[cfg(feature = "serve")]
mod serve_review;
#[cfg(feature = "serve")]
mod serve_tools;
// The arm64 package with `fleet serve` (its binary serves under qemu, started as serve.rs does).
#[cfg(feature = "serve")]
mod package_operator;
mod vboard;
