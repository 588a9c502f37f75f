//! The image flow on a whole arm64 Debian bookworm image with systemd as PID 1.
//!
//! `image/build-test-image.sh` makes the image as a board image gets made (mmdebstrap root file
//! system, the arm64 `.deb` installed through `image/install-into-image.sh` in its chroot, a
//! separate boot partition); these tests boot it with its `boot.sh` under `qemu-system-aarch64`
//! (TCG) with a ROCK 5B or a Raspberry Pi 5 device tree, a mosquitto on 127.0.0.1 reached through
//! the guest forward, and drive the guest's serial console (root is logged in there):
//!
//! - ROCK 5B: first boot with `npu-agent.toml` on the boot partition (applied, removed, unit
//!   `active (running)` after `READY=1`, retained status); `compact` under the real sandbox;
//!   a signed `fix` of a workload unit's `LimitNOFILE` from the fleet, run in a transient unit
//!   outside the sandbox (drop-in, daemon-reload, restart, the new limit read back from
//!   `/proc/<pid>/limits`); a kernel line in `/dev/kmsg` and a journal line from a unit playing the workload; a signed
//!   `set_cma` editing `armbianEnv.txt` on the boot partition; `journalctl -u npu-agent` and
//!   `systemd-analyze security npu-agent`; the watchdog killing a `kill -STOP`ped agent (offline,
//!   then online with the session incremented); an upgrade to a second build keeping the edited
//!   config; a signed `reboot` through `systemctl reboot`, proven by a new `boot_id` and the
//!   pool the harness-as-bootloader boots with.
//! - Raspberry Pi 5: a broken `npu-agent.toml` on the FAT boot partition: nothing applied, the
//!   file left, `agent.provisioning` in the status; with the Hailo-10H profile and the Hailo-8
//!   line installed from a local apt repository, the signed `fix` of
//!   `hailo.package_generation` swaps the line through real apt (after an unsigned one, one whose
//!   apt simulation would remove an application and one while apt holds the dpkg lock were
//!   refused).
//! - A throwaway arm64 chroot of the same root file system: `dpkg -i`, upgrade over an edited
//!   config, remove, purge, and install-into-image.sh's refusal of a baked provisioning file (the
//!   installs that once ran on the CI machine itself).
//!
//! Prints `bench:` lines: image build time, boot-to-online, VmRSS/VmHWM under systemd.
//! Needs root, the tools `.ci/run` installs, and the packages from `packaging/build-debs.sh`:
//! under `CI=true` anything missing fails the test, otherwise it is skipped with a printed reason.

use crate::{common, fleet, harness};

mod apt_repo;

use common::{say, skip};
use harness::Mosquitto;
use serde_json::Value;
use std::fs;
use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const VERSION: &str = env!("CARGO_PKG_VERSION");
/// Generous: the machine may be shared, and everything in the guest is emulated.
const BOOT_TIMEOUT: Duration = Duration::from_secs(900);
const SH_TIMEOUT: Duration = Duration::from_secs(180);

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// The arm64 package, or None after `skip` (root, tools and the package are needed).
fn prerequisites() -> Option<PathBuf> {
    common::tools(
        [
            "mmdebstrap",
            "qemu-system-aarch64",
            "qemu-aarch64-static",
            "mkfs.ext4",
            "debugfs",
            "mkfs.vfat",
            "mcopy",
            "mtype",
            "dtc",
            "cpio",
            "mosquitto",
            "dpkg-scanpackages",
        ],
        "the image tests; Debian packages dpkg-dev, mmdebstrap, qemu-system-arm, qemu-user-static, e2fsprogs, dosfstools, mtools, device-tree-compiler, cpio, mosquitto",
    )?;
    if !rustix::process::geteuid().is_root() {
        skip("building an image needs root (chroot, file ownership in the root file system)");
        return None;
    }
    let deb = common::target_dir()
        .join("debian")
        .join(format!("npu-agent_{VERSION}-1_arm64.deb"));
    if !deb.is_file() {
        skip(&format!(
            "{} not built: run `bash packaging/build-debs.sh`",
            deb.display()
        ));
        return None;
    }
    // The package must hold the agent this checkout builds: a .deb left from an earlier build
    // would install, test and measure an older binary.
    let bin = common::aarch64_agent()?;
    let unpacked = tempfile::tempdir().expect("temporary directory");
    let o = Command::new("dpkg-deb")
        .arg("-x")
        .arg(&deb)
        .arg(unpacked.path())
        .output()
        .expect("run dpkg-deb");
    assert!(
        o.status.success(),
        "dpkg-deb -x {}: {}",
        deb.display(),
        String::from_utf8_lossy(&o.stderr)
    );
    if !common::same_loaded_bytes(&unpacked.path().join("usr/bin/npu-agent"), &bin) {
        skip(&format!(
            "{} holds another build than {}: run `bash packaging/build-debs.sh`",
            deb.display(),
            bin.display()
        ));
        return None;
    }
    Some(deb)
}

/// A copy of `deb` with another version (the upgrade's second build).
fn rebuilt_with_version(deb: &Path, version: &str, dir: &Path) -> PathBuf {
    let tree = dir.join("tree");
    let o = Command::new("dpkg-deb")
        .arg("-R")
        .arg(deb)
        .arg(&tree)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let control = tree.join("DEBIAN/control");
    let c: String = fs::read_to_string(&control)
        .unwrap()
        .lines()
        .map(|l| {
            if l.starts_with("Version: ") {
                format!("Version: {version}\n")
            } else {
                format!("{l}\n")
            }
        })
        .collect();
    fs::write(&control, c).unwrap();
    let out = dir.join(format!("npu-agent_{version}_arm64.deb"));
    let o = Command::new("dpkg-deb")
        .args(["--root-owner-group", "-b"])
        .arg(&tree)
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    out
}

/// Runs image/build-test-image.sh with `args`; prints its `bench:` line.
fn build_image(args: &[&str]) -> String {
    let t0 = Instant::now();
    let o = Command::new("bash")
        .arg(repo().join("image/build-test-image.sh"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "build-test-image.sh {args:?}:\n{}",
        text(&o)
    );
    let out = text(&o);
    for l in out.lines().filter(|l| l.starts_with("bench:")) {
        say(&format!("{l} (wall {:.1} s)", t0.elapsed().as_secs_f64()));
    }
    out
}

/// One boot of an image: qemu from its `boot.sh`, the serial console collected by a thread.
struct Guest {
    child: Child,
    stdin: ChildStdin,
    console: Arc<Mutex<String>>,
    started: Instant,
    n: u32,
    log: PathBuf,
}

impl Guest {
    fn boot(dir: &Path, port: u16, extra_args: &str, log: PathBuf) -> Guest {
        let mut child = Command::new("sh")
            .arg(dir.join("boot.sh"))
            .env("BROKER_PORT", port.to_string())
            .env("EXTRA_ARGS", extra_args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("qemu-system-aarch64");
        let console = Arc::new(Mutex::new(String::new()));
        for mut pipe in [
            Box::new(child.stdout.take().unwrap()) as Box<dyn std::io::Read + Send>,
            Box::new(child.stderr.take().unwrap()),
        ] {
            let c = console.clone();
            let log = log.clone();
            std::thread::spawn(move || {
                let mut f = fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(log)
                    .ok();
                let mut buf = [0u8; 4096];
                while let Ok(n) = pipe.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    if let Some(f) = f.as_mut() {
                        let _ = f.write_all(&buf[..n]);
                    }
                    let s = String::from_utf8_lossy(&buf[..n]).replace('\r', "");
                    c.lock().unwrap().push_str(&s);
                }
            });
        }
        let stdin = child.stdin.take().unwrap();
        Guest {
            child,
            stdin,
            console,
            started: Instant::now(),
            n: 0,
            log,
        }
    }

    fn console(&self) -> String {
        self.console.lock().unwrap().clone()
    }

    fn tail(&self) -> String {
        let c = self.console();
        let start = c.len().saturating_sub(4000);
        let start = (start..c.len())
            .find(|i| c.is_char_boundary(*i))
            .unwrap_or(0);
        format!(
            "--- console tail ({}) ---\n{}",
            self.log.display(),
            &c[start..]
        )
    }

    /// Waits until the console (from byte `from`) contains `needle`; panics after `timeout`.
    fn wait_for(&mut self, from: usize, needle: &str, timeout: Duration) -> usize {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(i) = self.console().get(from..).and_then(|c| c.find(needle)) {
                return from + i;
            }
            if let Ok(Some(st)) = self.child.try_wait() {
                panic!("qemu exited ({st}) waiting for {needle:?}\n{}", self.tail());
            }
            assert!(
                Instant::now() < deadline,
                "no {needle:?} on the console within {timeout:?}\n{}",
                self.tail()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Waits for the autologin on the serial console and makes the shell quiet (no echo, no
    /// prompt), so `sh` reads only what a command prints.
    fn login(&mut self) {
        let login = self.wait_for(0, "(automatic login)", BOOT_TIMEOUT);
        // Input typed before the shell's first prompt can be lost: wait for root's bash prompt
        // (`root@<board>-image:~# `, Debian's /etc/bash.bashrc).
        self.wait_for(login, ":~# ", SH_TIMEOUT);
        let from = self.console().len();
        writeln!(
            self.stdin,
            "stty -echo; PS1=''; PROMPT_COMMAND=''; bind 'set enable-bracketed-paste off' 2>/dev/null; export SYSTEMD_PAGER= SYSTEMD_COLORS=0 COLUMNS=200; echo @@LOGGED''IN"
        )
        .unwrap();
        self.wait_for(from, "@@LOGGEDIN\n", SH_TIMEOUT);
    }

    /// Runs `cmd` in the guest's root shell: (output, exit code).
    fn sh(&mut self, cmd: &str) -> (String, i32) {
        self.n += 1;
        let from = self.console().len();
        let marker = format!("@@RC{}=", self.n);
        writeln!(self.stdin, "{cmd}\necho \"@@RC{}=$?\"", self.n).unwrap();
        let at = self.wait_for(from, &marker, SH_TIMEOUT);
        let c = self.console();
        let rest = &c[at + marker.len()..];
        let end = rest.find('\n').unwrap_or(rest.len());
        let code: i32 = rest[..end].trim().parse().unwrap_or(-1);
        let out = c[from..at]
            .replace("\x1b[?2004h", "")
            .replace("\x1b[?2004l", "");
        (out, code)
    }

    /// `cmd`'s output; panics when it fails.
    fn ok(&mut self, cmd: &str) -> String {
        let (out, code) = self.sh(cmd);
        assert_eq!(
            code,
            0,
            "`{cmd}` failed in the guest:\n{out}\n{}",
            self.tail()
        );
        out
    }

    /// `systemctl poweroff` in the guest; waits for qemu to end.
    fn poweroff(&mut self) {
        writeln!(self.stdin, "systemctl poweroff").unwrap();
        assert!(
            self.wait_exit(Duration::from_secs(180)),
            "qemu still running after systemctl poweroff\n{}",
            self.tail()
        );
    }

    /// Waits for qemu to exit (a reboot or power-off with -no-reboot).
    fn wait_exit(&mut self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return true;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        false
    }
}

impl Drop for Guest {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn log_path(name: &str) -> PathBuf {
    let dir = common::target_dir().join("image-logs");
    fs::create_dir_all(&dir).unwrap();
    let p = dir.join(name);
    let _ = fs::remove_file(&p);
    p
}

/// The next message (index >= `from`) on `topic` whose payload satisfies `pred`.
fn wait_msg(
    sub: &fleet::Subscriber,
    guest: &Guest,
    from: usize,
    topic: &str,
    timeout: Duration,
    pred: impl Fn(&fleet::Msg) -> bool,
) -> (usize, fleet::Msg) {
    sub.find_from(from, timeout, |m| m.topic == topic && pred(m))
        .unwrap_or_else(|| {
            panic!(
                "nothing on {topic} within {timeout:?}\n--- last messages ---\n{}\n{}",
                sub.recent(12),
                guest.tail()
            )
        })
}

/// The finding `id` of a status (panics with the status when absent).
fn finding<'a>(status: &'a Value, id: &str) -> &'a Value {
    status["findings"]
        .as_array()
        .and_then(|a| a.iter().find(|f| f["id"] == id))
        .unwrap_or_else(|| panic!("no finding {id} in {status:#}"))
}

fn finding_ids(status: &Value) -> Vec<String> {
    status["findings"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|f| f["id"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// The `result` of the `successful` state of the command `sent` (a `fleet send` of `action`
/// to `board`), seen on the subscription from index `from`.
fn successful_result(
    sub: &fleet::Subscriber,
    g: &Guest,
    from: usize,
    board: &str,
    action: &str,
    sent: &fleet::CliOut,
) -> Value {
    let topic = format!("npu-fleet/{board}/cmd/{action}/{}", sent.cmd_id());
    let (_, done) = wait_msg(sub, g, from, &topic, Duration::from_secs(60), |m| {
        m.json()["status"] == "successful"
    });
    done.json()["result"].clone()
}

/// `npu-agent fleet send ACTION --board B --broker URL [--arg K=V]... [--key K] --wait S`.
fn send(url: &str, board: &str, action: &str, args: &[&str], key: Option<&str>) -> fleet::CliOut {
    let mut a: Vec<String> = vec!["fleet".into(), "send".into(), action.into()];
    for kv in args {
        a.extend(["--arg".to_string(), kv.to_string()]);
    }
    a.extend(["--board", board, "--broker", url, "--wait", "240"].map(String::from));
    if let Some(k) = key {
        a.extend(["--key".to_string(), k.to_string()]);
    }
    fleet::npu_agent(
        &a.iter().map(String::as_str).collect::<Vec<_>>(),
        Duration::from_secs(300),
    )
}

/// VmRSS and VmHWM of the unit's main process, printed as a bench line.
fn print_memory(g: &mut Guest, when: &str) {
    let out = g.ok("grep -E '^(VmRSS|VmHWM)' /proc/$(systemctl show -p MainPID --value npu-agent)/status | tr -s ' \\t' ' ' | tr '\\n' ' '");
    say(&format!(
        "bench: npu-agent under systemd ({when}): {}",
        out.trim()
    ));
    assert!(out.contains("VmRSS: ") && out.contains("VmHWM: "), "{out}");
}

const ROCK_ID: &str = "rock-5b-image";

/// What the flasher drops on the ROCK 5B's boot partition: broker, board id, reboot allowed,
/// the operator's key inline.
fn rock_provisioning(public_pem: &str) -> String {
    format!(
        r#"board_id = "{ROCK_ID}"

[mqtt]
url = "mqtt://10.0.2.100:1883"
keep_alive_s = 5
reconnect_max_s = 5

[report]
interval_s = 10

[actions]
auto_compact = false
allow_reboot = true

[security]
allow_unsigned = ["compact", "rescan"]

[files]
trusted_keys = ["""
{public_pem}"""]
"#
    )
}

#[test]
fn rock5b_image_provisions_runs_sandboxed_actions_watchdog_upgrade_and_reboots() {
    let Some(deb) = prerequisites() else { return };
    let Some(mq) = Mosquitto::start() else { return };
    let port = mq.port;
    let url = mq.url();
    let tmp = tempfile::tempdir().unwrap();
    let (key, public) = fleet::keygen(tmp.path());
    let prov = tmp.path().join("npu-agent.toml");
    fs::write(&prov, rock_provisioning(&public)).unwrap();
    let next = rebuilt_with_version(&deb, &format!("{VERSION}-2"), tmp.path());
    let img = tmp.path().join("img");
    build_image(&[
        "--deb",
        deb.to_str().unwrap(),
        "--board",
        "rock5b",
        "--boot-file",
        &format!("npu-agent.toml={}", prov.display()),
        "--file",
        &format!("/root/npu-agent-next.deb={}", next.display()),
        img.to_str().unwrap(),
    ]);
    let sub = fleet::Subscriber::connect(port, "npu-fleet/#");
    let avail = format!("npu-fleet/{ROCK_ID}/availability");
    let status_topic = format!("npu-fleet/{ROCK_ID}/status");

    // (1) First boot: provisioning applied and removed, the unit running, the status retained.
    let armbian = fs::read_to_string({
        let o = Command::new("debugfs")
            .args(["-R", "cat /armbianEnv.txt"])
            .arg(img.join("boot.img"))
            .output()
            .unwrap();
        let p = tmp.path().join("armbianEnv.txt");
        fs::write(&p, &o.stdout).unwrap();
        p
    })
    .unwrap();
    let extra = armbian
        .lines()
        .find_map(|l| l.strip_prefix("extraargs="))
        .unwrap_or("")
        .to_string();
    assert_eq!(extra, "cma=128M", "{armbian}");
    let mut g = Guest::boot(&img, port, &extra, log_path("rock5b-boot1.log"));
    let (i_online, _) = wait_msg(&sub, &g, 0, &avail, BOOT_TIMEOUT, |m| m.text() == "online");
    say(&format!(
        "bench: ROCK 5B image boot to online (qemu start to the retained `online`): {:.1} s",
        g.started.elapsed().as_secs_f64()
    ));
    let (_, st) = wait_msg(&sub, &g, i_online, &status_topic, BOOT_TIMEOUT, |_| true);
    let status = st.json();
    assert_eq!(status["board_id"], ROCK_ID, "{status:#}");
    let boot_id_1 = status["boot_id"].as_str().unwrap_or_default().to_string();
    assert_eq!(boot_id_1.len(), 36, "{status:#}");
    let session_1 = status["session"].as_u64().expect("session");
    // Applied: an info finding saying so, the boot file removed.
    let prov = finding(&status, "agent.provisioning");
    assert_eq!(prov["status"], "info", "{prov:#}");
    assert_eq!(prov["observed"]["boot_file_removed"], true, "{prov:#}");
    let retained =
        fleet::retained(port, &status_topic, Duration::from_secs(20)).expect("a retained status");
    assert_eq!(retained.json()["board_id"], ROCK_ID);
    g.login();
    let show =
        g.ok("systemctl show -p Type,ActiveState,SubState,Result,NRestarts,StatusText npu-agent");
    println!("{show}");
    // Type=notify: active/running only after the agent sent READY=1.
    assert!(
        show.contains("Type=notify")
            && show.contains("ActiveState=active")
            && show.contains("SubState=running"),
        "{show}"
    );
    assert_eq!(
        g.sh("test -e /boot/npu-agent.toml").1,
        1,
        "provisioning file left"
    );
    let applied = g.ok("cat /etc/npu-agent/agent.d/90-provisioned.toml");
    assert!(applied.contains(ROCK_ID), "{applied}");
    assert!(g.ok("ls /boot").contains("npu-agent.toml.example"));
    let j = g.ok("journalctl -u npu-agent --no-pager -o cat | grep 'provisioned from' | tail -n 3");
    assert!(
        j.contains("provisioned from /boot/npu-agent.toml")
            && j.contains("the boot file was removed"),
        "{j}"
    );
    let pid_1 = g
        .ok("systemctl show -p MainPID --value npu-agent")
        .trim()
        .to_string();
    print_memory(&mut g, "after the first check cycle");

    // (4) compact under the real sandbox moves the kernel's compact_* counters.
    let from = sub.len();
    let c = send(&url, ROCK_ID, "compact", &[], None);
    assert_eq!(c.code, 0, "{c:?}\n{}", g.tail());
    let res = &successful_result(&sub, &g, from, ROCK_ID, "compact", &c);
    assert_eq!(res["outcome"], "done", "{res:#}");
    let deltas = res["counter_deltas"].as_object().expect("counter_deltas");
    assert!(
        deltas
            .iter()
            .any(|(k, v)| k.starts_with("compact_") && v.as_u64().is_some_and(|d| d > 0)),
        "no compact_* counter moved: {res:#}"
    );

    // (3b) `fix` on the real systemd (issue 25): a workload unit with LimitNOFILE=1024 makes
    // limits.nofile fail with a drop-in plan. The service's sandbox keeps /etc read-only, so the
    // signed `fix` from the fleet runs as `npu-agent fix --yes` in a transient unit outside it:
    // the drop-in is written, systemd reloaded, the unit restarted; the new limit is read back
    // from /proc/<pid>/limits, and `fix` on the board then finds nothing to fix.
    g.ok("cp /bin/sleep /usr/local/bin/rkllm_server && printf '[Service]\\nExecStart=/usr/local/bin/rkllm_server 100000\\nLimitNOFILE=1024\\n' > /etc/systemd/system/rkllm-server.service && systemctl daemon-reload && systemctl start rkllm-server");
    let r = send(&url, ROCK_ID, "rescan", &[], None);
    assert_eq!(r.code, 0, "{r:?}");
    let from = sub.len();
    let remote = send(&url, ROCK_ID, "fix", &["check=limits.nofile"], Some(&key));
    assert_eq!(remote.code, 0, "{remote:?}\n{}", g.tail());
    let res = &successful_result(&sub, &g, from, ROCK_ID, "fix", &remote);
    assert_eq!(res["result"], "fixed", "{res:#}");
    let unit = res["unit"].as_str().unwrap_or_default();
    assert!(unit.starts_with("npu-agent-fix-"), "{res:#}");
    let limits = g
        .ok("grep 'Max open files' /proc/$(systemctl show -p MainPID --value rkllm-server)/limits");
    assert!(limits.contains("65536"), "{limits}");
    let dropin = g.ok("systemctl cat rkllm-server");
    assert!(dropin.contains("LimitNOFILE=65536"), "{dropin}");
    let journal = g.ok(&format!(
        "journalctl -u {unit} --no-pager -o cat | tail -n 5"
    ));
    println!("the transient unit's journal:\n{journal}");
    let (out, code) = g.sh("npu-agent fix --dry-run limits.nofile 2>&1");
    assert_eq!(code, 0, "{out}");
    assert!(
        out.contains("the check does not fire: nothing to fix"),
        "{out}"
    );
    say("image: signed fix from the fleet raised LimitNOFILE to 65536 in a transient unit outside the sandbox (read back from /proc)");
    g.ok("systemctl stop rkllm-server");

    // (4) live evidence: a kernel line in /dev/kmsg and a journal line from a unit playing the
    // workload (what the agent makes of them depends on its log sources; printed, and asserted
    // when the agent reads the kernel log and the journal).
    g.ok("echo '<3>npu-image-test: rknpu fdab0000.npu: RKNPU: failed to submit job, timeout' > /dev/kmsg");
    // The workload plays the profile's `rkllm.service` unit under the `llm_demo` identifier.
    g.ok("systemd-run --quiet --unit=rkllm -p Type=oneshot -p SyslogIdentifier=llm_demo sh -c 'echo \"rkllm: open /dev/rknpu failed, errno: 24 (Too many open files)\"'");
    let from = sub.len();
    let r = send(&url, ROCK_ID, "rescan", &[], None);
    assert_eq!(r.code, 0, "{r:?}");
    // The first status after the rescan may be one the agent was already publishing (the
    // compaction's), read before journald wrote the line: wait for one that carries both lines,
    // and judge the last status seen when none does within the time.
    let both = |m: &fleet::Msg| {
        m.topic == status_topic && {
            let t = m.text();
            t.contains("npu-image-test") && t.contains("errno: 24")
        }
    };
    let after = match sub.find_from(from, Duration::from_secs(120), both) {
        Some((_, m)) => m,
        None => {
            wait_msg(
                &sub,
                &g,
                from,
                &status_topic,
                Duration::from_secs(1),
                |_| true,
            )
            .1
        }
    };
    let after = after.json();
    let ids = finding_ids(&after);
    println!("findings after the kmsg and journal lines: {ids:?}");
    // Which findings carry the two lines as evidence (the agent's live log sources decide).
    let raised_by = |needle: &str| -> Vec<String> {
        after["findings"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|f| f.to_string().contains(needle))
            .map(|f| format!("{} {}", f["id"].as_str().unwrap_or("?"), f["status"]))
            .collect()
    };
    let kmsg = raised_by("npu-image-test");
    let journal_line = raised_by("errno: 24");
    for (what, found) in [
        ("a /dev/kmsg line", &kmsg),
        ("a journal line of another unit", &journal_line),
    ] {
        assert!(
            !found.is_empty(),
            "{what} raised no finding under the real sandbox: {after:#}"
        );
        say(&format!("image: {what} raised {found:?}"));
    }

    // (4) signed set_cma edits armbianEnv.txt on the boot partition, through ReadWritePaths=-/boot.
    let sc = send(&url, ROCK_ID, "set_cma", &["size=256M"], Some(&key));
    assert_eq!(sc.code, 0, "{sc:?}\n{}", g.tail());
    assert!(
        sc.lines().last().is_some_and(|l| l.contains(" successful")),
        "{sc:?}"
    );
    let env = g.ok("cat /boot/armbianEnv.txt");
    assert!(env.contains("extraargs=cma=256M"), "{env}");

    // (5) The command lifecycle in the journal, and the sandbox's exposure score.
    let journal = g.ok("journalctl -u npu-agent --no-pager -o cat | tail -n 60");
    println!("journalctl -u npu-agent:\n{journal}");
    let lifecycle = [c.cmd_id(), sc.cmd_id()]
        .iter()
        .all(|id| journal.contains(id.as_str()));
    assert!(
        lifecycle,
        "journalctl -u npu-agent does not name the compact and set_cma command ids:\n{journal}"
    );
    say("image: journalctl -u npu-agent shows the compact and set_cma command ids");
    let sec = g.ok("systemd-analyze security --no-pager npu-agent.service 2>&1 | tail -n 80");
    println!("systemd-analyze security npu-agent (in the image):\n{sec}");
    let score: f64 = sec
        .lines()
        .find_map(|l| l.split_once("Overall exposure level for npu-agent.service: "))
        .and_then(|(_, r)| r.split_whitespace().next())
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no score line:\n{sec}"));
    say(&format!(
        "bench: systemd-analyze security npu-agent under systemd in the image: {score:.1}"
    ));
    // The same bound tests/system/package.rs holds the offline review of the unit file to.
    assert!(score <= 3.0, "exposure {score} above 3.0:\n{sec}");

    // (3) Watchdog: a stopped agent is killed after WatchdogSec and restarted; the fleet sees the
    // last will, then `online` with the session incremented.
    let from = sub.len();
    g.ok("kill -STOP $(systemctl show -p MainPID --value npu-agent)");
    let t_stop = Instant::now();
    let (i_off, _) = wait_msg(&sub, &g, from, &avail, Duration::from_secs(120), |m| {
        m.text() == "offline"
    });
    let (i_on, _) = wait_msg(&sub, &g, i_off, &avail, Duration::from_secs(300), |m| {
        m.text() == "online"
    });
    let (_, st2) = wait_msg(
        &sub,
        &g,
        i_on,
        &status_topic,
        Duration::from_secs(120),
        |_| true,
    );
    let session_2 = st2.json()["session"].as_u64().expect("session");
    assert!(session_2 > session_1, "session {session_1} -> {session_2}");
    say(&format!(
        "image: watchdog: SIGSTOP to online again in {:.1} s, session {session_1} -> {session_2}",
        t_stop.elapsed().as_secs_f64()
    ));
    let wd = g.ok("journalctl -u npu-agent --no-pager -o cat | grep -i -E 'watchdog|Scheduled restart' | tail -n 5");
    assert!(wd.to_lowercase().contains("watchdog timeout"), "{wd}");
    let pid_2 = g
        .ok("systemctl show -p MainPID --value npu-agent")
        .trim()
        .to_string();
    assert_ne!(pid_1, pid_2);
    assert!(g.ok("systemctl show -p NRestarts --value npu-agent").trim() != "0");

    // (6) Upgrade to a second build inside the image: the edited config stays, the unit restarts.
    g.ok("sed -i 's/^# interval_s = 60 .*/interval_s = 10/' /etc/npu-agent/agent.toml");
    let edited = g.ok("sha256sum /etc/npu-agent/agent.toml");
    assert!(
        g.ok("grep -c '^interval_s = 10' /etc/npu-agent/agent.toml")
            .trim()
            == "1"
    );
    let from = sub.len();
    let up = g.ok("DEBIAN_FRONTEND=noninteractive dpkg -i /root/npu-agent-next.deb 2>&1");
    println!("dpkg -i (upgrade in the image):\n{up}");
    assert_eq!(
        g.ok("dpkg-query -W -f='${Version}' npu-agent").trim(),
        format!("{VERSION}-2")
    );
    assert_eq!(g.ok("sha256sum /etc/npu-agent/agent.toml"), edited);
    assert_eq!(
        g.sh("ls /etc/npu-agent/agent.toml.dpkg-new /etc/npu-agent/agent.toml.dpkg-dist")
            .1,
        2
    );
    assert!(g
        .ok("cat /etc/npu-agent/agent.d/90-provisioned.toml")
        .contains(ROCK_ID));
    wait_msg(&sub, &g, from, &avail, Duration::from_secs(180), |m| {
        m.text() == "online"
    });
    let pid_3 = g
        .ok("systemctl show -p MainPID --value npu-agent")
        .trim()
        .to_string();
    assert_ne!(pid_2, pid_3, "the upgrade did not restart the service");
    assert!(g.ok("systemctl is-active npu-agent").contains("active"));

    // (4) signed reboot through `systemctl reboot`: qemu exits (-no-reboot), the harness boots
    // the command line the boot partition now names; the new boot has another boot_id.
    let from = sub.len();
    let rb = fleet::spawn(&[
        "fleet",
        "send",
        "reboot",
        "--arg",
        "reason=image-test",
        "--board",
        ROCK_ID,
        "--broker",
        &url,
        "--wait",
        "600",
        "--key",
        &key,
    ]);
    assert!(
        g.wait_exit(Duration::from_secs(300)),
        "qemu did not exit after the signed reboot\n{}",
        g.tail()
    );
    let journal_end = g.console();
    drop(g);
    let env = fs::read_to_string({
        let o = Command::new("debugfs")
            .args(["-R", "cat /armbianEnv.txt"])
            .arg(img.join("boot.img"))
            .output()
            .unwrap();
        let p = tmp.path().join("armbianEnv.2.txt");
        fs::write(&p, &o.stdout).unwrap();
        p
    })
    .unwrap();
    let extra = env
        .lines()
        .find_map(|l| l.strip_prefix("extraargs="))
        .unwrap_or("")
        .to_string();
    assert_eq!(extra, "cma=256M", "{env}");
    let mut g = Guest::boot(&img, port, &extra, log_path("rock5b-boot2.log"));
    let (i_on, _) = wait_msg(&sub, &g, from, &avail, BOOT_TIMEOUT, |m| {
        m.text() == "online"
    });
    let (_, st3) = wait_msg(&sub, &g, i_on, &status_topic, BOOT_TIMEOUT, |m| {
        m.json()["boot_id"].as_str().is_some_and(|b| b != boot_id_1)
    });
    let boot_id_2 = st3.json()["boot_id"].as_str().unwrap().to_string();
    assert_ne!(boot_id_1, boot_id_2);
    let done = rb.wait(Duration::from_secs(600));
    println!("fleet send reboot: {done:?}");
    assert!(
        done.lines().iter().any(|l| l.contains(" successful")),
        "{done:?}\n--- boot 1 console end ---\n{}",
        &journal_end[journal_end.len().saturating_sub(2000)..]
    );
    g.login();
    assert!(
        g.ok("grep CmaTotal /proc/meminfo").contains("262144 kB"),
        "{}",
        g.tail()
    );
    let last_boot = g
        .ok("journalctl -b -1 --no-pager -o cat 2>/dev/null | grep -E 'reboot|Reboot' | tail -n 5");
    println!("previous boot's journal about the reboot:\n{last_boot}");
    print_memory(&mut g, "after a reboot");
    assert_eq!(
        g.ok("dpkg-query -W -f='${Version}' npu-agent").trim(),
        format!("{VERSION}-2")
    );
    g.poweroff();
}

#[test]
fn pi5_image_broken_provisioning_file_is_reported_and_left() {
    let Some(deb) = prerequisites() else { return };
    let Some(mq) = Mosquitto::start() else { return };
    let port = mq.port;
    let tmp = tempfile::tempdir().unwrap();
    let (key, public) = fleet::keygen(tmp.path());
    // The image already knows its broker, its profile and the operator's key (agent.d); the
    // flasher's file is broken (a string where a number belongs).
    let broker = tmp.path().join("50-broker.toml");
    fs::write(
        &broker,
        format!("board_id = \"{PI_ID}\"\nprofile = \"rpi5-hailo10h\"\n[mqtt]\nurl = \"mqtt://10.0.2.100:1883\"\nkeep_alive_s = 5\nreconnect_max_s = 5\n[report]\ninterval_s = 10\n[security]\nallow_unsigned = [\"rescan\"]\ntrusted_keys = [\"/etc/npu-agent/keys/operator.pub\"]\n"),
    )
    .unwrap();
    let public_file = tmp.path().join("operator.pub");
    fs::write(&public_file, &public).unwrap();
    let repo_files = apt_repo::build(tmp.path());
    let broken = tmp.path().join("npu-agent.toml");
    fs::write(
        &broken,
        "board_id = \"cam-7\"\n[report]\ninterval_s = \"often\"\n",
    )
    .unwrap();
    let img = tmp.path().join("img");
    let deb_arg = deb.to_str().unwrap().to_string();
    let broker_arg = format!("/etc/npu-agent/agent.d/50-broker.toml={}", broker.display());
    let boot_arg = format!("npu-agent.toml={}", broken.display());
    let img_arg = img.to_str().unwrap().to_string();
    let key_arg = format!("/etc/npu-agent/keys/operator.pub={}", public_file.display());
    let mut args = vec!["--deb", &deb_arg, "--board", "pi5", "--file", &broker_arg];
    args.extend(["--file", &key_arg]);
    for f in &repo_files {
        args.extend(["--file", f.as_str()]);
    }
    args.extend(["--boot-file", &boot_arg, &img_arg]);
    build_image(&args);
    let sub = fleet::Subscriber::connect(port, "npu-fleet/#");
    let mut g = Guest::boot(&img, port, "", log_path("pi5-boot1.log"));
    let (i, _) = wait_msg(
        &sub,
        &g,
        0,
        &format!("npu-fleet/{PI_ID}/availability"),
        BOOT_TIMEOUT,
        |m| m.text() == "online",
    );
    say(&format!(
        "bench: Pi 5 image boot to online: {:.1} s",
        g.started.elapsed().as_secs_f64()
    ));
    let (_, st) = wait_msg(
        &sub,
        &g,
        i,
        &format!("npu-fleet/{PI_ID}/status"),
        BOOT_TIMEOUT,
        |_| true,
    );
    let status = st.json();
    assert_eq!(
        status["board_id"], PI_ID,
        "nothing of the broken file applied: {status:#}"
    );
    let prov = finding(&status, "agent.provisioning");
    assert_eq!(prov["status"], "error", "{prov:#}");
    assert!(
        prov["summary"]
            .as_str()
            .unwrap_or_default()
            .contains("/boot/firmware/npu-agent.toml"),
        "{prov:#}"
    );
    g.login();
    assert_eq!(
        g.sh("test -e /boot/firmware/npu-agent.toml").1,
        0,
        "the broken file must stay"
    );
    assert_eq!(
        g.sh("test -e /etc/npu-agent/agent.d/90-provisioned.toml").1,
        1
    );
    let model = g.ok("tr -d '\\0' < /proc/device-tree/model");
    assert!(model.contains("Raspberry Pi 5"), "{model}");
    let journal =
        g.ok("journalctl -u npu-agent --no-pager -o cat | grep 'first-boot file' | tail -n 5");
    println!("{journal}");
    assert!(
        journal.contains("/boot/firmware/npu-agent.toml is invalid")
            && journal.contains("nothing from it was applied"),
        "{journal}"
    );
    package_fix_from_the_fleet(&mut g, &sub, &mq.url(), &key);
    g.poweroff();
    // The file is still on the FAT partition after the board powered off.
    let o = Command::new("mtype")
        .args(["-i"])
        .arg(img.join("boot.img"))
        .arg("::/npu-agent.toml")
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("interval_s = \"often\""),
        "{}",
        text(&o)
    );
}

const PI_ID: &str = "pi5-image";

/// The status finding `id` of the first status from index `from` on whose finding satisfies
/// `pred`.
fn status_with(
    sub: &fleet::Subscriber,
    g: &Guest,
    from: usize,
    id: &str,
    pred: impl Fn(&Value) -> bool,
) -> Value {
    let topic = format!("npu-fleet/{PI_ID}/status");
    let (_, m) = wait_msg(sub, g, from, &topic, Duration::from_secs(300), |m| {
        m.json()["findings"]
            .as_array()
            .and_then(|a| a.iter().find(|f| f["id"] == id))
            .is_some_and(&pred)
    });
    finding(&m.json(), id).clone()
}

/// Issue 25's package proof on the Pi 5 image with the Hailo-10H profile: the Hailo-8 line
/// installed from the local repository makes `hailo.package_generation` fail; an unsigned `fix`
/// is rejected; a signed one whose apt simulation would remove an application is refused, and
/// so is one while apt holds the dpkg lock, with nothing changed; a signed one then swaps the
/// line through real apt in a transient unit outside the service's sandbox, and the next status
/// shows the check passing.
fn package_fix_from_the_fleet(g: &mut Guest, sub: &fleet::Subscriber, url: &str, key: &str) {
    let installed = g.ok(&apt_repo::install_wrong_line());
    assert!(installed.contains("4.23.0"), "{installed}");
    let from = sub.len();
    let r = send(url, PI_ID, "rescan", &[], None);
    assert_eq!(r.code, 0, "{r:?}");
    let f = status_with(sub, g, from, "hailo.package_generation", |f| {
        f["status"] == "fail"
    });
    assert!(
        f["summary"]
            .as_str()
            .unwrap_or_default()
            .contains("hailo-all 4.23.0"),
        "{f:#}"
    );
    let check = "check=hailo.package_generation";
    let unsigned = send(url, PI_ID, "fix", &[check], None);
    assert_ne!(unsigned.code, 0, "{unsigned:?}");
    assert!(unsigned.out.contains("rejected"), "{unsigned:?}");
    // apt's simulation would take an application with the Hailo-8 line: refused, nothing done.
    let beyond = send(url, PI_ID, "fix", &[check], Some(key));
    assert_eq!(beyond.code, 1, "{beyond:?}\n{}", g.tail());
    assert!(
        beyond.out.contains("goes beyond the plan")
            && beyond
                .out
                .contains(&format!("removes {}", apt_repo::DEPENDENT_APP)),
        "{beyond:?}"
    );
    g.ok(&format!(
        "dpkg-query -W hailo-all {0} && apt-get remove -y -qq {0} < /dev/null > /dev/null",
        apt_repo::DEPENDENT_APP
    ));
    // A real apt holds the dpkg lock while it waits for its [Y/n] answer.
    g.ok("(sleep 900 | sh -c 'echo $$ > /root/apt.pid; exec apt-get install hailo-h10-all' > /root/apt-held.log 2>&1 &) ; for i in $(seq 60); do grep -q 'continue' /root/apt-held.log && break; sleep 1; done; cat /root/apt-held.log");
    let locked = send(url, PI_ID, "fix", &[check], Some(key));
    assert_eq!(locked.code, 1, "{locked:?}\n{}", g.tail());
    assert!(locked.out.contains("dpkg is locked"), "{locked:?}");
    g.ok("kill $(cat /root/apt.pid); while kill -0 $(cat /root/apt.pid) 2>/dev/null; do sleep 1; done");
    assert!(g
        .ok("dpkg-query -W -f='${Package} ${Version}\\n' hailo-all")
        .contains("hailo-all 4.23.0"));
    let from = sub.len();
    let fixed = send(url, PI_ID, "fix", &[check], Some(key));
    assert_eq!(fixed.code, 0, "{fixed:?}\n{}", g.tail());
    let res = &successful_result(sub, g, from, PI_ID, "fix", &fixed);
    assert!(
        res["unit"]
            .as_str()
            .unwrap_or_default()
            .starts_with("npu-agent-fix-"),
        "{res:#}"
    );
    assert_eq!(res["result"], "fixed", "{res:#}");
    // The transient unit's steps reach the fleet as they start (`executing: N of M: ...`).
    assert!(
        fixed.out.lines().any(|l| l.contains(" executing: ")
            && l.contains(" of ")
            && l.contains("hailo-h10-all")),
        "{fixed:?}"
    );
    let f = status_with(sub, g, from, "hailo.package_generation", |f| {
        f["status"] == "pass"
    });
    println!("after the fix: {f:#}");
    let pkgs = g.ok(
        "dpkg-query -W -f='${Package} ${Version} ${db:Status-Abbrev}\\n' | grep -E 'hailo|dkms'",
    );
    assert!(
        pkgs.contains("hailo-h10-all 5.1.1 ii") && pkgs.contains("h10-hailort 5.1.1 ii"),
        "{pkgs}"
    );
    assert!(
        !pkgs.contains("hailo-all") && !pkgs.contains("hailort 4"),
        "{pkgs}"
    );
    say("image: fix from the fleet swapped hailo-all 4.23.0 for hailo-h10-all 5.1.1 through apt in a transient unit; unsigned, beyond-the-plan and dpkg-locked fixes refused");
}

/// `chroot ROOT sh -c CMD`: (output, exit code).
fn chroot(root: &Path, cmd: &str) -> (String, i32) {
    let o = Command::new("chroot")
        .arg(root)
        .args(["sh", "-c", cmd])
        .env("DEBIAN_FRONTEND", "noninteractive")
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .stdin(Stdio::null())
        .output()
        .unwrap();
    (text(&o), o.status.code().unwrap_or(-1))
}

fn chroot_ok(root: &Path, cmd: &str) -> String {
    let (out, code) = chroot(root, cmd);
    assert_eq!(code, 0, "chroot: `{cmd}`:\n{out}");
    out
}

#[test]
fn dpkg_installs_upgrades_removes_and_purges_in_a_throwaway_arm64_chroot() {
    let Some(deb) = prerequisites() else { return };
    let out = build_image(&["--rootfs-only"]);
    let tarball = out
        .lines()
        .last()
        .expect("the tarball path")
        .trim()
        .to_string();
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    fs::create_dir(&root).unwrap();
    let o = Command::new("tar")
        .arg("-xf")
        .arg(&tarball)
        .arg("-C")
        .arg(&root)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    fs::copy(&deb, root.join("tmp/a.deb")).unwrap();
    let next = rebuilt_with_version(&deb, &format!("{VERSION}-2"), tmp.path());
    fs::copy(&next, root.join("tmp/b.deb")).unwrap();
    let unit = include_str!("../../systemd/npu-agent.service");
    let agent_toml = include_str!("../../packaging/agent.toml");

    // Install: files, modes, enabled (not started: no systemd runs in a chroot).
    let o = chroot_ok(&root, "dpkg -i /tmp/a.deb 2>&1");
    println!("dpkg -i in the chroot:\n{o}");
    assert_eq!(
        chroot_ok(&root, "dpkg-query -W -f='${Status} ${Version}' npu-agent"),
        format!("install ok installed {VERSION}-1")
    );
    assert!(chroot_ok(&root, "/usr/bin/npu-agent --version").contains(VERSION));
    assert_eq!(
        fs::read_to_string(root.join("usr/lib/systemd/system/npu-agent.service")).unwrap(),
        unit
    );
    assert_eq!(
        fs::read_to_string(root.join("etc/npu-agent/agent.toml")).unwrap(),
        agent_toml
    );
    assert_eq!(
        chroot_ok(&root, "stat -c %a /var/lib/npu-agent").trim(),
        "750"
    );
    assert_eq!(
        chroot_ok(&root, "systemctl is-enabled npu-agent.service").trim(),
        "enabled"
    );
    assert!(chroot_ok(&root, "npu-agent run --print-config").contains("url = \"\""));

    // Upgrade over an admin's edit and a provisioned board's files.
    let edited = agent_toml.replace("# interval_s = 60", "interval_s = 30");
    assert_ne!(edited, agent_toml);
    fs::write(root.join("etc/npu-agent/agent.toml"), &edited).unwrap();
    fs::write(
        root.join("etc/npu-agent/agent.d/90-provisioned.toml"),
        "board_id = \"cam-3\"\n",
    )
    .unwrap();
    fs::create_dir_all(root.join("etc/npu-agent/secrets")).unwrap();
    fs::write(root.join("etc/npu-agent/secrets/mqtt-password"), "pw\n").unwrap();
    chroot_ok(&root, "dpkg -i /tmp/b.deb 2>&1");
    assert_eq!(
        chroot_ok(&root, "dpkg-query -W -f='${Version}' npu-agent"),
        format!("{VERSION}-2")
    );
    assert_eq!(
        fs::read_to_string(root.join("etc/npu-agent/agent.toml")).unwrap(),
        edited
    );
    assert!(!root.join("etc/npu-agent/agent.toml.dpkg-dist").exists());
    let pc = chroot_ok(&root, "npu-agent run --print-config");
    assert!(
        pc.contains("interval_s = 30") && pc.contains("board_id = \"cam-3\""),
        "{pc}"
    );
    assert_eq!(
        chroot_ok(&root, "systemctl is-enabled npu-agent.service").trim(),
        "enabled"
    );

    // Remove: program and unit go, config stays, the unit is masked.
    chroot_ok(&root, "dpkg -r npu-agent 2>&1");
    assert!(chroot_ok(&root, "dpkg-query -W -f='${Status}' npu-agent")
        .starts_with("deinstall ok config-files"));
    assert!(!root.join("usr/bin/npu-agent").exists());
    assert_eq!(
        fs::read_to_string(root.join("etc/npu-agent/agent.toml")).unwrap(),
        edited
    );
    assert_eq!(
        fs::read_link(root.join("etc/systemd/system/npu-agent.service")).unwrap(),
        Path::new("/dev/null")
    );

    // Purge: config, secrets, state and every unit link go.
    chroot_ok(&root, "dpkg --purge npu-agent 2>&1");
    assert!(!root.join("etc/npu-agent").exists());
    assert!(!root.join("var/lib/npu-agent").exists());
    assert_eq!(
        chroot_ok(&root, "find /etc/systemd/system -name 'npu-agent*'").trim(),
        ""
    );

    // The image hooks' installer refuses a baked provisioning file, then installs.
    fs::copy(
        repo().join("image/install-into-image.sh"),
        root.join("tmp/install-into-image.sh"),
    )
    .unwrap();
    fs::create_dir_all(root.join("boot/firmware")).unwrap();
    fs::write(
        root.join("boot/firmware/npu-agent.toml"),
        "board_id = \"same-for-all\"\n",
    )
    .unwrap();
    let (o, code) = chroot(
        &root,
        "sh /tmp/install-into-image.sh /tmp/a.deb /boot/firmware",
    );
    assert!(
        code != 0 && o.contains("npu-agent.toml is in the image"),
        "{o}"
    );
    assert!(
        chroot(&root, "dpkg-query -W npu-agent").1 != 0 || !root.join("usr/bin/npu-agent").exists()
    );
    fs::remove_file(root.join("boot/firmware/npu-agent.toml")).unwrap();
    let o = chroot_ok(
        &root,
        "sh /tmp/install-into-image.sh /tmp/a.deb /boot/firmware 2>&1",
    );
    assert!(
        o.contains(&format!(
            "installed npu-agent {VERSION}-1, npu-agent.service enabled"
        )),
        "{o}"
    );
    assert_eq!(
        fs::read_to_string(root.join("boot/firmware/npu-agent.toml.example")).unwrap(),
        include_str!("../../image/npu-agent.toml.example")
    );
}
