//! The `compact` and `cma show|set` subcommands through `npu_agent::cli::run`: output and exit
//! codes.

use super::util::{rk3588_tree, Tree};

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
    // The hint repeats the --root given: the suggested `cma show` looks at the same tree.
    assert!(
        out.contains(&format!(
            "next: reboot (sudo reboot), then `npu-agent cma show --root {root}` should say"
        )),
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

    // A SIZE that is no size is a usage error (stderr, exit 2), not a refusal.
    for (size, says) in [("lots", "is not a size"), ("0256M", "octal")] {
        let (code, out, err) = run(&["cma", "set", size, "--root", root, "--dry-run"]);
        assert_eq!(code, 2, "{size}: {out}{err}");
        assert!(out.is_empty(), "{size}: {out}");
        assert!(err.contains(says), "{size}: {err}");
    }
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

/// The command line passes the gate every origin passes: an action the config disables
/// (`[actions] disabled`, read under `--root` as the daemon reads it) is refused with exit 1
/// and the reason, before anything is written.
#[test]
fn cli_actions_pass_the_gate_and_a_disabled_action_is_refused() {
    let t = rk3588_tree(ENV, "root=UUID=0 cma=256M", 262_144);
    t.file("/proc/sys/vm/compact_memory", "")
        .file("/proc/sys/vm/drop_caches", "")
        .file(
            "/etc/npu-agent/agent.toml",
            "[actions]\ndisabled = [\"compact\", \"set_cma\"]\n",
        );
    let root = t.path().to_str().unwrap();
    for args in [
        &["compact", "--root", root][..],
        &["compact", "--root", root, "--dry-run"],
        &["cma", "set", "512M", "--root", root],
        &["cma", "set", "512M", "--root", root, "--dry-run"],
    ] {
        let (code, out, err) = run(args);
        assert_eq!(code, 1, "{args:?}: {out}{err}");
        let action = if args[0] == "compact" {
            "compact"
        } else {
            "set_cma"
        };
        assert!(
            err.contains(&format!(
                "refused: {action} is disabled on this board ([actions] disabled"
            )),
            "{args:?}: {err}"
        );
        assert!(out.is_empty(), "{args:?}: nothing ran: {out}");
    }
    assert_eq!(t.read("/proc/sys/vm/compact_memory"), "");
    assert_eq!(t.read("/boot/armbianEnv.txt"), ENV);
    // The ledger was not written for a refusal.
    assert!(!t.exists("/var/lib/npu-agent/commands.json"));

    // A config error is a usage error (exit 2), naming the file.
    t.file(
        "/etc/npu-agent/agent.toml",
        "[actions]\ndisabled = [\"format_disk\"]\n",
    );
    let (code, _, err) = run(&["compact", "--root", root]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("actions.disabled: \"format_disk\" is not an action"),
        "{err}"
    );
}

/// What the admin ran is recorded in the gate's ledger, in the configured state directory
/// under the root (`compact/cli`, `set_cma/cli`), and a dry run records nothing; the daemon's
/// gate then counts it for the planner's cooldown.
#[test]
fn cli_runs_are_recorded_in_the_gate_ledger_under_the_configured_state_dir() {
    let t = rk3588_tree(ENV, "root=UUID=0 cma=256M", 262_144);
    t.file("/proc/sys/vm/compact_memory", "").file(
        "/etc/npu-agent/agent.toml",
        "state_dir = \"/srv/agent-state\"\n",
    );
    std::fs::create_dir_all(t.host("/srv/agent-state")).unwrap();
    let root = t.path().to_str().unwrap();
    let (code, out, err) = run(&["compact", "--root", root, "--dry-run"]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        !t.exists("/srv/agent-state/commands.json"),
        "a dry run is not recorded"
    );
    let before = npu_agent::action::now_unix_s();
    let (code, out, err) = run(&["compact", "--root", root]);
    assert_eq!(code, 0, "{out}{err}");
    let (code, out, err) = run(&["cma", "set", "512M", "--root", root]);
    assert_eq!(code, 0, "{out}{err}");
    let ledger: serde_json::Value =
        serde_json::from_str(&t.read("/srv/agent-state/commands.json")).unwrap();
    for slot in ["compact/cli", "set_cma/cli"] {
        let at = ledger["last_run"][slot]
            .as_i64()
            .unwrap_or_else(|| panic!("{ledger}"));
        assert!(at >= before && at <= before + 60, "{slot}: {at}");
    }
    assert!(!t.exists("/var/lib/npu-agent/commands.json"));
    // `cma show` finds the edit in the same configured state directory.
    let (code, out, _) = run(&["cma", "show", "--root", root]);
    assert_eq!(code, 0);
    assert!(
        out.contains("last edit           cma 512M in /boot/armbianEnv.txt: verified"),
        "{out}"
    );

    // The daemon's gate on the same state: the planner waits out its cooldown after the
    // admin's compaction.
    let state = npu_agent::action::state::StateDir::new(&t.root(), "/srv/agent-state");
    let mut gate = npu_agent::action::gate::Gate::new(
        npu_agent::mqtt::command::Policy {
            board: "b".into(),
            trusted_keys: Vec::new(),
            allow_unsigned: vec![npu_agent::model::action::ActionKind::Compact],
            max_command_age_s: 300,
            topic_root: "npu-fleet".into(),
            accept_v1: false,
            refused: Default::default(),
        },
        Some(state),
        600,
    );
    let compact = npu_agent::model::action::Action::Compact { drop_caches: false };
    let now = npu_agent::action::now_unix_s();
    let why = gate
        .admit_local(
            npu_agent::action::gate::Origin::Planner,
            compact.clone(),
            now,
        )
        .unwrap_err();
    assert!(why.contains("cooling down"), "{why}");
    assert!(gate
        .admit_local(npu_agent::action::gate::Origin::Planner, compact, now + 601)
        .is_ok());
}

/// `compact --root R` with `compact_memory` or `drop_caches` planted as a link out of the tree:
/// refused (exit 1) with the reason, and the file outside is not written.
#[test]
fn compact_refuses_a_symlinked_knob() {
    let outside = tempfile::tempdir().unwrap();
    let target = outside.path().join("knob");
    for knob in ["/proc/sys/vm/compact_memory", "/proc/sys/vm/drop_caches"] {
        std::fs::write(&target, "untouched").unwrap();
        let t = Tree::new();
        t.file("/proc/sys/vm/compact_memory", "")
            .file("/proc/sys/vm/drop_caches", "");
        std::fs::remove_file(t.host(knob)).unwrap();
        std::os::unix::fs::symlink(&target, t.host(knob)).unwrap();
        let root = t.path().to_str().unwrap();
        let (code, out, err) = run(&["compact", "--root", root, "--drop-caches"]);
        assert_eq!(code, 1, "{knob}: {out}{err}");
        assert!(
            out.contains(&format!(
                "refused: {knob} is not written: it is a symbolic link"
            )),
            "{knob}: {out}"
        );
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "untouched");
    }
}

/// Hints repeat the `--root` and `--profile` the user gave.
#[test]
fn cma_set_hint_repeats_root_and_profile() {
    let t = rk3588_tree(ENV, "root=UUID=0 cma=256M", 262_144);
    let root = t.path().to_str().unwrap();
    let (code, out, err) = run(&[
        "cma",
        "set",
        "512M",
        "--root",
        root,
        "--profile",
        "rk3588-rknpu",
    ]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains(&format!(
            "`npu-agent cma show --root {root} --profile rk3588-rknpu`"
        )),
        "{out}"
    );
}
