//! `board.power`: is the board under-powered? The Raspberry Pi `rpi_volt` hwmon's
//! `in0_lcrit_alarm` says "under-voltage now"; the kernel lines `Undervoltage detected!` /
//! `Voltage normalised` (from whichever kernel log the agent read: the ring buffer, the journal,
//! `kern.log`) count the dips since boot and, where there is no hwmon, say which state came last.
//! A Pi 5 with an AI HAT on a 3 A supply is the classic case; RK3588 boards have no such sensor.

use super::{Ctx, Finding, Status};
use crate::model::sensors::{undervoltage_log, ConfigLine, UndervoltageLog};

/// The supply a board needs, from its device tree (model and compatible).
fn supply_for(ctx: &Ctx<'_>) -> (&'static str, bool) {
    let id = &ctx.snap.identity;
    let model = id.model.as_deref().unwrap_or("");
    let compat = id.compatible.as_deref().unwrap_or(&[]);
    let has = |c: &str| compat.iter().any(|x| x == c);
    if has("brcm,bcm2712")
        || model.contains("Raspberry Pi 5")
        || model.contains("Raspberry Pi 500")
        || model.contains("Compute Module 5")
    {
        (
            "a 5.1 V 5 A USB-C PD supply (the official Raspberry Pi 27 W USB-C power supply): \
             a 3 A supply cannot carry a Pi 5 with an AI HAT under load",
            true,
        )
    } else if has("brcm,bcm2711") || model.contains("Raspberry Pi 4") {
        (
            "a 5.1 V 3 A USB-C supply (the official Raspberry Pi 15 W USB-C power supply)",
            false,
        )
    } else if model.contains("Raspberry Pi") {
        (
            "a 5.1 V 2.5 A micro-USB supply (the official Raspberry Pi supply for the board)",
            false,
        )
    } else {
        (
            "a supply with the voltage and current the board's maker specifies, with margin for \
             the NPU and USB devices",
            false,
        )
    }
}

fn remedy(ctx: &Ctx<'_>) -> String {
    let (supply, pi5) = supply_for(ctx);
    let mut r = format!("Use {supply}. Short, thick cable; no hub or adapter in between.");
    // usb_max_current_enable only matters on a Pi 5, and only when it is set: it lifts the
    // firmware's 600 mA USB limit as if a 5 A supply had been negotiated.
    if let Some(ConfigLine {
        file, line, value, ..
    }) = ctx.snap.sensors.usb_max_current_enable.as_ref()
    {
        if pi5 && value.trim() == "1" {
            r.push_str(&format!(
                " Remove usb_max_current_enable=1 ({file}:{line}) unless the supply really \
                 delivers 5 A: it lets USB draw 1.6 A without a negotiated 5 A supply."
            ));
        }
    }
    r
}

pub(super) fn power(ctx: &Ctx<'_>) -> Finding {
    const ID: &str = "board.power";
    let sensors = &ctx.snap.sensors;
    let log = undervoltage_log(&ctx.snap.logs);
    let events = log.as_ref().map_or(0, |l| l.detected);
    let add_log = |mut f: Finding, log: &Option<UndervoltageLog>| {
        if let Some(l) = log {
            f = f
                .observed("undervoltage_events", l.detected)
                .observed("voltage_normalised_events", l.normalised)
                .observed("kernel_log", l.path.clone());
            if let Some((line, known, text, _)) = &l.last {
                f = f.evidence(&l.path, known.then_some(*line), text);
            }
        }
        f
    };
    let alarm = sensors
        .rpi_volt
        .as_ref()
        .map(|v| (v, v.lcrit_alarm.as_ref().ok().copied()));
    let f = match alarm {
        Some((v, Some(true))) => {
            let mut s = "under-voltage now: rpi_volt in0_lcrit_alarm = 1".to_string();
            if events > 0 {
                s.push_str(&format!(", {events} under-voltage events since boot"));
            }
            Finding::new(ID, Status::Fail, s)
                .observed("undervoltage_now", true)
                .expected("undervoltage_now", false)
                .evidence(&format!("{}/in0_lcrit_alarm", v.dir), None, "1")
                .remedy(remedy(ctx))
        }
        Some((v, Some(false))) if events > 0 => Finding::new(
            ID,
            Status::Warn,
            format!(
                "the supply dipped under-voltage {events} time(s) since boot; normal now \
                 (rpi_volt in0_lcrit_alarm = 0): it is marginal under load"
            ),
        )
        .observed("undervoltage_now", false)
        .expected("undervoltage_events", 0)
        .evidence(&format!("{}/in0_lcrit_alarm", v.dir), None, "0")
        .remedy(remedy(ctx)),
        Some((v, Some(false))) => Finding::new(
            ID,
            Status::Pass,
            if log.is_some() {
                "supply voltage normal (rpi_volt in0_lcrit_alarm = 0), no under-voltage since boot"
            } else {
                "supply voltage normal (rpi_volt in0_lcrit_alarm = 0); no kernel log read for \
                 earlier dips"
            },
        )
        .observed("undervoltage_now", false)
        .evidence(&format!("{}/in0_lcrit_alarm", v.dir), None, "0"),
        // No readable alarm: the kernel's own lines are the evidence; the last one says the state.
        _ if events > 0 => {
            let under = log.as_ref().is_some_and(UndervoltageLog::under_now);
            let (status, s) = if under {
                (
                    Status::Fail,
                    format!(
                        "the kernel reports under-voltage ({events} event(s) since boot) and \
                         no \"Voltage normalised\" after the last one"
                    ),
                )
            } else {
                (
                    Status::Warn,
                    format!(
                        "the supply dipped under-voltage {events} time(s) since boot (kernel \
                         log); normal since"
                    ),
                )
            };
            Finding::new(ID, status, s)
                .observed("undervoltage_now", under)
                .expected("undervoltage_events", 0)
                .remedy(remedy(ctx))
        }
        _ => {
            let why = match (&sensors.rpi_volt, &log) {
                (Some(v), _) => format!(
                    "the rpi_volt alarm is unreadable ({}) and the kernel log has no \
                     under-voltage lines",
                    v.lcrit_alarm
                        .as_ref()
                        .err()
                        .map(|e| e.to_string())
                        .unwrap_or_default()
                ),
                (None, Some(_)) => "no under-voltage sensor on this board (no rpi_volt hwmon \
                                    under /sys/class/hwmon); the kernel log has no \
                                    under-voltage lines"
                    .to_string(),
                (None, None) => "no under-voltage sensor on this board (no rpi_volt hwmon under \
                                 /sys/class/hwmon) and no kernel log was read"
                    .to_string(),
            };
            Finding::skip(ID, why)
        }
    };
    let mut f = add_log(f, &log);
    if let Some(c) = &sensors.usb_max_current_enable {
        f = f.observed("usb_max_current_enable", c.value.clone());
    }
    with_firmware(ctx, f)
}

/// Folds the Pi firmware's reports into `f`, with the remedies they call for.
fn with_firmware(ctx: &Ctx<'_>, mut f: Finding) -> Finding {
    let hat = ctx.profile.npu.kind == crate::profile::NpuKind::Hailo;
    let (supply, bootloader) = super::pi_platform::fold(&ctx.snap.sensors.pi, hat, &mut f);
    if supply && f.remedy.is_empty() {
        f.remedy = remedy(ctx);
    }
    if bootloader {
        let sep = if f.remedy.is_empty() { "" } else { " " };
        f.remedy.push_str(&format!(
            "{sep}Update the bootloader: sudo rpi-eeprom-update -a && sudo reboot."
        ));
    }
    f
}

#[cfg(test)]
mod tests {
    use crate::check::testkit::{one, Board};
    use crate::model::{LogClass, Status};

    #[test]
    fn power_verdicts() {
        let under = Board::new().log(
            "/var/log/kern.log",
            LogClass::Kernel,
            &["[    1.0] hwmon hwmon1: Undervoltage detected!"],
        );
        let f = one("rpi5-hailo8", &under.build(), "board.power");
        assert_eq!(f.status, Status::Fail, "{}", f.summary);
        assert!(
            f.summary
                .contains("the kernel reports under-voltage (1 event(s) since boot)"),
            "{}",
            f.summary
        );
        assert!(f.remedy.contains("Use a supply"), "{}", f.remedy);
        let f = one("rpi5-hailo8", &Board::new().build(), "board.power");
        assert_eq!(f.status, Status::Skip);
        assert!(
            f.summary.contains("no under-voltage sensor on this board"),
            "{}",
            f.summary
        );
    }

    #[test]
    fn pi_firmware_reports() {
        use crate::model::sensors::{FileValue, PiFirmware};
        let fv = |path: &str, v: u32| {
            Some(FileValue {
                path: path.to_string(),
                value: Ok(v),
            })
        };
        let mut b = Board::new().build();
        b.identity.model = Ok("Raspberry Pi 5 Model B Rev 1.0".into());
        b.sensors.pi = PiFirmware {
            throttled: fv(
                "/sys/devices/platform/soc@107c000000/soc@107c000000:firmware/get_throttled",
                0x50000,
            ),
            supply_max_current_ma: fv("/proc/device-tree/chosen/power/max_current", 3000),
            bootloader_build_unix_s: fv(
                "/proc/device-tree/chosen/bootloader/build-timestamp",
                1_699_000_000,
            ),
        };
        let f = one("rpi5-hailo8", &b, "board.power");
        assert_eq!(f.status, Status::Warn, "{}", f.summary);
        assert!(
            f.summary
                .contains("under-voltage since boot (get_throttled 0x50000)"),
            "{}",
            f.summary
        );
        assert!(
            f.summary.contains("negotiated only 3000 mA"),
            "{}",
            f.summary
        );
        assert!(
            f.summary.contains("the bootloader was built 2023-11-03"),
            "{}",
            f.summary
        );
        assert!(f.remedy.contains("5 A"), "{}", f.remedy);
        assert!(f.remedy.contains("rpi-eeprom-update -a"), "{}", f.remedy);
        b.sensors.pi.throttled = fv("/x/get_throttled", 0x1);
        assert_eq!(one("rpi5-hailo8", &b, "board.power").status, Status::Fail);
        // Without an NPU HAT a 3 A supply and an old bootloader are no fault.
        b.sensors.pi.throttled = fv("/x/get_throttled", 0);
        let f = one("generic", &b, "board.power");
        assert_eq!(f.status, Status::Pass, "{}", f.summary);
    }
}
