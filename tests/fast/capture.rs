//! `npu-agent capture`: the bundle round-trips (`check --root` on the unpacked bundle gives the
//! same verdict for every check as on the original: every board fixture, a tree whose kernel
//! lines live only in a journal directory, and this machine), it is redacted by default, and bad
//! input gives a partial bundle with a manifest, never a crash. Bundles are unpacked with the
//! system's `tar`.

use crate::support::journal;

use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_npu-agent"))
}

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/boards")
}

fn severity(s: &str) -> u8 {
    match s {
        "info" => 1,
        "error" => 2,
        "warn" => 3,
        "fail" => 4,
        _ => 0,
    }
}

/// The most severe status per check id.
fn verdicts(r: &Value) -> BTreeMap<String, String> {
    let mut out: BTreeMap<String, String> = BTreeMap::new();
    for f in r["findings"].as_array().unwrap() {
        let id = f["id"].as_str().unwrap().to_string();
        let st = f["status"].as_str().unwrap().to_string();
        let e = out.entry(id).or_insert(st.clone());
        if severity(&st) > severity(e) {
            *e = st;
        }
    }
    out
}

fn check(root: &Path) -> Value {
    let out = bin()
        .args(["check", "--format", "json", "--root"])
        .arg(root)
        .output()
        .unwrap();
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("check --root {}: {e}", root.display()))
}

/// Captures `root` (`None` = this machine) and unpacks the bundle; returns the unpacked tree and
/// the manifest.
fn capture_and_unpack(root: Option<&Path>, extra: &[&str], tmp: &Path) -> (PathBuf, Value) {
    let out = tmp.join("bundle.tar.gz");
    let mut cmd = bin();
    cmd.arg("capture").arg("--out").arg(&out).args(extra);
    if let Some(r) = root {
        cmd.arg("--root").arg(r);
    }
    let o = cmd.output().unwrap();
    assert!(
        o.status.success(),
        "capture failed: {}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    let dir = tmp.join("unpacked");
    std::fs::create_dir_all(&dir).unwrap();
    let st = Command::new("tar")
        .arg("xzf")
        .arg(&out)
        .arg("-C")
        .arg(&dir)
        .status()
        .unwrap();
    assert!(st.success(), "tar could not unpack the bundle");
    let manifest: Value = serde_json::from_slice(
        &std::fs::read(dir.join("npu-agent-capture/manifest.json")).unwrap(),
    )
    .unwrap();
    (dir, manifest)
}

#[test]
fn every_fixture_round_trips() {
    let mut cases = 0;
    for e in std::fs::read_dir(fixtures()).unwrap() {
        let case = e.unwrap().path();
        for variant in ["root", "root-after"] {
            let root = case.join(variant);
            if !root.is_dir() {
                continue;
            }
            let tmp = tempfile::tempdir().unwrap();
            let want = verdicts(&check(&root));
            let (dir, manifest) = capture_and_unpack(Some(&root), &[], tmp.path());
            let got = verdicts(&check(&dir));
            assert_eq!(
                got,
                want,
                "{}/{variant}: verdicts differ after capture",
                case.display()
            );
            // The manifest records the same verdicts and the page size used.
            let m: BTreeMap<String, String> =
                serde_json::from_value(manifest["verdicts"].clone()).unwrap();
            assert_eq!(m, want, "{}: manifest verdicts", case.display());
            assert!(manifest["page_size_bytes"].as_u64().unwrap() >= 4096);
            cases += 1;
        }
    }
    assert!(cases >= 30, "only {cases} fixture trees found");
}

/// A workload in a container: the bundle keeps its log and what names it, so the verdicts hold,
/// and never the container's environment (where its passwords and keys live).
#[test]
fn container_workloads_round_trip_without_their_environment() {
    for (case, engine) in [
        ("rock5c-rk3588s-vendor-6.1.115-rknpu-0.9.8-frigate-rknn-detector-rejects-soc-rk3588s", "docker"),
        ("rk3588-rknpu-0.8.2-nofile-1024", "docker"),
        ("pi5-8gb-haos-15.0-hailo8-driver-4.20.1-vs-frigate-hailort-4.19-status-76", "podman"),
        ("rk3588-debian11-5.10.209-rkllm-1.1.4-driver-0.9.8-model-needs-rkllm-1.2.0-invalid-magic", "cri"),
    ] {
        let d = crate::variants::copy_tree(case);
        let root = d.path().join("root");
        assert!(crate::variants::containerise(&root, engine) > 0, "{case}");
        // The engine's metadata carries a secret in the environment, as real ones do.
        for cfg in walk(&root).into_iter().filter(|p| {
            p.ends_with("config.v2.json") || p.to_string_lossy().ends_with("userdata/config.json")
        }) {
            let mut v: Value = serde_json::from_slice(&std::fs::read(&cfg).unwrap()).unwrap();
            v["Config"]["Env"] = serde_json::json!(["MQTT_PASSWORD=hunter2-secret"]);
            v["process"]["env"] = serde_json::json!(["API_KEY=hunter2-secret"]);
            std::fs::write(&cfg, v.to_string()).unwrap();
        }
        let want = verdicts(&check(&root));
        let tmp = tempfile::tempdir().unwrap();
        let (dir, _) = capture_and_unpack(Some(&root), &[], tmp.path());
        assert_eq!(verdicts(&check(&dir)), want, "{case} in a {engine} container");
        assert!(
            !all_text(&dir).contains("hunter2-secret"),
            "{case}: a container's environment reached the bundle"
        );
    }
}

/// Every file under `dir`.
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() && !p.is_symlink() {
                stack.push(p);
            } else {
                out.push(p);
            }
        }
    }
    out
}

#[test]
fn this_machine_round_trips() {
    let tmp = tempfile::tempdir().unwrap();
    let (dir, manifest) = capture_and_unpack(None, &[], tmp.path());
    let got = verdicts(&check(&dir));
    let m: BTreeMap<String, String> = serde_json::from_value(manifest["verdicts"].clone()).unwrap();
    assert_eq!(got, m, "check --root on this machine's bundle");
    assert_eq!(manifest["captured_from"], "live");
    // The kernel's page size, and uname without the host name.
    let page = std::fs::read_to_string(dir.join("npu-agent-capture/page_size")).unwrap();
    let getconf = Command::new("getconf").arg("PAGESIZE").output().unwrap();
    assert_eq!(page.trim(), String::from_utf8_lossy(&getconf.stdout).trim());
    let uname = std::fs::read_to_string(dir.join("npu-agent-capture/uname")).unwrap();
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    assert!(uname.contains(release.trim()), "{uname}");
    // Kernel messages from the ring buffer, when this machine lets us read it.
    let kmsg_read = manifest["log_sources"]
        .as_array()
        .unwrap()
        .iter()
        .any(|s| s["name"] == "/dev/kmsg" && s["state"] == "read");
    assert_eq!(
        dir.join("npu-agent-capture/kernel.log").exists(),
        kmsg_read
            || manifest["log_sources"]
                .as_array()
                .unwrap()
                .iter()
                .any(|s| s["name"] == "journal:_TRANSPORT=kernel" && s["state"] == "read")
    );
}

/// Every file of an unpacked tree, as lossy text, joined.
fn all_text(dir: &Path) -> String {
    let mut out = String::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            out.push_str(&p.display().to_string());
            out.push('\n');
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push_str(&String::from_utf8_lossy(&std::fs::read(&p).unwrap()));
                out.push('\n');
            }
        }
    }
    out
}

/// A Pi 5 tree carrying personal details in the places a real board has them.
fn personal_tree() -> tempfile::TempDir {
    let t = tempfile::tempdir().unwrap();
    let src = fixtures().join("own-pi5-hailo10h-5.1.1-healthy/root");
    assert!(Command::new("cp")
        .arg("-a")
        .arg(format!("{}/.", src.display()))
        .arg(t.path())
        .status()
        .unwrap()
        .success());
    let w = |p: &str, b: &[u8]| {
        let f = t.path().join(p);
        std::fs::create_dir_all(f.parent().unwrap()).unwrap();
        std::fs::write(f, b).unwrap();
    };
    w("proc/sys/kernel/hostname", b"kitchen-pi\n");
    w("etc/hostname", b"kitchen-pi\n");
    w("etc/machine-id", b"5f1c0e9a7b2d4c6e8f0a1b2c3d4e5f60\n");
    w("proc/device-tree/serial-number", b"9c1d2e3f4a5b6c7d\0");
    w(
        "etc/passwd",
        b"root:x:0:0:root:/root:/bin/bash\nmargaret:x:1000:1000:,,,:/home/margaret:/bin/bash\n",
    );
    let mut kern = std::fs::read(t.path().join("var/log/kern.log")).unwrap();
    kern.extend_from_slice(
        b"May 15 10:02:11 kitchen-pi kernel: [   9.1] macb 1f00100000.ethernet eth0: dc:a6:32:11:22:33 at 192.168.7.41\n\
May 15 10:02:12 kitchen-pi kernel: [   9.2] IPv6 fe80::dea6:32ff:fe11:2233 user margaret\n\
May 15 10:02:13 kitchen-pi kernel: [  12.3] cma: cma_alloc: alloc failed, req-size: 8 pages, ret: -12\n",
    );
    w("var/log/kern.log", &kern);
    // A workload whose command line carries a token and a broker password.
    w(
        "proc/777/cmdline",
        b"/usr/bin/hailo-ollama\0--api-key\0sk-live-abcdef123456\0--mqtt=mqtt://fleet:Hunter2pw@10.1.2.3:1883\0",
    );
    w("proc/777/comm", b"hailo-ollama\n");
    let limits = std::fs::read_dir(t.path().join("proc"))
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.path().join("limits"))
        .find(|p| p.exists());
    let limits = limits.map(|p| std::fs::read(p).unwrap()).unwrap_or_else(|| {
        b"Limit                     Soft Limit           Hard Limit           Units\nMax open files            1024                 524288               files\nMax locked memory         8388608              8388608              bytes\n".to_vec()
    });
    w("proc/777/limits", &limits);
    t
}

const SECRETS: &[&str] = &[
    "kitchen-pi",
    "5f1c0e9a7b2d4c6e8f0a1b2c3d4e5f60",
    "9c1d2e3f4a5b6c7d",
    "margaret",
    "dc:a6:32:11:22:33",
    "192.168.7.41",
    "fe80::dea6:32ff:fe11:2233",
    "sk-live-abcdef123456",
    "Hunter2pw",
    "10.1.2.3",
];

#[test]
fn bundles_are_redacted_by_default_and_keep_their_verdicts() {
    let t = personal_tree();
    let want = verdicts(&check(t.path()));
    assert_eq!(want["cma.free"], "fail");
    let tmp = tempfile::tempdir().unwrap();
    let (dir, manifest) = capture_and_unpack(Some(t.path()), &[], tmp.path());
    assert_eq!(manifest["redacted"], true);
    let text = all_text(&dir);
    for s in SECRETS {
        assert!(!text.contains(s), "{s} is in the redacted bundle");
    }
    // The evidence the checks need is still there.
    assert!(text.contains("ret: -12"));
    assert!(text.contains("--api-key\0<redacted>"));
    assert_eq!(verdicts(&check(&dir)), want);

    let tmp = tempfile::tempdir().unwrap();
    let (dir, manifest) = capture_and_unpack(Some(t.path()), &["--no-redact"], tmp.path());
    assert_eq!(manifest["redacted"], false);
    let text = all_text(&dir);
    // Without redaction the details the checks read are kept as they were.
    for s in [
        "kitchen-pi",
        "9c1d2e3f4a5b6c7d",
        "margaret",
        "dc:a6:32:11:22:33",
        "192.168.7.41",
        "sk-live-abcdef123456",
        "Hunter2pw",
    ] {
        assert!(text.contains(s), "--no-redact dropped {s}");
    }
}

#[test]
fn bad_input_gives_a_partial_bundle_with_a_manifest() {
    let t = personal_tree();
    // A kernel log over the 16 MiB read cap, a symlink out of the tree, a malformed meminfo.
    let mut big = Vec::with_capacity(17 << 20);
    while big.len() < 17 << 20 {
        big.extend_from_slice(
            b"May 15 10:02:11 board kernel: [   1.0] filler line of a very long kernel log\n",
        );
    }
    big.extend_from_slice(b"May 15 10:02:13 board kernel: [  12.3] cma: cma_alloc: alloc failed, req-size: 8 pages, ret: -12\n");
    std::fs::write(t.path().join("var/log/kern.log"), &big).unwrap();
    // /proc/cmdline is a symlink loop (ELOOP): unreadable both on the board and for capture.
    std::fs::remove_file(t.path().join("proc/cmdline")).ok();
    std::os::unix::fs::symlink("cmdline", t.path().join("proc/cmdline")).unwrap();
    std::fs::write(t.path().join("proc/meminfo"), b"\xff\xfe garbage\n").unwrap();
    let want = verdicts(&check(t.path()));
    let tmp = tempfile::tempdir().unwrap();
    let (dir, manifest) = capture_and_unpack(Some(t.path()), &[], tmp.path());
    let files = manifest["files"].as_array().unwrap();
    let kern = files
        .iter()
        .find(|f| f["path"] == "/var/log/kern.log")
        .expect("kern.log in the manifest");
    assert_eq!(kern["note"], "tail");
    assert!(kern["bytes"].as_u64().unwrap() <= 2 << 20);
    let missing = manifest["missing"].as_array().unwrap();
    assert!(
        missing.iter().any(|m| m["path"] == "/proc/cmdline"),
        "{missing:?}"
    );
    assert!(!dir.join("proc/cmdline").exists());
    // Every verdict that did not rest on the unreadable file is the same.
    let got = verdicts(&check(&dir));
    for (id, st) in &want {
        if st != "error" && !["cma.boot_param", "reboot.pending"].contains(&id.as_str()) {
            assert_eq!(&got[id], st, "{id}");
        }
    }
    assert_eq!(got["cma.free"], want["cma.free"]);
}

#[test]
fn an_unwritable_output_exits_1_and_leaves_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("missing-dir/b.tar.gz");
    let o = bin()
        .args(["capture", "--root"])
        .arg(fixtures().join("own-pi5-hailo10h-5.1.1-healthy/root"))
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("cannot write"));
    assert!(!out.exists());
    assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 0);
}

/// Like `keygen`, `capture` never replaces an existing file unless `--force` is given: exit 2,
/// the file untouched; with `--force` the bundle replaces it.
#[test]
fn an_existing_output_is_refused_without_force() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("b.tar.gz");
    std::fs::write(&out, "keep me").unwrap();
    let run = |force: bool| {
        let mut c = bin();
        c.args(["capture", "--root"])
            .arg(fixtures().join("own-pi5-hailo10h-5.1.1-healthy/root"))
            .arg("--out")
            .arg(&out);
        if force {
            c.arg("--force");
        }
        c.output().unwrap()
    };
    let o = run(false);
    assert_eq!(o.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        stderr.contains("file exists") && stderr.contains("--force"),
        "{stderr}"
    );
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "keep me");
    assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 1);
    let o = run(true);
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let bundle = std::fs::read(&out).unwrap();
    assert_eq!(
        &bundle[..2],
        &[0x1f, 0x8b],
        "a gzip bundle replaced the file"
    );
}

#[test]
fn a_journal_tree_round_trips_as_text_files() {
    if !journal::journal_tools() {
        return;
    }
    let t = personal_tree();
    std::fs::remove_file(t.path().join("var/log/kern.log")).unwrap();
    journal::write_journal(
        t.path(),
        "system",
        1,
        &[
            journal::Entry {
                unit: None,
                message: "cma: cma_alloc: alloc failed, req-size: 8 pages, ret: -12",
            },
            journal::Entry {
                unit: Some(("hailo-ollama.service", "hailo-ollama")),
                message:
                    "libhailort.so.5.2.0: cannot open shared object file: No such file or directory",
            },
        ],
    );
    let want = verdicts(&check(t.path()));
    assert_eq!(want["cma.free"], "fail");
    assert_eq!(want["hailo.runtime_library"], "fail");
    let tmp = tempfile::tempdir().unwrap();
    let (dir, _) = capture_and_unpack(Some(t.path()), &[], tmp.path());
    assert!(!dir.join("var/log/journal").exists());
    let k = std::fs::read_to_string(dir.join("npu-agent-capture/kernel.log")).unwrap();
    assert!(k.contains("ret: -12"));
    let w = std::fs::read_to_string(dir.join("npu-agent-capture/workload-journal.log")).unwrap();
    assert!(
        w.starts_with("hailo-ollama[4242]: libhailort.so.5.2.0"),
        "{w}"
    );
    assert_eq!(verdicts(&check(&dir)), want);
}
