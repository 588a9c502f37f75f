//! Boot-file edits that take effect: the harness plays the bootloader and each boot reads the files the agent edited.

use super::*;

/// Boot 1 edits armbianEnv.txt and reboots; the harness, as the bootloader, boots the edited
/// command line; state written on boot 1 is still on the disk on boot 2.
#[test]
fn rk3588_armbian_env_edit_and_reboot_takes_effect() {
    let t0 = Instant::now();
    let spec = BoardSpec::new("rk3588-reboot", Personality::Rock5b)
        .boot_file("armbianEnv.txt", &armbian_env("cma=64M"))
        .init(
            r#"if [ "$VBOARD_BOOT" = 1 ]; then
  cat /proc/sys/kernel/random/boot_id > /var/lib/npu-agent/vboard-state
  sed -i 's/^extraargs=cma=64M$/extraargs=cma=256M/' /boot/armbianEnv.txt
  vb_section pending npu-agent check --format json
  vb_reboot
fi
vb_section cmdline cat /proc/cmdline
vb_section state cat /var/lib/npu-agent/vboard-state
vb_section check npu-agent check --format json"#,
        );
    let Some(mut board) = Board::new(spec) else {
        return;
    };
    let before = board
        .boot_file("armbianEnv.txt")
        .expect("armbianEnv.txt on the boot partition");

    let mut b1 = board.boot();
    assert!(b1.cmdline.contains(" cma=64M "), "{}", b1.cmdline);
    assert_eq!(
        b1.wait_end(T),
        BootEnd::Reboot,
        "boot 1 must end in a reboot"
    );
    assert_eq!(b1.cma_total_bytes(), 64 << 20);
    let id1 = b1.boot_id();
    // After the edit, before the reboot: the agent sees the pending change.
    let p = b1.json("pending");
    let pending = finding(&p, "reboot.pending");
    assert_eq!(pending["status"], "warn", "{pending:#}");
    assert_eq!(
        pending["observed"]["boot_file_cma"], "cma=256M",
        "{pending:#}"
    );
    assert_eq!(
        pending["observed"]["proc_cmdline_cma"], "cma=64M",
        "{pending:#}"
    );
    assert!(
        !b1.console().contains("VBOARD-BEGIN check"),
        "boot 1 went on after vb_reboot"
    );
    drop(b1);

    // The bootloader reads the edited file back from the disk image: only extraargs changed.
    let after = board
        .boot_file("armbianEnv.txt")
        .expect("armbianEnv.txt after the edit");
    assert_eq!(
        after,
        before.replace("extraargs=cma=64M\n", "extraargs=cma=256M\n")
    );
    assert_eq!(
        board
            .state_file("vboard-state")
            .map(|s| s.trim().to_string()),
        Some(id1.clone())
    );
    let (next, _) = board.boot_chain();
    assert!(
        next.contains(" cma=256M ") && !next.contains("cma=64M"),
        "{next}"
    );

    let mut b2 = board.boot();
    assert_eq!(b2.number, 2);
    assert_eq!(b2.cmdline, next);
    assert_eq!(b2.wait_end(T), BootEnd::PowerOff);
    assert_eq!(b2.cma_total_bytes(), 256 << 20, "CmaTotal after the reboot");
    assert!(
        b2.section("cmdline")
            .split_whitespace()
            .any(|w| w == "cma=256M"),
        "{}",
        b2.section("cmdline")
    );
    let id2 = b2.boot_id();
    assert_ne!(id2, id1, "a reboot gives a new boot_id");
    assert_eq!(
        b2.section("state").trim(),
        id1,
        "the state disk kept boot 1's file"
    );
    let r = b2.json("check");
    assert_eq!(r["boot_id"], id2.as_str());
    assert_eq!(r["metrics"]["cma_total_bytes"], 268435456u64);
    assert_status(&r, "reboot.pending", "pass");
    assert_status(&r, "cma.boot_param", "pass");
    assert_status(&r, "cma.pool_size", "pass");
    eprintln!("scenario b: {:.1} s", t0.elapsed().as_secs_f64());
}

/// The same loop through a Pi 5's boot files: a CMA overlay added to config.txt sizes the device
/// tree's pool on the next boot (no cma= on the command line, as on the real board).
#[test]
fn pi5_config_txt_cma_overlay_and_reboot_takes_effect() {
    let t0 = Instant::now();
    let spec = BoardSpec::new("pi5-overlay", Personality::Pi5).init(
        r#"if [ "$VBOARD_BOOT" = 1 ]; then
  vb_section check npu-agent check --format json
  echo 'dtoverlay=cma,cma-256' >> /boot/firmware/config.txt
  vb_section pending npu-agent check --format json
  vb_reboot
fi
vb_section cmdline cat /proc/cmdline
vb_section dtcma hexdump -v -e '1/1 "%02x"' /proc/device-tree/reserved-memory/linux,cma/size
vb_section check npu-agent check --format json"#,
    );
    let Some(mut board) = Board::new(spec) else {
        return;
    };
    let mut b1 = board.boot();
    assert_eq!(
        b1.dt_cma,
        Some(64 << 20),
        "the base Pi 5 tree has a 64 MiB pool"
    );
    assert!(!b1.cmdline.contains("cma="), "{}", b1.cmdline);
    assert!(
        b1.cmdline
            .contains("console=ttyAMA0,115200 console=tty1 root=PARTUUID=4e639091-02"),
        "cmdline.txt not passed: {}",
        b1.cmdline
    );
    assert_eq!(b1.wait_end(T), BootEnd::Reboot);
    assert_eq!(b1.cma_total_bytes(), 64 << 20);
    let id1 = b1.boot_id();
    let r = b1.json("check");
    assert_eq!(r["model"], "Raspberry Pi 5 Model B Rev 1.0");
    let profile = r["profile"].as_str().expect("profile").to_string();
    assert!(
        profile == "rpi5-hailo10h" || profile == "rpi5-hailo8",
        "profile {profile}"
    );
    let id = finding(&r, "board.identity");
    assert_eq!(id["status"], "pass", "{id:#}");
    assert_eq!(
        id["observed"]["compatible"],
        serde_json::json!(["raspberrypi,5-model-b", "brcm,bcm2712"])
    );
    assert_eq!(r["board_id"], "9f2b7c61d0e4a835");
    // No Hailo on this PCI bus: right to fail.
    assert_status(&r, "hailo.pci_device", "fail");
    assert_eq!(r["health"], "fail");
    // 64 MiB from the device tree, no cma= anywhere: nothing harmful, nothing pending.
    assert_status(&r, "cma.boot_param", "pass");
    assert_status(&r, "reboot.pending", "pass");
    let p = b1.json("pending");
    let pending = finding(&p, "reboot.pending");
    assert_eq!(
        pending["status"], "warn",
        "the overlay edit is pending: {pending:#}"
    );
    assert_eq!(
        pending["observed"]["config_txt_cma_bytes"], 268435456u64,
        "{pending:#}"
    );
    assert_eq!(
        pending["observed"]["cma_total_bytes"], 67108864u64,
        "{pending:#}"
    );
    drop(b1);

    assert!(board
        .boot_file("config.txt")
        .expect("config.txt")
        .ends_with("[all]\ndtparam=pciex1_gen=3\ndtoverlay=cma,cma-256\n"));
    let mut b2 = board.boot();
    assert_eq!(
        b2.dt_cma,
        Some(256 << 20),
        "config.txt's overlay resizes the pool"
    );
    assert_eq!(b2.wait_end(T), BootEnd::PowerOff);
    assert_eq!(b2.cma_total_bytes(), 256 << 20);
    assert_ne!(b2.boot_id(), id1, "a reboot gives a new boot_id");
    assert!(
        !b2.section("cmdline").contains("cma="),
        "the overlay must not become a cmdline cma=: {}",
        b2.section("cmdline")
    );
    assert_eq!(
        b2.section("dtcma"),
        "0000000010000000",
        "/proc/device-tree/reserved-memory/linux,cma/size"
    );
    let r = b2.json("check");
    assert_eq!(r["metrics"]["cma_total_bytes"], 268435456u64);
    assert_status(&r, "reboot.pending", "pass");
    assert_status(&r, "cma.boot_param", "pass");
    assert_status(&r, "cma.pool_size", "pass");
    eprintln!("scenario c: {:.1} s", t0.elapsed().as_secs_f64());
}

/// The Pi firmware part of the harness's bootloader, on literal config.txt text (no VM needed).
#[test]
fn pi_config_txt_overlays_size_the_pool_as_the_firmware_does() {
    use harness::pi_config_cma;
    assert_eq!(
        pi_config_cma("dtoverlay=vc4-kms-v3d\n[all]\ndtparam=pciex1_gen=3\n"),
        None
    );
    assert_eq!(pi_config_cma("dtoverlay=cma,cma-256\n"), Some(256 << 20));
    assert_eq!(
        pi_config_cma("dtoverlay=vc4-kms-v3d,cma-320\n"),
        Some(320 << 20)
    );
    assert_eq!(
        pi_config_cma("dtoverlay=cma,cma-size=0x8000000\n"),
        Some(128 << 20)
    );
    // Sections for other boards do not apply to a Pi 5; [pi5] and [all] do; the last one wins.
    assert_eq!(pi_config_cma("[pi4]\ndtoverlay=cma,cma-512\n[all]\n"), None);
    assert_eq!(
        pi_config_cma(
            "dtoverlay=cma,cma-64\n[pi5]\ndtoverlay=cma,cma-192\n[cm4]\ndtoverlay=cma,cma-512\n"
        ),
        Some(192 << 20)
    );
    // Comments and other overlays are ignored.
    assert_eq!(
        pi_config_cma("#dtoverlay=cma,cma-512\ndtoverlay=dwc2,dr_mode=host\n"),
        None
    );
}
