//! The reconnect policy: back-off after failures, a longer one after repeated kicks (a session
//! taken over), and when to fall back from MQTT 5 to 3.1.1.

use super::*;

/// The bound of the first reconnect wait; each failure in a row doubles it, up to the cap.
pub const BACKOFF_BASE: Duration = Duration::from_secs(1);

/// A connection up this long resets the back-off to [`BACKOFF_BASE`].
pub const BACKOFF_RESET: Duration = Duration::from_secs(30);

/// The base of the back-off after repeated kicks.
pub const KICK_BASE: Duration = Duration::from_millis(1600);

/// A uniform random number in `[0, 1)`.
fn unit_random() -> f64 {
    let mut b = [0u8; 2];
    let _ = getrandom::fill(&mut b);
    f64::from(u16::from_le_bytes(b)) / 65_536.0
}

/// The wait after `failures` failures in a row (1: the first), "full jitter": uniform in
/// `[0, min(cap, BACKOFF_BASE · 2^(failures-1)))` for `r` in `[0, 1)`. A fleet that lost its
/// broker spreads its reconnects over the whole window instead of arriving in waves.
pub fn full_jitter(failures: u32, cap: Duration, r: f64) -> Duration {
    let bound = BACKOFF_BASE
        .saturating_mul(1u32 << failures.saturating_sub(1).min(20))
        .min(cap);
    bound.mul_f64(r.clamp(0.0, 1.0))
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
    let base = KICK_BASE
        .saturating_mul(1u32 << kicks.saturating_sub(1).min(10))
        .min(KICK_BACKOFF_MAX);
    base.mul_f64(0.75 + unit_random() * 0.5)
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
    /// Failures since the last connection that stayed up [`BACKOFF_RESET`].
    failures: u32,
    /// The longest wait (`[mqtt] reconnect_max_s`).
    cap: Duration,
    backoff: Duration,
    connected_at: Option<std::time::Instant>,
    ever_connected: bool,
    suspects: u32,
    kicks: u32,
    takeover_reported: bool,
}

impl Reconnect {
    /// The policy with waits up to `cap`.
    pub fn new(cap: Duration) -> Reconnect {
        Reconnect {
            cap,
            ..Reconnect::default()
        }
    }

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
                self.takeover_reported = false;
            } else {
                self.kicks += 1;
            }
            if up >= BACKOFF_RESET {
                self.failures = 0;
            }
        }
        self.failures = self.failures.saturating_add(1);
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
        } else if matches!(f, Failure::Refused { .. }) {
            // Bad credentials or not authorised: no quick retry will change that.
            self.cap
        } else {
            full_jitter(self.failures, self.cap, unit_random())
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
