//! Builds a real systemd journal directory for tests: entries in the journal export format are
//! written by `systemd-journal-remote` into `<dir>/var/log/journal/<name>.journal`, which
//! `journalctl -D` (and so the agent) reads. The host's own journal is never touched.
#![allow(dead_code)]

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Where Debian installs systemd-journal-remote (not on PATH).
pub const JOURNAL_REMOTE: &str = "/lib/systemd/systemd-journal-remote";

/// A boot id for the generated entries (32 hex digits).
pub const BOOT_ID: &str = "0123456789abcdef0123456789abcdef";

/// True when the tools are there; fails in CI (`CI` set) when one is missing.
pub fn journal_tools() -> bool {
    let ok = Path::new(JOURNAL_REMOTE).exists()
        && Command::new("journalctl")
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success());
    if !ok {
        assert!(
            std::env::var_os("CI").is_none(),
            "systemd-journal-remote and journalctl are required in CI (apt-get install systemd-journal-remote)"
        );
        eprintln!("SKIP: systemd-journal-remote/journalctl not installed (set CI=true to make this a failure)");
    }
    ok
}

/// One journal entry: a kernel message (`unit = None`) or a message of a unit's process.
pub struct Entry<'a> {
    /// `_SYSTEMD_UNIT`, `_COMM`, `SYSLOG_IDENTIFIER` for a workload; `None` = kernel transport.
    pub unit: Option<(&'a str, &'a str)>,
    /// `MESSAGE`.
    pub message: &'a str,
}

/// Writes `entries` (timestamps from `first_usec` on) into `<tree>/var/log/journal/<name>.journal`.
pub fn write_journal(tree: &Path, name: &str, first_usec: u64, entries: &[Entry<'_>]) -> PathBuf {
    let dir = tree.join("var/log/journal");
    std::fs::create_dir_all(&dir).unwrap();
    let mut export = String::new();
    for (i, e) in entries.iter().enumerate() {
        let t = first_usec + i as u64;
        export.push_str(&format!(
            "__REALTIME_TIMESTAMP={}\n__MONOTONIC_TIMESTAMP={}\n_BOOT_ID={BOOT_ID}\n_MACHINE_ID=fedcba9876543210fedcba9876543210\n",
            1_700_000_000_000_000 + t,
            t
        ));
        match e.unit {
            None => export.push_str("_TRANSPORT=kernel\nSYSLOG_IDENTIFIER=kernel\nPRIORITY=3\n"),
            Some((unit, comm)) => export.push_str(&format!(
                "_TRANSPORT=stdout\n_SYSTEMD_UNIT={unit}\n_COMM={comm}\nSYSLOG_IDENTIFIER={comm}\n_PID=4242\nPRIORITY=6\n"
            )),
        }
        export.push_str(&format!("MESSAGE={}\n\n", e.message));
    }
    let out = dir.join(format!("{name}.journal"));
    let mut child = Command::new(JOURNAL_REMOTE)
        .arg("-o")
        .arg(&out)
        .arg("-")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("systemd-journal-remote runs");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(export.as_bytes())
        .unwrap();
    let o = child.wait_with_output().unwrap();
    assert!(
        o.status.success(),
        "systemd-journal-remote: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    out
}
