//! The suite never touches this machine's own npu-agent installation.
//!
//! `.ci/run` saves `tests/host-fingerprint.sh`'s output (every file, link and unit of npu-agent on
//! this machine, with modes, mtimes and contents' sha256, and its dpkg status) before
//! `cargo test`, points `NPUAGENT_TEST_HOST_BEFORE` at it, and runs this test once more after the whole
//! suite. It asserts the machine looks exactly as before: no test installed, upgraded, purged or
//! enabled anything here (installing happens in a throwaway chroot and in a booted image, see
//! tests/system/image.rs).
//!
//! Without `NPUAGENT_TEST_HOST_BEFORE` there is nothing to compare with: a failure under `CI=true`,
//! a printed skip otherwise.

// Tests build board trees and fixtures with plain writes (clippy.toml: disallowed_methods).
#![allow(clippy::disallowed_methods)]

use std::io::Write as _;
use std::path::Path;
use std::process::Command;

fn fingerprint() -> String {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/host-fingerprint.sh");
    let o = Command::new("sh").arg(&script).output().unwrap();
    assert!(
        o.status.success(),
        "{}: {}",
        script.display(),
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8(o.stdout).unwrap()
}

#[test]
fn this_machines_npu_agent_files_units_and_dpkg_status_are_as_before_the_suite() {
    let now = fingerprint();
    // Reading is cheap and deterministic: two readings agree (the fingerprint has no clock in it).
    assert_eq!(now, fingerprint());
    assert!(now.contains("dpkg status: "), "{now}");
    let Some(before) = std::env::var_os("NPUAGENT_TEST_HOST_BEFORE") else {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI=true needs NPUAGENT_TEST_HOST_BEFORE (.ci/run saves tests/host-fingerprint.sh's output before the suite)"
        );
        let _ = writeln!(
            std::io::stderr(),
            "SKIP: NPUAGENT_TEST_HOST_BEFORE is unset: no fingerprint from before the suite to compare with \
             (sh tests/host-fingerprint.sh > before.txt; NPUAGENT_TEST_HOST_BEFORE=before.txt cargo test)"
        );
        return;
    };
    let before = std::fs::read_to_string(&before)
        .unwrap_or_else(|e| panic!("{}: {e}", Path::new(&before).display()));
    println!("this machine's npu-agent installation:\n{now}");
    assert_eq!(
        now, before,
        "this machine's npu-agent files, units or dpkg status changed during the suite"
    );
}
