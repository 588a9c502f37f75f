//! Every rate limit and cooldown an action is held by, decided here and nowhere else: the gate
//! asks [`Limits::rate_limit_s`] for commands and buttons, the gate and the planner ask
//! [`cooldown_wait_s`] for automatic compaction, and the reboot guard's minimum interval is
//! [`REBOOT_RATE_LIMIT_S`].

use crate::model::action::ActionKind;
use std::collections::BTreeMap;

/// Seconds between two reboots: the command rate limit (docs/reference.md "MQTT topics and payloads": reboot 300 s) and
/// the reboot guard's `reboot_min_interval_s` are this one figure.
pub const REBOOT_RATE_LIMIT_S: u64 = 300;

/// Default seconds between two automatic compactions (`[actions] compact_cooldown_s`).
pub const COMPACT_COOLDOWN_S: u64 = 600;

/// The built-in minimum seconds between two executions of `action`. Signed and unsigned traffic
/// have separate slots (unsigned commands can never use up a signed command's slot).
pub fn default_rate_limit_s(action: ActionKind, signed: bool) -> i64 {
    match action {
        ActionKind::Reboot => REBOOT_RATE_LIMIT_S as i64,
        ActionKind::SetCma | ActionKind::Compact => 30,
        ActionKind::ReleaseNpu => 10,
        // A fix may run apt and restart units: at most one a minute.
        ActionKind::Fix => 60,
        // A bundle reads every file the checks read and holds the broker's retained store.
        ActionKind::Capture => 60,
        // An update reinstalls the agent and restarts it: at most one in 10 minutes.
        ActionKind::Update => 600,
        // A rescan is cheap, but unsigned ones come from anyone who may publish: 1 per 5 s.
        ActionKind::Rescan if !signed => 5,
        ActionKind::Rescan => 0,
    }
}

/// The limits of one agent: the built-in rate limits, the configured cooldown, and the
/// per-action overrides a test sets (the hidden `[actions] rate_limit_overrides_s`) so that it
/// need not sleep through a window.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Seconds between two automatic compactions (`compact_cooldown_s`).
    pub compact_cooldown_s: u64,
    /// Rate limit in seconds per action name, replacing the built-in one (tests only).
    pub rate_limit_overrides_s: BTreeMap<ActionKind, u64>,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            compact_cooldown_s: COMPACT_COOLDOWN_S,
            rate_limit_overrides_s: BTreeMap::new(),
        }
    }
}

impl Limits {
    /// Minimum seconds between two executions of `action` from the same lane (`signed` or not).
    pub fn rate_limit_s(&self, action: ActionKind, signed: bool) -> i64 {
        match self.rate_limit_overrides_s.get(&action) {
            Some(s) => i64::try_from(*s).unwrap_or(i64::MAX),
            None => default_rate_limit_s(action, signed),
        }
    }

    /// Seconds left before an automatic compaction may run after one at `last` (Unix seconds);
    /// `None` when it may run at `now`.
    pub fn compact_wait_s(&self, last: Option<i64>, now: i64) -> Option<i64> {
        cooldown_wait_s(last, self.compact_cooldown_s, now)
    }
}

/// Seconds left of a `cooldown_s` window opened at `last` (Unix seconds); `None` when it is over
/// at `now` or nothing ran yet. A `last` in the future (the clock was set back) holds for the
/// whole window rather than never.
pub fn cooldown_wait_s(last: Option<i64>, cooldown_s: u64, now: i64) -> Option<i64> {
    let since = now.saturating_sub(last?);
    let cooldown = i64::try_from(cooldown_s).unwrap_or(i64::MAX);
    if since < 0 {
        return Some(cooldown);
    }
    (since < cooldown).then(|| cooldown - since)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_reboot_interval() {
        let l = Limits::default();
        assert_eq!(l.rate_limit_s(ActionKind::Reboot, true), 300);
        assert_eq!(
            crate::action::ActionConfig::default().reboot_min_interval_s,
            REBOOT_RATE_LIMIT_S
        );
        assert_eq!(l.rate_limit_s(ActionKind::Rescan, false), 5);
        assert_eq!(l.rate_limit_s(ActionKind::Rescan, true), 0);
    }

    #[test]
    fn overrides_replace_the_built_in_window() {
        let mut l = Limits::default();
        l.rate_limit_overrides_s.insert(ActionKind::SetCma, 0);
        assert_eq!(l.rate_limit_s(ActionKind::SetCma, true), 0);
        assert_eq!(l.rate_limit_s(ActionKind::Compact, true), 30);
    }

    #[test]
    fn cooldowns_count_from_the_last_run() {
        assert_eq!(cooldown_wait_s(None, 600, 1000), None);
        assert_eq!(cooldown_wait_s(Some(1000), 600, 1100), Some(500));
        assert_eq!(cooldown_wait_s(Some(1000), 600, 1600), None);
        assert_eq!(cooldown_wait_s(Some(2000), 600, 1000), Some(600));
        assert_eq!(cooldown_wait_s(Some(i64::MIN), u64::MAX, i64::MAX), None);
    }
}
