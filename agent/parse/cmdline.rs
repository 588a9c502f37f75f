//! Kernel command lines (`/proc/cmdline`, `cmdline.txt`, `extraargs`, extlinux `append`):
//! tokens split on whitespace with double quotes honoured, and the `cma=` parameter
//! (`cma=nn[KMG][@start[KMG][-end[KMG]]]`; the last occurrence wins, as in the kernel).

use super::size::memparse;

/// Splits a command line into parameters; `"a b"` stays one token (quotes removed).
pub fn tokenize(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut in_quotes = false;
    let mut has = false;
    for c in line.chars() {
        match c {
            '"' => {
                in_quotes = !in_quotes;
                has = true;
            }
            c if c.is_whitespace() && !in_quotes => {
                if has {
                    out.push(std::mem::take(&mut cur));
                    has = false;
                }
            }
            c => {
                cur.push(c);
                has = true;
            }
        }
    }
    if has {
        out.push(cur);
    }
    out
}

/// A parsed `cma=` value, read the way the kernel's `early_cma()` reads it: `memparse()` for
/// the size, then `@start[-end]` if the next character is `@`; anything else after the size is
/// ignored by the kernel.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct CmaParam {
    /// The value as written (`256M`, `64M@0-1G`, `0x10000000`).
    pub raw: String,
    /// Pool size in bytes as the kernel takes it. `Some(0)` is no pool: the deliberate `cma=0`,
    /// or a value without a leading number (`cma=lots`), which `memparse` reads as 0 too.
    /// `None` only when the number overflows 64 bits.
    pub size_bytes: Option<u64>,
    /// True when the size is written as a number (`memparse` read at least one digit); false
    /// for `cma=lots`, which the kernel silently reads as 0.
    pub size_is_number: bool,
    /// Text after the size that the kernel ignores (`B` in `256MB`), when not a placement.
    pub ignored: String,
    /// The `@start[-end]` placement, if given.
    pub placement: Option<String>,
}

/// Parses the value of a `cma=` parameter.
pub fn parse_cma_value(raw: &str) -> CmaParam {
    let parsed = memparse(raw);
    let (size_bytes, rest) = match parsed {
        Some((n, rest)) => (Some(n), rest),
        None => (
            None,
            raw.trim_start_matches(|c: char| c.is_ascii_alphanumeric()),
        ),
    };
    let size_is_number = rest.len() < raw.len();
    let (ignored, placement) = match rest.strip_prefix('@') {
        Some(p) => (String::new(), Some(p.to_string())),
        None => (rest.to_string(), None),
    };
    CmaParam {
        raw: raw.to_string(),
        size_bytes,
        size_is_number,
        ignored,
        placement,
    }
}

/// The effective (last) `cma=` of a command line, and how many times it appears.
pub fn find_cma(line: &str) -> Option<(CmaParam, usize)> {
    let values: Vec<String> = tokenize(line)
        .into_iter()
        .filter_map(|t| t.strip_prefix("cma=").map(str::to_string))
        .collect();
    let last = values.last()?;
    Some((parse_cma_value(last), values.len()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokenizes_with_quotes() {
        assert_eq!(tokenize(" a  b=\"x y\" c\n"), vec!["a", "b=x y", "c"]);
        assert!(tokenize("").is_empty());
    }

    #[test]
    fn last_cma_wins() {
        let (cma, n) = find_cma("console=tty1 cma=64M root=/dev/x cma=256M").unwrap();
        assert_eq!(cma.size_bytes, Some(256 << 20));
        assert_eq!(n, 2);
        assert_eq!(find_cma("console=tty1"), None);
    }

    #[test]
    fn parses_zero_placement_and_garbage() {
        assert_eq!(parse_cma_value("0").size_bytes, Some(0));
        let p = parse_cma_value("64M@0-1G");
        assert_eq!(p.size_bytes, Some(64 << 20));
        assert_eq!(p.placement.as_deref(), Some("0-1G"));
        let lots = parse_cma_value("lots");
        assert_eq!(
            lots.size_bytes,
            Some(0),
            "memparse reads no number as 0: no pool"
        );
        assert!(!lots.size_is_number);
        assert!(parse_cma_value("0").size_is_number);
    }

    #[test]
    fn cma_sizes_follow_memparse() {
        assert_eq!(parse_cma_value("0x10000000").size_bytes, Some(256 << 20));
        let p = parse_cma_value("0x4000000@0x20000000-0x40000000");
        assert_eq!(p.size_bytes, Some(64 << 20));
        assert_eq!(p.placement.as_deref(), Some("0x20000000-0x40000000"));
        let mb = parse_cma_value("256MB");
        assert_eq!(mb.size_bytes, Some(256 << 20));
        assert_eq!(mb.ignored, "B");
        assert_eq!(parse_cma_value("1g").size_bytes, Some(1 << 30));
        assert_eq!(
            parse_cma_value("0100M").size_bytes,
            Some(64 << 20),
            "octal, as in C"
        );
    }
}
