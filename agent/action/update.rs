//! `update {version, allow_downgrade?}`: the agent installs another version of its own package
//! through the guarded apt path of `fix` ([`crate::action::fix::apply::apt`]): simulated first
//! and held to the plan (only `npu-agent` changes), a downgrade refused unless allowed.
//!
//! Before installing it records a [`Pending`] update in the state directory. The package's
//! maintainer scripts restart the service; the agent that comes up answers the command once it
//! is connected ([`settle`]): the new version answers `successful`, the old one (after a
//! rollback) `failed: rolled back to OLD`. On a systemd board the install runs in a transient
//! unit outside the service's sandbox and cgroup (the restart would kill it otherwise), and a
//! watchdog service reinstalls the old version if the pending file is still there at the deadline
//! (the new agent did not come back healthy and connected). docs/operator-guide.md, "Updating
//! the agent".

use super::fix::apply::apt::{self, AptEnv, AptRun};
use super::state::StateDir;
use crate::model::remedy::{PackageSpec, Step};
use crate::root::SysRoot;
use serde::{Deserialize, Serialize};

/// The agent's own Debian package.
pub const PACKAGE: &str = "npu-agent";
/// The pending-update record in the state directory.
pub const PENDING_FILE: &str = "update-pending.json";
/// Seconds the new agent has to come back connected before the watchdog rolls back.
pub const DEADLINE_S: i64 = 300;

/// An update started and not answered yet.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pending {
    /// The package version before the update.
    pub old: String,
    /// The version asked for.
    pub new: String,
    /// The command's id.
    pub cmd_id: String,
    /// Unix seconds after which the watchdog reinstalls `old`.
    pub deadline_unix_s: i64,
    /// The agent process that started the update ([`process_instance`]): it never settles the
    /// update itself (a reconnect of the old agent is no restart into the new one). Absent in
    /// records of older agents.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agent_instance: Option<String>,
}

/// A random id of this agent process, made at its first use: tells the agent that started an
/// update from the one that comes back after it (a PID may repeat after a restart).
pub fn process_instance() -> &'static str {
    static INSTANCE: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    INSTANCE.get_or_init(|| {
        let mut b = [0u8; 16];
        let _ = getrandom::fill(&mut b);
        let pid = std::process::id();
        let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
        format!("{pid}-{hex}")
    })
}

/// What the update would do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan {
    /// The package is at that version already: nothing to do.
    Current,
    /// Install `to` over `from` (`None`: the package is not installed in this tree).
    Install {
        /// The installed version.
        from: Option<String>,
        /// The version to install.
        to: String,
    },
}

/// The install step of `version`.
pub fn step(version: &str) -> Step {
    Step::PackageInstall {
        packages: vec![PackageSpec {
            name: PACKAGE.into(),
            version: Some(version.into()),
        }],
    }
}

/// The installed version of the agent's package in `root` (dpkg's status database).
pub fn installed_version(root: &SysRoot) -> Option<String> {
    package_version(root, &[" installed"])
}

/// The agent's package version as the agent that comes back after an update sees it: installed,
/// or `half-configured` at that version. The package's postinst restarts the service, so the new
/// agent starts, connects and settles while dpkg still runs that script, before dpkg records
/// the package `installed` (seen on the booted image: reading the status file alone, without
/// dpkg's journal, the answer said "at no version").
pub fn version_after_restart(root: &SysRoot) -> Option<String> {
    package_version(root, &[" installed", " half-configured"])
}

/// The version of the agent's package whose dpkg `Status:` ends with one of `states` (the status
/// file with dpkg's journal applied: the restart happens while dpkg runs).
fn package_version(root: &SysRoot, states: &[&str]) -> Option<String> {
    super::fix::apply::dpkg::read_states(root)
        .ok()?
        .into_iter()
        .find(|p| p.name == PACKAGE && states.iter().any(|s| p.status.ends_with(s)))
        .map(|p| p.version)
}

/// `a` is older than `b` in Debian's version order (`dpkg --compare-versions`).
///
/// Errors: dpkg could not compare them.
pub fn older(a: &str, b: &str) -> Result<bool, String> {
    let s = std::process::Command::new("dpkg")
        .args(["--compare-versions", a, "lt", b])
        .status()
        .map_err(|e| format!("cannot run dpkg --compare-versions: {e}"))?;
    match s.code() {
        Some(0) => Ok(true),
        Some(1) => Ok(false),
        _ => Err(format!("dpkg cannot compare {a:?} with {b:?}")),
    }
}

/// Plans the update to `version`: the same version is [`Plan::Current`]; otherwise `apt-get -s
/// install npu-agent=VERSION` must change nothing but `npu-agent` (no other package installed,
/// upgraded or removed), and an older version needs `allow_downgrade`.
///
/// Errors: the refusal as a sentence, with the simulation's run when there was one.
pub fn plan(
    root: &SysRoot,
    env: &AptEnv,
    version: &str,
    allow_downgrade: bool,
) -> Result<Plan, (String, Option<AptRun>)> {
    let steps = [step(version)];
    apt::validate(&steps).map_err(|e| (e, None))?;
    let from = installed_version(root);
    if from.as_deref() == Some(version) {
        return Ok(Plan::Current);
    }
    if let Some(f) = &from {
        if !allow_downgrade && older(version, f).map_err(|e| (e, None))? {
            return Err((
                format!("{version} is older than the installed {f}: a downgrade needs allow_downgrade=true; nothing was changed"),
                None,
            ));
        }
    }
    let extra = apt::guard(root, env, &steps)?;
    if !extra.is_empty() {
        let names: Vec<String> = extra
            .iter()
            .map(|i| format!("{} {}", i.name, i.new))
            .collect();
        return Err((
            format!("the simulation (apt-get -s) also installs {}: an update changes npu-agent alone; nothing was changed", names.join(", ")),
            None,
        ));
    }
    Ok(Plan::Install {
        from,
        to: version.into(),
    })
}

/// `env` allowed to downgrade (`APT::Get::allow-downgrades`) when `allow_downgrade`.
pub fn install_env(env: &AptEnv, allow_downgrade: bool) -> AptEnv {
    let mut env = env.clone();
    if allow_downgrade {
        env.options.push("APT::Get::allow-downgrades=true".into());
    }
    env
}

/// Installs `npu-agent=version` in this process: the step simulated again and held to the plan,
/// then `apt-get -y --no-remove install` (see [`apt::run_step`]).
///
/// Errors: the refusal or apt's failure, with the run when there was one.
pub fn install(
    root: &SysRoot,
    env: &AptEnv,
    version: &str,
    allow_downgrade: bool,
) -> Result<AptRun, (String, Option<AptRun>)> {
    let steps = [step(version)];
    apt::run_step(root, &install_env(env, allow_downgrade), &steps, &steps[0])
}

/// How a pending update ends, seen by the agent that runs now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settled {
    /// The command to answer.
    pub cmd_id: String,
    /// `successful` (true) or `failed`.
    pub ok: bool,
    /// The answer's reason or summary.
    pub message: String,
}

/// The pending update `p` seen by this agent (`agent_version`, its binary's version) with the
/// package at `installed`, at `now_s`: the new version answers `successful`; the old one means
/// the watchdog (or a failed start) rolled it back; any other is a failure saying so.
pub fn settle(p: &Pending, installed: Option<&str>, agent_version: &str, now_s: i64) -> Settled {
    let (ok, message) = match installed {
        Some(v) if v == p.new => (
            true,
            format!(
                "updated from {} to {}; agent {agent_version} is running",
                p.old, p.new
            ),
        ),
        Some(v) if v == p.old => {
            let why = if now_s >= p.deadline_unix_s {
                format!(
                    "{} did not come back healthy and connected within the deadline",
                    p.new
                )
            } else {
                format!(
                    "the package is still at {} (the install did not take)",
                    p.old
                )
            };
            (false, format!("rolled back to {}: {why}", p.old))
        }
        other => (
            false,
            format!(
                "the package is at {}, neither {} nor {}",
                other.unwrap_or("no version"),
                p.old,
                p.new
            ),
        ),
    };
    Settled {
        cmd_id: p.cmd_id.clone(),
        ok,
        message,
    }
}

/// Reads the pending update, settles it for this agent and removes the record.
///
/// Errors: the record cannot be read or removed.
pub fn settle_pending(state: &StateDir, now_s: i64) -> Result<Option<Settled>, String> {
    let Some(p) = state
        .load::<Pending>(PENDING_FILE)
        .map_err(|e| e.to_string())?
    else {
        return Ok(None);
    };
    // Started by this very process: the link came back (a broker restart, a session taken
    // over), the agent did not. The agent that comes after the install settles it, or the
    // watchdog rolls it back.
    if p.agent_instance.as_deref() == Some(process_instance()) {
        return Ok(None);
    }
    let installed = version_after_restart(state.root());
    let s = settle(&p, installed.as_deref(), env!("CARGO_PKG_VERSION"), now_s);
    let path = state
        .root()
        .entry_path(&state.board_path(PENDING_FILE))
        .map_err(|e| e.to_string())?;
    std::fs::remove_file(path).map_err(|e| format!("cannot remove the pending update: {e}"))?;
    Ok(Some(s))
}

#[cfg(test)]
#[path = "update_tests.rs"]
mod tests;
