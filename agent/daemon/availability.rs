//! This board's retained availability, put back when another client sets it: at most once per
//! [`REASSERT_MIN_INTERVAL`] (docs/reference.md), so a flood of spoofed `offline` messages costs
//! one `online` a second; one spoofed in between is answered when the second is over, so the
//! last retained value is still the board's.

use super::effect::Effect;
use std::time::{Duration, Instant};

/// The shortest time between two `online` messages put back after a spoofed availability.
pub const REASSERT_MIN_INTERVAL: Duration = Duration::from_secs(1);

/// When `online` was last put back, and whether one is owed (a spoofed value came sooner).
#[derive(Debug, Default)]
pub struct Reassert {
    last: Option<Instant>,
    owed: bool,
}

impl Reassert {
    /// A spoofed value came at `now`: true when `online` is to be published now; else one is
    /// owed for [`Reassert::due`].
    pub fn spoofed(&mut self, now: Instant) -> bool {
        self.owed = true;
        self.due(now)
    }

    /// Whether an owed `online` may go now (true: it is taken as sent).
    pub fn due(&mut self, now: Instant) -> bool {
        let ready = self
            .last
            .is_none_or(|t| now.saturating_duration_since(t) >= REASSERT_MIN_INTERVAL);
        if self.owed && ready {
            self.owed = false;
            self.last = Some(now);
            return true;
        }
        false
    }

    /// An `online` is owed (housekeeping comes back soon).
    pub fn owed(&self) -> bool {
        self.owed
    }
}

impl Reassert {
    /// A value `payload` on this board's availability at `now`, `connected` or not: another
    /// value than `online` while connected (a spoofed retained `offline`) puts `online` back,
    /// at most once a second.
    pub fn on_value(&mut self, payload: &[u8], connected: bool, now: Instant) -> Vec<Effect> {
        if payload == b"online" || !connected {
            return Vec::new();
        }
        if !self.owed() {
            tracing::warn!(
                // The log escapes control characters (sys::log); 16 are enough to tell what it was.
                seen = %String::from_utf8_lossy(&payload[..payload.len().min(16)]),
                "another client set this board's availability: publishing online again"
            );
        }
        let now_due = self.spoofed(now);
        online_if(now_due)
    }

    /// Housekeeping at `now`: the `online` owed to a spoofed value that came within the last
    /// second.
    pub fn due_effects(&mut self, connected: bool, now: Instant) -> Vec<Effect> {
        let due = connected && self.due(now);
        online_if(due)
    }
}

fn online_if(publish: bool) -> Vec<Effect> {
    match publish {
        true => vec![Effect::PublishOnline],
        false => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 500 spoofed values within 4 s put `online` back at most once a second, and the last
    /// one is answered after the flood (issue 37, item 13).
    #[test]
    fn a_flood_of_spoofed_values_is_answered_once_a_second() {
        let mut r = Reassert::default();
        let t0 = Instant::now();
        let mut sent = 0;
        for i in 0..500u64 {
            let at = t0 + Duration::from_millis(i * 8);
            sent += u32::from(r.spoofed(at));
            // Housekeeping every 250 ms.
            if i % 31 == 0 {
                sent += u32::from(r.due(at));
            }
        }
        assert!((4..=5).contains(&sent), "{sent} in 4 s");
        assert!(r.owed(), "the last spoofed value is still owed an answer");
        // Owed since the last second's first one (at 3 s): answered once that second is over.
        assert!(!r.due(t0 + Duration::from_millis(3990)));
        assert!(r.due(t0 + Duration::from_millis(4100)));
        assert!(!r.owed() && !r.due(t0 + Duration::from_secs(9)));
    }
}
