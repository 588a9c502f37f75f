//! Why the agent keeps its own `/proc/meminfo` and `/proc/vmstat` parsers rather than
//! procfs-core's (docs/development.md "Deviations"): on the board trees and inputs below,
//! procfs-core refuses what a board really shows, or takes what the agent must refuse. Where it
//! reads correctly (`/proc/<pid>/limits` on well-formed input) tests/fast/fuzz_parsers.rs holds
//! ours to it.

use npu_agent::parse::meminfo::parse_meminfo;
use npu_agent::parse::vmstat::parse_vmstat;
use procfs_core::FromBufRead;

/// The board trees whose `/proc/meminfo` is a partial capture (a bug report that pasted only
/// the CMA lines) or a kernel's short file: procfs-core's `Meminfo` refuses every one, while the
/// agent reads its CMA fields, which are what the checks need.
#[test]
fn partial_meminfo_captures_are_read_by_ours_and_refused_by_procfs_core() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/boards");
    let mut partial = 0;
    for entry in std::fs::read_dir(&dir).expect("tests/fixtures/boards") {
        let path = entry.expect("entry").path().join("root/proc/meminfo");
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        // Full files, and the tree whose meminfo is malformed on purpose, are not partial.
        let malformed = path.to_string_lossy().contains("own-malformed-files");
        if text.contains("\nBuffers:") || !text.contains("CmaTotal:") || malformed {
            continue;
        }
        partial += 1;
        let theirs = procfs_core::Meminfo::from_buf_read(text.as_bytes());
        assert!(theirs.is_err(), "{}: procfs-core read it", path.display());
        let ours = parse_meminfo(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert!(ours.cma_total_bytes.is_some(), "{}", path.display());
    }
    assert!(
        partial >= 3,
        "only {partial} partial meminfo captures found"
    );
}

/// Counters that no kernel writes (a negative count, two values, an empty file) are refused by
/// the agent, so a corrupt capture is a finding; procfs-core's `VmStat` takes them as numbers.
#[test]
fn impossible_vmstat_lines_are_refused_by_ours_and_taken_by_procfs_core() {
    for text in ["compact_stall -1\n", "compact_stall 1 2\n"] {
        let theirs = procfs_core::VmStat::from_buf_read(text.as_bytes());
        assert!(theirs.is_ok(), "{text:?}: procfs-core refused it");
        assert!(parse_vmstat(text).is_err(), "{text:?}: ours took it");
    }
    assert!(procfs_core::VmStat::from_buf_read(&b""[..]).is_ok());
    assert!(parse_vmstat("").is_err());
}
