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

mod hailo;
mod memory;
mod rockchip;

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
    /// HailoRT: `max_desc_page_size given 16384 is bigger than hw max desc page size 4096`: the
    /// driver offers DMA descriptor pages (the kernel's page size) larger than the chip takes.
    HailoDescPageSize {
        /// The descriptor page size the driver gave, bytes.
        given_bytes: u32,
        /// The largest the chip takes, bytes.
        hw_max_bytes: u32,
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
    /// `[drm] Initialized rocket …` or a `rocket fdab0000.npu: …` probe line: the mainline
    /// accel driver owns the NPU.
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
    /// `OF: reserved mem: failed to allocate memory for node 'linux,cma': size N MiB`: the pool
    /// the device tree asks for could not be placed at boot (the kernel may fall back to a small
    /// default pool, printed as `cma: Reserved N MiB` right after).
    CmaNodeFailed {
        /// Requested pool size in bytes, when the line gives it (older kernels do not).
        bytes: Option<u64>,
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
pattern!(
    re_desc_page,
    r"max_desc_page_size given (\d{1,9}) is bigger than hw max desc page size (\d{1,9})"
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
    re_cma_node_failed,
    r"failed to allocate memory for node '?linux,cma'?(?::?\s*size (\d{1,7}) MiB)?"
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
    re_rknn_sdk,
    r"^sdk version: v?([0-9][0-9.]*)\b.*?\bdriver version: v?([0-9][0-9.]*)"
);
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

/// errno values, numeric or as `Too many open files` (ENFILE 23, EMFILE 24).
fn errno_events(line: &str, out: &mut Vec<LogEvent>) {
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

    errno_events(line, &mut out);
    hailo::events(line, &mut out);
    memory::alloc_events(line, &mut out);
    rockchip::driver_events(line, &mut out);
    memory::reservation_events(line, &mut out);
    classify_more(line, &mut out);
    out
}

/// The CMA-reservation, probe-failure and RKNN/RKLLM runtime shapes.
fn classify_more(line: &str, out: &mut Vec<LogEvent>) {
    let lower = line.to_ascii_lowercase();
    memory::pool_events(line, &lower, out);
    if let Some((cause, errno)) = probe_cause(line, &lower) {
        out.push(LogEvent::ProbeFailure { cause, errno });
    }
    if line.contains(".npu: ") && lower.contains("rknpu ") {
        out.push(LogEvent::RknpuBound);
    }

    rockchip::runtime_events(line, &lower, out);
}

#[cfg(test)]
mod tests;
