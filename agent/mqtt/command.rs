//! Remote commands: the wire format, Ed25519 signing, and the gate every command passes before it
//! runs (size limit, strict schema, board, expiry and clock-skew window, signature, cmd_id never
//! executed twice — remembered across restarts — and per-action rate limits).
//!
//! A requester writes `init` (retained) on `<root>/<board>/cmd/<action>/<cmd_id>` or the fleet-wide
//! `<root>/all/cmd/<action>/<cmd_id>`:
//!
//! ```json
//! {"status":"init","board":"rock5b-01","args":{"size":"256M"},
//!  "issued_at":1764400000,"expires_at":1764400300,"signature":"<base64 Ed25519>"}
//! ```
//!
//! The signature covers [`signed_message`]: a fixed header, board (or `all`), action, cmd_id, the
//! canonical JSON of `args` (sorted keys), `issued_at` and `expires_at`.

use base64::Engine;
use ed25519_dalek::{Signature, Signer, SigningKey, Verifier, VerifyingKey};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::collections::{BTreeMap, HashMap};

/// Actions the agent executes.
pub const ACTIONS: &[&str] = &["compact", "set_cma", "reboot", "rescan", "release_npu"];

/// Largest accepted command payload (bytes). Larger ones are rejected without parsing.
pub const MAX_COMMAND_BYTES: usize = 4096;

/// Clock skew tolerated between requester and board, seconds.
pub const CLOCK_SKEW_S: i64 = 60;

/// Lifecycle states (DESIGN section 7).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CmdStatus {
    /// Written by the requester.
    Init,
    /// The agent accepted it and is acting.
    Executing,
    /// Done.
    Successful,
    /// Tried and failed (`reason`).
    Failed,
    /// Refused before acting (`reason`).
    Rejected,
}

impl CmdStatus {
    /// True for `successful`, `failed` and `rejected`.
    pub fn is_final(self) -> bool {
        matches!(
            self,
            CmdStatus::Successful | CmdStatus::Failed | CmdStatus::Rejected
        )
    }
}

/// The requester's `init` message. Unknown fields are refused.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InitMessage {
    /// Must be `init`.
    pub status: CmdStatus,
    /// Board the command is for (`all` for fleet-wide); must match the topic.
    pub board: String,
    /// Action arguments (schema per action).
    #[serde(default)]
    pub args: Map<String, Value>,
    /// Unix seconds when the requester made it.
    pub issued_at: i64,
    /// Unix seconds after which it must not run.
    pub expires_at: i64,
    /// Base64 Ed25519 signature over [`signed_message`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<String>,
}

/// Any lifecycle message: only `status` is read, to tell the agent's own echoes from `init`.
#[derive(Debug, Deserialize)]
pub struct AnyStatus {
    /// The state.
    pub status: CmdStatus,
}

/// The bytes a signature covers.
pub fn signed_message(
    board: &str,
    action: &str,
    cmd_id: &str,
    args: &Map<String, Value>,
    issued_at: i64,
    expires_at: i64,
) -> Vec<u8> {
    // serde_json's Map is ordered by key (no preserve_order feature): canonical.
    let args = serde_json::to_string(args).unwrap_or_default();
    format!(
        "npu-agent-command-v1\n{board}\n{action}\n{cmd_id}\n{args}\n{issued_at}\n{expires_at}\n"
    )
    .into_bytes()
}

/// Signs an init message in place.
pub fn sign(key: &SigningKey, action: &str, cmd_id: &str, msg: &mut InitMessage) {
    let sig = key.sign(&signed_message(
        &msg.board,
        action,
        cmd_id,
        &msg.args,
        msg.issued_at,
        msg.expires_at,
    ));
    msg.signature = Some(base64::engine::general_purpose::STANDARD.encode(sig.to_bytes()));
}

/// Writes a new key pair: PKCS#8 v1 PEM private key at `out` (mode 0600) and SPKI PEM public key
/// at `out.pub` (as `openssl genpkey -algorithm ed25519` and `openssl pkey -pubout` write them).
/// Returns the public key path. Refuses to overwrite an existing file.
pub fn keygen(out: &std::path::Path) -> Result<std::path::PathBuf, String> {
    use ed25519_dalek::pkcs8::{spki::der::pem::LineEnding, EncodePrivateKey, EncodePublicKey};
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut seed = [0u8; 32];
    getrandom::fill(&mut seed).map_err(|e| format!("no randomness: {e}"))?;
    let key = SigningKey::from_bytes(&seed);
    // PKCS#8 v1 (RFC 5208: no embedded public key), which `openssl pkey` and python-cryptography
    // read; ed25519-dalek's own encoder writes v2 (RFC 5958), which they refuse.
    let private = ed25519_dalek::pkcs8::KeypairBytes {
        secret_key: key.to_bytes(),
        public_key: None,
    }
    .to_pkcs8_pem(LineEnding::LF)
    .map_err(|e| e.to_string())?;
    let public = key
        .verifying_key()
        .to_public_key_pem(LineEnding::LF)
        .map_err(|e| e.to_string())?;
    let pub_path = std::path::PathBuf::from(format!("{}.pub", out.display()));
    for p in [out, pub_path.as_path()] {
        if p.exists() {
            return Err(format!("{} exists; not overwriting a key", p.display()));
        }
    }
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(out)
        .map_err(|e| format!("{}: {e}", out.display()))?;
    f.write_all(private.as_bytes())
        .and_then(|_| f.sync_all())
        .map_err(|e| format!("{}: {e}", out.display()))?;
    std::fs::write(&pub_path, public).map_err(|e| format!("{}: {e}", pub_path.display()))?;
    Ok(pub_path)
}

/// Reads an Ed25519 PKCS#8 PEM private key: v1 (as `keygen` and `openssl genpkey` write) or v2
/// (with the public key, as `keygen` wrote before; the pair is checked).
pub fn load_signing_key(path: &std::path::Path) -> Result<SigningKey, String> {
    use ed25519_dalek::pkcs8::DecodePrivateKey;
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    SigningKey::from_pkcs8_pem(&text)
        .map_err(|e| format!("{}: not an Ed25519 PKCS#8 PEM key: {e}", path.display()))
}

/// Parses an SPKI PEM public key.
pub fn parse_verifying_key(text: &str) -> Result<VerifyingKey, String> {
    use ed25519_dalek::pkcs8::DecodePublicKey;
    VerifyingKey::from_public_key_pem(text)
        .map_err(|e| format!("not an Ed25519 public key PEM: {e}"))
}

/// Arguments after validation, per action.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// `compact {drop_caches?: bool}`.
    Compact {
        /// Also drop the page cache first.
        drop_caches: bool,
    },
    /// `set_cma {size: "256M"}`.
    SetCma {
        /// Size as given (validated later against the profile and RAM).
        size: String,
    },
    /// `reboot {reason?: string}`.
    Reboot {
        /// Why (shown in state and status).
        reason: String,
    },
    /// `rescan {}`.
    Rescan,
    /// `release_npu {model?: string}`.
    ReleaseNpu {
        /// Model to unload; every loaded one when absent.
        model: Option<String>,
    },
}

impl Action {
    /// The action's name on the wire.
    pub fn name(&self) -> &'static str {
        match self {
            Action::Compact { .. } => "compact",
            Action::SetCma { .. } => "set_cma",
            Action::Reboot { .. } => "reboot",
            Action::Rescan => "rescan",
            Action::ReleaseNpu { .. } => "release_npu",
        }
    }
}

fn parse_args(action: &str, args: &Map<String, Value>) -> Result<Action, String> {
    let allowed: &[&str] = match action {
        "compact" => &["drop_caches"],
        "set_cma" => &["size"],
        "reboot" => &["reason"],
        "rescan" => &[],
        "release_npu" => &["model"],
        other => {
            return Err(format!(
                "unknown action {other:?} (known: {})",
                ACTIONS.join(", ")
            ))
        }
    };
    if let Some(k) = args.keys().find(|k| !allowed.contains(&k.as_str())) {
        return Err(format!(
            "unknown argument {k:?} for {action} (allowed: {})",
            if allowed.is_empty() {
                "none".to_string()
            } else {
                allowed.join(", ")
            }
        ));
    }
    let string = |k: &str, max: usize| -> Result<Option<String>, String> {
        match args.get(k) {
            None => Ok(None),
            Some(Value::String(s)) if s.len() <= max && !s.chars().any(char::is_control) => {
                Ok(Some(s.clone()))
            }
            Some(_) => Err(format!(
                "argument {k:?} must be a string of at most {max} printable characters"
            )),
        }
    };
    Ok(match action {
        "compact" => Action::Compact {
            drop_caches: match args.get("drop_caches") {
                None => false,
                Some(Value::Bool(b)) => *b,
                Some(_) => return Err("argument \"drop_caches\" must be true or false".into()),
            },
        },
        "set_cma" => {
            let size =
                string("size", 16)?.ok_or("set_cma needs the argument \"size\" (e.g. \"256M\")")?;
            // The syntax is checked here (before rate limits); the profile minimum and the RAM
            // bound are checked by the edit itself.
            if let Err(e) = crate::action::bootedit::parse_cma_size(&size) {
                return Err(format!("set_cma size: {e}"));
            }
            Action::SetCma { size }
        }
        "reboot" => Action::Reboot {
            reason: string("reason", 200)?.unwrap_or_else(|| "requested over MQTT".into()),
        },
        "rescan" => Action::Rescan,
        _ => Action::ReleaseNpu {
            model: string("model", 200)?,
        },
    })
}

/// What the gate decided about one incoming message.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// Run it.
    Execute(Action),
    /// Refuse it, with the reason to publish.
    Reject(String),
    /// Not a command to act on (an empty clear, the agent's own echo, a duplicate delivery).
    Ignore(&'static str),
}

/// The gate's settings.
#[derive(Debug, Clone)]
pub struct Policy {
    /// This board's id.
    pub board: String,
    /// Trusted public keys.
    pub trusted_keys: Vec<VerifyingKey>,
    /// Actions accepted unsigned.
    pub allow_unsigned: Vec<String>,
    /// Longest accepted command lifetime and age, seconds.
    pub max_command_age_s: u64,
}

/// Minimum seconds between two executions of an action.
pub fn rate_limit_s(action: &str) -> i64 {
    match action {
        "reboot" => 300,
        "set_cma" | "compact" => 30,
        "release_npu" => 10,
        // A rescan is a few milliseconds of file reads; the daemon's bounded queue limits storms.
        _ => 0,
    }
}

/// Seen command ids (persisted by the daemon) and the last run of each action.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Ledger {
    /// cmd_id → unix seconds when first accepted.
    pub seen: BTreeMap<String, i64>,
    /// action → unix seconds of the last execution.
    #[serde(default)]
    pub last_run: BTreeMap<String, i64>,
    /// cmd_id → hash of the accepted payload: the same bytes again are a re-delivery (a QoS 1
    /// duplicate, or a retained `init` delivered again after a restart) and are ignored; other
    /// bytes under a used cmd_id are a replay and are rejected.
    #[serde(default)]
    pub payload_hash: HashMap<String, u64>,
}

impl Ledger {
    /// Keeps the newest 2000 ids (older ones are expired anyway by `max_command_age_s`).
    pub fn prune(&mut self) {
        while self.seen.len() > 2000 {
            let oldest = self
                .seen
                .iter()
                .min_by_key(|(_, t)| **t)
                .map(|(k, _)| k.clone());
            match oldest {
                Some(k) => {
                    self.seen.remove(&k);
                    self.payload_hash.remove(&k);
                }
                None => break,
            }
        }
    }
}

fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf29ce484222325u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x100000001b3)
    })
}

fn valid_cmd_id(id: &str) -> bool {
    (1..=64).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// Decides what to do with a message on `topic` (already known to be a command topic of this
/// board or of `all`). Updates the ledger when it accepts (the caller persists it before acting).
pub fn gate(
    policy: &Policy,
    ledger: &mut Ledger,
    topic: &super::topics::CommandTopic,
    payload: &[u8],
    now: i64,
) -> Verdict {
    if payload.is_empty() {
        return Verdict::Ignore("cleared");
    }
    if payload.len() > MAX_COMMAND_BYTES {
        return Verdict::Reject(format!(
            "payload of {} bytes exceeds the {MAX_COMMAND_BYTES}-byte limit",
            payload.len()
        ));
    }
    let Ok(text) = std::str::from_utf8(payload) else {
        return Verdict::Reject("payload is not UTF-8 JSON".into());
    };
    match serde_json::from_str::<AnyStatus>(text) {
        Ok(s) if s.status != CmdStatus::Init => return Verdict::Ignore("not an init message"),
        Ok(_) => {}
        Err(e) => return Verdict::Reject(format!("malformed command: {e}")),
    }
    let msg: InitMessage = match serde_json::from_str(text) {
        Ok(m) => m,
        Err(e) => return Verdict::Reject(format!("malformed command: {e}")),
    };
    if !valid_cmd_id(&topic.cmd_id) {
        return Verdict::Reject("cmd_id must be 1-64 characters of [A-Za-z0-9._-]".into());
    }
    if msg.board != topic.board {
        return Verdict::Reject(format!(
            "command names board {:?} but was sent on {:?}'s topic",
            msg.board, topic.board
        ));
    }
    if topic.board != policy.board && topic.board != super::topics::ALL {
        return Verdict::Reject(format!(
            "command is for board {:?}, this is {:?}",
            topic.board, policy.board
        ));
    }
    let action = match parse_args(&topic.action, &msg.args) {
        Ok(a) => a,
        Err(e) => return Verdict::Reject(e),
    };
    // The same bytes under a cmd_id already accepted: a re-delivery, never run twice.
    let h = fnv(payload);
    if ledger.seen.contains_key(&topic.cmd_id) && ledger.payload_hash.get(&topic.cmd_id) == Some(&h)
    {
        return Verdict::Ignore("duplicate delivery");
    }
    if ledger.seen.contains_key(&topic.cmd_id) {
        if topic.board == super::topics::ALL {
            // The fleet-wide init stays retained until the requester clears it.
            return Verdict::Ignore("fleet-wide command already handled");
        }
        return Verdict::Reject(format!(
            "cmd_id {:?} was already executed (replay)",
            topic.cmd_id
        ));
    }
    let max_age = policy.max_command_age_s as i64;
    if now > msg.expires_at + CLOCK_SKEW_S {
        return Verdict::Reject(format!("expired {} s ago", now - msg.expires_at));
    }
    if msg.issued_at > now + CLOCK_SKEW_S {
        return Verdict::Reject(format!(
            "issued {} s in the future (clock skew above {CLOCK_SKEW_S} s)",
            msg.issued_at - now
        ));
    }
    if now - msg.issued_at > max_age + CLOCK_SKEW_S
        || msg.expires_at - msg.issued_at > max_age
        || msg.expires_at < msg.issued_at
    {
        return Verdict::Reject(format!(
            "lifetime outside the {max_age} s window (issued_at {}, expires_at {})",
            msg.issued_at, msg.expires_at
        ));
    }
    let unsigned_ok = policy.allow_unsigned.iter().any(|a| a == &topic.action);
    match &msg.signature {
        Some(sig) if !policy.trusted_keys.is_empty() => {
            let bytes = match base64::engine::general_purpose::STANDARD.decode(sig) {
                Ok(b) => b,
                Err(_) => return Verdict::Reject("signature is not base64".into()),
            };
            let Ok(sig) = Signature::from_slice(&bytes) else {
                return Verdict::Reject("signature is not 64 bytes".into());
            };
            let signed = signed_message(&msg.board, &topic.action, &topic.cmd_id, &msg.args, msg.issued_at, msg.expires_at);
            if !policy.trusted_keys.iter().any(|k| k.verify(&signed, &sig).is_ok()) {
                return Verdict::Reject("bad signature: no trusted key verifies it".into());
            }
        }
        Some(_) if !unsigned_ok => return Verdict::Reject(format!("{} must be signed, and no trusted keys are configured", topic.action)),
        Some(_) => {}
        None if !unsigned_ok => {
            return Verdict::Reject(format!(
                "unsigned {} refused: sign it (npu-agent fleet send --key) or add it to security.allow_unsigned",
                topic.action
            ))
        }
        None => {}
    }
    if let Some(last) = ledger.last_run.get(&topic.action) {
        let wait = rate_limit_s(&topic.action) - (now - last);
        if wait > 0 {
            return Verdict::Reject(format!(
                "rate limited: {} ran {} s ago; retry in {wait} s",
                topic.action,
                now - last
            ));
        }
    }
    ledger.seen.insert(topic.cmd_id.clone(), now);
    ledger.last_run.insert(topic.action.clone(), now);
    ledger.payload_hash.insert(topic.cmd_id.clone(), h);
    ledger.prune();
    Verdict::Execute(action)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mqtt::topics::CommandTopic;

    fn key() -> SigningKey {
        SigningKey::from_bytes(&[7u8; 32])
    }

    fn policy() -> Policy {
        Policy {
            board: "b1".into(),
            trusted_keys: vec![key().verifying_key()],
            allow_unsigned: vec!["compact".into(), "rescan".into()],
            max_command_age_s: 300,
        }
    }

    fn topic(board: &str, action: &str, id: &str) -> CommandTopic {
        CommandTopic {
            board: board.into(),
            action: action.into(),
            cmd_id: id.into(),
        }
    }

    fn init(board: &str, args: Value, now: i64) -> InitMessage {
        InitMessage {
            status: CmdStatus::Init,
            board: board.into(),
            args: args.as_object().cloned().unwrap_or_default(),
            issued_at: now,
            expires_at: now + 60,
            signature: None,
        }
    }

    fn bytes(m: &InitMessage) -> Vec<u8> {
        serde_json::to_vec(m).unwrap()
    }

    const NOW: i64 = 1_764_400_000;

    #[test]
    fn signed_set_cma_executes_once() {
        let mut l = Ledger::default();
        let mut m = init("b1", serde_json::json!({"size": "256M"}), NOW);
        sign(&key(), "set_cma", "c1", &mut m);
        let v = gate(
            &policy(),
            &mut l,
            &topic("b1", "set_cma", "c1"),
            &bytes(&m),
            NOW,
        );
        assert_eq!(
            v,
            Verdict::Execute(Action::SetCma {
                size: "256M".into()
            })
        );
        assert_eq!(
            gate(
                &policy(),
                &mut l,
                &topic("b1", "set_cma", "c1"),
                &bytes(&m),
                NOW + 1
            ),
            Verdict::Ignore("duplicate delivery")
        );
        // The retained init delivered again after a restart (same bytes): still never run twice,
        // and nothing is published over the final state.
        let mut restarted: Ledger =
            serde_json::from_str(&serde_json::to_string(&l).unwrap()).unwrap();
        assert_eq!(
            gate(
                &policy(),
                &mut restarted,
                &topic("b1", "set_cma", "c1"),
                &bytes(&m),
                NOW + 100
            ),
            Verdict::Ignore("duplicate delivery")
        );
        // A new message under the used cmd_id is a replay.
        let mut again = init("b1", serde_json::json!({"size": "256M"}), NOW + 100);
        sign(&key(), "set_cma", "c1", &mut again);
        match gate(
            &policy(),
            &mut restarted,
            &topic("b1", "set_cma", "c1"),
            &bytes(&again),
            NOW + 100,
        ) {
            Verdict::Reject(r) => assert!(r.contains("replay"), "{r}"),
            v => panic!("{v:?}"),
        }
    }

    fn rejected(v: Verdict) -> String {
        match v {
            Verdict::Reject(r) => r,
            other => panic!("expected a rejection, got {other:?}"),
        }
    }

    #[test]
    fn hostile_commands_are_rejected_with_reasons() {
        let p = policy();
        let mut l = Ledger::default();
        let t = topic("b1", "reboot", "r1");
        let unsigned = init("b1", serde_json::json!({}), NOW);
        assert!(rejected(gate(&p, &mut l, &t, &bytes(&unsigned), NOW))
            .contains("unsigned reboot refused"));
        let mut forged = unsigned.clone();
        sign(
            &SigningKey::from_bytes(&[9u8; 32]),
            "reboot",
            "r1",
            &mut forged,
        );
        assert!(rejected(gate(&p, &mut l, &t, &bytes(&forged), NOW)).contains("bad signature"));
        // Signed for another cmd_id: the signature does not cover this one.
        let mut moved = unsigned.clone();
        sign(&key(), "reboot", "other", &mut moved);
        assert!(rejected(gate(&p, &mut l, &t, &bytes(&moved), NOW)).contains("bad signature"));
        let mut expired = init("b1", serde_json::json!({}), NOW - 400);
        sign(&key(), "reboot", "r1", &mut expired);
        assert!(rejected(gate(&p, &mut l, &t, &bytes(&expired), NOW)).contains("expired"));
        let mut future = init("b1", serde_json::json!({}), NOW + 3600);
        sign(&key(), "reboot", "r1", &mut future);
        assert!(rejected(gate(&p, &mut l, &t, &bytes(&future), NOW)).contains("future"));
        let other_board = init("b2", serde_json::json!({}), NOW);
        assert!(rejected(gate(&p, &mut l, &t, &bytes(&other_board), NOW))
            .contains("names board \"b2\""));
        assert!(rejected(gate(
            &p,
            &mut l,
            &topic("b2", "compact", "x"),
            &bytes(&init("b2", serde_json::json!({}), NOW)),
            NOW
        ))
        .contains("this is \"b1\""));
        assert!(rejected(gate(
            &p,
            &mut l,
            &topic("b1", "format_disk", "x"),
            &bytes(&init("b1", serde_json::json!({}), NOW)),
            NOW
        ))
        .contains("unknown action"));
        assert!(rejected(gate(
            &p,
            &mut l,
            &topic("b1", "compact", "x"),
            br#"{"status":"init","board":"b1""#,
            NOW
        ))
        .contains("malformed"));
        assert!(rejected(gate(
            &p,
            &mut l,
            &topic("b1", "compact", "x"),
            &vec![b'{'; 5000],
            NOW
        ))
        .contains("exceeds"));
        let extra = br#"{"status":"init","board":"b1","issued_at":1764400000,"expires_at":1764400060,"shell":"rm -rf /"}"#;
        assert!(
            rejected(gate(&p, &mut l, &topic("b1", "compact", "x"), extra, NOW))
                .contains("unknown field")
        );
        let mut badsize = init("b1", serde_json::json!({"size": "abc"}), NOW);
        sign(&key(), "set_cma", "x", &mut badsize);
        assert!(rejected(gate(
            &p,
            &mut l,
            &topic("b1", "set_cma", "x"),
            &bytes(&badsize),
            NOW
        ))
        .contains("not a size"));
        let badarg = init("b1", serde_json::json!({"drop_caches": "yes"}), NOW);
        assert!(rejected(gate(
            &p,
            &mut l,
            &topic("b1", "compact", "x"),
            &bytes(&badarg),
            NOW
        ))
        .contains("true or false"));
        assert!(rejected(gate(
            &p,
            &mut l,
            &topic("b1", "compact", "../x"),
            &bytes(&init("b1", serde_json::json!({}), NOW)),
            NOW
        ))
        .contains("cmd_id"));
        assert!(
            l.seen.is_empty(),
            "nothing rejected may be recorded as executed"
        );
    }

    #[test]
    fn unsigned_allowed_actions_and_rate_limits() {
        let p = policy();
        let mut l = Ledger::default();
        let m = init("b1", serde_json::json!({"drop_caches": true}), NOW);
        assert_eq!(
            gate(&p, &mut l, &topic("b1", "compact", "a"), &bytes(&m), NOW),
            Verdict::Execute(Action::Compact { drop_caches: true })
        );
        assert!(rejected(gate(
            &p,
            &mut l,
            &topic("b1", "compact", "b"),
            &bytes(&m),
            NOW + 5
        ))
        .contains("rate limited"));
        // Rescans are not rate limited (the daemon bounds its queue instead).
        let r = init("b1", serde_json::json!({}), NOW);
        assert!(matches!(
            gate(&p, &mut l, &topic("b1", "rescan", "r1"), &bytes(&r), NOW),
            Verdict::Execute(_)
        ));
        assert!(matches!(
            gate(&p, &mut l, &topic("b1", "rescan", "r2"), &bytes(&r), NOW),
            Verdict::Execute(_)
        ));
        assert!(matches!(
            gate(
                &p,
                &mut l,
                &topic("b1", "compact", "c"),
                &bytes(&m),
                NOW + 31
            ),
            Verdict::Execute(_)
        ));
        // Echoes of the agent's own states are ignored.
        assert_eq!(
            gate(
                &p,
                &mut l,
                &topic("b1", "compact", "a"),
                br#"{"status":"successful"}"#,
                NOW
            ),
            Verdict::Ignore("not an init message")
        );
        assert_eq!(
            gate(&p, &mut l, &topic("b1", "compact", "a"), b"", NOW),
            Verdict::Ignore("cleared")
        );
    }

    #[test]
    fn fleet_wide_commands_are_ignored_once_handled() {
        let p = policy();
        let mut l = Ledger::default();
        let m = init("all", serde_json::json!({}), NOW);
        assert_eq!(
            gate(&p, &mut l, &topic("all", "rescan", "f1"), &bytes(&m), NOW),
            Verdict::Execute(Action::Rescan)
        );
        assert_eq!(
            gate(
                &p,
                &mut l,
                &topic("all", "rescan", "f1"),
                &bytes(&m),
                NOW + 100
            ),
            Verdict::Ignore("duplicate delivery")
        );
        let other = init("all", serde_json::json!({}), NOW + 5);
        assert_eq!(
            gate(
                &p,
                &mut l,
                &topic("all", "rescan", "f1"),
                &bytes(&other),
                NOW + 100
            ),
            Verdict::Ignore("fleet-wide command already handled")
        );
    }

    #[test]
    fn keygen_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("op.key");
        let pubp = keygen(&path).unwrap();
        let k = load_signing_key(&path).unwrap();
        let v = parse_verifying_key(&std::fs::read_to_string(&pubp).unwrap()).unwrap();
        assert_eq!(k.verifying_key(), v);
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(
            std::fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
        assert!(keygen(&path).unwrap_err().contains("exists"));
    }
}
