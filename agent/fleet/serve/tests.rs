//! The fleet's state, `/metrics` and the page, on sealed and hostile statuses.

use super::state::{Fleet, Staleness};
use crate::fleet::known::KnownBoards;
use crate::fleet::serve::metrics::{render, Cardinality};
use crate::fleet::serve::page::{board_page, fleet_page, Filter};
use crate::fleet::serve::store::Sqlite;
use crate::mqtt::board_sig;
use crate::mqtt::ed25519::SigningKey;

pub(super) const NOW: i64 = 1_796_000_000;

pub(super) fn fleet(dir: &std::path::Path) -> Fleet {
    let keys = KnownBoards::from_file(Some(dir.join("known_boards")));
    let store = Box::new(Sqlite::open(dir).unwrap());
    Fleet::new("npu-fleet", 100, keys, store, Staleness::AfterS(60))
}

pub(super) fn time(at_s: i64) -> String {
    crate::sys::time::rfc3339_utc(u64::try_from(at_s).unwrap(), 0)
}

/// `board`'s status sealed by `key`, at `at_s`, with `findings`.
pub(super) fn sealed(
    key: &SigningKey,
    board: &str,
    at_s: i64,
    health: &str,
    findings: &str,
) -> Vec<u8> {
    let body = format!(
        r#"{{"health":"{health}","agent_version":"0.1.0","time":"{}","interval_s":60,
            "findings":[{findings}],"metrics":{{"cma_free_bytes":1048576,"npu_load_percent":40}}}}"#,
        time(at_s)
    );
    board_sig::seal(key, &format!("npu-fleet/{board}/status"), body.into_bytes())
}

const CMA_FAIL: &str =
    r#"{"id":"cma.free","status":"fail","summary":"CMA low","fix":{"steps":[]}}"#;

#[test]
fn sealed_changes_are_history_and_unsealed_or_replayed_statuses_are_not() {
    let dir = tempfile::tempdir().unwrap();
    let mut f = fleet(dir.path());
    let key = SigningKey::from_bytes(&[7; 32]);
    f.take("npu-fleet/b1/availability", b"online", NOW);
    f.take(
        "npu-fleet/b1/status",
        &sealed(&key, "b1", NOW, "ok", ""),
        NOW,
    );
    let v = f.board("b1", NOW).unwrap();
    assert_eq!(
        (v.link.as_str(), v.row.identity.as_str()),
        ("online", "new key")
    );
    let first = f.history("b1", 100).unwrap().len();
    assert!(first >= 2, "health and the agent version");
    // The same status again: no row.
    f.take(
        "npu-fleet/b1/status",
        &sealed(&key, "b1", NOW + 60, "ok", ""),
        NOW + 60,
    );
    assert_eq!(f.history("b1", 100).unwrap().len(), first);
    // A finding starts: two rows (health, finding).
    let fail = sealed(&key, "b1", NOW + 120, "fail", CMA_FAIL);
    f.take("npu-fleet/b1/status", &fail, NOW + 120);
    let h = f.history("b1", 100).unwrap();
    assert_eq!(h.len(), first + 2);
    assert!(h
        .iter()
        .any(|e| e.change.kind == "finding_start" && e.change.summary == "CMA low"));
    // Someone else's unsealed "all well", and the board's own older status replayed: shown as
    // such, never in the history.
    f.take(
        "npu-fleet/b1/status",
        br#"{"health":"ok","time":"2099-01-01T00:00:00Z"}"#,
        NOW + 130,
    );
    assert_eq!(f.board("b1", NOW + 130).unwrap().row.identity, "UNSIGNED");
    f.take(
        "npu-fleet/b1/status",
        &sealed(&key, "b1", NOW, "ok", ""),
        NOW + 140,
    );
    assert_eq!(f.board("b1", NOW + 140).unwrap().row.identity, "REPLAYED");
    assert_eq!(f.history("b1", 100).unwrap().len(), first + 2);
    // A board no key vouches for has a row and no history.
    f.take("npu-fleet/x/status", br#"{"health":"fail"}"#, NOW);
    assert!(f.board("x", NOW).unwrap().detail.is_none());
    assert!(f.history("x", 10).unwrap().is_empty());
    // Silence past --stale-after is a transition, once.
    f.tick(NOW + 300, None);
    f.tick(NOW + 310, None);
    let links: Vec<String> = f
        .history("b1", 100)
        .unwrap()
        .iter()
        .filter(|e| e.change.kind == "link")
        .map(|e| e.change.value.clone())
        .collect();
    assert_eq!(links, ["stale", "online"]);
}

#[test]
fn metrics_cover_every_board_or_only_the_failing_ones() {
    let dir = tempfile::tempdir().unwrap();
    let mut f = fleet(dir.path());
    let (k1, k2) = (
        SigningKey::from_bytes(&[1; 32]),
        SigningKey::from_bytes(&[2; 32]),
    );
    f.take("npu-fleet/b1/availability", b"online", NOW);
    f.take("npu-fleet/b2/availability", b"online", NOW);
    f.take(
        "npu-fleet/b1/status",
        &sealed(&k1, "b1", NOW, "fail", CMA_FAIL),
        NOW,
    );
    f.take(
        "npu-fleet/b2/status",
        &sealed(&k2, "b2", NOW, "ok", ""),
        NOW,
    );
    // A label value a board chose: quotes, a backslash and a line break stay inside it.
    f.take("npu-fleet/q\"\\\n/status", br#"{"health":"warn"}"#, NOW);
    let all = render(&f.boards(NOW + 5), Cardinality::All);
    assert!(
        all.contains("npu_fleet_boards{health=\"fail\"} 1\n"),
        "{all}"
    );
    assert!(all.contains("npu_fleet_check_firing_boards{check=\"cma.free\",status=\"fail\"} 1"));
    assert!(all.contains("npu_fleet_board_health{board=\"b2\"} 0"));
    assert!(all.contains("npu_fleet_board_npu_load_percent{board=\"b1\"} 40"));
    assert!(all.contains("npu_fleet_board_status_age_seconds{board=\"b1\"} 5"));
    assert!(all.contains("npu_fleet_board_cma_free_bytes{board=\"b1\"} 1048576"));
    assert!(all.contains("board=\"q\\\"\\\\\\n\""), "{all}");
    assert!(all.contains("npu_fleet_agent_version_boards{agent_version=\"0.1.0\"} 2"));
    let failing = render(&f.boards(NOW + 5), Cardinality::Failing);
    assert!(
        failing.contains("npu_fleet_boards{health=\"ok\"} 1"),
        "the counts cover all"
    );
    assert!(failing.contains("npu_fleet_board_health{board=\"b1\"} 2"));
    assert!(!failing.contains("board=\"b2\""), "{failing}");
}

#[test]
fn the_page_escapes_and_bounds_what_a_board_sends() {
    let dir = tempfile::tempdir().unwrap();
    let mut f = fleet(dir.path());
    let key = SigningKey::from_bytes(&[3; 32]);
    let evil = format!(
        r#"{{"id":"cma.free","status":"warn","summary":"<script>alert(1)</script>\u202e\"'{}",
            "remedy":"<img src=x onerror=alert(2)>","evidence":[{{"file":"</pre><script>","line":1,"text":"\u2066x"}}]}}"#,
        "s".repeat(10_000)
    );
    f.take(
        "npu-fleet/b1/status",
        &sealed(&key, "b1", NOW, "warn", &evil),
        NOW,
    );
    let v = f.board("b1", NOW).unwrap();
    let page = board_page(&v, &f.history("b1", 10).unwrap());
    for bad in ["<script", "<img", "</pre><script", "\u{202e}", "\u{2066}"] {
        assert!(!page.contains(bad), "{bad:?} in {page}");
    }
    assert!(
        page.contains("&lt;script&gt;alert(1)&lt;/script&gt;\\u{202e}&quot;"),
        "{page}"
    );
    assert!(
        page.len() < 20_000,
        "a 10,000-character summary is cut: {}",
        page.len()
    );
    let list = fleet_page(
        &f.boards(NOW),
        &Filter {
            check: "cma.free".into(),
            ..Filter::default()
        },
        &[],
    );
    assert!(list.contains("<span id=\"count-shown\">1</span>"), "{list}");
    let none = fleet_page(
        &f.boards(NOW),
        &Filter {
            version: "9.9".into(),
            ..Filter::default()
        },
        &[],
    );
    assert!(none.contains("<span id=\"count-shown\">0</span>"), "{none}");
}
