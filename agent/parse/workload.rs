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

#[cfg(test)]
mod tests {
    use super::is_failure;

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
