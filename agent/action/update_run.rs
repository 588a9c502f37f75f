//! The executor's `update`: plan ([`super::update::plan`]), record the pending update, arm the
//! watchdog and install (in a transient unit on a systemd board), then leave the answer to the
//! agent that comes back ([`super::update::settle_pending`]).

use super::fix::apply::apt::AptEnv;
use super::state::StateDir;
use super::update::{self, Pending, Plan, DEADLINE_S, PENDING_FILE};
use crate::model::action::ActionOutcome;
use crate::root::SysRoot;
use serde_json::{json, Value};

/// The pending-update record removed (the update ended here, the old agent answers).
fn clear(state: &StateDir) {
    if let Ok(p) = state.root().entry_path(&state.board_path(PENDING_FILE)) {
        let _ = std::fs::remove_file(p);
    }
}

/// Whether the install runs through systemd: the live root and a service started by systemd.
fn under_systemd(root: &SysRoot) -> bool {
    root.is_live() && std::env::var_os("INVOCATION_ID").is_some()
}

/// Runs `update {version, allow_downgrade}` on the live board `root`.
pub fn run(
    root: &SysRoot,
    state: &StateDir,
    cmd_id: Option<String>,
    version: &str,
    allow_downgrade: bool,
    now_s: i64,
) -> ActionOutcome {
    if !root.is_live() {
        return ActionOutcome::refused(
            "update installs a package on the live board; this agent reads a captured tree",
            Value::Null,
        );
    }
    run_with(
        root,
        state,
        &AptEnv::live(),
        cmd_id,
        version,
        allow_downgrade,
        now_s,
    )
}

/// [`run`] with apt's environment given (tests: a throwaway root and a local repository).
pub fn run_with(
    root: &SysRoot,
    state: &StateDir,
    env: &AptEnv,
    cmd_id: Option<String>,
    version: &str,
    allow_downgrade: bool,
    now_s: i64,
) -> ActionOutcome {
    let (from, to) = match update::plan(root, env, version, allow_downgrade) {
        Ok(Plan::Current) => {
            return ActionOutcome::succeeded(
                format!("npu-agent is at {version} already; nothing was done"),
                json!({"version": version, "changed": false}),
            )
        }
        Ok(Plan::Install { from: Some(f), to }) => (f, to),
        Ok(Plan::Install { from: None, .. }) => {
            return ActionOutcome::refused(
                "npu-agent is not installed from its package here: no version to roll back to; nothing was changed",
                Value::Null,
            )
        }
        Err((why, sim)) => return ActionOutcome::refused(why, json!({ "simulation": sim })),
    };
    let pending = Pending {
        old: from.clone(),
        new: to.clone(),
        cmd_id: cmd_id.unwrap_or_else(|| format!("local-{now_s}")),
        deadline_unix_s: now_s + DEADLINE_S,
        agent_instance: Some(super::update::process_instance().to_string()),
    };
    if let Err(e) = state.save(PENDING_FILE, &pending) {
        return ActionOutcome::refused(
            format!("cannot record the pending update: {e}"),
            Value::Null,
        );
    }
    let details = json!({"from": from, "to": to, "deadline_unix_s": pending.deadline_unix_s});
    let installed = if under_systemd(root) {
        let path = state.board_path(PENDING_FILE);
        match super::update_unit::arm_watchdog(&path, &from, &pending.cmd_id, DEADLINE_S, now_s) {
            Ok(()) => super::update_unit::install(&to, allow_downgrade, now_s),
            Err(e) => {
                clear(state);
                return ActionOutcome::refused(
                    format!("cannot arm the rollback watchdog: {e}"),
                    details,
                );
            }
        }
    } else {
        update::install(root, env, &to, allow_downgrade)
            .map(|_| ())
            .map_err(|(why, _)| why)
    };
    match installed {
        Ok(()) => ActionOutcome {
            reboot_pending: true,
            ..ActionOutcome::succeeded(
                format!("installed npu-agent {to} over {from}: the agent that comes back answers"),
                details,
            )
        },
        Err(why) => {
            clear(state);
            ActionOutcome::failed(format!("the install of {to} failed: {why}"), details)
        }
    }
}
