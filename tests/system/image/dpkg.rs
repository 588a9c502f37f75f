//! The .deb in a throwaway arm64 chroot: install, upgrade, remove, purge.

use super::*;

#[test]
fn dpkg_installs_upgrades_removes_and_purges_in_a_throwaway_arm64_chroot() {
    let Some(deb) = prerequisites() else { return };
    let out = build_image(&["--rootfs-only"]);
    let tarball = out
        .lines()
        .last()
        .expect("the tarball path")
        .trim()
        .to_string();
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    fs::create_dir(&root).unwrap();
    let o = Command::new("tar")
        .arg("-xf")
        .arg(&tarball)
        .arg("-C")
        .arg(&root)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    fs::copy(&deb, root.join("tmp/a.deb")).unwrap();
    let next = rebuilt_with_version(&deb, &format!("{VERSION}-2"), tmp.path());
    fs::copy(&next, root.join("tmp/b.deb")).unwrap();
    let unit = include_str!("../../../systemd/npu-agent.service");
    let agent_toml = include_str!("../../../packaging/agent.toml");

    // Install: files, modes, enabled (not started: no systemd runs in a chroot).
    let o = chroot_ok(&root, "dpkg -i /tmp/a.deb 2>&1");
    println!("dpkg -i in the chroot:\n{o}");
    assert_eq!(
        chroot_ok(&root, "dpkg-query -W -f='${Status} ${Version}' npu-agent"),
        format!("install ok installed {VERSION}-1")
    );
    assert!(chroot_ok(&root, "/usr/bin/npu-agent --version").contains(VERSION));
    assert_eq!(
        fs::read_to_string(root.join("usr/lib/systemd/system/npu-agent.service")).unwrap(),
        unit
    );
    assert_eq!(
        fs::read_to_string(root.join("etc/npu-agent/agent.toml")).unwrap(),
        agent_toml
    );
    assert_eq!(
        chroot_ok(&root, "stat -c %a /var/lib/npu-agent").trim(),
        "750"
    );
    assert_eq!(
        chroot_ok(&root, "systemctl is-enabled npu-agent.service").trim(),
        "enabled"
    );
    assert!(chroot_ok(&root, "npu-agent run --print-config").contains("url = \"\""));

    // Upgrade over an admin's edit and a provisioned board's files.
    let edited = agent_toml.replace("# interval_s = 60", "interval_s = 30");
    assert_ne!(edited, agent_toml);
    fs::write(root.join("etc/npu-agent/agent.toml"), &edited).unwrap();
    fs::write(
        root.join("etc/npu-agent/agent.d/90-provisioned.toml"),
        "board_id = \"cam-3\"\n",
    )
    .unwrap();
    fs::create_dir_all(root.join("etc/npu-agent/secrets")).unwrap();
    fs::write(root.join("etc/npu-agent/secrets/mqtt-password"), "pw\n").unwrap();
    chroot_ok(&root, "dpkg -i /tmp/b.deb 2>&1");
    assert_eq!(
        chroot_ok(&root, "dpkg-query -W -f='${Version}' npu-agent"),
        format!("{VERSION}-2")
    );
    assert_eq!(
        fs::read_to_string(root.join("etc/npu-agent/agent.toml")).unwrap(),
        edited
    );
    assert!(!root.join("etc/npu-agent/agent.toml.dpkg-dist").exists());
    let pc = chroot_ok(&root, "npu-agent run --print-config");
    assert!(
        pc.contains("interval_s = 30") && pc.contains("board_id = \"cam-3\""),
        "{pc}"
    );
    assert_eq!(
        chroot_ok(&root, "systemctl is-enabled npu-agent.service").trim(),
        "enabled"
    );

    // Remove: program and unit go, config stays, the unit is masked.
    chroot_ok(&root, "dpkg -r npu-agent 2>&1");
    assert!(chroot_ok(&root, "dpkg-query -W -f='${Status}' npu-agent")
        .starts_with("deinstall ok config-files"));
    assert!(!root.join("usr/bin/npu-agent").exists());
    assert_eq!(
        fs::read_to_string(root.join("etc/npu-agent/agent.toml")).unwrap(),
        edited
    );
    assert_eq!(
        fs::read_link(root.join("etc/systemd/system/npu-agent.service")).unwrap(),
        Path::new("/dev/null")
    );

    // Purge: config, secrets, state and every unit link go.
    chroot_ok(&root, "dpkg --purge npu-agent 2>&1");
    assert!(!root.join("etc/npu-agent").exists());
    assert!(!root.join("var/lib/npu-agent").exists());
    assert_eq!(
        chroot_ok(&root, "find /etc/systemd/system -name 'npu-agent*'").trim(),
        ""
    );

    // The image hooks' installer refuses a baked provisioning file, then installs.
    fs::copy(
        repo().join("image/install-into-image.sh"),
        root.join("tmp/install-into-image.sh"),
    )
    .unwrap();
    fs::create_dir_all(root.join("boot/firmware")).unwrap();
    fs::write(
        root.join("boot/firmware/npu-agent.toml"),
        "board_id = \"same-for-all\"\n",
    )
    .unwrap();
    let (o, code) = chroot(
        &root,
        "sh /tmp/install-into-image.sh /tmp/a.deb /boot/firmware",
    );
    assert!(
        code != 0 && o.contains("npu-agent.toml is in the image"),
        "{o}"
    );
    assert!(
        chroot(&root, "dpkg-query -W npu-agent").1 != 0 || !root.join("usr/bin/npu-agent").exists()
    );
    fs::remove_file(root.join("boot/firmware/npu-agent.toml")).unwrap();
    let o = chroot_ok(
        &root,
        "sh /tmp/install-into-image.sh /tmp/a.deb /boot/firmware 2>&1",
    );
    assert!(
        o.contains(&format!(
            "installed npu-agent {VERSION}-1, npu-agent.service enabled"
        )),
        "{o}"
    );
    assert_eq!(
        fs::read_to_string(root.join("boot/firmware/npu-agent.toml.example")).unwrap(),
        include_str!("../../../image/npu-agent.toml.example")
    );
}
