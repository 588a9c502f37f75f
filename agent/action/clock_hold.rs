//! The command path's clock hook: while the board's clock is known to be unsynchronised,
//! destructive commands that carry an expiry are refused with "board clock not synchronised",
//! and a skew or expiry rejection says which side's clock looks off.

use crate::model::action::ActionKind;
use crate::model::ClockSync;
use crate::mqtt::incoming::Incoming;

/// The command path's clock hook: `Some(reason)` to reject a command now. Only while the clock
/// is known to be unsynchronised, and only for destructive actions whose payload carries an
/// `expires_at` ([`ActionKind::clock_gated`]); the reason says which way the board's clock looks off when the command's times
/// show it (`now`: the board's clock, Unix seconds).
pub fn command_hold(
    clock: &ClockSync,
    action: ActionKind,
    m: &Incoming,
    now: i64,
) -> Option<String> {
    if !clock.is_unsynchronised() || !action.clock_gated() {
        return None;
    }
    let expires_at = m.i64_field("expires_at")?;
    let issued_at = m.i64_field("issued_at");
    let mut reason =
        String::from("board clock not synchronised: expiring commands are refused until it is");
    match issued_at {
        Some(i) if i > now.saturating_add(crate::mqtt::command::CLOCK_SKEW_S) => {
            reason.push_str(&format!(
                " (issued {} s in the future by the board's clock: the board's clock is behind)",
                i.saturating_sub(now)
            ))
        }
        _ if now > expires_at => reason.push_str(&format!(
            " (expired {} s ago by the board's clock, which may be ahead)",
            now.saturating_sub(expires_at)
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
        ClockSync::Synchronised { .. } if future => {
            format!("{reason}; the board's clock is synchronised, so the requester's clock is ahead")
        }
        ClockSync::Synchronised { .. } if expired => format!(
            "{reason}; the board's clock is synchronised: the command is stale or the requester's clock is behind"
        ),
        ClockSync::NotSynchronised { .. } if future || expired => {
            format!("{reason}; the board's clock is not synchronised and is probably the one off")
        }
        _ => reason,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probe::clock::{TIMESYNC_DIR, TIMESYNC_SYNCHRONIZED};

    fn msg(payload: &[u8]) -> Incoming<'_> {
        Incoming::new(
            crate::mqtt::topics::CommandTopic::new("b1", "x", "c1"),
            payload,
            false,
        )
    }

    #[test]
    fn br37_commands_are_held_while_the_clock_is_unsynchronised() {
        // BR-37: the board's clock is 876457 s behind; the operator's reboot is issued at
        // 1788924490 real time, which the board sees at 1788048033.
        let unsynced = ClockSync::NotSynchronised {
            why: "test".into(),
            file: TIMESYNC_DIR.into(),
        };
        let board_now = 1_788_048_033;
        let reboot = br#"{"status":"init","issued_at":1788924490,"expires_at":1788924790}"#;
        let r = command_hold(&unsynced, ActionKind::Reboot, &msg(reboot), board_now).unwrap();
        assert!(r.starts_with("board clock not synchronised"), "{r}");
        assert!(
            r.contains("876457 s in the future") && r.contains("board's clock is behind"),
            "{r}"
        );
        // The stale set_cma (expired ~9.5 days ago in real time) is still 14 hours "in the
        // future" on the stale clock: held too, never executed.
        let set_cma = br#"{"status":"init","issued_at":1788100000,"expires_at":1788100300}"#;
        let r = command_hold(&unsynced, ActionKind::SetCma, &msg(set_cma), board_now + 10).unwrap();
        assert!(r.starts_with("board clock not synchronised"), "{r}");
        assert!(r.contains("51957 s in the future"), "{r}");
        // A command that looks expired on the unsynchronised clock: held with that said.
        let old = br#"{"status":"init","issued_at":1788047000,"expires_at":1788047300}"#;
        let r = command_hold(&unsynced, ActionKind::Reboot, &msg(old), board_now).unwrap();
        assert!(r.contains("expired 733 s ago by the board's clock"), "{r}");
        // Not destructive, or clock synchronised / unknown: the normal gate decides.
        assert_eq!(
            command_hold(&unsynced, ActionKind::Rescan, &msg(reboot), board_now),
            None
        );
        let synced = ClockSync::Synchronised {
            source: "t".into(),
            file: TIMESYNC_SYNCHRONIZED.into(),
        };
        assert_eq!(
            command_hold(&synced, ActionKind::Reboot, &msg(reboot), board_now),
            None
        );
        assert_eq!(
            command_hold(
                &ClockSync::Unknown("t".into()),
                ActionKind::Reboot,
                &msg(reboot),
                board_now
            ),
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
