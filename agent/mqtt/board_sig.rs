//! A board's own signature on what it publishes (its status and its command answers), so that
//! someone with broker access cannot speak for it. Each board has an Ed25519 key of its own
//! (made on its first start, in its state directory); a sealed payload ends with two members:
//!
//! ```text
//! {...,"board_key":"<base64 of the 32-byte public key>","board_sig":"<base64 of 64 bytes>"}
//! ```
//!
//! The signature is over `npu-agent-board-v1\n<topic>\n` followed by the payload up to (not
//! including) `,"board_sig":"`, closed with `}`: binding the topic keeps one board's status
//! from being replayed as another's, or as an answer. Whoever reads it (`fleet watch`,
//! `fleet send`) compares `board_key` with the key it knows for that board.

use super::ed25519::{SigningKey, VerifyingKey};
use base64::engine::general_purpose::STANDARD;
use base64::Engine;

/// The first line of the signed bytes.
pub const DOMAIN: &str = "npu-agent-board-v1";
const KEY_FIELD: &[u8] = b",\"board_key\":\"";
const SIG_FIELD: &[u8] = b",\"board_sig\":\"";
/// How many bytes [`seal`] adds at most (the two members), to keep under a packet limit.
pub const SEAL_BYTES: usize = 176;

/// The bytes signed for `payload` (up to its `board_sig`, closed) on `topic`.
fn signed_bytes(topic: &str, unsigned: &[u8]) -> Vec<u8> {
    let mut b = format!("{DOMAIN}\n{topic}\n").into_bytes();
    b.extend_from_slice(unsigned);
    b
}

/// The board's public key as it appears in `board_key`.
pub fn key_text(key: &VerifyingKey) -> String {
    STANDARD.encode(key.to_bytes())
}

/// `payload` (a JSON object with at least one member, as serde_json writes it) with the
/// board's key and signature appended as its last members; any other payload is returned as
/// it is.
pub fn seal(key: &SigningKey, topic: &str, mut payload: Vec<u8>) -> Vec<u8> {
    if payload.len() < 3 || payload.first() != Some(&b'{') || payload.last() != Some(&b'}') {
        return payload;
    }
    payload.pop();
    payload.extend_from_slice(KEY_FIELD);
    payload.extend_from_slice(key_text(&key.verifying_key()).as_bytes());
    payload.extend_from_slice(b"\"}");
    let sig = key.sign(&signed_bytes(topic, &payload));
    payload.pop();
    payload.extend_from_slice(SIG_FIELD);
    payload.extend_from_slice(STANDARD.encode(sig).as_bytes());
    payload.extend_from_slice(b"\"}");
    payload
}

/// What a message's board signature says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Seal {
    /// No `board_sig` (an older agent, or someone else).
    Unsigned,
    /// A `board_sig` that its own `board_key` does not verify, or none of the right shape.
    Bad,
    /// Signed by the key in its `board_key` (base64, as published).
    By(String),
}

/// Reads and checks `payload`'s seal for `topic`. Who holds the key is for the caller to judge
/// ([`Seal::By`] only says the payload is that key's).
pub fn open(topic: &str, payload: &[u8]) -> Seal {
    let Some(at) = rfind(payload, SIG_FIELD) else {
        return Seal::Unsigned;
    };
    let Some(sig) = payload[at + SIG_FIELD.len()..].strip_suffix(b"\"}") else {
        return Seal::Bad;
    };
    let mut unsigned = payload[..at].to_vec();
    unsigned.push(b'}');
    let Some(k) = rfind(&unsigned, KEY_FIELD) else {
        return Seal::Bad;
    };
    let Some(key) = unsigned[k + KEY_FIELD.len()..].strip_suffix(b"\"}") else {
        return Seal::Bad;
    };
    let key_b64 = String::from_utf8_lossy(key).into_owned();
    let (Ok(key), Ok(sig)) = (STANDARD.decode(key), STANDARD.decode(sig)) else {
        return Seal::Bad;
    };
    let Ok(key) = <[u8; 32]>::try_from(key.as_slice()) else {
        return Seal::Bad;
    };
    match VerifyingKey::from_bytes(&key).verify(&signed_bytes(topic, &unsigned), &sig) {
        true => Seal::By(key_b64),
        false => Seal::Bad,
    }
}

/// Start of the last occurrence of `needle` in `hay`.
fn rfind(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).rposition(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sealed_payload_opens_only_on_its_topic_and_bytes() {
        let key = SigningKey::from_bytes(&[3; 32]);
        let t = "npu-fleet/b1/status";
        let sealed = seal(&key, t, br#"{"health":"ok","n":1}"#.to_vec());
        let v: serde_json::Value = serde_json::from_slice(&sealed).unwrap();
        assert_eq!(v["health"], "ok");
        assert_eq!(v["board_key"], key_text(&key.verifying_key()));
        assert_eq!(open(t, &sealed), Seal::By(key_text(&key.verifying_key())));
        // Another board's topic, a changed byte, a swapped key: refused.
        assert_eq!(open("npu-fleet/b2/status", &sealed), Seal::Bad);
        let changed = String::from_utf8(sealed.clone())
            .unwrap()
            .replace("\"ok\"", "\"no\"");
        assert_eq!(open(t, changed.as_bytes()), Seal::Bad);
        let other = key_text(&SigningKey::from_bytes(&[4; 32]).verifying_key());
        let swapped = String::from_utf8(sealed.clone())
            .unwrap()
            .replace(&key_text(&key.verifying_key()), &other);
        assert_eq!(open(t, swapped.as_bytes()), Seal::Bad);
        assert_eq!(open(t, br#"{"health":"ok"}"#), Seal::Unsigned);
        for junk in [
            &b"{,\"board_sig\":\"x\"}"[..],
            b",\"board_sig\":\"",
            b"\xff",
        ] {
            assert_ne!(open(t, junk), Seal::By(String::new()));
        }
        // Not an object with members: left as it is.
        assert_eq!(seal(&key, t, b"{}".to_vec()), b"{}");
        assert_eq!(seal(&key, t, b"online".to_vec()), b"online");
        assert!(sealed.len() - br#"{"health":"ok","n":1}"#.len() <= SEAL_BYTES);
    }
}
