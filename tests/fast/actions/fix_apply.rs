//! `fix` steps carried out for real in throwaway roots: the real `apt-get` simulating (and, as
//! root, dpkg installing with `--root`) packages from a local repository of tiny `.deb`s named
//! like the Hailo ones, the guard's refusals (a removal outside the plan, a half-configured
//! package, a dpkg lock held by another process), and file steps attacked through symlinks.
//! Nothing here touches this machine's apt or dpkg: every run goes through
//! `AptEnv::in_tree`, and the tests that install check the host's dpkg status is unchanged.

use super::util::Tree;
use npu_agent::action::fix::apply::apt::{self, AptEnv};
use npu_agent::action::fix::apply::{apply, ApplyEnv, ApplyResult, StepState};
use npu_agent::model::remedy::{PackageSpec, Step};
use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

pub(super) fn need(ok: bool, what: &str) -> bool {
    if !ok {
        assert!(
            std::env::var_os("CI").is_none(),
            "{what} (required under CI=true)"
        );
        use std::io::Write as _;
        let _ = writeln!(
            std::io::stderr(),
            "SKIP: {what} (set CI=true to make this a failure)"
        );
    }
    ok
}

fn have(tool: &str) -> bool {
    Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {tool}"))
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

pub(super) fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

fn sh(cmd: &mut Command) -> String {
    let o = cmd.output().expect("spawn");
    assert!(
        o.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// A package stanza for a status database.
pub(super) fn installed(name: &str, version: &str, state: &str, extra: &str) -> String {
    format!("Package: {name}\nStatus: install ok {state}\nPriority: optional\nVersion: {version}\nArchitecture: all\nMaintainer: t <t@example.org>\n{extra}Description: test package\n\n")
}

/// The status of a Pi with Hailo's 4.x stack.
fn hailo4() -> String {
    installed("hailort", "4.23.0", "installed", "")
        + &installed(
            "hailo-all",
            "4.23.0",
            "installed",
            "Depends: hailort (= 4.23.0)\n",
        )
}

/// A throwaway root with a dpkg database `status`, an apt configuration reading a local
/// repository of Hailo-like packages, and the lists fetched.
pub(super) struct Repo {
    pub(super) tree: Tree,
    _repo: tempfile::TempDir,
    pub(super) env: AptEnv,
}

fn build_deb(build: &Path, out: &Path, name: &str, version: &str, control: &str, postinst: bool) {
    let d = build.join(name);
    std::fs::create_dir_all(d.join("DEBIAN")).unwrap();
    std::fs::write(
        d.join("DEBIAN/control"),
        format!("Package: {name}\nVersion: {version}\nArchitecture: all\nMaintainer: t <t@example.org>\n{control}Description: test package\n"),
    )
    .unwrap();
    if postinst {
        use std::os::unix::fs::PermissionsExt;
        let p = d.join("DEBIAN/postinst");
        std::fs::write(&p, "#!/bin/sh\nexit 0\n").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let deb = out.join(format!("{name}_{version}_all.deb"));
    sh(Command::new("dpkg-deb")
        .args(["--build", "--root-owner-group"])
        .arg(&d)
        .arg(&deb));
}

/// The `Packages` index of `dir`: apt-ftparchive, else dpkg-scanpackages, else written here from
/// `dpkg-deb -f`, the size and `sha256sum`.
fn index(dir: &Path) -> String {
    if have("apt-ftparchive") {
        return sh(Command::new("apt-ftparchive")
            .args(["packages", "."])
            .current_dir(dir));
    }
    if have("dpkg-scanpackages") {
        return sh(Command::new("dpkg-scanpackages")
            .args(["-m", "."])
            .current_dir(dir)
            .stderr(Stdio::null()));
    }
    let mut out = String::new();
    let mut debs: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    debs.sort();
    for deb in debs
        .iter()
        .filter(|p| p.extension().is_some_and(|e| e == "deb"))
    {
        out.push_str(sh(Command::new("dpkg-deb").arg("-f").arg(deb)).trim_end());
        let sum = sh(Command::new("sha256sum").arg(deb));
        out.push_str(&format!(
            "\nFilename: ./{}\nSize: {}\nSHA256: {}\n\n",
            deb.file_name().unwrap().to_string_lossy(),
            std::fs::metadata(deb).unwrap().len(),
            sum.split_whitespace().next().unwrap()
        ));
    }
    out
}

fn repo_tree(status: &str) -> Option<Repo> {
    repo_with(
        status,
        &[
            ("hailort", "4.23.0", "", false),
            (
                "hailo-all",
                "4.23.0",
                "Depends: hailort (= 4.23.0)\n",
                false,
            ),
            (
                "h10-hailort",
                "5.1.1",
                "Conflicts: hailort, unrelated-tool\n",
                false,
            ),
            (
                "hailo-h10-all",
                "5.1.1",
                "Depends: h10-hailort (= 5.1.1)\n",
                false,
            ),
            ("unrelated-tool", "1.0", "", false),
            ("hailo-postinst", "1.0", "", true),
        ],
    )
}

/// A throwaway root with the dpkg database `status` and a local repository of `debs` (name,
/// version, extra control lines, with a postinst), its lists fetched; `None` (skipped) without
/// apt-get and dpkg-deb.
pub(super) fn repo_with(status: &str, debs: &[(&str, &str, &str, bool)]) -> Option<Repo> {
    if !need(
        have("dpkg-deb") && have("apt-get"),
        "apt-get and dpkg-deb are not installed (apt-get install apt dpkg)",
    ) {
        return None;
    }
    let tree = Tree::new();
    tree.file("/var/lib/dpkg/status", status)
        .file("/var/lib/dpkg/available", "")
        .file("/etc/apt/apt.conf.d/.keep", "")
        .file("/etc/apt/preferences.d/.keep", "")
        .file("/etc/apt/sources.list.d/.keep", "")
        .file("/etc/systemd/system/.keep", "");
    for d in [
        "var/lib/dpkg/info",
        "var/lib/dpkg/updates",
        "var/lib/dpkg/triggers",
        "var/cache/apt/archives/partial",
        "var/lib/apt/lists/partial",
        "var/log/apt",
    ] {
        std::fs::create_dir_all(tree.path().join(d)).unwrap();
    }
    let repo = tempfile::tempdir().unwrap();
    let build = tempfile::tempdir().unwrap();
    let (b, r) = (build.path(), repo.path());
    for (i, (name, version, control, postinst)) in debs.iter().enumerate() {
        // One build directory per package version (two versions of one name may be listed).
        let dir = b.join(i.to_string());
        build_deb(&dir, r, name, version, control, *postinst);
    }
    std::fs::write(r.join("Packages"), index(r)).unwrap();
    tree.file(
        "/etc/apt/sources.list",
        format!("deb [trusted=yes] file:{} ./\n", r.display()),
    );
    let mut env = AptEnv::in_tree(tree.path());
    env.simulate_timeout = Duration::from_secs(120);
    let up = apt::run(
        &env,
        &env.apt_get,
        &["update".to_string()],
        env.simulate_timeout,
    );
    assert!(up.ok(), "apt-get update: {up:?}");
    Some(Repo {
        tree,
        _repo: repo,
        env,
    })
}

fn swap() -> Vec<Step> {
    vec![
        Step::PackageRemove {
            packages: vec!["hailo-all".into(), "hailort".into()],
            purge: true,
        },
        Step::PackageInstall {
            packages: vec![PackageSpec {
                name: "hailo-h10-all".into(),
                version: Some("5.1.1".into()),
            }],
        },
        Step::PackageHold {
            packages: vec!["hailo-h10-all".into()],
        },
    ]
}

fn env_of(r: &Repo) -> ApplyEnv {
    ApplyEnv {
        apt: Some(r.env.clone()),
        systemd: None,
    }
}

/// The host's dpkg database, to prove a test left it alone.
pub(super) fn host_status() -> Vec<u8> {
    std::fs::read("/var/lib/dpkg/status").unwrap_or_default()
}

#[test]
fn the_swap_plan_simulates_within_the_plan() {
    let Some(r) = repo_tree(&hailo4()) else {
        return;
    };
    let deps = apt::guard(&r.tree.root(), &r.env, &swap()).unwrap_or_else(|e| panic!("{e:?}"));
    let names: Vec<(&str, &str)> = deps
        .iter()
        .map(|d| (d.name.as_str(), d.new.as_str()))
        .collect();
    assert_eq!(names, [("h10-hailort", "5.1.1")]);
}

#[test]
fn a_plan_whose_simulation_removes_an_unrelated_package_is_refused() {
    let status = hailo4() + &installed("unrelated-tool", "1.0", "installed", "");
    let Some(r) = repo_tree(&status) else { return };
    let out = apply(&r.tree.root(), &swap(), &env_of(&r));
    assert_eq!(out.result, ApplyResult::Refused, "{out:?}");
    assert!(
        out.error.contains("removes unrelated-tool 1.0"),
        "{}",
        out.error
    );
    assert!(!out.error.contains("hailort"), "{}", out.error);
    let log = out
        .simulation
        .as_ref()
        .map(|s| s.log.clone())
        .unwrap_or_default();
    assert!(
        log.contains("Remv unrelated-tool") || log.contains("Purg unrelated-tool"),
        "{log}"
    );
    assert!(out.steps.iter().all(|s| s.state == StepState::NotRun));
    assert_eq!(r.tree.read("/var/lib/dpkg/status"), status);
}

#[test]
fn a_half_configured_package_is_refused() {
    let status = installed("hailort", "4.23.0", "half-configured", "")
        + &installed("hailo-all", "4.23.0", "installed", "");
    let Some(r) = repo_tree(&status) else { return };
    let out = apply(&r.tree.root(), &swap(), &env_of(&r));
    assert_eq!(out.result, ApplyResult::Refused);
    assert!(
        out.error.contains("hailort 4.23.0 (half-configured)"),
        "{}",
        out.error
    );
    assert!(out.error.contains("dpkg --configure -a"), "{}", out.error);
    assert!(out.simulation.is_none());
}

/// Marker the lock holder prints once it holds the lock.
const HELD: &str = "dpkg-lock-held";

/// Run by [`a_held_dpkg_lock_is_refused`] in a child process (an `fcntl` lock held by this
/// process would not conflict with the probe): takes the write lock on the file named by
/// `NPU_AGENT_TEST_LOCK`, says so, and holds it until its standard input closes.
#[test]
#[ignore = "helper run in a child process by a_held_dpkg_lock_is_refused"]
fn dpkg_lock_holder() {
    let Some(path) = std::env::var_os("NPU_AGENT_TEST_LOCK") else {
        return;
    };
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .unwrap();
    rustix::fs::fcntl_lock(&f, rustix::fs::FlockOperation::NonBlockingLockExclusive).unwrap();
    println!("{HELD}");
    let _ = std::io::stdin().read_to_end(&mut Vec::new());
}

#[test]
fn a_held_dpkg_lock_is_refused() {
    let Some(r) = repo_tree(&hailo4()) else {
        return;
    };
    let lock = r.tree.host("/var/lib/dpkg/lock-frontend");
    r.tree.file("/var/lib/dpkg/lock-frontend", "");
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--ignored",
            "--exact",
            "actions::fix_apply::dpkg_lock_holder",
            "--nocapture",
        ])
        .env("NPU_AGENT_TEST_LOCK", &lock)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    assert!(
        lines.any(|l| l.unwrap().ends_with(HELD)),
        "the lock holder never said it holds the lock"
    );
    let out = apply(&r.tree.root(), &swap(), &env_of(&r));
    assert_eq!(out.result, ApplyResult::Refused);
    assert!(out.error.contains("dpkg is locked"), "{}", out.error);
    assert!(
        out.error.contains("/var/lib/dpkg/lock-frontend"),
        "{}",
        out.error
    );
    drop(child.stdin.take());
    assert!(child.wait().unwrap().success());
    assert!(apt::guard(&r.tree.root(), &r.env, &swap()).is_ok());
}

#[test]
fn the_swap_is_installed_for_real_in_a_throwaway_root() {
    if !need(is_root(), "dpkg --root installs need root") {
        return;
    }
    let Some(r) = repo_tree(&hailo4()) else {
        return;
    };
    let before = host_status();
    let out = apply(&r.tree.root(), &swap(), &env_of(&r));
    assert_eq!(host_status(), before, "the host's dpkg status changed");
    assert_eq!(out.result, ApplyResult::Applied, "{out:#?}");
    assert_eq!(out.dependencies.len(), 1);
    let install_log = &out.steps[1].apt.as_ref().unwrap().log;
    assert!(
        install_log.contains("Setting up hailo-h10-all (5.1.1)"),
        "{install_log}"
    );
    let status = r.tree.read("/var/lib/dpkg/status");
    let states = npu_agent::action::fix::apply::dpkg::parse_states(&status);
    let of = |n: &str| {
        states
            .iter()
            .find(|p| p.name == n)
            .map(|p| (p.status.clone(), p.version.clone()))
    };
    assert_eq!(
        of("hailo-h10-all"),
        Some(("hold ok installed".into(), "5.1.1".into()))
    );
    assert_eq!(
        of("h10-hailort"),
        Some(("install ok installed".into(), "5.1.1".into()))
    );
    assert_eq!(of("hailo-all"), None);
    assert_eq!(of("hailort"), None);
    // Applied again: apt has nothing to do, and the plan still holds.
    let again = apply(&r.tree.root(), &swap(), &env_of(&r));
    assert_eq!(again.result, ApplyResult::Applied, "{again:#?}");
}

#[test]
fn a_failed_install_undoes_the_drop_in_and_says_what_dpkg_left() {
    if !need(is_root(), "dpkg --root installs need root") {
        return;
    }
    let Some(r) = repo_tree(&hailo4()) else {
        return;
    };
    let before = host_status();
    // Its postinst runs chrooted into the tree, which has no /bin/sh: dpkg leaves it
    // half-configured.
    let steps = vec![
        Step::UnitDropIn {
            unit: "hailo-ollama.service".into(),
            file: "90-npu-agent.conf".into(),
            section: "Service".into(),
            settings: vec![("LimitMEMLOCK".into(), "infinity".into())],
        },
        Step::PackageInstall {
            packages: vec![PackageSpec {
                name: "hailo-postinst".into(),
                version: None,
            }],
        },
        Step::RebootNeeded,
    ];
    let out = apply(&r.tree.root(), &steps, &env_of(&r));
    assert_eq!(host_status(), before, "the host's dpkg status changed");
    assert_eq!(out.result, ApplyResult::Failed, "{out:#?}");
    let states: Vec<StepState> = out.steps.iter().map(|s| s.state).collect();
    assert_eq!(
        states,
        [StepState::Undone, StepState::Failed, StepState::NotRun]
    );
    assert!(!r.tree.exists("/etc/systemd/system/hailo-ollama.service.d"));
    let run = out.steps[1].apt.as_ref().unwrap();
    assert_eq!(run.exit_code, Some(100));
    assert!(run.log.contains("hailo-postinst"), "{}", run.log);
    let after = out.dpkg_after.as_ref().unwrap();
    assert_eq!(after.interrupted.len(), 1, "{after:?}");
    assert_eq!(after.interrupted[0].name, "hailo-postinst");
    assert_eq!(after.interrupted[0].state, "half-configured");
    assert_eq!(after.planned[0].status, "install ok half-configured");
    // The next fix is refused until dpkg is repaired.
    let next = apply(&r.tree.root(), &swap(), &env_of(&r));
    assert_eq!(next.result, ApplyResult::Refused);
    assert!(
        next.error.contains("hailo-postinst 1.0 (half-configured)"),
        "{}",
        next.error
    );
}

/// A directory outside the root with a file that must never change.
fn outside() -> (tempfile::TempDir, std::path::PathBuf) {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("victim.conf");
    std::fs::write(&p, "outside the root\n").unwrap();
    (d, p)
}

fn drop_in() -> Vec<Step> {
    vec![Step::UnitDropIn {
        unit: "hailo-ollama.service".into(),
        file: "90-npu-agent.conf".into(),
        section: "Service".into(),
        settings: vec![("LimitMEMLOCK".into(), "infinity".into())],
    }]
}

#[test]
fn a_symlinked_unit_directory_does_not_lead_out_of_the_root() {
    let (keep, victim) = outside();
    let dir = keep.path();
    // /etc/systemd/system as an absolute link to the host directory, then as a relative one
    // climbing out of the tree.
    let climb = format!("../..{}", "/..".repeat(20)) + &dir.display().to_string();
    for target in [dir.display().to_string(), climb] {
        let t = Tree::new();
        t.file("/etc/systemd/.keep", "");
        std::os::unix::fs::symlink(&target, t.host("/etc/systemd/system")).unwrap();
        let out = apply(&t.root(), &drop_in(), &ApplyEnv::for_root(&t.root()));
        assert_eq!(out.result, ApplyResult::Failed, "{target}: {out:?}");
        assert!(
            out.steps[0]
                .detail
                .contains("/etc/systemd/system is not a directory"),
            "{}",
            out.steps[0].detail
        );
        let names: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["victim.conf"], "{target}");
    }
    // The drop-in file itself a link to the host file: resolved in the tree, its directory is
    // missing there, so the write is refused and the host file stays.
    let t = Tree::new();
    t.file("/etc/systemd/system/hailo-ollama.service.d/.keep", "");
    std::os::unix::fs::symlink(
        &victim,
        t.host("/etc/systemd/system/hailo-ollama.service.d/90-npu-agent.conf"),
    )
    .unwrap();
    let out = apply(&t.root(), &drop_in(), &ApplyEnv::for_root(&t.root()));
    assert_eq!(out.result, ApplyResult::Failed, "{out:?}");
    assert_eq!(
        std::fs::read_to_string(&victim).unwrap(),
        "outside the root\n"
    );
}

#[test]
fn a_symlinked_sysctl_knob_is_refused_and_the_file_taken_back() {
    let (_keep, victim) = outside();
    let t = Tree::new();
    t.file("/etc/sysctl.d/.keep", "");
    t.file("/proc/sys/kernel/.keep", "");
    std::os::unix::fs::symlink(&victim, t.host("/proc/sys/kernel/numa_balancing")).unwrap();
    let steps = vec![Step::Sysctl {
        key: "kernel.numa_balancing".into(),
        value: "0".into(),
        file: "90-npu-agent.conf".into(),
    }];
    let out = apply(&t.root(), &steps, &ApplyEnv::for_root(&t.root()));
    assert_eq!(out.result, ApplyResult::Failed, "{out:?}");
    assert_eq!(
        std::fs::read_to_string(&victim).unwrap(),
        "outside the root\n"
    );
    assert!(!t.exists("/etc/sysctl.d/90-npu-agent.conf"));
}
