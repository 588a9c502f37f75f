//! `/proc/<pid>/limits`: the kernel's table (`Limit  Soft Limit  Hard Limit  Units`, one row per
//! resource, values a number or `unlimited`).
//!
//! Rows are read from the end of the line: soft, hard, then the unit, which `Max nice priority`
//! and `Max realtime priority` do not have. Lines with fewer than three fields are dropped. The
//! table counts as one only when all sixteen rows Linux has printed since 2.6.25 are present with
//! well-formed values, so a truncated or foreign file is an error rather than half a reading.

use std::collections::BTreeMap;

/// The rows of `/proc/<pid>/limits` (Linux 2.6.25 and later; `fs/proc/base.c`).
const ROWS: [&str; 16] = [
    "Max cpu time",
    "Max file size",
    "Max data size",
    "Max stack size",
    "Max core file size",
    "Max resident set",
    "Max processes",
    "Max open files",
    "Max locked memory",
    "Max address space",
    "Max file locks",
    "Max pending signals",
    "Max msgqueue size",
    "Max nice priority",
    "Max realtime priority",
    "Max realtime timeout",
];

/// One soft/hard pair; `None` is `unlimited` (RLIM_INFINITY).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct LimitPair {
    /// Soft limit (what the process runs with).
    pub soft: Option<u64>,
    /// Hard limit (how far the process may raise the soft one).
    pub hard: Option<u64>,
}

/// The two limits the NPU checks read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct ProcessLimits {
    /// `Max open files` (RLIMIT_NOFILE), in files.
    pub nofile: LimitPair,
    /// `Max locked memory` (RLIMIT_MEMLOCK), in **bytes** (`ulimit -l` shows KiB).
    pub memlock_bytes: LimitPair,
}

/// One value: `Some(None)` for `unlimited`, `Some(Some(n))` for a number, `None` otherwise.
fn value(s: &str) -> Option<Option<u64>> {
    if s == "unlimited" {
        Some(None)
    } else {
        s.parse::<u64>().ok().map(Some)
    }
}

/// The table's rows by name (the last of a repeated row wins), or `None` when a row is missing
/// or has a malformed value.
fn table(screened: &str) -> Option<BTreeMap<String, LimitPair>> {
    let mut rows: BTreeMap<String, (&str, &str)> = BTreeMap::new();
    for line in screened.lines() {
        let line = line.trim();
        if line.starts_with("Limit") {
            continue;
        }
        let f: Vec<&str> = line.split_whitespace().collect();
        // Callers pass lines of at least three fields: soft and hard are the last two before the
        // unit, or the last two on the unit-less priority rows.
        let end =
            if line.starts_with("Max nice priority") || line.starts_with("Max realtime priority") {
                f.len()
            } else {
                f.len() - 1
            };
        rows.insert(f[..end - 2].join(" "), (f[end - 2], f[end - 1]));
    }
    let mut out = BTreeMap::new();
    for name in ROWS {
        let (soft, hard) = rows.remove(name)?;
        out.insert(
            name.to_string(),
            LimitPair {
                soft: value(soft)?,
                hard: value(hard)?,
            },
        );
    }
    Some(out)
}

/// Parses `/proc/<pid>/limits` text.
pub fn parse_limits(text: &str) -> Result<ProcessLimits, String> {
    let screened: String = text
        .lines()
        .filter(|l| l.split_whitespace().count() >= 3)
        .flat_map(|l| [l, "\n"])
        .collect();
    let l = table(&screened).ok_or_else(|| {
        let missing: Vec<&str> = ["Max open files", "Max locked memory", "Max cpu time", "Max nice priority"]
            .into_iter()
            .filter(|row| !screened.lines().any(|l| l.starts_with(row)))
            .collect();
        if missing.is_empty() {
            "not a /proc/<pid>/limits table: a row has a value that is neither a number nor `unlimited`".to_string()
        } else {
            format!("not a /proc/<pid>/limits table: no complete `{}` row", missing.join("`, `"))
        }
    })?;
    Ok(ProcessLimits {
        nofile: l["Max open files"],
        memlock_bytes: l["Max locked memory"],
    })
}

/// Formats a limit value: a number or `unlimited`.
pub fn show(v: Option<u64>) -> String {
    v.map(|n| n.to_string())
        .unwrap_or_else(|| "unlimited".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "Limit                     Soft Limit           Hard Limit           Units     \nMax cpu time              unlimited            unlimited            seconds   \nMax file size             unlimited            unlimited            bytes     \nMax data size             unlimited            unlimited            bytes     \nMax stack size            8388608              unlimited            bytes     \nMax core file size        0                    unlimited            bytes     \nMax resident set          unlimited            unlimited            bytes     \nMax processes             31459                31459                processes \nMax open files            1024                 1048576              files     \nMax locked memory         8388608              8388608              bytes     \nMax address space         unlimited            unlimited            bytes     \nMax file locks            unlimited            unlimited            locks     \nMax pending signals       31459                31459                signals   \nMax msgqueue size         819200               819200               bytes     \nMax nice priority         0                    0                    \nMax realtime priority     0                    0                    \nMax realtime timeout      unlimited            unlimited            us        \n";

    #[test]
    fn reads_nofile_and_memlock() {
        let l = parse_limits(SAMPLE).unwrap();
        assert_eq!(l.nofile.soft, Some(1024));
        assert_eq!(l.nofile.hard, Some(1_048_576));
        assert_eq!(l.memlock_bytes.soft, Some(8_388_608));
    }

    #[test]
    fn unlimited_is_none() {
        let t = SAMPLE.replace(
            "Max locked memory         8388608              8388608",
            "Max locked memory         unlimited            unlimited",
        );
        assert_eq!(parse_limits(&t).unwrap().memlock_bytes.soft, None);
    }

    #[test]
    fn empty_truncated_garbage_are_errors() {
        assert!(parse_limits("").is_err());
        assert!(parse_limits(&SAMPLE[..300]).is_err());
        assert!(parse_limits("\n\n x\nMax open files lots many files\n").is_err());
    }
}
