//! Attacks on the file side of the command path, on temporary roots with planted symlinks:
//! writes never leave the root (issue items 3 and 7), concurrent edits never interleave.

use super::util::{rk3588_tree, Tree};
use npu_agent::action::atomic::RealStorage;
use npu_agent::action::cma::{cma_set, cma_show, CmaSetOutcome};
use npu_agent::action::state::{StateDir, BOOT_EDIT_FILE};
use npu_agent::diagnose::{diagnose, ProfileChoice};
use std::os::unix::fs::symlink;

const ENV: &str = "verbosity=1\nextraargs=cma=256M\noverlay_prefix=rockchip-rk3588\n";
const CMDLINE: &str = "root=UUID=0 rootwait cma=256M";
const NOW: i64 = 1_750_000_000;

fn set(t: &Tree, size: &str) -> npu_agent::action::cma::CmaSetReport {
    let root = t.root();
    let d = diagnose(&root, &ProfileChoice::Auto).unwrap();
    set_on(&root, &d, size)
}

/// `cma set SIZE` (no dry run) on `root` with the diagnosis `d`, state in the default directory.
fn set_on(
    root: &npu_agent::root::SysRoot,
    d: &npu_agent::diagnose::Diagnosis,
    size: &str,
) -> npu_agent::action::cma::CmaSetReport {
    cma_set(
        root,
        d,
        size,
        false,
        &mut RealStorage,
        &StateDir::default_for(root),
        NOW,
    )
}

/// A file outside the root that a planted link points at; must never change.
fn victim() -> (tempfile::TempDir, std::path::PathBuf) {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("victim.txt");
    std::fs::write(&p, "outside the root\n").unwrap();
    (d, p)
}

#[test]
fn planted_temp_backup_and_state_links_are_never_followed_out_of_the_root() {
    let t = rk3588_tree(ENV, CMDLINE, 262_144);
    let (_keep, outside) = victim();
    // The temp and backup names an attacker can predict, and every state file.
    for link in [
        "/boot/.armbianEnv.txt.npu-agent.tmp",
        "/boot/.armbianEnv.txt.npu-agent.bak.npu-agent.tmp",
        "/boot/armbianEnv.txt.npu-agent.bak",
    ] {
        symlink(&outside, t.host(link)).unwrap();
    }
    let r = set(&t, "512M");
    assert_eq!(r.outcome, CmaSetOutcome::Written, "{r:?}");
    assert_eq!(
        std::fs::read_to_string(&outside).unwrap(),
        "outside the root\n"
    );
    let env = t.host("/boot/armbianEnv.txt");
    assert!(!std::fs::symlink_metadata(&env)
        .unwrap()
        .file_type()
        .is_symlink());
    assert!(t.read("/boot/armbianEnv.txt").contains("cma=512M"));
    // Every state file a link to a host path (planted by someone who can write the state
    // directory): a state file is the agent's own, so the link is replaced, never followed,
    // whether or not its target exists in the tree.
    let inside = t.host(outside.to_str().unwrap());
    std::fs::create_dir_all(inside.parent().unwrap()).unwrap();
    std::fs::write(&inside, "the tree's own file\n").unwrap();
    for f in [
        BOOT_EDIT_FILE,
        "compact.json",
        "session.json",
        "commands.json",
    ] {
        let p = t.host(&format!("/var/lib/npu-agent/{f}"));
        let _ = std::fs::remove_file(&p);
        symlink(&outside, p).unwrap();
    }
    let r = set(&t, "768M");
    assert_eq!(r.outcome, CmaSetOutcome::Written, "{r:?}");
    assert!(t.read("/boot/armbianEnv.txt").contains("cma=768M"));
    let st = StateDir::default_for(&t.root());
    for f in ["compact.json", "session.json", "commands.json"] {
        st.save(f, &serde_json::json!({"session": 1})).unwrap();
        let p = t.host(&format!("/var/lib/npu-agent/{f}"));
        assert!(
            !std::fs::symlink_metadata(&p)
                .unwrap()
                .file_type()
                .is_symlink(),
            "{f}"
        );
    }
    assert_eq!(
        std::fs::read_to_string(&outside).unwrap(),
        "outside the root\n"
    );
    assert_eq!(
        std::fs::read_to_string(&inside).unwrap(),
        "the tree's own file\n"
    );
}

#[test]
fn absolute_links_inside_the_tree_resolve_in_the_root_for_set_as_for_show() {
    let t = rk3588_tree(ENV, CMDLINE, 262_144);
    // armbianEnv.txt is an absolute link to /boot/real/armbianEnv.txt: on the board, that is
    // the tree's own file, not the host's.
    t.file("/boot/real/armbianEnv.txt", ENV);
    std::fs::remove_file(t.host("/boot/armbianEnv.txt")).unwrap();
    symlink("/boot/real/armbianEnv.txt", t.host("/boot/armbianEnv.txt")).unwrap();
    let root = t.root();
    let d = diagnose(&root, &ProfileChoice::Auto).unwrap();
    let show = cma_show(&d, &StateDir::default_for(&root));
    assert!(format!("{show:?}").contains("256M"), "{show:?}");
    let r = set(&t, "512M");
    assert_eq!(r.outcome, CmaSetOutcome::Written, "{r:?}");
    assert!(t.read("/boot/real/armbianEnv.txt").contains("cma=512M"));
}

#[test]
fn concurrent_edits_never_interleave() {
    let t = rk3588_tree(ENV, CMDLINE, 262_144);
    let root = t.root();
    let d = std::sync::Arc::new(diagnose(&root, &ProfileChoice::Auto).unwrap());
    let sizes = ["300M", "301M", "302M", "303M", "304M", "305M"];
    for round in 0..8 {
        let mut hs = Vec::new();
        for i in 0..12 {
            let root = root.clone();
            let d = d.clone();
            let size = sizes[(i + round) % sizes.len()];
            hs.push(std::thread::spawn(move || set_on(&root, &d, size).outcome));
        }
        for h in hs {
            let o = h.join().unwrap();
            assert!(
                matches!(o, CmaSetOutcome::Written | CmaSetOutcome::Unchanged),
                "{o:?}"
            );
        }
        let text = t.read("/boot/armbianEnv.txt");
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "round {round}: {text:?}");
        assert!(
            sizes
                .iter()
                .any(|s| lines[1] == format!("extraargs=cma={s}")),
            "round {round}: {text:?}"
        );
    }
    let temps: Vec<String> = t
        .names("/boot")
        .into_iter()
        .filter(|n| npu_agent::action::atomic::is_temp_name(n))
        .collect();
    assert!(temps.is_empty(), "{temps:?}");
}

#[test]
fn a_symlinked_provisioning_file_is_removed_not_its_target() {
    let t = Tree::new();
    let (_keep, outside) = victim();
    std::fs::write(&outside, "board_id = \"b7\"\n").unwrap();
    std::fs::create_dir_all(t.host("/boot/firmware")).unwrap();
    std::fs::create_dir_all(t.host("/etc/npu-agent/agent.d")).unwrap();
    // An absolute link resolves in the root: plant the file inside too, and a link outside.
    symlink(&outside, t.host("/boot/firmware/npu-agent.toml")).unwrap();
    let o = npu_agent::provision::provision(&t.root());
    // Resolved in the root, the link names a missing file: nothing is provisioned, and the
    // host file it points at is untouched.
    assert!(
        std::fs::read_to_string(&outside).unwrap().contains("b7"),
        "{o:?}"
    );
    // A link inside the tree: provisioned, the link goes, the target stays.
    t.file("/boot/real.toml", "board_id = \"b8\"\n");
    std::fs::remove_file(t.host("/boot/firmware/npu-agent.toml")).unwrap();
    symlink("/boot/real.toml", t.host("/boot/firmware/npu-agent.toml")).unwrap();
    let o = npu_agent::provision::provision(&t.root());
    assert!(
        std::fs::symlink_metadata(t.host("/boot/firmware/npu-agent.toml")).is_err(),
        "{o:?}"
    );
    assert!(t.exists("/boot/real.toml"), "the link's target must stay");
    assert!(t
        .read("/etc/npu-agent/agent.d/90-provisioned.toml")
        .contains("b8"));
}

/// Item 9: several boot files carry cma=: every one is named with the one the bootloader reads,
/// and none is edited alone.
#[test]
fn several_boot_files_with_cma_are_named_not_edited_alone() {
    let t = rk3588_tree(ENV, CMDLINE, 262_144);
    t.file(
        "/boot/extlinux/extlinux.conf",
        "label linux\n  kernel /Image\n  append root=UUID=0 cma=128M\n",
    );
    t.file("/etc/kernel/cmdline", "root=UUID=0 cma=64M\n");
    let before = (
        t.read("/boot/armbianEnv.txt"),
        t.read("/boot/extlinux/extlinux.conf"),
        t.read("/etc/kernel/cmdline"),
    );
    let r = set(&t, "512M");
    assert_eq!(r.outcome, CmaSetOutcome::Refused, "{r:?}");
    for f in [
        "/boot/armbianEnv.txt",
        "/boot/extlinux/extlinux.conf",
        "/etc/kernel/cmdline",
    ] {
        assert!(r.error.contains(f), "{f} not named: {}", r.error);
    }
    assert!(
        r.error
            .contains("the bootloader reads /boot/extlinux/extlinux.conf"),
        "{}",
        r.error
    );
    let after = (
        t.read("/boot/armbianEnv.txt"),
        t.read("/boot/extlinux/extlinux.conf"),
        t.read("/etc/kernel/cmdline"),
    );
    assert_eq!(before, after, "nothing is edited");
}

/// Runs `f` on its own thread and gives up after 10 s: a read that waits for ever fails the test
/// instead of hanging it.
fn within_10_s<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(std::time::Duration::from_secs(10))
        .unwrap_or_else(|_| panic!("{what} still waits after 10 s (a planted FIFO blocks it)"))
}

fn mkfifo(path: &std::path::Path) {
    let _ = std::fs::remove_file(path);
    let st = std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .expect("mkfifo (coreutils) runs");
    assert!(st.success());
}

#[test]
fn planted_fifos_are_refused_not_waited_on() {
    let t = rk3588_tree(ENV, CMDLINE, 262_144);
    // A FIFO no one writes to, where the agent reads a board file, and where it writes a knob.
    mkfifo(&t.host("/proc/meminfo"));
    std::fs::create_dir_all(t.host("/proc/sys/vm")).unwrap();
    mkfifo(&t.host("/proc/sys/vm/compact_memory"));
    let root = t.root();
    let r = root.clone();
    let read = within_10_s("reading /proc/meminfo", move || r.read("/proc/meminfo"));
    let err = read.unwrap_err();
    assert!(err.detail.contains("FIFO"), "{err:?}");
    let r = root.clone();
    let write = within_10_s("writing compact_memory", move || {
        r.write_existing("/proc/sys/vm/compact_memory", b"1")
    });
    assert!(write.is_err(), "{write:?}");
    // The whole diagnosis finishes and names the file it could not read.
    let r = root.clone();
    let d = within_10_s("diagnose", move || {
        diagnose(&r, &ProfileChoice::Auto).map(|d| format!("{:?}", d.report))
    });
    assert!(d.unwrap().contains("/proc/meminfo"));
}

/// Issue 26 item 7: `boot` and the state directory exchanged with symlinks to host directories
/// (`renameat2(RENAME_EXCHANGE)`, over and over) while `cma set` and state saves run. A write
/// may fail, but none lands outside the tree: each goes through its directory as opened once.
#[test]
fn directories_swapped_for_links_mid_write_never_send_a_write_out_of_the_root() {
    use rustix::fs::{renameat_with, RenameFlags, CWD};
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    let t = rk3588_tree(ENV, CMDLINE, 262_144);
    let root = t.root();
    let d = diagnose(&root, &ProfileChoice::Auto).unwrap();
    std::fs::create_dir_all(t.host("/var/lib/npu-agent")).unwrap();
    let outside = tempfile::tempdir().unwrap();
    let mut pairs = Vec::new();
    for (dir, name) in [("/boot", "boot"), ("/var/lib/npu-agent", "state")] {
        // The host directory the link points at holds the same file names, so a write that
        // follows the link by path succeeds there, and shows.
        let host_dir = outside.path().join(name);
        std::fs::create_dir_all(&host_dir).unwrap();
        std::fs::write(host_dir.join("armbianEnv.txt"), ENV).unwrap();
        let swap = t.host(&format!("{dir}.swap"));
        symlink(&host_dir, &swap).unwrap();
        pairs.push((t.host(dir), swap));
    }
    let stop = AtomicBool::new(false);
    let swaps = AtomicUsize::new(0);
    let (mut attempts, mut written) = (0, 0);
    std::thread::scope(|s| {
        s.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                for (a, b) in &pairs {
                    if renameat_with(CWD, a, CWD, b, RenameFlags::EXCHANGE).is_ok() {
                        swaps.fetch_add(1, Ordering::Relaxed);
                    }
                }
                // Gaps between the exchanges (this thread's pace, not a wait of the test):
                // writes also start and finish between them.
                std::thread::sleep(std::time::Duration::from_micros(300));
            }
        });
        let st = StateDir::default_for(&root);
        for i in 0..400 {
            attempts += 1;
            let size = if i % 2 == 0 { "512M" } else { "768M" };
            if set_on(&root, &d, size).outcome == CmaSetOutcome::Written {
                written += 1;
            }
            let _ = st.save("commands.json", &serde_json::json!({ "i": i }));
        }
        stop.store(true, Ordering::Relaxed);
    });
    // Put the tree back as it was (an even number of exchanges each).
    for (a, b) in &pairs {
        if std::fs::symlink_metadata(a)
            .unwrap()
            .file_type()
            .is_symlink()
        {
            renameat_with(CWD, a, CWD, b, RenameFlags::EXCHANGE).unwrap();
        }
    }
    assert!(swaps.load(Ordering::Relaxed) > 20, "the swapper ran");
    println!(
        "race: {attempts} cma set runs, {written} written, {} swaps",
        swaps.load(Ordering::Relaxed)
    );
    for name in ["boot", "state"] {
        let dir = outside.path().join(name);
        let mut left: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, ["armbianEnv.txt"], "{name}: written outside the root");
        assert_eq!(
            std::fs::read_to_string(dir.join("armbianEnv.txt")).unwrap(),
            ENV
        );
    }
}
