//! The event loop's side of the state machines ([`super::effect`]): events handed to the
//! command subscription, interrupted-command recovery, the sweep and the availability
//! re-assert, and the effects they return carried out on the link, the gate and the status.

use super::agent::Agent;
use super::effect::Effect;
use crate::mqtt::incoming::Incoming;
use crate::mqtt::topics;
use rumqttc::v5::mqttbytes::QoS;
use std::time::Instant;

/// Carries out `effects` in order.
pub(super) fn apply(agent: &mut Agent, effects: Vec<Effect>) {
    for e in effects {
        match e {
            Effect::PublishOnline => publish_online(agent),
            Effect::Clear(topic) => agent.send(topic, Vec::new(), true),
            Effect::Answer(c, status, extra) => agent.answer(&c, status, extra),
            Effect::AdoptFinal(c, status, reason) => agent.gate.adopt_final(&c, status, reason),
            Effect::Subscribe(attempt) => subscribe(agent, attempt),
            Effect::Rescan => rescan(agent),
            Effect::Granted(at) => agent.interrupted.granted(at),
            Effect::RefreshNotices => agent.refresh_notices(),
        }
    }
}

/// The QoS of the command subscription (`[mqtt] command_qos`).
fn command_qos(agent: &Agent) -> QoS {
    match agent.s.cfg.mqtt.command_qos {
        0 => QoS::AtMostOnce,
        _ => QoS::AtLeastOnce,
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
fn subscribe(agent: &mut Agent, attempt: u32) {
    let f = filters(agent);
    let qos = command_qos(agent);
    let Some(l) = &agent.link else { return };
    // No Local: the agent's own answers on its command topics do not come back to it.
    let sent = l.client.try_subscribe_no_local(&f, qos).is_ok();
    agent.subscription.sent(attempt, sent, Instant::now());
}

/// Subscribes again to this board's own command topics, for the broker to send what it
/// retains there: answers of the board's own older than their window are then cleared
/// ([`stale_answer`]). The SUBACK changes nothing (the subscription stands).
fn rescan(agent: &mut Agent) {
    let [own, _] = topics::command_filters(&agent.s.topic_root, &agent.s.board);
    let qos = command_qos(agent);
    let Some(l) = &agent.link else { return };
    tracing::info!(
        "more answers waited to be cleared than the list holds: scanning this board's command \
         topics for its old answers"
    );
    let _ = l.client.try_subscribe_no_local(&[own], qos);
}

fn publish_online(agent: &Agent) {
    let avail = topics::availability(&agent.s.topic_root, &agent.s.board);
    if let Some(l) = &agent.link {
        let _ = l
            .client
            .try_publish(avail, QoS::AtLeastOnce, true, b"online".to_vec());
    }
}

/// Another value than `online` on this board's availability ([`super::availability`]).
pub(super) fn on_availability(agent: &mut Agent, payload: &[u8]) {
    let e = agent
        .reassert
        .on_value(payload, agent.connected, Instant::now());
    apply(agent, e);
}

/// A SUBACK for the agent's subscription ([`super::subscribe`]).
pub(super) fn on_suback(agent: &mut Agent, codes: &[u8]) {
    let e = agent.subscription.on_suback(codes, Instant::now());
    apply(agent, e);
}

/// A connection came up: the subscription is sent, or stands with the kept session.
pub(super) fn on_connected(agent: &mut Agent, session_present: bool) {
    let e = agent.subscription.on_connected(session_present);
    apply(agent, e);
}

/// A retained message on command topic `t`: the broker's record of an interrupted command
/// ([`super::interrupted`]).
pub(super) fn on_retained(agent: &mut Agent, m: &Incoming) {
    let t = &m.topic;
    let topic = topics::command(&agent.s.topic_root, &t.board, &t.action, &t.cmd_id);
    let s = &agent.s;
    let sealed = || s.sealed_by_me(&topic, m.payload);
    let e = agent.interrupted.on_retained(m, &s.board, &sealed);
    apply(agent, e);
}

/// A retained answer of this board's own older than any live command: cleared, and `true`
/// (nothing else to do) ([`super::sweep`]).
pub(super) fn stale_answer(agent: &mut Agent, m: &Incoming) -> bool {
    let now_s = agent.now();
    let s = &agent.s;
    let sealed = |topic: &str| s.sealed_by_me(topic, m.payload);
    match agent.sweep.stale_answer(s.sweep_board(now_s), m, &sealed) {
        Some(e) => {
            apply(agent, e);
            true
        }
        None => false,
    }
}

/// Housekeeping: the command subscription sent again when its SUBACK is overdue or a
/// refusal's wait is over.
pub(super) fn retry_due(agent: &mut Agent) {
    if agent.connected {
        let e = agent.subscription.retry_due(Instant::now());
        apply(agent, e);
    }
}

/// Housekeeping: interrupted commands answered `failed` once the broker had its say.
pub(super) fn answer_due(agent: &mut Agent) {
    if agent.connected {
        let granted = matches!(agent.subscription, super::subscribe::Subscription::Granted);
        let e = agent
            .interrupted
            .due(granted, agent.connected_since, Instant::now());
        apply(agent, e);
    }
}

/// Housekeeping: the answers now due cleared, the command topics scanned when due.
pub(super) fn clear_due(agent: &mut Agent) {
    if agent.connected {
        let granted = matches!(agent.subscription, super::subscribe::Subscription::Granted);
        let now_s = agent.now();
        let gate = &agent.gate;
        let running = |cmd_id: &str| gate.is_executing(cmd_id);
        let e = agent
            .sweep
            .due(agent.s.sweep_board(now_s), granted, &running);
        apply(agent, e);
    }
}

/// Housekeeping: the `online` owed to a spoofed availability.
pub(super) fn reassert_due(agent: &mut Agent) {
    let e = agent.reassert.due_effects(agent.connected, Instant::now());
    apply(agent, e);
}
