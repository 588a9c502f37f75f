//! The planner against the board fixtures: no compaction where `expected.toml` lists
//! `memory.compaction` in `must_not_fire` (too-small pools, real OOM, device-side CMA, driver
//! faults), and compaction for BR-11 (`cma_alloc` -16 while CMA has free pages).

use super::util::fixtures;
use npu_agent::action::planner::{plan, ActionKind, PlannerState};
use npu_agent::action::state::CompactState;
use npu_agent::action::ActionConfig;
use npu_agent::diagnose::{diagnose, ProfileChoice};
use npu_agent::root::SysRoot;

const NOW: i64 = 1_750_000_000;

fn cases() -> Vec<(String, toml::Value)> {
    let dir = fixtures("boards");
    let mut out = Vec::new();
    for e in std::fs::read_dir(&dir).unwrap().filter_map(|e| e.ok()) {
        let exp = e.path().join("expected.toml");
        if !e.path().join("root").is_dir() || !exp.is_file() {
            continue;
        }
        let v: toml::Value = toml::from_str(&std::fs::read_to_string(&exp).unwrap()).unwrap();
        out.push((e.file_name().to_string_lossy().into_owned(), v));
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

fn list(v: &toml::Value, key: &str) -> Vec<String> {
    v.get(key)
        .and_then(|x| x.as_array())
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn no_compaction_where_the_fixture_forbids_it() {
    let mut checked = 0;
    for (case, exp) in cases() {
        if !list(&exp, "must_not_fire")
            .iter()
            .any(|s| s == "memory.compaction")
        {
            continue;
        }
        let id = exp
            .get("id")
            .and_then(|v| v.as_str())
            .unwrap_or("?")
            .to_string();
        let d = diagnose(
            &SysRoot::new(fixtures(&format!("boards/{case}/root"))),
            &ProfileChoice::Auto,
        )
        .unwrap();
        let p = plan(
            &d.report.findings,
            &d.profile,
            &PlannerState::default(),
            &ActionConfig::default(),
            NOW,
        );
        assert!(
            p.run.is_empty(),
            "{id} {case}: compaction planned: {:?}",
            p.run
        );
        checked += 1;
    }
    assert!(
        checked >= 12,
        "only {checked} fixtures list memory.compaction in must_not_fire"
    );
}

#[test]
fn compaction_planned_wherever_the_fixture_requires_memory_compaction() {
    let mut planned = Vec::new();
    for (case, exp) in cases() {
        if !list(&exp, "must_fire")
            .iter()
            .any(|s| s == "memory.compaction")
        {
            continue;
        }
        let id = exp
            .get("id")
            .and_then(|v| v.as_str())
            .unwrap_or("?")
            .to_string();
        let d = diagnose(
            &SysRoot::new(fixtures(&format!("boards/{case}/root"))),
            &ProfileChoice::Auto,
        )
        .unwrap();
        let p = plan(
            &d.report.findings,
            &d.profile,
            &PlannerState::default(),
            &ActionConfig::default(),
            NOW,
        );
        assert_eq!(p.run.len(), 1, "{id} {case}: {p:?}");
        assert!(
            p.run[0]
                .triggered_by
                .contains(&"memory.compaction".to_string()),
            "{id}: {p:?}"
        );
        planned.push(id);
    }
    assert!(planned.contains(&"BR-11".to_string()), "{planned:?}");
}

#[test]
fn br11_ebusy_with_free_cma_plans_compaction_with_drop_caches() {
    let root = SysRoot::new(fixtures("boards/rpi3bplus-cma-ebusy-with-free-cma/root"));
    let d = diagnose(&root, &ProfileChoice::Auto).unwrap();
    let p = plan(
        &d.report.findings,
        &d.profile,
        &PlannerState::default(),
        &ActionConfig::default(),
        NOW,
    );
    assert_eq!(p.run.len(), 1, "{p:?}");
    assert_eq!(p.run[0].action, ActionKind::Compact);
    assert!(
        p.run[0].drop_caches,
        "EBUSY in CMA: drop the page cache first"
    );
    assert_eq!(p.run[0].triggered_by, vec!["memory.compaction".to_string()]);
    assert!(
        p.run[0].reason.contains("-16 (EBUSY)"),
        "{}",
        p.run[0].reason
    );

    // The same board 5 minutes after a run: held by the cooldown, then the attempt limit.
    let recent = PlannerState {
        compact: CompactState {
            last_run_unix_s: Some(NOW - 300),
            consecutive_attempts: 1,
            ..Default::default()
        },
    };
    let p = plan(
        &d.report.findings,
        &d.profile,
        &recent,
        &ActionConfig::default(),
        NOW,
    );
    assert!(p.run.is_empty());
    assert!(
        p.held[0].reason.contains("next one allowed in 300 s"),
        "{:?}",
        p.held
    );
    let tired = PlannerState {
        compact: CompactState {
            last_run_unix_s: Some(NOW - 3600),
            consecutive_attempts: 3,
            ..Default::default()
        },
    };
    let p = plan(
        &d.report.findings,
        &d.profile,
        &tired,
        &ActionConfig::default(),
        NOW,
    );
    assert!(p.run.is_empty());
    assert!(
        p.held[0].reason.contains("3 compactions in a row"),
        "{:?}",
        p.held
    );
}

#[test]
fn br18_real_oom_is_held_with_the_reason() {
    let root = SysRoot::new(fixtures("boards/firefly-aibox-3588-order0-oom/root"));
    let d = diagnose(&root, &ProfileChoice::Auto).unwrap();
    let p = plan(
        &d.report.findings,
        &d.profile,
        &PlannerState::default(),
        &ActionConfig::default(),
        NOW,
    );
    assert!(p.run.is_empty());
    // Either no trigger at all (the compaction check already stands down) or held for OOM.
    assert!(
        p.held
            .iter()
            .all(|h| h.reason.contains("memory is exhausted")),
        "{:?}",
        p.held
    );
}
