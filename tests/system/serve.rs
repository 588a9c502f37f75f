//! `fleet serve` with real parts: a real mosquitto, real agents on board trees, the service
//! process itself (its HTTP server on a free loopback port, its SQLite history in a temp dir),
//! and promtool on its `/metrics`. The page in a real browser and a real Prometheus scraping it
//! are in serve_tools.rs.

use crate::support::mqtt::*;
use serde_json::Value;
use std::io::{Read, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub(crate) const CASE: &str = "own-rk3588-opi5plus-rknpu-0.9.8-healthy";
const T: Duration = Duration::from_secs(60);

/// A running `npu-agent fleet serve`, killed on drop.
pub(crate) struct Serve {
    child: Option<Child>,
    /// `127.0.0.1:<port>` it listens on.
    pub addr: String,
    log: std::path::PathBuf,
}

impl Serve {
    /// Starts the service on `broker_url` with its history in `state` and known_boards at
    /// `known`, listening on a free loopback port; `extra`: more options.
    pub fn start(broker_url: &str, state: &Path, known: &Path, extra: &[&str]) -> Serve {
        let program = Command::new(env!("CARGO_BIN_EXE_npu-agent"));
        Serve::start_program(program, broker_url, state, known, extra)
    }

    /// As [`Serve::start`], with `program` in place of this build's binary (e.g. a packaged
    /// aarch64 binary under qemu-user: package_operator.rs); `fleet serve ...` is appended.
    pub fn start_program(
        mut program: Command,
        broker_url: &str,
        state: &Path,
        known: &Path,
        extra: &[&str],
    ) -> Serve {
        let log = state.with_extension("log");
        let f = std::fs::File::create(&log).unwrap();
        let child = program
            .args(["fleet", "serve", "--broker", broker_url, "--listen"])
            .args(["127.0.0.1:0", "--state-dir"])
            .arg(state)
            .args(extra)
            .env("NPU_AGENT_KNOWN_BOARDS", known)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(f)
            .spawn()
            .expect("start npu-agent fleet serve");
        let mut s = Serve {
            child: Some(child),
            addr: String::new(),
            log,
        };
        let t0 = Instant::now();
        while s.addr.is_empty() {
            let text = std::fs::read_to_string(&s.log).unwrap_or_default();
            if let Some(rest) = text.split("fleet serve on http://").nth(1) {
                s.addr = rest.split('/').next().unwrap_or("").to_string();
            }
            assert!(t0.elapsed() < T, "fleet serve did not start: {text}");
            std::thread::sleep(Duration::from_millis(20));
        }
        s
    }

    /// GET `path`: the status code and body.
    pub fn get(&self, path: &str) -> (u16, String) {
        http_get(&self.addr, path)
    }

    /// GET `path` as JSON (status 200 asserted).
    pub fn json(&self, path: &str) -> Value {
        let (code, body) = self.get(path);
        assert_eq!(code, 200, "{path}: {body}");
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("{path}: {e}: {body}"))
    }

    /// Waits until `pred` holds for the JSON at `path`; returns it.
    pub fn wait_json(&self, path: &str, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        let t0 = Instant::now();
        loop {
            let v = self.json(path);
            if pred(&v) {
                return v;
            }
            assert!(t0.elapsed() < T, "timed out waiting for {what}: {v:#}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// SIGTERM, and the exit code.
    pub fn stop(&mut self) -> Option<i32> {
        let mut c = self.child.take()?;
        let _ = Command::new("kill").arg(c.id().to_string()).status();
        let t0 = Instant::now();
        loop {
            if let Ok(Some(st)) = c.try_wait() {
                return st.code();
            }
            if t0.elapsed() > T {
                let _ = c.kill();
                let _ = c.wait();
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A plain HTTP/1.1 GET over a fresh connection: the status code and body.
pub(crate) fn http_get(addr: &str, path: &str) -> (u16, String) {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(T)).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let code = head
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (code, body.to_string())
}

/// The boards of `/api/boards` by id.
pub(crate) fn ids(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|b| b["board"].as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

/// Every board listed and its status sealed by its key (detail present).
pub(crate) fn all_signed(v: &Value, want: &[&str]) -> bool {
    want.iter().all(|id| {
        v.as_array().is_some_and(|a| {
            a.iter()
                .any(|b| b["board"] == *id && b["identity"] == "signed" && b["detail"].is_object())
        })
    })
}

/// Boards `b1` and `b2` on `broker`, agents running.
pub(crate) fn two_boards(broker: &Broker) -> (Vec<Board>, Vec<Agent>) {
    let boards: Vec<Board> = ["b1", "b2"]
        .iter()
        .map(|id| Board::from_fixture(CASE, id, &agent_config(&broker.url(), id, "")))
        .collect();
    let agents = boards.iter().map(Agent::start).collect();
    (boards, agents)
}

/// The history rows of `board` of `kind`.
fn rows_of(s: &Serve, board: &str, kind: &str) -> Vec<Value> {
    s.json(&format!("/api/boards/{board}/history"))
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["kind"] == kind)
        .cloned()
        .collect()
}

#[test]
fn serve_shows_every_board_records_a_finding_that_starts_and_keeps_history_over_a_restart() {
    if !require_tool("mosquitto") {
        return;
    }
    let broker = Broker::start();
    let dir = tempfile::tempdir().unwrap();
    let (state, known) = (dir.path().join("state"), dir.path().join("known_boards"));
    let (boards, _agents) = two_boards(&broker);
    let mut s = Serve::start(&broker.url(), &state, &known, &[]);
    let v = s.wait_json("/api/boards", "both boards signed", |v| {
        all_signed(v, &["b1", "b2"])
    });
    assert_eq!(ids(&v), ["b1", "b2"]);
    assert_eq!(
        v[0]["detail"]["versions"]["agent"],
        env!("CARGO_PKG_VERSION")
    );
    assert_eq!(v[0]["detail"]["versions"]["driver"], "0.9.8");
    assert_eq!(s.json("/api/boards/b2")["health"], "ok");
    assert_eq!(s.get("/api/boards/nope").0, 404);
    let (_, metrics) = s.get("/metrics");
    assert!(
        metrics.contains("npu_fleet_boards{health=\"ok\"} 2"),
        "{metrics}"
    );
    assert!(
        metrics.contains("npu_fleet_board_health{board=\"b1\"} 0"),
        "{metrics}"
    );
    assert!(metrics.contains("npu_fleet_board_info{board=\"b2\",profile=\"rk3588-rknpu\""));
    let (_, page) = s.get("/");
    assert!(page.contains("<span id=\"count-all\">2</span>"), "{page}");
    assert!(page.contains("href=\"/boards/b1\"") && page.contains("href=\"/boards/b2\""));
    let (_, csv) = s.get("/inventory.csv");
    assert!(
        csv.lines()
            .any(|l| l.starts_with("b2,ok,online,") && l.contains(",0.9.8,")),
        "{csv}"
    );

    // A finding starts firing on b1: the CMA pool runs dry.
    let meminfo = boards[0].read("/proc/meminfo").unwrap();
    boards[0].write(
        "/proc/meminfo",
        &meminfo.replace(
            "CmaFree:            240128 kB",
            "CmaFree:               512 kB",
        ),
    );
    s.wait_json("/api/boards/b1/history", "cma.free starting", |h| {
        h.as_array()
            .unwrap()
            .iter()
            .any(|r| r["kind"] == "finding_start" && r["subject"] == "cma.free")
    });
    let start = &rows_of(&s, "b1", "finding_start")[0];
    assert!(!start["summary"].as_str().unwrap().is_empty(), "{start}");
    let (_, metrics) = s.get("/metrics");
    assert!(
        metrics.contains("npu_fleet_check_firing_boards{check=\"cma.free\""),
        "{metrics}"
    );
    assert!(metrics.contains("npu_fleet_board_check_status{board=\"b1\",check=\"cma.free\"}"));
    let (_, page) = s.get("/boards/b1");
    assert!(page.contains("id=\"finding-cma.free\""), "{page}");
    assert!(
        rows_of(&s, "b2", "finding_start").is_empty(),
        "b2 is unchanged"
    );

    // An unchanged status is not a row: the history holds still over two more statuses.
    let before = s.json("/api/boards/b2/history").as_array().unwrap().len();
    s.newer_statuses("b2", 2);
    assert_eq!(
        s.json("/api/boards/b2/history").as_array().unwrap().len(),
        before
    );

    // Restart: the history is still there, and the boards' next statuses add no rows.
    assert_eq!(s.stop(), Some(0));
    let s = Serve::start(&broker.url(), &state, &known, &[]);
    let kept = s.json("/api/boards/b1/history").as_array().unwrap().len();
    assert!(kept >= 5, "{kept}");
    s.wait_json("/api/boards", "both signed again", |v| {
        all_signed(v, &["b1", "b2"])
    });
    s.newer_statuses("b1", 2);
    let after = s.json("/api/boards/b1/history");
    assert_eq!(after.as_array().unwrap().len(), kept, "{after:#}");
}

impl Serve {
    /// Waits until `board` has shown `n` statuses newer than the one it shows now.
    pub fn newer_statuses(&self, board: &str, n: usize) {
        let path = format!("/api/boards/{board}");
        for _ in 0..n {
            let seen = self.json(&path)["last_seen"].clone();
            self.wait_json(&path, "a newer status", |b| b["last_seen"] != seen);
        }
    }
}

#[test]
fn a_hung_agent_turns_stale_then_offline_in_history_and_metrics() {
    if !require_tool("mosquitto") {
        return;
    }
    let broker = Broker::start();
    let dir = tempfile::tempdir().unwrap();
    let (state, known) = (dir.path().join("state"), dir.path().join("known_boards"));
    let board = Board::from_fixture(CASE, "k1", &agent_config(&broker.url(), "k1", ""));
    let mut agent = Agent::start(&board);
    let s = Serve::start(&broker.url(), &state, &known, &["--stale-after", "3"]);
    s.wait_json("/api/boards", "k1 signed", |v| all_signed(v, &["k1"]));
    assert_eq!(s.json("/api/boards/k1")["link"], "online");
    // Stopped, not killed: its connection stays open (a killed agent's socket closes and the
    // broker sends its last will at once), so it turns stale first, and offline when the
    // broker's keep-alive (7.5 s) ends its session.
    let stop = Command::new("kill")
        .args(["-STOP", &agent.pid().to_string()])
        .status();
    assert!(stop.unwrap().success());
    s.wait_json("/api/boards/k1/history", "stale, then offline", |h| {
        let links: Vec<&str> = h
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["kind"] == "link")
            .filter_map(|r| r["value"].as_str())
            .collect();
        links.first() == Some(&"offline") && links.get(1) == Some(&"stale")
    });
    let (_, m) = s.get("/metrics");
    assert!(m.contains("npu_fleet_board_online{board=\"k1\"} 0"), "{m}");
    assert!(
        m.contains("npu_fleet_boards_by_link{link=\"offline\"} 1"),
        "{m}"
    );
    let age: f64 = m
        .lines()
        .find_map(|l| l.strip_prefix("npu_fleet_board_status_age_seconds{board=\"k1\"} "))
        .and_then(|v| v.parse().ok())
        .unwrap();
    assert!(age >= 3.0, "{age}");
    agent.kill();
}

#[test]
fn serve_on_one_nats_node_lists_boards_on_the_others() {
    if !crate::support::brokers::have_nats() {
        return;
    }
    let cluster = crate::support::brokers::NatsCluster::start();
    let dir = tempfile::tempdir().unwrap();
    let (state, known) = (dir.path().join("state"), dir.path().join("known_boards"));
    // NATS speaks MQTT 3.1.1 only: the boards say so, the service falls back by itself.
    let boards: Vec<Board> = ["n0", "n1"]
        .iter()
        .enumerate()
        .map(|(i, id)| {
            let config = agent_config(&cluster.url(i), id, "").replace(
                "keep_alive_s = 5\n",
                "keep_alive_s = 5\nprotocol = \"3.1.1\"\n",
            );
            Board::from_fixture(CASE, id, &config)
        })
        .collect();
    let _agents: Vec<Agent> = boards.iter().map(Agent::start).collect();
    let s = Serve::start(&cluster.url(2), &state, &known, &[]);
    let v = s.wait_json("/api/boards", "both boards through node 2", |v| {
        all_signed(v, &["n0", "n1"])
    });
    assert_eq!(ids(&v), ["n0", "n1"]);
    let (_, m) = s.get("/metrics");
    assert!(
        m.contains("npu_fleet_boards_by_link{link=\"online\"} 2"),
        "{m}"
    );
}
