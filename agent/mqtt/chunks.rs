//! A `capture` bundle on the wire. The board cuts the `.tar.gz` into chunks, each a retained
//! QoS 1 message on `<root>/<board>/capture/<cmd_id>/<index>` whose payload is one header line,
//! `npu-agent-chunk-v1 <index> <count> <sha256>\n`, then up to [`CHUNK_BYTES`] of the bundle.
//! The board's sealed `successful` answer names the bundle's bytes, sha256 and chunk count, so
//! `fleet capture` verifies the reassembled bundle against what the board signed.

/// Bundle bytes per chunk (the last may be shorter): with its header and topic a chunk stays
/// well under the smallest packet limit brokers set by default (AWS IoT Core's 128 KB).
pub const CHUNK_BYTES: usize = 32 * 1024;

/// Largest bundle a `capture` command may ask for (`max_bytes`), bytes.
pub const MAX_BUNDLE_BYTES: u64 = 32 << 20;

/// Most chunks of one bundle.
pub const MAX_CHUNKS: usize = (MAX_BUNDLE_BYTES as usize) / CHUNK_BYTES;

/// Largest bundle `fleet capture` asks for unless told otherwise, bytes.
pub const DEFAULT_MAX_BYTES: u64 = 8 << 20;

const MAGIC: &str = "npu-agent-chunk-v1";

/// `<root>/<board>/capture/<cmd_id>/`: the prefix of one bundle's chunk topics.
pub fn prefix(root: &str, board: &str, cmd_id: &str) -> String {
    format!("{root}/{board}/capture/{cmd_id}/")
}

/// The lowercase hex SHA-256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    let d = ring::digest::digest(&ring::digest::SHA256, bytes);
    d.as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

/// The chunk payloads of `bundle` (whose SHA-256 is `sha256`), [`CHUNK_BYTES`] of it each.
pub fn split(bundle: &[u8], sha256: &str) -> Vec<Vec<u8>> {
    let parts: Vec<&[u8]> = bundle.chunks(CHUNK_BYTES).collect();
    let count = parts.len();
    parts
        .into_iter()
        .enumerate()
        .map(|(i, data)| {
            let mut p = format!("{MAGIC} {i} {count} {sha256}\n").into_bytes();
            p.extend_from_slice(data);
            p
        })
        .collect()
}

/// One chunk as received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunk<'a> {
    /// Its place, from 0.
    pub index: usize,
    /// Chunks in the bundle.
    pub count: usize,
    /// The whole bundle's SHA-256 (lowercase hex).
    pub sha256: &'a str,
    /// Its share of the bundle.
    pub data: &'a [u8],
}

/// Reads a chunk payload; `None` for anything else (no header, a count out of range, an index
/// not below the count, a data part larger than [`CHUNK_BYTES`]).
pub fn parse(payload: &[u8]) -> Option<Chunk<'_>> {
    let nl = payload.iter().take(160).position(|b| *b == b'\n')?;
    let head = std::str::from_utf8(&payload[..nl]).ok()?;
    let mut f = head.split(' ');
    let (magic, index, count, sha256) = (f.next()?, f.next()?, f.next()?, f.next()?);
    let (index, count) = (index.parse().ok()?, count.parse().ok()?);
    let data = &payload[nl + 1..];
    let hex = sha256.len() == 64 && sha256.bytes().all(|b| b.is_ascii_hexdigit());
    let fits = data.len() <= CHUNK_BYTES && (1..=MAX_CHUNKS).contains(&count);
    (magic == MAGIC && f.next().is_none() && hex && fits && index < count).then_some(Chunk {
        index,
        count,
        sha256,
        data,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bundle_split_parses_back_in_order() {
        let bundle: Vec<u8> = (0..80_000u32).map(|i| (i % 251) as u8).collect();
        let sha = sha256_hex(&bundle);
        assert_eq!(sha.len(), 64);
        let parts = split(&bundle, &sha);
        assert_eq!(parts.len(), 3);
        let mut back = Vec::new();
        for (i, p) in parts.iter().enumerate() {
            let c = parse(p).unwrap();
            assert_eq!((c.index, c.count, c.sha256), (i, 3, sha.as_str()));
            back.extend_from_slice(c.data);
        }
        assert_eq!(back, bundle);
    }

    #[test]
    fn the_sha256_is_the_standard_one() {
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn malformed_chunks_are_not_taken() {
        let sha = "a".repeat(64);
        for bad in [
            String::new(),
            "npu-agent-chunk-v1 0 1\n".into(),
            format!("npu-agent-chunk-v1 1 1 {sha}\n"),
            format!("npu-agent-chunk-v1 0 0 {sha}\n"),
            format!("npu-agent-chunk-v1 0 99999 {sha}\n"),
            format!("npu-agent-chunk-v2 0 1 {sha}\n"),
            format!("npu-agent-chunk-v1 0 1 {sha} x\n"),
            format!("npu-agent-chunk-v1 -1 1 {sha}\n"),
            "npu-agent-chunk-v1 0 1 zz\n".into(),
        ] {
            assert_eq!(parse(bad.as_bytes()), None, "{bad:?}");
        }
        let mut big = format!("npu-agent-chunk-v1 0 1 {sha}\n").into_bytes();
        big.resize(big.len() + CHUNK_BYTES + 1, 0);
        assert_eq!(parse(&big), None, "a data part over CHUNK_BYTES");
    }
}
