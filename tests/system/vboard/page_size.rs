//! Page-size facts on live kernels: Debian's 16 KiB-page arm64 kernel (the page size of the
//! Pi 5's own kernel) and the 4 KiB cloud kernel, each read by the agent from the running kernel.

use super::*;
use harness::Kernel;

/// What a board on `kernel` says about its pages: the kernel release, the kernel's own page size
/// (`KernelPageSize` in /proc/self/smaps, kB), MemFree (kB), and the agent's report (the Hailo-8
/// profile: its descriptor-page check is the one that reads the page size).
const COMMANDS: &str = r#"vb_section release uname -r
vb_section kpage_kb awk '/^KernelPageSize:/ {print $2; exit}' /proc/self/smaps
vb_section memfree_kb awk '/^MemFree:/ {print $2}' /proc/meminfo
vb_section check npu-agent check --format json --profile rpi5-hailo8"#;

/// Boots a Pi 5 on `kernel` once with [`COMMANDS`] and `extra`; returns the board (it holds the
/// console files), the finished boot and its wall time.
fn boot_pi5(name: &str, kernel: Kernel, extra: &str) -> Option<(Board, Boot, Duration)> {
    let spec = BoardSpec::new(name, Personality::Pi5)
        .kernel(kernel)
        .init(&format!("{COMMANDS}\n{extra}"));
    let mut board = Board::new(spec)?;
    let mut b = board.boot();
    assert_eq!(b.wait_end(T), BootEnd::PowerOff);
    let took = b.duration().expect("ended");
    Some((board, b, took))
}

/// The page-size facts of a report, checked against the kernel's own figures: the memory check's
/// `page_size_bytes` from the live kernel (source "kernel", not a guess from the release name),
/// and its free bytes (buddyinfo's page counts times that size) within a quarter of MemFree, so a
/// wrong page size (4x off either way) cannot pass.
fn assert_page_facts(b: &Boot, want_bytes: u64) {
    let kpage_kb: u64 = b
        .section("kpage_kb")
        .trim()
        .parse()
        .expect("KernelPageSize");
    assert_eq!(kpage_kb * 1024, want_bytes, "the kernel's own page size");
    let r = b.json("check");
    let frag = finding(&r, "memory.fragmentation");
    let o = &frag["observed"];
    assert_eq!(o["page_size_bytes"], want_bytes, "{frag:#}");
    assert_eq!(o["page_size_source"], "kernel", "{frag:#}");
    let memfree_bytes: u64 = b
        .section("memfree_kb")
        .trim()
        .parse::<u64>()
        .expect("MemFree")
        * 1024;
    let free_bytes = o["free_bytes"].as_u64().expect("free_bytes");
    assert!(
        free_bytes >= memfree_bytes / 4 * 3 && free_bytes <= memfree_bytes / 4 * 5,
        "buddyinfo free {free_bytes} B vs MemFree {memfree_bytes} B: {frag:#}"
    );
}

/// A Pi 5 on Debian's 16k kernel: the agent's page size is 16384 bytes, from the kernel. Its
/// `capture` records that figure, and a check of the bundle on this 4 KiB host reads it from the
/// bundle, never from the machine running the check.
#[test]
fn pi5_on_the_16k_kernel_reports_16384_byte_pages_live_and_in_its_capture() {
    let capture = r#"npu-agent capture --out /tmp/cap.tar.gz --profile rpi5-hailo8 >/dev/null 2>&1
vb_section capture base64 /tmp/cap.tar.gz"#;
    let Some((_board, b, took)) = boot_pi5("pi5-16k", Kernel::Pages16k, capture) else {
        return;
    };
    let release = b.section("release");
    assert!(release.trim().ends_with("-arm64-16k"), "{release}");
    assert_page_facts(&b, 16384);
    let r = b.json("check");
    assert_eq!(r["model"], "Raspberry Pi 5 Model B Rev 1.0");
    assert_eq!(r["profile"], "rpi5-hailo8");
    eprintln!(
        "vboard: 16k kernel {} booted and checked in {:.1} s",
        release.trim(),
        took.as_secs_f64()
    );

    let (text, rc) = b.section_rc("capture");
    assert_eq!(rc, 0, "base64 of the bundle failed: {text}");
    let dir = unpack_bundle(&text);
    assert_eq!(
        std::fs::read_to_string(dir.path().join("npu-agent-capture/page_size"))
            .expect("the bundle's page_size")
            .trim(),
        "16384"
    );
    let root = dir.path().to_str().expect("utf-8 temp path");
    let host = fleet::npu_agent(
        &[
            "check",
            "--format",
            "json",
            "--root",
            root,
            "--profile",
            "rpi5-hailo8",
        ],
        T,
    );
    let report: Value = serde_json::from_str(&host.out)
        .unwrap_or_else(|e| panic!("host check of the bundle is not JSON ({e}): {host:?}"));
    let o = &finding(&report, "memory.fragmentation")["observed"];
    assert_eq!(o["page_size_bytes"], 16384u64, "{o:#}");
    assert_eq!(
        o["page_size_source"], "/npu-agent-capture/page_size",
        "{o:#}"
    );
}

/// A capture bundle printed by busybox `base64`, unpacked into a temp dir (the tree `check --root`
/// reads).
fn unpack_bundle(b64: &str) -> tempfile::TempDir {
    use base64::Engine as _;
    let clean: String = b64.split_whitespace().collect();
    let gz = base64::engine::general_purpose::STANDARD
        .decode(clean)
        .expect("the bundle's base64");
    let dir = tempfile::tempdir().expect("temp dir");
    tar::Archive::new(flate2::read::GzDecoder::new(gz.as_slice()))
        .unpack(dir.path())
        .expect("unpack the bundle");
    dir
}

/// The same board on the cloud kernel: 4096 bytes, so the 16k figure is the kernel's, not a
/// constant.
#[test]
fn pi5_on_the_cloud_kernel_reports_4096_byte_pages() {
    let Some((_board, b, took)) = boot_pi5("pi5-4k", Kernel::Cloud, "") else {
        return;
    };
    let release = b.section("release");
    assert!(!release.contains("16k"), "{release}");
    assert_page_facts(&b, 4096);
    eprintln!(
        "vboard: cloud kernel {} booted and checked in {:.1} s",
        release.trim(),
        took.as_secs_f64()
    );
}

/// The descriptor-page fix (`options hailo_pci force_desc_page_size=4096` in
/// /etc/modprobe.d/hailo_pci.conf, then a reboot) belongs to `hailo.driver_binding`, which only
/// judges a Hailo device bound to a driver. On a live 16 KiB kernel with no Hailo chip the check
/// skips, `fix` has nothing to apply and writes no file: the agent never sets options for a chip
/// it has not seen. The rest of the cycle needs a chip (docs/development.md).
#[test]
fn pi5_on_the_16k_kernel_without_a_hailo_chip_writes_no_desc_page_option() {
    let fix = r#"vb_section fix sh -c 'npu-agent fix hailo.driver_binding --yes --profile rpi5-hailo8 2>&1'
vb_section conf sh -c 'ls /etc/modprobe.d/hailo_pci.conf 2>&1'"#;
    let Some((_board, b, _)) = boot_pi5("pi5-16k-fix", Kernel::Pages16k, fix) else {
        return;
    };
    assert_page_facts(&b, 16384);
    let r = b.json("check");
    assert_status(&r, "hailo.pci_device", "fail");
    let binding = finding(&r, "hailo.driver_binding");
    assert_eq!(binding["status"], "skip", "{binding:#}");
    let (out, rc) = b.section_rc("fix");
    assert_eq!(rc, 0, "{out}");
    assert!(out.contains("hailo.driver_binding (skip)"), "{out}");
    assert!(out.contains("nothing to apply"), "{out}");
    assert!(!out.contains("force_desc_page_size"), "{out}");
    let (conf, rc) = b.section_rc("conf");
    assert_ne!(rc, 0, "hailo_pci.conf was written: {conf}");
}
