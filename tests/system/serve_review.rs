//! `fleet serve` after the new-user review: one service per state directory, nothing written
//! when the port is taken, and the service's own broker outage in the log, the page and
//! `/metrics` but not in the boards' history.

use crate::serve::{all_signed, http_get, Serve, CASE};
use crate::support::mqtt::*;
use serde_json::Value;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const T: Duration = Duration::from_secs(90);

/// `npu-agent fleet serve` with `args`, run to its end (it must exit by itself).
fn serve_once(args: &[&str], state: &Path, known: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_npu-agent"))
        .args(["fleet", "serve"])
        .args(args)
        .arg("--state-dir")
        .arg(state)
        .env("NPU_AGENT_KNOWN_BOARDS", known)
        .stdin(Stdio::null())
        .output()
        .expect("run npu-agent fleet serve")
}

#[test]
fn a_second_serve_on_one_state_dir_exits_2_while_the_first_runs() {
    if !require_tool("mosquitto") {
        return;
    }
    let broker = Broker::start();
    let dir = tempfile::tempdir().unwrap();
    let (state, known) = (dir.path().join("state"), dir.path().join("known_boards"));
    let first = Serve::start(&broker.url(), &state, &known, &[]);
    let url = broker.url();
    let out = serve_once(
        &["--broker", &url, "--listen", "127.0.0.1:0"],
        &state,
        &known,
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    let want = format!("another fleet serve uses {} (pid ", state.display());
    assert!(err.contains(&want), "{err}");
    // The first goes on serving.
    assert_eq!(first.get("/api/boards").0, 200);
}

#[test]
fn a_serve_whose_port_is_taken_exits_2_and_creates_nothing() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    let (state, known) = (dir.path().join("fresh"), dir.path().join("known_boards"));
    let out = serve_once(
        &["--broker", "mqtt://127.0.0.1:1", "--listen", &addr],
        &state,
        &known,
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains(&format!("cannot listen on {addr}")), "{err}");
    assert!(!state.exists(), "{} made", state.display());
}

/// Waits until `/metrics` has the line `want`.
fn wait_metric(s: &Serve, want: &str) -> String {
    let t0 = Instant::now();
    loop {
        let (code, m) = s.get("/metrics");
        if code == 200 && m.lines().any(|l| l == want) {
            return m;
        }
        assert!(t0.elapsed() < T, "no {want} in {m}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn link_rows(s: &Serve, board: &str) -> Vec<Value> {
    let h = s.json(&format!("/api/boards/{board}/history"));
    let rows = h.as_array().unwrap().iter();
    rows.filter(|r| r["kind"] == "link").cloned().collect()
}

/// The broker stops for longer than --stale-after and comes back: the gauge and the banner
/// say so meanwhile, the log names the broker, and the board's history has no link rows.
#[test]
fn a_broker_outage_shows_in_the_gauge_and_banner_and_not_in_the_history() {
    if !require_tool("mosquitto") {
        return;
    }
    let mut broker = Broker::start();
    let dir = tempfile::tempdir().unwrap();
    let (state, known) = (dir.path().join("state"), dir.path().join("known_boards"));
    let board = Board::from_fixture(CASE, "o1", &agent_config(&broker.url(), "o1", ""));
    let mut agent = Agent::start(&board);
    let s = Serve::start(&broker.url(), &state, &known, &["--stale-after", "3"]);
    s.wait_json("/api/boards", "o1 signed", |v| all_signed(v, &["o1"]));
    s.wait_json("/api/boards/o1", "o1 online", |b| b["link"] == "online");
    wait_metric(&s, "npu_fleet_broker_connected 1");
    assert!(!http_get(&s.addr, "/")
        .1
        .contains("not connected to the broker"));
    let before = link_rows(&s, "o1");
    assert_eq!(before.len(), 1, "its first link state: {before:?}");
    broker.stop();
    wait_metric(&s, "npu_fleet_broker_connected 0");
    let page = http_get(&s.addr, "/").1;
    let url = broker.url();
    assert!(
        page.contains(&format!("not connected to the broker {url}")),
        "{page}"
    );
    // Long enough that the board looks stale from here.
    s.wait_json("/api/boards/o1", "o1 stale", |b| b["link"] == "stale");
    broker.restart();
    wait_metric(&s, "npu_fleet_broker_connected 1");
    s.wait_json("/api/boards/o1", "o1 online again", |b| {
        b["link"] == "online"
    });
    s.newer_statuses("o1", 2);
    assert_eq!(link_rows(&s, "o1"), before, "no rows for the outage");
    assert!(!http_get(&s.addr, "/")
        .1
        .contains("not connected to the broker"));
    let log = std::fs::read_to_string(state.with_extension("log")).unwrap();
    assert!(log.contains(&format!("connected to {url}")), "{log}");
    assert!(
        log.contains(&format!("broker {url}")) && log.contains("connection lost"),
        "{log}"
    );
    agent.kill();
}

/// `--listen` on a LAN address warns (no authentication of its own); `--listen localhost:PORT`
/// is taken. The state directory is held (as by another service) so that each run ends after
/// binding.
#[test]
fn listen_warns_off_loopback_and_takes_a_host_name() {
    let dir = tempfile::tempdir().unwrap();
    let (state, known) = (dir.path().join("state"), dir.path().join("known_boards"));
    std::fs::create_dir(&state).unwrap();
    let _held = npu_agent::fleet::serve::setup::lock_state_dir(&state).unwrap();
    let run = |listen: &str| {
        let out = serve_once(
            &["--broker", "mqtt://127.0.0.1:1", "--listen", listen],
            &state,
            &known,
        );
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert!(err.contains("another fleet serve uses"), "{err}");
        err
    };
    let lan = run("0.0.0.0:0");
    assert!(
        lan.contains("not a loopback address") && lan.contains("reverse proxy"),
        "{lan}"
    );
    let local = run("localhost:0");
    assert!(!local.contains("not a loopback address"), "{local}");
}
