//! The static aarch64 agent (`--target aarch64-unknown-linux-musl`, see .cargo/config.toml) against
//! the host build: it must be a static aarch64 ELF (no interpreter, no NEEDED libraries), stripped
//! and within the size limit, and under `qemu-aarch64-static` it must report exactly what the host
//! build reports on every board tree in tests/fixtures/boards/*/root (the whole JSON report except
//! `time`). A panic in the same build configuration (examples/panic_probe.rs) must print its
//! location and message and end by SIGABRT.
//!
//! The aarch64 binary: `NPUAGENT_TEST_AARCH64_BIN` if set, else built (or found up to date) in this
//! test's own target directory — see `common::aarch64_agent`. `.ci/run` builds it first.
//! A missing tool or target fails the test when `CI` is set, and skips it with a reason otherwise.

use crate::common;

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

fn fixture_roots() -> Vec<PathBuf> {
    let dir = common::manifest_dir().join("tests/fixtures/boards");
    let mut roots: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("tests/fixtures/boards")
        .map(|e| e.expect("dir entry").path().join("root"))
        .filter(|r| r.is_dir())
        .collect();
    roots.sort();
    roots
}

/// Runs `check --format json --root ROOT` and returns (exit code, report).
fn check(cmd: &mut Command, root: &Path) -> (i32, Value) {
    let out = cmd
        .args(["check", "--format", "json", "--root"])
        .arg(root)
        .output()
        .expect("run the agent");
    let code = out
        .status
        .code()
        .unwrap_or_else(|| panic!("killed by a signal on {}", root.display()));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON on {} ({e}); stderr: {}",
            root.display(),
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (code, v)
}

/// The ceiling of the static aarch64 board build, bytes (the development guide's "Footprint"):
/// every feature, the fleet tools included, Cargo's release settings only. Issue 36 asked for
/// 3,600,000 bytes, which this build cannot meet (docs/development.md, "Deviations"); this
/// ceiling holds until that is decided. `bash bench/size.sh` prints where the bytes go.
const SIZE_LIMIT_BYTES: u64 = 4_000_000;

/// Fails when the stripped binary is above `limit`; prints the size and the margin.
fn assert_stripped_size_at_most(limit: u64, what: &str) {
    let Some(bin) = common::aarch64_agent() else {
        return;
    };
    let facts = common::elf_facts(&bin);
    assert!(
        !facts.symbols,
        "{} has a symbol table: the release profile's `strip = true` is not applied",
        bin.display()
    );
    assert!(
        facts.size <= limit,
        "{} is {} bytes, {} over the {limit}-byte {what} (bash bench/size.sh shows where the bytes go)",
        bin.display(),
        facts.size,
        facts.size - limit
    );
    eprintln!(
        "static aarch64 agent: {} bytes, {} under the {limit}-byte {what}",
        facts.size,
        limit - facts.size
    );
}

/// `bin` (the aarch64 agent or a probe) with `qemu-aarch64-static` to run it; `None` (a skip,
/// a failure under `CI=true`) when either is missing. `what` says what qemu runs.
fn under_qemu(bin: Option<PathBuf>, what: &str) -> Option<(PathBuf, PathBuf)> {
    let bin = bin?;
    let why = format!("runs {what} on this host; Debian package qemu-user-static");
    let [qemu] = common::tools(["qemu-aarch64-static"], &why)?;
    Some((bin, qemu))
}

#[test]
fn aarch64_binary_fits_the_size_limit() {
    assert_stripped_size_at_most(SIZE_LIMIT_BYTES, "limit");
}

/// A panic in the shipped build configuration (`panic = "abort"`) must still print
/// where it happened and its message, print a backtrace header only when one is asked for, and
/// end the process by SIGABRT.
#[test]
fn aarch64_panic_prints_its_message_and_aborts() {
    use std::os::unix::process::ExitStatusExt;
    let Some((probe, qemu)) = under_qemu(common::aarch64_panic_probe(), "the aarch64 panic probe")
    else {
        return;
    };
    for backtrace in [None, Some("0"), Some("1"), Some("full")] {
        let mut cmd = Command::new(&qemu);
        cmd.arg(&probe).env_remove("RUST_BACKTRACE");
        if let Some(b) = backtrace {
            cmd.env("RUST_BACKTRACE", b);
        }
        let out = cmd.output().expect("run the panic probe under qemu");
        let stderr = String::from_utf8_lossy(&out.stderr);
        let case = format!("RUST_BACKTRACE={backtrace:?}");
        // qemu-user re-raises the guest's fatal signal on itself.
        assert_eq!(
            out.status.signal(),
            Some(6),
            "{case}: the probe did not end by SIGABRT ({:?}); stderr:\n{stderr}",
            out.status
        );
        assert!(
            stderr.contains("panicked at examples/panic_probe.rs:")
                && stderr.contains("panic probe: 1 argument(s), fewer than 1000"),
            "{case}: no panic location and message; stderr:\n{stderr}"
        );
        let asked = matches!(backtrace, Some("1" | "full"));
        assert_eq!(
            stderr.contains("stack backtrace:"),
            asked,
            "{case}: a backtrace printed when not asked for, or missing when asked for; stderr:\n{stderr}"
        );
    }
}

#[test]
fn aarch64_binary_is_a_static_aarch64_elf() {
    let Some(bin) = common::aarch64_agent() else {
        return;
    };
    let facts = common::elf_facts(&bin);
    assert!(
        facts.aarch64,
        "{} is not an aarch64 ELF: {facts:?}",
        bin.display()
    );
    assert_eq!(
        facts.interpreter,
        None,
        "{} has an ELF interpreter: it is dynamically linked",
        bin.display()
    );
    assert_eq!(facts.needed, 0, "{} needs shared libraries", bin.display());
    // The size is part of the product (it ships to SD-card images): keep an eye on it.
    assert!(
        facts.size < 8 << 20,
        "{} is {} bytes: the size-oriented release profile is not applied",
        bin.display(),
        facts.size
    );
    eprintln!("static aarch64 agent: {} bytes", facts.size);
    // The same reading of the host build (x86_64, dynamic glibc) tells the difference.
    if cfg!(all(target_arch = "x86_64", target_env = "gnu")) {
        let host = common::elf_facts(&common::host_agent());
        assert!(
            !host.aarch64 && host.interpreter.is_some() && host.needed > 0,
            "host build misread: {host:?}"
        );
    }
}

#[test]
fn aarch64_reports_equal_host_reports_on_every_board_tree() {
    let Some((bin, qemu)) = under_qemu(common::aarch64_agent(), "the aarch64 agent") else {
        return;
    };
    let roots = fixture_roots();
    assert!(
        roots.len() >= 20,
        "expected the board trees under tests/fixtures/boards, found {}",
        roots.len()
    );
    let mut compared = 0;
    for root in &roots {
        let (host_code, mut host) = check(&mut Command::new(common::host_agent()), root);
        let mut cmd = Command::new(&qemu);
        cmd.arg(&bin);
        let (arm_code, mut arm) = check(&mut cmd, root);
        let case = root
            .parent()
            .and_then(Path::file_name)
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        // The fields named by the contract first, so a failure names what differs.
        for key in ["profile", "model", "health", "metrics", "findings"] {
            assert!(host.get(key).is_some(), "{case}: host report has no {key}");
            assert_eq!(
                arm[key], host[key],
                "{case}: aarch64 and host differ in `{key}`"
            );
        }
        assert_eq!(arm_code, host_code, "{case}: exit codes differ");
        // Then everything else but the wall-clock time.
        for v in [&mut host, &mut arm] {
            v.as_object_mut().expect("report object").remove("time");
        }
        assert_eq!(arm, host, "{case}: reports differ outside `time`");
        assert!(
            !host["findings"].as_array().expect("findings").is_empty(),
            "{case}: no findings"
        );
        compared += 1;
    }
    assert_eq!(compared, roots.len());
    eprintln!("{compared} board trees, the x86 server trees among them: aarch64 == host");
}

#[test]
fn the_board_build_has_the_fleet_tools() {
    let Some((bin, qemu)) = under_qemu(common::aarch64_agent(), "the aarch64 agent") else {
        return;
    };
    let run = |args: &[&str]| {
        let out = Command::new(&qemu)
            .arg(&bin)
            .args(args)
            .output()
            .expect("run the aarch64 agent under qemu");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, help, err) = run(&["fleet", "watch", "--help"]);
    assert_eq!(code, Some(0), "fleet watch --help: {err}");
    assert!(help.contains("--broker"), "fleet watch --help: {help}");
    // A real run reaches for the broker (nothing listens on port 9) instead of refusing.
    let (code, _, err) = run(&["fleet", "watch", "--broker", "mqtt://127.0.0.1:9", "--once"]);
    assert_ne!(code, Some(0), "{err}");
    assert!(!err.contains("not in this build"), "{err}");
    assert!(
        err.contains("127.0.0.1:9"),
        "names the broker it could not reach: {err}"
    );
    // The fleet service is left out of the board build: asked for, it says where it is.
    let (code, _, err) = run(&["fleet", "serve", "--listen", "127.0.0.1:0"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("fleet serve is not in this build") && err.contains("npu-agent-operator"),
        "{err}"
    );
}
