use super::*;

fn pending() -> Pending {
    Pending {
        old: "1.0-1".into(),
        new: "1.1-1".into(),
        cmd_id: "u1".into(),
        deadline_unix_s: 1300,
        agent_instance: None,
    }
}

/// The agent that comes back: the new version answers successful with its own version; the
/// old one (the watchdog reinstalled it) answers failed with the reason; any other says so.
#[test]
fn a_pending_update_settles_by_the_installed_version() {
    let p = pending();
    let s = settle(&p, Some("1.1-1"), "1.1.0", 1100);
    assert!(s.ok, "{s:?}");
    assert_eq!(s.cmd_id, "u1");
    assert_eq!(
        s.message,
        "updated from 1.0-1 to 1.1-1; agent 1.1.0 is running"
    );
    let s = settle(&p, Some("1.0-1"), "1.0.0", 1300);
    assert!(!s.ok);
    assert_eq!(
        s.message,
        "rolled back to 1.0-1: 1.1-1 did not come back healthy and connected within the deadline"
    );
    let s = settle(&p, Some("1.0-1"), "1.0.0", 1200);
    assert!(s
        .message
        .starts_with("rolled back to 1.0-1: the package is still at 1.0-1"));
    let s = settle(&p, None, "1.0.0", 1200);
    assert!(!s.ok);
    assert!(s.message.contains("at no version"), "{}", s.message);
}

#[test]
fn the_pending_file_is_read_once_and_removed() {
    let dir = tempfile::tempdir().unwrap();
    let root = SysRoot::new(dir.path());
    std::fs::create_dir_all(dir.path().join("var/lib/dpkg")).unwrap();
    std::fs::write(
        dir.path().join("var/lib/dpkg/status"),
        "Package: npu-agent\nStatus: install ok installed\nVersion: 1.0-1\n\n",
    )
    .unwrap();
    let state = StateDir::new(&root, "/var/lib/npu-agent");
    assert_eq!(settle_pending(&state, 1400), Ok(None));
    state.save(PENDING_FILE, &pending()).unwrap();
    let s = settle_pending(&state, 1400).unwrap().unwrap();
    assert!(
        !s.ok && s.message.starts_with("rolled back to 1.0-1"),
        "{s:?}"
    );
    assert_eq!(settle_pending(&state, 1400), Ok(None));
}

/// An attack review: the old agent's link came back during the install (a session taken over
/// by someone with broker access, a broker restart). The process that started the update does
/// not settle it: the record stays for the agent that comes after it, or for the watchdog.
#[test]
fn the_agent_that_started_an_update_never_settles_it_on_a_reconnect() {
    let dir = tempfile::tempdir().unwrap();
    let root = SysRoot::new(dir.path());
    let state = StateDir::new(&root, "/var/lib/npu-agent");
    let mine = Pending {
        agent_instance: Some(process_instance().to_string()),
        ..pending()
    };
    state.save(PENDING_FILE, &mine).unwrap();
    assert_eq!(settle_pending(&state, 1100), Ok(None));
    assert_eq!(state.load::<Pending>(PENDING_FILE).unwrap(), Some(mine));
    // Another process (the instance differs) settles it.
    let other = Pending {
        agent_instance: Some("1-00".into()),
        ..pending()
    };
    state.save(PENDING_FILE, &other).unwrap();
    assert!(settle_pending(&state, 1100).unwrap().is_some());
    assert_eq!(state.load::<Pending>(PENDING_FILE).unwrap(), None);
}

#[test]
fn the_install_lines_name_one_package() {
    use crate::action::update_unit::{apt_install_line, watchdog_script};
    let l = apt_install_line("1.1-1", false);
    assert_eq!(l.last().map(String::as_str), Some("npu-agent=1.1-1"));
    assert!(!l.iter().any(|a| a == "--allow-downgrades"));
    assert!(apt_install_line("1.0-1", true)
        .iter()
        .any(|a| a == "--allow-downgrades"));
    let w = watchdog_script("1.0-1", "npu-agent-update-7.service");
    // The install still running at the deadline is waited for first.
    assert!(
        w.starts_with("if systemctl is-active --quiet 'npu-agent-update-7.service'; then while"),
        "{w}"
    );
    assert!(
        w.ends_with("install -- npu-agent=1.0-1 || systemctl start npu-agent.service"),
        "{w}"
    );
    // The stuck restart job of a version that never starts is cancelled before apt waits for
    // dpkg's lock.
    let stop = w
        .find("systemctl stop npu-agent.service;")
        .expect("the stop");
    let apt = w
        .find("apt-get -o DPkg::Lock::Timeout=600 -y")
        .expect("apt waiting for the lock");
    assert!(stop < apt, "{w}");
}

/// The watchdog's script run by a real `sh`, its record and command id as arguments, with
/// `systemctl` and `apt-get` replaced by scripts that log their arguments: it acts only on its
/// own command's record, waits for a running install, and starts the agent again when apt fails.
#[test]
fn the_watchdog_script_acts_on_its_own_record_only() {
    use crate::action::update_unit::watchdog_script;
    let dir = tempfile::tempdir().unwrap();
    let bin = dir.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let log = dir.path().join("log");
    let fake = |name: &str, body: &str| {
        let p = bin.join(name);
        std::fs::write(
            &p,
            format!(
                "#!/bin/sh\necho \"{name} $*\" >> '{}'\n{body}\n",
                log.display()
            ),
        )
        .unwrap();
        let mut perm = std::fs::metadata(&p).unwrap().permissions();
        std::os::unix::fs::PermissionsExt::set_mode(&mut perm, 0o755);
        std::fs::set_permissions(&p, perm).unwrap();
    };
    // The install unit is inactive; apt fails.
    fake(
        "systemctl",
        "case \"$1\" in is-active) exit 3;; esac; exit 0",
    );
    fake("apt-get", "exit 100");
    let record = dir.path().join("pending with 'quote.json");
    let run = |cmd_id: &str| {
        let _ = std::fs::remove_file(&log);
        let st = std::process::Command::new("sh")
            .arg("-c")
            .arg(watchdog_script("1.0-1", "npu-agent-update-7.service"))
            .arg("watchdog")
            .arg(&record)
            .arg(cmd_id)
            .env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
            .status()
            .unwrap();
        (st, std::fs::read_to_string(&log).unwrap_or_default())
    };
    std::fs::write(&record, "{\n  \"cmd_id\": \"u2\"\n}\n").unwrap();
    let (st, calls) = run("u1");
    assert!(st.success(), "{calls}");
    assert!(
        !calls.contains("apt-get"),
        "another update's record: {calls}"
    );
    let (_, calls) = run("u2");
    assert!(
        calls.contains("systemctl stop npu-agent.service"),
        "{calls}"
    );
    assert!(calls.contains("install -- npu-agent=1.0-1"), "{calls}");
    assert!(
        calls
            .trim_end()
            .ends_with("systemctl start npu-agent.service"),
        "apt failed: the agent is started again: {calls}"
    );
}

/// The package's restart stops the service's whole cgroup, `systemd-run` waiting for the install
/// unit included: ended by SIGTERM it is no failure (the pending record must stay); an exit code
/// is the unit's failure.
#[test]
fn a_wait_ended_by_the_restart_is_no_failure() {
    use crate::action::update_unit::install_wait_ended;
    use std::os::unix::process::ExitStatusExt;
    use std::process::ExitStatus;
    assert_eq!(install_wait_ended(ExitStatus::from_raw(0), ""), Ok(()));
    assert_eq!(install_wait_ended(ExitStatus::from_raw(15), ""), Ok(()));
    assert_eq!(
        install_wait_ended(
            ExitStatus::from_raw(1 << 8),
            "Job for npu-agent-update-1.service failed.\n"
        ),
        Err("systemd-run failed: Job for npu-agent-update-1.service failed.".into())
    );
}

/// The package's postinst restarts the service: the new agent settles while dpkg still has the
/// package `half-configured` at the new version, and that is the version it answers with.
#[test]
fn the_new_agent_started_by_the_postinst_settles_at_the_new_version() {
    let dir = tempfile::tempdir().unwrap();
    let root = SysRoot::new(dir.path());
    std::fs::create_dir_all(dir.path().join("var/lib/dpkg")).unwrap();
    std::fs::write(
        dir.path().join("var/lib/dpkg/status"),
        "Package: npu-agent\nStatus: install ok half-configured\nVersion: 1.1-1\n\n",
    )
    .unwrap();
    assert_eq!(installed_version(&root), None);
    let state = StateDir::new(&root, "/var/lib/npu-agent");
    state.save(PENDING_FILE, &pending()).unwrap();
    let s = settle_pending(&state, 1100).unwrap().unwrap();
    assert!(s.ok, "{s:?}");
    assert_eq!(
        s.message,
        format!(
            "updated from 1.0-1 to 1.1-1; agent {} is running",
            env!("CARGO_PKG_VERSION")
        )
    );
}
