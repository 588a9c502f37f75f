use super::*;

fn pending() -> Pending {
    Pending {
        old: "1.0-1".into(),
        new: "1.1-1".into(),
        cmd_id: "u1".into(),
        deadline_unix_s: 1300,
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

#[test]
fn the_install_lines_name_one_package() {
    use crate::action::update_unit::{apt_install_line, watchdog_script};
    let l = apt_install_line("1.1-1", false);
    assert_eq!(l.last().map(String::as_str), Some("npu-agent=1.1-1"));
    assert!(!l.iter().any(|a| a == "--allow-downgrades"));
    assert!(apt_install_line("1.0-1", true)
        .iter()
        .any(|a| a == "--allow-downgrades"));
    let w = watchdog_script("/var/lib/npu-agent/update-pending.json", "1.0-1", "u1");
    assert!(
        w.starts_with(
            "grep -qF '\"cmd_id\": \"u1\"' '/var/lib/npu-agent/update-pending.json' 2>/dev/null || exit 0;"
        ),
        "{w}"
    );
    assert!(w.ends_with("install -- npu-agent=1.0-1"), "{w}");
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
