//! The coordinator's side of the simulated fleet, shared by `fleet_cluster` and
//! `fleet_serve_brokers`: the worker processes of [`super::sim`] and their counters, the status
//! template they seal, the private network namespace, a process's memory and CPU, and the NATS
//! nodes' log lines.

use crate::sim::{ATTEMPTS, CONNECTED, COUNTERS, READY, RETAINED};
use crate::support::brokers::NatsCluster;
use std::io::{BufRead, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The fixture whose compact status every simulated board publishes.
pub const CASE: &str = "own-rk3588-opi5plus-rknpu-0.9.8-healthy";
/// Connections per worker process (under the descriptor limit).
pub const PER_WORKER: usize = 15_000;
/// A worker's counters ([`crate::sim`]'s constants index them).
pub type Counts = [u64; COUNTERS];

/// Runs this bench again in a private network namespace (loopback up, ports 1024-65535): that
/// run's exit code, or `None` to run here (no namespace to be had).
pub fn enter_netns() -> Option<i32> {
    if std::env::var_os("NPU_BENCH_NETNS").is_some() {
        return None;
    }
    let can = Command::new("unshare")
        .args(["--net", "true"])
        .stderr(Stdio::null())
        .status();
    if !can.is_ok_and(|s| s.success()) {
        println!("note: no private network namespace (unshare --net failed): 127.0.0.1 only");
        return None;
    }
    let script = "ip link set lo up && echo '1024 65535' > /proc/sys/net/ipv4/ip_local_port_range \
                  && exec \"$0\" \"$@\"";
    let st = Command::new("unshare")
        .args(["--net", "--", "sh", "-c", script])
        .arg(std::env::current_exe().ok()?)
        .args(std::env::args_os().skip(1))
        .env("NPU_BENCH_NETNS", "1")
        .status()
        .ok()?;
    Some(st.code().unwrap_or(1))
}

/// A shell command's stdout, trimmed (empty when it cannot run).
pub fn sh(cmd: &str) -> String {
    let o = Command::new("sh").args(["-c", cmd]).output();
    o.map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}

/// Writes the compact status of a real board tree, `interval_s` 60, with placeholders for the
/// board id and the time, for the workers, as `dir/status.json`: that path.
pub fn write_template(dir: &std::path::Path) -> std::path::PathBuf {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/boards")
        .join(CASE)
        .join("root");
    let out = Command::new(env!("CARGO_BIN_EXE_npu-agent"))
        .args(["check", "--format", "json", "--root"])
        .arg(&root)
        .output()
        .unwrap();
    let mut report: npu_agent::report::Report = serde_json::from_slice(&out.stdout).unwrap();
    report.board_id = "@@BOARD@@".into();
    report.time = "@@TIME@@".into();
    report.interval_s = Some(60);
    let body = serde_json::to_vec(&npu_agent::report::compact(&report, false)).unwrap();
    println!("one status ({CASE}): compact {} bytes, sealed", body.len());
    let path = dir.join("status.json");
    std::fs::write(&path, body).unwrap();
    path
}

/// The nodes' `[ERR]`, `[WRN]` and slow-consumer lines since the last call: how many, and the most frequent
/// kinds (the message after the client, digits removed).
pub fn nats_log(cluster: &NatsCluster, seen: &mut [usize], when: &str) {
    let logs = cluster.logs();
    let mut kinds: Vec<(String, usize)> = Vec::new();
    let mut total = 0;
    for (i, node) in logs.split("\n---\n").enumerate().take(seen.len()) {
        let lines: Vec<&str> = node.lines().collect();
        for l in lines.iter().skip(seen[i]) {
            let level = match (l.contains("[ERR]"), l.contains("[WRN]")) {
                (true, _) => "ERR",
                (_, true) => "WRN",
                _ if l.contains("Slow Consumer") => "INF",
                _ => continue,
            };
            total += 1;
            let msg = l.rsplit(" - ").next().unwrap_or(l);
            let msg = msg.split("] ").last().unwrap_or(msg);
            let k = format!(
                "{level} {}",
                msg.chars()
                    .filter(|c| !c.is_ascii_digit())
                    .take(150)
                    .collect::<String>()
            );
            match kinds.iter_mut().find(|(x, _)| *x == k) {
                Some((_, n)) => *n += 1,
                None => kinds.push((k, 1)),
            }
        }
        seen[i] = seen[i].max(lines.len());
    }
    kinds.sort_by_key(|k| std::cmp::Reverse(k.1));
    println!(
        "  nats logs during {when}: {total} [ERR]/[WRN]/slow-consumer lines (digits removed below)"
    );
    for (k, n) in kinds.iter().take(8) {
        println!("    {n} x {k}");
    }
}

/// VmRSS (kB) and CPU ticks (utime + stime) of a process.
pub fn usage(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let rss = status.lines().find(|l| l.starts_with("VmRSS:"));
    let rss = rss.and_then(|l| l.split_whitespace().nth(1)?.parse().ok());
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let f: Vec<&str> = stat
        .rsplit_once(')')
        .map(|(_, r)| r.split_whitespace().collect())
        .unwrap_or_default();
    let tick = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
    // Fields 14 and 15 of the line: the 12th and 13th after the command.
    (rss.unwrap_or(0), tick(11) + tick(12))
}

/// What the workers are given: `n` boards, over `hosts` loopback addresses (127.0.0.1 up),
/// at most `inflight` CONNECTs in flight in all, each sealing the status `template`.
pub struct Plan {
    /// Boards in all.
    pub n: usize,
    /// Loopback addresses the connected boards spread over.
    pub hosts: usize,
    /// CONNECTs in flight, all workers together.
    pub inflight: usize,
    /// The status template ([`write_template`]).
    pub template: std::path::PathBuf,
}

/// The simulator's worker processes, and their latest counters.
pub struct Workers {
    children: Vec<Child>,
    stdins: Mutex<Vec<ChildStdin>>,
    latest: Arc<Mutex<Vec<Counts>>>,
}

impl Workers {
    /// Boards `0..live` connect to `ports` (each worker a slice), the rest of `plan.n` wait for
    /// "retained".
    pub fn spawn(plan: &Plan, live: usize, ports: &[u16]) -> Workers {
        let w = live.div_ceil(PER_WORKER).max(1);
        let rest = plan.n - live;
        let latest = Arc::new(Mutex::new(vec![[0; COUNTERS]; w]));
        let ports: Vec<String> = ports.iter().map(|p| p.to_string()).collect();
        let (mut children, mut stdins) = (Vec::new(), Vec::new());
        for k in 0..w {
            let range = |a: usize, n: usize| format!("{} {}", a + k * n / w, a + (k + 1) * n / w);
            let mut child = Command::new(std::env::current_exe().unwrap())
                .env("NPU_BENCH_WORKER", k.to_string())
                .env("NPU_BENCH_LIVE_RANGE", range(0, live))
                .env("NPU_BENCH_RET_RANGE", range(live, rest))
                .env("NPU_BENCH_PORTS", ports.join(" "))
                .env("NPU_BENCH_HOSTS", plan.hosts.to_string())
                .env("NPU_BENCH_INFLIGHT", plan.inflight.div_ceil(w).to_string())
                .env("NPU_BENCH_TEMPLATE", &plan.template)
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .unwrap();
            let out = std::io::BufReader::new(child.stdout.take().unwrap());
            let l = latest.clone();
            std::thread::spawn(move || {
                for line in out.lines().map_while(Result::ok) {
                    let v: Vec<u64> = line
                        .split(' ')
                        .skip(1)
                        .filter_map(|x| x.parse().ok())
                        .collect();
                    if let Ok(c) = <Counts>::try_from(v.as_slice()) {
                        l.lock().unwrap()[k] = c;
                    }
                }
            });
            stdins.push(child.stdin.take().unwrap());
            children.push(child);
        }
        println!("simulator: {w} worker processes, {live} connecting boards, {rest} retained");
        Workers {
            children,
            stdins: Mutex::new(stdins),
            latest,
        }
    }

    /// Every worker's latest counters, summed.
    pub fn total(&self) -> Counts {
        let mut t = [0; COUNTERS];
        for c in self.latest.lock().unwrap().iter() {
            for (a, b) in t.iter_mut().zip(c) {
                *a += b;
            }
        }
        t
    }

    /// The worker processes' ids.
    pub fn pids(&self) -> Vec<u32> {
        self.children.iter().map(|c| c.id()).collect()
    }

    /// Says `line` to every worker (`retained`: publish the boards past the connected ones).
    pub fn tell(&self, line: &str) {
        for i in self.stdins.lock().unwrap().iter_mut() {
            let _ = writeln!(i, "{line}");
        }
    }

    /// Waits until `done` holds for the totals (at most `bound`, a progress line every 30 s):
    /// seconds, whether done, the totals.
    pub fn wait(&self, bound: Duration, done: impl Fn(&Counts) -> bool) -> (f64, bool, Counts) {
        let t0 = Instant::now();
        let mut said = t0;
        loop {
            let c = self.total();
            if done(&c) || t0.elapsed() >= bound {
                return (t0.elapsed().as_secs_f64(), done(&c), c);
            }
            if said.elapsed() >= Duration::from_secs(30) {
                said = Instant::now();
                println!(
                    "  .. {:.0} s: {} connected, {} ready, {} attempts, {} retained",
                    t0.elapsed().as_secs_f64(),
                    c[CONNECTED],
                    c[READY],
                    c[ATTEMPTS],
                    c[RETAINED]
                );
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }
}

impl Drop for Workers {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
