//! Hailo checks (Raspberry Pi 5 + Hailo-8/8L/10H).

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

/// Generation of an installed package: by name for metapackages, by version major otherwise.
fn package_gen(ctx: &Ctx<'_>, name: &str, version: &str) -> Option<u32> {
    let spec = &ctx.profile.packages;
    if let Some(g) = spec.metapackages.get(name) {
        return Some(*g);
    }
    if spec.versioned.iter().any(|p| p == name) {
        return Version::parse_loose(version).map(|v| v.major);
    }
    None
}

fn package_generation(ctx: &Ctx<'_>, dev: Option<&PciDevice>) -> Finding {
    let id = "hailo.package_generation";
    let pkgs = match &ctx.snap.dpkg {
        Ok(p) => p,
        Err(e) if e.is_not_found() => {
            return Finding::skip(id, "no dpkg database (/var/lib/dpkg/status not found, e.g. a Buildroot or Nerves image): the generation is judged from the kernel module in hailo.driver_binding")
        }
        Err(e) => return Finding::new(id, Status::Error, format!("cannot read the package database: {e}")),
    };
    let Some(expected) = ctx.profile.npu.generation else {
        return Finding::skip(id, "profile sets no HailoRT generation");
    };
    let mut right = Vec::new();
    let mut wrong = Vec::new();
    let mut history = Vec::new();
    let mut f = Finding::new(id, Status::Pass, "");
    for p in pkgs {
        let Some(g) = package_gen(ctx, &p.name, &p.version) else {
            continue;
        };
        let label = format!("{} {} ({}.x)", p.name, p.version, g);
        if p.state == crate::parse::dpkg::DpkgState::ConfigFiles {
            history.push(label);
            continue;
        }
        if !p.is_installed() {
            continue;
        }
        if g == expected {
            right.push(label);
        } else {
            f.push_evidence(
                "/var/lib/dpkg/status",
                Some(p.line),
                &format!("Package: {} / Version: {}", p.name, p.version),
            );
            wrong.push(label);
        }
    }
    let chip = dev
        .map(|d| chip_name(d.device))
        .unwrap_or(&ctx.profile.npu.chip);
    f = f
        .observed(
            "packages",
            right
                .iter()
                .chain(wrong.iter())
                .cloned()
                .collect::<Vec<_>>(),
        )
        .observed("config_files_only", history.clone())
        .expected("hailort_generation", format!("{expected}.x"));
    match (right.is_empty(), wrong.is_empty()) {
        (false, true) => {
            f.summary = format!(
                "HailoRT {expected}.x packages only ({}), right for the {chip}",
                right.join(", ")
            );
            if !history.is_empty() {
                f.summary.push_str(&format!(
                    "; removed leftovers (rc) are history: {}",
                    history.join(", ")
                ));
            }
        }
        (true, true) => {
            f.status = Status::Warn;
            f.summary = format!(
                "no HailoRT package is installed (dpkg); the {chip} needs the {expected}.x line"
            );
            f = f.remedy(gen_remedy(ctx));
        }
        (false, false) => {
            f.status = Status::Fail;
            f.summary = format!(
                "HailoRT lines are mixed: {} next to {}; the {chip} needs {expected}.x only",
                wrong.join(", "),
                right.join(", ")
            );
            f = f.remedy(gen_remedy(ctx));
        }
        (true, false) => {
            f.status = Status::Fail;
            f.summary = format!(
                "the wrong HailoRT line is installed for the {chip}: {}; it needs {expected}.x",
                wrong.join(", ")
            );
            f = f.remedy(gen_remedy(ctx));
        }
    }
    if f.status != Status::Pass {
        let hits: Vec<_> = ctx
            .logs
            .host(|e| {
                matches!(
                    e,
                    LogEvent::HailoStatus { code: 74 } | LogEvent::HailoLibraryMissing { .. }
                )
            })
            .map(|(h, _)| h)
            .collect();
        f = f.with_hits(hits);
    }
    f
}

/// The kernel driver's version: the bound driver's module, else the profile's modules.
fn driver_version(ctx: &Ctx<'_>, dev: Option<&PciDevice>) -> Option<(String, Version)> {
    if let Some(drv) = dev.and_then(|d| d.driver.as_ref()) {
        if let Some(v) = module_version(ctx, &module_of_driver(drv)) {
            return Some(v);
        }
    }
    ctx.profile
        .npu
        .modules
        .iter()
        .chain(&ctx.profile.npu.wrong_modules)
        .find_map(|m| module_version(ctx, m))
}

/// The installed libhailort version: a `libhailort.so.X.Y.Z` file, else the library package.
fn library_version(ctx: &Ctx<'_>) -> Option<(String, Version)> {
    let from_file = ctx.snap.libraries.iter().find_map(|p| {
        let v = p.rsplit("libhailort.so.").next()?;
        (v.split('.').count() == 3)
            .then(|| Version::parse_loose(v))
            .flatten()
            .map(|v| (p.clone(), v))
    });
    from_file.or_else(|| {
        let pkgs = ctx.snap.dpkg.as_ref().ok()?;
        ctx.profile.packages.library.iter().find_map(|name| {
            pkgs.iter()
                .find(|p| &p.name == name && p.is_installed())
                .and_then(|p| {
                    Version::parse_loose(&p.version).map(|v| {
                        (
                            format!("/var/lib/dpkg/status ({} {})", p.name, p.version),
                            v,
                        )
                    })
                })
        })
    })
}

fn version_mismatch(ctx: &Ctx<'_>, dev: Option<&PciDevice>) -> Finding {
    let id = "hailo.version_mismatch";
    let driver = driver_version(ctx, dev);
    let library = library_version(ctx);
    let logged: Vec<_> = ctx
        .logs
        .host(|e| matches!(e, LogEvent::HailoVersionMismatch { .. }))
        .collect();
    let remedy = "HailoRT needs driver == library exactly (major.minor.revision): install the driver and runtime of one release (or the host driver that matches the container's libhailort) and hold them: sudo apt-mark hold the Hailo packages";
    if let Some((
        hit,
        LogEvent::HailoVersionMismatch {
            driver: d,
            library: l,
        },
    )) = logged.last()
    {
        let mut f = Finding::new(
            id,
            Status::Fail,
            format!("HailoRT refused the driver: driver {d} != library {l} (HAILO_INVALID_DRIVER_VERSION, 76); the library in use may be a container's, not the host's"),
        )
        .observed("driver_version", d.to_string())
        .observed("library_version", l.to_string())
        .expected("library_version", d.to_string())
        .remedy(remedy)
        .with_hits(logged.iter().map(|(h, _)| *h));
        f.push_evidence(&hit.file, hit.line_no(), &hit.text);
        if let Some((p, v)) = &driver {
            f = f.evidence(p, None, &v.to_string());
        }
        return f;
    }
    match (driver, library) {
        (Some((dp, dv)), Some((lp, lv))) => {
            let f = Finding::new(id, Status::Pass, format!("driver {dv} == libhailort {lv}"))
                .observed("driver_version", dv.to_string())
                .observed("library_version", lv.to_string())
                .expected("library_version", dv.to_string())
                .evidence(&dp, None, &dv.to_string())
                .evidence(&lp, None, &lv.to_string());
            if dv == lv {
                f
            } else {
                let mut f = f;
                f.status = Status::Fail;
                f.summary = format!("kernel driver {dv} != libhailort {lv}: HailoRT refuses to open the device (HAILO_INVALID_DRIVER_VERSION)");
                let hits: Vec<_> = ctx
                    .logs
                    .host(|e| matches!(e, LogEvent::HailoStatus { code: 76 }))
                    .map(|(h, _)| h)
                    .collect();
                f.with_hits(hits).remedy(remedy)
            }
        }
        (None, _) => Finding::skip(
            id,
            "kernel driver version unknown (no /sys/module/hailo*_pci/version)",
        ),
        (_, None) => Finding::skip(
            id,
            "libhailort version unknown (no libhailort.so.X.Y.Z and no HailoRT runtime package)",
        ),
    }
}

fn runtime_library(ctx: &Ctx<'_>) -> Finding {
    let id = "hailo.runtime_library";
    let libs: Vec<&str> = ctx
        .snap
        .libraries
        .iter()
        .map(|p| p.rsplit('/').next().unwrap_or(p))
        .collect();
    let mut f = Finding::new(id, Status::Pass, "");
    let mut missing = Vec::new();
    let mut set_mismatch: Vec<String> = Vec::new();
    let mut judged = false;
    for b in &ctx.snap.binaries {
        match &b.needed {
            Ok(needed) => {
                judged = true;
                for n in needed.iter().filter(|n| n.starts_with("libhailort.so")) {
                    if !libs.iter().any(|l| l == n) {
                        missing.push(format!("{} needs {n}, which is not installed", b.path));
                        f.push_evidence(&b.path, None, &format!("NEEDED {n}"));
                    }
                }
            }
            Err(e) => {
                f.push_evidence(&b.path, None, &e.to_string());
            }
        }
    }
    for (hit, ev) in ctx
        .logs
        .host(|e| matches!(e, LogEvent::HailoLibraryMissing { .. }))
    {
        if let LogEvent::HailoLibraryMissing { soname } = ev {
            judged = true;
            let m = format!("{soname} could not be loaded ({})", hit.file);
            if !missing.contains(&m) {
                missing.push(m);
            }
            f.push_evidence(&hit.file, hit.line_no(), &hit.text);
        }
    }
    // GenAI (hailo-ollama) depends on `hailort`, which can resolve to the Hailo-8 runtime (#194).
    if let (Ok(pkgs), Some(gen)) = (&ctx.snap.dpkg, ctx.profile.npu.generation) {
        for g in &ctx.profile.packages.genai {
            if pkgs.iter().any(|p| &p.name == g && p.is_installed()) {
                judged = true;
                let runtimes: Vec<_> = pkgs
                    .iter()
                    .filter(|p| p.is_installed() && ctx.profile.packages.library.contains(&p.name))
                    .collect();
                if !runtimes.is_empty()
                    && runtimes
                        .iter()
                        .all(|p| Version::parse_loose(&p.version).is_some_and(|v| v.major != gen))
                {
                    missing.push(format!(
                        "{g} is installed but the only HailoRT runtime is {} {}",
                        runtimes[0].name, runtimes[0].version
                    ));
                    f.push_evidence(
                        "/var/lib/dpkg/status",
                        Some(runtimes[0].line),
                        &format!("Package: {}", runtimes[0].name),
                    );
                }
            }
        }
    }
    // Packages of one release set against the runtime package.
    if let Ok(pkgs) = &ctx.snap.dpkg {
        let spec = &ctx.profile.packages;
        let installed = |name: &str| pkgs.iter().find(|p| p.name == name && p.is_installed());
        let gen = ctx.profile.npu.generation;
        let runtime = spec
            .library
            .iter()
            .filter_map(|n| installed(n))
            .filter_map(|p| Version::parse_loose(&p.version).map(|v| (p, v)))
            .find(|(_, v)| gen.is_none_or(|g| v.major == g));
        if let Some((rt, rv)) = runtime {
            judged = true;
            for name in spec.same_version.iter().chain(&spec.same_minor) {
                if *name == rt.name {
                    continue;
                }
                let Some(p) = installed(name) else { continue };
                let Some(v) = Version::parse_loose(&p.version) else {
                    continue;
                };
                let minor_only = spec.same_minor.contains(name);
                let differs = if minor_only {
                    v.major == rv.major && (v.major, v.minor) != (rv.major, rv.minor)
                } else {
                    v.major == rv.major && v != rv
                };
                if differs {
                    missing.push(format!(
                        "{} {} belongs to the HailoRT {} release but the runtime is {} {}",
                        p.name,
                        p.version,
                        if minor_only {
                            format!("{}.{}", v.major, v.minor)
                        } else {
                            v.to_string()
                        },
                        rt.name,
                        rt.version
                    ));
                    f.push_evidence(
                        "/var/lib/dpkg/status",
                        Some(p.line),
                        &format!("Package: {} / Version: {}", p.name, p.version),
                    );
                    set_mismatch.push(format!("{}={}", p.name, rt.version));
                }
            }
        }
    }
    f = f.observed("libraries", ctx.snap.libraries.clone());
    if !missing.is_empty() {
        if !set_mismatch.is_empty() {
            f.status = Status::Fail;
            f.summary = format!(
                "the Hailo packages are not one release: {}",
                missing.join("; ")
            );
            return f.observed("missing", missing).remedy(format!(
                "install one release of the whole set — the runtime's: sudo apt install {} && sudo apt-mark hold {} (or upgrade the runtime, driver and firmware to the newer release together once it is published)",
                set_mismatch.join(" "),
                set_mismatch
                    .iter()
                    .map(|s| s.split('=').next().unwrap_or(""))
                    .collect::<Vec<_>>()
                    .join(" ")
            ));
        }
        f.status = Status::Fail;
        f.summary = format!(
            "a Hailo program cannot load its runtime: {}",
            missing.join("; ")
        );
        return f.observed("missing", missing).remedy(gen_remedy(ctx));
    }
    if !judged && libs.is_empty() {
        return Finding::skip(
            id,
            "no libhailort.so.* and no Hailo runtime binary found to check",
        );
    }
    f.summary = if libs.is_empty() {
        "every Hailo binary's libhailort is present".into()
    } else {
        format!("installed: {}", libs.join(", "))
    };
    f
}

fn glob_match(pattern: &str, name: &str) -> bool {
    match pattern.split_once('*') {
        None => pattern == name,
        Some((pre, suf)) => {
            name.len() >= pre.len() + suf.len() && name.starts_with(pre) && name.ends_with(suf)
        }
    }
}

fn firmware(ctx: &Ctx<'_>, dev: Option<&PciDevice>) -> Finding {
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

fn firmware_mismatch(ctx: &Ctx<'_>) -> Finding {
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
fn gts(s: &str) -> Option<f64> {
    s.split_whitespace().next()?.parse().ok()
}

fn pcie_link(ctx: &Ctx<'_>, dev: Option<&PciDevice>) -> Finding {
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

fn device_degraded(ctx: &Ctx<'_>, dev: Option<&PciDevice>) -> Finding {
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
