//! A [`FixPlan`] in words for a person: each finding with its numbered steps (packages with
//! versions, each file with the lines it gets, units to restart, a reboot), the findings without
//! an automatic fix and why, then the changes added up.

use super::{file_lines, FixPlan, NoFix, Outcome, PlanEntry};
use crate::model::remedy::{PackageSpec, Step};
use std::fmt::Write as _;

/// `name=version` for an exact version, else `name (candidate version)`.
fn package(p: &PackageSpec) -> String {
    match &p.version {
        Some(_) => p.apt_arg(),
        None => format!("{} (candidate version)", p.name),
    }
}

/// One step in words, with the lines a file gets on the lines after it (indented by `pad`).
pub fn step_text(step: &Step, pad: &str) -> String {
    let file = file_lines(step)
        .map(|f| {
            let mut s = format!("{}:", f.path);
            for l in &f.lines {
                let _ = write!(s, "\n{pad}    {l}");
            }
            s
        })
        .unwrap_or_default();
    match step {
        Step::PackageRemove { packages, purge } => format!(
            "{} packages: {}",
            if *purge {
                "purge (with their configuration files)"
            } else {
                "remove"
            },
            packages.join(", ")
        ),
        Step::PackageInstall { packages } => format!(
            "install packages: {}",
            packages.iter().map(package).collect::<Vec<_>>().join(", ")
        ),
        Step::PackageHold { packages } => {
            format!("hold packages (apt-mark hold): {}", packages.join(", "))
        }
        Step::UnitDropIn { unit, .. } => format!("drop-in for {unit}, write {file}"),
        Step::DaemonReload => "reload systemd's units (systemctl daemon-reload)".into(),
        Step::RestartUnit { unit } => format!("restart {unit}"),
        Step::ModuleOption { module, .. } => {
            format!("option for {module} (read when it next loads), write {file}")
        }
        Step::BootKey { key, .. } => format!("set {key} in {file}"),
        Step::Sysctl { .. } => format!("sysctl, applied now and at every boot, write {file}"),
        Step::RebootNeeded => "reboot needed: the steps above take effect after it".into(),
    }
}

/// An entry's head line: check id, status and summary.
fn head(e: &PlanEntry) -> String {
    if e.summary.is_empty() {
        return e.check.clone();
    }
    format!("{} ({}): {}", e.check, e.status.as_str(), e.summary)
}

impl FixPlan {
    /// The plan for a person.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let with: Vec<&PlanEntry> = self
            .entries
            .iter()
            .filter(|e| !matches!(e.outcome, Outcome::NoFix { .. }))
            .collect();
        let without: Vec<&PlanEntry> = self
            .entries
            .iter()
            .filter(|e| matches!(e.outcome, Outcome::NoFix { .. }))
            .collect();
        if self.entries.is_empty() {
            out.push_str("Nothing to fix: no check fires.\n");
            return out;
        }
        if with.is_empty() {
            out.push_str("No automatic fix for any finding.\n");
        } else {
            let _ = writeln!(out, "Fix plan ({} finding(s) with steps):", with.len());
        }
        for e in &with {
            let _ = writeln!(out, "\n{}", head(e));
            match &e.outcome {
                Outcome::Steps { remedy } => {
                    if !remedy.note.is_empty() {
                        let _ = writeln!(out, "  {}", remedy.note);
                    }
                    for (i, s) in remedy.steps.iter().enumerate() {
                        let _ = writeln!(out, "  {}. {}", i + 1, step_text(s, "    "));
                    }
                }
                Outcome::SameAs { check } => {
                    let _ = writeln!(out, "  the same steps as {check}");
                }
                Outcome::NoFix { .. } => {}
            }
        }
        if !without.is_empty() {
            let _ = writeln!(out, "\nNo automatic fix:");
            for e in &without {
                if let Outcome::NoFix { reason, advice } = &e.outcome {
                    let _ = writeln!(out, "- {}", head(e));
                    let _ = writeln!(out, "  why: {}", reason.text());
                    if !advice.is_empty() && *reason != NoFix::NotFiring {
                        let _ = writeln!(out, "  what to do: {advice}");
                    }
                }
            }
        }
        if !with.is_empty() {
            self.render_changes(&mut out);
        }
        out
    }

    /// The changes added up, each once.
    fn render_changes(&self, out: &mut String) {
        let c = &self.changes;
        let _ = writeln!(out, "\nIn all:");
        let list = |name: &str, items: &[String], out: &mut String| {
            if !items.is_empty() {
                let _ = writeln!(out, "  {name}: {}", items.join(", "));
            }
        };
        list("packages to purge", &c.purge, out);
        list("packages to remove", &c.remove, out);
        let install: Vec<String> = c.install.iter().map(package).collect();
        list("packages to install", &install, out);
        list("packages to hold", &c.hold, out);
        for f in &c.files {
            let _ = writeln!(out, "  file {} gets:", f.path);
            for l in &f.lines {
                let _ = writeln!(out, "      {l}");
            }
        }
        list("sysctl applied now", &c.sysctl_now, out);
        if c.daemon_reload {
            let _ = writeln!(out, "  systemd reloads its units");
        }
        list("units to restart", &c.restart, out);
        let _ = writeln!(
            out,
            "  reboot needed: {}",
            if c.reboot_needed { "yes" } else { "no" }
        );
    }
}
