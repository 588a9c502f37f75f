//! First-boot provisioning and standby, through the real `npu-agent run` process on temporary
//! board trees (`--root`), with a real mosquitto: the boot file is moved on start and the outcome
//! reaches the MQTT status; a broken file is left in place and reported; an unconfigured agent
//! stands by (READY=1 and a status line over a fake `NOTIFY_SOCKET`, watchdog pings) and starts
//! once a provisioning file appears. The packaged default config loads.

use crate::support::mqtt::{agent_config, require_tool, Agent, Board, Broker, Client};
use std::os::unix::net::UnixDatagram;
use std::process::Command;
use std::time::{Duration, Instant};

const CASE: &str = "own-rk3588-opi5plus-rknpu-0.9.8-healthy";
const T: Duration = Duration::from_secs(20);
const PACKAGED_CONFIG: &str = include_str!("../../packaging/agent.toml");
const PI_BOOT_FILE: &str = "/boot/firmware/npu-agent.toml";
const DROPIN: &str = "/etc/npu-agent/agent.d/90-provisioned.toml";

fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_npu-agent")
}

fn wait_until(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !f() {
        assert!(t0.elapsed() < timeout, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn boot_file(url: &str, board: &str) -> String {
    format!("# provisioned from a PC\nboard_id = \"{board}\"\n\n[mqtt]\nurl = \"{url}\"\nkeep_alive_s = 5\n\n[report]\ninterval_s = 2\n")
}

fn provisioning_finding(status: &serde_json::Value) -> Option<serde_json::Value> {
    status["findings"]
        .as_array()?
        .iter()
        .find(|f| f["id"] == "agent.provisioning")
        .cloned()
}

#[test]
fn a_provisioning_file_is_moved_and_reported_in_the_status() {
    if !require_tool("mosquitto") {
        return;
    }
    let broker = Broker::start();
    let board = Board::from_fixture(CASE, "unused", PACKAGED_CONFIG);
    board.write(PI_BOOT_FILE, &boot_file(&broker.url(), "cam-7"));
    let live = Client::connect(broker.port, &["npu-fleet/cam-7/status"]);
    let mut agent = Agent::start(&board);
    let status = live
        .wait_for(T, "a status from the provisioned board", |m| {
            !m.payload.is_empty()
        })
        .json();
    // The board id and broker came from the boot file.
    assert_eq!(status["board_id"], "cam-7");
    let f = provisioning_finding(&status).expect("agent.provisioning in the status");
    assert_eq!(f["status"], "info", "{f}");
    assert_eq!(f["observed"]["source"], PI_BOOT_FILE);
    assert_eq!(f["observed"]["dropin"], DROPIN);
    assert_eq!(f["observed"]["boot_file_removed"], true);
    assert_eq!(
        f["observed"]["keys"],
        serde_json::json!([
            "board_id",
            "mqtt.keep_alive_s",
            "mqtt.url",
            "report.interval_s"
        ])
    );
    // Moved: gone from the boot partition, in agent.d with the same settings.
    assert!(board.read(PI_BOOT_FILE).is_none());
    let dropin = board.read(DROPIN).unwrap();
    assert!(
        dropin.contains("board_id = \"cam-7\"") && dropin.contains(&broker.url()),
        "{dropin}"
    );
    // First, before the checks, which keep their order.
    let ids: Vec<&str> = status["findings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["id"].as_str().unwrap())
        .collect();
    assert_eq!(&ids[..2], &["agent.provisioning", "board.identity"]);
    assert_eq!(
        ids.iter().filter(|i| **i == "agent.provisioning").count(),
        1
    );
    assert_eq!(agent.terminate(), Some(0));
    assert!(agent.log_text().contains("provisioned from /boot/firmware/npu-agent.toml into /etc/npu-agent/agent.d/90-provisioned.toml"), "{}", agent.log_text());
}

#[test]
fn a_broken_file_is_left_in_place_and_reported_in_the_status() {
    if !require_tool("mosquitto") {
        return;
    }
    let broker = Broker::start();
    let board = Board::from_fixture(CASE, "b-broken", "");
    board.write(
        "/etc/npu-agent/agent.toml",
        &agent_config(&broker.url(), "b-broken", ""),
    );
    let broken = "board_id = \"elsewhere\"\n[mqtt]\nurll = \"mqtt://typo\"\n[secrets]\nmqtt_password = \"hunter22\"\n";
    board.write("/boot/npu-agent.toml", broken);
    let live = Client::connect(broker.port, &["npu-fleet/b-broken/status"]);
    let mut agent = Agent::start(&board);
    let status = live
        .wait_for(T, "a status", |m| !m.payload.is_empty())
        .json();
    let f = provisioning_finding(&status).expect("agent.provisioning in the status");
    assert_eq!(f["status"], "error", "{f}");
    assert_eq!(f["evidence"][0]["file"], "/boot/npu-agent.toml");
    assert_eq!(f["evidence"][0]["line"], 3);
    let summary = f["summary"].as_str().unwrap();
    assert!(
        summary.contains("unknown key `urll`") && summary.contains("left in place"),
        "{summary}"
    );
    assert!(
        !status.to_string().contains("hunter22"),
        "a secret reached the status"
    );
    assert_ne!(status["health"], "ok");
    // Nothing applied: the board id is the configured one, the file is byte for byte the same.
    assert_eq!(status["board_id"], "b-broken");
    assert_eq!(board.read("/boot/npu-agent.toml").unwrap(), broken);
    assert!(
        board.read(DROPIN).is_none()
            && board.read("/etc/npu-agent/secrets/mqtt-password").is_none()
    );
    assert_eq!(agent.terminate(), Some(0));
}

/// A fake systemd notify socket: what the agent sends with `sd_notify`.
struct NotifySocket {
    sock: UnixDatagram,
    path: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

impl NotifySocket {
    fn new() -> NotifySocket {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify");
        let sock = UnixDatagram::bind(&path).unwrap();
        sock.set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        NotifySocket {
            sock,
            path,
            _dir: dir,
        }
    }

    /// Messages until `pred` holds for one (returns all seen), or panics after `timeout`.
    fn wait_for(&self, what: &str, timeout: Duration, pred: impl Fn(&str) -> bool) -> Vec<String> {
        let t0 = Instant::now();
        let mut seen = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            if let Ok(n) = self.sock.recv(&mut buf) {
                let m = String::from_utf8_lossy(&buf[..n]).into_owned();
                let hit = pred(&m);
                seen.push(m);
                if hit {
                    return seen;
                }
            }
            assert!(
                t0.elapsed() < timeout,
                "no sd_notify message with {what}; got {seen:?}"
            );
        }
    }
}

#[test]
fn an_unconfigured_agent_stands_by_then_starts_when_provisioned() {
    if !require_tool("mosquitto") {
        return;
    }
    let board = Board::from_fixture(CASE, "unused", PACKAGED_CONFIG);
    let broken = "[mqtt]\nurl = \"mqtt://127.0.0.1:1\"\nkeep_alive_s = \"often\"\n";
    board.write(PI_BOOT_FILE, broken);
    let notify = NotifySocket::new();
    let env = [
        ("NOTIFY_SOCKET", notify.path.to_str().unwrap()),
        ("WATCHDOG_USEC", "2000000"),
    ];
    let mut agent = Agent::start_env(&board, &env);
    // Standby: READY=1 at once, the status says what is missing and what is wrong.
    let first = notify.wait_for("READY=1", T, |m| m.contains("READY=1"));
    let ready = first.last().unwrap();
    assert!(
        ready.contains("STATUS=standby: no MQTT broker configured (mqtt.url is empty)"),
        "{ready}"
    );
    assert!(
        ready.contains("first-boot file /boot/firmware/npu-agent.toml is invalid (line 3:"),
        "{ready}"
    );
    // The watchdog is fed while standing by (every WATCHDOG_USEC/2 = 1 s).
    notify.wait_for("WATCHDOG=1", Duration::from_secs(5), |m| {
        m.contains("WATCHDOG=1")
    });
    assert!(
        agent.is_running(),
        "standby must not exit: {}",
        agent.log_text()
    );
    assert_eq!(board.read(PI_BOOT_FILE).unwrap(), broken);
    assert!(board.read(DROPIN).is_none());
    // Someone fixes the file on the running board: the agent provisions and starts.
    let broker = Broker::start();
    let live = Client::connect(broker.port, &["npu-fleet/cam-9/status"]);
    // Written whole (temp + rename), as a copy from a PC would appear.
    board.write(
        "/boot/firmware/.npu-agent.toml.part",
        &boot_file(&broker.url(), "cam-9"),
    );
    std::fs::rename(
        board.root().join("boot/firmware/.npu-agent.toml.part"),
        board.root().join("boot/firmware/npu-agent.toml"),
    )
    .unwrap();
    wait_until("the boot file to be moved", T, || {
        board.read(PI_BOOT_FILE).is_none()
    });
    let status = live
        .wait_for(T, "a status after provisioning", |m| !m.payload.is_empty())
        .json();
    assert_eq!(status["board_id"], "cam-9");
    assert_eq!(provisioning_finding(&status).unwrap()["status"], "info");
    let log = agent.log_text();
    assert!(
        log.contains(&format!("broker configured ({}); starting", broker.url())),
        "{log}"
    );
    assert_eq!(
        log.matches("npu-agent: first-boot file /boot/firmware/npu-agent.toml is invalid")
            .count(),
        1,
        "the same error is logged once: {log}"
    );
    assert_eq!(agent.terminate(), Some(0));
}

#[test]
fn sigterm_ends_standby_cleanly() {
    let board = Board::from_fixture(CASE, "unused", PACKAGED_CONFIG);
    let notify = NotifySocket::new();
    let mut agent = Agent::start_env(&board, &[("NOTIFY_SOCKET", notify.path.to_str().unwrap())]);
    let seen = notify.wait_for("READY=1", T, |m| m.contains("READY=1"));
    assert!(!seen.last().unwrap().contains("first-boot"), "{seen:?}");
    assert_eq!(agent.terminate(), Some(0));
}

#[test]
fn run_by_hand_without_a_broker_still_refuses_and_names_a_broken_file() {
    let board = Board::from_fixture(CASE, "unused", PACKAGED_CONFIG);
    board.write("/boot/npu-agent.toml", "[mqtt]\nurl = 5\n");
    let out = Command::new(bin())
        .args(["run", "--root"])
        .arg(board.root())
        .env_remove("NOTIFY_SOCKET")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("first-boot file /boot/npu-agent.toml is invalid (line 2:"),
        "{err}"
    );
    assert!(err.contains("mqtt.url is not set"), "{err}");
    assert!(board.read("/boot/npu-agent.toml").is_some());
}

#[test]
fn print_config_shows_a_pending_file_and_changes_nothing() {
    let board = Board::from_fixture(CASE, "unused", PACKAGED_CONFIG);
    let text = boot_file("mqtt://10.1.2.3:1883", "cam-1");
    board.write("/boot/npu-agent.toml", &text);
    let out = Command::new(bin())
        .args(["run", "--print-config", "--root"])
        .arg(board.root())
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.starts_with("# effective configuration, from: /etc/npu-agent/agent.toml\n"),
        "{stdout}"
    );
    // The pending file is not in effect yet, and says what it will set.
    assert!(stdout.contains("url = \"\""), "{stdout}");
    assert!(
        stdout.contains("# first-boot file /boot/npu-agent.toml is valid; `npu-agent run` moves it into /etc/npu-agent/agent.d/90-provisioned.toml on start (sets board_id, mqtt.keep_alive_s, mqtt.url, report.interval_s; 0 secret file(s), 0 public file(s))"),
        "{stdout}"
    );
    assert_eq!(board.read("/boot/npu-agent.toml").unwrap(), text);
    assert!(board.read(DROPIN).is_none());
}

#[test]
fn the_packaged_default_config_loads() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("packaging/agent.toml");
    let out = Command::new(bin())
        .args(["run", "--print-config", "--config"])
        .arg(&cfg)
        .arg("--root")
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    // Every key is commented out: the effective configuration is the defaults.
    let printed: toml::Table = toml::from_str(stdout.split_once('\n').unwrap().1).unwrap();
    let mut defaults: toml::Table =
        toml::from_str(&npu_agent::config::Config::default().redacted()).unwrap();
    defaults.insert(
        "root".into(),
        toml::Value::String(dir.path().display().to_string()),
    );
    assert_eq!(printed, defaults);
    // ... and it names every config key (docs/reference.md), commented, so an operator sees them all.
    for key in [
        "board_id",
        "profile",
        "root",
        "state_dir",
        "url",
        "topic_root",
        "username",
        "password_file",
        "ca_file",
        "cert_file",
        "key_file",
        "keep_alive_s",
        "interval_s",
        "auto_compact",
        "compact_cooldown_s",
        "allow_reboot",
        "reboot_command",
        "reboot_timeout_s",
        "trusted_keys",
        "allow_unsigned",
        "max_command_age_s",
        "enabled",
        "discovery_prefix",
    ] {
        assert!(
            PACKAGED_CONFIG
                .lines()
                .any(|l| l.trim_start().starts_with(&format!("# {key} = "))),
            "{key} is not in packaging/agent.toml"
        );
    }
    // The provisioning template is all comments too: saved as is, it provisions nothing.
    let template = include_str!("../../image/npu-agent.toml.example");
    let parsed: toml::Table = toml::from_str(template).unwrap();
    assert!(
        parsed
            .values()
            .all(|v| v.as_table().is_some_and(|t| t.is_empty())),
        "{parsed:?}"
    );
}

#[test]
fn a_file_size_limit_fails_the_write_and_does_not_kill_the_agent() {
    use std::io::{BufRead, BufReader};
    use std::os::unix::process::ExitStatusExt;
    use std::process::Stdio;
    let root = tempfile::tempdir().unwrap();
    let boot = root.path().join("boot/firmware");
    std::fs::create_dir_all(&boot).unwrap();
    std::fs::write(boot.join("npu-agent.toml"), "board_id = \"cam-fsize\"\n").unwrap();
    // `ulimit -f 0`: the first byte the agent writes to a file is past RLIMIT_FSIZE. Its stderr
    // is a pipe, which the limit does not cover.
    let mut child = Command::new("sh")
        .args(["-c", "ulimit -f 0 && exec \"$0\" run --root \"$1\""])
        .arg(bin())
        .arg(root.path())
        .env("NPU_AGENT_LOG_LEVEL", "info")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let stderr = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let deadline = Instant::now() + T;
    let mut seen = Vec::new();
    let failed = loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(l)
                if l.contains("File too large")
                    || l.contains("EFBIG")
                    || l.contains("os error 27") =>
            {
                break l
            }
            Ok(l) => seen.push(l),
            Err(_) => panic!(
                "no write failure reported within {T:?}: {seen:?}; {:?}",
                child.try_wait()
            ),
        }
    };
    // Run by hand with no broker it then stops as a config error would, by itself: the failed
    // write was reported, not fatal.
    let status = child.wait().unwrap();
    assert_ne!(status.signal(), Some(25), "killed by SIGXFSZ");
    assert_eq!(status.code(), Some(2), "{status:?}: {failed}");
    assert!(failed.contains("every write was undone"), "{failed}");
    // Nothing was applied, so the boot file is still there for the next start.
    assert!(boot.join("npu-agent.toml").exists());
}
