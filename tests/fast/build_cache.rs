//! `.ci/build-cache.sh`, which `.ci/run` uses to take the release builds from
//! `~/.cache/npu-agent-ci/builds/` when their inputs did not change: with real bash and real cargo
//! on a one-file crate in a temp dir, a first build is kept, a second with the same sources is
//! copied without running cargo, a changed source builds again, and without the cache variable
//! cargo just runs.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

const LIB: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/.ci/build-cache.sh");

/// A crate `probe` whose binary prints `word`, laid out as the agent is (`agent/main.rs`).
fn write_crate(dir: &Path, word: &str) {
    std::fs::create_dir_all(dir.join("agent")).unwrap();
    std::fs::write(
        dir.join("Cargo.toml"),
        "[package]\nname = \"probe\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n\
         [[bin]]\nname = \"probe\"\npath = \"agent/main.rs\"\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("agent/main.rs"),
        format!("fn main() {{ println!(\"{word}\"); }}\n"),
    )
    .unwrap();
}

/// `cached_build target/release/probe --release` in `dir`; `cache`: NPUAGENT_CI_BUILD_CACHE.
fn cached_build(dir: &Path, cache: Option<&Path>) -> Output {
    let mut c = Command::new("bash");
    c.arg("-c")
        .arg(format!(
            "set -euo pipefail; . '{LIB}'; cached_build \"$CARGO_TARGET_DIR/release/probe\" --release"
        ))
        .current_dir(dir)
        .env("CARGO_TARGET_DIR", dir.join("target"))
        .env_remove("NPUAGENT_CI_BUILD_CACHE");
    if let Some(cache) = cache {
        c.env("NPUAGENT_CI_BUILD_CACHE", cache);
    }
    let o = c.output().expect("run bash");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    o
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn kept(cache: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(cache)
        .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    v.sort();
    v
}

fn run_probe(dir: &Path) -> String {
    let o = Command::new(dir.join("target/release/probe"))
        .output()
        .unwrap();
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

#[test]
fn a_build_is_kept_reused_for_the_same_inputs_and_redone_for_changed_ones() {
    let tmp = tempfile::tempdir().unwrap();
    let (dir, cache) = (tmp.path().join("crate"), tmp.path().join("cache"));
    write_crate(&dir, "one");
    let lock = Command::new("cargo")
        .args(["generate-lockfile", "--offline"])
        .current_dir(&dir)
        .env_remove("CARGO_TARGET_DIR")
        .output()
        .unwrap();
    assert!(lock.status.success(), "{}", stderr(&lock));

    let first = stderr(&cached_build(&dir, Some(&cache)));
    assert!(first.contains("build-cache: built "), "{first}");
    let files = kept(&cache);
    assert_eq!(files.len(), 1, "{files:?}");
    let name = files[0].file_name().unwrap().to_string_lossy().into_owned();
    let key = name
        .strip_prefix("release_probe-")
        .expect("named by its path");
    assert!(
        key.len() == 32 && key.bytes().all(|b| b.is_ascii_hexdigit()),
        "{name}"
    );
    assert_eq!(
        std::fs::read(&files[0]).unwrap(),
        std::fs::read(dir.join("target/release/probe")).unwrap()
    );

    // A fresh target directory, the same sources: the kept file, and cargo never ran.
    std::fs::remove_dir_all(dir.join("target")).unwrap();
    let second = stderr(&cached_build(&dir, Some(&cache)));
    assert!(second.contains("(same inputs; cargo build"), "{second}");
    assert!(
        !dir.join("target/release/.fingerprint").exists(),
        "cargo ran"
    );
    assert_eq!(run_probe(&dir), "one");

    // A changed source is another key: built again, and both are kept.
    write_crate(&dir, "two");
    let third = stderr(&cached_build(&dir, Some(&cache)));
    assert!(third.contains("build-cache: built "), "{third}");
    assert_eq!(run_probe(&dir), "two");
    assert_eq!(kept(&cache).len(), 2);

    // Without the variable it is plain cargo, and the cache is left alone.
    write_crate(&dir, "three");
    let plain = stderr(&cached_build(&dir, None));
    assert!(!plain.contains("build-cache:"), "{plain}");
    assert_eq!(run_probe(&dir), "three");
    assert_eq!(kept(&cache).len(), 2);
}

/// The agent reads every `NPU_AGENT_*` variable as configuration and refuses one it does not
/// know: a variable the CI script exports for the tests must not carry that prefix, or every
/// agent the tests start fails ("unknown variable").
#[test]
fn the_ci_script_exports_no_variable_the_agent_reads_as_config() {
    let run = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/.ci/run")).unwrap();
    let bad: Vec<&str> = run
        .lines()
        .filter(|l| l.trim_start().starts_with("export NPU_AGENT_"))
        .collect();
    assert!(bad.is_empty(), "{bad:?}");
    assert!(
        run.contains("export NPUAGENT_TEST_AARCH64_BIN="),
        "the test binary is still passed"
    );
}
