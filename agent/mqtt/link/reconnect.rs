//! The reconnect policy: back-off after failures, a longer one after repeated kicks (a session
//! taken over), and when to fall back from MQTT 5 to 3.1.1.

use super::*;

/// First back-off after a failed connection, and the cap.
pub const BACKOFF_MIN: Duration = Duration::from_millis(100);

/// Back-off cap: reconnect within about 2 s of the broker coming back.
pub const BACKOFF_MAX: Duration = Duration::from_millis(1600);

/// The next back-off: doubled, capped, with ±25 % jitter.
pub fn next_backoff(prev: Duration) -> Duration {
    let doubled = (prev * 2).clamp(BACKOFF_MIN, BACKOFF_MAX);
    let mut b = [0u8; 2];
    let _ = getrandom::fill(&mut b);
    let r = f64::from(u16::from_le_bytes(b)) / f64::from(u16::MAX); // 0..1
    doubled.mul_f64(0.75 + r * 0.5)
}

/// A connection that ends sooner than this after its CONNACK counts as a kick.
pub const STABLE_CONNECTION: Duration = Duration::from_secs(10);

/// A connection up this long ends a takeover streak's report: the daemon clears its notice
/// then, and a takeover after it is reported again.
pub const TAKEOVER_FORGOTTEN: Duration = Duration::from_secs(60);

/// Back-off cap after repeated kicks or a session takeover (a few connects per minute).
pub const KICK_BACKOFF_MAX: Duration = Duration::from_secs(60);

/// Protocol-like refusals before any CONNACK that make an `auto` MQTT 5 link fall back.
pub const REFUSALS_BEFORE_FALLBACK: u32 = 2;

/// Kicks in a row (each within [`STABLE_CONNECTION`] of its CONNACK) read as a takeover.
pub const KICKS_FOR_TAKEOVER: u32 = 3;

/// The back-off after `kicks` quick disconnects in a row: 1.6 s doubled per kick, capped at
/// [`KICK_BACKOFF_MAX`], ±25 % jitter.
pub fn kick_backoff(kicks: u32) -> Duration {
    let base = BACKOFF_MAX
        .saturating_mul(1u32 << kicks.saturating_sub(1).min(10))
        .min(KICK_BACKOFF_MAX);
    let mut b = [0u8; 2];
    let _ = getrandom::fill(&mut b);
    let r = f64::from(u16::from_le_bytes(b)) / f64::from(u16::MAX);
    base.mul_f64(0.75 + r * 0.5)
}

/// What to do after a failure.
#[derive(Debug, Clone, PartialEq)]
pub enum Next {
    /// Wait, then poll again (reconnect).
    Retry {
        /// The wait.
        wait: Duration,
        /// This failure completes a takeover streak that has not been reported yet.
        report_takeover: bool,
    },
    /// Stop: the broker does not speak this protocol version.
    Fallback,
}

/// The reconnect policy shared by both protocol versions: back-off on every failure, also a
/// disconnect right after a successful CONNACK; kicks counted; takeovers reported once.
#[derive(Debug, Default)]
pub struct Reconnect {
    backoff: Duration,
    connected_at: Option<std::time::Instant>,
    ever_connected: bool,
    suspects: u32,
    kicks: u32,
    takeover_reported: bool,
}

impl Reconnect {
    /// A CONNACK arrived.
    pub fn connack(&mut self) {
        self.connected_at = Some(std::time::Instant::now());
        self.ever_connected = true;
        self.suspects = 0;
    }

    /// True while a connection is up (between CONNACK and the next failure).
    pub fn is_connected(&self) -> bool {
        self.connected_at.is_some()
    }

    /// A failure (`up_for`: how long the connection had been up, if it had reached CONNACK;
    /// `auto`: protocol fallback allowed).
    pub fn failed(&mut self, f: &Failure, up_for: Option<Duration>, auto: bool) -> Next {
        self.connected_at = None;
        if let Some(up) = up_for {
            if up >= TAKEOVER_FORGOTTEN {
                self.takeover_reported = false;
            }
            if up >= STABLE_CONNECTION && *f != Failure::SessionTakenOver {
                self.kicks = 0;
                self.backoff = Duration::ZERO;
                self.takeover_reported = false;
            } else {
                self.kicks += 1;
            }
        }
        if !self.ever_connected && auto {
            self.suspects += match f {
                Failure::ProtocolSuspect(_) => 1,
                Failure::NoAnswer => REFUSALS_BEFORE_FALLBACK,
                _ => 0,
            };
            if self.suspects >= REFUSALS_BEFORE_FALLBACK {
                return Next::Fallback;
            }
        }
        let takeover = *f == Failure::SessionTakenOver || self.kicks >= KICKS_FOR_TAKEOVER;
        self.backoff = if takeover || self.kicks >= 2 {
            kick_backoff(self.kicks.max(2))
        } else {
            next_backoff(self.backoff)
        };
        let report_takeover = takeover && !self.takeover_reported;
        if takeover {
            self.takeover_reported = true;
        }
        Next::Retry {
            wait: self.backoff,
            report_takeover,
        }
    }

    pub(super) fn up_for(&self) -> Option<Duration> {
        self.connected_at.map(|t| t.elapsed())
    }
}
