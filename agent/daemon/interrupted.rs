//! Commands the ledger still says are `executing` on start (a crash, or a final state the
//! ledger could not save: a full state directory). They are finished as `failed: agent
//! restarted`, unless the broker holds this board's final answer for them: then the answer went
//! out and only its record was lost, and a `failed` would overwrite the real outcome. So the
//! `failed` answers wait until the command subscription is granted and the broker's retained
//! records have had time to arrive.

use super::effect::Effect;
use super::subscribe::SUBACK_TIMEOUT;
use crate::action::gate::{CmdRef, LedgerEntry};
use crate::mqtt::command::CmdStatus;
use crate::mqtt::incoming::Incoming;
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

impl Interrupted {
    /// A retained message on the command topic `t` of board `board`: when it is the broker's
    /// record of an interrupted command, a final answer of this board is kept (the ledger takes
    /// it, [`Effect::AdoptFinal`]) and an `executing` is left to the gate, which answers it
    /// with the ledger's `failed`. `sealed_by_me` tells whether the payload carries this
    /// board's seal (asked only for a pending command: a signature check costs).
    pub fn on_retained(
        &mut self,
        m: &Incoming,
        board: &str,
        sealed_by_me: &dyn Fn() -> bool,
    ) -> Vec<Effect> {
        let t = &m.topic;
        let Some(i) = self
            .pending
            .iter()
            .position(|(c, _)| c.cmd_id == t.cmd_id && c.action == t.action)
        else {
            return Vec::new();
        };
        // Only this board's own answer: sealed with its key (broker access alone cannot make
        // one); without a key nothing can be told apart, and nothing is taken.
        if m.str_field("board") != Some(board) || !sealed_by_me() {
            return Vec::new();
        }
        let Some(status) = m.status_word().and_then(CmdStatus::from_wire) else {
            return Vec::new();
        };
        if status.is_final() {
            let (c, _) = self.pending.remove(i);
            let reason = m.str_field("reason").map(|r| r.chars().take(200).collect());
            tracing::warn!(action = %c.action, cmd_id = %c.cmd_id, ?status, "the broker holds this board's final answer of a command the ledger left executing (its record was not saved): kept, not failed");
            return vec![Effect::AdoptFinal(c, status, reason)];
        }
        if status == CmdStatus::Executing {
            self.pending.remove(i);
        }
        Vec::new()
    }

    /// Housekeeping at `now`: once the retained records had their time since the command
    /// subscription was `granted` (or it has not been granted for [`SUBACK_TIMEOUT`] on the
    /// connection up since `connected_since`), the rest are answered `failed: agent restarted`.
    pub fn due(
        &mut self,
        granted: bool,
        connected_since: Option<Instant>,
        now: Instant,
    ) -> Vec<Effect> {
        if self.is_empty() {
            return Vec::new();
        }
        let ready = match (granted, self.granted_at) {
            (true, Some(at)) => now.saturating_duration_since(at) >= RETAINED_GRACE,
            _ => {
                connected_since.is_some_and(|c| now.saturating_duration_since(c) >= SUBACK_TIMEOUT)
            }
        };
        if !ready {
            return Vec::new();
        }
        std::mem::take(&mut self.pending)
            .into_iter()
            .map(|(c, e)| Effect::Answer(c, e.status, serde_json::json!({"reason": e.reason})))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pending() -> Interrupted {
        let c = CmdRef {
            action: "compact".into(),
            cmd_id: "c1".into(),
        };
        let e = LedgerEntry {
            action: "compact".into(),
            signed: false,
            accepted_unix_s: 1,
            keep_until_unix_s: 2,
            payload_hash: 3,
            status: CmdStatus::Failed,
            reason: Some("agent restarted".into()),
        };
        Interrupted::new(vec![(c, e)])
    }

    /// The broker's sealed final answer is adopted, not failed; without the seal nothing is
    /// taken, and the rest is answered once the retained records had their time.
    #[test]
    fn interrupted_commands_return_what_the_loop_is_to_do() {
        let t = crate::mqtt::topics::CommandTopic::new("b1", "compact", "c1");
        let at = |p: &'static [u8]| Incoming::new(t.clone(), p, true);
        let answer = br#"{"status":"successful","board":"b1","reason":"done"}"#;
        let mut i = pending();
        assert!(i.on_retained(&at(answer), "b1", &|| false).is_empty());
        assert!(i.on_retained(&at(answer), "b2", &|| true).is_empty());
        let now = Instant::now();
        assert!(i.due(true, Some(now), now).is_empty(), "not granted yet");
        i.granted(now);
        assert!(
            i.due(true, Some(now), now).is_empty(),
            "records still coming"
        );
        let e = i.due(true, Some(now), now + RETAINED_GRACE);
        assert!(
            matches!(&e[..], [Effect::Answer(c, CmdStatus::Failed, v)] if c.cmd_id == "c1" && v["reason"] == "agent restarted"),
            "{e:?}"
        );
        let mut i = pending();
        let e = i.on_retained(&at(answer), "b1", &|| true);
        assert!(
            matches!(&e[..], [Effect::AdoptFinal(_, CmdStatus::Successful, Some(r))] if r == "done"),
            "{e:?}"
        );
        assert!(i.is_empty());
    }
}
