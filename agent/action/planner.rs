//! The planner: a pure function `(findings, profile, state) -> Plan` that decides which
//! automatic actions run now, and says why the others are held.
//!
//! Compaction runs for fragmentation (`memory.fragmentation` warn) or failed contiguous
//! allocations while free memory exists (`memory.compaction` warn/fail: `cma_alloc` -16 with
//! free CMA, higher-order page allocation failures, direct compaction failing). It never runs
//! for a real out-of-memory (`memory.oom` warn/fail: order-0 failures, OOM kills, MemAvailable
//! under 5 %) nor for a pool that is simply too small (`cma.free` -12 / `cma.pool_size` are
//! not triggers). Guards: `auto_compact`, the cooldown (`compact_cooldown_s`, default 600 s)
//! and the attempt limit (`compact_max_attempts` runs in a row without clearing the trigger).

use super::state::CompactState;
use super::ActionConfig;
use crate::check::{Finding, Status};
use crate::profile::Profile;
use serde::Serialize;

/// An action the planner can schedule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ActionKind {
    /// Memory compaction ([`super::compact`]).
    Compact,
}

/// An action to run now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PlannedAction {
    /// Which action.
    pub action: ActionKind,
    /// For compaction: drop the page cache first (CMA pages held by page cache, -16 EBUSY).
    pub drop_caches: bool,
    /// Why, in one sentence.
    pub reason: String,
    /// Check ids whose findings asked for it.
    pub triggered_by: Vec<String>,
}

/// An action that would help but is held back, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HeldAction {
    /// Which action.
    pub action: ActionKind,
    /// Why it does not run now (cooldown left, attempt limit, real OOM, `auto_compact` off).
    pub reason: String,
}

/// The planner's decision.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Plan {
    /// Actions to run now, in order.
    pub run: Vec<PlannedAction>,
    /// Actions held back.
    pub held: Vec<HeldAction>,
    /// True when no trigger is left and the compaction attempt counter should go back to 0.
    pub reset_compact_attempts: bool,
}

/// What the planner remembers between runs (from the state directory).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PlannerState {
    /// `compact.json`.
    pub compact: CompactState,
}

fn fires<'a>(findings: &'a [Finding], id: &str, at_least: Status) -> Vec<&'a Finding> {
    findings
        .iter()
        .filter(|f| f.id == id && f.status.fires() && f.status.severity() >= at_least.severity())
        .collect()
}

/// Decides the automatic actions for one diagnosis. `now_unix_s` is seconds since the epoch;
/// pure (no I/O, no clock).
pub fn plan(
    findings: &[Finding],
    profile: &Profile,
    state: &PlannerState,
    config: &ActionConfig,
    now_unix_s: i64,
) -> Plan {
    let mut out = Plan::default();
    let compaction = fires(findings, "memory.compaction", Status::Warn);
    let fragmentation = fires(findings, "memory.fragmentation", Status::Warn);
    let oom = fires(findings, "memory.oom", Status::Warn);
    let mut triggered_by = Vec::new();
    if !compaction.is_empty() {
        triggered_by.push("memory.compaction".to_string());
    }
    if !fragmentation.is_empty() {
        triggered_by.push("memory.fragmentation".to_string());
    }
    if triggered_by.is_empty() {
        out.reset_compact_attempts = state.compact.consecutive_attempts > 0;
        return out;
    }
    let hold = |reason: String| HeldAction {
        action: ActionKind::Compact,
        reason,
    };
    if !oom.is_empty() {
        out.held.push(hold(
            "memory is exhausted (memory.oom: order-0 failures, OOM kills or almost no MemAvailable): compaction cannot create memory".into(),
        ));
        return out;
    }
    if !config.auto_compact {
        out.held.push(hold(
            "auto_compact is off in [actions]; run `npu-agent compact` by hand".into(),
        ));
        return out;
    }
    let last = state.compact.last_run_unix_s;
    if let Some(wait) = super::limits::cooldown_wait_s(last, config.compact_cooldown_s, now_unix_s)
    {
        let since = now_unix_s.saturating_sub(last.unwrap_or(now_unix_s));
        let ran = if since >= 0 {
            format!("ran {since} s ago")
        } else {
            format!(
                "is recorded {} s ahead of the clock",
                since.saturating_neg()
            )
        };
        out.held.push(hold(format!(
            "cooldown: the last compaction {ran}; next one allowed in {wait} s (compact_cooldown_s = {})",
            config.compact_cooldown_s
        )));
        return out;
    }
    if state.compact.consecutive_attempts >= config.compact_max_attempts {
        out.held.push(hold(format!(
            "{} compactions in a row did not clear {}; stopped (compact_max_attempts = {}): reboot or investigate",
            state.compact.consecutive_attempts,
            triggered_by.join(", "),
            config.compact_max_attempts
        )));
        return out;
    }
    // CMA allocations failing with -16 (EBUSY): pages in the pool are held by page cache; dropping
    // clean page cache helps there.
    let drop_caches = compaction.iter().any(|f| f.status == Status::Fail);
    let first = compaction
        .first()
        .or(fragmentation.first())
        .map(|f| f.summary.clone())
        .unwrap_or_default();
    out.run.push(PlannedAction {
        action: ActionKind::Compact,
        drop_caches,
        reason: format!(
            "{first} (profile {}: large blocks are order >= {})",
            profile.id, profile.memory.fragmentation_order
        ),
        triggered_by,
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn profile() -> Profile {
        let (all, _) = crate::profile::load_all(&crate::root::SysRoot::new("/nonexistent"));
        all.into_iter().find(|p| p.id == "generic").unwrap()
    }

    fn f(id: &str, s: Status) -> Finding {
        Finding::new(id, s, format!("{id} {}", s.as_str()))
    }

    #[test]
    fn table() {
        let p = profile();
        let c = ActionConfig::default();
        let now = 10_000;
        let fresh = PlannerState::default();
        let ran_recently = PlannerState {
            compact: CompactState {
                last_run_unix_s: Some(now - 60),
                consecutive_attempts: 1,
                ..Default::default()
            },
        };
        let exhausted = PlannerState {
            compact: CompactState {
                last_run_unix_s: Some(now - 6000),
                consecutive_attempts: 3,
                ..Default::default()
            },
        };
        // (findings, state, runs?, drop_caches, held reason contains)
        let cases: Vec<(Vec<Finding>, &PlannerState, bool, bool, &str)> = vec![
            (
                vec![f("memory.compaction", Status::Fail)],
                &fresh,
                true,
                true,
                "",
            ),
            (
                vec![f("memory.fragmentation", Status::Warn)],
                &fresh,
                true,
                false,
                "",
            ),
            (
                vec![
                    f("memory.compaction", Status::Pass),
                    f("cma.free", Status::Fail),
                ],
                &fresh,
                false,
                false,
                "",
            ),
            (
                vec![
                    f("memory.compaction", Status::Warn),
                    f("memory.oom", Status::Fail),
                ],
                &fresh,
                false,
                false,
                "exhausted",
            ),
            (
                vec![
                    f("memory.compaction", Status::Warn),
                    f("memory.oom", Status::Info),
                ],
                &fresh,
                true,
                false,
                "",
            ),
            (
                vec![f("memory.compaction", Status::Fail)],
                &ran_recently,
                false,
                false,
                "cooldown",
            ),
            (
                vec![f("memory.compaction", Status::Fail)],
                &exhausted,
                false,
                false,
                "in a row",
            ),
        ];
        for (i, (findings, state, runs, drop, held)) in cases.into_iter().enumerate() {
            let plan = plan(&findings, &p, state, &c, now);
            assert_eq!(!plan.run.is_empty(), runs, "case {i}: {plan:?}");
            if runs {
                assert_eq!(plan.run[0].drop_caches, drop, "case {i}");
            }
            if !held.is_empty() {
                assert!(
                    plan.held.iter().any(|h| h.reason.contains(held)),
                    "case {i}: {plan:?}"
                );
            }
        }
        let cooled = plan(
            &[f("memory.compaction", Status::Fail)],
            &p,
            &ran_recently,
            &c,
            now,
        );
        assert!(
            cooled.held[0].reason.contains("next one allowed in 540 s"),
            "{cooled:?}"
        );
        let off = ActionConfig {
            auto_compact: false,
            ..Default::default()
        };
        assert!(plan(
            &[f("memory.compaction", Status::Fail)],
            &p,
            &fresh,
            &off,
            now
        )
        .run
        .is_empty());
        assert!(plan(&[], &p, &ran_recently, &c, now).reset_compact_attempts);
        assert!(!plan(&[], &p, &fresh, &c, now).reset_compact_attempts);
    }
}
