//! What the program a command line runs does with `--cpu-moe`, `--n-cpu-moe` and a missing
//! `-ngl`, by program and build: the facts, read from the programs' own sources, that the rule
//! analysis starts from.
//!
//! llama.cpp (ggml-org/llama.cpp; build N = the Nth commit on master, as `version: N (hash)`
//! prints it):
//! - `--cpu-moe` appends one rule, `LLM_FFN_EXPS_REGEX=CPU` (`common/common.h`), and
//!   `--n-cpu-moe N` appends `blk\.i` + that pattern for i in 0..N (`llm_ffn_block_regex`), each
//!   in its place among the `-ot` rules (PR #15077: an `-ot` written before them takes priority).
//!   The pattern is `\.ffn_(up|down|gate)_(ch|)exps` up to build 8284 at least (the build of
//!   issue #20431), and `\.ffn_(up|down|gate|gate_up)_(ch|)exps` since PR #20416 (merged
//!   2026-03-11, after build 8284), which added the fused `ffn_gate_up_exps` of Qwen3.5-MoE-style
//!   GGUFs. This agent takes builds after 8284, and an unknown build, to have it.
//! - `-ngl` unset is `-1`, "auto" (`common_params::n_gpu_layers`): the library reads a negative
//!   count as every layer plus the output (`llama_model::n_gpu_layers`), and `--fit` (on by
//!   default, PR #16653, December 2025) first fits the unset parameters to free device memory,
//!   keeping 1 GiB free per device (`fit_params_target`): it moves the routed experts of the
//!   first layers to RAM, then whole layers, until the rest fits (`common/fit.cpp`). It gives up
//!   on the layers when the user set `-ngl` or any tensor override (`-ot`, `--cpu-moe`,
//!   `--n-cpu-moe`: "tensor_buft_overrides already set by user"). Builds before 7003 (before
//!   `--fit`) offload every layer (PR #15434, August 2025); builds before 6089 (before
//!   `--n-cpu-moe`, PR #15077) keep every layer on the CPU without `-ngl`.
//!
//! ik_llama.cpp (ikawrakow/ik_llama.cpp; build N = `git rev-list --count` of its master, which
//! the log prints as `build = N` or `build=N`):
//! - builds 3833-3915 (PR #672): `--cpu-moe` appends `\.ffn_(up|down|gate)_exps=CPU` and
//!   `--n-cpu-moe N` appends `blk\.i\.(ffn_(up|down|gate)_exps)=CPU` for i in 0..N, in place;
//!   3916-4289 (PR #841): both end in `\.weight` (expert biases stay with the layer);
//!   4290-4324 (PR #1422): `gate_up` added;
//!   4325-4352 (PR #1464): `--n-cpu-moe` becomes a loader setting, its rules tried after every
//!   `-ot` rule whatever the order on the command line; 4353 on (PR #1508): `--cpu-moe` is
//!   `--n-cpu-moe 999`, the same; 4427 on (PR #1657): the suffix is `\.(weight|scale)`;
//!   4797 on (PR #2262): with one GPU the loader takes the *last* N layers that have routed
//!   experts (MTP layers excluded), not the first N.
//! - `-ngl` unset: no layer on the GPU before build 4761; from 4761 on (PR #2209) every layer
//!   when a GPU is present, and `-ngl 0` drops every override.

use super::moe::Model;
use crate::parse::llamalog::ServerRun;
use crate::parse::llmargs::{Engine, LlmArgs, MoeFlag, RawRule, RuleOrigin};

/// Last llama.cpp build known to lack `gate_up` in the `--cpu-moe` pattern.
pub(super) const LLAMA_CPP_LAST_WITHOUT_GATE_UP: u32 = 8284;
/// First llama.cpp build with `--n-cpu-moe` (PR #15077).
const LLAMA_CPP_N_CPU_MOE: u32 = 6089;
/// llama.cpp builds from here on are taken to have `--fit` on by default (PR #16653).
const LLAMA_CPP_FIT: u32 = 7003;
/// ik_llama.cpp builds (PRs #672, #841, #1422, #1464, #1508, #1657, #2209, #2262).
const IK_CPU_MOE: u32 = 3833;
const IK_WEIGHT_SUFFIX: u32 = 3916;
const IK_GATE_UP: u32 = 4290;
const IK_LOADER_NCMOE: u32 = 4325;
const IK_LOADER_CMOE: u32 = 4353;
const IK_SCALE_SUFFIX: u32 = 4427;
const IK_AUTO_NGL: u32 = 4761;
const IK_LAST_LAYERS: u32 = 4797;

/// The program behind a command line, and its build when known.
#[derive(Debug, Clone)]
pub(super) struct Program {
    /// The program.
    pub engine: Engine,
    /// Its build number.
    pub build: Option<u32>,
    /// Where the build (or the program) was read: a log line.
    pub from: Option<String>,
}

impl Program {
    /// The program from the command line, corrected by the server's own log.
    pub fn of(args: &LlmArgs, run: Option<(&ServerRun, &str)>) -> Program {
        let mut engine = args.engine.unwrap_or(Engine::LlamaCpp);
        let mut p = Program {
            engine,
            build: None,
            from: None,
        };
        if let Some((r, path)) = run {
            if r.ik_llama && engine == Engine::LlamaCpp {
                engine = Engine::IkLlamaCpp;
                p.engine = engine;
            }
            if let Some((line, text)) = &r.build_line {
                p.build = r.build;
                p.from = Some(format!("{path} line {}: {text}", line + 1));
            }
        }
        p
    }

    /// `llama.cpp build 8284`, `ik_llama.cpp (build unknown)`.
    pub fn describe(&self) -> String {
        match self.build {
            Some(b) => format!("{} build {b}", self.engine.name()),
            None => format!("{} (build unknown)", self.engine.name()),
        }
    }

    fn at_least(&self, b: u32) -> bool {
        self.build.is_none_or(|x| x >= b)
    }
}

/// The pattern `--cpu-moe` adds in this program and build (without the `blk\.N` prefix).
pub(super) fn cpu_moe_pattern(p: &Program) -> String {
    match p.engine {
        Engine::IkLlamaCpp => {
            let kinds = if p.at_least(IK_GATE_UP) {
                "up|down|gate|gate_up"
            } else {
                "up|down|gate"
            };
            format!(r"\.ffn_({kinds})_exps{}", ik_suffix(p))
        }
        _ => {
            if p.build.is_some_and(|b| b <= LLAMA_CPP_LAST_WITHOUT_GATE_UP) {
                r"\.ffn_(up|down|gate)_(ch|)exps".into()
            } else {
                r"\.ffn_(up|down|gate|gate_up)_(ch|)exps".into()
            }
        }
    }
}

fn ik_suffix(p: &Program) -> &'static str {
    if !p.at_least(IK_WEIGHT_SUFFIX) {
        ""
    } else if p.at_least(IK_SCALE_SUFFIX) {
        r"\.(weight|scale)"
    } else {
        r"\.weight"
    }
}

/// The per-layer rule `--n-cpu-moe` adds for layer `il`.
fn layer_pattern(p: &Program, il: u32) -> String {
    match p.engine {
        Engine::IkLlamaCpp if !p.at_least(IK_SCALE_SUFFIX) => {
            let kinds = if p.at_least(IK_GATE_UP) {
                "up|down|gate|gate_up"
            } else {
                "up|down|gate"
            };
            format!(r"blk\.{il}\.(ffn_({kinds})_exps{})", ik_suffix(p))
        }
        _ => format!(r"blk\.{il}{}", cpu_moe_pattern(p)),
    }
}

/// The `-ot` rules with `--cpu-moe` / `--n-cpu-moe` expanded as the program does it, in the
/// order it tries them, and what the expansion assumed.
pub(super) fn expand_rules(p: &Program, a: &LlmArgs, m: &Model) -> (Vec<RawRule>, Vec<String>) {
    let mut notes = Vec::new();
    if a.moe_flags.is_empty() {
        return (a.rules.clone(), notes);
    }
    let ik = p.engine == Engine::IkLlamaCpp;
    if ik && p.build.is_some_and(|b| b < IK_CPU_MOE) {
        notes.push(format!(
            "{} predates --cpu-moe/--n-cpu-moe (build {IK_CPU_MOE}): it stops at an unknown argument",
            p.describe()
        ));
    }
    if !ik && p.build.is_some_and(|b| b < LLAMA_CPP_N_CPU_MOE) {
        notes.push(format!(
            "{} may predate --cpu-moe/--n-cpu-moe (build {LLAMA_CPP_N_CPU_MOE}, PR #15077)",
            p.describe()
        ));
    }
    let mut in_place: Vec<(usize, Vec<RawRule>)> = Vec::new();
    let mut after_all: Vec<RawRule> = Vec::new();
    for f in &a.moe_flags {
        let loader = ik
            && match f.layers {
                None => p.at_least(IK_LOADER_CMOE),
                Some(_) => p.at_least(IK_LOADER_NCMOE),
            };
        let rules = flag_rules(p, f, m, loader);
        if loader {
            after_all.extend(rules);
        } else {
            in_place.push((f.after_rules, rules));
        }
    }
    if !after_all.is_empty() && !a.rules.is_empty() {
        notes.push(format!(
            "{} applies --cpu-moe/--n-cpu-moe after every -ot rule (since build {IK_LOADER_NCMOE}, PR #1464)",
            p.describe()
        ));
    }
    let mut out = Vec::new();
    for (i, r) in a.rules.iter().enumerate() {
        for (_, rules) in in_place.iter().filter(|(at, _)| *at == i) {
            out.extend(rules.iter().cloned());
        }
        out.push(r.clone());
    }
    for (_, rules) in in_place.iter().filter(|(at, _)| *at >= a.rules.len()) {
        out.extend(rules.iter().cloned());
    }
    out.extend(after_all);
    (out, notes)
}

/// The rules one flag adds; `loader`: ik_llama.cpp's loader-side `--n-cpu-moe`.
fn flag_rules(p: &Program, f: &MoeFlag, m: &Model, loader: bool) -> Vec<RawRule> {
    let rule = |pattern: String, origin: RuleOrigin| RawRule {
        text: format!("{pattern}=CPU"),
        pattern: Some(pattern),
        buffer: "CPU".into(),
        origin,
    };
    if !loader {
        return match f.layers {
            None => vec![rule(cpu_moe_pattern(p), RuleOrigin::CpuMoe)],
            Some(n) => (0..n)
                .map(|il| rule(layer_pattern(p, il), RuleOrigin::NCpuMoe { layer: il }))
                .collect(),
        };
    }
    let n = f.layers.unwrap_or(999);
    let n_layer = u32::try_from(m.n_layer).unwrap_or(u32::MAX);
    let layers: Vec<u32> = if p.at_least(IK_LAST_LAYERS) {
        // The last n layers that have routed experts, MTP (nextn) layers left out.
        let nextn = m
            .header
            .arch_u64("nextn_predict_layers")
            .and_then(|x| u32::try_from(x).ok())
            .unwrap_or(0);
        let last = n_layer.saturating_sub(nextn);
        (0..last)
            .rev()
            .filter(|il| {
                let down = format!("blk.{il}.ffn_down_exps.weight");
                m.tensors.iter().any(|t| t.name == down)
            })
            .take(n as usize)
            .collect()
    } else {
        (0..n.min(n_layer)).collect()
    };
    layers
        .into_iter()
        .map(|il| rule(layer_pattern(p, il), RuleOrigin::NCpuMoe { layer: il }))
        .collect()
}

/// How many layers `-ngl` offloads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Ngl {
    /// A count (`u32::MAX` for "all"), and, when `-ngl` was not given as a number, why this count.
    Count(u64, Option<String>),
    /// llama.cpp's `--fit` will choose the layers and the experts kept in RAM at load.
    Fit(String),
}

/// The layer count a command line gets; `gpus`: GPUs this host has, when known.
pub(super) fn ngl(p: &Program, a: &LlmArgs, gpus: Option<usize>) -> Ngl {
    let given = a.ngl.as_deref();
    if let Some(v) = given {
        match v {
            "all" | "max" => return Ngl::Count(u64::from(u32::MAX), None),
            "auto" if p.engine != Engine::IkLlamaCpp => {}
            _ => {
                return match v.parse::<i64>() {
                    Ok(n) if n >= 0 => Ngl::Count(n as u64, None),
                    // Upstream: -1 is auto, -2 and below all layers.
                    Ok(-1) if p.engine != Engine::IkLlamaCpp => unset_llama_cpp(p, a),
                    Ok(n) if n < -1 && p.engine != Engine::IkLlamaCpp => {
                        Ngl::Count(u64::from(u32::MAX), None)
                    }
                    _ => Ngl::Count(
                        0,
                        Some(format!(
                            "-ngl {v} is not a layer count this agent evaluates: assuming 0"
                        )),
                    ),
                };
            }
        }
    }
    match p.engine {
        Engine::IkLlamaCpp => {
            if p.build.is_some_and(|b| b < IK_AUTO_NGL) {
                Ngl::Count(0, Some(format!("no -ngl: {} keeps every layer on the CPU (ik_llama.cpp offloads every layer by default only since build {IK_AUTO_NGL}, PR #2209)", p.describe())))
            } else if gpus == Some(0) {
                Ngl::Count(
                    0,
                    Some("no -ngl and no GPU: every layer stays on the CPU".into()),
                )
            } else {
                let since = if p.build.is_none() {
                    format!(" (builds before {IK_AUTO_NGL} kept every layer on the CPU)")
                } else {
                    String::new()
                };
                Ngl::Count(u64::from(u32::MAX), Some(format!("no -ngl: {} offloads every layer when a GPU is present (PR #2209, build {IK_AUTO_NGL}){since}", p.describe())))
            }
        }
        _ => unset_llama_cpp(p, a),
    }
}

fn unset_llama_cpp(p: &Program, a: &LlmArgs) -> Ngl {
    if p.build.is_some_and(|b| b < LLAMA_CPP_N_CPU_MOE) {
        return Ngl::Count(
            0,
            Some(format!(
                "no -ngl: {} keeps every layer on the CPU by default",
                p.describe()
            )),
        );
    }
    let fit_off = a
        .fit
        .as_deref()
        .is_some_and(|f| matches!(f, "off" | "0" | "false"));
    let overrides = !a.rules.is_empty() || !a.moe_flags.is_empty();
    if p.at_least(LLAMA_CPP_FIT) && !fit_off && !overrides {
        return Ngl::Fit(format!("no -ngl and no -ot/--cpu-moe/--n-cpu-moe: {} fits layers and routed experts to free VRAM at load (--fit, on by default since PR #16653), leaving 1 GiB free per GPU", p.describe()));
    }
    let why = if !p.at_least(LLAMA_CPP_FIT) {
        format!("{} has no --fit", p.describe())
    } else if fit_off {
        "--fit off".to_string()
    } else {
        "--fit does not place layers when overrides are given".to_string()
    };
    Ngl::Count(
        u64::from(u32::MAX),
        Some(format!(
            "no -ngl: llama.cpp offloads every layer ({why}; an unset -ngl is all layers)"
        )),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prog(engine: Engine, build: Option<u32>) -> Program {
        Program {
            engine,
            build,
            from: None,
        }
    }

    #[test]
    fn patterns_by_build() {
        let l = |b| cpu_moe_pattern(&prog(Engine::LlamaCpp, b));
        assert_eq!(l(Some(8284)), r"\.ffn_(up|down|gate)_(ch|)exps");
        assert_eq!(l(Some(8285)), r"\.ffn_(up|down|gate|gate_up)_(ch|)exps");
        assert_eq!(l(None), r"\.ffn_(up|down|gate|gate_up)_(ch|)exps");
        let ik = |b| cpu_moe_pattern(&prog(Engine::IkLlamaCpp, b));
        assert_eq!(ik(Some(3900)), r"\.ffn_(up|down|gate)_exps");
        assert_eq!(ik(Some(4000)), r"\.ffn_(up|down|gate)_exps\.weight");
        assert_eq!(ik(Some(4300)), r"\.ffn_(up|down|gate|gate_up)_exps\.weight");
        assert_eq!(
            ik(None),
            r"\.ffn_(up|down|gate|gate_up)_exps\.(weight|scale)"
        );
        assert_eq!(
            layer_pattern(&prog(Engine::IkLlamaCpp, Some(4300)), 7),
            r"blk\.7\.(ffn_(up|down|gate|gate_up)_exps\.weight)"
        );
        assert_eq!(
            layer_pattern(&prog(Engine::LlamaCpp, None), 7),
            r"blk\.7\.ffn_(up|down|gate|gate_up)_(ch|)exps"
        );
    }
}
