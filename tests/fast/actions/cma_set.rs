//! `cma set` / `cma show` end to end on temporary board trees (library API), including the
//! `reboot.pending` check before and after an edit.

use super::util::{fixture_tree, meminfo, rk3588_tree, Tree};
use npu_agent::action::atomic::RealStorage;
use npu_agent::action::cma::{
    cma_set, cma_show, reconcile_boot_edit, CmaSetOutcome, CmaSetReport, CmaVerdict,
};
use npu_agent::action::state::{BootEditState, StateDir, BOOT_EDIT_FILE};
use npu_agent::check::Status;
use npu_agent::diagnose::{diagnose, Diagnosis, ProfileChoice};
use std::os::unix::fs::PermissionsExt;

const ENV: &str = "verbosity=1\nbootlogo=false\nconsole=both\nextraargs=cma=256M\noverlay_prefix=rockchip-rk3588\n";
const CMDLINE: &str =
    "root=UUID=0 rootwait rootfstype=ext4 consoleblank=0 loglevel=1 cma=256M cgroup_enable=memory";
const NOW: i64 = 1_750_000_000;

fn diag(t: &Tree) -> Diagnosis {
    diagnose(&t.root(), &ProfileChoice::Auto).unwrap_or_else(|e| panic!("{e}"))
}

fn status(d: &Diagnosis, id: &str) -> Status {
    d.report
        .findings
        .iter()
        .find(|f| f.id == id)
        .map(|f| f.status)
        .unwrap_or_else(|| panic!("no {id}"))
}

fn set(t: &Tree, size: &str, dry_run: bool) -> CmaSetReport {
    let root = t.root();
    let d = diag(t);
    cma_set(
        &root,
        &d,
        size,
        dry_run,
        &mut RealStorage,
        &StateDir::default_for(&root),
        NOW,
    )
}

fn edit_state(t: &Tree) -> Option<BootEditState> {
    StateDir::default_for(&t.root())
        .load(BOOT_EDIT_FILE)
        .unwrap()
}

#[test]
fn armbian_set_marks_reboot_pending_and_is_idempotent() {
    let t = rk3588_tree(ENV, CMDLINE, 262_144);
    let d = diag(&t);
    assert_eq!(d.profile.id, "rk3588-rknpu");
    assert_eq!(
        status(&d, "reboot.pending"),
        Status::Pass,
        "boot file and /proc/cmdline agree before the edit"
    );
    assert_eq!(
        cma_show(&d, &StateDir::default_for(&t.root())).verdict,
        CmaVerdict::InEffect
    );

    let r = set(&t, "512M", false);
    assert_eq!(r.outcome, CmaSetOutcome::Written, "{r:?}");
    assert_eq!(
        t.read("/boot/armbianEnv.txt"),
        ENV.replace("cma=256M", "cma=512M")
    );
    assert_eq!(t.read("/boot/armbianEnv.txt.npu-agent.bak"), ENV);
    assert_eq!(
        r.changes[0].backup.as_deref(),
        Some("/boot/armbianEnv.txt.npu-agent.bak")
    );
    assert!(!t.exists("/boot/.armbianEnv.txt.npu-agent.tmp"));
    assert!(
        std::fs::read_dir(t.host("/boot")).unwrap().all(|e| {
            !npu_agent::action::atomic::is_temp_name(&e.unwrap().file_name().to_string_lossy())
        }),
        "no temp file left"
    );
    let st = edit_state(&t).expect("boot_edit.json");
    assert!(st.verified && st.reboot_required, "{st:?}");
    assert_eq!(st.requested, "512M");
    assert_eq!(st.boot_id, "11111111-1111-1111-1111-111111111111");

    // reboot.pending: the boot file says 512M, the running kernel booted with 256M.
    let d = diag(&t);
    assert_eq!(status(&d, "reboot.pending"), Status::Warn);
    assert!(d.report.reboot_required);
    let show = cma_show(&d, &StateDir::default_for(&t.root()));
    assert_eq!(show.verdict, CmaVerdict::PendingReboot);
    assert_eq!(show.boot_file_cma.as_deref(), Some("cma=512M"));
    assert_eq!(show.proc_cmdline_cma.as_deref(), Some("cma=256M"));

    // Setting it again changes nothing: no write, no backup churn, state untouched.
    let before_state = t.read("/var/lib/npu-agent/boot_edit.json");
    let before_names = t.names("/boot");
    let again = set(&t, "524288K", false);
    assert_eq!(again.outcome, CmaSetOutcome::Unchanged);
    assert_eq!(
        t.read("/boot/armbianEnv.txt.npu-agent.bak"),
        ENV,
        "backup still holds the original"
    );
    assert_eq!(t.names("/boot"), before_names);
    assert_eq!(t.read("/var/lib/npu-agent/boot_edit.json"), before_state);

    // The board reboots: new boot_id, /proc/cmdline and CmaTotal follow the file.
    t.file("/proc/cmdline", CMDLINE.replace("cma=256M", "cma=512M"))
        .file("/proc/meminfo", meminfo(8 * 1024 * 1024, 524_288, 500_000))
        .file(
            "/proc/sys/kernel/random/boot_id",
            "22222222-2222-2222-2222-222222222222\n",
        );
    let d = diag(&t);
    assert_eq!(status(&d, "reboot.pending"), Status::Pass);
    assert_eq!(
        cma_show(&d, &StateDir::default_for(&t.root())).verdict,
        CmaVerdict::InEffect
    );
    let st = reconcile_boot_edit(&StateDir::default_for(&t.root()))
        .unwrap()
        .unwrap();
    assert!(!st.reboot_required);
    assert_eq!(
        st.applied_boot_id.as_deref(),
        Some("22222222-2222-2222-2222-222222222222")
    );
}

#[test]
fn dry_run_writes_nothing() {
    let t = rk3588_tree(ENV, CMDLINE, 262_144);
    let r = set(&t, "1G", true);
    assert_eq!(r.outcome, CmaSetOutcome::DryRun);
    assert_eq!(r.changes[0].edit.diff, "@@ -3,3 +3,3 @@\n console=both\n-extraargs=cma=256M\n+extraargs=cma=1G\n overlay_prefix=rockchip-rk3588\n");
    assert_eq!(t.read("/boot/armbianEnv.txt"), ENV);
    assert_eq!(t.names("/boot"), vec!["armbianEnv.txt"]);
    assert!(!t.exists("/var/lib/npu-agent"));
}

#[test]
fn armbian_without_extraargs_creates_it() {
    let env = "verbosity=1\nconsole=both\nrootfstype=ext4\n";
    let t = rk3588_tree(env, "root=UUID=0 rootwait", 8192);
    let r = set(&t, "256M", false);
    assert_eq!(r.outcome, CmaSetOutcome::Written, "{r:?}");
    assert_eq!(
        t.read("/boot/armbianEnv.txt"),
        format!("{env}extraargs=cma=256M\n")
    );
    assert_eq!(status(&diag(&t), "reboot.pending"), Status::Warn);
}

#[test]
fn oversized_and_unparsable_sizes_are_refused_without_writing() {
    let t = rk3588_tree(ENV, CMDLINE, 262_144);
    // 8 GiB of RAM: 25 % is 2 GiB.
    let r = set(&t, "3G", false);
    assert_eq!(r.outcome, CmaSetOutcome::Refused);
    assert!(
        r.error.contains("more than 25% of RAM (8 GiB)") && r.error.contains("at most 2 GiB"),
        "{}",
        r.error
    );
    assert_eq!(
        set(&t, "2G", true).outcome,
        CmaSetOutcome::DryRun,
        "exactly 25 % is accepted"
    );
    let r = set(&t, "lots", false);
    assert_eq!(r.outcome, CmaSetOutcome::Refused);
    assert!(r.error.contains("not a size"), "{}", r.error);
    assert_eq!(t.read("/boot/armbianEnv.txt"), ENV);
    assert!(!t.exists("/var/lib/npu-agent"));
}

#[test]
fn read_only_boot_file_is_refused() {
    let t = rk3588_tree(ENV, CMDLINE, 262_144);
    let p = t.host("/boot/armbianEnv.txt");
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o444)).unwrap();
    let r = set(&t, "512M", false);
    assert_eq!(r.outcome, CmaSetOutcome::Refused);
    assert!(r.error.contains("read-only (mode 0444)"), "{}", r.error);
    assert_eq!(t.read("/boot/armbianEnv.txt"), ENV);
    assert!(edit_state(&t).is_none());
}

#[test]
fn missing_boot_file_and_non_utf8_are_refused() {
    let t = rk3588_tree(ENV, CMDLINE, 262_144);
    std::fs::remove_file(t.host("/boot/armbianEnv.txt")).unwrap();
    let r = set(&t, "256M", false);
    assert_eq!(r.outcome, CmaSetOutcome::Refused);
    assert!(
        r.error
            .contains("none of the boot files of profile rk3588-rknpu exists"),
        "{}",
        r.error
    );
    t.file("/boot/armbianEnv.txt", b"extraargs=cma=64M \xff\n");
    let r = set(&t, "256M", false);
    assert!(r.error.contains("not UTF-8"), "{}", r.error);
}

#[test]
fn generated_extlinux_edits_etc_kernel_cmdline_instead() {
    let t = rk3588_tree(ENV, "root=UUID=0 rootwait", 8192);
    std::fs::remove_file(t.host("/boot/armbianEnv.txt")).unwrap();
    let ext = super::util::sample("extlinux-generated-u-boot-menu.conf");
    t.file("/boot/extlinux/extlinux.conf", &ext);
    let r = set(&t, "256M", false);
    assert_eq!(
        r.outcome,
        CmaSetOutcome::Refused,
        "no /etc/kernel/cmdline yet"
    );
    assert!(
        r.error.contains("u-boot-update") && r.error.contains("/etc/kernel/cmdline does not exist"),
        "{}",
        r.error
    );
    t.file(
        "/etc/kernel/cmdline",
        "root=UUID=0 rootwait rw console=ttyS2,1500000\n",
    );
    let r = set(&t, "256M", false);
    assert_eq!(r.outcome, CmaSetOutcome::Written, "{r:?}");
    assert_eq!(r.changes[0].path, "/etc/kernel/cmdline");
    assert!(
        r.explanation
            .iter()
            .any(|e| e.contains("generated by u-boot-update") && e.contains("sudo u-boot-update")),
        "{:?}",
        r.explanation
    );
    assert_eq!(
        t.read("/etc/kernel/cmdline"),
        "root=UUID=0 rootwait rw console=ttyS2,1500000 cma=256M\n"
    );
    assert_eq!(
        t.read("/boot/extlinux/extlinux.conf"),
        ext,
        "the generated file is not touched"
    );
}

#[test]
fn pi5_br08_moves_the_pool_to_config_txt() {
    let t = fixture_tree("pi5-16gb-hailo10h-cmdline-cma-256m");
    let config_before = t.read("/boot/firmware/config.txt");
    let d = diag(&t);
    assert_eq!(d.profile.id, "rpi5-hailo10h");
    let show = cma_show(&d, &StateDir::default_for(&t.root()));
    assert!(show.cmdline_cma_harmful);
    assert_eq!(show.verdict, CmaVerdict::InEffect);
    assert!(
        show.explanation.contains("bypasses the device-tree pool"),
        "{}",
        show.explanation
    );

    let r = set(&t, "256M", false);
    assert_eq!(r.outcome, CmaSetOutcome::Written, "{r:?}");
    assert!(
        r.explanation
            .iter()
            .any(|e| e.contains("broken firmware mailbox") && e.contains("config.txt")),
        "{:?}",
        r.explanation
    );
    // config.txt first (the pool keeps a size if the cut comes between the two writes).
    assert_eq!(r.changes[0].path, "/boot/firmware/config.txt");
    assert_eq!(
        t.read("/boot/firmware/config.txt"),
        format!("{config_before}dtoverlay=cma,cma-256\n")
    );
    assert_eq!(
        t.read("/boot/firmware/cmdline.txt"),
        "console=serial0,115200 console=tty1 root=PARTUUID=00000000-02 rootfstype=ext4 fsck.repair=yes rootwait\n"
    );
    assert!(
        t.exists("/boot/firmware/config.txt.npu-agent.bak")
            && t.exists("/boot/firmware/cmdline.txt.npu-agent.bak")
    );
    let st = edit_state(&t).unwrap();
    assert_eq!(st.files.len(), 2);
    assert!(st.verified && st.reboot_required);

    // Now the file has no cma= but the running kernel booted with cma=256M.
    let d = diag(&t);
    assert_eq!(status(&d, "reboot.pending"), Status::Warn);
    assert_eq!(
        cma_show(&d, &StateDir::default_for(&t.root())).verdict,
        CmaVerdict::PendingReboot
    );
    // Idempotent.
    assert_eq!(set(&t, "256M", false).outcome, CmaSetOutcome::Unchanged);
}

#[test]
fn pi5_sizes_must_suit_the_overlay_and_the_profile() {
    let t = fixture_tree("pi5-16gb-hailo10h-cmdline-cma-256m");
    let r = set(&t, "130M", false);
    assert_eq!(r.outcome, CmaSetOutcome::Refused);
    assert!(
        r.error.contains("not a multiple of 4 MiB") && r.error.contains("try 128M or 132M"),
        "{}",
        r.error
    );
    let r = set(&t, "32M", false);
    assert!(
        r.error
            .contains("below the profile's minimum pool of 64 MiB"),
        "{}",
        r.error
    );
    let r = set(&t, "200M", true);
    assert_eq!(r.outcome, CmaSetOutcome::DryRun);
    assert!(r.changes[0]
        .edit
        .new_text
        .ends_with("[all]\ndtoverlay=cma,cma-size=209715200\n"));
}

#[test]
fn cma_show_on_a_tree_without_cmdline_is_unknown_and_rpi3_is_in_effect_or_not_set() {
    let t = rk3588_tree(ENV, CMDLINE, 262_144);
    std::fs::remove_file(t.host("/proc/cmdline")).unwrap();
    let show = cma_show(&diag(&t), &StateDir::default_for(&t.root()));
    assert_eq!(show.verdict, CmaVerdict::Unknown);
    assert!(!show.proc_cmdline_read);
    // Overridden: the kernel booted with cma=256M but the pool is 8 MiB.
    let t = rk3588_tree(ENV, CMDLINE, 8192);
    let show = cma_show(&diag(&t), &StateDir::default_for(&t.root()));
    assert_eq!(show.verdict, CmaVerdict::Overridden, "{}", show.explanation);
    // Not set: no cma= anywhere.
    let t = rk3588_tree("verbosity=1\n", "root=UUID=0 rootwait", 8192);
    let show = cma_show(&diag(&t), &StateDir::default_for(&t.root()));
    assert_eq!(show.verdict, CmaVerdict::NotSet);
    assert!(
        show.explanation.contains("CmaTotal 8 MiB"),
        "{}",
        show.explanation
    );
}
