//! Unit tests for reads under a system root.

use super::*;

#[test]
fn join_refuses_parent_components() {
    let root = SysRoot::new("/tmp/x");
    assert_eq!(
        root.join("/proc/meminfo").unwrap(),
        PathBuf::from("/tmp/x/proc/meminfo")
    );
    let err = root.join("/proc/../../etc/shadow").unwrap_err();
    assert_eq!(err.kind, ReadErrorKind::OutsideRoot);
}

#[test]
fn symlinks_stay_inside_a_captured_tree() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("proc")).unwrap();
    std::fs::create_dir_all(dir.path().join("etc")).unwrap();
    std::fs::write(dir.path().join("etc/hostname"), "board\n").unwrap();
    // An absolute link means the board's own /etc/hostname, never the host's.
    std::os::unix::fs::symlink("/etc/hostname", dir.path().join("proc/meminfo")).unwrap();
    // A relative link climbing past the root is clamped to the root.
    std::os::unix::fs::symlink(
        "../../../../../../etc/hostname",
        dir.path().join("proc/cmdline"),
    )
    .unwrap();
    std::os::unix::fs::symlink("/etc/shadow", dir.path().join("proc/vmstat")).unwrap();
    let root = SysRoot::new(dir.path());
    assert_eq!(root.read_string("/proc/meminfo").unwrap(), "board\n");
    assert_eq!(root.read_string("/proc/cmdline").unwrap(), "board\n");
    assert!(root.read("/proc/vmstat").unwrap_err().is_not_found());
    assert_eq!(root.list_dir("/etc").unwrap(), vec!["hostname"]);
    assert!(root.is_dir("/etc") && !root.is_dir("/etc/hostname"));
}

/// A kernel knob is written in the tree or not at all: a symlinked knob is refused (not
/// followed out), and a directory link swapped between inside and outside while writes run
/// never lets one land outside (the open resolves in the root itself, no check-then-open).
#[test]
fn knob_writes_never_follow_a_link_out_of_the_root() {
    let dir = tempfile::tempdir().unwrap();
    let tree = dir.path().join("board");
    let outside = dir.path().join("outside");
    std::fs::create_dir_all(tree.join("proc/sys")).unwrap();
    std::fs::create_dir_all(tree.join("real_vm")).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    std::fs::write(outside.join("compact_memory"), "untouched").unwrap();
    std::fs::write(tree.join("real_vm/compact_memory"), "").unwrap();
    std::fs::create_dir_all(tree.join("proc/sys/vm")).unwrap();
    let root = SysRoot::new(&tree);
    // The knob itself a link: absolute, relative, or to a file inside the tree.
    for target in [
        outside.join("compact_memory"),
        PathBuf::from("../../../../outside/compact_memory"),
        PathBuf::from("/real_vm/compact_memory"),
    ] {
        let knob = tree.join("proc/sys/vm/compact_memory");
        let _ = std::fs::remove_file(&knob);
        std::os::unix::fs::symlink(&target, &knob).unwrap();
        let e = root
            .write_existing("/proc/sys/vm/compact_memory", b"1\n")
            .unwrap_err();
        assert_eq!(e.kind, ReadErrorKind::OutsideRoot, "{target:?}: {e}");
        assert!(e.to_string().contains("symbolic link"), "{e}");
    }
    assert_eq!(
        std::fs::read_to_string(outside.join("compact_memory")).unwrap(),
        "untouched"
    );
    assert_eq!(
        std::fs::read_to_string(tree.join("real_vm/compact_memory")).unwrap(),
        ""
    );
    // A directory on the path swapped between a link inside and one outside.
    std::fs::remove_dir_all(tree.join("proc/sys/vm")).unwrap();
    let vm = tree.join("proc/sys/vm");
    std::os::unix::fs::symlink("../../real_vm", &vm).unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flipper = {
        let (stop, vm, outside) = (stop.clone(), vm.clone(), outside.clone());
        std::thread::spawn(move || {
            let tmp = vm.with_file_name("vm.flip");
            let mut n = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let target = if n % 2 == 0 {
                    outside.clone()
                } else {
                    PathBuf::from("../../real_vm")
                };
                let _ = std::fs::remove_file(&tmp);
                std::os::unix::fs::symlink(&target, &tmp).unwrap();
                std::fs::rename(&tmp, &vm).unwrap();
                n += 1;
            }
        })
    };
    let mut written = 0;
    for _ in 0..3000 {
        if root
            .write_existing("/proc/sys/vm/compact_memory", b"1\n")
            .is_ok()
        {
            written += 1;
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    flipper.join().unwrap();
    assert_eq!(
        std::fs::read_to_string(outside.join("compact_memory")).unwrap(),
        "untouched",
        "a write left the root"
    );
    assert!(written > 0, "writes inside the tree still work");
    assert_eq!(
        std::fs::read_to_string(tree.join("real_vm/compact_memory")).unwrap(),
        "1\n"
    );
}

#[test]
fn missing_file_is_not_found_with_board_path() {
    let dir = tempfile::tempdir().unwrap();
    let root = SysRoot::new(dir.path());
    let err = root.read("/proc/meminfo").unwrap_err();
    assert!(err.is_not_found());
    assert_eq!(err.to_string(), "/proc/meminfo: not found");
}

#[test]
fn link_basename_accepts_symlink_and_plain_file() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().join("sys/bus/pci/devices/0001:01:00.0");
    std::fs::create_dir_all(&d).unwrap();
    std::os::unix::fs::symlink("../../../bus/pci/drivers/hailo1x", d.join("driver")).unwrap();
    std::fs::write(d.join("plain"), "../../drivers/hailo\n").unwrap();
    let root = SysRoot::new(dir.path());
    assert_eq!(
        root.link_basename("/sys/bus/pci/devices/0001:01:00.0/driver")
            .unwrap(),
        "hailo1x"
    );
    assert_eq!(
        root.link_basename("/sys/bus/pci/devices/0001:01:00.0/plain")
            .unwrap(),
        "hailo"
    );
}

#[test]
fn tail_starts_at_a_line_boundary() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("var/log")).unwrap();
    std::fs::write(dir.path().join("var/log/kern.log"), "aaaa\nbbbb\ncccc\n").unwrap();
    let root = SysRoot::new(dir.path());
    assert_eq!(root.read_tail("/var/log/kern.log", 8).unwrap(), "cccc\n");
    assert_eq!(
        root.read_tail("/var/log/kern.log", 100).unwrap(),
        "aaaa\nbbbb\ncccc\n"
    );
}

/// A pinned write target reaches the directory opened, even after that directory is renamed,
/// and shows the host path it stood for in messages.
#[test]
fn a_pinned_target_follows_its_directory_not_its_name() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(tmp.path().join("var/lib/x")).unwrap();
    let root = SysRoot::new(tmp.path());
    let t = root.write_target("/var/lib/x/state.json").unwrap();
    let real = std::fs::canonicalize(tmp.path()).unwrap();
    assert_eq!(t.shown(), real.join("var/lib/x/state.json"));
    assert!(t.path().starts_with("/proc/self/fd/"), "{:?}", t.path());
    std::fs::rename(tmp.path().join("var/lib/x"), tmp.path().join("var/lib/y")).unwrap();
    std::fs::write(t.path(), "{}").unwrap();
    assert_eq!(
        std::fs::read_to_string(tmp.path().join("var/lib/y/state.json")).unwrap(),
        "{}"
    );
    assert!(!tmp.path().join("var/lib/x").exists());
    // A missing directory is an error now, not at the write.
    assert!(root.write_target("/var/lib/x/state.json").is_err());
}
