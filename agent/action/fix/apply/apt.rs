//! Package steps: `apt-get -s` first, read by [`parse_simulation`] and held to the plan by
//! [`check_simulation`] (nothing installed, upgraded or removed that the plan does not name,
//! besides new dependencies of what it installs); then the real `apt-get` (non-interactive,
//! `--force-confold`, a deadline), its log kept, and after a failure what state dpkg is in.
//! Every run takes an [`AptEnv`]: the programs and `-o` options, so tests run the real apt-get
//! against a throwaway root and a local repository.

use super::dpkg::{held_lock, read_interrupted, Interrupted};
use crate::model::remedy::{PackageSpec, Step};
use crate::root::SysRoot;
use crate::sys::process::{run_with_timeout, RunError};
use serde::Serialize;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

/// Bytes of apt's output kept in the result: the first [`LOG_HEAD_BYTES`] and the last
/// `LOG_KEEP_BYTES - LOG_HEAD_BYTES` (errors are at the end).
pub const LOG_KEEP_BYTES: usize = 64 * 1024;
/// Bytes kept from the start of the log.
pub const LOG_HEAD_BYTES: usize = 8 * 1024;

/// How apt is run: programs, `-o` options, deadlines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AptEnv {
    /// `apt-get`.
    pub apt_get: PathBuf,
    /// `apt-mark`.
    pub apt_mark: PathBuf,
    /// Options passed as `-o <option>` before the command (`Dir=/tmp/root`).
    pub options: Vec<String>,
    /// Deadline of a simulation.
    pub simulate_timeout: Duration,
    /// Deadline of a real run (a download and dpkg's work).
    pub run_timeout: Duration,
}

impl AptEnv {
    /// The board's own apt (`/`): programs on `PATH`, no options; 2 min to simulate, 30 min to
    /// run.
    pub fn live() -> AptEnv {
        AptEnv {
            apt_get: "apt-get".into(),
            apt_mark: "apt-mark".into(),
            options: Vec::new(),
            simulate_timeout: Duration::from_secs(120),
            run_timeout: Duration::from_secs(1800),
        }
    }

    /// apt and dpkg confined to the throwaway root `dir` (tests): apt's state, cache, sources and
    /// logs under `dir` (`Dir=`), dpkg with `--root=<dir>` (its database `<dir>/var/lib/dpkg`).
    /// Only for trees holding packages without maintainer scripts: dpkg would run those
    /// chrooted into `dir`.
    pub fn in_tree(dir: &std::path::Path) -> AptEnv {
        let d = dir.display();
        let mut env = AptEnv::live();
        env.options = vec![
            format!("Dir={d}"),
            format!("Dir::State::status={d}/var/lib/dpkg/status"),
            format!("Dir::Log={d}/var/log/apt"),
            format!("DPkg::Options::=--root={d}"),
            format!("DPkg::Options::=--log={d}/var/log/dpkg.log"),
            "APT::Sandbox::User=root".into(),
        ];
        env
    }

    fn command(&self, program: &PathBuf) -> Command {
        let mut c = Command::new(program);
        c.env("DEBIAN_FRONTEND", "noninteractive")
            .env("LC_ALL", "C")
            .env("APT_LISTCHANGES_FRONTEND", "none");
        for o in &self.options {
            c.arg("-o").arg(o);
        }
        c
    }
}

/// One package the simulation installs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SimInstall {
    /// Package name (without `:arch`).
    pub name: String,
    /// Version installed now, for an upgrade or downgrade.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub old: Option<String>,
    /// Version it installs.
    pub new: String,
}

/// One package the simulation removes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SimRemoval {
    /// Package name (without `:arch`).
    pub name: String,
    /// Version removed.
    pub version: String,
    /// `Purg` rather than `Remv`.
    pub purge: bool,
}

/// What `apt-get -s` would do.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Simulation {
    /// `Inst` lines.
    pub installs: Vec<SimInstall>,
    /// `Remv` and `Purg` lines.
    pub removals: Vec<SimRemoval>,
}

fn bare(name: &str) -> String {
    name.split(':').next().unwrap_or(name).to_string()
}

/// The first bracketed or parenthesised group at the start of `s` (after spaces): its content
/// and the rest.
fn group(s: &str, open: char, close: char) -> Option<(&str, &str)> {
    let s = s.trim_start().strip_prefix(open)?;
    let end = s.find(close)?;
    Some((&s[..end], &s[end + 1..]))
}

/// Reads `apt-get -s` output: `Inst pkg [old] (new repo [arch])`, `Remv pkg [ver]`, `Purg pkg
/// [ver]`; `Conf` and every other line are skipped.
///
/// Errors: an `Inst`/`Remv`/`Purg` line without a package or version.
pub fn parse_simulation(text: &str) -> Result<Simulation, String> {
    let mut sim = Simulation::default();
    for line in text.lines() {
        let mut parts = line.splitn(3, ' ');
        let (Some(verb), Some(name), rest) =
            (parts.next(), parts.next(), parts.next().unwrap_or(""))
        else {
            continue;
        };
        let bad = || format!("apt-get -s line not understood: {line:?}");
        match verb {
            "Inst" => {
                let (old, after) = match group(rest, '[', ']') {
                    Some((o, r)) => (Some(o.to_string()), r),
                    None => (None, rest),
                };
                let (new, _) = group(after, '(', ')').ok_or_else(bad)?;
                let new = new.split_whitespace().next().ok_or_else(bad)?.to_string();
                sim.installs.push(SimInstall {
                    name: bare(name),
                    old,
                    new,
                });
            }
            "Remv" | "Purg" => {
                let version = group(rest, '[', ']')
                    .map(|(v, _)| v.to_string())
                    .unwrap_or_default();
                sim.removals.push(SimRemoval {
                    name: bare(name),
                    version,
                    purge: verb == "Purg",
                });
            }
            _ => {}
        }
    }
    Ok(sim)
}

/// The packages a plan's package steps name: installed (with versions), removed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PlanPackages {
    /// From install steps.
    pub install: Vec<PackageSpec>,
    /// From remove/purge steps.
    pub remove: Vec<String>,
}

impl PlanPackages {
    /// The package steps of `steps`.
    pub fn of(steps: &[Step]) -> PlanPackages {
        let mut p = PlanPackages::default();
        for s in steps {
            match s {
                Step::PackageInstall { packages } => p.install.extend(packages.iter().cloned()),
                Step::PackageRemove { packages, .. } => p.remove.extend(packages.iter().cloned()),
                _ => {}
            }
        }
        p
    }
}

/// Holds a simulation to the plan. Refused: a removal of a package the plan does not remove; an
/// upgrade or downgrade of an installed package the plan does not install; a planned package
/// installed at another version than the plan's. New packages the plan does not name are the
/// dependencies of what it installs (apt runs with `--no-install-recommends`): accepted, and
/// returned so the result can list them.
///
/// Errors: a sentence naming every package outside the plan.
pub fn check_simulation(sim: &Simulation, plan: &PlanPackages) -> Result<Vec<SimInstall>, String> {
    let mut wrong = Vec::new();
    for r in &sim.removals {
        if !plan.remove.contains(&r.name) {
            wrong.push(format!("removes {} {}", r.name, r.version));
        }
    }
    let mut deps = Vec::new();
    for i in &sim.installs {
        match plan.install.iter().find(|p| p.name == i.name) {
            Some(p) if p.version.as_deref().is_some_and(|v| v != i.new) => wrong.push(format!(
                "installs {} {} instead of {}",
                i.name,
                i.new,
                p.version.as_deref().unwrap_or("")
            )),
            Some(_) => {}
            None if i.old.is_some() => wrong.push(format!(
                "changes {} from {} to {}",
                i.name,
                i.old.as_deref().unwrap_or(""),
                i.new
            )),
            None => deps.push(i.clone()),
        }
    }
    if wrong.is_empty() {
        Ok(deps)
    } else {
        Err(format!(
            "the simulation (apt-get -s) goes beyond the plan: it {}; nothing was changed",
            wrong.join(", ")
        ))
    }
}

/// The `apt-get` arguments after the options for one package step (`None` for other steps),
/// real or simulated (`-s`).
pub fn step_args(step: &Step, simulate: bool) -> Option<Vec<String>> {
    let mut args: Vec<String> = vec![
        if simulate { "-s" } else { "-y" }.into(),
        "-o".into(),
        "Dpkg::Options::=--force-confold".into(),
        "-o".into(),
        "Dpkg::Options::=--force-confdef".into(),
        "--no-install-recommends".into(),
    ];
    match step {
        Step::PackageRemove { packages, purge } => {
            args.push(if *purge { "purge" } else { "remove" }.into());
            args.push("--".into());
            args.extend(packages.iter().cloned());
        }
        Step::PackageInstall { packages } => {
            args.push("install".into());
            args.push("--".into());
            args.extend(packages.iter().map(PackageSpec::apt_arg));
        }
        _ => return None,
    }
    Some(args)
}

/// The simulation of all the plan's package steps as one apt transaction: `install` of the
/// planned packages with the removed ones as `name-` (`--purge` when a step purges).
pub fn plan_args(steps: &[Step]) -> Option<Vec<String>> {
    let plan = PlanPackages::of(steps);
    if plan.install.is_empty() && plan.remove.is_empty() {
        return None;
    }
    let purge = steps
        .iter()
        .any(|s| matches!(s, Step::PackageRemove { purge: true, .. }));
    let mut args: Vec<String> = vec!["-s".into(), "--no-install-recommends".into()];
    if purge {
        args.push("--purge".into());
    }
    args.push("install".into());
    args.push("--".into());
    args.extend(plan.install.iter().map(PackageSpec::apt_arg));
    args.extend(plan.remove.iter().map(|n| format!("{n}-")));
    Some(args)
}

/// A package name apt takes as a name, not an option or a pattern.
pub fn package_name(s: &str) -> Result<(), String> {
    let ok = !s.is_empty()
        && s.chars().next().is_some_and(|c| c.is_ascii_alphanumeric())
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || "+-.:".contains(c));
    if ok {
        Ok(())
    } else {
        Err(format!("{s:?} is not a Debian package name; refused"))
    }
}

/// Checks every package name and version of the plan's package steps.
///
/// Errors: the first that is not a plain name or version.
pub fn validate(steps: &[Step]) -> Result<(), String> {
    for s in steps {
        match s {
            Step::PackageRemove { packages, .. } | Step::PackageHold { packages } => {
                packages.iter().try_for_each(|p| package_name(p))?
            }
            Step::PackageInstall { packages } => {
                for p in packages {
                    package_name(&p.name)?;
                    if let Some(v) = &p.version {
                        let ok = !v.is_empty()
                            && v.chars()
                                .all(|c| c.is_ascii_alphanumeric() || "+-.~:".contains(c));
                        if !ok {
                            return Err(format!("{v:?} is not a Debian version; refused"));
                        }
                    }
                }
            }
            _ => {}
        }
    }
    Ok(())
}

/// A finished apt run: exit status, the kept log.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct AptRun {
    /// The command line (program and arguments).
    pub command: Vec<String>,
    /// Exit code; `None` when killed or not started.
    pub exit_code: Option<i32>,
    /// Standard output and error, at most [`LOG_KEEP_BYTES`] (head and tail).
    pub log: String,
    /// Bytes of output dropped from the middle of the log.
    #[serde(skip_serializing_if = "is_zero")]
    pub log_dropped_bytes: usize,
    /// Why it did not run to its end (timeout, not installed).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub error: String,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

impl AptRun {
    /// True when it ran and exited 0.
    pub fn ok(&self) -> bool {
        self.exit_code == Some(0) && self.error.is_empty()
    }
}

/// A log bounded to a head and a tail.
struct BoundedLog {
    head: String,
    tail: std::collections::VecDeque<String>,
    tail_bytes: usize,
    dropped: usize,
}

impl BoundedLog {
    fn new() -> Self {
        BoundedLog {
            head: String::new(),
            tail: Default::default(),
            tail_bytes: 0,
            dropped: 0,
        }
    }

    fn push(&mut self, line: &str) {
        if self.head.len() + line.len() < LOG_HEAD_BYTES && self.tail.is_empty() {
            self.head.push_str(line);
            self.head.push('\n');
            return;
        }
        self.tail_bytes += line.len() + 1;
        self.tail.push_back(format!("{line}\n"));
        while self.tail_bytes > LOG_KEEP_BYTES - LOG_HEAD_BYTES {
            let Some(l) = self.tail.pop_front() else {
                break;
            };
            self.tail_bytes -= l.len();
            self.dropped += l.len();
        }
    }

    fn finish(self) -> (String, usize) {
        let mut s = self.head;
        if self.dropped > 0 {
            s.push_str(&format!("[... {} bytes left out ...]\n", self.dropped));
        }
        s.extend(self.tail);
        (s, self.dropped)
    }
}

/// Runs `program` with the env's options and `args` until `timeout`, keeping the log.
pub fn run(env: &AptEnv, program: &PathBuf, args: &[String], timeout: Duration) -> AptRun {
    let mut cmd = env.command(program);
    cmd.args(args);
    let mut command = vec![program.display().to_string()];
    command.extend(cmd.get_args().map(|a| a.to_string_lossy().into_owned()));
    let mut log = BoundedLog::new();
    let r = run_with_timeout(&mut cmd, timeout, |line| log.push(line));
    let mut out = AptRun {
        command,
        ..AptRun::default()
    };
    match r {
        Ok(f) => {
            out.exit_code = f.status.code();
            if !f.stderr.trim().is_empty() {
                log.push("--- standard error ---");
                f.stderr.lines().for_each(|l| log.push(l));
            }
            if out.exit_code.is_none() {
                out.error = format!("{} was killed by a signal", program.display());
            }
        }
        Err(e @ (RunError::NotFound(_) | RunError::Failed(_) | RunError::TimedOut { .. })) => {
            out.error = e.to_string();
        }
    }
    (out.log, out.log_dropped_bytes) = log.finish();
    out
}

/// Simulates the whole plan and holds it to the plan (see [`check_simulation`]), after checking
/// that dpkg is neither locked nor half-way through an earlier run.
///
/// Errors: the refusal, naming the lock, the interrupted packages or the packages outside the
/// plan; with the simulation's run when there was one.
pub fn guard(
    root: &SysRoot,
    env: &AptEnv,
    steps: &[Step],
) -> Result<Vec<SimInstall>, (String, Option<AptRun>)> {
    validate(steps).map_err(|e| (e, None))?;
    ready(root).map_err(|e| (e, None))?;
    let Some(args) = plan_args(steps) else {
        return Ok(Vec::new());
    };
    let sim_run = run(env, &env.apt_get, &args, env.simulate_timeout);
    if !sim_run.ok() {
        let why = if sim_run.error.is_empty() {
            format!("the simulation (apt-get -s) failed with exit code {:?}: apt cannot do this plan as it stands; nothing was changed", sim_run.exit_code)
        } else {
            format!("the simulation (apt-get -s) did not run: {}", sim_run.error)
        };
        return Err((why, Some(sim_run)));
    }
    let sim = match read_simulation(&sim_run) {
        Ok(s) => s,
        Err(e) => return Err((e, Some(sim_run))),
    };
    check_simulation(&sim, &PlanPackages::of(steps)).map_err(|e| (e, Some(sim_run)))
}

/// The simulation in a run's whole log.
///
/// Errors: a log cut in the middle (a transaction that large is far beyond any plan), or a line
/// not understood.
fn read_simulation(r: &AptRun) -> Result<Simulation, String> {
    if r.log_dropped_bytes > 0 {
        return Err(format!(
            "the simulation printed more than {LOG_KEEP_BYTES} bytes: it changes far more than the plan; nothing was changed"
        ));
    }
    parse_simulation(&r.log)
}

/// dpkg is free to use: no lock held, no interrupted package.
///
/// Errors: a sentence saying which.
pub fn ready(root: &SysRoot) -> Result<(), String> {
    if let Some(l) = held_lock(root) {
        return Err(l);
    }
    let cut = read_interrupted(root)
        .map_err(|e| format!("the dpkg status database cannot be read: {e}"))?;
    if !cut.is_empty() {
        return Err(format!(
            "dpkg has packages half-way through an earlier run ({}); run `sudo dpkg --configure -a` (or finish that run) first",
            describe(&cut)
        ));
    }
    Ok(())
}

/// `name version (state)` of each.
pub fn describe(cut: &[Interrupted]) -> String {
    cut.iter()
        .map(|p| format!("{} {} ({})", p.name, p.version, p.state))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Runs one package step for real: the step simulated again on its own and held to the plan
/// (the board may have changed since the plan's simulation), then `apt-get -y ...`, or
/// `apt-mark hold`. Install steps whose simulation removes nothing run with `--no-remove`.
///
/// Errors: the refusal or failure as a sentence, with the run when there was one.
pub fn run_step(
    root: &SysRoot,
    env: &AptEnv,
    steps: &[Step],
    step: &Step,
) -> Result<AptRun, (String, Option<AptRun>)> {
    ready(root).map_err(|e| (e, None))?;
    if let Step::PackageHold { packages } = step {
        let mut args = vec!["hold".to_string(), "--".to_string()];
        args.extend(packages.iter().cloned());
        let r = run(env, &env.apt_mark, &args, env.simulate_timeout);
        return if r.ok() {
            Ok(r)
        } else {
            Err((format!("apt-mark hold failed: {}", failure(&r)), Some(r)))
        };
    }
    let (Some(sim_args), Some(mut args)) = (step_args(step, true), step_args(step, false)) else {
        return Err((format!("{} is not a package step", step.text(false)), None));
    };
    let sim_run = run(env, &env.apt_get, &sim_args, env.simulate_timeout);
    let sim = if sim_run.ok() {
        read_simulation(&sim_run).map_err(|e| (e, Some(sim_run.clone())))?
    } else {
        return Err((
            format!("the simulation of this step failed: {}", failure(&sim_run)),
            Some(sim_run),
        ));
    };
    check_simulation(&sim, &PlanPackages::of(steps)).map_err(|e| (e, Some(sim_run)))?;
    if matches!(step, Step::PackageInstall { .. }) && sim.removals.is_empty() {
        args.insert(1, "--no-remove".into());
    }
    let r = run(env, &env.apt_get, &args, env.run_timeout);
    if r.ok() {
        Ok(r)
    } else {
        Err((format!("apt-get failed: {}", failure(&r)), Some(r)))
    }
}

/// Why a run failed, in a few words.
fn failure(r: &AptRun) -> String {
    if !r.error.is_empty() {
        return r.error.clone();
    }
    let last = r
        .log
        .lines()
        .rev()
        .find(|l| l.starts_with("E:"))
        .unwrap_or("")
        .to_string();
    format!(
        "exit code {:?}{}",
        r.exit_code,
        if last.is_empty() {
            String::new()
        } else {
            format!(": {last}")
        }
    )
}

#[cfg(test)]
#[path = "apt_tests.rs"]
mod tests;
