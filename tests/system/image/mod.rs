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
//! - ROCK 5B, the agent updating itself (`update.rs`): a signed repository made by
//!   `packaging/apt-repo/publish.sh` holds versions N, N+1 and a broken N+2; the signed `update`
//!   from the fleet moves the board to N+1 through the transient install unit and the new agent
//!   answers; N+2 never comes up and the watchdog timer reinstalls N+1, whose agent answers
//!   `rolled back`; unsigned, replayed and downgrading updates are refused.
//! - A throwaway arm64 chroot of the same root file system: `dpkg -i`, upgrade over an edited
//!   config, remove, purge, and install-into-image.sh's refusal of a baked provisioning file (the
//!   installs that once ran on the CI machine itself).
//!
//! Prints `bench:` lines: image build time, boot-to-online, VmRSS/VmHWM under systemd.
//! Needs root, the tools `.ci/run` installs, and the packages from `packaging/build-debs.sh`:
//! under `CI=true` anything missing fails the test, otherwise it is skipped with a printed reason.

mod dpkg;
mod images;
mod update;

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
    rebuilt_with(deb, version, dir, |_| {})
}

/// A copy of `deb` with another version, its unpacked tree changed by `edit` first.
fn rebuilt_with(deb: &Path, version: &str, dir: &Path, edit: impl FnOnce(&Path)) -> PathBuf {
    fs::create_dir_all(dir).unwrap();
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
    edit(&tree);
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
