//! Kernel command lines (`/proc/cmdline`, `cmdline.txt`, `extraargs`, extlinux `append`):
//! tokens split on whitespace with double quotes honoured, and the `cma=` parameter
//! (`cma=nn[KMG][@start[KMG][-end[KMG]]]`; the last occurrence wins, as in the kernel).

use super::size::parse_size_bytes;

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

/// A parsed `cma=` value.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct CmaParam {
    /// The value as written (`256M`, `64M@0-1G`).
    pub raw: String,
    /// Pool size in bytes; `Some(0)` is the deliberate `cma=0` (CMA disabled). `None` when the
    /// size does not parse (the kernel would ignore it).
    pub size_bytes: Option<u64>,
    /// The `@start[-end]` placement, if given.
    pub placement: Option<String>,
}

/// Parses the value of a `cma=` parameter.
pub fn parse_cma_value(raw: &str) -> CmaParam {
    let (size, placement) = match raw.split_once('@') {
        Some((s, p)) => (s, Some(p.to_string())),
        None => (raw, None),
    };
    CmaParam {
        raw: raw.to_string(),
        size_bytes: parse_size_bytes(size),
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
        assert_eq!(parse_cma_value("lots").size_bytes, None);
    }
}
