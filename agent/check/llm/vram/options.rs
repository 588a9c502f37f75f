//! The flags that would shrink what `llm.vram_budget` finds the GPU needs, each with the bytes
//! it saves: the guide's `-ot` rule, a smaller KV cache, a lower `-ngl`.

use super::*;

/// A checked rule keeping every routed expert in RAM (the guide's, or the model's kinds by name)
/// put first, when routed experts sit on the GPU.
pub(super) fn expert_option(
    calc: &Calc<'_>,
    ev: &Eval<'_>,
    n_gpus: usize,
    need: Need,
    have_bytes: u64,
) -> Options {
    let with = |raw: &[RawRule]| {
        let rules = moe::compile_rules(raw, Some(n_gpus));
        let wn = winners(calc.m, &rules);
        calc.need(&rules, &wn, ev.ngl).total_bytes()
    };
    let Some((rule, _, n, _)) = fix::expert_rule(ev, None, &with, Some(have_bytes)) else {
        return Vec::new();
    };
    vec![(
        format!("-ot '{rule}' as the first rule"),
        need.total_bytes().saturating_sub(n),
    )]
}

/// When even every routed expert in RAM does not fit: what else closes the gap, with figures —
/// fewer layers, a shorter context, a smaller quant.
pub(super) fn beyond_rules(
    calc: &Calc<'_>,
    ev: &Eval<'_>,
    n_gpus: usize,
    have_bytes: u64,
    kv_args: &KvArgs,
) -> Option<String> {
    let at = |raw: &[RawRule], ngl: u64| {
        let rules = moe::compile_rules(raw, Some(n_gpus));
        let wn = winners(calc.m, &rules);
        calc.need(&rules, &wn, ngl)
    };
    let (rule, raw) =
        match fix::expert_rule(ev, None, &|r| at(r, ev.ngl).total_bytes(), Some(have_bytes)) {
            Some((rule, v, _, _)) => (Some(rule), v.raw),
            None => (None, ev.raw_rules.clone()),
        };
    let rules = moe::compile_rules(&raw, Some(n_gpus));
    let wn = winners(calc.m, &rules);
    let at_ngl = |ngl: u64| calc.need(&rules, &wn, ngl);
    let with = at_ngl(ev.ngl);
    if with.total_bytes() <= have_bytes {
        return None;
    }
    let gap = with.total_bytes() - have_bytes;
    let mut out = Vec::new();
    let eff = ev.ngl.min(calc.m.n_layer + 1);
    if let Some(n) = (0..eff)
        .rev()
        .find(|n| at_ngl(*n).total_bytes() <= have_bytes)
    {
        out.push(format!("-ngl {n} (needs {})", gib(at_ngl(n).total_bytes())));
    }
    if let (Some(p), Some(ctx)) = (&calc.kv, kv_args.ctx.filter(|c| *c > 0)) {
        // The KV cache grows with the context: the longest multiple of 1024 cells that fits.
        let per_cell = with.kv_bytes / ctx.max(1);
        if per_cell > 0 && with.kv_bytes > gap {
            let cells = (with.kv_bytes - gap) / per_cell / 1024 * 1024;
            if cells >= 1024 {
                out.push(format!(
                    "-c {cells} (KV cache {} instead of {})",
                    gib(per_cell * cells),
                    gib(with.kv_bytes)
                ));
            }
        } else {
            out.push(format!(
                "no context fits: the KV cache is {} of the {} short",
                gib(with.kv_bytes),
                gib(gap)
            ));
        }
        let _ = p;
    }
    if with.weights_bytes > gap {
        out.push(format!(
            "a smaller quant whose weights on the GPU are at most {} (now {})",
            gib(with.weights_bytes - gap),
            gib(with.weights_bytes)
        ));
    }
    let how = match &rule {
        Some(r) => format!("even with every routed expert in RAM (-ot '{r}')"),
        None => "with every rule as it is".to_string(),
    };
    Some(format!(
        "{how} the GPU needs {} ({}): {} short; also one of: {}",
        gib(with.total_bytes()),
        with.parts(),
        gib(gap),
        if out.is_empty() {
            "a GPU with more memory".to_string()
        } else {
            out.join("; ")
        }
    ))
}

/// Smaller KV-cache variants: a q8_0 K or V cache, MLA on ik_llama.cpp.
pub(super) fn kv_options(
    m: &Model,
    ev: &Eval<'_>,
    p: &moe::KvPlan,
    kv_args: &KvArgs,
    k: u64,
) -> Options {
    let mut options = Vec::new();
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
    options
}

/// The largest `-ngl` that fits in `have_bytes` (else `-ngl 0`), when the placement does not fit.
pub(super) fn ngl_option(calc: &Calc<'_>, ev: &Eval<'_>, need: Need, have_bytes: u64) -> Options {
    let eff_ngl = ev.ngl.min(calc.m.n_layer + 1);
    if eff_ngl == 0 {
        return Vec::new();
    }
    let at = |n: u64| calc.need(&ev.rules, &ev.winners, n).total_bytes();
    let best = (0..eff_ngl)
        .rev()
        .map(|n| (n, at(n)))
        .find(|(_, b)| *b <= have_bytes);
    let (flag, saved) = match best {
        Some((n, need2)) => (
            format!("-ngl {n}"),
            need.total_bytes().saturating_sub(need2),
        ),
        None => ("-ngl 0".into(), need.total_bytes().saturating_sub(at(0))),
    };
    vec![(flag, saved)]
}
