//! Firmware file presence and firmware/driver agreement.

use super::*;

pub(super) fn glob_match(pattern: &str, name: &str) -> bool {
    match pattern.split_once('*') {
        None => pattern == name,
        Some((pre, suf)) => {
            name.len() >= pre.len() + suf.len() && name.starts_with(pre) && name.ends_with(suf)
        }
    }
}

pub(super) fn firmware(ctx: &Ctx<'_>, dev: Option<&PciDevice>) -> Finding {
    let id = "hailo.firmware";
    let npu = &ctx.profile.npu;
    if npu.firmware_dir.is_empty() {
        return Finding::skip(id, "profile names no firmware directory");
    }
    if !ctx.snap.firmware_root_exists {
        return Finding::skip(id, "/lib/firmware is not in this tree");
    }
    let node_up = ctx
        .snap
        .device_nodes
        .iter()
        .any(|n| n.starts_with("/dev/hailo") || n.starts_with("/dev/h1x-"));
    let names = match &ctx.snap.firmware {
        Ok(n) => n.clone(),
        Err(e) if e.is_not_found() => Vec::new(),
        Err(e) => {
            return Finding::new(
                id,
                Status::Error,
                format!("cannot list {}: {e}", npu.firmware_dir),
            )
        }
    };
    let missing: Vec<&String> = npu
        .firmware_files
        .iter()
        .filter(|pat| !names.iter().any(|n| glob_match(pat, n)))
        .collect();
    let f = Finding::new(
        id,
        Status::Pass,
        format!(
            "{} holds the {} firmware ({} files)",
            npu.firmware_dir,
            npu.chip,
            names.len()
        ),
    )
    .observed("firmware_files", names.clone())
    .expected("firmware_files", npu.firmware_files.clone());
    if missing.is_empty() {
        return f;
    }
    let mut f = f;
    // A device node proves the firmware loaded at this boot; the next boot will not.
    f.status = if node_up && dev.is_some() {
        Status::Warn
    } else {
        Status::Fail
    };
    f.summary = format!(
        "{} firmware files missing in {}: {}",
        npu.chip,
        npu.firmware_dir,
        missing
            .iter()
            .map(|s| s.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    );
    f.remedy(match npu.generation {
        Some(5) => "sudo apt install --reinstall h10-hailort-pcie-driver && sudo reboot",
        _ => "sudo apt install --reinstall hailofw hailort-pcie-driver && sudo reboot",
    })
}

pub(super) fn firmware_mismatch(ctx: &Ctx<'_>) -> Finding {
    let id = "hailo.firmware_mismatch";
    let logged: Vec<_> = ctx
        .logs
        .host(|e| matches!(e, LogEvent::HailoFirmwareMismatch { .. }))
        .collect();
    if let Some((_, LogEvent::HailoFirmwareMismatch { host, device })) = logged.last() {
        return Finding::new(id, Status::Fail, format!("the chip runs firmware {device} but the host runtime is {host}"))
            .observed("device_firmware_version", device.to_string())
            .expected("device_firmware_version", host.to_string())
            .with_hits(logged.iter().map(|(h, _)| *h))
            .remedy("reset the device: sudo reboot (or a PCI remove/rescan and driver reload), then confirm with `hailortcli fw-control identify`");
    }
    let entries = match &ctx.snap.dpkg_log {
        Ok(e) => e,
        Err(_) => return Finding::skip(id, "the running firmware version is only visible through `hailortcli fw-control identify`; no /var/log/dpkg.log to tell whether the firmware package changed since boot"),
    };
    let uptime = match &ctx.snap.uptime_s {
        Ok(u) => *u,
        Err(e) => return Finding::skip(id, format!("cannot tell when the board booted: {e}")),
    };
    // "Now": the clock on a live board; for a captured tree, its newest dpkg.log line (a capture
    // is taken no earlier than that), which makes the boot time a lower bound.
    let Some(now) = ctx
        .snap
        .now_unix_s
        .or_else(|| entries.iter().map(|e| e.time_unix_s).max())
    else {
        return Finding::skip(id, "/var/log/dpkg.log has no install or upgrade lines");
    };
    let boot = now - uptime as i64;
    let changed: Vec<_> = entries
        .iter()
        .filter(|e| {
            ctx.profile.packages.firmware.contains(&e.package)
                && e.action == "upgrade"
                && e.from != e.to
                && e.time_unix_s > boot
        })
        .collect();
    let Some(last) = changed.last() else {
        return Finding::new(
            id,
            Status::Pass,
            "no firmware package changed since this boot",
        );
    };
    let mut f = Finding::new(
        id,
        Status::Fail,
        format!(
            "{} went {} -> {} after this boot; the chip keeps running firmware {} until a device reset or reboot",
            last.package, last.from, last.to, last.from
        ),
    )
    .observed("device_firmware_version", last.from.clone())
    .observed("installed_firmware_version", last.to.clone())
    .observed("uptime_s", uptime)
    .expected("device_firmware_version", last.to.clone())
    .remedy("sudo reboot (or a PCI reset + driver reload), then confirm with `hailortcli fw-control identify` that the firmware version is the installed one");
    for e in &changed {
        f.push_evidence(
            "/var/log/dpkg.log",
            Some(e.line),
            &format!("{} {} {} -> {}", e.action, e.package, e.from, e.to),
        );
    }
    f.evidence("/proc/uptime", None, &format!("{uptime}"))
}
