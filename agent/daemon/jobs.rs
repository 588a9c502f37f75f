//! Work off the event loop: diagnoses and actions started on blocking threads (or held for the
//! unit tests), the next admitted job started through the executor, and finished work routed to
//! the gate, the command's lifecycle and the report.

use super::agent::Agent;
use super::setup::LOG_CURSORS_FILE;
pub(super) use super::work::{Dispatch, Done, StateFiles};
use crate::action::executor::ExecJob;
use crate::action::gate::{CmdRef, Job, Origin, Outcome};
use crate::diagnose::{self, Diagnosis};
use crate::model::action::{Action, ActionKind, ActionOutcome};
use crate::mqtt::command::CmdStatus;
use serde_json::json;
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::mpsc;

/// Runs `job` on tokio's blocking thread pool. Every caller passes the same boxed closure type:
/// each distinct closure type given to `spawn_blocking` would make another copy of tokio's
/// blocking-task code (poll, harness, drop).
fn spawn_blocking_job(job: Box<dyn FnOnce() + Send>) {
    tokio::task::spawn_blocking(job);
}

/// Runs `work` (file I/O) off the link's thread, on the blocking pool; the unit tests' held
/// dispatch has no runtime: there it runs at once.
pub(super) fn off_link(agent: &Agent, work: Box<dyn FnOnce() + Send>) {
    match &agent.dispatch {
        Dispatch::Blocking => spawn_blocking_job(work),
        #[cfg(test)]
        Dispatch::Held { .. } => work(),
    }
}

/// Writes the command ledger's changes not yet handed out on the blocking pool (the daemon's
/// gate saves behind: [`crate::action::gate::Gate::save_behind`]).
pub(super) fn save_ledger_behind(agent: &mut Agent, tx: &mpsc::UnboundedSender<Done>) {
    let Some(save) = agent.gate.take_unsaved() else {
        return;
    };
    let tx = tx.clone();
    off_link(
        agent,
        Box::new(move || {
            let _ = tx.send(Done::LedgerSaved(save.write()));
        }),
    );
}

/// Starts a diagnosis on a blocking thread (the caller checked none is running).
pub(super) fn start_diagnosis(agent: &mut Agent, tx: &mpsc::UnboundedSender<Done>) {
    agent.diagnosing = true;
    agent.diagnosis_started = Instant::now();
    spawn_diagnose(agent, tx);
}

pub(super) fn spawn_diagnose(agent: &mut Agent, tx: &mpsc::UnboundedSender<Done>) {
    match &mut agent.dispatch {
        Dispatch::Blocking => {}
        #[cfg(test)]
        Dispatch::Held { diagnoses, .. } => {
            *diagnoses += 1;
            return;
        }
    }
    let s = &agent.s;
    let root = s.root.clone();
    let choice = s.profile.clone();
    let tx = tx.clone();
    let state = s.state.clone();
    let opts = diagnose::DiagnoseOptions {
        log_cursors: Some(s.log_cursors.clone()),
        ..Default::default()
    };
    spawn_blocking_job(Box::new(move || {
        let r = diagnose::diagnose_with(&root, &choice, &opts)
            .map(Arc::new)
            .map_err(|e| e.to_string());
        // Logs are read from the cursors on: persist them so a restart neither re-reads nor
        // counts a line twice.
        if let Some(c) = opts.log_cursors.as_ref().and_then(|c| c.lock().ok()) {
            if let Err(e) = state.save(LOG_CURSORS_FILE, &*c) {
                tracing::warn!(error = %e, "cannot persist the log cursors");
            }
        }
        let _ = tx.send(Done::Diagnosed(r, StateFiles::read(&state)));
    }));
}

/// The executor's job for the gate's `job`.
pub(super) fn exec_job(job: &Job, d: Option<Arc<Diagnosis>>, now_s: i64) -> ExecJob {
    let trigger = if job.cmd.is_some() {
        "command"
    } else {
        "planner"
    };
    let mut e = ExecJob::new(job.action.clone(), trigger, now_s);
    e.cmd_id = job.cmd.as_ref().map(|c| c.cmd_id.clone());
    e.diagnosis = d;
    e
}

fn spawn_action(
    agent: &mut Agent,
    job: Job,
    d: Option<Arc<Diagnosis>>,
    tx: &mpsc::UnboundedSender<Done>,
) {
    match &mut agent.dispatch {
        Dispatch::Blocking => {}
        #[cfg(test)]
        Dispatch::Held { actions, .. } => {
            actions.push((job, d));
            return;
        }
    }
    let executor = agent.s.executor.clone();
    let mut exec = exec_job(&job, d, agent.now());
    if let Some(cmd) = job.cmd.clone() {
        let tx = tx.clone();
        exec.on_step = Some(Arc::new(move |step: &str| {
            let (cmd, step) = (cmd.clone(), step.to_string());
            let _ = tx.send(Done::Step { cmd, step });
        }));
    }
    let tx = tx.clone();
    let state = agent.s.state.clone();
    spawn_blocking_job(Box::new(move || {
        let r = executor.execute(exec);
        let _ = tx.send(Done::Action {
            job: Box::new(job),
            outcome: r.outcome,
            diagnosis: r.diagnosis,
            state: StateFiles::read(&state),
        });
    }));
}

/// Starts the next admitted action, if none runs (one at a time, signed commands first, off
/// the main loop). Every policy refusal ([`crate::action::executor::Executor::preflight`]) is
/// decided first, on a blocking thread (it reads state and boot files, and may diagnose),
/// before `executing` is published: a refused command is answered `rejected` with the reason
/// and never `executing` ([`after_preflight`]).
pub(super) fn start_next(agent: &mut Agent, tx: &mpsc::UnboundedSender<Done>) {
    let Some(job) = agent.gate.next_job() else {
        return;
    };
    let refused = agent.gate.policy().refused.clone();
    let last = agent.last_diagnosis.clone();
    let now = agent.now();
    let executor = agent.s.executor.clone();
    match &mut agent.dispatch {
        Dispatch::Blocking => {
            let tx = tx.clone();
            // A command's id is on disk before it acts: a restart never runs it twice.
            let save = job.cmd.as_ref().and_then(|_| agent.gate.save_now());
            spawn_blocking_job(Box::new(move || {
                let checked = match save.map(|s| s.write()) {
                    Some(Err(e)) => Err(format!("cannot save the command id: {e}")),
                    saved => {
                        if let Some(Ok(cli)) = saved {
                            let _ = tx.send(Done::LedgerSaved(Ok(cli)));
                        }
                        executor.preflight(&refused, &job.action, last, now)
                    }
                };
                let job = Box::new(job);
                let _ = tx.send(Done::Preflight { job, checked });
            }));
        }
        // The unit tests hold actions, not the checks before them.
        #[cfg(test)]
        Dispatch::Held { .. } => {
            let checked = executor.preflight(&refused, &job.action, last, now);
            after_preflight(agent, job, checked, tx);
        }
    }
}

/// The next job's policy checks are in: a refusal is answered (and the next job tried), else
/// `executing` is published and the action starts.
fn after_preflight(
    agent: &mut Agent,
    job: Job,
    checked: Result<Option<Arc<Diagnosis>>, String>,
    tx: &mpsc::UnboundedSender<Done>,
) {
    let d = match checked {
        Ok(d) => d,
        Err(reason) => {
            agent.gate.refuse(&job, &reason);
            match &job.cmd {
                Some(c) => {
                    agent.rejections.log(c, &reason, "command rejected");
                    agent.answer(c, CmdStatus::Rejected, json!({"reason": reason}));
                }
                None => tracing::warn!(
                    action = job.action.name(),
                    origin = job.origin.as_str(),
                    %reason,
                    "action refused"
                ),
            }
            return start_next(agent, tx);
        }
    };
    if let Some(c) = &job.cmd {
        agent.answer(c, CmdStatus::Executing, json!({}));
    }
    tracing::info!(
        action = job.action.name(),
        origin = job.origin.as_str(),
        cmd_id = job.cmd.as_ref().map(|c| c.cmd_id.as_str()).unwrap_or("-"),
        "executing"
    );
    if matches!(job.action, Action::Reboot { .. }) {
        // The executing state must reach the broker before the board goes down.
        agent.flush();
    }
    spawn_action(agent, job, d, tx);
}

/// The clock state for the command path: the last one read (by a diagnosis or a probe) while
/// it is younger than [`super::CLOCK_REPROBE`]; an older one still serves while a fresh read
/// runs on the blocking pool (a command flood costs no file I/O, and none runs on the loop).
/// Without any reading yet (the start reads one before the loop) the files are read here.
pub(super) fn clock_state(
    agent: &mut Agent,
    tx: &mpsc::UnboundedSender<Done>,
) -> crate::model::ClockSync {
    let c = match &agent.clock {
        Some((c, at)) if at.elapsed() < super::CLOCK_REPROBE => return c.clone(),
        Some((c, _)) => c.clone(),
        None => return agent.read_clock(),
    };
    if agent.clock_reading {
        return c;
    }
    match &mut agent.dispatch {
        Dispatch::Blocking => {
            agent.clock_reading = true;
            let (root, tx) = (agent.s.root.clone(), tx.clone());
            spawn_blocking_job(Box::new(move || {
                let read = crate::probe::clock::probe(&root);
                let _ = tx.send(Done::Clock(read, Instant::now()));
            }));
            c
        }
        #[cfg(test)]
        Dispatch::Held { .. } => agent.read_clock(),
    }
}

/// Routes finished work: a diagnosis to the planner and the report, an action's outcome to the
/// gate, the command's lifecycle and a fresh diagnosis.
pub(super) fn handle_done(agent: &mut Agent, done: Done, tx: &mpsc::UnboundedSender<Done>) {
    match done {
        Done::Diagnosed(Ok(d), state) => {
            agent.gate.absorb_cli_runs(state.cli_runs.clone());
            agent.state_files = state;
            on_diagnosed(agent, d, tx)
        }
        Done::Diagnosed(Err(e), state) => {
            agent.state_files = state;
            agent.diagnosing = false;
            tracing::error!(error = %e, "diagnosis failed");
        }
        Done::Action {
            job,
            outcome,
            diagnosis,
            state,
        } => {
            agent.state_files = state.clone();
            on_action_done(agent, &job, outcome, diagnosis.map(|d| (d, state)), tx)
        }
        Done::Preflight { job, checked } => after_preflight(agent, *job, checked, tx),
        Done::Reboot(r) => settle_reboot(agent, r),
        Done::Clock(c, at) => {
            agent.clock_reading = false;
            // A diagnosis may have read it later meanwhile.
            if agent.clock.as_ref().is_none_or(|(_, seen)| *seen <= at) {
                agent.clock = Some((c, at));
            }
        }
        // Sent from the action's thread before its end, so read before it: never after the
        // final state.
        Done::UpdateSettled(r) => update_settled(agent, r),
        Done::LedgerSaved(Ok(cli)) => agent.gate.absorb_cli_runs(cli),
        Done::LedgerSaved(Err(e)) => {
            tracing::error!(error = %e, "cannot save the command ledger");
        }
        Done::Step { cmd, step } => {
            agent.answer(&cmd, CmdStatus::Executing, json!({ "step": step }));
        }
    }
}

fn on_diagnosed(agent: &mut Agent, d: Arc<Diagnosis>, tx: &mpsc::UnboundedSender<Done>) {
    agent.diagnosing = false;
    // Read during this diagnosis (counted from its start, the conservative age).
    agent.clock = Some((d.snapshot.clock.clone(), agent.diagnosis_started));
    // What this board's profile refuses (release_npu without hailo-ollama): the gate rejects it
    // for every origin, and no button offers it.
    agent
        .gate
        .set_refused(std::collections::BTreeMap::from_iter(
            ActionKind::ALL
                .into_iter()
                .filter_map(|a| d.profile.refuses_action(a).map(|r| (a, r))),
        ));
    plan_automatic(agent, &d, tx);
    let first = agent.last_diagnosis.is_none();
    // An action finished while this diagnosis ran (a rescan follows): its findings predate the
    // action (a boot-file edit, a compaction), so nothing of it goes out; the rescan publishes.
    let stale = agent.rescan_wanted;
    let force = !stale && std::mem::take(&mut agent.force_publish);
    agent.set_report(d, force);
    agent.status_dirty &= !stale;
    if first && agent.connected && agent.s.cfg.home_assistant.enabled {
        if let Some(l) = &agent.link {
            crate::mqtt::ha::on_connect(super::agent::agent_ha(agent), &l.client);
            agent.last_discovery = Some(Instant::now());
        }
    }
    if !agent.ready_sent {
        let _ = sd_notify::notify(&[sd_notify::NotifyState::Ready]);
        agent.ready_sent = true;
    }
    agent.flush();
    if agent.rescan_wanted {
        agent.rescan_wanted = false;
        start_diagnosis(agent, tx);
    }
}

/// The planner's automatic actions (compaction when it helps) go through the gate, which allows
/// one per cooldown whatever the outcome: a compaction that fails or is refused (no
/// CONFIG_COMPACTION, read-only /proc/sys) must not retry on every rescan.
fn plan_automatic(agent: &mut Agent, d: &Diagnosis, tx: &mpsc::UnboundedSender<Done>) {
    use crate::action::{planner, state};
    let actions = agent.s.executor.actions().clone();
    if !actions.auto_compact || agent.gate.is_running() {
        return;
    }
    let mut compact = agent.state_files.compact.clone();
    let ps = planner::PlannerState {
        compact: compact.clone(),
    };
    let plan = planner::plan(&d.report.findings, &d.profile, &ps, &actions, agent.now());
    // The trigger cleared: the attempt counter starts again.
    if plan.reset_compact_attempts && compact.consecutive_attempts != 0 {
        compact.consecutive_attempts = 0;
        agent.state_files.compact = compact.clone();
        let dir = agent.s.state.clone();
        let save = move || {
            if let Err(e) = dir.save(state::COMPACT_FILE, &compact) {
                tracing::error!(error = %e, "cannot reset the compaction attempt counter");
            }
        };
        off_link(agent, Box::new(save));
    }
    for p in plan.run {
        if p.action == planner::ActionKind::Compact {
            let a = Action::Compact {
                drop_caches: p.drop_caches,
            };
            let now = agent.now();
            match agent.gate.admit_local(Origin::Planner, a, now) {
                Ok(()) => start_next(agent, tx),
                Err(reason) => tracing::debug!(%reason, "automatic compaction not queued"),
            }
        }
    }
}

fn on_action_done(
    agent: &mut Agent,
    job: &Job,
    mut o: ActionOutcome,
    diagnosis: Option<(Arc<Diagnosis>, StateFiles)>,
    tx: &mpsc::UnboundedSender<Done>,
) {
    // A bundle's chunks go out before the answer that names them.
    if let Some(c) = &job.cmd {
        super::capture::publish(agent, c, &mut o);
    }
    let name = job.action.name();
    agent.gate.finish(
        job,
        &Outcome {
            ok: o.ok,
            ran: o.ran,
            detail: o.message.clone(),
            pending: o.reboot_pending,
        },
    );
    let status = if o.ok {
        CmdStatus::Successful
    } else {
        CmdStatus::Failed
    };
    // The executor has logged the outcome (action::executor); the lifecycle goes out here.
    let shown = if o.reboot_pending {
        CmdStatus::Executing
    } else {
        status
    };
    agent.last_action = Some(json!({
        "action": name, "status": shown, "detail": &o.message,
        "time": crate::sys::time::rfc3339_now(),
        "cmd_id": job.cmd.as_ref().map(|c| c.cmd_id.clone()),
    }));
    // A reboot's final state is published after the next boot.
    if let (Some(c), false) = (&job.cmd, o.reboot_pending) {
        let extra = if o.ok {
            json!({"result": o.details})
        } else {
            json!({"reason": o.message, "result": o.details})
        };
        agent.answer(c, status, extra);
    }
    // Every action changes what the checks see: publish a fresh diagnosis now (a rescan brought
    // its own; others get one).
    agent.force_publish = true;
    if let Some((d, state)) = diagnosis {
        handle_done(agent, Done::Diagnosed(Ok(d), state), tx);
    } else if agent.diagnosing {
        agent.rescan_wanted = true;
    } else {
        start_diagnosis(agent, tx);
    }
    start_next(agent, tx);
}

/// A reboot asked for before: did the board really reboot (at start), or did the reboot
/// command fail to take it down (periodically)? Settles the command in the ledger and
/// publishes its final state.
pub(super) fn reconcile_reboot(agent: &mut Agent, when: crate::action::reboot::ReconcileWhen) {
    use crate::action::reboot::reconcile_state;
    let now = agent.now();
    let r = reconcile_state(&agent.s.state, agent.s.executor.actions(), now, when);
    settle_reboot(agent, r.map_err(|e| e.to_string()));
}

/// The periodic [`reconcile_reboot`], on the blocking pool (it reads and may write the state
/// files); its record is settled when it reports back.
pub(super) fn spawn_reconcile_reboot(agent: &mut Agent, tx: &mpsc::UnboundedSender<Done>) {
    use crate::action::reboot::{reconcile_state, ReconcileWhen};
    match &mut agent.dispatch {
        Dispatch::Blocking => {}
        #[cfg(test)]
        Dispatch::Held { .. } => return reconcile_reboot(agent, ReconcileWhen::Periodic),
    }
    let (state, actions, now) = (
        agent.s.state.clone(),
        agent.s.executor.actions().clone(),
        agent.now(),
    );
    let tx = tx.clone();
    spawn_blocking_job(Box::new(move || {
        let r = reconcile_state(&state, &actions, now, ReconcileWhen::Periodic);
        let _ = tx.send(Done::Reboot(r.map_err(|e| e.to_string())));
    }));
}

/// Settles what reconciling the reboot state found: the command in the ledger, its final
/// state published, the status's last action.
pub(super) fn settle_reboot(
    agent: &mut Agent,
    r: Result<Option<crate::action::reboot::RebootRecord>, String>,
) {
    use crate::action::reboot::RebootResult;
    match r {
        Ok(Some(rec)) => {
            let c = CmdRef {
                action: ActionKind::Reboot.as_str().into(),
                cmd_id: rec.cmd_id.clone(),
            };
            let status = match rec.result {
                RebootResult::Successful => CmdStatus::Successful,
                RebootResult::Failed => CmdStatus::Failed,
            };
            let extra = json!({"reason": rec.detail, "result": rec});
            agent
                .gate
                .settle_reboot(&rec.cmd_id, status == CmdStatus::Successful, &rec.detail);
            agent.last_action = Some(json!({
                "action": ActionKind::Reboot, "cmd_id": rec.cmd_id, "status": status,
                "time": crate::sys::time::rfc3339_now(),
            }));
            if !rec.cmd_id.starts_with("local-") {
                agent.answer(&c, status, extra);
            }
        }
        Ok(None) => {}
        Err(e) => tracing::error!("cannot reconcile the reboot state: {e}"),
    }
}

/// An update that restarted the agent (docs/operator-guide.md, "Updating the agent"): its
/// pending record settled by this agent's version, the command answered and its ledger entry
/// closed. Called once connected, so the answer goes out as the rollback watchdog stands down;
/// the record (and dpkg's database) is read on the blocking pool.
pub(super) fn settle_update(agent: &mut Agent, tx: &mpsc::UnboundedSender<Done>) {
    if agent.settling_update {
        return;
    }
    let (state, now) = (agent.s.state.clone(), agent.now());
    match &agent.dispatch {
        Dispatch::Blocking => {
            agent.settling_update = true;
            let tx = tx.clone();
            spawn_blocking_job(Box::new(move || {
                let r = crate::action::update::settle_pending(&state, now);
                let _ = tx.send(Done::UpdateSettled(r));
            }));
        }
        #[cfg(test)]
        Dispatch::Held { .. } => {
            let r = crate::action::update::settle_pending(&state, now);
            update_settled(agent, r);
        }
    }
}

/// The pending update's record, read and removed on the blocking pool ([`settle_update`]):
/// its command is answered by this agent.
fn update_settled(agent: &mut Agent, r: Result<Option<crate::action::update::Settled>, String>) {
    agent.settling_update = false;
    let s = match r {
        Ok(Some(s)) => s,
        Ok(None) => return,
        Err(e) => return tracing::error!("cannot settle the pending update: {e}"),
    };
    let kind = ActionKind::Update;
    let status = if s.ok {
        CmdStatus::Successful
    } else {
        CmdStatus::Failed
    };
    if s.ok {
        tracing::info!(cmd_id = %s.cmd_id, "update: {}", s.message);
    } else {
        tracing::warn!(cmd_id = %s.cmd_id, "update: {}", s.message);
    }
    agent
        .gate
        .settle_after_restart(kind, &s.cmd_id, s.ok, &s.message);
    agent.last_action = Some(json!({
        "action": kind, "cmd_id": s.cmd_id, "status": status, "detail": s.message,
        "time": crate::sys::time::rfc3339_now(),
    }));
    if !s.cmd_id.starts_with("local-") {
        let c = CmdRef {
            action: kind.as_str().into(),
            cmd_id: s.cmd_id.clone(),
        };
        let result = json!({"agent_version": env!("CARGO_PKG_VERSION")});
        agent.answer(&c, status, json!({"reason": s.message, "result": result}));
    }
}
