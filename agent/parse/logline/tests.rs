//! Unit tests for kernel and runtime log-line classification.

use super::*;

#[test]
fn rknn_errno_lines() {
    let l = "E RKNN: [10:49:05.216] failed to convert handle(1020) to fd, ret: -1, errno: 24, errstr: Too many open files";
    assert_eq!(classify(l), vec![LogEvent::Errno { errno: 24 }]);
    assert_eq!(
        classify(
            "failed to allocate handle, ret: -1, errno: 23, errstr: Too many open files in system"
        ),
        vec![LogEvent::Errno { errno: 23 }]
    );
    assert_eq!(
        classify("OSError: [Errno 24] Too many open files"),
        vec![LogEvent::Errno { errno: 24 }]
    );
}

#[test]
fn rknpu2_demo_sdk_line() {
    assert_eq!(
        classify("sdk version: 1.6.0 (9a7b5d24c@2023-12-13T17:31:11) driver version: 0.8.2"),
        vec![
            LogEvent::RknnRuntimeVersion {
                version: Version::new(1, 6, 0)
            },
            LogEvent::RknpuReported {
                driver: Version::new(0, 8, 2)
            }
        ]
    );
    assert_eq!(
        classify("sdk version: garbage driver version: 0.8.2"),
        vec![]
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
    assert_eq!(
        classify("[HailoRT] [error] CHECK_AS_EXPECTED failed - max_desc_page_size given 16384 is bigger than hw max desc page size 4096"),
        vec![LogEvent::HailoDescPageSize { given_bytes: 16384, hw_max_bytes: 4096 }]
    );
    assert_eq!(
        classify("max_desc_page_size given 99999999999 is bigger than hw max desc page size 4096"),
        vec![]
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
        classify(
            "[   86.719222] llm_demo: page allocation failure: order:0, mode:0x40cd0(GFP_KERNEL)"
        ),
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
        classify(
            "I rkllm: rkllm-runtime version: 1.1.2, rknpu driver version: 0.8.2, platform: RK3588"
        ),
        vec![
            LogEvent::RknpuReported {
                driver: Version::new(0, 8, 2)
            },
            LogEvent::RkllmRuntimeVersion {
                version: Version::new(1, 1, 2)
            }
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
    assert_eq!(
        cause(
            "Error! Bad return status for module build on kernel: 6.12.47+rpt-rpi-2712 (aarch64)"
        ),
        Some(ProbeCause::DkmsBuildFailed)
    );
    // By errno when the text says nothing else.
    assert_eq!(
        cause("hailo1x: probe of 0001:01:00.0 failed with error -110"),
        Some(ProbeCause::Timeout)
    );
    assert_eq!(
        cause("probe with driver hailo1x failed with error -17"),
        Some(ProbeCause::Collision)
    );
    assert_eq!(
        cause(
            "hailo 0000:01:00.0: Direct firmware load for hailo/hailo8_fw.bin failed with error -2"
        ),
        Some(ProbeCause::FirmwareMissing)
    );
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
    // The device tree's pool, as 6.x (with its size) and older kernels (without) print it.
    assert_eq!(
        classify("[    0.000000] OF: reserved mem: failed to allocate memory for node 'linux,cma': size 512 MiB"),
        vec![LogEvent::CmaNodeFailed { bytes: Some(512 << 20) }]
    );
    assert_eq!(
        classify("Reserved memory: failed to allocate memory for node 'linux,cma'"),
        vec![LogEvent::CmaNodeFailed { bytes: None }]
    );
    assert_eq!(
            classify("[    0.000000] Memory: 3171444K/3211264K available (6144K kernel code, 384K rwdata, 1248K rodata, 2048K init, 411K bss, 39820K reserved, 0K cma-reserved)"),
            vec![LogEvent::BootCmaReserved { bytes: 0 }]
        );
    assert_eq!(
        classify("Memory: 7869248K/8173568K available (11200K kernel code, 262144K cma-reserved)"),
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
        classify("[ 41.0] hailo 0001:01:00.0: Failed to allocate continuous buffer, size 0x100000"),
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
        classify(
            "E RKNN: This shared library is not supported on the current platform, hw_version = -1"
        ),
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
        classify(
            "[    7.648747] RKNPU fdab0000.npu: RKNPU: rknpu iommu is enabled, using iommu mode"
        ),
        vec![LogEvent::RknpuBound]
    );
    assert_eq!(
        classify("[drm] Initialized Rocket 0.0.0 for rknn on minor 0"),
        vec![LogEvent::RocketInit]
    );
    assert_eq!(
        classify("[    9.681491] rocket fdab0000.npu: Rockchip NPU core 0 version: 1179210309"),
        vec![LogEvent::RocketInit]
    );
    assert!(classify("[    2.9] input: rk805 pwrkey as /devices/platform/feb20000.spi").is_empty());
}

#[test]
fn plain_lines_have_no_events() {
    assert!(classify("").is_empty());
    assert!(classify("rkllm init start").is_empty());
    assert!(classify(&"x".repeat(100_000)).is_empty());
}
