//! `/proc/meminfo` through procfs-core's `Meminfo` parser.
//!
//! procfs-core assumes kernel-made text: a multi-byte character before the `:` or a value that
//! overflows when scaled from kB can make it panic. Lines are therefore screened first (ASCII key
//! ending in `:`, a decimal value below 2^40, unit `kB` or none); a screened-out line is reported
//! as malformed rather than passed on.

use procfs_core::FromBufRead;

/// The `/proc/meminfo` fields the checks use, in bytes (the file says kB = KiB).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct MemInfo {
    /// `MemTotal`.
    pub mem_total_bytes: u64,
    /// `MemFree`.
    pub mem_free_bytes: u64,
    /// `MemAvailable` (absent before Linux 3.14).
    pub mem_available_bytes: Option<u64>,
    /// `CmaTotal`: the CMA reserve; absent without `CONFIG_CMA`.
    pub cma_total_bytes: Option<u64>,
    /// `CmaFree`: free pages in the CMA reserve (lent to movable allocations meanwhile).
    pub cma_free_bytes: Option<u64>,
}

const MAX_VALUE_KB: u64 = 1 << 40;

/// Fields every kernel since 2.6 prints and procfs-core requires.
const REQUIRED: &[&str] = &[
    "MemTotal",
    "MemFree",
    "Buffers",
    "Cached",
    "SwapCached",
    "Active",
    "Inactive",
    "SwapTotal",
    "SwapFree",
    "Dirty",
    "Writeback",
    "Mapped",
    "Slab",
    "Committed_AS",
    "VmallocTotal",
    "VmallocUsed",
    "VmallocChunk",
];

/// Parses `/proc/meminfo` text. Errors name the first offending line or the missing field.
pub fn parse_meminfo(text: &str) -> Result<MemInfo, String> {
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let mut parts = line.split_whitespace();
        let key = parts.next().unwrap_or("");
        let value = parts.next().unwrap_or("");
        let unit = parts.next();
        let key_ok = key.len() > 1 && key.is_ascii() && key.ends_with(':');
        let value_ok = value
            .parse::<u64>()
            .map(|v| v < MAX_VALUE_KB)
            .unwrap_or(false);
        let unit_ok = matches!(unit, None | Some("kB")) && parts.next().is_none();
        if !(key_ok && value_ok && unit_ok) {
            return Err(format!(
                "line {}: not `Key: value kB`: {:?}",
                i + 1,
                truncate(line)
            ));
        }
    }
    // procfs-core's own error text points at its source files; name the missing fields instead.
    let m = procfs_core::Meminfo::from_buf_read(text.as_bytes()).map_err(|_| {
        let missing: Vec<&str> = REQUIRED
            .iter()
            .copied()
            .filter(|k| !text.lines().any(|l| l.split(':').next() == Some(*k)))
            .collect();
        format!("missing required fields: {}", missing.join(", "))
    })?;
    Ok(MemInfo {
        mem_total_bytes: m.mem_total,
        mem_free_bytes: m.mem_free,
        mem_available_bytes: m.mem_available,
        cma_total_bytes: m.cma_total,
        cma_free_bytes: m.cma_free,
    })
}

pub(crate) fn truncate(s: &str) -> String {
    let mut out: String = s.chars().take(80).collect();
    if out.len() < s.len() {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) const SAMPLE: &str = "MemTotal:        8245984 kB\nMemFree:         6200000 kB\nMemAvailable:    7300000 kB\nBuffers:           41229 kB\nCached:          1058771 kB\nSwapCached:            0 kB\nActive:          1022992 kB\nInactive:         681994 kB\nSwapTotal:             0 kB\nSwapFree:              0 kB\nDirty:                64 kB\nWriteback:             0 kB\nMapped:           170498 kB\nSlab:             102299 kB\nCommitted_AS:    2045984 kB\nVmallocTotal:   68447887360 kB\nVmallocUsed:       20000 kB\nVmallocChunk:          0 kB\nHugePages_Total:       0\nCmaTotal:          65536 kB\nCmaFree:           58000 kB\n";

    #[test]
    fn reads_cma_in_bytes() {
        let m = parse_meminfo(SAMPLE).unwrap();
        assert_eq!(m.cma_total_bytes, Some(65536 * 1024));
        assert_eq!(m.cma_free_bytes, Some(58000 * 1024));
        assert_eq!(m.mem_available_bytes, Some(7_300_000 * 1024));
    }

    #[test]
    fn no_cma_lines_without_config_cma() {
        let text: String = SAMPLE
            .lines()
            .filter(|l| !l.starts_with("Cma"))
            .map(|l| format!("{l}\n"))
            .collect();
        let m = parse_meminfo(&text).unwrap();
        assert_eq!(m.cma_total_bytes, None);
    }

    #[test]
    fn truncated_empty_and_garbage_are_errors() {
        assert!(parse_meminfo("").is_err());
        assert!(parse_meminfo("MemTotal:  8245984 kB\nMemFr").is_err());
        assert!(parse_meminfo("é: 5 kB\n").is_err());
        assert!(parse_meminfo("MemTotal: 99999999999999999999 kB\n").is_err());
        let err = parse_meminfo("MemTotal: 1 kB\n").unwrap_err();
        assert!(err.contains("missing"), "{err}");
    }
}
