//! A `fix` the service's own sandbox cannot carry out (`ProtectSystem=strict` keeps `/etc`,
//! `/usr` and `/var/lib/dpkg` read-only to it) runs as `npu-agent fix --yes --json` in a
//! transient systemd unit outside the sandbox, as a reboot goes through `systemctl reboot`. The
//! sandbox bounds what the agent does by itself; a `fix` the gate admitted (signed, or unsigned
//! where the operator listed `fix` in `allow_unsigned`) is the authority for this one step out
//! of it.
//!
//! The unit is a oneshot started through `systemd-run` without `--wait` or `--pipe`, which need
//! a D-Bus daemon that minimal images lack: root's private systemd socket starts it, the start
//! job ends when the fix has, and the report comes back through a file in the state directory
//! (`StandardOutput=file:`). The step it is at comes back the same way: the child saves it to
//! `<unit>.step` in the state directory as each step starts, and the agent, polling that file,
//! publishes it with the command's `executing`.

use super::OnStep;
use crate::action::state::StateDir;
use crate::diagnose::ProfileChoice;
use crate::model::action::ActionOutcome;
use crate::sys::process::run_with_timeout;
use serde_json::Value;
use std::process::Command;
use std::time::Duration;

/// Set in the transient unit, so the fix there never hands itself on again.
const DELEGATED_ENV: &str = "NPU_FIX_DELEGATED";
/// Set in the transient unit: the state file (a name in the state directory) the child saves
/// its current step to.
const STEP_ENV: &str = "NPU_FIX_STEP_FILE";
/// How often the agent looks at the child's step file.
const STEP_POLL: Duration = Duration::from_millis(250);
/// The transient unit's time limit (`TimeoutStartSec=` of a oneshot): an apt run has its own.
const UNIT_MAX_S: u64 = 1200;

/// Whether a fix refused here can run outside the sandbox: the live root, this process started
/// by systemd (`INVOCATION_ID`), and not already the delegated run.
pub fn available(root: &crate::root::SysRoot) -> bool {
    root.is_live()
        && std::env::var_os("INVOCATION_ID").is_some()
        && std::env::var_os(DELEGATED_ENV).is_none()
}

/// Runs `npu-agent fix --yes --json --profile P CHECK...` in the transient oneshot unit
/// `npu-agent-fix-<now_s>-<pid>` and waits for it; the outcome is the child's report (its `result`
/// decides), with the unit's name added. Its output files in `state` (`<unit>.json`, and
/// `<unit>.json.err` for its log) are removed afterwards.
pub fn run(
    checks: &[String],
    profile: &ProfileChoice,
    state: &StateDir,
    now_s: i64,
    on_step: OnStep,
) -> ActionOutcome {
    // Unique per run: a second fix in the same second (another process) never shares it.
    let unit = format!("npu-agent-fix-{now_s}-{}", std::process::id());
    let report = state.board_path(&format!("{unit}.json"));
    let exe = std::env::current_exe().unwrap_or_else(|_| "/usr/bin/npu-agent".into());
    let mut cmd = Command::new("systemd-run");
    cmd.args(["--quiet", "--collect", "--service-type=oneshot"])
        .arg(format!("--unit={unit}"))
        .arg(format!("--setenv={DELEGATED_ENV}=1"))
        .arg(format!("--setenv={STEP_ENV}={unit}.step"))
        .arg("--property=EnvironmentFile=-/etc/default/npu-agent")
        .arg(format!("--property=TimeoutStartSec={UNIT_MAX_S}"))
        .arg(format!("--property=StandardOutput=file:{report}"))
        .arg(format!("--property=StandardError=file:{report}.err"))
        .arg(exe)
        .args(["fix", "--yes", "--json", "--profile"])
        .arg(profile.arg())
        .args(checks);
    tracing::info!(target: "action::fix", unit, "the sandbox keeps the fix's files read-only: running it in a transient unit");
    let step_file = format!("{unit}.step");
    let finished = std::sync::atomic::AtomicBool::new(false);
    let done = std::thread::scope(|s| {
        s.spawn(|| follow_steps(state, &step_file, &finished, &*on_step));
        let done = run_with_timeout(&mut cmd, Duration::from_secs(UNIT_MAX_S + 60), |_| {});
        finished.store(true, std::sync::atomic::Ordering::Relaxed);
        done
    });
    let _ = std::fs::remove_file(state.board_path(&step_file));
    let mut text = [String::new(), String::new()];
    for (t, path) in text
        .iter_mut()
        .zip([report.clone(), format!("{report}.err")])
    {
        *t = String::from_utf8_lossy(&state.root().read(&path).unwrap_or_default()).into_owned();
        let _ = std::fs::remove_file(&path);
    }
    match done {
        // Nothing logged by the child: it never started, and systemd-run says why.
        Ok(d) if text[1].trim().is_empty() => outcome(&text[0], &d.stderr, &unit),
        Ok(_) => outcome(&text[0], &text[1], &unit),
        Err(e) => ActionOutcome::refused(
            format!("cannot run the fix outside the sandbox: {e}"),
            Value::Null,
        ),
    }
}

/// Tells `on_step` each new step the child saved to `name` in `state`, until `finished`.
fn follow_steps(
    state: &StateDir,
    name: &str,
    finished: &std::sync::atomic::AtomicBool,
    on_step: &dyn Fn(&str),
) {
    let mut told = String::new();
    while !finished.load(std::sync::atomic::Ordering::Relaxed) {
        std::thread::sleep(STEP_POLL);
        // JSON strings, through the state directory's one Value reader and writer.
        if let Ok(Some(serde_json::Value::String(step))) = state.load::<serde_json::Value>(name) {
            if step != told {
                on_step(&step);
                told = step;
            }
        }
    }
}

/// In the delegated run: what saves each step to the file the agent follows (the name
/// [`run`] set in the environment, a plain `npu-agent-fix-*.step` name in `state`); `None`
/// outside it.
pub fn step_saver(state: &StateDir) -> Option<OnStep> {
    let name = std::env::var(STEP_ENV).ok()?;
    let plain = name.starts_with("npu-agent-fix-")
        && name.ends_with(".step")
        && !name.contains('/')
        && !name.contains("..");
    if !plain || std::env::var_os(DELEGATED_ENV).is_none() {
        return None;
    }
    let state = state.clone();
    Some(std::sync::Arc::new(move |step: &str| {
        if let Err(e) = state.save(&name, &serde_json::Value::from(step)) {
            tracing::warn!(target: "action::fix", error = %e, "the current step could not be saved for the agent");
        }
    }))
}

/// The outcome from the child's output: its last JSON document is the report (the plan comes
/// first); without one, the last line it wrote on standard error says why.
pub fn outcome(stdout: &str, stderr: &str, unit: &str) -> ActionOutcome {
    // `--json` prints each document pretty, its first line `{` at the start of a line.
    let last = stdout.rfind("\n{").map_or(stdout, |i| &stdout[i..]);
    let report = serde_json::from_str::<Value>(last).ok();
    let Some(mut report) = report.filter(|v| v.get("result").is_some()) else {
        let why = crate::sys::redact::redact_text(stderr.lines().last().unwrap_or("no report"));
        return ActionOutcome::failed(
            format!("the fix in unit {unit} ended without a report: {why}"),
            Value::Null,
        );
    };
    let message = report["message"].as_str().unwrap_or_default().to_string();
    let result = report["result"].as_str().unwrap_or_default().to_string();
    report["unit"] = unit.into();
    match result.as_str() {
        "fixed" | "reboot_needed" => ActionOutcome::succeeded(message, report),
        "refused" => ActionOutcome::refused(message, report),
        _ => ActionOutcome::failed(message, report),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_report_after_the_plan_decides() {
        let out = "{\n  \"entries\": [\n    {}\n  ]\n}\n{\n  \"result\": \"reboot_needed\",\n  \"message\": \"applied\"\n}\n";
        let o = outcome(out, "", "u1");
        assert!(o.ok && o.ran, "{o:?}");
        assert_eq!(o.details["unit"], "u1");
        let o = outcome(
            "{\"result\": \"still_firing\", \"message\": \"m\"}",
            "",
            "u1",
        );
        assert!(!o.ok && o.ran && o.message == "m", "{o:?}");
        let o = outcome("{\"result\": \"refused\", \"message\": \"busy\"}", "", "u");
        assert!(!o.ok && !o.ran, "{o:?}");
    }

    #[test]
    fn no_report_says_the_childs_last_line() {
        let o = outcome(
            "{\"entries\": []}",
            "x\nnpu-agent: refused: fix is disabled\n",
            "u2",
        );
        assert!(!o.ok, "{o:?}");
        assert!(
            o.message.contains("u2") && o.message.ends_with("refused: fix is disabled"),
            "{o:?}"
        );
        let o = outcome("not json", "", "u3");
        assert!(o.message.ends_with("no report"), "{o:?}");
    }

    #[test]
    fn each_step_the_child_saves_is_told_once() {
        use std::sync::{atomic::AtomicBool, Mutex};
        let tmp = tempfile::tempdir().unwrap();
        let root = crate::root::SysRoot::new(tmp.path());
        let state = StateDir::default_for(&root);
        std::fs::create_dir_all(root.join(&state.board_path("")).unwrap()).unwrap();
        let name = "npu-agent-fix-1-2.step";
        let told = Mutex::new(Vec::<String>::new());
        let finished = AtomicBool::new(false);
        let wait_for = |n: usize| {
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            while told.lock().unwrap().len() < n && std::time::Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
        };
        std::thread::scope(|s| {
            s.spawn(|| {
                follow_steps(&state, name, &finished, &|t| {
                    told.lock().unwrap().push(t.to_string())
                })
            });
            state.save(name, &"1 of 2: a").unwrap();
            wait_for(1);
            // The same step saved again is not told twice.
            state.save(name, &"1 of 2: a").unwrap();
            state.save(name, &"2 of 2: b").unwrap();
            wait_for(2);
            finished.store(true, std::sync::atomic::Ordering::Relaxed);
        });
        assert_eq!(*told.lock().unwrap(), ["1 of 2: a", "2 of 2: b"]);
    }

    #[test]
    fn a_captured_tree_never_delegates() {
        let tmp = tempfile::tempdir().unwrap();
        assert!(!available(&crate::root::SysRoot::new(tmp.path())));
    }
}
