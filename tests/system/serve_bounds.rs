//! `fleet serve`'s bounds on the real process (issue 38's attack review): a client trickling
//! its request headers a byte at a time is closed by the server's header-read timeout while
//! others are answered, and `--max-unsealed-boards` holds against a flood of invented board ids
//! published on a real mosquitto.

use super::serve::{ids, Serve};
use crate::support::mqtt::*;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

/// Opens a connection to `addr` and trickles a request's headers a byte every 100 ms; returns
/// how long until the server closed it (`None`: still open after `give_up`).
fn trickle(addr: SocketAddr, give_up: Duration) -> Option<Duration> {
    let t0 = Instant::now();
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let head = format!("GET /metrics HTTP/1.1\r\nHost: {addr}\r\nX-Slow: ");
    s.write_all(head.as_bytes()).ok()?;
    let mut buf = [0_u8; 512];
    while t0.elapsed() < give_up {
        match s.read(&mut buf) {
            Ok(0) => return Some(t0.elapsed()),
            Ok(_) => {}
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock) => {}
            Err(e) if matches!(e.kind(), std::io::ErrorKind::TimedOut) => {}
            Err(_) => return Some(t0.elapsed()),
        }
        if s.write_all(b"a").is_err() {
            return Some(t0.elapsed());
        }
    }
    None
}

#[test]
fn serve_closes_a_client_trickling_its_headers_and_holds_only_its_cap_of_unsealed_boards() {
    if !require_tool("mosquitto") {
        return;
    }
    let broker = Broker::start();
    let dir = tempfile::tempdir().unwrap();
    let (state, known) = (dir.path().join("state"), dir.path().join("known_boards"));
    let s = Serve::start(
        &broker.url(),
        &state,
        &known,
        &["--max-unsealed-boards", "3"],
    );
    let addr: SocketAddr = s.addr.parse().unwrap();
    let slow = std::thread::spawn(move || trickle(addr, Duration::from_secs(60)));
    let publisher = Client::connect(broker.port, &[]);
    for i in 0..50 {
        let status = format!(r#"{{"health":"fail","board":"fake{i}"}}"#);
        publisher.publish(
            &format!("npu-fleet/fake{i:02}/status"),
            status.as_bytes(),
            false,
        );
    }
    let v = s.wait_json("/api/boards", "the last invented board", |v| {
        ids(v).iter().any(|b| b == "fake49")
    });
    assert_eq!(ids(&v), ["fake47", "fake48", "fake49"]);
    let (code, page) = s.get("/");
    assert_eq!(code, 200);
    assert!(page.contains("at most 3 such rows"), "{page}");
    let took = slow.join().unwrap();
    let took = took.expect("a client trickling its headers for 60 s was never closed");
    let timeout = Duration::from_secs(npu_agent::fleet::serve::server::HEADER_READ_TIMEOUT_S);
    assert!(
        took >= timeout - Duration::from_millis(500) && took < timeout * 3,
        "closed after {took:?}"
    );
}
