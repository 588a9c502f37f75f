//! Board-tree cases: `npu-agent check --root <case>/root --format json` on every case under
//! tests/fixtures/boards, asserted exactly as tests/fixtures/boards/README.md defines:
//! `must_fire`, `must_not_fire`, `[check_status]`, `worst_status` (the most severe status among
//! the `must_fire` checks), no named check in `error` (unless `[check_status]` pins it), and the
//! advice expectations: `health_not`, `remedy_must_not_match`, `[remedy_must_match]`.
//! One test per case and per `[[variant]]`; failure messages name the case id (BR-NN / OWN-NN).

use serde::Deserialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

#[derive(Debug, Deserialize)]
pub struct Expected {
    pub id: String,
    pub kind: String,
    #[serde(default)]
    pub accelerator: String,
    #[serde(default)]
    pub must_fire: Vec<String>,
    #[serde(default)]
    pub must_not_fire: Vec<String>,
    pub worst_status: String,
    #[serde(default)]
    pub check_status: BTreeMap<String, String>,
    #[serde(default)]
    variant: Vec<Variant>,
    #[serde(flatten)]
    pub advice: Advice,
}

/// What the advice must not or must say (tests/fixtures/boards/README.md, "Advice that fits the board").
#[derive(Debug, Default, Deserialize)]
pub struct Advice {
    /// The report's `health` must not be any of these.
    #[serde(default)]
    health_not: Vec<String>,
    /// No fired finding's remedy matches any of these regexes.
    #[serde(default)]
    remedy_must_not_match: Vec<String>,
    /// This finding fired and its remedy matches the regex.
    #[serde(default)]
    remedy_must_match: BTreeMap<String, String>,
}

#[derive(Debug, Deserialize)]
struct Variant {
    root: String,
    #[serde(default)]
    must_fire: Vec<String>,
    #[serde(default)]
    must_not_fire: Vec<String>,
    worst_status: String,
    #[serde(default)]
    check_status: BTreeMap<String, String>,
}

pub fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/boards")
}

fn severity(s: &str) -> u8 {
    match s {
        "pass" | "skip" => 0,
        "info" => 1,
        "error" => 2,
        "warn" => 3,
        "fail" => 4,
        other => panic!("unknown status {other:?}"),
    }
}

fn fires(s: &str) -> bool {
    matches!(s, "info" | "warn" | "fail")
}

/// Runs the real binary on a tree and returns (report JSON, most severe status per check id).
pub fn check_tree(root: &Path) -> (Value, BTreeMap<String, String>) {
    let out = Command::new(env!("CARGO_BIN_EXE_npu-agent"))
        .args(["check", "--format", "json", "--root"])
        .arg(root)
        .output()
        .expect("run npu-agent");
    let code = out
        .status
        .code()
        .expect("exited normally (no signal, no panic abort)");
    assert!(
        code == 0 || code == 1,
        "exit {code} on {}: {}",
        root.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value =
        serde_json::from_slice(&out.stdout).expect("check --format json prints JSON");
    let mut worst: BTreeMap<String, String> = BTreeMap::new();
    for f in report["findings"].as_array().expect("findings array") {
        let id = f["id"].as_str().expect("id").to_string();
        let st = f["status"].as_str().expect("status").to_string();
        match worst.get(&id) {
            Some(w) if severity(w) >= severity(&st) => {}
            _ => {
                worst.insert(id, st);
            }
        }
    }
    // The exit code follows the default --fail-on fail.
    let any_fail = worst.values().any(|s| s == "fail");
    assert_eq!(
        code,
        i32::from(any_fail),
        "exit code vs findings on {}",
        root.display()
    );
    (report, worst)
}

pub fn assert_verdict(
    case_id: &str,
    root: &Path,
    must_fire: &[String],
    must_not_fire: &[String],
    worst_status: &str,
    check_status: &BTreeMap<String, String>,
) -> Value {
    let (report, worst) = check_tree(root);
    let status = |id: &str| worst.get(id).cloned().unwrap_or_else(|| "absent".into());
    let summary = |id: &str| {
        report["findings"]
            .as_array()
            .and_then(|a| a.iter().find(|f| f["id"] == id))
            .map(|f| f["summary"].to_string())
            .unwrap_or_default()
    };
    let mut errors = Vec::new();
    for id in must_fire {
        if !fires(&status(id)) {
            errors.push(format!(
                "{id} must fire but is {} ({})",
                status(id),
                summary(id)
            ));
        }
    }
    for id in must_not_fire {
        if fires(&status(id)) {
            errors.push(format!(
                "{id} must not fire but is {} ({})",
                status(id),
                summary(id)
            ));
        }
    }
    for (id, want) in check_status {
        if status(id) != *want {
            errors.push(format!(
                "{id} must be {want} but is {} ({})",
                status(id),
                summary(id)
            ));
        }
    }
    let got_worst = must_fire
        .iter()
        .map(|id| status(id))
        .max_by_key(|s| if s == "absent" { 0 } else { severity(s) })
        .unwrap_or_else(|| "pass".into());
    let got_worst = if must_fire.is_empty() {
        "pass".to_string()
    } else {
        got_worst
    };
    if got_worst != worst_status {
        errors.push(format!(
            "worst status among must_fire is {got_worst}, expected {worst_status}"
        ));
    }
    for id in must_fire
        .iter()
        .chain(must_not_fire)
        .chain(check_status.keys())
    {
        if status(id) == "error" && check_status.get(id).map(String::as_str) != Some("error") {
            errors.push(format!("{id} ended in error ({})", summary(id)));
        }
    }
    for id in npu_agent::check::CHECK_IDS {
        if !worst.contains_key(*id) {
            errors.push(format!("no finding for {id}"));
        }
    }
    assert!(
        errors.is_empty(),
        "{case_id} ({}):\n  {}",
        root.display(),
        errors.join("\n  ")
    );
    report
}

pub fn load(case: &str) -> Expected {
    let path = fixtures().join(case).join("expected.toml");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    toml::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Asserts a case (variant `None`) or its n-th `[[variant]]`; returns the report.
fn run_case(case: &str, variant: Option<usize>) -> Value {
    let e = load(case);
    assert_eq!(e.kind, "board-check", "{case} is not a board-check case");
    match variant {
        None => {
            let report = assert_verdict(
                &e.id,
                &fixtures().join(case).join("root"),
                &e.must_fire,
                &e.must_not_fire,
                &e.worst_status,
                &e.check_status,
            );
            assert_advice(&e.id, &report, &e.advice);
            report
        }
        Some(n) => {
            let v = e
                .variant
                .get(n)
                .unwrap_or_else(|| panic!("{} has no variant {n}", e.id));
            assert_verdict(
                &format!("{} variant {}", e.id, v.root),
                &fixtures().join(case).join(&v.root),
                &v.must_fire,
                &v.must_not_fire,
                &v.worst_status,
                &v.check_status,
            )
        }
    }
}

/// The report's `health` and its fired findings' remedies against the case's advice
/// expectations.
pub fn assert_advice(case_id: &str, report: &Value, advice: &Advice) {
    let mut errors = Vec::new();
    let health = report["health"].as_str().unwrap_or("");
    if advice.health_not.iter().any(|h| h == health) {
        errors.push(format!("health is {health:?}, which the case rules out"));
    }
    let findings = report["findings"].as_array().expect("findings array");
    let fired = |f: &&Value| fires(f["status"].as_str().unwrap_or(""));
    for pattern in &advice.remedy_must_not_match {
        let re = regex_lite::Regex::new(pattern).expect("remedy_must_not_match regex");
        for f in findings.iter().filter(fired) {
            let remedy = f["remedy"].as_str().unwrap_or("");
            if re.is_match(remedy) {
                errors.push(format!("{} remedy matches {pattern:?}: {remedy}", f["id"]));
            }
        }
    }
    for (id, pattern) in &advice.remedy_must_match {
        let re = regex_lite::Regex::new(pattern).expect("remedy_must_match regex");
        let ok = findings
            .iter()
            .filter(fired)
            .any(|f| f["id"] == id.as_str() && re.is_match(f["remedy"].as_str().unwrap_or("")));
        if !ok {
            errors.push(format!(
                "no fired {id} finding whose remedy matches {pattern:?}"
            ));
        }
    }
    assert!(errors.is_empty(), "{case_id}:\n  {}", errors.join("\n  "));
}

fn finding<'a>(report: &'a Value, id: &str) -> &'a Value {
    report["findings"]
        .as_array()
        .and_then(|a| a.iter().find(|f| f["id"] == id))
        .unwrap_or_else(|| panic!("no finding {id}"))
}

/// A finding's remedy and summary, as one text to search.
fn remedy_and_summary(report: &Value, id: &str) -> String {
    let f = finding(report, id);
    format!(
        "{} {}",
        f["remedy"].as_str().unwrap_or(""),
        f["summary"].as_str().unwrap_or("")
    )
}

/// The remedy a person pastes points the same way as the case's recommendation.
fn assert_remedy_mentions(report: &Value, id: &str, needle: &str) {
    let text = remedy_and_summary(report, id);
    assert!(
        text.contains(needle),
        "{id}: remedy/summary should mention {needle:?}: {text}"
    );
}

macro_rules! cases {
    ($($(#[$attr:meta])* $name:ident => $dir:literal $(, $check:ident)?;)*) => {
        $(
            #[test]
            $(#[$attr])*
            fn $name() {
                #[allow(unused_variables)]
                let report = run_case($dir, None);
                $( $check(&report); )?
            }
        )*
        pub const CASES: &[&str] = &[$($dir),*];
    };
}

cases! {
    br01_pi5_hailo10h_mixed_userland => "pi5-hailo10h-mixed-4.x-and-5.x-userland", br01_extra;
    br03_pi5_hailo10h_bound_to_hailo_pci => "pi5-hailo10h-bound-to-hailo-pci-4.22-nerves", br03_extra;
    br05_pi5_hailo10h_firmware_behind_driver => "pi5-hailo10h-firmware-5.1.1-behind-driver-5.3.0", br05_extra;
    br06_pi5_hailo8l_driver_vs_lib => "pi5-hailo8l-driver-4.20-libhailort-4.19";
    br07_pi5_hailo8_container_lib => "pi5-hailo8-driver-4.23-container-libhailort-4.22", br07_extra;
    br08_pi5_cmdline_cma => "pi5-16gb-hailo10h-cmdline-cma-256m", br08_extra;
    br10_pi5_hailo10h_device_side_cma => "pi5-hailo10h-degraded-device-side-cma-ebusy";
    br11_rpi3_cma_ebusy => "rpi3bplus-cma-ebusy-with-free-cma", br11_extra;
    br12_rk3588_nofile => "rk3588-rknpu-0.8.2-nofile-1024", br12_extra;
    br14_nanopc_t6_bad_magic => "nanopc-t6-rknpu-0.8.2-rkllm-bad-magic";
    br15_rock5b_0_9_6 => "rock5b-rknpu-0.9.6-vendor-kernel";
    br16_liontron_builtin => "liontron-d3588-rknpu-0.9.3-builtin";
    br18_firefly_order0_oom => "firefly-aibox-3588-order0-oom";
    br20_rk3318_cma0 => "rk3318-armbian-cma-0-deliberate";
    br22_rk3588_rocket => "rk3588-mainline-rocket-no-rknpu", br22_extra;
    br23_x86_memlock => "x86-xdna-memlock-2954mb-under-systemd", br23_extra;
    br29_pi5_hailo8l_msi_28 => "pi5-hailo8l-behind-pcie-switch-msi-28", br29_extra;
    br31_turing_rk1_stray_dev_rknpu => "turing-rk1-rknpu-0.9.8-stray-dev-rknpu-symlink-in-pod", br31_extra;
    br32_rpi4_cma_no_pool => "rpi4-nerves-32bit-cma-64M-and-256M-tokens-no-pool", br32_extra;
    br34_youyeetoo_hdmirx_cma_enomem => "youyeetoo-r1-rk3588s-hdmirx-cma-alloc-enomem", br34_extra;
    br35_rock5b_rkllm_query_platform => "rock5b-rkllm-1.0.1-query-platform-error-rknpu-0.9.6-module", br35_extra;
    // Advice that fits how the stack was installed, every workload failure accounted for,
    // drivers found wherever the kernel names them, performance decay.
    br40_pi5_haos_frigate_hailort_4_19 => "pi5-8gb-haos-15.0-hailo8-driver-4.20.1-vs-frigate-hailort-4.19-status-76", br40_extra;
    br43_rk3588_rkllm_iommu_domain_full => "rk3588-16gb-rkllm-1.1.4-vlm-errno14-npu-iommu-domain-full-rknpu-0.9.8", br43_extra;
    br44_lz_d3588_mainline_rocket => "lz-d3588-ophub-armbian-bookworm-6.12.77-mainline-rocket-no-rknpu", br44_extra;
    br47_pi5_ubuntu_hailo8_source_build => "pi5-8gb-ubuntu-24.04-hailo8-4.20-source-build-clock-stuck-400mhz-fps-398-to-38", br47_extra;
    // Hosts and apps nobody had seen: accelerators found by their devices, workloads where
    // they run, runtime statuses as data, compatibility, CMA placement.
    br33_rpi4_haos_cma_not_placed => "rpi4-haos-18.1-cma-512m-not-placed-5m-fallback";
    br60_rk3588_rkllm_invalid_magic_current_driver => "rk3588-debian11-5.10.209-rkllm-1.1.4-driver-0.9.8-model-needs-rkllm-1.2.0-invalid-magic";
    br65_rock5c_frigate_rknn_rejects_rk3588s => "rock5c-rk3588s-vendor-6.1.115-rknpu-0.9.8-frigate-rknn-detector-rejects-soc-rk3588s";
    br61_x86_proxmox_hailo8l_probed_by_hailo1x => "x86-proxmox-9.1.4-6.17.4-pve-hailo8l-bound-attempt-by-hailo1x-5.2.0-probe-error-22";
    br57_x86_rtx3090_cmoe_misses_fused_gate_up => "x86-rtx3090-llama-server-8284-qwen3.5-397b-cmoe-misses-fused-gate-up-exps-cuda0-oom", br57_extra;
    own61_x86_frigate_docker_hailo8 => "own-x86-frigate-docker-hailo8-driver-4.21-container-hailort-4.19";
    own62_rk3588_rkllama_docker_nofile => "own-rk3588-rkllama-docker-nofile-1024-errno-24";
    own63_x86_viseron_podman_app_exception => "own-x86-viseron-podman-hailo8-app-exception-unexplained";
    own64_pi5_hailo10h_hef_header_hailo8 => "own-pi5-hailo10h-hailo-apps-hef-header-hailo8";
    own65_pi5_hailo10h_genai_held => "own-pi5-hailo10h-genai-held-by-hailo-ollama-status-74";
    own66_rk3399_dt_cma_not_placed => "own-rk3399-armbian-dt-cma-node-not-placed";
    own67_pi5_16k_kernel_no_recorded_page_size => "own-pi5-hailo8-16k-kernel-no-recorded-page-size", own67_extra;
    own01_pi5_hailo10h_healthy => "own-pi5-hailo10h-5.1.1-healthy";
    own02_rk3588_healthy => "own-rk3588-opi5plus-rknpu-0.9.8-healthy", own02_extra;
    own03_pi5_hailo8_healthy => "own-pi5-hailo8-4.23-healthy";
    own04_rk3588s_pending_fragmented => "own-rk3588s-opi5-pending-cma-fragmented", own04_extra;
    own05_unknown_board => "own-unknown-visionfive2";
    own06_x86_host => "own-x86-host-no-devicetree", own06_extra;
    own07_malformed_files => "own-malformed-files", own07_extra;
    own10_x86_moe_numa2_balancing_on => "own-x86-moe-numa2-balancing-on";
    own11_x86_moe_guide_cmdline_healthy => "own-x86-moe-numa2-guide-cmdline-healthy";
    own12_x86_moe_ot_single_digit_layers => "own-x86-moe-ot-single-digit-layers";
    own13_x86_moe_ot_misspelt_exps => "own-x86-moe-ot-misspelt-exps";
    own14_x86_moe_no_ot_ngl99 => "own-x86-moe-no-ot-ngl99";
    own15_x86_moe_ot_unescaped_dots => "own-x86-moe-ot-unescaped-dots";
    own16_rk3588_rknpu_uppercase_uevent => "own-rk3588-rknpu-uppercase-uevent-no-debugfs", own16_extra;
    own17_rk3588_nas_mainline_no_npu => "own-rk3588-nas-mainline-no-npu-workload", own17_extra;
    own18_rk3588_nvme_hmb_cma_held => "own-rk3588-nvme-hmb-cma-held-partial-meminfo", own18_extra;
    own19_pi5_hailo10h_module_other_kernel => "own-pi5-hailo10h-module-for-other-kernel", own19_extra;
    own20_rk3399_cma_not_reserved => "own-rk3399-extlinux-cma-512M-not-reserved-no-meminfo", own20_extra;
    own21_rk3588_rknn_invalid_model => "own-rk3588-rknn-invalid-model-version", own21_extra;
    own22_pi5_hailo10h_zoo_ahead_of_runtime => "own-pi5-hailo10h-genai-zoo-5.2.0-runtime-5.1.1", own22_extra;
    own23_pi5_16k_pages => "own-pi5-16k-pages-hailo10h-buddy-orders", own23_extra;
    own40_pi5_undervoltage => "own-pi5-hailo10h-undervoltage-3a-supply", own40_extra;
    own41_rk3588_npu_thermal => "own-rk3588-npu-thermal-throttled", own41_extra;
    own56_pi5_platform_health => "own-pi5-hailo8-3a-supply-old-bootloader-gen3-link-errors";
    own50_rk3588_failed_to_submit => "own-rk3588-opi5plus-rknpu-0.9.3-failed-to-submit-npu-cores-1-2", own50_extra;
    own51_pi5_hailo8_16k_desc_page_size => "own-pi5-hailo8-16k-pages-max-desc-page-size", own51_extra;
    own52_pi5_hailo8l_hef_for_hailo8 => "own-pi5-hailo8l-frigate-plus-hef-compiled-for-hailo8", own52_extra;
    own53_pi5_haos_hailo_held_by_addon => "own-pi5-haos-hailo8l-held-by-second-addon-status-74", own53_extra;
    own54_rk3588_rkllm_model_too_old => "own-rk3588-rkllm-1.0.1-model-converted-by-older-toolkit";
    own55_firefly_rknn_app_other_header => "own-firefly-rk3588-rknn-demo-built-against-other-rknn-api-h";
    own57_x86_ik_llama_no_ngl_offloads_all => "own-x86-ik-llama-4802-no-ngl-offloads-all-cuda-oom", own57_extra;
    own58_x86_sglang_deepep_numa_tiering => "own-x86-sglang-deepep-numa2-balancing-tiering", own58_extra;
}

/// Status 76 decides without the container's library version; the identity names HAOS and the
/// add-on; no package line anywhere.
fn br40_extra(r: &Value) {
    let id = finding(r, "board.identity")["summary"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(id.contains("Home Assistant OS 15.0"), "{id}");
    assert!(id.contains("Frigate"), "{id}");
    assert_remedy_mentions(r, "hailo.version_mismatch", "4.20.1");
    assert_eq!(finding(r, "npu.workload")["status"], "info");
}

/// The unexplained errno 14 is reported with the IOMMU-domain hint, not blamed on the driver.
fn br43_extra(r: &Value) {
    assert_eq!(finding(r, "npu.workload")["status"], "warn");
    assert_remedy_mentions(r, "npu.workload", "base_domain_id");
}

/// rocket is named from the platform devices' driver links.
fn br44_extra(r: &Value) {
    let f = finding(r, "rknpu.driver_version");
    assert!(
        f["evidence"].to_string().contains("fdab0000.npu/driver"),
        "{f}"
    );
    assert!(f["summary"].as_str().unwrap().contains("rocket"), "{f}");
}

/// A source build is no missing package; the decay is named with both figures.
fn br47_extra(r: &Value) {
    let id = finding(r, "board.identity")["summary"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        id.contains("/usr/local/lib/libhailort.so.4.20.0, outside any package"),
        "{id}"
    );
    assert_eq!(finding(r, "hailo.package_generation")["status"], "pass");
    let f = finding(r, "hailo.device_degraded");
    assert!(
        f["summary"]
            .as_str()
            .unwrap()
            .contains("398.43 to 38.00 FPS"),
        "{f}"
    );
}

/// The job that never ran is carried by the driver finding, and the remedy is the kernel's.
fn own50_extra(r: &Value) {
    let f = finding(r, "rknpu.driver_version");
    assert!(
        f["summary"]
            .as_str()
            .unwrap()
            .contains("the NPU workload fails with it"),
        "{f}"
    );
    assert!(
        f["evidence"].to_string().contains("failed to submit!"),
        "{f}"
    );
    assert_remedy_mentions(r, "rknpu.driver_version", "kernel");
    assert_remedy_lacks(r, "rknpu.driver_version", "librknnrt");
}

/// The remedy and summary of a finding do NOT contain `needle` (a remedy for another cause).
fn assert_remedy_lacks(report: &Value, id: &str, needle: &str) {
    let text = remedy_and_summary(report, id);
    assert!(
        !text.contains(needle),
        "{id}: remedy/summary must not mention {needle:?}: {text}"
    );
}

fn br29_extra(r: &Value) {
    // Interrupts, not packages: no purge-and-reinstall.
    for id in ["hailo.pci_device", "hailo.driver_binding"] {
        assert_remedy_lacks(r, id, "apt purge");
        assert_remedy_mentions(r, id, "directly");
    }
    assert_eq!(
        finding(r, "hailo.pci_device")["observed"]["probe_failure"],
        "Interrupts"
    );
}
fn br31_extra(r: &Value) {
    assert_remedy_mentions(r, "rknpu.device_node", "/dev/rknpu");
    assert_eq!(
        finding(r, "rknpu.device_node")["observed"]["rknpu_nodes"],
        serde_json::json!(["/dev/dri/card1", "/dev/dri/renderD129"])
    );
    assert_remedy_lacks(r, "rknpu.device_node", "boot a vendor kernel");
}
fn br32_extra(r: &Value) {
    assert_remedy_mentions(r, "cma.boot_param", "2 times");
    assert_remedy_mentions(r, "cma.boot_param", "Failed to reserve 256 MiB");
}
fn br34_extra(r: &Value) {
    let f = finding(r, "cma.free");
    assert_eq!(
        f["observed"]["sources"],
        serde_json::json!(["/var/log/kern.log"])
    );
    assert_remedy_mentions(r, "cma.free", "could not be read");
}
fn br35_extra(r: &Value) {
    assert_remedy_mentions(r, "rknpu.runtime_library", "librkllmrt");
    assert_remedy_mentions(r, "rknpu.runtime_library", "1.0.2");
    assert_eq!(
        finding(r, "rknpu.runtime_library")["observed"]["rkllm_runtime_version"],
        "1.0.1"
    );
    // The driver is not blamed for the runtime's fault.
    assert_remedy_lacks(r, "rknpu.driver_version", "upgrade the board's kernel");
}
fn own16_extra(r: &Value) {
    assert_eq!(
        finding(r, "rknpu.device_node")["observed"]["rknpu_nodes"],
        serde_json::json!(["/dev/dri/card1", "/dev/dri/renderD129"])
    );
    assert_remedy_lacks(r, "rknpu.driver_version", "no rknpu driver");
}
fn own17_extra(r: &Value) {
    assert_remedy_mentions(r, "board.identity", "kernel release empty");
    assert_remedy_lacks(r, "rknpu.driver_version", "kernel )");
    assert_remedy_mentions(r, "rknpu.driver_version", "nothing here uses the NPU");
}
fn own18_extra(r: &Value) {
    let f = finding(r, "cma.free");
    let consumers = f["observed"]["cma_consumers"].to_string();
    assert!(consumers.contains("nvme nvme0"), "{consumers}");
    assert!(consumers.contains("rockchip-vop2"), "{consumers}");
    assert_eq!(f["observed"]["cma_total_bytes"], 128u64 << 20);
}
fn own19_extra(r: &Value) {
    for id in ["hailo.pci_device", "hailo.driver_binding"] {
        assert_remedy_mentions(r, id, "dkms autoinstall");
        assert_remedy_lacks(r, id, "apt purge");
    }
    assert_eq!(
        finding(r, "hailo.driver_binding")["observed"]["probe_failure"],
        "ModuleForOtherKernel"
    );
    // The DKMS-build variant of the same board: its own cause, again no purge.
    let d = run_case("own-pi5-hailo10h-module-for-other-kernel", Some(0));
    assert_eq!(
        finding(&d, "hailo.driver_binding")["observed"]["probe_failure"],
        "DkmsBuildFailed"
    );
    assert_remedy_mentions(&d, "hailo.driver_binding", "headers");
    assert_remedy_lacks(&d, "hailo.driver_binding", "apt purge");
}
fn own20_extra(r: &Value) {
    assert_remedy_mentions(r, "cma.boot_param", "512 MiB");
    assert_remedy_mentions(r, "cma.boot_param", "no CMA at all");
}
fn own22_extra(r: &Value) {
    assert_remedy_mentions(r, "hailo.runtime_library", "hailo-gen-ai-model-zoo=5.1.1");
    assert_remedy_lacks(r, "hailo.runtime_library", "apt purge");
}
fn own21_extra(r: &Value) {
    assert_remedy_mentions(r, "rknpu.runtime_library", "librknnrt.so");
    assert_remedy_mentions(r, "rknpu.runtime_library", "Invalid RKNN model version 6");
    assert_remedy_lacks(r, "rknpu.runtime_library", "kernel");
}

fn br01_extra(r: &Value) {
    assert_remedy_mentions(r, "hailo.package_generation", "hailo-h10-all");
}
fn br03_extra(r: &Value) {
    assert_remedy_mentions(r, "hailo.driver_binding", "hailo-h10-all");
    assert_eq!(
        finding(r, "hailo.driver_binding")["observed"]["driver_version"],
        "4.22.0"
    );
    // No dpkg database on a Nerves image: skip, not error.
    assert_eq!(finding(r, "hailo.package_generation")["status"], "skip");
}
fn br05_extra(r: &Value) {
    let f = finding(r, "hailo.firmware_mismatch");
    assert_eq!(f["observed"]["device_firmware_version"], "5.1.1");
    assert_eq!(f["expected"]["device_firmware_version"], "5.3.0");
}
fn br07_extra(r: &Value) {
    // The library version comes from the app log, not from host dpkg (which says 4.23.0).
    assert_eq!(
        finding(r, "hailo.version_mismatch")["observed"]["library_version"],
        "4.22.0"
    );
}
fn br08_extra(r: &Value) {
    assert_remedy_mentions(r, "cma.boot_param", "dtoverlay=cma,cma-256");
    assert_remedy_mentions(r, "cma.boot_param", "0xee000000");
}
fn br11_extra(r: &Value) {
    assert_eq!(
        finding(r, "memory.compaction")["observed"]["action"],
        "compact"
    );
}
fn br12_extra(r: &Value) {
    assert_remedy_mentions(r, "limits.nofile", "LimitNOFILE");
    assert_eq!(
        finding(r, "rknpu.driver_version")["observed"]["driver_version"],
        "0.8.2"
    );
}
fn br22_extra(r: &Value) {
    assert_remedy_mentions(r, "rknpu.driver_version", "rocket");
}
fn br23_extra(r: &Value) {
    assert_remedy_mentions(r, "limits.memlock", "LimitMEMLOCK=infinity");
    assert_remedy_mentions(r, "limits.memlock", "3098341376");
}
fn own23_extra(r: &Value) {
    // 16 KiB pages (recorded by capture): order 9 = 8 MiB, order 11 = 32 MiB. Figures worked out
    // by hand from the fixture's buddyinfo: 68908 free pages, 6656 of them in orders 9-11.
    let f = finding(r, "memory.fragmentation");
    assert_eq!(f["observed"]["page_size_bytes"], 16384);
    assert_eq!(f["observed"]["free_bytes"], 68_908u64 * 16384);
    assert_eq!(f["observed"]["free_high_order_bytes"], 6_656u64 * 16384);
    assert_eq!(f["observed"]["largest_free_block_bytes"], 33_554_432u64);
    assert!(
        f["summary"].as_str().unwrap().contains("blocks of 8 MiB"),
        "{f}"
    );
    assert_eq!(r["metrics"]["largest_free_block_bytes"], 33_554_432u64);
}

/// The page size is the tree's kernel's (16 KiB), and the figures are in it.
fn own67_extra(r: &Value) {
    let f = finding(r, "memory.fragmentation");
    assert_eq!(f["observed"]["page_size_bytes"], 16384, "{f}");
    assert_eq!(
        f["observed"]["free_high_order_bytes"],
        (5 * 512 + 1024) * 16384u64,
        "{f}"
    );
}

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

fn own02_extra(r: &Value) {
    assert_eq!(r["profile"], "rk3588-rknpu");
    assert_eq!(
        finding(r, "board.identity")["observed"]["soc"],
        "RK3588 (pcie3x4 node present)"
    );
    assert_eq!(r["metrics"]["cma_total_bytes"], 268_435_456u64);
}
fn own04_extra(r: &Value) {
    assert_eq!(finding(r, "board.identity")["observed"]["soc"], "RK3588S");
    let f = finding(r, "reboot.pending");
    assert_eq!(f["observed"]["boot_file_cma"], "cma=128M");
    assert_eq!(f["observed"]["proc_cmdline_cma"], "cma=64M");
}
fn own06_extra(r: &Value) {
    assert_eq!(r["profile"], "generic");
    assert_eq!(r["board_id"], "3f2a9c1e5b7d4e8f9a0b1c2d3e4f5a6b");
}
fn own07_extra(r: &Value) {
    // Control characters and invalid UTF-8 are dropped from the model.
    assert_eq!(r["model"], "Radxa ROCK 5B");
    let f = finding(r, "cma.pool_size");
    assert!(
        f["summary"]
            .as_str()
            .unwrap()
            .contains("/proc/meminfo: malformed"),
        "{f}"
    );
}

fn own40_extra(r: &Value) {
    let f = finding(r, "board.power");
    assert_eq!(f["observed"]["undervoltage_now"], true);
    assert_eq!(f["observed"]["undervoltage_events"], 3);
    assert_remedy_mentions(r, "board.power", "5 A");
    assert_remedy_mentions(r, "board.power", "usb_max_current_enable=1");
    assert_eq!(r["metrics"]["undervoltage_now"], true);
    assert_eq!(r["metrics"]["undervoltage_events"], 3);
    assert_eq!(r["metrics"]["soc_temp_c"], 52.7);
}
fn own41_extra(r: &Value) {
    let f = finding(r, "board.thermal");
    assert!(
        f["summary"]
            .as_str()
            .unwrap()
            .starts_with("NPU (npu-thermal) at 88.5"),
        "{f}"
    );
    assert_eq!(f["expected"]["npu-thermal_passive_trip_c"], 85.0);
    assert_eq!(f["observed"]["zone_temp_c"]["npu-thermal"], 88.5);
    assert_eq!(r["metrics"]["soc_temp_c"], 88.5);
    assert_eq!(r["metrics"]["npu_load_percent"], 98.0);
    assert_eq!(
        r["metrics"]["npu_core_load_percent"],
        serde_json::json!([98, 97, 99])
    );
    assert_eq!(r["metrics"]["npu_freq_hz"], 300_000_000u64);
    // Absent, not 0: a board without an under-voltage sensor has no undervoltage_now.
    assert!(
        r["metrics"].get("undervoltage_now").is_none(),
        "{}",
        r["metrics"]
    );
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

/// (finding id, driver version) pairs.
type IdVersions = Vec<(String, String)>;

/// The driver versions a remedy keeps or builds on (`keep rknpu X`, `works on the installed
/// rknpu X`, `a runtime release made for rknpu X`) and the floors a warning or failure asks for
/// (`needs rknpu >= Y`, `carrying rknpu >= Y`), from one report.
fn rknpu_kept_and_required(report: &Value) -> (IdVersions, IdVersions) {
    let version = |t: &str| -> Option<String> {
        let v: String = t
            .chars()
            .take_while(|c| c.is_ascii_digit() || *c == '.')
            .collect();
        let v = v.trim_end_matches('.').to_string();
        (v.split('.').count() == 3).then_some(v)
    };
    let after = |text: &str, marker: &str| -> Vec<String> {
        text.match_indices(marker)
            .filter_map(|(i, _)| version(&text[i + marker.len()..]))
            .collect()
    };
    let (mut kept, mut required) = (Vec::new(), Vec::new());
    for f in report["findings"].as_array().into_iter().flatten() {
        let id = f["id"].as_str().unwrap_or("").to_string();
        let remedy = f["remedy"].as_str().unwrap_or("");
        for m in [
            "keep rknpu ",
            "works on the installed rknpu ",
            "made for rknpu ",
        ] {
            kept.extend(after(remedy, m).into_iter().map(|v| (id.clone(), v)));
        }
        if matches!(f["status"].as_str(), Some("warn" | "fail" | "error")) {
            let text = format!("{} {}", f["summary"].as_str().unwrap_or(""), remedy);
            for m in ["needs rknpu >= ", "carrying rknpu >= "] {
                required.extend(after(&text, m).into_iter().map(|v| (id.clone(), v)));
            }
        }
    }
    (kept, required)
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

/// The tools a board tree shows it lacks, read from the tree itself (not from the agent): dpkg
/// where os-release names an OS that is not Debian-based and there is no dpkg database; systemd
/// units and sudo on appliance OSes (Home Assistant OS, Buildroot).
pub(crate) fn tools_absent(root: &Path) -> Vec<&'static str> {
    let os = std::fs::read_to_string(root.join("etc/os-release")).unwrap_or_default();
    let field = |k: &str| {
        os.lines()
            .find_map(|l| l.strip_prefix(&format!("{k}=")))
            .map(|v| v.trim_matches('"').to_ascii_lowercase())
    };
    let Some(id) = field("ID") else {
        return Vec::new();
    };
    let like = field("ID_LIKE").unwrap_or_default();
    let debian = ["debian", "ubuntu", "raspbian"]
        .iter()
        .any(|d| id == *d || like.split_whitespace().any(|l| l == *d));
    let mut absent = Vec::new();
    if !debian && !root.join("var/lib/dpkg/status").exists() {
        absent.extend(["apt", "apt-get", "apt-mark", "dpkg", "dkms"]);
    }
    if matches!(id.as_str(), "haos" | "hassos" | "buildroot") {
        absent.extend(["sudo", "systemctl"]);
    }
    absent
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

/// Asserts no finding's remedy on `root` names one of the `absent` tools; returns the number of
/// findings walked.
fn assert_runnable_remedies(case: &str, root: &Path, absent: &[&str]) -> usize {
    let (report, _) = check_tree(root);
    let findings = report["findings"].as_array().expect("findings");
    for f in findings {
        let remedy = f["remedy"].as_str().unwrap_or("");
        for tool in absent {
            let named = remedy.match_indices(&format!("{tool} ")).any(|(i, _)| {
                remedy[..i]
                    .chars()
                    .next_back()
                    .is_none_or(|c| !c.is_ascii_alphanumeric() && c != '-' && c != '_')
            });
            assert!(!named, "{case}: {} names `{tool}`: {remedy}", f["id"]);
        }
    }
    findings.len()
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

/// The HailoRT line is the driver finding's evidence, and the workload's failure is explained.
fn own51_extra(r: &Value) {
    let f = finding(r, "hailo.driver_binding");
    assert!(
        f["evidence"]
            .to_string()
            .contains("max_desc_page_size given 16384"),
        "{f}"
    );
    assert_remedy_mentions(r, "hailo.driver_binding", "/etc/modprobe.d/hailo_pci.conf");
    assert!(
        finding(r, "npu.workload")["summary"]
            .as_str()
            .unwrap()
            .contains("explained by hailo.driver_binding"),
        "{r}"
    );
}

/// The model's architecture decides; the driver is not named as the cause.
fn own52_extra(r: &Value) {
    let text = remedy_and_summary(r, "npu.workload");
    assert!(
        text.contains("HEF arch HAILO8, device arch HAILO8L"),
        "{text}"
    );
    assert_remedy_lacks(r, "npu.workload", "driver");
}

/// The holder is named from its open file, with the service's state.
fn own53_extra(r: &Value) {
    let f = finding(r, "npu.workload");
    let summary = f["summary"].as_str().unwrap();
    assert!(
        summary.contains("/dev/hailo0 is open in pid 2211 (python3 -m wyoming_hailo_whisper)"),
        "{summary}"
    );
    assert!(
        summary.contains("hailort_service) is not running"),
        "{summary}"
    );
    assert!(
        f["evidence"].to_string().contains("/proc/2211/fd/17"),
        "{f}"
    );
}

/// The -cmoe pattern of build 8284 is named with the fused experts it misses, the misspelt rule
/// gets no "did you mean" that only matches tensors already in RAM, and the server's own log
/// confirms the failed load.
fn br57_extra(r: &Value) {
    let ot = finding(r, "llm.override_tensor");
    let s = ot["summary"].as_str().unwrap();
    assert!(
        s.contains("blk.N.ffn_gate_up_exps.weight for N in 0-59"),
        "{s}"
    );
    assert!(s.contains("llama.cpp build 8284"), "{s}");
    assert!(!s.contains("did you mean"), "{s}");
    let remedy = ot["remedy"].as_str().unwrap();
    assert!(
        remedy.contains(r"-ot '\.ffn_(gate_up|down)_exps=CPU'"),
        "{remedy}"
    );
    assert!(remedy.contains("PR #20416"), "{remedy}");
    let v = finding(r, "llm.vram_budget");
    // 144817.04 MiB as the log prints it (two decimals).
    assert_eq!(v["observed"]["log_failed_alloc_bytes"], 151_851_672_535u64);
    assert!(
        v["summary"]
            .as_str()
            .unwrap()
            .contains("23.30 GiB free when the server started"),
        "{v}"
    );
}

/// ik_llama.cpp's build comes from its own log, found through the process's standard error; a
/// missing -ngl is every layer from build 4761 on, and the log's placement agrees.
fn own57_extra(r: &Value) {
    let ot = finding(r, "llm.override_tensor");
    let s = ot["summary"].as_str().unwrap();
    assert!(s.contains("-ngl (unset) offloads 16 of 16 layers"), "{s}");
    assert!(
        s.contains("ik_llama.cpp build 4802 offloads every layer"),
        "{s}"
    );
    assert_eq!(ot["observed"]["engine"], "ik_llama.cpp");
    assert_eq!(ot["observed"]["build"], 4802);
    assert_eq!(ot["observed"]["log_agrees"], true);
    let v = finding(r, "llm.vram_budget");
    assert_eq!(v["observed"]["log_offloaded_layers"], 17);
    // The log's MiB have two decimals: within 0.005 MiB of the header's GPU tensors.
    let logged = v["observed"]["log_failed_alloc_bytes"].as_u64().unwrap();
    let predicted = v["observed"]["weights_gpu_bytes"].as_u64().unwrap();
    assert!(
        logged.abs_diff(predicted) <= 5243,
        "{logged} vs {predicted}"
    );
    assert!(
        v["evidence"]
            .to_string()
            .contains("/srv/llm/logs/ik-server.log"),
        "{v}"
    );
}

/// Mode 2 is on (a bitmask), and the SGLang server with DeepEP is named with its worker.
fn own58_extra(r: &Value) {
    let f = finding(r, "kernel.numa_balancing");
    let s = f["summary"].as_str().unwrap();
    assert!(
        s.contains("kernel.numa_balancing = 2, memory-tiering mode"),
        "{s}"
    );
    assert!(
        s.contains("SGLang server python3 (pid 5120, with DeepEP)"),
        "{s}"
    );
    assert!(s.contains("DeepEP#624"), "{s}");
    let ot = finding(r, "llm.override_tensor");
    assert!(
        ot["summary"]
            .as_str()
            .unwrap()
            .contains("(and 1 worker process(es)) runs SGLang"),
        "{ot}"
    );
}
