//! `fix` as one action: the plan from a diagnosis, the refusals that need the board, the steps
//! carried out ([`super::apply`]), a second diagnosis, and the verdict: fixed only when every
//! finding it planned for no longer fires, or is waiting for a reboot the result names.
//!
//! The executor ([`crate::action::executor`]) is the only caller; the command line and the
//! remote command both reach this through it.

use super::apply::{apply_telling, ApplyEnv, ApplyOutcome, ApplyResult};
use super::plan::{plan, FixPlan, Outcome};
use crate::action::reboot::{RebootState, REBOOT_FILE};
use crate::action::state::StateDir;
use crate::model::remedy::Step;
use crate::model::{Finding, Status};
use crate::root::SysRoot;
use serde::Serialize;

/// How a `fix` ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FixResult {
    /// `dry_run`: the plan only.
    Planned,
    /// Applied, and no planned finding fires any more.
    Fixed,
    /// Applied; the change takes effect after a reboot (the findings are checked then).
    RebootNeeded,
    /// Applied, but a planned finding still fires.
    StillFiring,
    /// Refused before the first step: nothing changed.
    Refused,
    /// A step failed (file steps before it undone; the apply report says what dpkg is in).
    Failed,
}

/// One finding in a before/after comparison.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FindingBrief {
    /// Check id.
    pub check: String,
    /// Its status.
    pub status: Status,
}

/// What `fix` did: the plan, the steps' report, and the findings before and after.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FixReport {
    /// How it ended.
    pub result: FixResult,
    /// One line: what happened, or why not.
    pub message: String,
    /// The plan it carried out (or would).
    pub plan: FixPlan,
    /// The steps as carried out; absent for a dry run or a refusal before any step.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub applied: Option<ApplyOutcome>,
    /// The planned findings before.
    pub before: Vec<FindingBrief>,
    /// The same findings after (empty when nothing ran or the second diagnosis failed).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub after: Vec<FindingBrief>,
}

/// The checks whose findings the plan carries steps for (an entry that shares another's steps
/// counts: the same steps fix it).
fn planned_checks(p: &FixPlan) -> Vec<String> {
    p.entries
        .iter()
        .filter(|e| matches!(e.outcome, Outcome::Steps { .. } | Outcome::SameAs { .. }))
        .map(|e| e.check.clone())
        .collect()
}

/// `checks`' statuses among `findings`, in `checks` order (a check no finding has is left out).
fn briefs(findings: &[Finding], checks: &[String]) -> Vec<FindingBrief> {
    checks
        .iter()
        .filter_map(|c| findings.iter().find(|f| &f.id == c))
        .map(|f| FindingBrief {
            check: f.id.clone(),
            status: f.status,
        })
        .collect()
}

/// The plan's steps in order, each once.
fn unique_steps(p: &FixPlan) -> Vec<Step> {
    let mut steps: Vec<Step> = Vec::new();
    for (_, s) in p.steps() {
        if !steps.contains(s) {
            steps.push(s.clone());
        }
    }
    steps
}

/// Why nothing can be applied: each named or fired finding with the reason it has no steps.
fn nothing_to_apply(p: &FixPlan) -> String {
    let reasons: Vec<String> = p
        .entries
        .iter()
        .filter_map(|e| match &e.outcome {
            Outcome::NoFix { reason, .. } => Some(format!("{}: {}", e.check, reason.text())),
            _ => None,
        })
        .collect();
    if reasons.is_empty() {
        "no finding fires: nothing to fix".into()
    } else {
        format!("no automatic fix ({})", reasons.join("; "))
    }
}

/// Why a fix must wait: a reboot in progress (`reboot.json` has a pending intent), or a
/// verified boot-file edit (`set_cma`, `boot_edit.json`) that waits for a reboot of this boot
/// (`boot_id`): a fix on top of it would plan against a kernel about to change.
///
/// Errors: none; an unreadable `reboot.json` or `boot_edit.json` is itself a reason to wait.
fn reboot_pending(state: &StateDir) -> Option<String> {
    if let Some(why) = boot_edit_pending(state) {
        return Some(why);
    }
    match state.load::<RebootState>(REBOOT_FILE) {
        Ok(Some(RebootState {
            pending: Some(p), ..
        })) => Some(format!(
            "a reboot is pending (command {}); fix after it",
            p.cmd_id
        )),
        Ok(_) => None,
        Err(e) => Some(format!(
            "the reboot state cannot be read ({e}); fix after it is repaired"
        )),
    }
}

/// A verified boot-file edit made in this boot (same `boot_id`, or none readable) that still
/// waits for its reboot.
fn boot_edit_pending(state: &StateDir) -> Option<String> {
    use crate::action::state::{BootEditState, BOOT_EDIT_FILE};
    let e = match state.load::<BootEditState>(BOOT_EDIT_FILE) {
        Ok(Some(e)) => e,
        Ok(None) => return None,
        Err(e) => {
            return Some(format!(
                "the boot-file edit state cannot be read ({e}); fix after it is repaired"
            ))
        }
    };
    let booted = crate::action::read_boot_id(state.root())
        .is_some_and(|now| !e.boot_id.is_empty() && now != e.boot_id);
    (e.verified && e.reboot_required && !booted).then(|| {
        format!(
            "a reboot is pending (the boot-file edit to {} waits for it); fix after it",
            e.requested
        )
    })
}

/// The refusals [`run_fix`] would give before any step, asked before a remote `fix` is
/// answered `executing`: nothing to apply, or a reboot pending (a dry run is never refused).
///
/// Errors: the reason.
pub fn preflight(
    state: &StateDir,
    findings: &[Finding],
    checks: &[String],
    dry_run: bool,
) -> Result<(), String> {
    let p = plan(findings, checks);
    if !p.has_steps() {
        return Err(nothing_to_apply(&p));
    }
    if dry_run {
        return Ok(());
    }
    if let Some(why) = reboot_pending(state) {
        return Err(why);
    }
    outside_sandbox(state.root(), &p).map(|_| ())
}

/// Whether the plan's steps must run outside this process's sandbox
/// ([`super::delegate`]): some place they write is read-only here, and systemd can run them.
///
/// Errors: that place, when nothing can run the steps elsewhere.
pub fn outside_sandbox(root: &SysRoot, p: &FixPlan) -> Result<bool, String> {
    match super::apply::writable(root, &unique_steps(p)) {
        Ok(()) => Ok(false),
        Err(_) if super::delegate::available(root) => Ok(true),
        Err(e) => Err(e),
    }
}

/// What a `fix` needs besides the plan's inputs.
pub struct FixContext<'a> {
    /// The board tree.
    pub root: &'a SysRoot,
    /// The agent's state directory (`reboot.json`).
    pub state: &'a StateDir,
    /// The tools the steps may use.
    pub env: &'a ApplyEnv,
    /// Told each step as it starts ([`super::apply::apply_telling`]).
    pub on_step: &'a dyn Fn(&str),
}

/// Plans the fix of `checks` (every fired finding when empty) from `findings`; unless
/// `dry_run`, carries it out and judges it by `rediagnose` (the findings after, or why there
/// are none).
pub fn run_fix(
    cx: &FixContext<'_>,
    findings: &[Finding],
    checks: &[String],
    dry_run: bool,
    rediagnose: &dyn Fn() -> Result<Vec<Finding>, String>,
) -> FixReport {
    let p = plan(findings, checks);
    let planned = planned_checks(&p);
    let mut r = FixReport {
        result: FixResult::Refused,
        message: String::new(),
        before: briefs(findings, &planned),
        plan: p,
        applied: None,
        after: Vec::new(),
    };
    if !r.plan.has_steps() {
        r.message = nothing_to_apply(&r.plan);
        return r;
    }
    if dry_run {
        r.result = FixResult::Planned;
        r.message = format!("planned for {}; nothing changed", planned.join(", "));
        return r;
    }
    if let Some(why) = reboot_pending(cx.state) {
        r.message = why;
        return r;
    }
    let outcome = apply_telling(cx.root, &unique_steps(&r.plan), cx.env, cx.on_step);
    let (result, error, reboot) = (outcome.result, outcome.error.clone(), outcome.reboot_needed);
    r.applied = Some(outcome);
    match result {
        ApplyResult::Refused => {
            r.message = error;
            return r;
        }
        ApplyResult::Failed => {
            r.result = FixResult::Failed;
            r.message = error;
            return r;
        }
        ApplyResult::Applied => {}
    }
    judge(&mut r, &planned, reboot, rediagnose());
    r
}

/// The verdict after the steps ran: `after` is the second diagnosis's findings.
fn judge(r: &mut FixReport, planned: &[String], reboot: bool, after: Result<Vec<Finding>, String>) {
    let after = match after {
        Ok(f) => f,
        Err(e) => {
            r.result = FixResult::StillFiring;
            r.message = format!("applied, but the board could not be diagnosed again: {e}");
            return;
        }
    };
    r.after = briefs(&after, planned);
    let firing: Vec<&str> = r
        .after
        .iter()
        .filter(|b| b.status.fires())
        .map(|b| b.check.as_str())
        .collect();
    (r.result, r.message) = if firing.is_empty() {
        let later = if reboot {
            " (the change takes full effect after a reboot)"
        } else {
            ""
        };
        (
            FixResult::Fixed,
            format!("fixed: {}{later}", planned.join(", ")),
        )
    } else if reboot {
        (
            FixResult::RebootNeeded,
            format!(
                "applied; a reboot is needed before {} can pass",
                firing.join(", ")
            ),
        )
    } else {
        (
            FixResult::StillFiring,
            format!("applied, but {} still fires", firing.join(", ")),
        )
    };
}

#[cfg(test)]
#[path = "run_tests.rs"]
mod tests;
