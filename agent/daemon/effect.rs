//! What the daemon's state machines (the command subscription, interrupted-command recovery,
//! the sweep of old answers, the availability re-assert) ask of the event loop: they take
//! events and return effects, and the loop ([`super::apply`]) carries them out on the link, the
//! gate and the status. The machines import no daemon type above them.

use crate::action::gate::CmdRef;
use crate::mqtt::command::CmdStatus;
use std::time::Instant;

/// One thing the event loop is to do.
#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    /// Publish the retained `online` on the board's availability again.
    PublishOnline,
    /// Clear a retained topic (an empty retained QoS 1 message).
    Clear(String),
    /// Answer a command: its state and extra fields (`reason`, `result`).
    Answer(CmdRef, CmdStatus, serde_json::Value),
    /// The broker holds this board's final answer of a command the ledger left `executing`:
    /// the ledger takes it (status, reason).
    AdoptFinal(CmdRef, CmdStatus, Option<String>),
    /// Send the agent's SUBSCRIBE: attempt `n` on this connection.
    Subscribe(u32),
    /// Subscribe again to the board's own command topics, for the broker to send what it
    /// retains there (old answers are cleared on sight).
    Rescan,
    /// The command subscription was granted at this instant.
    Granted(Instant),
    /// Where the command subscription stands changed: the status notices follow it.
    RefreshNotices,
}
