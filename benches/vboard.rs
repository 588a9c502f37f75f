//! The daemon's CPU cost on the virtual ROCK 5B (printed, not asserted): the static aarch64
//! `npu-agent run` on Debian's arm64 kernel under `qemu-system-aarch64` (TCG, no KVM; see
//! tests/system/vboard.rs), reporting to a mosquitto on the host.
//!
//! - busy: a check cycle and status every 2 s (`[report] interval_s = 2`); CPU time per cycle =
//!   the process's utime+stime delta (`/proc/PID/stat`, all threads) over the statuses received;
//! - idle: the default shape (a cycle every 60 s, MQTT keep-alive 30 s); CPU time per minute and
//!   wake-ups per minute of the runtime thread (its voluntary context switches,
//!   `/proc/PID/task/PID/status`: each is a return from sleep).
//!
//! TCG emulates every guest instruction on the host, so guest CPU times are many times what a
//! Cortex-A76 takes; compare them with each other, not with a board.
//!
//! Run: `cargo bench --bench vboard [-- SECONDS]` (default 120 s per phase; needs what
//! tests/system/vboard.rs needs, and mosquitto).

// Tests build board trees and fixtures with plain writes (clippy.toml: disallowed_methods).
#![allow(clippy::disallowed_methods)]
#![allow(dead_code)]

#[path = "../tests/vboard/common.rs"]
mod common;
#[path = "../tests/vboard/fleet.rs"]
mod fleet;
#[path = "../tests/vboard/harness.rs"]
mod harness;
#[path = "../tests/vboard/newc.rs"]
mod newc;

use harness::{Board, BoardSpec, Mem, Personality};
use std::time::{Duration, Instant};

const BOARD_ID: &str = "6c3a91f0e2d4b587";
const USER_HZ: f64 = 100.0;

fn agent_toml(interval_s: u64, keep_alive_s: u64) -> String {
    format!(
        "board_id = \"auto\"\nprofile = \"auto\"\nstate_dir = \"/var/lib/npu-agent\"\n\n[mqtt]\nurl = \"mqtt://10.0.2.100:1883\"\nkeep_alive_s = {keep_alive_s}\n\n[report]\ninterval_s = {interval_s}\n\n[actions]\nauto_compact = false\n"
    )
}

/// The last `VBOARD-MEM comm=npu-agent` sample printed after `after`.
fn sample_after(boot: &mut harness::Boot, after: usize) -> (Instant, Mem) {
    boot.wait_until("a fresh VBOARD-MEM line", Duration::from_secs(120), |c| {
        harness::parse_mem(c, "npu-agent").len() > after
    });
    let at = Instant::now();
    (at, boot.mem("npu-agent").pop().expect("a sample"))
}

/// Boots one board with `interval_s`/`keep_alive_s`, lets it settle, and returns the two samples
/// `secs` apart and the statuses published in between.
fn phase(
    name: &str,
    interval_s: u64,
    keep_alive_s: u64,
    secs: u64,
) -> Option<(f64, Mem, Mem, usize)> {
    let broker = harness::Mosquitto::start()?;
    let spec = BoardSpec::new(name, Personality::Rock5b)
        .mem(2048)
        .broker(broker.port)
        .file(
            "/etc/npu-agent/agent.toml",
            0o644,
            agent_toml(interval_s, keep_alive_s),
        )
        .init("vb_agent\nvb_mem_every 5 npu-agent");
    let mut board = Board::new(spec)?;
    let sub = fleet::Subscriber::connect(broker.port, "npu-fleet/#");
    let mut boot = board.boot();
    let topic = format!("npu-fleet/{BOARD_ID}/status");
    sub.find_from(0, Duration::from_secs(180), |m| m.topic == topic)
        .unwrap_or_else(|| panic!("no status\n{}", boot.tail()));
    // Settle past start-up (first cycles, connection) before the first sample.
    std::thread::sleep(Duration::from_secs(15));
    let n = boot.mem("npu-agent").len();
    let (t1, m1) = sample_after(&mut boot, n);
    let s1 = sub.all().iter().filter(|m| m.topic == topic).count();
    std::thread::sleep(Duration::from_secs(secs));
    let n = boot.mem("npu-agent").len();
    let (t2, m2) = sample_after(&mut boot, n);
    let s2 = sub.all().iter().filter(|m| m.topic == topic).count();
    assert_eq!(m1.pid, m2.pid, "the agent restarted\n{}", boot.tail());
    Some(((t2 - t1).as_secs_f64(), m1, m2, s2 - s1))
}

fn main() {
    let secs: u64 = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(120);
    let machine = std::process::Command::new("sh")
        .args(["-c", "echo \"$(date -u +%Y-%m-%dT%H:%MZ); $(uname -m) host, $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'); load $(cut -d' ' -f1-3 /proc/loadavg)\""])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    println!("vboard bench: {machine}; guest under qemu TCG; {secs} s per phase");
    let t0 = Instant::now();
    if let Some(bin) = common::aarch64_agent() {
        let bytes = std::fs::metadata(&bin).map(|m| m.len()).unwrap_or(0);
        println!("vboard bench: the static aarch64 agent, {bytes} bytes");
    }
    let Some((dt, m1, m2, statuses)) = phase("bench-busy", 2, 5, secs) else {
        println!("vboard bench: skipped (see above)");
        return;
    };
    let cpu_s = (m2.cpu_ticks - m1.cpu_ticks) as f64 / USER_HZ;
    println!(
        "busy (cycle every 2 s): {statuses} statuses in {dt:.0} s; CPU {:.1} ms per cycle ({:.2} % of one emulated core); VmRSS {} kB, VmHWM {} kB, {} threads",
        cpu_s * 1000.0 / statuses.max(1) as f64,
        cpu_s * 100.0 / dt,
        m2.rss_kb,
        m2.hwm_kb,
        m2.threads
    );
    let Some((dt, m1, m2, statuses)) = phase("bench-idle", 60, 30, secs) else {
        println!("vboard bench: idle phase skipped (see above)");
        return;
    };
    let cpu_s = (m2.cpu_ticks - m1.cpu_ticks) as f64 / USER_HZ;
    let per_min = 60.0 / dt;
    println!(
        "idle (defaults: cycle every 60 s, keep-alive 30 s): {statuses} statuses in {dt:.0} s; CPU {:.0} ms per minute; runtime-thread wake-ups {:.1} per minute; VmRSS {} kB, VmHWM {} kB, {} threads",
        cpu_s * 1000.0 * per_min,
        (m2.ctxsw - m1.ctxsw) as f64 * per_min,
        m2.rss_kb,
        m2.hwm_kb,
        m2.threads
    );
    println!(
        "vboard bench: both phases complete in {:.0} s",
        t0.elapsed().as_secs_f64()
    );
}
