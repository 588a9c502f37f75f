//! Hailo checks (Raspberry Pi 5 + Hailo-8/8L/10H).

mod device;
mod packages;
use device::*;
use packages::*;

use super::{Ctx, Finding, Status};
use crate::model::{LogClass, PciDevice};
use crate::parse::logline::{LogEvent, ProbeCause};
use crate::parse::version::Version;
use crate::profile::{parse_pci_id, NpuKind};

const HAILO_VENDOR: u16 = 0x1e60;

pub(super) fn all(ctx: &Ctx<'_>) -> Vec<Finding> {
    if ctx.profile.npu.kind != NpuKind::Hailo {
        return super::CHECK_IDS
            .iter()
            .filter(|id| id.starts_with("hailo."))
            .map(|id| Finding::skip(id, format!("profile {} has no Hailo NPU", ctx.profile.id)))
            .collect();
    }
    let dev = hailo_device(ctx);
    vec![
        pci_device(ctx, dev),
        driver_binding(ctx, dev),
        stale_driver(ctx, dev),
        package_generation(ctx, dev),
        version_mismatch(ctx, dev),
        runtime_library(ctx),
        firmware(ctx, dev),
        firmware_mismatch(ctx),
        pcie_link(ctx, dev),
        device_degraded(ctx, dev),
    ]
}

fn chip_name(device: u16) -> &'static str {
    match device {
        0x45c4 => "Hailo-10H",
        0x2864 => "Hailo-8/8L",
        0x43a2 => "Hailo-15L",
        0x26a2 => "Hailo-12L (MARS)",
        _ => "unknown Hailo chip",
    }
}

fn expected_ids(ctx: &Ctx<'_>) -> Vec<(u16, u16)> {
    ctx.profile
        .npu
        .pci_ids
        .iter()
        .filter_map(|s| parse_pci_id(s))
        .collect()
}

/// The Hailo device: the expected chip if present, else any Hailo function.
fn hailo_device<'a>(ctx: &'a Ctx<'_>) -> Option<&'a PciDevice> {
    let devs = ctx.snap.pci.as_ref().ok()?;
    let want = expected_ids(ctx);
    devs.iter()
        .find(|d| want.contains(&(d.vendor, d.device)))
        .or_else(|| devs.iter().find(|d| d.vendor == HAILO_VENDOR))
}

/// Probe or load failures of the Hailo driver in the host logs (the line names the device's
/// address or a Hailo driver/module, in any case), newest last, with their cause.
fn probe_failures<'a>(
    ctx: &'a Ctx<'_>,
    dev: Option<&PciDevice>,
) -> Vec<(ProbeCause, &'a super::LogHit)> {
    ctx.logs
        .host(|e| matches!(e, LogEvent::ProbeFailure { .. }))
        .filter(|(h, e)| {
            let t = h.text.to_ascii_lowercase();
            t.contains("hailo")
                || dev.is_some_and(|d| t.contains(&d.bdf.to_ascii_lowercase()))
                // DKMS names the module on the lines around its error, not on the error line.
                || matches!(e, LogEvent::ProbeFailure { cause: ProbeCause::DkmsBuildFailed, .. })
                    && near_mentions(ctx, h, "hailo")
        })
        .filter_map(|(h, e)| match e {
            LogEvent::ProbeFailure { cause, .. } => Some((*cause, h)),
            _ => None,
        })
        .collect()
}

/// True when a line within 5 lines of `hit` in its log mentions `needle` (any case).
fn near_mentions(ctx: &Ctx<'_>, hit: &super::LogHit, needle: &str) -> bool {
    let Some(log) = ctx.snap.logs.iter().find(|l| l.path == hit.file) else {
        return false;
    };
    let i = hit.line.saturating_sub(1);
    log.lines[i.saturating_sub(5)..(i + 6).min(log.lines.len())]
        .iter()
        .any(|l| l.to_ascii_lowercase().contains(needle))
}

/// PCI bus number of an address (`0000:05:00.0` -> 5).
fn bus_of(bdf: &str) -> Option<u32> {
    bdf.split(':')
        .nth(1)
        .and_then(|b| u32::from_str_radix(b, 16).ok())
}

/// The summary part and remedy for a Hailo probe failure, by cause.
fn probe_cause_advice(
    ctx: &Ctx<'_>,
    cause: ProbeCause,
    dev: Option<&PciDevice>,
) -> (String, String) {
    let chip = &ctx.profile.npu.chip;
    let kernel = ctx
        .snap
        .identity
        .kernel_release
        .as_ref()
        .ok()
        .filter(|k| !k.is_empty())
        .map(|k| format!("kernel {k}"))
        .unwrap_or_else(|| "the running kernel".into());
    let behind_switch = dev
        .and_then(|d| bus_of(&d.bdf))
        .filter(|b| *b > 1)
        .map(|b| format!(" (it sits on bus {b:02x}, behind a PCIe switch)"))
        .unwrap_or_default();
    match cause {
        ProbeCause::Interrupts => (
            format!("the driver cannot enable interrupts for the {chip}{behind_switch}: the probe failed and the chip is unusable"),
            "connect the HAT directly to the Pi 5 PCIe connector; behind a PCIe switch, update firmware and kernel (sudo apt full-upgrade or sudo rpi-update), put the switch board's overlay (e.g. dtoverlay=pineboards-hat-ai) and kernel=kernel8.img in /boot/firmware/config.txt, then reboot; reinstalling the HailoRT packages changes nothing here".into(),
        ),
        ProbeCause::ModuleForOtherKernel => (
            format!("the Hailo module on disk was built for another kernel than {kernel} and will not load"),
            "rebuild it for the running kernel: sudo apt install raspberrypi-kernel-headers (Debian: linux-headers-$(uname -r)) && sudo dkms autoinstall && sudo reboot; or boot the kernel it was built for — purging and reinstalling the same packages changes nothing".into(),
        ),
        ProbeCause::DkmsBuildFailed => (
            format!("DKMS could not build the Hailo module for {kernel}"),
            "install the headers of the running kernel (sudo apt install raspberrypi-kernel-headers, or linux-headers-$(uname -r)) and run sudo dkms autoinstall; if the driver source does not build on this kernel, boot the previous kernel or install a HailoRT release that supports it".into(),
        ),
        ProbeCause::FirmwareMissing => (
            format!("the {chip} firmware file could not be loaded"),
            match ctx.profile.npu.generation {
                Some(5) => "sudo apt install --reinstall h10-hailort-pcie-driver && sudo reboot".into(),
                _ => "sudo apt install --reinstall hailofw hailort-pcie-driver && sudo reboot".into(),
            },
        ),
        ProbeCause::Timeout => (
            format!("the {chip} did not answer its probe (timeout)"),
            "sudo poweroff, remove power for 10 s, then boot again (a warm reboot does not reset the chip)".into(),
        ),
        ProbeCause::Collision => (
            "two Hailo drivers collide on the same device class (EEXIST)".into(),
            format!(
                "echo 'blacklist {}' | sudo tee /etc/modprobe.d/blacklist-{}.conf && sudo reboot",
                ctx.profile.npu.wrong_modules.first().cloned().unwrap_or_default(),
                ctx.profile.npu.wrong_modules.first().cloned().unwrap_or_default()
            ),
        ),
        ProbeCause::LinkLost => (
            format!("the {chip}'s PCI BARs could not be read: the link dropped"),
            "power off, reseat the HAT and its ribbon cable, then boot again".into(),
        ),
        ProbeCause::Other => (
            format!("the driver failed to probe the {chip}"),
            "read the probe line in the kernel log: its error code names the cause (reinstalling the same packages rarely changes it)".into(),
        ),
    }
}

fn pci_path(d: &PciDevice, attr: &str) -> String {
    format!("/sys/bus/pci/devices/{}/{attr}", d.bdf)
}

fn pci_device(ctx: &Ctx<'_>, dev: Option<&PciDevice>) -> Finding {
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
                let fails = probe_failures(ctx, Some(d));
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
                        f.summary = format!("{} ({pci_id}) at {}, bound to {drv}; an earlier probe failed ({})", chip_name(d.device), d.bdf, super::driver_probe::cause_text(*cause));
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

fn module_version(ctx: &Ctx<'_>, name: &str) -> Option<(String, Version)> {
    ctx.snap
        .modules
        .iter()
        .find(|m| m.name.eq_ignore_ascii_case(name))
        .and_then(|m| m.version.as_deref())
        .and_then(|v| Version::parse_loose(v).map(|p| (format!("/sys/module/{name}/version"), p)))
}

/// Module behind a PCI driver name (`hailo1x` -> `hailo1x_pci`).
fn module_of_driver(driver: &str) -> String {
    format!("{}_pci", driver.to_ascii_lowercase())
}

fn gen_remedy(ctx: &Ctx<'_>) -> String {
    match ctx.profile.npu.generation {
        Some(5) => "sudo apt purge 'hailo-all' 'hailort' 'hailort-pcie-driver' 'python3-hailort' 'hailo-dkms' 'hailofw' && sudo apt install dkms hailo-h10-all && sudo reboot".into(),
        Some(4) => "sudo apt purge 'hailo-h10-all' 'h10-hailort' 'h10-hailort-pcie-driver' 'python3-h10-hailort' && sudo apt install dkms hailo-all && sudo reboot".into(),
        _ => "install the HailoRT line that matches the chip, then reboot".into(),
    }
}

fn driver_binding(ctx: &Ctx<'_>, dev: Option<&PciDevice>) -> Finding {
    let id = "hailo.driver_binding";
    let Some(d) = dev else {
        return Finding::skip(id, "no Hailo device on PCI (see hailo.pci_device)");
    };
    let npu = &ctx.profile.npu;
    let right = npu.drivers.join(" or ");
    let mut f = match &d.driver {
        Some(drv) if npu.drivers.iter().any(|x| x.eq_ignore_ascii_case(drv)) => Finding::new(
            id,
            Status::Pass,
            format!(
                "{} is bound to {drv}, the right driver for the {}",
                d.bdf, npu.chip
            ),
        ),
        Some(drv) => {
            let ver = module_version(ctx, &module_of_driver(drv))
                .map(|(_, v)| format!(" {v}"))
                .unwrap_or_default();
            let why = if npu
                .wrong_drivers
                .iter()
                .any(|x| x.eq_ignore_ascii_case(drv))
            {
                format!(
                    "the other generation's driver ({}{ver})",
                    module_of_driver(drv)
                )
            } else {
                "an unexpected driver".into()
            };
            Finding::new(
                id,
                Status::Fail,
                format!(
                    "{} ({}) is bound to {drv}: {why}; the {} needs {right}",
                    d.bdf,
                    chip_name(d.device),
                    npu.chip
                ),
            )
            .remedy(gen_remedy(ctx))
        }
        None => {
            let loaded: Vec<String> = ctx
                .snap
                .modules
                .iter()
                .filter(|m| m.name.to_ascii_lowercase().starts_with("hailo"))
                .map(|m| {
                    format!("{} {}", m.name, m.version.clone().unwrap_or_default())
                        .trim()
                        .to_string()
                })
                .collect();
            let detail = if loaded.is_empty() {
                "no Hailo module is loaded".to_string()
            } else {
                format!(
                    "loaded: {} (HailoRT 4.23 hailo_pci claims only 1e60:2864)",
                    loaded.join(", ")
                )
            };
            let fails = probe_failures(ctx, Some(d));
            match fails.last() {
                Some((cause, _)) => {
                    let (what, remedy) = probe_cause_advice(ctx, *cause, Some(d));
                    Finding::new(
                        id,
                        Status::Fail,
                        format!(
                            "no driver is bound to {} ({}): {what}; {detail}",
                            d.bdf,
                            chip_name(d.device)
                        ),
                    )
                    .observed("probe_failure", format!("{cause:?}"))
                    .with_hits(fails.iter().map(|(_, h)| *h))
                    .remedy(remedy)
                }
                None => Finding::new(
                    id,
                    Status::Fail,
                    format!(
                        "no driver is bound to {} ({}); {detail}",
                        d.bdf,
                        chip_name(d.device)
                    ),
                )
                .remedy(gen_remedy(ctx)),
            }
        }
    };
    f = f
        .observed("driver", d.driver.clone().unwrap_or_default())
        .expected("driver", right)
        .evidence(
            &pci_path(d, "driver"),
            None,
            d.driver.as_deref().unwrap_or("(no driver link)"),
        );
    if let Some(drv) = &d.driver {
        if let Some((path, v)) = module_version(ctx, &module_of_driver(drv)) {
            f = f
                .observed("driver_version", v.to_string())
                .evidence(&path, None, &v.to_string());
        }
    }
    // HAILO_OUT_OF_PHYSICAL_DEVICES(74) with no usable binding is this check's evidence.
    if f.status != Status::Pass {
        let hits: Vec<_> = ctx
            .logs
            .host(|e| matches!(e, LogEvent::HailoStatus { code: 74 }))
            .map(|(h, _)| h)
            .collect();
        f = f.with_hits(hits);
    }
    f
}

fn stale_driver(ctx: &Ctx<'_>, dev: Option<&PciDevice>) -> Finding {
    let id = "hailo.stale_driver";
    let npu = &ctx.profile.npu;
    let bound = dev.and_then(|d| d.driver.clone());
    if bound
        .as_ref()
        .is_some_and(|b| npu.wrong_drivers.iter().any(|x| x.eq_ignore_ascii_case(b)))
    {
        return Finding::new(
            id,
            Status::Pass,
            "the wrong-family driver is bound, not merely installed: see hailo.driver_binding",
        );
    }
    let mut stale = Vec::new();
    let mut f = Finding::new(id, Status::Pass, "");
    for m in &npu.wrong_modules {
        if let Some(mv) = ctx
            .snap
            .modules
            .iter()
            .find(|x| x.name.eq_ignore_ascii_case(m))
        {
            stale.push(format!(
                "{m} loaded{}",
                mv.version
                    .as_ref()
                    .map(|v| format!(" ({v})"))
                    .unwrap_or_default()
            ));
            f.push_evidence(
                &format!("/sys/module/{m}"),
                None,
                mv.version.as_deref().unwrap_or(""),
            );
        }
        for file in ctx.snap.module_files.iter().filter(|p| {
            p.rsplit('/')
                .next()
                .is_some_and(|n| n.starts_with(&format!("{m}.ko")))
        }) {
            stale.push(format!("{m} installed at {file}"));
            f.push_evidence(file, None, "");
        }
    }
    if stale.is_empty() {
        f.summary = format!(
            "no {} module is installed or loaded",
            npu.wrong_modules.join("/")
        );
        return f;
    }
    f.status = Status::Warn;
    f.summary = format!(
        "a wrong-family Hailo module is present but not bound: {}; it can take the device on a later boot or collide with {}",
        stale.join("; "),
        npu.modules.join("/")
    );
    f.observed("stale_modules", stale).remedy(format!(
        "echo 'blacklist {}' | sudo tee /etc/modprobe.d/blacklist-{}.conf (or purge the package that installed it)",
        npu.wrong_modules.first().cloned().unwrap_or_default(),
        npu.wrong_modules.first().cloned().unwrap_or_default()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globbing_and_speeds() {
        assert!(glob_match("u-boot*.dtb.signed", "u-boot-6.dtb.signed"));
        assert!(glob_match("hailo8_fw*.bin", "hailo8_fw.4.19.0.bin"));
        assert!(!glob_match("scu_fw.bin", "scu_fw.bin.old"));
        assert_eq!(gts("8.0 GT/s PCIe"), Some(8.0));
        assert_eq!(gts("8 GT/s"), Some(8.0));
        assert_eq!(gts(""), None);
    }
}
