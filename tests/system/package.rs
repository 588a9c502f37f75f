//! The Debian packages and the systemd unit.
//!
//! The packages are built by `bash packaging/build-debs.sh` (which `.ci/run` runs before
//! `cargo test`) into `<target dir>/debian/`; building them here would make `cargo test` slow.
//! These tests check both packages' fields and files (a stale package fails: its unit and
//! config must equal the tree's), lint them and review the unit's sandbox. They never install
//! anything on this machine: installing, upgrading, removing and purging happen inside a
//! throwaway arm64 chroot and a booted image (tests/system/image.rs), and tests/host.rs asserts that
//! this machine's own npu-agent files and units are as they were before the suite.
//!
//! Under `CI=true` a missing tool (dpkg, lintian, systemd-analyze) or a missing package is a
//! failure; otherwise the test prints why it skips.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

const UNIT: &str = include_str!("../../systemd/npu-agent.service");
const AGENT_TOML: &str = include_str!("../../packaging/agent.toml");
const VERSION: &str = env!("CARGO_PKG_VERSION");
const UNIT_PATH: &str = "/usr/lib/systemd/system/npu-agent.service";

fn in_ci() -> bool {
    std::env::var_os("CI").is_some()
}

/// `Some(())` when the requirement holds; in CI a failure, elsewhere a printed skip.
pub(super) fn need(ok: bool, what: &str) -> Option<()> {
    if ok {
        return Some(());
    }
    assert!(!in_ci(), "{what} (required under CI=true)");
    // Straight to stderr, past libtest's capture of `eprintln!`, so a person sees the skip.
    use std::io::Write as _;
    let _ = writeln!(
        std::io::stderr(),
        "SKIP: {what} (set CI=true to make this a failure)"
    );
    None
}

pub(super) fn have(tool: &str) -> bool {
    Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {tool}"))
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

pub(super) fn run(cmd: &str, args: &[&str]) -> Output {
    Command::new(cmd)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{cmd}: {e}"))
}

pub(super) fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

pub(super) fn ok(cmd: &str, args: &[&str]) -> String {
    let o = run(cmd, args);
    assert!(
        o.status.success(),
        "{cmd} {args:?} failed ({}):\n{}",
        o.status,
        text(&o)
    );
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The target directory this test binary was built in (`<target>/debug/deps/system-…`).
pub(super) fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.ancestors().nth(3).unwrap().to_path_buf()
}

/// The two packages, or `None` (skip) when they were not built.
pub(super) fn debs() -> Option<(PathBuf, PathBuf)> {
    need(
        have("dpkg-deb"),
        "dpkg-deb is not installed (apt-get install dpkg)",
    )?;
    let dir = target_dir().join("debian");
    let arm = dir.join(format!("npu-agent_{VERSION}-1_arm64.deb"));
    let amd = dir.join(format!("npu-agent_{VERSION}-1_amd64.deb"));
    need(
        arm.is_file() && amd.is_file(),
        &format!(
            "{} and {} not built: run `bash packaging/build-debs.sh`",
            arm.display(),
            amd.display()
        ),
    )?;
    Some((arm, amd))
}

pub(super) fn field(deb: &Path, name: &str) -> String {
    ok("dpkg-deb", &["-f", deb.to_str().unwrap(), name])
        .trim()
        .to_string()
}

/// One file's bytes from a package's data.
pub(super) fn member(deb: &Path, path: &str) -> Vec<u8> {
    let o = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "dpkg-deb --fsys-tarfile '{}' | tar -xOf - '.{path}'",
            deb.display()
        ))
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "{path} not in {}: {}",
        deb.display(),
        text(&o)
    );
    o.stdout
}

pub(super) fn control_file(deb: &Path, name: &str) -> String {
    ok("dpkg-deb", &["-I", deb.to_str().unwrap(), name])
}

/// (mode, path) of every file (not directory) in a package, in its order.
pub(super) fn files(deb: &Path) -> Vec<(String, String)> {
    let listing = ok("dpkg-deb", &["-c", deb.to_str().unwrap()]);
    listing
        .lines()
        .filter(|l| !l.starts_with('d'))
        .map(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            (
                cols[0].to_string(),
                cols[cols.len() - 1].trim_start_matches('.').to_string(),
            )
        })
        .collect()
}

#[test]
fn both_packages_carry_the_agent_unit_and_config() {
    let Some((arm, amd)) = debs() else { return };
    for (deb, arch) in [(&arm, "arm64"), (&amd, "amd64")] {
        assert_eq!(field(deb, "Package"), "npu-agent");
        assert_eq!(field(deb, "Version"), format!("{VERSION}-1"));
        assert_eq!(field(deb, "Architecture"), arch);
        assert_eq!(field(deb, "Section"), "admin");
        let files = files(deb);
        let mut paths: Vec<&str> = files.iter().map(|(_, p)| p.as_str()).collect();
        paths.sort();
        let mut want: Vec<String> = [
            "/etc/npu-agent/agent.d/README",
            "/etc/npu-agent/agent.toml",
            "/etc/npu-agent/profiles.d/README",
            "/usr/bin/npu-agent",
            "/usr/lib/systemd/system/npu-agent-prometheus.service",
            "/usr/lib/systemd/system/npu-agent-prometheus.timer",
            UNIT_PATH,
            // Generated from the clap definitions (examples/gen_docs.rs).
            "/usr/share/bash-completion/completions/npu-agent",
            "/usr/share/fish/vendor_completions.d/npu-agent.fish",
            "/usr/share/zsh/vendor-completions/_npu-agent",
            "/usr/share/doc/npu-agent/README.md",
            "/usr/share/doc/npu-agent/changelog.Debian.gz",
            "/usr/share/doc/npu-agent/copyright",
            "/usr/share/doc/npu-agent/docs/README.md",
            "/usr/share/doc/npu-agent/docs/development.md",
            "/usr/share/doc/npu-agent/docs/image-guide.md",
            "/usr/share/doc/npu-agent/docs/operator-guide.md",
            "/usr/share/doc/npu-agent/docs/reference.md",
            "/usr/share/doc/npu-agent/docs/user-guide.md",
            "/usr/share/lintian/overrides/npu-agent",
            "/usr/share/npu-agent/npu-agent.toml.example",
            // The operator's fleet service (docs/operator-guide.md "Fleet service"): its unit,
            // never enabled by the package, its alert rules and dashboard.
            "/usr/lib/systemd/system/npu-agent-fleet.service",
            "/usr/share/npu-agent/fleet/alertmanager-route.yml",
            "/usr/share/npu-agent/fleet/npu-fleet-dashboard.json",
            "/usr/share/npu-agent/fleet/npu-fleet-rules.yml",
        ]
        .map(String::from)
        .into();
        want.extend(
            super::package_docs::man_pages()
                .iter()
                .map(|page| format!("/usr/share/man/man1/{page}.1.gz")),
        );
        want.sort();
        assert_eq!(paths, want, "{arch}");
        for (mode, path) in &files {
            let want = if path == "/usr/bin/npu-agent" {
                "-rwxr-xr-x"
            } else {
                "-rw-r--r--"
            };
            assert_eq!(mode, want, "{arch} {path}");
        }
        // The package is of this tree (a stale one fails here: rebuild it).
        assert_eq!(
            String::from_utf8(member(deb, UNIT_PATH)).unwrap(),
            UNIT,
            "{arch}: packaged unit differs from systemd/npu-agent.service"
        );
        assert_eq!(
            String::from_utf8(member(deb, "/etc/npu-agent/agent.toml")).unwrap(),
            AGENT_TOML,
            "{arch}"
        );
        assert_eq!(
            String::from_utf8(member(deb, "/usr/share/npu-agent/npu-agent.toml.example")).unwrap(),
            include_str!("../../image/npu-agent.toml.example")
        );
        // Config is a conffile: dpkg keeps an admin's edits on upgrade.
        let conffiles: Vec<String> = control_file(deb, "conffiles")
            .lines()
            .map(str::to_string)
            .collect();
        assert!(
            conffiles.contains(&"/etc/npu-agent/agent.toml".to_string()),
            "{conffiles:?}"
        );
        // Maintainer scripts: enable on install; start only where systemd runs (not in a chroot).
        let postinst = control_file(deb, "postinst");
        assert!(
            postinst.contains("deb-systemd-helper enable npu-agent.service"),
            "{postinst}"
        );
        let invoke = postinst
            .find("deb-systemd-invoke")
            .expect("postinst starts the unit");
        let guard = postinst[..invoke]
            .rfind("if [ -d /run/systemd/system ]; then")
            .expect("start guarded by a running systemd");
        assert!(postinst[guard..invoke].lines().count() < 10, "{postinst}");
        assert!(
            postinst.contains("install -d -m 0750 /var/lib/npu-agent"),
            "{postinst}"
        );
        assert!(control_file(deb, "prerm").contains("deb-systemd-invoke stop npu-agent.service"));
        let postrm = control_file(deb, "postrm");
        assert!(
            postrm.contains("deb-systemd-helper mask npu-agent.service")
                && postrm.contains("deb-systemd-helper purge npu-agent.service"),
            "{postrm}"
        );
        assert!(postrm.contains("rm -rf /etc/npu-agent/secrets"), "{postrm}");
        for script in ["postinst", "prerm", "postrm"] {
            let o = Command::new("sh")
                .arg("-n")
                .stdin(Stdio::piped())
                .spawn()
                .and_then(|mut c| {
                    use std::io::Write;
                    c.stdin
                        .take()
                        .unwrap()
                        .write_all(control_file(deb, script).as_bytes())?;
                    c.wait_with_output()
                })
                .unwrap();
            assert!(o.status.success(), "{arch} {script}: sh -n: {}", text(&o));
        }
    }
    // arm64: the static aarch64 musl binary, no dependency on libc.
    assert_eq!(field(&arm, "Depends"), "init-system-helpers (>= 1.50)");
    let bin = member(&arm, "/usr/bin/npu-agent");
    let elf = object::read::elf::ElfFile64::<object::Endianness>::parse(bin.as_slice()).unwrap();
    use object::read::elf::ProgramHeader as _;
    use object::Object as _;
    assert_eq!(elf.architecture(), object::Architecture::Aarch64);
    let endian = elf.endian();
    assert!(
        elf.elf_program_headers()
            .iter()
            .all(|p| p.p_type(endian) != object::elf::PT_INTERP),
        "the arm64 binary has an ELF interpreter: not static"
    );
    // amd64: the glibc build.
    let deps = field(&amd, "Depends");
    assert!(
        deps.contains("libc6 (>= ") && deps.contains("init-system-helpers (>= 1.50)"),
        "{deps}"
    );
    let bin = member(&amd, "/usr/bin/npu-agent");
    assert_eq!(
        object::File::parse(bin.as_slice()).unwrap().architecture(),
        object::Architecture::X86_64
    );
}

#[test]
fn lintian_finds_no_error_or_warning() {
    let Some((arm, amd)) = debs() else { return };
    if need(
        have("lintian"),
        "lintian is not installed (apt-get install lintian)",
    )
    .is_none()
    {
        return;
    }
    for deb in [&arm, &amd] {
        assert_lintian_clean(deb);
    }
}

/// lintian finds no error or warning in `deb`; overridden tags (packaging/lintian-overrides,
/// each explained there) do not count.
pub(super) fn assert_lintian_clean(deb: &Path) {
    let o = run(
        "lintian",
        &[
            "--fail-on",
            "error,warning",
            "--display-info",
            deb.to_str().unwrap(),
        ],
    );
    let out = text(&o);
    println!("lintian {}:\n{out}", deb.display());
    let bad: Vec<&str> = out
        .lines()
        .filter(|l| l.starts_with("E: ") || l.starts_with("W: "))
        .collect();
    assert!(
        bad.is_empty() && o.status.success(),
        "lintian {} ({}):\n{out}",
        deb.display(),
        o.status
    );
}

/// `key -> values` of one section of a unit file.
fn unit_section(section: &str) -> Vec<(String, String)> {
    let mut cur = String::new();
    let mut out = Vec::new();
    for line in UNIT.lines().map(str::trim) {
        if line.starts_with('[') {
            cur = line.to_string();
        } else if !line.is_empty() && !line.starts_with('#') && cur == format!("[{section}]") {
            let (k, v) = line.split_once('=').unwrap();
            out.push((k.to_string(), v.to_string()));
        }
    }
    out
}

fn values<'a>(kv: &'a [(String, String)], key: &str) -> Vec<&'a str> {
    kv.iter()
        .filter(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
        .collect()
}

#[test]
fn the_unit_is_notify_watchdog_restart_after_network_and_sandboxed() {
    let unit = unit_section("Unit");
    assert_eq!(values(&unit, "Wants"), vec!["network-online.target"]);
    assert!(values(&unit, "After").contains(&"network-online.target"));
    assert_eq!(values(&unit, "StartLimitIntervalSec"), vec!["0"]);
    let svc = unit_section("Service");
    assert_eq!(values(&svc, "Type"), vec!["notify"]);
    assert_eq!(values(&svc, "ExecStart"), vec!["/usr/bin/npu-agent run"]);
    assert_eq!(values(&svc, "Restart"), vec!["always"]);
    let restart_sec: u64 = values(&svc, "RestartSec")[0].parse().unwrap();
    assert!((5..=60).contains(&restart_sec), "RestartSec={restart_sec}");
    let watchdog: u64 = values(&svc, "WatchdogSec")[0].parse().unwrap();
    // The daemon pings at half the interval; standby every min(5 s, half).
    assert!((10..=120).contains(&watchdog), "WatchdogSec={watchdog}");
    // Exactly the writable places the agent needs.
    assert_eq!(values(&svc, "ProtectSystem"), vec!["strict"]);
    assert_eq!(
        values(&svc, "ReadWritePaths"),
        vec!["/etc/npu-agent", "-/boot", "/proc/sys/vm"]
    );
    assert_eq!(values(&svc, "StateDirectory"), vec!["npu-agent"]);
    assert_eq!(
        values(&svc, "CapabilityBoundingSet"),
        vec!["CAP_DAC_READ_SEARCH CAP_SYSLOG"]
    );
    // Kernel messages come from /dev/kmsg: readable, and nothing else of /dev.
    assert_eq!(values(&svc, "ProtectKernelLogs"), vec!["no"]);
    assert_eq!(values(&svc, "DeviceAllow"), vec!["/dev/kmsg r"]);
    assert_eq!(values(&svc, "NoNewPrivileges"), vec!["yes"]);
    // The agent's own file layout matches the unit.
    assert_eq!(
        npu_agent::action::state::DEFAULT_STATE_DIR,
        "/var/lib/npu-agent"
    );
    assert!(npu_agent::provision::DROPIN.starts_with("/etc/npu-agent/"));
    assert!(npu_agent::config::FIRST_BOOT_FILES
        .iter()
        .all(|f| f.starts_with("/boot/")));
    assert_eq!(
        values(&unit_section("Install"), "WantedBy"),
        vec!["multi-user.target"]
    );
    // Every directive is under a comment, or is one of the self-explaining ones.
    let obvious = [
        "Description",
        "Documentation",
        "WantedBy",
        "NoNewPrivileges",
        "ProtectSystem",
        "PrivateTmp",
        "PrivateMounts",
        "ProtectKernelTunables",
        "ProtectControlGroups",
        "ProtectClock",
        "ProtectHostname",
        "RestrictNamespaces",
        "RestrictRealtime",
        "RestrictSUIDSGID",
        "LockPersonality",
        "MemoryDenyWriteExecute",
        "PrivateIPC",
        "SystemCallArchitectures",
        "SystemCallFilter",
        "SystemCallErrorNumber",
        "Restart",
        "Type",
        "StateDirectoryMode",
        "ReadWritePaths",
        "ProtectHome",
        "CapabilityBoundingSet",
    ];
    let lines: Vec<&str> = UNIT.lines().collect();
    for (i, l) in lines.iter().enumerate() {
        let Some((k, _)) = l.split_once('=') else {
            continue;
        };
        if l.starts_with('#') || obvious.contains(&k) {
            continue;
        }
        // The nearest line above that is not a directive (the head of its group) is a comment.
        let head = lines[..i]
            .iter()
            .rev()
            .find(|x| x.starts_with('#') || !x.contains('='));
        assert!(
            head.is_some_and(|h| h.starts_with('#')),
            "unit line {} `{l}` has no comment above it",
            i + 1
        );
    }
}

#[test]
fn systemd_security_review_is_printed_and_below_3() {
    if need(
        have("systemd-analyze"),
        "systemd-analyze is not installed (apt-get install systemd)",
    )
    .is_none()
    {
        return;
    }
    let unit = Path::new(env!("CARGO_MANIFEST_DIR")).join("systemd/npu-agent.service");
    // --threshold=30: fail above an exposure of 3.0 ("OK" is below 4.0, 0 is a perfect sandbox).
    let o = run(
        "systemd-analyze",
        &[
            "security",
            "--offline=yes",
            "--no-pager",
            "--threshold=30",
            unit.to_str().unwrap(),
        ],
    );
    let out = text(&o);
    println!("{out}");
    assert!(
        o.status.success(),
        "exposure above 3.0 or review failed ({}):\n{out}",
        o.status
    );
    let score = out
        .lines()
        .find_map(|l| l.split_once("Overall exposure level for npu-agent.service: "))
        .map(|(_, r)| r.to_string())
        .expect("score line");
    let value: f64 = score.split_whitespace().next().unwrap().parse().unwrap();
    assert!(value <= 3.0, "{score}");
}

#[test]
fn packaging_and_image_scripts_pass_shellcheck() {
    if need(
        have("shellcheck"),
        "shellcheck is not installed (apt-get install shellcheck)",
    )
    .is_none()
    {
        return;
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let scripts = [
        "packaging/build-debs.sh",
        ".ci/build-cache.sh",
        "tests/vboard/build-aarch64.sh",
        "packaging/deb/postinst",
        "packaging/deb/postrm",
        "image/install-into-image.sh",
        "image/add-apt-repo.sh",
        "packaging/apt-repo/publish.sh",
        "packaging/oci/build-image.sh",
        "packaging/ha-addon/npu-agent/run.sh",
        "image/build-test-image.sh",
        "tests/host-fingerprint.sh",
        "image/armbian/userpatches/customize-image.sh",
        "image/pi-gen/stage-npu-agent/prerun.sh",
        "image/pi-gen/stage-npu-agent/00-npu-agent/00-run.sh",
        "image/pi-gen/stage-npu-agent/00-npu-agent/01-run-chroot.sh",
    ];
    for s in scripts {
        let p = root.join(s);
        use std::os::unix::fs::PermissionsExt;
        assert!(
            std::fs::metadata(&p).unwrap().permissions().mode() & 0o111 != 0,
            "{s} is not executable"
        );
        let o = run("shellcheck", &[p.to_str().unwrap()]);
        assert!(o.status.success(), "shellcheck {s}:\n{}", text(&o));
    }
}
