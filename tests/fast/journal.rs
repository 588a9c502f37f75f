//! The systemd journal as an evidence source, on a real journal directory that the tests write
//! with `systemd-journal-remote` (the host's own journal is never written): `check --root` reads
//! the tree's `var/log/journal` through `journalctl -D`, kernel lines by their transport and the
//! workloads' lines by unit; the daemon's cursors read only what is new and survive a restart.

use crate::support::journal::{journal_tools, write_journal, Entry};
use npu_agent::probe::evidence::{probe_logs, LogCursors, SourceState};
use npu_agent::probe::LogClass;
use npu_agent::root::SysRoot;
use serde_json::Value;
use std::path::Path;
use std::process::Command;

const ENOMEM: &str = "cma: cma_alloc: alloc failed, req-size: 8 pages, ret: -12";
const NO_LIB: &str = "hailo-ollama: error while loading shared libraries: libhailort.so.5.2.0: cannot open shared object file: No such file or directory";
const OLLAMA: Option<(&str, &str)> = Some(("hailo-ollama.service", "hailo-ollama"));

/// A healthy Pi 5 + Hailo-10H tree without any log file.
fn tree() -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/boards/own-pi5-hailo10h-5.1.1-healthy/root");
    assert!(Command::new("cp")
        .arg("-a")
        .arg(format!("{}/.", src.display()))
        .arg(d.path())
        .status()
        .unwrap()
        .success());
    std::fs::remove_file(d.path().join("var/log/kern.log")).unwrap();
    d
}

fn check(root: &Path) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_npu-agent"))
        .args(["check", "--format", "json", "--root"])
        .arg(root)
        .output()
        .unwrap();
    serde_json::from_slice(&out.stdout).unwrap()
}

fn finding<'a>(r: &'a Value, id: &str) -> &'a Value {
    r["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["id"] == id)
        .unwrap_or_else(|| panic!("no {id}"))
}

#[test]
fn journal_lines_raise_findings_without_log_files() {
    if !journal_tools() {
        return;
    }
    let t = tree();
    // Before: no log at all. The kernel-log checks pass but say they are blind.
    let r = check(t.path());
    assert_eq!(finding(&r, "agent.log_sources")["status"], "skip");
    assert_eq!(finding(&r, "cma.free")["status"], "pass");
    assert!(finding(&r, "cma.free")["summary"]
        .as_str()
        .unwrap()
        .contains("kernel log not read"));

    write_journal(
        t.path(),
        "system",
        1,
        &[
            Entry {
                unit: None,
                message: "Booting Linux on physical CPU 0x0000000000 [0x414fd0b1]",
            },
            Entry {
                unit: None,
                message: ENOMEM,
            },
            Entry {
                unit: OLLAMA,
                message: NO_LIB,
            },
            Entry {
                unit: Some(("ssh.service", "sshd")),
                message: "Too many open files",
            },
            Entry {
                unit: None,
                message: ENOMEM,
            },
        ],
    );
    let r = check(t.path());
    let cma = finding(&r, "cma.free");
    assert_eq!(cma["status"], "fail", "{cma}");
    assert!(
        cma["summary"]
            .as_str()
            .unwrap()
            .contains("2 cma_alloc failure(s)"),
        "{cma}"
    );
    assert!(cma["evidence"]
        .as_array()
        .unwrap()
        .iter()
        .any(|e| e["file"] == "journal:_TRANSPORT=kernel"));
    let lib = finding(&r, "hailo.runtime_library");
    assert_eq!(lib["status"], "fail", "{lib}");
    assert_eq!(lib["evidence"][0]["file"], "journal:workloads");
    // The ssh line is not a workload's: no nofile finding from it.
    assert_eq!(finding(&r, "limits.nofile")["status"], "pass");
    let src = finding(&r, "agent.log_sources");
    assert_eq!(src["status"], "pass");
    assert_eq!(
        src["observed"]["kernel_log_source"],
        "journal:_TRANSPORT=kernel"
    );
    assert_eq!(
        src["observed"]["source:journal:_TRANSPORT=kernel"]["lines"],
        3
    );
    assert_eq!(src["observed"]["source:journal:workloads"]["lines"], 1);
}

#[test]
fn journal_cursors_read_only_new_entries_across_restarts() {
    if !journal_tools() {
        return;
    }
    let t = tree();
    write_journal(
        t.path(),
        "system",
        1,
        &[
            Entry {
                unit: None,
                message: ENOMEM,
            },
            Entry {
                unit: None,
                message: "usb 1-1: new high-speed USB device",
            },
            Entry {
                unit: OLLAMA,
                message: NO_LIB,
            },
        ],
    );
    let root = SysRoot::new(t.path());
    let profile = npu_agent::profile::load_all(&root)
        .0
        .into_iter()
        .find(|p| p.id == "rpi5-hailo10h")
        .unwrap();
    let count = |logs: &[npu_agent::probe::LogFile], class: LogClass| {
        logs.iter()
            .filter(|l| l.class == class)
            .map(|l| l.lines.len())
            .sum::<usize>()
    };
    let mut c = LogCursors::default();
    let (logs, src) = probe_logs(
        &root,
        &profile,
        &Default::default(),
        Some(&mut c),
        Some("boot-1"),
    );
    assert_eq!(count(&logs, LogClass::Kernel), 1);
    assert_eq!(count(&logs, LogClass::Workload), 1);
    let k = src
        .iter()
        .find(|s| s.name == "journal:_TRANSPORT=kernel")
        .unwrap();
    assert_eq!((k.state, k.lines), (SourceState::Read, 2));
    assert!(c
        .journal_kernel
        .as_deref()
        .unwrap()
        .contains("b=0123456789abcdef"));
    // Nothing new: nothing read, nothing counted twice.
    let (logs, src) = probe_logs(
        &root,
        &profile,
        &Default::default(),
        Some(&mut c),
        Some("boot-1"),
    );
    assert_eq!(count(&logs, LogClass::Kernel), 1);
    assert_eq!(
        src.iter()
            .find(|s| s.name == "journal:_TRANSPORT=kernel")
            .unwrap()
            .lines,
        0
    );
    // New entries arrive (a second journal file, later timestamps), then the agent restarts
    // with its cursors read back from JSON.
    write_journal(
        t.path(),
        "system@more",
        100,
        &[
            Entry {
                unit: None,
                message: ENOMEM,
            },
            Entry {
                unit: OLLAMA,
                message: NO_LIB,
            },
        ],
    );
    let mut c: LogCursors = serde_json::from_str(&serde_json::to_string(&c).unwrap()).unwrap();
    let (logs, src) = probe_logs(
        &root,
        &profile,
        &Default::default(),
        Some(&mut c),
        Some("boot-1"),
    );
    assert_eq!(count(&logs, LogClass::Kernel), 2);
    assert_eq!(count(&logs, LogClass::Workload), 2);
    assert_eq!(
        src.iter()
            .find(|s| s.name == "journal:_TRANSPORT=kernel")
            .unwrap()
            .lines,
        1
    );
    let (logs, _) = probe_logs(
        &root,
        &profile,
        &Default::default(),
        Some(&mut c),
        Some("boot-1"),
    );
    assert_eq!(count(&logs, LogClass::Kernel), 2);
}

#[test]
fn missing_journalctl_is_named_not_fatal() {
    let t = tree();
    std::fs::create_dir_all(t.path().join("var/log/journal")).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_npu-agent"))
        .args(["check", "--format", "json", "--root"])
        .arg(t.path())
        .env("NPU_AGENT_JOURNALCTL", "/nonexistent/journalctl")
        .output()
        .unwrap();
    let r: Value = serde_json::from_slice(&out.stdout).unwrap();
    let src = finding(&r, "agent.log_sources");
    assert_eq!(src["status"], "skip");
    assert_eq!(
        src["observed"]["source:journal:_TRANSPORT=kernel"]["state"],
        "missing"
    );
    assert!(
        src["observed"]["source:journal:_TRANSPORT=kernel"]["detail"]
            .as_str()
            .unwrap()
            .contains("journalctl is not installed")
    );
}
