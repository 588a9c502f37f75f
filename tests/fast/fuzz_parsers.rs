//! Property tests: every parser takes arbitrary bytes (as lossy text, or raw for device-tree
//! values and ELF) without panicking, and whole board trees full of garbage give a report.

use npu_agent::parse::*;
use proptest::prelude::*;

fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..2048)
            .prop_map(|b| String::from_utf8_lossy(&b).into_owned()),
        // Near-miss shapes: real keys with hostile values.
        proptest::collection::vec(
            (
                prop_oneof![
                    Just("MemTotal:"),
                    Just("CmaTotal:"),
                    Just("Node 0, zone"),
                    Just("Max open files"),
                    Just("Package:"),
                    Just("Status:"),
                    Just("Version:"),
                    Just("cma="),
                    Just("extraargs="),
                    Just("dtoverlay=cma,cma-"),
                    Just("errno:"),
                    Just("cma_alloc: alloc failed, req-size:"),
                    Just("HAILO_X("),
                    Just("Driver version ("),
                    Just("append")
                ],
                "[ -~\\t]{0,40}"
            ),
            0..40
        )
        .prop_map(|lines| lines
            .into_iter()
            .map(|(k, v)| format!("{k}{v}\n"))
            .collect()),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn text_parsers_never_panic(t in text()) {
        let _ = meminfo::parse_meminfo(&t);
        let _ = limits::parse_limits(&t);
        let _ = buddyinfo::parse_buddyinfo(&t);
        let _ = vmstat::parse_vmstat(&t);
        let _ = dpkg::parse_dpkg_status(&t);
        let _ = kv::parse_kv(&t);
        let _ = cmdline::tokenize(&t);
        let _ = cmdline::find_cma(&t);
        let _ = size::parse_size_bytes(&t);
        let _ = version::Version::parse_loose(&t);
        for kind in [bootfile::BootFileKind::ArmbianEnv, bootfile::BootFileKind::OrangepiEnv, bootfile::BootFileKind::PiCmdline,
                     bootfile::BootFileKind::PiConfig, bootfile::BootFileKind::Extlinux, bootfile::BootFileKind::KernelCmdline] {
            let _ = bootfile::find_boot_cma(kind, &t);
        }
        for line in t.lines() {
            let _ = logline::classify(line);
            let _ = npu_agent::parse::workload::is_failure(line);
            let _ = npu_agent::parse::workload::class_of(line);
            let _ = npu_agent::parse::workload::model_mismatch(line);
            let _ = npu_agent::parse::workload::model_file(line);
            let _ = size::memparse(line);
            let _ = cmdline::parse_cma_value(line);
        }
        let _ = npu_agent::probe::parse_dpkg_log(&t);
        let _ = llmargs::shell_words(&t).map(|w| llmargs::parse_llm_args(&w));
        let _ = nvsmi::parse_query_gpu(&t);
        let _ = nvsmi::parse_compute_apps(&t);
        let _ = llamalog::parse_runs(&t.lines().map(str::to_string).collect::<Vec<_>>());
        let _ = numa::parse_numa_maps(&t, &[]);
        let _ = numa::parse_node_list(&t);
        let _ = npu_agent::profile::parse_profile("fuzz.toml", &t);
        if let Ok(cores) = npu_agent::probe::sensors::parse_rknpu_load(&t) {
            prop_assert!(!cores.is_empty() && cores.iter().all(|c| *c <= 100));
        }
        let _ = npu_agent::probe::sensors::parse_stat_cpu_ticks(&t);
        let lines: Vec<String> = t.lines().map(str::to_string).collect();
        prop_assert!(npu_agent::parse::throughput::samples(&lines).iter().all(|s| s.fps.is_finite() && s.fps >= 0.0));
        let _ = npu_agent::probe::stack::parse_os_release(&t);
        let _ = npu_agent::probe::container_of_cgroup(&t);
    }

    #[test]
    fn byte_parsers_never_panic(b in proptest::collection::vec(any::<u8>(), 0..4096)) {
        let _ = devicetree::string(&b);
        let _ = devicetree::string_list(&b);
        if let Ok(c) = devicetree::cells(&b) {
            let _ = devicetree::cells_to_u64(&c);
        }
        let _ = npu_agent::probe::elf_needed(&b);
        let mut g = b"GGUF\x03\0\0\0".to_vec();
        g.extend_from_slice(&b);
        for bytes in [&b[..], &g[..]] {
            if let Ok(h) = gguf::parse_header(bytes) {
                for i in 0..h.tensors.len() {
                    let _ = h.tensor_bytes(i, Some(bytes.len() as u64));
                }
            }
        }
    }

    #[test]
    fn meminfo_values_round_trip(total in 1u64..(1 << 39), cma in 0u64..(1 << 30)) {
        let t = format!("MemTotal: {total} kB\nMemFree: 1 kB\nBuffers: 0 kB\nCached: 0 kB\nSwapCached: 0 kB\nActive: 0 kB\nInactive: 0 kB\nSwapTotal: 0 kB\nSwapFree: 0 kB\nDirty: 0 kB\nWriteback: 0 kB\nMapped: 0 kB\nSlab: 0 kB\nCommitted_AS: 0 kB\nVmallocTotal: 0 kB\nVmallocUsed: 0 kB\nVmallocChunk: 0 kB\nCmaTotal: {cma} kB\nCmaFree: 0 kB\n");
        let m = meminfo::parse_meminfo(&t).unwrap();
        prop_assert_eq!(m.mem_total_bytes, Some(total * 1024));
        prop_assert_eq!(m.cma_total_bytes, Some(cma * 1024));
    }

    #[test]
    fn memparse_reads_decimal_hex_and_suffixes(n in 1u64..(1 << 20), s in 0usize..5, garbage in "[^0-9a-fA-FxX]{0,6}") {
        let (suffix, shift) = [("", 0), ("K", 10), ("m", 20), ("G", 30), ("t", 40)][s];
        let want = n << shift;
        let dec = format!("{n}{suffix}");
        let hex = format!("{n:#x}{suffix}");
        prop_assert_eq!(size::memparse(&dec), Some((want, "")));
        prop_assert_eq!(size::memparse(&hex).map(|v| v.0), Some(want));
        let c = cmdline::parse_cma_value(&format!("{n}{suffix}{garbage}"));
        // Text after the size never changes what the kernel reserves (it is ignored or a placement).
        if !garbage.starts_with(|ch: char| "KkMmGgTtPpEe".contains(ch)) || !suffix.is_empty() {
            prop_assert_eq!(c.size_bytes, Some(want));
        }
        prop_assert!(c.size_is_number);
    }
}

/// Every file a probe reads, filled with the same garbage: `check` still reports every check.
#[test]
fn garbage_tree_gives_a_full_report() {
    let files = [
        "proc/meminfo",
        "proc/buddyinfo",
        "proc/vmstat",
        "proc/cmdline",
        "proc/uptime",
        "proc/modules",
        "proc/device-tree/model",
        "proc/device-tree/compatible",
        "proc/sys/kernel/osrelease",
        "proc/sys/fs/file-nr",
        "proc/42/comm",
        "proc/42/cmdline",
        "proc/42/limits",
        "proc/42/fd/3",
        "var/log/hailort.log",
        "var/lib/dpkg/status",
        "var/log/dpkg.log",
        "var/log/kern.log",
        "boot/armbianEnv.txt",
        "boot/firmware/cmdline.txt",
        "boot/firmware/config.txt",
        "sys/kernel/debug/rknpu/version",
        "sys/bus/pci/devices/0000:01:00.0/vendor",
        "sys/bus/pci/devices/0000:01:00.0/device",
        "sys/bus/pci/devices/0000:01:00.0/driver",
        "etc/os-release",
        "etc/armbian-release",
        "etc/security/limits.conf",
        "proc/device-tree/reserved-memory/linux,cma/alloc-ranges",
        "sys/class/thermal/thermal_zone0/type",
        "sys/class/thermal/thermal_zone0/temp",
        "sys/class/thermal/thermal_zone0/trip_point_0_type",
        "sys/class/thermal/thermal_zone0/trip_point_0_temp",
        "sys/class/hwmon/hwmon0/name",
        "sys/class/hwmon/hwmon0/in0_lcrit_alarm",
        "sys/kernel/debug/rknpu/load",
        "sys/class/devfreq/fdab0000.npu/cur_freq",
    ];
    let mut runner = proptest::test_runner::TestRunner::new(ProptestConfig {
        cases: 24,
        ..ProptestConfig::default()
    });
    runner
        .run(&proptest::collection::vec(any::<u8>(), 0..600), |garbage| {
            let dir = tempfile::tempdir().unwrap();
            for f in files {
                let p = dir.path().join(f);
                std::fs::create_dir_all(p.parent().unwrap()).unwrap();
                std::fs::write(&p, &garbage).unwrap();
            }
            // Also name the process as a workload so its garbage limits are parsed.
            std::fs::write(dir.path().join("proc/42/comm"), "llm_demo\n").unwrap();
            // And the hwmon as the Pi's under-voltage sensor, so its garbage alarm is read.
            std::fs::write(dir.path().join("sys/class/hwmon/hwmon0/name"), "rpi_volt\n").unwrap();
            let root = npu_agent::root::SysRoot::new(dir.path());
            let d = npu_agent::diagnose::diagnose(&root, &npu_agent::diagnose::ProfileChoice::Auto)
                .unwrap();
            for id in npu_agent::check::CHECK_IDS {
                prop_assert!(d.report.findings.iter().any(|f| f.id == *id), "no {}", id);
            }
            prop_assert!(serde_json::to_string(&d.report).is_ok());
            Ok(())
        })
        .unwrap();
}

// The agent's own small parsers replaced general libraries to keep the static binary small
// (/proc/<pid>/limits: procfs-core; dpkg.log stamps and RFC 3339: the `time` crate). These
// properties hold them to the libraries' results, which stay dev-dependencies for this purpose.

/// `/proc/<pid>/limits` rows with their unit column (`None`: the unit-less priority rows).
const LIMIT_ROWS: [(&str, Option<&str>); 16] = [
    ("Max cpu time", Some("seconds")),
    ("Max file size", Some("bytes")),
    ("Max data size", Some("bytes")),
    ("Max stack size", Some("bytes")),
    ("Max core file size", Some("bytes")),
    ("Max resident set", Some("bytes")),
    ("Max processes", Some("processes")),
    ("Max open files", Some("files")),
    ("Max locked memory", Some("bytes")),
    ("Max address space", Some("bytes")),
    ("Max file locks", Some("locks")),
    ("Max pending signals", Some("signals")),
    ("Max msgqueue size", Some("bytes")),
    ("Max nice priority", None),
    ("Max realtime priority", None),
    ("Max realtime timeout", Some("us")),
];

fn limit_value() -> impl Strategy<Value = String> {
    prop_oneof![
        30 => Just("unlimited".to_string()),
        30 => (0u64..u64::MAX).prop_map(|n| n.to_string()),
        30 => (0u64..100_000).prop_map(|n| n.to_string()),
        1 => Just("-1".to_string()),
        1 => Just("lots".to_string()),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// Limits tables (rows shuffled, dropped or repeated; values numbers, `unlimited` or
    /// garbage; extra spaces): the agent's reading equals procfs-core's.
    #[test]
    fn limits_agree_with_procfs_core(
        present in proptest::collection::vec((proptest::bool::weighted(0.95), limit_value(), limit_value(), 1usize..8), 16),
        extra in proptest::collection::vec((0usize..16, limit_value(), limit_value(), 1usize..8), 0..4),
        header in any::<bool>(),
    ) {
        let rows: Vec<(usize, String, String, usize)> = present
            .into_iter()
            .enumerate()
            .filter(|(_, (on, ..))| *on)
            .map(|(i, (_, soft, hard, pad))| (i, soft, hard, pad))
            .chain(extra)
            .collect();
        let mut t = String::new();
        if header {
            t.push_str("Limit                     Soft Limit           Hard Limit           Units     \n");
        }
        for (i, soft, hard, pad) in &rows {
            let (name, unit) = LIMIT_ROWS[*i];
            let gap = " ".repeat(*pad);
            t.push_str(&format!("{name}{gap}{soft}{gap}{hard}{gap}{}\n", unit.unwrap_or("")));
        }
        let ours = limits::parse_limits(&t);
        use procfs_core::FromBufRead;
        match procfs_core::process::Limits::from_buf_read(t.as_bytes()) {
            Ok(l) => {
                let ours = ours.expect("procfs-core read it");
                let v = |x: procfs_core::process::LimitValue| match x {
                    procfs_core::process::LimitValue::Unlimited => None,
                    procfs_core::process::LimitValue::Value(n) => Some(n),
                };
                prop_assert_eq!(ours.nofile.soft, v(l.max_open_files.soft_limit));
                prop_assert_eq!(ours.nofile.hard, v(l.max_open_files.hard_limit));
                prop_assert_eq!(ours.memlock_bytes.soft, v(l.max_locked_memory.soft_limit));
                prop_assert_eq!(ours.memlock_bytes.hard, v(l.max_locked_memory.hard_limit));
            }
            Err(_) => prop_assert!(ours.is_err(), "{:?}", ours),
        }
    }

    /// RFC 3339 timestamps: the agent's formatter writes what the `time` crate writes.
    #[test]
    fn rfc3339_agrees_with_time(unix_s in 0i64..253_402_300_800, nanos in prop_oneof![Just(0u32), 0u32..1_000_000_000, (0u32..1000).prop_map(|n| n * 1_000_000)]) {
        let t = time::OffsetDateTime::from_unix_timestamp(unix_s).unwrap()
            + time::Duration::nanoseconds(i64::from(nanos));
        let want = t.format(&time::format_description::well_known::Rfc3339).unwrap();
        prop_assert_eq!(npu_agent::sys::time::rfc3339_utc(unix_s as u64, nanos), want);
    }

    /// dpkg.log stamps: the agent's reading equals the `time` crate's
    /// `[year]-[month]-[day] [hour]:[minute]:[second]` on well-formed and near-miss stamps.
    #[test]
    fn dpkg_stamps_agree_with_time(
        y in 0u32..10_000, mo in 0u32..14, d in 0u32..33, h in 0u32..26, mi in 0u32..62, s in 0u32..62,
    ) {
        let (date, clock) = (format!("{y:04}-{mo:02}-{d:02}"), format!("{h:02}:{mi:02}:{s:02}"));
        let fmt = time::macros::format_description!("[year]-[month]-[day] [hour]:[minute]:[second]");
        let want = time::PrimitiveDateTime::parse(&format!("{date} {clock}"), fmt)
            .ok()
            .map(|t| t.assume_utc().unix_timestamp());
        prop_assert_eq!(npu_agent::sys::time::unix_from_date_time(&date, &clock), want);
    }
}
