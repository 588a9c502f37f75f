//! A panic in the shipped configuration of the static aarch64 agent: the release profile
//! (`panic = "abort"`, LTO) and the target's link flags (.cargo/config.toml). tests/system/aarch64.rs
//! (`aarch64_panic_prints_its_message_and_aborts`) builds it with
//! `cargo build --release --target aarch64-unknown-linux-musl --example panic_probe`, runs it
//! under qemu-aarch64-static and checks that the panic still prints its message and aborts.

// Tests build board trees and fixtures with plain writes (clippy.toml: disallowed_methods).
#![allow(clippy::disallowed_methods)]

fn main() {
    // From argv, so the panic is not folded away at compile time.
    let arguments = std::env::args_os().count();
    let threshold: usize = std::hint::black_box(1_000);
    if arguments < threshold {
        panic!("panic probe: {arguments} argument(s), fewer than {threshold}");
    }
}
