//! `llm.vram_budget`: the GPU memory one command line's placement needs (weights kept on the GPU,
//! the KV cache, compute buffers) against what the GPU has free.

use super::*;

/// The `llm.vram_budget` finding and whether the placement fits.
pub(super) struct Budget {
    /// The finding.
    pub(super) finding: Finding,
    /// Everything fits in free VRAM (None: unknown).
    pub(super) fits: Option<bool>,
}

pub(super) fn vram(ctx: &Ctx<'_>, l: &LlmProbe, src: &LlmSource, ev: &Eval<'_>) -> Budget {
    let id = "llm.vram_budget";
    let label = src.label();
    let m = &ev.model;
    let reserve = ctx.profile.llm.vram_reserve_bytes;
    let mut f = Finding::new(id, Status::Pass, "");
    source_evidence(src, &mut f);
    let kv_args = KvArgs::from_args(ev.args);
    let kv = moe::kv_plan(m, &kv_args);
    let need_with = |rules: &[Rule],
                     winners: &[Option<usize>],
                     ngl: u64,
                     kv: &Option<moe::KvPlan>,
                     nkvo: bool|
     -> (u64, u64, u64) {
        let placed = placement(m, rules, winners, ngl);
        let w = moe::gpu_bytes(m, &placed);
        let k = kv
            .as_ref()
            .map(|p| p.gpu_bytes(m.n_layer, ngl, nkvo))
            .unwrap_or(0);
        let r = if w + k > 0 { reserve } else { 0 };
        (w, k, r)
    };
    let kv_ok = kv.as_ref().ok().cloned();
    let (w, k, r) = need_with(&ev.rules, &ev.winners, ev.ngl, &kv_ok, kv_args.no_offload);
    let need = w + k + r;
    f = f
        .observed("weights_gpu_bytes", w)
        .observed("kv_cache_gpu_bytes", k)
        .observed("reserve_bytes", r)
        .observed("need_bytes", need);
    let mut notes = ev.notes.clone();
    match &kv {
        Ok(p) => {
            f = f
                .observed(
                    "kv_cache_bytes",
                    (p.k_layer_bytes() + p.v_layer_bytes()).saturating_mul(m.n_layer),
                )
                .observed("kv_cells", p.n_ctx)
                .observed("kv_how", p.how.clone());
            let vq = !matches!(p.v_type.name, "F16" | "F32" | "BF16");
            if p.v_elems > 0 && vq && !ev.args.flash_attn {
                notes.push(format!("-ctv {} needs -fa (llama.cpp refuses a quantized V cache without flash attention)", kv_args.v_type));
            }
        }
        Err(e) => notes.push(format!("KV cache not counted: {e}")),
    }
    // What there is.
    let gpus = match &l.gpus {
        Ok(g) => g,
        Err(e) => {
            f.status = if need > 0 { Status::Info } else { Status::Pass };
            f.summary = format!(
                "{label}: needs {} on the GPU (weights {} + KV cache {} + reserve {}); free VRAM unknown ({e})",
                gib(need),
                gib(w),
                gib(k),
                gib(r)
            );
            if !notes.is_empty() {
                f.summary.push_str(&format!("; note: {}", notes.join("; ")));
            }
            return Budget {
                finding: f,
                fits: None,
            };
        }
    };
    let free: u64 = gpus.iter().map(|g| g.free_bytes).sum();
    let total: u64 = gpus.iter().map(|g| g.total_bytes).sum();
    let names: Vec<String> = gpus
        .iter()
        .map(|g| format!("GPU{} {}", g.index, g.name))
        .collect();
    let (have, have_how) = match (src.pid, &l.gpu_apps) {
        (None, _) => (free, format!("{} free", gib(free))),
        (Some(pid), Some(apps)) => {
            let own: u64 = apps
                .iter()
                .filter(|(p, _)| *p == pid)
                .map(|(_, b)| *b)
                .sum();
            if own > 0 {
                (
                    free + own,
                    format!(
                        "{} free + {} this process already holds",
                        gib(free),
                        gib(own)
                    ),
                )
            } else {
                (free, format!("{} free", gib(free)))
            }
        }
        (Some(_), None) => {
            notes.push("the server is running and per-process GPU memory is unknown: compared with total VRAM, an upper bound".into());
            (total, format!("{} total", gib(total)))
        }
    };
    f = f
        .observed("vram_free_bytes", free)
        .observed("vram_total_bytes", total)
        .observed("gpus", names.clone())
        .expected("need_bytes_at_most", have);
    f.push_evidence(
        &l.gpu_source,
        None,
        &gpus
            .iter()
            .map(|g| {
                format!(
                    "{}, {}, total {} MiB, free {} MiB",
                    g.index,
                    g.name,
                    g.total_bytes >> 20,
                    g.free_bytes >> 20
                )
            })
            .collect::<Vec<_>>()
            .join("; "),
    );
    if gpus.len() > 1 {
        notes.push(format!(
            "{} GPUs: compared with their sum; llama.cpp splits layers between them by free memory",
            gpus.len()
        ));
    }
    let fits = need <= have;
    // Options, each with its effect.
    let mut options: Vec<(String, u64)> = Vec::new();
    let experts_gpu: u64 = m
        .tensors
        .iter()
        .zip(&ev.placed)
        .filter(|(t, p)| t.routed_expert && p.gpu)
        .map(|(t, _)| t.bytes)
        .sum();
    if experts_gpu > 0 {
        let mut raw = ev.args.rules.clone();
        raw.insert(
            0,
            crate::parse::llmargs::RawRule {
                text: GUIDE_RULE.into(),
                pattern: Some(GUIDE_RULE.trim_end_matches("=CPU").into()),
                buffer: "CPU".into(),
                origin: crate::parse::llmargs::RuleOrigin::OverrideTensor { arg: 0 },
            },
        );
        let rules = moe::compile_rules(&raw, Some(gpus.len()));
        let wn = winners(m, &rules);
        let (w2, k2, r2) = need_with(&rules, &wn, ev.ngl, &kv_ok, kv_args.no_offload);
        options.push((
            format!("-ot '{GUIDE_RULE}' as the first rule"),
            need.saturating_sub(w2 + k2 + r2),
        ));
    }
    if let Ok(p) = &kv {
        let variant = |ka: KvArgs| {
            moe::kv_plan(m, &ka)
                .ok()
                .map(|q| q.gpu_bytes(m.n_layer, ev.ngl, ka.no_offload))
        };
        if k > 0 && matches!(p.k_type.name, "F16" | "F32" | "BF16") {
            if let Some(k2) = variant(KvArgs {
                k_type: "q8_0".into(),
                ..kv_args.clone()
            }) {
                options.push(("-ctk q8_0".into(), k.saturating_sub(k2)));
            }
        }
        if k > 0
            && p.v_elems > 0
            && matches!(p.v_type.name, "F16" | "F32" | "BF16")
            && ev.args.flash_attn
        {
            if let Some(k2) = variant(KvArgs {
                v_type: "q8_0".into(),
                ..kv_args.clone()
            }) {
                options.push(("-ctv q8_0".into(), k.saturating_sub(k2)));
            }
        }
        let mla_capable = m.header.arch_u64("attention.kv_lora_rank").is_some();
        if k > 0
            && mla_capable
            && kv_args.engine == Engine::IkLlamaCpp
            && !matches!(kv_args.mla, Some(2) | Some(3))
        {
            if let Some(k2) = variant(KvArgs {
                mla: Some(3),
                ..kv_args.clone()
            }) {
                options.push(("-mla 3 (with -fa)".into(), k.saturating_sub(k2)));
            }
        }
    }
    let eff_ngl = ev.ngl.min(m.n_layer + 1);
    if !fits && eff_ngl > 0 {
        let mut best = None;
        for n in (0..eff_ngl).rev() {
            let (w2, k2, r2) = need_with(&ev.rules, &ev.winners, n, &kv_ok, kv_args.no_offload);
            if w2 + k2 + r2 <= have {
                best = Some((n, w2 + k2 + r2));
                break;
            }
        }
        match best {
            Some((n, need2)) => options.push((format!("-ngl {n}"), need.saturating_sub(need2))),
            None => {
                let (w2, k2, r2) = need_with(&ev.rules, &ev.winners, 0, &kv_ok, kv_args.no_offload);
                options.push(("-ngl 0".into(), need.saturating_sub(w2 + k2 + r2)));
            }
        }
    }
    options.retain(|(_, s)| *s > 0);
    let gap = need.saturating_sub(have);
    f = f.observed(
        "options",
        options
            .iter()
            .map(|(o, s)| json!({"flag": o, "saves_bytes": s, "closes_gap": *s >= gap && gap > 0}))
            .collect::<Vec<_>>(),
    );
    let opt_text = |only_closing: bool| -> String {
        options
            .iter()
            .filter(|(_, s)| !only_closing || *s >= gap)
            .map(|(o, s)| format!("{o}: -{}", gib(*s)))
            .collect::<Vec<_>>()
            .join("; ")
    };
    let what = format!(
        "weights {} + KV cache {} + reserve {}",
        gib(w),
        gib(k),
        gib(r)
    );
    let on = names.join(", ");
    if !fits {
        f.status = Status::Fail;
        let closing = opt_text(true);
        f.summary = format!(
            "{label}: needs {} of VRAM ({what}) but {on} has {have_how}: {} short{}",
            gib(need),
            gib(gap),
            if closing.is_empty() {
                "; no single flag closes the gap".to_string()
            } else {
                format!("; closes the gap: {closing}")
            }
        );
        let all = opt_text(false);
        f.remedy = if all.is_empty() {
            "use a smaller quant, or a GPU with more memory".into()
        } else {
            format!("each with its effect: {all}")
        };
    } else if need.saturating_mul(10) > have.saturating_mul(9) {
        f.status = Status::Warn;
        f.summary = format!("{label}: needs {} of VRAM ({what}), within 10% of {on}'s {have_how}: a larger -ub or context will not fit", gib(need));
        f.remedy = opt_text(false);
    } else {
        f.summary = format!(
            "{label}: needs {} of VRAM ({what}); {on} has {have_how}",
            gib(need)
        );
    }
    if let Ok(p) = &kv {
        f.summary.push_str(&format!(" [KV: {}]", p.how));
    }
    if !notes.is_empty() {
        f.summary.push_str(&format!("; note: {}", notes.join("; ")));
    }
    Budget {
        finding: f,
        fits: Some(fits),
    }
}
