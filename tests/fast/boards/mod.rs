//! Board-tree cases: `npu-agent check --root <case>/root --format json` on every case under
//! tests/fixtures/boards, asserted exactly as tests/fixtures/boards/README.md defines:
//! `must_fire`, `must_not_fire`, `[check_status]`, `worst_status` (the most severe status among
//! the `must_fire` checks), no named check in `error` (unless `[check_status]` pins it), and the
//! advice expectations: `health_not`, `remedy_must_not_match`, `[remedy_must_match]`.
//! One test per case and per `[[variant]]`; failure messages name the case id (BR-NN / OWN-NN).

mod extras;
mod policies;

use extras::*;

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
