//! A fleet on the cluster, measured (printed, not asserted; issue 27): NPU_BENCH_BOARDS boards
//! (default 100,000) against a three-node NATS cluster (as tests/system/nats.rs starts it), then
//! against one mosquitto (`max_queued_messages 0`), with three real `npu-agent run` among them.
//! A simulated board is a connection of its own, as an agent's: a last will (`offline`,
//! retained), a retained `online` and a retained compact status (`interval_s` 60, sealed with a
//! key of its own as an agent seals it), QoS 0 command subscriptions (`npu-fleet/<board>/cmd/+/+`
//! and `npu-fleet/all/cmd/+/+`: `command_qos = 0`, as the operator guide advises for NATS), a
//! `rescan` answered `executing` then `successful` (retained), and after a drop a reconnect to
//! another node after the agent's own back-off (`full_jitter`: up to 1 s doubling to 120 s).
//! Printed for each broker: the ramp-up (at most NPU_BENCH_INFLIGHT CONNECTs in flight), the
//! brokers' resident memory and their CPU over one keep-alive period (60 s) of quiet, per board,
//! `fleet watch --once --format json` from each node (time, boards listed; when it lists fewer,
//! what a plain subscriber gets), `fleet send rescan --all` (time, final answers); on the
//! cluster a node's `kill -9` (connection attempts per second, time until its boards are
//! connected again); the nodes' log errors after each phase; then one table. The back-off
//! simulation is `cargo bench --bench backoff`.
//!
//! This machine's limits shape it. A process holds at most RLIMIT_NOFILE descriptors (raising
//! the hard limit needs CAP_SYS_RESOURCE), so a broker process holds at most that many sessions:
//! boards past what the brokers can hold (on the cluster, two nodes must be able to take a dead
//! node's boards) are published retained through a few connections, `offline` with a status, as
//! boards whose link is gone. The simulator (fleet_cluster/sim.rs) is this binary again, as
//! worker processes of at most 15,000 connections each. It runs in a private network namespace
//! (`unshare --net`, when it can) where the nodes listen on every loopback address and the
//! boards spread over 127.0.0.1-127.0.0.4 with the whole port range. Every phase is bounded and
//! says how far it got.
//!
//! Run: `cargo bench --bench fleet_cluster` (needs nats-server and mosquitto; root for the
//! namespace). Env: NPU_BENCH_BOARDS (100000), NPU_BENCH_LIVE (connected boards; default from
//! the descriptor limit), NPU_BENCH_INFLIGHT (256), and bounds in seconds: NPU_BENCH_RAMP_S (600,
//! each of connecting and publishing), NPU_BENCH_WATCH_S (240), NPU_BENCH_SEND_S (300),
//! NPU_BENCH_KILL_S (180).

// Tests build board trees and fixtures with plain writes (clippy.toml: disallowed_methods).
#![allow(clippy::disallowed_methods)]

#[path = "../tests/support/mod.rs"]
mod support;

#[path = "fleet_cluster/sim.rs"]
mod sim;

#[path = "fleet_cluster/workers.rs"]
mod workers;

// The whole-cluster outage simulation, printed at the end of the run (its `main` is not used).
#[allow(dead_code)]
#[path = "backoff.rs"]
mod backoff;

use rumqttc::{Event, Packet, QoS};
use sim::{ATTEMPTS, CMDS, CONNECTED, FINALS, NODE0, READY, RETAINED};
use std::process::Command;
use std::time::{Duration, Instant};
use support::brokers::{have_nats, NatsCluster};
use support::mqtt::{agent_config, free_port, require_tool, Agent, Board, Broker, Client};
use workers::{enter_netns, nats_log, sh, usage, write_template, Counts, Plan, Workers, CASE};

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    if std::env::var_os("NPU_BENCH_WORKER").is_some() {
        return sim::worker_main();
    }
    if !have_nats() || !require_tool("mosquitto") {
        return;
    }
    if let Some(code) = enter_netns() {
        std::process::exit(code);
    }
    coordinator();
}

/// What every phase shares, and the summary rows (for a broker: row name, short figure).
struct Setup {
    n: usize,
    hosts: usize,
    fd: u64,
    inflight: usize,
    dir: tempfile::TempDir,
    ramp: Duration,
    watch: Duration,
    send_s: u64,
    kill: Duration,
    rows: Vec<(String, String)>,
}

impl Setup {
    /// What the simulator's workers are given.
    fn plan(&self) -> Plan {
        Plan {
            n: self.n,
            hosts: self.hosts,
            inflight: self.inflight,
            template: self.dir.path().join("status.json"),
        }
    }

    /// Prints a phase's line and keeps its short form for the summary.
    fn say(&mut self, row: &str, long: &str, short: &str) {
        println!("{row}: {long}");
        self.rows.push((row.to_string(), short.to_string()));
    }
}

fn coordinator() {
    let netns = std::env::var_os("NPU_BENCH_NETNS").is_some();
    use rustix::process::{getrlimit, setrlimit, Resource};
    let mut lim = getrlimit(Resource::Nofile);
    lim.current = lim.maximum;
    let _ = setrlimit(Resource::Nofile, lim);
    let secs = |k: &str, d: u64| Duration::from_secs(env_u64(k, d));
    let mut s = Setup {
        n: env_u64("NPU_BENCH_BOARDS", 100_000) as usize,
        hosts: if netns { 4 } else { 1 },
        fd: getrlimit(Resource::Nofile).current.unwrap_or(1024),
        inflight: env_u64("NPU_BENCH_INFLIGHT", 256) as usize,
        dir: tempfile::tempdir().unwrap(),
        ramp: secs("NPU_BENCH_RAMP_S", 600),
        watch: secs("NPU_BENCH_WATCH_S", 240),
        send_s: env_u64("NPU_BENCH_SEND_S", 300),
        kill: secs("NPU_BENCH_KILL_S", 180),
        rows: Vec::new(),
    };
    header(&s, netns);
    write_template(s.dir.path());
    let t0 = Instant::now();
    run_cluster(&mut s, netns);
    let cluster = std::mem::take(&mut s.rows);
    run_mosquitto(&mut s);
    let secs = t0.elapsed().as_secs_f64();
    println!("\n== summary ({} boards; whole run {secs:.0} s)", s.n);
    println!("| | NATS 2.9 cluster (3 nodes) | one mosquitto |\n|---|---|---|");
    for (k, v) in &cluster {
        let m = s
            .rows
            .iter()
            .find(|(k2, _)| k2 == k)
            .map(|(_, v)| v.as_str());
        println!("| {k} | {v} | {} |", m.unwrap_or("-"));
    }
    println!(
        "\n== back-off (simulated, no broker; also `cargo bench --bench backoff`): {} boards, \
         every node down for 300 s",
        s.n
    );
    backoff::report(s.n, 300);
}

fn header(s: &Setup, netns: bool) {
    println!(
        "== fleet_cluster: {}",
        sh("date -u '+%Y-%m-%d %H:%M:%S UTC'")
    );
    println!(
        "machine: {} {}, {} cores, {}; nats-server {}, {}",
        sh("uname -m"),
        sh("uname -r"),
        sh("nproc"),
        sh("grep MemTotal /proc/meminfo | tr -s ' '"),
        sh("nats-server --version | sed 's/nats-server: //'"),
        sh("mosquitto -h | head -1")
    );
    let net = match netns {
        true => "private namespace, boards over 127.0.0.1-127.0.0.4",
        false => "host loopback 127.0.0.1",
    };
    println!(
        "boards: {} (NPU_BENCH_BOARDS); descriptors per process: {} (hard limit; CAP_SYS_RESOURCE \
         to raise it: {}); network: {net}; ports {}",
        s.n,
        s.fd,
        u64::from_str_radix(sh("grep CapEff /proc/self/status | cut -f2").as_str(), 16)
            .is_ok_and(|c| c >> 24 & 1 == 1),
        sh("tr '\\t' - < /proc/sys/net/ipv4/ip_local_port_range"),
    );
}

/// The three real agents, `real-<i>` first on node `i` (then the others).
fn real_agents(urls: &[String], nats: bool) -> Vec<(Board, Agent)> {
    let mut agents = Vec::new();
    for i in 0..3 {
        let id = format!("real-{i}");
        let list: Vec<&str> = (0..urls.len())
            .map(|k| urls[(i + k) % urls.len()].as_str())
            .collect();
        let mut cfg =
            agent_config(&list.join(","), &id, "").replace("interval_s = 2", "interval_s = 60");
        if nats {
            let qos = "keep_alive_s = 5\nprotocol = \"3.1.1\"\ncommand_qos = 0\n";
            cfg = cfg.replace("keep_alive_s = 5\n", qos);
        }
        let board = Board::from_fixture(CASE, &id, &cfg);
        let agent = Agent::start(&board);
        agents.push((board, agent));
    }
    agents
}

fn still_running(agents: Vec<(Board, Agent)>) {
    let n = agents
        .into_iter()
        .map(|(_, mut a)| a.is_running())
        .filter(|r| *r)
        .count();
    println!("real agents still running at the end: {n} of 3");
}

fn run_cluster(s: &mut Setup, netns: bool) {
    let live = (env_u64("NPU_BENCH_LIVE", 2 * s.fd.saturating_sub(1500)) as usize).min(s.n);
    println!(
        "\n== NATS cluster: {live} boards connected (two nodes must hold a dead node's boards: \
         2 x ({} descriptors - 1,500)), {} published retained as offline",
        s.fd,
        s.n - live
    );
    let mut cluster = NatsCluster::start_on(if netns { "0.0.0.0" } else { "127.0.0.1" });
    // JetStream elects its leaders after the ports listen: let the cluster settle.
    std::thread::sleep(Duration::from_secs(5));
    let urls: Vec<String> = (0..3).map(|i| cluster.url(i)).collect();
    let agents = real_agents(&urls, true);
    let w = Workers::spawn(&s.plan(), live, &cluster.mqtt_ports);
    let mut seen = vec![0; 3];
    let pids = cluster.pids();
    common_phases(s, &w, live, &pids, &urls, &mut |when| {
        nats_log(&cluster, &mut seen, when)
    });
    phase_kill(s, &mut cluster, &w);
    nats_log(&cluster, &mut seen, "the kill");
    still_running(agents);
}

fn run_mosquitto(s: &mut Setup) {
    let live = (env_u64("NPU_BENCH_LIVE", s.fd.saturating_sub(1000)) as usize).min(s.n);
    println!(
        "\n== one mosquitto (max_queued_messages 0): {live} boards connected ({} descriptors - \
         1,000), {} published retained as offline",
        s.fd,
        s.n - live
    );
    let port = free_port();
    let extra: String = (2..=s.hosts)
        .map(|h| format!("listener {port} 127.0.0.{h}\n"))
        .collect();
    let broker = Broker::start_with(port, &format!("max_queued_messages 0\n{extra}"));
    let urls = vec![broker.url()];
    let agents = real_agents(&urls, false);
    let w = Workers::spawn(&s.plan(), live, &[port]);
    let pids: Vec<u32> = broker.pid().into_iter().collect();
    common_phases(s, &w, live, &pids, &urls, &mut |_| {});
    still_running(agents);
}

/// Ramp-up, retained boards, the idle window, `fleet watch` from each node and `fleet send`
/// through the first; `after` is called after each phase.
fn common_phases(
    s: &mut Setup,
    w: &Workers,
    live: usize,
    pids: &[u32],
    urls: &[String],
    after: &mut dyn FnMut(&str),
) {
    let (took, done, c) = w.wait(s.ramp, |c| c[READY] >= live as u64);
    let ramp = match done {
        true => format!("{live} boards in {took:.1} s ({:.0}/s)", live as f64 / took),
        false => format!(
            "did not finish within {took:.0} s ({} of {live} boards ready, {} connected)",
            c[READY], c[CONNECTED]
        ),
    };
    let long = format!(
        "{ramp} (connected, subscribed, availability and status acknowledged; at most {} \
         CONNECTs in flight); {} connection attempts",
        s.inflight, c[ATTEMPTS]
    );
    s.say("live boards ramp-up", &long, &ramp);
    let rest = (s.n - live) as u64;
    w.tell("retained");
    let (took, done, c) = w.wait(s.ramp, |c| c[RETAINED] >= rest);
    let ret = match done {
        true => format!("{rest} in {took:.1} s"),
        false => format!(
            "did not finish within {took:.0} s ({} of {rest})",
            c[RETAINED]
        ),
    };
    s.say(
        "offline boards published (availability, status)",
        &ret,
        &ret,
    );
    after("the ramp-up");
    phase_idle(s, w, pids, live);
    for (i, url) in urls.iter().enumerate() {
        let before = w.total();
        let (long, short) = phase_watch(s, url, i == 0);
        let long = format!("{long}; {}", churn(w, &before, live));
        s.say(&format!("fleet watch --once, node {i}"), &long, &short);
    }
    after("fleet watch");
    phase_send(s, &urls[0], w, live);
    after("fleet send");
}

/// The simulated boards' reconnects since `before`, and how many are connected.
fn churn(w: &Workers, before: &Counts, live: usize) -> String {
    let c = w.total();
    format!(
        "simulator: {} connection attempts meanwhile, {} of {live} connected now",
        c[ATTEMPTS] - before[ATTEMPTS],
        c[CONNECTED]
    )
}

/// The brokers' resident memory, and their CPU over one keep-alive period (60 s) of quiet.
fn phase_idle(s: &mut Setup, w: &Workers, pids: &[u32], live: usize) {
    let a: Vec<(u64, u64)> = pids.iter().map(|p| usage(*p)).collect();
    std::thread::sleep(Duration::from_secs(60));
    let b: Vec<(u64, u64)> = pids.iter().map(|p| usage(*p)).collect();
    let hz = rustix::param::clock_ticks_per_second() as f64;
    for (i, (x, y)) in a.iter().zip(&b).enumerate() {
        let (mib, cpu) = (y.0 as f64 / 1024.0, (y.1 - x.1) as f64 / hz);
        println!("  broker {i}: VmRSS {mib:.0} MiB, CPU {cpu:.2} s in the 60 s idle window");
    }
    let kb = b.iter().map(|v| v.0).sum::<u64>() as f64;
    let cpu_s = b.iter().zip(&a).map(|(y, x)| y.1 - x.1).sum::<u64>() as f64 / hz;
    let sim_mib = w.pids().iter().map(|p| usage(*p).0).sum::<u64>() as f64 / 1024.0;
    let (n, l) = (s.n as f64, live.max(1) as f64);
    let rss = format!(
        "{:.0} MiB: {:.1} kB/board, {:.1} kB/live board",
        kb / 1024.0,
        kb / n,
        kb / l
    );
    let cpu = format!("{:.3} ms/live board/min", cpu_s * 1000.0 / l);
    let long =
        format!("{rss} ({n} boards, {live} live); the simulator's workers: {sim_mib:.0} MiB");
    s.say("brokers' RSS after the ramp-up", &long, &rss);
    let long = format!("{cpu} ({cpu_s:.2} CPU s in 60 s; keep-alive 60 s)");
    s.say("brokers' idle CPU", &long, &cpu);
}

/// Runs the agent binary with `args`, killed after `bound`: seconds, exit code (`None` when
/// killed), stdout, stderr.
fn run_tool(s: &Setup, args: &[&str], bound: Duration) -> (f64, Option<i32>, String, String) {
    let (o, e) = (s.dir.path().join("tool.out"), s.dir.path().join("tool.err"));
    let t0 = Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_npu-agent"))
        .args(args)
        // Keys first seen are not written anywhere (the directory does not exist).
        .env(
            "NPU_AGENT_KNOWN_BOARDS",
            s.dir.path().join("none/known_boards"),
        )
        .stdout(std::fs::File::create(&o).unwrap())
        .stderr(std::fs::File::create(&e).unwrap())
        .spawn()
        .unwrap();
    let code = loop {
        if let Ok(Some(st)) = child.try_wait() {
            break Some(st.code().unwrap_or(-1));
        }
        if t0.elapsed() > bound {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let read = |p| std::fs::read_to_string(p).unwrap_or_default();
    (t0.elapsed().as_secs_f64(), code, read(&o), read(&e))
}

/// A tool's stderr but the note on falling back to MQTT 3.1.1, each line cut at 300 chars.
fn stderr_lines(text: &str) -> String {
    let lines: Vec<String> = text
        .lines()
        .filter(|l| !l.contains("refuses MQTT 5") && !l.trim().is_empty())
        .map(|l| l.chars().take(300).collect())
        .collect();
    match lines.is_empty() {
        true => String::new(),
        false => format!("; stderr: {}", lines.join(" | ")),
    }
}

/// A plain subscriber to `npu-fleet/+/status` (QoS 0) on `port`, subscribing again after each
/// reconnect, counting retained statuses: when the first came, how many until 15 s without one
/// (at most `bound`), and the first connection error.
fn probe(port: u16, expect: usize, bound: Duration) -> String {
    let mut o = rumqttc::MqttOptions::new("bench-probe", "127.0.0.1", port);
    o.set_keep_alive(Duration::from_secs(30))
        .set_max_packet_size(1 << 20, 1 << 20);
    let (client, mut conn) = rumqttc::Client::new(o, 100);
    let t0 = Instant::now();
    let (mut first, mut last, mut n, mut drops, mut error) = (None, t0, 0, 0, String::new());
    while t0.elapsed() < bound && n < expect {
        if first.is_some() && last.elapsed() > Duration::from_secs(15) {
            break;
        }
        match conn.recv_timeout(Duration::from_millis(500)) {
            Ok(Ok(Event::Incoming(Packet::ConnAck(_)))) => {
                let _ = client.try_subscribe("npu-fleet/+/status", QoS::AtMostOnce);
            }
            Ok(Ok(Event::Incoming(Packet::Publish(p)))) if p.retain => {
                n += 1;
                last = Instant::now();
                first.get_or_insert(t0.elapsed().as_secs_f64());
            }
            Ok(Err(e)) => {
                drops += 1;
                if error.is_empty() {
                    error = format!(", the first after {:.0} s: {e}", t0.elapsed().as_secs_f64());
                }
                std::thread::sleep(Duration::from_millis(500));
            }
            _ => {}
        }
    }
    let first = first.map_or("none".into(), |t| format!("the first after {t:.1} s"));
    format!(
        "a plain subscriber to npu-fleet/+/status got {n} of {expect} retained statuses in \
         {:.0} s ({first}; {drops} connection errors{error})",
        t0.elapsed().as_secs_f64()
    )
}

/// `fleet watch --once --format json` through `url` (and a plain subscriber's count when it
/// lists fewer boards than there are and `probe_too`): the line printed and the table's.
fn phase_watch(s: &Setup, url: &str, probe_too: bool) -> (String, String) {
    let expect = s.n + 3;
    let args = [
        "fleet", "watch", "--broker", url, "--once", "--format", "json",
    ];
    let (took, code, out, err) = run_tool(s, &args, s.watch);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap_or_default();
    let boards = v["boards"].as_array().cloned().unwrap_or_default();
    let count = |f: &dyn Fn(&serde_json::Value) -> bool| boards.iter().filter(|b| f(b)).count();
    let online = count(&|b| b["availability"] == "online");
    let real = count(&|b| {
        b["board"]
            .as_str()
            .is_some_and(|id| id.starts_with("real-"))
    });
    let incomplete = if v["incomplete"] == true {
        ", INCOMPLETE"
    } else {
        ""
    };
    let (mut long, short) = match code {
        None => {
            let b = s.watch.as_secs_f64();
            let long = format!("did not finish within {b:.0} s, killed (boards seen: not known, it prints only when done)");
            (long, format!("did not finish within {b:.0} s"))
        }
        Some(code) => (
            format!(
                "{took:.1} s, {} of {expect} boards listed ({online} online, {real} of 3 real \
                 agents), exit {code}{incomplete}",
                boards.len()
            ),
            format!(
                "{took:.1} s, {}/{expect} listed, exit {code}{incomplete}",
                boards.len()
            ),
        ),
    };
    long.push_str(&stderr_lines(&err));
    if probe_too && boards.len() < expect {
        let port = url
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .unwrap_or(0);
        long.push_str(&format!(
            "; then {}",
            probe(port, expect, Duration::from_secs(120))
        ));
    }
    (long, short)
}

/// `fleet send rescan --all` through `url`.
fn phase_send(s: &mut Setup, url: &str, w: &Workers, live: usize) {
    let before = w.total();
    let (wait, bw) = (s.send_s.to_string(), s.send_s.min(60).to_string());
    let mut args: Vec<&str> = "fleet send rescan --all --broker".split(' ').collect();
    args.extend([url, "--wait", &wait, "--board-wait", &bw]);
    let (took, code, out, err) = run_tool(s, &args, Duration::from_secs(s.send_s + 60));
    let after = w.total();
    let boards = |word: &str| {
        let mut b: Vec<&str> = out
            .lines()
            .filter(|l| l.contains(word))
            .filter_map(|l| l.split(' ').next())
            .collect();
        b.sort();
        b.dedup();
        b
    };
    let ok = boards(" successful");
    let real = ok.iter().filter(|b| b.starts_with("real-")).count();
    let code = code.map_or("killed".to_string(), |c| c.to_string());
    let (cmds, finals) = (after[CMDS] - before[CMDS], after[FINALS] - before[FINALS]);
    let short = format!(
        "{took:.1} s, exit {code}, {} boards successful (simulator: {finals} answered), real {real}/3",
        ok.len()
    );
    let long = format!(
        "{took:.1} s, exit {code}; it printed successful for {} boards ({} lines), executing for \
         {}, failed or rejected for {}, {} answers not taken as the board's; real agents \
         successful: {real} of 3; the simulator got {cmds} commands and sent {finals} final \
         answers; {}{}",
        ok.len(),
        out.lines().filter(|l| l.contains(" successful")).count(),
        boards(" executing").len(),
        boards(" failed").len() + boards(" rejected").len(),
        out.lines().filter(|l| l.contains("not taken")).count(),
        churn(w, &before, live),
        stderr_lines(&err)
    );
    s.say("fleet send rescan --all", &long, &short);
}

/// `kill -9` of node 2: attempts per second (the first 60 s), the time until none of the
/// simulated boards is left off, and whether `real-2` (first on node 2) speaks through another.
fn phase_kill(s: &mut Setup, cluster: &mut NatsCluster, w: &Workers) {
    let before = w.total();
    let dead_url = cluster.url(2);
    let t0 = Instant::now();
    cluster.kill(2);
    let topic = ["npu-fleet/real-2/status"];
    let watch = Client::connect_qos(cluster.mqtt_ports[0], &topic, QoS::AtMostOnce);
    let (mut per_s, mut last, mut back, mut real) = (Vec::new(), before[ATTEMPTS], None, None);
    let mut tick = t0;
    while t0.elapsed() < s.kill && (back.is_none() || real.is_none() || per_s.len() < 60) {
        tick += Duration::from_secs(1);
        std::thread::sleep(tick.saturating_duration_since(Instant::now()));
        let c = w.total();
        if per_s.len() < 60 {
            per_s.push(c[ATTEMPTS] - last);
            last = c[ATTEMPTS];
        }
        if back.is_none() && c[NODE0 + 2] == 0 && c[CONNECTED] >= before[CONNECTED] {
            back = Some(t0.elapsed().as_secs_f64());
        }
        let msgs = watch.drain();
        let moved = msgs
            .iter()
            .any(|m| m.json()["broker"].as_str().is_some_and(|b| b != dead_url));
        if real.is_none() && moved {
            real = Some(t0.elapsed().as_secs_f64());
        }
    }
    let c = w.total();
    let peak = per_s.iter().max().copied().unwrap_or(0);
    println!(
        "node kill: connection attempts per second, first {} s: {per_s:?}",
        per_s.len()
    );
    let back = match back {
        Some(t) => format!(
            "all {} boards of node 2 connected again after {t:.0} s",
            before[NODE0 + 2]
        ),
        None => format!(
            "not all back within {:.0} s ({} of {} connected)",
            s.kill.as_secs_f64(),
            c[CONNECTED],
            before[CONNECTED]
        ),
    };
    let real = match real {
        Some(t) => format!("real-2 published through another node after {t:.0} s"),
        None => "real-2 not seen through another node".into(),
    };
    let r = format!(
        "{back}; attempts peak {peak}/s, {} in 60 s; {real}",
        per_s.iter().sum::<u64>()
    );
    let long = format!("{r}; connected per node now {:?}", &c[NODE0..NODE0 + 3]);
    s.say("node kill", &long, &r);
}
