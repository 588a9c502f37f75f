//! Link events routed: a connect (re)announces and resubscribes, a drop is logged once per
//! cause, and a message goes to Home Assistant or, as a command, through the clock hook to the
//! gate, whose decision is published on the command's own topic.

use super::agent::Agent;
use super::jobs::{start_next, Done};
use super::{HA_DISCOVERY_MIN_INTERVAL, SESSION_FILE};
use crate::action::gate::{Admission, CmdRef, MessageContext, Origin};
use crate::model::action::ActionKind;
use crate::mqtt::command::{self, CmdStatus};
use crate::mqtt::incoming::Incoming;
use crate::mqtt::link::{Link, LinkEvent};
use crate::mqtt::topics;
use rumqttc::v5::mqttbytes::QoS;
use serde_json::json;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// Routes one link event.
pub(super) fn handle_link(agent: &mut Agent, ev: LinkEvent, tx: &mpsc::UnboundedSender<Done>) {
    match ev {
        LinkEvent::Connected {
            session_present,
            max_packet_bytes,
            broker,
        } => on_connected(agent, session_present, max_packet_bytes, broker, tx),
        LinkEvent::ProtocolRefused { reason } => on_protocol_refused(agent, &reason),
        LinkEvent::SessionTakenOver {
            reason,
            said_by_broker,
        } => on_taken_over(agent, &reason, said_by_broker),
        LinkEvent::Disconnected {
            reason,
            cause,
            after_connack,
            retry_in_ms,
        } => on_disconnected(agent, &reason, cause, after_connack, retry_in_ms),
        LinkEvent::SubAck { codes } => super::apply::on_suback(agent, &codes),
        LinkEvent::Message {
            topic,
            payload,
            retain,
            ..
        } => on_message(agent, &topic, &payload, retain, tx),
    }
}

fn on_connected(
    agent: &mut Agent,
    session_present: bool,
    max_packet_bytes: Option<u32>,
    broker: usize,
    tx: &mpsc::UnboundedSender<Done>,
) {
    agent.connected = true;
    agent.connected_since = Some(Instant::now());
    agent.session += 1;
    agent.max_packet_bytes = max_packet_bytes;
    agent.last_cause.clear();
    if agent.compact_for_drop && max_packet_bytes.is_some() {
        // The broker now says what it accepts: the status is sized to that instead.
        undo_compact(agent, "the broker announces its packet limit");
    }
    // The node that answered, of the configured list.
    agent.broker = agent.s.brokers.shown(broker).to_string();
    tracing::info!(
        broker = agent.broker.as_str(),
        board = %agent.s.board,
        session = agent.session,
        session_present,
        protocol = agent.s.link.protocol.as_str(),
        max_packet_bytes,
        "connected"
    );
    save_session(agent);
    let Some(l) = &agent.link else { return };
    let avail = topics::availability(&agent.s.topic_root, &agent.s.board);
    let _ = l
        .client
        .try_publish(avail, QoS::AtLeastOnce, true, b"online".to_vec());
    // rumqttc keeps no subscriptions across a clean session (#250): subscribe again, and read
    // the SUBACK (a broker that kept the session has them already).
    super::apply::on_connected(agent, session_present);
    // Connected: an update that restarted into this agent is answered now (its pending file
    // removed, so the rollback watchdog stands down).
    super::jobs::settle_update(agent, tx);
    let Some(l) = &agent.link else { return };
    // Re-publish the status with the new session counter.
    if let Some(r) = &mut agent.status_report {
        r.session = agent.session;
        r.broker = Some(agent.broker.clone());
        agent.status_dirty = true;
    }
    // Discovery names the model: wait for the first diagnosis if it has not come yet.
    if agent.s.cfg.home_assistant.enabled && agent.last_diagnosis.is_some() {
        crate::mqtt::ha::on_connect(super::agent::agent_ha(agent), &l.client);
        agent.last_discovery = Some(Instant::now());
    }
    agent.flush();
}

/// Writes the session counter off the link's thread; an older count written late never
/// replaces a newer one.
fn save_session(agent: &Agent) {
    let (state, saved, session) = (
        agent.s.state.clone(),
        agent.session_saved.clone(),
        agent.session,
    );
    let save = move || {
        let mut saved = saved.lock().unwrap_or_else(|p| p.into_inner());
        if *saved >= session {
            return;
        }
        match state.save(SESSION_FILE, &json!({ "session": session })) {
            Ok(()) => *saved = session,
            Err(e) => tracing::warn!(error = %e, session, "cannot save the session counter"),
        }
    };
    super::jobs::off_link(agent, Box::new(save));
}

fn on_protocol_refused(agent: &mut Agent, reason: &str) {
    tracing::warn!(
        broker = agent.s.brokers.shown_list(),
        %reason,
        "broker refuses MQTT 5 (closed, silent or a 3.1.1 CONNACK after CONNECT); speaking MQTT 3.1.1 from now on"
    );
    agent.last_cause.clear();
    agent.s.link.protocol = crate::mqtt::link::Protocol::V311;
    agent.connected = false;
    agent.link = Some(Link::start(&agent.s.link));
}

/// A takeover streak: named as one only when the broker said so (MQTT 5 reason 0x8E); kicks
/// without a reason may as well be an overloaded broker, and are reported as either.
fn on_taken_over(agent: &mut Agent, reason: &str, said_by_broker: bool) {
    let broker = agent.s.brokers.shown_list().to_string();
    tracing::warn!(%broker, board = %agent.s.board, %reason, "{}", match said_by_broker {
        true => "another client uses this board id: the broker ends this session when it connects; backing off instead of fighting for it (give each board a unique board_id)",
        false => "the broker keeps closing this connection soon after accepting it, without a reason: another client may use this board id, or the broker is overloaded; backing off",
    });
    agent.taken_over = Some(said_by_broker);
    // The earlier drops were these kicks, not a status too large for the broker.
    if agent.compact_for_drop {
        undo_compact(
            agent,
            "the drops after a full status were these kicks, not a packet limit",
        );
    }
    let note = agent.takeover_notice();
    if let Some(r) = &mut agent.status_report {
        if !r.notices.contains(&note) {
            r.notices.push(note);
        }
    }
}

/// Publishes the full status again: the reason the compact form was chosen did not hold.
pub(super) fn undo_compact(agent: &mut Agent, why: &str) {
    agent.compact_for_drop = false;
    agent.compact_only = false;
    agent.last_full_drop = None;
    agent.status_dirty = agent.status_report.is_some();
    tracing::info!("{why}; publishing the full status again");
}

/// A connection that ended within 2 s of a full status, after its CONNACK: what a broker does
/// with a packet bigger than a limit it could not announce (MQTT 3.1.1), and also what one node
/// crash or restart looks like. The compact form is chosen on the second such drop within a
/// minute (a limit repeats on every connection; a crash does not), never while the broker
/// announces its limit (the status is sized to it) or while kicks are being read as a takeover.
fn drop_after_full_status(agent: &mut Agent, after_connack: bool) {
    let Some((at, form)) = agent.last_status_sent else {
        return;
    };
    if !after_connack
        || form != crate::report::StatusForm::Full
        || at.elapsed() >= Duration::from_secs(2)
        || agent.compact_only
        || agent.taken_over.is_some()
        || agent.max_packet_bytes.is_some()
    {
        return;
    }
    let again = agent
        .last_full_drop
        .is_some_and(|t| t.elapsed() < Duration::from_secs(60));
    if !again {
        // Once is not yet a packet limit (the drop itself is logged with its cause).
        agent.last_full_drop = Some(Instant::now());
        return;
    }
    agent.compact_only = true;
    agent.compact_for_drop = true;
    tracing::warn!(
        "the broker dropped the connection right after a full status twice in a minute; publishing the compact status from now on"
    );
}

fn on_disconnected(
    agent: &mut Agent,
    reason: &str,
    cause: String,
    after_connack: bool,
    retry_in_ms: u64,
) {
    drop_after_full_status(agent, after_connack);
    let stable = agent
        .connected_since
        .is_some_and(|t| t.elapsed() >= crate::mqtt::link::STABLE_CONNECTION);
    if agent.compact_for_drop && stable {
        // A stable compact connection ended (a broker restart, a failover): the next one tries
        // the full form once, and a drop right after it chooses the compact form again.
        undo_compact(
            agent,
            "a stable connection ended; the next one tries the full status",
        );
        agent.last_full_drop = Some(Instant::now());
    }
    if cause != agent.last_cause {
        // A lost connection names its broker; a failed attempt the configured list.
        let broker = match agent.connected {
            true => agent.broker.clone(),
            false => agent.s.brokers.shown_list().to_string(),
        };
        tracing::warn!(
            %broker,
            protocol = agent.s.link.protocol.as_str(),
            %cause,
            %reason,
            retry_in_ms,
            "{}",
            if agent.connected {
                "MQTT connection lost"
            } else {
                "cannot connect to the MQTT broker"
            }
        );
        agent.last_cause = cause;
    }
    agent.connected = false;
    agent.connected_since = None;
    agent.subscription = Default::default();
}

/// A message on a subscribed topic; `retain`: its retain flag.
fn on_message(
    agent: &mut Agent,
    topic: &str,
    payload: &[u8],
    retain: bool,
    tx: &mpsc::UnboundedSender<Done>,
) {
    if topic == topics::availability(&agent.s.topic_root, &agent.s.board) {
        super::apply::on_availability(agent, payload);
        return;
    }
    if agent.s.cfg.home_assistant.enabled {
        match crate::mqtt::ha::on_message(super::agent::agent_ha(agent), topic, payload) {
            crate::mqtt::ha::HaMessage::NotMine => {}
            crate::mqtt::ha::HaMessage::Handled => return,
            crate::mqtt::ha::HaMessage::HomeAssistantOnline => {
                send_discovery(agent);
                return;
            }
            crate::mqtt::ha::HaMessage::Press(action) => {
                let name = action.name();
                match agent
                    .gate
                    .admit_local(Origin::HomeAssistant, action, agent.now())
                {
                    Ok(()) => {
                        tracing::info!(
                            action = name,
                            origin = "home_assistant",
                            "button press queued"
                        );
                        start_next(agent, tx);
                    }
                    Err(reason) => {
                        tracing::warn!(action = name, origin = "home_assistant", %reason, "button press rejected");
                    }
                }
                return;
            }
        }
    }
    let Some(t) = topics::parse_command(&agent.s.topic_root, topic) else {
        return;
    };
    // Decoded once, for every reader below.
    let m = Incoming::new(t, payload, retain);
    let t = &m.topic;
    if payload.is_empty() && t.kind == Some(ActionKind::Capture) && t.board == agent.s.board {
        super::capture::acknowledged(agent, &t.cmd_id);
    }
    if retain {
        super::apply::on_retained(agent, &m);
    }
    if retain && super::apply::stale_answer(agent, &m) {
        return;
    }
    // The board's clock state (cached, no file I/O per message): the gate's one clock check.
    let clock = super::jobs::clock_state(agent, tx);
    let ctx = MessageContext {
        now: agent.now(),
        mono_s: Some(agent.time.mono_s()),
        clock: Some(clock.clone()),
    };
    let admission = agent.gate.admit_command(&m, &ctx);
    // A refusal of a command nobody asked the broker to keep is not kept either: a flood of
    // live junk leaves nothing stored. Only MQTT 5 (Retain As Published) can tell.
    let told = agent
        .link
        .as_ref()
        .is_some_and(|l| l.client.retain_as_published());
    let keep = retain || !told;
    route_admission(agent, t, admission, &clock, keep, tx);
}

/// Publishes what the gate decided about an MQTT command, and logs it.
pub(super) fn route_admission(
    agent: &mut Agent,
    t: &topics::CommandTopic,
    admission: Admission,
    clock: &crate::model::ClockSync,
    keep: bool,
    tx: &mpsc::UnboundedSender<Done>,
) {
    // Only a well-formed id gets an answer on its own topic (the topic is built from it).
    let safe_id = |id: &str| command::valid_cmd_id(id);
    match admission {
        Admission::Ignored(why) => {
            tracing::debug!(action = %t.action, why, "command message ignored");
        }
        Admission::Rejected { cmd, reason } => {
            let c = cmd.unwrap_or_else(|| CmdRef {
                action: t.action.clone(),
                cmd_id: t.cmd_id.clone(),
            });
            let c = CmdRef {
                action: c.action,
                cmd_id: if safe_id(&c.cmd_id) {
                    c.cmd_id
                } else {
                    "invalid".into()
                },
            };
            let reason = crate::action::clock_hold::explain_skew(clock, reason);
            agent.rejections.log(&c, &reason, "command rejected");
            if c.action.parse::<ActionKind>().is_ok() || t.board == agent.s.board {
                let (tp, p) = agent.lifecycle(&c, CmdStatus::Rejected, json!({"reason": reason}));
                agent.send(tp, p, keep);
            }
        }
        Admission::ClockHeld { cmd, reason } => {
            agent.rejections.log(&cmd, &reason, "command rejected");
            let (tp, p) = agent.lifecycle(&cmd, CmdStatus::Rejected, json!({"reason": reason}));
            agent.send(tp, p, keep);
        }
        Admission::Replay {
            cmd,
            record,
            reason,
        } => {
            // The retained record keeps the real outcome; the replay is named beside it.
            agent
                .rejections
                .log(&cmd, &reason, "command replay refused");
            let mut extra = json!({"replay_rejected": reason});
            if let Some(r) = &record.reason {
                extra["reason"] = json!(r);
            }
            let (tp, p) = agent.lifecycle(&cmd, record.status, extra);
            agent.send(tp, p, keep);
        }
        Admission::Answered { cmd, record } => {
            tracing::info!(action = %cmd.action, cmd_id = %cmd.cmd_id, status = ?record.status,
                "command delivered again after it finished: its final state is published again");
            let extra = record
                .reason
                .as_ref()
                .map_or_else(|| json!({}), |r| json!({"reason": r}));
            let (tp, p) = agent.lifecycle(&cmd, record.status, extra);
            agent.send_retained(tp, p);
        }
        Admission::Queued(Some(c)) => {
            // `executing` is published when it starts, after the policy checks of `start_next`.
            tracing::info!(action = %c.action, cmd_id = %c.cmd_id, "command accepted");
            start_next(agent, tx);
        }
        Admission::Queued(None) => start_next(agent, tx),
    }
}

/// Sends the Home Assistant discovery, at most once per [`HA_DISCOVERY_MIN_INTERVAL`] (a flood of
/// `online` announcements costs nothing).
fn send_discovery(agent: &mut Agent) {
    if agent
        .last_discovery
        .is_some_and(|t| t.elapsed() < HA_DISCOVERY_MIN_INTERVAL)
    {
        return;
    }
    // Discovery names the model: nothing to announce before the first diagnosis.
    let (Some(l), Some(_)) = (&agent.link, &agent.last_diagnosis) else {
        return;
    };
    crate::mqtt::ha::publish_discovery(super::agent::agent_ha(agent), &l.client);
    agent.last_discovery = Some(Instant::now());
}
