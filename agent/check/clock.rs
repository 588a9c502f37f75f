//! `clock.sync`: is the board's wall clock synchronised? Boards without an RTC battery (a Pi 5
//! without one, most RK3588 boards) boot with a restored or build-time clock and stay wrong until
//! a time service reaches a server; commands that expire are judged against that clock.
//!
//! The state is read by `crate::probe::clock` (where the sources are described); this check
//! only reports it.

use super::{Ctx, Evidence, Finding, Status};
use crate::model::ClockSync;

pub(super) fn sync(ctx: &Ctx<'_>) -> Finding {
    match &ctx.snap.clock {
        ClockSync::Synchronised { source, file } => {
            let mut f = Finding::new(
                "clock.sync",
                Status::Pass,
                format!("clock synchronised by {source}"),
            );
            f.evidence.push(Evidence {
                file: file.clone(),
                line: None,
                text: String::new(),
            });
            f
        }
        ClockSync::NotSynchronised { why, file } => {
            let mut f = Finding::new(
                "clock.sync",
                Status::Warn,
                "board clock not synchronised: its time may be days off (no RTC battery?); expiring destructive commands are refused until it is",
            );
            f.remedy = "give the board a route to an NTP server (systemd-timesyncd, chrony) or an RTC battery; check `timedatectl timesync-status` or `chronyc tracking`".into();
            f.evidence.push(Evidence {
                file: file.clone(),
                line: None,
                text: why.clone(),
            });
            f
        }
        ClockSync::Unknown(why) => Finding::new("clock.sync", Status::Skip, why.clone()),
    }
}

#[cfg(test)]
mod tests {
    use crate::check::testkit::{one, Board};
    use crate::model::ClockSync;
    use crate::model::Status;

    #[test]
    fn clock_verdicts() {
        let synced = ClockSync::Synchronised {
            source: "chrony".into(),
            file: "/run/chrony".into(),
        };
        let unsynced = ClockSync::NotSynchronised {
            why: "NTPSynchronized=no".into(),
            file: "/run/timesync".into(),
        };
        let unknown = ClockSync::Unknown("no time service".into());
        let table = [
            (synced, Status::Pass, "clock synchronised by chrony", ""),
            (
                unsynced,
                Status::Warn,
                "board clock not synchronised",
                "NTP server",
            ),
            (unknown, Status::Skip, "no time service", ""),
        ];
        for (clock, status, summary, remedy) in table {
            let f = one("generic", &Board::new().clock(clock).build(), "clock.sync");
            assert_eq!(f.status, status, "{}", f.summary);
            assert!(f.summary.contains(summary), "{}", f.summary);
            assert!(f.remedy.contains(remedy), "{}", f.remedy);
        }
    }
}
