//! The container's view of every board tree: each tree under tests/fixtures/boards (`root` and
//! the variant roots) copied without `etc/`, `boot/` and `var/lib/dpkg` — what the image sees
//! when it is given only `/proc`, `/sys`, `/dev` and the logs — must never turn a finding that
//! fires on the whole tree (`fail`, `warn`, `info`) into a `pass`: a check that cannot read what
//! its verdict needs says so (`skip`, or a finding naming what is missing).

use crate::boards::{check_tree, fixtures};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The parts a container without the host's files does not see.
const HIDDEN: [&str; 3] = ["etc", "boot", "var/lib/dpkg"];

/// Every board tree: `<case>/root` and `<case>/root-*`.
fn trees() -> Vec<PathBuf> {
    let mut out = Vec::new();
    for case in std::fs::read_dir(fixtures()).expect("fixtures dir") {
        let case = case.expect("dir entry").path();
        let Ok(entries) = std::fs::read_dir(&case) else {
            continue;
        };
        for e in entries {
            let p = e.expect("dir entry").path();
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or("");
            if p.is_dir() && (name == "root" || name.starts_with("root-")) {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// A copy of `tree` under `to` without [`HIDDEN`].
fn blind_copy(tree: &Path, to: &Path) -> PathBuf {
    let out = to.join("root");
    let ok = Command::new("cp")
        .arg("-a")
        .arg(tree)
        .arg(&out)
        .status()
        .expect("run cp");
    assert!(ok.success(), "cp -a {}", tree.display());
    for h in HIDDEN {
        let p = out.join(h);
        if p.exists() {
            std::fs::remove_dir_all(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        }
    }
    out
}

#[test]
fn no_fault_turns_into_a_pass_without_etc_boot_and_dpkg() {
    let trees = trees();
    assert!(trees.len() >= 69, "only {} board trees found", trees.len());
    let mut hidden_faults = Vec::new();
    for tree in &trees {
        let tmp = tempfile::tempdir().expect("temp dir");
        let blind = blind_copy(tree, tmp.path());
        let (_, whole) = check_tree(tree);
        let (_, seen) = check_tree(&blind);
        for (id, st) in &whole {
            let now = seen.get(id).map(String::as_str).unwrap_or("absent");
            if matches!(st.as_str(), "fail" | "warn" | "info") && now == "pass" {
                let case = tree.strip_prefix(fixtures()).unwrap_or(tree);
                hidden_faults.push(format!("{}: {id} {st} -> pass", case.display()));
            }
        }
    }
    assert!(
        hidden_faults.is_empty(),
        "faults hidden behind pass in the container's view:\n{}",
        hidden_faults.join("\n")
    );
}
