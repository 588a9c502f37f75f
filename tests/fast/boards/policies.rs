//! Rules over every case: each has a test, own cases pin every check, shared fixtures are unchanged, remedies fit the board.

use super::*;

/// The same buddyinfo without a recorded page size: the tree's own kernel release (the Pi 5's
/// `-rpi-2712`) gives 16 KiB, never the machine running the agent; with the release taken away
/// too, the page size is unknown and the 4 KiB figures are no verdict.
#[test]
fn own23_without_recorded_page_size_reads_it_from_the_tree() {
    let tmp = tempfile::tempdir().unwrap();
    let src = fixtures().join("own-pi5-16k-pages-hailo10h-buddy-orders/root");
    let st = Command::new("cp")
        .arg("-a")
        .arg(&src)
        .arg(tmp.path().join("root"))
        .status()
        .unwrap();
    assert!(st.success());
    let root = tmp.path().join("root");
    std::fs::remove_file(root.join("npu-agent-capture/page_size")).unwrap();
    let release = std::fs::read_to_string(root.join("proc/sys/kernel/osrelease")).unwrap();
    assert!(release.contains("2712"), "{release}");
    let (r, worst) = check_tree(&root);
    let f = finding(&r, "memory.fragmentation");
    assert_eq!(f["observed"]["page_size_bytes"], 16384);
    assert!(
        f["observed"]["page_size_source"]
            .as_str()
            .unwrap()
            .contains("kernel release"),
        "{f}"
    );
    assert_eq!(f["observed"]["free_high_order_bytes"], 6_656u64 * 16384);
    assert_eq!(worst["memory.fragmentation"], "pass");
    std::fs::remove_file(root.join("proc/sys/kernel/osrelease")).unwrap();
    let (r, worst) = check_tree(&root);
    let f = finding(&r, "memory.fragmentation");
    assert_eq!(f["observed"]["page_size_bytes"], 4096);
    assert!(
        f["summary"]
            .as_str()
            .unwrap()
            .contains("page size of this tree is unknown"),
        "{f}"
    );
    assert_eq!(worst["memory.fragmentation"], "info");
}

#[test]
fn br08_after_cma_set_the_boot_param_check_asks_for_the_reboot_only() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    let src = fixtures().join("pi5-16gb-hailo10h-cmdline-cma-256m/root");
    assert!(Command::new("cp")
        .arg("-a")
        .arg(&src)
        .arg(&root)
        .status()
        .unwrap()
        .success());
    let (before, _) = check_tree(&root);
    assert_eq!(finding(&before, "cma.boot_param")["status"], "fail");
    let o = Command::new(env!("CARGO_BIN_EXE_npu-agent"))
        .args(["cma", "set", "256M", "--root"])
        .arg(&root)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let (after, worst) = check_tree(&root);
    let f = finding(&after, "cma.boot_param");
    assert_eq!(worst["cma.boot_param"], "warn", "{f}");
    let summary = f["summary"].as_str().unwrap();
    let remedy = f["remedy"].as_str().unwrap();
    assert!(summary.starts_with("reboot pending"), "{f}");
    assert!(summary.contains("dtoverlay=cma,cma-256"), "{f}");
    assert!(
        remedy.contains("reboot") && !remedy.contains("remove"),
        "{f}"
    );
    assert_eq!(worst["reboot.pending"], "warn");
}

#[test]
fn every_fixture_folder_has_a_test() {
    let mut missing = Vec::new();
    for entry in std::fs::read_dir(fixtures()).unwrap() {
        let entry = entry.unwrap();
        let Ok(text) = std::fs::read_to_string(entry.path().join("expected.toml")) else {
            continue;
        };
        // MQTT behaviour cases (kind = "mqtt-behaviour") are asserted in tests/system/interop.rs.
        if text.contains("kind = \"mqtt-behaviour\"") {
            continue;
        }
        let name = entry.file_name().to_string_lossy().into_owned();
        if !CASES.contains(&name.as_str()) {
            missing.push(name);
        }
    }
    assert!(missing.is_empty(), "cases without a test: {missing:?}");
}

#[test]
fn every_variant_is_asserted() {
    for case in CASES {
        let e = load(case);
        for n in 0..e.variant.len() {
            run_case(case, Some(n));
        }
    }
}

#[test]
fn own_cases_pin_every_check() {
    for case in CASES.iter().filter(|c| c.starts_with("own-")) {
        let e = load(case);
        for id in npu_agent::check::CHECK_IDS {
            assert!(
                e.check_status.contains_key(*id),
                "{} does not pin {id}",
                e.id
            );
        }
    }
}

#[test]
fn shared_fixtures_are_copied_unchanged() {
    // The verdicts must never be edited to make a test pass: compare with ../shared when present.
    let shared = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/fixtures/boards");
    if !shared.is_dir() {
        // A clone of the repository has no ../shared: nothing to compare with, even in CI.
        // Written straight to stderr (past libtest's capture) so the skip is seen.
        use std::io::Write as _;
        let _ = writeln!(
            std::io::stderr(),
            "SKIP: {} is absent (a clone has no ../shared); the copies are not compared",
            shared.display()
        );
        return;
    }
    for entry in std::fs::read_dir(&shared).unwrap() {
        let dir = entry.unwrap().path();
        let exp = dir.join("expected.toml");
        let Ok(text) = std::fs::read_to_string(&exp) else {
            continue;
        };
        if !text.contains("kind = \"board-check\"") {
            continue;
        }
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        let ours = std::fs::read_to_string(fixtures().join(&name).join("expected.toml"))
            .unwrap_or_default();
        assert_eq!(ours, text, "{name}/expected.toml differs from ../shared");
    }
}

/// The class of the RK3588 nofile case's contradiction ("keep rknpu 0.8.2" beside "needs
/// rknpu 0.9.6 or newer"): on every fixture tree and variant, no remedy keeps a driver below a floor that
/// a warning or failure in the same report asks for.
#[test]
fn remedies_never_keep_a_driver_another_finding_rules_out() {
    let parse = |v: &str| -> Vec<u32> { v.split('.').map(|p| p.parse().unwrap()).collect() };
    let mut checked = 0;
    for case in CASES {
        let e = load(case);
        let roots =
            std::iter::once("root".to_string()).chain(e.variant.iter().map(|v| v.root.clone()));
        for root in roots {
            let (report, _) = check_tree(&fixtures().join(case).join(&root));
            let (kept, required) = rknpu_kept_and_required(&report);
            for (kid, k) in &kept {
                for (rid, r) in &required {
                    assert!(
                        parse(k) >= parse(r),
                        "{case}/{root}: {kid} keeps rknpu {k}, but {rid} needs rknpu >= {r}"
                    );
                }
                checked += 1;
            }
        }
    }
    // The cases that keep a driver (the ROCK 5B on 0.9.6 with the faulty 1.0.1 runtime) were seen.
    assert!(
        checked > 0,
        "no remedy keeps a driver: the test checks nothing"
    );
}

#[test]
fn no_remedy_names_a_tool_the_board_lacks() {
    let mut checked = 0;
    for case in CASES {
        let root = fixtures().join(case).join("root");
        let absent = tools_absent(&root);
        if absent.is_empty() {
            continue;
        }
        checked += assert_runnable_remedies(case, &root, &absent);
    }
    // The Home Assistant OS case at least (BR-40).
    assert!(checked >= 30, "only {checked} findings were walked");
}

/// Every fixture again as if it ran Home Assistant OS or Buildroot (its os-release replaced, its
/// dpkg database removed): every remedy of every finding must still be runnable there.
#[test]
fn every_fixture_on_an_appliance_os_gets_runnable_remedies() {
    let os_releases = [
        "NAME=\"Home Assistant OS\"\nID=haos\nVERSION_ID=15.0\nPRETTY_NAME=\"Home Assistant OS 15.0\"\n",
        "NAME=Buildroot\nID=buildroot\nVERSION_ID=2024.02\nPRETTY_NAME=\"Buildroot 2024.02\"\n",
    ];
    let mut fired = 0;
    for case in CASES {
        for os in os_releases {
            let tmp = tempfile::tempdir().unwrap();
            let root = tmp.path().join("root");
            let st = Command::new("cp")
                .arg("-a")
                .arg(fixtures().join(case).join("root"))
                .arg(&root)
                .status()
                .expect("cp");
            assert!(st.success());
            std::fs::create_dir_all(root.join("etc")).unwrap();
            let _ = std::fs::remove_file(root.join("etc/os-release"));
            std::fs::write(root.join("etc/os-release"), os).unwrap();
            let _ = std::fs::remove_file(root.join("var/lib/dpkg/status"));
            let absent = tools_absent(&root);
            assert!(
                absent.contains(&"apt") && absent.contains(&"sudo"),
                "{absent:?}"
            );
            let (report, _) = check_tree(&root);
            fired += report["findings"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|f| !f["remedy"].as_str().unwrap_or("").is_empty())
                .count();
            assert_runnable_remedies(case, &root, &absent);
        }
    }
    assert!(fired > 50, "only {fired} remedies were walked");
}

/// Every NPU fixture again with its workload's log ending in a failure the agent has no check
/// for: the report's health is never `ok` (`npu.workload` reports it, unexplained).
#[test]
fn a_workload_log_ending_in_a_failure_is_never_health_ok() {
    let mut walked = 0;
    for case in CASES {
        let (before, _) = check_tree(&fixtures().join(case).join("root"));
        let profile = before["findings"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["id"] == "board.identity")
            .and_then(|f| f["observed"]["profile"].as_str())
            .unwrap_or("")
            .to_string();
        let (log, line) = match profile.as_str() {
            "rk3588-rknpu" => (
                "var/log/rknn/app.log",
                "E RKNN: [10:00:00.000] rknn_query fail! ret=-1 unexpected state",
            ),
            p if p.starts_with("rpi5-hailo") => (
                "var/log/hailo-app.log",
                "[HailoRT] [error] CHECK failed - unexpected state",
            ),
            _ => continue,
        };
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("root");
        let st = Command::new("cp")
            .arg("-a")
            .arg(fixtures().join(case).join("root"))
            .arg(&root)
            .status()
            .expect("cp");
        assert!(st.success());
        let path = root.join(log);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        let mut text = std::fs::read_to_string(&path).unwrap_or_default();
        text.push_str("inference started\n");
        text.push_str(line);
        text.push('\n');
        std::fs::write(&path, text).unwrap();
        let (report, worst) = check_tree(&root);
        assert!(
            report["health"].is_string(),
            "{case}: no health in {report}"
        );
        assert_ne!(
            report["health"], "ok",
            "{case}: health ok with a failing workload"
        );
        assert!(
            matches!(
                worst.get("npu.workload").map(String::as_str),
                Some("info" | "warn" | "fail")
            ),
            "{case}: npu.workload {:?}",
            worst.get("npu.workload")
        );
        walked += 1;
    }
    assert!(walked >= 30, "only {walked} NPU fixtures walked");
}
