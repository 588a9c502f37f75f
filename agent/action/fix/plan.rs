//! The plan of a fix: steps per finding, or why there is no automatic fix.
//!
//! Pure: the findings of one diagnosis in, a [`FixPlan`] out. Every fired finding (or every
//! finding of the check ids named) gets an entry: its typed remedy's steps, the same steps as an
//! earlier entry, or "no automatic fix" with the reason. [`FixPlan::render`] says it for a person
//! (packages with versions, each file with the lines it gets, units to restart, whether a reboot
//! is needed); the plan serializes for the remote command's result.

mod render;
pub use render::step_text;

use crate::check::stack::lacked_tool;
use crate::model::remedy::{PackageSpec, Remedy, Step};
use crate::model::{Finding, Status};
use serde::{Deserialize, Serialize};

/// What `fix` would do on this board, finding by finding, and the changes it adds up to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FixPlan {
    /// One entry per finding planned, in report order.
    pub entries: Vec<PlanEntry>,
    /// Every change the steps add up to.
    pub changes: Changes,
}

/// One finding's part of the plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlanEntry {
    /// Check id (`hailo.package_generation`).
    pub check: String,
    /// The finding's status.
    pub status: Status,
    /// The finding's summary.
    pub summary: String,
    /// Its steps, or why there are none.
    pub outcome: Outcome,
}

/// A finding's steps, or why it has none.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Outcome {
    /// The typed remedy's steps.
    Steps {
        /// The remedy: its note and steps.
        remedy: Remedy,
    },
    /// The same steps as an earlier entry (two checks, one cause).
    SameAs {
        /// The earlier entry's check id.
        check: String,
    },
    /// No automatic fix.
    NoFix {
        /// Why.
        reason: NoFix,
        /// The printed remedy (advice a person carries out), empty for none.
        #[serde(default, skip_serializing_if = "String::is_empty")]
        advice: String,
    },
}

/// Why a finding has no automatic fix.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "reason", rename_all = "snake_case")]
pub enum NoFix {
    /// The finding has no remedy at all.
    NoRemedy,
    /// The remedy is advice for a person (update a container image, reseat a cable, boot another
    /// kernel), or a command the agent does not carry out.
    AdviceOnly,
    /// The usual fix needs a tool this board lacks (`apt-get` on Home Assistant OS).
    ToolMissing {
        /// The tool.
        tool: String,
    },
    /// The check does not fire (pass, skip or error): nothing to fix.
    NotFiring,
    /// No finding has this check id.
    UnknownCheck,
}

impl NoFix {
    /// The reason in words.
    pub fn text(&self) -> String {
        match self {
            NoFix::NoRemedy => "the finding has no remedy".into(),
            NoFix::AdviceOnly => {
                "the remedy is advice for a person, not steps the agent runs".into()
            }
            NoFix::ToolMissing { tool } => {
                format!("the usual fix needs `{tool}`, which this board does not have")
            }
            NoFix::NotFiring => "the check does not fire: nothing to fix".into(),
            NoFix::UnknownCheck => "no such check id (see docs/user-guide.md \"Checks\")".into(),
        }
    }
}

/// One file a plan writes and the lines it gets.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileChange {
    /// Board path.
    pub path: String,
    /// The lines it gets (or that replace the key's line), in order.
    pub lines: Vec<String>,
}

/// Every change the plan's steps add up to, each once.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Changes {
    /// Packages purged (configuration files too).
    pub purge: Vec<String>,
    /// Packages removed (configuration files kept).
    pub remove: Vec<String>,
    /// Packages installed, each with its exact version or none (the candidate).
    pub install: Vec<PackageSpec>,
    /// Packages held (`apt-mark hold`).
    pub hold: Vec<String>,
    /// Files written, with their new lines.
    pub files: Vec<FileChange>,
    /// sysctl keys applied now (`key = value`).
    pub sysctl_now: Vec<String>,
    /// `systemctl daemon-reload` runs.
    pub daemon_reload: bool,
    /// Units restarted.
    pub restart: Vec<String>,
    /// A reboot is needed before the changes take effect.
    pub reboot_needed: bool,
}

impl FixPlan {
    /// True when some entry has steps to carry out.
    pub fn has_steps(&self) -> bool {
        self.entries
            .iter()
            .any(|e| matches!(e.outcome, Outcome::Steps { .. }))
    }

    /// Every entry's steps in plan order (an entry that repeats another's adds none).
    pub fn steps(&self) -> impl Iterator<Item = (&str, &Step)> {
        steps_of(&self.entries)
    }
}

/// The entries' steps in order, each with its entry's check id.
fn steps_of(entries: &[PlanEntry]) -> impl Iterator<Item = (&str, &Step)> {
    entries.iter().flat_map(|e| {
        let steps: &[Step] = match &e.outcome {
            Outcome::Steps { remedy } => &remedy.steps,
            _ => &[],
        };
        steps.iter().map(move |s| (e.check.as_str(), s))
    })
}

/// The plan for `findings`: every fired finding when `only` is empty, else every finding of the
/// check ids in `only` (and an entry for a named id no finding has).
pub fn plan(findings: &[Finding], only: &[String]) -> FixPlan {
    let mut entries: Vec<PlanEntry> = Vec::new();
    let mut named: Vec<&str> = Vec::new();
    for id in only {
        if !named.contains(&id.as_str()) {
            named.push(id);
        }
    }
    for f in findings {
        let wanted = if named.is_empty() {
            f.status.fires()
        } else {
            named.contains(&f.id.as_str())
        };
        if wanted {
            let outcome = outcome_of(f, &entries);
            entries.push(PlanEntry {
                check: f.id.clone(),
                status: f.status,
                summary: f.summary.clone(),
                outcome,
            });
        }
    }
    for id in named {
        if !findings.iter().any(|f| f.id == id) {
            entries.push(PlanEntry {
                check: id.to_string(),
                status: Status::Skip,
                summary: String::new(),
                outcome: Outcome::NoFix {
                    reason: NoFix::UnknownCheck,
                    advice: String::new(),
                },
            });
        }
    }
    let changes = changes_of(&entries);
    FixPlan { entries, changes }
}

/// One finding's outcome; `before` are the entries planned so far.
fn outcome_of(f: &Finding, before: &[PlanEntry]) -> Outcome {
    let no_fix = |reason: NoFix| Outcome::NoFix {
        reason,
        advice: f.remedy.clone(),
    };
    if !f.status.fires() {
        return no_fix(NoFix::NotFiring);
    }
    let Some(fix) = f.fix.as_ref().filter(|r| !r.steps.is_empty()) else {
        if f.remedy.is_empty() {
            return no_fix(NoFix::NoRemedy);
        }
        return match lacked_tool(&f.remedy) {
            Some(tool) => no_fix(NoFix::ToolMissing { tool: tool.into() }),
            None => no_fix(NoFix::AdviceOnly),
        };
    };
    let same = before.iter().find(|e| match &e.outcome {
        Outcome::Steps { remedy } => remedy.steps == fix.steps,
        _ => false,
    });
    match same {
        Some(e) => Outcome::SameAs {
            check: e.check.clone(),
        },
        None => Outcome::Steps {
            remedy: fix.clone(),
        },
    }
}

/// The board path a file step writes and the lines it gets; `None` for a step that writes no
/// file.
pub fn file_lines(step: &Step) -> Option<FileChange> {
    let (path, lines) = match step {
        Step::UnitDropIn {
            unit,
            file,
            section,
            settings,
        } => (
            format!("/etc/systemd/system/{unit}.d/{file}"),
            std::iter::once(format!("[{section}]"))
                .chain(settings.iter().map(|(k, v)| format!("{k}={v}")))
                .collect(),
        ),
        Step::ModuleOption {
            module,
            file,
            key,
            value,
        } => (
            format!("/etc/modprobe.d/{file}"),
            vec![format!("options {module} {key}={value}")],
        ),
        Step::BootKey { file, key, value } => (file.clone(), vec![format!("{key}={value}")]),
        Step::Sysctl { key, value, file } => (
            format!("/etc/sysctl.d/{file}"),
            vec![format!("{key} = {value}")],
        ),
        _ => return None,
    };
    Some(FileChange { path, lines })
}

/// Adds `item` to `list` unless it is there.
fn push_new<T: PartialEq>(list: &mut Vec<T>, item: T) {
    if !list.contains(&item) {
        list.push(item);
    }
}

/// Every change of the entries' steps, each once.
fn changes_of(entries: &[PlanEntry]) -> Changes {
    let mut c = Changes::default();
    for (_, step) in steps_of(entries) {
        if let Some(fc) = file_lines(step) {
            match c.files.iter_mut().find(|f| f.path == fc.path) {
                Some(f) => {
                    for l in fc.lines {
                        push_new(&mut f.lines, l);
                    }
                }
                None => c.files.push(fc),
            }
        }
        match step {
            Step::PackageRemove { packages, purge } => {
                let list = if *purge { &mut c.purge } else { &mut c.remove };
                for p in packages {
                    push_new(list, p.clone());
                }
            }
            Step::PackageInstall { packages } => {
                for p in packages {
                    push_new(&mut c.install, p.clone());
                }
            }
            Step::PackageHold { packages } => {
                for p in packages {
                    push_new(&mut c.hold, p.clone());
                }
            }
            Step::Sysctl { key, value, .. } => {
                push_new(&mut c.sysctl_now, format!("{key} = {value}"))
            }
            Step::DaemonReload => c.daemon_reload = true,
            Step::RestartUnit { unit } => push_new(&mut c.restart, unit.clone()),
            Step::RebootNeeded => c.reboot_needed = true,
            Step::UnitDropIn { .. } | Step::ModuleOption { .. } | Step::BootKey { .. } => {}
        }
    }
    c
}

#[cfg(test)]
mod tests;
