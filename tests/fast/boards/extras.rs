//! What some cases assert beyond their verdict: the figures and words of their findings.

use super::*;

/// Status 76 decides without the container's library version; the identity names HAOS and the
/// add-on; no package line anywhere.
pub(super) fn br40_extra(r: &Value) {
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
pub(super) fn br43_extra(r: &Value) {
    assert_eq!(finding(r, "npu.workload")["status"], "warn");
    assert_remedy_mentions(r, "npu.workload", "base_domain_id");
}

/// rocket is named from the platform devices' driver links.
pub(super) fn br44_extra(r: &Value) {
    let f = finding(r, "rknpu.driver_version");
    assert!(
        f["evidence"].to_string().contains("fdab0000.npu/driver"),
        "{f}"
    );
    assert!(f["summary"].as_str().unwrap().contains("rocket"), "{f}");
}

/// A source build is no missing package; the decay is named with both figures.
pub(super) fn br47_extra(r: &Value) {
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
pub(super) fn own50_extra(r: &Value) {
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
pub(super) fn assert_remedy_lacks(report: &Value, id: &str, needle: &str) {
    let text = remedy_and_summary(report, id);
    assert!(
        !text.contains(needle),
        "{id}: remedy/summary must not mention {needle:?}: {text}"
    );
}

pub(super) fn br29_extra(r: &Value) {
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

pub(super) fn br31_extra(r: &Value) {
    assert_remedy_mentions(r, "rknpu.device_node", "/dev/rknpu");
    assert_eq!(
        finding(r, "rknpu.device_node")["observed"]["rknpu_nodes"],
        serde_json::json!(["/dev/dri/card1", "/dev/dri/renderD129"])
    );
    assert_remedy_lacks(r, "rknpu.device_node", "boot a vendor kernel");
}

pub(super) fn br32_extra(r: &Value) {
    assert_remedy_mentions(r, "cma.boot_param", "2 times");
    assert_remedy_mentions(r, "cma.boot_param", "Failed to reserve 256 MiB");
}

pub(super) fn br34_extra(r: &Value) {
    let f = finding(r, "cma.free");
    assert_eq!(
        f["observed"]["sources"],
        serde_json::json!(["/var/log/kern.log"])
    );
    assert_remedy_mentions(r, "cma.free", "could not be read");
}

pub(super) fn br35_extra(r: &Value) {
    assert_remedy_mentions(r, "rknpu.runtime_library", "librkllmrt");
    assert_remedy_mentions(r, "rknpu.runtime_library", "1.0.2");
    assert_eq!(
        finding(r, "rknpu.runtime_library")["observed"]["rkllm_runtime_version"],
        "1.0.1"
    );
    // The driver is not blamed for the runtime's fault.
    assert_remedy_lacks(r, "rknpu.driver_version", "upgrade the board's kernel");
}

pub(super) fn own16_extra(r: &Value) {
    assert_eq!(
        finding(r, "rknpu.device_node")["observed"]["rknpu_nodes"],
        serde_json::json!(["/dev/dri/card1", "/dev/dri/renderD129"])
    );
    assert_remedy_lacks(r, "rknpu.driver_version", "no rknpu driver");
}

pub(super) fn own17_extra(r: &Value) {
    assert_remedy_mentions(r, "board.identity", "kernel release empty");
    assert_remedy_lacks(r, "rknpu.driver_version", "kernel )");
    assert_remedy_mentions(r, "rknpu.driver_version", "nothing here uses the NPU");
}

pub(super) fn own18_extra(r: &Value) {
    let f = finding(r, "cma.free");
    let consumers = f["observed"]["cma_consumers"].to_string();
    assert!(consumers.contains("nvme nvme0"), "{consumers}");
    assert!(consumers.contains("rockchip-vop2"), "{consumers}");
    assert_eq!(f["observed"]["cma_total_bytes"], 128u64 << 20);
}

pub(super) fn own19_extra(r: &Value) {
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

pub(super) fn own20_extra(r: &Value) {
    assert_remedy_mentions(r, "cma.boot_param", "512 MiB");
    assert_remedy_mentions(r, "cma.boot_param", "no CMA at all");
}

pub(super) fn own22_extra(r: &Value) {
    assert_remedy_mentions(r, "hailo.runtime_library", "hailo-gen-ai-model-zoo=5.1.1");
    assert_remedy_lacks(r, "hailo.runtime_library", "apt purge");
}

pub(super) fn own21_extra(r: &Value) {
    assert_remedy_mentions(r, "rknpu.runtime_library", "librknnrt.so");
    assert_remedy_mentions(r, "rknpu.runtime_library", "Invalid RKNN model version 6");
    assert_remedy_lacks(r, "rknpu.runtime_library", "kernel");
}

pub(super) fn br01_extra(r: &Value) {
    assert_remedy_mentions(r, "hailo.package_generation", "hailo-h10-all");
}

pub(super) fn br03_extra(r: &Value) {
    assert_remedy_mentions(r, "hailo.driver_binding", "hailo-h10-all");
    assert_eq!(
        finding(r, "hailo.driver_binding")["observed"]["driver_version"],
        "4.22.0"
    );
    // No dpkg database on a Nerves image: skip, not error.
    assert_eq!(finding(r, "hailo.package_generation")["status"], "skip");
}

pub(super) fn br05_extra(r: &Value) {
    let f = finding(r, "hailo.firmware_mismatch");
    assert_eq!(f["observed"]["device_firmware_version"], "5.1.1");
    assert_eq!(f["expected"]["device_firmware_version"], "5.3.0");
}

pub(super) fn br07_extra(r: &Value) {
    // The library version comes from the app log, not from host dpkg (which says 4.23.0).
    assert_eq!(
        finding(r, "hailo.version_mismatch")["observed"]["library_version"],
        "4.22.0"
    );
}

pub(super) fn br08_extra(r: &Value) {
    assert_remedy_mentions(r, "cma.boot_param", "dtoverlay=cma,cma-256");
    assert_remedy_mentions(r, "cma.boot_param", "0xee000000");
}

pub(super) fn br11_extra(r: &Value) {
    assert_eq!(
        finding(r, "memory.compaction")["observed"]["action"],
        "compact"
    );
}

pub(super) fn br12_extra(r: &Value) {
    assert_remedy_mentions(r, "limits.nofile", "LimitNOFILE");
    assert_eq!(
        finding(r, "rknpu.driver_version")["observed"]["driver_version"],
        "0.8.2"
    );
}

pub(super) fn br22_extra(r: &Value) {
    assert_remedy_mentions(r, "rknpu.driver_version", "rocket");
}

pub(super) fn br23_extra(r: &Value) {
    assert_remedy_mentions(r, "limits.memlock", "LimitMEMLOCK=infinity");
    assert_remedy_mentions(r, "limits.memlock", "3098341376");
}

pub(super) fn own23_extra(r: &Value) {
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
pub(super) fn own67_extra(r: &Value) {
    let f = finding(r, "memory.fragmentation");
    assert_eq!(f["observed"]["page_size_bytes"], 16384, "{f}");
    assert_eq!(
        f["observed"]["free_high_order_bytes"],
        (5 * 512 + 1024) * 16384u64,
        "{f}"
    );
}

pub(super) fn own02_extra(r: &Value) {
    assert_eq!(r["profile"], "rk3588-rknpu");
    assert_eq!(
        finding(r, "board.identity")["observed"]["soc"],
        "RK3588 (pcie3x4 node present)"
    );
    assert_eq!(r["metrics"]["cma_total_bytes"], 268_435_456u64);
}

pub(super) fn own04_extra(r: &Value) {
    assert_eq!(finding(r, "board.identity")["observed"]["soc"], "RK3588S");
    let f = finding(r, "reboot.pending");
    assert_eq!(f["observed"]["boot_file_cma"], "cma=128M");
    assert_eq!(f["observed"]["proc_cmdline_cma"], "cma=64M");
}

pub(super) fn own06_extra(r: &Value) {
    assert_eq!(r["profile"], "generic");
    assert_eq!(r["board_id"], "3f2a9c1e5b7d4e8f9a0b1c2d3e4f5a6b");
}

pub(super) fn own07_extra(r: &Value) {
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

pub(super) fn own40_extra(r: &Value) {
    let f = finding(r, "board.power");
    assert_eq!(f["observed"]["undervoltage_now"], true);
    assert_eq!(f["observed"]["undervoltage_events"], 3);
    assert_remedy_mentions(r, "board.power", "5 A");
    assert_remedy_mentions(r, "board.power", "usb_max_current_enable=1");
    assert_eq!(r["metrics"]["undervoltage_now"], true);
    assert_eq!(r["metrics"]["undervoltage_events"], 3);
    assert_eq!(r["metrics"]["soc_temp_c"], 52.7);
}

pub(super) fn own41_extra(r: &Value) {
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

/// The HailoRT line is the driver finding's evidence, and the workload's failure is explained.
pub(super) fn own51_extra(r: &Value) {
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
pub(super) fn own52_extra(r: &Value) {
    let text = remedy_and_summary(r, "npu.workload");
    assert!(
        text.contains("HEF arch HAILO8, device arch HAILO8L"),
        "{text}"
    );
    assert_remedy_lacks(r, "npu.workload", "driver");
}

/// The holder is named from its open file, with the service's state.
pub(super) fn own53_extra(r: &Value) {
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
pub(super) fn br57_extra(r: &Value) {
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
pub(super) fn own57_extra(r: &Value) {
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
pub(super) fn own58_extra(r: &Value) {
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
