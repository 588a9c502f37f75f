//! `/proc/vmstat`: `name value` counters (`compact_stall 12`, `cma_alloc_fail 0`).

use std::collections::BTreeMap;

/// Parses `/proc/vmstat` into a name → value map. Lines that are not `name u64` are errors.
pub fn parse_vmstat(text: &str) -> Result<BTreeMap<String, u64>, String> {
    let mut out = BTreeMap::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let mut parts = line.split_whitespace();
        match (
            parts.next(),
            parts.next().map(str::parse::<u64>),
            parts.next(),
        ) {
            (Some(name), Some(Ok(value)), None) => {
                out.insert(name.to_string(), value);
            }
            _ => {
                return Err(format!(
                    "line {}: not `name value`: {:?}",
                    i + 1,
                    super::meminfo::truncate(line)
                ))
            }
        }
    }
    if out.is_empty() {
        return Err("no counters".into());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_counters() {
        let v = parse_vmstat("nr_free_pages 1234\ncompact_stall 7\ncma_alloc_fail 2\n").unwrap();
        assert_eq!(v["compact_stall"], 7);
        assert_eq!(v["cma_alloc_fail"], 2);
    }

    #[test]
    fn rejects_garbage() {
        assert!(parse_vmstat("").is_err());
        assert!(parse_vmstat("compact_stall -1\n").is_err());
        assert!(parse_vmstat("compact_stall 1 2\n").is_err());
    }
}
