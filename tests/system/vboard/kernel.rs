//! The agent on a real arm64 kernel under qemu: what it reads from the kernel itself (CMA, limits of a workload, compaction, thermal and power, memory).

use super::*;

#[test]
fn rk3588_check_reads_cma_64m_from_the_real_kernel() {
    let t0 = Instant::now();
    let spec = BoardSpec::new("rk3588-cma64", Personality::Rock5b)
        .boot_file("armbianEnv.txt", &armbian_env("cma=64M"))
        .file(
            "/etc/npu-agent/profiles.d/rk3588-rknpu.toml",
            0o644,
            rk3588_profile_wanting_256m(),
        )
        .init(CHECK);
    let Some(mut board) = Board::new(spec) else {
        return;
    };
    let mut boot = board.boot();
    assert!(
        boot.cmdline.contains(" cma=64M "),
        "bootloader did not pass extraargs: {}",
        boot.cmdline
    );
    assert_eq!(boot.wait_end(T), BootEnd::PowerOff);
    assert_eq!(
        boot.cma_total_bytes(),
        64 << 20,
        "the kernel did not honour cma=64M"
    );
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
    assert_eq!(
        id["observed"]["compatible"],
        serde_json::json!(["radxa,rock-5b", "rockchip,rk3588"])
    );
    assert!(
        id["summary"].as_str().expect("summary").contains("ROCK 5B"),
        "{id:#}"
    );
    assert_eq!(id["observed"]["arch"], "aarch64");
    assert!(
        id["observed"]["kernel_release"]
            .as_str()
            .expect("kernel")
            .ends_with("-cloud-arm64"),
        "{id:#}"
    );
    // Debian's cloud kernel has no rknpu driver: the check must notice, not pass; nothing on
    // this board uses the NPU, so it is information, not a warning.
    assert_status(&r, "rknpu.driver_version", "info");
    let pool = finding(&r, "cma.pool_size");
    assert_eq!(pool["status"], "fail", "{pool:#}");
    assert_eq!(pool["observed"]["cma_total_bytes"], 67108864u64, "{pool:#}");
    assert_eq!(
        pool["expected"]["cma_total_bytes"], 268435456u64,
        "the profiles.d file did not replace the built-in one: {pool:#}"
    );
    assert_eq!(r["metrics"]["cma_total_bytes"], 67108864u64);
    // The boot file and the running kernel agree: cma=64M is in effect, no reboot pending.
    assert_status(&r, "cma.boot_param", "pass");
    assert_status(&r, "reboot.pending", "pass");
    eprintln!("scenario a: {:.1} s", t0.elapsed().as_secs_f64());
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
    let Some(mut board) = Board::new(spec) else {
        return;
    };
    let mut boot = board.boot();
    assert_eq!(boot.wait_end(T), BootEnd::PowerOff);
    let console = boot.console();
    let mark = console
        .lines()
        .find(|l| l.starts_with("VBOARD-MARK workload "))
        .expect("workload line");
    let pid: u32 = mark
        .split_whitespace()
        .find_map(|w| w.strip_prefix("pid="))
        .and_then(|p| p.parse().ok())
        .expect("pid");
    assert!(mark.contains("comm=llm_demo "), "{mark}");
    assert!(mark.contains("Max open files 1024 524288 files"), "{mark}");
    let r = boot.json("check");
    let f = finding(&r, "limits.nofile");
    assert_eq!(f["status"], "warn", "{f:#}");
    let ev = f["evidence"].as_array().expect("evidence");
    assert!(
        ev.iter().any(|e| e["file"] == format!("/proc/{pid}/limits")
            && e["text"].as_str().is_some_and(|t| t.contains("1024"))),
        "no /proc/{pid}/limits evidence: {f:#}"
    );
    assert_eq!(
        f["observed"]["workloads"],
        serde_json::json!([format!("llm_demo[{pid}]=1024")]),
        "{f:#}"
    );
    assert!(
        f["summary"]
            .as_str()
            .expect("summary")
            .contains(&format!("pid {pid}")),
        "{f:#}"
    );
    // The memlock check looked at the same process.
    assert_ne!(
        status(&r, "limits.memlock"),
        "skip",
        "{:#}",
        finding(&r, "limits.memlock")
    );
    // vb_mem reads VmRSS/VmHWM of a guest process (the API the MQTT scenarios use for the agent).
    let mem = boot.mem("llm_demo");
    assert_eq!(mem.len(), 1, "{mem:?}");
    assert_eq!(mem[0].pid, pid);
    assert!(
        mem[0].rss_kb > 0 && mem[0].hwm_kb >= mem[0].rss_kb,
        "{mem:?}"
    );
    eprintln!("scenario d: {:.1} s", t0.elapsed().as_secs_f64());
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
    let Some(mut board) = Board::new(spec) else {
        return;
    };
    let mut boot = board.boot();
    assert_eq!(boot.wait_end(T), BootEnd::PowerOff);
    let before = vmstat_compact(&boot.section("before"));
    let after = vmstat_compact(&boot.section("after"));
    assert!(
        before.contains_key("compact_migrate_scanned") && before.contains_key("compact_stall"),
        "{before:?}"
    );
    assert_eq!(
        before.keys().collect::<Vec<_>>(),
        after.keys().collect::<Vec<_>>()
    );
    for (k, v) in &before {
        assert!(after[k] >= *v, "{k} went down: {v} -> {}", after[k]);
    }
    let moved: Vec<_> = before
        .iter()
        .filter(|(k, v)| after[*k] > **v)
        .map(|(k, v)| format!("{k} {v}->{}", after[k]))
        .collect();
    assert!(
        after["compact_migrate_scanned"] > before["compact_migrate_scanned"],
        "compaction scanned nothing: {before:?} -> {after:?}"
    );
    eprintln!(
        "scenario e: {:.1} s, moved: {}",
        t0.elapsed().as_secs_f64(),
        moved.join(", ")
    );
}

/// The agent's memory limits (VmRSS under 4 MiB, VmHWM under 5 MiB, no transparent huge page)
/// hold on a kernel with `transparent_hugepage=always` as well as `madvise`: one ROCK 5B boot per
/// setting (armbianEnv.txt's `extraargs`), `npu-agent run` publishing every 2 s, commands that
/// run on the blocking helper threads (`rescan`, `compact`), then the agent's figures. With Rust's
/// default 2 MiB thread stacks, "always" let a helper thread's stack become a 2 MiB huge page in
/// some boots (VmRSS about 4.7 MB); agent/runtime.rs explains the shape that prevents it.
#[test]
fn agent_memory_stays_small_with_thp_always_and_madvise() {
    // The goal, held here: VmRSS < 4.5 MiB, its anonymous part < 1.5 MiB and VmHWM < 5 MiB (as
    // /proc reports them, in kB = KiB) on both THP settings, and no huge page. Most of VmRSS is
    // the binary's own pages (RssFile: the kernel maps pages around each fault, so nearly the
    // whole file is resident), so it follows the binary's size: 4 MiB held with the 3.2 MB
    // binary, the 3.8 MB one of issue 36 takes it to about 4.1 MiB (docs/development.md,
    // "Deviations"). The rest is anonymous (heap and the helper thread's stack, which with a
    // cycle every 2 s is always running a diagnosis). The bench line gives today's figures.
    const RSS_LIMIT_KB: u64 = 4608;
    const RSS_ANON_LIMIT_KB: u64 = 1536;
    const HWM_LIMIT_KB: u64 = 5 * 1024;
    let t0 = Instant::now();
    for thp in ["always", "madvise"] {
        let Some(broker) = harness::Mosquitto::start() else {
            return;
        };
        let keys = tempfile::tempdir().expect("temp dir");
        let (_, public) = fleet::keygen(keys.path());
        let spec = fleet_spec(&format!("rock5b-thp-{thp}"), Personality::Rock5b, broker.port, &public)
            .boot_file(
                "armbianEnv.txt",
                &armbian_env(&format!("cma=64M transparent_hugepage={thp}")),
            )
            .init("vb_section thp cat /sys/kernel/mm/transparent_hugepage/enabled\nvb_agent\nvb_mem_every 2 npu-agent");
        let Some(mut board) = Board::new(spec) else {
            return;
        };
        let url = broker.url();
        let sub = fleet::Subscriber::connect(broker.port, "npu-fleet/#");
        let mut b = board.boot();
        assert!(
            b.cmdline.contains(&format!(" transparent_hugepage={thp} ")),
            "{}",
            b.cmdline
        );
        b.wait_for("VBOARD-END thp", T);
        assert!(
            b.section("thp").contains(&format!("[{thp}]")),
            "the kernel did not take transparent_hugepage={thp}: {}",
            b.section("thp")
        );
        wait_status(&sub, ROCK_ID, &b, 0, T, "a first status", |_| true);
        let first_rescan = Instant::now();
        for (i, action) in ["rescan", "compact", "rescan"].into_iter().enumerate() {
            let mut r = send(&url, ROCK_ID, action, &[], None, 60);
            // Unsigned rescans are rate limited to one per 5 s: the second is sent again until
            // the window has passed (each refusal names the limit).
            while i == 2 && r.code != 0 && format!("{}{}", r.out, r.err).contains("rate limited") {
                assert!(
                    first_rescan.elapsed() < Duration::from_secs(5) + T,
                    "{action}: {r:?}\n{}",
                    b.tail()
                );
                std::thread::sleep(Duration::from_millis(500));
                r = send(&url, ROCK_ID, action, &[], None, 60);
            }
            assert_eq!(r.code, 0, "{action}: {r:?}\n{}", b.tail());
        }
        // A few more cycles after the commands, then a fresh sample.
        let mut from = sub.len();
        for _ in 0..3 {
            let (i, _) = wait_status(
                &sub,
                ROCK_ID,
                &b,
                from,
                T,
                "a status after the commands",
                |_| true,
            );
            from = i + 1;
        }
        assert_agent_alive(&mut b);
        let m = fresh_agent_mem(&mut b);
        common::say(&format!(
            "bench: npu-agent run (static aarch64) on the virtual ROCK 5B, THP {thp}, after rescan, compact, rescan: VmRSS {} kB ({} kB anonymous, {} kB file), VmHWM {} kB, AnonHugePages {} kB, {} threads",
            m.rss_kb, m.rss_anon_kb, m.rss_file_kb, m.hwm_kb, m.anon_huge_kb, m.threads
        ));
        assert_eq!(
            m.anon_huge_kb, 0,
            "THP {thp}: a huge page in the agent: {m:?}"
        );
        assert!(
            m.rss_kb < RSS_LIMIT_KB,
            "THP {thp}: VmRSS {} kB: {m:?}",
            m.rss_kb
        );
        assert!(
            m.rss_anon_kb < RSS_ANON_LIMIT_KB,
            "THP {thp}: RssAnon {} kB: {m:?}",
            m.rss_anon_kb
        );
        assert!(
            m.hwm_kb < HWM_LIMIT_KB,
            "THP {thp}: VmHWM {} kB: {m:?}",
            m.hwm_kb
        );
        // The runtime thread plus at most npu_agent::sys::runtime::MAX_BLOCKING_THREADS helpers.
        assert!(
            (1..=1 + npu_agent::sys::runtime::MAX_BLOCKING_THREADS as u64).contains(&m.threads),
            "{m:?}"
        );
    }
    common::say(&format!("THP memory: {:.1} s", t0.elapsed().as_secs_f64()));
}

/// board.power and board.thermal on a real kernel: the thermal zones and hwmon devices the guest
/// kernel really has (whatever qemu's virt machine offers) are what the agent reports; a kernel
/// line "Undervoltage detected!" in the log raises board.power. Log files always; the kernel
/// ring buffer (`/dev/kmsg`) when this agent reads it (it reports `agent.log_sources` then).
#[test]
fn pi5_power_and_thermal_follow_the_real_kernel() {
    let spec = BoardSpec::new("pi5-power-thermal", Personality::Pi5).init(&format!(
        "{SENSORS}\n\
         vb_section check1 npu-agent check --format json\n\
         mkdir -p /var/log\n\
         echo '[   12.345678] hwmon hwmon1: Undervoltage detected!' >> /var/log/kern.log\n\
         vb_section check2 npu-agent check --format json\n\
         rm -f /var/log/kern.log\n\
         echo '<2>hwmon hwmon1: Undervoltage detected!' > /dev/kmsg\n\
         vb_section check3 npu-agent check --format json\n\
         vb_section prom npu-agent check --format prometheus"
    ));
    let Some(mut board) = Board::new(spec) else {
        return;
    };
    let mut boot = board.boot();
    assert_eq!(boot.wait_end(T), BootEnd::PowerOff);

    // (1) The guest's sensors, read by its own shell.
    let sensors = boot.section("sensors");
    let zones: Vec<(String, Option<i64>)> = sensors
        .lines()
        .filter_map(|l| l.strip_prefix("zone "))
        .map(|l| {
            let (kind, temp) = l.rsplit_once(' ').expect("zone TYPE TEMP");
            (kind.to_string(), temp.parse().ok())
        })
        .collect();
    let hwmon: Vec<&str> = sensors
        .lines()
        .filter_map(|l| l.strip_prefix("hwmon "))
        .collect();
    eprintln!("guest thermal zones {zones:?}, hwmon {hwmon:?}");
    let r1 = boot.json("check1");
    let thermal = finding(&r1, "board.thermal");
    let readable: Vec<&(String, Option<i64>)> = zones.iter().filter(|z| z.1.is_some()).collect();
    if readable.is_empty() {
        assert_eq!(thermal["status"], "skip", "{thermal:#}");
        assert!(
            thermal["summary"]
                .as_str()
                .unwrap()
                .contains("thermal zone"),
            "{thermal:#}"
        );
        assert!(
            r1["metrics"].get("soc_temp_c").is_none(),
            "{}",
            r1["metrics"]
        );
    } else {
        let temps = &thermal["observed"]["zone_temp_c"];
        for (kind, t) in &readable {
            let got = temps[kind.as_str()]
                .as_f64()
                .unwrap_or_else(|| panic!("zone {kind} missing: {thermal:#}"));
            // Read a moment apart: within 5 degrees.
            assert!(
                (got - t.unwrap() as f64 / 1000.0).abs() < 5.0,
                "{kind}: {got} vs {t:?}"
            );
        }
        assert_ne!(thermal["status"], "error", "{thermal:#}");
        assert!(r1["metrics"]["soc_temp_c"].is_number());
    }
    let power = finding(&r1, "board.power");
    if hwmon.contains(&"rpi_volt") {
        assert_ne!(power["status"], "skip", "{power:#}");
    } else {
        assert_eq!(power["status"], "skip", "{power:#}");
        assert!(
            power["summary"]
                .as_str()
                .unwrap()
                .contains("no rpi_volt hwmon"),
            "{power:#}"
        );
        assert!(r1["metrics"].get("undervoltage_now").is_none());
    }
    // Live figures from the guest: its uptime, the agent's own RSS, the 16 MiB boot partition.
    assert!(r1["metrics"]["uptime_s"].is_u64(), "{}", r1["metrics"]);
    let rss = r1["metrics"]["agent_rss_bytes"]
        .as_u64()
        .expect("agent_rss_bytes");
    assert!(rss > 256 << 10 && rss < 64 << 20, "agent RSS {rss}");
    let boot_free = r1["metrics"]["boot_fs_free_bytes"]
        .as_u64()
        .expect("boot_fs_free_bytes");
    assert!(boot_free > 0 && boot_free < 16 << 20, "{boot_free}");

    // (2) A line only in /var/log/kern.log: the agent reads the kernel ring buffer (/dev/kmsg)
    // first and takes kernel lines from one source only (a line is never counted from two copies),
    // so the file is not read while /dev/kmsg is.
    let r2 = boot.json("check2");
    let power = finding(&r2, "board.power");
    assert_eq!(power["observed"]["kernel_log"], "/dev/kmsg", "{power:#}");
    assert_eq!(power["observed"]["undervoltage_events"], 0, "{power:#}");

    // (3) The line in the kernel ring buffer, with no log file: under-voltage, never normalised.
    let r3 = boot.json("check3");
    let power = finding(&r3, "board.power");
    assert_eq!(power["status"], "fail", "{power:#}");
    assert_eq!(power["observed"]["kernel_log"], "/dev/kmsg", "{power:#}");
    assert_eq!(power["observed"]["undervoltage_events"], 1, "{power:#}");
    assert!(
        power["evidence"]
            .to_string()
            .contains("Undervoltage detected"),
        "{power:#}"
    );
    assert!(
        power["remedy"].as_str().unwrap().contains("5 A"),
        "{power:#}"
    );
    assert_eq!(r3["metrics"]["undervoltage_now"], true);
    let prom = boot.section("prom");
    assert!(
        prom.contains("\nnpu_agent_check_status{check=\"board.power\"} "),
        "{prom}"
    );
    assert!(prom.contains("\nnpu_agent_agent_rss_bytes "), "{prom}");
}
