//! PCI presence, PCIe link and device-side fault checks.

use super::*;
use crate::model::remedy::{Remedy, Step};

pub(super) fn pci_path(d: &PciDevice, attr: &str) -> String {
    format!("/sys/bus/pci/devices/{}/{attr}", d.bdf)
}

pub(super) fn pci_device(ctx: &Ctx<'_>, dev: Option<&PciDevice>) -> Finding {
    let id = "hailo.pci_device";
    let chip = &ctx.profile.npu.chip;
    let pci = match &ctx.snap.pci {
        Ok(p) => p,
        Err(e) => return Finding::skip(id, format!("cannot list PCI devices: {e}")),
    };
    let expected = ctx.profile.npu.pci_ids.join(", ");
    match dev {
        None => Finding::new(
            id,
            Status::Fail,
            format!("no Hailo device on PCI ({} functions seen): the {chip} is not detected — a seating, ribbon-cable or pciex1 problem, not software", pci.len()),
        )
        .expected("pci_id", expected)
        .remedy("power off; reseat the HAT and its ribbon cable (contacts the right way round); if it still is missing add `dtparam=pciex1` to /boot/firmware/config.txt and reboot"),
        Some(d) => {
            let pci_id = format!("{:04x}:{:04x}", d.vendor, d.device);
            let f = Finding::new(id, Status::Pass, format!("{} ({pci_id}) at {}", chip_name(d.device), d.bdf))
                .observed("pci_id", pci_id.clone())
                .observed("pci_address", d.bdf.clone())
                .observed("chip", chip_name(d.device))
                .expected("pci_id", expected)
                .evidence(&pci_path(d, "device"), None, &format!("0x{:04x}", d.device));
            if expected_ids(ctx).contains(&(d.vendor, d.device)) {
                // The chip is on the bus, but the logs may already show it unusable.
                // A wrong-generation driver failing on the chip is hailo.driver_binding's.
                let fails: Vec<_> = probe_failures(ctx, Some(d))
                    .into_iter()
                    .filter(|(_, h)| wrong_driver_of(ctx, h).is_none())
                    .collect();
                match (fails.last(), &d.driver) {
                    (Some((cause, _)), None) => {
                        let (what, remedy) = probe_cause_advice(ctx, *cause, Some(d));
                        let mut f = f.with_hits(fails.iter().map(|(_, h)| *h));
                        f.status = Status::Fail;
                        f.summary = format!("{} ({pci_id}) at {}: {what}", chip_name(d.device), d.bdf);
                        f.observed("probe_failure", format!("{cause:?}")).remedy(remedy)
                    }
                    (Some((cause, _)), Some(drv)) => {
                        let mut f = f.with_hits(fails.iter().map(|(_, h)| *h));
                        f.status = Status::Info;
                        f.summary = format!("{} ({pci_id}) at {}, bound to {drv}; an earlier probe failed ({})", chip_name(d.device), d.bdf, crate::check::driver_probe::cause_text(*cause));
                        f
                    }
                    _ => f,
                }
            } else {
                let mut f = f;
                f.status = Status::Fail;
                f.summary = format!(
                    "a {} ({pci_id}) is fitted but profile {} expects a {chip}",
                    chip_name(d.device),
                    ctx.profile.id
                );
                f.remedy("run `npu-agent check` without --profile so the matching profile is chosen")
            }
        }
    }
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
    if let Some(failing) = link_errors(ctx, d) {
        return failing_link(ctx, f, d, speed, have, failing);
    }
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
        f = with_link_speed(
            ctx,
            f,
            3,
            "raise the link to Gen 3 (the line goes under [all]; if it stays low after the reboot, reseat the ribbon cable)",
            "add `dtparam=pciex1_gen=3` under [all] in /boot/firmware/config.txt and reboot; if it stays low, reseat the ribbon cable",
        );
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
    if let Some(d) = crate::check::throughput::worst_decay(ctx) {
        return throughput_fall(id, d);
    }
    match dev {
        None => Finding::skip(id, "no Hailo device on PCI"),
        Some(_) => Finding::new(id, Status::Pass, "no device-side faults in the logs read"),
    }
}

/// Evidence that the link is failing: AER totals of the device and the kernel's `link down`
/// and `AER:` lines about it or its PCIe controller, as (file, line, text).
struct LinkErrors {
    aer: crate::model::AerTotals,
    lines: Vec<(String, Option<usize>, String)>,
}

fn link_errors(ctx: &Ctx<'_>, d: &PciDevice) -> Option<LinkErrors> {
    let aer = d.aer.unwrap_or_default();
    let bdf = d.bdf.to_ascii_lowercase();
    let mut lines = Vec::new();
    for log in ctx.snap.logs.iter().filter(|l| l.class == LogClass::Kernel) {
        for (i, text) in log.lines.iter().enumerate() {
            let t = text.to_ascii_lowercase();
            let about = t.contains(&bdf) || t.contains("pcie");
            if about && (t.contains("link down") || t.contains("aer:") && t.contains("error")) {
                lines.push((log.path.clone(), (!log.cut).then_some(i + 1), text.clone()));
            }
        }
    }
    (aer.correctable + aer.nonfatal + aer.fatal > 0 || !lines.is_empty())
        .then_some(LinkErrors { aer, lines })
}

/// A link with errors: the remedy lowers the speed and reseats the cable; it never asks for
/// Gen 3, which is what a failing Gen 3 link is already running.
fn failing_link(
    ctx: &Ctx<'_>,
    f: Finding,
    d: &PciDevice,
    speed: &str,
    have: Option<f64>,
    e: LinkErrors,
) -> Finding {
    let mut f = f
        .observed("aer_correctable", e.aer.correctable)
        .observed("aer_uncorrectable", e.aer.nonfatal + e.aer.fatal)
        .observed("link_down_or_aer_lines", e.lines.len() as u64);
    for (file, line, text) in &e.lines {
        f.push_evidence(file, *line, text);
    }
    if d.aer.is_some() {
        f.push_evidence(
            &pci_path(d, "aer_dev_correctable"),
            None,
            &format!("TOTAL_ERR_COR {}", e.aer.correctable),
        );
    }
    let uncorrectable = e.aer.nonfatal + e.aer.fatal;
    f.status = if uncorrectable > 0 || !e.lines.is_empty() {
        Status::Fail
    } else {
        Status::Warn
    };
    f.summary = format!(
        "the link at {speed} is failing: {} corrected and {uncorrectable} uncorrectable AER error(s), {} link-down/AER line(s) in the kernel log",
        e.aer.correctable,
        e.lines.len()
    );
    let gen3 = have.is_some_and(|h| h >= 8.0);
    if gen3 {
        return with_link_speed(
            ctx,
            f,
            2,
            "run the link at Gen 2 (the line goes under [all] and replaces any pciex1_gen=3; a link that fails at Gen 3 is not fixed by forcing Gen 3) and power off to reseat the ribbon cable",
            "run the link at Gen 2: set `dtparam=pciex1_gen=2` under [all] in /boot/firmware/config.txt (remove any `pciex1_gen=3`) and reboot; power off and reseat the ribbon cable; a link that fails at Gen 3 is not fixed by forcing Gen 3",
        );
    }
    f.remedy("power off and reseat the ribbon cable (contacts the right way round, fully latched); keep the link at its default speed; if errors continue, try another cable or HAT")
}

/// The Pi firmware's config file the link speed goes in.
const PI_CONFIG: &str = "/boot/firmware/config.txt";

/// Sets the link-speed remedy: `dtparam=pciex1_gen=<gen>` in config.txt and a reboot as steps
/// when the board's config.txt was read (the file the edit changes exists), else `text`.
fn with_link_speed(ctx: &Ctx<'_>, f: Finding, gen: u32, note: &str, text: &str) -> Finding {
    let read = ctx
        .snap
        .boot_files
        .iter()
        .any(|b| b.path == PI_CONFIG && b.text.is_ok());
    if !read {
        return f.remedy(text);
    }
    f.with_fix(
        Remedy::of(vec![
            Step::BootKey {
                file: PI_CONFIG.into(),
                key: "dtparam".into(),
                value: format!("pciex1_gen={gen}"),
            },
            Step::RebootNeeded,
        ])
        .with_note(note),
    )
}

/// The same model running far slower than before on this host: the chip is stuck in a slow
/// state. A reboot is not promised to clear it (reports show it surviving power cycles).
fn throughput_fall(id: &str, d: crate::check::throughput::Decay) -> Finding {
    Finding::new(
        id,
        Status::Warn,
        format!(
            "the same model runs far slower on the chip: {}; with driver, library, link and power fine this is the device itself (a clock or power state stuck low)",
            d.describe()
        ),
    )
    .observed("fps_before", d.best.0)
    .observed("fps_now", d.latest.0)
    .evidence(&d.file, Some(d.best.1), &format!("{} FPS", d.best.0))
    .evidence(&d.file, Some(d.latest.1), &format!("{} FPS", d.latest.0))
    .remedy("collect `hailortcli fw-control identify` and the benchmark output and report it to Hailo support (RMA if a cold power cycle has not cleared it); reinstalling HailoRT or changing packages will not help")
}
