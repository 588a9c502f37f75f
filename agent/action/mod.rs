//! Guarded actions: memory compaction, the boot-time `cma=` edit, reboot, and unloading a local
//! hailo-ollama's model.
//!
//! ```text
//! findings + profile + state --> planner (pure, guards: cooldown, attempt limit, OOM) --> plan
//! plan / CLI / MQTT command / HA button --> gate --> executor (I/O under the root) --> outcome
//! ```
//!
//! - [`gate`]: the allow-list, refusals, rate limits, queue and command ledger every origin
//!   passes; [`limits`]: every rate limit and cooldown; [`executor`]: the one entry point that
//!   runs an admitted action and returns its [`crate::model::action::ActionOutcome`].
//! - [`release_npu`]: ask a local hailo-ollama to unload its model(s).
//! - [`planner`]: `(findings, profile, state) -> Plan`, pure; decides when compaction helps.
//! - [`compact`]: `sync`, optional `drop_caches=1`, `compact_memory=1`, before/after figures.
//! - [`bootedit`]: pure text edits of `cma=` (text in, new text + diff + warnings out).
//! - [`cma`]: `cma show` / `cma set`: choose the profile's boot file, validate the size, write
//!   atomically with a backup, re-read, record `reboot_required`.
//! - [`atomic`]: backup + temp file + fsync + rename + directory fsync, behind a [`atomic::Storage`]
//!   trait so tests can inject a power cut or `ENOSPC` at any step.
//! - [`reboot`]: the reboot state machine (intent with `boot_id` persisted before acting,
//!   `sync`, command with a timeout, reconcile on start).
//! - [`fix`]: a finding's remedy steps as a plan, and each step carried out.
//! - [`state`]: JSON state files in `/var/lib/npu-agent/` under the root.
//!
//! Every write goes through [`crate::root::SysRoot`], so `--root DIR` confines it to DIR.

pub mod atomic;
pub mod bootedit;
pub mod clock_hold;
pub mod cma;
pub mod compact;
pub mod executor;
pub mod fix;
pub mod gate;
pub mod limits;
pub mod planner;
pub mod reboot;
pub mod release_npu;
pub mod state;
pub mod update;
pub mod update_run;
pub mod update_unit;

use serde::{Deserialize, Serialize};

/// The `[actions]` settings (docs/reference.md "Config keys"), with their defaults. Unknown keys are refused.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ActionConfig {
    /// Let the planner run compaction by itself when a memory check asks for it.
    pub auto_compact: bool,
    /// Seconds between two compactions (planner; a manual `npu-agent compact` is not held).
    pub compact_cooldown_s: u64,
    /// Automatic compactions in a row that may fail to clear the trigger before the planner
    /// stops and leaves it to a person (the counter resets when the trigger clears).
    pub compact_max_attempts: u32,
    /// Reboots are refused unless this is true.
    pub allow_reboot: bool,
    /// The reboot command, as argv (no shell).
    pub reboot_command: Vec<String>,
    /// Seconds the reboot command may run before it is killed and the reboot reported failed.
    pub reboot_timeout_s: u64,
    /// Seconds that must pass between two reboot requests ([`limits::REBOOT_RATE_LIMIT_S`]).
    pub reboot_min_interval_s: u64,
}

impl Default for ActionConfig {
    fn default() -> Self {
        ActionConfig {
            auto_compact: true,
            compact_cooldown_s: limits::COMPACT_COOLDOWN_S,
            compact_max_attempts: 3,
            allow_reboot: false,
            reboot_command: vec!["systemctl".into(), "reboot".into()],
            reboot_timeout_s: 120,
            reboot_min_interval_s: limits::REBOOT_RATE_LIMIT_S,
        }
    }
}

/// Seconds since the epoch (UTC) now; 0 if the clock is before 1970.
pub fn now_unix_s() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0)
}

/// `/proc/sys/kernel/random/boot_id` under the root, trimmed; `None` when unreadable or empty.
pub fn read_boot_id(root: &crate::root::SysRoot) -> Option<String> {
    root.read_string("/proc/sys/kernel/random/boot_id")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_defaults_match_design() {
        let c: ActionConfig = toml::from_str("allow_reboot = true\n").unwrap();
        assert!(c.allow_reboot);
        assert_eq!(c.compact_cooldown_s, 600);
        assert_eq!(c.reboot_timeout_s, 120);
        assert_eq!(c.reboot_command, vec!["systemctl", "reboot"]);
        assert!(toml::from_str::<ActionConfig>("allow_rebot = true\n").is_err());
    }
}
