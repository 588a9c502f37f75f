//! `fleet capture`: a board's support bundle fetched over MQTT. `fleet send` carries the signed
//! `capture` command and follows it; this part takes the chunks the board publishes
//! ([`crate::mqtt::chunks`]), reassembles them, verifies them against the bundle the board's
//! sealed answer names (bytes and SHA-256), and writes the file.

use super::*;
use crate::mqtt::chunks::{self, MAX_BUNDLE_BYTES};

/// The chunks of one bundle seen so far, by (SHA-256, index): chunks of another bundle, or
/// forged ones, are kept apart and left out; and the bundle the board's answer names, once it
/// came.
pub(super) struct Bundle {
    prefix: String,
    parts: BTreeMap<(String, usize), Vec<u8>>,
    stored_bytes: usize,
    named: Option<Named>,
}

/// What one kept chunk costs beside its data, for the bound on what [`Bundle`] holds.
const ENTRY_BYTES: usize = 256;

/// What the board's answer says of its bundle.
struct Named {
    bytes: u64,
    sha256: String,
    chunks: usize,
}

impl Bundle {
    /// Collects the chunks of command `cmd_id` on `board`.
    pub(super) fn new(root: &str, board: &str, cmd_id: &str) -> Bundle {
        Bundle {
            prefix: chunks::prefix(root, board, cmd_id),
            parts: BTreeMap::new(),
            stored_bytes: 0,
            named: None,
        }
    }

    /// The subscription that brings the chunks.
    pub(super) fn filter(&self) -> String {
        format!("{}+", self.prefix)
    }

    /// Takes a message on a chunk topic (true), whatever it holds: a well-formed chunk whose
    /// index is its topic's is kept while all kept, at [`ENTRY_BYTES`] each beside their data,
    /// stay within twice the largest bundle.
    pub(super) fn take(&mut self, topic: &str, payload: &[u8]) -> bool {
        let Some(index) = topic.strip_prefix(&self.prefix) else {
            return false;
        };
        let Some(c) = chunks::parse(payload) else {
            return true;
        };
        let cost = c.data.len() + ENTRY_BYTES;
        if index == c.index.to_string() && self.stored_bytes + cost <= 2 * MAX_BUNDLE_BYTES as usize
        {
            self.stored_bytes += cost;
            let key = (c.sha256.to_string(), c.index);
            if let Some(old) = self.parts.insert(key, c.data.to_vec()) {
                self.stored_bytes -= old.len() + ENTRY_BYTES;
            }
        }
        true
    }

    /// The board's trusted `successful` answer came, with its `result`: the bundle it names is
    /// the one to write, once (a later answer changes nothing). Drops every chunk of another
    /// bundle (junk that may have taken the room) and says whether chunks of the named one are
    /// missing: its retained chunks are then to be asked for again.
    pub(super) fn name(&mut self, result: &Value) -> bool {
        if self.named.is_some() {
            return false;
        }
        self.named = named(result);
        let Some(n) = &self.named else {
            return false;
        };
        self.parts.retain(|(sha, _), _| *sha == n.sha256);
        self.stored_bytes = self.parts.values().map(|d| d.len() + ENTRY_BYTES).sum();
        self.of_named().count() < n.chunks
    }

    /// Every chunk of the named bundle has come.
    pub(super) fn complete(&self) -> bool {
        self.named
            .as_ref()
            .is_some_and(|n| self.of_named().count() == n.chunks)
    }

    /// The chunks of the named bundle, in order (none before it is named).
    fn of_named(&self) -> impl Iterator<Item = &Vec<u8>> {
        let range = self
            .named
            .as_ref()
            .map(|n| (n.sha256.clone(), 0)..(n.sha256.clone(), n.chunks));
        range
            .into_iter()
            .flat_map(|r| self.parts.range(r).map(|(_, d)| d))
    }

    /// Reassembles the named bundle, checks its size and SHA-256, and writes it to `out`
    /// (replacing a file there only with `replace`). Returns what to tell the operator.
    ///
    /// Errors: no bundle named, chunks missing, a size or hash that differs, a write error.
    pub(super) fn write(&self, out: &std::path::Path, replace: bool) -> Result<Written, String> {
        // A final state sent again for a command the board had finished carries no result.
        let n = self.named.as_ref().ok_or(
            "the board's answer names no bundle (bytes, sha256, chunks); it may repeat the \
             end of an earlier run of this command: run fleet capture again",
        )?;
        let have = self.of_named().count();
        if have < n.chunks {
            return Err(format!("{have} of {} chunks came", n.chunks));
        }
        let bytes: Vec<u8> = self.of_named().flatten().copied().collect();
        let sha = chunks::sha256_hex(&bytes);
        if bytes.len() as u64 != n.bytes || sha != n.sha256 {
            return Err(format!(
                "the chunks make {} bytes with sha256 {sha}, not the {} bytes with sha256 {} \
                 the board named",
                bytes.len(),
                n.bytes,
                n.sha256
            ));
        }
        crate::capture::write_file(out, &bytes, replace).map_err(|e| e.to_string())?;
        Ok(Written {
            file: out.to_path_buf(),
            bytes: n.bytes,
            sha256: sha,
        })
    }
}

/// A bundle `fleet capture` wrote: its `--json` object, or `wrote FILE: N bytes, sha256 H`.
#[derive(Debug, serde::Serialize)]
pub struct Written {
    /// Where.
    pub file: std::path::PathBuf,
    /// Its size, bytes.
    pub bytes: u64,
    /// Its SHA-256, lowercase hex.
    pub sha256: String,
}

impl std::fmt::Display for Written {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "wrote {}: {} bytes, sha256 {}",
            self.file.display(),
            self.bytes,
            self.sha256
        )
    }
}

/// The bundle a `successful` answer's `result` names, if it names one within the limits.
fn named(r: &Value) -> Option<Named> {
    let n = Named {
        bytes: r["bytes"].as_u64()?,
        sha256: r["sha256"].as_str()?.to_string(),
        chunks: usize::try_from(r["chunks"].as_u64()?).ok()?,
    };
    // A SHA-256 in hex, nothing else: it is printed when the chunks do not match.
    let hex = n.sha256.len() == 64 && n.sha256.bytes().all(|b| b.is_ascii_hexdigit());
    (hex && n.bytes <= MAX_BUNDLE_BYTES && (1..=chunks::MAX_CHUNKS).contains(&n.chunks))
        .then_some(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bundle_of(bytes: &[u8]) -> (Bundle, Value, Vec<Vec<u8>>) {
        let sha = chunks::sha256_hex(bytes);
        let parts = chunks::split(bytes, &sha);
        let result =
            serde_json::json!({"bytes": bytes.len(), "sha256": sha, "chunks": parts.len()});
        (Bundle::new("npu-fleet", "b1", "c1"), result, parts)
    }

    #[test]
    fn chunks_in_any_order_make_the_named_bundle() {
        let data: Vec<u8> = (0..100_000u32).map(|i| (i * 7 % 256) as u8).collect();
        let (mut b, result, parts) = bundle_of(&data);
        assert_eq!(b.filter(), "npu-fleet/b1/capture/c1/+");
        // The chunks come before the answer that names them, here last first.
        for i in (0..parts.len()).rev() {
            assert!(b.take(&format!("npu-fleet/b1/capture/c1/{i}"), &parts[i]));
        }
        assert!(!b.complete(), "not named yet");
        assert!(!b.take("npu-fleet/b1/status", b"{}"));
        assert!(!b.name(&result), "nothing more to ask for");
        assert!(b.complete());
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("b.tar.gz");
        let said = b.write(&out, false).unwrap().to_string();
        assert!(said.contains("100000 bytes"), "{said}");
        let again = b.write(&out, false).unwrap_err();
        assert!(again.contains("exists"), "{again}");
        b.write(&out, true).unwrap();
        assert_eq!(std::fs::read(&out).unwrap(), data);
    }

    #[test]
    fn junk_is_bounded_and_dropped_once_the_answer_names_the_bundle() {
        let data = vec![7u8; 40_000];
        let (mut b, result, parts) = bundle_of(&data);
        let t = "npu-fleet/b1/capture/c1/0";
        // Empty chunks of other bundles, each under another hash: they cost room all the same.
        let mut junk = 0;
        while b.stored_bytes + ENTRY_BYTES <= 2 * MAX_BUNDLE_BYTES as usize {
            let p = format!("npu-agent-chunk-v1 0 1 {junk:064x}\n");
            assert!(b.take(t, p.as_bytes()));
            junk += 1;
        }
        b.take(t, &parts[0]);
        assert!(b.parts.len() == junk, "the real chunk found no room");
        assert!(b.name(&result), "incomplete: ask again");
        assert!(b.parts.is_empty() && b.stored_bytes == 0);
        for (i, p) in parts.iter().enumerate() {
            b.take(&format!("npu-fleet/b1/capture/c1/{i}"), p);
        }
        assert!(b.complete());
    }

    #[test]
    fn a_chunk_on_the_wrong_topic_or_altered_is_not_written() {
        let data = vec![5u8; 80_000];
        let (mut b, result, parts) = bundle_of(&data);
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("b.tar.gz");
        let e = b.write(&out, false).unwrap_err();
        assert!(e.contains("names no bundle"), "{e}");
        // Chunk 1 published as chunk 0's topic: not taken as either.
        b.take("npu-fleet/b1/capture/c1/0", &parts[1]);
        assert!(b.name(&result), "every chunk missing");
        for (i, p) in parts.iter().enumerate() {
            b.take(&format!("npu-fleet/b1/capture/c1/{i}"), p);
        }
        // A forged last chunk with the right header replaces the real one.
        let mut forged = parts[2].clone();
        *forged.last_mut().unwrap() ^= 1;
        b.take("npu-fleet/b1/capture/c1/2", &forged);
        let e = b.write(&out, false).unwrap_err();
        assert!(e.contains("not the 80000 bytes"), "{e}");
        assert!(!out.exists(), "nothing written");
    }
}
