//! `npu-agent fix [CHECK_ID...] [--dry-run] [--yes] [--root DIR] [--json]`: the plan of every
//! fired finding's fix (or of the named checks), and, once applying is wired, the fix itself
//! after confirmation.
//!
//! The logic is [`run`] over [`FixOptions`], whatever parses the command line.

use super::{require_root_dir, EXIT_FINDINGS, EXIT_OK, EXIT_USAGE};
use crate::action::fix::plan::{plan, FixPlan};
use crate::action::fix::run::FixResult;
use crate::diagnose::{diagnose_with, DiagnoseOptions, ProfileChoice};
use crate::root::SysRoot;
use std::io::{BufRead, Write};
use std::path::PathBuf;

/// What `fix` is asked to do.
#[derive(Debug, Clone, PartialEq, Eq, clap::Args)]
pub struct FixOptions {
    /// Read and write every file under DIR instead of / (a captured or test tree: file steps
    /// only, no apt or systemctl).
    #[arg(long, value_name = "DIR", default_value = "/")]
    pub root: PathBuf,
    /// Profile id, profile file, or auto.
    #[arg(long, value_name = "ID|FILE", default_value = "auto")]
    pub profile: String,
    /// Print the plan; change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Apply without asking.
    #[arg(long)]
    pub yes: bool,
    /// Print the plan (and the result) as JSON.
    #[arg(long)]
    pub json: bool,
    /// Fix only the findings of these checks (default: every finding that fires).
    #[arg(value_name = "CHECK_ID")]
    pub checks: Vec<String>,
    /// Standard input is a terminal a person can confirm on (not an option: `npu-agent fix`
    /// sets it from standard input).
    #[arg(skip)]
    pub terminal: bool,
}

impl Default for FixOptions {
    fn default() -> Self {
        FixOptions {
            checks: Vec::new(),
            dry_run: false,
            yes: false,
            root: PathBuf::from("/"),
            profile: "auto".into(),
            json: false,
            terminal: false,
        }
    }
}

/// What `fix` does with the plan it printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// `--dry-run`: the plan only.
    DryRun,
    /// No `--yes` and no terminal to confirm on: the plan only, and why.
    NoConfirmation,
    /// Apply the plan (`--yes`, or confirmed on a terminal).
    Apply,
}

impl FixOptions {
    fn mode(&self) -> Mode {
        if self.dry_run {
            Mode::DryRun
        } else if !self.yes && !self.terminal {
            Mode::NoConfirmation
        } else {
            Mode::Apply
        }
    }
}

/// Runs `fix`: diagnoses the board under `opts.root`, prints the plan on `out` (text or JSON),
/// and says on `err` what happens next. Returns the exit code: 0 when the plan is all that was
/// asked for (or there is nothing to apply), 1 when applying is refused, 2 for a usage error (a
/// `--root` that is no directory, a check id that does not exist).
pub fn run(opts: FixOptions, out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    if let Err(code) = require_root_dir(&opts.root, err) {
        return code;
    }
    let unknown: Vec<&str> = opts
        .checks
        .iter()
        .map(String::as_str)
        .filter(|id| !crate::model::CHECK_IDS.contains(id))
        .collect();
    if !unknown.is_empty() {
        let _ = writeln!(
            err,
            "npu-agent: no such check id: {} (the ids: docs/user-guide.md \"Checks\", or the first column of `npu-agent check`)",
            unknown.join(", ")
        );
        return EXIT_USAGE;
    }
    let root = SysRoot::new(&opts.root);
    let d = match diagnose_with(
        &root,
        &ProfileChoice::parse(&opts.profile),
        &DiagnoseOptions::default(),
    ) {
        Ok(d) => d,
        Err(e) => {
            let _ = writeln!(err, "npu-agent: {e}");
            return EXIT_USAGE;
        }
    };
    let p = plan(&d.report.findings, &opts.checks);
    if let Err(code) = print_plan(&p, opts.json, out, err) {
        return code;
    }
    match opts.mode() {
        Mode::DryRun => EXIT_OK,
        Mode::NoConfirmation => {
            if p.has_steps() {
                let _ = writeln!(
                    err,
                    "npu-agent: not applied: standard input is not a terminal to confirm on; run `npu-agent fix --yes` to apply the plan, or --dry-run to only show it"
                );
            }
            EXIT_OK
        }
        Mode::Apply if !p.has_steps() => {
            let _ = writeln!(err, "npu-agent: nothing to apply");
            EXIT_OK
        }
        Mode::Apply => {
            if !opts.yes && !confirmed(err) {
                let _ = writeln!(err, "npu-agent: not applied; nothing was changed");
                return EXIT_OK;
            }
            apply(&opts, out, err)
        }
    }
}

/// Asks on `err` and reads the answer from standard input: only `y` or `yes` applies.
fn confirmed(err: &mut dyn Write) -> bool {
    let _ = write!(err, "Apply this plan? [y/N] ");
    let _ = err.flush();
    let mut line = String::new();
    if std::io::stdin().lock().read_line(&mut line).is_err() {
        return false;
    }
    matches!(line.trim().to_ascii_lowercase().as_str(), "y" | "yes")
}

/// The plan on `out`: its text, or its JSON.
///
/// Errors: [`EXIT_USAGE`] when the plan cannot be encoded (after saying so on `err`).
fn print_plan(
    p: &FixPlan,
    json: bool,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<(), i32> {
    if !json {
        let _ = write!(out, "{}", p.render());
        return Ok(());
    }
    // Through a Value: the plan's serialiser is then the one the executor's result uses.
    match serde_json::to_value(p).and_then(|v| serde_json::to_string_pretty(&v)) {
        Ok(s) => {
            let _ = writeln!(out, "{s}");
            Ok(())
        }
        Err(e) => {
            let _ = writeln!(err, "npu-agent: cannot encode the plan: {e}");
            Err(EXIT_USAGE)
        }
    }
}

/// Carries the plan out through the gate and the one executor (which diagnoses again), and
/// prints the result: a line per step and the verdict, or the whole report as JSON.
fn apply(opts: &FixOptions, out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    use crate::action::executor::{ActionReport, ExecJob};
    let root = SysRoot::new(&opts.root);
    let action = crate::model::action::Action::Fix {
        checks: opts.checks.clone(),
        dry_run: false,
    };
    let now = crate::action::now_unix_s();
    let (mut gate, state) = match super::admit_cli(&root, &action, Default::default(), now, err) {
        Ok(g) => g,
        Err(code) => return code,
    };
    let profile = ProfileChoice::parse(&opts.profile);
    let mut job = ExecJob::new(action.clone(), "cli", now);
    job.on_step = crate::action::fix::delegate::step_saver(&state);
    let done = super::cli_executor(&root, &state, profile).execute(job);
    if done.outcome.ran {
        super::record_cli_run(&mut gate, &action, now, err);
    }
    let ActionReport::Fix(report) = done.report else {
        let _ = writeln!(err, "npu-agent: refused: {}", done.outcome.message);
        return EXIT_FINDINGS;
    };
    if opts.json {
        // The report as the executor's result holds it (`details`, keys sorted).
        if let Ok(s) = serde_json::to_string_pretty(&done.outcome.details) {
            let _ = writeln!(out, "{s}");
        }
    } else if let Some(a) = &report.applied {
        let _ = writeln!(out, "\nSteps carried out:");
        for s in &a.steps {
            let text = crate::action::fix::plan::step_text(&s.step, "    ");
            let _ = writeln!(out, "  {}: {text}", s.state.name());
        }
    }
    let _ = writeln!(err, "npu-agent: {}", report.message);
    match report.result {
        FixResult::Fixed | FixResult::RebootNeeded | FixResult::Planned => EXIT_OK,
        FixResult::StillFiring | FixResult::Failed | FixResult::Refused => EXIT_FINDINGS,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run_fix(opts: FixOptions) -> (i32, String, String) {
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let code = run(opts, &mut out, &mut err);
        (
            code,
            String::from_utf8(out).unwrap(),
            String::from_utf8(err).unwrap(),
        )
    }

    /// BR-01's tree: a Hailo-10H with the 4.x userland mixed in, a package swap to plan.
    fn mixed_10h() -> PathBuf {
        std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/boards/pi5-hailo10h-mixed-4.x-and-5.x-userland/root")
    }

    #[test]
    fn the_modes_and_their_exit_codes() {
        let opts = |dry_run: bool, yes: bool, terminal: bool| FixOptions {
            root: mixed_10h(),
            dry_run,
            yes,
            terminal,
            ..FixOptions::default()
        };
        let (code, out, err) = run_fix(opts(true, false, false));
        assert_eq!(code, EXIT_OK, "{err}");
        assert!(out.contains("hailo.package_generation (fail)"), "{out}");
        assert!(
            out.contains("packages to purge: hailo-all, python3-hailort\n"),
            "{out}"
        );
        assert!(err.is_empty(), "{err}");
        let (code, out2, err) = run_fix(opts(false, false, false));
        assert_eq!((code, out2.as_str()), (EXIT_OK, out.as_str()));
        assert!(
            err.contains("not applied: standard input is not a terminal"),
            "{err}"
        );
    }

    #[test]
    fn applying_under_a_board_tree_refuses_package_steps_and_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let copy = std::process::Command::new("cp")
            .arg("-a")
            .arg(mixed_10h())
            .arg(dir.path().join("root"))
            .status()
            .unwrap();
        assert!(copy.success());
        let root = dir.path().join("root");
        let status_before = std::fs::read(root.join("var/lib/dpkg/status")).unwrap();
        let (code, out, err) = run_fix(FixOptions {
            root: root.clone(),
            yes: true,
            ..FixOptions::default()
        });
        assert_eq!(code, EXIT_FINDINGS, "{out}{err}");
        assert!(err.contains("not on a board tree"), "{err}");
        assert_eq!(
            std::fs::read(root.join("var/lib/dpkg/status")).unwrap(),
            status_before
        );
    }

    #[test]
    fn usage_errors_and_json() {
        let (code, out, err) = run_fix(FixOptions {
            root: mixed_10h(),
            checks: vec!["kernel.numa_balancing".into(), "no.such_check".into()],
            dry_run: true,
            ..FixOptions::default()
        });
        assert_eq!(code, EXIT_USAGE);
        assert!(out.is_empty());
        assert!(err.contains("no such check id: no.such_check"), "{err}");
        let (code, _, err) = run_fix(FixOptions {
            root: mixed_10h().join("absent"),
            ..FixOptions::default()
        });
        assert_eq!(code, EXIT_USAGE, "{err}");
        let (code, out, err) = run_fix(FixOptions {
            root: mixed_10h(),
            checks: vec!["board.identity".into()],
            json: true,
            dry_run: true,
            ..FixOptions::default()
        });
        assert_eq!(code, EXIT_OK, "{err}");
        let p: FixPlan = serde_json::from_str(&out).expect(&out);
        assert_eq!(p.entries.len(), 1, "{out}");
        assert_eq!(p.entries[0].check, "board.identity");
        assert!(!p.has_steps());
    }
}
