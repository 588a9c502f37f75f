//! The flags that would shrink what `llm.vram_budget` finds the GPU needs, each with the bytes
//! it saves: the guide's `-ot` rule, a smaller KV cache, a lower `-ngl`.

use super::*;

/// The guide's rule put first, when routed experts sit on the GPU.
pub(super) fn expert_option(calc: &Calc<'_>, ev: &Eval<'_>, n_gpus: usize, need: Need) -> Options {
    let m = calc.m;
    let experts_gpu: u64 = m
        .tensors
        .iter()
        .zip(&ev.placed)
        .filter(|(t, p)| t.routed_expert && p.gpu)
        .map(|(t, _)| t.bytes)
        .sum();
    if experts_gpu == 0 {
        return Vec::new();
    }
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
    let rules = moe::compile_rules(&raw, Some(n_gpus));
    let wn = winners(m, &rules);
    let with = calc.need(&rules, &wn, ev.ngl);
    vec![(
        format!("-ot '{GUIDE_RULE}' as the first rule"),
        need.total_bytes().saturating_sub(with.total_bytes()),
    )]
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
