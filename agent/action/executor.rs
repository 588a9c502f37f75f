//! The one executor: every action, whatever asked for it (an MQTT command, a Home Assistant
//! button, the planner, the command line), runs through [`Executor::run`] after the gate
//! admitted it, and ends as a typed [`ActionOutcome`]. The action modules keep their own
//! reports; the conversions to an outcome live here, at the boundary.
//!
//! Policy refusals that need the board (a `set_cma` size out of range, a reboot its guards
//! refuse, `release_npu` without hailo-ollama) are [`Executor::preflight`], asked before a
//! command is answered `executing`.

use super::cma::{CmaSetOutcome, CmaSetReport};
use super::compact::{CompactOutcome, CompactReport};
use super::fix::run::{FixReport, FixResult};
use super::reboot::RebootProgress;
use super::state::StateDir;
use super::ActionConfig;
use crate::diagnose::{self, Diagnosis, ProfileChoice};
use crate::model::action::ActionKind;
use crate::model::action::{Action, ActionOutcome};
use crate::root::SysRoot;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// One action to run.
#[derive(Clone)]
pub struct ExecJob {
    /// What to do.
    pub action: Action,
    /// The command's id (a reboot's intent is recorded under it); `None` for local origins.
    pub cmd_id: Option<String>,
    /// Recorded with a compaction as what asked for it: `command`, `planner` or `cli`.
    pub trigger: &'static str,
    /// Only show what would change (`compact` and `set_cma` from the command line).
    pub dry_run: bool,
    /// The diagnosis to act on (`set_cma`); made when absent.
    pub diagnosis: Option<Arc<Diagnosis>>,
    /// Unix seconds now (the caller's clock).
    pub now_s: i64,
    /// Told each step of a `fix` as it starts (the daemon publishes it with `executing`).
    pub on_step: Option<OnStep>,
}

pub use super::fix::OnStep;

impl ExecJob {
    /// A job for `action` at `now_s`, from a local origin, with no diagnosis yet.
    pub fn new(action: Action, trigger: &'static str, now_s: i64) -> ExecJob {
        ExecJob {
            action,
            cmd_id: None,
            trigger,
            dry_run: false,
            diagnosis: None,
            now_s,
            on_step: None,
        }
    }
}

/// The action's own report, for a caller that renders it (the command line).
#[derive(Debug)]
pub enum ActionReport {
    /// `compact`.
    Compact(Box<CompactReport>),
    /// `set_cma`.
    CmaSet(CmaSetReport),
    /// `fix`.
    Fix(Box<FixReport>),
    /// Any other action: the outcome says it all.
    Other,
}

/// What [`Executor::execute`] returns: the outcome, the report, and for a rescan the diagnosis.
pub struct Executed {
    /// How it ended.
    pub outcome: ActionOutcome,
    /// The action module's report.
    pub report: ActionReport,
    /// A rescan's diagnosis (published as is, not made again).
    pub diagnosis: Option<Arc<Diagnosis>>,
}

/// Runs actions on one board tree.
#[derive(Debug, Clone)]
pub struct Executor {
    root: SysRoot,
    state: StateDir,
    actions: ActionConfig,
    profile: ProfileChoice,
}

impl Executor {
    /// An executor acting under `root`, recording in `state`, with the `[actions]` settings and
    /// the board's profile choice (for the diagnoses it makes).
    pub fn new(
        root: SysRoot,
        state: StateDir,
        actions: ActionConfig,
        profile: ProfileChoice,
    ) -> Executor {
        Executor {
            root,
            state,
            actions,
            profile,
        }
    }

    /// The `[actions]` settings.
    pub fn actions(&self) -> &ActionConfig {
        &self.actions
    }

    /// Runs `job` (blocking) and says how it ended.
    pub fn run(&self, job: ExecJob) -> ActionOutcome {
        self.execute(job).outcome
    }

    /// Runs `job` (blocking): the outcome with the action's report and a rescan's diagnosis.
    /// Every action's start and outcome are logged (target `action::executor`).
    pub fn execute(&self, job: ExecJob) -> Executed {
        let action = job.action.name();
        let (trigger, dry_run) = (job.trigger, job.dry_run);
        let cmd_id = job.cmd_id.clone().unwrap_or_default();
        tracing::info!(
            action,
            trigger,
            dry_run,
            cmd_id = cmd_id.as_str(),
            "action started"
        );
        let done = self.execute_inner(job);
        let o = &done.outcome;
        if o.ok {
            tracing::info!(
                action,
                trigger,
                cmd_id = cmd_id.as_str(),
                reboot_pending = o.reboot_pending,
                "action succeeded: {}",
                o.message
            );
        } else if o.ran {
            tracing::warn!(
                action,
                trigger,
                cmd_id = cmd_id.as_str(),
                "action failed: {}",
                o.message
            );
        } else {
            tracing::warn!(
                action,
                trigger,
                cmd_id = cmd_id.as_str(),
                "action refused: {}",
                o.message
            );
        }
        done
    }

    /// [`Executor::execute`] without the log lines.
    fn execute_inner(&self, job: ExecJob) -> Executed {
        let other = |outcome| Executed {
            outcome,
            report: ActionReport::Other,
            diagnosis: None,
        };
        match job.action {
            Action::Rescan => self.rescan(),
            Action::Compact { drop_caches } => {
                use super::compact::{run_compaction, CompactOptions, RootKnobs};
                let opts = CompactOptions {
                    drop_caches,
                    dry_run: job.dry_run,
                    trigger: job.trigger.into(),
                    ..CompactOptions::default()
                };
                let mut knobs = RootKnobs::new(&self.root);
                let r = run_compaction(&self.root, &mut knobs, &opts, &self.state, job.now_s);
                Executed {
                    outcome: ActionOutcome::from(&r),
                    report: ActionReport::Compact(Box::new(r)),
                    diagnosis: None,
                }
            }
            Action::SetCma { size } => {
                let d = match self.diagnosis(job.diagnosis) {
                    Ok(d) => d,
                    Err(e) => return other(ActionOutcome::refused(e, Value::Null)),
                };
                let r = super::cma::cma_set(
                    &self.root,
                    &d,
                    &size,
                    job.dry_run,
                    &mut super::atomic::RealStorage,
                    &self.state,
                    job.now_s,
                );
                Executed {
                    outcome: ActionOutcome::from(&r),
                    report: ActionReport::CmaSet(r),
                    diagnosis: None,
                }
            }
            Action::Reboot { reason } => other(self.reboot(job.cmd_id, &reason, job.now_s)),
            Action::ReleaseNpu { model } => {
                other(super::release_npu::release_npu(&self.root, model))
            }
            Action::Fix { checks, dry_run } => {
                let on_step = job.on_step.unwrap_or_else(|| Arc::new(|_: &str| {}));
                self.fix(job.diagnosis, &checks, dry_run || job.dry_run, on_step)
            }
            Action::Capture { max_bytes } => other(self.capture(max_bytes)),
            Action::Update {
                version,
                allow_downgrade,
            } => other(super::update_run::run(
                &self.root,
                &self.state,
                job.cmd_id,
                &version,
                allow_downgrade,
                job.now_s,
            )),
        }
    }

    /// `capture`: the redacted support bundle, with its size and SHA-256. The bytes are the
    /// outcome's attachment, which the daemon publishes in chunks.
    fn capture(&self, max_bytes: u64) -> ActionOutcome {
        let (bundle, manifest) = match crate::capture::bundle(&self.root, &self.profile, true) {
            Ok(b) => b,
            Err(e) => return ActionOutcome::failed(e.to_string(), Value::Null),
        };
        let bytes = bundle.len() as u64;
        if bytes > max_bytes {
            return ActionOutcome::failed(
                format!("the bundle is {bytes} bytes, over max_bytes ({max_bytes})"),
                json!({ "bytes": bytes }),
            );
        }
        let sha256 = crate::mqtt::chunks::sha256_hex(&bundle);
        let chunks = bundle.len().div_ceil(crate::mqtt::chunks::CHUNK_BYTES);
        let files = manifest.files.len();
        let mut o = ActionOutcome::succeeded(
            format!("support bundle of {bytes} bytes, {files} files"),
            json!({"bytes": bytes, "sha256": sha256, "chunks": chunks, "files": files}),
        );
        o.attachment = bundle;
        o
    }

    /// `fix`: plan from the diagnosis, carry it out, diagnose again (that diagnosis is returned
    /// for the status).
    fn fix(
        &self,
        d: Option<Arc<Diagnosis>>,
        checks: &[String],
        dry_run: bool,
        on_step: OnStep,
    ) -> Executed {
        use super::fix::run::{run_fix, FixContext};
        let d = match self.diagnosis(d) {
            Ok(d) => d,
            Err(e) => {
                return Executed {
                    outcome: ActionOutcome::refused(e, Value::Null),
                    report: ActionReport::Other,
                    diagnosis: None,
                }
            }
        };
        let p = super::fix::plan::plan(&d.report.findings, checks);
        if !dry_run && super::fix::run::outside_sandbox(&self.root, &p) == Ok(true) {
            let outcome = super::fix::delegate::run(
                checks,
                &self.profile,
                &self.state,
                crate::action::now_unix_s(),
                on_step,
            );
            let again = diagnose::diagnose(&self.root, &self.profile).ok();
            return Executed {
                outcome,
                report: ActionReport::Other,
                diagnosis: again.map(Arc::new),
            };
        }
        let env = super::fix::apply::ApplyEnv::for_root(&self.root);
        let cx = FixContext {
            root: &self.root,
            state: &self.state,
            env: &env,
            on_step: &*on_step,
        };
        let again: std::cell::RefCell<Option<Arc<Diagnosis>>> = std::cell::RefCell::new(None);
        let rediagnose = || {
            let d = diagnose::diagnose(&self.root, &self.profile).map_err(|e| e.to_string())?;
            let findings = d.report.findings.clone();
            *again.borrow_mut() = Some(Arc::new(d));
            Ok(findings)
        };
        let r = run_fix(&cx, &d.report.findings, checks, dry_run, &rediagnose);
        Executed {
            outcome: ActionOutcome::from(&r),
            report: ActionReport::Fix(Box::new(r)),
            diagnosis: again.into_inner(),
        }
    }

    fn rescan(&self) -> Executed {
        match diagnose::diagnose(&self.root, &self.profile) {
            Ok(d) => {
                let r = &d.report;
                let fail: Vec<&str> = r
                    .findings
                    .iter()
                    .filter(|f| f.status == crate::check::Status::Fail)
                    .map(|f| f.id.as_str())
                    .collect();
                let outcome = ActionOutcome::succeeded(
                    format!("health {:?}", r.health),
                    json!({"health": r.health, "fail": fail}),
                );
                Executed {
                    outcome,
                    report: ActionReport::Other,
                    diagnosis: Some(Arc::new(d)),
                }
            }
            Err(e) => Executed {
                outcome: ActionOutcome::failed(e.to_string(), Value::Null),
                report: ActionReport::Other,
                diagnosis: None,
            },
        }
    }

    fn reboot(&self, cmd_id: Option<String>, reason: &str, now: i64) -> ActionOutcome {
        use super::reboot::{request_reboot, ProcessRunner};
        // Give the event loop a moment to put `executing` on the wire before the board goes
        // down (a lost `executing` is harmless: the retained init is ignored as a re-delivery
        // after the reboot, and `successful` follows).
        std::thread::sleep(Duration::from_millis(500));
        let id = cmd_id.unwrap_or_else(|| format!("local-{now}"));
        let p = request_reboot(
            &self.state,
            &self.actions,
            &mut ProcessRunner,
            &id,
            reason,
            now,
        );
        ActionOutcome::from(p)
    }

    fn diagnosis(&self, d: Option<Arc<Diagnosis>>) -> Result<Arc<Diagnosis>, String> {
        match d {
            Some(d) => Ok(d),
            None => diagnose::diagnose(&self.root, &self.profile)
                .map(Arc::new)
                .map_err(|e| e.to_string()),
        }
    }

    /// The policy refusals of `action`, decided without acting: an action this board or the
    /// config refuses (`refused`: `[actions] disabled`, the profile's refusals), a reboot its
    /// guards refuse (`allow_reboot = false`, an empty `reboot_command`, one pending or too
    /// recent, an unverified boot edit, no `boot_id`), a `set_cma` size out of range or a boot
    /// file it cannot edit (a dry run of `cma set`), a `release_npu` on a board without
    /// hailo-ollama. `d` is the last diagnosis; `set_cma` and `release_npu` make one when there
    /// is none yet, and it is returned for the action to use.
    ///
    /// Errors: the reason, published as the command's `rejected` reason.
    pub fn preflight(
        &self,
        refused: &BTreeMap<ActionKind, String>,
        action: &Action,
        d: Option<Arc<Diagnosis>>,
        now: i64,
    ) -> Result<Option<Arc<Diagnosis>>, String> {
        if let Some(why) = refused.get(&action.kind()) {
            return Err(why.clone());
        }
        match action {
            Action::Reboot { .. } => {
                super::reboot::reboot_preflight(&self.state, &self.actions, now)
                    .map_err(|r| r.to_string())?;
                Ok(d)
            }
            Action::SetCma { size } => {
                let d = self.diagnosis(d)?;
                let mut storage = super::atomic::RealStorage;
                let r =
                    super::cma::cma_set(&self.root, &d, size, true, &mut storage, &self.state, now);
                if r.outcome == CmaSetOutcome::Refused {
                    return Err(r.error);
                }
                // In a container: rejected before `executing` where the edit could not be made.
                if let Some(why) = super::cma::container_refusal(&self.root, &r.changes) {
                    return Err(why);
                }
                Ok(Some(d))
            }
            Action::ReleaseNpu { .. } => {
                let d = self.diagnosis(d)?;
                if let Some(why) = d.profile.refuses_action(action.kind()) {
                    return Err(why);
                }
                Ok(Some(d))
            }
            Action::Fix { checks, dry_run } => {
                let d = self.diagnosis(d)?;
                super::fix::run::preflight(&self.state, &d.report.findings, checks, *dry_run)?;
                Ok(Some(d))
            }
            Action::Compact { .. }
            | Action::Rescan
            | Action::Capture { .. }
            | Action::Update { .. } => Ok(d),
        }
    }
}

impl From<&FixReport> for ActionOutcome {
    fn from(r: &FixReport) -> ActionOutcome {
        let details = serde_json::to_value(r).unwrap_or(Value::Null);
        let m = r.message.clone();
        match r.result {
            FixResult::Planned => ActionOutcome {
                ran: false,
                ..ActionOutcome::succeeded(m, details)
            },
            FixResult::Fixed | FixResult::RebootNeeded => ActionOutcome::succeeded(m, details),
            FixResult::StillFiring | FixResult::Failed => ActionOutcome::failed(m, details),
            FixResult::Refused => ActionOutcome::refused(m, details),
        }
    }
}

impl From<&CompactReport> for ActionOutcome {
    fn from(r: &CompactReport) -> ActionOutcome {
        let details = serde_json::to_value(r).unwrap_or(Value::Null);
        match r.outcome {
            CompactOutcome::Done => {
                ActionOutcome::succeeded(format!("compacted in {} ms", r.duration_ms), details)
            }
            // A dry run acts on nothing and is not a failure (the command line exits 0).
            CompactOutcome::DryRun => ActionOutcome {
                ran: false,
                ..ActionOutcome::succeeded(r.reason.clone(), details)
            },
            CompactOutcome::Refused => ActionOutcome::refused(r.reason.clone(), details),
            CompactOutcome::Failed => ActionOutcome::failed(r.reason.clone(), details),
        }
    }
}

impl From<&CmaSetReport> for ActionOutcome {
    fn from(r: &CmaSetReport) -> ActionOutcome {
        let mut details = serde_json::to_value(r).unwrap_or(Value::Null);
        if let Some(o) = details.as_object_mut() {
            o.insert(
                "reboot_required".into(),
                json!(r.outcome == CmaSetOutcome::Written),
            );
        }
        match r.outcome {
            CmaSetOutcome::Written | CmaSetOutcome::Unchanged => {
                ActionOutcome::succeeded(r.explanation.join(" "), details)
            }
            CmaSetOutcome::Refused => ActionOutcome::refused(r.error.clone(), details),
            CmaSetOutcome::DryRun | CmaSetOutcome::Failed => {
                ActionOutcome::failed(r.error.clone(), details)
            }
        }
    }
}

impl From<RebootProgress> for ActionOutcome {
    fn from(p: RebootProgress) -> ActionOutcome {
        match p {
            // The board is going down: the result is published after the next boot.
            RebootProgress::Pending(i) => ActionOutcome {
                reboot_pending: true,
                ..ActionOutcome::succeeded(
                    "reboot started",
                    json!({"pending": true, "boot_id_before": i.boot_id}),
                )
            },
            RebootProgress::Refused(r) => {
                ActionOutcome::refused(r.to_string(), json!({"refused": true}))
            }
            RebootProgress::Failed(rec) => ActionOutcome::failed(
                rec.detail.clone(),
                serde_json::to_value(&rec).unwrap_or(Value::Null),
            ),
        }
    }
}
