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
//! 3. removes the boot file (on a FAT partition a file cannot be protected) and syncs its
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
use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

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
        crate::mqtt::parse_url(&cfg.mqtt.url)
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

    // (table entry, value, config key it fills, file name, secret?)
    type Inline<'a> = (&'a str, Option<(usize, &'a str)>, &'a str, &'a str, bool);
    fn secret(v: &Option<toml::Spanned<crate::sys::secret::Secret>>) -> Option<(usize, &str)> {
        v.as_ref().map(|v| (v.span().start, v.get_ref().expose()))
    }
    fn public(v: &Option<toml::Spanned<String>>) -> Option<(usize, &str)> {
        v.as_ref().map(|v| (v.span().start, v.get_ref().as_str()))
    }
    let inline: [Inline<'_>; 4] = [
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
    ];
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
        let mut bytes = content.trim_end_matches(['\n', '\r']).as_bytes().to_vec();
        bytes.push(b'\n');
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
        for (i, k) in keys.get_ref().iter().enumerate() {
            crate::mqtt::command::parse_verifying_key(k)
                .map_err(|e| bad(line, format!("files.trusted_keys[{i}]: {e}")))?;
            let path = format!("{PUBLIC_DIR}/trusted-key-{}.pub", i + 1);
            let mut bytes = k.trim_end_matches(['\n', '\r']).as_bytes().to_vec();
            bytes.push(b'\n');
            writes.push(Write {
                path: path.clone(),
                bytes,
                mode: PUBLIC_MODE,
            });
            plan.files.push(path.clone());
            new_keys.push(path);
        }
    }

    // The drop-in: the config keys as given, plus references to the files just planned.
    {
        let mqtt = table
            .entry("mqtt")
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        if let toml::Value::Table(m) = mqtt {
            for (key, path) in &refs {
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
    plan.keys = key_paths(&table);
    let body =
        toml::to_string(&table).map_err(|e| bad(None, format!("cannot render the config: {e}")))?;
    let text_out = format!(
        "# Written by npu-agent {} at {now} from the first-boot file {source}\n\
         # (removed from the boot partition after this file was written). Secrets are in\n\
         # {SECRETS_DIR}/ (0600). To re-provision, put a new npu-agent.toml on the boot\n\
         # partition: it replaces this file.\n\n{body}",
        env!("CARGO_PKG_VERSION")
    );
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

/// Line of the first `key =` in the file (for errors found after parsing).
fn find_key_line(text: &str, key: &str) -> Option<usize> {
    text.lines()
        .position(|l| {
            let t = l.trim_start();
            t.strip_prefix(key)
                .is_some_and(|r| r.trim_start().starts_with('='))
        })
        .map(|i| i + 1)
}

/// `section.key` for every key in the table, sorted.
fn key_paths(table: &toml::Table) -> Vec<String> {
    let mut out = Vec::new();
    for (k, v) in table {
        match v {
            toml::Value::Table(t) => out.extend(t.keys().map(|sub| format!("{k}.{sub}"))),
            _ => out.push(k.clone()),
        }
    }
    out.sort();
    out
}

/// The kind of a PEM decoding error, without its payload: rustls' `Debug` of some kinds carries
/// the offending line as a list of bytes, which may be the key itself.
fn pem_error_kind(e: &rustls::pki_types::pem::Error) -> String {
    format!("{e:?}")
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric())
        .collect()
}

/// Checks an inline value is what its name says. Messages never quote the value.
fn check_content(name: &str, content: &str) -> Result<(), String> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    match name {
        "secrets.mqtt_password" => {
            let p = content.trim_end_matches(['\n', '\r']);
            if p.is_empty() {
                return Err(format!("{name} is empty"));
            }
            if p.contains(['\n', '\r']) {
                return Err(format!(
                    "{name} spans several lines; a password is one line"
                ));
            }
            Ok(())
        }
        "secrets.mqtt_key" => PrivateKeyDer::from_pem_slice(content.as_bytes())
            .map(|_| ())
            .map_err(|e| format!("{name} is not a PEM private key ({})", pem_error_kind(&e))),
        _ => {
            let certs: Result<Vec<_>, _> =
                CertificateDer::pem_slice_iter(content.as_bytes()).collect();
            match certs {
                Ok(c) if !c.is_empty() => Ok(()),
                Ok(_) => Err(format!("{name} holds no PEM certificate")),
                Err(e) => Err(format!(
                    "{name} is not PEM certificates ({})",
                    pem_error_kind(&e)
                )),
            }
        }
    }
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
    let text = String::from_utf8(bytes).map_err(|e| {
        let line = e.as_bytes()[..e.utf8_error().valid_up_to()]
            .iter()
            .filter(|&&b| b == b'\n')
            .count()
            + 1;
        invalid(Some(line), "not UTF-8 text (save it as UTF-8)".into())
    })?;
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

fn io_msg(path: &str, e: impl std::fmt::Display) -> String {
    format!("{path}: {e}")
}

fn ensure_dir(root: &SysRoot, dir: &str, mode: Option<u32>) -> Result<PathBuf, String> {
    let host = root.create_dir_all(dir).map_err(|e| io_msg(dir, e))?;
    if let Some(m) = mode {
        std::fs::set_permissions(&host, std::fs::Permissions::from_mode(m))
            .map_err(|e| io_msg(dir, e))?;
    }
    Ok(host)
}

/// Writes every file atomically; on a failure puts back those already written.
fn apply(root: &SysRoot, storage: &mut dyn Storage, writes: &[Write]) -> Result<(), String> {
    let needs = |dir: &str| {
        writes
            .iter()
            .any(|w| w.path.starts_with(&format!("{dir}/")))
    };
    if needs(SECRETS_DIR) {
        ensure_dir(root, SECRETS_DIR, Some(SECRET_DIR_MODE))?;
    }
    if needs(PUBLIC_DIR) {
        ensure_dir(root, PUBLIC_DIR, None)?;
    }
    ensure_dir(root, config::CONFIG_DIR, None)?;
    // Every file written so far, to put back on a failure.
    let mut done: Vec<Written> = Vec::new();
    for w in writes {
        let step = (|| -> Result<(), String> {
            let host = root.write_path(&w.path).map_err(|e| e.to_string())?;
            let old = match std::fs::read(&host) {
                Ok(b) => Some((
                    b,
                    crate::action::atomic::existing_mode(&host).unwrap_or(w.mode),
                )),
                Err(e) if e.kind() == io::ErrorKind::NotFound => None,
                Err(e) => return Err(io_msg(&w.path, e)),
            };
            if let Err(e) = write_atomic(storage, &host, &w.bytes, None, w.mode) {
                if e.step == crate::action::atomic::Step::DirSync {
                    // Renamed already, durability unconfirmed: it counts as written.
                    done.push(Written {
                        host: host.clone(),
                        old,
                    });
                }
                return Err(e.to_string());
            }
            done.push(Written {
                host: host.clone(),
                old,
            });
            // A replaced file keeps no looser mode than asked (the umask may only tighten it).
            let m = crate::action::atomic::existing_mode(&host).unwrap_or(w.mode);
            if m & !w.mode != 0 {
                std::fs::set_permissions(&host, std::fs::Permissions::from_mode(w.mode))
                    .map_err(|e| io_msg(&w.path, e))?;
            }
            Ok(())
        })();
        if let Err(e) = step {
            rollback(storage, &done);
            return Err(e);
        }
    }
    Ok(())
}

/// A file [`apply`] wrote: its host path, and its previous content and mode (`None`: it was new).
struct Written {
    host: PathBuf,
    old: Option<(Vec<u8>, u32)>,
}

/// Puts back what [`apply`] replaced, newest first (best effort: a dead disk cannot).
fn rollback(storage: &mut dyn Storage, done: &[Written]) {
    for Written { host, old } in done.iter().rev() {
        match old {
            Some((bytes, mode)) => {
                let _ = write_atomic(storage, host, bytes, None, *mode);
            }
            None => {
                let _ = storage.remove_file(host);
                if let Some(dir) = host.parent() {
                    let _ = storage.sync_dir(dir);
                }
            }
        }
    }
}

// The outcome of this process's provisioning, for the daemon's status.
static OUTCOME: Mutex<Option<ProvisionOutcome>> = Mutex::new(None);

/// Remembers `o` for [`annotate`] (the latest outcome wins).
pub fn record(o: &ProvisionOutcome) {
    if let Ok(mut g) = OUTCOME.lock() {
        *g = Some(o.clone());
    }
}

/// The outcome [`record`]ed by this process, if any.
pub fn recorded() -> Option<ProvisionOutcome> {
    OUTCOME.lock().ok().and_then(|g| g.clone())
}

/// Adds the recorded outcome's finding (if any) to a report, first (it is about the agent
/// itself, before `board.identity`), and recomputes its health. The daemon calls it on every
/// status it builds.
pub fn annotate(r: &mut crate::report::Report) {
    let Some(f) = recorded().and_then(|o| o.finding()) else {
        return;
    };
    r.findings.retain(|x| x.id != FINDING_ID);
    r.findings.insert(0, f);
    r.health = crate::report::Health::of(&r.findings);
}

/// What `run` does first: provision (or, with `look_only`, only inspect), log the outcome on
/// `err` (the journal), and record it for the status.
pub fn at_start(root: &SysRoot, look_only: bool, err: &mut dyn std::io::Write) -> ProvisionOutcome {
    let o = if look_only {
        inspect(root)
    } else {
        provision(root)
    };
    if let Some(line) = o.describe() {
        let _ = writeln!(err, "npu-agent: {line}");
    }
    if !look_only {
        record(&o);
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
mod tests {
    use super::*;
    use std::fs;

    fn signing_key() -> ed25519_dalek::SigningKey {
        ed25519_dalek::SigningKey::from_bytes(&[7u8; 32])
    }

    fn key_pem() -> String {
        use ed25519_dalek::pkcs8::{spki::der::pem::LineEnding, EncodePrivateKey};
        signing_key()
            .to_pkcs8_pem(LineEnding::LF)
            .unwrap()
            .to_string()
    }

    fn pub_pem() -> String {
        use ed25519_dalek::pkcs8::{spki::der::pem::LineEnding, EncodePublicKey};
        signing_key()
            .verifying_key()
            .to_public_key_pem(LineEnding::LF)
            .unwrap()
    }

    fn cert_pem() -> String {
        let k = rcgen::KeyPair::generate().unwrap();
        rcgen::CertificateParams::new(vec!["broker.test".into()])
            .unwrap()
            .self_signed(&k)
            .unwrap()
            .pem()
    }

    fn tree(files: &[(&str, &str)]) -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        for (p, t) in files {
            let path = d.path().join(p.trim_start_matches('/'));
            fs::create_dir_all(path.parent().unwrap()).unwrap();
            fs::write(path, t).unwrap();
        }
        d
    }

    fn read(d: &tempfile::TempDir, p: &str) -> Option<String> {
        fs::read_to_string(d.path().join(p.trim_start_matches('/'))).ok()
    }

    fn mode(d: &tempfile::TempDir, p: &str) -> u32 {
        fs::metadata(d.path().join(p.trim_start_matches('/')))
            .unwrap()
            .permissions()
            .mode()
            & 0o7777
    }

    fn full_file(cert: &str) -> String {
        format!(
            "board_id = \"line3-cam2\"\n\n[mqtt]\nurl = \"mqtts://broker.example.net:8883\"\nusername = \"line3-cam2\"\n\n\
             [security]\nallow_unsigned = [\"compact\"]\n\n[secrets]\nmqtt_password = \"s3cr3t-pw\"\nmqtt_key = \"\"\"\n{key}\"\"\"\n\n\
             [files]\nmqtt_ca = \"\"\"\n{cert}\"\"\"\nmqtt_cert = \"\"\"\n{cert}\"\"\"\ntrusted_keys = [\"\"\"\n{pubk}\"\"\"]\n",
            key = key_pem(),
            pubk = pub_pem()
        )
    }

    #[test]
    fn no_file_is_no_outcome() {
        let d = tree(&[("/etc/npu-agent/agent.toml", "")]);
        let o = provision(&SysRoot::new(d.path()));
        assert_eq!(o, ProvisionOutcome::NoFile);
        assert_eq!(o.finding(), None);
        assert!(!d.path().join("etc/npu-agent/agent.d").exists());
    }

    #[test]
    fn full_file_is_moved_with_secrets_0600_and_references() {
        let cert = cert_pem();
        let d = tree(&[
            ("/boot/firmware/npu-agent.toml", &full_file(&cert)),
            ("/boot/firmware/config.txt", "dtparam=pciex1\n"),
        ]);
        let root = SysRoot::new(d.path());
        let o = provision_with(&root, &mut RealStorage, "2025-01-02T03:04:05Z");
        let ProvisionOutcome::Applied {
            plan,
            boot_file_removed,
            note,
        } = &o
        else {
            panic!("{o:?}")
        };
        assert!(*boot_file_removed, "{note:?}");
        assert_eq!(plan.source, "/boot/firmware/npu-agent.toml");
        assert_eq!(
            plan.secrets,
            vec![
                "/etc/npu-agent/secrets/mqtt-password",
                "/etc/npu-agent/secrets/mqtt-client.key"
            ]
        );
        assert_eq!(
            plan.files,
            vec![
                "/etc/npu-agent/provisioned/mqtt-ca.pem",
                "/etc/npu-agent/provisioned/mqtt-client.pem",
                "/etc/npu-agent/provisioned/trusted-key-1.pub"
            ]
        );
        assert_eq!(
            plan.keys,
            vec![
                "board_id",
                "mqtt.ca_file",
                "mqtt.cert_file",
                "mqtt.key_file",
                "mqtt.password_file",
                "mqtt.url",
                "mqtt.username",
                "security.allow_unsigned",
                "security.trusted_keys"
            ]
        );
        // The boot file is gone, its neighbours untouched.
        assert!(read(&d, "/boot/firmware/npu-agent.toml").is_none());
        assert_eq!(
            read(&d, "/boot/firmware/config.txt").unwrap(),
            "dtparam=pciex1\n"
        );
        // Secrets: 0600 in a 0700 directory, exact content.
        assert_eq!(
            read(&d, "/etc/npu-agent/secrets/mqtt-password").unwrap(),
            "s3cr3t-pw\n"
        );
        assert_eq!(mode(&d, "/etc/npu-agent/secrets/mqtt-password"), 0o600);
        assert_eq!(
            read(&d, "/etc/npu-agent/secrets/mqtt-client.key").unwrap(),
            key_pem()
        );
        assert_eq!(mode(&d, "/etc/npu-agent/secrets/mqtt-client.key"), 0o600);
        assert_eq!(mode(&d, "/etc/npu-agent/secrets"), 0o700);
        assert_eq!(
            read(&d, "/etc/npu-agent/provisioned/mqtt-ca.pem").unwrap(),
            cert
        );
        assert_eq!(
            read(&d, "/etc/npu-agent/provisioned/trusted-key-1.pub").unwrap(),
            pub_pem()
        );
        // The drop-in references them and holds no secret.
        let dropin = read(&d, DROPIN).unwrap();
        assert!(dropin.starts_with("# Written by npu-agent "), "{dropin}");
        assert!(dropin.contains(
            "at 2025-01-02T03:04:05Z from the first-boot file /boot/firmware/npu-agent.toml"
        ));
        assert!(
            !dropin.contains("s3cr3t-pw")
                && !dropin.contains("PRIVATE KEY")
                && !dropin.contains("[secrets]")
                && !dropin.contains("[files]"),
            "{dropin}"
        );
        // ... and loads as the effective config.
        let (c, s) = config::load(&root, None, &[]).unwrap();
        assert_eq!(s.applied, vec![DROPIN.to_string()]);
        assert_eq!(c.board_id, "line3-cam2");
        assert_eq!(c.mqtt.url, "mqtts://broker.example.net:8883");
        assert_eq!(c.mqtt.username, "line3-cam2");
        assert_eq!(c.mqtt.password_file, "/etc/npu-agent/secrets/mqtt-password");
        assert_eq!(c.mqtt.key_file, "/etc/npu-agent/secrets/mqtt-client.key");
        assert_eq!(c.mqtt.ca_file, "/etc/npu-agent/provisioned/mqtt-ca.pem");
        assert_eq!(
            c.mqtt.cert_file,
            "/etc/npu-agent/provisioned/mqtt-client.pem"
        );
        assert_eq!(
            c.security.trusted_keys,
            vec!["/etc/npu-agent/provisioned/trusted-key-1.pub"]
        );
        assert_eq!(c.security.allow_unsigned, vec!["compact"]);
        // The status finding is info and names the files, never a secret.
        let f = o.finding().unwrap();
        assert_eq!((f.id.as_str(), f.status), (FINDING_ID, Status::Info));
        let js = serde_json::to_string(&f).unwrap();
        assert!(
            !js.contains("s3cr3t-pw") && js.contains("mqtt-password"),
            "{js}"
        );
        // Nothing left on a second start.
        assert_eq!(provision(&root), ProvisionOutcome::NoFile);
    }

    #[test]
    fn armbian_location_and_trusted_keys_append_to_given_paths() {
        let text = format!("[security]\ntrusted_keys = [\"/etc/npu-agent/ops.pub\"]\n\n[files]\ntrusted_keys = [\"\"\"{pubk}\"\"\", \"\"\"{pubk}\"\"\"]\n", pubk = pub_pem());
        let d = tree(&[("/boot/npu-agent.toml", &text)]);
        let root = SysRoot::new(d.path());
        let o = provision(&root);
        assert!(
            matches!(&o, ProvisionOutcome::Applied { plan, boot_file_removed: true, .. } if plan.source == "/boot/npu-agent.toml"),
            "{o:?}"
        );
        let (c, _) = config::load(&root, None, &[]).unwrap();
        assert_eq!(
            c.security.trusted_keys,
            vec![
                "/etc/npu-agent/ops.pub",
                "/etc/npu-agent/provisioned/trusted-key-1.pub",
                "/etc/npu-agent/provisioned/trusted-key-2.pub"
            ]
        );
        // No secrets given: no secrets directory made.
        assert!(!d.path().join("etc/npu-agent/secrets").exists());
    }

    fn assert_invalid(text: &str, line: Option<usize>, needle: &str) {
        let d = tree(&[
            ("/boot/firmware/npu-agent.toml", text),
            (
                "/etc/npu-agent/agent.d/90-provisioned.toml",
                "board_id = \"old\"\n",
            ),
        ]);
        let root = SysRoot::new(d.path());
        let o = provision(&root);
        let ProvisionOutcome::Invalid {
            source,
            line: l,
            message,
        } = &o
        else {
            panic!("{text}: {o:?}")
        };
        assert_eq!(source, "/boot/firmware/npu-agent.toml");
        assert_eq!(*l, line, "{text}: {message}");
        assert!(message.contains(needle), "{text}: {message}");
        assert!(!message.contains("s3cr3t-pw"), "{message}");
        // Left in place, nothing applied.
        assert_eq!(read(&d, "/boot/firmware/npu-agent.toml").unwrap(), text);
        assert_eq!(read(&d, DROPIN).unwrap(), "board_id = \"old\"\n");
        assert!(!d.path().join("etc/npu-agent/secrets").exists());
        let f = o.finding().unwrap();
        assert_eq!(f.status, Status::Error);
        assert!(
            f.summary
                .contains("left in place and nothing from it was applied"),
            "{}",
            f.summary
        );
        assert_eq!(f.evidence[0].line, line);
    }

    #[test]
    fn broken_files_are_left_in_place_and_named_by_line() {
        // Unknown config key, same message as agent.toml.
        assert_invalid("[mqtt]\nurl = \"mqtt://b:1883\"\npasword_file = \"/x\"\n[secrets]\nmqtt_password = \"s3cr3t-pw\"\n", Some(3), "unknown key `pasword_file`");
        // Unknown key in [secrets].
        assert_invalid(
            "[mqtt]\nurl = \"mqtt://b:1883\"\n[secrets]\nmqtt_pasword = \"s3cr3t-pw\"\n",
            Some(4),
            "unknown key `mqtt_pasword`",
        );
        // TOML syntax.
        assert_invalid("board_id = \"a\"\n[mqtt\nurl = 1\n", Some(2), "");
        // Wrong type.
        assert_invalid("[report]\ninterval_s = \"often\"\n", Some(2), "");
        // A value config validation refuses.
        assert_invalid(
            "[security]\nallow_unsigned = [\"format_disk\"]\n",
            None,
            "format_disk",
        );
        // A bad broker URL.
        assert_invalid(
            "\n[mqtt]\nurl = \"http://broker\"\n",
            Some(3),
            "mqtt:// or mqtts://",
        );
        // A secret both inline and by reference.
        assert_invalid(
            "[mqtt]\npassword_file = \"/etc/pw\"\n[secrets]\nmqtt_password = \"s3cr3t-pw\"\n",
            Some(4),
            "both given",
        );
        // Content that is not what it claims.
        assert_invalid(
            "[secrets]\nmqtt_key = \"s3cr3t-pw\"\n",
            Some(2),
            "not a PEM private key",
        );
        assert_invalid(
            "[files]\nmqtt_ca = \"\"\"\nnot a cert\n\"\"\"\n",
            Some(2),
            "holds no PEM certificate",
        );
        assert_invalid(
            "[files]\ntrusted_keys = [\"nope\"]\n",
            Some(2),
            "files.trusted_keys[0]",
        );
        assert_invalid("[secrets]\nmqtt_password = \"\"\n", Some(2), "is empty");
        assert_invalid(
            "[secrets]\nmqtt_password = \"a\\nb\"\n",
            Some(2),
            "one line",
        );
    }

    #[test]
    fn a_secret_in_a_wrong_place_is_not_echoed() {
        // A password put where a number goes: toml's message would quote it.
        let text =
            "[report]\ninterval_s = \"s3cr3t-pw\"\n[secrets]\nmqtt_password = \"s3cr3t-pw\"\n";
        assert_invalid(text, Some(2), "(value hidden)");
        // An unquoted numeric password, and a private key pasted on one line.
        let text = "[secrets]\nmqtt_password = 918273645\n";
        let o = prepare("/boot/npu-agent.toml", text, "t").err().unwrap();
        assert!(!format!("{o:?}").contains("918273645"), "{o:?}");
        let pasted = "MC4CAQAwBQYDK2VwBCIEIPasted0KeyMaterialOnOneLine0000000000";
        let text = format!("[secrets]\nmqtt_key = \"{pasted}\"\n");
        let o = prepare("/boot/npu-agent.toml", &text, "t").err().unwrap();
        let shown = format!("{o:?}");
        assert!(
            !shown.contains(pasted) && !shown.contains("77, 67, 52"),
            "{shown}"
        );
        let bytes: Vec<String> = pasted.bytes().take(6).map(|b| b.to_string()).collect();
        assert!(!shown.contains(&bytes.join(", ")), "{shown}");
    }

    #[test]
    fn two_files_and_non_utf8_are_invalid() {
        let d = tree(&[
            ("/boot/firmware/npu-agent.toml", "board_id = \"a\"\n"),
            ("/boot/npu-agent.toml", "board_id = \"b\"\n"),
        ]);
        let o = provision(&SysRoot::new(d.path()));
        assert!(
            matches!(&o, ProvisionOutcome::Invalid { source, .. } if source == "/boot/firmware/npu-agent.toml and /boot/npu-agent.toml"),
            "{o:?}"
        );
        assert!(
            d.path().join("boot/npu-agent.toml").exists()
                && d.path().join("boot/firmware/npu-agent.toml").exists()
        );
        assert_eq!(
            o.finding().unwrap().evidence[0].file,
            "/boot/firmware/npu-agent.toml"
        );

        let d = tempfile::tempdir().unwrap();
        fs::create_dir_all(d.path().join("boot")).unwrap();
        fs::write(
            d.path().join("boot/npu-agent.toml"),
            b"board_id = \"a\"\n# caf\xe9\n",
        )
        .unwrap();
        let o = provision(&SysRoot::new(d.path()));
        assert!(
            matches!(&o, ProvisionOutcome::Invalid { line: Some(2), message, .. } if message.contains("UTF-8")),
            "{o:?}"
        );
    }

    #[test]
    fn comments_only_file_is_applied_as_no_settings() {
        let d = tree(&[("/boot/npu-agent.toml", "# nothing yet\n")]);
        let root = SysRoot::new(d.path());
        let o = provision(&root);
        let ProvisionOutcome::Applied { plan, .. } = &o else {
            panic!("{o:?}")
        };
        assert!(plan.keys.is_empty());
        assert!(o.describe().unwrap().contains("no settings"));
        assert_eq!(
            config::load(&root, None, &[]).unwrap().0,
            config::Config::default()
        );
    }

    #[test]
    fn inspect_writes_nothing() {
        let cert = cert_pem();
        let d = tree(&[("/boot/firmware/npu-agent.toml", &full_file(&cert))]);
        let o = inspect(&SysRoot::new(d.path()));
        let ProvisionOutcome::Pending { plan } = &o else {
            panic!("{o:?}")
        };
        assert_eq!(plan.secrets.len(), 2);
        assert!(d.path().join("boot/firmware/npu-agent.toml").exists());
        assert!(!d.path().join("etc").exists());
        assert!(print_config_note(&o)
            .starts_with("# first-boot file /boot/firmware/npu-agent.toml is valid"));
        assert_eq!(print_config_note(&ProvisionOutcome::NoFile), "");
    }

    /// Real storage that fails (ENOSPC) at operation number `fail_at`, once.
    struct FailAt {
        n: usize,
        fail_at: usize,
    }

    impl FailAt {
        fn tick(&mut self) -> io::Result<()> {
            self.n += 1;
            if self.n - 1 == self.fail_at {
                Err(io::Error::from_raw_os_error(28))
            } else {
                Ok(())
            }
        }
    }

    impl Storage for FailAt {
        fn create(
            &mut self,
            path: &Path,
            mode: u32,
        ) -> io::Result<Box<dyn crate::action::atomic::StorageFile>> {
            self.tick()?;
            RealStorage.create(path, mode)
        }
        fn rename(&mut self, from: &Path, to: &Path) -> io::Result<()> {
            self.tick()?;
            RealStorage.rename(from, to)
        }
        fn sync_dir(&mut self, dir: &Path) -> io::Result<()> {
            self.tick()?;
            RealStorage.sync_dir(dir)
        }
        fn remove_file(&mut self, path: &Path) -> io::Result<()> {
            self.tick()?;
            RealStorage.remove_file(path)
        }
    }

    fn snapshot(dir: &Path) -> Vec<(String, Vec<u8>, u32)> {
        let mut out = Vec::new();
        let mut stack = vec![dir.to_path_buf()];
        while let Some(d) = stack.pop() {
            for e in fs::read_dir(&d).unwrap() {
                let e = e.unwrap();
                let p = e.path();
                if p.is_dir() {
                    stack.push(p);
                } else {
                    let m = fs::metadata(&p).unwrap().permissions().mode() & 0o777;
                    out.push((
                        p.strip_prefix(dir).unwrap().display().to_string(),
                        fs::read(&p).unwrap(),
                        m,
                    ));
                }
            }
        }
        out.sort();
        out
    }

    #[test]
    fn a_failed_write_at_any_step_applies_nothing() {
        let cert = cert_pem();
        let boot = full_file(&cert);
        let old: &[(&str, &str)] = &[
            ("/boot/firmware/npu-agent.toml", &boot),
            ("/etc/npu-agent/agent.toml", "# packaged\n"),
            ("/etc/npu-agent/agent.d/90-provisioned.toml", "board_id = \"old\"\n[mqtt]\npassword_file = \"/etc/npu-agent/secrets/mqtt-password\"\n"),
            ("/etc/npu-agent/secrets/mqtt-password", "old-password\n"),
        ];
        let mut applied_at = None;
        for fail_at in 0..200 {
            let d = tree(old);
            let before = snapshot(d.path());
            let root = SysRoot::new(d.path());
            let mut st = FailAt { n: 0, fail_at };
            let o = provision_with(&root, &mut st, "2025-01-02T03:04:05Z");
            match &o {
                ProvisionOutcome::Failed { source, message } => {
                    assert_eq!(source, "/boot/firmware/npu-agent.toml");
                    assert!(message.contains("no space left"), "{message}");
                    assert_eq!(
                        snapshot(d.path()),
                        before,
                        "fault at op {fail_at} left a change"
                    );
                    assert_eq!(o.finding().unwrap().status, Status::Fail);
                }
                ProvisionOutcome::Applied {
                    boot_file_removed: false,
                    note,
                    ..
                } => {
                    // The fault hit the removal of the boot file: applied, and said so.
                    assert!(
                        note.as_deref().unwrap().contains("No space left"),
                        "{note:?}"
                    );
                    assert!(d.path().join("boot/firmware/npu-agent.toml").exists());
                    assert_eq!(
                        read(&d, "/etc/npu-agent/secrets/mqtt-password").unwrap(),
                        "s3cr3t-pw\n"
                    );
                    assert_eq!(o.finding().unwrap().status, Status::Warn);
                }
                ProvisionOutcome::Applied {
                    boot_file_removed: true,
                    ..
                } => {
                    // Past the last operation (or a fault in the ignored boot-dir fsync).
                    assert!(!d.path().join("boot/firmware/npu-agent.toml").exists());
                    assert!(read(&d, DROPIN).unwrap().contains("line3-cam2"));
                    if st.n <= fail_at {
                        applied_at = Some(fail_at);
                        break;
                    }
                }
                other => panic!("op {fail_at}: {other:?}"),
            }
        }
        // 6 files x (create, rename, directory fsync), the removal and its directory fsync.
        assert_eq!(applied_at, Some(20));
    }

    #[test]
    fn annotate_adds_the_finding_first_once_and_sets_health() {
        let mut r: crate::report::Report = serde_json::from_value(serde_json::json!({
            "schema": 1, "board_id": "b", "profile": "generic", "profile_reason": "", "model": "m",
            "agent_version": "0", "time": "", "boot_id": "", "uptime_s": null, "session": 0,
            "health": "ok", "metrics": {}, "reboot_required": false, "last_action": null,
            "findings": [
                {"id": "board.identity", "status": "pass", "summary": ""},
                {"id": "agent.alpha", "status": "pass", "summary": ""}
            ]
        }))
        .unwrap();
        record(&ProvisionOutcome::Invalid {
            source: "/boot/npu-agent.toml".into(),
            line: Some(3),
            message: "x".into(),
        });
        annotate(&mut r);
        annotate(&mut r);
        let ids: Vec<&str> = r.findings.iter().map(|f| f.id.as_str()).collect();
        assert_eq!(
            ids,
            vec!["agent.provisioning", "board.identity", "agent.alpha"]
        );
        assert_eq!(r.health, crate::report::Health::Warn);
        record(&ProvisionOutcome::NoFile);
        let mut r2 = r.clone();
        r2.findings.retain(|f| f.id != FINDING_ID);
        r2.health = crate::report::Health::Ok;
        annotate(&mut r2);
        assert_eq!(r2.findings.len(), 2);
        assert_eq!(r2.health, crate::report::Health::Ok);
    }
}
