//! The board clock's state for `clock.sync`: does a time service say the wall clock is
//! synchronised? Boards without an RTC battery boot with a restored or build-time clock.
//!
//! Read from the time service the board runs:
//! - systemd-timesyncd: `/run/systemd/timesync/synchronized` exists once it has synchronised the
//!   clock (systemd 246 and later); the `/run/systemd/timesync` directory without it means
//!   timesyncd runs and has not synchronised yet.
//! - chronyd (`/run/chrony` exists): chrony keeps no such file (its drift file in
//!   `/var/lib/chrony` says nothing about the current state), so on a live board the agent asks
//!   chronyd with `chronyc -n tracking` (2 s limit, the answer kept for 5 s) and reads its
//!   `Leap status` line: `Normal`, `Insert second` or `Delete second` mean synchronised, `Not
//!   synchronised` means not. `npu-agent capture` stores that output as
//!   [`CAPTURE_CHRONYC_TRACKING`], which is what a captured tree (`--root`) is judged from.
//!
//! Anything else is unknown (`skip`, saying why). The kernel's own flag (`adjtimex`
//! `STA_UNSYNC`, which every time daemon maintains) is not read: rustix has no `adjtimex` call and
//! the crate forbids unsafe code, and `timedatectl`'s `NTPSynchronized` would start
//! systemd-timedated over D-Bus on every check cycle.

use crate::model::ClockSync;
use crate::root::SysRoot;
use crate::sys::process::{run_capture, RunError};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// File systemd-timesyncd creates once it has synchronised the clock.
pub const TIMESYNC_SYNCHRONIZED: &str = "/run/systemd/timesync/synchronized";
/// Directory systemd-timesyncd keeps while it runs.
pub const TIMESYNC_DIR: &str = "/run/systemd/timesync";
/// chronyd's runtime directory.
pub const CHRONY_DIR: &str = "/run/chrony";
/// `chronyc -n tracking` output as `npu-agent capture` stores it in a captured tree.
pub const CAPTURE_CHRONYC_TRACKING: &str = "/npu-agent-capture/chronyc-tracking";
/// How long `chronyc` may take before the state counts as unknown.
pub const CHRONYC_TIMEOUT: Duration = Duration::from_secs(2);
/// How long a live `chronyc` answer is reused (the command path asks for every command).
pub const CHRONYC_CACHE: Duration = Duration::from_secs(5);

/// Reads chrony's verdict from `chronyc tracking` output (`file`: where it came from).
pub fn parse_chronyc_tracking(text: &str, file: &str) -> ClockSync {
    let field = |name: &str| {
        text.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            (k.trim() == name).then(|| v.trim().to_string())
        })
    };
    let Some(leap) = field("Leap status") else {
        let first = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
        return ClockSync::Unknown(format!(
            "chronyc tracking gave no Leap status ({file}: {:?})",
            first.chars().take(120).collect::<String>()
        ));
    };
    let reference = field("Reference ID").unwrap_or_default();
    match leap.as_str() {
        "Normal" | "Insert second" | "Delete second" => ClockSync::Synchronised {
            source: format!("chronyd (Leap status {leap}, Reference ID {reference})"),
            file: file.into(),
        },
        "Not synchronised" => ClockSync::NotSynchronised {
            why: format!(
                "chronyd runs and reports Leap status \"Not synchronised\" (Reference ID {reference}): it has not reached a time source yet"
            ),
            file: file.into(),
        },
        other => ClockSync::Unknown(format!(
            "chronyc tracking reports an unknown Leap status {:?} ({file})",
            other.chars().take(40).collect::<String>()
        )),
    }
}

/// Runs `program -n tracking` (chronyc) for at most [`CHRONYC_TIMEOUT`]; its stdout, or why not.
pub fn run_chronyc(program: &str) -> Result<String, String> {
    let mut cmd = std::process::Command::new(program);
    cmd.args(["-n", "tracking"]);
    let (done, out) = run_capture(&mut cmd, CHRONYC_TIMEOUT, 64 * 1024).map_err(|e| match e {
        RunError::NotFound(_) => "chronyc is not installed".to_string(),
        RunError::TimedOut { timeout_s, .. } => {
            format!("chronyc tracking gave no answer within {timeout_s} s")
        }
        RunError::Failed(why) => why,
    })?;
    if done.status.success() && !out.trim().is_empty() {
        Ok(out)
    } else {
        let msg = if done.stderr.trim().is_empty() {
            &out
        } else {
            &done.stderr
        };
        Err(format!(
            "chronyc tracking failed ({}): {}",
            done.status,
            msg.trim().chars().take(160).collect::<String>()
        ))
    }
}

/// Name of the chronyc program (overridable with `NPU_AGENT_CHRONYC`).
fn chronyc() -> String {
    std::env::var("NPU_AGENT_CHRONYC").unwrap_or_else(|_| "chronyc".into())
}

static CHRONYC_ANSWER: Mutex<Option<(Instant, Result<String, String>)>> = Mutex::new(None);

/// `chronyc -n tracking` on the live board, reused for [`CHRONYC_CACHE`].
pub fn live_chronyc_tracking() -> Result<String, String> {
    let mut cached = CHRONYC_ANSWER.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((t, r)) = cached.as_ref() {
        if t.elapsed() < CHRONYC_CACHE {
            return r.clone();
        }
    }
    let r = run_chronyc(&chronyc());
    *cached = Some((Instant::now(), r.clone()));
    r
}

/// Reads the clock state under `root` (live or a captured tree).
pub fn probe(root: &SysRoot) -> ClockSync {
    if root.exists(TIMESYNC_SYNCHRONIZED) {
        return ClockSync::Synchronised {
            source: "systemd-timesyncd".into(),
            file: TIMESYNC_SYNCHRONIZED.into(),
        };
    }
    if root.is_dir(CHRONY_DIR) {
        if root.is_live() {
            return match live_chronyc_tracking() {
                Ok(text) => parse_chronyc_tracking(&text, "chronyc -n tracking"),
                Err(e) => ClockSync::Unknown(format!("chronyd runs ({CHRONY_DIR}) but {e}")),
            };
        }
        return match root.read_string(CAPTURE_CHRONYC_TRACKING) {
            Ok(text) => parse_chronyc_tracking(&text, CAPTURE_CHRONYC_TRACKING),
            Err(_) => ClockSync::Unknown(format!(
                "chronyd ran ({CHRONY_DIR}) but the captured tree holds no chronyc tracking output ({CAPTURE_CHRONYC_TRACKING})"
            )),
        };
    }
    if root.is_dir(TIMESYNC_DIR) {
        return ClockSync::NotSynchronised {
            why: format!(
                "{TIMESYNC_DIR} exists but {TIMESYNC_SYNCHRONIZED} does not: systemd-timesyncd has not reached a time server yet"
            ),
            file: TIMESYNC_DIR.into(),
        };
    }
    if root.is_live() {
        ClockSync::Unknown(format!(
            "no time-sync state to read ({TIMESYNC_DIR} and {CHRONY_DIR} are absent)"
        ))
    } else {
        ClockSync::Unknown(format!(
            "the captured tree holds no time-sync state ({TIMESYNC_DIR}, {CHRONY_DIR})"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(files: &[&str], dirs: &[&str]) -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        for dir in dirs {
            std::fs::create_dir_all(d.path().join(dir.trim_start_matches('/'))).unwrap();
        }
        for f in files {
            let p = d.path().join(f.trim_start_matches('/'));
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(p, "").unwrap();
        }
        d
    }

    #[test]
    fn state_from_timesyncd_files() {
        let d = tree(&[TIMESYNC_SYNCHRONIZED], &[]);
        assert!(matches!(
            probe(&SysRoot::new(d.path())),
            ClockSync::Synchronised { .. }
        ));
        let d = tree(&[], &[TIMESYNC_DIR]);
        assert!(probe(&SysRoot::new(d.path())).is_unsynchronised());
        let d = tree(&[], &[CHRONY_DIR]);
        assert!(matches!(
            probe(&SysRoot::new(d.path())),
            ClockSync::Unknown(_)
        ));
        let d = tree(&[], &[]);
        let ClockSync::Unknown(why) = probe(&SysRoot::new(d.path())) else {
            panic!()
        };
        assert!(why.contains("captured tree"), "{why}");
    }

    const SYNCED: &str = include_str!("../../tests/fixtures/chrony/tracking-synchronised.txt");
    const UNSYNCED: &str =
        include_str!("../../tests/fixtures/chrony/tracking-not-synchronised.txt");

    #[test]
    fn chrony_leap_status_decides() {
        let ClockSync::Synchronised { source, file } = parse_chronyc_tracking(SYNCED, "x") else {
            panic!()
        };
        assert_eq!(
            source,
            "chronyd (Leap status Normal, Reference ID C0A80101 (192.168.1.1))"
        );
        assert_eq!(file, "x");
        let c = parse_chronyc_tracking(UNSYNCED, "x");
        assert!(c.is_unsynchronised(), "{c:?}");
        let ClockSync::NotSynchronised { why, .. } = c else {
            panic!()
        };
        assert!(why.contains("\"Not synchronised\""), "{why}");
        let leap_second = SYNCED.replace(
            "Leap status     : Normal",
            "Leap status     : Insert second",
        );
        assert!(matches!(
            parse_chronyc_tracking(&leap_second, "x"),
            ClockSync::Synchronised { .. }
        ));
        for bad in ["506 Cannot talk to daemon\n", "", "Leap status : Maybe\n"] {
            assert!(
                matches!(parse_chronyc_tracking(bad, "x"), ClockSync::Unknown(_)),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn chrony_captured_tree_is_judged_from_the_stored_output() {
        for (text, synced) in [(SYNCED, true), (UNSYNCED, false)] {
            let d = tree(&[], &[CHRONY_DIR, "/npu-agent-capture"]);
            std::fs::write(
                d.path()
                    .join(CAPTURE_CHRONYC_TRACKING.trim_start_matches('/')),
                text,
            )
            .unwrap();
            let c = probe(&SysRoot::new(d.path()));
            assert_eq!(c.is_unsynchronised(), !synced, "{c:?}");
            assert_eq!(matches!(c, ClockSync::Synchronised { .. }), synced, "{c:?}");
        }
        // chronyd's runtime directory alone (or a stale timesyncd directory beside it) is not
        // evidence either way.
        let d = tree(&[], &[CHRONY_DIR, TIMESYNC_DIR]);
        let ClockSync::Unknown(why) = probe(&SysRoot::new(d.path())) else {
            panic!()
        };
        assert!(why.contains(CAPTURE_CHRONYC_TRACKING), "{why}");
    }

    #[test]
    fn chronyc_is_run_with_a_time_limit() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let script = |name: &str, body: &str| {
            let p = d.path().join(name);
            std::fs::write(&p, format!("#!/bin/sh\n{body}\n")).unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
            p.to_string_lossy().into_owned()
        };
        let fixture = d.path().join("out.txt");
        std::fs::write(&fixture, UNSYNCED).unwrap();
        let ok = script(
            "ok",
            &format!(
                "[ \"$1 $2\" = \"-n tracking\" ] || exit 9\ncat {}",
                fixture.display()
            ),
        );
        assert_eq!(run_chronyc(&ok).unwrap(), UNSYNCED);
        let down = script("down", "echo '506 Cannot talk to daemon' >&2\nexit 1");
        let e = run_chronyc(&down).unwrap_err();
        assert!(e.contains("506 Cannot talk to daemon"), "{e}");
        let t0 = Instant::now();
        let hung = script("hung", "exec sleep 30");
        let e = run_chronyc(&hung).unwrap_err();
        assert!(e.contains("no answer within 2 s"), "{e}");
        assert!(t0.elapsed() < Duration::from_secs(10));
        let e = run_chronyc(&d.path().join("absent").to_string_lossy()).unwrap_err();
        assert_eq!(e, "chronyc is not installed");
    }
}
