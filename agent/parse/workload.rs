//! Error-level lines of an NPU workload's own log: HailoRT, RKNN, RKLLM and the apps that embed
//! them (`[HailoRT] [error] ...`, `E RKNN: ...`, `rknn_init fail! ret=-6`).

/// True when `line` is an error line of the NPU runtime or of an app reporting an NPU failure.
pub fn is_failure(line: &str) -> bool {
    let t = line.trim_start();
    if t.contains("[HailoRT] [error]")
        || t.contains("[HailoRT] [critical]")
        || t.contains("HailoRTException")
        || t.starts_with("E RKNN:")
        || t.starts_with("E rknn")
        || t.starts_with("E RKLLM:")
        || t.starts_with("E rkllm:")
    {
        return true;
    }
    let lower = t.to_ascii_lowercase();
    let npu = ["hailo", "rknn", "rkllm", "npu", "imgenc"]
        .iter()
        .any(|w| lower.contains(w));
    let failed = lower.contains(" fail! ret=")
        || lower.contains("fail! ret =")
        || lower.contains("failed to submit")
        || lower.contains("_init fail")
        || lower.contains("_run fail")
        || lower.contains(" error ") && lower.contains(" : ")
        || lower.contains("[error]")
        || lower.contains(" error: ");
    npu && failed
}

/// True when a kernel line reports an NPU job that never completed (`RKNPU: job timeout`,
/// `RKNPU: failed to wait job`, `RKNPU: job abort`).
pub fn is_kernel_npu_failure(line: &str) -> bool {
    let lower = line.to_ascii_lowercase();
    lower.contains("rknpu")
        && (lower.contains("job timeout")
            || lower.contains("failed to wait job")
            || lower.contains("job abort")
            || lower.contains("soft reset"))
}

/// The class of a failure line, which decides the findings that can explain it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureClass {
    /// An NPU job was submitted and never completed (`failed to submit!`, `job timeout`).
    JobNeverCompleted,
    /// NPU memory could not be allocated or mapped (`failed to malloc npu memory`, errno 12/14).
    NpuMemory,
    /// Out of file descriptors (errno 23/24).
    FileDescriptors,
    /// The runtime refused the driver or the device (HailoRT status 74/76, `driver version`).
    DriverOrDevice,
    /// Anything else.
    Other,
}

/// Classifies a failure line.
pub fn class_of(line: &str) -> FailureClass {
    let lower = line.to_ascii_lowercase();
    if lower.contains("failed to submit")
        || is_kernel_npu_failure(line)
        || lower.contains("run task counter: 0")
    {
        FailureClass::JobNeverCompleted
    } else if lower.contains("malloc npu memory")
        || lower.contains("failed to allocate handle")
        || lower.contains("errno: 14")
        || lower.contains("errno: 12")
    {
        FailureClass::NpuMemory
    } else if lower.contains("too many open files")
        || lower.contains("errno: 24")
        || lower.contains("errno: 23")
    {
        FailureClass::FileDescriptors
    } else if lower.contains("driver_version")
        || lower.contains("driver version")
        || lower.contains("(74)")
        || lower.contains("(76)")
    {
        FailureClass::DriverOrDevice
    } else {
        FailureClass::Other
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_lines_and_classes() {
        assert!(is_kernel_npu_failure(
            "[  578.9] RKNPU: job timeout, flags: 0x1, ret: -110"
        ));
        assert!(is_kernel_npu_failure(
            "RKNPU: failed to wait job, task counter: 74, flags: 0x1, ret = -512"
        ));
        assert!(!is_kernel_npu_failure(
            "RKNPU fdab0000.npu: RKNPU: rknpu iommu is enabled"
        ));
        assert_eq!(
            class_of("E RKNN: failed to submit!, op id: 1, op name: Conv:/model.0/conv/Conv, flags: 0x1, task start: 0, task number: 30, run task counter: 0, int status: 0"),
            FailureClass::JobNeverCompleted
        );
        assert_eq!(
            class_of("E RKNN: failed to malloc npu memory, size: 1427746880"),
            FailureClass::NpuMemory
        );
        assert_eq!(
            class_of("open failed: Too many open files"),
            FailureClass::FileDescriptors
        );
        assert_eq!(
            class_of("status=HAILO_INVALID_DRIVER_VERSION(76)"),
            FailureClass::DriverOrDevice
        );
        assert_eq!(class_of("E RKNN: something else"), FailureClass::Other);
    }

    #[test]
    fn runtime_error_lines() {
        for l in [
            "2025-03-17 20:26:02.557878006  [HailoRT] [error] CHECK_SUCCESS failed with status=HAILO_INVALID_DRIVER_VERSION(76)",
            "E RKNN: [01:13:18.656] failed to malloc npu memory, size: 1427746880, flags: 0x2",
            "rknn_init fail! ret=-6",
            "init_imgenc fail! ret=-1 model_path=../qwen2_vl_3b_vision_rk3588.rknn",
            "E RKNN: failed to submit!, op id: 1, op name: Conv, flags: 0x5, task start: 0, task number: 1, run task counter: 0, int status: 0",
            "[2025-03-17 22:26:02] frigate.detectors.plugins.hailo8l ERROR   : HailoRTException during initialization",
        ] {
            assert!(is_failure(l), "{l}");
        }
        for l in [
            "I rkllm: rkllm-runtime version: 1.1.4, rknpu driver version: 0.9.8, platform: RK3588",
            "rkllm init success",
            "FPS     (hw_only)                 = 398.43",
            "[HailoRT] [info] Loading HEF",
            "the error budget is fine",
        ] {
            assert!(!is_failure(l), "{l}");
        }
    }
}
