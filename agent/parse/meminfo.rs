//! `/proc/meminfo`: only the fields the checks use are read, each on its own.
//!
//! A capture may hold a partial file (a report quotes three lines), and a hostile or damaged file
//! may have garbage in lines nobody needs. So a field is taken when its line reads as
//! `Key: value kB`; a needed field whose line is present but unreadable is recorded in
//! [`MemInfo::malformed`] (the check that needs it says so), and lines of other keys are never
//! judged. Only a file without a single readable line is an error.

/// The `/proc/meminfo` fields the checks use, in bytes (the file says kB = KiB). `None` when the
/// line is absent (or unreadable: then [`MemInfo::malformed`] names it).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct MemInfo {
    /// `MemTotal`.
    pub mem_total_bytes: Option<u64>,
    /// `MemFree`.
    pub mem_free_bytes: Option<u64>,
    /// `MemAvailable` (absent before Linux 3.14).
    pub mem_available_bytes: Option<u64>,
    /// `CmaTotal`: the CMA reserve; absent without `CONFIG_CMA`.
    pub cma_total_bytes: Option<u64>,
    /// `CmaFree`: free pages in the CMA reserve.
    pub cma_free_bytes: Option<u64>,
    /// Needed fields whose line is present but does not read as `Key: value kB`:
    /// (key, the line cut to 80 characters).
    pub malformed: Vec<(String, String)>,
}

impl MemInfo {
    /// Why the line of `key` (`CmaTotal`) could not be read, when it is present but malformed.
    pub fn field_error(&self, key: &str) -> Option<String> {
        self.malformed
            .iter()
            .find(|(k, _)| k == key)
            .map(|(k, line)| format!("/proc/meminfo: malformed ({k} line: {line:?})"))
    }

    /// True when the file looks complete (it has `MemTotal`, which every kernel prints first),
    /// so a missing `CmaTotal` means the kernel has no `CONFIG_CMA` rather than a partial copy.
    pub fn is_complete(&self) -> bool {
        self.mem_total_bytes.is_some()
    }
}

/// Largest value accepted, in kB (1 PiB): anything above is not a real meminfo figure.
const MAX_VALUE_KB: u64 = 1 << 40;

/// The fields read, by key.
const FIELDS: &[&str] = &["MemTotal", "MemFree", "MemAvailable", "CmaTotal", "CmaFree"];

/// One `Key: value [kB]` line: the key (control characters dropped) and the value in bytes,
/// `Err(())` when the line has a key but no readable value.
fn read_line(line: &str) -> Option<(String, Result<u64, ()>)> {
    let (key, rest) = line.split_once(':')?;
    let key: String = key.chars().filter(|c| !c.is_control()).collect();
    let key = key.trim().to_string();
    if key.is_empty() || !key.is_ascii() || key.contains(char::is_whitespace) {
        return None;
    }
    let mut parts = rest.split_whitespace();
    let value = parts.next().and_then(|v| v.parse::<u64>().ok());
    let unit = parts.next();
    let ok = matches!(unit, None | Some("kB")) && parts.next().is_none();
    match value {
        Some(v) if ok && v < MAX_VALUE_KB => Some((key, Ok(v.saturating_mul(1024)))),
        _ => Some((key, Err(()))),
    }
}

/// Parses `/proc/meminfo` text. An error only when no line at all reads as `Key: value`; it
/// names the first line.
pub fn parse_meminfo(text: &str) -> Result<MemInfo, String> {
    let mut m = MemInfo::default();
    let mut readable = 0usize;
    let mut first_bad: Option<(usize, &str)> = None;
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let parsed = read_line(line);
        match &parsed {
            Some((_, Ok(_))) => readable += 1,
            _ => {
                first_bad.get_or_insert((i + 1, line));
            }
        }
        let Some((key, value)) = parsed else { continue };
        if !FIELDS.contains(&key.as_str()) {
            continue;
        }
        let slot = match key.as_str() {
            "MemTotal" => &mut m.mem_total_bytes,
            "MemFree" => &mut m.mem_free_bytes,
            "MemAvailable" => &mut m.mem_available_bytes,
            "CmaTotal" => &mut m.cma_total_bytes,
            _ => &mut m.cma_free_bytes,
        };
        match value {
            Ok(v) if slot.is_none() => *slot = Some(v),
            Ok(_) => {}
            Err(()) => m.malformed.push((key, truncate(line))),
        }
    }
    if readable == 0 {
        return Err(match first_bad {
            Some((n, line)) => format!("line {n}: not `Key: value kB`: {:?}", truncate(line)),
            None => "empty file".to_string(),
        });
    }
    Ok(m)
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
        assert!(m.malformed.is_empty());
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
        assert!(m.is_complete());
    }

    #[test]
    fn a_partial_file_still_gives_the_cma_fields() {
        // Only the lines a report quoted: every field procfs would require is missing.
        let m = parse_meminfo("CmaTotal:  32768 kB\nCmaFree:  0 kB\n").unwrap();
        assert_eq!(m.cma_total_bytes, Some(32 << 20));
        assert_eq!(m.cma_free_bytes, Some(0));
        assert_eq!(m.mem_total_bytes, None);
        assert!(!m.is_complete());
    }

    #[test]
    fn garbage_in_unrelated_lines_does_not_hide_cma() {
        let text = format!("{SAMPLE}Hugetlb: lots of it\nWeird\u{1}: x y z\n");
        let m = parse_meminfo(&text).unwrap();
        assert_eq!(m.cma_free_bytes, Some(58000 * 1024));
        assert!(m.malformed.is_empty());
    }

    #[test]
    fn a_needed_field_that_is_malformed_is_named() {
        let m = parse_meminfo("MemTotal: 1000 kB\nCmaTotal: -5 kB\n").unwrap();
        assert_eq!(m.cma_total_bytes, None);
        let e = m.field_error("CmaTotal").unwrap();
        assert!(e.contains("/proc/meminfo: malformed"), "{e}");
        assert_eq!(m.field_error("MemTotal"), None);
    }

    #[test]
    fn truncated_empty_and_garbage_are_errors() {
        assert!(parse_meminfo("").is_err());
        assert!(parse_meminfo("é: x kB\n").is_err());
        assert!(parse_meminfo("MemTotal: 99999999999999999999 kB\n").is_err());
        // A cut-off last line does not spoil the fields read before it.
        let m = parse_meminfo("MemTotal:  8245984 kB\nMemFr").unwrap();
        assert_eq!(m.mem_total_bytes, Some(8_245_984 * 1024));
    }
}
