//! Hailo log shapes: HailoRT status codes, driver/library/firmware version mismatches.

use super::*;

/// HailoRT statuses (`HAILO_*`, `returncode=`) and version or library problems.
pub(super) fn events(line: &str, out: &mut Vec<LogEvent>) {
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
        .contains("max_desc_page_size given")
        .then(|| re_desc_page().captures(line))
        .flatten()
    {
        if let (Ok(given_bytes), Ok(hw_max_bytes)) = (c[1].parse(), c[2].parse()) {
            out.push(LogEvent::HailoDescPageSize {
                given_bytes,
                hw_max_bytes,
            });
        }
    }
}
