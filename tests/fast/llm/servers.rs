//! Finding the servers: processes, logs, NUMA balancing, VRAM, the profile match.

use super::*;

#[test]
fn running_process_with_relative_model_path_and_split_shards() {
    let h = Host::new(2, "1", 23720);
    let t = deepseek_tensors(61, 3, 256);
    // Two shards: names of the llama.cpp split form, split.count in the first.
    let mut kv = deepseek_kv(61, 256);
    kv.push(("split.no", Kv::U32(0)));
    kv.push(("split.count", Kv::U32(2)));
    write(
        &h.root().join("srv/m/ds-00001-of-00002.gguf"),
        &kv,
        &t[..500],
    );
    write(
        &h.root().join("srv/m/ds-00002-of-00002.gguf"),
        &[("split.no", Kv::U32(1)), ("split.count", Kv::U32(2))],
        &t[500..],
    );
    h.process(
        7001,
        "llama-server",
        &[
            "./llama-server",
            "-m",
            "m/ds-00001-of-00002.gguf",
            "-ngl",
            "99",
            "-ot",
            "exps=CPU",
            "-mla",
            "3",
            "-fa",
        ],
    );
    std::os::unix::fs::symlink("/srv", h.root().join("proc/7001/cwd")).unwrap();
    let (_, r) = check(h.root(), &[]);
    let f = one(&r, "llm.override_tensor");
    assert_eq!(f["status"], "pass", "{}", summary(f));
    assert_eq!(f["observed"]["model"], "/srv/m/ds-00001-of-00002.gguf");
    assert_eq!(f["observed"]["routed_expert_tensors"], 174);
    assert_eq!(one(&r, "kernel.numa_balancing")["status"], "fail");
    // A missing shard: skip with the reason, never a guess.
    std::fs::remove_file(h.root().join("srv/m/ds-00002-of-00002.gguf")).unwrap();
    let (_, r) = check(h.root(), &[]);
    let f = one(&r, "llm.override_tensor");
    assert_eq!(f["status"], "skip");
    assert!(
        summary(f).contains("ds-00002-of-00002.gguf"),
        "{}",
        summary(f)
    );
}

#[test]
fn two_servers_give_two_findings_each() {
    let h = Host::new(1, "0", 23720);
    h.deepseek().qwen();
    h.process(
        10,
        "llama-server",
        &[
            "llama-server",
            "-m",
            "/models/ds/DeepSeek-V3-Q4_K_M.gguf",
            "-ngl",
            "99",
            "-ot",
            "exps=CPU",
            "-mla",
            "3",
            "-fa",
        ],
    );
    h.process(
        11,
        "llama-server",
        &[
            "llama-server",
            "-m",
            "/models/qwen/Qwen3-235B-A22B-Q4_K_M.gguf",
            "-ngl",
            "99",
        ],
    );
    let (code, r) = check(h.root(), &[]);
    assert_eq!(code, 1);
    let ot: Vec<&str> = findings(&r, "llm.override_tensor")
        .iter()
        .map(|f| f["status"].as_str().unwrap())
        .collect();
    assert_eq!(ot, vec!["pass", "fail"]);
    assert_eq!(findings(&r, "llm.vram_budget").len(), 2);
}

#[test]
fn vram_without_nvidia_smi_is_information() {
    let h = Host::new(1, "0", 23720);
    h.deepseek();
    std::fs::remove_file(h.root().join("run/npu-agent/nvidia-smi.csv")).unwrap();
    let r = h.run(&format!("{DS} -ngl 99 -ot exps=CPU -c 8192 -mla 3 -fa"));
    let v = one(&r, "llm.vram_budget");
    assert_eq!(v["status"], "info");
    assert!(summary(v).contains("free VRAM unknown"), "{}", summary(v));
}

#[test]
fn unreadable_inputs_give_skip_or_error() {
    let h = Host::new(1, "0", 23720);
    h.put("models/bad.gguf", "GGUF\u{3}\0\0\0garbage");
    let r = h.run("llama-server -m /models/bad.gguf -ngl 99");
    assert_eq!(one(&r, "llm.override_tensor")["status"], "error");
    let r = h.run("llama-server -m /models/absent.gguf -ngl 99 -ot exps=cpu");
    let f = one(&r, "llm.override_tensor");
    assert_eq!(
        f["status"],
        "fail",
        "an unknown buffer stops llama.cpp with or without the model: {}",
        summary(f)
    );
    let r = h.run("llama-server -m /models/absent.gguf -ngl 99");
    assert_eq!(one(&r, "llm.override_tensor")["status"], "skip");
    let r = h.run("llama-server -ot 'x");
    assert_eq!(one(&r, "llm.override_tensor")["status"], "error");
    let r = h.run("llama-server -hf unsloth/DeepSeek-R1-GGUF -ngl 99");
    assert!(summary(one(&r, "llm.override_tensor")).contains("-hf/-mu"));
}

#[test]
fn ktransformers_is_found_and_not_judged_by_ot() {
    let h = Host::new(2, "0", 23720);
    h.process(
        99,
        "python3",
        &[
            "python3",
            "-m",
            "ktransformers.server.main",
            "--model_path",
            "/m",
            "--gguf_path",
            "/g",
        ],
    );
    let (_, r) = check(h.root(), &[]);
    let f = one(&r, "llm.override_tensor");
    assert_eq!(f["status"], "skip");
    assert!(summary(f).contains("KTransformers"), "{}", summary(f));
}

// ---------------------------------------------------------------------------------------------
// NUMA balancing states

#[test]
fn numa_balancing_states() {
    let status = |nodes: u32, value: &str, setup: &dyn Fn(&Host)| {
        let h = Host::new(nodes, value, 23720);
        setup(&h);
        let (_, r) = check(h.root(), &[]);
        let f = one(&r, "kernel.numa_balancing").clone();
        (
            f["status"].as_str().unwrap().to_string(),
            summary(&f).to_string(),
            f["remedy"].as_str().unwrap_or("").to_string(),
        )
    };
    assert_eq!(status(1, "1", &|_| {}).0, "pass");
    assert_eq!(status(2, "0", &|_| {}).0, "pass");
    // A bitmask: memory tiering alone (2) and both modes (3) still run the scanner.
    let (s, text, _) = status(2, "2", &|_| {});
    assert_eq!(s, "fail");
    assert!(text.contains("= 2, memory-tiering mode"), "{text}");
    let (s, text, _) = status(2, "3", &|_| {});
    assert_eq!(s, "fail");
    assert!(text.contains("= 3, normal and memory-tiering"), "{text}");
    assert_eq!(status(2, "x", &|_| {}).0, "error");
    // Two node directories, one with memory (a CPU-less or memory-less node): nothing to balance.
    assert_eq!(
        status(2, "1", &|h| h
            .put("sys/devices/system/node/has_memory", "0\n"))
        .0,
        "pass"
    );
    // Off now, but a sysctl file turns it on at the next boot.
    let (s, text, remedy) = status(2, "0", &|h| {
        h.put("etc/sysctl.d/50-tune.conf", "kernel.numa_balancing = 1\n")
    });
    assert_eq!(s, "warn");
    assert!(
        text.contains("/etc/sysctl.d/50-tune.conf line 1 sets it to 1 at the next boot"),
        "{text}"
    );
    assert!(remedy.contains("/etc/sysctl.d/50-tune.conf"), "{remedy}");
    // On, although a file sets 0: not applied.
    let (s, text, _) = status(2, "1", &|h| {
        h.put(
            "etc/sysctl.d/60-numa.conf",
            "# moe\nkernel/numa_balancing=0\n",
        )
    });
    assert_eq!(s, "fail");
    assert!(
        text.contains("/etc/sysctl.d/60-numa.conf line 2 sets 0 but it is not in effect"),
        "{text}"
    );
    // Off now, a file sets 2 at the next boot: any non-zero value turns it on.
    let (s, text, _) = status(2, "0", &|h| {
        h.put("etc/sysctl.d/50-tier.conf", "kernel.numa_balancing = 2\n")
    });
    assert_eq!(s, "warn");
    assert!(text.contains("sets it to 2 at the next boot"), "{text}");
}

#[test]
fn vllm_and_sglang_servers_are_named_by_numa_balancing() {
    let h = Host::new(2, "1", 23720);
    h.process(
        61,
        "vllm",
        &[
            "/usr/local/bin/vllm",
            "serve",
            "Qwen/Qwen3-30B-A3B",
            "--tensor-parallel-size",
            "2",
        ],
    );
    h.process(62, "VLLM::EngineCor", &["VLLM::EngineCore"]);
    let (_, r) = check(h.root(), &[]);
    assert_eq!(r["profile"], "x86-hybrid-moe");
    let f = one(&r, "kernel.numa_balancing");
    assert_eq!(f["status"], "fail");
    assert!(
        summary(f).contains("the vLLM server's threads"),
        "{}",
        summary(f)
    );
    assert!(
        f["remedy"]
            .as_str()
            .unwrap_or("")
            .contains("bind each GPU worker")
            || summary(f).contains("task_numa_work"),
        "{f}"
    );
    let ot = one(&r, "llm.override_tensor");
    assert_eq!(ot["status"], "skip");
    assert!(
        summary(ot).contains("(and 1 worker process(es)) runs vLLM"),
        "{}",
        summary(ot)
    );
}

#[test]
fn server_profile_matches_only_x86_with_gpu_or_server() {
    // NVIDIA GPU on x86_64.
    let h = Host::new(1, "0", 23720);
    assert_eq!(profile_of(&h, &[]), "x86-hybrid-moe");
    // The same GPU on aarch64 (a Jetson-like box): not this profile.
    h.put("proc/sys/kernel/arch", "aarch64\n");
    assert_eq!(profile_of(&h, &[]), "generic");
    // x86_64 without a GPU: generic, unless a server runs or a command line is given.
    let bare = tempfile::tempdir().unwrap();
    let b = Host { dir: bare };
    b.put("proc/sys/kernel/arch", "x86_64\n");
    assert_eq!(profile_of(&b, &[]), "generic");
    assert_eq!(
        profile_of(&b, &["--llm-cmdline", "llama-server -m /x.gguf"]),
        "x86-hybrid-moe"
    );
    // A command line given to check is not a running process: the reason says where it came from.
    let reason = |r: &Value| one(r, "board.identity")["observed"]["profile_reason"].to_string();
    let given = check(b.root(), &["--llm-cmdline", "llama-server -m /x.gguf"]).1;
    assert!(
        reason(&given).contains("--llm-cmdline runs llama-server"),
        "{}",
        reason(&given)
    );
    assert!(!reason(&given).contains("running"), "{}", reason(&given));
    b.process(5, "llama-server", &["llama-server"]);
    assert_eq!(profile_of(&b, &[]), "x86-hybrid-moe");
    let live = check(b.root(), &[]).1;
    assert!(
        reason(&live).contains("process llama-server running"),
        "{}",
        reason(&live)
    );
    // The shared x86 case (AMD XDNA NPU, no NVIDIA GPU, no llama process) stays generic.
    let (_, r) = check(&board("x86-xdna-memlock-2954mb-under-systemd"), &[]);
    assert_eq!(r["profile"], "generic");
    for id in [
        "kernel.numa_balancing",
        "llm.override_tensor",
        "llm.vram_budget",
    ] {
        let f = one(&r, id);
        assert_eq!(f["status"], "skip");
        assert!(
            summary(f).contains("has no server checks"),
            "{}",
            summary(f)
        );
    }
}

#[test]
fn profile_files_validate_pci_vendors() {
    let bad = "schema = 1\nid = \"x\"\nname = \"X\"\n[match]\npci_vendors = [\"nvidia\"]\n";
    let e = npu_agent::profile::parse_profile("x.toml", bad).unwrap_err();
    assert!(e.message.contains("pci_vendors[0]"), "{e}");
    assert_eq!(e.line, Some(5));
}

#[test]
fn the_server_log_outranks_the_prediction() {
    let h = Host::new(1, "0", 80_000);
    h.qwen();
    let cmd = format!("{QW} -ngl 99 -ot exps=CPU -c 8192");
    h.log(concat!(
        "version: 8400 (0badc0de1)\n",
        "load_tensors: offloaded 30/95 layers to GPU\n",
        "load_tensors:        CUDA0 model buffer size =  2000.00 MiB\n",
        "load_tensors:   CPU_Mapped model buffer size = 130000.00 MiB\n",
    ));
    let r = h.run(&cmd);
    let ot = one(&r, "llm.override_tensor");
    assert_eq!(ot["status"], "warn", "{}", summary(ot));
    assert!(
        summary(ot).contains("30/95 layers offloaded (this analysis expects 95)"),
        "{}",
        summary(ot)
    );
    assert!(
        summary(ot).contains("the log outranks this analysis"),
        "{}",
        summary(ot)
    );
    assert_eq!(ot["observed"]["log_agrees"], false);
    // A server that stopped at an unknown buffer type: the log says so, the rule analysis fails.
    h.log(
        "version: 8400 (0badc0de1)\nerror while handling argument \"-ot\": unknown buffer type\n",
    );
    let r = h.run(&cmd);
    let ot = one(&r, "llm.override_tensor");
    assert_eq!(ot["status"], "fail", "{}", summary(ot));
    assert!(
        summary(ot).contains("unknown buffer type"),
        "{}",
        summary(ot)
    );
    assert_ne!(one(&r, "llm.vram_budget")["status"], "fail");
    // The same lines naming another model are not this server's.
    h.log(concat!(
        "llama_model_loader: loaded meta data with 3 key-value pairs and 9 tensors from /models/other.gguf (version GGUF V3 (latest))\n",
        "load_tensors: offloaded 30/95 layers to GPU\n",
    ));
    let ot = one(&h.run(&cmd), "llm.override_tensor").clone();
    assert_eq!(ot["status"], "pass", "{}", summary(&ot));
    assert_eq!(ot["observed"]["log_agrees"], Value::Null);
}

#[test]
fn the_log_of_a_process_is_found_through_its_standard_error() {
    let h = Host::new(1, "0", 23720);
    h.qwen();
    h.process(
        77,
        "llama-server",
        &[
            "/usr/local/bin/llama-server",
            "-m",
            "/models/qwen/Qwen3-235B-A22B-Q4_K_M.gguf",
            "-ngl",
            "99",
            "--cpu-moe",
        ],
    );
    std::fs::create_dir_all(h.root().join("proc/77/fd")).unwrap();
    std::os::unix::fs::symlink("/srv/logs/server.err", h.root().join("proc/77/fd/2")).unwrap();
    h.put(
        "srv/logs/server.err",
        "version: 8100 (0123456789)\nload_tensors: offloaded 95/95 layers to GPU\n",
    );
    let (_, r) = check(h.root(), &[]);
    let ot = one(&r, "llm.override_tensor");
    assert_eq!(ot["observed"]["build"], 8100);
    assert!(
        ot["evidence"].to_string().contains("/srv/logs/server.err"),
        "{ot}"
    );
    assert!(
        summary(ot).contains("95/95 layers offloaded (as predicted)"),
        "{}",
        summary(ot)
    );
    // A link to a device or outside the tree is not read.
    std::fs::remove_file(h.root().join("proc/77/fd/2")).unwrap();
    std::os::unix::fs::symlink("/dev/pts/3", h.root().join("proc/77/fd/2")).unwrap();
    let (_, r) = check(h.root(), &[]);
    assert_eq!(
        one(&r, "llm.override_tensor")["observed"]["build"],
        Value::Null
    );
}
