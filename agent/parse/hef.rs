//! The header of a Hailo HEF model file: its format version and the chip it was compiled for.
//!
//! Layout (HailoRT `hef_internal.hpp`, `hef.proto`): a packed header of big-endian
//! `magic` (0x01484546), `version` and `hef_proto_size`, then a version-specific part (v0 20
//! bytes, v1 16, v2 32, v3 44), then the `ProtoHEFHef` protobuf, whose field 1 is the
//! `ProtoHEFHeader` with `hw_arch` (field 1, an enum) and `sdk_version_str` (field 3).

/// HEF magic, big-endian.
pub const HEF_MAGIC: u32 = 0x0148_4546;

/// What a HEF's header says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HefHeader {
    /// Header format version (0-3).
    pub version: u32,
    /// The chip it was compiled for, as HailoRT names it (`HAILO8L`, `HAILO10H`).
    pub hw_arch: String,
    /// The Dataflow Compiler release that made it, when recorded.
    pub sdk_version: Option<String>,
}

/// Bytes of the version-specific part of the header after the 12 common bytes.
fn distinct_len(version: u32) -> Option<usize> {
    match version {
        0 => Some(4 + 16),
        1 => Some(4 + 8 + 4),
        2 => Some(8 * 4),
        3 => Some(8 + 8 + 4 + 8 + 8 + 8),
        _ => None,
    }
}

/// The name of a `ProtoHEFHwArch` value.
pub fn arch_name(value: u64) -> String {
    match value {
        0 => "HAILO8".into(),
        1 => "HAILO8P".into(),
        2 => "HAILO8R".into(),
        3 => "HAILO8L".into(),
        4 => "HAILO15M".into(),
        5 | 103 => "HAILO10H".into(),
        6 => "HAILO15L".into(),
        108 => "MARS".into(),
        other => format!("hw_arch {other}"),
    }
}

/// A protobuf varint at `*at`, advancing it.
fn varint(b: &[u8], at: &mut usize) -> Option<u64> {
    let mut v: u64 = 0;
    for shift in (0..64).step_by(7) {
        let byte = *b.get(*at)?;
        *at += 1;
        v |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Some(v);
        }
    }
    None
}

/// The fields of one protobuf message: (field number, wire type, value or bytes).
fn fields(b: &[u8]) -> Vec<(u64, u8, u64, &[u8])> {
    let mut out = Vec::new();
    let mut at = 0;
    while at < b.len() && out.len() < 64 {
        let Some(key) = varint(b, &mut at) else { break };
        let (field, wire) = (key >> 3, (key & 7) as u8);
        match wire {
            0 => match varint(b, &mut at) {
                Some(v) => out.push((field, wire, v, &b[0..0])),
                None => break,
            },
            2 => {
                let Some(len) = varint(b, &mut at).and_then(|l| usize::try_from(l).ok()) else {
                    break;
                };
                // A message cut by a short read ends the walk, keeping what came before.
                let Some(bytes) = at.checked_add(len).and_then(|end| b.get(at..end)) else {
                    break;
                };
                out.push((field, wire, len as u64, bytes));
                at += len;
            }
            1 => at += 8,
            5 => at += 4,
            _ => break,
        }
    }
    out
}

/// Parses the start of a HEF file (a few KiB are enough: the header message comes first).
///
/// Errors: not a HEF (wrong magic), an unknown header version, or no `ProtoHEFHeader` in the
/// bytes read.
pub fn parse_header(bytes: &[u8]) -> Result<HefHeader, String> {
    let be = |at: usize| -> Option<u32> {
        bytes
            .get(at..at + 4)
            .map(|s| u32::from_be_bytes([s[0], s[1], s[2], s[3]]))
    };
    let magic = be(0).ok_or("shorter than a HEF header")?;
    if magic != HEF_MAGIC {
        return Err(format!("not a HEF file (magic {magic:#010x})"));
    }
    let version = be(4).ok_or("shorter than a HEF header")?;
    let start =
        12 + distinct_len(version).ok_or(format!("unknown HEF header version {version}"))?;
    let proto = bytes
        .get(start..)
        .ok_or("no model description after the header")?;
    let header = fields(proto)
        .into_iter()
        .find(|(f, w, _, _)| *f == 1 && *w == 2)
        .ok_or("no header message in the model description")?
        .3;
    let inner = fields(header);
    // proto3 leaves a zero enum out: a header without hw_arch is HAILO8.
    let hw_arch = inner
        .iter()
        .find(|(f, w, _, _)| *f == 1 && *w == 0)
        .map(|(_, _, v, _)| arch_name(*v))
        .unwrap_or_else(|| arch_name(0));
    let sdk_version = inner
        .iter()
        .find(|(f, w, _, _)| *f == 3 && *w == 2)
        .map(|(_, _, _, b)| String::from_utf8_lossy(b).chars().take(64).collect());
    Ok(HefHeader {
        version,
        hw_arch,
        sdk_version,
    })
}

/// A HEF header as the Dataflow Compiler writes it (v2), for tests and fixtures.
pub fn build_header(hw_arch: u64, sdk_version: &str) -> Vec<u8> {
    let mut inner = vec![0x08];
    let mut v = hw_arch;
    loop {
        let byte = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            inner.push(byte);
            break;
        }
        inner.push(byte | 0x80);
    }
    inner.push(0x1a);
    inner.push(sdk_version.len() as u8);
    inner.extend_from_slice(sdk_version.as_bytes());
    let mut proto = vec![0x0a, inner.len() as u8];
    proto.extend_from_slice(&inner);
    let mut out = Vec::new();
    out.extend_from_slice(&HEF_MAGIC.to_be_bytes());
    out.extend_from_slice(&2u32.to_be_bytes());
    out.extend_from_slice(&(proto.len() as u32).to_be_bytes());
    out.extend_from_slice(&[0u8; 32]);
    out.extend_from_slice(&proto);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_of_each_chip() {
        let h = parse_header(&build_header(3, "3.29.0")).unwrap();
        assert_eq!(h.hw_arch, "HAILO8L");
        assert_eq!(h.version, 2);
        assert_eq!(h.sdk_version.as_deref(), Some("3.29.0"));
        assert_eq!(
            parse_header(&build_header(103, "5.1.0")).unwrap().hw_arch,
            "HAILO10H"
        );
        assert_eq!(
            parse_header(&build_header(0, "")).unwrap().hw_arch,
            "HAILO8"
        );
    }

    #[test]
    fn junk_is_refused_not_fatal() {
        assert!(parse_header(b"").is_err());
        assert!(parse_header(b"GGUF\0\0\0\x03")
            .unwrap_err()
            .contains("not a HEF"));
        let mut v9 = build_header(3, "x");
        v9[7] = 9;
        assert!(parse_header(&v9).unwrap_err().contains("version 9"));
        // A truncated protobuf ends the walk without a panic.
        let full = build_header(3, "3.29.0");
        for n in 0..full.len() {
            let _ = parse_header(&full[..n]);
        }
        let mut long_len = build_header(3, "x");
        long_len[45] = 0xff;
        let _ = parse_header(&long_len);
    }
}
