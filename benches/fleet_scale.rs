//! Fleet scale (printed, not asserted): `fleet watch --once --format json` over many boards
//! (each a retained availability and a retained compact status, as agents leave them) on one mosquitto with its default limits (`max_queued_messages 1000`), on
//! loopback, and again with `max_queued_messages 0`; wall time, peak memory (VmHWM) of the `fleet watch` process, boards listed; and the
//! size of one status in the full and the compact form.
//!
//! Run: `cargo bench --bench fleet_scale` (needs mosquitto); `NPU_BENCH_BOARDS` sets the count
//! (default 100,000).

// Tests build board trees and fixtures with plain writes (clippy.toml: disallowed_methods).
#![allow(clippy::disallowed_methods)]

#[path = "../tests/support/mqtt.rs"]
mod support;

use std::time::{Duration, Instant};
use support::*;

fn main() {
    if !require_tool("mosquitto") {
        return;
    }
    let n: usize = std::env::var("NPU_BENCH_BOARDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    // One status of a real board tree, in both forms.
    let case = "own-rk3588-opi5plus-rknpu-0.9.8-healthy";
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/boards")
        .join(case)
        .join("root");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_npu-agent"))
        .args(["check", "--format", "json", "--root"])
        .arg(&root)
        .output()
        .unwrap();
    let report: npu_agent::report::Report = serde_json::from_slice(&out.stdout).unwrap();
    let full = serde_json::to_vec(&report).unwrap();
    let compact = serde_json::to_vec(&npu_agent::report::compact(&report, false)).unwrap();
    println!(
        "one status ({case}): full {} bytes, compact {} bytes",
        full.len(),
        compact.len()
    );

    // mosquitto defaults (max_queued_messages 1000), then with the per-client queue lifted.
    for (limits, extra) in [
        ("mosquitto defaults", ""),
        ("max_queued_messages 0", "max_queued_messages 0"),
    ] {
        let broker = Broker::start_with(free_port(), extra);
        let c = Client::connect(broker.port, &[]);
        let body = String::from_utf8(compact.clone()).unwrap();
        let id = format!("\"board_id\":\"{}\"", report.board_id);
        let t0 = Instant::now();
        for i in 0..n {
            // As an agent does: a retained availability, then its retained status.
            c.publish(
                &format!("npu-fleet/bench-{i:06}/availability"),
                b"online",
                true,
            );
            c.publish(
                &format!("npu-fleet/bench-{i:06}/status"),
                body.replace(&id, &format!("\"board_id\":\"bench-{i:06}\""))
                    .as_bytes(),
                true,
            );
        }
        let last = format!("npu-fleet/bench-{:06}/status", n - 1);
        let probe = Client::connect(broker.port, &[&last]);
        probe.wait_for(Duration::from_secs(600), "the last retained status", |m| {
            m.topic == last
        });
        println!(
            "published {n} retained availabilities and compact statuses in {:.1} s",
            t0.elapsed().as_secs_f64()
        );
        let t0 = Instant::now();
        let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_npu-agent"))
            .args([
                "fleet",
                "watch",
                "--broker",
                &broker.url(),
                "--once",
                "--format",
                "json",
            ])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let pid = child.id();
        // VmHWM is the peak resident set; read it until the process ends.
        let reader = std::thread::spawn(move || {
            let mut peak_kb = 0u64;
            while let Ok(s) = std::fs::read_to_string(format!("/proc/{pid}/status")) {
                if let Some(v) = s
                    .lines()
                    .find(|l| l.starts_with("VmHWM:"))
                    .and_then(|l| l.split_whitespace().nth(1))
                    .and_then(|v| v.parse::<u64>().ok())
                {
                    peak_kb = peak_kb.max(v);
                }
                if s.contains("State:\tZ") {
                    break;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            peak_kb
        });
        let mut stdout = Vec::new();
        let mut stderr = String::new();
        use std::io::Read;
        child
            .stdout
            .take()
            .unwrap()
            .read_to_end(&mut stdout)
            .unwrap();
        child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut stderr)
            .unwrap();
        let status = child.wait().unwrap();
        let took = t0.elapsed();
        let peak_kb = reader.join().unwrap();
        let v: serde_json::Value = serde_json::from_slice(&stdout).unwrap_or_default();
        println!(
        "fleet watch --once over {n} retained compact statuses ({limits}): {:.2} s, peak RSS {:.1} MB, {} boards listed, exit {}{}",
        took.as_secs_f64(),
        peak_kb as f64 / 1024.0,
        v["boards"].as_array().map(|a| a.len()).unwrap_or(0),
        status.code().unwrap_or(-1),
        if stderr.is_empty() { String::new() } else { format!("; stderr: {}", stderr.trim()) }
    );
    }
}
