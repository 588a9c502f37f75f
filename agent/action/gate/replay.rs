//! The replay side of the gate: which command a message is (new, delivered again, a replay of
//! a used id), the ids pruned by a time bounded by the monotonic clock, a fresh ledger's
//! refusal of older signed commands, and the final states settled after a restart or reboot.

use super::ledger::{key_id, ledger_key};
use super::{Admission, CmdRef, Gate, LedgerEntry, ALL};
use crate::model::action::ActionKind;
use crate::mqtt::command::{self, CmdStatus, CLOCK_SKEW_S};
use crate::mqtt::topics::CommandTopic;

impl Gate {
    /// The caller's monotonic clock now, in seconds (`CLOCK_MONOTONIC`, a test clock): a
    /// forward step of the wall clock then prunes no id before its time (see
    /// [`Gate::prune_time`]). Without it the wall clock is trusted as it is.
    pub(super) fn read_monotonic(&mut self, mono_s: u64) {
        let origin = self.mono.and_then(|(_, o)| o);
        self.mono = Some((mono_s, origin));
    }

    /// The wall time ids are pruned by: `now`, but no later than the first wall time seen plus
    /// the monotonic time since (a clock stepped days ahead and back must not let a captured
    /// signed command run again).
    pub(super) fn prune_time(&mut self, now: i64) -> i64 {
        let Some((mono, origin)) = &mut self.mono else {
            return now;
        };
        let (m0, w0) = *origin.get_or_insert((*mono, now));
        let since = i64::try_from(mono.saturating_sub(m0)).unwrap_or(i64::MAX);
        now.min(w0.saturating_add(since))
    }

    /// The ledger holds a record of `cmd_id` (it ran, or is running): a later message with that
    /// id is a replay, answered by the gate with the real outcome.
    pub fn has_record(&self, cmd_id: &str) -> bool {
        self.record(cmd_id).is_some()
    }

    /// The ledger holds `cmd_id` as still `executing` (its record must not be cleared yet).
    pub fn is_executing(&self, cmd_id: &str) -> bool {
        self.record(cmd_id)
            .is_some_and(|e| e.status == CmdStatus::Executing)
    }

    /// The record of `cmd_id`: the signed command's, else the unsigned one's.
    pub(super) fn record(&self, cmd_id: &str) -> Option<&LedgerEntry> {
        let c = &self.ledger.commands;
        c.get(cmd_id).or_else(|| c.get(&ledger_key(cmd_id, false)))
    }

    /// On start: commands a crash left `executing` (other than a reboot, settled by `boot_id`)
    /// are finished as `failed: agent restarted`. Returns them, to publish.
    pub fn finish_interrupted(&mut self) -> Vec<(CmdRef, LedgerEntry)> {
        self.finish_interrupted_but(&[ActionKind::Reboot])
    }

    /// [`Gate::finish_interrupted`] leaving the commands of the kinds in `settled_later`
    /// `executing` (a reboot; an update whose pending record is there: both are answered
    /// after the restart). An update without its record was cut off before the install and is
    /// finished as failed like any other.
    pub fn finish_interrupted_but(
        &mut self,
        settled_later: &[ActionKind],
    ) -> Vec<(CmdRef, LedgerEntry)> {
        let mut out = Vec::new();
        for (id, e) in self.ledger.commands.iter_mut() {
            if e.status == CmdStatus::Executing
                && !e.kind().is_some_and(|k| settled_later.contains(&k))
            {
                e.status = CmdStatus::Failed;
                e.reason = Some("agent restarted".into());
                out.push((
                    CmdRef {
                        action: e.action.clone(),
                        cmd_id: key_id(id).to_string(),
                    },
                    e.clone(),
                ));
            }
        }
        if !out.is_empty() {
            if let Err(e) = self.persist() {
                tracing::error!(error = %e, "cannot save the command ledger");
            }
        }
        out
    }

    /// Why a signed command is refused on a ledger started afresh after it was issued (a wiped
    /// state directory, a re-flashed board): the ids it recorded are gone, so the command
    /// cannot be told from a captured replay. The creation time is the first message's.
    pub(super) fn before_the_ledger(&self, parsed: &command::Parsed) -> Option<String> {
        let created = self.ledger.created_unix_s?;
        (parsed.msg.issued_at < created.saturating_sub(CLOCK_SKEW_S)).then(|| {
            format!(
                "issued {} s before this board's command ledger was started afresh (a wiped \
                 state directory or a new image): it cannot be told from a replay; send it again",
                created - parsed.msg.issued_at
            )
        })
    }

    /// What the ledger says of a parsed command: a re-delivery (answered again when finished),
    /// a replay of a used id (answered with its record), or `None` for a new command. A message
    /// that carries a signature is looked up (and, once verified, recorded) as signed; an
    /// unsigned one never reaches a signed command's record except as a replay of it.
    pub(super) fn seen_before(
        &self,
        topic: &CommandTopic,
        parsed: &command::Parsed,
        cmd: &CmdRef,
    ) -> Option<Admission> {
        let claims_signed = parsed.msg.signature.is_some() && !self.policy.trusted_keys.is_empty();
        let own = self
            .ledger
            .commands
            .get(&ledger_key(&topic.cmd_id, claims_signed));
        if let Some(e) = own.filter(|e| e.payload_hash == parsed.payload_hash) {
            // A retained init delivered again means the answer never reached the broker (the
            // link dropped right after it): a finished command answers again.
            return Some(match e.status.is_final() {
                true => Admission::Answered {
                    cmd: cmd.clone(),
                    record: e.clone(),
                },
                false => Admission::Ignored("duplicate delivery"),
            });
        }
        let signed = self.ledger.commands.get(&topic.cmd_id);
        let signed = signed.filter(|e| !claims_signed && e.signed && e.action == topic.action);
        let e = signed.or(own)?;
        if topic.board == ALL {
            // The fleet-wide init stays retained until the requester clears it.
            return Some(Admission::Ignored("fleet-wide command already handled"));
        }
        Some(Admission::Replay {
            cmd: cmd.clone(),
            record: e.clone(),
            reason: format!("cmd_id {:?} was already used (replay)", topic.cmd_id),
        })
    }

    /// The broker keeps `executing` for `cmd` (a retained state, delivered on (re)subscribing):
    /// when the ledger says it finished, its final answer was lost with a dropped connection
    /// (rumqttc discards unsent publishes on a clean-start CONNACK), so it is answered again.
    pub(super) fn in_progress_on_the_broker(&self, cmd: &CmdRef) -> Admission {
        match self.record(&cmd.cmd_id) {
            Some(e) if e.status.is_final() && e.action == cmd.action => Admission::Answered {
                cmd: cmd.clone(),
                record: e.clone(),
            },
            _ => Admission::Ignored(command::IN_PROGRESS),
        }
    }

    /// An interrupted command (finished `failed: agent restarted` on start) whose final answer
    /// the broker holds: the ledger takes that answer (the record the state directory could not
    /// save).
    pub fn adopt_final(&mut self, cmd: &CmdRef, status: CmdStatus, reason: Option<String>) {
        let restarted = |e: &LedgerEntry| {
            e.action == cmd.action
                && e.status == CmdStatus::Failed
                && e.reason.as_deref() == Some("agent restarted")
        };
        let key = [true, false]
            .map(|signed| ledger_key(&cmd.cmd_id, signed))
            .into_iter()
            .find(|k| self.ledger.commands.get(k).is_some_and(restarted));
        if let Some(e) = key.and_then(|k| self.ledger.commands.get_mut(&k)) {
            e.status = status;
            e.reason = reason;
            if let Err(e) = self.persist() {
                tracing::error!(error = %e, "cannot save the command ledger");
            }
        }
    }

    /// Records the settled reboot `cmd_id` (its result is known after the reboot).
    pub fn settle_reboot(&mut self, cmd_id: &str, ok: bool, detail: &str) {
        self.settle_after_restart(ActionKind::Reboot, cmd_id, ok, detail)
    }

    /// Records the settled `kind` command `cmd_id` whose result is known after a restart (a
    /// reboot, an update).
    pub fn settle_after_restart(&mut self, kind: ActionKind, cmd_id: &str, ok: bool, detail: &str) {
        // The reboot's own record: an unsigned message may have reused a signed id.
        let key = [true, false]
            .map(|signed| ledger_key(cmd_id, signed))
            .into_iter()
            .find(|k| {
                self.ledger
                    .commands
                    .get(k)
                    .is_some_and(|e| e.kind() == Some(kind) && e.status == CmdStatus::Executing)
            });
        if let Some(e) = key.and_then(|k| self.ledger.commands.get_mut(&k)) {
            e.status = if ok {
                CmdStatus::Successful
            } else {
                CmdStatus::Failed
            };
            e.reason = Some(detail.chars().take(200).collect());
            if let Err(e) = self.persist() {
                tracing::error!(error = %e, "cannot save the command ledger");
            }
        }
    }
}
