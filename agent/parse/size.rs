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

/// The kernel's `memparse()` (lib/cmdline.c), as `cma=` and `mem=` are read: a number in C
/// notation (`0x` hex, a leading `0` octal, else decimal; `simple_strtoull` with base 0), then
/// at most one suffix letter `K M G T P E` (either case, binary units). Returns the value and
/// the text after what was read. Like the kernel it never fails: text without a leading number
/// reads as 0 with nothing consumed (`rest == text`); `None` only when the value overflows 64 bits
/// (the kernel would wrap it).
pub fn memparse(text: &str) -> Option<(u64, &str)> {
    let b = text.as_bytes();
    let (radix, mut i) =
        if b.len() > 2 && b[0] == b'0' && (b[1] | 0x20) == b'x' && b[2].is_ascii_hexdigit() {
            (16, 2)
        } else if b.first() == Some(&b'0') {
            (8, 0)
        } else {
            (10, 0)
        };
    let start = i;
    let mut n: u64 = 0;
    while i < b.len() {
        let Some(d) = (b[i] as char).to_digit(radix) else {
            break;
        };
        n = n.checked_mul(u64::from(radix))?.checked_add(u64::from(d))?;
        i += 1;
    }
    if i == start {
        return Some((0, text));
    }
    let shift = match b.get(i).map(|c| c.to_ascii_uppercase()) {
        Some(b'K') => 10,
        Some(b'M') => 20,
        Some(b'G') => 30,
        Some(b'T') => 40,
        Some(b'P') => 50,
        Some(b'E') => 60,
        _ => 0,
    };
    if shift > 0 {
        i += 1;
        if n.leading_zeros() < shift {
            return None;
        }
        n <<= shift;
    }
    Some((n, &text[i..]))
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
    fn memparse_reads_like_the_kernel() {
        assert_eq!(memparse("256M"), Some((256 << 20, "")));
        assert_eq!(memparse("0x10000000"), Some((256 << 20, "")));
        assert_eq!(memparse("0X4000000@0x0"), Some((64 << 20, "@0x0")));
        assert_eq!(memparse("1g"), Some((1 << 30, "")));
        assert_eq!(memparse("1t"), Some((1 << 40, "")));
        assert_eq!(memparse("2p"), Some((2 << 50, "")));
        assert_eq!(memparse("1E"), Some((1 << 60, "")));
        // Trailing text after the one suffix letter is left to the caller (cma= ignores it).
        assert_eq!(memparse("256MB"), Some((256 << 20, "B")));
        // A leading 0 is octal, as in C.
        assert_eq!(memparse("0100M"), Some((64 << 20, "")));
        assert_eq!(memparse("0"), Some((0, "")));
        // No number: 0 and nothing consumed (cma=lots means no pool).
        assert_eq!(memparse("lots"), Some((0, "lots")));
        assert_eq!(memparse(""), Some((0, "")));
        assert_eq!(memparse("-1M"), Some((0, "-1M")));
        assert_eq!(memparse("16E"), None);
        assert_eq!(memparse("99999999999999999999"), None);
    }

    #[test]
    fn displays_binary_units() {
        assert_eq!(human_bytes(268_435_456), "256 MiB");
        assert_eq!(human_bytes(1536), "1.5 KiB");
        assert_eq!(human_bytes(0), "0 B");
    }
}
