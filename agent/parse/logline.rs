//! Classifies one kernel, journal or workload log line into typed events by errno and status
//! code, so a check can raise a finding from a log even when the workload is not running now.
//!
//! Shapes recognised: RKNN `errno: N`, HailoRT
//! `HAILO_NAME(code)` and `Driver version (a) is different from library version (b)`,
//! `libhailort.so.X: cannot open shared object file` / `=> not found`, firmware
//! `Unsupported firmware operation. Host: a, Device: b`, kernel `cma_alloc … ret: -N`,
//! `page allocation failure: order:N`, OOM kills, rknpu/rkllm version lines, `[drm] Initialized`
//! lines, and the CMA reservation lines printed at boot.

use super::version::Version;
use regex_lite::Regex;
use std::sync::OnceLock;

/// What a log line says, typed.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum LogEvent {
    /// A user-space error with an errno (`errno: 24`, or the strerror text alone).
    Errno {
        /// 24 EMFILE, 23 ENFILE, 14 EFAULT, 12 ENOMEM, …
        errno: i32,
    },
    /// A HailoRT status rendered as `NAME(code)` or a CLI `returncode=N`.
    HailoStatus {
        /// Numeric status (74 no device, 76 driver version, 86 ioctl, …).
        code: u32,
    },
    /// HailoRT refused a driver whose version differs from the library's.
    HailoVersionMismatch {
        /// Kernel driver version.
        driver: Version,
        /// libhailort version.
        library: Version,
    },
    /// A program could not load a libhailort it was linked against.
    HailoLibraryMissing {
        /// e.g. `libhailort.so.5.2.0`.
        soname: String,
    },
    /// The chip runs firmware of another major.minor than the host library.
    HailoFirmwareMismatch {
        /// Version the host side expects.
        host: Version,
        /// Version the device reports.
        device: Version,
    },
    /// `cma_alloc: … alloc failed, req-size: N pages, ret: -R`.
    CmaAllocFail {
        /// Requested pages.
        pages: u64,
        /// Negative errno: -12 ENOMEM (no free range), -16 EBUSY (pages could not be migrated).
        ret: i32,
    },
    /// `page allocation failure: order:N`.
    PageAllocFailure {
        /// Buddy order of the failed request (0 = a single page: real exhaustion).
        order: u32,
    },
    /// The OOM killer ran.
    OomKill,
    /// rkllm/RKNN runtime: `rknpu driver version is too low, please upgrade to X`.
    RknpuTooLow {
        /// The version the runtime asks for.
        wanted: Version,
    },
    /// A runtime reported the rknpu driver version it found.
    RknpuReported {
        /// Driver version as the runtime saw it.
        driver: Version,
    },
    /// `[drm] Initialized rknpu X.Y.Z …`.
    RknpuDrmInit {
        /// Driver version.
        version: Version,
    },
    /// `[drm] Initialized rocket …`: the mainline accel driver owns the NPU.
    RocketInit,
    /// `invalid rknn llm model magic` (old driver, or a model for another runtime).
    RknnBadModelMagic,
    /// `Reserved memory: bypass … node, using cmdline CMA params instead`.
    CmaCmdlineBypass,
    /// `cma: Reserved N MiB at 0xADDR`.
    CmaReserved {
        /// Pool size in bytes.
        bytes: u64,
        /// Physical base address.
        base: u64,
    },
    /// `mlock` failed (`failed to mlock`, `RLIMIT_MLOCK`/`RLIMIT_MEMLOCK` hints).
    MlockFail,
    /// `cma: Failed to reserve N MiB`: the boot-time pool could not be placed.
    CmaReserveFailed {
        /// Requested pool size in bytes.
        bytes: u64,
    },
    /// The boot `Memory: …K/…K available (…, NK cma-reserved)` line: the pool actually reserved.
    BootCmaReserved {
        /// Reserved CMA in bytes (0 = no pool at all).
        bytes: u64,
    },
    /// `cma: number of available pages: … N free of M total pages` (printed after a failure).
    CmaAvailablePages {
        /// Free pages in the area.
        free_pages: u64,
        /// Pages in the area.
        total_pages: u64,
    },
    /// A device that holds CMA: `nvme nvme0: allocated 40 MiB host memory buffer`, or a driver
    /// line saying its contiguous/DMA buffer allocation failed (`vc4_bo_create … from CMA`).
    CmaConsumer {
        /// The device or driver as the kernel names it (`nvme nvme0`, `vc4`, `rk_hdmirx fdee0000.hdmirx-controller`).
        device: String,
        /// Bytes it holds, when the line says.
        bytes: Option<u64>,
        /// True when the line is an allocation failure rather than a successful hold.
        failed: bool,
    },
    /// A driver failed to probe or load, classified by cause.
    ProbeFailure {
        /// Why.
        cause: ProbeCause,
        /// The errno the line gives, when it gives one (negative, as the kernel prints it).
        errno: Option<i32>,
    },
    /// The vendor rknpu driver speaks on the kernel log (`RKNPU fdab0000.npu: …`): it is bound.
    RknpuBound,
    /// `librknnrt version: X` (RKNN Runtime Information).
    RknnRuntimeVersion {
        /// librknnrt version.
        version: Version,
    },
    /// `rkllm-runtime version: X`.
    RkllmRuntimeVersion {
        /// librkllmrt version.
        version: Version,
    },
    /// `rknn-toolkit-lite2 version: X` (the Python binding).
    RknnLiteVersion {
        /// rknn-toolkit-lite2 version.
        version: Version,
    },
    /// `Invalid RKNN model version N`: the model was made by a newer rknn-toolkit2 than the
    /// runtime understands.
    RknnInvalidModelVersion {
        /// The model format version the runtime refused.
        model_version: u32,
    },
    /// `Query platform error!`: rkllm-runtime could not identify the platform (1.0.1).
    RkllmQueryPlatformError,
    /// librknnrt took the legacy (misc-device) ioctl path and failed: `hw_version = -1`,
    /// `driver version is unknown`, `Meet unsupported target type: 0xffffffff`.
    RknnLegacyPathFailed,
}

/// Why a kernel driver did not come up. Each cause has its own remedy; none of them is fixed
/// by purging and reinstalling the same packages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ProbeCause {
    /// No interrupt vectors (`Failed to enable MSI -28`, ENOSPC), e.g. behind a PCIe switch.
    Interrupts,
    /// The module file was built for another kernel (`Invalid module format`, `disagrees about
    /// version of symbol`, `version magic … should be …`, `Unknown symbol`).
    ModuleForOtherKernel,
    /// DKMS could not build the module for this kernel (`Bad return status for module build`).
    DkmsBuildFailed,
    /// A firmware file was missing (`Direct firmware load … failed with error -2`).
    FirmwareMissing,
    /// The device did not answer (`probe … failed with error -110`).
    Timeout,
    /// Two drivers collide on one name (`failed with error -17`, EEXIST).
    Collision,
    /// The device's PCI BARs could not be read (`Failed reading device BARs`): link or seating.
    LinkLost,
    /// Another errno.
    Other,
}

/// Declares a lazily compiled pattern: compiled on first use, so a log without a single
/// candidate line never pays for compiling it.
macro_rules! pattern {
    ($name:ident, $re:expr) => {
        fn $name() -> &'static Regex {
            static P: OnceLock<Regex> = OnceLock::new();
            P.get_or_init(|| Regex::new($re).expect("static pattern"))
        }
    };
}

pattern!(re_errno, r"errno[:=]?\s*(\d{1,3})\b");
pattern!(re_hailo_status, r"HAILO_[A-Z_]+\((\d{1,3})\)");
pattern!(re_returncode, r"hailortcli.*returncode=(\d{1,3})\b");
pattern!(
    re_hailo_mismatch,
    r"Driver version \(([0-9.]+)\) is different from library version \(([0-9.]+)\)"
);
pattern!(
    re_lib_missing,
    r"(libhailort\.so(?:\.[0-9]+)*)(?::\s*cannot open shared object file|\s*=>\s*not found)"
);
pattern!(
    re_fw_mismatch,
    r"Unsupported firmware operation\. Host: ([0-9.]+), Device: ([0-9.]+)"
);
pattern!(
    re_cma_fail,
    r"cma_alloc: (?:[^:]*: )?alloc failed, req-size: (\d{1,12}) pages, ret: (-?\d{1,4})"
);
pattern!(re_page_alloc, r"page allocation failure: order:(\d{1,2})");
pattern!(
    re_too_low,
    r"rknpu driver version is too low, please upgrade to ([0-9][0-9.]*)"
);
pattern!(re_reported, r"rknpu driver version: v?([0-9][0-9.]*)");
pattern!(
    re_drm_rknpu,
    r"(?i)\[drm\] Initialized rknpu v?([0-9][0-9.]*)"
);
pattern!(
    re_cma_reserved,
    r"cma: Reserved (\d{1,7}) MiB at (0x[0-9a-fA-F]{1,16})"
);

pattern!(
    re_cma_reserve_failed,
    r"cma: Failed to reserve (\d{1,7}) MiB"
);
pattern!(
    re_boot_memory,
    r"Memory: \d+K/\d+K available \(.*?(\d{1,12})K cma-reserved"
);
pattern!(
    re_cma_pool_created,
    r"created CMA memory pool at (0x[0-9a-fA-F]{1,16}), size (\d{1,7}) MiB"
);
pattern!(
    re_cma_pages,
    r"number of available pages:.*?(\d{1,12}) free of (\d{1,12}) total pages"
);
pattern!(
    re_hmb,
    r"([A-Za-z0-9_.-]+ [A-Za-z0-9_.:-]+): allocated (\d{1,7}) MiB host memory buffer"
);
pattern!(
    re_device_prefix,
    r"^(?:.*?\bkernel: )?(?:\[[ 0-9.]+\] )?([A-Za-z0-9_-]+(?: [0-9A-Za-z_.:@-]+)?): "
);
pattern!(re_drm_fn, r"\[drm:([a-z0-9_]+)");
pattern!(re_probe_errno, r"(?i)failed with error (-\d{1,4})");
pattern!(
    re_msi_errno,
    r"(?i)(?:enable MSI|Enabling interrupts|IRQ vectors?)\D{0,20}(-\d{1,4})"
);
pattern!(re_rknn_runtime, r"librknnrt version: v?([0-9][0-9.]*)");
pattern!(
    re_rkllm_runtime,
    r"(?i)rkllm[-_ ]runtime version: v?([0-9][0-9.]*)"
);
pattern!(
    re_rknn_lite,
    r"(?i)rknn[-_]toolkit[-_]lite2? version: v?([0-9][0-9.]*)"
);
pattern!(
    re_rknn_driver_info,
    r"RKNN Driver Information, version: v?([0-9][0-9.]*)"
);
pattern!(
    re_rknn_model_version,
    r"Invalid RKNN model version (\d{1,4})"
);

/// `probe … failed with error -N` and friends: the cause from the text, else from the errno.
fn probe_cause(line: &str, lower: &str) -> Option<(ProbeCause, Option<i32>)> {
    let errno = re_probe_errno()
        .captures(line)
        .or_else(|| re_msi_errno().captures(line))
        .and_then(|c| c[1].parse::<i32>().ok());
    let cause = if lower.contains("failed to enable msi")
        || lower.contains("failed enabling interrupts")
        || lower.contains("irq vectors") && (lower.contains("fail") || lower.contains("unable"))
        || lower.contains("failed to request irq")
    {
        ProbeCause::Interrupts
    } else if lower.contains("invalid module format")
        || lower.contains("disagrees about version of symbol")
        || lower.contains("version magic") && lower.contains("should be")
        || lower.contains("unknown symbol")
            && (lower.contains("hailo") || lower.contains("rknpu") || lower.contains("module"))
    {
        ProbeCause::ModuleForOtherKernel
    } else if lower.contains("bad return status for module build")
        || lower.contains("dkms") && lower.contains("build") && lower.contains("fail")
    {
        ProbeCause::DkmsBuildFailed
    } else if lower.contains("firmware file not found")
        || lower.contains("direct firmware load") && lower.contains("failed")
    {
        ProbeCause::FirmwareMissing
    } else if lower.contains("failed reading device bars") {
        ProbeCause::LinkLost
    } else if lower.contains("probe") && lower.contains("failed with error") {
        match errno {
            Some(-110) => ProbeCause::Timeout,
            Some(-17) => ProbeCause::Collision,
            Some(-2) => ProbeCause::FirmwareMissing,
            Some(-28) => ProbeCause::Interrupts,
            _ => ProbeCause::Other,
        }
    } else {
        return None;
    };
    Some((cause, errno))
}

/// The device prefix of a kernel line (`hailo 0000:05:00.0`, `nvme nvme0`, `vc4`), if any.
pub fn device_of(line: &str) -> Option<String> {
    re_device_prefix()
        .captures(line)
        .map(|c| c[1].to_string())
        .filter(|d| d != "cma" && !d.starts_with("cma ") && !d.starts_with('['))
        .or_else(|| {
            re_drm_fn()
                .captures(line)
                .map(|c| c[1].split('_').next().unwrap_or("").to_string())
        })
}

/// A driver line saying a contiguous (CMA/DMA) buffer could not be allocated.
fn contiguous_alloc_failure(l: &str) -> bool {
    let fail =
        l.contains("fail") || l.contains("unable") || l.contains("can't") || l.contains("cannot");
    let what = l.contains("from cma")
        || l.contains("dma_alloc")
        || l.contains("dma buffer")
        || l.contains("contiguous")
        || l.contains("continuous")
        || l.contains("continous")
        || l.contains("coherent")
        || (l.contains("alloc") && l.contains("buf"));
    fail && what && !l.contains("cma_alloc")
}

fn ver(s: &str) -> Option<Version> {
    Version::parse_loose(s)
}

/// Every event in one line (usually zero or one). Lines over 4096 bytes are cut first.
pub fn classify(line: &str) -> Vec<LogEvent> {
    let line = if line.len() > 4096 {
        let mut end = 4096;
        while !line.is_char_boundary(end) {
            end -= 1;
        }
        &line[..end]
    } else {
        line
    };
    let mut out = Vec::new();

    let errno = if line.contains("errno") {
        re_errno().captures(line)
    } else {
        None
    };
    if let Some(c) = errno {
        if let Ok(n) = c[1].parse() {
            out.push(LogEvent::Errno { errno: n });
        }
    } else if line.contains("Too many open files in system") {
        out.push(LogEvent::Errno { errno: 23 });
    } else if line.contains("Too many open files") {
        out.push(LogEvent::Errno { errno: 24 });
    }
    if line.contains("HAILO_") {
        for c in re_hailo_status().captures_iter(line) {
            if let Ok(code) = c[1].parse() {
                out.push(LogEvent::HailoStatus { code });
            }
        }
    }
    if let Some(c) = line
        .contains("returncode=")
        .then(|| re_returncode().captures(line))
        .flatten()
    {
        if let Ok(code) = c[1].parse() {
            if !out.contains(&LogEvent::HailoStatus { code }) {
                out.push(LogEvent::HailoStatus { code });
            }
        }
    }
    if let Some(c) = line
        .contains("Driver version (")
        .then(|| re_hailo_mismatch().captures(line))
        .flatten()
    {
        if let (Some(driver), Some(library)) = (ver(&c[1]), ver(&c[2])) {
            out.push(LogEvent::HailoVersionMismatch { driver, library });
        }
    }
    if let Some(c) = line
        .contains("libhailort.so")
        .then(|| re_lib_missing().captures(line))
        .flatten()
    {
        out.push(LogEvent::HailoLibraryMissing {
            soname: c[1].to_string(),
        });
    }
    if let Some(c) = line
        .contains("Unsupported firmware")
        .then(|| re_fw_mismatch().captures(line))
        .flatten()
    {
        if let (Some(host), Some(device)) = (ver(&c[1]), ver(&c[2])) {
            out.push(LogEvent::HailoFirmwareMismatch { host, device });
        }
    }
    if let Some(c) = line
        .contains("cma_alloc")
        .then(|| re_cma_fail().captures(line))
        .flatten()
    {
        if let (Ok(pages), Ok(ret)) = (c[1].parse(), c[2].parse()) {
            out.push(LogEvent::CmaAllocFail { pages, ret });
        }
    }
    if let Some(c) = line
        .contains("page allocation failure")
        .then(|| re_page_alloc().captures(line))
        .flatten()
    {
        if let Ok(order) = c[1].parse() {
            out.push(LogEvent::PageAllocFailure { order });
        }
    }
    if line.contains("invoked oom-killer") || line.contains("Out of memory: Kill") {
        out.push(LogEvent::OomKill);
    }
    if let Some(c) = line
        .contains("too low")
        .then(|| re_too_low().captures(line))
        .flatten()
    {
        if let Some(wanted) = ver(&c[1]) {
            out.push(LogEvent::RknpuTooLow { wanted });
        }
    }
    if let Some(c) = line
        .contains("rknpu driver version:")
        .then(|| re_reported().captures(line))
        .flatten()
    {
        if let Some(driver) = ver(&c[1]) {
            out.push(LogEvent::RknpuReported { driver });
        }
    }
    if let Some(c) = line
        .contains("Initialized ")
        .then(|| re_drm_rknpu().captures(line))
        .flatten()
    {
        if let Some(version) = ver(&c[1]) {
            out.push(LogEvent::RknpuDrmInit { version });
        }
    }
    if line
        .to_ascii_lowercase()
        .contains("[drm] initialized rocket")
    {
        out.push(LogEvent::RocketInit);
    }
    if line.contains("invalid rknn llm model magic") {
        out.push(LogEvent::RknnBadModelMagic);
    }
    if line.contains("Reserved memory: bypass") && line.contains("cmdline CMA params") {
        out.push(LogEvent::CmaCmdlineBypass);
    }
    if let Some(c) = line
        .contains("cma: Reserved")
        .then(|| re_cma_reserved().captures(line))
        .flatten()
    {
        let mib: Option<u64> = c[1].parse().ok();
        let base = u64::from_str_radix(c[2].trim_start_matches("0x"), 16).ok();
        if let (Some(mib), Some(base)) = (mib, base) {
            out.push(LogEvent::CmaReserved {
                bytes: mib << 20,
                base,
            });
        }
    }
    if line.contains("failed to mlock")
        || line.contains("RLIMIT_MLOCK")
        || line.contains("RLIMIT_MEMLOCK")
    {
        out.push(LogEvent::MlockFail);
    }
    classify_more(line, &mut out);
    out
}

/// The CMA-reservation, probe-failure and RKNN/RKLLM runtime shapes.
fn classify_more(line: &str, out: &mut Vec<LogEvent>) {
    let lower = line.to_ascii_lowercase();
    if let Some(c) = line
        .contains("Failed to reserve")
        .then(|| re_cma_reserve_failed().captures(line))
        .flatten()
    {
        if let Ok(mib) = c[1].parse::<u64>() {
            out.push(LogEvent::CmaReserveFailed { bytes: mib << 20 });
        }
    }
    if let Some(c) = line
        .contains("cma-reserved")
        .then(|| re_boot_memory().captures(line))
        .flatten()
    {
        if let Ok(kb) = c[1].parse::<u64>() {
            out.push(LogEvent::BootCmaReserved { bytes: kb << 10 });
        }
    }
    if let Some(c) = line
        .contains("CMA memory pool")
        .then(|| re_cma_pool_created().captures(line))
        .flatten()
    {
        let base = u64::from_str_radix(c[1].trim_start_matches("0x"), 16).ok();
        if let (Some(base), Ok(mib)) = (base, c[2].parse::<u64>()) {
            out.push(LogEvent::CmaReserved {
                bytes: mib << 20,
                base,
            });
        }
    }
    if let Some(c) = line
        .contains("total pages")
        .then(|| re_cma_pages().captures(line))
        .flatten()
    {
        if let (Ok(free_pages), Ok(total_pages)) = (c[1].parse(), c[2].parse()) {
            out.push(LogEvent::CmaAvailablePages {
                free_pages,
                total_pages,
            });
        }
    }
    if let Some(c) = line
        .contains("host memory buffer")
        .then(|| re_hmb().captures(line))
        .flatten()
    {
        if let Ok(mib) = c[2].parse::<u64>() {
            out.push(LogEvent::CmaConsumer {
                device: c[1].to_string(),
                bytes: Some(mib << 20),
                failed: false,
            });
        }
    } else if contiguous_alloc_failure(&lower) {
        if let Some(device) = device_of(line) {
            out.push(LogEvent::CmaConsumer {
                device,
                bytes: None,
                failed: true,
            });
        }
    }
    if let Some((cause, errno)) = probe_cause(line, &lower) {
        out.push(LogEvent::ProbeFailure { cause, errno });
    }
    if line.contains(".npu: ") && lower.contains("rknpu ") {
        out.push(LogEvent::RknpuBound);
    }
    if let Some(c) = line
        .contains("librknnrt version")
        .then(|| re_rknn_runtime().captures(line))
        .flatten()
    {
        if let Some(version) = ver(&c[1]) {
            out.push(LogEvent::RknnRuntimeVersion { version });
        }
    }
    if let Some(c) = lower
        .contains("runtime version")
        .then(|| re_rkllm_runtime().captures(line))
        .flatten()
    {
        if let Some(version) = ver(&c[1]) {
            out.push(LogEvent::RkllmRuntimeVersion { version });
        }
    }
    if let Some(c) = line
        .contains("version")
        .then(|| re_rknn_lite().captures(line))
        .flatten()
    {
        if let Some(version) = ver(&c[1]) {
            out.push(LogEvent::RknnLiteVersion { version });
        }
    }
    if let Some(c) = line
        .contains("RKNN Driver Information")
        .then(|| re_rknn_driver_info().captures(line))
        .flatten()
    {
        if let Some(driver) = ver(&c[1]) {
            out.push(LogEvent::RknpuReported { driver });
        }
    }
    if let Some(c) = line
        .contains("Invalid RKNN model version")
        .then(|| re_rknn_model_version().captures(line))
        .flatten()
    {
        if let Ok(model_version) = c[1].parse() {
            out.push(LogEvent::RknnInvalidModelVersion { model_version });
        }
    }
    if line.contains("Query platform error") {
        out.push(LogEvent::RkllmQueryPlatformError);
    }
    if line.contains("hw_version = -1")
        || line.contains("driver version is unknown")
        || line.contains("unsupported target type: 0xffffffff")
    {
        out.push(LogEvent::RknnLegacyPathFailed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rknn_errno_lines() {
        let l = "E RKNN: [10:49:05.216] failed to convert handle(1020) to fd, ret: -1, errno: 24, errstr: Too many open files";
        assert_eq!(classify(l), vec![LogEvent::Errno { errno: 24 }]);
        assert_eq!(classify("failed to allocate handle, ret: -1, errno: 23, errstr: Too many open files in system"), vec![LogEvent::Errno { errno: 23 }]);
        assert_eq!(
            classify("OSError: [Errno 24] Too many open files"),
            vec![LogEvent::Errno { errno: 24 }]
        );
    }

    #[test]
    fn hailort_lines() {
        let l = "[HailoRT] [error] CHECK failed - Driver version (4.20.0) is different from library version (4.19.0)";
        assert_eq!(
            classify(l),
            vec![LogEvent::HailoVersionMismatch {
                driver: Version::new(4, 20, 0),
                library: Version::new(4, 19, 0)
            }]
        );
        assert_eq!(
            classify("CHECK_SUCCESS failed with status=HAILO_INVALID_DRIVER_VERSION(76)"),
            vec![LogEvent::HailoStatus { code: 76 }]
        );
        let v = "Failed running 'hailortcli fw-control identify': returncode=76 stderr=[HailoRT] [error] CHECK failed - Driver version (4.23.0) is different from library version (4.22.0)";
        let ev = classify(v);
        assert!(ev.contains(&LogEvent::HailoStatus { code: 76 }));
        assert!(ev.contains(&LogEvent::HailoVersionMismatch {
            driver: Version::new(4, 23, 0),
            library: Version::new(4, 22, 0)
        }));
        assert_eq!(
            classify("ImportError: libhailort.so.4.20.0: cannot open shared object file: No such file or directory"),
            vec![LogEvent::HailoLibraryMissing { soname: "libhailort.so.4.20.0".into() }]
        );
        assert_eq!(
            classify("\tlibhailort.so.5.2.0 => not found"),
            vec![LogEvent::HailoLibraryMissing {
                soname: "libhailort.so.5.2.0".into()
            }]
        );
        assert_eq!(
            classify(
                "[HailoRT] [warning] Unsupported firmware operation. Host: 4.20.0, Device: 4.21.0"
            ),
            vec![LogEvent::HailoFirmwareMismatch {
                host: Version::new(4, 20, 0),
                device: Version::new(4, 21, 0)
            }]
        );
    }

    #[test]
    fn kernel_memory_lines() {
        assert_eq!(
            classify("cma: cma_alloc: alloc failed, req-size: 1 pages, ret: -16"),
            vec![LogEvent::CmaAllocFail { pages: 1, ret: -16 }]
        );
        assert_eq!(
            classify("[ 5.1] cma: cma_alloc: reserved: alloc failed, req-size: 16 pages, ret: -12"),
            vec![LogEvent::CmaAllocFail {
                pages: 16,
                ret: -12
            }]
        );
        assert_eq!(
            classify("[   86.719222] llm_demo: page allocation failure: order:0, mode:0x40cd0(GFP_KERNEL)"),
            vec![LogEvent::PageAllocFailure { order: 0 }]
        );
        assert_eq!(
            classify("[    0.000000] cma: Reserved 256 MiB at 0x00000000ee000000 on node -1"),
            vec![LogEvent::CmaReserved {
                bytes: 256 << 20,
                base: 0xee00_0000
            }]
        );
        assert_eq!(
            classify("Reserved memory: bypass linux,cma node, using cmdline CMA params instead"),
            vec![LogEvent::CmaCmdlineBypass]
        );
    }

    #[test]
    fn rknpu_lines() {
        assert_eq!(
            classify(
                "W rkllm: Warning: Your rknpu driver version is too low, please upgrade to 0.9.7."
            ),
            vec![LogEvent::RknpuTooLow {
                wanted: Version::new(0, 9, 7)
            }]
        );
        assert_eq!(
            classify("I rkllm: rkllm-runtime version: 1.1.2, rknpu driver version: 0.8.2, platform: RK3588"),
            vec![
                LogEvent::RknpuReported { driver: Version::new(0, 8, 2) },
                LogEvent::RkllmRuntimeVersion { version: Version::new(1, 1, 2) }
            ]
        );
        assert_eq!(
            classify("[drm] Initialized rknpu 0.9.5 20240226 for fdab0000.npu on minor 1"),
            vec![LogEvent::RknpuDrmInit {
                version: Version::new(0, 9, 5)
            }]
        );
        assert_eq!(
            classify("[    6.024524] [drm] Initialized rocket 0.0.0 for rknn on minor 0"),
            vec![LogEvent::RocketInit]
        );
    }

    fn cause(line: &str) -> Option<ProbeCause> {
        classify(line).into_iter().find_map(|e| match e {
            LogEvent::ProbeFailure { cause, .. } => Some(cause),
            _ => None,
        })
    }

    #[test]
    fn probe_failures_are_classified_by_cause() {
        // Interrupts: MSI/MSI-X vectors, IRQ requests, the -28 of a probe.
        assert_eq!(
            cause("[ 3.4] hailo 0000:05:00.0: Failed to enable MSI -28"),
            Some(ProbeCause::Interrupts)
        );
        assert_eq!(
            cause("hailo1x 0001:01:00.0: Failed Enabling interrupts -28"),
            Some(ProbeCause::Interrupts)
        );
        assert_eq!(
            cause("nvme 0000:01:00.0: unable to allocate IRQ vectors"),
            Some(ProbeCause::Interrupts)
        );
        assert_eq!(
            cause("hailo1x: probe of 0001:01:00.0 failed with error -28"),
            Some(ProbeCause::Interrupts)
        );
        // A module built for another kernel.
        assert_eq!(
            cause("insmod: ERROR: could not insert module hailo_pci.ko: Invalid module format"),
            Some(ProbeCause::ModuleForOtherKernel)
        );
        assert_eq!(
            cause("hailo_pci: disagrees about version of symbol module_layout"),
            Some(ProbeCause::ModuleForOtherKernel)
        );
        assert_eq!(cause("rknpu: version magic '5.10.110 SMP mod_unload aarch64' should be '5.10.160 SMP preempt mod_unload aarch64'"), Some(ProbeCause::ModuleForOtherKernel));
        // DKMS could not build it.
        assert_eq!(cause("Error! Bad return status for module build on kernel: 6.12.47+rpt-rpi-2712 (aarch64)"), Some(ProbeCause::DkmsBuildFailed));
        // By errno when the text says nothing else.
        assert_eq!(
            cause("hailo1x: probe of 0001:01:00.0 failed with error -110"),
            Some(ProbeCause::Timeout)
        );
        assert_eq!(
            cause("probe with driver hailo1x failed with error -17"),
            Some(ProbeCause::Collision)
        );
        assert_eq!(cause("hailo 0000:01:00.0: Direct firmware load for hailo/hailo8_fw.bin failed with error -2"), Some(ProbeCause::FirmwareMissing));
        assert_eq!(
            cause("hailo 0000:01:00.0: Failed reading device BARs, device may be disconnected"),
            Some(ProbeCause::LinkLost)
        );
        assert_eq!(
            cause("RKNPU fdab0000.npu: probe with driver RKNPU failed with error -22"),
            Some(ProbeCause::Other)
        );
        assert_eq!(cause("hailo 0000:01:00.0: Probing: Device enabled"), None);
    }

    #[test]
    fn cma_reservation_and_consumer_lines() {
        assert_eq!(
            classify("[    0.000000] cma: Failed to reserve 256 MiB"),
            vec![LogEvent::CmaReserveFailed { bytes: 256 << 20 }]
        );
        assert_eq!(
            classify("[    0.000000] Memory: 3171444K/3211264K available (6144K kernel code, 384K rwdata, 1248K rodata, 2048K init, 411K bss, 39820K reserved, 0K cma-reserved)"),
            vec![LogEvent::BootCmaReserved { bytes: 0 }]
        );
        assert_eq!(
            classify(
                "Memory: 7869248K/8173568K available (11200K kernel code, 262144K cma-reserved)"
            ),
            vec![LogEvent::BootCmaReserved { bytes: 256 << 20 }]
        );
        assert_eq!(
            classify("[    0.997259] Reserved memory: created CMA memory pool at 0x0000000010000000, size 256 MiB"),
            vec![LogEvent::CmaReserved { bytes: 256 << 20, base: 0x1000_0000 }]
        );
        assert_eq!(
            classify("Oct 14 21:52:50 h kernel: cma: number of available pages: => 0 free of 8192 total pages"),
            vec![LogEvent::CmaAvailablePages { free_pages: 0, total_pages: 8192 }]
        );
        assert_eq!(
            classify("Oct 14 21:52:50 h kernel: nvme nvme3: allocated 40 MiB host memory buffer."),
            vec![LogEvent::CmaConsumer {
                device: "nvme nvme3".into(),
                bytes: Some(40 << 20),
                failed: false
            }]
        );
        assert_eq!(
            classify("[   12.1] [drm:vc4_bo_create [vc4]] *ERROR* Failed to allocate from CMA:"),
            vec![LogEvent::CmaConsumer {
                device: "vc4".into(),
                bytes: None,
                failed: true
            }]
        );
        assert_eq!(
            classify("[ 88.2] rk_hdmirx fdee0000.hdmirx-controller: failed to alloc dma buffer, size 2097152"),
            vec![LogEvent::CmaConsumer { device: "rk_hdmirx fdee0000.hdmirx-controller".into(), bytes: None, failed: true }]
        );
        assert_eq!(
            classify(
                "[ 41.0] hailo 0001:01:00.0: Failed to allocate continuous buffer, size 0x100000"
            ),
            vec![LogEvent::CmaConsumer {
                device: "hailo 0001:01:00.0".into(),
                bytes: None,
                failed: true
            }]
        );
    }

    #[test]
    fn rknn_runtime_lines() {
        assert_eq!(
            classify("I RKNN: [08:12:01.101] RKNN Runtime Information, librknnrt version: 1.5.2 (c6b7b351a@2023-08-23T15:28:22)"),
            vec![LogEvent::RknnRuntimeVersion { version: Version::new(1, 5, 2) }]
        );
        assert_eq!(
            classify("I RKNN: [08:12:01.102] RKNN Driver Information, version: 0.9.8"),
            vec![LogEvent::RknpuReported {
                driver: Version::new(0, 9, 8)
            }]
        );
        assert_eq!(
            classify("E RKNN: [08:12:01.140] Invalid RKNN model version 6"),
            vec![LogEvent::RknnInvalidModelVersion { model_version: 6 }]
        );
        assert_eq!(
            classify("Query platform error!"),
            vec![LogEvent::RkllmQueryPlatformError]
        );
        assert_eq!(
            classify("rkllm-runtime version: 1.0.1"),
            vec![LogEvent::RkllmRuntimeVersion {
                version: Version::new(1, 0, 1)
            }]
        );
        assert_eq!(
            classify("W rknn-toolkit-lite2 version: 2.3.0"),
            vec![LogEvent::RknnLiteVersion {
                version: Version::new(2, 3, 0)
            }]
        );
        assert_eq!(
            classify("E RKNN: This shared library is not supported on the current platform, hw_version = -1"),
            vec![LogEvent::RknnLegacyPathFailed]
        );
        assert_eq!(
            classify("E RKNN: Meet unsupported target type: 0xffffffff"),
            vec![LogEvent::RknnLegacyPathFailed]
        );
        // "driver version is unknown" is not a driver version.
        assert!(
            !classify("E RKNN: rknn_matmul_create, driver version is unknown!")
                .iter()
                .any(|e| matches!(e, LogEvent::RknpuReported { .. }))
        );
    }

    #[test]
    fn kernel_names_match_as_the_kernel_spells_them() {
        assert_eq!(
            classify("[drm] Initialized RKNPU 0.9.8 20240828 for fdab0000.npu on minor 1"),
            vec![LogEvent::RknpuDrmInit {
                version: Version::new(0, 9, 8)
            }]
        );
        assert_eq!(
            classify("[    7.648747] RKNPU fdab0000.npu: RKNPU: rknpu iommu is enabled, using iommu mode"),
            vec![LogEvent::RknpuBound]
        );
        assert_eq!(
            classify("[drm] Initialized Rocket 0.0.0 for rknn on minor 0"),
            vec![LogEvent::RocketInit]
        );
    }

    #[test]
    fn plain_lines_have_no_events() {
        assert!(classify("").is_empty());
        assert!(classify("rkllm init start").is_empty());
        assert!(classify(&"x".repeat(100_000)).is_empty());
    }
}
