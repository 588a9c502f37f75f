//! The bounds the attack review found missing (issue 38): the cap on unsealed boards, responses
//! rendered outside the fleet's lock, paging of the API, the cap on a board's history rows, and
//! the HTTP server's header-read timeout and connection cap. Each test failed before its fix.

use super::http::Shared;
use super::metrics::Cardinality;
use super::server::Limits;
use super::state::{Fleet, Staleness};
use super::store::{History, Sqlite};
use super::tests::{sealed, NOW};
use crate::fleet::known::KnownBoards;
use crate::mqtt::ed25519::SigningKey;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A fleet in `dir` of at most `max` boards, `unsealed` of them unsealed, taking new keys.
fn fleet_of(dir: &std::path::Path, max: usize, unsealed: usize) -> Fleet {
    let keys = KnownBoards::load_accepting(Some(&dir.join("known_boards")), 1000);
    let store = Box::new(Sqlite::open(dir).unwrap());
    Fleet::new("npu-fleet", max, keys, store, Staleness::AfterS(60)).with_unsealed_cap(unsealed)
}

fn key(i: u8) -> SigningKey {
    SigningKey::from_bytes(&[i; 32])
}

#[test]
fn a_flood_of_invented_board_ids_holds_only_the_unsealed_cap_and_spares_known_boards() {
    let dir = tempfile::tempdir().unwrap();
    let real: Vec<String> = (0..10).map(|i| format!("real{i}")).collect();
    {
        let mut f = fleet_of(dir.path(), 50, 5);
        for (i, b) in real.iter().enumerate() {
            let k = key(u8::try_from(i).unwrap() + 1);
            f.take(
                &format!("npu-fleet/{b}/status"),
                &sealed(&k, b, NOW, "ok", ""),
                NOW,
            );
        }
        f.tick(NOW, None);
    }
    // Restarted: the real boards are in known_boards and their availability comes first, as
    // the broker's retained messages do; then ten thousand invented ids.
    let mut f = fleet_of(dir.path(), 50, 5);
    for b in &real {
        f.take(&format!("npu-fleet/{b}/availability"), b"online", NOW + 1);
    }
    for i in 0..10_000 {
        let b = format!("fake{i}");
        f.take(&format!("npu-fleet/{b}/availability"), b"online", NOW + 2);
        let status = br#"{"health":"fail","time":"2026-12-01T00:00:00Z"}"#;
        f.take(&format!("npu-fleet/{b}/status"), status, NOW + 2);
    }
    let boards = f.boards(NOW + 3);
    let fakes = boards.iter().filter(|v| v.row.board.starts_with("fake"));
    assert!(fakes.count() <= 5, "{} rows", boards.len());
    assert!(boards.len() <= 15, "{} rows held", boards.len());
    for b in &real {
        let v = f.board(b, NOW + 3).unwrap_or_else(|| panic!("{b} went"));
        assert_eq!(v.row.availability, "online", "{b}");
    }
    let notes = f.notes().join("\n");
    assert!(notes.contains("at most 5 such rows"), "{notes}");
    // A real board sealing a status now is held and shown as signed.
    let k = key(1);
    let status = sealed(&k, "real0", NOW + 4, "warn", "");
    f.take("npu-fleet/real0/status", &status, NOW + 4);
    let v = f.board("real0", NOW + 4).unwrap();
    assert_eq!(
        (v.row.identity.as_str(), v.row.health.as_str()),
        ("signed", "warn")
    );
}

/// Serves `shared` on a free loopback port within `limits` (a current-thread runtime on its own
/// thread, as `fleet serve` runs); returns the address.
pub(super) fn start(shared: Arc<Shared>, limits: Limits) -> SocketAddr {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        let router = super::http::router(shared);
        rt.block_on(super::server::serve(listener, router, limits));
    });
    addr
}

/// `GET path` over a fresh connection: the head (lower case) and the body.
pub(super) fn get(addr: SocketAddr, path: &str) -> (String, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
    let req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let text = String::from_utf8(raw).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    (head.to_ascii_lowercase(), body.to_string())
}

/// The `Link: <url>; rel="next"` of a response head.
fn next_link(head: &str) -> Option<String> {
    let line = head.lines().find(|l| l.starts_with("link:"))?;
    let url = line.split('<').nth(1)?.split('>').next()?;
    Some(url.to_string())
}

/// A fleet of `n` boards with unsealed statuses (a failing finding each), served.
pub(super) fn served_fleet(dir: &std::path::Path, n: usize) -> (Arc<Shared>, SocketAddr) {
    let mut f = fleet_of(dir, n + 10, n + 10);
    for i in 0..n {
        let b = format!("b{i:05}");
        let status = format!(
            r#"{{"health":"fail","time":"2026-12-01T00:00:00Z","profile":"rk3588","model":"m",
               "findings":[{{"id":"cma.free","status":"fail","summary":"CMA low {i}"}}],
               "metrics":{{"cma_free_bytes":1048576,"npu_load_percent":40}}}}"#
        );
        f.take(&format!("npu-fleet/{b}/status"), status.as_bytes(), NOW);
        f.take(&format!("npu-fleet/{b}/availability"), b"online", NOW);
    }
    let shared = Arc::new(Shared::new(
        f,
        Cardinality::All,
        "127.0.0.1".parse().unwrap(),
    ));
    let addr = start(shared.clone(), Limits::default());
    (shared, addr)
}

#[test]
fn whole_fleet_responses_are_rendered_after_the_fleet_lock_is_let_go() {
    let dir = tempfile::tempdir().unwrap();
    let (shared, addr) = served_fleet(dir.path(), 20_000);
    for path in ["/metrics", "/inventory.csv", "/", "/api/boards?limit=10000"] {
        let client = std::thread::spawn(move || {
            let t0 = Instant::now();
            let (head, body) = get(addr, path);
            (head, body.len(), t0.elapsed())
        });
        // Meanwhile, as the MQTT link does for every status: take the fleet's lock, again and
        // again, and keep the longest wait. Rendered under the lock, it was about two thirds of
        // the request; copied under it, about a tenth.
        let mut longest = Duration::ZERO;
        while !client.is_finished() {
            let t0 = Instant::now();
            drop(shared.fleet.lock().unwrap());
            longest = longest.max(t0.elapsed());
            std::thread::yield_now();
        }
        let (head, bytes, took) = client.join().unwrap();
        assert!(head.starts_with("http/1.1 200"), "{path}: {head}");
        assert!(bytes > 100_000, "{path}: {bytes} bytes");
        assert!(
            longest < took / 2,
            "{path}: the fleet was locked for {longest:?} of the {took:?} it took"
        );
    }
}

#[test]
fn api_boards_pages_with_a_bounded_limit_and_an_after_cursor() {
    let dir = tempfile::tempdir().unwrap();
    let (_shared, addr) = served_fleet(dir.path(), 10_050);
    let count = |body: &str| {
        let v: serde_json::Value = serde_json::from_str(body).unwrap();
        v.as_array().unwrap().len()
    };
    let (head, body) = get(addr, "/api/boards");
    assert_eq!(count(&body), super::api::DEFAULT_PAGE_BOARDS);
    assert_eq!(
        next_link(&head).as_deref(),
        Some("/api/boards?after=b00999&limit=1000")
    );
    let (_, body) = get(addr, "/api/boards?limit=1000000");
    assert_eq!(count(&body), super::api::MAX_PAGE_BOARDS);
    // Walked by its links, 3,000 a page: every board once, in id order.
    let mut url = Some("/api/boards?limit=3000".to_string());
    let mut seen: Vec<String> = Vec::new();
    while let Some(u) = url {
        let (head, body) = get(addr, &u);
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        let page = v.as_array().unwrap();
        seen.extend(
            page.iter()
                .map(|b| b["board"].as_str().unwrap().to_string()),
        );
        url = next_link(&head);
        assert!(seen.len() <= 10_050 + 3000, "the pages do not end");
    }
    let want: Vec<String> = (0..10_050).map(|i| format!("b{i:05}")).collect();
    assert_eq!(seen, want);
    let (_, body) = get(addr, "/api/boards?after=b10048&limit=5");
    assert_eq!(body.matches("\"board\"").count(), 1, "{body}");
}

#[test]
fn history_is_walked_whole_with_before_and_a_board_keeps_at_most_its_rows() {
    let dir = tempfile::tempdir().unwrap();
    let store = Sqlite::open(dir.path()).unwrap().with_rows_per_board(40);
    let keys = KnownBoards::load_accepting(Some(&dir.path().join("known_boards")), 10);
    let mut f = Fleet::new(
        "npu-fleet",
        10,
        keys,
        Box::new(store),
        Staleness::AfterS(60),
    );
    let k = key(3);
    let fail = r#"{"id":"cma.free","status":"fail","summary":"low"}"#;
    // A board whose own key seals a changing status 100 times: its health and the finding
    // start and stop each time.
    for i in 0..100 {
        let at = NOW + i * 10;
        let status = match i % 2 {
            0 => sealed(&k, "b1", at, "fail", fail),
            _ => sealed(&k, "b1", at, "ok", ""),
        };
        f.take("npu-fleet/b1/status", &status, at);
    }
    f.take(
        "npu-fleet/b2/status",
        &sealed(&key(4), "b2", NOW, "ok", ""),
        NOW,
    );
    let all = f.history("b1", 100_000).unwrap();
    assert_eq!(all.len(), 40, "{:?}", all.last());
    assert_eq!(all[0].at_s, NOW + 990, "the newest kept");
    assert!(
        !f.history("b2", 100).unwrap().is_empty(),
        "b2 keeps its rows"
    );
    let shared = Arc::new(Shared::new(
        f,
        Cardinality::All,
        "127.0.0.1".parse().unwrap(),
    ));
    let addr = start(shared, Limits::default());
    let mut url = Some("/api/boards/b1/history?limit=7".to_string());
    let mut ids: Vec<i64> = Vec::new();
    while let Some(u) = url {
        let (head, body) = get(addr, &u);
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        ids.extend(
            v.as_array()
                .unwrap()
                .iter()
                .map(|e| e["id"].as_i64().unwrap()),
        );
        url = next_link(&head);
        assert!(ids.len() <= 40 + 7, "the pages do not end: {ids:?}");
    }
    assert_eq!(ids, all.iter().map(|e| e.id).collect::<Vec<_>>());
    let (_, body) = get(
        addr,
        &format!("/api/boards/b1/history?before={}", all[37].id),
    );
    assert_eq!(body.matches("\"at_s\"").count(), 2, "{body}");
}

#[test]
fn the_row_cap_holds_across_a_reopen_and_spares_other_boards() {
    let dir = tempfile::tempdir().unwrap();
    let change = |v: &str| super::detail::Change {
        kind: "health".into(),
        subject: String::new(),
        value: v.into(),
        previous: String::new(),
        summary: String::new(),
    };
    let d = super::detail::Detail::default();
    {
        let mut db = Sqlite::open(dir.path()).unwrap().with_rows_per_board(5);
        for i in 0..12 {
            db.record("b1", 1_000 + i, &[change(&i.to_string())], &d)
                .unwrap();
        }
        db.record("b2", 1_000, &[change("a"), change("b"), change("c")], &d)
            .unwrap();
        let h = db.history("b1", 100).unwrap();
        let values: Vec<&str> = h.iter().map(|e| e.change.value.as_str()).collect();
        assert_eq!(values, ["11", "10", "9", "8", "7"]);
    }
    let mut db = Sqlite::open(dir.path()).unwrap().with_rows_per_board(5);
    db.record("b1", 2_000, &[change("12"), change("13")], &d)
        .unwrap();
    let h = db.history("b1", 100).unwrap();
    let values: Vec<&str> = h.iter().map(|e| e.change.value.as_str()).collect();
    assert_eq!(values, ["13", "12", "11", "10", "9"]);
    assert_eq!(db.history("b2", 100).unwrap().len(), 3);
}

/// Opens a connection to `addr` and trickles a request's headers a byte every 100 ms; returns
/// how long until the server closed it (`None`: still open after `give_up`).
fn trickle(addr: SocketAddr, give_up: Duration) -> Option<Duration> {
    let t0 = Instant::now();
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    let head = format!("GET / HTTP/1.1\r\nHost: {addr}\r\nX-Slow: ");
    if s.write_all(head.as_bytes()).is_err() {
        return Some(t0.elapsed());
    }
    let mut buf = [0_u8; 512];
    while t0.elapsed() < give_up {
        match s.read(&mut buf) {
            Ok(0) => return Some(t0.elapsed()),
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => return Some(t0.elapsed()),
        }
        if s.write_all(b"a").is_err() {
            return Some(t0.elapsed());
        }
    }
    None
}

#[test]
fn a_client_trickling_its_headers_is_closed_and_others_are_still_served() {
    let dir = tempfile::tempdir().unwrap();
    let mut f = fleet_of(dir.path(), 10, 10);
    f.take("npu-fleet/b1/availability", b"online", NOW);
    let shared = Arc::new(Shared::new(
        f,
        Cardinality::All,
        "127.0.0.1".parse().unwrap(),
    ));
    let limits = Limits {
        header_read_timeout: Duration::from_secs(1),
        max_connections: 4,
    };
    let addr = start(shared, limits);
    // Twice as many slow clients as the server takes at once.
    let slow: Vec<_> = (0..8)
        .map(|_| std::thread::spawn(move || trickle(addr, Duration::from_secs(30))))
        .collect();
    let (head, body) = get(addr, "/api/boards/b1");
    assert!(head.starts_with("http/1.1 200"), "{head}");
    assert!(body.contains("\"board\":\"b1\""), "{body}");
    for t in slow {
        let closed = t.join().unwrap();
        let took = closed.expect("a client trickling its headers for 30 s was never closed");
        assert!(
            took >= Duration::from_millis(900),
            "closed at once: {took:?}"
        );
    }
}
