//! The simulated boards of `fleet_cluster` (one worker process's share): each a connection of
//! its own, as an agent's. The coordinator gives a worker its boards in its environment and
//! says `retained` on its stdin; the worker prints its counters (`S` and [`COUNTERS`] numbers,
//! in the order of the constants below) every 250 ms.

use npu_agent::mqtt::board_sig::seal;
use npu_agent::mqtt::ed25519::SigningKey;
use npu_agent::mqtt::link::{full_jitter, BACKOFF_RESET};
use rumqttc::{AsyncClient, Event, LastWill, MqttOptions, NetworkOptions, Packet, QoS};
use std::io::{BufRead, Write};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Boards connected now.
pub const CONNECTED: usize = 0;
/// 1, 2, 3: boards connected now to each node.
pub const NODE0: usize = 1;
/// Boards that have had their availability and status acknowledged and their SUBACK.
pub const READY: usize = 4;
/// Connection attempts.
pub const ATTEMPTS: usize = 5;
/// Commands received (one per board and command).
pub const CMDS: usize = 6;
/// Final answers sent.
pub const FINALS: usize = 7;
/// Offline boards published retained (both messages acknowledged).
pub const RETAINED: usize = 8;
/// How many counters.
pub const COUNTERS: usize = 9;

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A worker's share, from its environment.
struct Cfg {
    worker: String,
    live: (usize, usize),
    retained: (usize, usize),
    ports: Vec<u16>,
    hosts: usize,
    template: String,
}

type Shared = Arc<[AtomicU64; COUNTERS]>;

fn add(c: &Shared, i: usize, d: i64) {
    match d >= 0 {
        true => c[i].fetch_add(d as u64, Relaxed),
        false => c[i].fetch_sub(d.unsigned_abs(), Relaxed),
    };
}

/// The worker process: its boards, until the coordinator closes its stdin.
pub fn worker_main() {
    let var = |k: &str| std::env::var(k).unwrap_or_default();
    let range = |k: &str| {
        let v: Vec<usize> = var(k).split(' ').filter_map(|x| x.parse().ok()).collect();
        (v[0], v[1])
    };
    let cfg = Arc::new(Cfg {
        worker: var("NPU_BENCH_WORKER"),
        live: range("NPU_BENCH_LIVE_RANGE"),
        retained: range("NPU_BENCH_RET_RANGE"),
        ports: var("NPU_BENCH_PORTS")
            .split(' ')
            .filter_map(|x| x.parse().ok())
            .collect(),
        hosts: var("NPU_BENCH_HOSTS").parse().unwrap_or(1),
        template: std::fs::read_to_string(var("NPU_BENCH_TEMPLATE")).unwrap(),
    });
    let c: Shared = Arc::new(std::array::from_fn(|_| AtomicU64::new(0)));
    let go = Arc::new(AtomicBool::new(false));
    let g = go.clone();
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines() {
            match line {
                Ok(l) if l == "retained" => g.store(true, Relaxed),
                Ok(_) => {}
                Err(_) => break,
            }
        }
        std::process::exit(0); // the coordinator is gone
    });
    let c2 = c.clone();
    std::thread::spawn(move || loop {
        let v: Vec<String> = c2.iter().map(|a| a.load(Relaxed).to_string()).collect();
        let mut out = std::io::stdout().lock();
        if writeln!(out, "S {}", v.join(" "))
            .and_then(|_| out.flush())
            .is_err()
        {
            std::process::exit(0);
        }
        drop(out);
        std::thread::sleep(Duration::from_millis(250));
    });
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let inflight = env_u64("NPU_BENCH_INFLIGHT", 64) as usize;
    rt.block_on(async move {
        let sem = Arc::new(tokio::sync::Semaphore::new(inflight));
        for i in cfg.live.0..cfg.live.1 {
            tokio::spawn(board(i, cfg.clone(), c.clone(), sem.clone()));
        }
        while !go.load(Relaxed) {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        retained(&cfg, &c).await;
        std::future::pending::<()>().await
    });
}

/// Simulated board `i`'s id.
pub fn board_id(i: usize) -> String {
    format!("sim-{i:06}")
}

/// A board's own key (a seed from its number), as an agent makes one on its first start.
pub fn key_for(i: usize) -> SigningKey {
    let mut seed = [0x5a; 32];
    seed[..8].copy_from_slice(&(i as u64).to_le_bytes());
    SigningKey::from_bytes(&seed)
}

/// Board `id`'s status from `template` (its id and the time now filled in), sealed by `key`.
pub fn status(template: &str, id: &str, key: &SigningKey) -> Vec<u8> {
    let body = template
        .replace("@@BOARD@@", id)
        .replace("@@TIME@@", &npu_agent::sys::time::rfc3339_now());
    seal(key, &format!("npu-fleet/{id}/status"), body.into_bytes())
}

/// One simulated board: connects (first through the ramp's semaphore), and after a drop waits
/// by the agent's back-off and tries another node.
async fn board(i: usize, cfg: Arc<Cfg>, c: Shared, sem: Arc<tokio::sync::Semaphore>) {
    let nodes = cfg.ports.len();
    let host = format!("127.0.0.{}", 1 + (i / nodes) % cfg.hosts);
    let mut node = i % nodes;
    // Half the boards go round their list one way, half the other (lists in different orders,
    // as behind a load balancer): a dead node's boards spread over the others.
    let step = 1 + (i / nodes) % (nodes - 1).max(1);
    let mut permit = sem.acquire_owned().await.ok();
    let mut b = Sim {
        id: board_id(i),
        key: key_for(i),
        ready: false,
        answered: String::new(),
    };
    let mut rng = (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut failures = 0u32;
    loop {
        add(&c, ATTEMPTS, 1);
        let up = b.session(&cfg, &c, &host, node, &mut permit).await;
        permit = None;
        failures = match up {
            Some(d) if d >= BACKOFF_RESET => 1,
            _ => failures + 1,
        };
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let r = (rng >> 11) as f64 / (1u64 << 53) as f64;
        tokio::time::sleep(full_jitter(failures, Duration::from_secs(120), r)).await;
        node = (node + step) % nodes;
    }
}

struct Sim {
    id: String,
    key: SigningKey,
    ready: bool,
    answered: String,
}

impl Sim {
    /// One connection, until it drops: how long it was up after its CONNACK.
    async fn session(
        &mut self,
        cfg: &Cfg,
        c: &Shared,
        host: &str,
        node: usize,
        permit: &mut Option<tokio::sync::OwnedSemaphorePermit>,
    ) -> Option<Duration> {
        let avail = format!("npu-fleet/{}/availability", self.id);
        let mut o = MqttOptions::new(self.id.clone(), host, cfg.ports[node]);
        o.set_keep_alive(Duration::from_secs(60))
            .set_clean_session(true)
            .set_inflight(8)
            .set_max_packet_size(1 << 18, 1 << 18)
            .set_last_will(LastWill::new(&avail, "offline", QoS::AtLeastOnce, true));
        let (client, mut ev) = AsyncClient::new(o, 16);
        let mut net = NetworkOptions::new();
        net.set_connection_timeout(20);
        ev.set_network_options(net);
        let (mut up, mut acks) = (None, 0);
        loop {
            match ev.poll().await {
                Ok(Event::Incoming(Packet::ConnAck(_))) => {
                    up = Some(Instant::now());
                    *permit = None;
                    add(c, CONNECTED, 1);
                    add(c, NODE0 + node, 1);
                    let filters = [
                        format!("npu-fleet/{}/cmd/+/+", self.id),
                        "npu-fleet/all/cmd/+/+".into(),
                    ]
                    .map(|f| rumqttc::SubscribeFilter::new(f, QoS::AtMostOnce));
                    let _ = client.try_subscribe_many(filters);
                    let _ = client.try_publish(&avail, QoS::AtLeastOnce, true, "online");
                    let st = status(&cfg.template, &self.id, &self.key);
                    let _ = client.try_publish(
                        format!("npu-fleet/{}/status", self.id),
                        QoS::AtLeastOnce,
                        true,
                        st,
                    );
                }
                Ok(Event::Incoming(Packet::SubAck(_) | Packet::PubAck(_))) if !self.ready => {
                    acks += 1;
                    if acks == 3 {
                        self.ready = true;
                        add(c, READY, 1);
                    }
                }
                Ok(Event::Incoming(Packet::Publish(p))) => {
                    self.command(&client, &p.topic, &p.payload, c)
                }
                Ok(_) => {}
                Err(_) => break,
            }
        }
        if up.is_some() {
            add(c, CONNECTED, -1);
            add(c, NODE0 + node, -1);
        }
        up.map(|t| t.elapsed())
    }

    /// An `init` on `npu-fleet/<me|all>/cmd/<action>/<cmd_id>` (once per cmd_id): `executing`,
    /// then `successful`, retained and sealed, as an agent answers a rescan.
    fn command(&mut self, client: &AsyncClient, topic: &str, payload: &[u8], c: &Shared) {
        let parts: Vec<&str> = topic.split('/').collect();
        let [_, _, "cmd", action, cmd_id] = parts[..] else {
            return;
        };
        let init = payload.windows(15).any(|w| w == b"\"status\":\"init\"");
        if !init || cmd_id == self.answered {
            return;
        }
        self.answered = cmd_id.to_string();
        add(c, CMDS, 1);
        let t = format!("npu-fleet/{}/cmd/{action}/{cmd_id}", self.id);
        for (state, extra) in [
            ("executing", ""),
            ("successful", ",\"result\":{\"health\":\"ok\"}"),
        ] {
            let body = format!(
                "{{\"status\":\"{state}\",\"board\":\"{}\",\"action\":\"{action}\",\"cmd_id\":\"{cmd_id}\",\"time\":\"{}\"{extra}}}",
                self.id,
                npu_agent::sys::time::rfc3339_now()
            );
            let _ = client.try_publish(
                &t,
                QoS::AtLeastOnce,
                true,
                seal(&self.key, &t, body.into_bytes()),
            );
        }
        add(c, FINALS, 1);
    }
}

/// The boards past the connected ones: a retained `offline` and a retained status each,
/// through one connection per node.
async fn retained(cfg: &Cfg, c: &Shared) {
    let nodes = cfg.ports.len();
    let mut jobs = Vec::new();
    for node in 0..nodes {
        let mut o = MqttOptions::new(
            format!("sim-pub-{}-{node}", cfg.worker),
            "127.0.0.1",
            cfg.ports[node],
        );
        o.set_keep_alive(Duration::from_secs(60))
            .set_inflight(100)
            .set_max_packet_size(1 << 18, 1 << 18);
        let (client, mut ev) = AsyncClient::new(o, 256);
        let c2 = c.clone();
        tokio::spawn(async move {
            let mut acks = 0u64;
            loop {
                match ev.poll().await {
                    Ok(Event::Incoming(Packet::PubAck(_))) => {
                        acks += 1;
                        if acks % 2 == 0 {
                            add(&c2, RETAINED, 1);
                        }
                    }
                    Ok(_) => {}
                    Err(_) => tokio::time::sleep(Duration::from_secs(1)).await,
                }
            }
        });
        let ids: Vec<usize> = (cfg.retained.0..cfg.retained.1)
            .filter(|i| i % nodes == node)
            .collect();
        let template = cfg.template.clone();
        jobs.push(tokio::spawn(async move {
            for i in ids {
                let id = board_id(i);
                let a = format!("npu-fleet/{id}/availability");
                let _ = client.publish(a, QoS::AtLeastOnce, true, "offline").await;
                let st = status(&template, &id, &key_for(i));
                let _ = client
                    .publish(format!("npu-fleet/{id}/status"), QoS::AtLeastOnce, true, st)
                    .await;
            }
        }));
    }
    for j in jobs {
        let _ = j.await;
    }
}
