//! Virtual boards: the static aarch64 agent on a real arm64 kernel (Debian's cloud kernel under
//! `qemu-system-aarch64 -M virt`, no KVM) whose device tree reads as a Radxa ROCK 5B or a
//! Raspberry Pi 5, with a boot partition the harness reads back as the board's bootloader would,
//! and a persistent state disk. See tests/vboard/harness.rs and docs/development.md, "Static
//! aarch64 build and virtual boards".
//!
//! # Harness API (tests/vboard/harness.rs)
//!
//! ```ignore
//! // (1) a broker on 127.0.0.1:<free port> (Drop kills it); or pick the port first and start it
//! //     later: let port = Mosquitto::free_port(); ...; Mosquitto::start_on(port)
//! let Some(broker) = Mosquitto::start() else { return };      // None = skipped (CI unset)
//! // (2) a board: personality, boot files, files in the guest, commands run after every boot
//! let spec = BoardSpec::new("rock5b-demo", Personality::Rock5b)   // or Personality::Pi5
//!     .boot_file("armbianEnv.txt", "extraargs=cma=64M\n")         // replaces the default file
//!     .file("/etc/npu-agent/profiles.d/x.toml", 0o644, "...")     // into the initramfs
//!     .broker(broker.port)             // eth0 + guest 10.0.2.100:1883 -> host 127.0.0.1:port
//!     .kernel(harness::Kernel::Pages16k)   // Debian's 16 KiB-page kernel on a Cortex-A76
//!     .init("vb_section check npu-agent check --format json");
//! let Some(mut board) = Board::new(spec) else { return };     // None = skipped (CI unset)
//! let mut boot = board.boot();         // or board.boot_with("commands for this boot only")
//! // (3) wait for a console line (panics with the console's tail on timeout or early exit)
//! boot.wait_for("VBOARD-END check", Duration::from_secs(60));
//! let report = boot.json("check");     // output of `vb_section check ...` as JSON
//! // (4) the guest reboots (`vb_reboot`, or the agent's own `reboot -f`): qemu exits, and the
//! //     next boot uses the command line the boot partition now implies
//! assert_eq!(boot.wait_end(Duration::from_secs(60)), BootEnd::Reboot);
//! drop(boot);
//! let (cmdline, dt_cma) = board.boot_chain();   // what the next boot gets
//! let boot2 = board.boot();
//! // (5) memory of a guest process: `vb_mem npu-agent` in the commands, then
//! let mem: Vec<Mem> = boot2.mem("npu-agent");   // pid, rss_kb (VmRSS), hwm_kb (VmHWM)
//! // (6) the fleet link: `vb_agent` starts `npu-agent run` (config from .file(...)), and the
//! //     host drives it as an operator would (tests/vboard/fleet.rs)
//! let sub = fleet::Subscriber::connect(broker.port, "npu-fleet/#");  // records every message
//! let (i, msg) = sub.find_from(0, T, |m| m.topic.ends_with("/status")).expect("a status");
//! let last = fleet::retained(broker.port, "npu-fleet/<board>/status", T);   // as a late subscriber
//! let (key, public_pem) = fleet::keygen(dir);                  // host `npu-agent keygen`
//! let out = fleet::npu_agent(&["fleet", "send", "compact", ...], T);   // code, out, err, took
//! let running = fleet::spawn(&[...]); /* the guest reboots */ let out = running.wait(T);
//! assert!(boot.alive());               // qemu still running
//! ```
//!
//! Guest side (tests/vboard/guest/init, lib.sh): /init mounts the boot partition
//! (`/boot` on the ROCK 5B, `/boot/firmware` on the Pi 5) and the state disk
//! (`/var/lib/npu-agent`, kept across boots), prints `VBOARD-UP boot=N boot_id=... cma_total_kb=...
//! time=<unix s>` (the guest clock comes from qemu's RTC, i.e. the host's: signed commands' times
//! check out), sources the test's commands with these helpers, then powers off:
//! `vb_section NAME CMD...` (output between `VBOARD-BEGIN NAME` / `VBOARD-END NAME rc=N`),
//! `vb_mark TEXT`, `vb_mem COMM`, `vb_mem_every SECS COMM` (forever), `vb_agent [ARGS]`
//! (`npu-agent run` in the background, its output as `AGENT: ...` lines, `VBOARD-MARK agent-exit
//! rc=N` if it stops), `vb_net_up` (done by /init when a broker is set), `vb_reboot`,
//! `vb_poweroff`. `$VBOARD_BOOT` is the boot number. The agent is `/usr/bin/npu-agent`. A boot
//! that never powers off ends by the agent's own reboot, or when its `Boot` is dropped.
//!
//! The bootloader the harness plays: ROCK 5B = Armbian's boot.scr (`extraargs` and
//! `extraboardargs` of armbianEnv.txt appended to its fixed args); Pi 5 = the firmware (cmdline.txt
//! as the command line, `console=serial0` made concrete; a CMA overlay in config.txt —
//! `dtoverlay=cma,cma-N` or `dtoverlay=vc4-kms-v3d,cma-N` under `[all]`/`[pi5]` — resizes the
//! device tree's `linux,cma` pool (64 MiB without one), as the real firmware does, rather than
//! adding a `cma=`). The harness's own args come last: `console=ttyAMA0 panic=-1 rdinit=/init quiet`.
//!
//! Needs: qemu-system-aarch64, dtc, mkfs.ext4, debugfs, gzip (xz for the 16k kernel's modules,
//! mosquitto for a broker), the aarch64 target, and on first use `apt-get download` of the guest
//! kernel and busybox (cached in `<target>/vboard-cache/`). Missing ones fail the tests when CI is set, and skip them otherwise.
//! Every boot's console is kept in `<target>/vboard-logs/`.

mod kernel;
mod over_mqtt;
mod page_size;
mod reboots;

use crate::{common, fleet, harness};

use harness::{Board, BoardSpec, Boot, BootEnd, Personality};
use serde_json::Value;
use std::time::{Duration, Instant};

/// Generous for TCG on a busy 2-core machine; a boot takes about 2 s.
const T: Duration = Duration::from_secs(90);

fn finding<'a>(report: &'a Value, id: &str) -> &'a Value {
    report["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .find(|f| f["id"] == id)
        .unwrap_or_else(|| panic!("no finding {id} in {report:#}"))
}

fn status(report: &Value, id: &str) -> String {
    finding(report, id)["status"]
        .as_str()
        .expect("status")
        .to_string()
}

/// Asserts the most severe status of check `id`, printing its finding on failure.
fn assert_status(r: &Value, id: &str, want: &str) {
    assert_eq!(status(r, id), want, "{:#}", finding(r, id));
}

/// The rk3588 profile as shipped, but wanting a 256 MiB CMA pool.
fn rk3588_profile_wanting_256m() -> String {
    let base =
        std::fs::read_to_string(common::manifest_dir().join("board-profiles/rk3588-rknpu.toml"))
            .expect("rk3588 profile");
    let out: Vec<String> = base
        .lines()
        .map(|l| {
            if l.trim_start().starts_with("min_total_bytes") {
                "min_total_bytes = 268435456".to_string()
            } else {
                l.to_string()
            }
        })
        .collect();
    assert!(
        out.iter().any(|l| l == "min_total_bytes = 268435456"),
        "profile has no min_total_bytes line to replace"
    );
    out.join("\n") + "\n"
}

fn armbian_env(extraargs: &str) -> String {
    harness::Personality::Rock5b.default_boot_files()[0]
        .1
        .lines()
        .map(|l| {
            if l.starts_with("extraargs=") {
                format!("extraargs={extraargs}")
            } else {
                l.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
        + "\n"
}

const CHECK: &str = "vb_section check npu-agent check --format json";

fn vmstat_compact(text: &str) -> std::collections::BTreeMap<String, u64> {
    text.lines()
        .filter_map(|l| l.split_once(' '))
        .filter(|(k, _)| k.starts_with("compact_"))
        .map(|(k, v)| (k.to_string(), v.trim().parse().expect("counter")))
        .collect()
}

// ---------------------------------------------------------------------------------------------
// The fleet link on virtual boards (issue 5): `npu-agent run` in the guest, the host's mosquitto
// through the forward, and the operator's `fleet send` / `fleet watch` on the host.

/// Device-tree serial numbers of the two personalities: the agent's board id (`board_id = "auto"`).
const ROCK_ID: &str = "6c3a91f0e2d4b587";
const PI_ID: &str = "9f2b7c61d0e4a835";

/// The guest's /etc/npu-agent/agent.toml: the host broker through the forward, a status every
/// 2 s, busybox `reboot -f` as the reboot (qemu, started with -no-reboot, exits; the harness boots
/// the board again), the state on the persistent disk, and the operator key made on the host.
const GUEST_AGENT_TOML: &str = r#"board_id = "auto"
profile = "auto"
state_dir = "/var/lib/npu-agent"

[mqtt]
url = "mqtt://10.0.2.100:1883"
keep_alive_s = 5
reconnect_max_s = 5

[report]
interval_s = 2

[actions]
auto_compact = false
allow_reboot = true
reboot_command = ["reboot", "-f"]
reboot_timeout_s = 60

[security]
trusted_keys = ["/etc/npu-agent/operator.key.pub"]
allow_unsigned = ["compact", "rescan"]
max_command_age_s = 300
"#;

/// A board whose agent talks to the host broker on `port` and trusts `operator_pub`. 2 GiB of
/// RAM, as the smallest real boards have: `set_cma` refuses a pool above a quarter of RAM.
fn fleet_spec(name: &str, p: Personality, port: u16, operator_pub: &str) -> BoardSpec {
    BoardSpec::new(name, p)
        .mem(2048)
        .broker(port)
        .file("/etc/npu-agent/agent.toml", 0o644, GUEST_AGENT_TOML)
        .file("/etc/npu-agent/operator.key.pub", 0o644, operator_pub)
}

/// The next status (message index >= `from`) whose JSON satisfies `pred`; panics after `timeout`
/// with the messages seen and the guest console's tail.
fn wait_status(
    sub: &fleet::Subscriber,
    board: &str,
    boot: &Boot,
    from: usize,
    timeout: Duration,
    what: &str,
    pred: impl Fn(&Value) -> bool,
) -> (usize, fleet::Msg) {
    let topic = format!("npu-fleet/{board}/status");
    sub.find_from(from, timeout, |m| m.topic == topic && pred(&m.json())).unwrap_or_else(|| {
        panic!("no status with {what} on {topic} within {timeout:?}\n--- last messages ---\n{}\n{}", sub.recent(12), boot.tail())
    })
}

/// The lifecycle message `status` of command `cmd_id` (index >= `from`).
fn wait_lifecycle(
    sub: &fleet::Subscriber,
    board: &str,
    boot: &Boot,
    from: usize,
    action: &str,
    cmd_id: &str,
    status: &str,
) -> Value {
    let topic = format!("npu-fleet/{board}/cmd/{action}/{cmd_id}");
    sub.find_from(from, Duration::from_secs(20), |m| {
        m.topic == topic && m.json()["status"] == status
    })
    .unwrap_or_else(|| {
        panic!(
            "no {status} on {topic}\n--- last messages ---\n{}\n{}",
            sub.recent(12),
            boot.tail()
        )
    })
    .1
    .json()
}

/// `npu-agent fleet send ACTION [--arg K=V]... --board B --broker URL [--key K] --wait S` (args).
fn send_args(
    url: &str,
    board: &str,
    action: &str,
    args: &[&str],
    key: Option<&str>,
    wait_s: u64,
) -> Vec<String> {
    let mut a: Vec<String> = ["fleet", "send", action]
        .iter()
        .map(|s| s.to_string())
        .collect();
    for kv in args {
        a.extend(["--arg".to_string(), kv.to_string()]);
    }
    a.extend(
        ["--board", board, "--broker", url, "--wait"]
            .iter()
            .map(|s| s.to_string()),
    );
    a.push(wait_s.to_string());
    if let Some(k) = key {
        a.extend(["--key".to_string(), k.to_string()]);
    }
    a
}

fn send(
    url: &str,
    board: &str,
    action: &str,
    args: &[&str],
    key: Option<&str>,
    wait_s: u64,
) -> fleet::CliOut {
    let a = send_args(url, board, action, args, key, wait_s);
    fleet::npu_agent(
        &a.iter().map(String::as_str).collect::<Vec<_>>(),
        Duration::from_secs(wait_s + 30),
    )
}

/// Waits until the guest printed one more `VBOARD-MEM comm=npu-agent` line, and returns it.
fn fresh_agent_mem(boot: &mut Boot) -> harness::Mem {
    let n = boot.mem("npu-agent").len();
    boot.wait_until("a fresh VBOARD-MEM line of npu-agent", T, |c| {
        harness::parse_mem(c, "npu-agent").len() > n
    });
    boot.mem("npu-agent").pop().expect("a VBOARD-MEM line")
}

fn assert_agent_alive(boot: &mut Boot) {
    assert!(boot.alive(), "qemu exited\n{}", boot.tail());
    assert!(
        !boot.console().contains("VBOARD-MARK agent-exit"),
        "npu-agent run stopped in the guest\n{}",
        boot.tail()
    );
}

/// Boot 1 scatters page cache (so a compaction has pages to move) and starts a workload with a
/// soft `ulimit -n 1024`; every boot starts `npu-agent run` and samples its memory every 2 s.
const ROCK_FLEET_INIT: &str = r#"if [ "$VBOARD_BOOT" = 1 ]; then
  i=0; while [ $i -lt 64 ]; do dd if=/dev/zero of=/tmp/f$i bs=64k count=4 2>/dev/null; i=$((i+1)); done
  i=0; while [ $i -lt 64 ]; do rm /tmp/f$i; i=$((i+2)); done
  (ulimit -H -n 524288; ulimit -S -n 1024; exec /usr/bin/llm_demo) &
  pid=$!
  i=0; while [ "$(cat /proc/$pid/comm)" != llm_demo ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
  vb_mark "workload pid=$pid comm=$(cat /proc/$pid/comm) $(grep 'Max open files' /proc/$pid/limits | tr -s ' ')"
fi
vb_agent
vb_mem_every 2 npu-agent"#;

/// Connection attempts after which the agent's back-off is at its cap: 0.1, 0.2, 0.4, 0.8, 1.6 s.
const RETRIES_TO_REACH_THE_CAP: usize = 6;

/// Accepts and closes connections on `listener` (non-blocking) until `n` came; returns how many
/// did. Panics after `timeout`.
fn closed_connections(listener: &std::net::TcpListener, n: usize, timeout: Duration) -> usize {
    let t0 = Instant::now();
    let mut seen = 0;
    while seen < n {
        match listener.accept() {
            Ok((conn, _)) => {
                drop(conn);
                seen += 1;
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                assert!(
                    t0.elapsed() < timeout,
                    "{seen} of {n} connection attempts in {timeout:?}"
                );
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => panic!("accept on the broker port: {e}"),
        }
    }
    seen
}

/// Kernel lines written into the guest's ring buffer (`/dev/kmsg`; the guest has no rsyslog and
/// no log file at all) raise `cma.free` in the retained MQTT status; after the agent restarts,
/// the persisted kmsg cursor keeps the same lines from being counted twice, and a new line is
/// counted once.
const KMSG_INIT: &str = r#"enomem() { echo "<3>cma: cma_alloc: alloc failed, req-size: $1 pages, ret: -12" > /dev/kmsg; }
enomem 8
enomem 16
echo "<4>hwmon hwmon1: Undervoltage detected!" > /dev/kmsg
vb_section logs sh -c 'find /var/log -type f 2>/dev/null; echo end'
vb_agent
i=0; while [ ! -s /var/lib/npu-agent/log_cursors.json ] && [ $i -lt 600 ]; do sleep 0.5; i=$((i + 1)); done
sleep 6
kill $(pidof npu-agent)
vb_mark agent-killed
sleep 2
vb_agent
sleep 20
enomem 32
vb_mark third-line
sleep 600"#;

/// The `/dev/kmsg` lines with `ret: -12` among `cma.free`'s evidence.
fn kmsg_enomem(r: &Value) -> usize {
    finding(r, "cma.free")["evidence"]
        .as_array()
        .map(|e| {
            e.iter()
                .filter(|e| {
                    e["file"] == "/dev/kmsg"
                        && e["text"].as_str().is_some_and(|t| t.contains("ret: -12"))
                })
                .count()
        })
        .unwrap_or(0)
}

/// What the guest's own shell sees under /sys/class/thermal and /sys/class/hwmon: (zone type,
/// temp in millidegrees or None when unreadable) and hwmon names.
const SENSORS: &str = r#"vb_section sensors sh -c 'for z in /sys/class/thermal/thermal_zone*; do [ -e "$z/type" ] || continue; echo "zone $(cat "$z/type") $(cat "$z/temp" 2>/dev/null || echo unreadable)"; done; for h in /sys/class/hwmon/hwmon*; do [ -e "$h/name" ] && echo "hwmon $(cat "$h/name")"; done; true'"#;
