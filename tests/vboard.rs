//! Virtual boards: the static aarch64 agent on a real arm64 kernel (Debian's cloud kernel under
//! `qemu-system-aarch64 -M virt`, no KVM) whose device tree reads as a Radxa ROCK 5B or a
//! Raspberry Pi 5, with a boot partition the harness reads back as the board's bootloader would,
//! and a persistent state disk. See tests/vboard/harness.rs and ../shared/domain/VBOARD.md.
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
//! ```
//!
//! Guest side (tests/vboard/guest/init, lib.sh): /init mounts the boot partition
//! (`/boot` on the ROCK 5B, `/boot/firmware` on the Pi 5) and the state disk
//! (`/var/lib/npu-agent`, kept across boots), prints `VBOARD-UP boot=N boot_id=... cma_total_kb=...`,
//! sources the test's commands with these helpers, then powers off:
//! `vb_section NAME CMD...` (output between `VBOARD-BEGIN NAME` / `VBOARD-END NAME rc=N`),
//! `vb_mark TEXT`, `vb_mem COMM`, `vb_net_up` (done by /init when a broker is set), `vb_reboot`,
//! `vb_poweroff`. `$VBOARD_BOOT` is the boot number. The agent is `/usr/bin/npu-agent`.
//!
//! The bootloader the harness plays: ROCK 5B = Armbian's boot.scr (`extraargs` and
//! `extraboardargs` of armbianEnv.txt appended to its fixed args); Pi 5 = the firmware (cmdline.txt
//! as the command line, `console=serial0` made concrete; a CMA overlay in config.txt —
//! `dtoverlay=cma,cma-N` or `dtoverlay=vc4-kms-v3d,cma-N` under `[all]`/`[pi5]` — resizes the
//! device tree's `linux,cma` pool (64 MiB without one), as the real firmware does, rather than
//! adding a `cma=`). The harness's own args come last: `console=ttyAMA0 panic=-1 rdinit=/init quiet`.
//!
//! Needs: qemu-system-aarch64, dtc, mkfs.ext4, debugfs, gzip (and mosquitto for a broker), the
//! aarch64 target, and on first use `apt-get download` of the guest kernel and busybox (cached in
//! `<target>/vboard-cache/`). Missing ones fail the tests when CI is set, and skip them otherwise.
//! Every boot's console is kept in `<target>/vboard-logs/`.

#[path = "vboard/common.rs"]
mod common;
#[path = "vboard/harness.rs"]
mod harness;
#[path = "vboard/newc.rs"]
mod newc;

use harness::{Board, BoardSpec, BootEnd, Personality};
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
    finding(report, id)["status"].as_str().expect("status").to_string()
}

/// The rk3588 profile as shipped, but wanting a 256 MiB CMA pool.
fn rk3588_profile_wanting_256m() -> String {
    let base = std::fs::read_to_string(common::manifest_dir().join("board-profiles/rk3588-rknpu.toml")).expect("rk3588 profile");
    let out: Vec<String> = base
        .lines()
        .map(|l| if l.trim_start().starts_with("min_total_bytes") { "min_total_bytes = 268435456".to_string() } else { l.to_string() })
        .collect();
    assert!(out.iter().any(|l| l == "min_total_bytes = 268435456"), "profile has no min_total_bytes line to replace");
    out.join("\n") + "\n"
}

fn armbian_env(extraargs: &str) -> String {
    harness::Personality::Rock5b.default_boot_files()[0].1.lines().map(|l| if l.starts_with("extraargs=") { format!("extraargs={extraargs}") } else { l.to_string() }).collect::<Vec<_>>().join("\n") + "\n"
}

const CHECK: &str = "vb_section check npu-agent check --format json";

#[test]
fn rk3588_check_reads_cma_64m_from_the_real_kernel() {
    let t0 = Instant::now();
    let spec = BoardSpec::new("rk3588-cma64", Personality::Rock5b)
        .boot_file("armbianEnv.txt", &armbian_env("cma=64M"))
        .file("/etc/npu-agent/profiles.d/rk3588-rknpu.toml", 0o644, rk3588_profile_wanting_256m())
        .init(CHECK);
    let Some(mut board) = Board::new(spec) else { return };
    let mut boot = board.boot();
    assert!(boot.cmdline.contains(" cma=64M "), "bootloader did not pass extraargs: {}", boot.cmdline);
    assert_eq!(boot.wait_end(T), BootEnd::PowerOff);
    assert_eq!(boot.cma_total_bytes(), 64 << 20, "the kernel did not honour cma=64M");
    let (_, rc) = boot.section_rc("check");
    assert_eq!(rc, 1, "check exits 1 on a failing finding");
    let r = boot.json("check");
    assert_eq!(r["model"], "Radxa ROCK 5B");
    assert_eq!(r["profile"], "rk3588-rknpu");
    assert_eq!(r["health"], "fail");
    // The board id defaults to the device tree's serial-number; boot_id is the running kernel's.
    assert_eq!(r["board_id"], "6c3a91f0e2d4b587");
    assert_eq!(r["boot_id"], boot.boot_id().as_str());
    let id = finding(&r, "board.identity");
    assert_eq!(id["status"], "pass", "{id:#}");
    assert_eq!(id["observed"]["soc"], "RK3588", "{id:#}");
    assert_eq!(id["observed"]["compatible"], serde_json::json!(["radxa,rock-5b", "rockchip,rk3588"]));
    assert!(id["summary"].as_str().expect("summary").contains("ROCK 5B"), "{id:#}");
    assert_eq!(id["observed"]["arch"], "aarch64");
    assert!(id["observed"]["kernel_release"].as_str().expect("kernel").ends_with("-cloud-arm64"), "{id:#}");
    // Debian's cloud kernel has no rknpu driver: the check must notice, not pass.
    assert_eq!(status(&r, "rknpu.driver_version"), "warn", "{:#}", finding(&r, "rknpu.driver_version"));
    let pool = finding(&r, "cma.pool_size");
    assert_eq!(pool["status"], "fail", "{pool:#}");
    assert_eq!(pool["observed"]["cma_total_bytes"], 67108864u64, "{pool:#}");
    assert_eq!(pool["expected"]["cma_total_bytes"], 268435456u64, "the profiles.d file did not replace the built-in one: {pool:#}");
    assert_eq!(r["metrics"]["cma_total_bytes"], 67108864u64);
    // The boot file and the running kernel agree: cma=64M is in effect, no reboot pending.
    assert_eq!(status(&r, "cma.boot_param"), "pass", "{:#}", finding(&r, "cma.boot_param"));
    assert_eq!(status(&r, "reboot.pending"), "pass", "{:#}", finding(&r, "reboot.pending"));
    eprintln!("scenario a: {:.1} s", t0.elapsed().as_secs_f64());
}

/// Boot 1 edits armbianEnv.txt and reboots; the harness, as the bootloader, boots the edited
/// command line; state written on boot 1 is still on the disk on boot 2.
#[test]
fn rk3588_armbian_env_edit_and_reboot_takes_effect() {
    let t0 = Instant::now();
    let spec = BoardSpec::new("rk3588-reboot", Personality::Rock5b).boot_file("armbianEnv.txt", &armbian_env("cma=64M")).init(
        r#"if [ "$VBOARD_BOOT" = 1 ]; then
  cat /proc/sys/kernel/random/boot_id > /var/lib/npu-agent/vboard-state
  sed -i 's/^extraargs=cma=64M$/extraargs=cma=256M/' /boot/armbianEnv.txt
  vb_section pending npu-agent check --format json
  vb_reboot
fi
vb_section cmdline cat /proc/cmdline
vb_section state cat /var/lib/npu-agent/vboard-state
vb_section check npu-agent check --format json"#,
    );
    let Some(mut board) = Board::new(spec) else { return };
    let before = board.boot_file("armbianEnv.txt").expect("armbianEnv.txt on the boot partition");

    let mut b1 = board.boot();
    assert!(b1.cmdline.contains(" cma=64M "), "{}", b1.cmdline);
    assert_eq!(b1.wait_end(T), BootEnd::Reboot, "boot 1 must end in a reboot");
    assert_eq!(b1.cma_total_bytes(), 64 << 20);
    let id1 = b1.boot_id();
    // After the edit, before the reboot: the agent sees the pending change.
    let p = b1.json("pending");
    let pending = finding(&p, "reboot.pending");
    assert_eq!(pending["status"], "warn", "{pending:#}");
    assert_eq!(pending["observed"]["boot_file_cma"], "cma=256M", "{pending:#}");
    assert_eq!(pending["observed"]["proc_cmdline_cma"], "cma=64M", "{pending:#}");
    assert!(!b1.console().contains("VBOARD-BEGIN check"), "boot 1 went on after vb_reboot");
    drop(b1);

    // The bootloader reads the edited file back from the disk image: only extraargs changed.
    let after = board.boot_file("armbianEnv.txt").expect("armbianEnv.txt after the edit");
    assert_eq!(after, before.replace("extraargs=cma=64M\n", "extraargs=cma=256M\n"));
    assert_eq!(board.state_file("vboard-state").map(|s| s.trim().to_string()), Some(id1.clone()));
    let (next, _) = board.boot_chain();
    assert!(next.contains(" cma=256M ") && !next.contains("cma=64M"), "{next}");

    let mut b2 = board.boot();
    assert_eq!(b2.number, 2);
    assert_eq!(b2.cmdline, next);
    assert_eq!(b2.wait_end(T), BootEnd::PowerOff);
    assert_eq!(b2.cma_total_bytes(), 256 << 20, "CmaTotal after the reboot");
    assert!(b2.section("cmdline").split_whitespace().any(|w| w == "cma=256M"), "{}", b2.section("cmdline"));
    let id2 = b2.boot_id();
    assert_ne!(id2, id1, "a reboot gives a new boot_id");
    assert_eq!(b2.section("state").trim(), id1, "the state disk kept boot 1's file");
    let r = b2.json("check");
    assert_eq!(r["boot_id"], id2.as_str());
    assert_eq!(r["metrics"]["cma_total_bytes"], 268435456u64);
    assert_eq!(status(&r, "reboot.pending"), "pass", "{:#}", finding(&r, "reboot.pending"));
    assert_eq!(status(&r, "cma.boot_param"), "pass", "{:#}", finding(&r, "cma.boot_param"));
    assert_eq!(status(&r, "cma.pool_size"), "pass", "{:#}", finding(&r, "cma.pool_size"));
    eprintln!("scenario b: {:.1} s", t0.elapsed().as_secs_f64());
}

/// The same loop through a Pi 5's boot files: a CMA overlay added to config.txt sizes the device
/// tree's pool on the next boot (no cma= on the command line, as on the real board).
#[test]
fn pi5_config_txt_cma_overlay_and_reboot_takes_effect() {
    let t0 = Instant::now();
    let spec = BoardSpec::new("pi5-overlay", Personality::Pi5).init(
        r#"if [ "$VBOARD_BOOT" = 1 ]; then
  vb_section check npu-agent check --format json
  echo 'dtoverlay=cma,cma-256' >> /boot/firmware/config.txt
  vb_section pending npu-agent check --format json
  vb_reboot
fi
vb_section cmdline cat /proc/cmdline
vb_section dtcma hexdump -v -e '1/1 "%02x"' /proc/device-tree/reserved-memory/linux,cma/size
vb_section check npu-agent check --format json"#,
    );
    let Some(mut board) = Board::new(spec) else { return };
    let mut b1 = board.boot();
    assert_eq!(b1.dt_cma, Some(64 << 20), "the base Pi 5 tree has a 64 MiB pool");
    assert!(!b1.cmdline.contains("cma="), "{}", b1.cmdline);
    assert!(b1.cmdline.contains("console=ttyAMA0,115200 console=tty1 root=PARTUUID=4e639091-02"), "cmdline.txt not passed: {}", b1.cmdline);
    assert_eq!(b1.wait_end(T), BootEnd::Reboot);
    assert_eq!(b1.cma_total_bytes(), 64 << 20);
    let id1 = b1.boot_id();
    let r = b1.json("check");
    assert_eq!(r["model"], "Raspberry Pi 5 Model B Rev 1.0");
    let profile = r["profile"].as_str().expect("profile").to_string();
    assert!(profile == "rpi5-hailo10h" || profile == "rpi5-hailo8", "profile {profile}");
    let id = finding(&r, "board.identity");
    assert_eq!(id["status"], "pass", "{id:#}");
    assert_eq!(id["observed"]["compatible"], serde_json::json!(["raspberrypi,5-model-b", "brcm,bcm2712"]));
    assert_eq!(r["board_id"], "9f2b7c61d0e4a835");
    // No Hailo on this PCI bus: right to fail.
    assert_eq!(status(&r, "hailo.pci_device"), "fail", "{:#}", finding(&r, "hailo.pci_device"));
    assert_eq!(r["health"], "fail");
    // 64 MiB from the device tree, no cma= anywhere: nothing harmful, nothing pending.
    assert_eq!(status(&r, "cma.boot_param"), "pass", "{:#}", finding(&r, "cma.boot_param"));
    assert_eq!(status(&r, "reboot.pending"), "pass", "{:#}", finding(&r, "reboot.pending"));
    let p = b1.json("pending");
    let pending = finding(&p, "reboot.pending");
    assert_eq!(pending["status"], "warn", "the overlay edit is pending: {pending:#}");
    assert_eq!(pending["observed"]["config_txt_cma_bytes"], 268435456u64, "{pending:#}");
    assert_eq!(pending["observed"]["cma_total_bytes"], 67108864u64, "{pending:#}");
    drop(b1);

    assert!(board.boot_file("config.txt").expect("config.txt").ends_with("[all]\ndtparam=pciex1_gen=3\ndtoverlay=cma,cma-256\n"));
    let mut b2 = board.boot();
    assert_eq!(b2.dt_cma, Some(256 << 20), "config.txt's overlay resizes the pool");
    assert_eq!(b2.wait_end(T), BootEnd::PowerOff);
    assert_eq!(b2.cma_total_bytes(), 256 << 20);
    assert_ne!(b2.boot_id(), id1, "a reboot gives a new boot_id");
    assert!(!b2.section("cmdline").contains("cma="), "the overlay must not become a cmdline cma=: {}", b2.section("cmdline"));
    assert_eq!(b2.section("dtcma"), "0000000010000000", "/proc/device-tree/reserved-memory/linux,cma/size");
    let r = b2.json("check");
    assert_eq!(r["metrics"]["cma_total_bytes"], 268435456u64);
    assert_eq!(status(&r, "reboot.pending"), "pass", "{:#}", finding(&r, "reboot.pending"));
    assert_eq!(status(&r, "cma.boot_param"), "pass", "{:#}", finding(&r, "cma.boot_param"));
    assert_eq!(status(&r, "cma.pool_size"), "pass", "{:#}", finding(&r, "cma.pool_size"));
    eprintln!("scenario c: {:.1} s", t0.elapsed().as_secs_f64());
}

/// A workload started from a shell with `ulimit -n 1024` under the profile's workload name.
#[test]
fn rk3588_workload_with_nofile_1024_warns_with_its_pid() {
    let t0 = Instant::now();
    let spec = BoardSpec::new("rk3588-nofile", Personality::Rock5b)
        // A script's process takes the script's name as comm: a stand-in for RKLLM's llm_demo.
        .file("/usr/bin/llm_demo", 0o755, "#!/bin/sh\nwhile :; do sleep 1; done\n")
        .init(
            // Soft 1024 under a high hard limit, as a login shell on a systemd board has it.
            r#"(ulimit -H -n 524288; ulimit -S -n 1024; exec /usr/bin/llm_demo) &
pid=$!
i=0; while [ "$(cat /proc/$pid/comm)" != llm_demo ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i + 1)); done
echo "VBOARD-MARK workload pid=$pid comm=$(cat /proc/$pid/comm) $(grep 'Max open files' /proc/$pid/limits | tr -s ' ')"
vb_section check npu-agent check --format json
vb_mem llm_demo"#,
        );
    let Some(mut board) = Board::new(spec) else { return };
    let mut boot = board.boot();
    assert_eq!(boot.wait_end(T), BootEnd::PowerOff);
    let console = boot.console();
    let mark = console.lines().find(|l| l.starts_with("VBOARD-MARK workload ")).expect("workload line");
    let pid: u32 = mark.split_whitespace().find_map(|w| w.strip_prefix("pid=")).and_then(|p| p.parse().ok()).expect("pid");
    assert!(mark.contains("comm=llm_demo "), "{mark}");
    assert!(mark.contains("Max open files 1024 524288 files"), "{mark}");
    let r = boot.json("check");
    let f = finding(&r, "limits.nofile");
    assert_eq!(f["status"], "warn", "{f:#}");
    let ev = f["evidence"].as_array().expect("evidence");
    assert!(
        ev.iter().any(|e| e["file"] == format!("/proc/{pid}/limits") && e["text"].as_str().is_some_and(|t| t.contains("1024"))),
        "no /proc/{pid}/limits evidence: {f:#}"
    );
    assert_eq!(f["observed"]["workloads"], serde_json::json!([format!("llm_demo[{pid}]=1024")]), "{f:#}");
    assert!(f["summary"].as_str().expect("summary").contains(&format!("pid {pid}")), "{f:#}");
    // The memlock check looked at the same process.
    assert_ne!(status(&r, "limits.memlock"), "skip", "{:#}", finding(&r, "limits.memlock"));
    // vb_mem reads VmRSS/VmHWM of a guest process (the API the MQTT scenarios use for the agent).
    let mem = boot.mem("llm_demo");
    assert_eq!(mem.len(), 1, "{mem:?}");
    assert_eq!(mem[0].pid, pid);
    assert!(mem[0].rss_kb > 0 && mem[0].hwm_kb >= mem[0].rss_kb, "{mem:?}");
    eprintln!("scenario d: {:.1} s", t0.elapsed().as_secs_f64());
}

fn vmstat_compact(text: &str) -> std::collections::BTreeMap<String, u64> {
    text.lines()
        .filter_map(|l| l.split_once(' '))
        .filter(|(k, _)| k.starts_with("compact_"))
        .map(|(k, v)| (k.to_string(), v.trim().parse().expect("counter")))
        .collect()
}

/// Writing 1 to /proc/sys/vm/compact_memory moves the real kernel's compact_* counters.
#[test]
fn compact_memory_moves_the_real_compaction_counters() {
    let t0 = Instant::now();
    let spec = BoardSpec::new("compact", Personality::Rock5b).init(
        r#"# Scatter some page cache over memory first, so compaction has pages to move.
i=0; while [ $i -lt 64 ]; do dd if=/dev/zero of=/tmp/f$i bs=64k count=4 2>/dev/null; i=$((i+1)); done
i=0; while [ $i -lt 64 ]; do rm /tmp/f$i; i=$((i+2)); done
vb_section before grep ^compact_ /proc/vmstat
echo 1 > /proc/sys/vm/compact_memory
vb_section after grep ^compact_ /proc/vmstat"#,
    );
    let Some(mut board) = Board::new(spec) else { return };
    let mut boot = board.boot();
    assert_eq!(boot.wait_end(T), BootEnd::PowerOff);
    let before = vmstat_compact(&boot.section("before"));
    let after = vmstat_compact(&boot.section("after"));
    assert!(before.contains_key("compact_migrate_scanned") && before.contains_key("compact_stall"), "{before:?}");
    assert_eq!(before.keys().collect::<Vec<_>>(), after.keys().collect::<Vec<_>>());
    for (k, v) in &before {
        assert!(after[k] >= *v, "{k} went down: {v} -> {}", after[k]);
    }
    let moved: Vec<_> = before.iter().filter(|(k, v)| after[*k] > **v).map(|(k, v)| format!("{k} {v}->{}", after[k])).collect();
    assert!(after["compact_migrate_scanned"] > before["compact_migrate_scanned"], "compaction scanned nothing: {before:?} -> {after:?}");
    eprintln!("scenario e: {:.1} s, moved: {}", t0.elapsed().as_secs_f64(), moved.join(", "));
}

/// The plumbing the MQTT scenarios build on: a mosquitto on a loopback port, reached by the guest
/// as 10.0.2.100:1883 through qemu's restricted user network, one relay per connection. The broker
/// starts only after the guest's first attempt failed (as when a board boots before its broker);
/// then the guest connects twice. It speaks MQTT 3.1.1 by hand with busybox nc (CONNECT, a
/// retained PUBLISH QoS 0, DISCONNECT) and must get CONNACK; mosquitto_sub on the host then reads
/// both retained messages. Nothing else is reachable from the guest.
#[test]
fn guest_reaches_the_host_broker_through_the_forward() {
    let t0 = Instant::now();
    let Some([sub_bin]) = common::tools(["mosquitto_sub"], "the MQTT client; Debian package mosquitto-clients") else { return };
    let port = harness::Mosquitto::free_port();
    // CONNECT: clean session, keep-alive 60, client id "vboard-probe". PUBLISH retained:
    // vboard/hello "boot-ok" (remaining length 21), vboard/again "second" (20).
    let spec = BoardSpec::new("net", Personality::Rock5b).broker(port).init(
        r#"mqtt() {
  { printf '\020\030\000\004MQTT\004\002\000\074\000\014vboard-probe'; printf "$1"; printf '\340\000'; } \
    | timeout 10 nc 10.0.2.100 1883 | hexdump -v -e '1/1 "%02x"'
}
vb_section addr ip -4 addr show dev eth0
vb_section absent mqtt '\061\025\000\014vboard/helloboot-ok'
vb_mark broker-absent
i=0
while [ $i -lt 120 ]; do
  r=$(mqtt '\061\025\000\014vboard/helloboot-ok'); [ "$r" = 20020000 ] && break
  sleep 0.5; i=$((i + 1))
done
echo "VBOARD-MARK first-publish tries=$i connack=$r"
vb_section second mqtt '\061\024\000\014vboard/againsecond'
vb_section outside sh -c 'timeout 5 nc 10.0.2.2 22 </dev/null; echo rc=$?'"#,
    );
    let Some(mut board) = Board::new(spec) else { return };
    let mut boot = board.boot();
    boot.wait_for("VBOARD-MARK broker-absent", T);
    let Some(broker) = harness::Mosquitto::start_on(port) else { return };
    assert_eq!(boot.wait_end(T), BootEnd::PowerOff);
    assert!(boot.section("addr").contains("10.0.2.15/24"), "{}", boot.section("addr"));
    assert_eq!(boot.section("absent"), "", "no broker yet: the connection must fail");
    let console = boot.console();
    assert!(console.contains("connack=20020000"), "CONNACK (accepted) once the broker is up; broker log:\n{}", broker.log());
    // A second connection in the same boot works too (one relay per connection).
    assert_eq!(boot.section("second"), "20020000", "broker log:\n{}", broker.log());
    // restrict=on: anything but the forward is unreachable (here the slirp gateway's port 22).
    assert!(boot.section("outside").contains("rc=1"), "{}", boot.section("outside"));
    let out = std::process::Command::new(sub_bin)
        .args(["-h", "127.0.0.1", "-p", &port.to_string(), "-t", "vboard/#", "-v", "-C", "2", "-W", "20"])
        .output()
        .expect("mosquitto_sub");
    let mut got: Vec<String> = String::from_utf8_lossy(&out.stdout).lines().map(str::to_string).collect();
    got.sort();
    assert_eq!(got, ["vboard/again second", "vboard/hello boot-ok"], "broker log:\n{}", broker.log());
    assert_eq!(broker.log().matches("as vboard-probe").count(), 2, "{}", broker.log());
    eprintln!("network: {:.1} s", t0.elapsed().as_secs_f64());
}

/// The Pi firmware part of the harness's bootloader, on literal config.txt text (no VM needed).
#[test]
fn pi_config_txt_overlays_size_the_pool_as_the_firmware_does() {
    use harness::pi_config_cma;
    assert_eq!(pi_config_cma("dtoverlay=vc4-kms-v3d\n[all]\ndtparam=pciex1_gen=3\n"), None);
    assert_eq!(pi_config_cma("dtoverlay=cma,cma-256\n"), Some(256 << 20));
    assert_eq!(pi_config_cma("dtoverlay=vc4-kms-v3d,cma-320\n"), Some(320 << 20));
    assert_eq!(pi_config_cma("dtoverlay=cma,cma-size=0x8000000\n"), Some(128 << 20));
    // Sections for other boards do not apply to a Pi 5; [pi5] and [all] do; the last one wins.
    assert_eq!(pi_config_cma("[pi4]\ndtoverlay=cma,cma-512\n[all]\n"), None);
    assert_eq!(pi_config_cma("dtoverlay=cma,cma-64\n[pi5]\ndtoverlay=cma,cma-192\n[cm4]\ndtoverlay=cma,cma-512\n"), Some(192 << 20));
    // Comments and other overlays are ignored.
    assert_eq!(pi_config_cma("#dtoverlay=cma,cma-512\ndtoverlay=dwc2,dr_mode=host\n"), None);
}
