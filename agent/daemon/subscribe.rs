//! The agent's one subscription: its command topics (its own and the fleet-wide ones) and,
//! with Home Assistant, HA's birth topic and the board's buttons, in one SUBSCRIBE per
//! connection. Its SUBACK is read: a refused or missing command subscription (a broker ACL, a
//! cluster that times out its consumers) leaves a board that publishes but hears nothing, so it
//! is retried with back-off, logged, and shown in the status (`commands`).

use super::effect::Effect;
use std::time::{Duration, Instant};

/// How long a SUBACK may take before the SUBSCRIBE is sent again (a clustered broker's
/// consumer creation takes seconds).
pub const SUBACK_TIMEOUT: Duration = Duration::from_secs(30);

/// The longest wait between attempts after refusals.
pub const RESUBSCRIBE_MAX: Duration = Duration::from_secs(60);

/// Every notice about the command subscription says this (so a newer one replaces it).
pub const NOTICE_MARK: &str = "hears no commands";

/// Where the command subscription stands on the current connection.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Subscription {
    /// Not connected, or nothing sent yet.
    #[default]
    None,
    /// SUBSCRIBE sent, its SUBACK not in yet.
    Waiting {
        /// When it was sent.
        since: Instant,
        /// Which attempt on this connection (1: the first).
        attempt: u32,
    },
    /// The broker granted the command filters.
    Granted,
    /// The broker refused a command filter, or the request queue was full.
    Refused {
        /// The MQTT 5 reason code (0: nothing was sent).
        code: u8,
        /// The attempt refused.
        attempt: u32,
        /// When the SUBSCRIBE goes again.
        retry_at: Instant,
    },
}

impl Subscription {
    /// The status field `commands`: `subscribed`, `subscribing` (the first SUBSCRIBE of a
    /// connection not answered yet) or `not subscribed` (refused, or unanswered and sent again).
    pub fn status_word(&self) -> &'static str {
        match self {
            Subscription::Granted => "subscribed",
            Subscription::None | Subscription::Waiting { attempt: 1, .. } => "subscribing",
            _ => "not subscribed",
        }
    }

    /// The status notice while the commands are not subscribed.
    pub fn notice(&self) -> Option<String> {
        match self {
            Subscription::Refused { code: 0, .. } => Some(
                "the command subscription could not be sent yet: this board hears no commands"
                    .into(),
            ),
            Subscription::Refused { code, .. } => Some(format!(
                "the broker refused the command subscription ({}): this board hears no commands",
                crate::mqtt::link::suback_refusal_name(*code)
            )),
            Subscription::Waiting { attempt, .. } if *attempt > 1 => Some(format!(
                "the command subscription is not granted yet (attempt {attempt}): this board hears no commands"
            )),
            _ => None,
        }
    }
}

impl Subscription {
    /// A connection came up: a broker that kept the session (`session_present`) has the
    /// subscription already; else the SUBSCRIBE goes (rumqttc keeps no subscriptions across a
    /// clean session, #250).
    pub fn on_connected(&mut self, session_present: bool) -> Vec<Effect> {
        if session_present {
            *self = Subscription::Granted;
            return Vec::new();
        }
        vec![Effect::Subscribe(1)]
    }

    /// The SUBSCRIBE of attempt `attempt` was handed to the client at `now` (`sent`), or the
    /// client's request queue was full (housekeeping tries again).
    pub fn sent(&mut self, attempt: u32, sent: bool, now: Instant) {
        *self = match sent {
            true => Subscription::Waiting {
                since: now,
                attempt,
            },
            false => refused_at(0, attempt, now),
        };
    }

    /// A SUBACK at `now`: the first two codes are the command filters', the third the
    /// availability's (a refusal there only costs the re-asserted `online`), the rest Home
    /// Assistant's.
    pub fn on_suback(&mut self, codes: &[u8], now: Instant) -> Vec<Effect> {
        let attempt = match self {
            Subscription::Waiting { attempt, .. } => *attempt,
            _ => return Vec::new(), // an answer to an attempt already given up on
        };
        let mut out = Vec::new();
        let refused = |c: &&u8| **c >= 0x80;
        let cmd = codes.iter().take(2).find(refused).copied();
        if let Some(code) = cmd.or((codes.len() < 2).then_some(0x80)) {
            let wait = backoff(attempt);
            let why = format!(
                "the broker refused the command subscription ({})",
                crate::mqtt::link::suback_refusal_name(code)
            );
            log_not_subscribed(&why, attempt, wait.as_secs());
            *self = refused_at(code, attempt, now + wait);
        } else {
            *self = Subscription::Granted;
            out.push(Effect::Granted(now));
        }
        if let Some(code) = codes.iter().skip(3).find(refused) {
            let why = format!(
                "the broker refused the Home Assistant subscription ({}); its buttons do nothing",
                crate::mqtt::link::suback_refusal_name(*code)
            );
            log_not_subscribed(&why, 0, 0);
        }
        out.push(Effect::RefreshNotices);
        out
    }

    /// Housekeeping at `now`, while connected: a SUBACK overdue, or a refusal's wait over,
    /// sends the SUBSCRIBE again.
    pub fn retry_due(&self, now: Instant) -> Vec<Effect> {
        match self {
            Subscription::Waiting { since, attempt }
                if now.saturating_duration_since(*since) >= SUBACK_TIMEOUT =>
            {
                log_not_subscribed("no SUBACK for the command subscription", *attempt, 0);
                vec![Effect::Subscribe(attempt + 1), Effect::RefreshNotices]
            }
            Subscription::Refused {
                attempt, retry_at, ..
            } if now >= *retry_at => vec![Effect::Subscribe(attempt + 1), Effect::RefreshNotices],
            _ => Vec::new(),
        }
    }
}

/// A refusal (`code`; 0: nothing was sent) of attempt `attempt`, sent again at `retry_at`.
fn refused_at(code: u8, attempt: u32, retry_at: Instant) -> Subscription {
    Subscription::Refused {
        code,
        attempt,
        retry_at,
    }
}

/// The wait before attempt `attempt + 1`: 1 s doubled per attempt, up to [`RESUBSCRIBE_MAX`].
fn backoff(attempt: u32) -> Duration {
    Duration::from_secs(1u64 << attempt.saturating_sub(1).min(6)).min(RESUBSCRIBE_MAX)
}

/// Logs why the command subscription is not in place (one call site for every case).
fn log_not_subscribed(why: &str, attempt: u32, retry_in_s: u64) {
    tracing::warn!(
        attempt,
        retry_in_s,
        "{why}: this board hears no commands until the broker grants the subscription"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The subscription as a state machine: a refusal backs off and is retried, a grant says
    /// so, and every change asks for the status notices.
    #[test]
    fn the_subscription_returns_what_the_loop_is_to_do() {
        let t0 = Instant::now();
        let mut s = Subscription::default();
        assert_eq!(s.on_connected(false), [Effect::Subscribe(1)]);
        s.sent(1, true, t0);
        assert_eq!(s.status_word(), "subscribing");
        // The command filter refused (0x87: not authorized): attempt 2 after 1 s.
        assert_eq!(s.on_suback(&[0x87, 1, 1], t0), [Effect::RefreshNotices]);
        assert!(s.notice().unwrap().contains(NOTICE_MARK));
        assert!(s.retry_due(t0).is_empty());
        let later = t0 + Duration::from_secs(1);
        assert_eq!(
            s.retry_due(later),
            [Effect::Subscribe(2), Effect::RefreshNotices]
        );
        s.sent(2, true, later);
        assert_eq!(
            s.on_suback(&[1, 1, 1], later),
            [Effect::Granted(later), Effect::RefreshNotices]
        );
        assert_eq!(s, Subscription::Granted);
        // A SUBACK nobody waits for changes nothing.
        assert!(s.on_suback(&[0x80], later).is_empty());
        assert_eq!(s.on_connected(true), []);
    }
}
