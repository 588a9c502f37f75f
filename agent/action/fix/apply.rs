//! Carrying out the steps of a fix under the root, in order: [`apply`].
//!
//! - [`files`] (with the pure edits of [`edit`]): unit drop-ins, modprobe.d options, sysctl.d
//!   settings, boot-file keys; backup, atomic write, re-read, undo.
//! - [`apt`] (with [`dpkg`]): package steps, simulated first and held to the plan, refused while
//!   dpkg is locked or half-way; the log and, after a failure, dpkg's state kept.
//! - [`systemd`]: `daemon-reload`, `restart`, and the unit's limits after it.
//!
//! Before the first step every step is checked (names, paths, the tools this root allows) and,
//! when there are package steps, the whole plan is simulated: a refusal changes nothing. The
//! first step that fails stops the run; the file steps done before it are undone in reverse
//! order. Package steps and restarts cannot be undone: the result says they were done, and after
//! a failed package step what state dpkg is in.

pub mod apt;
pub mod dpkg;
pub mod edit;
pub mod files;
pub mod systemd;

use crate::action::atomic::{RealStorage, Storage};
use crate::model::remedy::Step;
use crate::root::SysRoot;
use apt::{AptEnv, AptRun, SimInstall};
use dpkg::{Interrupted, PackageState};
use files::{FileChange, Undo};
use serde::Serialize;
use systemd::SystemdEnv;

/// The tools the steps may use. `None` refuses the steps that need it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApplyEnv {
    /// apt for package steps.
    pub apt: Option<AptEnv>,
    /// systemctl for daemon-reload and restarts.
    pub systemd: Option<SystemdEnv>,
}

impl ApplyEnv {
    /// The board's own apt and systemctl when `root` is the live system; none under a captured
    /// tree (they would act on this machine, not on the tree), so only file steps run there.
    pub fn for_root(root: &SysRoot) -> ApplyEnv {
        if root.is_live() {
            ApplyEnv {
                apt: Some(AptEnv::live()),
                systemd: Some(SystemdEnv::live()),
            }
        } else {
            ApplyEnv {
                apt: None,
                systemd: None,
            }
        }
    }
}

/// What became of one step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StepState {
    /// Carried out (a file that already said so counts: `file.changed` is false).
    Done,
    /// Carried out, then taken back after a later step failed.
    Undone,
    /// Failed; `detail` says why.
    Failed,
    /// Not started (refused before the first step, or after a failure).
    NotRun,
}

impl StepState {
    /// Its name as in the JSON result (`done`, `not_run`).
    pub fn name(self) -> &'static str {
        match self {
            StepState::Done => "done",
            StepState::Undone => "undone",
            StepState::Failed => "failed",
            StepState::NotRun => "not_run",
        }
    }
}

/// One step's report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StepReport {
    /// The step.
    pub step: Step,
    /// What became of it.
    pub state: StepState,
    /// Why it failed, or a note.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub detail: String,
    /// For a file step: what changed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub file: Option<FileChange>,
    /// For a package step: the apt run with its log.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub apt: Option<AptRun>,
    /// Why taking it back failed (the file is as the step left it).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub undo_error: String,
}

/// How the whole run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ApplyResult {
    /// Every step done.
    Applied,
    /// Refused before the first step: nothing changed.
    Refused,
    /// A step failed; the file steps before it were undone.
    Failed,
}

/// dpkg's state after a failed package step.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct DpkgAfter {
    /// Packages left half-way.
    pub interrupted: Vec<Interrupted>,
    /// The `Status:` of each package the plan names (absent: not in the database).
    pub planned: Vec<PackageState>,
    /// Why the database could not be read, if so.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub error: String,
}

/// The result of [`apply`], serialisable for the remote command result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ApplyOutcome {
    /// How it ended.
    pub result: ApplyResult,
    /// Every step in order.
    pub steps: Vec<StepReport>,
    /// A reboot is needed before the fix takes effect (a `RebootNeeded` step, or a boot file or
    /// module option changed).
    pub reboot_needed: bool,
    /// Why it was refused or failed.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub error: String,
    /// The simulation of the plan's package steps.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub simulation: Option<AptRun>,
    /// Packages the plan installs as dependencies of the ones it names.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub dependencies: Vec<SimInstall>,
    /// After a failed package step: what state dpkg is in.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dpkg_after: Option<DpkgAfter>,
}

impl ApplyOutcome {
    fn new(steps: &[Step]) -> ApplyOutcome {
        ApplyOutcome {
            result: ApplyResult::Applied,
            steps: steps
                .iter()
                .map(|s| StepReport {
                    step: s.clone(),
                    state: StepState::NotRun,
                    detail: String::new(),
                    file: None,
                    apt: None,
                    undo_error: String::new(),
                })
                .collect(),
            reboot_needed: false,
            error: String::new(),
            simulation: None,
            dependencies: Vec::new(),
            dpkg_after: None,
        }
    }

    fn refuse(mut self, why: String) -> ApplyOutcome {
        self.result = ApplyResult::Refused;
        self.error = why;
        self
    }
}

fn is_package(s: &Step) -> bool {
    matches!(
        s,
        Step::PackageInstall { .. } | Step::PackageRemove { .. } | Step::PackageHold { .. }
    )
}

/// Checks every step before any runs: names and paths, and that this root allows its tool.
fn preflight(steps: &[Step], env: &ApplyEnv) -> Result<(), String> {
    apt::validate(steps)?;
    for s in steps {
        files::target(s)?;
        match s {
            Step::RestartUnit { unit } => files::unit_name(unit)?,
            Step::DaemonReload => {}
            s if is_package(s) => {
                if env.apt.is_none() {
                    return Err(format!(
                        "`{}`: package steps run only on the live system (root /), not on a board tree",
                        s.text(false)
                    ));
                }
                continue;
            }
            _ => continue,
        }
        if env.systemd.is_none() {
            return Err(format!(
                "`{}`: systemd steps run only on the live system (root /), not on a board tree",
                s.text(false)
            ));
        }
    }
    Ok(())
}

/// Every place the steps write must be writable from this process: under the shipped unit's
/// sandbox (`ProtectSystem=strict`) `/etc` and `/usr` are read-only to the daemon, in a
/// container the host is mounted read-only (the refusal then says what to run on the host), and
/// a package step that found that out half way would leave dpkg half-configured.
///
/// Errors: the first place that cannot be written, and what to do instead.
pub fn writable(root: &SysRoot, steps: &[Step]) -> Result<(), String> {
    writable_in(root, steps, crate::sys::container::detect().as_ref())
}

/// [`writable`] for a process in `container` (or none).
fn writable_in(
    root: &SysRoot,
    steps: &[Step],
    container: Option<&crate::sys::container::InContainer>,
) -> Result<(), String> {
    let mut places: Vec<String> = Vec::new();
    for s in steps {
        if is_package(s) {
            places.extend(["/usr", "/var/lib/dpkg", "/etc"].map(String::from));
        } else if let Ok(Some((path, _))) = files::target(s) {
            places.push(path);
        }
    }
    if let (Some(c), true) = (container, root.is_live()) {
        // The container's own / is not the host: its /etc, packages and units change nothing
        // there. Restarts and daemon-reload would reach no host systemd either.
        let units = steps
            .iter()
            .any(|s| matches!(s, Step::RestartUnit { .. } | Step::DaemonReload));
        let first = places
            .first()
            .cloned()
            .or_else(|| units.then(|| "/etc/systemd/system".to_string()));
        if let Some(place) = first {
            let why = "this container's own files are not the host's";
            return Err(crate::sys::container::host_write_refusal(c, &place, why));
        }
    }
    for place in places {
        let Ok(mut host) = root.join(&place) else {
            continue;
        };
        while !host.exists() && host.pop() {}
        if let Err(e) = rustix::fs::access(&host, rustix::fs::Access::WRITE_OK) {
            // In a container the place is the host's, mounted into it: say what to do on the host.
            if let Some(c) = container {
                return Err(crate::sys::container::host_write_refusal(
                    c,
                    &place,
                    &e.to_string(),
                ));
            }
            return Err(format!(
                "{place} cannot be written from here ({e}; the npu-agent service's sandbox, \
                 ProtectSystem=strict, keeps /etc and /usr read-only): run `sudo npu-agent \
                 fix` in a shell on the board; nothing was changed"
            ));
        }
    }
    Ok(())
}

/// Carries out `steps` in order under `root` with the tools of `env` (see the module).
pub fn apply(root: &SysRoot, steps: &[Step], env: &ApplyEnv) -> ApplyOutcome {
    apply_telling(root, steps, env, &|_| {})
}

/// [`apply`], telling `on_step` each step as it starts (`"2 of 4: install hailo-h10-all=5.1.1"`):
/// a remote `fix` publishes it as the command's `executing` state.
pub fn apply_telling(
    root: &SysRoot,
    steps: &[Step],
    env: &ApplyEnv,
    on_step: &dyn Fn(&str),
) -> ApplyOutcome {
    apply_with(root, steps, env, &mut RealStorage, on_step)
}

/// [`apply`] with the file writes going through `storage` (tests inject failures).
pub fn apply_with(
    root: &SysRoot,
    steps: &[Step],
    env: &ApplyEnv,
    storage: &mut dyn Storage,
    on_step: &dyn Fn(&str),
) -> ApplyOutcome {
    let mut out = ApplyOutcome::new(steps);
    if let Err(e) = preflight(steps, env).and_then(|()| writable(root, steps)) {
        return out.refuse(e);
    }
    if let (true, Some(aenv)) = (steps.iter().any(is_package), &env.apt) {
        match apt::guard(root, aenv, steps) {
            Ok(deps) => out.dependencies = deps,
            Err((why, run)) => {
                out.simulation = run;
                return out.refuse(why);
            }
        }
    }
    let mut undo: Vec<(usize, Undo)> = Vec::new();
    for (i, step) in steps.iter().enumerate() {
        let now = format!("{} of {}: {}", i + 1, steps.len(), step.text(false));
        tracing::info!(target: "action::fix", step = now.as_str(), "fix step");
        on_step(&now);
        let r = run_step(root, steps, step, env, storage, &mut out.steps[i]);
        match r {
            Ok(u) => {
                out.steps[i].state = StepState::Done;
                if let Some(u) = u {
                    undo.push((i, u));
                }
                out.reboot_needed |= match step {
                    Step::RebootNeeded => true,
                    Step::BootKey { .. } | Step::ModuleOption { .. } => {
                        out.steps[i].file.as_ref().is_some_and(|f| f.changed)
                    }
                    _ => false,
                };
            }
            Err(why) => {
                out.steps[i].state = StepState::Failed;
                out.steps[i].detail = why.clone();
                out.result = ApplyResult::Failed;
                out.error = format!("step {} (`{}`) failed: {why}", i + 1, step.text(false));
                if is_package(step) {
                    out.dpkg_after = Some(dpkg_after(root, steps));
                }
                undo_all(root, storage, &mut out, undo);
                return out;
            }
        }
    }
    out
}

/// Runs one step, filling its report; returns how to undo a file step.
fn run_step(
    root: &SysRoot,
    steps: &[Step],
    step: &Step,
    env: &ApplyEnv,
    storage: &mut dyn Storage,
    report: &mut StepReport,
) -> Result<Option<Undo>, String> {
    let systemd = || {
        env.systemd
            .as_ref()
            .ok_or("systemctl is not available here")
    };
    match step {
        Step::UnitDropIn { .. }
        | Step::ModuleOption { .. }
        | Step::Sysctl { .. }
        | Step::BootKey { .. } => {
            let (change, undo) = files::apply_file(root, storage, step)?;
            report.file = Some(change);
            Ok(Some(undo))
        }
        Step::PackageInstall { .. } | Step::PackageRemove { .. } | Step::PackageHold { .. } => {
            let aenv = env.apt.as_ref().ok_or("apt is not available here")?;
            match apt::run_step(root, aenv, steps, step) {
                Ok(run) => {
                    report.apt = Some(run);
                    Ok(None)
                }
                Err((why, run)) => {
                    report.apt = run;
                    Err(why)
                }
            }
        }
        Step::DaemonReload => systemd::daemon_reload(systemd()?).map(|_| None),
        Step::RestartUnit { unit } => systemd::restart(systemd()?, unit).map(|_| None),
        Step::RebootNeeded => Ok(None),
    }
}

/// Undoes the done file steps, last first, marking each undone (or noting why it could not be).
fn undo_all(
    root: &SysRoot,
    storage: &mut dyn Storage,
    out: &mut ApplyOutcome,
    undo: Vec<(usize, Undo)>,
) {
    let mut kept = Vec::new();
    for (i, u) in undo.into_iter().rev() {
        match files::undo_file(root, storage, &u) {
            Ok(()) => out.steps[i].state = StepState::Undone,
            Err(e) => {
                out.steps[i].undo_error = e;
                kept.push(i + 1);
            }
        }
    }
    // Only what stays done can still need a reboot.
    out.reboot_needed = out.steps.iter().any(|s| {
        s.state == StepState::Done
            && matches!(s.step, Step::BootKey { .. } | Step::ModuleOption { .. })
            && s.file.as_ref().is_some_and(|f| f.changed)
    });
    let done: Vec<String> = out
        .steps
        .iter()
        .enumerate()
        .filter(|(_, s)| s.state == StepState::Done)
        .map(|(i, _)| (i + 1).to_string())
        .collect();
    if !done.is_empty() {
        out.error.push_str(&format!(
            "; step(s) {} stay done (packages and restarts are not taken back)",
            done.join(", ")
        ));
    }
    if !kept.is_empty() {
        out.error.push_str(&format!(
            "; taking back step(s) {} failed, see each step's undo_error",
            kept.iter()
                .map(|n| n.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
}

/// dpkg's state now: interrupted packages and the status of each planned package.
fn dpkg_after(root: &SysRoot, steps: &[Step]) -> DpkgAfter {
    let text = match root.read_string(dpkg::STATUS) {
        Ok(t) => t,
        Err(e) => {
            return DpkgAfter {
                error: e.to_string(),
                ..DpkgAfter::default()
            }
        }
    };
    let mut names: Vec<String> = Vec::new();
    for s in steps {
        match s {
            Step::PackageInstall { packages } => {
                names.extend(packages.iter().map(|p| p.name.clone()))
            }
            Step::PackageRemove { packages, .. } | Step::PackageHold { packages } => {
                names.extend(packages.iter().cloned())
            }
            _ => {}
        }
    }
    DpkgAfter {
        interrupted: dpkg::interrupted(&text),
        planned: dpkg::parse_states(&text)
            .into_iter()
            .filter(|p| names.contains(&p.name))
            .collect(),
        error: String::new(),
    }
}

#[cfg(test)]
#[path = "apply/tests.rs"]
mod tests;
