//! `/proc/<pid>/limits` through procfs-core's `Limits` parser.
//!
//! Lines with fewer than three fields are dropped before parsing (procfs-core indexes from the
//! end of each line and would underflow on them).

use procfs_core::process::LimitValue;
use procfs_core::FromBufRead;

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

fn pair(l: procfs_core::process::Limit) -> LimitPair {
    let v = |x: LimitValue| match x {
        LimitValue::Unlimited => None,
        LimitValue::Value(n) => Some(n),
    };
    LimitPair {
        soft: v(l.soft_limit),
        hard: v(l.hard_limit),
    }
}

/// Parses `/proc/<pid>/limits` text.
pub fn parse_limits(text: &str) -> Result<ProcessLimits, String> {
    let screened: String = text
        .lines()
        .filter(|l| l.split_whitespace().count() >= 3)
        .flat_map(|l| [l, "\n"])
        .collect();
    // procfs-core's own error text points at its source files; say what is wrong instead.
    let l = procfs_core::process::Limits::from_buf_read(screened.as_bytes()).map_err(|_| {
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
        nofile: pair(l.max_open_files),
        memlock_bytes: pair(l.max_locked_memory),
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
