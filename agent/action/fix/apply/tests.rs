use super::*;
use std::os::unix::fs::PermissionsExt;

fn tree() -> (tempfile::TempDir, SysRoot) {
    let d = tempfile::tempdir().unwrap();
    for dir in ["etc/systemd/system", "etc/modprobe.d", "boot/firmware"] {
        std::fs::create_dir_all(d.path().join(dir)).unwrap();
    }
    std::fs::write(
        d.path().join("boot/firmware/cmdline.txt"),
        "console=tty1 rootwait\n",
    )
    .unwrap();
    let root = SysRoot::new(d.path());
    (d, root)
}

fn steps() -> Vec<Step> {
    vec![
        Step::UnitDropIn {
            unit: "hailo-ollama.service".into(),
            file: "90-npu-agent.conf".into(),
            section: "Service".into(),
            settings: vec![("LimitMEMLOCK".into(), "infinity".into())],
        },
        Step::ModuleOption {
            module: "hailo1x_pci".into(),
            file: "hailo_pci.conf".into(),
            key: "force_desc_page_size".into(),
            value: "4096".into(),
        },
        Step::BootKey {
            file: "/boot/firmware/cmdline.txt".into(),
            key: "pcie_aspm".into(),
            value: "off".into(),
        },
        Step::RebootNeeded,
    ]
}

#[test]
fn file_steps_run_in_order_and_say_a_reboot_is_needed() {
    let (_d, root) = tree();
    let out = apply(&root, &steps(), &ApplyEnv::for_root(&root));
    assert_eq!(out.result, ApplyResult::Applied, "{out:?}");
    assert!(out.steps.iter().all(|s| s.state == StepState::Done));
    assert!(out.reboot_needed);
    assert_eq!(
        root.read_string("/boot/firmware/cmdline.txt").unwrap(),
        "console=tty1 rootwait pcie_aspm=off\n"
    );
    let json = serde_json::to_value(&out).unwrap();
    assert_eq!(json["result"], "applied");
    assert_eq!(json["steps"][0]["state"], "done");
    assert_eq!(json["steps"][0]["step"]["kind"], "unit_drop_in");
    assert_eq!(
        json["steps"][2]["file"]["before"][0],
        "console=tty1 rootwait"
    );
    // Again: every file already says so; no reboot for unchanged boot files.
    let again = apply(&root, &steps()[..3], &ApplyEnv::for_root(&root));
    assert_eq!(again.result, ApplyResult::Applied);
    assert!(again
        .steps
        .iter()
        .all(|s| s.file.as_ref().is_some_and(|f| !f.changed)));
    assert!(!again.reboot_needed);
}

#[test]
fn a_failed_step_undoes_the_file_steps_before_it() {
    let (d, root) = tree();
    std::fs::write(
        d.path().join("etc/modprobe.d/hailo_pci.conf"),
        "options hailo1x_pci debug=1\n",
    )
    .unwrap();
    // The boot file is read-only: step 3 fails.
    let cmdline = d.path().join("boot/firmware/cmdline.txt");
    std::fs::set_permissions(&cmdline, std::fs::Permissions::from_mode(0o444)).unwrap();
    let out = apply(&root, &steps(), &ApplyEnv::for_root(&root));
    assert_eq!(out.result, ApplyResult::Failed);
    let states: Vec<StepState> = out.steps.iter().map(|s| s.state).collect();
    assert_eq!(
        states,
        [
            StepState::Undone,
            StepState::Undone,
            StepState::Failed,
            StepState::NotRun
        ]
    );
    assert!(
        out.steps[2].detail.contains("read-only"),
        "{}",
        out.steps[2].detail
    );
    assert!(out.error.starts_with("step 3 "), "{}", out.error);
    assert!(!out.reboot_needed);
    assert!(!d
        .path()
        .join("etc/systemd/system/hailo-ollama.service.d")
        .exists());
    assert_eq!(
        std::fs::read_to_string(d.path().join("etc/modprobe.d/hailo_pci.conf")).unwrap(),
        "options hailo1x_pci debug=1\n"
    );
}

#[test]
fn tool_steps_are_refused_on_a_tree_before_anything_runs() {
    let (d, root) = tree();
    let mut s = steps();
    s.push(Step::DaemonReload);
    let out = apply(&root, &s, &ApplyEnv::for_root(&root));
    assert_eq!(out.result, ApplyResult::Refused);
    assert!(
        out.error.contains("only on the live system"),
        "{}",
        out.error
    );
    assert!(out.steps.iter().all(|s| s.state == StepState::NotRun));
    assert!(!d
        .path()
        .join("etc/systemd/system/hailo-ollama.service.d")
        .exists());
    let pkg = vec![Step::PackageHold {
        packages: vec!["hailo-h10-all".into()],
    }];
    let out = apply(&root, &pkg, &ApplyEnv::for_root(&root));
    assert_eq!(out.result, ApplyResult::Refused);
    // A bad name is refused whatever the tools.
    let bad = vec![Step::RestartUnit {
        unit: "--now".into(),
    }];
    let out = apply(&root, &bad, &ApplyEnv::for_root(&root));
    assert!(out.error.contains("not a plain file name"), "{}", out.error);
}

#[test]
fn systemd_steps_run_through_the_given_systemctl() {
    let (d, root) = tree();
    let script = d.path().join("systemctl-stand-in");
    let log = d.path().join("argv.log");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\necho \"$*\" >> '{}'\n[ \"$1\" != restart ] || [ \"$3\" != bad.service ]\n",
            log.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let env = ApplyEnv {
        apt: None,
        systemd: Some(SystemdEnv {
            systemctl: script,
            timeout: std::time::Duration::from_secs(10),
        }),
    };
    let mut s = vec![
        steps()[0].clone(),
        Step::DaemonReload,
        Step::RestartUnit {
            unit: "hailo-ollama.service".into(),
        },
    ];
    let out = apply(&root, &s, &env);
    assert_eq!(out.result, ApplyResult::Applied, "{out:?}");
    assert_eq!(
        std::fs::read_to_string(&log).unwrap(),
        "daemon-reload\nrestart -- hailo-ollama.service\n"
    );
    // A failed restart undoes the drop-in; the reload stays done.
    s[2] = Step::RestartUnit {
        unit: "bad.service".into(),
    };
    std::fs::remove_dir_all(d.path().join("etc/systemd/system/hailo-ollama.service.d")).unwrap();
    let out = apply(&root, &s, &env);
    let states: Vec<StepState> = out.steps.iter().map(|s| s.state).collect();
    assert_eq!(
        states,
        [StepState::Undone, StepState::Done, StepState::Failed]
    );
    assert!(out.error.contains("step(s) 2 stay done"), "{}", out.error);
    assert!(!d
        .path()
        .join("etc/systemd/system/hailo-ollama.service.d")
        .exists());
}

#[test]
fn in_a_container_the_live_root_is_not_the_host_and_no_step_writes_it() {
    // Only access(2) is asked: nothing is written, whatever the answer.
    let c = crate::sys::container::InContainer {
        evidence: "a Home Assistant add-on: SUPERVISOR_TOKEN is set".into(),
        addon: true,
    };
    let live = SysRoot::new("/");
    let option = Step::ModuleOption {
        module: "hailo_pci".into(),
        file: "hailo_pci.conf".into(),
        key: "force_desc_page_size".into(),
        value: "4096".into(),
    };
    let e = writable_in(&live, std::slice::from_ref(&option), Some(&c)).unwrap_err();
    assert!(
        e.starts_with("/etc/modprobe.d/hailo_pci.conf is the host's"),
        "{e}"
    );
    assert!(
        e.contains("this container's own files are not the host's"),
        "{e}"
    );
    assert!(e.contains("Home Assistant host's shell"), "{e}");
    let e = writable_in(&live, &[Step::DaemonReload], Some(&c)).unwrap_err();
    assert!(e.starts_with("/etc/systemd/system is the host's"), "{e}");
    // A board tree outside a container: the existing rule (a writable temp dir passes).
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(
        writable_in(&SysRoot::new(dir.path()), &[option], None),
        Ok(())
    );
}
