//! Rockchip log shapes: the rknpu and rocket drivers and the RKNN / RKLLM runtimes.

use super::*;

/// rknpu driver versions (too low, reported, DRM init), rocket init and bad model magic.
pub(super) fn driver_events(line: &str, out: &mut Vec<LogEvent>) {
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
    let lower = line.to_ascii_lowercase();
    // `[drm] Initialized rocket …`, or its probe lines (`rocket fdab0000.npu: Rockchip NPU core 0
    // version: N`), which 6.12 builds print without a DRM line.
    if lower.contains("[drm] initialized rocket")
        || lower.contains("rocket ") && line.contains(".npu: ")
    {
        out.push(LogEvent::RocketInit);
    }
    if line.contains("invalid rknn llm model magic") {
        out.push(LogEvent::RknnBadModelMagic);
    }
}

/// RKNN / RKLLM runtime versions, model-version and platform errors.
pub(super) fn runtime_events(line: &str, lower: &str, out: &mut Vec<LogEvent>) {
    if let Some(c) = line
        .contains("librknnrt version")
        .then(|| re_rknn_runtime().captures(line))
        .flatten()
    {
        if let Some(version) = ver(&c[1]) {
            out.push(LogEvent::RknnRuntimeVersion { version });
        }
    }
    // The rknpu2 demos print rknn_query(RKNN_QUERY_SDK_VERSION): the runtime's and the driver's.
    if let Some(c) = line
        .starts_with("sdk version:")
        .then(|| re_rknn_sdk().captures(line))
        .flatten()
    {
        if let (Some(version), Some(driver)) = (ver(&c[1]), ver(&c[2])) {
            out.push(LogEvent::RknnRuntimeVersion { version });
            out.push(LogEvent::RknpuReported { driver });
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
