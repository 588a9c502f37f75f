//! `clock.sync`: is the board's wall clock synchronised? Boards without an RTC battery (a Pi 5
//! without one, most RK3588 boards) boot with a restored or build-time clock and stay wrong until
//! a time service reaches a server; commands that expire are judged against that clock.
//!
//! Read from systemd-timesyncd's state: `/run/systemd/timesync/synchronized` exists once it has
//! synchronised the clock (systemd 246 and later); the `/run/systemd/timesync` directory without
//! it means timesyncd runs and has not synchronised yet. A live board running chronyd instead
//! (`/run/chrony`) has no such file, so the state is unknown there (`skip`, saying why), and so
//! is a captured tree (`--root`) without these files. The kernel's own flag (`adjtimex`
//! `STA_UNSYNC`) is not read: rustix has no `adjtimex` call and the crate forbids unsafe code.
//!
//! [`command_hold`] is the command path's hook: while the clock is known to be unsynchronised,
//! destructive commands that carry an expiry are refused with "board clock not synchronised".

use super::{Ctx, Evidence, Finding, Status};
use crate::root::SysRoot;

/// File systemd-timesyncd creates once it has synchronised the clock.
pub const TIMESYNC_SYNCHRONIZED: &str = "/run/systemd/timesync/synchronized";
/// Directory systemd-timesyncd keeps while it runs.
pub const TIMESYNC_DIR: &str = "/run/systemd/timesync";
/// chronyd's runtime directory.
pub const CHRONY_DIR: &str = "/run/chrony";

/// What the board's files say about its clock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClockSync {
    /// A time service reports the clock synchronised (which service, and the file read).
    Synchronised(String),
    /// A time service runs and has not synchronised the clock (the evidence).
    NotSynchronised(String),
    /// Nothing to judge from (why).
    Unknown(String),
}

impl ClockSync {
    /// True only when the clock is known not to be synchronised.
    pub fn is_unsynchronised(&self) -> bool {
        matches!(self, ClockSync::NotSynchronised(_))
    }
}

/// Reads the clock state under `root` (live or a captured tree).
pub fn probe(root: &SysRoot) -> ClockSync {
    if root.exists(TIMESYNC_SYNCHRONIZED) {
        return ClockSync::Synchronised(format!("systemd-timesyncd ({TIMESYNC_SYNCHRONIZED})"));
    }
    if root.is_dir(TIMESYNC_DIR) {
        return ClockSync::NotSynchronised(format!(
            "{TIMESYNC_DIR} exists but {TIMESYNC_SYNCHRONIZED} does not: systemd-timesyncd has not reached a time server yet"
        ));
    }
    if root.is_dir(CHRONY_DIR) {
        return ClockSync::Unknown(format!(
            "chronyd runs ({CHRONY_DIR}); its sync state is only available through chronyc"
        ));
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

pub(super) fn sync(ctx: &Ctx<'_>) -> Finding {
    match &ctx.snap.clock {
        ClockSync::Synchronised(source) => {
            let mut f = Finding::new(
                "clock.sync",
                Status::Pass,
                format!("clock synchronised by {source}"),
            );
            f.evidence.push(Evidence {
                file: TIMESYNC_SYNCHRONIZED.into(),
                line: None,
                text: String::new(),
            });
            f
        }
        ClockSync::NotSynchronised(why) => {
            let mut f = Finding::new(
                "clock.sync",
                Status::Warn,
                "board clock not synchronised: its time may be days off (no RTC battery?); expiring destructive commands are refused until it is",
            );
            f.remedy = "give the board a route to an NTP server (systemd-timesyncd, chrony) or an RTC battery; check `timedatectl timesync-status`".into();
            f.evidence.push(Evidence {
                file: TIMESYNC_DIR.into(),
                line: None,
                text: why.clone(),
            });
            f
        }
        ClockSync::Unknown(why) => Finding::new("clock.sync", Status::Skip, why.clone()),
    }
}

/// Destructive actions whose expiry depends on the board's clock.
pub const CLOCK_GATED_ACTIONS: &[&str] = &["reboot", "set_cma"];

/// The command path's clock hook: `Some(reason)` to reject a command now. Only while the clock
/// is known to be unsynchronised, and only for destructive actions whose payload carries an
/// `expires_at`; the reason says which way the board's clock looks off when the command's times
/// show it (`now`: the board's clock, Unix seconds).
pub fn command_hold(clock: &ClockSync, action: &str, payload: &[u8], now: i64) -> Option<String> {
    if !clock.is_unsynchronised() || !CLOCK_GATED_ACTIONS.contains(&action) {
        return None;
    }
    let v: serde_json::Value = serde_json::from_slice(payload).ok()?;
    let expires_at = v.get("expires_at")?.as_i64()?;
    let issued_at = v.get("issued_at").and_then(|i| i.as_i64());
    let mut reason =
        String::from("board clock not synchronised: expiring commands are refused until it is");
    match issued_at {
        Some(i) if i > now + super::super::mqtt::command::CLOCK_SKEW_S => {
            reason.push_str(&format!(
                " (issued {} s in the future by the board's clock: the board's clock is behind)",
                i - now
            ))
        }
        _ if now > expires_at => reason.push_str(&format!(
            " (expired {} s ago by the board's clock, which may be ahead)",
            now - expires_at
        )),
        _ => {}
    }
    Some(reason)
}

/// Adds which side's clock is off to a skew or expiry rejection, when the board's clock state
/// is known (`reason` as the command gate wrote it).
pub fn explain_skew(clock: &ClockSync, reason: String) -> String {
    let future = reason.contains("in the future");
    let expired = reason.starts_with("expired");
    match clock {
        ClockSync::Synchronised(_) if future => {
            format!("{reason}; the board's clock is synchronised, so the requester's clock is ahead")
        }
        ClockSync::Synchronised(_) if expired => format!(
            "{reason}; the board's clock is synchronised: the command is stale or the requester's clock is behind"
        ),
        ClockSync::NotSynchronised(_) if future || expired => {
            format!("{reason}; the board's clock is not synchronised and is probably the one off")
        }
        _ => reason,
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
            ClockSync::Synchronised(_)
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

    #[test]
    fn br37_commands_are_held_while_the_clock_is_unsynchronised() {
        // BR-37: the board's clock is 876457 s behind; the operator's reboot is issued at
        // 1788924490 real time, which the board sees at 1788048033.
        let unsynced = ClockSync::NotSynchronised("test".into());
        let board_now = 1_788_048_033;
        let reboot = br#"{"status":"init","issued_at":1788924490,"expires_at":1788924790}"#;
        let r = command_hold(&unsynced, "reboot", reboot, board_now).unwrap();
        assert!(r.starts_with("board clock not synchronised"), "{r}");
        assert!(
            r.contains("876457 s in the future") && r.contains("board's clock is behind"),
            "{r}"
        );
        // The stale set_cma (expired ~9.5 days ago in real time) is still 14 hours "in the
        // future" on the stale clock: held too, never executed.
        let set_cma = br#"{"status":"init","issued_at":1788100000,"expires_at":1788100300}"#;
        let r = command_hold(&unsynced, "set_cma", set_cma, board_now + 10).unwrap();
        assert!(r.starts_with("board clock not synchronised"), "{r}");
        assert!(r.contains("51957 s in the future"), "{r}");
        // A command that looks expired on the unsynchronised clock: held with that said.
        let old = br#"{"status":"init","issued_at":1788047000,"expires_at":1788047300}"#;
        let r = command_hold(&unsynced, "reboot", old, board_now).unwrap();
        assert!(r.contains("expired 733 s ago by the board's clock"), "{r}");
        // Not destructive, or clock synchronised / unknown: the normal gate decides.
        assert_eq!(command_hold(&unsynced, "rescan", reboot, board_now), None);
        let synced = ClockSync::Synchronised("t".into());
        assert_eq!(command_hold(&synced, "reboot", reboot, board_now), None);
        assert_eq!(
            command_hold(&ClockSync::Unknown("t".into()), "reboot", reboot, board_now),
            None
        );
        // After the clock is corrected (t=60), the set_cma is simply expired, and the gate's
        // skew rejections name which side is off.
        let e = explain_skew(&synced, "expired 824164 s ago".into());
        assert!(e.contains("requester's clock is behind"), "{e}");
        let e = explain_skew(
            &synced,
            "issued 900 s in the future (clock skew above 60 s)".into(),
        );
        assert!(e.contains("requester's clock is ahead"), "{e}");
        let e = explain_skew(
            &unsynced,
            "issued 900 s in the future (clock skew above 60 s)".into(),
        );
        assert!(e.contains("board's clock is not synchronised"), "{e}");
    }
}
