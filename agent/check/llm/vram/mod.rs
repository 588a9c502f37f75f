//! `llm.vram_budget`: the GPU memory one command line's placement needs (weights kept on the GPU,
//! the KV cache, compute buffers) against what the GPU has free.

use super::*;
use crate::parse::nvsmi::GpuMemory;
use options::{beyond_rules, expert_option, kv_options, ngl_option};

mod options;

/// The `llm.vram_budget` finding, whether the placement fits, and what a variant of the
/// command line would need (for the remedies of `llm.override_tensor`).
pub(super) struct Budget<'a> {
    /// The finding.
    pub(super) finding: Finding,
    /// Everything fits in free VRAM (None: unknown).
    pub(super) fits: Option<bool>,
    /// The VRAM the placement may use, when known.
    pub(super) have_bytes: Option<u64>,
    /// Works out the need of a variant.
    pub(super) calc: Calc<'a>,
    /// GPUs on the host (for compiling rules).
    pub(super) n_gpus: Option<usize>,
}

impl Budget<'_> {
    /// GPU bytes the command line needs with `raw` as its rules.
    pub(super) fn need_with(&self, raw: &[RawRule], ngl: u64) -> u64 {
        let rules = moe::compile_rules(raw, self.n_gpus);
        let wn = winners(self.calc.m, &rules);
        self.calc.need(&rules, &wn, ngl).total_bytes()
    }
}

/// GPU bytes one placement needs.
#[derive(Clone, Copy)]
pub(super) struct Need {
    weights_bytes: u64,
    kv_bytes: u64,
    reserve_bytes: u64,
}

impl Need {
    fn total_bytes(&self) -> u64 {
        self.weights_bytes + self.kv_bytes + self.reserve_bytes
    }

    /// "weights 1.00 GiB + KV cache 0.50 GiB + reserve 0.25 GiB".
    fn parts(&self) -> String {
        format!(
            "weights {} + KV cache {} + reserve {}",
            gib(self.weights_bytes),
            gib(self.kv_bytes),
            gib(self.reserve_bytes)
        )
    }
}

/// Works out the [`Need`] of a variant of the command line (other rules or `-ngl`), with the
/// KV cache and reserve of the profile fixed.
pub(super) struct Calc<'a> {
    m: &'a Model,
    reserve_bytes: u64,
    kv: Option<moe::KvPlan>,
    no_offload: bool,
}

impl<'a> Calc<'a> {
    fn of(ctx: &Ctx<'_>, m: &'a Model, kv_args: &KvArgs) -> Calc<'a> {
        Calc {
            m,
            reserve_bytes: ctx.profile.llm.vram_reserve_bytes,
            kv: moe::kv_plan(m, kv_args).ok(),
            no_offload: kv_args.no_offload,
        }
    }

    fn need(&self, rules: &[Rule], winners: &[Option<usize>], ngl: u64) -> Need {
        let placed = placement(self.m, rules, winners, ngl);
        let w = moe::gpu_bytes(self.m, &placed);
        let k = self
            .kv
            .as_ref()
            .map(|p| p.gpu_bytes(self.m.n_layer, ngl, self.no_offload))
            .unwrap_or(0);
        // Nothing on the GPU needs no compute buffers either.
        let r = if w + k > 0 { self.reserve_bytes } else { 0 };
        Need {
            weights_bytes: w,
            kv_bytes: k,
            reserve_bytes: r,
        }
    }
}

/// The VRAM the placement may use and how it was counted ("12.00 GiB free").
struct Have {
    bytes: u64,
    how: String,
}

/// A flag and the GPU bytes it saves.
type Options = Vec<(String, u64)>;

/// The margin llama.cpp's `--fit` leaves free on each GPU (`fit_params_target`).
const FIT_MARGIN_BYTES: u64 = 1 << 30;

/// Emulates llama.cpp's `--fit` for a command line without `-ngl` and overrides
/// (`common/fit.cpp`): every layer on the GPU if that fits; else the routed experts of the first
/// layers in RAM, as few layers as leave [`FIT_MARGIN_BYTES`] free per GPU; else fewer layers,
/// with every routed expert in RAM. Without the free VRAM it assumes every layer on the GPU and
/// says so.
pub(super) fn emulate_fit(ctx: &Ctx<'_>, l: &LlmProbe, ev: &mut Eval<'_>, why: String) {
    let all = u64::from(u32::MAX);
    ev.ngl = all;
    let Ok(view) = gpus::view(l, ev.log.as_ref()) else {
        ev.notes.push(format!("{why}; the free VRAM is unknown, so the figures below are for every layer and expert on the GPU, which --fit only keeps if it fits"));
        ev.fit = Some(why);
        return;
    };
    let n = view.gpus.len() as u64;
    let free: u64 = view.gpus.iter().map(|g| g.free_bytes).sum();
    let target = free.saturating_sub(FIT_MARGIN_BYTES * n.max(1));
    let calc = Calc::of(ctx, &ev.model, &KvArgs::from_args(ev.args));
    let n_gpus = Some(view.gpus.len());
    let m = &ev.model;
    let expert_layers = sorted_set(
        m.tensors
            .iter()
            .filter(|t| t.routed_expert)
            .filter_map(|t| t.layer),
    );
    let rules_for = |k: usize| -> Vec<RawRule> {
        expert_layers
            .iter()
            .take(k)
            .map(|il| {
                let pattern = format!(r"blk\.{il}\.ffn_(up|down|gate_up|gate)_(ch|)exps");
                RawRule {
                    text: format!("{pattern}=CPU"),
                    pattern: Some(pattern),
                    buffer: "CPU".into(),
                    origin: RuleOrigin::Fit {
                        layer: u32::try_from(*il).unwrap_or(u32::MAX),
                    },
                }
            })
            .collect()
    };
    let need = |raw: &[RawRule], ngl: u64| {
        let rules = moe::compile_rules(raw, n_gpus);
        let wn = winners(m, &rules);
        calc.need(&rules, &wn, ngl).total_bytes()
    };
    // The need falls as more layers' experts go to RAM, and grows with the layers offloaded:
    // both searches are binary.
    let fits_k = |k: usize| need(&rules_for(k), all) <= target;
    let chosen = match first_true(0, expert_layers.len() as u64, |k| fits_k(k as usize)) {
        Some(k) => (rules_for(k as usize), all),
        None => {
            let raw = rules_for(expert_layers.len());
            let most = last_true(0, m.n_layer, |ngl| need(&raw, ngl) <= target).unwrap_or(0);
            (raw, most)
        }
    };
    let (raw, ngl) = chosen;
    let k = raw.len();
    let what = if k == 0 {
        "every layer and expert fits on the GPU".to_string()
    } else if ngl == all {
        format!(
            "it keeps the routed experts of {k} of {} MoE layers in RAM",
            expert_layers.len()
        )
    } else {
        format!("even with every routed expert in RAM only {ngl} layers fit: it keeps the rest on the CPU")
    };
    ev.notes.push(format!(
        "{why}: with {} free, {what} (as this agent emulates it)",
        gib(free)
    ));
    ev.raw_rules = raw;
    ev.rules = moe::compile_rules(&ev.raw_rules, n_gpus);
    ev.winners = winners(m, &ev.rules);
    ev.ngl = ngl;
    ev.fit = Some(why);
}

/// The least `x` in `lo..=hi` with `ok(x)`, for `ok` false then true.
fn first_true(lo: u64, hi: u64, ok: impl Fn(u64) -> bool) -> Option<u64> {
    if !ok(hi) {
        return None;
    }
    let (mut lo, mut hi) = (lo, hi);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if ok(mid) {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    Some(lo)
}

/// The greatest `x` in `lo..=hi` with `ok(x)`, for `ok` true then false.
fn last_true(lo: u64, hi: u64, ok: impl Fn(u64) -> bool) -> Option<u64> {
    if !ok(lo) {
        return None;
    }
    let (mut lo, mut hi) = (lo, hi);
    while lo < hi {
        let mid = lo + (hi - lo).div_ceil(2);
        if ok(mid) {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    Some(lo)
}

pub(super) fn vram<'a>(
    ctx: &Ctx<'_>,
    l: &LlmProbe,
    src: &LlmSource,
    ev: &'a Eval<'_>,
) -> Budget<'a> {
    let label = src.label();
    let m = &ev.model;
    let mut f = Finding::new("llm.vram_budget", Status::Pass, "");
    source_evidence(src, &mut f);
    let kv_args = KvArgs::from_args(ev.args);
    let kv = moe::kv_plan(m, &kv_args);
    let calc = Calc::of(ctx, m, &kv_args);
    let need = calc.need(&ev.rules, &ev.winners, ev.ngl);
    f = f
        .observed("weights_gpu_bytes", need.weights_bytes)
        .observed("kv_cache_gpu_bytes", need.kv_bytes)
        .observed("reserve_bytes", need.reserve_bytes)
        .observed("need_bytes", need.total_bytes());
    let mut notes = ev.notes.clone();
    f = kv_observed(f, &kv, ev, &kv_args, &mut notes);
    let log_said = ev.log.as_ref().map(|g| serverlog::compare(ev, g, &mut f));
    let view = match gpus::view(l, ev.log.as_ref()) {
        Ok(v) => v,
        Err(e) => {
            let n_gpus = l.gpus.as_ref().ok().map(Vec::len);
            let mut finding = unknown_vram(f, &label, need, &e, &notes);
            if let Some(c) = log_said.filter(|c| c.load_failed) {
                finding.status = Status::Fail;
                finding
                    .summary
                    .push_str(&format!("; {}", c.said.join("; ")));
            }
            return Budget {
                finding,
                fits: None,
                have_bytes: None,
                calc,
                n_gpus,
            };
        }
    };
    let gpus = &view.gpus;
    let free: u64 = gpus.iter().map(|g| g.free_bytes).sum();
    let total: u64 = gpus.iter().map(|g| g.total_bytes).sum();
    let names: Vec<String> = gpus
        .iter()
        .map(|g| format!("GPU{} {}", g.index, g.name))
        .collect();
    let have = available(src, l, &view, free, total, &mut notes);
    f = f
        .observed("vram_free_bytes", free)
        .observed("vram_total_bytes", total)
        .observed("gpus", names.clone())
        .expected("need_bytes_at_most", have.bytes);
    f.push_evidence(&view.source, None, &gpu_evidence(gpus));
    if gpus.len() > 1 {
        notes.push(format!(
            "{} GPUs: compared with their sum; llama.cpp splits layers between them by free memory",
            gpus.len()
        ));
    }
    let mut fits = need.total_bytes() <= have.bytes;
    let mut options = expert_option(&calc, ev, gpus.len(), need, have.bytes);
    if let Ok(p) = &kv {
        options.extend(kv_options(m, ev, p, &kv_args, need.kv_bytes));
    }
    if !fits {
        options.extend(ngl_option(&calc, ev, need, have.bytes));
    }
    options.retain(|(_, s)| *s > 0);
    f = verdict(f, &label, need, &have, &names.join(", "), &options);
    if !fits {
        if let Some(more) = beyond_rules(&calc, ev, gpus.len(), have.bytes, &kv_args) {
            f.summary.push_str(&format!("; {more}"));
        }
    }
    if let Some(c) = log_said {
        if c.load_failed && f.status != Status::Fail {
            // The log outranks the estimate: the load failed.
            f.status = Status::Fail;
            fits = false;
        }
        if !c.said.is_empty() {
            f.summary.push_str(&format!("; {}", c.said.join("; ")));
        }
        f = f.observed("log_agrees", !c.refutes);
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
        have_bytes: Some(have.bytes),
        calc,
        n_gpus: Some(gpus.len()),
    }
}

/// Observes the KV-cache plan, noting a quantized V cache without `-fa` or why the cache is not
/// counted.
fn kv_observed(
    mut f: Finding,
    kv: &Result<moe::KvPlan, String>,
    ev: &Eval<'_>,
    kv_args: &KvArgs,
    notes: &mut Vec<String>,
) -> Finding {
    match kv {
        Ok(p) => {
            f = f
                .observed(
                    "kv_cache_bytes",
                    (p.k_layer_bytes() + p.v_layer_bytes()).saturating_mul(ev.model.n_layer),
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
    f
}

/// The GPU figures could not be read: report the need alone.
fn unknown_vram(
    mut f: Finding,
    label: &str,
    need: Need,
    e: &crate::root::ReadError,
    notes: &[String],
) -> Finding {
    f.status = if need.total_bytes() > 0 {
        Status::Info
    } else {
        Status::Pass
    };
    f.summary = format!(
        "{label}: needs {} on the GPU ({}); free VRAM unknown ({e})",
        gib(need.total_bytes()),
        need.parts()
    );
    if !notes.is_empty() {
        f.summary.push_str(&format!("; note: {}", notes.join("; ")));
    }
    f
}

/// What the placement may use: free VRAM (at the server's start when its log says), plus what a
/// running server already holds; total VRAM (an upper bound, noted) when a running server's own
/// share is unknown.
fn available(
    src: &LlmSource,
    l: &LlmProbe,
    view: &gpus::GpuView,
    free: u64,
    total: u64,
    notes: &mut Vec<String>,
) -> Have {
    if view.at_start {
        return Have {
            bytes: free,
            how: format!("{} free when the server started (its log)", gib(free)),
        };
    }
    let free_only = || Have {
        bytes: free,
        how: format!("{} free", gib(free)),
    };
    match (src.pid, &l.gpu_apps) {
        (None, _) => free_only(),
        (Some(pid), Some(apps)) => {
            let own: u64 = apps
                .iter()
                .filter(|(p, _)| *p == pid)
                .map(|(_, b)| *b)
                .sum();
            if own > 0 {
                Have {
                    bytes: free + own,
                    how: format!(
                        "{} free + {} this process already holds",
                        gib(free),
                        gib(own)
                    ),
                }
            } else {
                free_only()
            }
        }
        (Some(_), None) => {
            notes.push("the server is running and per-process GPU memory is unknown: compared with total VRAM, an upper bound".into());
            Have {
                bytes: total,
                how: format!("{} total", gib(total)),
            }
        }
    }
}

/// "0, NVIDIA RTX 4090, total 24564 MiB, free 23000 MiB; 1, ...".
fn gpu_evidence(gpus: &[GpuMemory]) -> String {
    gpus.iter()
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
        .join("; ")
}

/// Status, summary and remedy from the need, what there is on `on` (the GPUs) and the options.
fn verdict(
    mut f: Finding,
    label: &str,
    need: Need,
    have: &Have,
    on: &str,
    options: &[(String, u64)],
) -> Finding {
    let total = need.total_bytes();
    let gap = total.saturating_sub(have.bytes);
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
    let what = need.parts();
    let have_how = &have.how;
    if total > have.bytes {
        f.status = Status::Fail;
        let closing = opt_text(true);
        f.summary = format!(
            "{label}: needs {} of VRAM ({what}) but {on} has {have_how}: {} short{}",
            gib(total),
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
    } else if total.saturating_mul(10) > have.bytes.saturating_mul(9) {
        f.status = Status::Warn;
        f.summary = format!("{label}: needs {} of VRAM ({what}), within 10% of {on}'s {have_how}: a larger -ub or context will not fit", gib(total));
        f.remedy = opt_text(false);
    } else {
        f.summary = format!(
            "{label}: needs {} of VRAM ({what}); {on} has {have_how}",
            gib(total)
        );
    }
    f
}
