//! `fleet serve` at fleet scale on real brokers (printed, not asserted; issue 38):
//! NPU_BENCH_BOARDS simulated boards (default 100,000; `fleet_cluster`'s simulator, in worker
//! processes: the first NPU_BENCH_LIVE (10,000) each a connection of its own with a last will,
//! a retained `online` and a retained status; the rest published retained, `offline` with a
//! status, through a few connections; every status sealed by the board's own key) into the real
//! `npu-agent fleet serve` (the binary of the profile this bench is built with: `--profile
//! operator` is the operator's package), on one mosquitto and on the three-node NATS cluster
//! of the tests. The boards' keys are pinned in a known_boards file, as an operator's fleet
//! is. For each broker:
//!
//! 1. serve runs first (`--metrics-boards failing`), then the boards connect and publish:
//!    seconds until serve has taken a sealed status of every board (the history's `boards`
//!    table, read through a connection of this bench's, so the polling takes no lock of
//!    serve's), then the page's counts; serve's VmRSS and VmHWM (bytes per board over its
//!    idle start) and database bytes; `/`, `/metrics` and `/api/boards` (time, bytes).
//! 2. serve restarts (`--metrics-boards all`) into the same state directory: seconds until the
//!    page counts every board again (the retained burst; the page is polled with a filter
//!    that lists no row), history rows the restart wrote, the same figures.
//! 3. 1 board in 100 publishes a changed status (health `fail`, `cma.free` failing): seconds
//!    until the page counts them; history rows and database bytes per changed status (the
//!    file after a checkpoint, serve stopped, before and after); from those, database bytes
//!    per board per day at the default 60 s interval when 1 status in 100 changes something
//!    (an unchanged status writes nothing).
//!
//! Run: `cargo bench --profile operator --bench fleet_serve_brokers` (needs mosquitto and
//! nats-server; root for `fleet_cluster`'s private network namespace). Env: NPU_BENCH_BOARDS
//! (100000), NPU_BENCH_LIVE (10000), NPU_BENCH_INFLIGHT (256), NPU_BENCH_BROKERS
//! (`mosquitto,nats`), NPU_BENCH_MOSQUITTO (mosquitto.conf lines; `max_queued_messages 0`),
//! NPU_BENCH_NATS (every node's config lines; `max_pending: 536870912`), NPU_BENCH_LIST_S (600:
//! each wait for every board).

// Tests build board trees and fixtures with plain writes (clippy.toml: disallowed_methods).
#![allow(clippy::disallowed_methods)]

#[path = "../tests/support/mod.rs"]
mod support;

#[path = "fleet_cluster/sim.rs"]
mod sim;

#[allow(dead_code)]
#[path = "fleet_cluster/workers.rs"]
mod workers;

use sim::{READY, RETAINED};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use support::brokers::{have_nats, NatsCluster};
use support::mqtt::{free_port, require_tool, Broker, Client};
use workers::{enter_netns, nats_log, sh, write_template, Plan, Workers};

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn env_text(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_string())
}

/// What every broker's run shares.
struct Setup {
    plan: Plan,
    live: usize,
    dir: tempfile::TempDir,
    known: PathBuf,
    /// The status template with health `fail` and `cma.free` failing.
    fail_template: String,
    list: Duration,
}

/// mosquitto's setting for serve: no bound on the messages queued for one client (the default,
/// 1000, drops most of a restarted serve's retained burst: the operator guide).
const MOSQUITTO: &str = "max_queued_messages 0";
/// Every NATS node's setting for serve: a client's pending bytes above the fleet's retained
/// statuses (100,000 are about 200 MB; the default, 64 MB, drops a restarted serve as a slow
/// consumer).
const NATS: &str = "max_pending: 536870912";
/// The default interval of an agent's status, seconds (`[report] interval_s`).
const INTERVAL_S: f64 = 60.0;
/// One board in this many publishes a changed status in phase 3.
const CHANGE_EVERY: usize = 100;

fn main() {
    if std::env::var_os("NPU_BENCH_WORKER").is_some() {
        return sim::worker_main();
    }
    let brokers = env_text("NPU_BENCH_BROKERS", "mosquitto,nats");
    if brokers.contains("mosquitto") && !require_tool("mosquitto") {
        return;
    }
    if brokers.contains("nats") && !have_nats() {
        return;
    }
    if let Some(code) = enter_netns() {
        std::process::exit(code);
    }
    let netns = std::env::var_os("NPU_BENCH_NETNS").is_some();
    use rustix::process::{getrlimit, setrlimit, Resource};
    let mut lim = getrlimit(Resource::Nofile);
    lim.current = lim.maximum;
    let _ = setrlimit(Resource::Nofile, lim);
    let n = env_u64("NPU_BENCH_BOARDS", 100_000) as usize;
    let dir = tempfile::tempdir().unwrap();
    let template = write_template(dir.path());
    let s = Setup {
        plan: Plan {
            n,
            hosts: if netns { 4 } else { 1 },
            inflight: env_u64("NPU_BENCH_INFLIGHT", 256) as usize,
            template: template.clone(),
        },
        live: (env_u64("NPU_BENCH_LIVE", 10_000) as usize).min(n),
        known: dir.path().join("known_boards"),
        fail_template: fail_template(&std::fs::read_to_string(&template).unwrap()),
        list: Duration::from_secs(env_u64("NPU_BENCH_LIST_S", 600)),
        dir,
    };
    header(&s, netns);
    write_known(&s);
    let mut table: Vec<(String, Vec<(String, String)>)> = Vec::new();
    if brokers.contains("mosquitto") {
        let extra = env_text("NPU_BENCH_MOSQUITTO", MOSQUITTO);
        println!("\n== one mosquitto (extra config: {extra:?})");
        let port = free_port();
        let more: String = (2..=s.plan.hosts)
            .map(|h| format!("listener {port} 127.0.0.{h}\n"))
            .collect();
        let broker = Broker::start_with(port, &format!("{extra}\n{more}"));
        let rows = run(&s, "mosquitto", &[broker.url()], &[port], &mut |_| {});
        table.push(("one mosquitto".into(), rows));
    }
    if brokers.contains("nats") {
        let extra = format!(
            "{}\n",
            env_text("NPU_BENCH_NATS", NATS).replace("\\n", "\n")
        );
        println!("\n== NATS cluster, 3 nodes (extra config: {extra:?})");
        let cluster = NatsCluster::start_with(if netns { "0.0.0.0" } else { "127.0.0.1" }, &extra);
        // JetStream elects its leaders after the ports listen: let the cluster settle.
        std::thread::sleep(Duration::from_secs(5));
        let urls: Vec<String> = (0..3).map(|i| cluster.url(i)).collect();
        let mut seen = vec![0; 3];
        let rows = run(&s, "nats", &urls, &cluster.mqtt_ports, &mut |when| {
            nats_log(&cluster, &mut seen, when)
        });
        table.push(("NATS cluster (3 nodes)".into(), rows));
    }
    summary(&s, &table);
}

fn header(s: &Setup, netns: bool) {
    println!(
        "== fleet_serve_brokers: {}",
        sh("date -u '+%Y-%m-%d %H:%M:%S UTC'")
    );
    println!(
        "machine: {} {}, {} cores (load average {}), {}; nats-server {}, {}",
        sh("uname -m"),
        sh("uname -r"),
        sh("nproc"),
        sh("cut -d' ' -f1-3 /proc/loadavg"),
        sh("grep MemTotal /proc/meminfo | tr -s ' '"),
        sh("nats-server --version | sed 's/nats-server: //'"),
        sh("mosquitto -h | head -1")
    );
    println!(
        "boards: {} ({} connected, the rest retained offline); serve: {}; network: {}",
        s.plan.n,
        s.live,
        env!("CARGO_BIN_EXE_npu-agent"),
        if netns {
            "private namespace"
        } else {
            "host loopback"
        }
    );
}

/// Pins every simulated board's key in the known_boards file.
fn write_known(s: &Setup) {
    let t0 = Instant::now();
    let mut text = String::with_capacity(s.plan.n * 60);
    for i in 0..s.plan.n {
        let key = npu_agent::mqtt::board_sig::key_text(&sim::key_for(i).verifying_key());
        text.push_str(&format!("{} {key}\n", sim::board_id(i)));
    }
    std::fs::write(&s.known, text).unwrap();
    println!(
        "known_boards: {} keys pinned ({:.1} s)",
        s.plan.n,
        t0.elapsed().as_secs_f64()
    );
}

/// `template` with health `fail` and a failing `cma.free` finding.
fn fail_template(template: &str) -> String {
    let mut v: serde_json::Value = serde_json::from_str(template).unwrap();
    v["health"] = "fail".into();
    v["findings"] = serde_json::json!([{"id": "cma.free", "status": "fail",
        "summary": "CmaFree is 512 KiB of 256 MiB", "remedy": "npu-agent cma set 256M"}]);
    serde_json::to_string(&v).unwrap()
}

/// A running `npu-agent fleet serve`.
struct Serve {
    child: Option<Child>,
    port: u16,
    log: PathBuf,
}

impl Serve {
    /// Starts serve on `urls` with its history in `state`, and waits until it answers.
    fn start(s: &Setup, state: &Path, urls: &[String], metrics: &str, tag: &str) -> Serve {
        let port = free_port();
        let log = s.dir.path().join(format!("serve-{tag}.log"));
        let child = Command::new(env!("CARGO_BIN_EXE_npu-agent"))
            .args(["fleet", "serve", "--broker", &urls.join(",")])
            .args(["--listen", &format!("127.0.0.1:{port}"), "--state-dir"])
            .arg(state)
            .args(["--metrics-boards", metrics])
            .env("NPU_AGENT_FLEET_CONFIG", s.dir.path().join("none.toml"))
            .env("NPU_AGENT_KNOWN_BOARDS", &s.known)
            // NATS speaks MQTT 3.1.1 only (the operator guide): no first attempt refused.
            .env(
                "NPU_AGENT_MQTT_PROTOCOL",
                if tag.starts_with("nats") { "3.1.1" } else { "" },
            )
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let serve = Serve {
            child: Some(child),
            port,
            log,
        };
        let t0 = Instant::now();
        while serve.counts().is_none() {
            assert!(
                t0.elapsed() < Duration::from_secs(30),
                "serve did not answer"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        serve
    }

    fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// GET `path`: seconds, status code, body.
    fn get(&self, path: &str) -> Option<(f64, u16, Vec<u8>)> {
        let t0 = Instant::now();
        let mut c = std::net::TcpStream::connect(("127.0.0.1", self.port)).ok()?;
        c.set_read_timeout(Some(Duration::from_secs(600))).ok()?;
        let req = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
        c.write_all(req.as_bytes()).ok()?;
        let mut buf = Vec::new();
        c.read_to_end(&mut buf).ok()?;
        let took = t0.elapsed().as_secs_f64();
        let end = buf.windows(4).position(|w| w == b"\r\n\r\n")?;
        let head = String::from_utf8_lossy(&buf[..end]);
        let code = head.split(' ').nth(1)?.parse().ok()?;
        Some((took, code, buf[end + 4..].to_vec()))
    }

    /// The page's counts (every board, ok, fail), through a filter that lists no row, and the
    /// seconds the request took.
    fn counts(&self) -> Option<([u64; 3], f64)> {
        let (took, code, body) = self.get("/?q=no-such-board-here")?;
        let html = String::from_utf8_lossy(&body);
        let count = |id: &str| {
            let at = html.find(&format!("id=\"count-{id}\">"))? + id.len() + 12;
            let digits: String = html[at..]
                .chars()
                .take_while(char::is_ascii_digit)
                .collect();
            digits.parse().ok()
        };
        (code == 200).then_some(())?;
        Some(([count("all")?, count("ok")?, count("fail")?], took))
    }

    /// `path`'s request time and size, as a line.
    fn timed(&self, path: &str) -> String {
        match self.get(path) {
            Some((t, code, body)) => {
                format!("{t:.2} s, {:.1} MB (HTTP {code})", body.len() as f64 / 1e6)
            }
            None => "no answer".into(),
        }
    }

    /// VmRSS and VmHWM, bytes.
    fn mem(&self) -> (u64, u64) {
        let st =
            std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap_or_default();
        let kb = |k: &str| {
            st.lines()
                .find_map(|l| l.strip_prefix(k))
                .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse::<u64>().ok())
                .unwrap_or(0)
                * 1024
        };
        (kb("VmRSS:"), kb("VmHWM:"))
    }

    /// Lines of its log containing `word`.
    fn log_count(&self, word: &str) -> usize {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        text.lines().filter(|l| l.contains(word)).count()
    }

    /// SIGTERM, then waits (at most 60 s): its exit code.
    fn stop(&mut self) -> Option<i32> {
        let mut c = self.child.take()?;
        let _ = Command::new("kill")
            .args(["-TERM", &c.id().to_string()])
            .status();
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(60) {
            if let Ok(Some(st)) = c.try_wait() {
                return st.code();
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = c.kill();
        let _ = c.wait();
        None
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The history database of `state`: its file's bytes after a checkpoint (serve stopped), its
/// `events` and `boards` rows.
fn db_at_rest(state: &Path) -> (u64, u64, u64) {
    let path = state.join(npu_agent::fleet::serve::store::FILE_NAME);
    let db = rusqlite::Connection::open(&path).unwrap();
    let _ = db.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()));
    let rows = |t: &str| rows(&db, t);
    let (e, b) = (rows("events"), rows("boards"));
    drop(db);
    (std::fs::metadata(&path).map_or(0, |m| m.len()), e, b)
}

fn rows(db: &rusqlite::Connection, table: &str) -> u64 {
    db.query_row(&format!("SELECT count(*) FROM {table}"), [], |r| {
        r.get::<_, i64>(0)
    })
    .map_or(0, |n| n.max(0) as u64)
}

fn mib(b: u64) -> f64 {
    b as f64 / (1024.0 * 1024.0)
}

/// Summary rows of one broker's run (row name, short figure), printed as they come.
#[derive(Default)]
struct Rows(Vec<(String, String)>);

impl Rows {
    fn say(&mut self, row: &str, long: &str, short: &str) {
        println!("{row}: {long}");
        self.0.push((row.to_string(), short.to_string()));
    }
}

/// One broker's three phases; `after` is called after each (the NATS nodes' log lines).
fn run(
    s: &Setup,
    name: &str,
    urls: &[String],
    ports: &[u16],
    after: &mut dyn FnMut(&str),
) -> Vec<(String, String)> {
    let mut r = Rows::default();
    let n = s.plan.n as u64;
    let state = s.dir.path().join(format!("state-{name}"));
    let mut serve = Serve::start(s, &state, urls, "failing", &format!("{name}-first"));
    let (rss0, _) = serve.mem();
    let sub = wait_subscribed(s, &serve, ports[0]);
    println!("serve subscribed: board 0's status taken after {sub:.1} s");
    let w = Workers::spawn(&s.plan, s.live, ports);
    let (long, short) = phase_fill(s, &w, &serve);
    r.say("first run: every board taken", &long, &short);
    let (long, short) = page_counts(&serve, n);
    r.say("first run: the page counts", &long, &short);
    let (rss, hwm) = serve.mem();
    let per = rss.saturating_sub(rss0) / n.max(1);
    let long = format!(
        "VmRSS {:.0} MiB ({:.0} MiB at start: {per} bytes per board), VmHWM {:.0} MiB",
        mib(rss),
        mib(rss0),
        mib(hwm)
    );
    r.say(
        "first run: serve's memory",
        &long,
        &format!("{per} bytes/board"),
    );
    requests(&mut r, &serve, "first run", "failing");
    let lost = serve.log_count(": connection lost:");
    r.say(
        "first run: serve's broker connection lost",
        &lost.to_string(),
        &lost.to_string(),
    );
    after("the first run");
    let code = serve.stop();
    let (bytes0, events0, boards0) = db_at_rest(&state);
    let long = format!(
        "{bytes0} bytes at rest ({} bytes per board): {boards0} boards, {events0} history rows \
         (serve exit {code:?})",
        bytes0 / n.max(1)
    );
    r.say(
        "first run: database",
        &long,
        &format!("{} bytes/board", bytes0 / n.max(1)),
    );
    let mut serve = Serve::start(s, &state, urls, "all", &format!("{name}-restart"));
    let (long, short) = phase_restart(s, &serve, &state, events0);
    r.say("restart: every board listed again", &long, &short);
    let (rss, hwm) = serve.mem();
    let long = format!("VmRSS {:.0} MiB, VmHWM {:.0} MiB", mib(rss), mib(hwm));
    r.say("restart: serve's memory", &long, &long);
    requests(&mut r, &serve, "restart", "all");
    after("the restart");
    let (long, short) = phase_change(s, &serve, ports[0]);
    r.say("changed statuses shown", &long, &short);
    let lost = serve.log_count(": connection lost:");
    r.say(
        "restart: serve's broker connection lost",
        &lost.to_string(),
        &lost.to_string(),
    );
    let code = serve.stop();
    let (bytes1, events1, _) = db_at_rest(&state);
    let k = changed(s.plan.n).len().max(1) as f64;
    let per_change = bytes1.saturating_sub(bytes0) as f64 / k;
    let day = per_change * 86_400.0 / INTERVAL_S / CHANGE_EVERY as f64;
    let long = format!(
        "{k:.0} changed statuses: +{} history rows ({:.1} per change), +{} bytes at rest \
         ({per_change:.0} bytes per change; serve exit {code:?}); at the default {INTERVAL_S} s \
         interval a board sends {:.0} statuses a day, so 1 in {CHANGE_EVERY} changing is \
         {day:.0} bytes per board per day",
        events1.saturating_sub(events0),
        events1.saturating_sub(events0) as f64 / k,
        bytes1.saturating_sub(bytes0),
        86_400.0 / INTERVAL_S
    );
    r.say(
        "history per change",
        &long,
        &format!("{per_change:.0} bytes/change, {day:.0} bytes/board/day at 1 % changing"),
    );
    after("the changes");
    drop(w);
    r.0
}

/// Publishes board 0's status through `port` and waits until serve counts it: serve has
/// subscribed. On NATS a board that publishes on another node before then can be missed until
/// its next status (a node learns the others' retained messages a moment later: 129 of 100,000
/// boards in a run that did not wait); the simulator publishes once. Seconds.
fn wait_subscribed(s: &Setup, serve: &Serve, port: u16) -> f64 {
    let template = std::fs::read_to_string(&s.plan.template).unwrap();
    let id = sim::board_id(0);
    let c = Client::connect(port, &[]);
    c.publish(
        &format!("npu-fleet/{id}/status"),
        &sim::status(&template, &id, &sim::key_for(0)),
        true,
    );
    let t0 = Instant::now();
    while serve.counts().is_none_or(|(c, _)| c[1] == 0) {
        assert!(
            t0.elapsed() < Duration::from_secs(120),
            "serve took no status"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    t0.elapsed().as_secs_f64()
}

/// Phase 1: the boards publish while serve runs (the connected ones first, then the retained
/// rest); seconds until the page counts a sealed status (`ok`) of every board, polled every
/// second or three times the last request's time (the page is rendered off serve's lock).
fn phase_fill(s: &Setup, w: &Workers, serve: &Serve) -> (String, String) {
    let (n, live) = (s.plan.n as u64, s.live as u64);
    let t0 = Instant::now();
    let (mut told, mut published, mut said, mut last) = (false, None, t0, ([0; 3], 0.0));
    loop {
        if let Some(c) = serve.counts() {
            last = c;
        }
        let (c, t) = (w.total(), t0.elapsed().as_secs_f64());
        if !told && (c[READY] >= live || t0.elapsed() > s.list / 2) {
            println!(
                "  {t:.0} s: {} of {live} boards connected and published; the rest now",
                c[READY]
            );
            w.tell("retained");
            told = true;
        }
        if published.is_none() && told && c[RETAINED] + c[READY] >= n {
            published = Some(t);
        }
        let taken = last.0[1];
        let pubs = published.map_or("not done".into(), |p| format!("{p:.1} s"));
        if taken >= n {
            let long = format!(
                "{t:.1} s ({:.0} boards/s; the simulator's publishing: {pubs}; the last poll {:.2} s)",
                n as f64 / t,
                last.1
            );
            return (long, format!("{t:.1} s"));
        }
        if t0.elapsed() >= s.list {
            let long = format!("NOT within {t:.0} s: {taken} of {n} (publishing: {pubs})");
            return (long.clone(), long);
        }
        if said.elapsed() >= Duration::from_secs(30) {
            said = Instant::now();
            println!(
                "  .. {t:.0} s: {} connected boards ready, {} retained published, serve counts {taken} ok",
                c[READY], c[RETAINED]
            );
        }
        std::thread::sleep(Duration::from_secs_f64((last.1 * 3.0).max(1.0)));
    }
}

/// The page's counts, confirmed against `n`.
fn page_counts(serve: &Serve, n: u64) -> (String, String) {
    match serve.counts() {
        Some(([all, ok, fail], t)) => {
            let long = format!("{all} boards ({ok} ok, {fail} fail) of {n}, in {t:.2} s");
            (long, format!("{all} of {n}"))
        }
        None => ("no answer".into(), "no answer".into()),
    }
}

/// `/`, `/metrics` and `/api/boards`: time and size.
fn requests(r: &mut Rows, serve: &Serve, when: &str, metrics: &str) {
    let page = serve.timed("/");
    r.say(&format!("{when}: page /"), &page, &page);
    let m = serve.timed("/metrics");
    r.say(&format!("{when}: /metrics ({metrics})"), &m, &m);
    let api = api_walk(serve);
    r.say(&format!("{when}: /api/boards, every page"), &api, &api);
}

/// Every page of `/api/boards` (10,000 boards a page, the most it gives): time, bytes, boards.
fn api_walk(serve: &Serve) -> String {
    let t0 = Instant::now();
    let (mut bytes, mut boards, mut pages, mut after) = (0, 0, 0, String::new());
    loop {
        let path = format!("/api/boards?limit=10000&after={after}");
        let Some((_, 200, body)) = serve.get(&path) else {
            return format!("no answer to {path}");
        };
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
        let page = v.as_array().cloned().unwrap_or_default();
        (bytes, boards, pages) = (bytes + body.len(), boards + page.len(), pages + 1);
        match page.last().and_then(|b| b["board"].as_str()) {
            Some(id) if page.len() == 10_000 => after = id.to_string(),
            _ => break,
        }
    }
    format!(
        "{:.2} s, {:.1} MB, {boards} boards in {pages} pages",
        t0.elapsed().as_secs_f64(),
        bytes as f64 / 1e6
    )
}

/// Phase 2: serve started again into the same history: seconds until the page counts every
/// board with a sealed status (`ok`), polled every second or three times the last request's
/// time; the history rows written since.
fn phase_restart(s: &Setup, serve: &Serve, state: &Path, events0: u64) -> (String, String) {
    let n = s.plan.n as u64;
    let t0 = Instant::now();
    let (mut last, mut said, mut polls) = (([0; 3], 0.0), t0, 0);
    let done = loop {
        if let Some(c) = serve.counts() {
            last = c;
            polls += 1;
        }
        let t = t0.elapsed().as_secs_f64();
        if last.0[1] >= n {
            break Some(t);
        }
        if t0.elapsed() >= s.list {
            break None;
        }
        if said.elapsed() >= Duration::from_secs(30) {
            said = Instant::now();
            println!(
                "  .. {t:.0} s: the page counts {} boards, {} ok",
                last.0[0], last.0[1]
            );
        }
        std::thread::sleep(Duration::from_secs_f64((last.1 * 3.0).max(1.0)));
    };
    let db =
        rusqlite::Connection::open(state.join(npu_agent::fleet::serve::store::FILE_NAME)).unwrap();
    let added = rows(&db, "events").saturating_sub(events0);
    let polled = format!("{polls} polls, the last {:.2} s", last.1);
    match done {
        Some(t) => (
            format!("{t:.1} s ({polled}); history rows the restart wrote: {added}"),
            format!("{t:.1} s, {added} rows written"),
        ),
        None => {
            let l = format!(
                "NOT within {:.0} s: {} of {n} counted, {} ok ({polled})",
                s.list.as_secs_f64(),
                last.0[0],
                last.0[1]
            );
            (l.clone(), l)
        }
    }
}

/// The boards that publish a changed status in phase 3.
fn changed(n: usize) -> Vec<usize> {
    (0..n).step_by(CHANGE_EVERY).collect()
}

/// Phase 3: 1 board in 100 publishes a failing status (retained, QoS 1, through one client
/// on `port`): seconds until the page counts them all failing.
fn phase_change(s: &Setup, serve: &Serve, port: u16) -> (String, String) {
    let ids = changed(s.plan.n);
    let k = ids.len() as u64;
    let c = Client::connect(port, &[]);
    let t0 = Instant::now();
    for i in ids {
        let id = sim::board_id(i);
        let st = sim::status(&s.fail_template, &id, &sim::key_for(i));
        c.publish(&format!("npu-fleet/{id}/status"), &st, true);
    }
    let mut fail = 0;
    while t0.elapsed() < s.list {
        if let Some(([_, _, f], took)) = serve.counts() {
            fail = f;
            if f >= k {
                let t = t0.elapsed().as_secs_f64();
                let long = format!("{k} failing statuses counted {t:.1} s after the first was sent (the last poll {took:.2} s)");
                return (long, format!("{k} in {t:.1} s"));
            }
        }
        std::thread::sleep(Duration::from_secs(1));
    }
    let l = format!("NOT within {:.0} s: {fail} of {k}", s.list.as_secs_f64());
    (l.clone(), l)
}

fn summary(s: &Setup, table: &[(String, Vec<(String, String)>)]) {
    println!("\n== summary ({} boards, {} connected)", s.plan.n, s.live);
    let head: Vec<&str> = table.iter().map(|(b, _)| b.as_str()).collect();
    println!(
        "| | {} |\n|---|{}",
        head.join(" | "),
        "---|".repeat(head.len())
    );
    let Some((_, first)) = table.first() else {
        return;
    };
    for (k, _) in first {
        let cells: Vec<&str> = table
            .iter()
            .map(|(_, rows)| {
                rows.iter()
                    .find(|(k2, _)| k2 == k)
                    .map_or("-", |(_, v)| v.as_str())
            })
            .collect();
        println!("| {k} | {} |", cells.join(" | "));
    }
}
