//! A small GGUF v3 writer for tests: metadata and tensor infos, no tensor data (the agent reads
//! only headers), and model builders with DeepSeek-V3 and Qwen3-MoE tensor names and shapes.
//! Byte sizes come from this file's own table of ggml block layouts, written from the block
//! structs in ggml-common.h, so the agent's table is checked against an independent one.

#![allow(dead_code)]

use std::path::Path;

/// ggml type ids used here.
pub const F32: u32 = 0;
pub const F16: u32 = 1;
pub const Q8_0: u32 = 8;
pub const Q4_K: u32 = 12;
pub const Q6_K: u32 = 14;

/// (elements per block, bytes per block) from the block structs:
/// Q8_0 = f16 d + 32 x i8; Q4_K = 2 x f16 + 12 scale bytes + 128 nibble bytes;
/// Q6_K = 128 low bytes + 64 high bytes + 16 scales + f16 d.
pub fn block(ty: u32) -> (u64, u64) {
    match ty {
        F32 => (1, 4),
        F16 => (1, 2),
        Q8_0 => (32, 2 + 32),
        Q4_K => (256, 2 + 2 + 12 + 128),
        Q6_K => (256, 128 + 64 + 16 + 2),
        other => panic!("type {other} not in the test table"),
    }
}

/// Bytes of a tensor (ggml order: ne[0] is the row).
pub fn bytes(ne: &[u64], ty: u32) -> u64 {
    let (b, s) = block(ty);
    assert_eq!(ne[0] % b, 0, "{ne:?} type {ty}");
    ne[0] / b * s * ne[1..].iter().product::<u64>()
}

/// A metadata value.
pub enum Kv {
    U32(u32),
    Str(String),
    Strs(Vec<String>),
}

/// One tensor: name, ggml shape, type.
pub type Tensor = (String, Vec<u64>, u32);

fn put_str(b: &mut Vec<u8>, s: &str) {
    b.extend_from_slice(&(s.len() as u64).to_le_bytes());
    b.extend_from_slice(s.as_bytes());
}

/// The bytes of a header-only GGUF v3 file (alignment 32).
pub fn header(kv: &[(&str, Kv)], tensors: &[Tensor]) -> Vec<u8> {
    let mut b = b"GGUF".to_vec();
    b.extend_from_slice(&3u32.to_le_bytes());
    b.extend_from_slice(&(tensors.len() as u64).to_le_bytes());
    b.extend_from_slice(&(kv.len() as u64).to_le_bytes());
    for (k, v) in kv {
        put_str(&mut b, k);
        match v {
            Kv::U32(x) => {
                b.extend_from_slice(&4u32.to_le_bytes());
                b.extend_from_slice(&x.to_le_bytes());
            }
            Kv::Str(s) => {
                b.extend_from_slice(&8u32.to_le_bytes());
                put_str(&mut b, s);
            }
            Kv::Strs(v) => {
                b.extend_from_slice(&9u32.to_le_bytes());
                b.extend_from_slice(&8u32.to_le_bytes());
                b.extend_from_slice(&(v.len() as u64).to_le_bytes());
                for s in v {
                    put_str(&mut b, s);
                }
            }
        }
    }
    let mut offset = 0u64;
    for (name, ne, ty) in tensors {
        put_str(&mut b, name);
        b.extend_from_slice(&(ne.len() as u32).to_le_bytes());
        for d in ne {
            b.extend_from_slice(&d.to_le_bytes());
        }
        b.extend_from_slice(&ty.to_le_bytes());
        b.extend_from_slice(&offset.to_le_bytes());
        offset += bytes(ne, *ty).div_ceil(32) * 32;
    }
    b
}

/// Writes a header-only file.
pub fn write(path: &Path, kv: &[(&str, Kv)], tensors: &[Tensor]) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, header(kv, tensors)).unwrap();
}

/// DeepSeek-V3/R1 tensors with real shapes (n_embd 7168, 128 heads, q/kv LoRA ranks 1536/512,
/// rope 64, dense FFN 18432, expert FFN 2048, vocab 129280) and a Q4_K_M-like type mix.
pub fn deepseek_tensors(n_layer: u64, n_dense: u64, n_expert: u64) -> Vec<Tensor> {
    let (e, v, h, ql, kvl, rope, nope, vh, ff, ffe) = (
        7168u64, 129280u64, 128u64, 1536u64, 512u64, 64u64, 128u64, 128u64, 18432u64, 2048u64,
    );
    let mut out: Vec<Tensor> = vec![("token_embd.weight".into(), vec![e, v], Q4_K)];
    for il in 0..n_layer {
        let t = |s: &str, ne: Vec<u64>, ty: u32| (format!("blk.{il}.{s}"), ne, ty);
        out.extend([
            t("attn_norm.weight", vec![e], F32),
            t("attn_q_a_norm.weight", vec![ql], F32),
            t("attn_kv_a_norm.weight", vec![kvl], F32),
            t("attn_q_a.weight", vec![e, ql], Q4_K),
            t("attn_q_b.weight", vec![ql, h * (nope + rope)], Q4_K),
            t("attn_kv_a_mqa.weight", vec![e, kvl + rope], Q8_0),
            t("attn_kv_b.weight", vec![kvl, h * (nope + vh)], Q4_K),
            t("attn_output.weight", vec![h * vh, e], Q4_K),
            t("ffn_norm.weight", vec![e], F32),
        ]);
        if il < n_dense {
            out.extend([
                t("ffn_gate.weight", vec![e, ff], Q4_K),
                t("ffn_up.weight", vec![e, ff], Q4_K),
                t("ffn_down.weight", vec![ff, e], Q6_K),
            ]);
        } else {
            out.extend([
                t("ffn_gate_inp.weight", vec![e, n_expert], F32),
                t("exp_probs_b.bias", vec![n_expert], F32),
                t("ffn_gate_exps.weight", vec![e, ffe, n_expert], Q4_K),
                t("ffn_up_exps.weight", vec![e, ffe, n_expert], Q4_K),
                t("ffn_down_exps.weight", vec![ffe, e, n_expert], Q6_K),
                t("ffn_gate_shexp.weight", vec![e, ffe], Q4_K),
                t("ffn_up_shexp.weight", vec![e, ffe], Q4_K),
                t("ffn_down_shexp.weight", vec![ffe, e], Q6_K),
            ]);
        }
    }
    out.push(("output_norm.weight".into(), vec![e], F32));
    out.push(("output.weight".into(), vec![e, v], Q6_K));
    out
}

/// DeepSeek-V3 metadata (old-style conversion: 128 KV heads, K 192 / V 128, LoRA ranks).
pub fn deepseek_kv(n_layer: u32, n_expert: u32) -> Vec<(&'static str, Kv)> {
    vec![
        ("general.architecture", Kv::Str("deepseek2".into())),
        ("general.name", Kv::Str("DeepSeek-V3".into())),
        ("deepseek2.block_count", Kv::U32(n_layer)),
        ("deepseek2.context_length", Kv::U32(163_840)),
        ("deepseek2.embedding_length", Kv::U32(7168)),
        ("deepseek2.attention.head_count", Kv::U32(128)),
        ("deepseek2.attention.head_count_kv", Kv::U32(128)),
        ("deepseek2.attention.key_length", Kv::U32(192)),
        ("deepseek2.attention.value_length", Kv::U32(128)),
        ("deepseek2.attention.q_lora_rank", Kv::U32(1536)),
        ("deepseek2.attention.kv_lora_rank", Kv::U32(512)),
        ("deepseek2.rope.dimension_count", Kv::U32(64)),
        ("deepseek2.expert_count", Kv::U32(n_expert)),
        ("deepseek2.leading_dense_block_count", Kv::U32(3)),
        (
            "tokenizer.ggml.tokens",
            Kv::Strs(vec!["<s>".into(), "</s>".into(), "the".into()]),
        ),
    ]
}

/// Qwen3-235B-A22B tensors (94 layers, all MoE with 128 experts of 1536; n_embd 4096; 64 query
/// heads and 4 KV heads of 128; vocab 151936).
pub fn qwen3moe_tensors(n_layer: u64) -> Vec<Tensor> {
    let (e, v, hq, hkv, hd, ffe, ne) = (4096u64, 151_936u64, 64u64, 4u64, 128u64, 1536u64, 128u64);
    let mut out: Vec<Tensor> = vec![("token_embd.weight".into(), vec![e, v], Q4_K)];
    for il in 0..n_layer {
        let t = |s: &str, ne: Vec<u64>, ty: u32| (format!("blk.{il}.{s}"), ne, ty);
        out.extend([
            t("attn_norm.weight", vec![e], F32),
            t("attn_q.weight", vec![e, hq * hd], Q4_K),
            t("attn_k.weight", vec![e, hkv * hd], Q4_K),
            t("attn_v.weight", vec![e, hkv * hd], Q6_K),
            t("attn_output.weight", vec![hq * hd, e], Q4_K),
            t("attn_q_norm.weight", vec![hd], F32),
            t("attn_k_norm.weight", vec![hd], F32),
            t("ffn_norm.weight", vec![e], F32),
            t("ffn_gate_inp.weight", vec![e, ne], F32),
            t("ffn_gate_exps.weight", vec![e, ffe, ne], Q4_K),
            t("ffn_up_exps.weight", vec![e, ffe, ne], Q4_K),
            t("ffn_down_exps.weight", vec![ffe, e, ne], Q6_K),
        ]);
    }
    out.push(("output_norm.weight".into(), vec![e], F32));
    out.push(("output.weight".into(), vec![e, v], Q6_K));
    out
}

/// Qwen3-MoE metadata.
pub fn qwen3moe_kv(n_layer: u32) -> Vec<(&'static str, Kv)> {
    vec![
        ("general.architecture", Kv::Str("qwen3moe".into())),
        ("qwen3moe.block_count", Kv::U32(n_layer)),
        ("qwen3moe.context_length", Kv::U32(40_960)),
        ("qwen3moe.embedding_length", Kv::U32(4096)),
        ("qwen3moe.attention.head_count", Kv::U32(64)),
        ("qwen3moe.attention.head_count_kv", Kv::U32(4)),
        ("qwen3moe.attention.key_length", Kv::U32(128)),
        ("qwen3moe.attention.value_length", Kv::U32(128)),
        ("qwen3moe.expert_count", Kv::U32(128)),
    ]
}

/// True for `blk.N.ffn_*_exps.*`.
pub fn is_expert(name: &str) -> bool {
    name.starts_with("blk.") && name.contains("_exps.")
}
