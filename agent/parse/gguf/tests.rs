//! Unit tests of the GGUF header reader.

use super::*;

fn s(out: &mut Vec<u8>, v: &str) {
    out.extend_from_slice(&(v.len() as u64).to_le_bytes());
    out.extend_from_slice(v.as_bytes());
}

fn tiny() -> Vec<u8> {
    let mut b = b"GGUF".to_vec();
    b.extend_from_slice(&3u32.to_le_bytes());
    b.extend_from_slice(&2u64.to_le_bytes()); // tensors
    b.extend_from_slice(&3u64.to_le_bytes()); // kv
    s(&mut b, "general.architecture");
    b.extend_from_slice(&T_STRING.to_le_bytes());
    s(&mut b, "deepseek2");
    s(&mut b, "deepseek2.block_count");
    b.extend_from_slice(&T_U32.to_le_bytes());
    b.extend_from_slice(&61u32.to_le_bytes());
    s(&mut b, "tokenizer.ggml.tokens");
    b.extend_from_slice(&T_ARRAY.to_le_bytes());
    b.extend_from_slice(&T_STRING.to_le_bytes());
    b.extend_from_slice(&2u64.to_le_bytes());
    s(&mut b, "<s>");
    s(&mut b, "</s>");
    s(&mut b, "blk.3.ffn_gate_exps.weight");
    b.extend_from_slice(&3u32.to_le_bytes());
    for d in [7168u64, 2048, 256] {
        b.extend_from_slice(&d.to_le_bytes());
    }
    b.extend_from_slice(&12u32.to_le_bytes()); // Q4_K
    b.extend_from_slice(&0u64.to_le_bytes());
    s(&mut b, "output_norm.weight");
    b.extend_from_slice(&1u32.to_le_bytes());
    b.extend_from_slice(&7168u64.to_le_bytes());
    b.extend_from_slice(&0u32.to_le_bytes()); // F32
    b.extend_from_slice(&2_113_929_216u64.to_le_bytes());
    b
}

#[test]
fn type_sizes() {
    let q4k = ggml_type(12).unwrap();
    assert_eq!(q4k.name, "Q4_K");
    // 7168 x 2048 x 256 elements at 144 bytes per 256.
    assert_eq!(tensor_bytes(q4k, &[7168, 2048, 256]), Some(2_113_929_216));
    assert_eq!(
        tensor_bytes(ggml_type(8).unwrap(), &[7168, 576]),
        Some(7168 / 32 * 34 * 576)
    );
    assert_eq!(
        tensor_bytes(ggml_type(14).unwrap(), &[2048, 7168, 256]),
        Some(2048 / 256 * 210 * 7168 * 256)
    );
    assert_eq!(tensor_bytes(ggml_type(0).unwrap(), &[7168]), Some(28_672));
    assert_eq!(
        row_bytes(q4k, 100),
        None,
        "a Q4_K row must be a multiple of 256"
    );
    assert_eq!(ggml_type_by_name("q8_0").unwrap().id, 8);
    assert_eq!(type_name(139), "type 139");
}

#[test]
fn reads_a_small_header() {
    let b = tiny();
    let h = parse_header(&b).unwrap();
    assert_eq!(h.version, 3);
    assert_eq!(h.arch(), Some("deepseek2"));
    assert_eq!(h.arch_u64("block_count"), Some(61));
    assert_eq!(
        h.get("tokenizer.ggml.tokens"),
        Some(&MetaValue::Array {
            elem: T_STRING,
            len: 2,
            ints: None
        })
    );
    assert_eq!(h.tensors.len(), 2);
    assert_eq!(h.tensors[0].dims, vec![7168, 2048, 256]);
    assert_eq!(h.tensor_bytes(0, None), Some((2_113_929_216, true)));
    assert_eq!(h.data_start, (b.len() as u64).div_ceil(32) * 32);
    assert_eq!(h.data_end(), Some(h.data_start + 2_113_929_216 + 28_672));
}

#[test]
fn every_prefix_is_truncated_not_a_panic() {
    let b = tiny();
    for n in 0..b.len() {
        match parse_header(&b[..n]) {
            Err(GgufError::Truncated { needed }) => {
                assert!(needed > n as u64, "prefix {n}: needed {needed}")
            }
            other => panic!("prefix {n}: {other:?}"),
        }
    }
}

#[test]
fn hostile_counts_and_lengths() {
    let mut b = b"GGUF".to_vec();
    b.extend_from_slice(&3u32.to_le_bytes());
    b.extend_from_slice(&u64::MAX.to_le_bytes());
    b.extend_from_slice(&0u64.to_le_bytes());
    assert!(matches!(parse_header(&b), Err(GgufError::Invalid(_))));
    // A string array claiming 2^62 elements runs out of bytes.
    let mut b = b"GGUF".to_vec();
    b.extend_from_slice(&3u32.to_le_bytes());
    b.extend_from_slice(&0u64.to_le_bytes());
    b.extend_from_slice(&1u64.to_le_bytes());
    s(&mut b, "k");
    b.extend_from_slice(&T_ARRAY.to_le_bytes());
    b.extend_from_slice(&T_STRING.to_le_bytes());
    b.extend_from_slice(&(1u64 << 62).to_le_bytes());
    assert!(matches!(parse_header(&b), Err(GgufError::Truncated { .. })));
    // A u64 array whose byte length overflows.
    let mut b = b"GGUF".to_vec();
    b.extend_from_slice(&3u32.to_le_bytes());
    b.extend_from_slice(&0u64.to_le_bytes());
    b.extend_from_slice(&1u64.to_le_bytes());
    s(&mut b, "k");
    b.extend_from_slice(&T_ARRAY.to_le_bytes());
    b.extend_from_slice(&T_U64.to_le_bytes());
    b.extend_from_slice(&u64::MAX.to_le_bytes());
    assert!(matches!(parse_header(&b), Err(GgufError::Invalid(_))));
    assert_eq!(parse_header(b"GGML\x03\0\0\0"), Err(GgufError::BadMagic));
    assert_eq!(parse_header(b"GGUF\0\0\0\x03"), Err(GgufError::BigEndian));
    assert_eq!(parse_header(b"GGUF\x01\0\0\0"), Err(GgufError::Version(1)));
}

#[test]
fn split_names() {
    assert_eq!(
        split_paths("/m/DeepSeek-R1-Q4_K_M-00001-of-00003.gguf", 3),
        vec![
            "/m/DeepSeek-R1-Q4_K_M-00001-of-00003.gguf",
            "/m/DeepSeek-R1-Q4_K_M-00002-of-00003.gguf",
            "/m/DeepSeek-R1-Q4_K_M-00003-of-00003.gguf"
        ]
    );
    assert!(split_paths("/m/model.gguf", 3).is_empty());
    assert!(split_paths("/m/é-00001-of-0003.gguf", 3).is_empty());
}
