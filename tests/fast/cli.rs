//! The command line as a user runs it: exit codes, usage errors, profiles, text and JSON output,
//! and `check` on this very machine.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// The built `npu-agent`, ready for arguments, environment and redirections.
pub(crate) fn agent_cmd() -> Command {
    Command::new(env!("CARGO_BIN_EXE_npu-agent"))
}

pub(crate) fn agent(args: &[&str]) -> Output {
    agent_cmd().args(args).output().expect("run npu-agent")
}

pub(crate) fn case(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/boards")
        .join(name)
        .join("root")
        .display()
        .to_string()
}

pub(crate) fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub(crate) fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn check_on_this_host_picks_generic_and_exits_cleanly() {
    // This machine (CI or a developer's) has no board profile: generic, board.identity info.
    let o = agent(&["check", "--format", "json"]);
    let code = o.status.code().expect("no signal");
    assert!(code == 0 || code == 1, "exit {code}: {}", stderr(&o));
    let r: Value = serde_json::from_str(&stdout(&o)).expect("JSON report");
    assert_eq!(r["schema"], 1);
    let id = r["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["id"] == "board.identity")
        .unwrap();
    if !Path::new("/proc/device-tree").exists() {
        assert_eq!(r["profile"], "generic", "{}", r["profile_reason"]);
        assert_eq!(id["status"], "info");
    }
    assert_eq!(id["observed"]["arch"], std::env::consts::ARCH);
    // Real /proc: meminfo parsed, so the metrics carry RAM.
    assert!(
        r["metrics"]["mem_total_bytes"].as_u64().unwrap() > 64 << 20,
        "{}",
        r["metrics"]
    );
    assert!(r["findings"].as_array().unwrap().len() >= npu_agent::check::CHECK_IDS.len());
    let text = agent(&["check"]);
    assert!(
        stdout(&text).contains("board.identity"),
        "{}",
        stdout(&text)
    );
}

#[test]
fn text_output_is_a_table_with_remedies() {
    let o = agent(&["check", "--root", &case("rk3588-rknpu-0.8.2-nofile-1024")]);
    assert_eq!(o.status.code(), Some(1));
    let out = stdout(&o);
    assert!(out.contains("health FAIL"), "{out}");
    assert!(out.contains("STATUS  CHECK"), "{out}");
    let line = out
        .lines()
        .find(|l| l.starts_with("fail    limits.nofile"))
        .expect("nofile line");
    assert!(line.contains("errno 24"), "{line}");
    assert!(
        out.contains("fix: for a service: sudo systemctl edit rkllm.service"),
        "{out}"
    );
    assert!(
        out.contains("evidence: /var/log/rkllm/llm_demo.log:"),
        "{out}"
    );
    // Piped output carries no colour codes.
    assert!(!out.contains('\x1b'), "colour on a pipe");
}

#[test]
fn fail_on_warn_turns_warnings_into_exit_1() {
    let root = case("rock5b-rknpu-0.9.6-vendor-kernel");
    assert_eq!(agent(&["check", "--root", &root]).status.code(), Some(0));
    assert_eq!(
        agent(&["check", "--root", &root, "--fail-on", "warn"])
            .status
            .code(),
        Some(1)
    );
    let healthy = case("own-rk3588-opi5plus-rknpu-0.9.8-healthy");
    assert_eq!(
        agent(&["check", "--root", &healthy, "--fail-on", "warn"])
            .status
            .code(),
        Some(0)
    );
}

fn temp_profile(text: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("custom.toml");
    std::fs::write(&p, text).unwrap();
    (dir, p)
}

#[test]
fn profile_file_with_unknown_key_names_file_line_and_key() {
    let (_d, p) = temp_profile("schema = 1\nid = \"custom\"\nname = \"Custom\"\n\n[cma]\nmin_total_bytes = 1\nmin_totl = 2\n");
    let o = agent(&[
        "check",
        "--root",
        &case("own-x86-host-no-devicetree"),
        "--profile",
        p.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    assert!(
        err.contains(&format!(
            "profile {}: line 7: unknown key `min_totl`",
            p.display()
        )),
        "{err}"
    );
}

#[test]
fn profile_file_changes_the_verdict() {
    // The same RK3588 tree, with a profile file that wants a 512 MiB pool: cma.pool_size fails.
    let base = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("board-profiles/rk3588-rknpu.toml"),
    )
    .unwrap();
    let text = base
        .replace("id = \"rk3588-rknpu\"", "id = \"rk3588-big-cma\"")
        .replace("min_total_bytes = 0 ", "min_total_bytes = 536870912 ");
    let (_d, p) = temp_profile(&text);
    let o = agent(&[
        "check",
        "--root",
        &case("own-rk3588-opi5plus-rknpu-0.9.8-healthy"),
        "--profile",
        p.to_str().unwrap(),
        "--format",
        "json",
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let r: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(r["profile"], "rk3588-big-cma");
    let f = r["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["id"] == "cma.pool_size")
        .unwrap();
    assert_eq!(f["status"], "fail");
    assert_eq!(f["observed"]["cma_total_bytes"], 268_435_456u64);
    assert_eq!(f["expected"]["cma_total_bytes"], 536_870_912u64);
}

#[test]
fn profiles_dir_under_root_overrides_and_extends() {
    let tree = tempfile::tempdir().unwrap();
    let dir = tree.path().join("etc/npu-agent/profiles.d");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("lab.toml"),
        "schema = 1\nid = \"lab-board\"\nname = \"Lab board\"\n[match]\nmodel = [\"Lab\"]\n",
    )
    .unwrap();
    std::fs::create_dir_all(tree.path().join("proc/device-tree")).unwrap();
    std::fs::write(
        tree.path().join("proc/device-tree/model"),
        b"Lab Board v2\0",
    )
    .unwrap();
    let root = tree.path().to_str().unwrap();
    let o = agent(&["profiles", "list", "--root", root]);
    assert_eq!(o.status.code(), Some(0));
    assert!(stdout(&o).contains("lab-board"), "{}", stdout(&o));
    assert!(
        stdout(&o).contains("/etc/npu-agent/profiles.d"),
        "{}",
        stdout(&o)
    );
    let o = agent(&["check", "--root", root, "--format", "json"]);
    let r: Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(r["profile"], "lab-board");
    assert_eq!(r["profile_reason"], "model contains \"Lab\"");
    // A broken file there is reported and skipped, not fatal for check.
    std::fs::write(
        dir.join("broken.toml"),
        "schema = 1\nid = \"b\"\nname = \"B\"\nbogus = 1\n",
    )
    .unwrap();
    let o = agent(&["check", "--root", root, "--format", "json"]);
    let r: Value = serde_json::from_str(&stdout(&o)).unwrap();
    let errs = r["profile_errors"].as_array().unwrap();
    assert!(
        errs[0]
            .as_str()
            .unwrap()
            .contains("broken.toml: line 4: unknown key `bogus`"),
        "{errs:?}"
    );
    assert_eq!(
        agent(&["profiles", "list", "--root", root]).status.code(),
        Some(2)
    );
}

#[test]
fn profiles_show_prints_a_loadable_profile() {
    let o = agent(&["profiles", "show", "rpi5-hailo10h"]);
    assert_eq!(o.status.code(), Some(0));
    let text = stdout(&o);
    let p = npu_agent::profile::parse_profile("shown.toml", &text)
        .expect("show output parses as a profile");
    assert_eq!(p.id, "rpi5-hailo10h");
    assert_eq!(p.npu.generation, Some(5));
    assert_eq!(agent(&["profiles", "show", "nope"]).status.code(), Some(2));
}

#[test]
fn profiles_show_prints_the_file_that_replaces_a_built_in_one() {
    let tree = tempfile::tempdir().unwrap();
    let dir = tree.path().join("etc/npu-agent/profiles.d");
    std::fs::create_dir_all(&dir).unwrap();
    // No trailing newline: show adds one.
    let text = "# our Pi 5 lab boards\nschema = 1\nid = \"rpi5-hailo8\"\nname = \"Lab Pi\"\n[limits]\nmin_nofile = 8192";
    std::fs::write(dir.join("pi.toml"), text).unwrap();
    let root = tree.path().to_str().unwrap();
    let o = agent(&["profiles", "show", "rpi5-hailo8", "--root", root]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(stdout(&o), format!("{text}\n"));
    // A built-in one is its file in board-profiles/ as it is.
    let o = agent(&["profiles", "show", "rk3588-rknpu", "--root", root]);
    assert_eq!(
        stdout(&o),
        std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("board-profiles/rk3588-rknpu.toml")
        )
        .unwrap()
    );
}

#[test]
fn json_report_has_the_status_fields() {
    let o = agent(&[
        "check",
        "--root",
        &case("own-pi5-hailo10h-5.1.1-healthy"),
        "--format",
        "json",
    ]);
    assert_eq!(o.status.code(), Some(0));
    let r: Value = serde_json::from_str(&stdout(&o)).unwrap();
    for key in [
        "schema",
        "board_id",
        "profile",
        "model",
        "agent_version",
        "time",
        "boot_id",
        "uptime_s",
        "session",
        "health",
        "findings",
        "metrics",
        "reboot_required",
        "last_action",
    ] {
        assert!(r.get(key).is_some(), "missing {key}");
    }
    assert_eq!(r["board_id"], "10000000c0ffee01");
    assert_eq!(r["health"], "ok");
    assert_eq!(r["boot_id"], "6f1c9a0e-2b7d-4c59-9a51-0d3f6c2e8b41");
    assert_eq!(r["uptime_s"], 3605);
    assert_eq!(r["metrics"]["cma_free_bytes"], 251_904u64 * 1024);
    assert!(time::OffsetDateTime::parse(
        r["time"].as_str().unwrap(),
        &time::format_description::well_known::Rfc3339
    )
    .is_ok());
}

#[test]
fn a_log_read_from_its_tail_gives_no_misleading_line_numbers() {
    // kern.log bigger than the 2 MiB read from its end: the evidence names the file, not a line
    // number counted from the middle of it.
    let tree = tempfile::tempdir().unwrap();
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/boards/rpi3bplus-cma-ebusy-with-free-cma/root");
    assert!(Command::new("cp")
        .arg("-a")
        .arg(format!("{}/.", src.display()))
        .arg(tree.path())
        .status()
        .unwrap()
        .success());
    let log = tree.path().join("var/log/kern.log");
    let tail = std::fs::read_to_string(&log).unwrap();
    let mut big = "padding line of an old boot\n".repeat(120_000);
    big.push_str(&tail);
    std::fs::write(&log, big).unwrap();
    let o = agent(&[
        "check",
        "--root",
        tree.path().to_str().unwrap(),
        "--format",
        "json",
    ]);
    let r: Value = serde_json::from_str(&stdout(&o)).unwrap();
    let f = r["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["id"] == "memory.compaction")
        .unwrap();
    assert_eq!(f["status"], "fail");
    let ev = f["evidence"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["file"] == "/var/log/kern.log")
        .unwrap();
    assert!(ev.get("line").is_none(), "{ev}");
    // A short log keeps exact line numbers.
    let o = agent(&[
        "check",
        "--root",
        &case("rpi3bplus-cma-ebusy-with-free-cma"),
        "--format",
        "json",
    ]);
    let r: Value = serde_json::from_str(&stdout(&o)).unwrap();
    let f = r["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["id"] == "memory.compaction")
        .unwrap();
    assert_eq!(f["evidence"][0]["line"], 1);
}

fn copy_tree(from: &Path, to: &Path) {
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let dest = to.join(e.file_name());
        let ft = e.file_type().unwrap();
        if ft.is_dir() {
            std::fs::create_dir_all(&dest).unwrap();
            copy_tree(&e.path(), &dest);
        } else if ft.is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(e.path()).unwrap(), &dest).unwrap();
        } else {
            std::fs::copy(e.path(), &dest).unwrap();
        }
    }
}

/// Board-controlled text (a device-tree model with a window-title escape, a bell, cursor
/// movement and a carriage return) reaches no terminal unescaped, from any printer.
#[test]
fn board_text_never_drives_the_terminal() {
    let dir = tempfile::tempdir().unwrap();
    copy_tree(
        Path::new(&case("own-rk3588-opi5plus-rknpu-0.9.8-healthy")),
        dir.path(),
    );
    std::fs::write(
        dir.path().join("proc/device-tree/model"),
        b"Orange Pi 5 Plus\x1b]0;owned\x07\x1b[1A\x1b[2K\rfake ok\x9b\0",
    )
    .unwrap();
    std::fs::write(
        dir.path().join("boot/armbianEnv.txt"),
        b"verbosity=1\nextraargs=cma=256M\x1b]52;c;Y3VybA==\x07\x1b[2J\x1b[H\x1b[8m\n",
    )
    .ok();
    let root = dir.path().to_str().unwrap();
    for args in [
        vec!["check", "--root", root],
        vec!["check", "--root", root, "--format", "json"],
        vec!["cma", "show", "--root", root],
        vec!["cma", "set", "512M", "--dry-run", "--root", root],
        vec!["profiles", "list", "--root", root],
    ] {
        let o = agent(&args);
        for (name, bytes) in [("stdout", &o.stdout), ("stderr", &o.stderr)] {
            for bad in [
                &b"\x1b]"[..],
                b"\x07",
                b"\x1b[1A",
                b"\x1b[2K",
                b"\r",
                b"\x1b[2J",
                b"\x1b[H",
                b"\x1b[8m",
            ] {
                assert!(
                    !bytes.windows(bad.len()).any(|w| w == bad),
                    "{args:?} {name} carries {bad:?}: {}",
                    String::from_utf8_lossy(bytes)
                );
            }
        }
    }
}

/// Credentials on a workload's command line — `-mu https://user:password@host/...`, llama.cpp's
/// short `-hft TOKEN`, `--api-key` — appear in no finding (text or JSON) and in no redacted
/// capture.
#[test]
fn workload_credentials_reach_no_finding_and_no_capture() {
    let dir = tempfile::tempdir().unwrap();
    copy_tree(Path::new(&case("own-x86-moe-no-ot-ngl99")), dir.path());
    std::fs::write(
        dir.path().join("proc/4242/cmdline"),
        b"/opt/llama-server\0-mu\0https://bob:pwZq81@models.example/q.gguf?token=tkZq82&x=1\0\
          -hft\0hfZq83\0--api-key\0akZq84\0-ngl\099\0",
    )
    .unwrap();
    let root = dir.path().to_str().unwrap();
    let secrets = ["pwZq81", "tkZq82", "hfZq83", "akZq84", "bob:"];
    for format in ["text", "json"] {
        let o = agent(&["check", "--root", root, "--format", format]);
        let all = format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        assert!(all.contains("models.example/q.gguf"), "{all}");
        for s in secrets {
            assert!(!all.contains(s), "check --format {format} leaks {s}: {all}");
        }
    }
    let out = dir.path().join("bundle.tar.gz");
    let o = agent(&["capture", "--root", root, "--out", out.to_str().unwrap()]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let mut bytes = Vec::new();
    use std::io::Read;
    flate2::read::GzDecoder::new(std::fs::File::open(&out).unwrap())
        .read_to_end(&mut bytes)
        .unwrap();
    let text = String::from_utf8_lossy(&bytes);
    assert!(text.contains("-hft"), "the bundle holds the command line");
    for s in secrets {
        assert!(!text.contains(s), "the capture leaks {s}");
    }
}

/// Secret and key files the config names (`trusted_keys`, `password_file`, `ca_file`, ...) are
/// read under `--root`, as every board file is: a key inside the board tree is found at its
/// board path, and a symlink in the tree pointing outside it reads nothing outside.
#[test]
fn secret_and_key_files_are_read_under_the_root() {
    use ed25519_dalek::pkcs8::{spki::der::pem::LineEnding, EncodePublicKey};
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("board");
    let outside = dir.path().join("outside");
    std::fs::create_dir_all(root.join("etc/npu-agent")).unwrap();
    std::fs::create_dir_all(&outside).unwrap();
    let pem = ed25519_dalek::SigningKey::from_bytes(&[9; 32])
        .verifying_key()
        .to_public_key_pem(LineEnding::LF)
        .unwrap();
    // The trusted key exists only in the board tree (not at the host's /etc/npu-agent).
    std::fs::write(root.join("etc/npu-agent/op.pub"), &pem).unwrap();
    // The password file is a link out of the tree to a real file.
    std::fs::write(outside.join("pw"), "pw-OUTSIDE-0042\n").unwrap();
    std::os::unix::fs::symlink(outside.join("pw"), root.join("etc/npu-agent/pw")).unwrap();
    std::fs::write(
        root.join("etc/npu-agent/agent.toml"),
        "board_id = \"b1\"\n[mqtt]\nurl = \"mqtt://127.0.0.1:1\"\nusername = \"u\"\n\
         password_file = \"/etc/npu-agent/pw\"\n\
         [security]\ntrusted_keys = [\"/etc/npu-agent/op.pub\"]\n",
    )
    .unwrap();
    let o = agent_cmd()
        .args(["run", "--root"])
        .arg(&root)
        .env_remove("NPU_AGENT_MQTT_URL")
        .output()
        .expect("run npu-agent");
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    // The key was read (the run got as far as the password file), the link was not followed.
    assert!(!err.contains("op.pub"), "{err}");
    assert!(err.contains("/etc/npu-agent/pw: not found"), "{err}");
    assert!(!err.contains("pw-OUTSIDE"), "{err}");
}

/// Clear screen passes only for `fleet watch` as parsed: "fleet" and "watch" as the values of
/// other options (a `--root` directory named `fleet`, an `--llm-cmdline` of `watch`) do not let
/// a board's model string wipe the operator's screen.
#[test]
fn only_a_parsed_fleet_watch_may_clear_the_screen() {
    let cwd = tempfile::tempdir().unwrap();
    let tree = cwd.path().join("fleet");
    copy_tree(
        Path::new(&case("own-rk3588-opi5plus-rknpu-0.9.8-healthy")),
        &tree,
    );
    std::fs::write(
        tree.join("proc/device-tree/model"),
        b"Orange Pi 5 Plus\x1b[2J\x1b[Hfake ok\0",
    )
    .unwrap();
    let o = agent_cmd()
        .args(["check", "--root", "fleet", "--llm-cmdline", "watch"])
        .current_dir(cwd.path())
        .output()
        .expect("run npu-agent");
    let out = stdout(&o);
    assert!(
        out.contains("Orange Pi 5 Plus"),
        "the model is shown: {out}"
    );
    for bad in ["\x1b[2J", "\x1b[H"] {
        assert!(!out.contains(bad), "{bad:?} reached the terminal: {out:?}");
    }
    use clap::Parser;
    let parse = |args: &[&str]| {
        npu_agent::cli::Cli::try_parse_from(
            std::iter::once("npu-agent").chain(args.iter().copied()),
        )
        .unwrap()
    };
    assert!(npu_agent::cli::redraws(
        &parse(&["fleet", "watch", "--broker", "mqtt://127.0.0.1:1"]).command
    ));
    assert!(!npu_agent::cli::redraws(
        &parse(&["check", "--root", "fleet", "--llm-cmdline", "watch"]).command
    ));
    assert!(!npu_agent::cli::redraws(
        &parse(&[
            "fleet",
            "send",
            "watch",
            "--all",
            "--broker",
            "mqtt://127.0.0.1:1"
        ])
        .command
    ));
}

/// A board running chronyd instead of systemd-timesyncd: `clock.sync` follows chrony's own
/// verdict (`chronyc -n tracking`, as `npu-agent capture` stores it), passing for Leap status
/// `Normal` and warning for `Not synchronised`, with the file it read as evidence.
#[test]
fn clock_sync_reads_a_chrony_board() {
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/chrony");
    for (file, status) in [
        ("tracking-synchronised.txt", "pass"),
        ("tracking-not-synchronised.txt", "warn"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        copy_tree(
            Path::new(&case("own-rk3588-opi5plus-rknpu-0.9.8-healthy")),
            dir.path(),
        );
        std::fs::create_dir_all(dir.path().join("run/chrony")).unwrap();
        std::fs::create_dir_all(dir.path().join("npu-agent-capture")).unwrap();
        std::fs::copy(
            fixtures.join(file),
            dir.path().join("npu-agent-capture/chronyc-tracking"),
        )
        .unwrap();
        let o = agent(&[
            "check",
            "--root",
            &dir.path().to_string_lossy(),
            "--format",
            "json",
        ]);
        let r: Value = serde_json::from_str(&stdout(&o)).unwrap();
        let f = r["findings"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["id"] == "clock.sync")
            .unwrap()
            .clone();
        assert_eq!(f["status"], status, "{file}: {f}");
        assert_eq!(
            f["evidence"][0]["file"], "/npu-agent-capture/chronyc-tracking",
            "{f}"
        );
        if status == "warn" {
            assert!(
                f["evidence"][0]["text"]
                    .as_str()
                    .unwrap()
                    .contains("Not synchronised"),
                "{f}"
            );
            assert_eq!(r["health"], "warn", "the rest of the board is healthy");
        } else {
            assert_eq!(
                f["summary"],
                "clock synchronised by chronyd (Leap status Normal, Reference ID C0A80101 (192.168.1.1))"
            );
        }
    }
}

/// Arguments that are well-formed but unusable are usage errors (exit 2, nothing written):
/// a --root that is no directory for every command that takes one, a --profile that names no
/// profile for `capture` as for `check`, a `fleet send --wait` past a day.
#[test]
fn unusable_roots_profiles_and_waits_are_usage_errors() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("plain-file");
    std::fs::write(&file, "x").unwrap();
    let file = file.display().to_string();
    for args in [
        vec![
            "run",
            "--print-config",
            "--root",
            "/nonexistent-npu-agent-root",
        ],
        vec!["run", "--print-config", "--root="],
        vec!["profiles", "list", "--root", "/nonexistent-npu-agent-root"],
        vec!["profiles", "show", "generic", "--root", file.as_str()],
    ] {
        let o = agent(&args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains("--root"), "{args:?}: {}", stderr(&o));
        assert!(stdout(&o).is_empty(), "{args:?}: {}", stdout(&o));
    }
    // An empty path is a missing value to clap.
    for (args, name) in [
        (&["profiles", "list", "--root="][..], "--root <DIR>"),
        (&["keygen", "--out="], "--out <FILE>"),
    ] {
        let o = agent(args);
        assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
        let want = format!("error: a value is required for '{name}' but none was supplied");
        assert!(stderr(&o).starts_with(&want), "{}", stderr(&o));
    }

    let out = dir.path().join("bundle.tar.gz");
    let root = case("own-rk3588-opi5plus-rknpu-0.9.8-healthy");
    let capture = |profile: &str| {
        agent(&[
            "capture",
            "--out",
            &out.display().to_string(),
            "--root",
            &root,
            "--profile",
            profile,
        ])
    };
    let o = capture("no-such-profile");
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("no-such-profile"), "{}", stderr(&o));
    assert!(!out.exists(), "a bundle was written for an unknown profile");
    let not_a_profile = dir.path().join("broken.toml");
    std::fs::write(&not_a_profile, "this is = = not toml\n").unwrap();
    let o = capture(&not_a_profile.display().to_string());
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("broken.toml"), "{}", stderr(&o));
    assert!(
        !out.exists(),
        "a bundle was written for a broken profile file"
    );
    // With a usable profile the same command writes the bundle.
    let o = capture("generic");
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(out.exists());

    let o = agent(&[
        "fleet",
        "send",
        "rescan",
        "--all",
        "--broker",
        "mqtt://127.0.0.1:1",
        "--wait",
        "18446744073709551615",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("at most 86400"), "{}", stderr(&o));
}

/// The daemon's helper threads log (here: the state directory is a file, so the log cursors
/// cannot be kept) while the main thread runs: neither may block the other, and SIGTERM ends it.
/// A stderr lock held by the main thread for the whole run once hung the daemon for ever here.
#[test]
fn run_logs_from_helper_threads_and_stops_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    let status = Command::new("cp")
        .args(["-a", &case("own-rk3588-opi5plus-rknpu-0.9.8-healthy")])
        .arg(&root)
        .status()
        .unwrap();
    assert!(status.success());
    std::fs::create_dir_all(root.join("var/lib")).unwrap();
    let _ = std::fs::remove_dir_all(root.join("var/lib/npu-agent"));
    std::fs::write(root.join("var/lib/npu-agent"), "not a directory").unwrap();
    let err_path = dir.path().join("stderr");
    let mut child = agent_cmd()
        .args(["run", "--root"])
        .arg(&root)
        .env("NPU_AGENT_MQTT_URL", "mqtt://127.0.0.1:1")
        .env("NPU_AGENT_BOARD_ID", "helper-log-test")
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&err_path).unwrap())
        .spawn()
        .unwrap();
    let logged = |what: &str| {
        std::fs::read_to_string(&err_path)
            .unwrap_or_default()
            .contains(what)
    };
    let t0 = std::time::Instant::now();
    while !logged("cannot persist the log cursors") && t0.elapsed().as_secs() < 30 {
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let kill = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let t1 = std::time::Instant::now();
    let code = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s.code();
        }
        if t1.elapsed().as_secs() >= 15 {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "npu-agent run did not stop within 15 s of SIGTERM: {}",
                std::fs::read_to_string(&err_path).unwrap_or_default()
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    let log = std::fs::read_to_string(&err_path).unwrap();
    assert!(log.contains("cannot persist the log cursors"), "{log}");
    assert!(log.contains("stopping signal=SIGTERM"), "{log}");
    assert_eq!(code, Some(0), "{log}");
}

/// The live `fleet watch` keeps trying an unreachable broker, but says so on stderr (it used to
/// show nothing at all, for ever).
#[test]
fn live_fleet_watch_says_when_the_broker_cannot_be_reached() {
    let dir = tempfile::tempdir().unwrap();
    let err_path = dir.path().join("stderr");
    let mut child = agent_cmd()
        .args(["fleet", "watch", "--broker", "mqtt://127.0.0.1:1"])
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&err_path).unwrap())
        .spawn()
        .unwrap();
    let t0 = std::time::Instant::now();
    let mut text = String::new();
    while t0.elapsed().as_secs() < 30 {
        text = std::fs::read_to_string(&err_path).unwrap_or_default();
        if text.contains("cannot reach") {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    let still_running = child.try_wait().unwrap().is_none();
    let _ = child.kill();
    let _ = child.wait();
    assert!(
        text.contains("cannot reach mqtt://127.0.0.1:1") && text.contains("still trying"),
        "{text}"
    );
    assert!(still_running, "the live watch gave up: {text}");
}
