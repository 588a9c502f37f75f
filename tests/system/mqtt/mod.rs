//! The fleet link against a real mosquitto (started here on a free loopback port) and the real
//! `npu-agent run` process on a temporary board tree: retained status and availability, the last
//! will, broker restart and absence, commands with their lifecycle, hostile payloads, a burst,
//! mTLS, `fleet send` / `fleet watch`, reboot proven by boot_id, Home Assistant discovery.
//! Fixture cases BR-24 (subscriptions lost after reconnect) and BR-26 (a full request channel
//! freezing the loop) are asserted by `br24_*` and `br26_*`.

mod attacks;
mod commands;
mod fleet_tools;
mod home_assistant;
mod ledger;
mod link;

use crate::support::mqtt::*;
use serde_json::{json, Value};
use std::process::Command;
use std::time::{Duration, Instant};

const CASE: &str = "own-rk3588-opi5plus-rknpu-0.9.8-healthy";
const T: Duration = Duration::from_secs(15);

fn key(seed: u8) -> npu_agent::mqtt::command::SigningKey {
    npu_agent::mqtt::command::SigningKey::from_bytes(&[seed; 32])
}

/// Writes the public key of `seed` into the board and returns the config lines that trust it.
/// For the flood attacks: a mosquitto that keeps every queued message for each client
/// (`max_queued_messages 0`, as the operator guide asks of a fleet broker, so the test clients' own
/// copies are never dropped) and board `b1` of [`CASE`] trusting key 1. `None` when mosquitto
/// is missing outside CI.
fn flood_broker_and_board() -> Option<(Broker, Board)> {
    if !require_tool("mosquitto") {
        return None;
    }
    let broker = Broker::start_with(free_port(), "max_queued_messages 0\n");
    let board = Board::from_fixture(CASE, "b1", "");
    board.write(
        "/etc/npu-agent/agent.toml",
        &agent_config(&broker.url(), "b1", &trust(&board, 1)),
    );
    Some((broker, board))
}

fn trust(board: &Board, seed: u8) -> String {
    use ed25519_dalek::pkcs8::{spki::der::pem::LineEnding, EncodePublicKey};
    // Encoded by an independent implementation (ed25519-dalek) of the same seed.
    let pem = ed25519_dalek::SigningKey::from_bytes(&[seed; 32])
        .verifying_key()
        .to_public_key_pem(LineEnding::LF)
        .unwrap();
    // A board path: key files are read under the root, as every board file is.
    board.write("/etc/npu-agent/operator.pub", &pem);
    "[security]\ntrusted_keys = [\"/etc/npu-agent/operator.pub\"]\n".to_string()
}

fn setup(id: &str, extra: &str) -> Option<(Broker, Board)> {
    broker_and_board(CASE, id, extra)
}

fn status_of(c: &Client, board: &str) -> Msg {
    let topic = format!("npu-fleet/{board}/status");
    c.wait_for(T, "a status", |m| m.topic == topic && !m.payload.is_empty())
}

fn lifecycle(c: &Client, topic: &str, status: &str) -> Value {
    let t = topic.to_string();
    let s = status.to_string();
    c.wait_for(T, &format!("{status} on {topic}"), move |m| {
        m.topic == t && m.json()["status"] == s.as_str()
    })
    .json()
}

/// Publishes an unsigned reboot (always refused; a refusal uses no rate-limit slot) and returns
/// every message received until its `rejected` answer. The agent handles one connection's
/// messages in order, so whatever an earlier message caused was published before this answer:
/// a negative check needs this marker, not a fixed wait. `c` must subscribe to `board`'s commands.
fn until_marker(c: &Client, board: &str, id: &str) -> Vec<Msg> {
    let topic = format!("npu-fleet/{board}/cmd/reboot/{id}");
    let p = init_payload(board, "reboot", id, json!({}), now_s(), 60, None);
    c.publish(&topic, &p, false);
    let t0 = Instant::now();
    let mut seen = Vec::new();
    loop {
        for m in c.drain() {
            let done = m.topic == topic && m.json()["status"] == "rejected";
            seen.push(m);
            if done {
                return seen;
            }
        }
        assert!(t0.elapsed() < T, "no answer to the ordering marker {topic}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Collects `c`'s messages until `enough` holds for all of them or `max` has passed (a settle
/// period that ends as soon as its condition is met).
fn collect_for(c: &Client, max: Duration, enough: impl Fn(&[Msg]) -> bool) -> Vec<Msg> {
    let t0 = Instant::now();
    let mut seen = Vec::new();
    loop {
        seen.extend(c.drain());
        if enough(&seen) || t0.elapsed() >= max {
            return seen;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The last status seen on each topic.
fn last_status(msgs: &[Msg]) -> std::collections::HashMap<String, String> {
    msgs.iter()
        .map(|m| {
            let st = m.json()["status"].as_str().unwrap_or("").to_string();
            (m.topic.clone(), st)
        })
        .collect()
}

/// Waits until the agent's log holds one of `needles` (a link event the test depends on).
fn wait_log(agent: &Agent, needles: &[&str]) {
    let t0 = Instant::now();
    while !needles.iter().any(|n| agent.log_text().contains(n)) {
        assert!(
            t0.elapsed() < T,
            "none of {needles:?} logged:\n{}",
            agent.log_text()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn agent_bin() -> &'static str {
    env!("CARGO_BIN_EXE_npu-agent")
}

fn run_cli(args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let o = Command::new(agent_bin())
        .args(args)
        .envs(env.iter().copied())
        .output()
        .unwrap();
    (
        o.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// A CA, a server certificate for 127.0.0.1/localhost and a client certificate, as PEM files.
fn pki(dir: &std::path::Path) -> (String, String, String, String, String) {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "npu-agent test CA");
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let issuer = Issuer::new(ca_params, ca_key);
    let server_key = KeyPair::generate().unwrap();
    let server = CertificateParams::new(vec!["localhost".into(), "127.0.0.1".into()])
        .unwrap()
        .signed_by(&server_key, &issuer)
        .unwrap();
    let client_key = KeyPair::generate().unwrap();
    let mut cp = CertificateParams::new(vec!["board-b1".into()]).unwrap();
    cp.distinguished_name.push(DnType::CommonName, "board-b1");
    let client = cp.signed_by(&client_key, &issuer).unwrap();
    let w = |name: &str, text: String| {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p.display().to_string()
    };
    (
        w("ca.pem", ca.pem()),
        w("server.pem", server.pem()),
        w("server.key", server_key.serialize_pem()),
        w("client.pem", client.pem()),
        w("client.key", client_key.serialize_pem()),
    )
}

async fn next_event(link: &mut npu_agent::mqtt::link::Link) -> npu_agent::mqtt::link::LinkEvent {
    tokio::time::timeout(T, link.events.recv())
        .await
        .expect("link event")
        .expect("channel open")
}

/// Publishes, as `n` agents would, a retained availability `online` and a retained status of
/// about 3 KB for `fleet-0000`..., and waits for the last.
fn fill_statuses(broker: &Broker, n: usize) {
    let c = Client::connect(broker.port, &[]);
    let pad = "x".repeat(3000);
    for i in 0..n {
        let body = json!({"health": "pass", "board_id": format!("fleet-{i:04}"),
            "profile": "rk3588-rknpu", "model": "ROCK 5B", "session": 1,
            "metrics": {"cma_free_bytes": 1 << 20}, "note": pad});
        c.publish(
            &format!("npu-fleet/fleet-{i:04}/availability"),
            b"online",
            true,
        );
        c.publish(
            &format!("npu-fleet/fleet-{i:04}/status"),
            body.to_string().as_bytes(),
            true,
        );
    }
    let last = format!("npu-fleet/fleet-{:04}/status", n - 1);
    let probe = Client::connect(broker.port, &[&last]);
    probe.wait_for(T, "the last retained status", |m| m.topic == last);
}

/// A proxy rule that cuts the connection in place of the first `n` packets `hit` matches.
fn cut_first(
    n: usize,
    hit: impl Fn(crate::support::proxy::Dir, &[u8]) -> bool + Send + 'static,
) -> crate::support::proxy::Rule {
    use crate::support::proxy::Fault;
    let mut left = n;
    std::sync::Arc::new(std::sync::Mutex::new(move |d, p: &[u8]| {
        if left > 0 && hit(d, p) {
            left -= 1;
            Fault::Cut
        } else {
            Fault::Pass
        }
    }))
}

/// `fleet watch --once --format json` through a proxy that cuts the connection at the 20th
/// retained PUBLISH of each of its first `cuts` connections: exit code, the JSON, stderr.
fn watch_cut(broker_port: u16, cuts: usize) -> (i32, Value, String) {
    use crate::support::proxy::{packet_type, Dir, Fault, Proxy};
    let (mut publishes, mut done) = (0, 0);
    let rule = move |d: Dir, p: &[u8]| {
        if d == Dir::Down && packet_type(p) == 3 && done < cuts {
            publishes += 1;
            if publishes == 20 {
                (publishes, done) = (0, done + 1);
                return Fault::Cut;
            }
        }
        Fault::Pass
    };
    let proxy = Proxy::start(
        broker_port,
        std::sync::Arc::new(std::sync::Mutex::new(rule)),
    );
    let url = proxy.url();
    let args = [
        "fleet", "watch", "--once", "--format", "json", "--broker", &url,
    ];
    let (code, out, err) = run_cli(&args, &[]);
    let doc = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}{err}"));
    (code, doc, err)
}

/// `fleet send rescan --board b1` through a proxy to `broker_port` that treats each SUBACK and
/// each PUBLISH to the client with `fault` (with the number of SUBACKs so far: 1 is the
/// replies', 2 the target's): exit code, stdout, stderr.
fn send_through(
    broker_port: u16,
    extra: &[&str],
    fault: impl Fn(u32, &[u8]) -> crate::support::proxy::Fault + Send + 'static,
) -> (i32, String, String) {
    use crate::support::proxy::{packet_type, Dir, Fault, Proxy};
    let mut n = 0;
    let rule = move |d: Dir, p: &[u8]| {
        if d == Dir::Down && [3, 9].contains(&packet_type(p)) {
            n += u32::from(packet_type(p) == 9);
            return fault(n, p);
        }
        Fault::Pass
    };
    let proxy = Proxy::start(
        broker_port,
        std::sync::Arc::new(std::sync::Mutex::new(rule)),
    );
    let url = proxy.url();
    let mut args = vec!["fleet", "send", "rescan", "--board", "b1", "--broker", &url];
    args.extend_from_slice(extra);
    run_cli(&args, &[])
}

/// Publishes at QoS 2 (the test client speaks QoS 1), from its own connection.
/// `once`: the connection ends at its first error (a thief's), else it reconnects.
fn qos2_publisher(
    port: u16,
    client_id: &str,
    once: bool,
) -> (rumqttc::Client, std::thread::JoinHandle<()>) {
    let mut o = rumqttc::MqttOptions::new(client_id, "127.0.0.1", port);
    o.set_keep_alive(Duration::from_secs(5));
    // Within mosquitto's max_inflight_messages (20) for what a client sends.
    o.set_inflight(10);
    let (client, mut conn) = rumqttc::Client::new(o, 1000);
    let thread = std::thread::spawn(move || {
        for ev in conn.iter() {
            match ev {
                Ok(rumqttc::Event::Outgoing(rumqttc::Outgoing::Disconnect)) if once => return,
                Err(_) if once => return,
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
                Ok(_) => {}
            }
        }
    });
    (client, thread)
}

/// The retained `init`s of an unsigned rescan flood for board `b1`, in publish order:
/// `count` commands `<prefix>-<i>` valid for `lifetime_s` seconds, and after the middle one a
/// rescan `signed_id` signed with key 1. Pairs of (topic, payload).
fn rescan_flood(
    prefix: &str,
    count: usize,
    lifetime_s: i64,
    signed_id: &str,
) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::with_capacity(count + 1);
    for i in 0..count {
        let id = format!("{prefix}-{i}");
        out.push((
            format!("npu-fleet/b1/cmd/rescan/{id}"),
            init_payload("b1", "rescan", &id, json!({}), now_s(), lifetime_s, None),
        ));
        if i == count / 2 {
            out.push((
                format!("npu-fleet/b1/cmd/rescan/{signed_id}"),
                init_payload(
                    "b1",
                    "rescan",
                    signed_id,
                    json!({}),
                    now_s(),
                    lifetime_s,
                    Some(&key(1)),
                ),
            ));
        }
    }
    out
}

/// What a fresh subscriber to `b1`'s retained rescan commands sees within `settle`: how many
/// are in a final state (`successful`, `rejected`, `failed`), how many topics it saw, and the
/// status of `signed_topic`. Returns early once every topic seen is final, the signed one is
/// `successful` and nothing new came for 200 ms (the retained burst has been delivered).
fn retained_rescan_finals(
    port: u16,
    settle: Duration,
    signed_topic: &str,
) -> (usize, usize, Option<String>) {
    let check = Client::connect(port, &["npu-fleet/b1/cmd/rescan/+"]);
    let is_final = |s: &String| ["successful", "rejected", "failed"].contains(&s.as_str());
    let t0 = Instant::now();
    let mut quiet_since = Instant::now();
    let mut finals = std::collections::HashMap::new();
    loop {
        let new = check.drain();
        if !new.is_empty() {
            quiet_since = Instant::now();
        }
        finals.extend(last_status(&new));
        let settled = !finals.is_empty()
            && finals.values().all(is_final)
            && finals.get(signed_topic).map(String::as_str) == Some("successful")
            && quiet_since.elapsed() >= Duration::from_millis(200);
        if settled || t0.elapsed() >= settle {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let done = finals.values().filter(|s| is_final(s)).count();
    (done, finals.len(), finals.get(signed_topic).cloned())
}

/// Board `b1`'s agent connected to `broker` through a proxy applying `rule` to every packet.
fn behind_proxy(
    broker: &Broker,
    board: &Board,
    rule: impl FnMut(crate::support::proxy::Dir, &[u8]) -> crate::support::proxy::Fault + Send + 'static,
) -> (crate::support::proxy::Proxy, Agent) {
    let proxy = crate::support::proxy::Proxy::start(
        broker.port,
        std::sync::Arc::new(std::sync::Mutex::new(rule)),
    );
    board.write(
        "/etc/npu-agent/agent.toml",
        &agent_config(&proxy.url(), "b1", ""),
    );
    let agent = Agent::start(board);
    (proxy, agent)
}
