//! The signature catalog (catalog/signatures.toml) held to the headers it comes from: HailoRT's
//! `hailo_status` list of 4.20.0, 4.23.0 and 5.2.0 (hailort.h, HAILO_STATUS_VARIABLES) and RKNN's
//! return codes (rknn_api.h of rknn-toolkit2 2.3.2), copied as lines into tests/fixtures/headers.
//! Every status in a header has its row, by name and by number; no status row names a status
//! no header has.

use npu_agent::profile::signature::catalog;
use std::collections::BTreeMap;
use std::path::Path;

fn headers() -> &'static Path {
    Path::new(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/headers"
    ))
}

/// (name, code) of every `HAILO_STATUS__X(code, NAME ...)` line of a header file.
fn hailo_statuses(file: &str) -> Vec<(String, i64)> {
    let text = std::fs::read_to_string(headers().join(file)).unwrap();
    let re = regex_lite::Regex::new(r"HAILO_STATUS__X\((\d+),\s*(HAILO_[A-Z0-9_]+)").unwrap();
    re.captures_iter(&text)
        .map(|c| (c[2].to_string(), c[1].parse().unwrap()))
        .collect()
}

/// (name, code) of every `#define RKNN_... -N` line.
fn rknn_codes(file: &str) -> Vec<(String, i64)> {
    let text = std::fs::read_to_string(headers().join(file)).unwrap();
    let re = regex_lite::Regex::new(r"#define\s+(RKNN_(?:SUCC|ERR_[A-Z_]+))\s+(-?\d+)").unwrap();
    re.captures_iter(&text)
        .map(|c| (c[1].to_string(), c[2].parse().unwrap()))
        .collect()
}

fn assert_rows(runtime: &str, statuses: &BTreeMap<String, i64>) {
    let c = catalog();
    for (name, code) in statuses {
        let row = c
            .by_status_name(name)
            .unwrap_or_else(|| panic!("no catalog row for {name}"));
        assert_eq!(row.code, Some(*code), "{name}");
        assert_eq!(row.runtime, runtime, "{name}");
        assert_eq!(
            c.by_code(runtime, *code).map(|r| r.id.as_str()),
            Some(row.id.as_str()),
            "{name} by number"
        );
        assert!(!row.meaning.is_empty() && !row.source.is_empty(), "{name}");
        if row.is_failure() {
            assert!(!row.remedy.default.is_empty(), "{name} has no remedy");
        }
    }
    // No status row beyond the headers.
    for row in c.rows.iter().filter(|r| r.runtime == runtime) {
        if let Some(n) = &row.status_name {
            assert!(statuses.contains_key(n), "{n} is in no header");
        }
    }
}

#[test]
fn every_hailo_status_of_the_4x_and_5x_headers_has_its_row() {
    let mut all: BTreeMap<String, i64> = BTreeMap::new();
    for f in [
        "hailort-4.20.0-hailo_status.h",
        "hailort-4.23.0-hailo_status.h",
        "hailort-5.2.0-hailo_status.h",
    ] {
        let list = hailo_statuses(f);
        assert!(list.len() > 85, "{f}: {} statuses", list.len());
        for (n, c) in list {
            // A number never changes its name between releases.
            assert_eq!(*all.entry(n.clone()).or_insert(c), c, "{n} in {f}");
        }
    }
    assert_eq!(all.len(), 98);
    assert_rows("hailort", &all);
}

#[test]
fn every_rknn_return_code_has_its_row() {
    let all: BTreeMap<String, i64> = rknn_codes("rknn_api-2.3.2-errors.h").into_iter().collect();
    assert_eq!(all.len(), 14);
    assert_rows("rknn", &all);
}

#[test]
fn every_row_names_a_check_and_a_source() {
    for r in &catalog().rows {
        assert!(
            npu_agent::check::CHECK_IDS.contains(&r.check.as_str()),
            "{}",
            r.id
        );
        assert!(!r.source.is_empty() && !r.cause.is_empty(), "{}", r.id);
    }
}
