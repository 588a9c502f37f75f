//! Classifies one kernel, journal or workload log line into typed events by errno and status
//! code, so a check can raise a finding from a log even when the workload is not running now.
//!
//! Shapes recognised (sources in `shared/domain/FACTS.md`): RKNN `errno: N`, HailoRT
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
pattern!(re_drm_rknpu, r"\[drm\] Initialized rknpu v?([0-9][0-9.]*)");
pattern!(
    re_cma_reserved,
    r"cma: Reserved (\d{1,7}) MiB at (0x[0-9a-fA-F]{1,16})"
);

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
        .contains("Initialized rknpu")
        .then(|| re_drm_rknpu().captures(line))
        .flatten()
    {
        if let Some(version) = ver(&c[1]) {
            out.push(LogEvent::RknpuDrmInit { version });
        }
    }
    if line.contains("[drm] Initialized rocket") {
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
    out
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
        assert_eq!(classify("I rkllm: rkllm-runtime version: 1.1.2, rknpu driver version: 0.8.2, platform: RK3588"), vec![LogEvent::RknpuReported { driver: Version::new(0, 8, 2) }]);
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

    #[test]
    fn plain_lines_have_no_events() {
        assert!(classify("").is_empty());
        assert!(classify("rkllm init start").is_empty());
        assert!(classify(&"x".repeat(100_000)).is_empty());
    }
}
