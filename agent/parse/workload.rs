//! Error-level lines of an NPU workload's own log: HailoRT, RKNN, RKLLM and the apps that embed
//! them (`[HailoRT] [error] ...`, `E RKNN: ...`, `rknn_init fail! ret=-6`), and the lines that
//! say a model (or an app) was built for another chip or runtime release.

use regex_lite::Regex;
use std::sync::OnceLock;

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
    if model_mismatch(t).is_some() {
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
        || lower.contains("failed to load model")
        || lower.contains(" error ") && lower.contains(" : ")
        || lower.contains("[error]")
        || lower.contains(" error: ");
    npu && failed
}

fn re_exception() -> &'static Regex {
    static P: OnceLock<Regex> = OnceLock::new();
    P.get_or_init(|| {
        Regex::new(r"(?:^|\s)((?:[A-Za-z_][A-Za-z0-9_]{0,64}\.){0,8}[A-Za-z_]{0,64}(?:Error|Exception)): \S")
            .expect("static pattern")
    })
}

/// True when `line` is an app's exception (`RuntimeError: …`, `hailo_platform…HailoRTException:
/// …`, Python's last traceback line), not a line logged at an informational level.
pub fn is_exception(line: &str) -> bool {
    let head: String = line.chars().take(4096).collect();
    if [" INFO ", " DEBUG ", " WARNING ", "[info]", "[debug]"]
        .iter()
        .any(|l| head.contains(l))
    {
        return false;
    }
    re_exception().is_match(&head)
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
    /// The model (or the app) was built for another chip or runtime release ([`model_mismatch`]).
    ModelForOtherTarget,
    /// Anything else.
    Other,
}

/// Classifies a failure line.
pub fn class_of(line: &str) -> FailureClass {
    let lower = line.to_ascii_lowercase();
    if model_mismatch(line).is_some() {
        FailureClass::ModelForOtherTarget
    } else if lower.contains("failed to submit")
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

/// How a model (or an app) does not fit the chip or the runtime that loads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelMismatch {
    /// HailoRT: `HEF format is not compatible with device. Device arch: HAILO8L, HEF arch: HAILO8`.
    HefArch {
        /// The device's architecture (`HAILO8L`).
        device: String,
        /// The architecture the HEF was compiled for (`HAILO8`).
        hef: String,
    },
    /// HailoRT refused the HEF: `HAILO_INVALID_HEF(26)`, `HAILO_HEF_NOT_COMPATIBLE_WITH_DEVICE`.
    HefRefused,
    /// rkllm-runtime: `The model version is too old, please use the latest toolkit to reconvert`.
    RkllmModelTooOld,
    /// rkllm-runtime: `The model target_platform does not match!`.
    RkllmTargetPlatform,
    /// librknnrt: `rknn_query, info_len(372) < sizeof(rknn_tensor_attr)(376)!`: the app was
    /// built against another release's `rknn_api.h` than the librknnrt it loads.
    RknnAttrSize {
        /// The struct size the app passed, bytes.
        app_bytes: u32,
        /// The struct size the runtime expects, bytes.
        runtime_bytes: u32,
    },
}

fn re_hef_arch() -> &'static Regex {
    static P: OnceLock<Regex> = OnceLock::new();
    P.get_or_init(|| {
        Regex::new(r"Device arch: ([A-Za-z0-9_]{1,32}), HEF arch: ([A-Za-z0-9_]{1,32})")
            .expect("static pattern")
    })
}

fn re_attr_size() -> &'static Regex {
    static P: OnceLock<Regex> = OnceLock::new();
    P.get_or_init(|| {
        Regex::new(r"info_len\((\d{1,6})\) ?[<!]=? ?sizeof\(rknn_tensor_attr\)\((\d{1,6})\)")
            .expect("static pattern")
    })
}

fn re_model_file() -> &'static Regex {
    static P: OnceLock<Regex> = OnceLock::new();
    P.get_or_init(|| {
        Regex::new(r"([A-Za-z0-9_./~+:-]{0,240}\.(?:hef|rkllm|rknn))(?:[^A-Za-z0-9_]|$)")
            .expect("static pattern")
    })
}

/// The model/target mismatch a runtime line reports, if any.
pub fn model_mismatch(line: &str) -> Option<ModelMismatch> {
    if line.contains("HEF arch:") {
        if let Some(c) = re_hef_arch().captures(line) {
            return Some(ModelMismatch::HefArch {
                device: c[1].to_string(),
                hef: c[2].to_string(),
            });
        }
    }
    if line.contains("HAILO_INVALID_HEF(26)")
        || line.contains("HAILO_HEF_NOT_COMPATIBLE_WITH_DEVICE")
    {
        return Some(ModelMismatch::HefRefused);
    }
    if line.contains("The model version is too old") {
        return Some(ModelMismatch::RkllmModelTooOld);
    }
    if line.contains("target_platform does not match") {
        return Some(ModelMismatch::RkllmTargetPlatform);
    }
    if line.contains("sizeof(rknn_tensor_attr)") {
        let c = re_attr_size().captures(line)?;
        let (Ok(app_bytes), Ok(runtime_bytes)) = (c[1].parse(), c[2].parse()) else {
            return None;
        };
        return Some(ModelMismatch::RknnAttrSize {
            app_bytes,
            runtime_bytes,
        });
    }
    None
}

/// The last model file (`*.hef`, `*.rkllm`, `*.rknn`) a line names, quotes stripped.
pub fn model_file(line: &str) -> Option<String> {
    if !(line.contains(".hef") || line.contains(".rkllm") || line.contains(".rknn")) {
        return None;
    }
    re_model_file()
        .captures_iter(line)
        .last()
        .map(|c| c[1].trim_start_matches([':', '\'', '"']).to_string())
        // A bare extension (`the .hef format`) names no file.
        .filter(|f| {
            let stem = f.rsplit_once('.').map(|x| x.0).unwrap_or("");
            !stem.trim_start_matches(['.', '/']).is_empty()
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn model_mismatch_lines() {
        assert_eq!(
            model_mismatch("[HailoRT] [error] HEF format is not compatible with device. Device arch: HAILO8L, HEF arch: HAILO8"),
            Some(ModelMismatch::HefArch { device: "HAILO8L".into(), hef: "HAILO8".into() })
        );
        assert_eq!(
            model_mismatch(
                "[HailoRT] [error] CHECK_SUCCESS failed with status=HAILO_INVALID_HEF(26)"
            ),
            Some(ModelMismatch::HefRefused)
        );
        assert_eq!(
            model_mismatch("Warning: The model version is too old, please use the latest toolkit to reconvert the model!"),
            Some(ModelMismatch::RkllmModelTooOld)
        );
        assert_eq!(
            model_mismatch("The model target_platform does not match!"),
            Some(ModelMismatch::RkllmTargetPlatform)
        );
        assert_eq!(
            model_mismatch(
                "E RKNN: [07:13:44.229] rknn_query, info_len(372) < sizeof(rknn_tensor_attr)(376)!"
            ),
            Some(ModelMismatch::RknnAttrSize {
                app_bytes: 372,
                runtime_bytes: 376
            })
        );
        assert_eq!(
            model_mismatch("E RKNN: [14:57:27.201] rknn_query, info_len(372) != sizeof(rknn_tensor_attr)(376)!"),
            Some(ModelMismatch::RknnAttrSize { app_bytes: 372, runtime_bytes: 376 })
        );
        assert_eq!(model_mismatch("sizeof(rknn_tensor_attr) garbage"), None);
        assert_eq!(model_mismatch("HEF arch: nothing else"), None);
        assert_eq!(model_mismatch("[HailoRT] [info] Loading HEF"), None);
        for l in [
            "The model target_platform does not match!",
            "RKLLM: failed to load model 'llama2-chat-7b-hf.rkllm'!!!",
        ] {
            assert!(is_failure(l), "{l}");
            assert_eq!(
                class_of(l) == FailureClass::ModelForOtherTarget,
                model_mismatch(l).is_some(),
                "{l}"
            );
        }
    }

    #[test]
    fn model_files_named_in_lines() {
        assert_eq!(
            model_file("RKLLM: failed to load model 'llama2-chat-7b-hf.rkllm'!!!").as_deref(),
            Some("llama2-chat-7b-hf.rkllm")
        );
        assert_eq!(
            model_file("root@firefly:/build# ./rknn_yolov5_demo ../model/RK3588/yolov5s-640-640.rknn ../model/bus.jpg").as_deref(),
            Some("../model/RK3588/yolov5s-640-640.rknn")
        );
        assert_eq!(
            model_file("INFO : A model file already exists at /config/model_cache/h8l_cache/yolov6n.hef not downloading one.").as_deref(),
            Some("/config/model_cache/h8l_cache/yolov6n.hef")
        );
        assert_eq!(model_file("the .hef format"), None);
        assert_eq!(model_file("no model here"), None);
    }

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
