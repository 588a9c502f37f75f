//! Raspberry Pi platform health beyond the under-voltage sensor, folded into `board.power`: the
//! firmware's throttled bits now and since boot, the supply current the firmware negotiated, and
//! a bootloader older than PCIe HAT (AI Kit / AI HAT+) support.

use super::{Finding, Status};
use crate::model::sensors::{
    FileValue, PiFirmware, THROTTLED_CAPPED_NOW, THROTTLED_NOW, THROTTLED_UNDERVOLTAGE_NOW,
    THROTTLED_UNDERVOLTAGE_SINCE_BOOT,
};

/// What a 5 A USB-C PD supply negotiates on a Pi 5 (mA); 3 A supplies report 3000.
pub const FULL_SUPPLY_MA: u32 = 5000;

/// 2023-12-06 00:00 UTC: Raspberry Pi's AI Kit and M.2 HAT+ installation asks for a bootloader
/// of this date or later (`rpi-eeprom-update`).
pub const HAT_BOOTLOADER_MIN_UNIX_S: u32 = 1_701_820_800;

/// One fact the firmware adds: (status it asks for, summary part, evidence path and text).
struct Part {
    status: Status,
    text: String,
    path: String,
    value: String,
}

/// Folds the firmware's reports into the `board.power` finding `f`. `hat` is true when a PCIe
/// HAT (the NPU) draws from the supply. Returns whether a supply remedy and a bootloader
/// update are needed.
pub(super) fn fold(pi: &PiFirmware, hat: bool, f: &mut Finding) -> (bool, bool) {
    let parts = parts(pi, hat);
    if parts.is_empty() {
        return (false, false);
    }
    if f.status == Status::Skip {
        f.status = Status::Pass;
        f.summary.clear();
    }
    let mut supply = false;
    let mut bootloader = false;
    for p in parts {
        if !f.summary.is_empty() {
            f.summary.push_str("; ");
        }
        f.summary.push_str(&p.text);
        f.raise(p.status);
        supply |= p.status.fires() && !p.path.contains("bootloader");
        bootloader |= p.status.fires() && p.path.contains("bootloader");
        f.push_evidence(&p.path, None, &p.value);
    }
    if let Some(FileValue { value: Ok(b), .. }) = &pi.throttled {
        put(f, "throttled", format!("0x{b:x}"));
    }
    if let Some(FileValue { value: Ok(ma), .. }) = &pi.supply_max_current_ma {
        put(f, "supply_max_current_ma", *ma);
    }
    (supply, bootloader)
}

fn put(f: &mut Finding, key: &str, v: impl Into<serde_json::Value>) {
    f.observed.insert(key.to_string(), v.into());
}

fn parts(pi: &PiFirmware, hat: bool) -> Vec<Part> {
    let mut out = Vec::new();
    if let Some(FileValue {
        path,
        value: Ok(bits),
    }) = &pi.throttled
    {
        out.push(throttled_part(path, *bits));
    }
    if let Some(FileValue {
        path,
        value: Ok(ma),
    }) = &pi.supply_max_current_ma
    {
        let (status, text) = if *ma < FULL_SUPPLY_MA && hat {
            (Status::Warn, format!("the supply negotiated only {ma} mA (a 5 A USB-C PD supply reports {FULL_SUPPLY_MA}) while the NPU HAT draws from it"))
        } else {
            (Status::Pass, format!("the supply negotiated {ma} mA"))
        };
        out.push(Part {
            status,
            text,
            path: path.clone(),
            value: format!("{ma} mA"),
        });
    }
    if let Some(FileValue { path, value: Ok(t) }) = &pi.bootloader_build_unix_s {
        let date = crate::sys::time::rfc3339_utc(u64::from(*t), 0);
        let day = date.get(..10).unwrap_or(&date).to_string();
        if hat && *t < HAT_BOOTLOADER_MIN_UNIX_S {
            out.push(Part {
                status: Status::Warn,
                text: format!("the bootloader was built {day}, before PCIe HAT support (2023-12-06 or later is needed)"),
                path: path.clone(),
                value: day,
            });
        }
    }
    out
}

fn throttled_part(path: &str, bits: u32) -> Part {
    let (status, text) = if bits & THROTTLED_UNDERVOLTAGE_NOW != 0 {
        (
            Status::Fail,
            format!("the firmware reports under-voltage now (get_throttled 0x{bits:x})"),
        )
    } else if bits & (THROTTLED_NOW | THROTTLED_CAPPED_NOW) != 0 {
        (
            Status::Warn,
            format!("the firmware throttles the CPU now (get_throttled 0x{bits:x})"),
        )
    } else if bits & THROTTLED_UNDERVOLTAGE_SINCE_BOOT != 0 {
        (
            Status::Warn,
            format!("the firmware saw under-voltage since boot (get_throttled 0x{bits:x})"),
        )
    } else if bits == 0 {
        (
            Status::Pass,
            "the firmware reports no under-voltage or throttling since boot (get_throttled 0x0)"
                .to_string(),
        )
    } else {
        (Status::Info, format!("the firmware throttled or hit its soft temperature limit since boot (get_throttled 0x{bits:x})"))
    };
    Part {
        status,
        text,
        path: path.to_string(),
        value: format!("0x{bits:x}"),
    }
}
