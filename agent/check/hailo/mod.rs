//! Hailo checks (Raspberry Pi 5 + Hailo-8/8L/10H).

use super::{Ctx, Finding, Status};
use crate::model::{LogClass, PciDevice};
use crate::parse::logline::{LogEvent, ProbeCause};
use crate::parse::version::Version;
use crate::profile::{parse_pci_id, NpuKind};

mod driver;
mod firmware;
mod package;
mod pcie;
mod remedy;
mod runtime;

use driver::*;
use firmware::*;
use package::*;
use pcie::*;
use remedy::*;
use runtime::*;

const HAILO_VENDOR: u16 = 0x1e60;

pub(super) fn all(ctx: &Ctx<'_>) -> Vec<Finding> {
    if ctx.profile.npu.kind != NpuKind::Hailo {
        return super::CHECK_IDS
            .iter()
            .filter(|id| id.starts_with("hailo."))
            .map(|id| Finding::skip(id, no_hailo(ctx)))
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

/// Why the Hailo checks do not apply: neither the board profile nor the host shows a Hailo.
fn no_hailo(ctx: &Ctx<'_>) -> String {
    format!(
        "no Hailo accelerator: profile {} names none and the host shows no Hailo PCI device, device node or module",
        ctx.profile.id
    )
}

pub(super) fn chip_name(device: u16) -> &'static str {
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

/// The wrong-generation driver a probe line names as the one that probed (`probe with driver
/// hailo1x failed`, or a line the driver itself prints: `hailo1x 0000:02:00.0: ...`), if any: that
/// failure says the driver is wrong for the chip, not that the chip is faulty.
fn wrong_driver_of(ctx: &Ctx<'_>, hit: &super::LogHit) -> Option<String> {
    let t = hit.text.to_ascii_lowercase();
    ctx.profile
        .npu
        .wrong_drivers
        .iter()
        .find(|w| {
            let w = w.to_ascii_lowercase();
            t.contains(&format!("driver {w} failed"))
                || t.split_once("] ")
                    .map_or(t.as_str(), |(_, rest)| rest)
                    .starts_with(&format!("{w} "))
        })
        .cloned()
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

    use crate::check::testkit::{one, Board};

    const H8: (u16, u16) = (0x1e60, 0x2864);

    fn healthy() -> Board {
        Board::new()
            .pci(H8.0, H8.1, Some("hailo"))
            .module("hailo_pci", Some("4.20.0"))
            .package("hailo-all", "4.20.0")
            .package("hailort", "4.20.0")
            .device_node("/dev/hailo0")
    }

    #[test]
    fn healthy_board_passes() {
        let snap = healthy().build();
        let table = [
            ("hailo.pci_device", "Hailo-8/8L (1e60:2864) at 0001:01:00.0"),
            (
                "hailo.driver_binding",
                "is bound to hailo, the right driver",
            ),
            ("hailo.package_generation", "HailoRT 4.x packages only"),
            (
                "hailo.version_mismatch",
                "driver 4.20.0 == libhailort 4.20.0",
            ),
            ("hailo.pcie_link", "8.0 GT/s PCIe x1"),
        ];
        for (id, summary) in table {
            let f = one("rpi5-hailo8", &snap, id);
            assert_eq!(f.status, Status::Pass, "{id}: {}", f.summary);
            assert!(f.summary.contains(summary), "{id}: {}", f.summary);
        }
    }

    #[test]
    fn faults_and_skips() {
        let wrong = Board::new().pci(H8.0, H8.1, Some("hailo1x")).build();
        let f = one("rpi5-hailo8", &wrong, "hailo.driver_binding");
        assert_eq!(f.status, Status::Fail, "{}", f.summary);
        assert!(
            f.summary.contains("the other generation's driver"),
            "{}",
            f.summary
        );
        assert!(
            f.remedy.contains("sudo apt install dkms hailo-all"),
            "{}",
            f.remedy
        );
        let absent = Board::new().pci(0x10ec, 0x8168, None).build();
        let f = one("rpi5-hailo8", &absent, "hailo.pci_device");
        assert_eq!(f.status, Status::Fail, "{}", f.summary);
        assert!(
            f.summary.contains("no Hailo device on PCI"),
            "{}",
            f.summary
        );
        assert!(f.remedy.contains("reseat the HAT"), "{}", f.remedy);
        let f = one("rk3588-rknpu", &absent, "hailo.firmware");
        assert_eq!(f.status, Status::Skip);
        assert!(f.summary.contains("no Hailo accelerator"), "{}", f.summary);
        let f = one(
            "rpi5-hailo8",
            &Board::new().build(),
            "hailo.package_generation",
        );
        assert_eq!(f.status, Status::Skip);
        assert!(f.summary.contains("no dpkg database"), "{}", f.summary);
    }

    #[test]
    fn verdicts_fit_how_the_runtime_is_installed() {
        use crate::model::LogClass;
        // HAOS + Frigate: status 76 decides without the library's version; no apt.
        let haos = Board::new()
            .os("haos", "Home Assistant OS 15.0")
            .pci(H8.0, H8.1, Some("hailo"))
            .module("hailo_pci", Some("4.20.1"))
            .log(
                "/var/log/frigate.log",
                LogClass::Workload,
                &["[HailoRT] [error] CHECK_SUCCESS failed with status=HAILO_INVALID_DRIVER_VERSION(76)"],
            )
            .build();
        let f = one("rpi5-hailo8", &haos, "hailo.version_mismatch");
        assert_eq!(f.status, Status::Fail, "{}", f.summary);
        assert!(
            f.summary.contains("not visible on the host"),
            "{}",
            f.summary
        );
        assert!(f.remedy.contains("Frigate add-on"), "{}", f.remedy);
        assert!(!f.remedy.contains("apt"), "{}", f.remedy);
        let f = one("rpi5-hailo8", &haos, "hailo.package_generation");
        assert_eq!(f.status, Status::Skip, "{}", f.summary);
        // A source build in /usr/local/lib: no package needed, the library's major decides.
        let src = Board::new()
            .os("ubuntu", "Ubuntu 24.04 LTS")
            .pci(H8.0, H8.1, Some("hailo"))
            .module("hailo_pci", Some("4.20.0"))
            .package("linux-image-6.8.0-1052-raspi", "6.8.0-1052.56")
            .library("/usr/local/lib/libhailort.so.4.20.0");
        let f = one("rpi5-hailo8", &src.build(), "hailo.package_generation");
        assert_eq!(f.status, Status::Pass, "{}", f.summary);
        assert!(f.summary.contains("none is needed"), "{}", f.summary);
        let wrong = Board::new()
            .os("ubuntu", "Ubuntu 24.04 LTS")
            .package("linux-image-6.8.0-1052-raspi", "6.8.0-1052.56")
            .library("/usr/local/lib/libhailort.so.5.1.1");
        let f = one("rpi5-hailo8", &wrong.build(), "hailo.package_generation");
        assert_eq!(f.status, Status::Fail, "{}", f.summary);
        assert!(f.remedy.contains("source tag"), "{}", f.remedy);
        // A throughput fall on the same model is device-side decay, with both figures.
        let slow = Board::new().pci(H8.0, H8.1, Some("hailo")).log(
            "/var/log/hailort.log",
            LogClass::Workload,
            &[
                "hailortcli benchmark yolov8s.hef",
                "FPS     (hw_only)  = 398.43",
                "hailortcli benchmark yolov8s.hef",
                "FPS     (hw_only)  = 38.00",
            ],
        );
        let f = one("rpi5-hailo8", &slow.build(), "hailo.device_degraded");
        assert_eq!(f.status, Status::Warn, "{}", f.summary);
        assert!(f.summary.contains("398.43 to 38.00 FPS"), "{}", f.summary);
        assert!(!f.remedy.contains("apt"), "{}", f.remedy);
    }

    #[test]
    fn a_failing_link_is_never_told_to_run_at_gen_3() {
        use crate::model::{AerTotals, LogClass};
        let mut snap = healthy().build();
        if let Ok(devs) = snap.pci.as_mut() {
            devs[0].aer = Some(AerTotals {
                correctable: 12,
                nonfatal: 0,
                fatal: 0,
            });
        }
        let f = one("rpi5-hailo8", &snap, "hailo.pcie_link");
        assert_eq!(f.status, Status::Warn, "{}", f.summary);
        assert!(f.summary.contains("12 corrected"), "{}", f.summary);
        assert!(f.remedy.contains("pciex1_gen=2"), "{}", f.remedy);
        assert!(!f.remedy.contains("`dtparam=pciex1_gen=3`"), "{}", f.remedy);
        let down = healthy().log(
            "/var/log/kern.log",
            LogClass::Kernel,
            &["[  812.1] brcm-pcie 1000110000.pcie: link down"],
        );
        let f = one("rpi5-hailo8", &down.build(), "hailo.pcie_link");
        assert_eq!(f.status, Status::Fail, "{}", f.summary);
        assert!(
            f.evidence.iter().any(|e| e.text.contains("link down")),
            "{:?}",
            f.evidence
        );
    }

    #[test]
    fn runtime_library_verdicts() {
        let id = "hailo.runtime_library";
        let lost = Board::new().binary("/usr/bin/hailortcli", &["libhailort.so.4.20.0"]);
        let f = one("rpi5-hailo8", &lost.build(), id);
        assert_eq!(f.status, Status::Fail, "{}", f.summary);
        assert!(
            f.summary
                .contains("/usr/bin/hailortcli needs libhailort.so.4.20.0, which is not installed"),
            "{}",
            f.summary
        );
        let split = Board::new()
            .package("hailort", "4.20.0")
            .package("python3-hailort", "4.19.0");
        let f = one("rpi5-hailo8", &split.build(), id);
        assert_eq!(f.status, Status::Fail, "{}", f.summary);
        assert!(
            f.summary.contains("the Hailo packages are not one release"),
            "{}",
            f.summary
        );
        assert!(
            f.remedy
                .contains("sudo apt-get install python3-hailort=4.20.0"),
            "{}",
            f.remedy
        );
        let f = one("rpi5-hailo8", &Board::new().build(), id);
        assert_eq!(f.status, Status::Skip);
    }
}
