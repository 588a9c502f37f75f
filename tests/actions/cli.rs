//! The `compact` and `cma show|set` subcommands through `npu_agent::cli::run`: output and exit
//! codes.

use crate::util::{rk3588_tree, Tree};

fn run(args: &[&str]) -> (i32, String, String) {
    let mut out = Vec::new();
    let mut err = Vec::new();
    let argv = std::iter::once("npu-agent")
        .chain(args.iter().copied())
        .map(str::to_string);
    let code = npu_agent::cli::run(argv, &mut out, &mut err);
    (
        code,
        String::from_utf8_lossy(&out).into_owned(),
        String::from_utf8_lossy(&err).into_owned(),
    )
}

const ENV: &str = "verbosity=1\nextraargs=cma=256M\n";

#[test]
fn cma_show_set_dry_run_and_set() {
    let t = rk3588_tree(ENV, "root=UUID=0 cma=256M", 262_144);
    let root = t.path().to_str().unwrap();
    let (code, out, _) = run(&["cma", "show", "--root", root]);
    assert_eq!(code, 0);
    assert!(
        out.contains("boot file           /boot/armbianEnv.txt: cma=256M (line 2)"),
        "{out}"
    );
    assert!(out.contains("verdict             in effect"), "{out}");

    let (code, out, _) = run(&["cma", "set", "512M", "--root", root, "--dry-run"]);
    assert_eq!(code, 0);
    assert!(out.starts_with("dry run: cma 512M would change"), "{out}");
    assert!(out.contains("--- /boot/armbianEnv.txt\n+++ /boot/armbianEnv.txt\n@@ -1,2 +1,2 @@\n verbosity=1\n-extraargs=cma=256M\n+extraargs=cma=512M\n"), "{out}");
    assert_eq!(t.read("/boot/armbianEnv.txt"), ENV);

    let (code, out, _) = run(&["cma", "set", "512M", "--root", root]);
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("written and verified; reboot required"),
        "{out}"
    );
    assert!(
        out.contains("backup: /boot/armbianEnv.txt.npu-agent.bak"),
        "{out}"
    );
    let (code, out, _) = run(&["cma", "show", "--root", root]);
    assert_eq!(code, 0);
    assert!(out.contains("verdict             pending reboot"), "{out}");
    assert!(
        out.contains(
            "last edit           cma 512M in /boot/armbianEnv.txt: verified; reboot required"
        ),
        "{out}"
    );

    let (code, out, _) = run(&["cma", "set", "512M", "--root", root]);
    assert_eq!(code, 0);
    assert!(
        out.starts_with("cma 512M is already set: nothing to do"),
        "{out}"
    );

    let (code, out, _) = run(&["cma", "set", "64G", "--root", root]);
    assert_eq!(code, 1);
    assert!(
        out.starts_with("refused: 64 GiB is more than 25% of RAM"),
        "{out}"
    );
}

#[test]
fn compact_cli_exit_codes() {
    let t = Tree::new();
    let root = t.path().to_str().unwrap();
    let (code, out, _) = run(&["compact", "--root", root]);
    assert_eq!(code, 1, "no compact_memory: refused");
    assert!(
        out.contains("refused: /proc/sys/vm/compact_memory does not exist"),
        "{out}"
    );
    t.file("/proc/sys/vm/compact_memory", "")
        .file("/proc/sys/vm/drop_caches", "");
    let (code, out, _) = run(&["compact", "--root", root, "--dry-run", "--drop-caches"]);
    assert_eq!(code, 0, "{out}");
    assert_eq!(t.read("/proc/sys/vm/drop_caches"), "");
    let (code, out, _) = run(&["compact", "--root", root, "--drop-caches"]);
    assert_eq!(code, 0, "{out}");
    assert!(out.starts_with("compaction done in "), "{out}");
    assert_eq!(t.read("/proc/sys/vm/drop_caches"), "1\n");
    assert_eq!(t.read("/proc/sys/vm/compact_memory"), "1\n");
    let (code, _, err) = run(&["compact", "--root", "/nonexistent/npu-agent-root"]);
    assert_eq!(code, 2);
    assert!(err.contains("not a directory"), "{err}");
}
