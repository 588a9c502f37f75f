//! The arm64 package with `fleet serve`, `npu-agent-operator` (cargo-deb variant `operator` in
//! Cargo.toml, built by `bash packaging/build-debs.sh` from `tests/vboard/build-aarch64.sh
//! --operator`): its control fields, its files beside the board package's, its lint, and its
//! binary under qemu-aarch64-static answering `fleet serve --help` and serving a real board
//! through a real mosquitto. Installing it (in place of npu-agent) is not done here: nothing is
//! installed on this machine (tests/host.rs).
//!
//! Under `CI=true` a missing tool or package is a failure; otherwise the test prints why it skips.

use super::package::{
    assert_lintian_clean, control_file, debs, field, files, have, member, need, ok, target_dir,
};
use super::serve::{all_signed, ids, Serve, CASE};
use crate::support::mqtt::*;
use std::path::{Path, PathBuf};
use std::process::Command;

const VERSION: &str = env!("CARGO_PKG_VERSION");
const FLEET_UNIT: &str = include_str!("../../systemd/fleet/npu-agent-fleet.service");
const FLEET_UNIT_PATH: &str = "/usr/lib/systemd/system/npu-agent-fleet.service";

/// `npu-agent-operator_<version>-1_arm64.deb` and the board's arm64 package, or `None` (skip).
fn operator_deb() -> Option<(PathBuf, PathBuf)> {
    let (arm, _) = debs()?;
    let deb = target_dir()
        .join("debian")
        .join(format!("npu-agent-operator_{VERSION}-1_arm64.deb"));
    need(
        deb.is_file(),
        &format!(
            "{} not built: run `bash packaging/build-debs.sh`",
            deb.display()
        ),
    )?;
    Some((deb, arm))
}

/// The package's binary unpacked into `dir`: `<dir>/usr/bin/npu-agent`.
fn unpacked_binary(deb: &Path, dir: &Path) -> PathBuf {
    ok(
        "dpkg-deb",
        &["-x", deb.to_str().unwrap(), dir.to_str().unwrap()],
    );
    dir.join("usr/bin/npu-agent")
}

#[test]
fn operator_package_replaces_npu_agent_and_carries_its_files_and_the_fleet_service() {
    let Some((deb, arm)) = operator_deb() else {
        return;
    };
    assert_eq!(field(&deb, "Package"), "npu-agent-operator");
    assert_eq!(field(&deb, "Version"), format!("{VERSION}-1"));
    assert_eq!(field(&deb, "Architecture"), "arm64");
    assert_eq!(field(&deb, "Section"), "admin");
    // Static: no libc dependency, as the board package.
    assert_eq!(field(&deb, "Depends"), "init-system-helpers (>= 1.50)");
    // One of the two on a machine: it takes npu-agent's place (same paths, a superset).
    assert_eq!(field(&deb, "Provides"), "npu-agent");
    assert_eq!(field(&deb, "Conflicts"), "npu-agent");
    assert_eq!(field(&deb, "Replaces"), "npu-agent");
    let description = field(&deb, "Description");
    let words: Vec<&str> = description.split_whitespace().collect();
    assert!(
        words.join(" ").contains("`npu-agent fleet serve`"),
        "{description}"
    );
    assert_eq!(
        field(&arm, "Provides"),
        "",
        "the board package provides nothing"
    );

    // The board package's files, modes included, but for what is named by the package.
    let renamed = |p: &str| {
        p.replace(
            "/usr/share/lintian/overrides/npu-agent",
            "/usr/share/lintian/overrides/npu-agent-operator",
        )
        .replace(
            "/usr/share/doc/npu-agent/copyright",
            "/usr/share/doc/npu-agent-operator/copyright",
        )
        .replace(
            "/usr/share/doc/npu-agent/changelog.Debian.gz",
            "/usr/share/doc/npu-agent-operator/changelog.Debian.gz",
        )
    };
    let mut want: Vec<(String, String)> = files(&arm)
        .into_iter()
        .map(|(mode, path)| (mode, renamed(&path)))
        .collect();
    want.sort();
    let mut got = files(&deb);
    got.sort();
    assert_eq!(got, want);
    let paths: Vec<&str> = got.iter().map(|(_, p)| p.as_str()).collect();
    for path in [
        FLEET_UNIT_PATH,
        "/usr/lib/systemd/system/npu-agent.service",
        "/usr/share/man/man1/npu-agent-fleet-serve.1.gz",
        "/usr/share/bash-completion/completions/npu-agent",
        "/usr/share/npu-agent/fleet/npu-fleet-rules.yml",
        "/usr/share/lintian/overrides/npu-agent-operator",
    ] {
        assert!(paths.contains(&path), "{path} missing: {paths:?}");
    }
    // The tree's fleet unit; the postinst enables the agent, never the fleet service.
    assert_eq!(
        String::from_utf8(member(&deb, FLEET_UNIT_PATH)).unwrap(),
        FLEET_UNIT
    );
    let postinst = control_file(&deb, "postinst");
    assert!(
        postinst.contains("deb-systemd-helper enable npu-agent.service"),
        "{postinst}"
    );
    // The fleet unit is enabled again only when an admin had enabled it (kept across upgrades),
    // and never started: at most restarted on upgrade when it runs.
    let enable = "deb-systemd-helper enable npu-agent-fleet.service";
    assert_eq!(postinst.matches(enable).count(), 1, "{postinst}");
    let guard = "if deb-systemd-helper --quiet was-enabled npu-agent-fleet.service; then";
    let at = postinst.find(enable).unwrap();
    assert!(
        postinst[..at].rfind(guard).is_some_and(|g| at - g < 120),
        "{postinst}"
    );
    let invokes: Vec<&str> = postinst
        .lines()
        .map(str::trim)
        .filter(|l| l.starts_with("deb-systemd-invoke") && l.contains("npu-agent-fleet"))
        .collect();
    assert_eq!(
        invokes,
        ["deb-systemd-invoke try-restart npu-agent-fleet.service >/dev/null || true"]
    );
    assert_eq!(
        control_file(&deb, "postinst"),
        control_file(&arm, "postinst")
    );
    assert_eq!(control_file(&deb, "postrm"), control_file(&arm, "postrm"));

    // Another binary than the board's: a static aarch64 ELF with `fleet serve` in it.
    let bin = member(&deb, "/usr/bin/npu-agent");
    assert_ne!(bin, member(&arm, "/usr/bin/npu-agent"));
    let elf = object::read::elf::ElfFile64::<object::Endianness>::parse(bin.as_slice()).unwrap();
    use object::read::elf::ProgramHeader as _;
    use object::Object as _;
    assert_eq!(elf.architecture(), object::Architecture::Aarch64);
    assert!(
        elf.elf_program_headers()
            .iter()
            .all(|p| p.p_type(elf.endian()) != object::elf::PT_INTERP),
        "the operator's arm64 binary has an ELF interpreter: not static"
    );

    if need(
        have("lintian"),
        "lintian is not installed (apt-get install lintian)",
    )
    .is_some()
    {
        assert_lintian_clean(&deb);
    }
}

#[test]
fn operator_package_binary_serves_a_real_board_under_qemu() {
    let Some((deb, arm)) = operator_deb() else {
        return;
    };
    if need(
        have("qemu-aarch64-static"),
        "qemu-aarch64-static is not installed (apt-get install qemu-user-static)",
    )
    .is_none()
        || !require_tool("mosquitto")
    {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let bin = unpacked_binary(&deb, &dir.path().join("operator"));
    let qemu = |args: &[&str]| {
        let mut c = Command::new("qemu-aarch64-static");
        c.arg(&bin).args(args);
        c
    };
    let help = qemu(&["fleet", "serve", "--help"]).output().unwrap();
    let text = String::from_utf8_lossy(&help.stdout);
    assert!(help.status.success(), "{text}");
    assert!(
        text.contains("--listen") && text.contains("--state-dir"),
        "{text}"
    );
    // The board package's binary has no `fleet serve`: the two builds differ where they should.
    let board_bin = unpacked_binary(&arm, &dir.path().join("board"));
    let o = Command::new("qemu-aarch64-static")
        .arg(&board_bin)
        .args(["fleet", "serve", "--listen", "127.0.0.1:0"])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "the board build serves: {said}");
    assert!(said.contains("not in this build"), "{said}");

    // A real agent (this build, on a board tree) reports through a real mosquitto; the packaged
    // service, under qemu, lists it with its seal checked.
    let broker = Broker::start();
    let board = Board::from_fixture(CASE, "op1", &agent_config(&broker.url(), "op1", ""));
    let _agent = Agent::start(&board);
    let (state, known) = (dir.path().join("state"), dir.path().join("known_boards"));
    let mut s = Serve::start_program(qemu(&[]), &broker.url(), &state, &known, &[]);
    let v = s.wait_json("/api/boards", "op1 signed", |v| all_signed(v, &["op1"]));
    assert_eq!(ids(&v), ["op1"]);
    assert_eq!(v[0]["detail"]["versions"]["agent"], VERSION);
    assert_eq!(s.json("/api/boards/op1")["health"], "ok");
    assert!(state.join("history.sqlite3").is_file());
    assert_eq!(s.stop(), Some(0));
}
