//! The agent's one subscription: its command topics (its own and the fleet-wide ones) and,
//! with Home Assistant, HA's birth topic and the board's buttons, in one SUBSCRIBE per
//! connection. Its SUBACK is read: a refused or missing command subscription (a broker ACL, a
//! cluster that times out its consumers) leaves a board that publishes but hears nothing, so it
//! is retried with back-off, logged, and shown in the status (`commands`).

use super::agent::Agent;
use crate::mqtt::topics;
use rumqttc::v5::mqttbytes::QoS;
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

/// The filters of the agent's SUBSCRIBE: the command filters first, then its own
/// availability (to put `online` back when someone else sets it), then Home Assistant's.
fn filters(agent: &Agent) -> Vec<String> {
    let mut f = topics::command_filters(&agent.s.topic_root, &agent.s.board).to_vec();
    f.push(topics::availability(&agent.s.topic_root, &agent.s.board));
    if agent.s.cfg.home_assistant.enabled {
        f.extend(crate::mqtt::ha::filters(super::agent::agent_ha(agent)));
    }
    f
}

/// Sends the SUBSCRIBE (attempt `attempt` on this connection).
pub(super) fn subscribe(agent: &mut Agent, attempt: u32) {
    let f = filters(agent);
    let Some(l) = &agent.link else { return };
    let qos = match agent.s.cfg.mqtt.command_qos {
        0 => QoS::AtMostOnce,
        _ => QoS::AtLeastOnce,
    };
    // No Local: the agent's own answers on its command topics do not come back to it.
    let sent = l.client.try_subscribe_no_local(&f, qos).is_ok();
    agent.subscription = match sent {
        true => Subscription::Waiting {
            since: Instant::now(),
            attempt,
        },
        // The request queue is full: housekeeping tries again.
        false => refused_at(0, attempt, Duration::ZERO),
    };
}

/// Subscribes again to this board's own command topics, for the broker to send what it
/// retains there: answers of the board's own older than their window are then cleared
/// ([`super::sweep::stale_answer`]). The SUBACK changes nothing (the subscription stands).
pub(super) fn rescan(agent: &mut Agent) {
    let [own, _] = topics::command_filters(&agent.s.topic_root, &agent.s.board);
    let Some(l) = &agent.link else { return };
    let qos = match agent.s.cfg.mqtt.command_qos {
        0 => QoS::AtMostOnce,
        _ => QoS::AtLeastOnce,
    };
    tracing::info!(
        "more answers waited to be cleared than the list holds: scanning this board's command \
         topics for its old answers"
    );
    let _ = l.client.try_subscribe_no_local(&[own], qos);
}

fn refused_at(code: u8, attempt: u32, wait: Duration) -> Subscription {
    Subscription::Refused {
        code,
        attempt,
        retry_at: Instant::now() + wait,
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

/// A SUBACK: the first two codes are the command filters', the third the availability's (a
/// refusal there only costs the re-asserted `online`), the rest Home Assistant's.
pub(super) fn on_suback(agent: &mut Agent, codes: &[u8]) {
    let attempt = match agent.subscription {
        Subscription::Waiting { attempt, .. } => attempt,
        _ => return, // an answer to an attempt already given up on
    };
    let refused = |c: &&u8| **c >= 0x80;
    let cmd = codes.iter().take(2).find(refused).copied();
    if let Some(code) = cmd.or((codes.len() < 2).then_some(0x80)) {
        let wait = backoff(attempt);
        let why = format!(
            "the broker refused the command subscription ({})",
            crate::mqtt::link::suback_refusal_name(code)
        );
        log_not_subscribed(&why, attempt, wait.as_secs());
        agent.subscription = refused_at(code, attempt, wait);
    } else {
        agent.subscription = Subscription::Granted;
        agent.interrupted.granted(Instant::now());
    }
    if let Some(code) = codes.iter().skip(3).find(refused) {
        let why = format!(
            "the broker refused the Home Assistant subscription ({}); its buttons do nothing",
            crate::mqtt::link::suback_refusal_name(*code)
        );
        log_not_subscribed(&why, 0, 0);
    }
    agent.refresh_notices();
}

/// Housekeeping: a SUBACK overdue, or a refusal's wait over, sends the SUBSCRIBE again.
pub(super) fn retry_due(agent: &mut Agent) {
    if !agent.connected {
        return;
    }
    match agent.subscription.clone() {
        Subscription::Waiting { since, attempt } if since.elapsed() >= SUBACK_TIMEOUT => {
            log_not_subscribed("no SUBACK for the command subscription", attempt, 0);
            subscribe(agent, attempt + 1);
            agent.refresh_notices();
        }
        Subscription::Refused {
            attempt, retry_at, ..
        } if Instant::now() >= retry_at => {
            subscribe(agent, attempt + 1);
            agent.refresh_notices();
        }
        _ => {}
    }
}
