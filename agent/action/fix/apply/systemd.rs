//! The systemd steps of a fix: `systemctl daemon-reload` and `systemctl restart <unit>`, and,
//! after a restart, the limits the unit's main process runs with (`/proc/<pid>/limits`), which
//! is how a `LimitMEMLOCK=` drop-in is proven to have taken effect.

use super::files::unit_name;
use crate::parse::limits::{parse_limits, ProcessLimits};
use crate::root::SysRoot;
use crate::sys::process::{run_capture, run_with_timeout};
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

/// How `systemctl` is run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SystemdEnv {
    /// The `systemctl` program.
    pub systemctl: PathBuf,
    /// Deadline of one call (a restart waits for the unit's start).
    pub timeout: Duration,
}

impl SystemdEnv {
    /// The board's own `systemctl`, 90 s per call (systemd's default start timeout).
    pub fn live() -> SystemdEnv {
        SystemdEnv {
            systemctl: "systemctl".into(),
            timeout: Duration::from_secs(90),
        }
    }

    fn run(&self, args: &[&str]) -> Result<(), String> {
        let mut cmd = Command::new(&self.systemctl);
        cmd.args(args).env("SYSTEMD_PAGER", "").env("LC_ALL", "C");
        let f = run_with_timeout(&mut cmd, self.timeout, |_| {}).map_err(|e| e.to_string())?;
        if f.status.success() {
            Ok(())
        } else {
            Err(format!(
                "systemctl {} failed ({}): {}",
                args.join(" "),
                f.status,
                f.stderr.trim()
            ))
        }
    }
}

/// `systemctl daemon-reload` (systemd reads drop-ins only then).
///
/// Errors: the failure as a sentence.
pub fn daemon_reload(env: &SystemdEnv) -> Result<(), String> {
    env.run(&["daemon-reload"])
}

/// `systemctl restart -- <unit>`.
///
/// Errors: a unit name that is not one, or the failure as a sentence.
pub fn restart(env: &SystemdEnv, unit: &str) -> Result<(), String> {
    unit_name(unit)?;
    env.run(&["restart", "--", unit])
}

/// The unit's main process id (`systemctl show -p MainPID --value <unit>`).
///
/// Errors: a bad unit name, a failed call, or no main process (`0`: the unit is not running).
pub fn main_pid(env: &SystemdEnv, unit: &str) -> Result<u32, String> {
    unit_name(unit)?;
    let mut cmd = Command::new(&env.systemctl);
    cmd.args(["show", "-p", "MainPID", "--value", "--", unit])
        .env("SYSTEMD_PAGER", "")
        .env("LC_ALL", "C");
    let (f, out) = run_capture(&mut cmd, env.timeout, 4096).map_err(|e| e.to_string())?;
    if !f.status.success() {
        return Err(format!(
            "systemctl show {unit} failed ({}): {}",
            f.status,
            f.stderr.trim()
        ));
    }
    match out.trim().parse::<u32>() {
        Ok(0) => Err(format!("{unit} has no main process (it is not running)")),
        Ok(pid) => Ok(pid),
        Err(_) => Err(format!(
            "systemctl show {unit} gave {:?}, not a process id",
            out.trim()
        )),
    }
}

/// The limits of `unit`'s main process as the kernel reports them (`/proc/<pid>/limits` under
/// `root`).
///
/// Errors: as [`main_pid`], or the limits file unreadable or malformed.
pub fn unit_limits(
    root: &SysRoot,
    env: &SystemdEnv,
    unit: &str,
) -> Result<(u32, ProcessLimits), String> {
    let pid = main_pid(env, unit)?;
    let path = format!("/proc/{pid}/limits");
    let text = root.read_string(&path).map_err(|e| e.to_string())?;
    let limits = parse_limits(&text).map_err(|e| format!("{path}: {e}"))?;
    Ok((pid, limits))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// A stand-in `systemctl` that appends its argv to `argv.log` and prints `out`.
    fn stand_in(dir: &std::path::Path, out: &str, code: i32) -> SystemdEnv {
        let script = dir.join("systemctl");
        let log = dir.join("argv.log");
        std::fs::write(
            &script,
            format!(
                "#!/bin/sh\necho \"$*\" >> '{}'\nprintf '%s' '{out}'\nexit {code}\n",
                log.display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        SystemdEnv {
            systemctl: script,
            timeout: Duration::from_secs(10),
        }
    }

    #[test]
    fn calls_have_the_expected_shape() {
        let dir = tempfile::tempdir().unwrap();
        let env = stand_in(dir.path(), "4242\n", 0);
        daemon_reload(&env).unwrap();
        restart(&env, "hailo-ollama.service").unwrap();
        assert_eq!(main_pid(&env, "hailo-ollama.service").unwrap(), 4242);
        assert!(restart(&env, "--force").is_err());
        assert!(restart(&env, "../x.service").is_err());
        let log = std::fs::read_to_string(dir.path().join("argv.log")).unwrap();
        assert_eq!(
            log,
            "daemon-reload\nrestart -- hailo-ollama.service\nshow -p MainPID --value -- hailo-ollama.service\n"
        );
        // Limits of the main process, read under the root.
        let root_dir = tempfile::tempdir().unwrap();
        let limits = std::fs::read_to_string("/proc/self/limits").unwrap();
        std::fs::create_dir_all(root_dir.path().join("proc/4242")).unwrap();
        std::fs::write(root_dir.path().join("proc/4242/limits"), limits).unwrap();
        let (pid, l) =
            unit_limits(&SysRoot::new(root_dir.path()), &env, "hailo-ollama.service").unwrap();
        assert_eq!(pid, 4242);
        assert_eq!(
            l,
            parse_limits(&std::fs::read_to_string("/proc/self/limits").unwrap()).unwrap()
        );
    }

    #[test]
    fn failures_and_stopped_units_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        let env = stand_in(dir.path(), "0", 0);
        let e = main_pid(&env, "x.service").unwrap_err();
        assert!(e.contains("not running"), "{e}");
        let env = stand_in(dir.path(), "", 5);
        let e = restart(&env, "x.service").unwrap_err();
        assert!(e.contains("exit status: 5"), "{e}");
        let env = SystemdEnv {
            systemctl: dir.path().join("missing"),
            timeout: Duration::from_secs(1),
        };
        assert!(daemon_reload(&env).unwrap_err().contains("not installed"));
    }
}
