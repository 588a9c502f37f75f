//! A whole-cluster outage, simulated (printed, not asserted): NPU_BENCH_BOARDS boards (default
//! 100,000) are connected when every broker node goes down at t = 0; each board notices at
//! once and retries by its reconnect policy; connections fail until the brokers come back at
//! NPU_BENCH_OUTAGE_S (default 300 s), then every attempt succeeds. Printed: connection
//! attempts per second at the brokers over the first ten minutes (mean and peak second per
//! minute, and in the first ten seconds after the recovery), for the policy before issue 27
//! (100 ms doubled to 1.6 s, ±25 % jitter) and for today's (`full_jitter`: up to 1 s doubled
//! to `reconnect_max_s` = 120 s, uniform), and when the last board was back.
//!
//! Run: `cargo bench --bench backoff`. No broker: the policies are the agent's own functions,
//! fed with a seeded random sequence.

use npu_agent::mqtt::link::full_jitter;
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::time::Duration;

const HORIZON_MS: u64 = 600_000;

/// xorshift64*: a seeded uniform sequence in [0, 1).
struct Rng(u64);

impl Rng {
    fn unit(&mut self) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// The reconnect policy before issue 27: the previous wait doubled, clamped to 100 ms..1.6 s,
/// then ±25 % jitter.
fn before(prev: Duration, r: f64) -> Duration {
    (prev * 2)
        .clamp(Duration::from_millis(100), Duration::from_millis(1600))
        .mul_f64(0.75 + r * 0.5)
}

/// Attempts per millisecond-stamped second, and when the last board connected (ms).
fn simulate(boards: usize, outage_ms: u64, new: bool) -> (Vec<u64>, u64) {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let cap = Duration::from_secs(120);
    let mut per_s = vec![0u64; (HORIZON_MS / 1000) as usize];
    // (next attempt ms, board); each board's failures and last wait.
    let mut heap: BinaryHeap<Reverse<(u64, usize)>> = BinaryHeap::with_capacity(boards);
    let mut state = vec![(0u32, Duration::ZERO); boards];
    let wait = |s: &mut (u32, Duration), rng: &mut Rng| -> u64 {
        s.0 += 1;
        s.1 = match new {
            true => full_jitter(s.0, cap, rng.unit()),
            false => before(s.1, rng.unit()),
        };
        s.1.as_millis() as u64
    };
    for (b, s) in state.iter_mut().enumerate() {
        heap.push(Reverse((wait(s, &mut rng), b)));
    }
    let mut last_back = 0;
    while let Some(Reverse((t, b))) = heap.pop() {
        if t >= HORIZON_MS {
            break;
        }
        per_s[(t / 1000) as usize] += 1;
        if t >= outage_ms {
            last_back = last_back.max(t);
            continue;
        }
        let next = t + wait(&mut state[b], &mut rng);
        heap.push(Reverse((next, b)));
    }
    (per_s, last_back)
}

fn main() {
    let boards: usize = std::env::var("NPU_BENCH_BOARDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    let outage_s: u64 = std::env::var("NPU_BENCH_OUTAGE_S")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300);
    let machine = std::process::Command::new("sh")
        .args([
            "-c",
            "echo \"$(date -u +%Y-%m-%dT%H:%MZ); $(uname -m), $(nproc) cores\"",
        ])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    println!(
        "bench backoff: {machine}; {boards} boards, every broker down from 0 s to {outage_s} s"
    );
    report(boards, outage_s);
}

/// Prints the simulation of both policies for `boards` boards and an outage of `outage_s`
/// seconds (`benches/fleet_cluster.rs` prints it too, beside its measured node kill).
pub fn report(boards: usize, outage_s: u64) {
    for (name, new) in [
        ("before (0.1-1.6 s, ±25 %)", false),
        ("full jitter (1 s doubling to 120 s)", true),
    ] {
        let (per_s, last) = simulate(boards, outage_s * 1000, new);
        let total: u64 = per_s.iter().sum();
        println!(
            "policy {name}: {total} attempts in 600 s; last board back at {:.1} s",
            last as f64 / 1000.0
        );
        for minute in 0..10 {
            let m = &per_s[minute * 60..(minute + 1) * 60];
            let sum: u64 = m.iter().sum();
            let peak = m.iter().max().copied().unwrap_or(0);
            println!(
                "  minute {minute}: mean {:>8.0}/s, peak second {peak:>7}",
                sum as f64 / 60.0
            );
        }
        let after = &per_s[outage_s as usize..(outage_s as usize + 10).min(per_s.len())];
        println!("  first 10 s after the recovery: {after:?}");
    }
}
