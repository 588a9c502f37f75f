//! Metamorphic tests: every board case, moved to where the same fault also lives, keeps its
//! verdict. The variants are the project's own equivalents of the shared `vary-fixture` tool:
//!
//! - `docker-log`: each workload log under `var/log` becomes a Docker json-file log
//!   (`var/lib/docker/containers/<id>/<id>-json.log`, with `config.v2.json` naming the container
//!   after the log and its image `<name>:latest`);
//! - `podman-log`: the same as podman's k8s-file log (`overlay-containers/<id>/userdata/ctr.log`
//!   with its OCI `config.json`);
//! - `cri-log`: the same as a Kubernetes pod's CRI log (`var/log/pods/<ns>_<pod>_<uid>/<name>/0.log`);
//! - `x86-host`: the board becomes an x86 PC (no device tree, DMI, an x86 kernel; PCI cards
//!   stay), for cases whose accelerator is on PCI;
//! - `no-dpkg`: no dpkg database (an image without apt).
//!
//! Kernel logs (`kern.log`, `syslog`, `messages`, `dmesg`), the package manager's logs
//! (`dpkg.log`, `apt/`) and the accelerator's own OS log (`hailo/device-runtime.log`) are no
//! workload's log and stay where they are. The case's expectations are asserted unchanged, but
//! for `board.identity` on an x86 host (the board becomes one no profile targets).

use crate::boards::{assert_advice, assert_verdict, fixtures, load, Expected, CASES};
use std::path::{Path, PathBuf};

/// Logs that are not a workload's: they never move into a container.
fn stays(rel: &Path) -> bool {
    let name = rel.file_name().and_then(|n| n.to_str()).unwrap_or("");
    let s = rel.to_string_lossy();
    matches!(
        name,
        "kern.log" | "syslog" | "messages" | "dmesg" | "kernel.log" | "dpkg.log"
    ) || s.contains("/apt/")
        || s.contains("device-runtime")
}

/// A 64-hex-digit id from a name (stable, not cryptographic).
fn id_of(name: &str) -> String {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in name.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    format!("{h:016x}").repeat(4)
}

/// Every workload log under `root/var/log`: (relative path, bytes).
fn workload_logs(root: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![root.join("var/log")];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() && !p.is_symlink() {
                stack.push(p);
            } else if p.is_file() {
                let rel = p.strip_prefix(root).unwrap().to_path_buf();
                if !stays(&rel) {
                    out.push((rel, std::fs::read(&p).unwrap()));
                }
            }
        }
    }
    out.sort();
    out
}

fn stem(rel: &Path) -> String {
    rel.file_stem().unwrap().to_string_lossy().into_owned()
}

fn stamp(i: usize) -> String {
    format!("2026-01-01T00:{:02}:{:02}.{:09}Z", i / 60 % 60, i % 60, i)
}

/// Moves the workload logs into containers of one engine (`docker`, `podman`, `cri`); returns
/// how many moved.
pub fn containerise(root: &Path, engine: &str) -> usize {
    let logs = workload_logs(root);
    for (rel, bytes) in &logs {
        let name = stem(rel);
        let id = id_of(&rel.to_string_lossy());
        std::fs::remove_file(root.join(rel)).unwrap();
        let lines: Vec<&[u8]> = bytes
            .split(|b| *b == b'\n')
            .filter(|l| !l.is_empty())
            .collect();
        match engine {
            "docker" => {
                let dir = root.join("var/lib/docker/containers").join(&id);
                std::fs::create_dir_all(&dir).unwrap();
                let mut out = String::new();
                for (i, l) in lines.iter().enumerate() {
                    let text = String::from_utf8_lossy(l);
                    let entry = serde_json::json!({"log": format!("{text}\n"), "stream": "stderr", "time": stamp(i)});
                    out.push_str(&entry.to_string());
                    out.push('\n');
                }
                std::fs::write(dir.join(format!("{id}-json.log")), out).unwrap();
                let cfg = serde_json::json!({"ID": id, "Name": format!("/{name}"), "Config": {"Image": format!("{name}:latest")}, "State": {"Running": true, "Pid": 0}});
                std::fs::write(dir.join("config.v2.json"), cfg.to_string()).unwrap();
            }
            "podman" => {
                let dir = root
                    .join("var/lib/containers/storage/overlay-containers")
                    .join(&id)
                    .join("userdata");
                std::fs::create_dir_all(&dir).unwrap();
                let mut out = Vec::new();
                for (i, l) in lines.iter().enumerate() {
                    out.extend_from_slice(stamp(i).replace('Z', "+00:00").as_bytes());
                    out.extend_from_slice(b" stderr F ");
                    out.extend_from_slice(l);
                    out.push(b'\n');
                }
                std::fs::write(dir.join("ctr.log"), out).unwrap();
                let cfg = serde_json::json!({"ociVersion": "1.0.2", "annotations": {"io.podman.annotations.name": name, "io.container.manager": "libpod"}, "process": {"args": [name]}});
                std::fs::write(dir.join("config.json"), cfg.to_string()).unwrap();
            }
            _ => {
                let dir = root
                    .join("var/log/pods")
                    .join(format!("default_{name}-0_{}", &id[..8]))
                    .join(&name);
                std::fs::create_dir_all(&dir).unwrap();
                let mut out = Vec::new();
                for (i, l) in lines.iter().enumerate() {
                    out.extend_from_slice(stamp(i).as_bytes());
                    out.extend_from_slice(b" stderr F ");
                    out.extend_from_slice(l);
                    out.push(b'\n');
                }
                std::fs::write(dir.join("0.log"), out).unwrap();
            }
        }
    }
    logs.len()
}

/// The board becomes an x86 PC: no device tree, DMI, an x86 kernel, no Pi or Armbian boot files.
fn x86_host(root: &Path) {
    let _ = std::fs::remove_dir_all(root.join("proc/device-tree"));
    let _ = std::fs::remove_file(root.join("proc/device-tree"));
    let dmi = root.join("sys/class/dmi/id");
    std::fs::create_dir_all(&dmi).unwrap();
    for (k, v) in [
        ("sys_vendor", "Example Computers"),
        ("product_name", "Mini PC N100"),
        ("board_name", "N100-BOARD"),
    ] {
        std::fs::write(dmi.join(k), format!("{v}\n")).unwrap();
    }
    std::fs::create_dir_all(root.join("proc/sys/kernel")).unwrap();
    std::fs::write(root.join("proc/sys/kernel/osrelease"), "6.1.0-28-amd64\n").unwrap();
    std::fs::write(root.join("proc/sys/kernel/arch"), "x86_64\n").unwrap();
    for f in [
        "boot/firmware/config.txt",
        "boot/firmware/cmdline.txt",
        "boot/config.txt",
        "boot/cmdline.txt",
        "boot/armbianEnv.txt",
    ] {
        let _ = std::fs::remove_file(root.join(f));
    }
}

/// A copy of `case`'s tree in a temporary directory (symlinks kept).
pub fn copy_tree(case: &str) -> tempfile::TempDir {
    let d = tempfile::tempdir().unwrap();
    let status = std::process::Command::new("cp")
        .args(["-a"])
        .arg(fixtures().join(case).join("root"))
        .arg(d.path().join("root"))
        .status()
        .unwrap();
    assert!(status.success());
    d
}

/// What running a case as a variant gave.
enum Ran {
    /// The variant does not apply (nothing to move, an on-chip NPU on an x86 host).
    NotApplicable,
    /// The verdict held.
    Kept,
    /// The verdict changed: why.
    Changed(String),
}

/// Runs `case` as `variant`.
fn run_variant(case: &str, variant: &str) -> Ran {
    let e: Expected = load(case);
    if e.kind != "board-check" {
        return Ran::NotApplicable;
    }
    let d = copy_tree(case);
    let root = d.path().join("root");
    let mut check_status = e.check_status.clone();
    let mut must_not_fire = e.must_not_fire.clone();
    match variant {
        "docker-log" | "podman-log" | "cri-log" => {
            if containerise(&root, variant.trim_end_matches("-log")) == 0 {
                return Ran::NotApplicable;
            }
        }
        "x86-host" => {
            let on_pci = e.accelerator.starts_with("hailo") || e.accelerator == "amd-xdna";
            if !on_pci || !root.join("sys/bus/pci/devices").is_dir() {
                return Ran::NotApplicable;
            }
            // A fault of the board itself (its boot files, power supply, PCIe link) has no
            // x86 counterpart.
            const BOARD_ONLY: [&str; 5] = [
                "cma.boot_param",
                "reboot.pending",
                "board.power",
                "board.thermal",
                "hailo.pcie_link",
            ];
            if e.must_fire
                .iter()
                .any(|id| BOARD_ONLY.contains(&id.as_str()))
            {
                return Ran::NotApplicable;
            }
            x86_host(&root);
            check_status.remove("board.identity");
            must_not_fire.retain(|id| id != "board.identity");
            // A board-specific link expectation (the Pi's Gen 3 x1) does not carry to a PC.
            check_status.remove("hailo.pcie_link");
        }
        "no-dpkg" => {
            if !root.join("var/lib/dpkg").exists() {
                return Ran::NotApplicable;
            }
            std::fs::remove_dir_all(root.join("var/lib/dpkg")).unwrap();
            // Without the database the package checks have no input: skip is their honest
            // verdict where an own case pins them to pass.
            for id in ["hailo.package_generation", "hailo.runtime_library"] {
                if check_status.get(id).map(String::as_str) == Some("pass") {
                    check_status.remove(id);
                }
            }
        }
        other => panic!("unknown variant {other}"),
    }
    let id = format!("{} ({variant})", e.id);
    let outcome = std::panic::catch_unwind(|| {
        let report = assert_verdict(
            &id,
            &root,
            &e.must_fire,
            &must_not_fire,
            &e.worst_status,
            &check_status,
        );
        assert_advice(&id, &report, &e.advice);
    });
    match outcome {
        Ok(()) => Ran::Kept,
        Err(p) => Ran::Changed(
            p.downcast_ref::<String>()
                .cloned()
                .unwrap_or_else(|| "panicked".into()),
        ),
    }
}

/// Runs every case as `variant` and fails listing every case whose verdict changed.
fn every_case(variant: &str) {
    let mut failures = Vec::new();
    let mut ran = 0;
    for case in CASES {
        // Fixtures whose fault is about where a log sits are their own variants.
        if SKIP.iter().any(|(v, c, _)| *v == variant && c == case) {
            continue;
        }
        match run_variant(case, variant) {
            Ran::NotApplicable => {}
            Ran::Kept => ran += 1,
            Ran::Changed(f) => {
                ran += 1;
                failures.push(f);
            }
        }
    }
    assert!(ran > 5, "{variant}: only {ran} case(s) apply");
    assert!(
        failures.is_empty(),
        "{variant}: {} case(s) changed their verdict:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// (variant, case, why it does not apply).
const SKIP: &[(&str, &str, &str)] = &[
    (
        "x86-host",
        "own-pi5-hailo8-16k-kernel-no-recorded-page-size",
        "the fault is the Pi 5 kernel's 16 KiB pages, read from its release; an x86 kernel has 4 KiB",
    ),
    (
        "no-dpkg",
        "pi5-hailo10h-mixed-4.x-and-5.x-userland",
        "the fault is the two lines' packages in the dpkg database; without it only one library is on disk",
    ),
    (
        "no-dpkg",
        "own-pi5-hailo10h-genai-zoo-5.2.0-runtime-5.1.1",
        "the fault is a package version (the model zoo ahead of the runtime) that only dpkg records",
    ),
];

#[test]
fn the_same_fault_in_a_docker_log_keeps_its_verdict() {
    every_case("docker-log");
}

#[test]
fn the_same_fault_in_a_podman_log_keeps_its_verdict() {
    every_case("podman-log");
}

#[test]
fn the_same_fault_in_a_kubernetes_pod_log_keeps_its_verdict() {
    every_case("cri-log");
}

#[test]
fn the_same_fault_on_an_x86_host_keeps_its_verdict() {
    every_case("x86-host");
}

#[test]
fn the_same_fault_without_dpkg_keeps_its_verdict() {
    every_case("no-dpkg");
}
