//! Compatibility tables as data (`catalog/compat.toml`): an app's supported SoCs against the
//! board's compatible, a HEF's target against the chip, an RKLLM model against its runtime.

use serde::Deserialize;
use std::collections::BTreeMap;
use std::sync::OnceLock;

/// The tables compiled into the binary.
pub const CATALOG: &str = include_str!("../../catalog/compat.toml");

/// An app's list of SoCs it accepts.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AppSoc {
    /// Catalog app id (`frigate`).
    pub app: String,
    /// The part of the app that checks (`RKNN detector`).
    pub part: String,
    /// Words in the app's log that show this part runs (`rknn`).
    #[serde(default)]
    pub marks: Vec<String>,
    /// Substrings of the container image that show this part (`-rk`).
    #[serde(default)]
    pub image_marks: Vec<String>,
    /// How the app takes its SoC string: `last-comma-field`.
    pub reads: String,
    /// SoC strings it accepts.
    pub supported: Vec<String>,
    /// SoCs with the same NPU as an accepted one (`rk3588s` -> `rk3588`).
    #[serde(default)]
    pub same_npu: BTreeMap<String, String>,
    /// What to do; `{soc}`, `{same}`, `{soc_upper}`, `{same_upper}` and `{container}` are
    /// filled in.
    pub remedy: String,
    /// Where the list comes from.
    pub source: String,
}

impl AppSoc {
    /// The SoC string the app reads from the compatible entries, as the app reads it.
    pub fn soc_of(&self, compatible: &[String]) -> Option<String> {
        match self.reads.as_str() {
            "last-comma-field" => compatible
                .last()
                .and_then(|c| c.rsplit(',').next())
                .map(|s| s.trim_matches('\0').to_string())
                .filter(|s| !s.is_empty()),
            _ => None,
        }
    }

    /// True when the app accepts `soc`.
    pub fn accepts(&self, soc: &str) -> bool {
        self.supported.iter().any(|s| s == soc)
    }

    /// The remedy for `soc` and the app's `container` name, filled in.
    pub fn remedy_for(&self, soc: &str, container: &str) -> String {
        let same = self
            .same_npu
            .get(soc)
            .cloned()
            .unwrap_or_else(|| "a supported SoC".into());
        self.remedy
            .replace("{soc_upper}", &soc.to_ascii_uppercase())
            .replace("{same_upper}", &same.to_ascii_uppercase())
            .replace("{soc}", soc)
            .replace("{same}", &same)
            .replace("{container}", container)
    }
}

/// A HEF target and the chips that run it.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HefArch {
    /// The HEF's hw_arch (`HAILO8L`).
    pub hef: String,
    /// Device architectures that run it.
    pub runs_on: Vec<String>,
}

/// An RKLLM model/runtime rule.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RkllmPair {
    /// The runtime's line.
    pub line: String,
    /// The rknpu driver from which the line is the pair's, not the driver's.
    pub min_driver: String,
    /// The side to change.
    pub side: String,
    /// The newest release the maintainers point to.
    pub newest: String,
    /// Where it comes from.
    pub source: String,
}

/// The tables.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Compat {
    /// Schema version (1).
    #[serde(default)]
    pub schema: u32,
    /// Apps' supported SoCs.
    #[serde(default)]
    pub app_soc: Vec<AppSoc>,
    /// HEF targets.
    #[serde(default)]
    pub hef_arch: Vec<HefArch>,
    /// RKLLM model/runtime rules.
    #[serde(default)]
    pub rkllm_pair: Vec<RkllmPair>,
}

impl Compat {
    /// True when a HEF of `hef` arch runs on a device of `device` arch; `None` when the table
    /// does not know the HEF's arch.
    pub fn hef_runs_on(&self, hef: &str, device: &str) -> Option<bool> {
        self.hef_arch
            .iter()
            .find(|h| h.hef.eq_ignore_ascii_case(hef))
            .map(|h| h.runs_on.iter().any(|d| d.eq_ignore_ascii_case(device)))
    }
}

/// Parses the tables; `file` names them in errors.
///
/// Errors: TOML that does not parse, an unknown key, a schema other than 1.
pub fn parse_compat(file: &str, text: &str) -> Result<Compat, String> {
    let c: Compat = toml::from_str(text).map_err(|e| format!("{file}: {e}"))?;
    if c.schema != 1 {
        return Err(format!("{file}: unsupported schema {}", c.schema));
    }
    Ok(c)
}

/// The built-in tables, parsed once (empty, and logged, if they do not parse).
pub fn compat() -> &'static Compat {
    static C: OnceLock<Compat> = OnceLock::new();
    C.get_or_init(|| {
        parse_compat("catalog/compat.toml", CATALOG).unwrap_or_else(|e| {
            tracing::error!("compatibility tables: {e}");
            Compat::default()
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tables_load_and_answer() {
        let c = parse_compat("catalog/compat.toml", CATALOG).unwrap();
        let f = c.app_soc.iter().find(|a| a.app == "frigate").unwrap();
        let rock5c = ["radxa,rock-5c".to_string(), "rockchip,rk3588s".to_string()];
        assert_eq!(f.soc_of(&rock5c).as_deref(), Some("rk3588s"));
        assert!(!f.accepts("rk3588s") && f.accepts("rk3588"));
        let r = f.remedy_for("rk3588s", "frigate");
        assert!(
            r.contains("maps rk3588s to rk3588") && r.contains("RK3588S has the same NPU"),
            "{r}"
        );
        assert_eq!(c.hef_runs_on("HAILO8L", "HAILO8"), Some(true));
        assert_eq!(c.hef_runs_on("HAILO8", "HAILO8L"), Some(false));
        assert_eq!(c.hef_runs_on("NOPE", "HAILO8"), None);
    }
}
