//! Commands the ledger still says are `executing` on start (a crash, or a final state the
//! ledger could not save: a full state directory). They are finished as `failed: agent
//! restarted`, unless the broker holds this board's final answer for them: then the answer went
//! out and only its record was lost, and a `failed` would overwrite the real outcome. So the
//! `failed` answers wait until the command subscription is granted and the broker's retained
//! records have had time to arrive.

use super::agent::Agent;
use super::subscribe::{Subscription, SUBACK_TIMEOUT};
use crate::action::gate::{CmdRef, LedgerEntry};
use crate::mqtt::command::CmdStatus;
use crate::mqtt::topics::CommandTopic;
use std::time::{Duration, Instant};

/// How long after the SUBACK the retained records may take to arrive.
pub const RETAINED_GRACE: Duration = Duration::from_secs(3);

/// The interrupted commands not answered yet.
#[derive(Debug, Default)]
pub struct Interrupted {
    pending: Vec<(CmdRef, LedgerEntry)>,
    granted_at: Option<Instant>,
}

impl Interrupted {
    /// The commands [`crate::action::gate::Gate::finish_interrupted`] finished.
    pub fn new(pending: Vec<(CmdRef, LedgerEntry)>) -> Interrupted {
        Interrupted {
            pending,
            granted_at: None,
        }
    }

    /// The command subscription was granted at `at`: the retained records follow.
    pub fn granted(&mut self, at: Instant) {
        self.granted_at = Some(at);
    }

    /// None waits.
    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }
}

/// A retained message on the command topic `t`: when it is the broker's record of an
/// interrupted command, a final answer of this board is kept (the ledger takes it) and an
/// `executing` is left to the gate, which answers it with the ledger's `failed`.
pub(super) fn on_retained(agent: &mut Agent, t: &CommandTopic, payload: &[u8]) {
    let Some(i) = agent
        .interrupted
        .pending
        .iter()
        .position(|(c, _)| c.cmd_id == t.cmd_id && c.action == t.action)
    else {
        return;
    };
    let Ok(v) = serde_json::from_slice::<serde_json::Value>(payload) else {
        return;
    };
    if v["board"].as_str() != Some(agent.s.board.as_str()) {
        return;
    }
    // Only this board's own answer: sealed with its key (broker access alone cannot make one);
    // without a key nothing can be told apart, and nothing is taken.
    let topic = crate::mqtt::topics::command(&agent.s.topic_root, &t.board, &t.action, &t.cmd_id);
    if !agent.sealed_by_me(&topic, payload) {
        return;
    }
    // CmdStatus's wire names, matched here rather than deserialised from the Value (a serde
    // instance of its own in the size-bound build).
    let status = match v["status"].as_str() {
        Some("successful") => CmdStatus::Successful,
        Some("failed") => CmdStatus::Failed,
        Some("rejected") => CmdStatus::Rejected,
        Some("executing") => CmdStatus::Executing,
        _ => return,
    };
    if status.is_final() {
        let (c, _) = agent.interrupted.pending.remove(i);
        let reason = v["reason"].as_str().map(|r| r.chars().take(200).collect());
        agent.gate.adopt_final(&c, status, reason);
        tracing::warn!(action = %c.action, cmd_id = %c.cmd_id, ?status, "the broker holds this board's final answer of a command the ledger left executing (its record was not saved): kept, not failed");
    } else if status == CmdStatus::Executing {
        agent.interrupted.pending.remove(i);
    }
}

/// Housekeeping: once the retained records had their time (or the subscription has not been
/// granted for [`SUBACK_TIMEOUT`] on this connection), the rest are answered
/// `failed: agent restarted`.
pub(super) fn answer_due(agent: &mut Agent) {
    if agent.interrupted.is_empty() || !agent.connected {
        return;
    }
    let ready = match (&agent.subscription, agent.interrupted.granted_at) {
        (Subscription::Granted, Some(at)) => at.elapsed() >= RETAINED_GRACE,
        _ => agent
            .connected_since
            .is_some_and(|c| c.elapsed() >= SUBACK_TIMEOUT),
    };
    if !ready {
        return;
    }
    for (c, e) in std::mem::take(&mut agent.interrupted.pending) {
        agent.answer(&c, e.status, serde_json::json!({"reason": e.reason}));
    }
}
