//! Command subscriptions on a clustered broker (printed, not asserted): NPU_BENCH_BOARDS
//! simulated boards (default 1,000), spread over the three nodes of a NATS cluster (as
//! tests/system/nats.rs starts it), each subscribing its two command filters in one SUBSCRIBE,
//! as the agent does, first at QoS 1 (the default `command_qos`), then, on a fresh cluster, at
//! QoS 0. For each: SUBACK latency (p50, p90, max), refused and missing SUBACKs, the time until
//! a retained `init` published for every board reached it, and the servers' resident memory.
//!
//! Run: `cargo bench --bench nats_subscribe` (needs nats-server).

// Tests build board trees and fixtures with plain writes (clippy.toml: disallowed_methods).
#![allow(clippy::disallowed_methods)]

#[path = "../tests/support/mod.rs"]
mod support;

use rumqttc::{AsyncClient, Event, MqttOptions, Packet, QoS, SubscribeFilter, SubscribeReasonCode};
use std::time::{Duration, Instant};
use support::brokers::{have_nats, NatsCluster};

/// What one simulated board saw.
#[derive(Default, Clone)]
struct Board {
    suback_ms: Option<u128>,
    refused: bool,
    init_at: Option<Instant>,
}

fn main() {
    if !have_nats() {
        return;
    }
    let n: usize = std::env::var("NPU_BENCH_BOARDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    for qos in [QoS::AtLeastOnce, QoS::AtMostOnce] {
        let cluster = NatsCluster::start();
        // JetStream elects its leaders after the ports listen: let the cluster settle.
        std::thread::sleep(Duration::from_secs(5));
        let (boards, sent) = rt.block_on(run(&cluster, n, qos));
        report(qos, &boards, sent, &cluster);
    }
}

/// Connects and subscribes `n` boards, then publishes one retained `init` for each: what each
/// board saw, and when the publishing began.
async fn run(cluster: &NatsCluster, n: usize, qos: QoS) -> (Vec<Board>, Instant) {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(usize, Board)>();
    let mut clients = Vec::new();
    let t0 = Instant::now();
    for i in 0..n {
        let port = cluster.mqtt_ports[i % cluster.mqtt_ports.len()];
        let mut o = MqttOptions::new(format!("npu-agent-bench-{i:05}"), "127.0.0.1", port);
        o.set_keep_alive(Duration::from_secs(60));
        let (client, mut ev) = AsyncClient::new(o, 16);
        let filters = [
            format!("npu-fleet/bench-{i:05}/cmd/+/+"),
            "npu-fleet/all/cmd/+/+".into(),
        ]
        .map(|f| SubscribeFilter::new(f, qos));
        let tx = tx.clone();
        let c = client.clone();
        tokio::spawn(async move {
            let mut b = Board::default();
            let mut asked = None;
            loop {
                match ev.poll().await {
                    Ok(Event::Incoming(Packet::ConnAck(_))) => {
                        asked = Some(Instant::now());
                        let _ = c.subscribe_many(filters.clone()).await;
                    }
                    Ok(Event::Incoming(Packet::SubAck(a))) => {
                        b.suback_ms = asked.map(|t| t.elapsed().as_millis());
                        b.refused = a.return_codes.contains(&SubscribeReasonCode::Failure);
                        let _ = tx.send((i, b.clone()));
                    }
                    Ok(Event::Incoming(Packet::Publish(_))) if b.init_at.is_none() => {
                        b.init_at = Some(Instant::now());
                        let _ = tx.send((i, b.clone()));
                    }
                    Ok(_) => {}
                    Err(_) => tokio::time::sleep(Duration::from_millis(500)).await,
                }
            }
        });
        clients.push(client);
        if i % 50 == 49 {
            // Connect in waves, as boards coming up over minutes do, only faster.
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let mut boards = vec![Board::default(); n];
    let deadline = t0 + Duration::from_secs(120);
    while boards.iter().any(|b| b.suback_ms.is_none()) && Instant::now() < deadline {
        if let Ok(Some((i, b))) = tokio::time::timeout(Duration::from_secs(1), rx.recv()).await {
            boards[i] = b;
        }
    }
    // One retained init per board, from an operator on node 0.
    let (op, mut opev) = AsyncClient::new(
        MqttOptions::new("bench-operator", "127.0.0.1", cluster.mqtt_ports[0]),
        n + 16,
    );
    tokio::spawn(async move {
        loop {
            if opev.poll().await.is_err() {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    });
    let sent = Instant::now();
    for i in 0..n {
        let _ = op
            .publish(
                format!("npu-fleet/bench-{i:05}/cmd/rescan/x{i}"),
                QoS::AtLeastOnce,
                true,
                b"{\"status\":\"init\"}".to_vec(),
            )
            .await;
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while boards.iter().any(|b| b.init_at.is_none()) && Instant::now() < deadline {
        if let Ok(Some((i, b))) = tokio::time::timeout(Duration::from_secs(1), rx.recv()).await {
            boards[i] = b;
        }
    }
    drop(clients);
    (boards, sent)
}

fn pct(sorted: &[u128], p: f64) -> u128 {
    sorted
        .get(((sorted.len() as f64 - 1.0) * p).round() as usize)
        .copied()
        .unwrap_or(0)
}

fn report(qos: QoS, boards: &[Board], sent: Instant, cluster: &NatsCluster) {
    let mut lat: Vec<u128> = boards.iter().filter_map(|b| b.suback_ms).collect();
    lat.sort();
    let refused = boards.iter().filter(|b| b.refused).count();
    let missing = boards.iter().filter(|b| b.suback_ms.is_none()).count();
    let got_init = boards.iter().filter(|b| b.init_at.is_some()).count();
    let last_init_ms = boards
        .iter()
        .filter_map(|b| b.init_at.map(|t| (t - sent).as_millis()))
        .max()
        .unwrap_or(0);
    let rss_kb: u64 = cluster
        .pids()
        .iter()
        .filter_map(|p| std::fs::read_to_string(format!("/proc/{p}/status")).ok())
        .filter_map(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
        })
        .sum();
    println!(
        "bench: NATS 2.9 cluster (3 nodes), {} boards, command subscriptions at QoS {}: SUBACK p50 {} ms, p90 {} ms, max {} ms; {} refused, {} without SUBACK in 120 s; retained init received by {} of {} (the last {} ms after the first was published); servers' VmRSS {} MiB in all",
        boards.len(),
        qos as u8,
        pct(&lat, 0.5),
        pct(&lat, 0.9),
        lat.last().copied().unwrap_or(0),
        refused,
        missing,
        got_init,
        boards.len(),
        last_init_ms,
        rss_kb / 1024
    );
}
