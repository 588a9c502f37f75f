//! `hailo.firmware`, `hailo.firmware_mismatch`, `hailo.pcie_link` and `hailo.device_degraded`:
//! the device side — its firmware files and version, the PCIe link, faults it reports.

use super::*;

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

/// "8.0 GT/s PCIe" / "8 GT/s" -> 8.0.
pub(super) fn gts(s: &str) -> Option<f64> {
    s.split_whitespace().next()?.parse().ok()
}

pub(super) fn pcie_link(ctx: &Ctx<'_>, dev: Option<&PciDevice>) -> Finding {
    let id = "hailo.pcie_link";
    let npu = &ctx.profile.npu;
    let Some(d) = dev else {
        return Finding::skip(id, "no Hailo device on PCI");
    };
    let Some(speed) = &d.link_speed else {
        return Finding::skip(
            id,
            format!("{} not readable", pci_path(d, "current_link_speed")),
        );
    };
    let want = gts(&npu.pcie_link_speed);
    let have = gts(speed);
    let mut f = Finding::new(
        id,
        Status::Pass,
        format!(
            "{speed} x{}",
            d.link_width.map(|w| w.to_string()).unwrap_or("?".into())
        ),
    )
    .observed("link_speed", speed.clone())
    .observed("link_width", d.link_width)
    .expected("link_speed", npu.pcie_link_speed.clone())
    .expected("link_width", npu.pcie_link_width)
    .evidence(&pci_path(d, "current_link_speed"), None, speed);
    let slow = matches!((have, want), (Some(h), Some(w)) if h + 0.01 < w);
    let narrow = matches!((d.link_width, npu.pcie_link_width), (Some(h), Some(w)) if h < w);
    if slow || narrow {
        f.status = Status::Warn;
        f.summary = format!(
            "the link trained at {speed} x{}, below {} x{}",
            d.link_width.unwrap_or(0),
            npu.pcie_link_speed,
            npu.pcie_link_width.unwrap_or(1)
        );
        f = f.remedy("add `dtparam=pciex1_gen=3` under [all] in /boot/firmware/config.txt and reboot; if it stays low, reseat the ribbon cable");
    }
    f
}

pub(super) fn device_degraded(ctx: &Ctx<'_>, dev: Option<&PciDevice>) -> Finding {
    let id = "hailo.device_degraded";
    let device_side: Vec<_> = ctx
        .logs
        .find(Some(LogClass::Device), |e| {
            matches!(e, LogEvent::CmaAllocFail { .. })
        })
        .collect();
    if !device_side.is_empty() {
        let n = device_side.len();
        return Finding::new(
            id,
            Status::Warn,
            format!("{n} CMA allocation failure(s) inside the accelerator's own Linux (device-side runtime log): the chip degrades until reset; host CMA is not involved, so host compaction will not help"),
        )
        .observed("device_cma_failures", n as u64)
        .with_hits(device_side.iter().map(|(h, _)| *h))
        .remedy("schedule a host reboot (driver reload, PCIe rescan and chip reset were reported not to recover it) and report it to Hailo with the device log");
    }
    match dev {
        None => Finding::skip(id, "no Hailo device on PCI"),
        Some(_) => Finding::new(id, Status::Pass, "no device-side faults in the logs read"),
    }
}
