//! The systemd side of `update`: the install runs in a transient oneshot unit (outside the
//! service's sandbox, which keeps `/usr` and `/var/lib/dpkg` read-only, and outside its cgroup,
//! which the package's restart of `npu-agent.service` would kill), and a watchdog service, armed
//! first, reinstalls the old version when the pending-update file is still there at the
//! deadline: the new agent removes it once it is connected and has answered.

use super::update::PACKAGE;
use crate::sys::process::run_with_timeout;
use std::process::Command;
use std::time::Duration;

/// How long `systemd-run` may take to start a unit (or to run the oneshot install).
const INSTALL_MAX_S: u64 = 1800;

/// The `apt-get` command line that installs `version` non-interactively, keeping the board's
/// configuration files.
pub fn apt_install_line(version: &str, allow_downgrade: bool) -> Vec<String> {
    let mut a: Vec<String> = [
        "apt-get",
        "-y",
        "--no-remove",
        "--no-install-recommends",
        "-o",
        "Dpkg::Options::=--force-confold",
        "-o",
        "Dpkg::Options::=--force-confdef",
    ]
    .map(String::from)
    .to_vec();
    if allow_downgrade {
        a.push("--allow-downgrades".into());
    }
    a.extend([
        "install".into(),
        "--".into(),
        format!("{PACKAGE}={version}"),
    ]);
    a
}

/// Seconds the watchdog's apt waits for dpkg's lock (`DPkg::Lock::Timeout`).
const LOCK_WAIT_S: u64 = 600;

/// Seconds the watchdog still gives the new agent when the install was still running at the
/// deadline (a slow mirror): it starts and connects after the install, not at the deadline.
const AFTER_INSTALL_GRACE_S: u64 = 60;

/// The watchdog's shell script: reinstall `old` when the pending record (the host path `$1`)
/// still exists and still records the update `$2` (a plain id,
/// [`crate::mqtt::command::valid_cmd_id`]): a later update's record is not this watchdog's to
/// act on, whose deadline is its own. Both come as arguments, never as script text.
///
/// An install unit `install_unit` still running at the deadline is waited for, and the new agent
/// given [`AFTER_INSTALL_GRACE_S`] after it. Then it stops `npu-agent.service` (a new version
/// that never starts is in its restart loop; a restart job of the package still waiting is
/// cancelled, so its install can end), apt waits for dpkg's lock and reinstalls `old`, whose
/// postinst starts the service again; when apt fails the service is started again as it is (an
/// agent stopped until the next reboot reports nothing).
pub fn watchdog_script(old: &str, install_unit: &str) -> String {
    let mut line = apt_install_line(old, true);
    line.splice(
        1..1,
        [
            "-o".to_string(),
            format!("DPkg::Lock::Timeout={LOCK_WAIT_S}"),
        ],
    );
    let line = line.join(" ");
    let active = format!("systemctl is-active --quiet '{install_unit}'");
    // The record as StateDir::save writes it (serde_json's pretty form: `"cmd_id": "ID"`).
    format!(
        "if {active}; then while {active}; do sleep 5; done; sleep {AFTER_INSTALL_GRACE_S}; fi; \
         grep -qF \"\\\"cmd_id\\\": \\\"$2\\\"\" \"$1\" 2>/dev/null || exit 0; \
         export DEBIAN_FRONTEND=noninteractive; systemctl stop npu-agent.service; \
         {line} || systemctl start npu-agent.service"
    )
}

fn systemd_run(args: &[String], wait_s: u64) -> Result<(), String> {
    let mut cmd = Command::new("systemd-run");
    cmd.args(["--quiet", "--collect"]).args(args);
    match run_with_timeout(&mut cmd, Duration::from_secs(wait_s), |_| {}) {
        Ok(d) if d.status.success() => Ok(()),
        Ok(d) => Err(format!("systemd-run failed: {}", d.stderr.trim())),
        Err(e) => Err(format!("cannot run systemd-run: {e}")),
    }
}

/// Arms the watchdog of the update `cmd_id`: the transient service
/// `npu-agent-update-watchdog-<now_s>` sleeps `deadline_s` seconds, then runs
/// [`watchdog_script`] as root. A running service, not a `systemd-run --on-active` timer: every
/// package's postinst runs `systemctl daemon-reload`, and on the booted image a transient timer
/// armed before it never fired (it was gone from `systemctl list-timers`), where a running
/// service goes on.
///
/// Errors: `cmd_id` is not a plain id; systemd-run's refusal.
pub fn arm_watchdog(
    pending: &str,
    old: &str,
    cmd_id: &str,
    deadline_s: i64,
    now_s: i64,
) -> Result<(), String> {
    if !crate::mqtt::command::valid_cmd_id(cmd_id) {
        return Err(format!("{cmd_id:?} is not a plain command id"));
    }
    // `old` comes from dpkg's database; it goes into the script, so it is held to its shape.
    crate::parse::dpkg::check_debian_version(old)?;
    let script = watchdog_script(old, &install_unit(now_s));
    systemd_run(
        &[
            format!("--unit=npu-agent-update-watchdog-{now_s}"),
            "/bin/sh".into(),
            "-c".into(),
            format!("sleep {deadline_s}; {script}"),
            "npu-agent-update-watchdog".into(),
            pending.into(),
            cmd_id.into(),
        ],
        60,
    )
}

/// Runs the install of `version` in the transient oneshot `npu-agent-update-<now_s>` and waits
/// for it. The package's restart of `npu-agent.service` usually ends the wait first: systemd
/// sends SIGTERM to the service's whole cgroup, `systemd-run` included, while the install goes
/// on in its own unit. A `systemd-run` ended by a signal is therefore no failure: the pending
/// record stays for the agent that comes back (or for the watchdog).
///
/// Errors: the unit failed (apt's log is in its journal), or systemd-run could not run.
pub fn install(version: &str, allow_downgrade: bool, now_s: i64) -> Result<(), String> {
    let mut cmd = Command::new("systemd-run");
    cmd.args(["--quiet", "--collect"])
        .arg(format!("--unit={}", install_unit(now_s)))
        .args([
            "--service-type=oneshot",
            "--setenv=DEBIAN_FRONTEND=noninteractive",
        ])
        .arg(format!("--property=TimeoutStartSec={INSTALL_MAX_S}"))
        .args(apt_install_line(version, allow_downgrade));
    let see = format!("see journalctl -u npu-agent-update-{now_s}");
    match run_with_timeout(&mut cmd, Duration::from_secs(INSTALL_MAX_S + 60), |_| {}) {
        Ok(d) => install_wait_ended(d.status, &d.stderr).map_err(|e| format!("{e} ({see})")),
        Err(e) => Err(format!("cannot run systemd-run: {e} ({see})")),
    }
}

/// The transient unit of the install started at `now_s` (the watchdog waits for it).
fn install_unit(now_s: i64) -> String {
    format!("npu-agent-update-{now_s}.service")
}

/// How the wait for the install unit ended, from `systemd-run`'s exit `status` and `stderr`:
/// exit 0 (the unit finished) or a signal (this service is being stopped by the package's
/// restart) are no failure; any exit code is (the unit failed).
///
/// Errors: systemd-run's message.
pub fn install_wait_ended(status: std::process::ExitStatus, stderr: &str) -> Result<(), String> {
    use std::os::unix::process::ExitStatusExt;
    if status.success() || status.signal().is_some() {
        Ok(())
    } else {
        Err(format!("systemd-run failed: {}", stderr.trim()))
    }
}
