//! `fleet serve` against a fleet that publishes faster than the service checks seals (issue 38's
//! bench found it): mosquitto with its defaults queues at most 1000 messages for a client and
//! drops the rest, so the service must read its subscription as fast as the broker sends.

use crate::serve::Serve;
use crate::support::mqtt::*;
use npu_agent::mqtt::ed25519::SigningKey;
use std::time::{Duration, Instant};

/// Boards, each a status of about 2 KB as a compact one is: some 40 MB in all, far more than the
/// broker's queue and the sockets' buffers hold.
const BOARDS: usize = 20_000;

fn key(i: usize) -> SigningKey {
    let mut seed = [0x33; 32];
    seed[..8].copy_from_slice(&(i as u64).to_le_bytes());
    SigningKey::from_bytes(&seed)
}

/// The page's count of boards with a sealed `ok` status.
fn ok_count(s: &Serve) -> u64 {
    let (_, html) = s.get("/?q=no-such-board");
    let at = html.find("id=\"count-ok\">").map_or(html.len(), |i| i + 14);
    let digits: String = html[at..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().unwrap_or(0)
}

#[test]
fn serve_takes_every_board_of_a_burst_faster_than_its_seal_checks_on_default_mosquitto() {
    if !require_tool("mosquitto") {
        return;
    }
    let broker = Broker::start();
    let dir = tempfile::tempdir().unwrap();
    let (state, known) = (dir.path().join("state"), dir.path().join("known_boards"));
    let mut pinned = String::new();
    let mut statuses = Vec::new();
    let time = npu_agent::sys::time::rfc3339_now();
    let pad = "x".repeat(1800);
    for i in 0..BOARDS {
        let (id, k) = (format!("burst-{i:05}"), key(i));
        let vk = npu_agent::mqtt::board_sig::key_text(&k.verifying_key());
        pinned.push_str(&format!("{id} {vk}\n"));
        let topic = format!("npu-fleet/{id}/status");
        let body = format!(
            r#"{{"health":"ok","agent_version":"0.1.0","time":"{time}","interval_s":60,"findings":[],"note":"{pad}"}}"#
        );
        statuses.push((
            topic.clone(),
            npu_agent::mqtt::board_sig::seal(&k, &topic, body.into_bytes()),
        ));
    }
    std::fs::write(&known, pinned).unwrap();
    let s = Serve::start(
        &broker.url(),
        &state,
        &known,
        &["--metrics-boards", "failing"],
    );
    // Subscribed: a first board's status is counted.
    let c = Client::connect(broker.port, &[]);
    c.publish(&statuses[0].0, &statuses[0].1, false);
    let t0 = Instant::now();
    while ok_count(&s) == 0 {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "serve took no status"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // The burst, not retained: a status the broker drops never comes again.
    for (t, p) in &statuses[1..] {
        c.publish(t, p, false);
    }
    let t0 = Instant::now();
    let mut last = (0, Instant::now());
    loop {
        let n = ok_count(&s);
        if n as usize == BOARDS {
            break;
        }
        if n != last.0 {
            last = (n, Instant::now());
        }
        assert!(
            last.1.elapsed() < Duration::from_secs(60) && t0.elapsed() < Duration::from_secs(300),
            "serve took {n} of {BOARDS} boards (none more for 60 s: the broker dropped the rest)"
        );
        // Each poll renders the whole fleet: not more often than once a second.
        std::thread::sleep(Duration::from_secs(1));
    }
}
