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

pub use super::ed25519::{SigningKey, VerifyingKey};
use base64::Engine;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::collections::BTreeMap;

// The vocabulary lives in the model; named here too because most callers reach it with the
// command parser.
pub use crate::model::action::{Action, ActionKind};

/// Largest accepted command payload (bytes). Larger ones are rejected without parsing.
pub const MAX_COMMAND_BYTES: usize = 4096;

/// Clock skew tolerated between requester and board, seconds.
pub const CLOCK_SKEW_S: i64 = 60;

/// Why [`parse`] ignores an `executing` state (the gate checks it against the ledger).
pub const IN_PROGRESS: &str = "a command's state in progress";

/// Lifecycle states of a command (docs/reference.md "MQTT topics and payloads").
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
    /// The state named `word` on the wire (`init`, `executing`, `successful`, `failed`,
    /// `rejected`); `None` for any other word.
    pub fn from_wire(word: &str) -> Option<CmdStatus> {
        Some(match word {
            "init" => CmdStatus::Init,
            "executing" => CmdStatus::Executing,
            "successful" => CmdStatus::Successful,
            "failed" => CmdStatus::Failed,
            "rejected" => CmdStatus::Rejected,
            _ => return None,
        })
    }

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

/// What a command is signed for: the fleet (topic root), board, action and id, arguments and
/// validity window.
#[derive(Debug, Clone, Copy)]
pub struct Signed<'a> {
    /// `mqtt.topic_root` (`npu-fleet`).
    pub topic_root: &'a str,
    /// Board id or `all`.
    pub board: &'a str,
    /// Action name.
    pub action: &'a str,
    /// Command id.
    pub cmd_id: &'a str,
    /// Arguments.
    pub args: &'a Map<String, Value>,
    /// Unix seconds.
    pub issued_at: i64,
    /// Unix seconds.
    pub expires_at: i64,
}

impl Signed<'_> {
    /// The bytes a signature covers (v2): the version line, the topic root, then the fields of
    /// v1, each followed by `\n`.
    pub fn bytes(&self) -> Vec<u8> {
        self.form("npu-agent-command-v2", Some(self.topic_root))
    }

    /// The v1 bytes (no topic root), accepted only with `security.accept_v1_signatures`.
    pub fn bytes_v1(&self) -> Vec<u8> {
        self.form("npu-agent-command-v1", None)
    }

    fn form(&self, version: &str, root: Option<&str>) -> Vec<u8> {
        // serde_json's Map is ordered by key (no preserve_order feature): canonical.
        let args = serde_json::to_string(self.args).unwrap_or_default();
        let root = root.map(|r| format!("{r}\n")).unwrap_or_default();
        let Signed {
            board,
            action,
            cmd_id,
            issued_at,
            expires_at,
            ..
        } = self;
        format!("{version}\n{root}{board}\n{action}\n{cmd_id}\n{args}\n{issued_at}\n{expires_at}\n")
            .into_bytes()
    }
}

/// What `msg` for `action`/`cmd_id` under `topic_root` is signed for.
pub fn signed_for<'a>(
    topic_root: &'a str,
    action: &'a str,
    cmd_id: &'a str,
    msg: &'a InitMessage,
) -> Signed<'a> {
    Signed {
        topic_root,
        board: &msg.board,
        action,
        cmd_id,
        args: &msg.args,
        issued_at: msg.issued_at,
        expires_at: msg.expires_at,
    }
}

/// Signs an init message in place (the v2 bytes, bound to `topic_root`).
pub fn sign(key: &SigningKey, topic_root: &str, action: &str, cmd_id: &str, msg: &mut InitMessage) {
    let sig = key.sign(&signed_for(topic_root, action, cmd_id, msg).bytes());
    msg.signature = Some(base64::engine::general_purpose::STANDARD.encode(sig));
}

/// Writes a new key pair: PKCS#8 v1 PEM private key at `out` (mode 0600) and SPKI PEM public key
/// at `out.pub` (as `openssl genpkey -algorithm ed25519` and `openssl pkey -pubout` write them).
/// Returns the public key path. Refuses to overwrite an existing file.
pub fn keygen(out: &std::path::Path) -> Result<std::path::PathBuf, String> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut seed = [0u8; 32];
    getrandom::fill(&mut seed).map_err(|e| format!("no randomness: {e}"))?;
    let key = SigningKey::from_bytes(&seed);
    // PKCS#8 v1 (RFC 5208: no embedded public key), which `openssl pkey` and python-cryptography
    // read (they refuse v2, RFC 5958).
    let private = key.to_pkcs8_pem();
    let public = key.verifying_key().to_public_key_pem();
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
    // Both files are new (create_new): nothing is replaced, so there is no old key to keep.
    let mut p = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .open(&pub_path)
        .map_err(|e| format!("{}: {e}", pub_path.display()))?;
    p.write_all(public.as_bytes())
        .and_then(|_| p.sync_all())
        .map_err(|e| format!("{}: {e}", pub_path.display()))?;
    Ok(pub_path)
}

/// Reads an Ed25519 PKCS#8 PEM private key: v1 (as `keygen` and `openssl genpkey` write) or v2
/// (with the public key, as `keygen` wrote before; the pair is checked).
pub fn load_signing_key(path: &std::path::Path) -> Result<SigningKey, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    SigningKey::from_pkcs8_pem(&text)
        .map_err(|e| format!("{}: not an Ed25519 PKCS#8 PEM key: {e}", path.display()))
}

/// Parses an SPKI PEM public key.
pub fn parse_verifying_key(text: &str) -> Result<VerifyingKey, String> {
    VerifyingKey::from_public_key_pem(text)
        .map_err(|e| format!("not an Ed25519 public key PEM: {e}"))
}

fn parse_args(action: ActionKind, args: &Map<String, Value>) -> Result<Action, String> {
    let allowed = action.arguments();
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
        ActionKind::Compact => Action::Compact {
            drop_caches: match args.get("drop_caches") {
                None => false,
                Some(Value::Bool(b)) => *b,
                Some(_) => return Err("argument \"drop_caches\" must be true or false".into()),
            },
        },
        ActionKind::SetCma => {
            let size =
                string("size", 16)?.ok_or("set_cma needs the argument \"size\" (e.g. \"256M\")")?;
            // The syntax is checked here (before rate limits); the profile minimum and the RAM
            // bound are checked by the edit itself.
            if let Err(e) = crate::parse::cma_size::parse_cma_size(&size) {
                return Err(format!("set_cma size: {e}"));
            }
            Action::SetCma { size }
        }
        ActionKind::Reboot => Action::Reboot {
            reason: string("reason", 200)?.unwrap_or_else(|| "requested over MQTT".into()),
        },
        ActionKind::Rescan => Action::Rescan,
        ActionKind::Update => Action::Update {
            version: string("version", 100)?
                .ok_or_else(|| {
                    "update needs the argument \"version\" (the npu-agent package version)"
                        .to_string()
                })
                .and_then(|v| {
                    // Refused here, before anything runs, and never passed to dpkg as an option.
                    crate::parse::dpkg::check_debian_version(&v).map(|()| v)
                })?,
            allow_downgrade: match args.get("allow_downgrade") {
                None => false,
                Some(Value::Bool(b)) => *b,
                // `fleet send --arg allow_downgrade=true` sends a string.
                Some(Value::String(s)) if s == "true" || s == "false" => s == "true",
                Some(_) => return Err("argument \"allow_downgrade\" must be true or false".into()),
            },
        },
        ActionKind::Fix => Action::Fix {
            checks: fix_checks(string("check", 400)?)?,
            dry_run: match args.get("dry_run") {
                None => false,
                Some(Value::Bool(b)) => *b,
                Some(_) => return Err("argument \"dry_run\" must be true or false".into()),
            },
        },
        ActionKind::Capture => {
            use super::chunks::{DEFAULT_MAX_BYTES, MAX_BUNDLE_BYTES};
            let n = match args.get("max_bytes") {
                None => Some(DEFAULT_MAX_BYTES),
                // `fleet send --arg max_bytes=N` sends a string.
                Some(v) => v.as_u64().or_else(|| v.as_str()?.parse().ok()),
            };
            Action::Capture {
                max_bytes: n
                    .filter(|n| (1..=MAX_BUNDLE_BYTES).contains(n))
                    .ok_or_else(|| {
                        format!(
                            "argument \"max_bytes\" must be a whole number of bytes from 1 to \
                         {MAX_BUNDLE_BYTES}"
                        )
                    })?,
            }
        }
        ActionKind::ReleaseNpu => Action::ReleaseNpu {
            model: string("model", 200)?,
        },
    })
}

/// The check ids of a `fix` command's `check` argument (`"limits.memlock"`, or several
/// separated by commas); none for every fired finding.
///
/// Errors: an id that is no check's (named only when it looks like one).
fn fix_checks(arg: Option<String>) -> Result<Vec<String>, String> {
    let Some(arg) = arg else {
        return Ok(Vec::new());
    };
    let mut ids = Vec::new();
    for id in arg.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        if !crate::model::CHECK_IDS.contains(&id) {
            let looks = id.len() <= 40
                && id
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b"._".contains(&b));
            return Err(if looks {
                format!("fix: no such check id {id:?}")
            } else {
                "fix: the argument \"check\" names no check id".into()
            });
        }
        if !ids.iter().any(|i: &String| i == id) {
            ids.push(id.to_string());
        }
    }
    Ok(ids)
}

/// Why the gate did not execute a message: a refusal to publish, or a message to ignore.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
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
    /// Actions accepted unsigned (also: the Home Assistant buttons offered).
    pub allow_unsigned: Vec<ActionKind>,
    /// Longest accepted command lifetime and age, seconds (bounded by
    /// [`MAX_COMMAND_AGE_LIMIT_S`] at config load).
    pub max_command_age_s: u64,
    /// The fleet's topic root (`mqtt.topic_root`): bound by the v2 signature.
    pub topic_root: String,
    /// Accept v1 signatures too (`security.accept_v1_signatures`).
    pub accept_v1: bool,
    /// Actions this board refuses whatever the signature, with the reason published as is (the
    /// profile's refusals, [`crate::profile::Profile::refuses_action`], set after each
    /// diagnosis). Empty by default.
    pub refused: BTreeMap<ActionKind, String>,
}

/// Largest accepted `security.max_command_age_s`: 7 days.
pub const MAX_COMMAND_AGE_LIMIT_S: u64 = 7 * 86_400;

/// A syntactically valid `init` message for a known action, not yet authorised.
#[derive(Debug, Clone, PartialEq)]
pub struct Parsed {
    /// The message.
    pub msg: InitMessage,
    /// Its validated arguments.
    pub action: Action,
    /// FNV-1a of the payload bytes: the same bytes again are a re-delivery.
    pub payload_hash: u64,
}

/// FNV-1a 64 of `bytes` (identifies a payload; not a security hash, the signature is).
pub fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf29ce484222325u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x100000001b3)
    })
}

/// True for 1-64 characters of `[A-Za-z0-9._-]`.
pub fn valid_cmd_id(id: &str) -> bool {
    (1..=64).contains(&id.len())
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// First half of the gate, stateless: size limit, UTF-8, lifecycle state, strict schema, cmd_id,
/// board, action and arguments. Nothing here depends on the time or the ledger.
///
/// Errors: [`Verdict::Ignore`] for an empty clear or a non-`init` state (the agent's own echo),
/// [`Verdict::Reject`] with the reason for everything malformed. A reason never quotes the
/// payload beyond the JSON decoder's position message.
pub fn parse(policy: &Policy, m: &super::incoming::Incoming) -> Result<Parsed, Verdict> {
    let (topic, payload) = (&m.topic, m.payload);
    if payload.is_empty() {
        return Err(Verdict::Ignore("cleared"));
    }
    if payload.len() > MAX_COMMAND_BYTES {
        return Err(Verdict::Reject(format!(
            "payload of {} bytes exceeds the {MAX_COMMAND_BYTES}-byte limit",
            payload.len()
        )));
    }
    let Ok(text) = std::str::from_utf8(payload) else {
        return Err(Verdict::Reject("payload is not UTF-8 JSON".into()));
    };
    // The state from the message's one JSON decode (shared with the other readers); an `init`
    // is then held to its strict schema (unknown or repeated fields refused).
    let json = m.json().map_err(|e| Verdict::Reject(json_error(e)))?;
    match AnyStatus::deserialize(json) {
        Ok(s) if s.status == CmdStatus::Executing => return Err(Verdict::Ignore(IN_PROGRESS)),
        Ok(s) if s.status != CmdStatus::Init => return Err(Verdict::Ignore("not an init message")),
        Ok(_) => {}
        Err(e) => return Err(Verdict::Reject(json_error(&e))),
    }
    let msg: InitMessage =
        serde_json::from_str(text).map_err(|e| Verdict::Reject(json_error(&e)))?;
    if !valid_cmd_id(&topic.cmd_id) {
        return Err(Verdict::Reject(
            "cmd_id must be 1-64 characters of [A-Za-z0-9._-]".into(),
        ));
    }
    if msg.board != topic.board {
        return Err(Verdict::Reject(format!(
            "command names board {:?} but was sent on {:?}'s topic",
            msg.board.chars().take(64).collect::<String>(),
            topic.board
        )));
    }
    if topic.board != policy.board && topic.board != super::topics::ALL {
        return Err(Verdict::Reject(format!(
            "command is for board {:?}, this is {:?}",
            topic.board, policy.board
        )));
    }
    let kind = topic.kind.ok_or_else(|| {
        Verdict::Reject(format!(
            "unknown action {:?} (known: {})",
            topic.action,
            ActionKind::names()
        ))
    })?;
    let action = parse_args(kind, &msg.args).map_err(Verdict::Reject)?;
    Ok(Parsed {
        msg,
        action,
        payload_hash: fnv(payload),
    })
}

/// A JSON decoder error without the offending value (serde quotes strings and numbers it
/// refuses; a command may carry anything): the category and position only.
fn json_error(e: &serde_json::Error) -> String {
    use serde_json::error::Category;
    let what = match e.classify() {
        Category::Syntax | Category::Eof => "not valid JSON",
        Category::Io => "unreadable",
        Category::Data => {
            let m = e.to_string();
            if let Some(f) = m.strip_prefix("unknown field `") {
                let name: String = f.chars().take_while(|c| *c != '`').take(64).collect();
                return format!(
                    "malformed command: unknown field {:?} at line {} column {}",
                    name,
                    e.line(),
                    e.column()
                );
            }
            if let Some(f) = m.strip_prefix("missing field `") {
                let name: String = f.chars().take_while(|c| *c != '`').take(64).collect();
                return format!("malformed command: missing field {name:?}");
            }
            "a field has the wrong type or value"
        }
    };
    match e.line() {
        // Read from the decoded value: no position to name.
        0 => format!("malformed command: {what}"),
        line => format!(
            "malformed command: {what} at line {line} column {}",
            e.column()
        ),
    }
}

/// Second half of the gate, given the time: lifetime (checked arithmetic, expiry mandatory and
/// bounded by `max_command_age_s`), clock skew, the board's refusals, and the signature or the
/// unsigned allow-list. Returns whether the command was signed by a trusted key.
///
/// Errors: the reason to publish.
pub fn authorize(
    policy: &Policy,
    topic: &super::topics::CommandTopic,
    parsed: &Parsed,
    now: i64,
) -> Result<bool, String> {
    let msg = &parsed.msg;
    // i128: no i64 input can overflow any sum or difference below.
    let (now_w, issued, expires) = (
        i128::from(now),
        i128::from(msg.issued_at),
        i128::from(msg.expires_at),
    );
    let skew = i128::from(CLOCK_SKEW_S);
    let max_age = i128::from(policy.max_command_age_s.min(MAX_COMMAND_AGE_LIMIT_S));
    if expires < issued {
        return Err(format!(
            "expires_at {} is before issued_at {}",
            msg.expires_at, msg.issued_at
        ));
    }
    if expires - issued > max_age {
        return Err(format!(
            "lifetime of {} s is above the {max_age} s limit (security.max_command_age_s)",
            expires - issued
        ));
    }
    if now_w > expires + skew {
        return Err(format!("expired {} s ago", now_w - expires));
    }
    if issued > now_w + skew {
        return Err(format!(
            "issued {} s in the future (clock skew above {CLOCK_SKEW_S} s)",
            issued - now_w
        ));
    }
    if now_w - issued > max_age + skew {
        return Err(format!(
            "issued {} s ago, older than the {max_age} s limit",
            now_w - issued
        ));
    }
    let kind = parsed.action.kind();
    if let Some(why) = policy.refused.get(&kind) {
        return Err(why.clone());
    }
    let unsigned_ok = policy.allow_unsigned.contains(&kind);
    match &msg.signature {
        Some(sig) if !policy.trusted_keys.is_empty() => {
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(sig)
                .map_err(|_| "signature is not base64".to_string())?;
            if bytes.len() != 64 {
                return Err("signature is not 64 bytes".into());
            }
            let signed = signed_for(&policy.topic_root, &topic.action, &topic.cmd_id, msg);
            let verifies = |b: &[u8]| policy.trusted_keys.iter().any(|k| k.verify(b, &bytes));
            if verifies(&signed.bytes()) {
                return Ok(true);
            }
            match verifies(&signed.bytes_v1()) {
                true if policy.accept_v1 => Ok(true),
                true => Err("signed in the v1 form, which does not bind the fleet's topic root: \
                     sign with this version's fleet send (v2), or set \
                     security.accept_v1_signatures = true while older senders remain"
                    .into()),
                false => Err("bad signature: no trusted key verifies it".into()),
            }
        }
        Some(_) if !unsigned_ok => Err(format!(
            "{} must be signed, and no trusted keys are configured",
            topic.action
        )),
        Some(_) => Ok(false),
        None if !unsigned_ok => Err(format!(
            "unsigned {} refused: sign it with an operator key, or add it to security.allow_unsigned",
            topic.action
        )),
        None => Ok(false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap()
    }

    #[test]
    fn fix_takes_check_ids_and_dry_run_and_refuses_the_rest() {
        let a = parse_args(
            ActionKind::Fix,
            &args(
                serde_json::json!({"check": "limits.memlock, hailo.driver_binding,limits.memlock", "dry_run": true}),
            ),
        );
        assert_eq!(
            a,
            Ok(Action::Fix {
                checks: vec!["limits.memlock".into(), "hailo.driver_binding".into()],
                dry_run: true
            })
        );
        assert_eq!(
            parse_args(ActionKind::Fix, &Map::new()),
            Ok(Action::Fix {
                checks: Vec::new(),
                dry_run: false
            })
        );
        let e = parse_args(
            ActionKind::Fix,
            &args(serde_json::json!({"check": "limits.memlok"})),
        )
        .unwrap_err();
        assert_eq!(e, "fix: no such check id \"limits.memlok\"");
        let e = parse_args(
            ActionKind::Fix,
            &args(serde_json::json!({"check": "$(reboot)"})),
        )
        .unwrap_err();
        assert!(!e.contains("reboot"), "{e}");
        assert!(parse_args(
            ActionKind::Fix,
            &args(serde_json::json!({"dry_run": "yes"}))
        )
        .is_err());
        assert!(parse_args(ActionKind::Fix, &args(serde_json::json!({"unit": "x"}))).is_err());
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
