//! One diagnosis: detect the board, load its profile, probe, run every check, build the report.

use crate::check::{self, Finding};
use crate::probe::{self, Snapshot};
use crate::profile::{self, DetectInput, Profile, ProfileError};
use crate::report::{Health, Report};
use crate::root::SysRoot;
use serde_json::Value;
use std::collections::BTreeMap;

/// How the profile is chosen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProfileChoice {
    /// Detect from the board's files.
    Auto,
    /// A profile id (built-in or from `/etc/npu-agent/profiles.d`).
    Id(String),
    /// A profile file on the host filesystem (not under the root).
    File(std::path::PathBuf),
}

impl ProfileChoice {
    /// `auto`, a path (contains `/` or ends in `.toml`), or an id.
    pub fn parse(s: &str) -> ProfileChoice {
        if s == "auto" {
            ProfileChoice::Auto
        } else if s.contains('/') || s.ends_with(".toml") {
            ProfileChoice::File(s.into())
        } else {
            ProfileChoice::Id(s.to_string())
        }
    }

    /// The text [`ProfileChoice::parse`] reads back (a `--profile` argument).
    pub fn arg(&self) -> std::ffi::OsString {
        match self {
            ProfileChoice::Auto => "auto".into(),
            ProfileChoice::Id(id) => id.into(),
            ProfileChoice::File(p) => p.into(),
        }
    }
}

/// Why a diagnosis could not start (exit code 2).
#[derive(Debug, thiserror::Error)]
pub enum DiagnoseError {
    /// The profile file given with `--profile` is invalid.
    #[error(transparent)]
    Profile(#[from] ProfileError),
    /// No profile with that id.
    #[error("no profile with id {id:?} (available: {available})")]
    UnknownProfile {
        /// The id asked for.
        id: String,
        /// Ids that exist.
        available: String,
    },
    /// The profile file could not be read.
    #[error("cannot read profile file {path}: {source}")]
    ProfileFile {
        /// Path given.
        path: String,
        /// Cause.
        source: std::io::Error,
    },
}

/// The result of one diagnosis: the report, plus the snapshot and profile behind it.
#[derive(Clone)]
pub struct Diagnosis {
    /// What to print or publish.
    pub report: Report,
    /// The files read.
    pub snapshot: Snapshot,
    /// The profile in force.
    pub profile: Profile,
}

pub use crate::model::board_id::sanitize_board_id;

/// Board id: device-tree serial number, else `/etc/machine-id`, else `unknown`.
pub fn auto_board_id(root: &SysRoot, snap_serial: Option<&str>) -> String {
    if let Some(s) = snap_serial {
        return sanitize_board_id(s);
    }
    root.read_string("/etc/machine-id")
        .ok()
        .map(|s| sanitize_board_id(&s))
        .unwrap_or_else(|| "unknown".into())
}

/// Inputs of a diagnosis that do not come from the board's files.
#[derive(Debug, Clone, Default)]
pub struct DiagnoseOptions {
    /// A llama.cpp command line to check as if it were running (`check --llm-cmdline`).
    pub llm_cmdline: Option<String>,
    /// The daemon's log cursors: logs are read incrementally from them and they are advanced
    /// (see `probe::evidence`). `None` reads everything of this boot.
    pub log_cursors: Option<std::sync::Arc<std::sync::Mutex<probe::evidence::LogCursors>>>,
}

/// Runs one diagnosis of the board under `root`.
pub fn diagnose(root: &SysRoot, choice: &ProfileChoice) -> Result<Diagnosis, DiagnoseError> {
    diagnose_with(root, choice, &DiagnoseOptions::default())
}

/// The profile with `id` among `profiles`, or [`DiagnoseError::UnknownProfile`] listing them.
fn find_profile<'a>(profiles: &'a [Profile], id: &str) -> Result<&'a Profile, DiagnoseError> {
    profiles
        .iter()
        .find(|p| p.id == id)
        .ok_or_else(|| DiagnoseError::UnknownProfile {
            id: id.to_string(),
            available: ids(profiles),
        })
}

/// The profile in the host file `path` (`--profile FILE`, not under the root).
///
/// Errors: [`DiagnoseError::ProfileFile`] (unreadable, too large), [`DiagnoseError::Profile`].
fn profile_file(path: &std::path::Path) -> Result<Profile, DiagnoseError> {
    let text = crate::sys::hostfile::read_host_text(path, crate::sys::hostfile::MAX_CONFIG_BYTES)
        .map_err(|source| DiagnoseError::ProfileFile {
        path: path.display().to_string(),
        source,
    })?;
    Ok(profile::parse_profile(&path.display().to_string(), &text)?)
}

/// Detects the board's profile (`--profile` not given). Reads the dpkg database into `dpkg`
/// only when a profile's package hints can decide.
fn detect_auto(
    root: &SysRoot,
    profiles: &[Profile],
    identity: &probe::Identity,
    pci: &probe::Probed<Vec<probe::PciDevice>>,
    opts: &DiagnoseOptions,
    dpkg: &mut Option<probe::Probed<Vec<crate::parse::dpkg::DpkgPackage>>>,
) -> Result<(Profile, String, bool), DiagnoseError> {
    let compatible = identity.compatible.clone().unwrap_or_default();
    let pci_ids: Vec<(u16, u16)> = pci
        .as_ref()
        .map(|d| d.iter().map(|d| (d.vendor, d.device)).collect())
        .unwrap_or_default();
    let model = identity.model.as_ref().ok().map(|s| s.as_str());
    let arch = identity.arch.as_deref();
    let processes = if profile::wants_processes(profiles, arch) {
        probe::llm::detect_process_names(root)
    } else {
        Vec::new()
    };
    // A command line given with --llm-cmdline is matched like a process, but it is not
    // one: the reason must not claim it runs.
    let cmdline_programs: Vec<String> = opts
        .llm_cmdline
        .as_deref()
        .and_then(|c| crate::parse::llmargs::shell_words(c).ok())
        .and_then(|w| w.first().cloned())
        .map(|prog| vec![prog.rsplit('/').next().unwrap_or("").to_string()])
        .unwrap_or_default();
    let bare = DetectInput {
        compatible: &compatible,
        model,
        pci_ids: &pci_ids,
        installed: &[],
        arch,
        processes: &processes,
        cmdline_programs: &cmdline_programs,
    };
    let hints_matter = profiles
        .iter()
        .any(|p| !p.r#match.packages.is_empty() && profile::score(p, &bare).is_some());
    let installed: Vec<String> = if hints_matter {
        let d = dpkg.get_or_insert_with(|| probe::probe_dpkg(root));
        d.as_ref()
            .map(|p| {
                p.iter()
                    .filter(|p| p.is_installed())
                    .map(|p| p.name.clone())
                    .collect()
            })
            .unwrap_or_default()
    } else {
        Vec::new()
    };
    let det = profile::detect(
        profiles,
        &DetectInput {
            installed: &installed,
            ..bare
        },
    )
    .ok_or_else(|| DiagnoseError::UnknownProfile {
        id: "generic".into(),
        available: ids(profiles),
    })?;
    Ok((det.profile, det.reason, det.fallback))
}

/// The dpkg database for `profile`'s checks: the copy detection read, else read now when the
/// Hailo or rknpu checks need it (they read the packages), else a "not read" error.
fn dpkg_for(
    root: &SysRoot,
    profile: &Profile,
    read: Option<probe::Probed<Vec<crate::parse::dpkg::DpkgPackage>>>,
) -> probe::Probed<Vec<crate::parse::dpkg::DpkgPackage>> {
    match read {
        Some(d) => d,
        None if matches!(
            profile.npu.kind,
            profile::NpuKind::Hailo | profile::NpuKind::Rknpu
        ) =>
        {
            probe::probe_dpkg(root)
        }
        None => Err(crate::root::ReadError {
            path: "/var/lib/dpkg/status".into(),
            kind: crate::root::ReadErrorKind::NotFound,
            detail: format!("not read: profile {} checks no packages", profile.id),
        }),
    }
}

/// [`diagnose`] with options.
pub fn diagnose_with(
    root: &SysRoot,
    choice: &ProfileChoice,
    opts: &DiagnoseOptions,
) -> Result<Diagnosis, DiagnoseError> {
    let (profiles, profile_errors) = profile::load_all(root);
    let identity = probe::probe_identity(root);
    let pci = probe::probe_pci(root);
    // The dpkg database is large on a full system; read it only when detection can use it (a
    // profile with package hints whose board rules match) or the chosen profile's checks do.
    let mut dpkg: Option<probe::Probed<Vec<crate::parse::dpkg::DpkgPackage>>> = None;
    let (profile, reason, fallback): (Profile, String, bool) = match choice {
        ProfileChoice::Auto => detect_auto(root, &profiles, &identity, &pci, opts, &mut dpkg)?,
        ProfileChoice::Id(id) => {
            let p = find_profile(&profiles, id)?.clone();
            (p, format!("chosen with --profile {id}"), id == "generic")
        }
        ProfileChoice::File(path) => {
            let p = profile_file(path)?;
            let reason = format!("chosen with --profile {}", path.display());
            (p, reason, false)
        }
    };
    let (profile, reason) = join_accelerators(root, profile, reason, &identity, &pci);
    let serial = identity.serial.clone();
    let dpkg = dpkg_for(root, &profile, dpkg);
    let mut guard = opts.log_cursors.as_ref().and_then(|c| c.lock().ok());
    let (apps, app_errors) = profile::apps::load_apps(root);
    let mut profile_errors = profile_errors;
    profile_errors.extend(app_errors);
    let mut snapshot = probe::probe(
        root,
        &profile,
        identity,
        pci,
        dpkg,
        &apps,
        guard.as_deref_mut(),
    );
    drop(guard);
    if let Some(line) = &opts.llm_cmdline {
        probe::llm::add_cmdline(root, &mut snapshot.llm, line);
    }
    let findings = check::run_all(&profile, &snapshot, &reason, fallback);
    let report = build_report(
        root,
        &profile,
        &reason,
        &snapshot,
        findings,
        serial.as_deref(),
        profile_errors,
    );
    Ok(Diagnosis {
        report,
        snapshot,
        profile,
    })
}

/// Joins every accelerator the host shows to the board profile (`catalog/accelerators.toml`);
/// `board.identity` names them and why.
fn join_accelerators(
    root: &SysRoot,
    mut profile: Profile,
    reason: String,
    identity: &probe::Identity,
    pci: &probe::Probed<Vec<probe::PciDevice>>,
) -> (Profile, String) {
    let catalog = match profile::accel::catalog() {
        Ok(c) => c,
        Err(e) => {
            tracing::error!("accelerator catalog: {e}");
            return (profile, reason);
        }
    };
    let host = probe::probe_host_facts(root, identity, pci);
    for found in profile::accel::detect(&catalog, &host) {
        if let Some(spec) = catalog.iter().find(|a| a.id == found.id) {
            profile.join_accelerator(spec, &found);
        }
    }
    (profile, reason)
}

fn ids(profiles: &[Profile]) -> String {
    profiles
        .iter()
        .map(|p| p.id.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Dashboard figures from the snapshot.
pub fn metrics(snap: &Snapshot, profile: &Profile) -> BTreeMap<String, Value> {
    let mut m = BTreeMap::new();
    if let Ok(mi) = &snap.meminfo {
        if let Some(v) = mi.mem_total_bytes {
            m.insert("mem_total_bytes".into(), v.into());
        }
        if let Some(v) = mi.mem_available_bytes {
            m.insert("mem_available_bytes".into(), v.into());
        }
        if let Some(v) = mi.cma_total_bytes {
            m.insert("cma_total_bytes".into(), v.into());
        }
        if let Some(v) = mi.cma_free_bytes {
            m.insert("cma_free_bytes".into(), v.into());
        }
    }
    if let Ok(z) = &snap.buddyinfo {
        let (_, high, largest) = crate::check::buddy_summary(
            z,
            profile.memory.fragmentation_order,
            snap.page_size.bytes,
        );
        m.insert("largest_free_block_bytes".into(), largest.into());
        m.insert("free_high_order_bytes".into(), high.into());
    }
    if let Ok(v) = &snap.vmstat {
        for k in [
            "compact_stall",
            "compact_fail",
            "compact_success",
            "cma_alloc_success",
            "cma_alloc_fail",
        ] {
            if let Some(x) = v.get(k) {
                m.insert(k.into(), (*x).into());
            }
        }
    }
    crate::report::metrics::metrics(snap, &mut m);
    m
}

fn build_report(
    root: &SysRoot,
    profile: &Profile,
    reason: &str,
    snap: &Snapshot,
    findings: Vec<Finding>,
    serial: Option<&str>,
    profile_errors: Vec<ProfileError>,
) -> Report {
    let model = snap
        .identity
        .model
        .as_ref()
        .ok()
        .cloned()
        .or_else(|| {
            snap.identity
                .arch
                .clone()
                .map(|a| format!("{a} machine (no device tree)"))
        })
        .unwrap_or_else(|| "unknown board".into());
    let time = crate::sys::time::rfc3339_now();
    let reboot_required = findings
        .iter()
        .any(|f| f.id == "reboot.pending" && f.status.fires());
    Report {
        schema: 1,
        board_id: auto_board_id(root, serial),
        profile: profile.id.clone(),
        profile_reason: reason.to_string(),
        model,
        agent_version: env!("CARGO_PKG_VERSION").to_string(),
        time,
        boot_id: snap.boot_id.as_ref().ok().cloned().unwrap_or_default(),
        uptime_s: snap.uptime_s.as_ref().ok().map(|u| *u as u64),
        session: 0,
        notices: Vec::new(),
        commands: None,
        interval_s: None,
        broker: None,
        health: Health::of(&findings),
        metrics: metrics(snap, profile),
        findings,
        reboot_required,
        last_action: None,
        profile_errors: profile_errors.iter().map(|e| e.to_string()).collect(),
        actions: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn board_ids_are_sanitised() {
        assert_eq!(sanitize_board_id("10000000ABCDEF01\n"), "10000000abcdef01");
        assert_eq!(sanitize_board_id("a b/c"), "a-b-c");
        assert_eq!(sanitize_board_id(""), "unknown");
    }

    #[test]
    fn profile_choice_parsing() {
        assert_eq!(ProfileChoice::parse("auto"), ProfileChoice::Auto);
        assert_eq!(
            ProfileChoice::parse("rk3588-rknpu"),
            ProfileChoice::Id("rk3588-rknpu".into())
        );
        assert_eq!(
            ProfileChoice::parse("./x.toml"),
            ProfileChoice::File("./x.toml".into())
        );
    }
}
