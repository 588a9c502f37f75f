//! First-boot provisioning: an image is flashed once, and each board is configured from a PC by
//! dropping `npu-agent.toml` on its boot partition (`/boot/firmware/` on Raspberry Pi OS,
//! `/boot/` on Armbian). On start, before the configuration is read, `npu-agent run` calls
//! [`provision`], which:
//!
//! 1. reads the file and validates all of it: the config keys of docs/reference.md "Config keys" (strict, the
//!    same parser and checks as `/etc/npu-agent/agent.toml`, errors with file and line), plus two
//!    tables only this file may carry — `[secrets]` (`mqtt_password`, `mqtt_key`) and `[files]`
//!    (`mqtt_ca`, `mqtt_cert`, `trusted_keys`), each parsed as what it claims to be (PEM key,
//!    certificates, Ed25519 public keys);
//! 2. writes the secrets to [`SECRETS_DIR`] (directory 0700, files 0600) and the public files to
//!    [`PUBLIC_DIR`], each atomically (temp file created with its final mode, fsync, rename,
//!    directory fsync), then the configuration, rewritten to reference them (`password_file`,
//!    `key_file`, `ca_file`, `cert_file`, `trusted_keys`), to [`DROPIN`] — so the config in
//!    `agent.d/` only ever holds file references;
//! 3. overwrites the boot file with zeros and removes it (on a FAT partition a file cannot be protected) and syncs its
//!    directory.
//!
//! Nothing is written before everything validated. If a write fails, every file already written
//! is put back as it was (or removed), and the boot file stays: nothing is applied. A power cut
//! part-way leaves the boot file in place too, and the next start applies it again from the
//! beginning (the same writes, same result). A broken file is left in place and reported: on
//! stderr (the journal), in the `sd_notify` status, and as the finding [`FINDING_ID`] in the
//! daemon's MQTT status ([`annotate`]).

use crate::action::atomic::{write_atomic, RealStorage, Storage};
use crate::check::{Finding, Status};
use crate::config::{self, FIRST_BOOT_FILES};
use crate::root::SysRoot;
use serde::{Deserialize, Serialize};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

mod write;
use write::*;

mod validate;
use validate::*;

/// Where the provisioned configuration goes (late in name order: it wins over packaged drop-ins,
/// as the boot file did when it was read as a layer).
pub const DROPIN: &str = "/etc/npu-agent/agent.d/90-provisioned.toml";
/// Secrets from `[secrets]` (directory 0700, files 0600).
pub const SECRETS_DIR: &str = "/etc/npu-agent/secrets";
/// Public material from `[files]` (CA, client certificate, trusted command keys).
pub const PUBLIC_DIR: &str = "/etc/npu-agent/provisioned";
/// The finding id the daemon's status carries for the provisioning outcome.
pub const FINDING_ID: &str = "agent.provisioning";
/// Tables of the boot file that provisioning consumes (they are not config keys).
pub const CONSUMED_TABLES: &[&str] = &["secrets", "files"];
/// Largest boot file accepted (a config with a few PEM blocks is a few KiB).
pub const MAX_BOOT_FILE_BYTES: usize = 256 * 1024;

const SECRET_MODE: u32 = 0o600;
const SECRET_DIR_MODE: u32 = 0o700;
const PUBLIC_MODE: u32 = 0o644;

/// `[secrets]`: written 0600 and referenced, never left in the config.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Secrets {
    /// Broker password -> `mqtt.password_file`.
    mqtt_password: Option<toml::Spanned<crate::sys::secret::Secret>>,
    /// Client private key (PEM) for mTLS -> `mqtt.key_file`.
    mqtt_key: Option<toml::Spanned<crate::sys::secret::Secret>>,
}

/// `[files]`: public material carried inline, written 0644 and referenced.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Files {
    /// Server CA (PEM) -> `mqtt.ca_file`.
    mqtt_ca: Option<toml::Spanned<String>>,
    /// Client certificate (PEM) -> `mqtt.cert_file`.
    mqtt_cert: Option<toml::Spanned<String>>,
    /// Ed25519 public keys (the PEM `keygen` writes) -> appended to `security.trusted_keys`.
    trusted_keys: Option<toml::Spanned<Vec<String>>>,
}

/// The boot file's own tables; every other key is the config layer, checked by
/// [`config::check_layer`].
#[derive(Debug, Default, Deserialize)]
struct Consumed {
    // Defaulted structs rather than `Option`s (as in the config layer): the same reading
    // without another toml option-deserializer copy per table.
    #[serde(default)]
    secrets: Secrets,
    #[serde(default)]
    files: Files,
}

/// What provisioning writes (or, for `--print-config`, would write).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Plan {
    /// Board path of the boot file.
    pub source: String,
    /// Board path of the config drop-in.
    pub dropin: String,
    /// Config keys the file sets (`board_id`, `mqtt.url`, ...), references included.
    pub keys: Vec<String>,
    /// Board paths of secret files (0600).
    pub secrets: Vec<String>,
    /// Board paths of public files.
    pub files: Vec<String>,
}

/// The result of one provisioning attempt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
pub enum ProvisionOutcome {
    /// No provisioning file on the boot partition.
    NoFile,
    /// A valid file, not applied ([`inspect`] only looks).
    Pending {
        /// What applying it would write.
        plan: Plan,
    },
    /// Applied: the config and secrets are in `/etc/npu-agent/`.
    Applied {
        /// What was written.
        plan: Plan,
        /// The boot file was removed (false: it could not be, see `note`; it still holds any
        /// secrets in clear, and the next start applies it again).
        boot_file_removed: bool,
        /// Why the boot file could not be removed.
        note: Option<String>,
    },
    /// The file is broken: left in place, nothing applied.
    Invalid {
        /// Board path of the file (both, when two exist).
        source: String,
        /// 1-based line, when known.
        line: Option<usize>,
        /// What is wrong (secret values are never quoted).
        message: String,
    },
    /// The file is valid but writing failed: every write was undone, the file left in place.
    Failed {
        /// Board path of the file.
        source: String,
        /// The failing write.
        message: String,
    },
}

impl ProvisionOutcome {
    /// One line for the journal and the `sd_notify` status; `None` when there was no file.
    pub fn describe(&self) -> Option<String> {
        match self {
            ProvisionOutcome::NoFile => None,
            ProvisionOutcome::Pending { plan } => Some(format!(
                "first-boot file {} is valid; `npu-agent run` moves it into {} on start ({})",
                plan.source,
                plan.dropin,
                summary_of(plan)
            )),
            ProvisionOutcome::Applied { plan, boot_file_removed: true, .. } => {
                Some(format!("provisioned from {} into {} ({}); the boot file was removed", plan.source, plan.dropin, summary_of(plan)))
            }
            ProvisionOutcome::Applied { plan, note, .. } => Some(format!(
                "provisioned from {} into {} ({}), but the boot file could not be removed: {}",
                plan.source,
                plan.dropin,
                summary_of(plan),
                note.as_deref().unwrap_or("unknown error")
            )),
            ProvisionOutcome::Invalid { source, line, message } => Some(match line {
                Some(l) => format!("first-boot file {source} is invalid (line {l}: {message}); it was left in place and nothing from it was applied"),
                None => format!("first-boot file {source} is invalid ({message}); it was left in place and nothing from it was applied"),
            }),
            ProvisionOutcome::Failed { source, message } => {
                Some(format!("first-boot file {source} could not be applied ({message}); every write was undone and the file left in place"))
            }
        }
    }

    /// The finding for the daemon's status; `None` when there was no file.
    pub fn finding(&self) -> Option<Finding> {
        let summary = self.describe()?;
        let retry = "then `sudo systemctl restart npu-agent` (or reboot)";
        Some(match self {
            ProvisionOutcome::NoFile => return None,
            ProvisionOutcome::Pending { plan } => plan_observed(Finding::new(FINDING_ID, Status::Info, summary), plan),
            ProvisionOutcome::Applied { plan, boot_file_removed: true, .. } => {
                plan_observed(Finding::new(FINDING_ID, Status::Info, summary), plan).observed("boot_file_removed", true)
            }
            ProvisionOutcome::Applied { plan, .. } => plan_observed(Finding::new(FINDING_ID, Status::Warn, summary), plan)
                .observed("boot_file_removed", false)
                .remedy(format!(
                    "delete {} by hand (it may hold the broker password in clear): sudo mount -o remount,rw {} && sudo rm {}",
                    plan.source,
                    Path::new(&plan.source).parent().map(|p| p.display().to_string()).unwrap_or_default(),
                    plan.source
                )),
            ProvisionOutcome::Invalid { source, line, .. } => {
                let mut f = Finding::new(FINDING_ID, Status::Error, summary)
                    .observed("source", source.clone())
                    .remedy(format!("fix {source} (the commented template is /usr/share/npu-agent/npu-agent.toml.example), {retry}"));
                if let Some(first) = source.split(" and ").next() {
                    // The line itself is not quoted: it may hold a secret.
                    f = f.evidence(first, *line, "");
                }
                f
            }
            ProvisionOutcome::Failed { source, .. } => Finding::new(FINDING_ID, Status::Fail, summary)
                .observed("source", source.clone())
                .remedy(format!("make /etc/npu-agent writable (space, read-only root?), {retry}")),
        })
    }
}

fn summary_of(plan: &Plan) -> String {
    let keys = if plan.keys.is_empty() {
        "no settings".to_string()
    } else {
        format!("sets {}", plan.keys.join(", "))
    };
    format!(
        "{keys}; {} secret file(s), {} public file(s)",
        plan.secrets.len(),
        plan.files.len()
    )
}

fn plan_observed(f: Finding, plan: &Plan) -> Finding {
    f.observed("source", plan.source.clone())
        .observed("dropin", plan.dropin.clone())
        .observed("keys", plan.keys.clone())
        .observed("secret_files", plan.secrets.clone())
        .observed("public_files", plan.files.clone())
}

/// One file to write.
#[derive(Debug, Clone)]
struct Write {
    path: String,
    bytes: Vec<u8>,
    mode: u32,
}

/// Everything validated, ready to write.
#[derive(Debug)]
struct Prepared {
    plan: Plan,
    writes: Vec<Write>,
}

/// Finds the boot file: `Ok(None)` without one; two at once is an error (which one was meant?).
fn find_boot_file(root: &SysRoot) -> Result<Option<&'static str>, Box<ProvisionOutcome>> {
    let present: Vec<&'static str> = FIRST_BOOT_FILES
        .iter()
        .copied()
        .filter(|f| root.exists(f))
        .collect();
    match present.as_slice() {
        [] => Ok(None),
        [one] => Ok(Some(*one)),
        many => Err(Box::new(ProvisionOutcome::Invalid {
            source: many.join(" and "),
            line: None,
            message: "two provisioning files; keep the one on the partition this image boots from and delete the other".into(),
        })),
    }
}

fn line_of(text: &str, offset: usize) -> usize {
    text.as_bytes()[..offset.min(text.len())]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

/// Secret values found in the file (however broken the rest is), to scrub from messages.
fn secret_values(text: &str) -> Vec<String> {
    let Ok(table) = toml::from_str::<toml::Table>(text) else {
        return Vec::new();
    };
    let Some(toml::Value::Table(s)) = table.get("secrets") else {
        return Vec::new();
    };
    // Every value, whatever its type (an unquoted numeric password is a secret too).
    s.values()
        .map(|v| match v {
            toml::Value::String(s) => s.clone(),
            other => other.to_string(),
        })
        .filter(|v| v.len() >= 3)
        .collect()
}

fn scrub(mut message: String, secrets: &[String]) -> String {
    for s in secrets {
        message = message.replace(s.as_str(), "<secret>");
    }
    message
}

/// (table entry, value, config key it fills, file name, secret?)
type Inline<'a> = (&'a str, Option<(usize, &'a str)>, &'a str, &'a str, bool);

/// The four inline values of the boot file's `[secrets]` and `[files]` tables.
fn inline_values<'a>(s: &'a Secrets, f: &'a Files) -> [Inline<'a>; 4] {
    fn secret(v: &Option<toml::Spanned<crate::sys::secret::Secret>>) -> Option<(usize, &str)> {
        v.as_ref().map(|v| (v.span().start, v.get_ref().expose()))
    }
    fn public(v: &Option<toml::Spanned<String>>) -> Option<(usize, &str)> {
        v.as_ref().map(|v| (v.span().start, v.get_ref().as_str()))
    }
    [
        (
            "secrets.mqtt_password",
            secret(&s.mqtt_password),
            "password_file",
            "mqtt-password",
            true,
        ),
        (
            "secrets.mqtt_key",
            secret(&s.mqtt_key),
            "key_file",
            "mqtt-client.key",
            true,
        ),
        (
            "files.mqtt_ca",
            public(&f.mqtt_ca),
            "ca_file",
            "mqtt-ca.pem",
            false,
        ),
        (
            "files.mqtt_cert",
            public(&f.mqtt_cert),
            "cert_file",
            "mqtt-client.pem",
            false,
        ),
    ]
}

/// Points the drop-in's `[mqtt]` keys at the files written and appends `new_keys` to
/// `security.trusted_keys`; an `[mqtt]` table left empty is dropped.
fn add_refs(table: &mut toml::Table, refs: &[(&str, String)], new_keys: Vec<String>) {
    let mqtt = table
        .entry("mqtt")
        .or_insert_with(|| toml::Value::Table(toml::Table::new()));
    if let toml::Value::Table(m) = mqtt {
        for (key, path) in refs {
            m.insert(key.to_string(), toml::Value::String(path.clone()));
        }
    }
    if table
        .get("mqtt")
        .and_then(|m| m.as_table())
        .is_some_and(|m| m.is_empty())
    {
        table.remove("mqtt");
    }
    if !new_keys.is_empty() {
        let sec = table
            .entry("security")
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        if let toml::Value::Table(sec) = sec {
            let list = sec
                .entry("trusted_keys")
                .or_insert_with(|| toml::Value::Array(Vec::new()));
            if let toml::Value::Array(a) = list {
                a.extend(new_keys.into_iter().map(toml::Value::String));
            }
        }
    }
}

/// The drop-in's text: a header saying where it came from, then the config `body`.
fn dropin_text(source: &str, now: &str, body: &str) -> String {
    format!(
        "# Written by npu-agent {} at {now} from the first-boot file {source}\n\
         # (removed from the boot partition after this file was written). Secrets are in\n\
         # {SECRETS_DIR}/ (0600). To re-provision, put a new npu-agent.toml on the boot\n\
         # partition: it replaces this file.\n\n{body}",
        env!("CARGO_PKG_VERSION")
    )
}

/// `content` with its trailing line ends replaced by one `\n`.
fn one_line_end(content: &str) -> Vec<u8> {
    let mut bytes = content.trim_end_matches(['\n', '\r']).as_bytes().to_vec();
    bytes.push(b'\n');
    bytes
}

/// One public file per `files.trusted_keys` entry, each checked as an operator verifying key.
/// Errors: the first key that does not parse, by index.
fn trusted_key_writes(keys: &[String]) -> Result<Vec<Write>, String> {
    let mut out = Vec::new();
    for (i, k) in keys.iter().enumerate() {
        crate::mqtt::command::parse_verifying_key(k)
            .map_err(|e| format!("files.trusted_keys[{i}]: {e}"))?;
        out.push(Write {
            path: format!("{PUBLIC_DIR}/trusted-key-{}.pub", i + 1),
            bytes: one_line_end(k),
            mode: PUBLIC_MODE,
        });
    }
    Ok(out)
}

/// Validates the boot file at `source` (text `text`) and computes every write. No I/O.
fn prepare(source: &str, text: &str, now: &str) -> Result<Prepared, Box<ProvisionOutcome>> {
    let secrets = secret_values(text);
    let bad = |line: Option<usize>, message: String| {
        Box::new(ProvisionOutcome::Invalid {
            source: source.to_string(),
            line,
            message: scrub(message, &secrets),
        })
    };
    // The config keys: strict, same checks as agent.toml, lines of this file.
    let cfg = config::check_layer(source, text, CONSUMED_TABLES).map_err(|e| {
        // A value refused by validation has no position from the parser: find its line.
        let line = e.line.or_else(|| {
            e.message
                .strip_prefix("mqtt.url")
                .and_then(|_| find_key_line(text, "url"))
        });
        bad(line, e.message)
    })?;
    // The provisioning tables, strict too.
    let consumed: Consumed = toml::from_str(text).map_err(|e| {
        bad(
            e.span().map(|s| line_of(text, s.start)),
            config::redact_values(e.message().trim()).replace("unknown field", "unknown key"),
        )
    })?;
    let mut table: toml::Table =
        toml::from_str(text).map_err(|e| bad(None, config::redact_values(e.message())))?;
    for t in CONSUMED_TABLES {
        table.remove(*t);
    }
    if !cfg.mqtt.url.is_empty() {
        crate::mqtt::parse_urls(&cfg.mqtt.url)
            .map_err(|e| bad(find_key_line(text, "url"), format!("mqtt.url: {e}")))?;
    }
    let s = consumed.secrets;
    let f = consumed.files;
    let mqtt_set = |key: &str| {
        table
            .get("mqtt")
            .and_then(|m| m.get(key))
            .and_then(|v| v.as_str())
            .is_some_and(|v| !v.is_empty())
    };
    let mut writes = Vec::new();
    let mut refs: Vec<(&str, String)> = Vec::new();
    let mut plan = Plan {
        source: source.to_string(),
        dropin: DROPIN.to_string(),
        keys: Vec::new(),
        secrets: Vec::new(),
        files: Vec::new(),
    };

    let inline = inline_values(&s, &f);
    for (name, value, key, file, secret) in inline {
        let Some((start, content)) = value else {
            continue;
        };
        let line = Some(line_of(text, start));
        if mqtt_set(key) {
            return Err(bad(
                line,
                format!("{name} and mqtt.{key} both given; keep one"),
            ));
        }
        check_content(name, content).map_err(|m| bad(line, m))?;
        let dir = if secret { SECRETS_DIR } else { PUBLIC_DIR };
        let path = format!("{dir}/{file}");
        let bytes = one_line_end(content);
        writes.push(Write {
            path: path.clone(),
            bytes,
            mode: if secret { SECRET_MODE } else { PUBLIC_MODE },
        });
        if secret {
            plan.secrets.push(path.clone());
        } else {
            plan.files.push(path.clone());
        }
        refs.push((key, path));
    }
    let mut new_keys: Vec<String> = Vec::new();
    if let Some(keys) = &f.trusted_keys {
        let line = Some(line_of(text, keys.span().start));
        for w in trusted_key_writes(keys.get_ref()).map_err(|m| bad(line, m))? {
            plan.files.push(w.path.clone());
            new_keys.push(w.path.clone());
            writes.push(w);
        }
    }

    // The drop-in: the config keys as given, plus references to the files just planned.
    add_refs(&mut table, &refs, new_keys);
    plan.keys = key_paths(&table);
    let body =
        toml::to_string(&table).map_err(|e| bad(None, format!("cannot render the config: {e}")))?;
    let text_out = dropin_text(source, now, &body);
    // Belt and braces: what goes into agent.d must load.
    config::check_layer(DROPIN, &text_out, &[])
        .map_err(|e| bad(None, format!("the rewritten config does not load: {e}")))?;
    writes.push(Write {
        path: DROPIN.to_string(),
        bytes: text_out.into_bytes(),
        mode: PUBLIC_MODE,
    });
    Ok(Prepared { plan, writes })
}

/// Reads and validates the boot file without writing anything (`run --print-config`).
pub fn inspect(root: &SysRoot) -> ProvisionOutcome {
    let source = match find_boot_file(root) {
        Ok(Some(s)) => s,
        Ok(None) => return ProvisionOutcome::NoFile,
        Err(o) => return *o,
    };
    match read_and_prepare(root, source, &now_rfc3339()) {
        Ok(p) => ProvisionOutcome::Pending { plan: p.plan },
        Err(o) => *o,
    }
}

fn read_and_prepare(
    root: &SysRoot,
    source: &str,
    now: &str,
) -> Result<Prepared, Box<ProvisionOutcome>> {
    let invalid = |line: Option<usize>, message: String| {
        Box::new(ProvisionOutcome::Invalid {
            source: source.to_string(),
            line,
            message,
        })
    };
    let bytes = root
        .read(source)
        .map_err(|e| invalid(None, format!("cannot read it: {e}")))?;
    if bytes.len() > MAX_BOOT_FILE_BYTES {
        return Err(invalid(
            None,
            format!(
                "{} bytes; more than {MAX_BOOT_FILE_BYTES} is not a config",
                bytes.len()
            ),
        ));
    }
    let text = crate::sys::text::strict_utf8(bytes)
        .map_err(|e| invalid(Some(e.line), e.without_line()))?;
    prepare(source, &text, now)
}

fn now_rfc3339() -> String {
    crate::sys::time::rfc3339_now()
}

/// Provisions from the boot partition under `root` (see the module documentation).
pub fn provision(root: &SysRoot) -> ProvisionOutcome {
    provision_with(root, &mut RealStorage, &now_rfc3339())
}

/// [`provision`] through a given [`Storage`] (tests inject faults) at time `now` (RFC 3339).
pub fn provision_with(root: &SysRoot, storage: &mut dyn Storage, now: &str) -> ProvisionOutcome {
    let source = match find_boot_file(root) {
        Ok(Some(s)) => s,
        Ok(None) => return ProvisionOutcome::NoFile,
        Err(o) => return *o,
    };
    let prepared = match read_and_prepare(root, source, now) {
        Ok(p) => p,
        Err(o) => return *o,
    };
    if let Err(message) = apply(root, storage, &prepared.writes) {
        return ProvisionOutcome::Failed {
            source: source.to_string(),
            message,
        };
    }
    // Applied and durable: now the boot file goes.
    // The entry itself: a symlinked boot file goes, its target stays.
    let removed = root
        .entry_path(source)
        .map_err(|e| e.to_string())
        .and_then(|host| {
            // The password must not stay in the freed clusters; a symlinked entry is only
            // unlinked (scrub refuses to follow it), and a scrub that fails still removes.
            if let Err(e) = storage.scrub(&host) {
                tracing::warn!(file = %host.display(), error = %e, "boot file not overwritten before removal");
            }
            storage.remove_file(&host).map_err(|e| e.to_string())?;
            if let Some(dir) = host.parent() {
                // FAT has no directory fsync worth failing over.
                let _ = storage.sync_dir(dir);
            }
            Ok(())
        });
    ProvisionOutcome::Applied {
        plan: prepared.plan,
        boot_file_removed: removed.is_ok(),
        note: removed.err(),
    }
}

/// What `run` does first: provision (or, with `look_only`, only inspect) and log the outcome on
/// `err` (the journal). The daemon shows the outcome's finding in its status.
pub fn at_start(root: &SysRoot, look_only: bool, err: &mut dyn std::io::Write) -> ProvisionOutcome {
    let o = if look_only {
        inspect(root)
    } else {
        provision(root)
    };
    if let Some(line) = o.describe() {
        let _ = writeln!(err, "npu-agent: {line}");
    }
    o
}

/// Comment lines for `run --print-config` about a pending or broken boot file.
pub fn print_config_note(o: &ProvisionOutcome) -> String {
    match o.describe() {
        Some(line) if !matches!(o, ProvisionOutcome::NoFile) => format!("# {line}\n"),
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests;
