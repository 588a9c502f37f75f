//! Fleet-link benchmarks (printed, not asserted), against a real mosquitto on loopback and the
//! release `npu-agent`:
//! - command round trip: `rescan` init published -> `successful` received, p50/p99 over 200;
//! - broker restart -> `online` + status again, 5 rounds;
//! - `fleet watch --once --format json` over 10,000 retained board statuses;
//! - the agent's VmRSS / VmHWM after 1,000 check cycles (rescans);
//! - first status after starting the agent, and `offline` after `kill -9`.
//!
//! Run: `cargo bench --bench mqtt` (needs mosquitto).

// Tests build board trees and fixtures with plain writes (clippy.toml: disallowed_methods).
#![allow(clippy::disallowed_methods)]

#[path = "../tests/support/mqtt.rs"]
mod support;

use serde_json::json;
use std::time::{Duration, Instant};
use support::*;

fn pct(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

fn rss(pid: u32) -> (String, String) {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let get = |k: &str| {
        s.lines()
            .find(|l| l.starts_with(k))
            .map(|l| l[k.len()..].trim().to_string())
            .unwrap_or_default()
    };
    (get("VmRSS:"), get("VmHWM:"))
}

fn operator_key() -> npu_agent::mqtt::command::SigningKey {
    npu_agent::mqtt::command::SigningKey::from_bytes(&[3u8; 32])
}

fn rescan(c: &Client, id: &str) -> f64 {
    let topic = format!("npu-fleet/b1/cmd/rescan/{id}");
    let t0 = Instant::now();
    c.publish(
        &topic,
        // Signed: unsigned rescans are rate limited (one per 5 s), signed ones are not.
        &init_payload(
            "b1",
            "rescan",
            id,
            json!({}),
            now_s(),
            60,
            Some(&operator_key()),
        ),
        false,
    );
    c.wait_for(Duration::from_secs(10), "successful", |m| {
        m.topic == topic && m.json()["status"] == "successful"
    });
    t0.elapsed().as_secs_f64() * 1000.0
}

/// `date; machine, cores, CPU; load` for the figures' header line.
fn machine_line() -> String {
    let sh = |c: &str| {
        std::process::Command::new("sh")
            .args(["-c", c])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_default()
    };
    sh("echo \"$(date -u +%Y-%m-%dT%H:%MZ); $(uname -m), $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'); load $(cut -d' ' -f1-3 /proc/loadavg)\"")
}

fn main() {
    if !require_tool("mosquitto") {
        return;
    }
    println!("mqtt bench: {}", machine_line());
    // A broker sized for a fleet: mosquitto keeps at most 1,000 queued messages per client by
    // default and drops the rest, which would cut `fleet watch` short on 10,000 boards.
    let mut broker = Broker::start_with(free_port(), "max_queued_messages 0\nmax_queued_bytes 0");
    let board = Board::from_fixture("own-rk3588-opi5plus-rknpu-0.9.8-healthy", "b1", "");
    // The agent reads `trusted_keys` under its --root, like every file its config names.
    board.write(
        "/etc/npu-agent/operator.pub",
        &operator_key().verifying_key().to_public_key_pem(),
    );
    let extra = "[report]\n[security]\ntrusted_keys = [\"/etc/npu-agent/operator.pub\"]\n";
    board.write(
        "/etc/npu-agent/agent.toml",
        &agent_config(&broker.url(), "b1", extra).replace(
            "[report]\ninterval_s = 2\n\n[report]\n",
            "[report]\ninterval_s = 60\n",
        ),
    );
    // 0. First status: from starting `npu-agent run` to its status on the broker.
    let c = Client::connect(broker.port, &["npu-fleet/b1/#"]);
    let started = Instant::now();
    let mut agent = Agent::start(&board);
    let status = c.wait_for(Duration::from_secs(10), "status", |m| {
        m.topic == "npu-fleet/b1/status"
    });
    println!(
        "first status: {:.0} ms after starting npu-agent run (process start, first check cycle, connect, publish)",
        (status.at - started).as_secs_f64() * 1000.0
    );
    println!("status message: {} bytes", status.payload.len());

    // 1. Round trip.
    for i in 0..5 {
        rescan(&c, &format!("warm-{i}"));
    }
    let mut rtt: Vec<f64> = (0..200).map(|i| rescan(&c, &format!("rtt-{i}"))).collect();
    println!(
        "command round trip (rescan init -> successful), 200 commands: p50 {:.2} ms, p99 {:.2} ms",
        pct(&mut rtt, 0.5),
        pct(&mut rtt, 0.99)
    );

    // 2. Broker restart -> online + status.
    let mut restarts = Vec::new();
    for round in 0..5 {
        if round > 0 {
            // A connection dropped within 10 s of its CONNACK counts as a kick and is retried
            // with a growing back-off (another client with this board id looks the same): let
            // each reconnection settle first, so every round measures a plain outage.
            std::thread::sleep(Duration::from_secs(11));
        }
        broker.stop();
        std::thread::sleep(Duration::from_millis(500));
        broker.restart();
        let t0 = Instant::now();
        let c2 = Client::connect(broker.port, &["npu-fleet/b1/#"]);
        c2.wait_for(Duration::from_secs(20), "online", |m| {
            m.topic == "npu-fleet/b1/availability" && m.text() == "online"
        });
        c2.wait_for(Duration::from_secs(20), "status", |m| {
            m.topic == "npu-fleet/b1/status"
        });
        restarts.push(t0.elapsed().as_secs_f64() * 1000.0);
    }
    println!(
        "broker restart (0.5 s down, rounds 11 s apart) -> online + status (ms after the broker accepts connections): {:?}",
        restarts
            .iter()
            .map(|v| format!("{v:.0}"))
            .collect::<Vec<_>>()
    );

    // 3. fleet watch over 10,000 retained statuses.
    let c = Client::connect(broker.port, &[]);
    let body = status.text();
    for i in 0..10_000 {
        c.publish(
            &format!("npu-fleet/bench-{i:05}/status"),
            body.replace(
                "\"board_id\":\"b1\"",
                &format!("\"board_id\":\"bench-{i:05}\""),
            )
            .as_bytes(),
            true,
        );
    }
    // Wait until the broker holds the last one (publishing 60 MB takes a moment).
    let probe = Client::connect(broker.port, &["npu-fleet/bench-09999/status"]);
    probe.wait_for(
        Duration::from_secs(120),
        "the 10,000th retained status",
        |m| m.topic == "npu-fleet/bench-09999/status",
    );
    let t0 = Instant::now();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_npu-agent"))
        .args([
            "fleet",
            "watch",
            "--broker",
            &broker.url(),
            "--once",
            "--format",
            "json",
        ])
        .output()
        .unwrap();
    let took = t0.elapsed();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
    println!(
        "fleet watch --once over 10,000 retained statuses: {:.2} s, {} boards listed (includes about 0.9 s of quiet that ends its steps)",
        took.as_secs_f64(),
        v["boards"].as_array().map(|a| a.len()).unwrap_or(0)
    );
    for i in 0..10_000 {
        c.publish(&format!("npu-fleet/bench-{i:05}/status"), b"", true);
    }

    // 4. RSS after 1,000 cycles.
    let c = Client::connect(broker.port, &["npu-fleet/b1/#"]);
    std::thread::sleep(Duration::from_millis(300));
    let (r0, h0) = rss(agent.pid());
    for i in 0..1000 {
        rescan(&c, &format!("cycle-{i}"));
    }
    let (r1, h1) = rss(agent.pid());
    println!("agent VmRSS/VmHWM: at start {r0} / {h0}; after 1,000 check cycles {r1} / {h1}");

    // 5. kill -9 -> `offline` (the broker publishes the last will when the socket closes).
    let c = Client::connect(broker.port, &["npu-fleet/b1/availability"]);
    c.wait_for(Duration::from_secs(10), "online", |m| m.text() == "online");
    let t0 = Instant::now();
    agent.kill();
    let off = c.wait_for(Duration::from_secs(20), "offline (last will)", |m| {
        m.text() == "offline"
    });
    println!(
        "kill -9 -> offline (last will): {:.1} ms",
        (off.at - t0).as_secs_f64() * 1000.0
    );
}
