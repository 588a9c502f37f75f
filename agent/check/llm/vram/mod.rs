//! `llm.vram_budget`: the GPU memory one command line's placement needs (weights kept on the GPU,
//! the KV cache, compute buffers) against what the GPU has free.

use super::*;
use crate::parse::nvsmi::GpuMemory;
use options::{expert_option, kv_options, ngl_option};

mod options;

/// The `llm.vram_budget` finding and whether the placement fits.
pub(super) struct Budget {
    /// The finding.
    pub(super) finding: Finding,
    /// Everything fits in free VRAM (None: unknown).
    pub(super) fits: Option<bool>,
}

/// GPU bytes one placement needs.
#[derive(Clone, Copy)]
struct Need {
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
struct Calc<'a> {
    m: &'a Model,
    reserve_bytes: u64,
    kv: Option<moe::KvPlan>,
    no_offload: bool,
}

impl Calc<'_> {
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

pub(super) fn vram(ctx: &Ctx<'_>, l: &LlmProbe, src: &LlmSource, ev: &Eval<'_>) -> Budget {
    let label = src.label();
    let m = &ev.model;
    let mut f = Finding::new("llm.vram_budget", Status::Pass, "");
    source_evidence(src, &mut f);
    let kv_args = KvArgs::from_args(ev.args);
    let kv = moe::kv_plan(m, &kv_args);
    let calc = Calc {
        m,
        reserve_bytes: ctx.profile.llm.vram_reserve_bytes,
        kv: kv.as_ref().ok().cloned(),
        no_offload: kv_args.no_offload,
    };
    let need = calc.need(&ev.rules, &ev.winners, ev.ngl);
    f = f
        .observed("weights_gpu_bytes", need.weights_bytes)
        .observed("kv_cache_gpu_bytes", need.kv_bytes)
        .observed("reserve_bytes", need.reserve_bytes)
        .observed("need_bytes", need.total_bytes());
    let mut notes = ev.notes.clone();
    f = kv_observed(f, &kv, ev, &kv_args, &mut notes);
    let gpus = match &l.gpus {
        Ok(g) => g,
        Err(e) => {
            return Budget {
                finding: unknown_vram(f, &label, need, e, &notes),
                fits: None,
            }
        }
    };
    let free: u64 = gpus.iter().map(|g| g.free_bytes).sum();
    let total: u64 = gpus.iter().map(|g| g.total_bytes).sum();
    let names: Vec<String> = gpus
        .iter()
        .map(|g| format!("GPU{} {}", g.index, g.name))
        .collect();
    let have = available(src, l, free, total, &mut notes);
    f = f
        .observed("vram_free_bytes", free)
        .observed("vram_total_bytes", total)
        .observed("gpus", names.clone())
        .expected("need_bytes_at_most", have.bytes);
    f.push_evidence(&l.gpu_source, None, &gpu_evidence(gpus));
    if gpus.len() > 1 {
        notes.push(format!(
            "{} GPUs: compared with their sum; llama.cpp splits layers between them by free memory",
            gpus.len()
        ));
    }
    let fits = need.total_bytes() <= have.bytes;
    let mut options = expert_option(&calc, ev, gpus.len(), need);
    if let Ok(p) = &kv {
        options.extend(kv_options(m, ev, p, &kv_args, need.kv_bytes));
    }
    if !fits {
        options.extend(ngl_option(&calc, ev, need, have.bytes));
    }
    options.retain(|(_, s)| *s > 0);
    f = verdict(f, &label, need, &have, &names.join(", "), &options);
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

/// What the placement may use: free VRAM, plus what a running server already holds; total VRAM
/// (an upper bound, noted) when a running server's own share is unknown.
fn available(
    src: &LlmSource,
    l: &LlmProbe,
    free: u64,
    total: u64,
    notes: &mut Vec<String>,
) -> Have {
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
