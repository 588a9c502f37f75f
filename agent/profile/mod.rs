//! Board profiles: TOML files (`board-profiles/*.toml`, embedded at build time, plus
//! `/etc/npu-agent/profiles.d/*.toml` under the root) that say what a board family should look
//! like: how to recognise it, which NPU and driver it expects, which packages and versions, which
//! processes are its workloads, its CMA thresholds and boot files, and known log signatures.
//!
//! Parsing is strict: an unknown key is an error naming the file, line and key
//! ([`ProfileError`]). Detection ([`detect`]) scores every profile against the board's device
//! tree, PCI devices and packages and picks the most specific one, with the reason.

pub mod accel;
pub mod apps;
pub mod raw;
pub mod signature;

use crate::model::action::ActionKind;
use crate::parse::bootfile::BootFileKind;
use crate::parse::version::Version;
use crate::root::SysRoot;
pub use raw::*;
use std::fmt;

/// Profiles compiled into the binary: (file name, TOML text).
pub const BUILTIN: &[(&str, &str)] = &[
    (
        "rpi5-hailo10h.toml",
        include_str!("../../board-profiles/rpi5-hailo10h.toml"),
    ),
    (
        "rpi5-hailo8.toml",
        include_str!("../../board-profiles/rpi5-hailo8.toml"),
    ),
    (
        "rk3588-rknpu.toml",
        include_str!("../../board-profiles/rk3588-rknpu.toml"),
    ),
    (
        "generic.toml",
        include_str!("../../board-profiles/generic.toml"),
    ),
    (
        "x86-hybrid-moe.toml",
        include_str!("../../board-profiles/x86-hybrid-moe.toml"),
    ),
];

/// Directory (under the root) whose `*.toml` files add profiles or replace built-in ones by id.
pub const PROFILES_DIR: &str = "/etc/npu-agent/profiles.d";

/// A profile that failed to load: which file, which line (1-based, when known), what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProfileError {
    /// File name or path the profile came from.
    pub file: String,
    /// 1-based line of the offending key, when known.
    pub line: Option<usize>,
    /// What is wrong (for an unknown key: "unknown key `x`, expected one of …").
    pub message: String,
}

impl fmt::Display for ProfileError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(l) => write!(f, "profile {}: line {}: {}", self.file, l, self.message),
            None => write!(f, "profile {}: {}", self.file, self.message),
        }
    }
}

impl std::error::Error for ProfileError {}

fn line_of(text: &str, offset: usize) -> usize {
    text.as_bytes()[..offset.min(text.len())]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

/// A TOML file of the profile family (a profile, a catalog, an apps file) as `T`, with the error
/// naming the file, the line and, for an unknown key, the key.
pub(crate) fn parse_toml<T: serde::de::DeserializeOwned>(
    file: &str,
    text: &str,
) -> Result<T, ProfileError> {
    toml::from_str(text).map_err(|e| ProfileError {
        file: file.to_string(),
        line: e.span().map(|s| line_of(text, s.start)),
        message: e
            .message()
            .replace("unknown field", "unknown key")
            .trim()
            .to_string(),
    })
}

/// The text of a site file of the profile family (`profiles.d/`, `apps.d/`) under `root`.
///
/// Errors: unreadable, or not UTF-8 (the line, byte and column of the first bad byte: a site
/// file is never read with its bytes replaced).
pub(crate) fn read_site_toml(root: &SysRoot, path: &str) -> Result<String, ProfileError> {
    let bytes = root.read(path).map_err(|e| ProfileError {
        file: path.to_string(),
        line: None,
        message: e.to_string(),
    })?;
    crate::sys::text::strict_utf8(bytes).map_err(|e| ProfileError {
        file: path.to_string(),
        line: Some(e.line),
        message: e.without_line(),
    })
}

/// Parses and validates one profile from TOML text. `file` names it in errors.
pub fn parse_profile(file: &str, text: &str) -> Result<Profile, ProfileError> {
    let raw: Profile = parse_toml(file, text)?;
    validate(&raw).map_err(|(key, message)| ProfileError {
        file: file.to_string(),
        line: find_key_line(text, &key),
        message: format!("{key}: {message}"),
    })?;
    Ok(raw)
}

/// Line of the first `key =` (last path segment) in the text, for validation errors.
fn find_key_line(text: &str, key_path: &str) -> Option<usize> {
    let key = key_path.rsplit('.').next()?;
    let key = key.split('[').next()?;
    text.lines()
        .position(|l| {
            let t = l.trim_start();
            t.starts_with(key) && t[key.len()..].trim_start().starts_with('=')
        })
        .map(|i| i + 1)
}

fn validate(p: &Profile) -> Result<(), (String, String)> {
    let err = |k: &str, m: String| Err((k.to_string(), m));
    if p.schema != 1 {
        return err(
            "schema",
            format!("unsupported schema {} (this agent reads 1)", p.schema),
        );
    }
    if p.id.is_empty()
        || !p
            .id
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    {
        return err(
            "id",
            format!("{:?} must be lowercase letters, digits and '-'", p.id),
        );
    }
    for (i, v) in p.r#match.pci_vendors.iter().enumerate() {
        if v.len() != 4 || u16::from_str_radix(v, 16).is_err() {
            return err(
                &format!("pci_vendors[{i}]"),
                format!("{v:?} is not a 4-digit hex vendor id"),
            );
        }
    }
    for (i, id) in p
        .r#match
        .pci_ids
        .iter()
        .chain(p.npu.pci_ids.iter())
        .enumerate()
    {
        if parse_pci_id(id).is_none() {
            return err(
                &format!("pci_ids[{i}]"),
                format!("{id:?} is not `vvvv:dddd` in hex"),
            );
        }
    }
    if let Some(v) = &p.npu.min_driver_version {
        if Version::parse_loose(v).is_none() {
            return err("npu.min_driver_version", format!("{v:?} is not a version"));
        }
    }
    if let (Some(min), Some(rec)) = (p.cma.min_total_bytes, p.cma.recommended_total_bytes) {
        if rec < min {
            return err(
                "cma.recommended_total_bytes",
                format!("{rec} is below min_total_bytes {min}"),
            );
        }
    }
    if p.cma.min_free_percent > 100 {
        return err(
            "cma.min_free_percent",
            format!("{} is above 100", p.cma.min_free_percent),
        );
    }
    if p.memory.fragmentation_order > 10 {
        return err(
            "memory.fragmentation_order",
            format!(
                "{} is above the buddy maximum 10",
                p.memory.fragmentation_order
            ),
        );
    }
    for (i, s) in p.signature.iter().enumerate() {
        if s.contains.is_empty() {
            return err(
                &format!("signature[{i}].contains"),
                "must not be empty".into(),
            );
        }
        if !crate::model::CHECK_IDS.contains(&s.check.as_str()) {
            return err(
                &format!("signature[{i}].check"),
                format!("{:?} is not a check id", s.check),
            );
        }
    }
    for path in p.logs.all() {
        if !path.starts_with('/') {
            return err("logs", format!("{path:?} must be an absolute path"));
        }
    }
    Ok(())
}

/// `"1e60:45c4"` -> `(0x1e60, 0x45c4)`.
pub fn parse_pci_id(s: &str) -> Option<(u16, u16)> {
    let (v, d) = s.split_once(':')?;
    if v.len() != 4 || d.len() != 4 {
        return None;
    }
    Some((
        u16::from_str_radix(v, 16).ok()?,
        u16::from_str_radix(d, 16).ok()?,
    ))
}

/// The built-in profiles plus those in `/etc/npu-agent/profiles.d/` under `root` (a file there
/// with the id of a built-in one replaces it). Returns the profiles and the files that failed.
pub fn load_all(root: &SysRoot) -> (Vec<Profile>, Vec<ProfileError>) {
    let (profiles, errors) = load_all_with_text(root);
    (profiles.into_iter().map(|(p, _)| p).collect(), errors)
}

/// [`load_all`] with the TOML text each profile was parsed from (what `profiles show` prints).
pub fn load_all_with_text(root: &SysRoot) -> (Vec<(Profile, String)>, Vec<ProfileError>) {
    let mut profiles: Vec<(Profile, String)> = Vec::new();
    let mut errors = Vec::new();
    for (name, text) in BUILTIN {
        match parse_profile(name, text) {
            Ok(p) => profiles.push((p, text.to_string())),
            Err(e) => errors.push(e),
        }
    }
    if let Ok(names) = root.list_dir(PROFILES_DIR) {
        for name in names.iter().filter(|n| n.ends_with(".toml")) {
            let path = format!("{PROFILES_DIR}/{name}");
            let parsed =
                read_site_toml(root, &path).and_then(|t| parse_profile(&path, &t).map(|p| (p, t)));
            match parsed {
                Ok((p, text)) => {
                    profiles.retain(|(q, _)| q.id != p.id);
                    profiles.push((p, text));
                }
                Err(e) => errors.push(e),
            }
        }
    }
    (profiles, errors)
}

/// What detection looks at: the board's identity facts.
#[derive(Debug, Clone, Default)]
pub struct DetectInput<'a> {
    /// `/proc/device-tree/compatible` entries.
    pub compatible: &'a [String],
    /// `/proc/device-tree/model`.
    pub model: Option<&'a str>,
    /// PCI (vendor, device) ids present.
    pub pci_ids: &'a [(u16, u16)],
    /// Installed package names.
    pub installed: &'a [String],
    /// CPU architecture (`x86_64`).
    pub arch: Option<&'a str>,
    /// Names of running processes (see [`MatchRules::processes`]).
    pub processes: &'a [String],
    /// Programs of command lines given to check as if they ran (`check --llm-cmdline`): they
    /// match like processes, but the reason says where they came from.
    pub cmdline_programs: &'a [String],
}

/// True when some profile would match on running processes on this architecture, so detection
/// should list them.
pub fn wants_processes(profiles: &[Profile], arch: Option<&str>) -> bool {
    profiles.iter().any(|p| {
        let m = &p.r#match;
        !m.processes.is_empty()
            && (m.arch.is_empty() || arch.is_some_and(|a| m.arch.iter().any(|x| x == a)))
    })
}

/// A profile chosen for a board, and why.
#[derive(Debug, Clone)]
pub struct Detection {
    /// The chosen profile.
    pub profile: Profile,
    /// Sentence saying what matched (`compatible brcm,bcm2712; PCI 1e60:45c4`).
    pub reason: String,
    /// True when no specific profile matched and `generic` was used.
    pub fallback: bool,
}

fn compat_matches(pattern: &str, entry: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => entry.starts_with(prefix),
        None => entry == pattern,
    }
}

/// Scores one profile: `None` when its device-tree/model rules do not match; otherwise a score
/// (PCI id 8, compatible 4, model 2, package 1) and the reasons.
pub fn score(p: &Profile, input: &DetectInput<'_>) -> Option<(u32, Vec<String>)> {
    let m = &p.r#match;
    if m.is_empty() {
        return None;
    }
    if !m.arch.is_empty() && !input.arch.is_some_and(|a| m.arch.iter().any(|x| x == a)) {
        return None;
    }
    let mut score = 0;
    let mut why = Vec::new();
    let compat = m
        .compatible
        .iter()
        .find(|pat| input.compatible.iter().any(|c| compat_matches(pat, c)));
    let model = input
        .model
        .and_then(|model| m.model.iter().find(|s| model.contains(s.as_str())));
    if !m.compatible.is_empty() || !m.model.is_empty() {
        if compat.is_none() && model.is_none() {
            return None;
        }
        if let Some(c) = compat {
            score += 4;
            why.push(format!("compatible {c}"));
        }
        if let Some(s) = model {
            score += 2;
            why.push(format!("model contains {s:?}"));
        }
    }
    if let Some(id) = m
        .pci_ids
        .iter()
        .find(|id| parse_pci_id(id).is_some_and(|pair| input.pci_ids.contains(&pair)))
    {
        score += 8;
        why.push(format!("PCI device {id}"));
    }
    if let Some(pkg) = m.packages.iter().find(|p| input.installed.contains(p)) {
        score += 1;
        why.push(format!("package {pkg} installed"));
    }
    if let Some(v) = m.pci_vendors.iter().find(|v| {
        u16::from_str_radix(v, 16)
            .is_ok_and(|v| input.pci_ids.iter().any(|(vendor, _)| *vendor == v))
    }) {
        score += 4;
        why.push(format!("PCI vendor {v}"));
    }
    if let Some(name) = m.processes.iter().find(|n| input.processes.contains(n)) {
        score += 2;
        why.push(format!("process {name} running"));
    } else if let Some(name) = m
        .processes
        .iter()
        .find(|n| input.cmdline_programs.contains(n))
    {
        score += 2;
        why.push(format!("--llm-cmdline runs {name}"));
    }
    if score > 0 && !m.arch.is_empty() {
        why.push(format!("arch {}", input.arch.unwrap_or("")));
    }
    if score == 0 {
        return None;
    }
    Some((score, why))
}

/// Picks the most specific matching profile; `generic` when none matches.
pub fn detect(profiles: &[Profile], input: &DetectInput<'_>) -> Option<Detection> {
    let best = profiles
        .iter()
        .filter_map(|p| score(p, input).map(|(s, why)| (s, why, p)))
        .max_by_key(|(s, _, p)| {
            (
                *s,
                std::cmp::Reverse(profiles.iter().position(|q| q.id == p.id)),
            )
        });
    if let Some((_, why, p)) = best {
        return Some(Detection {
            profile: p.clone(),
            reason: why.join("; "),
            fallback: false,
        });
    }
    profiles
        .iter()
        .find(|p| p.id == "generic")
        .map(|p| Detection {
            profile: p.clone(),
            reason: "no board profile matches this board; generic checks only".into(),
            fallback: true,
        })
}

/// The process name of Hailo's local model server, which `release_npu` asks to unload.
const HAILO_OLLAMA: &str = "hailo-ollama";

impl Profile {
    /// Why a board with this profile refuses the remote `action`, or `None` when it takes it.
    /// `release_npu` unloads models from a local hailo-ollama: only profiles of a Hailo NPU, or
    /// ones that list `hailo-ollama` among their workloads or runtime binaries, have one.
    pub fn refuses_action(&self, action: ActionKind) -> Option<String> {
        if !action.needs_hailo_ollama() {
            return None;
        }
        let hailo = self.npu.kind == NpuKind::Hailo
            || self.limits.workloads.iter().any(|w| w == HAILO_OLLAMA)
            || self
                .npu
                .runtime_binaries
                .iter()
                .any(|b| b.rsplit('/').next() == Some(HAILO_OLLAMA));
        (!hailo).then(|| {
            format!(
                "release_npu unloads models from a local hailo-ollama, and profile {:?} ({}) \
                 has no Hailo NPU or hailo-ollama: nothing to release on this board",
                self.id, self.name
            )
        })
    }

    /// The remote actions a board with this profile takes (the status's `actions`), in the
    /// order of [`ActionKind::ALL`].
    pub fn actions(&self) -> Vec<String> {
        ActionKind::ALL
            .into_iter()
            .filter(|a| self.refuses_action(*a).is_none())
            .map(|a| a.as_str().to_string())
            .collect()
    }
}

impl BootFileSpec {
    /// The file kind.
    pub fn kind(&self) -> BootFileKind {
        self.kind
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_builtin_profile_loads() {
        for (name, text) in BUILTIN {
            let p = parse_profile(name, text).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(format!("{}.toml", p.id), *name);
        }
    }

    #[test]
    fn unknown_key_names_file_line_and_key() {
        let text = "schema = 1\nid = \"x\"\nname = \"X\"\n\n[cma]\nmin_total_byte = 5\n";
        let e = parse_profile("x.toml", text).unwrap_err();
        assert_eq!(e.line, Some(6), "{e}");
        assert!(e.message.contains("unknown key `min_total_byte`"), "{e}");
        assert!(e.to_string().starts_with("profile x.toml: line 6: "), "{e}");
    }

    #[test]
    fn validation_errors_name_the_key() {
        let text = "schema = 1\nid = \"x\"\nname = \"X\"\n[npu]\nmin_driver_version = \"new\"\n";
        let e = parse_profile("x.toml", text).unwrap_err();
        assert_eq!(e.line, Some(5));
        assert!(e.message.starts_with("npu.min_driver_version"), "{e}");
        let e = parse_profile("y.toml", "schema = 2\nid = \"y\"\nname = \"Y\"\n").unwrap_err();
        assert!(e.message.contains("unsupported schema 2"), "{e}");
    }

    #[test]
    fn most_specific_profile_wins() {
        let (all, errs) = load_all(&SysRoot::new("/nonexistent"));
        assert!(errs.is_empty());
        let compat = vec![
            "raspberrypi,5-model-b".to_string(),
            "brcm,bcm2712".to_string(),
        ];
        let h8 = detect(
            &all,
            &DetectInput {
                compatible: &compat,
                pci_ids: &[(0x1e60, 0x2864)],
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(h8.profile.id, "rpi5-hailo8");
        assert!(h8.reason.contains("PCI device 1e60:2864"), "{}", h8.reason);
        let h10 = detect(
            &all,
            &DetectInput {
                compatible: &compat,
                pci_ids: &[(0x1e60, 0x45c4)],
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(h10.profile.id, "rpi5-hailo10h");
        let none = detect(
            &all,
            &DetectInput {
                compatible: &["acme,board".to_string()],
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(none.profile.id, "generic");
        assert!(none.fallback);
    }

    #[test]
    fn release_npu_is_offered_only_where_hailo_ollama_can_run() {
        let (profiles, errors) = load_all(&SysRoot::new("/nonexistent-npu-agent-root"));
        assert!(errors.is_empty(), "{errors:?}");
        let by_id = |id: &str| profiles.iter().find(|p| p.id == id).unwrap();
        let rk = by_id("rk3588-rknpu");
        let reason = rk.refuses_action(ActionKind::ReleaseNpu).unwrap();
        assert!(reason.contains("\"rk3588-rknpu\"") && reason.contains("nothing to release"));
        assert_eq!(
            rk.actions(),
            ["compact", "set_cma", "reboot", "rescan", "fix", "capture", "update"]
        );
        assert_eq!(rk.refuses_action(ActionKind::Compact), None);
        for id in ["rpi5-hailo10h", "rpi5-hailo8", "generic"] {
            assert_eq!(
                by_id(id).refuses_action(ActionKind::ReleaseNpu),
                None,
                "{id}"
            );
            assert!(
                by_id(id).actions().contains(&"release_npu".to_string()),
                "{id}"
            );
        }
        assert!(by_id("x86-hybrid-moe")
            .refuses_action(ActionKind::ReleaseNpu)
            .is_some());
    }

    #[test]
    fn a_given_command_line_is_not_a_running_process() {
        let (all, _) = load_all(&SysRoot::new("/nonexistent-root"));
        let given = vec!["llama-server".to_string()];
        let d = detect(
            &all,
            &DetectInput {
                arch: Some("x86_64"),
                cmdline_programs: &given,
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!(d.profile.id, "x86-hybrid-moe");
        assert!(
            d.reason.contains("--llm-cmdline runs llama-server"),
            "{}",
            d.reason
        );
        assert!(!d.reason.contains("running"), "{}", d.reason);
        let live = detect(
            &all,
            &DetectInput {
                arch: Some("x86_64"),
                processes: &given,
                ..Default::default()
            },
        )
        .unwrap();
        assert!(
            live.reason.contains("process llama-server running"),
            "{}",
            live.reason
        );
    }
}
