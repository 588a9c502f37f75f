//! `npu-agent compact` and `npu-agent cma show|set`: the local actions, through the same gate
//! and executor as remote commands.

use super::*;

/// `compact` options.
#[derive(Debug, clap::Args)]
pub struct CompactArgs {
    /// Write every file under DIR instead of / (a captured or test tree).
    #[arg(long, value_name = "DIR", default_value = "/")]
    pub root: PathBuf,
    /// Also write 1 to /proc/sys/vm/drop_caches (page cache only) before compacting.
    #[arg(long)]
    pub drop_caches: bool,
    /// Show the current figures and what would be done; write nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Print the report as one JSON object (the `result` of a remote `compact`).
    #[arg(long)]
    pub json: bool,
}

/// `cma` actions.
#[derive(Debug, clap::Subcommand)]
pub enum CmaAction {
    /// The cma= in the boot file, on /proc/cmdline, the pool in effect (CmaTotal), and the
    /// verdict.
    ///
    /// The verdict is one of: not set, pending reboot, overridden, in effect. Exit 0; 2 usage
    /// error (a --root that is not a directory, a --profile that names no profile).
    Show {
        /// Read every file under DIR instead of /.
        #[arg(long, value_name = "DIR", default_value = "/")]
        root: PathBuf,
        /// Profile id, profile file, or auto.
        #[arg(long, value_name = "ID|FILE", default_value = "auto")]
        profile: String,
        /// Print one JSON object (the fields of the text, by name).
        #[arg(long)]
        json: bool,
    },
    /// Set the boot-time CMA size in the boot file the profile names.
    ///
    /// On a Pi 5: the cma overlay in config.txt. Backup, atomic write, re-read; a reboot applies
    /// it. Passes the gate ([actions] disabled in the config under --root). Exit 0 done or
    /// nothing to do, 1 refused or failed, 2 usage or config error.
    Set {
        /// Size as the kernel reads cma=: decimal or 0x hex with an optional K, M, G, T, P or E
        /// suffix (256M); at least 4 MiB and the profile minimum, at most 25% of RAM; 0 (no
        /// pool) where the profile has no minimum.
        size: String,
        /// Edit files under DIR instead of /.
        #[arg(long, value_name = "DIR", default_value = "/")]
        root: PathBuf,
        /// Profile id, profile file, or auto.
        #[arg(long, value_name = "ID|FILE", default_value = "auto")]
        profile: String,
        /// Print the diff; write nothing.
        #[arg(long)]
        dry_run: bool,
        /// Print the report as one JSON object (the `result` of a remote `set_cma`).
        #[arg(long)]
        json: bool,
    },
}

pub(super) fn compact(a: CompactArgs, out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    use crate::action::compact::{render_compact_text, CompactOutcome};
    use crate::action::executor::{ActionReport, ExecJob};
    if let Err(code) = require_root_dir(&a.root, err) {
        return code;
    }
    let root = SysRoot::new(&a.root);
    let action = crate::mqtt::command::Action::Compact {
        drop_caches: a.drop_caches,
    };
    let now = crate::action::now_unix_s();
    let (mut gate, state) = match admit_cli(&root, &action, BTreeMap::new(), now, err) {
        Ok(g) => g,
        Err(code) => return code,
    };
    let mut job = ExecJob::new(action.clone(), "cli", now);
    job.dry_run = a.dry_run;
    let ActionReport::Compact(report) = cli_executor(&root, &state, ProfileChoice::Auto)
        .execute(job)
        .report
    else {
        unreachable!("a compaction reports as one")
    };
    if a.json {
        write_json(out, &report);
    } else {
        let _ = write!(out, "{}", render_compact_text(&report));
    }
    if report.outcome == CompactOutcome::Done {
        record_cli_run(&mut gate, &action, now, err);
    }
    match report.outcome {
        CompactOutcome::Done | CompactOutcome::DryRun => EXIT_OK,
        CompactOutcome::Refused | CompactOutcome::Failed => EXIT_FINDINGS,
    }
}

/// The gate every origin passes, for an action the admin runs here: the config (and its
/// `[actions] disabled`) is read under `root` as the daemon reads it, and the gate decides with
/// the board's refusals (`board_refused`, e.g. the profile's) and the daemon's ledger in the
/// configured state directory. Returns the gate (to record the run) and that state directory.
///
/// Errors: the exit code, after the reason went to `err`: [`EXIT_USAGE`] for a config error,
/// [`EXIT_FINDINGS`] when the gate refuses.
pub(super) fn admit_cli(
    root: &SysRoot,
    action: &crate::mqtt::command::Action,
    board_refused: BTreeMap<crate::model::action::ActionKind, String>,
    now: i64,
    err: &mut dyn Write,
) -> Result<(crate::action::gate::Gate, crate::action::state::StateDir), i32> {
    use crate::action::gate::{Gate, Origin};
    let loaded =
        crate::config::agent_env().and_then(|env| crate::config::Settings::load(root, None, &env));
    let s = match loaded {
        Ok((s, _)) => s,
        Err(e) => {
            let _ = writeln!(err, "npu-agent: {e}");
            return Err(EXIT_USAGE);
        }
    };
    let state = crate::action::state::StateDir::new(root, &s.cfg.state_dir);
    let mut gate = Gate::new(s.policy, Some(state.clone()), s.actions.compact_cooldown_s);
    gate.set_limits(s.limits);
    gate.set_refused(board_refused);
    match gate.admit_local(Origin::Cli, action.clone(), now) {
        Ok(()) => Ok((gate, state)),
        Err(why) => {
            let _ = writeln!(err, "npu-agent: refused: {why}");
            Err(EXIT_FINDINGS)
        }
    }
}

/// The executor for an action the admin runs here, under `root`, recording in `state`, making
/// its diagnoses with `profile`.
pub(super) fn cli_executor(
    root: &SysRoot,
    state: &crate::action::state::StateDir,
    profile: ProfileChoice,
) -> crate::action::executor::Executor {
    crate::action::executor::Executor::new(
        root.clone(),
        state.clone(),
        crate::action::ActionConfig::default(),
        profile,
    )
}

/// Records in the ledger that `action` ran from the command line; a failure is said, not fatal
/// (the action already ran).
pub(super) fn record_cli_run(
    gate: &mut crate::action::gate::Gate,
    action: &crate::mqtt::command::Action,
    now: i64,
    err: &mut dyn Write,
) {
    if let Err(e) = gate.record_local(action, now) {
        let _ = writeln!(err, "npu-agent: the run was not recorded: {e}");
    }
}

pub(super) fn cma(action: CmaAction, out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    use crate::action::cma::{cma_show, render_cma_set, render_cma_show};
    let (root_dir, profile_arg) = match &action {
        CmaAction::Show { root, profile, .. } | CmaAction::Set { root, profile, .. } => {
            (root.clone(), profile.clone())
        }
    };
    if let Err(code) = require_root_dir(&root_dir, err) {
        return code;
    }
    let root = SysRoot::new(&root_dir);
    let d = match diagnose(&root, &ProfileChoice::parse(&profile_arg)) {
        Ok(d) => d,
        Err(e) => {
            let _ = writeln!(err, "npu-agent: {e}");
            return EXIT_USAGE;
        }
    };
    match action {
        CmaAction::Show { json, .. } => {
            // The state directory `cma set` records its edits in: the config's (under the root).
            let loaded =
                crate::config::agent_env().and_then(|env| crate::config::load(&root, None, &env));
            let state = match loaded {
                Ok((c, _)) => crate::action::state::StateDir::new(&root, &c.state_dir),
                Err(e) => {
                    let _ = writeln!(
                        err,
                        "npu-agent: {e}; the last edit is looked up in {}",
                        crate::action::state::DEFAULT_STATE_DIR
                    );
                    crate::action::state::StateDir::default_for(&root)
                }
            };
            let shown = cma_show(&d, &state);
            if json {
                write_json(out, &shown);
            } else {
                let hint = hint_args(&root_dir, &profile_arg);
                let _ = write!(out, "{}", render_cma_show(&shown, &hint));
            }
            EXIT_OK
        }
        CmaAction::Set {
            size,
            dry_run,
            json,
            ..
        } => {
            // A SIZE that is no size at all is the user's typo (exit 2 on stderr), not a refusal
            // by the board or the gate (exit 1): nothing is asked of the gate for it.
            if let Err(
                e @ (crate::action::bootedit::SizeError::Syntax(_)
                | crate::action::bootedit::SizeError::Octal { .. }),
            ) = crate::action::bootedit::parse_cma_size(&size)
            {
                let _ = writeln!(
                    err,
                    "npu-agent: cma set: {}",
                    crate::report::clean(&e.to_string())
                );
                return EXIT_USAGE;
            }
            let gate_action = crate::mqtt::command::Action::SetCma { size: size.clone() };
            let board_refused = d
                .profile
                .refuses_action(gate_action.kind())
                .map(|why| (gate_action.kind(), why))
                .into_iter()
                .collect();
            let now = crate::action::now_unix_s();
            let (mut gate, state) = match admit_cli(&root, &gate_action, board_refused, now, err) {
                Ok(g) => g,
                Err(code) => return code,
            };
            let mut job = crate::action::executor::ExecJob::new(gate_action.clone(), "cli", now);
            (job.dry_run, job.diagnosis) = (dry_run, Some(std::sync::Arc::new(d)));
            let crate::action::executor::ActionReport::CmaSet(r) =
                cli_executor(&root, &state, ProfileChoice::parse(&profile_arg))
                    .execute(job)
                    .report
            else {
                unreachable!("a boot-file edit reports as one")
            };
            if json {
                write_json(out, &r);
            } else {
                let hint = hint_args(&root_dir, &profile_arg);
                let _ = write!(out, "{}", render_cma_set(&r, &hint));
            }
            if r.outcome == crate::action::cma::CmaSetOutcome::Written {
                record_cli_run(&mut gate, &gate_action, now, err);
            }
            r.outcome.exit_code()
        }
    }
}

/// The `--root` and `--profile` the user gave, as a hint repeats them after a subcommand
/// (` --root DIR --profile ID`; nothing for the defaults `/` and `auto`), quoted for a POSIX
/// shell when needed.
pub(super) fn hint_args(root: &std::path::Path, profile: &str) -> String {
    fn quoted(s: &str) -> String {
        let plain = !s.is_empty()
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || "/._-+:=,@%".contains(c));
        if plain {
            s.to_string()
        } else {
            format!("'{}'", s.replace('\'', "'\\''"))
        }
    }
    let mut args = String::new();
    if root != std::path::Path::new("/") {
        args.push_str(&format!(" --root {}", quoted(&root.to_string_lossy())));
    }
    if profile != "auto" {
        args.push_str(&format!(" --profile {}", quoted(profile)));
    }
    // Board-controlled or user text never carries control characters to the terminal.
    crate::report::clean(&args)
}
