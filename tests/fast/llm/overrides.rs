//! llama.cpp `-ot` rules, GGUF layouts and the placement they give (OWN-10 to OWN-15, DeepSeek, Qwen3, ik_llama).

use super::*;

// ---------------------------------------------------------------------------------------------
// The reader against gguf-py

#[test]
fn reader_agrees_with_gguf_py_on_every_type() {
    let dir = repo().join("tests/fixtures/gguf");
    let file = std::fs::read(dir.join("reference-types.gguf")).unwrap();
    let reference: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("reference-types.json")).unwrap())
            .unwrap();
    assert_eq!(reference["file_size"].as_u64().unwrap(), file.len() as u64);
    let h = reader::parse_header(&file).unwrap();
    let refs = reference["tensors"].as_array().unwrap();
    assert_eq!(h.tensors.len(), refs.len());
    assert!(
        refs.len() >= 20,
        "the reference covers the types the agent sizes"
    );
    for (i, (t, r)) in h.tensors.iter().zip(refs).enumerate() {
        assert_eq!(t.name, r["name"].as_str().unwrap());
        assert_eq!(u64::from(t.ty), r["type"].as_u64().unwrap(), "{}", t.name);
        let ne: Vec<u64> = r["ne"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap())
            .collect();
        assert_eq!(t.dims, ne, "{}", t.name);
        let (b, exact) = h.tensor_bytes(i, Some(file.len() as u64)).unwrap();
        assert!(
            exact,
            "{} ({}) is in the agent's type table",
            t.name, r["type_name"]
        );
        assert_eq!(
            b,
            r["n_bytes"].as_u64().unwrap(),
            "{} ({})",
            t.name,
            r["type_name"]
        );
        assert_eq!(
            h.data_start + t.offset,
            r["data_offset"].as_u64().unwrap(),
            "{}",
            t.name
        );
    }
    let end = h.data_end().unwrap();
    assert!(
        end <= file.len() as u64 && file.len() as u64 - end < h.alignment,
        "data end {end} vs file {}",
        file.len()
    );
}

#[test]
fn test_writer_and_agent_table_agree_on_deepseek_v3() {
    // 61 layers, 256 experts: the real DeepSeek-V3 tensor list.
    let tensors = deepseek_tensors(61, 3, 256);
    assert_eq!(tensors.len(), 1 + 3 * 12 + 58 * 17 + 2);
    let h = reader::parse_header(&header(&deepseek_kv(61, 256), &tensors)).unwrap();
    assert_eq!(h.arch_u64("block_count"), Some(61));
    let mut total = 0;
    for (i, (name, ne, ty)) in tensors.iter().enumerate() {
        let (b, exact) = h.tensor_bytes(i, None).unwrap();
        assert!(exact);
        assert_eq!(b, bytes(ne, *ty), "{name}");
        total += b;
    }
    // 58 MoE layers x (2 x 2113929216 + 3082813440) bytes of routed experts.
    assert_eq!(ds_layer_expert_bytes(256), 7_310_671_872);
    let expert_total: u64 = tensors
        .iter()
        .filter(|t| is_expert(&t.0))
        .map(|t| bytes(&t.1, t.2))
        .sum();
    assert_eq!(expert_total, 58 * 7_310_671_872);
    assert_eq!(
        total, 434_703_548_416,
        "the whole 61-layer Q4_K_M-like model (gguf-py's table gives the same)"
    );
}

#[test]
fn own10_balancing_on_two_nodes_fails_with_the_sysctl_remedy() {
    let (code, r) = check(&board("own-x86-moe-numa2-balancing-on"), &[]);
    assert_eq!(code, 1);
    assert_eq!(r["profile"], "x86-hybrid-moe");
    let f = one(&r, "kernel.numa_balancing");
    assert_eq!(f["status"], "fail");
    assert_eq!(f["observed"]["numa_balancing"], 1);
    assert_eq!(f["observed"]["numa_nodes"], serde_json::json!([0, 1]));
    assert_eq!(f["expected"]["numa_balancing"], 0);
    let remedy = f["remedy"].as_str().unwrap();
    assert!(
        remedy.contains("sudo sysctl -w kernel.numa_balancing=0"),
        "{remedy}"
    );
    assert!(remedy.contains("/etc/sysctl.d/"), "{remedy}");
    let p = &f["observed"]["processes"][0];
    assert_eq!(p["pid"], 4242);
    assert_eq!(p["interleaved"], false);
    // 94% of 19660800 pages of 4 KiB on node 0.
    assert_eq!(
        p["model_bytes_by_node"]["node0"],
        (19_660_800f64 * 0.94) as u64 * 4096
    );
    assert!(
        summary(f).contains("policy default (not interleaved)"),
        "{}",
        summary(f)
    );
}

#[test]
fn own11_guide_command_line_passes_with_exact_bytes() {
    let (code, r) = check(&board("own-x86-moe-numa2-guide-cmdline-healthy"), &[]);
    assert_eq!(code, 0, "{r}");
    let tensors = fixture_model();
    let ot = one(&r, "llm.override_tensor");
    assert_eq!(ot["status"], "pass", "{}", summary(ot));
    assert_eq!(ot["observed"]["routed_expert_tensors"], 33);
    assert_eq!(
        ot["observed"]["routed_expert_bytes"],
        11 * ds_layer_expert_bytes(256)
    );
    assert_eq!(ot["observed"]["experts_on_gpu"], serde_json::json!([]));
    let gpu = guide_gpu_bytes(&tensors);
    assert_eq!(ot["observed"]["gpu_weight_bytes"], gpu);
    assert_eq!(ot["observed"]["rule_matches"][0]["matched"], 33);
    assert_eq!(ot["observed"]["rule_matches"][0]["applied"], 33);
    // Three shards were read: the first shard alone has 100 tensors.
    assert!(
        ot["evidence"][1]["text"]
            .as_str()
            .unwrap()
            .contains("226 tensors"),
        "{}",
        ot["evidence"]
    );
    let v = one(&r, "llm.vram_budget");
    assert_eq!(v["status"], "pass", "{}", summary(v));
    let kv = 576 * 2 * 32768 * 14; // -mla 3: latent K only, f16, 32768 cells, 14 layers
    assert_eq!(v["observed"]["weights_gpu_bytes"], gpu);
    assert_eq!(v["observed"]["kv_cache_gpu_bytes"], kv);
    assert_eq!(v["observed"]["need_bytes"], gpu + kv + GIB);
    assert_eq!(v["observed"]["vram_free_bytes"], 23720u64 << 20);
    let n = one(&r, "kernel.numa_balancing");
    assert_eq!(n["status"], "pass");
    assert_eq!(n["observed"]["processes"][0]["interleaved"], true);
}

#[test]
fn own12_single_digit_class_names_the_two_digit_layers() {
    let (_, r) = check(&board("own-x86-moe-ot-single-digit-layers"), &[]);
    let ot = one(&r, "llm.override_tensor");
    assert_eq!(ot["status"], "fail");
    assert_eq!(names(&ot["observed"]["experts_on_gpu"]), experts(10..14));
    assert_eq!(
        ot["observed"]["experts_on_gpu_bytes"],
        4 * ds_layer_expert_bytes(256)
    );
    let s = summary(ot);
    assert!(
        s.contains("blk.N.ffn_{gate,up,down}_exps.weight for N in 10-13"),
        "{s}"
    );
    assert!(
        s.contains("covers only layers with 1 digit(s) (blk.3-9)"),
        "{s}"
    );
    assert_eq!(ot["remedy"], format!("write rule 1 as -ot '{GUIDE}'"));
    let v = one(&r, "llm.vram_budget");
    assert_eq!(v["status"], "fail");
    let tensors = fixture_model();
    let need =
        guide_gpu_bytes(&tensors) + 4 * ds_layer_expert_bytes(256) + 576 * 2 * 32768 * 14 + GIB;
    assert_eq!(v["observed"]["need_bytes"], need);
    let opts = v["observed"]["options"].as_array().unwrap();
    let ot_opt = opts
        .iter()
        .find(|o| o["flag"].as_str().unwrap().starts_with("-ot"))
        .unwrap();
    assert_eq!(ot_opt["saves_bytes"], 4 * ds_layer_expert_bytes(256));
    assert_eq!(ot_opt["closes_gap"], true);
    let ctk = opts.iter().find(|o| o["flag"] == "-ctk q8_0").unwrap();
    assert_eq!(ctk["saves_bytes"], 14 * 32768 * (576 * 2 - 576 / 32 * 34));
    assert_eq!(ctk["closes_gap"], false);
}

#[test]
fn own13_misspelt_name_is_spelled_out() {
    let (_, r) = check(&board("own-x86-moe-ot-misspelt-exps"), &[]);
    let ot = one(&r, "llm.override_tensor");
    assert_eq!(ot["status"], "fail");
    assert_eq!(names(&ot["observed"]["experts_on_gpu"]), experts(3..14));
    assert_eq!(ot["observed"]["rule_matches"][0]["matched"], 0);
    let s = summary(ot);
    assert!(
        s.contains("`_exp.weight` is in no tensor name of this model (did you mean `_exps.weight`"),
        "{s}"
    );
    assert_eq!(ot["remedy"], format!("write rule 1 as -ot '{GUIDE}'"));
    assert_eq!(one(&r, "llm.vram_budget")["status"], "fail");
}

#[test]
fn own14_dropped_rule_puts_every_expert_on_the_gpu() {
    let (_, r) = check(&board("own-x86-moe-no-ot-ngl99"), &[]);
    let ot = one(&r, "llm.override_tensor");
    assert_eq!(ot["status"], "fail");
    assert_eq!(names(&ot["observed"]["experts_on_gpu"]), experts(3..14));
    assert!(
        summary(ot)
            .contains("no -ot rule keeps the experts in RAM: -ngl 99 offloads 14 of 14 layers"),
        "{}",
        summary(ot)
    );
    assert_eq!(ot["remedy"], format!("add -ot '{GUIDE}'"));
    let v = one(&r, "llm.vram_budget");
    let tensors = fixture_model();
    let all_gpu: u64 = tensors
        .iter()
        .filter(|t| t.0 != "token_embd.weight")
        .map(|t| bytes(&t.1, t.2))
        .sum();
    assert_eq!(v["observed"]["weights_gpu_bytes"], all_gpu);
    let opts = v["observed"]["options"].as_array().unwrap();
    assert_eq!(opts[0]["flag"], format!("-ot '{GUIDE}' as the first rule"));
    assert_eq!(opts[0]["saves_bytes"], 11 * ds_layer_expert_bytes(256));
    // The -ngl option is the largest layer count that fits, computed here independently.
    let ngl_opt = opts
        .iter()
        .find(|o| o["flag"].as_str().unwrap().starts_with("-ngl "))
        .unwrap();
    let k: u64 = ngl_opt["flag"].as_str().unwrap()[5..].parse().unwrap();
    let free = 23720u64 << 20;
    let need_at = |k: u64| -> u64 {
        let w: u64 = tensors
            .iter()
            .filter(|(n, _, _)| {
                let layer = n
                    .strip_prefix("blk.")
                    .and_then(|r| r.split('.').next())
                    .and_then(|x| x.parse::<u64>().ok());
                match layer {
                    Some(l) => l >= 14u64.saturating_sub(k),
                    None => n.starts_with("output") && k > 14,
                }
            })
            .map(|(_, ne, ty)| bytes(ne, *ty))
            .sum();
        let kv = 576 * 2 * 32768 * k.min(14);
        w + kv + if w + kv > 0 { GIB } else { 0 }
    };
    assert!(
        need_at(k) <= free && need_at(k + 1) > free,
        "-ngl {k}: {} / {}",
        need_at(k),
        need_at(k + 1)
    );
    assert_eq!(
        ngl_opt["saves_bytes"],
        v["observed"]["need_bytes"].as_u64().unwrap() - need_at(k)
    );
}

#[test]
fn own15_unescaped_dots_pass_with_a_note() {
    let (code, r) = check(&board("own-x86-moe-ot-unescaped-dots"), &[]);
    assert_eq!(code, 0);
    let ot = one(&r, "llm.override_tensor");
    assert_eq!(ot["status"], "pass");
    assert!(summary(ot).contains("has unescaped `.` (any character); on this model it matches the same 33 tensors as `\\.` would"), "{}", summary(ot));
}

#[test]
fn deepseek_v3_full_size_guide_rule() {
    let h = Host::new(2, "0", 23720);
    h.deepseek();
    let r = h.run(&format!(
        "{DS} -ngl 99 -ot '{GUIDE}' -c 8192 -fa -mla 3 -fmoe"
    ));
    assert_eq!(r["profile"], "x86-hybrid-moe");
    let ot = one(&r, "llm.override_tensor");
    assert_eq!(ot["status"], "pass", "{}", summary(ot));
    assert_eq!(ot["observed"]["routed_expert_tensors"], 174);
    assert_eq!(ot["observed"]["routed_expert_bytes"], 58 * 7_310_671_872u64);
    assert_eq!(ot["observed"]["engine"], "ik_llama.cpp");
    let gpu = guide_gpu_bytes(&deepseek_tensors(61, 3, 256));
    assert_eq!(ot["observed"]["gpu_weight_bytes"], gpu);
    let v = one(&r, "llm.vram_budget");
    let kv = 576 * 2 * 8192 * 61;
    assert_eq!(v["observed"]["kv_cache_gpu_bytes"], kv);
    assert_eq!(v["observed"]["need_bytes"], gpu + kv + GIB);
    assert_eq!(v["status"], "pass", "{}", summary(v));
}

#[test]
fn deepseek_v3_single_digit_class_leaves_layers_10_to_60() {
    let h = Host::new(1, "0", 23720);
    h.deepseek();
    let r = h.run(&format!(
        r"{DS} -ngl 99 -ot 'blk\.[0-9]\.ffn_.*_exps\.weight=CPU' -c 8192 -fa -mla 3"
    ));
    let ot = one(&r, "llm.override_tensor");
    assert_eq!(ot["status"], "fail");
    assert_eq!(names(&ot["observed"]["experts_on_gpu"]), experts(10..61));
    assert_eq!(
        ot["observed"]["experts_on_gpu_bytes"],
        51 * 7_310_671_872u64
    );
    assert!(summary(ot).contains("for N in 10-60"), "{}", summary(ot));
    let v = one(&r, "llm.vram_budget");
    assert_eq!(v["status"], "fail");
    assert!(summary(v).contains("closes the gap: -ot"), "{}", summary(v));
}

#[test]
fn partial_ngl_without_ot_offloads_the_last_layers() {
    let h = Host::new(1, "0", 23720);
    h.deepseek();
    let r = h.run(&format!("{DS} -ngl 40 -c 4096 -mla 3 -fa"));
    let ot = one(&r, "llm.override_tensor");
    assert_eq!(ot["status"], "fail");
    // -ngl 40 on 61 layers: blk.21..60 on the GPU, the output layer not.
    assert_eq!(names(&ot["observed"]["experts_on_gpu"]), experts(21..61));
    assert!(
        summary(ot).contains("-ngl 40 offloads 40 of 61 layers"),
        "{}",
        summary(ot)
    );
    let v = one(&r, "llm.vram_budget");
    let t = deepseek_tensors(61, 3, 256);
    let w: u64 = t
        .iter()
        .filter(|(n, _, _)| {
            n.strip_prefix("blk.")
                .and_then(|r| r.split('.').next())
                .and_then(|x| x.parse::<u64>().ok())
                .is_some_and(|l| l >= 21)
        })
        .map(|(_, ne, ty)| bytes(ne, *ty))
        .sum();
    assert_eq!(v["observed"]["weights_gpu_bytes"], w);
    assert_eq!(v["observed"]["kv_cache_gpu_bytes"], 576 * 2 * 4096 * 40);
}

#[test]
fn qwen3_upstream_kv_cache_and_cpu_moe() {
    let h = Host::new(1, "0", 23720);
    h.qwen();
    let r = h.run(&format!("{QW} -ngl 99 --cpu-moe -c 32768"));
    let ot = one(&r, "llm.override_tensor");
    assert_eq!(ot["status"], "pass", "{}", summary(ot));
    assert_eq!(ot["observed"]["routed_expert_tensors"], 94 * 3);
    assert_eq!(ot["observed"]["engine"], "llama.cpp");
    let v = one(&r, "llm.vram_budget");
    // 4 KV heads x 128 for K and for V, f16, 32768 cells, 94 layers.
    let kv: u64 = 94 * 2 * (4 * 128 * 2) * 32768;
    assert_eq!(kv, 6_308_233_216);
    assert_eq!(v["observed"]["kv_cache_gpu_bytes"], kv);
    let w = guide_gpu_bytes(&qwen3moe_tensors(94));
    assert_eq!(v["observed"]["weights_gpu_bytes"], w);
    // -ctk q8_0 halves K roughly: 512 elements at 34/32 bytes instead of 2.
    let opts = v["observed"]["options"].as_array().unwrap();
    assert_eq!(
        opts.iter()
            .find(|o| o["flag"] == "-ctk q8_0")
            .map(|o| o["saves_bytes"].clone()),
        Some((94 * 32768 * (1024 - 544)).into()),
        "{opts:?}"
    );
    assert!(
        opts.iter().all(|o| o["flag"] != "-ctv q8_0"),
        "no -fa: no quantized V offered"
    );
    assert!(
        opts.iter()
            .all(|o| !o["flag"].as_str().unwrap().starts_with("-mla")),
        "upstream has no -mla"
    );
}

#[test]
fn qwen3_n_cpu_moe_is_deliberate() {
    let h = Host::new(1, "0", 80_000);
    h.qwen();
    let r = h.run(&format!(
        "{QW} -ngl 99 --n-cpu-moe 90 -c 8192 -fa on -ctk q8_0 -ctv q8_0"
    ));
    let ot = one(&r, "llm.override_tensor");
    assert_eq!(ot["status"], "pass", "{}", summary(ot));
    assert_eq!(names(&ot["observed"]["experts_on_gpu"]), experts(90..94));
    assert!(
        summary(ot).contains("--n-cpu-moe leaves the other layers' experts to -ngl: deliberate"),
        "{}",
        summary(ot)
    );
    let v = one(&r, "llm.vram_budget");
    assert_eq!(v["observed"]["kv_cache_gpu_bytes"], 94 * 2 * 544 * 8192);
}

#[test]
fn ik_llama_without_mla_counts_full_attention_and_offers_mla_3() {
    let h = Host::new(1, "0", 23720);
    h.deepseek();
    let r = h.run(&format!("{DS} -ngl 99 -ot exps=CPU -c 8192 -fmoe"));
    let v = one(&r, "llm.vram_budget");
    // -mla 0: 128 heads x (K 192 + V 128) f16 per cell and layer.
    let kv0: u64 = 128 * (192 + 128) * 2 * 8192 * 61;
    assert_eq!(v["observed"]["kv_cache_gpu_bytes"], kv0);
    let opts = v["observed"]["options"].as_array().unwrap();
    let mla = opts
        .iter()
        .find(|o| o["flag"] == "-mla 3 (with -fa)")
        .expect("-mla 3 offered");
    assert_eq!(mla["saves_bytes"], kv0 - 576 * 2 * 8192 * 61);
    assert!(summary(v).contains("no -mla: assuming 0"), "{}", summary(v));
}

#[test]
fn shadowed_rule_and_its_fix() {
    let h = Host::new(1, "0", 23720);
    h.deepseek();
    let r = h.run(&format!(
        r"{DS} -ngl 99 -ot exps=CPU -ot 'blk\.3\.ffn_up_exps=CUDA0' -mla 3 -fa"
    ));
    let ot = one(&r, "llm.override_tensor");
    assert_eq!(ot["status"], "warn");
    assert!(summary(ot).contains(r"rule 2 (`blk\.3\.ffn_up_exps=CUDA0`) never applies: every tensor it matches (1) is taken first by rule 1 (`exps=CPU`)"), "{}", summary(ot));
    // In the right order the specific rule wins for its tensor: deliberate, a pass.
    let r = h.run(&format!(
        r"{DS} -ngl 99 -ot 'blk\.3\.ffn_up_exps=CUDA0' -ot exps=CPU -mla 3 -fa"
    ));
    let ot = one(&r, "llm.override_tensor");
    assert_eq!(ot["status"], "pass", "{}", summary(ot));
    assert_eq!(
        names(&ot["observed"]["experts_on_gpu"]),
        vec!["blk.3.ffn_up_exps.weight".to_string()]
    );
    assert_eq!(ot["observed"]["experts_on_gpu_by_ngl"], 0);
}

#[test]
fn buffer_names_and_malformed_rules_stop_llama_cpp() {
    let h = Host::new(1, "0", 23720);
    h.deepseek();
    for (ot, needle) in [
        ("exps=cpu", "buffer names are case-sensitive"),
        ("exps=CUDA1", "this host has 1 NVIDIA GPU(s)"),
        ("exps=GPU", "unknown buffer type"),
        (
            r"blk\.[0-9]{1,2}\.ffn_.*_exps=CPU",
            "a comma inside the regex",
        ),
        ("(?i)EXPS=CPU", "will refuse the pattern"),
    ] {
        let r = h.run(&format!("{DS} -ngl 99 -ot '{ot}' -mla 3 -fa"));
        let f = one(&r, "llm.override_tensor");
        assert_eq!(f["status"], "fail", "{ot}: {}", summary(f));
        assert!(summary(f).contains(needle), "{ot}: {}", summary(f));
    }
}

#[test]
fn anchors_lookaheads_and_over_broad_rules() {
    let h = Host::new(1, "0", 23720);
    h.deepseek();
    let r = h.run(&format!("{DS} -ngl 99 -ot '^ffn_.*_exps=CPU' -mla 3 -fa"));
    let f = one(&r, "llm.override_tensor");
    assert_eq!(f["status"], "fail");
    assert!(
        summary(f).contains("the `^` anchor ties it to the start of the name"),
        "{}",
        summary(f)
    );
    assert_eq!(f["remedy"], "write rule 1 as -ot 'ffn_.*_exps=CPU'");
    // A lookahead is valid ECMAScript that this agent does not evaluate: a warning, no guess.
    let r = h.run(&format!(
        r"{DS} -ngl 99 -ot 'blk\.(?!3\.)[0-9]+\.ffn_.*_exps=CPU' -mla 3 -fa"
    ));
    let f = one(&r, "llm.override_tensor");
    assert_eq!(f["status"], "warn", "{}", summary(f));
    assert!(summary(f).contains("does not evaluate"), "{}", summary(f));
    // ffn_.*=CPU also keeps the dense FFNs and shared experts in RAM: a note only.
    let r = h.run(&format!("{DS} -ngl 99 -ot 'ffn_.*=CPU' -mla 3 -fa"));
    let f = one(&r, "llm.override_tensor");
    assert_eq!(f["status"], "pass", "{}", summary(f));
    let t = deepseek_tensors(61, 3, 256);
    let extra = t
        .iter()
        .filter(|(n, _, _)| n.contains(".ffn_") && !is_expert(n))
        .count();
    assert_eq!(
        extra,
        3 * 4 + 58 * 5,
        "ffn_norm, dense FFNs, router and shared experts"
    );
    assert!(
        summary(f).contains(&format!(
            "also keeps {extra} tensors that -ngl 99 would offload in RAM"
        )),
        "{}",
        summary(f)
    );
}

#[test]
fn deliberate_partial_rule_warns_and_fails_only_when_it_does_not_fit() {
    let h = Host::new(1, "0", 80_000);
    h.deepseek();
    // Layers 57-60 keep their experts on an 80 GB GPU by a rule that names the others.
    let cmd = format!(
        r"{DS} -ngl 99 -ot 'blk\.([0-9]|[1-4][0-9]|5[0-6])\.ffn_.*_exps=CPU' -c 4096 -mla 3 -fa"
    );
    let r = h.run(&cmd);
    let f = one(&r, "llm.override_tensor");
    assert_eq!(f["status"], "warn", "{}", summary(f));
    assert_eq!(names(&f["observed"]["experts_on_gpu"]), experts(57..61));
    assert_eq!(
        one(&r, "llm.vram_budget")["status"],
        "pass",
        "{}",
        summary(one(&r, "llm.vram_budget"))
    );
    let small = Host::new(1, "0", 23720);
    small.deepseek();
    let r = small.run(&cmd);
    assert_eq!(one(&r, "llm.override_tensor")["status"], "fail");
    assert_eq!(one(&r, "llm.vram_budget")["status"], "fail");
}

#[test]
fn cpu_moe_pattern_follows_the_llama_cpp_build() {
    let h = Host::new(1, "0", 23720);
    h.fused(8);
    let cmd = format!("{FUSED} -ngl 99 -cmoe -c 4096");
    // Build 8284: the pattern has no gate_up, the fused experts stay on the GPU.
    h.log("version: 8284 (00de61534)\nbuilt with GNU 13.3.0 for Linux x86_64\n");
    let r = h.run(&cmd);
    let ot = one(&r, "llm.override_tensor");
    assert_eq!(ot["status"], "fail", "{}", summary(ot));
    assert_eq!(ot["observed"]["build"], 8284);
    assert!(
        summary(ot).contains("blk.N.ffn_gate_up_exps.weight for N in 0-7"),
        "{}",
        summary(ot)
    );
    assert!(
        summary(ot).contains(r"adds `\.ffn_(up|down|gate)_(ch|)exps`"),
        "{}",
        summary(ot)
    );
    let remedy = ot["remedy"].as_str().unwrap();
    assert!(
        remedy.starts_with(r"put -ot '\.ffn_(gate_up|down)_exps=CPU' first"),
        "{remedy}"
    );
    assert!(
        remedy.contains("update llama.cpp past build 8284"),
        "{remedy}"
    );
    // The proposed rule was checked on the model before it was printed.
    assert!(
        summary(ot).contains("checked on this model: it sends 8 more tensor(s) to the CPU"),
        "{}",
        summary(ot)
    );
    // A later build, or no build at all: today's pattern covers them.
    h.log("version: 8301 (1a2b3c4d5)\n");
    let ot = one(&h.run(&cmd), "llm.override_tensor").clone();
    assert_eq!(ot["status"], "pass", "{}", summary(&ot));
    assert_eq!(ot["observed"]["experts_on_gpu_by_ngl"], 0);
    std::fs::remove_file(h.root().join("var/log/llama-server.log")).unwrap();
    let ot = one(&h.run(&cmd), "llm.override_tensor").clone();
    assert_eq!(ot["status"], "pass", "{}", summary(&ot));
    assert_eq!(ot["observed"]["build"], Value::Null);
}

#[test]
fn ik_n_cpu_moe_order_and_layers_follow_the_build() {
    let h = Host::new(1, "0", 200_000);
    h.deepseek();
    let cmd = format!("{DS} -ngl 99 --n-cpu-moe 5 -ot exps=CUDA0 -c 4096 -mla 3 -fa");
    let on_gpu = |build: u32| {
        h.log(&format!("INFO [                    main] build info | tid=\"1\" timestamp=1 build={build} commit=\"abcdef1\"\n"));
        let r = h.run(&cmd);
        let ot = one(&r, "llm.override_tensor").clone();
        (
            ot["observed"]["experts_on_gpu"].as_array().unwrap().len(),
            summary(&ot).to_string(),
        )
    };
    // Build 4300: --n-cpu-moe's rules come first, in place: layers 3 and 4 (0-2 are dense) stay in RAM.
    assert_eq!(on_gpu(4300).0, 174 - 6);
    // Build 4400: the loader tries them after every -ot rule: exps=CUDA0 takes every expert.
    let (n, s) = on_gpu(4400);
    assert_eq!(n, 174, "{s}");
    assert!(s.contains("after every -ot rule"), "{s}");
    // Without the -ot rule: build 4400 takes layers 0-4, build 4800 the last five MoE layers.
    let cmd = format!("{DS} -ngl 99 --n-cpu-moe 5 -c 4096 -mla 3 -fa");
    h.log("main: build = 4800 (abcdef1)\n");
    let r = h.run(&cmd);
    let ot = one(&r, "llm.override_tensor");
    assert_eq!(names(&ot["observed"]["experts_on_gpu"]), experts(3..56));
    h.log("main: build = 4400 (abcdef1)\n");
    let r = h.run(&cmd);
    let ot = one(&r, "llm.override_tensor");
    assert_eq!(names(&ot["observed"]["experts_on_gpu"]), experts(5..61));
}

#[test]
fn missing_ngl_follows_the_program() {
    let h = Host::new(1, "0", 23720);
    h.deepseek();
    // ik_llama.cpp before build 4761: no layer on the GPU.
    h.log("main: build = 4700 (abcdef1)\n");
    let r = h.run(&format!("{DS} -c 4096 -mla 3 -fa"));
    let ot = one(&r, "llm.override_tensor");
    assert_eq!(ot["observed"]["ngl"], 0);
    assert!(
        summary(ot).contains("keeps every layer on the CPU"),
        "{}",
        summary(ot)
    );
    assert_eq!(one(&r, "llm.vram_budget")["status"], "pass");
    // From 4761 on: every layer when a GPU is present.
    h.log("main: build = 4800 (abcdef1)\n");
    let r = h.run(&format!("{DS} -c 4096 -mla 3 -fa"));
    let ot = one(&r, "llm.override_tensor");
    assert_eq!(ot["status"], "fail", "{}", summary(ot));
    assert!(
        summary(ot).contains("-ngl (unset) offloads 61 of 61 layers"),
        "{}",
        summary(ot)
    );
    assert_eq!(ot["remedy"], format!("add -ot '{GUIDE}'"));
    // llama.cpp without -ngl or overrides: --fit keeps routed experts in RAM until the rest fits.
    let h = Host::new(1, "0", 23720);
    h.qwen();
    let r = h.run(&format!("{QW} -c 8192"));
    let ot = one(&r, "llm.override_tensor");
    assert_eq!(ot["status"], "pass", "{}", summary(ot));
    assert!(summary(ot).contains("--fit"), "{}", summary(ot));
    assert!(
        summary(ot).contains("stay in RAM by llama.cpp's --fit"),
        "{}",
        summary(ot)
    );
    let v = one(&r, "llm.vram_budget");
    assert_ne!(v["status"], "fail", "{}", summary(v));
    let need = v["observed"]["need_bytes"].as_u64().unwrap();
    assert!(
        need <= (23720u64 << 20) - GIB,
        "fit leaves 1 GiB free: {need}"
    );
    // With an override --fit leaves the layers alone: every layer.
    let r = h.run(&format!("{QW} -ot exps=CPU -c 8192"));
    let ot = one(&r, "llm.override_tensor");
    assert!(
        summary(ot).contains("--fit does not place layers when overrides are given"),
        "{}",
        summary(ot)
    );
    assert_eq!(
        ot["observed"]["experts_on_gpu"].as_array().unwrap().len(),
        0
    );
}

#[test]
fn a_suggestion_that_only_moves_tensors_already_in_ram_is_not_offered() {
    let h = Host::new(1, "0", 23720);
    h.qwen();
    // --cpu-moe already keeps every expert in RAM; `down_expz` is one letter from a name whose
    // tensors are all on the CPU already: no "did you mean".
    let r = h.run(&format!("{QW} -ngl 99 --cpu-moe -ot down_expz=CPU -c 8192"));
    let ot = one(&r, "llm.override_tensor");
    assert_eq!(ot["status"], "warn", "{}", summary(ot));
    assert!(!summary(ot).contains("did you mean"), "{}", summary(ot));
    assert!(
        summary(ot).contains("its routed experts are named blk.N.ffn_down_exps.weight"),
        "{}",
        summary(ot)
    );
    assert!(
        !ot["remedy"].as_str().unwrap_or("").contains("write rule"),
        "{ot}"
    );
}

#[test]
fn when_no_rule_fits_the_other_levers_are_given_with_figures() {
    let h = Host::new(1, "0", 8000);
    h.qwen();
    let r = h.run(&format!("{QW} -ngl 99 -c 32768"));
    let v = one(&r, "llm.vram_budget");
    assert_eq!(v["status"], "fail");
    let s = summary(v);
    assert!(
        s.contains(&format!(
            "even with every routed expert in RAM (-ot '{GUIDE}') the GPU needs"
        )),
        "{s}"
    );
    assert!(s.contains("-ngl "), "{s}");
    assert!(s.contains("-c "), "{s}");
    assert!(
        s.contains("a smaller quant whose weights on the GPU are at most"),
        "{s}"
    );
}
