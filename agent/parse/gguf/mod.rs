//! GGUF model headers (the file format of llama.cpp and ik_llama.cpp): magic, version, metadata
//! and tensor infos (name, shape, ggml type, data offset). Only the header is read: a 671B model
//! is hundreds of GB, its header a few MB, and the byte accounting of `llm.vram_budget` comes from
//! each tensor's type and shape, never from the file size.
//!
//! Layout (GGUF v2/v3, little-endian): `"GGUF"`, `u32` version, `u64` tensor count, `u64`
//! metadata count; metadata as (string key, `u32` value type, value); tensor infos as (string
//! name, `u32` n_dims, `u64` dims, `u32` ggml type, `u64` offset into the data section). Strings
//! are a `u64` length and bytes. The data section starts at the next multiple of
//! `general.alignment` (default 32) after the tensor infos.
//!
//! The parser is written for hostile input: every length and count is checked against the bytes
//! that remain before anything is allocated, counts and string lengths are capped, arithmetic is
//! checked, and it never panics. It takes a prefix of the file: when the header runs past the
//! prefix it answers [`GgufError::Truncated`] with the offset it needed, so the probe can read
//! more. A hand-written reader rather than a crate: the GGUF crates on crates.io either need a
//! newer Rust than this project's 1.85 (`gguf-rs-lib` 0.3 needs 1.87) or read whole files and
//! materialise every metadata array (`gguf`, `gguf-rs`); this one skips tokenizer arrays in place
//! and knows the ggml type sizes the budget needs.

use std::collections::BTreeMap;
use std::fmt;

/// Most tensors accepted (real models have a few thousand).
pub const MAX_TENSORS: u64 = 1 << 20;
/// Most metadata entries accepted.
pub const MAX_KV: u64 = 1 << 20;
/// Longest string accepted (a chat template is a few KB; a key a few dozen bytes).
pub const MAX_STRING: u64 = 16 << 20;
/// Longest tensor name llama.cpp accepts is 63 bytes (`GGML_MAX_NAME` 64 with the NUL).
pub const MAX_TENSOR_NAME: usize = 63;
/// ggml tensors have at most 4 dimensions.
pub const MAX_DIMS: u32 = 4;
/// Integer arrays up to this length are kept (per-layer `head_count_kv`); longer ones (tokenizer
/// tables) are skipped, only their length kept.
pub const MAX_KEPT_ARRAY: u64 = 4096;
/// Nested arrays deeper than this are refused.
const MAX_DEPTH: u32 = 3;

/// One ggml tensor type: id, name, elements per block, bytes per block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GgmlType {
    /// Type id as stored in GGUF (`enum ggml_type`).
    pub id: u32,
    /// Name as ggml prints it (`Q4_K`).
    pub name: &'static str,
    /// Elements per block.
    pub block: u64,
    /// Bytes per block.
    pub size: u64,
}

/// The ggml types this agent can size, as upstream ggml numbers them (ggml.h `enum ggml_type`;
/// block sizes as `GGML_QUANT_SIZES` in gguf-py 0.19.0 lists them). Ids 4, 5 and 31-33, 36-38
/// are removed types; `Q8_1` (9) is never stored as a weight and left out. ik_llama.cpp adds its
/// own types (IQ2_K, IQ4_KS, the `_R4`/`_R8` repacked ones, ...) above these ids: they are not
/// in this table, and a tensor of such a type is sized from the distance to the next tensor's
/// data offset instead (see [`GgufHeader::tensor_bytes`]).
pub const GGML_TYPES: &[GgmlType] = &[
    GgmlType {
        id: 0,
        name: "F32",
        block: 1,
        size: 4,
    },
    GgmlType {
        id: 1,
        name: "F16",
        block: 1,
        size: 2,
    },
    GgmlType {
        id: 2,
        name: "Q4_0",
        block: 32,
        size: 18,
    },
    GgmlType {
        id: 3,
        name: "Q4_1",
        block: 32,
        size: 20,
    },
    GgmlType {
        id: 6,
        name: "Q5_0",
        block: 32,
        size: 22,
    },
    GgmlType {
        id: 7,
        name: "Q5_1",
        block: 32,
        size: 24,
    },
    GgmlType {
        id: 8,
        name: "Q8_0",
        block: 32,
        size: 34,
    },
    GgmlType {
        id: 10,
        name: "Q2_K",
        block: 256,
        size: 84,
    },
    GgmlType {
        id: 11,
        name: "Q3_K",
        block: 256,
        size: 110,
    },
    GgmlType {
        id: 12,
        name: "Q4_K",
        block: 256,
        size: 144,
    },
    GgmlType {
        id: 13,
        name: "Q5_K",
        block: 256,
        size: 176,
    },
    GgmlType {
        id: 14,
        name: "Q6_K",
        block: 256,
        size: 210,
    },
    GgmlType {
        id: 15,
        name: "Q8_K",
        block: 256,
        size: 292,
    },
    GgmlType {
        id: 16,
        name: "IQ2_XXS",
        block: 256,
        size: 66,
    },
    GgmlType {
        id: 17,
        name: "IQ2_XS",
        block: 256,
        size: 74,
    },
    GgmlType {
        id: 18,
        name: "IQ3_XXS",
        block: 256,
        size: 98,
    },
    GgmlType {
        id: 19,
        name: "IQ1_S",
        block: 256,
        size: 50,
    },
    GgmlType {
        id: 20,
        name: "IQ4_NL",
        block: 32,
        size: 18,
    },
    GgmlType {
        id: 21,
        name: "IQ3_S",
        block: 256,
        size: 110,
    },
    GgmlType {
        id: 22,
        name: "IQ2_S",
        block: 256,
        size: 82,
    },
    GgmlType {
        id: 23,
        name: "IQ4_XS",
        block: 256,
        size: 136,
    },
    GgmlType {
        id: 24,
        name: "I8",
        block: 1,
        size: 1,
    },
    GgmlType {
        id: 25,
        name: "I16",
        block: 1,
        size: 2,
    },
    GgmlType {
        id: 26,
        name: "I32",
        block: 1,
        size: 4,
    },
    GgmlType {
        id: 27,
        name: "I64",
        block: 1,
        size: 8,
    },
    GgmlType {
        id: 28,
        name: "F64",
        block: 1,
        size: 8,
    },
    GgmlType {
        id: 29,
        name: "IQ1_M",
        block: 256,
        size: 56,
    },
    GgmlType {
        id: 30,
        name: "BF16",
        block: 1,
        size: 2,
    },
    GgmlType {
        id: 34,
        name: "TQ1_0",
        block: 256,
        size: 54,
    },
    GgmlType {
        id: 35,
        name: "TQ2_0",
        block: 256,
        size: 66,
    },
    GgmlType {
        id: 39,
        name: "MXFP4",
        block: 32,
        size: 17,
    },
    GgmlType {
        id: 40,
        name: "NVFP4",
        block: 64,
        size: 36,
    },
    GgmlType {
        id: 41,
        name: "Q1_0",
        block: 128,
        size: 18,
    },
];

/// The type with this id, if the table knows it.
pub fn ggml_type(id: u32) -> Option<&'static GgmlType> {
    GGML_TYPES.iter().find(|t| t.id == id)
}

/// The type with this name, case-insensitive (`q8_0`, `F16`): KV-cache types on a command line.
pub fn ggml_type_by_name(name: &str) -> Option<&'static GgmlType> {
    GGML_TYPES
        .iter()
        .find(|t| t.name.eq_ignore_ascii_case(name))
}

/// A type's name, or `type N` for one the table does not know.
pub fn type_name(id: u32) -> String {
    ggml_type(id)
        .map(|t| t.name.to_string())
        .unwrap_or_else(|| format!("type {id}"))
}

/// Bytes of one row of `ne0` elements (`ggml_row_size`); `None` when `ne0` is not a multiple of
/// the block size (ggml refuses such a tensor) or on overflow.
pub fn row_bytes(t: &GgmlType, ne0: u64) -> Option<u64> {
    if ne0 % t.block != 0 {
        return None;
    }
    (ne0 / t.block).checked_mul(t.size)
}

/// Bytes of a tensor of type `t` and shape `dims` (ggml order: `dims[0]` is the row length).
pub fn tensor_bytes(t: &GgmlType, dims: &[u64]) -> Option<u64> {
    let ne0 = dims.first().copied().unwrap_or(1);
    let mut b = row_bytes(t, ne0)?;
    for d in dims.iter().skip(1) {
        b = b.checked_mul(*d)?;
    }
    Some(b)
}

/// A metadata value. Numbers are widened; strings longer than 4 KiB and arrays that are not
/// short integer arrays keep only their length.
#[derive(Debug, Clone, PartialEq)]
pub enum MetaValue {
    /// Any unsigned integer type.
    Uint(u64),
    /// Any signed integer type.
    Int(i64),
    /// `f32` or `f64`.
    Float(f64),
    /// `bool`.
    Bool(bool),
    /// A string (cut to 4 KiB).
    Str(String),
    /// An array: element type, length, and the values when it is a short integer array.
    Array {
        /// GGUF value type of the elements.
        elem: u32,
        /// Number of elements.
        len: u64,
        /// The elements, for integer arrays of at most [`MAX_KEPT_ARRAY`] elements.
        ints: Option<Vec<i64>>,
    },
}

impl MetaValue {
    /// The value as an unsigned integer (non-negative integers only).
    pub fn as_u64(&self) -> Option<u64> {
        match self {
            MetaValue::Uint(v) => Some(*v),
            MetaValue::Int(v) => u64::try_from(*v).ok(),
            _ => None,
        }
    }

    /// The value as a string.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            MetaValue::Str(s) => Some(s),
            _ => None,
        }
    }
}

/// One tensor info.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorInfo {
    /// Name (`blk.3.ffn_gate_exps.weight`).
    pub name: String,
    /// Shape in ggml order (`[n_embd, n_ff_exp, n_expert]` for an expert tensor).
    pub dims: Vec<u64>,
    /// ggml type id.
    pub ty: u32,
    /// Offset of its data from the start of the data section.
    pub offset: u64,
}

/// A parsed header.
#[derive(Debug, Clone, PartialEq)]
pub struct GgufHeader {
    /// Format version (2 or 3).
    pub version: u32,
    /// Metadata by key.
    pub metadata: BTreeMap<String, MetaValue>,
    /// Tensor infos in file order.
    pub tensors: Vec<TensorInfo>,
    /// `general.alignment` (default 32).
    pub alignment: u64,
    /// File offset where the data section starts.
    pub data_start: u64,
}

/// Why a header could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GgufError {
    /// The bytes end inside the header; `needed` is the offset the parser had to reach.
    Truncated {
        /// Offset the parser needed to read up to.
        needed: u64,
    },
    /// Not a GGUF file.
    BadMagic,
    /// A big-endian GGUF (s390x builds): not read.
    BigEndian,
    /// A version other than 2 and 3 (v1 files predate 2023-08 and are not loaded by llama.cpp).
    Version(u32),
    /// Anything else, with the reason.
    Invalid(String),
}

impl fmt::Display for GgufError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GgufError::Truncated { needed } => write!(
                f,
                "the header runs past the bytes read (needed offset {needed})"
            ),
            GgufError::BadMagic => write!(f, "not a GGUF file (no GGUF magic)"),
            GgufError::BigEndian => write!(f, "a big-endian GGUF file (not supported)"),
            GgufError::Version(v) => {
                write!(f, "GGUF version {v} (this agent reads versions 2 and 3)")
            }
            GgufError::Invalid(s) => write!(f, "{s}"),
        }
    }
}

impl std::error::Error for GgufError {}

struct Cur<'a> {
    b: &'a [u8],
    pos: usize,
}

impl<'a> Cur<'a> {
    fn need(&self, n: u64) -> Result<(), GgufError> {
        let end = (self.pos as u64)
            .checked_add(n)
            .ok_or_else(|| GgufError::Invalid("length overflows".into()))?;
        if end > self.b.len() as u64 {
            return Err(GgufError::Truncated { needed: end });
        }
        Ok(())
    }

    fn take(&mut self, n: u64) -> Result<&'a [u8], GgufError> {
        self.need(n)?;
        let s = &self.b[self.pos..self.pos + n as usize];
        self.pos += n as usize;
        Ok(s)
    }

    fn u8(&mut self) -> Result<u8, GgufError> {
        Ok(self.take(1)?[0])
    }

    fn u16(&mut self) -> Result<u16, GgufError> {
        let s = self.take(2)?;
        Ok(u16::from_le_bytes([s[0], s[1]]))
    }

    fn u32(&mut self) -> Result<u32, GgufError> {
        let s = self.take(4)?;
        Ok(u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
    }

    fn u64(&mut self) -> Result<u64, GgufError> {
        let s = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(s);
        Ok(u64::from_le_bytes(a))
    }

    fn string(&mut self, cap: u64, what: &str) -> Result<&'a [u8], GgufError> {
        let len = self.u64()?;
        if len > cap {
            return Err(GgufError::Invalid(format!(
                "{what} of {len} bytes (at most {cap})"
            )));
        }
        self.take(len)
    }

    fn skip(&mut self, n: u64) -> Result<(), GgufError> {
        self.take(n).map(|_| ())
    }
}

// GGUF metadata value types.
const T_U8: u32 = 0;
const T_I8: u32 = 1;
const T_U16: u32 = 2;
const T_I16: u32 = 3;
const T_U32: u32 = 4;
const T_I32: u32 = 5;
const T_F32: u32 = 6;
const T_BOOL: u32 = 7;
const T_STRING: u32 = 8;
const T_ARRAY: u32 = 9;
const T_U64: u32 = 10;
const T_I64: u32 = 11;
const T_F64: u32 = 12;

fn fixed_size(t: u32) -> Option<u64> {
    match t {
        T_U8 | T_I8 | T_BOOL => Some(1),
        T_U16 | T_I16 => Some(2),
        T_U32 | T_I32 | T_F32 => Some(4),
        T_U64 | T_I64 | T_F64 => Some(8),
        _ => None,
    }
}

fn scalar(c: &mut Cur<'_>, t: u32) -> Result<MetaValue, GgufError> {
    Ok(match t {
        T_U8 => MetaValue::Uint(u64::from(c.u8()?)),
        T_I8 => MetaValue::Int(i64::from(c.u8()? as i8)),
        T_U16 => MetaValue::Uint(u64::from(c.u16()?)),
        T_I16 => MetaValue::Int(i64::from(c.u16()? as i16)),
        T_U32 => MetaValue::Uint(u64::from(c.u32()?)),
        T_I32 => MetaValue::Int(i64::from(c.u32()? as i32)),
        T_F32 => MetaValue::Float(f64::from(f32::from_bits(c.u32()?))),
        T_BOOL => MetaValue::Bool(c.u8()? != 0),
        T_U64 => MetaValue::Uint(c.u64()?),
        T_I64 => MetaValue::Int(c.u64()? as i64),
        T_F64 => MetaValue::Float(f64::from_bits(c.u64()?)),
        T_STRING => {
            let s = c.string(MAX_STRING, "a string value")?;
            let keep = &s[..s.len().min(4096)];
            MetaValue::Str(String::from_utf8_lossy(keep).into_owned())
        }
        other => {
            return Err(GgufError::Invalid(format!(
                "unknown metadata value type {other}"
            )))
        }
    })
}

fn value(c: &mut Cur<'_>, t: u32, depth: u32) -> Result<MetaValue, GgufError> {
    if t != T_ARRAY {
        return scalar(c, t);
    }
    if depth >= MAX_DEPTH {
        return Err(GgufError::Invalid("arrays nested too deep".into()));
    }
    let elem = c.u32()?;
    let len = c.u64()?;
    if let Some(sz) = fixed_size(elem) {
        let bytes = len
            .checked_mul(sz)
            .ok_or_else(|| GgufError::Invalid(format!("array of {len} elements overflows")))?;
        c.need(bytes)?;
        let integer = !matches!(elem, T_F32 | T_F64 | T_BOOL);
        if integer && len <= MAX_KEPT_ARRAY {
            let mut ints = Vec::with_capacity(len as usize);
            for _ in 0..len {
                ints.push(match scalar(c, elem)? {
                    MetaValue::Uint(v) => i64::try_from(v).unwrap_or(i64::MAX),
                    MetaValue::Int(v) => v,
                    _ => 0,
                });
            }
            return Ok(MetaValue::Array {
                elem,
                len,
                ints: Some(ints),
            });
        }
        c.skip(bytes)?;
        return Ok(MetaValue::Array {
            elem,
            len,
            ints: None,
        });
    }
    match elem {
        T_STRING => {
            // Each element is at least its 8-byte length: a hostile count runs out of bytes.
            for _ in 0..len {
                c.string(MAX_STRING, "an array string")?;
            }
        }
        T_ARRAY => {
            for _ in 0..len {
                let inner = c.u32()?;
                // Each element reads at least its 4-byte type: a hostile count runs out of bytes.
                value(c, inner, depth + 1)?;
            }
        }
        other => {
            return Err(GgufError::Invalid(format!(
                "unknown array element type {other}"
            )))
        }
    }
    Ok(MetaValue::Array {
        elem,
        len,
        ints: None,
    })
}

/// Parses a GGUF header from the first bytes of a file (`bytes` may be a prefix; see
/// [`GgufError::Truncated`]).
pub fn parse_header(bytes: &[u8]) -> Result<GgufHeader, GgufError> {
    let mut c = Cur { b: bytes, pos: 0 };
    let magic = c.take(4)?;
    if magic != b"GGUF" {
        return Err(GgufError::BadMagic);
    }
    let version = c.u32()?;
    if version != 2 && version != 3 {
        if version.swap_bytes() == 2 || version.swap_bytes() == 3 {
            return Err(GgufError::BigEndian);
        }
        return Err(GgufError::Version(version));
    }
    let n_tensors = c.u64()?;
    let n_kv = c.u64()?;
    if n_tensors > MAX_TENSORS {
        return Err(GgufError::Invalid(format!(
            "{n_tensors} tensors (at most {MAX_TENSORS})"
        )));
    }
    if n_kv > MAX_KV {
        return Err(GgufError::Invalid(format!(
            "{n_kv} metadata entries (at most {MAX_KV})"
        )));
    }
    let mut metadata = BTreeMap::new();
    for _ in 0..n_kv {
        let key = c.string(65_535, "a metadata key")?;
        let key = String::from_utf8_lossy(key).into_owned();
        let t = c.u32()?;
        let v = value(&mut c, t, 0)?;
        if metadata.insert(key.clone(), v).is_some() {
            return Err(GgufError::Invalid(format!(
                "duplicate metadata key {key:?}"
            )));
        }
    }
    let alignment = match metadata.get("general.alignment") {
        None => 32,
        Some(MetaValue::Uint(a)) if *a > 0 && a.is_power_of_two() && *a <= 1 << 30 => *a,
        Some(other) => {
            return Err(GgufError::Invalid(format!(
                "general.alignment {other:?} is not a power of two"
            )))
        }
    };
    let mut tensors: Vec<TensorInfo> = Vec::new();
    let mut seen = std::collections::BTreeSet::new();
    for i in 0..n_tensors {
        let name = c.string(65_535, "a tensor name")?;
        if name.len() > MAX_TENSOR_NAME {
            return Err(GgufError::Invalid(format!(
                "tensor {i}: name of {} bytes (llama.cpp allows {MAX_TENSOR_NAME})",
                name.len()
            )));
        }
        let name = String::from_utf8_lossy(name).into_owned();
        let n_dims = c.u32()?;
        if n_dims > MAX_DIMS {
            return Err(GgufError::Invalid(format!(
                "tensor {name:?}: {n_dims} dimensions (at most {MAX_DIMS})"
            )));
        }
        let mut dims = Vec::with_capacity(n_dims as usize);
        for _ in 0..n_dims {
            let d = c.u64()?;
            if d > i64::MAX as u64 {
                return Err(GgufError::Invalid(format!(
                    "tensor {name:?}: dimension {d} is negative as int64"
                )));
            }
            dims.push(d);
        }
        let ty = c.u32()?;
        let offset = c.u64()?;
        if offset % alignment != 0 {
            return Err(GgufError::Invalid(format!(
                "tensor {name:?}: offset {offset} is not a multiple of the alignment {alignment}"
            )));
        }
        if let Some(t) = ggml_type(ty) {
            if tensor_bytes(t, &dims).is_none() {
                return Err(GgufError::Invalid(format!(
                    "tensor {name:?}: shape {dims:?} does not fit type {} (row length not a multiple of {} or too large)",
                    t.name, t.block
                )));
            }
        }
        if !seen.insert(name.clone()) {
            return Err(GgufError::Invalid(format!(
                "duplicate tensor name {name:?}"
            )));
        }
        tensors.push(TensorInfo {
            name,
            dims,
            ty,
            offset,
        });
    }
    let end = c.pos as u64;
    let data_start = end.div_ceil(alignment) * alignment;
    Ok(GgufHeader {
        version,
        metadata,
        tensors,
        alignment,
        data_start,
    })
}

impl GgufHeader {
    /// A metadata value.
    pub fn get(&self, key: &str) -> Option<&MetaValue> {
        self.metadata.get(key)
    }

    /// `general.architecture` (`deepseek2`, `qwen3moe`).
    pub fn arch(&self) -> Option<&str> {
        self.get("general.architecture").and_then(MetaValue::as_str)
    }

    /// An unsigned value under the architecture's prefix (`block_count` → `deepseek2.block_count`).
    pub fn arch_u64(&self, key: &str) -> Option<u64> {
        let arch = self.arch()?;
        self.get(&format!("{arch}.{key}"))
            .and_then(MetaValue::as_u64)
    }

    /// A per-layer value under the architecture's prefix: a scalar for every layer, or the
    /// layer's entry of an array (`attention.head_count_kv` of hybrid models).
    pub fn arch_layer_u64(&self, key: &str, layer: u64) -> Option<u64> {
        let arch = self.arch()?;
        match self.get(&format!("{arch}.{key}"))? {
            MetaValue::Array { ints: Some(v), .. } => {
                v.get(layer as usize).and_then(|x| u64::try_from(*x).ok())
            }
            other => other.as_u64(),
        }
    }

    /// Bytes of tensor `i`: from its type and shape when the type table knows the type (exact,
    /// `true`); otherwise the distance from its offset to the next tensor's offset in this file
    /// (an upper bound that includes alignment padding, `false`), or to the end of the data when
    /// `file_len` is known. `None` when neither is possible.
    pub fn tensor_bytes(&self, i: usize, file_len: Option<u64>) -> Option<(u64, bool)> {
        let t = self.tensors.get(i)?;
        if let Some(ty) = ggml_type(t.ty) {
            return tensor_bytes(ty, &t.dims).map(|b| (b, true));
        }
        let next = self
            .tensors
            .iter()
            .map(|o| o.offset)
            .filter(|o| *o > t.offset)
            .min();
        match next {
            Some(n) => Some((n - t.offset, false)),
            None => {
                let data_len = file_len?.checked_sub(self.data_start)?;
                data_len.checked_sub(t.offset).map(|b| (b, false))
            }
        }
    }

    /// End of the tensor data (data start + the largest offset + that tensor's bytes), when every
    /// tensor can be sized.
    pub fn data_end(&self) -> Option<u64> {
        let mut end = self.data_start;
        for (i, t) in self.tensors.iter().enumerate() {
            let (b, _) = self.tensor_bytes(i, None)?;
            end = end.max(self.data_start.checked_add(t.offset)?.checked_add(b)?);
        }
        Some(end)
    }
}

/// The paths of the other shards of a split model (`name-00001-of-00009.gguf`, as llama.cpp's
/// `llama_split_path` names them), given the first one; empty when the name is not of that form.
pub fn split_paths(path: &str, count: u64) -> Vec<String> {
    let Some(stem) = path.strip_suffix(".gguf") else {
        return Vec::new();
    };
    // `-NNNNN-of-MMMMM` is 15 characters.
    if stem.len() < 15 || !stem.is_char_boundary(stem.len() - 15) {
        return Vec::new();
    }
    let (prefix, tail) = stem.split_at(stem.len() - 15);
    let b = tail.as_bytes();
    let digits = |r: std::ops::Range<usize>| b[r].iter().all(u8::is_ascii_digit);
    if b[0] != b'-' || !digits(1..6) || &b[6..10] != b"-of-" || !digits(10..15) {
        return Vec::new();
    }
    if count == 0 || count > 99_999 {
        return Vec::new();
    }
    (1..=count)
        .map(|k| format!("{prefix}-{k:05}-of-{count:05}.gguf"))
        .collect()
}

#[cfg(test)]
mod tests;
