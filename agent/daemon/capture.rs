//! A `capture` command's bundle on the link: published in chunks (retained, QoS 1) before the
//! final answer that names them, and cleared when the requester clears its command (its
//! acknowledgement) or, at the latest, with the answer itself ([`super::sweep`]).

use super::agent::Agent;
use crate::action::gate::CmdRef;
use crate::model::action::ActionOutcome;
use crate::mqtt::chunks;

/// Publishes the outcome's attachment (a bundle) as the chunks of command `c`; an outcome
/// without one (every other action) is left as it is. A broker whose
/// packet limit (MQTT 5 Maximum Packet Size) a chunk would pass turns the outcome into a
/// failure: a packet over it would cost the connection.
pub(super) fn publish(agent: &mut Agent, c: &CmdRef, o: &mut ActionOutcome) {
    let bundle = std::mem::take(&mut o.attachment);
    if bundle.is_empty() {
        return;
    }
    let prefix = chunks::prefix(&agent.s.topic_root, &agent.s.board, &c.cmd_id);
    // Fixed header, topic, packet id, properties and the chunk's header line.
    let packet = chunks::CHUNK_BYTES.min(bundle.len()) + prefix.len() + 200;
    if let Some(limit) = agent.max_packet_bytes.filter(|m| (*m as usize) < packet) {
        let why = format!("a chunk needs packets of {packet} bytes; the broker takes {limit}");
        *o = ActionOutcome::failed(why, serde_json::Value::Null);
        return;
    }
    let sha = o.details["sha256"].as_str().unwrap_or_default();
    let at = agent
        .now()
        .saturating_add(super::sweep::keep_s(agent.s.cfg.security.max_command_age_s));
    let parts = chunks::split(&bundle, sha);
    // One entry for the whole bundle: a flood of other answers never lets it go.
    agent.sweep.schedule_chunks(&prefix, parts.len(), at);
    for (i, p) in parts.into_iter().enumerate() {
        agent.send(format!("{prefix}{i}"), p, true);
    }
}

/// The requester cleared its `capture` command `cmd_id`: the bundle's chunks go now.
pub(super) fn acknowledged(agent: &mut Agent, cmd_id: &str) {
    let prefix = chunks::prefix(&agent.s.topic_root, &agent.s.board, cmd_id);
    for topic in agent.sweep.take_prefix(&prefix) {
        agent.send(topic, Vec::new(), true);
    }
}
