use super::*;

fn memlock() -> Vec<(String, String)> {
    vec![("LimitMEMLOCK".into(), "infinity".into())]
}

/// Applying the edit to its own output changes nothing.
fn idempotent(e: &TextEdit, again: impl Fn(&str) -> Result<TextEdit, String>) {
    let twice = again(&e.new_text).unwrap();
    assert!(!twice.changed, "second run changed:\n{}", twice.diff);
    assert_eq!(twice.new_text, e.new_text);
}

#[test]
fn drop_in_is_created_replaced_and_never_duplicated() {
    let e = edit_drop_in("", "Service", &memlock()).unwrap();
    assert_eq!(e.new_text, "[Service]\nLimitMEMLOCK=infinity\n");
    assert_eq!(e.after, ["[Service]", "LimitMEMLOCK=infinity"]);
    idempotent(&e, |t| edit_drop_in(t, "Service", &memlock()));

    let old = "# by hand\n[Unit]\nAfter=x.service\n\n[Service]\nLimitMEMLOCK=64M\nNice=5\n";
    let e = edit_drop_in(old, "Service", &memlock()).unwrap();
    assert_eq!(
        e.new_text,
        "# by hand\n[Unit]\nAfter=x.service\n\n[Service]\nLimitMEMLOCK=infinity\nNice=5\n"
    );
    assert_eq!(e.before, ["LimitMEMLOCK=64M"]);
    assert_eq!(e.after, ["LimitMEMLOCK=infinity"]);
    idempotent(&e, |t| edit_drop_in(t, "Service", &memlock()));

    // A key set twice is set once; one in another section is left alone.
    let old = "[Service]\nLimitMEMLOCK=1\n[X-Other]\nLimitMEMLOCK=2\n[Service]\nLimitMEMLOCK = 3\n";
    let e = edit_drop_in(old, "Service", &memlock()).unwrap();
    assert_eq!(
        e.new_text,
        "[Service]\nLimitMEMLOCK=infinity\n[X-Other]\nLimitMEMLOCK=2\n[Service]\n"
    );
    assert!(!e.warnings.is_empty());

    // A section missing: added after the others, a blank line between; no final newline kept.
    let e = edit_drop_in("[Unit]\nAfter=y", "Service", &memlock()).unwrap();
    assert_eq!(
        e.new_text,
        "[Unit]\nAfter=y\n\n[Service]\nLimitMEMLOCK=infinity\n"
    );
    // A key missing from the section goes after its last setting, before the next section.
    let e = edit_drop_in(
        "[Service]\nNice=5\n\n[Install]\nWantedBy=m\n",
        "Service",
        &memlock(),
    )
    .unwrap();
    assert_eq!(
        e.new_text,
        "[Service]\nNice=5\nLimitMEMLOCK=infinity\n\n[Install]\nWantedBy=m\n"
    );
    // Already so (spaced differently): unchanged.
    let e = edit_drop_in(
        "[Service]\nLimitMEMLOCK = infinity\n",
        "Service",
        &memlock(),
    )
    .unwrap();
    assert!(!e.changed);
    assert!(edit_drop_in(
        "",
        "Service",
        &[("K".into(), "a\nExecStart=/bin/sh".into())]
    )
    .is_err());
    assert!(edit_drop_in("", "Ser]vice", &memlock()).is_err());
}

#[test]
fn modprobe_option_keeps_the_other_options_of_the_module() {
    let set = |t: &str| edit_modprobe(t, "hailo1x_pci", "force_desc_page_size", "4096");
    let e = set("").unwrap();
    assert_eq!(
        e.new_text,
        "options hailo1x_pci force_desc_page_size=4096\n"
    );
    idempotent(&e, set);
    let old = "# keep\noptions hailo1x-pci  debug=1\toff=2\noptions other force_desc_page_size=1\n";
    let e = set(old).unwrap();
    assert_eq!(
        e.new_text,
        "# keep\noptions hailo1x-pci  debug=1\toff=2 force_desc_page_size=4096\noptions other force_desc_page_size=1\n"
    );
    idempotent(&e, set);
    let old = "options hailo1x_pci force_desc_page_size=16384  debug=1\noptions hailo1x_pci force_desc_page_size=8192\noptions hailo1x_pci x=1 force_desc_page_size=2\n";
    let e = set(old).unwrap();
    assert_eq!(
        e.new_text,
        "options hailo1x_pci force_desc_page_size=4096  debug=1\noptions hailo1x_pci x=1\n"
    );
    assert_eq!(e.warnings.len(), 2, "{:?}", e.warnings);
    idempotent(&e, set);
    assert!(set("options hailo1x_pci a=1 \\\n b=2\n").is_err());
    assert!(edit_modprobe("", "m", "k", "a b").is_err());
}

#[test]
fn sysctl_line_is_replaced_in_either_spelling() {
    let set = |t: &str| edit_sysctl(t, "kernel.numa_balancing", "0");
    let e = set("").unwrap();
    assert_eq!(e.new_text, "kernel.numa_balancing = 0\n");
    idempotent(&e, set);
    let e =
        set("# c\nvm.swappiness=10\nkernel/numa_balancing=1\nkernel.numa_balancing = 1\n").unwrap();
    assert_eq!(
        e.new_text,
        "# c\nvm.swappiness=10\nkernel.numa_balancing = 0\n"
    );
    assert_eq!(
        e.before,
        ["kernel/numa_balancing=1", "kernel.numa_balancing = 1"]
    );
    assert!(!set("kernel.numa_balancing=0\n").unwrap().changed);
    assert_eq!(
        sysctl_dotted("-kernel/numa_balancing"),
        "kernel.numa_balancing"
    );
}

#[test]
fn boot_keys_by_kind() {
    use BootFileKind::*;
    // cmdline.txt: one line of words, CRLF kept, no duplicate.
    let set = |t: &str| edit_boot_key(PiCmdline, t, "pcie_aspm", "off");
    let e = set("console=tty1 root=PARTUUID=1 rootwait\r\n").unwrap();
    assert_eq!(
        e.new_text,
        "console=tty1 root=PARTUUID=1 rootwait pcie_aspm=off\r\n"
    );
    idempotent(&e, set);
    let e = set("pcie_aspm=force a  pcie_aspm=x b\n").unwrap();
    assert_eq!(e.new_text, "pcie_aspm=off a b\n");
    assert!(set("\n").is_err());
    assert!(set("a \"pcie_aspm=1 x\"\n").is_err());
    // cma= through the boot-file editor.
    let e = edit_boot_key(
        ArmbianEnv,
        "verbosity=1\nextraargs=cma=256M\n",
        "cma",
        "512M",
    )
    .unwrap();
    assert_eq!(e.new_text, "verbosity=1\nextraargs=cma=512M\n");
    assert_eq!(e.before, ["extraargs=cma=256M"]);
    // armbianEnv.txt: a line per key, the last definition wins, so one is kept.
    let e = edit_boot_key(
        ArmbianEnv,
        "overlays=a\nverbosity=1\noverlays=b\n",
        "overlays",
        "c",
    )
    .unwrap();
    assert_eq!(e.new_text, "overlays=c\nverbosity=1\n");
    // config.txt: dtparam by parameter, other sections ignored, [all] added at the end.
    let set = |t: &str| edit_boot_key(PiConfig, t, "dtparam", "pciex1_gen=3");
    let e = set("dtparam=audio=on\n[pi4]\ndtparam=pciex1_gen=2\n").unwrap();
    assert_eq!(
        e.new_text,
        "dtparam=audio=on\n[pi4]\ndtparam=pciex1_gen=2\n[all]\ndtparam=pciex1_gen=3\n"
    );
    idempotent(&e, set);
    let e = set("dtparam=pciex1,pciex1_gen=2,audio=on\n").unwrap();
    assert_eq!(e.new_text, "dtparam=pciex1,pciex1_gen=3,audio=on\n");
    let e = set("[all]\ndtparam=pciex1_gen=2\n").unwrap();
    assert_eq!(e.new_text, "[all]\ndtparam=pciex1_gen=3\n");
    let e = edit_boot_key(
        PiConfig,
        "usb_max_current_enable=0\nx=1\n",
        "usb_max_current_enable",
        "1",
    )
    .unwrap();
    assert_eq!(e.new_text, "usb_max_current_enable=1\nx=1\n");
    assert!(edit_boot_key(Extlinux, "label l\n", "quiet", "1").is_err());
    assert_eq!(boot_kind("/boot/firmware/config.txt"), Some(PiConfig));
    assert_eq!(boot_kind("/etc/kernel/cmdline"), Some(KernelCmdline));
    assert_eq!(boot_kind("/boot/uEnv.txt"), None);
}
