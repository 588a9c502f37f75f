//! The command ledger (`commands.json`): every command id the gate accepted, its outcome, and
//! the last run of each rate-limit slot; how ids are keyed, pruned and read from older files.

use super::{CmdStatus, MAX_UNSIGNED_IDS};
use crate::mqtt::command::CLOCK_SKEW_S;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One remembered command.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LedgerEntry {
    /// Action name.
    pub action: String,
    /// Verified by a trusted key.
    pub signed: bool,
    /// Unix seconds when accepted.
    pub accepted_unix_s: i64,
    /// Unix seconds until which the id is kept (`expires_at` + skew).
    pub keep_until_unix_s: i64,
    /// FNV-1a of the accepted payload (the same bytes again are a re-delivery).
    pub payload_hash: u64,
    /// `executing`, then the final state.
    pub status: CmdStatus,
    /// Reason of a failure, or a short summary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl LedgerEntry {
    /// The recorded action parsed (`None`: a name no action has, as an older ledger may hold).
    pub fn kind(&self) -> Option<crate::model::action::ActionKind> {
        self.action.parse().ok()
    }
}

fn schema_2() -> u32 {
    2
}

/// Seen command ids (persisted in [`LEDGER_FILE`]) and the last run of each rate-limit slot.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Ledger {
    /// Format version (2).
    #[serde(default = "schema_2")]
    pub schema: u32,
    /// cmd_id → what happened to it.
    #[serde(default)]
    pub commands: BTreeMap<String, LedgerEntry>,
    /// Rate-limit slot (`set_cma`, `set_cma/unsigned`) → unix seconds of the last run.
    #[serde(default)]
    pub last_run: BTreeMap<String, i64>,
    /// Unix seconds when this board's ledger was started afresh (no file before): a signed
    /// command issued earlier cannot be told from a replay captured before a wipe. Absent in
    /// files from before it was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_unix_s: Option<i64>,
    /// Version 1's ids (cmd_id → accepted at); read once and converted.
    #[serde(default, skip_serializing)]
    seen: BTreeMap<String, i64>,
}

impl Ledger {
    /// Converts a version-1 file: every old id is kept as signed (never evicted by count) for the
    /// longest lifetime a command may have had.
    pub(super) fn upgrade(&mut self, max_age_s: u64) {
        let keep = i64::try_from(max_age_s).unwrap_or(i64::MAX);
        for (id, at) in std::mem::take(&mut self.seen) {
            self.commands.entry(id).or_insert(LedgerEntry {
                action: String::new(),
                signed: true,
                accepted_unix_s: at,
                keep_until_unix_s: at.saturating_add(keep).saturating_add(2 * CLOCK_SKEW_S),
                payload_hash: 0,
                status: CmdStatus::Successful,
                reason: None,
            });
        }
        // Files before the split kept unsigned ids under the bare id.
        let bare: Vec<String> = self
            .commands
            .iter()
            .filter(|(k, e)| !e.signed && !k.starts_with("u:"))
            .map(|(k, _)| k.clone())
            .collect();
        for k in bare {
            if let Some(e) = self.commands.remove(&k) {
                self.commands.insert(ledger_key(&k, false), e);
            }
        }
        self.schema = 2;
    }

    /// Moves every run recorded after `now` (by a clock that was ahead and has been set right)
    /// back to `now`: its rate limit then holds one window, not the size of the clock step.
    pub fn clamp_runs(&mut self, now: i64) {
        for at in self.last_run.values_mut() {
            *at = (*at).min(now);
        }
    }

    /// Drops ids whose keep time has passed (never an `executing` one), then the oldest unsigned
    /// ids above [`MAX_UNSIGNED_IDS`]. Signed ids are only ever dropped by time.
    pub fn prune(&mut self, now: i64) {
        self.commands
            .retain(|_, e| e.status == CmdStatus::Executing || e.keep_until_unix_s >= now);
        let unsigned = self.commands.values().filter(|e| !e.signed).count();
        if unsigned > MAX_UNSIGNED_IDS {
            let mut old: Vec<(i64, String)> = self
                .commands
                .iter()
                .filter(|(_, e)| !e.signed && e.status.is_final())
                .map(|(k, e)| (e.accepted_unix_s, k.clone()))
                .collect();
            old.sort();
            for (_, k) in old.into_iter().take(unsigned - MAX_UNSIGNED_IDS) {
                self.commands.remove(&k);
            }
        }
    }
}

/// The ledger key of `cmd_id`: the id itself for a signed command, `u:<id>` for an unsigned one
/// (`:` is never in an id), so an unsigned message that reuses a signed command's id (any
/// subscriber sees it) never consumes it.
pub fn ledger_key(cmd_id: &str, signed: bool) -> String {
    if signed {
        cmd_id.to_string()
    } else {
        format!("u:{cmd_id}")
    }
}

/// The command id of a ledger key.
pub(super) fn key_id(key: &str) -> &str {
    key.strip_prefix("u:").unwrap_or(key)
}
