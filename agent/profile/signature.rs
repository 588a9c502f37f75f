//! The signature catalog (`catalog/signatures.toml`): every runtime status and known failure
//! line as data, and the matcher that finds the rows a log line shows. A new signature is a row,
//! not code.
//!
//! A row matches by the status name (`HAILO_OUT_OF_PHYSICAL_DEVICES`, `RKNN_ERR_MODEL_INVALID`),
//! by its bare number in a line of its runtime (`status=74`, `failed with error: 76`,
//! `ret=-6`), or by substrings (`invalid magic`). Matching is bounded: a line is looked at up to
//! [`MAX_LINE_BYTES`], so a hostile megabyte line costs no more than a long one.

use crate::model::Status;
use regex_lite::Regex;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::sync::OnceLock;

/// The catalog compiled into the binary.
pub const CATALOG: &str = include_str!("../../catalog/signatures.toml");

/// Bytes of a line the matcher reads (log lines longer than this are cut for matching).
pub const MAX_LINE_BYTES: usize = 4096;

/// The remedy of a row for each way the runtime can be installed.
#[derive(Debug, Clone, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct RemedyByProvenance {
    /// Where nothing more specific is written.
    #[serde(default)]
    pub default: String,
    /// dpkg manages the runtime.
    #[serde(default)]
    pub apt: Option<String>,
    /// The runtime is inside a container or add-on.
    #[serde(default)]
    pub container: Option<String>,
    /// The runtime is a library outside any package (built from source).
    #[serde(default)]
    pub source: Option<String>,
    /// Home Assistant OS.
    #[serde(default)]
    pub haos: Option<String>,
}

/// One row of the catalog.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SignatureRow {
    /// Stable id (`hailort/HAILO_OUT_OF_PHYSICAL_DEVICES`, `rkllm/invalid-magic`).
    pub id: String,
    /// Who prints it: `hailort`, `rknn`, `rkllm`, `rknpu-kernel`, `app:<catalog app id>`.
    pub runtime: String,
    /// The status as the runtime names it.
    #[serde(default)]
    pub status_name: Option<String>,
    /// The status number (HailoRT's `hailo_status`, RKNN's negative return codes).
    #[serde(default)]
    pub code: Option<i64>,
    /// Substrings that must all be in the line (any case).
    #[serde(default)]
    pub contains: Vec<String>,
    /// What the status or line means.
    pub meaning: String,
    /// The cause it points to.
    pub cause: String,
    /// The check id that carries it.
    pub check: String,
    /// `fail`, `warn`, `info`, or `pass` for a status that is no failure.
    pub severity: Status,
    /// False for a row that recognises a failure but names no cause (a generic return code).
    #[serde(default = "yes")]
    pub explains: bool,
    /// What to do, by provenance.
    #[serde(default)]
    pub remedy: RemedyByProvenance,
    /// Where the row comes from (a header, an issue).
    pub source: String,
}

impl SignatureRow {
    /// True when a line with this row is a failure (not a success or a deliberate abort).
    pub fn is_failure(&self) -> bool {
        self.severity.fires()
    }

    /// `NAME (code)`, `NAME`, or the row id: how a summary names it.
    pub fn label(&self) -> String {
        match (&self.status_name, self.code) {
            (Some(n), Some(c)) => format!("{n} ({c})"),
            (Some(n), None) => n.clone(),
            _ => self.id.clone(),
        }
    }
}

fn yes() -> bool {
    true
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CatalogFile {
    schema: u32,
    signature: Vec<SignatureRow>,
}

/// The parsed catalog with its lookup tables.
#[derive(Debug, Default)]
pub struct Catalog {
    /// Every row, in file order.
    pub rows: Vec<SignatureRow>,
    by_name: BTreeMap<String, usize>,
    /// (runtime, code) -> row.
    by_code: BTreeMap<(String, i64), usize>,
    /// Rows matched by substrings, with their lower-cased needles.
    by_text: Vec<(usize, Vec<String>)>,
}

/// Parses and validates a catalog; `file` names it in errors.
///
/// Errors: TOML that does not parse, an unknown key, a schema other than 1, a row without a
/// way to match, a check id that does not exist, or a name or number given twice.
pub fn parse_catalog(file: &str, text: &str) -> Result<Catalog, String> {
    let raw: CatalogFile = toml::from_str(text).map_err(|e| format!("{file}: {e}"))?;
    if raw.schema != 1 {
        return Err(format!("{file}: unsupported schema {}", raw.schema));
    }
    let mut c = Catalog::default();
    for (i, r) in raw.signature.into_iter().enumerate() {
        let bad = |m: &str| format!("{file}: row {} ({}): {m}", i + 1, r.id);
        if !crate::model::CHECK_IDS.contains(&r.check.as_str()) {
            return Err(bad(&format!("{:?} is not a check id", r.check)));
        }
        if r.status_name.is_none() && r.code.is_none() && r.contains.is_empty() {
            return Err(bad("no status_name, code or contains"));
        }
        if r.contains.iter().any(|s| s.trim().is_empty()) {
            return Err(bad("an empty contains"));
        }
        if let Some(n) = &r.status_name {
            if c.by_name.insert(n.clone(), i).is_some() {
                return Err(bad("status_name given twice"));
            }
        }
        if let Some(code) = r.code {
            if c.by_code.insert((r.runtime.clone(), code), i).is_some() {
                return Err(bad("code given twice for its runtime"));
            }
        }
        if r.status_name.is_none() && r.code.is_none() {
            c.by_text
                .push((i, r.contains.iter().map(|s| s.to_lowercase()).collect()));
        }
        c.rows.push(r);
    }
    Ok(c)
}

/// The built-in catalog, parsed once. A catalog that does not parse (a broken build; the unit
/// tests catch it) is logged and treated as empty.
pub fn catalog() -> &'static Catalog {
    static C: OnceLock<Catalog> = OnceLock::new();
    C.get_or_init(|| {
        parse_catalog("catalog/signatures.toml", CATALOG).unwrap_or_else(|e| {
            tracing::error!("signature catalog: {e}");
            Catalog::default()
        })
    })
}

fn re_name() -> &'static Regex {
    static P: OnceLock<Regex> = OnceLock::new();
    P.get_or_init(|| {
        Regex::new(r"\b(HAILO_[A-Z0-9_]{2,64}|RKNN_SUCC|RKNN_ERR_[A-Z0-9_]{2,64})\b")
            .expect("static pattern")
    })
}

fn re_hailo_code() -> &'static Regex {
    static P: OnceLock<Regex> = OnceLock::new();
    P.get_or_init(|| {
        Regex::new(
            r"(?i)(?:status\s*[=:]\s*|returncode\s*=\s*|failed with error:?\s*|StatusException:\s*|hailo_status\s*[=:]?\s*)(\d{1,3})\b",
        )
        .expect("static pattern")
    })
}

fn re_rknn_code() -> &'static Regex {
    static P: OnceLock<Regex> = OnceLock::new();
    P.get_or_init(|| Regex::new(r"\bret\s*[=:]\s*(-\d{1,2})\b").expect("static pattern"))
}

/// The part of `line` the matcher reads: at most [`MAX_LINE_BYTES`], cut at a char boundary.
fn bounded(line: &str) -> &str {
    if line.len() <= MAX_LINE_BYTES {
        return line;
    }
    let mut end = MAX_LINE_BYTES;
    while !line.is_char_boundary(end) {
        end -= 1;
    }
    &line[..end]
}

impl Catalog {
    /// The rows `line` shows: statuses by name or number first, then substring rows, each once.
    pub fn matches(&self, line: &str) -> Vec<&SignatureRow> {
        let line = bounded(line);
        let lower = line.to_ascii_lowercase();
        let mut hit: Vec<usize> = Vec::new();
        let mut add = |i: usize| {
            if !hit.contains(&i) {
                hit.push(i);
            }
        };
        if line.contains("HAILO_") || line.contains("RKNN_") {
            for c in re_name().captures_iter(line) {
                if let Some(i) = self.by_name.get(&c[1]) {
                    add(*i);
                }
            }
        }
        if lower.contains("hailo") {
            for c in re_hailo_code().captures_iter(line) {
                if let Some(i) = c[1]
                    .parse()
                    .ok()
                    .and_then(|n: i64| self.by_code.get(&("hailort".to_string(), n)))
                {
                    add(*i);
                }
            }
        }
        if lower.contains("rknn") {
            for c in re_rknn_code().captures_iter(line) {
                if let Some(i) = c[1]
                    .parse()
                    .ok()
                    .and_then(|n: i64| self.by_code.get(&("rknn".to_string(), n)))
                {
                    add(*i);
                }
            }
        }
        let lower_full = line.to_lowercase();
        for (i, needles) in &self.by_text {
            if needles.iter().all(|n| lower_full.contains(n.as_str())) {
                add(*i);
            }
        }
        hit.into_iter().map(|i| &self.rows[i]).collect()
    }

    /// The row that names the cause of the failure in `line`: a failing status row before a
    /// substring row; `None` when no row that explains a failure matches.
    pub fn explain(&self, line: &str) -> Option<&SignatureRow> {
        self.matches(line)
            .into_iter()
            .find(|r| r.is_failure() && r.explains)
    }

    /// True when a row recognises `line` as a failure, whether or not it names its cause.
    pub fn is_failure(&self, line: &str) -> bool {
        self.matches(line).into_iter().any(|r| r.is_failure())
    }

    /// The row of a status by name.
    pub fn by_status_name(&self, name: &str) -> Option<&SignatureRow> {
        self.by_name.get(name).map(|i| &self.rows[*i])
    }

    /// The row of a status by runtime and number.
    pub fn by_code(&self, runtime: &str, code: i64) -> Option<&SignatureRow> {
        self.by_code
            .get(&(runtime.to_string(), code))
            .map(|i| &self.rows[*i])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_built_in_catalog_parses() {
        let c = parse_catalog("catalog/signatures.toml", CATALOG).unwrap();
        assert!(c.rows.len() > 120, "{}", c.rows.len());
        assert_eq!(
            c.by_code("hailort", 74).unwrap().status_name.as_deref(),
            Some("HAILO_OUT_OF_PHYSICAL_DEVICES")
        );
    }

    #[test]
    fn lines_in_every_shape() {
        let c = catalog();
        let id = |l: &str| c.explain(l).map(|r| r.id.clone());
        // A bare status with its number, the number alone, the Python exception.
        assert_eq!(
            id("HAILO_OUT_OF_PHYSICAL_DEVICES(74)").as_deref(),
            Some("hailort/HAILO_OUT_OF_PHYSICAL_DEVICES")
        );
        assert_eq!(
            id("hailo_platform.pyhailort.pyhailort.HailoRTException: libhailort failed with error: 76 (HAILO_INVALID_DRIVER_VERSION)").as_deref(),
            Some("hailort/HAILO_INVALID_DRIVER_VERSION")
        );
        assert_eq!(
            id("[HailoRT] [error] CHECK_SUCCESS failed with status=87").as_deref(),
            Some("hailort/HAILO_DRIVER_TIMEOUT")
        );
        assert_eq!(
            id("rknn_init fail! ret=-6").as_deref(),
            Some("rknn/RKNN_ERR_MODEL_INVALID")
        );
        assert_eq!(
            id(": invalid magic characters '\u{fffd}\u{314}'").as_deref(),
            Some("rkllm/invalid-magic")
        );
        // Success and an abort on shutdown are no failure; a number out of context is nothing.
        assert_eq!(id("status=HAILO_SUCCESS(0)"), None);
        assert_eq!(id("HAILO_STREAM_ABORT(63) on shutdown"), None);
        assert_eq!(id("camera returned status=74"), None);
        assert_eq!(id("ffmpeg ret=-6"), None);
    }

    #[test]
    fn hostile_lines_stay_bounded() {
        let c = catalog();
        let long = format!("{}HAILO_TIMEOUT(4)", "x".repeat(2 << 20));
        // The status lies past what the matcher reads: no match, and no time spent on it.
        assert!(c.matches(&long).is_empty());
        let multibyte = "é".repeat(MAX_LINE_BYTES);
        assert!(c.matches(&multibyte).is_empty());
        assert!(c.matches("HAILO_").is_empty());
    }

    #[test]
    fn a_broken_catalog_is_refused_with_its_row() {
        let bad = "schema = 1\n[[signature]]\nid = \"x\"\nruntime = \"r\"\nmeaning = \"m\"\ncause = \"c\"\ncheck = \"no.such\"\nseverity = \"fail\"\nsource = \"s\"\ncontains = [\"a\"]\n";
        let e = parse_catalog("t.toml", bad).unwrap_err();
        assert!(
            e.contains("row 1 (x)") && e.contains("not a check id"),
            "{e}"
        );
        let unmatched = bad
            .replace("no.such", "npu.workload")
            .replace("contains = [\"a\"]\n", "");
        assert!(parse_catalog("t.toml", &unmatched)
            .unwrap_err()
            .contains("no status_name"));
    }
}
