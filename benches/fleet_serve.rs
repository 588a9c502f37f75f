//! `fleet serve`'s own costs at fleet scale (printed, not asserted): NPU_BENCH_BOARDS boards
//! (default 100,000), each a retained availability and a compact status of a real board tree
//! (`check --format json` of a fixture, compacted as agents publish it), sealed with a key of
//! its own as an agent seals it, taken into the service's fleet state with its SQLite history
//! in a temp dir: the time to take every board, memory per board (VmRSS growth), history rows
//! and database bytes, then NPU_BENCH_ROUNDS (10) more status rounds in which 1 board in 100
//! flips a finding (database bytes per board per day at a 60 s interval at that rate), then the
//! render times of `/metrics` (all boards and `--metrics-boards failing`) and of the page.
//! The broker's part (delivering 100,000 retained statuses) is `fleet_cluster`'s and
//! `fleet_scale`'s.
//!
//! Run: `cargo bench --bench fleet_serve`.

// Tests build board trees and fixtures with plain writes (clippy.toml: disallowed_methods).
#![allow(clippy::disallowed_methods)]

use npu_agent::fleet::known::KnownBoards;
use npu_agent::fleet::serve::metrics::{render, Cardinality};
use npu_agent::fleet::serve::page::{fleet_page, Filter};
use npu_agent::fleet::serve::state::{Fleet, Staleness};
use npu_agent::fleet::serve::store::{Sqlite, FILE_NAME};
use npu_agent::mqtt::board_sig;
use npu_agent::mqtt::ed25519::SigningKey;
use std::time::Instant;

fn env_n(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// VmRSS of this process, bytes.
fn rss_bytes() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches(" kB").trim().parse::<u64>().ok())
        .unwrap_or(0)
        * 1024
}

/// A real board's report, compacted, as JSON.
fn compact_status() -> serde_json::Value {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/boards/own-rk3588-opi5plus-rknpu-0.9.8-healthy/root");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_npu-agent"))
        .args(["check", "--format", "json", "--root"])
        .arg(&root)
        .output()
        .unwrap();
    let report: npu_agent::report::Report = serde_json::from_slice(&out.stdout).unwrap();
    serde_json::to_value(npu_agent::report::compact(&report, false)).unwrap()
}

/// Board `i`'s sealed status at `at_s`, its `cma.free` failing when `fail`.
fn status(base: &serde_json::Value, key: &SigningKey, i: usize, at_s: u64, fail: bool) -> Vec<u8> {
    let mut v = base.clone();
    v["board_id"] = format!("b{i}").into();
    v["time"] = npu_agent::sys::time::rfc3339_utc(at_s, 0).into();
    v["interval_s"] = 60.into();
    if fail {
        v["health"] = "fail".into();
        v["findings"] = serde_json::json!([{"id": "cma.free", "status": "fail",
            "summary": "CmaFree is 512 KiB of 256 MiB", "remedy": "npu-agent cma set 256M"}]);
    }
    let topic = format!("npu-fleet/b{i}/status");
    board_sig::seal(key, &topic, serde_json::to_vec(&v).unwrap())
}

fn main() {
    let n = env_n("NPU_BENCH_BOARDS", 100_000);
    let rounds = env_n("NPU_BENCH_ROUNDS", 10);
    let dir = tempfile::tempdir().unwrap();
    let base = compact_status();
    let keys: Vec<SigningKey> = (0..n)
        .map(|i| {
            let mut seed = [0u8; 32];
            seed[..8].copy_from_slice(&(i as u64 + 1).to_le_bytes());
            SigningKey::from_bytes(&seed)
        })
        .collect();
    let now = npu_agent::action::now_unix_s() as u64;
    let first: Vec<Vec<u8>> = (0..n)
        .map(|i| status(&base, &keys[i], i, now, false))
        .collect();
    println!(
        "boards: {n}; one sealed compact status: {} bytes",
        first[0].len()
    );
    let store = Box::new(Sqlite::open(dir.path()).unwrap());
    let keys_file = KnownBoards::load_accepting(Some(&dir.path().join("known_boards")), n);
    let rss0 = rss_bytes();
    let mut fleet = Fleet::new("npu-fleet", n, keys_file, store, Staleness::Intervals);
    let t0 = Instant::now();
    for (i, p) in first.iter().enumerate() {
        fleet.take(
            &format!("npu-fleet/b{i}/availability"),
            b"online",
            now as i64,
        );
        fleet.take(&format!("npu-fleet/b{i}/status"), p, now as i64);
    }
    let took = t0.elapsed().as_secs_f64();
    drop(first);
    let rss = rss_bytes().saturating_sub(rss0);
    let db = || {
        ["", "-wal"]
            .iter()
            .filter_map(|s| std::fs::metadata(dir.path().join(format!("{FILE_NAME}{s}"))).ok())
            .map(|m| m.len())
            .sum::<u64>()
    };
    let db0 = db();
    println!(
        "take every board: {took:.1} s ({:.0} boards/s); memory {} bytes/board; database {} bytes ({} bytes/board)",
        n as f64 / took,
        rss / n as u64,
        db0,
        db0 / n as u64
    );
    let t0 = Instant::now();
    for r in 1..=rounds {
        let at = now + 60 * r as u64;
        for (i, key) in keys.iter().enumerate() {
            let fail = (i + r) % 100 == 0;
            fleet.take(
                &format!("npu-fleet/b{i}/status"),
                &status(&base, key, i, at, fail),
                at as i64,
            );
        }
    }
    let per_round = (db().saturating_sub(db0)) as f64 / rounds.max(1) as f64;
    println!(
        "{rounds} more rounds (1 board in 100 flips cma.free each round): {:.1} s; database +{:.0} bytes/round = {:.0} bytes/board/day at a 60 s interval",
        t0.elapsed().as_secs_f64(),
        per_round,
        per_round * 1440.0 / n as f64
    );
    let t0 = Instant::now();
    let boards = fleet.boards(npu_agent::action::now_unix_s());
    println!(
        "every board's view, worst first: {:.2} s",
        t0.elapsed().as_secs_f64()
    );
    for (name, c) in [("all", Cardinality::All), ("failing", Cardinality::Failing)] {
        let t0 = Instant::now();
        let text = render(&boards, c);
        println!(
            "/metrics ({name}): {:.2} s, {} bytes, {} series",
            t0.elapsed().as_secs_f64(),
            text.len(),
            text.lines().filter(|l| !l.starts_with('#')).count()
        );
    }
    let t0 = Instant::now();
    let page = fleet_page(&boards, &Filter::default(), &[]);
    println!(
        "page (every board): {:.2} s, {} bytes",
        t0.elapsed().as_secs_f64(),
        page.len()
    );
}
