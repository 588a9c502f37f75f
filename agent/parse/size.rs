//! Kernel `memparse`-style sizes (`256M`, `1G`, `65536K`, `0`) and their display.

/// Parses a size with an optional `K`/`M`/`G`/`T` suffix (either case, binary units) into bytes,
/// as the kernel's `memparse` does for `cma=`. Returns `None` on anything else or on overflow.
pub fn parse_size_bytes(text: &str) -> Option<u64> {
    let t = text.trim();
    let digits_end = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    if digits_end == 0 {
        return None;
    }
    let n: u64 = t[..digits_end].parse().ok()?;
    let shift = match &t[digits_end..] {
        "" => 0,
        "k" | "K" => 10,
        "m" | "M" => 20,
        "g" | "G" => 30,
        "t" | "T" => 40,
        _ => return None,
    };
    n.checked_mul(1u64 << shift)
}

/// Bytes as a short binary-unit string: `268435456` -> `256 MiB`, `1536` -> `1.5 KiB`.
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 || (value.fract() == 0.0) {
        format!("{} {}", value as u64, UNITS[unit])
    } else {
        format!("{:.1} {}", value, UNITS[unit])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_memparse_suffixes() {
        assert_eq!(parse_size_bytes("256M"), Some(268_435_456));
        assert_eq!(parse_size_bytes("1G"), Some(1 << 30));
        assert_eq!(parse_size_bytes("65536k"), Some(65536 * 1024));
        assert_eq!(parse_size_bytes("0"), Some(0));
        assert_eq!(parse_size_bytes("4096"), Some(4096));
    }

    #[test]
    fn rejects_garbage_and_overflow() {
        assert_eq!(parse_size_bytes(""), None);
        assert_eq!(parse_size_bytes("M"), None);
        assert_eq!(parse_size_bytes("256MB"), None);
        assert_eq!(parse_size_bytes("-1M"), None);
        assert_eq!(parse_size_bytes("99999999999999999999"), None);
        assert_eq!(parse_size_bytes("17179869184G"), None);
    }

    #[test]
    fn displays_binary_units() {
        assert_eq!(human_bytes(268_435_456), "256 MiB");
        assert_eq!(human_bytes(1536), "1.5 KiB");
        assert_eq!(human_bytes(0), "0 B");
    }
}
