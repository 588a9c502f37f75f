//! The status assembler with literal facts.

use super::*;
use serde_json::json;

fn report(findings: Value) -> Report {
    serde_json::from_value(json!({
        "health": "warn", "board_id": "", "schema": 1, "profile": "rk3588-rknpu",
        "profile_reason": "device tree", "model": "Radxa ROCK 5B", "agent_version": "0.1.0",
        "time": "2026-12-07T18:00:00Z", "boot_id": "b-1", "uptime_s": 60, "session": 0,
        "findings": findings, "metrics": {"cma_free_bytes": 1}, "reboot_required": false,
        "last_action": null
    }))
    .expect("a report")
}

fn facts() -> DaemonFacts {
    DaemonFacts {
        board_id: "rock-7".into(),
        session: 3,
        last_action: Some(json!({"action": "compact", "ok": true})),
        actions: vec!["compact".into(), "reboot".into()],
        status_coalesced: 2,
        incoming_dropped: 5,
        commands: "on".into(),
        interval_s: 60,
        broker: "mqtts://broker:8883".into(),
        ..DaemonFacts::default()
    }
}

#[test]
fn the_daemon_facts_land_in_their_fields() {
    let base = report(json!([{"id": "cma.free", "status": "warn", "summary": "low"}]));
    let r = daemon_status(&base, &facts());
    assert_eq!(r.board_id, "rock-7");
    assert_eq!(r.session, 3);
    assert_eq!(r.actions, ["compact", "reboot"]);
    assert_eq!(r.metrics["mqtt_status_coalesced"], 2);
    assert_eq!(r.metrics["mqtt_incoming_dropped"], 5);
    assert_eq!(r.metrics["cma_free_bytes"], 1);
    assert_eq!(r.commands.as_deref(), Some("on"));
    assert_eq!(r.interval_s, Some(60));
    assert_eq!(r.broker.as_deref(), Some("mqtts://broker:8883"));
    assert_eq!(r.last_action.as_ref().unwrap()["action"], "compact");
    assert!(!r.reboot_required);
    assert!(r.notices.is_empty(), "{:?}", r.notices);
    // The input report is left as it was.
    assert_eq!(base.board_id, "");
}

#[test]
fn provisioning_goes_first_and_counts_in_health() {
    let base = report(json!([{"id": "cma.free", "status": "pass", "summary": "fine"}]));
    let mut f = facts();
    f.provisioning = Some(Finding::new(
        "agent.provisioning",
        Status::Fail,
        "npu-agent.toml is invalid",
    ));
    let r = daemon_status(&base, &f);
    assert_eq!(r.findings[0].id, "agent.provisioning");
    assert_eq!(r.findings.len(), 2);
    assert_eq!(r.health, Health::Fail);
    // Assembled again from its own output: still one provisioning finding.
    assert_eq!(daemon_status(&r, &f).findings.len(), 2);
}

#[test]
fn notices_follow_the_clock_the_takeover_and_the_subscription_in_that_order() {
    let base = report(json!([{"id": "clock.sync", "status": "warn", "summary": "unsynced"}]));
    let mut f = facts();
    f.takeover_notice = Some("session taken over".into());
    f.subscription_notices = vec!["commands refused by the broker".into()];
    f.boot_edit_pending_reboot = true;
    f.broker = String::new();
    let r = daemon_status(&base, &f);
    assert_eq!(
        r.notices,
        [
            CLOCK_NOTICE,
            "session taken over",
            "commands refused by the broker"
        ]
    );
    assert!(r.reboot_required);
    assert_eq!(r.broker, None);
}

#[test]
fn the_summary_line_names_failing_checks_and_the_link() {
    let r = report(json!([
        {"id": "cma.free", "status": "fail", "summary": "x"},
        {"id": "limits.nofile", "status": "warn", "summary": "y"},
        {"id": "npu.device", "status": "fail", "summary": "z"}
    ]));
    assert_eq!(
        summary_line(&r, true),
        "health Warn; fail: cma.free, npu.device; 1 warn; mqtt connected"
    );
    let ok = report(json!([]));
    assert_eq!(
        summary_line(&ok, false),
        "health Warn; 0 warn; mqtt offline"
    );
}
