//! The Raspberry Pi firmware's reports: `get_throttled` (the firmware device's sysfs attribute,
//! what `vcgencmd get_throttled` prints), and the device-tree `chosen` node's supply current and
//! bootloader build time.

use crate::model::sensors::{FileValue, PiFirmware};
use crate::root::{ReadError, SysRoot};

/// Reads what the Pi firmware reports; all `None` on other boards.
pub fn probe_pi_firmware(root: &SysRoot) -> PiFirmware {
    PiFirmware {
        throttled: throttled_path(root).map(|path| FileValue {
            value: root
                .read_string(&path)
                .and_then(|t| parse_throttled(&t).map_err(|e| ReadError::malformed(&path, e))),
            path,
        }),
        supply_max_current_ma: be_u32(root, "/proc/device-tree/chosen/power/max_current"),
        bootloader_build_unix_s: be_u32(
            root,
            "/proc/device-tree/chosen/bootloader/build-timestamp",
        ),
    }
}

/// The firmware device's `get_throttled`: `/sys/devices/platform/<soc>/<...firmware>/`.
fn throttled_path(root: &SysRoot) -> Option<String> {
    let base = "/sys/devices/platform";
    for top in root.list_dir(base).ok()? {
        let dir = format!("{base}/{top}");
        let Ok(children) = root.list_dir(&dir) else {
            continue;
        };
        for c in children.iter().filter(|c| c.ends_with("firmware")) {
            let p = format!("{dir}/{c}/get_throttled");
            if root.exists(&p) {
                return Some(p);
            }
        }
    }
    None
}

/// `get_throttled` text: hexadecimal, with or without `0x` (the attribute prints `%x`).
pub fn parse_throttled(t: &str) -> Result<u32, String> {
    let v = t.trim();
    let v = v.strip_prefix("throttled=").unwrap_or(v);
    let v = v.strip_prefix("0x").unwrap_or(v);
    u32::from_str_radix(v, 16).map_err(|_| format!("not a hexadecimal bit mask: {:?}", clip(t)))
}

fn clip(s: &str) -> String {
    s.trim().chars().take(40).collect()
}

/// A device-tree property of one big-endian 32-bit cell, when the file exists.
fn be_u32(root: &SysRoot, path: &str) -> Option<FileValue<u32>> {
    root.exists(path).then(|| FileValue {
        path: path.to_string(),
        value: root
            .read(path)
            .and_then(|b| match <[u8; 4]>::try_from(b.as_slice()) {
                Ok(cell) => Ok(u32::from_be_bytes(cell)),
                Err(_) => Err(ReadError::malformed(
                    path,
                    format!("{} bytes, not one 32-bit cell", b.len()),
                )),
            }),
    })
}

#[cfg(test)]
mod tests {
    use super::parse_throttled;

    #[test]
    fn throttled_masks() {
        assert_eq!(parse_throttled("50005\n"), Ok(0x50005));
        assert_eq!(parse_throttled("throttled=0x50000"), Ok(0x50000));
        assert_eq!(parse_throttled("0"), Ok(0));
        assert!(parse_throttled("zz").is_err());
        assert!(parse_throttled("123456789").is_err());
    }
}
