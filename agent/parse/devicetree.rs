//! Device-tree property values from `/proc/device-tree`: NUL-terminated strings and string
//! lists (`model`, `compatible`, `serial-number`), and big-endian 32-bit cells (`reg`-style
//! `size` and `alloc-ranges` of `reserved-memory/linux,cma`).

/// Splits a NUL-separated string list (`compatible`); empty entries and invalid UTF-8 are dropped
/// or replaced.
pub fn string_list(bytes: &[u8]) -> Vec<String> {
    bytes
        .split(|&b| b == 0)
        .filter(|s| !s.is_empty())
        .map(|s| printable(&String::from_utf8_lossy(s)))
        .filter(|s| !s.is_empty())
        .collect()
}

/// A single NUL-terminated string property (`model`); text after the first NUL is ignored.
pub fn string(bytes: &[u8]) -> String {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    printable(&String::from_utf8_lossy(&bytes[..end]))
}

/// Drops control characters and U+FFFD (invalid UTF-8) so a hostile property cannot steer a
/// terminal, and trims.
pub fn printable(s: &str) -> String {
    s.chars()
        .filter(|c| !c.is_control() && *c != char::REPLACEMENT_CHARACTER)
        .collect::<String>()
        .trim()
        .to_string()
}

/// Big-endian 32-bit cells. Errors when the length is not a multiple of 4 or is zero.
pub fn cells(bytes: &[u8]) -> Result<Vec<u32>, String> {
    if bytes.is_empty() || bytes.len() % 4 != 0 {
        return Err(format!(
            "{} bytes is not a whole number of 32-bit cells",
            bytes.len()
        ));
    }
    Ok(bytes
        .chunks_exact(4)
        .map(|c| u32::from_be_bytes([c[0], c[1], c[2], c[3]]))
        .collect())
}

/// Joins cells into one number (1 cell = 32 bits, 2 cells = 64 bits, high first). `None` for
/// more than two cells.
pub fn cells_to_u64(cells: &[u32]) -> Option<u64> {
    match cells {
        [a] => Some(u64::from(*a)),
        [hi, lo] => Some((u64::from(*hi) << 32) | u64::from(*lo)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_compatible() {
        assert_eq!(
            string_list(b"raspberrypi,5-model-b\0brcm,bcm2712\0"),
            vec!["raspberrypi,5-model-b", "brcm,bcm2712"]
        );
        assert!(string_list(b"").is_empty());
    }

    #[test]
    fn control_characters_are_dropped() {
        assert_eq!(
            string(b"\xff\xfeRadxa\x1b[31m ROCK 5B\0"),
            "Radxa[31m ROCK 5B"
        );
    }

    #[test]
    fn model_stops_at_nul() {
        assert_eq!(
            string(b"Raspberry Pi 5 Model B Rev 1.1\0junk"),
            "Raspberry Pi 5 Model B Rev 1.1"
        );
    }

    #[test]
    fn reads_cells() {
        // reserved-memory/linux,cma from a Pi 5 16GB: size 0x04000000? no: one cell 0x04000000.
        assert_eq!(cells(&[0x04, 0, 0, 0]).unwrap(), vec![0x0400_0000]);
        let r = cells(&[0, 0, 0, 0, 0, 0, 0, 0, 0x40, 0, 0, 0]).unwrap();
        assert_eq!(r, vec![0, 0, 0x4000_0000]);
        assert_eq!(cells_to_u64(&r[0..2]), Some(0));
        assert!(cells(&[1, 2, 3]).is_err());
    }
}
