//! The virtual boards on the fleet link: status, signed commands and reboots over MQTT.

use super::*;

/// The plumbing the MQTT scenarios build on: a mosquitto on a loopback port, reached by the guest
/// as 10.0.2.100:1883 through qemu's restricted user network, one relay per connection. The broker
/// starts only after the guest's first attempt failed (as when a board boots before its broker);
/// then the guest connects twice. It speaks MQTT 3.1.1 by hand with busybox nc (CONNECT, a
/// retained PUBLISH QoS 0, DISCONNECT) and must get CONNACK; mosquitto_sub on the host then reads
/// both retained messages. Nothing else is reachable from the guest.
#[test]
fn guest_reaches_the_host_broker_through_the_forward() {
    let t0 = Instant::now();
    let Some([sub_bin]) = common::tools(
        ["mosquitto_sub"],
        "the MQTT client; Debian package mosquitto-clients",
    ) else {
        return;
    };
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
    let Some(mut board) = Board::new(spec) else {
        return;
    };
    let mut boot = board.boot();
    boot.wait_for("VBOARD-MARK broker-absent", T);
    let Some(broker) = harness::Mosquitto::start_on(port) else {
        return;
    };
    assert_eq!(boot.wait_end(T), BootEnd::PowerOff);
    assert!(
        boot.section("addr").contains("10.0.2.15/24"),
        "{}",
        boot.section("addr")
    );
    assert_eq!(
        boot.section("absent"),
        "",
        "no broker yet: the connection must fail"
    );
    let console = boot.console();
    assert!(
        console.contains("connack=20020000"),
        "CONNACK (accepted) once the broker is up; broker log:\n{}",
        broker.log()
    );
    // A second connection in the same boot works too (one relay per connection).
    assert_eq!(
        boot.section("second"),
        "20020000",
        "broker log:\n{}",
        broker.log()
    );
    // restrict=on: anything but the forward is unreachable (here the slirp gateway's port 22).
    assert!(
        boot.section("outside").contains("rc=1"),
        "{}",
        boot.section("outside")
    );
    let out = std::process::Command::new(sub_bin)
        .args([
            "-h",
            "127.0.0.1",
            "-p",
            &port.to_string(),
            "-t",
            "vboard/#",
            "-v",
            "-C",
            "2",
            "-W",
            "20",
        ])
        .output()
        .expect("mosquitto_sub");
    let mut got: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect();
    got.sort();
    assert_eq!(
        got,
        ["vboard/again second", "vboard/hello boot-ok"],
        "broker log:\n{}",
        broker.log()
    );
    assert_eq!(
        broker.log().matches("as vboard-probe").count(),
        2,
        "{}",
        broker.log()
    );
    eprintln!("network: {:.1} s", t0.elapsed().as_secs_f64());
}

/// Scenarios 1, 6, 2, 7 and 3 of issue 5 on one ROCK 5B (two boots): the retained status, the
/// workload's nofile warning, `compact`, an unsigned `reboot` refused, a signed `set_cma` and a
/// signed `reboot` through the harness-as-bootloader; then the agent's memory (bench line).
#[test]
fn rk3588_fleet_status_commands_and_signed_cma_reboot_over_mqtt() {
    let t0 = Instant::now();
    let Some(broker) = harness::Mosquitto::start() else {
        return;
    };
    let keys = tempfile::tempdir().expect("temp dir");
    let (key, public) = fleet::keygen(keys.path());
    let spec = fleet_spec("rk3588-fleet", Personality::Rock5b, broker.port, &public)
        .boot_file("armbianEnv.txt", &armbian_env("cma=64M"))
        .file(
            "/etc/npu-agent/profiles.d/rk3588-rknpu.toml",
            0o644,
            rk3588_profile_wanting_256m(),
        )
        .file(
            "/usr/bin/llm_demo",
            0o755,
            "#!/bin/sh\nwhile :; do sleep 1; done\n",
        )
        .init(ROCK_FLEET_INIT);
    let Some(mut board) = Board::new(spec) else {
        return;
    };
    let env_before = board.boot_file("armbianEnv.txt").expect("armbianEnv.txt");
    let url = broker.url();
    let status_topic = format!("npu-fleet/{ROCK_ID}/status");
    let sub = fleet::Subscriber::connect(broker.port, &format!("npu-fleet/{ROCK_ID}/#"));
    let mut b1 = board.boot();

    // (1) + (6): the status retained on the broker, read by a subscriber that comes later.
    let t = Instant::now();
    let console = b1.wait_for("VBOARD-MARK workload ", T);
    let mark = console
        .lines()
        .find(|l| l.starts_with("VBOARD-MARK workload "))
        .expect("workload line")
        .to_string();
    let pid: u32 = mark
        .split_whitespace()
        .find_map(|w| w.strip_prefix("pid="))
        .and_then(|p| p.parse().ok())
        .expect("pid");
    assert!(
        mark.contains("comm=llm_demo ") && mark.contains("Max open files 1024 524288 files"),
        "{mark}"
    );
    wait_status(&sub, ROCK_ID, &b1, 0, T, "any content", |_| true);
    let first_status_s = t.elapsed().as_secs_f64();
    let m = fleet::retained(broker.port, &status_topic, Duration::from_secs(10))
        .unwrap_or_else(|| panic!("no retained status on {status_topic}\n{}", b1.tail()));
    assert!(m.retain);
    let r = m.json();
    assert_eq!(r["board_id"], ROCK_ID, "{r:#}");
    assert_eq!(r["model"], "Radxa ROCK 5B");
    assert_eq!(r["profile"], "rk3588-rknpu");
    assert_eq!(
        r["boot_id"],
        b1.boot_id().as_str(),
        "the status is the running guest kernel's"
    );
    assert_eq!(
        b1.cma_total_bytes(),
        64 << 20,
        "the kernel did not honour cma=64M"
    );
    let pool = finding(&r, "cma.pool_size");
    assert_eq!(pool["status"], "fail", "{pool:#}");
    assert_eq!(pool["observed"]["cma_total_bytes"], 67108864u64, "{pool:#}");
    assert_eq!(
        pool["expected"]["cma_total_bytes"], 268435456u64,
        "the profiles.d file did not replace the built-in one: {pool:#}"
    );
    assert_eq!(r["metrics"]["cma_total_bytes"], 67108864u64);
    assert_eq!(r["health"], "fail");
    assert_eq!(r["reboot_required"], false, "{r:#}");
    assert!(r["session"].as_u64().is_some_and(|s| s >= 1), "{r:#}");
    let f = finding(&r, "limits.nofile");
    assert_eq!(f["status"], "warn", "{f:#}");
    assert!(
        f["evidence"]
            .as_array()
            .expect("evidence")
            .iter()
            .any(|e| e["file"] == format!("/proc/{pid}/limits")
                && e["text"].as_str().is_some_and(|t| t.contains("1024"))),
        "no /proc/{pid}/limits evidence: {f:#}"
    );
    assert_eq!(
        f["observed"]["workloads"],
        serde_json::json!([format!("llm_demo[{pid}]=1024")]),
        "{f:#}"
    );
    let avail = fleet::retained(
        broker.port,
        &format!("npu-fleet/{ROCK_ID}/availability"),
        Duration::from_secs(10),
    )
    .expect("retained availability");
    assert_eq!(avail.text(), "online");
    // The operator's view of the same retained messages.
    let w = fleet::npu_agent(
        &[
            "fleet", "watch", "--broker", &url, "--once", "--format", "json",
        ],
        Duration::from_secs(60),
    );
    assert_eq!(w.code, 0, "{w:?}");
    let v: Value = serde_json::from_str(&w.out)
        .unwrap_or_else(|e| panic!("fleet watch --format json ({e}): {w:?}"));
    let row = v["boards"]
        .as_array()
        .expect("boards")
        .iter()
        .find(|b| b["board"] == ROCK_ID)
        .unwrap_or_else(|| panic!("{v:#}"));
    assert_eq!(row["availability"], "online", "{row:#}");
    assert_eq!(row["cma_total_bytes"], 67108864u64, "{row:#}");
    assert!(
        row["worst"]
            .as_array()
            .expect("worst")
            .iter()
            .any(|x| x == "cma.pool_size fail"),
        "{row:#}"
    );
    assert!(
        row["worst"]
            .as_array()
            .expect("worst")
            .iter()
            .any(|x| x == "limits.nofile warn"),
        "{row:#}"
    );
    common::say(&format!("scenario 1+6 (status over MQTT, pool fail + nofile warn): {:.1} s after boot, first status {first_status_s:.1} s after boot", t.elapsed().as_secs_f64()));

    // (2) compact, unsigned (allowed): the real kernel's figures before and after.
    let t = Instant::now();
    let from = sub.len();
    let c = send(&url, ROCK_ID, "compact", &[], None, 60);
    assert_eq!(c.code, 0, "{c:?}\n{}", b1.tail());
    let lines = c.lines();
    assert!(
        lines[0].ends_with(" init") && lines.iter().any(|l| l.ends_with(" executing")),
        "{c:?}"
    );
    assert!(
        lines
            .last()
            .expect("a line")
            .starts_with(&format!("{ROCK_ID} {} successful {{", c.cmd_id())),
        "{c:?}"
    );
    let done = wait_lifecycle(
        &sub,
        ROCK_ID,
        &b1,
        from,
        "compact",
        &c.cmd_id(),
        "successful",
    );
    let res = &done["result"];
    assert_eq!(res["outcome"], "done", "{res:#}");
    for side in ["before", "after"] {
        let fig = &res[side];
        assert!(
            fig["mem_free_bytes"]
                .as_u64()
                .is_some_and(|b| b > 0 && b < 2 << 30),
            "{side}: {fig:#}"
        );
        assert!(
            fig["cma_free_bytes"]
                .as_u64()
                .is_some_and(|b| b <= 64 << 20),
            "{side}: CmaFree of a 64 MiB pool: {fig:#}"
        );
        assert!(
            fig["counters"]["compact_migrate_scanned"].is_u64(),
            "{side}: {fig:#}"
        );
        assert!(
            !fig["free_blocks_per_order"]
                .as_array()
                .expect("buddyinfo")
                .is_empty(),
            "{side}: {fig:#}"
        );
    }
    let deltas = res["counter_deltas"].as_object().expect("counter_deltas");
    let moved: Vec<String> = deltas
        .iter()
        .filter(|(k, v)| k.starts_with("compact_") && v.as_i64().is_some_and(|d| d > 0))
        .map(|(k, v)| format!("{k} +{v}"))
        .collect();
    assert!(!moved.is_empty(), "no compact_* counter moved: {res:#}");
    for (k, d) in deltas {
        let (b, a) = (
            res["before"]["counters"][k].as_i64().expect("before"),
            res["after"]["counters"][k].as_i64().expect("after"),
        );
        assert_eq!(a - b, d.as_i64().expect("delta"), "{k}");
    }
    common::say(&format!(
        "scenario 2 (compact): {:.1} s, fleet send {:.1} s, moved: {}",
        t.elapsed().as_secs_f64(),
        c.took.as_secs_f64(),
        moved.join(", ")
    ));

    // (7) an unsigned reboot: rejected with the reason; the board stays up and keeps answering.
    let t = Instant::now();
    let r7 = send(&url, ROCK_ID, "reboot", &["reason=unsigned"], None, 30);
    assert_eq!(r7.code, 1, "{r7:?}");
    assert!(
        r7.out.contains(" rejected: unsigned reboot refused"),
        "{r7:?}"
    );
    assert_agent_alive(&mut b1);
    let rs = send(&url, ROCK_ID, "rescan", &[], None, 30);
    assert_eq!(rs.code, 0, "{rs:?}\n{}", b1.tail());
    assert!(
        rs.lines().last().expect("a line").contains(" successful "),
        "{rs:?}"
    );
    assert_agent_alive(&mut b1);
    assert!(
        !b1.console().contains("reboot: Restarting system"),
        "{}",
        b1.tail()
    );
    common::say(&format!(
        "scenario 7 (unsigned reboot rejected, rescan after): {:.1} s",
        t.elapsed().as_secs_f64()
    ));

    // (3) signed set_cma, then a signed reboot; the harness boots the edited command line.
    let t = Instant::now();
    let from = sub.len();
    let sc = send(&url, ROCK_ID, "set_cma", &["size=256M"], Some(&key), 60);
    assert_eq!(sc.code, 0, "{sc:?}\n{}", b1.tail());
    let done = wait_lifecycle(
        &sub,
        ROCK_ID,
        &b1,
        from,
        "set_cma",
        &sc.cmd_id(),
        "successful",
    );
    assert_eq!(done["result"]["reboot_required"], true, "{done:#}");
    // The status right after the action may still carry the findings of the cycle before it;
    // the next diagnosis reads the edited boot file.
    let (_, m) = wait_status(
        &sub,
        ROCK_ID,
        &b1,
        from,
        T,
        "reboot_required and reboot.pending",
        |s| {
            s["reboot_required"] == true
                && s["findings"].as_array().is_some_and(|a| {
                    a.iter()
                        .any(|f| f["id"] == "reboot.pending" && f["status"] == "warn")
                })
        },
    );
    let r = m.json();
    let pending = finding(&r, "reboot.pending");
    assert_eq!(pending["status"], "warn", "{pending:#}");
    assert_eq!(
        pending["observed"]["boot_file_cma"], "cma=256M",
        "{pending:#}"
    );
    assert_eq!(
        pending["observed"]["proc_cmdline_cma"], "cma=64M",
        "{pending:#}"
    );
    let mem1 = fresh_agent_mem(&mut b1);
    let id1 = b1.boot_id();
    let from = sub.len();
    let reboot = fleet::spawn(
        &send_args(&url, ROCK_ID, "reboot", &["reason=cma"], Some(&key), 180)
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
    );
    assert_eq!(
        b1.wait_end(T),
        BootEnd::Reboot,
        "the agent's `reboot -f` must end boot 1 in a reboot"
    );
    assert!(
        !b1.console().contains("VBOARD-MARK agent-exit"),
        "{}",
        b1.tail()
    );
    let down = b1.duration().expect("ended");
    drop(b1);
    // The bootloader's view: only extraargs changed; the intent with boot 1's boot_id is on disk.
    let env_after = board
        .boot_file("armbianEnv.txt")
        .expect("armbianEnv.txt after set_cma");
    assert_eq!(
        env_after,
        env_before.replace("extraargs=cma=64M\n", "extraargs=cma=256M\n")
    );
    let intent: Value = serde_json::from_str(
        &board
            .state_file("reboot.json")
            .expect("reboot.json on the state disk"),
    )
    .expect("reboot.json");
    assert_eq!(intent["pending"]["boot_id"], id1.as_str(), "{intent:#}");
    let (next, _) = board.boot_chain();
    assert!(
        next.contains(" cma=256M ") && !next.contains("cma=64M"),
        "{next}"
    );
    let mut b2 = board.boot();
    assert_eq!(b2.cmdline, next);
    let out = reboot.wait(Duration::from_secs(240));
    let id2 = b2.boot_id();
    assert_eq!(out.code, 0, "{out:?}\n{}", b2.tail());
    assert_ne!(id2, id1, "a reboot gives a new boot_id");
    let last = out.lines().last().expect("a line").to_string();
    assert!(
        last.starts_with(&format!(
            "{ROCK_ID} {} successful: rebooted: boot_id {id1} -> {id2}",
            out.cmd_id()
        )),
        "{out:?}"
    );
    assert_eq!(
        intent["pending"]["cmd_id"],
        out.cmd_id().as_str(),
        "{intent:#}"
    );
    // The last will while the board was down, online again after it.
    let (i_off, _) = sub
        .find_from(from, Duration::ZERO, |m| {
            m.topic.ends_with("/availability") && m.text() == "offline"
        })
        .unwrap_or_else(|| panic!("no offline (last will)\n{}", sub.recent(20)));
    sub.find_from(i_off, Duration::from_secs(10), |m| {
        m.topic.ends_with("/availability") && m.text() == "online"
    })
    .unwrap_or_else(|| panic!("no online after the reboot\n{}", sub.recent(20)));
    // `executing` reached the broker before the board went down (the agent queues it before it
    // runs the reboot command; nothing waits for its PUBACK, so this is the race it must win).
    assert!(
        sub.find_from(from, Duration::ZERO, |m| m.topic.contains("/cmd/reboot/")
            && m.json()["status"] == "executing")
            .is_some(),
        "no executing before the reboot\n{}",
        sub.recent(20)
    );
    assert!(
        out.lines().iter().any(|l| l.ends_with(" executing")),
        "{out:?}"
    );
    assert_eq!(b2.cma_total_bytes(), 256 << 20, "CmaTotal after the reboot");
    let (_, m) = wait_status(&sub, ROCK_ID, &b2, from, T, "boot 2's boot_id", |s| {
        s["boot_id"] == id2.as_str()
    });
    let r = m.json();
    let pool = finding(&r, "cma.pool_size");
    assert_eq!(pool["status"], "pass", "{pool:#}");
    assert_eq!(
        pool["observed"]["cma_total_bytes"], 268435456u64,
        "{pool:#}"
    );
    assert_eq!(r["metrics"]["cma_total_bytes"], 268435456u64);
    assert_eq!(r["reboot_required"], false, "{r:#}");
    assert_status(&r, "reboot.pending", "pass");
    assert!(
        r["session"].as_u64().is_some_and(|s| s >= 2),
        "the session counter lives on the state disk: {r:#}"
    );
    common::say(&format!(
        "scenario 3 (signed set_cma + reboot): {:.1} s; boot 1 lasted {:.1} s; reboot command {:.1} s from fleet send to successful",
        t.elapsed().as_secs_f64(),
        down.as_secs_f64(),
        out.took.as_secs_f64()
    ));
    assert_agent_alive(&mut b2);
    let mem2 = fresh_agent_mem(&mut b2);
    for (m, when) in [
        (&mem1, "boot 1 after status, compact, rescan, set_cma"),
        (&mem2, "boot 2 after reconciling the reboot"),
    ] {
        assert!(m.rss_kb > 0 && m.hwm_kb >= m.rss_kb, "{m:?}");
        common::say(&format!("bench: npu-agent run (static aarch64) on the virtual ROCK 5B, {when}: VmRSS {} kB, VmHWM {} kB", m.rss_kb, m.hwm_kb));
    }
    common::say(&format!(
        "rk3588 fleet: {:.1} s",
        t0.elapsed().as_secs_f64()
    ));
}

/// Scenarios 5 and 4 of issue 5 on one Raspberry Pi 5 (two boots): the board boots while its
/// broker is down, the broker starts once the agent retries at its back-off cap and the status
/// arrives; then a signed `set_cma`
/// (a CMA overlay in config.txt) and a signed `reboot`, after which the device tree's pool is
/// 256 MiB.
#[test]
fn pi5_fleet_late_broker_then_signed_cma_overlay_and_reboot_over_mqtt() {
    let t0 = Instant::now();
    if common::tools(["mosquitto"], "the MQTT broker; Debian package mosquitto").is_none() {
        return;
    }
    let port = harness::Mosquitto::free_port();
    let keys = tempfile::tempdir().expect("temp dir");
    let (key, public) = fleet::keygen(keys.path());
    let spec = fleet_spec("pi5-fleet", Personality::Pi5, port, &public)
        .init("vb_agent\nvb_mem_every 2 npu-agent");
    let Some(mut board) = Board::new(spec) else {
        return;
    };
    let cmdline_before = board.boot_file("cmdline.txt").expect("cmdline.txt");
    let config_before = board.boot_file("config.txt").expect("config.txt");

    // (5) no broker while the board boots and its agent starts; the broker comes once the agent
    // retries at its back-off cap. Until then a listener in its place closes every connection
    // (what the guest sees with nothing there: the relay closes it), counting the attempts.
    let no_broker = std::net::TcpListener::bind(("127.0.0.1", port)).expect("bind the broker port");
    no_broker
        .set_nonblocking(true)
        .expect("non-blocking listener");
    let t = Instant::now();
    let mut b1 = board.boot();
    b1.wait_for("VBOARD-MARK agent-started", T);
    let agent_up = t.elapsed();
    let attempts = closed_connections(&no_broker, RETRIES_TO_REACH_THE_CAP, T);
    drop(no_broker);
    assert_agent_alive(&mut b1);
    let Some(broker) = harness::Mosquitto::start_on(port) else {
        return;
    };
    let broker_up = Instant::now();
    let url = broker.url();
    let sub = fleet::Subscriber::connect(port, &format!("npu-fleet/{PI_ID}/#"));
    let (_, m) = wait_status(
        &sub,
        PI_ID,
        &b1,
        0,
        Duration::from_secs(30),
        "any content, after the late broker",
        |_| true,
    );
    let late = m.at.duration_since(broker_up);
    assert!(
        late < Duration::from_secs(10),
        "the status came {late:?} after the broker (back-off is capped at 1.6 s)"
    );
    let r = m.json();
    assert_eq!(r["board_id"], PI_ID, "{r:#}");
    assert_eq!(r["model"], "Raspberry Pi 5 Model B Rev 1.0");
    assert_eq!(r["boot_id"], b1.boot_id().as_str());
    assert_eq!(
        r["metrics"]["cma_total_bytes"], 67108864u64,
        "the base Pi 5 tree's 64 MiB pool"
    );
    assert_eq!(r["reboot_required"], false, "{r:#}");
    assert_eq!(
        r["session"], 1,
        "one connection: the first one the broker accepted: {r:#}"
    );
    let profile = r["profile"].as_str().expect("profile").to_string();
    assert!(
        profile == "rpi5-hailo10h" || profile == "rpi5-hailo8",
        "profile {profile}"
    );
    let pool_before = status(&r, "cma.pool_size");
    let avail = fleet::retained(
        port,
        &format!("npu-fleet/{PI_ID}/availability"),
        Duration::from_secs(10),
    )
    .expect("retained availability");
    assert_eq!(avail.text(), "online");
    let s = fleet::retained(
        port,
        &format!("npu-fleet/{PI_ID}/status"),
        Duration::from_secs(10),
    )
    .expect("retained status");
    assert_eq!(s.json()["boot_id"], b1.boot_id().as_str());
    common::say(&format!(
        "scenario 5 (broker late): agent started {:.1} s after boot, {attempts} connection attempts closed, status {:.2} s after the broker, {:.1} s in all",
        agent_up.as_secs_f64(),
        late.as_secs_f64(),
        t.elapsed().as_secs_f64()
    ));

    // (4) signed set_cma 256M (config.txt overlay), signed reboot, the firmware's pool resized.
    let t = Instant::now();
    let from = sub.len();
    let sc = send(&url, PI_ID, "set_cma", &["size=256M"], Some(&key), 60);
    assert_eq!(sc.code, 0, "{sc:?}\n{}", b1.tail());
    let done = wait_lifecycle(
        &sub,
        PI_ID,
        &b1,
        from,
        "set_cma",
        &sc.cmd_id(),
        "successful",
    );
    assert_eq!(done["result"]["reboot_required"], true, "{done:#}");
    let (_, m) = wait_status(&sub, PI_ID, &b1, from, T, "reboot_required", |s| {
        s["reboot_required"] == true
    });
    let pending = finding(&m.json(), "reboot.pending").clone();
    assert_eq!(pending["status"], "warn", "{pending:#}");
    assert_eq!(
        pending["observed"]["config_txt_cma_bytes"], 268435456u64,
        "{pending:#}"
    );
    let id1 = b1.boot_id();
    let from = sub.len();
    let reboot = fleet::spawn(
        &send_args(&url, PI_ID, "reboot", &["reason=cma"], Some(&key), 180)
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
    );
    assert_eq!(
        b1.wait_end(T),
        BootEnd::Reboot,
        "the agent's `reboot -f` must end boot 1 in a reboot"
    );
    drop(b1);
    let config_after = board
        .boot_file("config.txt")
        .expect("config.txt after set_cma");
    assert!(
        config_after.starts_with(&config_before),
        "set_cma must only add to this config.txt:\n{config_after}"
    );
    assert!(
        config_after.ends_with("dtoverlay=cma,cma-256\n"),
        "{config_after}"
    );
    assert_eq!(harness::pi_config_cma(&config_after), Some(256 << 20));
    assert!(
        sub.find_from(from, Duration::ZERO, |m| m.topic.contains("/cmd/reboot/")
            && m.json()["status"] == "executing")
            .is_some(),
        "no executing before the reboot\n{}",
        sub.recent(20)
    );
    let cmdline_after = board.boot_file("cmdline.txt").expect("cmdline.txt");
    assert_eq!(
        cmdline_after, cmdline_before,
        "no cma= to remove, so cmdline.txt stays as it was"
    );
    let mut b2 = board.boot();
    assert_eq!(
        b2.dt_cma,
        Some(256 << 20),
        "config.txt's overlay resizes the pool"
    );
    assert!(!b2.cmdline.contains("cma="), "{}", b2.cmdline);
    let out = reboot.wait(Duration::from_secs(240));
    let id2 = b2.boot_id();
    assert_eq!(out.code, 0, "{out:?}\n{}", b2.tail());
    assert_ne!(id2, id1);
    assert!(
        out.lines().last().expect("a line").starts_with(&format!(
            "{PI_ID} {} successful: rebooted: boot_id {id1} -> {id2}",
            out.cmd_id()
        )),
        "{out:?}"
    );
    assert_eq!(b2.cma_total_bytes(), 256 << 20);
    let (_, m) = wait_status(&sub, PI_ID, &b2, from, T, "boot 2's boot_id", |s| {
        s["boot_id"] == id2.as_str()
    });
    let r = m.json();
    let pool = finding(&r, "cma.pool_size");
    assert_eq!(pool["status"], "pass", "{pool:#}");
    assert_eq!(
        pool["observed"]["cma_total_bytes"], 268435456u64,
        "{pool:#}"
    );
    assert_eq!(r["metrics"]["cma_total_bytes"], 268435456u64);
    assert_eq!(r["reboot_required"], false, "{r:#}");
    assert_status(&r, "reboot.pending", "pass");
    assert_status(&r, "cma.boot_param", "pass");
    assert_agent_alive(&mut b2);
    common::say(&format!(
        "scenario 4 (Pi 5 signed set_cma + reboot): {:.1} s; cma.pool_size {pool_before} -> pass; reboot command {:.1} s from fleet send to successful",
        t.elapsed().as_secs_f64(),
        out.took.as_secs_f64()
    ));
    common::say(&format!("pi5 fleet: {:.1} s", t0.elapsed().as_secs_f64()));
}

#[test]
fn kmsg_lines_raise_findings_over_mqtt_and_a_restart_does_not_count_them_twice() {
    let t0 = Instant::now();
    let Some(broker) = harness::Mosquitto::start() else {
        return;
    };
    let keys = tempfile::tempdir().expect("temp dir");
    let (_key, public) = fleet::keygen(keys.path());
    let spec = fleet_spec("kmsg", Personality::Rock5b, broker.port, &public).init(KMSG_INIT);
    let Some(mut board) = Board::new(spec) else {
        return;
    };
    let sub = fleet::Subscriber::connect(broker.port, &format!("npu-fleet/{ROCK_ID}/#"));
    let mut boot = board.boot();
    boot.wait_for("VBOARD-END logs", T);
    assert_eq!(
        boot.section("logs").trim(),
        "end",
        "the guest has no log files"
    );
    let (_, m) = wait_status(&sub, ROCK_ID, &boot, 0, T, "cma.free from /dev/kmsg", |r| {
        kmsg_enomem(r) == 2
    });
    let r = m.json();
    assert_status(&r, "cma.free", "fail");
    let src = finding(&r, "agent.log_sources");
    assert_eq!(src["observed"]["kernel_log_source"], "/dev/kmsg", "{src:#}");
    assert_eq!(
        src["observed"]["source:/dev/kmsg"]["state"], "read",
        "{src:#}"
    );
    let session = r["session"].as_u64().expect("session");

    // The agent is stopped and started again: its first status counts the same two lines.
    boot.wait_for("VBOARD-MARK agent-killed", T);
    let from = sub.len();
    let (after, m) = wait_status(
        &sub,
        ROCK_ID,
        &boot,
        from,
        T,
        "a status of the restarted agent",
        |r| r["session"].as_u64().is_some_and(|s| s > session),
    );
    assert_eq!(
        kmsg_enomem(&m.json()),
        2,
        "{:#}",
        finding(&m.json(), "cma.free")
    );
    // A new line is counted once.
    boot.wait_for("VBOARD-MARK third-line", T);
    wait_status(
        &sub,
        ROCK_ID,
        &boot,
        after,
        T,
        "three cma_alloc lines",
        |r| kmsg_enomem(r) == 3,
    );
    let last = fleet::retained(broker.port, &format!("npu-fleet/{ROCK_ID}/status"), T)
        .expect("a retained status");
    assert_eq!(kmsg_enomem(&last.json()), 3);
    // No status of either agent ever counted a line twice.
    for m in sub.all().iter().filter(|m| m.topic.ends_with("/status")) {
        let n = kmsg_enomem(&m.json());
        assert!(
            (2..=3).contains(&n),
            "a status with {n} cma_alloc lines:\n{}",
            m.text()
        );
    }
    drop(boot);
    let cursors = board
        .state_file("log_cursors.json")
        .expect("log_cursors.json on the state disk");
    let c: Value = serde_json::from_str(&cursors).expect("cursor JSON");
    assert!(c["kmsg_seq"].as_u64().is_some(), "{c:#}");
    eprintln!("kmsg: {:.1} s", t0.elapsed().as_secs_f64());
}
