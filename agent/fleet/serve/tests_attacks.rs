//! The attack review's findings (issue 38), each as a test that failed before its fix.

use super::metrics::{render, Cardinality};
use super::tests::{fleet, sealed, NOW};
use crate::mqtt::ed25519::SigningKey;

/// Lines of `text` starting with `prefix`.
/// The samples of `text` starting with `prefix`, but those of value 0 (every fixed label is
/// written, 0 when no board has it).
fn lines<'a>(text: &'a str, prefix: &str) -> Vec<&'a str> {
    let samples = text.lines().filter(|l| l.starts_with(prefix));
    samples.filter(|l| !l.ends_with(" 0")).collect()
}

#[test]
fn metrics_labels_cannot_be_spoofed_with_control_characters() {
    let dir = tempfile::tempdir().unwrap();
    let mut f = fleet(dir.path());
    let key = SigningKey::from_bytes(&[1; 32]);
    f.take("npu-fleet/b1/availability", b"online", NOW);
    let fail = r#"{"id":"cma.free","status":"fail","summary":"low"}"#;
    f.take(
        "npu-fleet/b1/status",
        &sealed(&key, "b1", NOW, "fail", fail),
        NOW,
    );
    // A board with its own key: a health, a check id and a link that print like the real ones
    // once control characters are dropped.
    let evil = SigningKey::from_bytes(&[9; 32]);
    let spoof = r#"{"id":"cma.fre\u0001e","status":"fail","summary":"x"}"#;
    let status = sealed(&evil, "a0", NOW, "fai\\u0001l", spoof);
    f.take("npu-fleet/a0/availability", b"o\x01ffline", NOW);
    f.take("npu-fleet/a0/status", &status, NOW);
    let all = render(&f.boards(NOW + 5), Cardinality::All);
    assert_eq!(
        lines(&all, "npu_fleet_boards{"),
        [
            "npu_fleet_boards{health=\"fail\"} 1",
            "npu_fleet_boards{health=\"other\"} 1"
        ],
        "{all}"
    );
    let links = lines(&all, "npu_fleet_boards_by_link{");
    assert_eq!(
        links.iter().filter(|l| l.contains("\"offline\"")).count(),
        0,
        "{all}"
    );
    assert!(
        links.contains(&"npu_fleet_boards_by_link{link=\"other\"} 1"),
        "{all}"
    );
    assert_eq!(
        lines(&all, "npu_fleet_check_firing_boards{"),
        [
            "npu_fleet_check_firing_boards{check=\"cma.free\",status=\"fail\"} 1",
            "npu_fleet_check_firing_boards{check=\"other\",status=\"fail\"} 1",
        ],
        "{all}"
    );
    assert_eq!(
        lines(&all, "npu_fleet_board_check_status{").len(),
        1,
        "{all}"
    );
    // Every label line is unique once printed.
    let mut seen = std::collections::BTreeSet::new();
    for l in all.lines().filter(|l| !l.starts_with('#')) {
        let series = l.rsplit_once(' ').unwrap().0;
        assert!(seen.insert(series.to_string()), "twice: {series}");
    }
}

#[test]
fn an_unsealed_status_never_shows_for_a_board_whose_key_is_pinned() {
    let dir = tempfile::tempdir().unwrap();
    let key = SigningKey::from_bytes(&[4; 32]);
    {
        let mut f = fleet(dir.path());
        let fail = r#"{"id":"cma.free","status":"fail","summary":"low"}"#;
        f.take(
            "npu-fleet/b1/status",
            &sealed(&key, "b1", NOW, "fail", fail),
            NOW,
        );
        f.tick(NOW, None);
    }
    // Restarted: the key is pinned, the board has sealed nothing in this run, and someone
    // publishes an unsealed "all well".
    let mut f = fleet(dir.path());
    f.take("npu-fleet/b1/availability", b"online", NOW + 60);
    let fake = format!(
        r#"{{"health":"ok","time":"{}"}}"#,
        super::tests::time(NOW + 60)
    );
    f.take("npu-fleet/b1/status", fake.as_bytes(), NOW + 60);
    let v = f.board("b1", NOW + 60).unwrap();
    assert_eq!(v.row.identity, "UNSIGNED");
    assert_ne!(v.row.health, "ok");
    let all = render(&f.boards(NOW + 60), Cardinality::All);
    assert!(
        !all.contains("npu_fleet_board_health{board=\"b1\"} 0"),
        "{all}"
    );
    assert!(all.contains("npu_fleet_boards{health=\"ok\"} 0\n"), "{all}");
}

#[test]
fn an_older_sealed_status_after_a_restart_writes_no_history() {
    let dir = tempfile::tempdir().unwrap();
    let key = SigningKey::from_bytes(&[5; 32]);
    let fail = r#"{"id":"cma.free","status":"fail","summary":"low"}"#;
    let old = sealed(&key, "b1", NOW, "fail", fail);
    let rows = {
        let mut f = fleet(dir.path());
        f.take("npu-fleet/b1/status", &old, NOW);
        f.take(
            "npu-fleet/b1/status",
            &sealed(&key, "b1", NOW + 60, "ok", ""),
            NOW + 60,
        );
        f.tick(NOW + 60, None);
        f.history("b1", 100).unwrap()
    };
    assert_eq!(rows[0].change.kind, "finding_stop", "{rows:?}");
    // Restarted, and the old failing status comes back (retained, or published again).
    let mut f = fleet(dir.path());
    f.take("npu-fleet/b1/status", &old, NOW + 120);
    assert_eq!(f.history("b1", 100).unwrap(), rows);
    let v = f.board("b1", NOW + 120).unwrap();
    assert_eq!(v.row.identity, "REPLAYED");
    assert_ne!(v.row.health, "fail");
    // The board's next status is history as before.
    let next = sealed(&key, "b1", NOW + 180, "fail", fail);
    f.take("npu-fleet/b1/status", &next, NOW + 180);
    assert_eq!(f.history("b1", 100).unwrap().len(), rows.len() + 2);
}

/// `board`'s link rows, newest first.
fn link_rows(f: &super::state::Fleet, board: &str) -> Vec<(i64, String)> {
    let h = f.history(board, 100_000).unwrap();
    let links = h.into_iter().filter(|e| e.change.kind == "link");
    links.map(|e| (e.at_s, e.change.value)).collect()
}

#[test]
fn availability_flapping_writes_at_most_a_link_row_a_minute_and_only_for_sealed_boards() {
    let dir = tempfile::tempdir().unwrap();
    let key = SigningKey::from_bytes(&[6; 32]);
    {
        let mut f = fleet(dir.path());
        f.take(
            "npu-fleet/b1/status",
            &sealed(&key, "b1", NOW, "ok", ""),
            NOW,
        );
        f.tick(NOW, None);
    }
    // Restarted: b1 has a baseline but sealed nothing in this run.
    let mut f = fleet(dir.path());
    for i in 0..200 {
        let word: &[u8] = if i % 2 == 0 { b"offline" } else { b"online" };
        f.take("npu-fleet/b1/availability", word, NOW + 10 + i);
    }
    assert_eq!(link_rows(&f, "b1"), []);
    f.take("npu-fleet/b1/availability", b"online", NOW + 300);
    f.take(
        "npu-fleet/b1/status",
        &sealed(&key, "b1", NOW + 300, "ok", ""),
        NOW + 300,
    );
    assert_eq!(link_rows(&f, "b1"), [(NOW + 300, "online".to_string())]);
    // 1,000 flaps within a minute: the burst's two rows left, no more; a minute on, one.
    for i in 0..1_000 {
        let word: &[u8] = if i % 2 == 0 { b"offline" } else { b"online" };
        f.take("npu-fleet/b1/availability", word, NOW + 301 + i / 20);
    }
    assert_eq!(link_rows(&f, "b1").len(), 3);
    f.take("npu-fleet/b1/availability", b"offline", NOW + 400);
    assert_eq!(link_rows(&f, "b1")[0], (NOW + 400, "offline".to_string()));
    assert_eq!(link_rows(&f, "b1").len(), 4);
    // Ten minutes of flapping: at most one row a minute.
    for i in 0..6_000 {
        let word: &[u8] = if i % 2 == 0 { b"online" } else { b"offline" };
        f.take("npu-fleet/b1/availability", word, NOW + 401 + i / 10);
    }
    assert!(
        link_rows(&f, "b1").len() <= 4 + 11,
        "{}",
        link_rows(&f, "b1").len()
    );
}

#[test]
fn inventory_and_page_show_unsealed_text_visibly_and_link_classes_from_fixed_words() {
    let dir = tempfile::tempdir().unwrap();
    let mut f = fleet(dir.path());
    let status = r#"{"health":"ok","profile":"\n=1+1","model":"a\u202eb\u0007c"}"#;
    f.take("npu-fleet/x/status", status.as_bytes(), NOW);
    f.take(
        "npu-fleet/x/availability",
        "on\u{202e}\u{1}x y".as_bytes(),
        NOW,
    );
    let csv = String::from_utf8(super::http::inventory_csv(&f.boards(NOW)).unwrap()).unwrap();
    for bad in ['\u{202e}', '\u{7}', '\u{1}'] {
        assert!(!csv.contains(bad), "{bad:?} in {csv:?}");
    }
    assert_eq!(csv.lines().count(), 2, "{csv:?}");
    let line = csv.lines().nth(1).unwrap();
    assert!(
        !line.contains(",=") && !line.contains(",\"=") && !line.contains(",\n"),
        "{line}"
    );
    let page = super::page::fleet_page(&f.boards(NOW), &super::page::Filter::default(), &[]);
    assert!(
        !page.contains('\u{202e}') && !page.contains('\u{1}'),
        "{page}"
    );
    assert!(page.contains("<td class=\"other\">"), "{page}");
}

/// The response to `GET / HTTP/1.1` with `Host: host` from a server on `addr`.
fn get(addr: std::net::SocketAddr, host: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    let req = format!("GET / HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

#[test]
fn a_loopback_server_answers_only_its_own_host_and_sends_csp_and_nosniff() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state/sub");
    super::store::make_dir(&state).unwrap();
    let f = fleet(&state);
    let mode = |p: &std::path::Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&state), 0o700);
    assert_eq!(mode(&state.join(super::store::FILE_NAME)), 0o600);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let shared = std::sync::Arc::new(super::http::Shared::new(f, Cardinality::All, addr.ip()));
    std::thread::spawn(move || {
        rt.block_on(async { axum::serve(listener, super::http::router(shared)).await })
            .unwrap();
    });
    let ok = get(addr, &addr.to_string());
    assert!(ok.starts_with("HTTP/1.1 200"), "{ok}");
    let lower = ok.to_ascii_lowercase();
    assert!(
        lower.contains("content-security-policy: default-src 'none'"),
        "{ok}"
    );
    assert!(lower.contains("x-content-type-options: nosniff"), "{ok}");
    assert!(get(addr, "localhost:9465").starts_with("HTTP/1.1 200"));
    for evil in ["rebind.example:9465", "127.0.0.1.evil.example", "[::2]:1"] {
        let r = get(addr, evil);
        assert!(r.starts_with("HTTP/1.1 421"), "{evil}: {r}");
        assert!(!r.contains("Fleet"), "{r}");
    }
}
