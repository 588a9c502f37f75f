//! Where llama.cpp / ik_llama.cpp put each tensor of a GGUF model, given `-ngl` and the `-ot`
//! rules, and how big the KV cache is. Pure: headers and arguments in, placement and bytes out.
//!
//! The placement rules as this agent understands llama.cpp's model loader
//! (`src/llama-model.cpp`, `create_tensor` / `load_tensors`; ik_llama.cpp has the same logic):
//!
//! - `-ngl N` offloads the last N repeating layers: layer `il` is on the GPU when
//!   `il >= max(n_layer - N, 0)`; the output layer (`output.weight`, `output_norm.weight`) counts as
//!   layer `n_layer`, so it is offloaded only when `N > n_layer` (`-ngl 99` on a 61-layer model);
//!   `token_embd.weight` always stays on the CPU.
//! - Then every `-ot` rule is tried in command-line order against the tensor name with
//!   `std::regex_search` (ECMAScript syntax; a *search*, not a full match: `exps` matches
//!   `blk.3.ffn_up_exps.weight`), and the first rule that matches decides the tensor's buffer,
//!   whatever `-ngl` said (the loader `break`s after the first match). A later rule that matches the
//!   same tensor never applies.
//!
//! This agent evaluates the patterns with `regex-lite`, after translating the ECMAScript escapes
//! that differ (`\_` and other identity escapes, `\uHHHH`). Patterns that ECMAScript accepts but
//! regex-lite cannot evaluate (lookahead `(?=`, backreferences `\1`) are reported as not
//! evaluated, never guessed; Rust-only syntax that `std::regex` rejects (`(?i)`, `(?P<..>`,
//! lookbehind) is reported as a pattern llama.cpp will refuse.

use crate::parse::gguf::{self, GgmlType, GgufHeader};
use crate::parse::llmargs::{Engine, LlmArgs, RawRule, RuleOrigin};
use regex_lite::Regex;

/// One tensor of the model (all shards).
#[derive(Debug, Clone)]
pub struct ModelTensor {
    /// Name.
    pub name: String,
    /// Bytes of its data.
    pub bytes: u64,
    /// True when `bytes` comes from the type table (false: from offsets, an upper bound).
    pub exact: bool,
    /// `blk.N` layer.
    pub layer: Option<u64>,
    /// A routed-expert tensor (`blk.N.ffn_{gate,up,down}_exps.*`).
    pub routed_expert: bool,
}

/// The model as the placement sees it.
#[derive(Debug, Clone)]
pub struct Model {
    /// `general.architecture`.
    pub arch: String,
    /// `<arch>.block_count` (else the highest `blk.N` + 1).
    pub n_layer: u64,
    /// Every tensor.
    pub tensors: Vec<ModelTensor>,
    /// Tensors whose size could not be determined at all.
    pub not_sized: Vec<String>,
    /// Header of the first shard (metadata).
    pub header: GgufHeader,
}

/// `blk.N.` → N.
pub fn layer_of(name: &str) -> Option<u64> {
    let rest = name.strip_prefix("blk.")?;
    let (n, _) = rest.split_once('.')?;
    if n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    n.parse().ok()
}

/// True for a routed-expert tensor: `blk.N.<x>_exps.<suffix>` (`ffn_gate_exps.weight`,
/// `ffn_up_exps.weight`, `ffn_down_exps.weight`, fused `ffn_gate_up_exps`, their biases).
pub fn is_routed_expert(name: &str) -> bool {
    let Some(rest) = name.strip_prefix("blk.") else {
        return false;
    };
    let mut parts = rest.split('.');
    let (Some(n), Some(kind)) = (parts.next(), parts.next()) else {
        return false;
    };
    !n.is_empty()
        && n.bytes().all(|b| b.is_ascii_digit())
        && kind.starts_with("ffn_")
        && kind.ends_with("_exps")
}

impl Model {
    /// Builds the model from its shards' headers (first shard first) and file lengths.
    pub fn from_shards(shards: &[(&GgufHeader, Option<u64>)]) -> Result<Model, String> {
        let Some((first, _)) = shards.first() else {
            return Err("no model file".into());
        };
        let mut tensors = Vec::new();
        let mut not_sized = Vec::new();
        for (h, len) in shards {
            for (i, t) in h.tensors.iter().enumerate() {
                match h.tensor_bytes(i, *len) {
                    Some((bytes, exact)) => tensors.push(ModelTensor {
                        name: t.name.clone(),
                        bytes,
                        exact,
                        layer: layer_of(&t.name),
                        routed_expert: is_routed_expert(&t.name),
                    }),
                    None => not_sized.push(t.name.clone()),
                }
            }
        }
        let max_layer = tensors
            .iter()
            .filter_map(|t| t.layer)
            .max()
            .map(|l| l + 1)
            .unwrap_or(0);
        let n_layer = first.arch_u64("block_count").unwrap_or(max_layer);
        Ok(Model {
            arch: first.arch().unwrap_or("").to_string(),
            n_layer,
            tensors,
            not_sized,
            header: (*first).clone(),
        })
    }
}

/// What a rule's buffer name is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BufferKind {
    /// `CPU`.
    Cpu,
    /// `CUDA<n>`.
    Cuda(u32),
    /// Another backend's device (`Vulkan0`, `ROCm0`, `SYCL0`, `RPC[...]`): not checked here.
    OtherDevice,
    /// No device offers it: llama.cpp stops with "unknown buffer type".
    Unknown(String),
}

/// A rule's regex as this agent can evaluate it.
#[derive(Debug, Clone)]
pub enum Pattern {
    /// Evaluated with regex-lite.
    Ok(Regex),
    /// Valid ECMAScript that regex-lite cannot evaluate (lookahead, backreferences).
    NotEvaluated(String),
    /// llama.cpp's `std::regex` rejects it (the program stops at load), as far as this agent
    /// can tell.
    Rejected(String),
}

/// One compiled rule.
#[derive(Debug, Clone)]
pub struct Rule {
    /// 1-based position among the `-ot` rules (0 for a rule `--cpu-moe`, `--n-cpu-moe` or
    /// `--fit` added).
    pub n: usize,
    /// The raw rule.
    pub raw: RawRule,
    /// Its buffer.
    pub kind: BufferKind,
    /// Its pattern; `None` for a piece without `=`.
    pub pattern: Option<Pattern>,
}

impl Rule {
    /// True when this rule sends tensors to a GPU.
    pub fn to_gpu(&self) -> bool {
        matches!(self.kind, BufferKind::Cuda(_) | BufferKind::OtherDevice)
    }

    /// `rule 2 (`exps=CPU`)`, `--cpu-moe (`\.ffn_…=CPU`)`, `--n-cpu-moe (`blk\.3…=CPU`)`.
    pub fn label(&self) -> String {
        match self.raw.origin {
            RuleOrigin::OverrideTensor { .. } => format!("rule {} (`{}`)", self.n, self.raw.text),
            RuleOrigin::CpuMoe => format!("--cpu-moe (`{}`)", self.raw.text),
            RuleOrigin::NCpuMoe { .. } => format!("--n-cpu-moe (`{}`)", self.raw.text),
            RuleOrigin::Fit { .. } => format!("--fit (`{}`)", self.raw.text),
        }
    }

    fn regex(&self) -> Option<&Regex> {
        match &self.pattern {
            Some(Pattern::Ok(r)) => Some(r),
            _ => None,
        }
    }
}

/// The buffer kind of a name; `gpu_count` (from nvidia-smi) bounds `CUDA<n>` when known.
pub fn buffer_kind(name: &str, gpu_count: Option<usize>) -> BufferKind {
    if name == "CPU" {
        return BufferKind::Cpu;
    }
    if let Some(n) = name.strip_prefix("CUDA").and_then(|d| {
        (!d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
            .then(|| d.parse::<u32>().ok())
            .flatten()
    }) {
        return match gpu_count {
            Some(c) if n as usize >= c => BufferKind::Unknown(format!(
                "this host has {c} NVIDIA GPU(s): CUDA0..CUDA{}",
                c.saturating_sub(1)
            )),
            _ => BufferKind::Cuda(n),
        };
    }
    let other = ["Vulkan", "ROCm", "SYCL", "MUSA", "CANN"].iter().any(|p| {
        name.strip_prefix(p)
            .is_some_and(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
    }) || name == "Metal"
        || (name.starts_with("RPC[") && name.ends_with(']'));
    if other {
        return BufferKind::OtherDevice;
    }
    let hint = if name.eq_ignore_ascii_case("cpu") {
        "buffer names are case-sensitive: write CPU".to_string()
    } else if name.to_ascii_uppercase().starts_with("CUDA") || name.eq_ignore_ascii_case("gpu") {
        "the GPU buffers are named CUDA0, CUDA1, …".to_string()
    } else if name.is_empty() {
        "nothing after the `=`".to_string()
    } else {
        "the buffer types are CPU and CUDA0, CUDA1, … (one per GPU)".to_string()
    };
    BufferKind::Unknown(hint)
}

/// Translates an ECMAScript pattern for regex-lite: `Ok(pattern)`, or `Err((rejected, why))` where
/// `rejected` means llama.cpp's `std::regex` refuses it too, else the agent cannot evaluate it.
pub fn translate(p: &str) -> Result<String, (bool, String)> {
    let chars: Vec<char> = p.chars().collect();
    let mut out = String::with_capacity(p.len() + 8);
    let mut i = 0;
    let mut in_class = false;
    while i < chars.len() {
        let c = chars[i];
        match c {
            '\\' => {
                let Some(&n) = chars.get(i + 1) else {
                    return Err((true, "a trailing backslash".into()));
                };
                i += 2;
                match n {
                    '1'..='9' => return Err((false, format!("a backreference `\\{n}`"))),
                    'c' => return Err((false, "a control escape `\\c`".into())),
                    'd' | 'D' | 'w' | 'W' | 's' | 'S' | 'b' | 'B' | 'n' | 'r' | 't' | 'f' | 'v' => {
                        out.push('\\');
                        out.push(n);
                    }
                    '0' => out.push_str("\\x00"),
                    'x' => out.push_str("\\x"),
                    'u' => {
                        let hex: String = chars.iter().skip(i).take(4).collect();
                        if hex.len() == 4 && hex.chars().all(|h| h.is_ascii_hexdigit()) {
                            out.push_str(&format!("\\x{{{hex}}}"));
                            i += 4;
                        } else {
                            return Err((false, "a `\\u` escape".into()));
                        }
                    }
                    n if n.is_ascii_alphanumeric() => return Err((false, format!("the escape `\\{n}`"))),
                    n => {
                        // Identity escape: `\.` `\_` `\/`. regex-lite accepts escaped punctuation.
                        if "\\.+*?()|[]{}^$#&-~".contains(n) {
                            out.push('\\');
                        }
                        out.push(n);
                    }
                }
                continue;
            }
            '(' if !in_class && chars.get(i + 1) == Some(&'?') => match chars.get(i + 2) {
                Some(':') => out.push('('),
                Some('=') | Some('!') => return Err((false, "a lookahead `(?=`/`(?!`".into())),
                Some('<') => return Err((true, "a lookbehind or named group `(?<`, which std::regex (ECMAScript) does not have".into())),
                _ => return Err((true, "an inline flag or group `(?…)`, which std::regex (ECMAScript) does not have".into())),
            },
            '[' if in_class => out.push_str("\\["),
            '[' => {
                in_class = true;
                out.push('[');
                // `[^]` and `[]` are ECMAScript's any-character and empty classes.
                if chars.get(i + 1) == Some(&']') || (chars.get(i + 1) == Some(&'^') && chars.get(i + 2) == Some(&']')) {
                    return Err((false, "an empty class `[]` or `[^]`".into()));
                }
                if chars.get(i + 1) == Some(&'^') {
                    out.push('^');
                    i += 1;
                }
            }
            ']' if in_class => {
                in_class = false;
                out.push(']');
            }
            '&' | '~' if in_class => {
                out.push('\\');
                out.push(c);
            }
            c => out.push(c),
        }
        i += 1;
    }
    Ok(out)
}

/// Compiles a pattern.
pub fn compile(p: &str) -> Pattern {
    match translate(p) {
        Err((true, why)) => Pattern::Rejected(why),
        Err((false, why)) => Pattern::NotEvaluated(why),
        Ok(t) => match regex_lite::RegexBuilder::new(&t)
            .size_limit(1 << 20)
            .nest_limit(64)
            .build()
        {
            Ok(r) => Pattern::Ok(r),
            Err(e) => Pattern::Rejected(format!(
                "not a valid regex ({})",
                e.to_string().lines().last().unwrap_or("").trim()
            )),
        },
    }
}

/// Compiles the rules of a command line.
pub fn compile_rules(raw: &[RawRule], gpu_count: Option<usize>) -> Vec<Rule> {
    let mut n = 0;
    raw.iter()
        .map(|r| {
            let ot = matches!(r.origin, RuleOrigin::OverrideTensor { .. });
            n += usize::from(ot);
            Rule {
                n: if ot { n } else { 0 },
                raw: r.clone(),
                kind: buffer_kind(&r.buffer, gpu_count),
                pattern: r.pattern.as_deref().map(compile),
            }
        })
        .collect()
}

/// Where one tensor goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placed {
    /// On a GPU.
    pub gpu: bool,
    /// The rule (index into the rules) that decided it; `None` = `-ngl` did.
    pub rule: Option<usize>,
}

/// Layer `il` (the output layer is `n_layer`) is offloaded by `-ngl ngl`.
pub fn layer_on_gpu(il: u64, n_layer: u64, ngl: u64) -> bool {
    let start = n_layer.saturating_sub(ngl);
    let act = ngl.min(n_layer + 1);
    il >= start && il - start < act
}

/// Where `-ngl` alone puts a tensor.
pub fn default_on_gpu(t: &ModelTensor, n_layer: u64, ngl: u64) -> bool {
    if t.name.starts_with("token_embd") {
        return false;
    }
    layer_on_gpu(t.layer.unwrap_or(n_layer), n_layer, ngl)
}

/// Places every tensor: the first matching rule (with a known buffer and an evaluable pattern),
/// else `-ngl`.
pub fn place(model: &Model, rules: &[Rule], ngl: u64) -> Vec<Placed> {
    model
        .tensors
        .iter()
        .map(|t| {
            for (ri, r) in rules.iter().enumerate() {
                if matches!(r.kind, BufferKind::Unknown(_)) {
                    continue;
                }
                if r.regex().is_some_and(|re| re.is_match(&t.name)) {
                    return Placed {
                        gpu: r.to_gpu(),
                        rule: Some(ri),
                    };
                }
            }
            Placed {
                gpu: default_on_gpu(t, model.n_layer, ngl),
                rule: None,
            }
        })
        .collect()
}

/// Bytes on the GPU.
pub fn gpu_bytes(model: &Model, placed: &[Placed]) -> u64 {
    model
        .tensors
        .iter()
        .zip(placed)
        .filter(|(_, p)| p.gpu)
        .map(|(t, _)| t.bytes)
        .sum()
}

/// KV-cache inputs (from the command line, or a variant of it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KvArgs {
    /// Context size (`-c`); `None` = not given.
    pub ctx: Option<u64>,
    /// `-ctk`.
    pub k_type: String,
    /// `-ctv`.
    pub v_type: String,
    /// `-mla` (ik_llama.cpp).
    pub mla: Option<u32>,
    /// The program.
    pub engine: Engine,
    /// `-nkvo`.
    pub no_offload: bool,
}

impl KvArgs {
    /// From a command line.
    pub fn from_args(a: &LlmArgs) -> KvArgs {
        KvArgs {
            ctx: a.ctx.as_deref().and_then(|c| c.parse().ok()),
            k_type: a
                .cache_type_k
                .clone()
                .unwrap_or_else(|| "f16".into())
                .to_ascii_lowercase(),
            v_type: a
                .cache_type_v
                .clone()
                .unwrap_or_else(|| "f16".into())
                .to_ascii_lowercase(),
            mla: a.mla.as_deref().and_then(|m| m.parse().ok()),
            engine: a.engine.unwrap_or(Engine::LlamaCpp),
            no_offload: a.no_kv_offload,
        }
    }
}

/// The KV cache of a model and command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KvPlan {
    /// Cells (the context size).
    pub n_ctx: u64,
    /// K elements per cell per layer.
    pub k_elems: u64,
    /// V elements per cell per layer (0 when only a K cache is kept: ik_llama.cpp `-mla 2/3`).
    pub v_elems: u64,
    /// K cache type.
    pub k_type: &'static GgmlType,
    /// V cache type.
    pub v_type: &'static GgmlType,
    /// How the figures were derived (for the finding).
    pub how: String,
}

impl KvPlan {
    /// Bytes of K for one layer.
    pub fn k_layer_bytes(&self) -> u64 {
        gguf::row_bytes(self.k_type, self.k_elems)
            .unwrap_or(0)
            .saturating_mul(self.n_ctx)
    }
    /// Bytes of V for one layer.
    pub fn v_layer_bytes(&self) -> u64 {
        gguf::row_bytes(self.v_type, self.v_elems)
            .unwrap_or(0)
            .saturating_mul(self.n_ctx)
    }
    /// Bytes of the layers `-ngl` puts on the GPU (none with `-nkvo`).
    pub fn gpu_bytes(&self, n_layer: u64, ngl: u64, no_offload: bool) -> u64 {
        if no_offload {
            return 0;
        }
        let layers = (0..n_layer)
            .filter(|il| layer_on_gpu(*il, n_layer, ngl))
            .count() as u64;
        layers.saturating_mul(self.k_layer_bytes().saturating_add(self.v_layer_bytes()))
    }
}

/// Works out the KV cache: per-layer K/V widths from the GGUF metadata, or for an MLA model
/// (DeepSeek-V2/V3: `attention.kv_lora_rank`) under ik_llama.cpp from `-mla`:
/// 0 = standard attention (K = heads x 192, V = heads x 128 for DeepSeek), 1 = latent K
/// (`kv_lora_rank + rope` = 576) and V (512), 2 and 3 = latent K only. Upstream llama.cpp has no
/// `-mla`; its cache follows the GGUF's own `head_count_kv`/`key_length`/`value_length`, which newer
/// conversions of DeepSeek set to the latent sizes (1 x 576 / 512). Every layer is taken to
/// be full attention (no sliding window).
pub fn kv_plan(model: &Model, kv: &KvArgs) -> Result<KvPlan, String> {
    let h = &model.header;
    let k_type = gguf::ggml_type_by_name(&kv.k_type)
        .ok_or_else(|| format!("unknown KV cache type -ctk {}", kv.k_type))?;
    let v_type = gguf::ggml_type_by_name(&kv.v_type)
        .ok_or_else(|| format!("unknown KV cache type -ctv {}", kv.v_type))?;
    let (n_ctx, ctx_how) = match kv.ctx {
        Some(0) => {
            let c = h.arch_u64("context_length").ok_or("-c 0 asks for the model's context length, which the GGUF does not state")?;
            (c, format!("-c 0 = the model's {c}"))
        }
        Some(c) => (c, format!("-c {c}")),
        None => (4096, "no -c: assuming 4096 (llama.cpp's long-standing default; some newer builds default to the model's full context)".to_string()),
    };
    let n_embd = h.arch_u64("embedding_length");
    let n_head = h.arch_layer_u64("attention.head_count", 0);
    let n_head_kv = h.arch_layer_u64("attention.head_count_kv", 0).or(n_head);
    let key_len = h
        .arch_u64("attention.key_length")
        .or_else(|| Some(n_embd? / n_head?.max(1)));
    let val_len = h.arch_u64("attention.value_length").or(key_len);
    let lora = h.arch_u64("attention.kv_lora_rank");
    let rope = h.arch_u64("rope.dimension_count");
    let std_kv = || -> Result<(u64, u64, String), String> {
        let (Some(hk), Some(kl), Some(vl)) = (n_head_kv, key_len, val_len) else {
            return Err(
                "the GGUF lacks attention.head_count(_kv)/key_length/embedding_length".into(),
            );
        };
        Ok((hk * kl, hk * vl, format!("{hk} KV heads x K {kl} / V {vl}")))
    };
    let (k_elems, v_elems, shape_how) = match (kv.engine, lora, rope) {
        (Engine::IkLlamaCpp, Some(lora), Some(rope)) => {
            let mla = kv.mla.unwrap_or(0);
            match mla {
                0 => {
                    // Standard attention needs every head's K and V; newer conversions keep those
                    // sizes in the `_mla` keys.
                    let heads = n_head.ok_or("the GGUF lacks attention.head_count")?;
                    let kl = h
                        .arch_u64("attention.key_length_mla")
                        .or(key_len)
                        .unwrap_or(0);
                    let vl = h
                        .arch_u64("attention.value_length_mla")
                        .or(val_len)
                        .unwrap_or(0);
                    let how = if kv.mla.is_none() {
                        format!("no -mla: assuming 0, standard attention ({heads} heads x K {kl} / V {vl}); pass -mla explicitly")
                    } else {
                        format!("-mla 0: standard attention, {heads} heads x K {kl} / V {vl}")
                    };
                    (heads * kl, heads * vl, how)
                }
                1 => (
                    lora + rope,
                    lora,
                    format!("-mla 1: latent K {} + V {lora}", lora + rope),
                ),
                _ => (
                    lora + rope,
                    0,
                    format!("-mla {mla}: latent K cache only, {} per token", lora + rope),
                ),
            }
        }
        _ => std_kv()?,
    };
    Ok(KvPlan {
        n_ctx,
        k_elems,
        v_elems,
        k_type,
        v_type,
        how: format!(
            "{ctx_how}; {shape_how}; K {} / V {}",
            k_type.name.to_lowercase(),
            v_type.name.to_lowercase()
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert_eq!(layer_of("blk.60.ffn_up_exps.weight"), Some(60));
        assert_eq!(layer_of("output.weight"), None);
        assert!(is_routed_expert("blk.3.ffn_gate_exps.weight"));
        assert!(is_routed_expert("blk.3.ffn_gate_up_exps.weight"));
        assert!(!is_routed_expert("blk.3.ffn_gate_shexp.weight"));
        assert!(!is_routed_expert("blk.3.ffn_gate_inp.weight"));
        assert!(!is_routed_expert("blk.x.ffn_up_exps.weight"));
    }

    #[test]
    fn ngl_layers() {
        // 61 layers: -ngl 99 offloads all and the output; -ngl 61 all layers, not the output.
        assert!(layer_on_gpu(0, 61, 99) && layer_on_gpu(61, 61, 99));
        assert!(layer_on_gpu(0, 61, 61) && !layer_on_gpu(61, 61, 61));
        assert!(!layer_on_gpu(50, 61, 10) && layer_on_gpu(51, 61, 10) && !layer_on_gpu(61, 61, 10));
        assert!(!layer_on_gpu(60, 61, 0));
    }

    #[test]
    fn ecmascript_translation() {
        assert_eq!(
            translate(r"blk\.[0-9]+\.ffn_.*_exps\.weight"),
            Ok(r"blk\.[0-9]+\.ffn_.*_exps\.weight".into())
        );
        assert_eq!(translate(r"ffn\_up"), Ok("ffn_up".into()));
        assert_eq!(translate(r"a\u0041"), Ok(r"a\x{0041}".into()));
        assert!(matches!(translate(r"(?i)exps"), Err((true, _))));
        assert!(matches!(translate(r"blk\.(?!3)"), Err((false, _))));
        assert!(matches!(translate(r"(a)\1"), Err((false, _))));
        assert!(matches!(compile("blk\\.(["), Pattern::Rejected(_)));
        let Pattern::Ok(r) = compile(r"blk\.[0-9]\.ffn") else {
            panic!()
        };
        assert!(r.is_match("blk.7.ffn_up_exps.weight"));
        assert!(
            !r.is_match("blk.17.ffn_up_exps.weight"),
            "regex_search semantics: no single digit before `.ffn`"
        );
    }

    #[test]
    fn buffers() {
        assert_eq!(buffer_kind("CPU", None), BufferKind::Cpu);
        assert_eq!(buffer_kind("CUDA1", None), BufferKind::Cuda(1));
        assert!(matches!(
            buffer_kind("CUDA1", Some(1)),
            BufferKind::Unknown(_)
        ));
        assert!(
            matches!(buffer_kind("cpu", None), BufferKind::Unknown(h) if h.contains("case-sensitive"))
        );
        assert!(matches!(buffer_kind("GPU", None), BufferKind::Unknown(_)));
        assert_eq!(buffer_kind("Vulkan0", None), BufferKind::OtherDevice);
    }
}
