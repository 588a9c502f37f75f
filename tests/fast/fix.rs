//! `fix`'s plan on every board tree in tests/fixtures/boards (each case, each `[[variant]]`, and
//! each case again as Home Assistant OS and as Buildroot): a case whose `must_fire` names a
//! check with a typed remedy gets a plan that points the way its `recommendation` does (or "no
//! automatic fix" with the reason), and no plan anywhere has a step whose tool the board lacks.

use npu_agent::action::fix::plan::{file_lines, plan, FixPlan, NoFix, Outcome, PlanEntry};
use npu_agent::diagnose::{diagnose_with, DiagnoseOptions, ProfileChoice};
use npu_agent::model::remedy::Step;
use npu_agent::root::SysRoot;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Checks whose findings can carry a typed remedy.
const FIXABLE: &[&str] = &[
    "hailo.package_generation",
    "hailo.driver_binding",
    "hailo.runtime_library",
    "hailo.pcie_link",
    "limits.nofile",
    "limits.memlock",
    "kernel.numa_balancing",
];

/// What a case's plan must say for one check.
enum Want {
    /// Steps whose words (each step in words, with the lines each file gets) hold every one of
    /// these.
    Steps(&'static [&'static str]),
    /// No automatic fix for this reason, and the advice holds every one of these.
    NoFix(NoFix, &'static [&'static str]),
}

/// Per case (folder) and check: the plan its recommendation asks for. Every case whose
/// `must_fire` names a check in [`FIXABLE`] is here, and the Home Assistant OS and container
/// cases.
const CASES: &[(&str, &str, Want)] = &[
    // "purge hailo-all/python3-hailort/... (Hailo-8 line) and install hailo-h10-all"
    (
        "pi5-hailo10h-mixed-4.x-and-5.x-userland",
        "hailo.package_generation",
        Want::Steps(&[
            "purge (with their configuration files) packages: hailo-all, python3-hailort",
            "install packages: dkms (candidate version), hailo-h10-all (candidate version), h10-hailort=5.1.1",
            "reboot needed",
        ]),
    ),
    // The model zoo back to the runtime's release, held.
    (
        "own-pi5-hailo10h-genai-zoo-5.2.0-runtime-5.1.1",
        "hailo.runtime_library",
        Want::Steps(&[
            "install packages: hailo-gen-ai-model-zoo=5.1.1",
            "hold packages (apt-mark hold): hailo-gen-ai-model-zoo",
        ]),
    ),
    // "Put 'options hailo_pci force_desc_page_size=4096' in /etc/modprobe.d/hailo_pci.conf and
    // reload hailo_pci (or reboot)"
    (
        "own-pi5-hailo8-16k-pages-max-desc-page-size",
        "hailo.driver_binding",
        Want::Steps(&[
            "/etc/modprobe.d/hailo_pci.conf:",
            "options hailo_pci force_desc_page_size=4096",
            "reboot needed",
        ]),
    ),
    // "run the link at Gen 2 and reseat the ribbon cable"
    (
        "own-pi5-hailo8-3a-supply-old-bootloader-gen3-link-errors",
        "hailo.pcie_link",
        Want::Steps(&[
            "set dtparam in /boot/firmware/config.txt:",
            "dtparam=pciex1_gen=2",
            "reboot needed",
        ]),
    ),
    // "sudo sysctl -w kernel.numa_balancing=0 and persist it in /etc/sysctl.d/"
    (
        "own-x86-moe-numa2-balancing-on",
        "kernel.numa_balancing",
        Want::Steps(&[
            "/etc/sysctl.d/99-npu-agent-numa-balancing.conf:",
            "kernel.numa_balancing = 0",
        ]),
    ),
    // Memory tiering alone (2) is on too: the same file, 0.
    (
        "own-x86-sglang-deepep-numa2-balancing-tiering",
        "kernel.numa_balancing",
        Want::Steps(&[
            "/etc/sysctl.d/99-npu-agent-numa-balancing.conf:",
            "kernel.numa_balancing = 0",
        ]),
    ),
    // Rebuild the module for the running kernel: DKMS, not a package step.
    (
        "own-pi5-hailo10h-module-for-other-kernel",
        "hailo.driver_binding",
        Want::NoFix(NoFix::AdviceOnly, &["dkms autoinstall"]),
    ),
    // Nerves: no dpkg database, so no package steps; the advice names the 5.x stack.
    (
        "pi5-hailo10h-bound-to-hailo-pci-4.22-nerves",
        "hailo.driver_binding",
        Want::NoFix(NoFix::AdviceOnly, &["hailo-h10-all"]),
    ),
    // The 16 KiB-page kernel read from the tree's kernel release: the driver option, typed.
    (
        "own-pi5-hailo8-16k-kernel-no-recorded-page-size",
        "hailo.driver_binding",
        Want::Steps(&[
            "/etc/modprobe.d/hailo_pci.conf:",
            "options hailo_pci force_desc_page_size=4096",
        ]),
    ),
    // A container's open-file limit: its engine's, so no unit drop-in.
    (
        "own-rk3588-rkllama-docker-nofile-1024-errno-24",
        "limits.nofile",
        Want::NoFix(NoFix::AdviceOnly, &["--ulimit nofile=65536:65536"]),
    ),
    // An x86 host (no metapackage): the other generation's module out, the 4.x line in.
    (
        "x86-proxmox-9.1.4-6.17.4-pve-hailo8l-bound-attempt-by-hailo1x-5.2.0-probe-error-22",
        "hailo.driver_binding",
        Want::NoFix(
            NoFix::AdviceOnly,
            &["sudo modprobe -r hailo1x_pci", "hailo8 branch of hailort-drivers"],
        ),
    ),
    // The workload's unit is not known (no cgroup, no unit file): the advice, no drop-in.
    (
        "rk3588-rknpu-0.8.2-nofile-1024",
        "limits.nofile",
        Want::NoFix(NoFix::AdviceOnly, &["LimitNOFILE=65536", "ulimit -n"]),
    ),
    (
        "own-rk3588s-opi5-pending-cma-fragmented",
        "limits.nofile",
        Want::NoFix(NoFix::AdviceOnly, &["LimitNOFILE=65536"]),
    ),
    (
        "x86-xdna-memlock-2954mb-under-systemd",
        "limits.memlock",
        Want::NoFix(NoFix::AdviceOnly, &["LimitMEMLOCK=infinity"]),
    ),
    // Home Assistant OS and containers: the runtime is the add-on's or the image's.
    (
        "pi5-8gb-haos-15.0-hailo8-driver-4.20.1-vs-frigate-hailort-4.19-status-76",
        "hailo.version_mismatch",
        Want::NoFix(NoFix::AdviceOnly, &["Frigate add-on", "4.20.1"]),
    ),
    (
        "pi5-hailo8-driver-4.23-container-libhailort-4.22",
        "hailo.version_mismatch",
        Want::NoFix(NoFix::AdviceOnly, &["container", "4.23.0"]),
    ),
    (
        "own-pi5-haos-hailo8l-held-by-second-addon-status-74",
        "npu.workload",
        Want::NoFix(NoFix::AdviceOnly, &["add-on"]),
    ),
];

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/boards")
}

/// The board-check cases: folder name, `must_fire`, and every tree (root and variants).
fn cases() -> Vec<(String, Vec<String>, Vec<PathBuf>)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(fixtures()).unwrap() {
        let dir = entry.unwrap().path();
        let Ok(text) = std::fs::read_to_string(dir.join("expected.toml")) else {
            continue;
        };
        let e: toml::Value = toml::from_str(&text).unwrap();
        if e["kind"].as_str() != Some("board-check") {
            continue;
        }
        let must_fire = e
            .get("must_fire")
            .and_then(|v| v.as_array())
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default();
        let mut roots = vec![dir.join("root")];
        for v in e
            .get("variant")
            .and_then(|v| v.as_array())
            .into_iter()
            .flatten()
        {
            roots.push(dir.join(v["root"].as_str().unwrap()));
        }
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        out.push((name, must_fire, roots));
    }
    out.sort();
    assert!(out.len() >= 50, "only {} cases", out.len());
    out
}

/// The plan `fix --dry-run` makes on the tree at `root`.
fn plan_of(root: &Path) -> FixPlan {
    let d = diagnose_with(
        &SysRoot::new(root),
        &ProfileChoice::Auto,
        &DiagnoseOptions::default(),
    )
    .unwrap_or_else(|e| panic!("{}: {e}", root.display()));
    plan(&d.report.findings, &[])
}

/// An entry's steps in words, with the lines each file gets.
fn steps_text(e: &PlanEntry) -> String {
    let Outcome::Steps { remedy } = &e.outcome else {
        return String::new();
    };
    let mut s = String::new();
    for step in &remedy.steps {
        s.push_str(&npu_agent::action::fix::plan::step_text(step, ""));
        s.push('\n');
    }
    s
}

/// No step of `p` needs a tool in `absent`; no package is both taken away and installed.
fn assert_runnable(case: &str, p: &FixPlan, absent: &[&str]) {
    for (check, step) in p.steps() {
        if let Some(tool) = step.tool() {
            assert!(
                !absent.contains(&tool),
                "{case}: {check} plans a step with `{tool}`, which the board lacks: {step:?}"
            );
        }
        if let Some(f) = file_lines(step) {
            assert!(f.path.starts_with('/'), "{case}: {check}: {f:?}");
        }
    }
    let c = &p.changes;
    for i in &c.install {
        assert!(
            !c.purge.contains(&i.name) && !c.remove.contains(&i.name),
            "{case}: {} is taken away and installed",
            i.name
        );
    }
    // The words say every entry and, for one without steps, why.
    let text = p.render();
    for e in &p.entries {
        assert!(
            text.contains(&e.check),
            "{case}: {} not in\n{text}",
            e.check
        );
    }
}

#[test]
fn every_fixture_plans_its_recommendation_or_says_why_not() {
    let all = cases();
    // Every case whose must_fire names a fixable check is in the table.
    for (name, must_fire, _) in &all {
        for id in must_fire.iter().filter(|id| FIXABLE.contains(&id.as_str())) {
            assert!(
                CASES.iter().any(|(c, check, _)| c == name && check == id),
                "{name} names {id} in must_fire but is not in CASES"
            );
        }
    }
    for (case, check, want) in CASES {
        let p = plan_of(&fixtures().join(case).join("root"));
        let e = p
            .entries
            .iter()
            .find(|e| e.check == *check)
            .unwrap_or_else(|| panic!("{case}: no plan entry for {check}:\n{}", p.render()));
        match want {
            Want::Steps(words) => {
                let text = steps_text(e);
                for w in *words {
                    assert!(text.contains(w), "{case}: {check}: {w:?} not in\n{text}");
                }
            }
            Want::NoFix(reason, words) => {
                let Outcome::NoFix {
                    reason: got,
                    advice,
                } = &e.outcome
                else {
                    panic!("{case}: {check} has steps: {:?}", e.outcome);
                };
                assert_eq!(got, reason, "{case}: {check}: {advice}");
                for w in *words {
                    assert!(advice.contains(w), "{case}: {check}: {w:?} not in {advice}");
                }
            }
        }
    }
}

#[test]
fn no_plan_has_a_step_the_board_cannot_run() {
    let mut walked = 0;
    let mut with_steps = 0;
    for (name, _, roots) in cases() {
        for root in roots {
            let p = plan_of(&root);
            let absent = super::boards::tools_absent(&root);
            assert_runnable(&format!("{name}/{}", root.display()), &p, &absent);
            walked += 1;
            with_steps += usize::from(p.has_steps());
        }
    }
    assert!(walked >= 60, "only {walked} trees walked");
    // The swap, the module option, the link speed, the sysctl, the release set at least.
    assert!(with_steps >= 5, "only {with_steps} trees have steps");
}

/// Every fixture again as Home Assistant OS and as Buildroot (os-release replaced, dpkg status
/// removed), as `every_fixture_on_an_appliance_os_gets_runnable_remedies` does: no package,
/// systemd, sysctl or modprobe step, and a typed remedy only where the board's own files take it.
#[test]
fn every_fixture_on_an_appliance_os_plans_no_step_it_cannot_run() {
    let os_releases = [
        "NAME=\"Home Assistant OS\"\nID=haos\nVERSION_ID=15.0\nPRETTY_NAME=\"Home Assistant OS 15.0\"\n",
        "NAME=Buildroot\nID=buildroot\nVERSION_ID=2024.02\nPRETTY_NAME=\"Buildroot 2024.02\"\n",
    ];
    let mut no_fix = 0;
    for (name, _, roots) in cases() {
        for os in os_releases {
            let tmp = tempfile::tempdir().unwrap();
            let root = tmp.path().join("root");
            let st = Command::new("cp")
                .arg("-a")
                .arg(&roots[0])
                .arg(&root)
                .status()
                .expect("cp");
            assert!(st.success());
            std::fs::create_dir_all(root.join("etc")).unwrap();
            let _ = std::fs::remove_file(root.join("etc/os-release"));
            std::fs::write(root.join("etc/os-release"), os).unwrap();
            let _ = std::fs::remove_file(root.join("var/lib/dpkg/status"));
            let absent = super::boards::tools_absent(&root);
            assert!(absent.contains(&"apt-get") && absent.contains(&"systemctl"));
            let p = plan_of(&root);
            assert_runnable(&name, &p, &absent);
            for (check, step) in p.steps() {
                assert!(
                    matches!(step, Step::BootKey { .. } | Step::RebootNeeded),
                    "{name} on {os}: {check} plans {step:?}, which /etc of an appliance does not keep"
                );
            }
            no_fix += p
                .entries
                .iter()
                .filter(|e| matches!(e.outcome, Outcome::NoFix { .. }))
                .count();
        }
    }
    assert!(no_fix > 50, "only {no_fix} entries without a fix");
}

/// `npu-agent fix` as a board user runs it, the binary on a copy of a fixture tree: `--dry-run`
/// writes nothing; `--yes` writes the module option (every other line of the file kept), says a
/// reboot is needed and exits 0; run again, nothing is left to apply; `[actions] disabled =
/// ["fix"]` refuses with exit 1 before anything is written.
#[test]
fn the_fix_command_applies_a_file_step_once_and_honours_the_gate() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    let case = fixtures().join("own-pi5-hailo8-16k-pages-max-desc-page-size/root");
    assert!(Command::new("cp")
        .arg("-a")
        .arg(&case)
        .arg(&root)
        .status()
        .unwrap()
        .success());
    let conf = root.join("etc/modprobe.d/hailo_pci.conf");
    std::fs::create_dir_all(conf.parent().unwrap()).unwrap();
    std::fs::write(&conf, "# local\noptions hailo_pci other=1\n").unwrap();
    let bin = env!("CARGO_BIN_EXE_npu-agent");
    let fix = |args: &[&str]| {
        let o = Command::new(bin)
            .arg("fix")
            .arg("--root")
            .arg(&root)
            .args(args)
            .output()
            .unwrap();
        let text = |b: Vec<u8>| String::from_utf8(b).unwrap();
        (o.status.code(), text(o.stdout), text(o.stderr))
    };
    let (code, out, err) = fix(&["--dry-run", "hailo.driver_binding"]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(
        out.contains("options hailo_pci force_desc_page_size=4096"),
        "{out}"
    );
    assert_eq!(
        std::fs::read_to_string(&conf).unwrap(),
        "# local\noptions hailo_pci other=1\n"
    );

    let (code, out, err) = fix(&["--yes", "hailo.driver_binding"]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(out.contains("Steps carried out:\n  done: "), "{out}");
    assert!(
        err.contains("a reboot is needed before hailo.driver_binding can pass"),
        "{err}"
    );
    let written = std::fs::read_to_string(&conf).unwrap();
    assert!(written.starts_with("# local\n"), "{written}");
    assert!(written.contains("force_desc_page_size=4096"), "{written}");
    assert!(written.contains("other=1"), "{written}");

    let (code, out, err) = fix(&["--yes", "hailo.driver_binding"]);
    assert_eq!(code, Some(0), "{out}{err}");
    assert!(err.contains("nothing to apply"), "{err}");
    assert_eq!(std::fs::read_to_string(&conf).unwrap(), written);

    std::fs::create_dir_all(root.join("etc/npu-agent")).unwrap();
    std::fs::write(
        root.join("etc/npu-agent/agent.toml"),
        "[actions]\ndisabled = [\"fix\"]\n",
    )
    .unwrap();
    std::fs::remove_file(&conf).unwrap();
    let (code, out, err) = fix(&["--yes"]);
    assert_eq!(code, Some(1), "{out}{err}");
    assert!(
        err.contains("refused: fix is disabled on this board"),
        "{err}"
    );
    assert!(!conf.exists());
}

/// Where `/etc` is read-only to the agent (as the shipped unit's `ProtectSystem=strict` makes it
/// for the daemon), `fix` refuses before the first step and says why and what to run instead.
/// The read-only `/etc` is a bind mount inside a private mount namespace (`unshare -m`), so this
/// machine's own mounts never change.
#[test]
fn a_read_only_etc_refuses_the_fix_before_any_step() {
    let root_user = rustix::process::geteuid().is_root();
    let unshare = Command::new("unshare").arg("--version").output().is_ok();
    if !root_user || !unshare {
        assert!(
            std::env::var_os("CI").is_none(),
            "needs root and unshare (util-linux) under CI=true"
        );
        eprintln!("SKIP: needs root and unshare (util-linux)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    let case = fixtures().join("own-pi5-hailo8-16k-pages-max-desc-page-size/root");
    assert!(Command::new("cp")
        .arg("-a")
        .arg(&case)
        .arg(&root)
        .status()
        .unwrap()
        .success());
    std::fs::create_dir_all(root.join("etc/modprobe.d")).unwrap();
    let script = format!(
        "mount --make-rprivate / && mount --bind {etc} {etc} && mount -o remount,bind,ro {etc} {etc} && exec {bin} fix --yes --root {root} hailo.driver_binding",
        etc = root.join("etc").display(),
        bin = env!("CARGO_BIN_EXE_npu-agent"),
        root = root.display(),
    );
    let o = Command::new("unshare")
        .args(["-m", "sh", "-c", &script])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{err}");
    // In a container (this test machine may be one) the refusal says so (agent/sys/container.rs).
    let in_container = ["/.dockerenv", "/run/.containerenv"]
        .iter()
        .any(|p| std::path::Path::new(p).exists())
        || std::env::var("container").is_ok_and(|v| !v.is_empty())
        || std::env::var_os("SUPERVISOR_TOKEN").is_some_and(|v| !v.is_empty());
    let said = if in_container {
        "/etc/modprobe.d/hailo_pci.conf is the host's and cannot be written from this container"
    } else {
        "/etc/modprobe.d/hailo_pci.conf cannot be written from here"
    };
    assert!(err.contains(said), "{err}");
    assert!(err.contains("nothing was changed"), "{err}");
    assert!(!root.join("etc/modprobe.d/hailo_pci.conf").exists());
}
