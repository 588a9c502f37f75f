use super::*;
use crate::action::atomic::RealStorage;

fn tree() -> (tempfile::TempDir, SysRoot) {
    let d = tempfile::tempdir().unwrap();
    for dir in [
        "etc/systemd/system",
        "etc/modprobe.d",
        "etc/sysctl.d",
        "boot/firmware",
        "proc/sys/kernel",
    ] {
        std::fs::create_dir_all(d.path().join(dir)).unwrap();
    }
    let root = SysRoot::new(d.path());
    (d, root)
}

fn drop_in(value: &str) -> Step {
    Step::UnitDropIn {
        unit: "hailo-ollama.service".into(),
        file: "90-npu-agent.conf".into(),
        section: "Service".into(),
        settings: vec![("LimitMEMLOCK".into(), value.into())],
    }
}

const DROP_IN: &str = "/etc/systemd/system/hailo-ollama.service.d/90-npu-agent.conf";

#[test]
fn a_drop_in_is_created_then_undone_with_its_directory() {
    let (d, root) = tree();
    let (c, u) = apply_file(&root, &mut RealStorage, &drop_in("infinity")).unwrap();
    assert!(c.created && c.changed);
    assert_eq!(c.path, DROP_IN);
    assert_eq!(c.after, ["[Service]", "LimitMEMLOCK=infinity"]);
    assert_eq!(c.backup, None);
    assert_eq!(
        root.read_string(DROP_IN).unwrap(),
        "[Service]\nLimitMEMLOCK=infinity\n"
    );
    // Again: nothing to do.
    let (again, _) = apply_file(&root, &mut RealStorage, &drop_in("infinity")).unwrap();
    assert!(!again.changed && !again.created);
    undo_file(&root, &mut RealStorage, &u).unwrap();
    assert!(!d
        .path()
        .join("etc/systemd/system/hailo-ollama.service.d")
        .exists());
}

#[test]
fn an_existing_file_is_backed_up_and_restored() {
    let (d, root) = tree();
    let conf = d.path().join("etc/modprobe.d/hailo_pci.conf");
    std::fs::write(&conf, "# mine\noptions hailo1x_pci debug=1\n").unwrap();
    let step = Step::ModuleOption {
        module: "hailo1x_pci".into(),
        file: "hailo_pci.conf".into(),
        key: "force_desc_page_size".into(),
        value: "4096".into(),
    };
    let (c, u) = apply_file(&root, &mut RealStorage, &step).unwrap();
    assert_eq!(c.before, ["options hailo1x_pci debug=1"]);
    assert_eq!(
        c.after,
        ["options hailo1x_pci debug=1 force_desc_page_size=4096"]
    );
    assert_eq!(
        c.backup.as_deref(),
        Some("/etc/modprobe.d/hailo_pci.conf.npu-agent.bak")
    );
    assert_eq!(
        std::fs::read_to_string(d.path().join("etc/modprobe.d/hailo_pci.conf.npu-agent.bak"))
            .unwrap(),
        "# mine\noptions hailo1x_pci debug=1\n"
    );
    undo_file(&root, &mut RealStorage, &u).unwrap();
    assert_eq!(
        std::fs::read_to_string(&conf).unwrap(),
        "# mine\noptions hailo1x_pci debug=1\n"
    );
}

#[test]
fn a_sysctl_is_written_and_set_now_and_both_undone() {
    let (d, root) = tree();
    let knob = d.path().join("proc/sys/kernel/numa_balancing");
    std::fs::write(&knob, "1\n").unwrap();
    let step = Step::Sysctl {
        key: "kernel.numa_balancing".into(),
        value: "0".into(),
        file: "90-npu-agent.conf".into(),
    };
    let (c, u) = apply_file(&root, &mut RealStorage, &step).unwrap();
    assert_eq!(c.runtime, Some(("1".into(), "0".into())));
    assert_eq!(std::fs::read_to_string(&knob).unwrap(), "0\n");
    assert_eq!(
        root.read_string("/etc/sysctl.d/90-npu-agent.conf").unwrap(),
        "kernel.numa_balancing = 0\n"
    );
    undo_file(&root, &mut RealStorage, &u).unwrap();
    assert_eq!(std::fs::read_to_string(&knob).unwrap(), "1\n");
    assert!(!root.exists("/etc/sysctl.d/90-npu-agent.conf"));
    // A kernel without the key: the file is not left behind.
    std::fs::remove_file(&knob).unwrap();
    let e = apply_file(&root, &mut RealStorage, &step).unwrap_err();
    assert!(e.contains("cannot be read"), "{e}");
    assert!(!root.exists("/etc/sysctl.d/90-npu-agent.conf"));
}

#[test]
fn boot_keys_edit_existing_files_only() {
    let (d, root) = tree();
    let step = Step::BootKey {
        file: "/boot/firmware/config.txt".into(),
        key: "usb_max_current_enable".into(),
        value: "1".into(),
    };
    let e = apply_file(&root, &mut RealStorage, &step).unwrap_err();
    assert!(e.contains("not found"), "{e}");
    std::fs::write(
        d.path().join("boot/firmware/config.txt"),
        "[all]\narm_64bit=1\n",
    )
    .unwrap();
    let (c, _) = apply_file(&root, &mut RealStorage, &step).unwrap();
    assert_eq!(c.after, ["usb_max_current_enable=1"]);
    assert_eq!(
        root.read_string("/boot/firmware/config.txt").unwrap(),
        "[all]\narm_64bit=1\nusb_max_current_enable=1\n"
    );
}

#[test]
fn names_and_directories_are_checked() {
    let (d, root) = tree();
    for (unit, file) in [
        ("../x.service", "a.conf"),
        ("x.service", "../a.conf"),
        ("x.service", "a"),
        ("x", "a.conf"),
        ("-x.service", "a.conf"),
    ] {
        let step = Step::UnitDropIn {
            unit: unit.into(),
            file: file.into(),
            section: "Service".into(),
            settings: vec![],
        };
        assert!(target(&step).is_err(), "{unit} {file}");
    }
    // No /etc/systemd/system on this board: refused, nothing created.
    std::fs::remove_dir(d.path().join("etc/systemd/system")).unwrap();
    let e = apply_file(&root, &mut RealStorage, &drop_in("infinity")).unwrap_err();
    assert!(e.contains("/etc/systemd/system is not a directory"), "{e}");
    assert!(!d.path().join("etc/systemd/system").exists());
}
