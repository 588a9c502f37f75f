//! The new-user review of `fleet serve`: one service per state directory, `--listen` with a
//! host name, no link rows for the service's own broker outage, zero-count series, the
//! banner counting boards.

use super::setup::{lock_state_dir, parse_listen};
use super::tests::{fleet, sealed, NOW};
use crate::fleet::serve::metrics::{broker_gauge, render, Cardinality};
use crate::mqtt::ed25519::SigningKey;

#[test]
fn a_second_lock_on_the_state_dir_is_refused_with_the_holders_pid() {
    let dir = tempfile::tempdir().unwrap();
    let first = lock_state_dir(dir.path()).unwrap();
    let e = lock_state_dir(dir.path()).unwrap_err();
    let want = format!(
        "another fleet serve uses {} (pid {})",
        dir.path().display(),
        std::process::id()
    );
    assert_eq!(e, want);
    drop(first);
    assert!(lock_state_dir(dir.path()).is_ok(), "free once let go");
}

#[test]
fn listen_takes_a_host_name_or_says_what_to_give() {
    let a = parse_listen("localhost:9465").unwrap();
    assert!(a.ip().is_loopback() && a.port() == 9465, "{a}");
    assert_eq!(
        parse_listen("127.0.0.1:0").unwrap(),
        "127.0.0.1:0".parse().unwrap()
    );
    let e = parse_listen("localhost").unwrap_err();
    assert!(e.contains("give IP:PORT, e.g. 127.0.0.1:9465"), "{e}");
}

fn links(f: &super::state::Fleet, board: &str) -> Vec<String> {
    f.history(board, 100)
        .unwrap()
        .iter()
        .filter(|e| e.change.kind == "link")
        .map(|e| e.change.value.clone())
        .collect()
}

/// The service's own broker link drops for longer than --stale-after and comes back (the
/// broker sends the retained availability and status again): no link rows; the banner says
/// so while it is down. A board that really went quiet is recorded once the link is back.
#[test]
fn the_services_own_broker_outage_writes_no_link_rows() {
    let dir = tempfile::tempdir().unwrap();
    let mut f = fleet(dir.path());
    let key = SigningKey::from_bytes(&[9; 32]);
    f.set_broker(false, "mqtt://b:1883", NOW);
    f.set_broker(true, "mqtt://b:1883", NOW);
    f.take("npu-fleet/b1/availability", b"online", NOW);
    f.take(
        "npu-fleet/b1/status",
        &sealed(&key, "b1", NOW, "ok", ""),
        NOW,
    );
    assert!(f.broker_connected() && f.notes().is_empty());
    assert_eq!(links(&f, "b1"), ["online"], "its first link state");
    f.set_broker(false, "mqtt://b:1883", NOW + 10);
    assert!(!f.broker_connected());
    assert!(
        f.notes()[0].contains("not connected to the broker mqtt://b:1883"),
        "{:?}",
        f.notes()
    );
    // Silent for 5 minutes (past --stale-after 60): the service cannot tell.
    f.tick(NOW + 300, None);
    f.set_broker(true, "mqtt://b:1883", NOW + 301);
    f.take("npu-fleet/b1/availability", b"online", NOW + 301);
    f.take(
        "npu-fleet/b1/status",
        &sealed(&key, "b1", NOW + 300, "ok", ""),
        NOW + 302,
    );
    f.tick(NOW + 304, None);
    f.tick(NOW + 340, None);
    assert_eq!(links(&f, "b1"), ["online"], "no rows for the outage");
    assert!(f.notes().is_empty());
    // Really silent afterwards: recorded (newest first).
    f.tick(NOW + 500, None);
    assert_eq!(links(&f, "b1"), ["stale", "online"]);
}

#[test]
fn metrics_write_every_fixed_label_and_the_broker_gauge() {
    let text = render(&[], Cardinality::All);
    for l in [
        "npu_fleet_boards{health=\"warn\"} 0",
        "npu_fleet_boards{health=\"fail\"} 0",
        "npu_fleet_boards_by_link{link=\"stale\"} 0",
        "npu_fleet_boards_by_link{link=\"offline\"} 0",
    ] {
        assert!(text.lines().any(|x| x == l), "{l} in {text}");
    }
    assert!(broker_gauge(false).ends_with("\nnpu_fleet_broker_connected 0\n"));
    assert!(broker_gauge(true).ends_with("\nnpu_fleet_broker_connected 1\n"));
}

/// An unknown board's history is 404 as the board is; a query string that does not parse is a
/// JSON 400; `/metrics` carries the broker gauge.
#[test]
fn api_answers_unknown_boards_404_and_bad_queries_as_json_400() {
    use super::tests_bounds::{get, served_fleet};
    let dir = tempfile::tempdir().unwrap();
    let (_shared, addr) = served_fleet(dir.path(), 2);
    let (head, _) = get(addr, "/api/boards/nope/history");
    assert!(head.starts_with("http/1.1 404"), "{head}");
    let (head, _) = get(addr, "/api/boards/b00000/history");
    assert!(head.starts_with("http/1.1 200"), "{head}");
    for path in [
        "/api/boards?limit=x",
        "/api/boards/b00000/history?before=zz",
    ] {
        let (head, body) = get(addr, path);
        assert!(head.starts_with("http/1.1 400"), "{path}: {head}");
        assert!(head.contains("content-type: application/json"), "{head}");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert!(
            v["error"].as_str().is_some_and(|e| !e.is_empty()),
            "{path}: {body}"
        );
    }
    let (_, m) = get(addr, "/metrics");
    assert!(m.contains("\nnpu_fleet_broker_connected 1\n"), "{m}");
}
