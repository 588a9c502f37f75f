//! The agent's configuration (README "Configuration"): `/etc/npu-agent/agent.toml`, merged with
//! `/etc/npu-agent/agent.d/*.toml` in name order, and `NPU_AGENT_*` environment variables, in
//! that order (later wins, key by key). The first-boot file on the boot partition
//! (`/boot/firmware/npu-agent.toml` or `/boot/npu-agent.toml`) is not a layer: `run` moves it
//! into `agent.d/` first ([`crate::provision`]), and a broken one is never applied, even in part.
//!
//! Parsing is strict: an unknown key is an error naming the file, line and key. Secrets are file
//! references (`password_file`, `key_file`); [`Config::redacted`] prints the effective
//! configuration without them.

use crate::root::SysRoot;
use serde::{Deserialize, Serialize};
use std::fmt;

/// Main config file (under the root).
pub const CONFIG_FILE: &str = "/etc/npu-agent/agent.toml";
/// Drop-in directory merged after it, in name order.
pub const CONFIG_DIR: &str = "/etc/npu-agent/agent.d";
/// First-boot provisioning files on the boot partition, Pi OS then Armbian.
pub const FIRST_BOOT_FILES: &[&str] = &["/boot/firmware/npu-agent.toml", "/boot/npu-agent.toml"];

/// Largest config or profile file read from a host path (`--config`, `--profile FILE`): 1 MiB.
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// Reads a text file given on the command line, refusing more than `max_bytes` (a FIFO or
/// `/dev/zero` must not exhaust memory) and invalid UTF-8.
pub fn read_host_text(path: &std::path::Path, max_bytes: u64) -> std::io::Result<String> {
    use std::io::Read;
    let mut buf = Vec::new();
    std::fs::File::open(path)?
        .take(max_bytes + 1)
        .read_to_end(&mut buf)?;
    if buf.len() as u64 > max_bytes {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("larger than {max_bytes} bytes"),
        ));
    }
    String::from_utf8(buf)
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidData, "not UTF-8 text"))
}

/// Longest `mqtt.topic_root`, `board_id` and `home_assistant.discovery_prefix` (bytes): every
/// topic is built from them, and the broker limits a topic to 64 KiB.
pub const MAX_NAME_BYTES: usize = 128;

/// Keys whose value is text: from the environment they take the variable's text as it is
/// (`NPU_AGENT_MQTT_TOPIC_ROOT=1883` is the topic root "1883", not a number).
const STRING_KEYS: &[&str] = &[
    "board_id",
    "profile",
    "root",
    "state_dir",
    "mqtt.url",
    "mqtt.topic_root",
    "mqtt.username",
    "mqtt.password_file",
    "mqtt.ca_file",
    "mqtt.cert_file",
    "mqtt.key_file",
    "home_assistant.discovery_prefix",
];

/// A configuration error: which file (or variable), which line, what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// File path or `NPU_AGENT_…` variable.
    pub source: String,
    /// 1-based line, when known.
    pub line: Option<usize>,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(l) => write!(f, "config {}: line {}: {}", self.source, l, self.message),
            None => write!(f, "config {}: {}", self.source, self.message),
        }
    }
}

impl std::error::Error for ConfigError {}

/// `[mqtt]`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MqttConfig {
    /// `mqtt://host[:port]` or `mqtts://host[:port]`.
    pub url: String,
    /// Topic root (default `npu-fleet`).
    pub topic_root: String,
    /// Broker user name (empty = none).
    pub username: String,
    /// File holding the password (a secret by reference).
    pub password_file: String,
    /// Server CA (PEM); empty = system roots.
    pub ca_file: String,
    /// Client certificate for mTLS (PEM).
    pub cert_file: String,
    /// Client key for mTLS (PEM); a secret by reference.
    pub key_file: String,
    /// MQTT keep-alive, seconds.
    pub keep_alive_s: u64,
    /// Protocol version: `auto` (MQTT 5, falling back to 3.1.1 when the broker refuses 5),
    /// `5` or `3.1.1`.
    pub protocol: String,
}

/// The values `[mqtt] protocol` accepts.
pub const MQTT_PROTOCOLS: &[&str] = &["auto", "5", "3.1.1"];

/// A setting given as a string or a bare number (`protocol = 5`, `NPU_AGENT_MQTT_PROTOCOL=5`).
#[derive(Debug)]
enum TextOrNumber {
    Text(String),
    Int(i64),
    Float(f64),
}

/// What `#[serde(untagged)]` accepted, and its error for anything else, read directly: the
/// derive buffered the value in serde's `Content` type first, a deserializer copy of its own.
impl<'de> Deserialize<'de> for TextOrNumber {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        const NO_MATCH: &str = "data did not match any variant of untagged enum TextOrNumber";
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = TextOrNumber;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a string or a number")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<TextOrNumber, E> {
                Ok(TextOrNumber::Text(v.to_string()))
            }
            fn visit_string<E: serde::de::Error>(self, v: String) -> Result<TextOrNumber, E> {
                Ok(TextOrNumber::Text(v))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<TextOrNumber, E> {
                Ok(TextOrNumber::Int(v))
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<TextOrNumber, E> {
                // Above i64::MAX the untagged enum fell through to its f64 variant.
                Ok(i64::try_from(v).map_or(TextOrNumber::Float(v as f64), TextOrNumber::Int))
            }
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<TextOrNumber, E> {
                Ok(TextOrNumber::Float(v))
            }
            fn visit_bool<E: serde::de::Error>(self, _: bool) -> Result<TextOrNumber, E> {
                Err(E::custom(NO_MATCH))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                _: A,
            ) -> Result<TextOrNumber, A::Error> {
                Err(serde::de::Error::custom(NO_MATCH))
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                _: A,
            ) -> Result<TextOrNumber, A::Error> {
                Err(serde::de::Error::custom(NO_MATCH))
            }
        }
        d.deserialize_any(Visitor)
    }
}

impl TextOrNumber {
    fn into_text(self) -> String {
        match self {
            TextOrNumber::Text(s) => s,
            TextOrNumber::Int(i) => i.to_string(),
            TextOrNumber::Float(f) => f.to_string(),
        }
    }
}

/// `[report]`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReportConfig {
    /// Seconds between periodic status publishes (and check cycles).
    pub interval_s: u64,
}

/// `[actions]`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ActionsConfig {
    /// Compact automatically when the planner says it helps.
    pub auto_compact: bool,
    /// Seconds between two compactions.
    pub compact_cooldown_s: u64,
    /// Allow the `reboot` command at all.
    pub allow_reboot: bool,
    /// argv of the reboot command.
    pub reboot_command: Vec<String>,
    /// Seconds to wait for the reboot to take the agent down.
    pub reboot_timeout_s: u64,
    /// Actions this board refuses whatever asks (an MQTT command, signed or not, a Home
    /// Assistant button, the planner, or `npu-agent compact` / `cma set` run by an admin), e.g.
    /// `["set_cma"]` on a board whose boot files another tool owns. Each one of
    /// [`crate::mqtt::command::ACTIONS`].
    pub disabled: Vec<String>,
}

/// `[security]`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SecurityConfig {
    /// Paths to Ed25519 public keys (the format `keygen` writes).
    pub trusted_keys: Vec<String>,
    /// Actions accepted without a signature.
    pub allow_unsigned: Vec<String>,
    /// Oldest accepted command (seconds between its `issued_at` and now), and the longest
    /// accepted `expires_at` ahead.
    pub max_command_age_s: u64,
}

/// `[home_assistant]`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HomeAssistantConfig {
    /// Publish Home Assistant MQTT discovery.
    pub enabled: bool,
    /// Discovery prefix (default `homeassistant`).
    pub discovery_prefix: String,
}

/// The effective configuration.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Config {
    /// `auto` (device-tree serial, else machine-id) or an id.
    pub board_id: String,
    /// `auto`, a profile id, or a profile file path.
    pub profile: String,
    /// Root every board file resolves under.
    pub root: String,
    /// State directory (under the root).
    pub state_dir: String,
    /// `[mqtt]`.
    pub mqtt: MqttConfig,
    /// `[report]`.
    pub report: ReportConfig,
    /// `[actions]`.
    pub actions: ActionsConfig,
    /// `[security]`.
    pub security: SecurityConfig,
    /// `[home_assistant]`.
    pub home_assistant: HomeAssistantConfig,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            board_id: "auto".into(),
            profile: "auto".into(),
            root: "/".into(),
            state_dir: "/var/lib/npu-agent".into(),
            mqtt: MqttConfig {
                url: String::new(),
                topic_root: "npu-fleet".into(),
                username: String::new(),
                password_file: String::new(),
                ca_file: String::new(),
                cert_file: String::new(),
                key_file: String::new(),
                keep_alive_s: 30,
                protocol: "auto".into(),
            },
            report: ReportConfig { interval_s: 60 },
            actions: ActionsConfig {
                auto_compact: true,
                compact_cooldown_s: 600,
                allow_reboot: false,
                reboot_command: vec!["systemctl".into(), "reboot".into()],
                reboot_timeout_s: 120,
                disabled: Vec::new(),
            },
            security: SecurityConfig {
                trusted_keys: Vec::new(),
                allow_unsigned: vec!["compact".into(), "rescan".into()],
                max_command_age_s: 300,
            },
            home_assistant: HomeAssistantConfig {
                enabled: false,
                discovery_prefix: "homeassistant".into(),
            },
        }
    }
}

// One partial layer: every key optional, unknown keys refused.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Layer {
    board_id: Option<String>,
    profile: Option<String>,
    root: Option<String>,
    state_dir: Option<String>,
    // Tables as plain structs with `default` (an absent table is one with no keys), not
    // `Option`s: each `Option<struct>` made toml build another deserializer copy.
    #[serde(default)]
    mqtt: MqttLayer,
    #[serde(default)]
    report: ReportLayer,
    #[serde(default)]
    actions: ActionsLayer,
    #[serde(default)]
    security: SecurityLayer,
    #[serde(default)]
    home_assistant: HaLayer,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct MqttLayer {
    url: Option<String>,
    topic_root: Option<String>,
    username: Option<String>,
    password_file: Option<String>,
    ca_file: Option<String>,
    cert_file: Option<String>,
    key_file: Option<String>,
    keep_alive_s: Option<u64>,
    protocol: Option<TextOrNumber>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ReportLayer {
    interval_s: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ActionsLayer {
    auto_compact: Option<bool>,
    compact_cooldown_s: Option<u64>,
    allow_reboot: Option<bool>,
    reboot_command: Option<Vec<String>>,
    reboot_timeout_s: Option<u64>,
    disabled: Option<Vec<String>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct SecurityLayer {
    trusted_keys: Option<Vec<String>>,
    allow_unsigned: Option<Vec<String>>,
    max_command_age_s: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct HaLayer {
    enabled: Option<bool>,
    discovery_prefix: Option<String>,
}

macro_rules! apply {
    ($dst:expr, $src:expr, $($field:ident),*) => {
        $( if let Some(v) = $src.$field { $dst.$field = v; } )*
    };
}

impl Config {
    fn apply(&mut self, l: Layer) {
        apply!(self, l, board_id, profile, root, state_dir);
        let m = l.mqtt;
        apply!(
            self.mqtt,
            m,
            url,
            topic_root,
            username,
            password_file,
            ca_file,
            cert_file,
            key_file,
            keep_alive_s
        );
        if let Some(p) = m.protocol {
            self.mqtt.protocol = p.into_text();
        }
        apply!(self.report, l.report, interval_s);
        apply!(
            self.actions,
            l.actions,
            auto_compact,
            compact_cooldown_s,
            allow_reboot,
            reboot_command,
            reboot_timeout_s,
            disabled
        );
        apply!(
            self.security,
            l.security,
            trusted_keys,
            allow_unsigned,
            max_command_age_s
        );
        apply!(
            self.home_assistant,
            l.home_assistant,
            enabled,
            discovery_prefix
        );
    }

    /// The configuration without secrets' contents (paths to secret files are shown; there are
    /// no inline secrets; user info in the broker URL is replaced by `<redacted>`), as TOML.
    pub fn redacted(&self) -> String {
        let mut c = self.clone();
        c.mqtt.url = crate::mqtt::redact_url(&c.mqtt.url);
        toml::to_string(&c).unwrap_or_else(|_| "# cannot render the configuration\n".into())
    }

    /// Checks values that parse but make no sense.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let err = |m: String| {
            Err(ConfigError {
                source: "effective config".into(),
                line: None,
                message: m,
            })
        };
        if self.mqtt.keep_alive_s != 0 && self.mqtt.keep_alive_s < 5 {
            return err(format!(
                "mqtt.keep_alive_s = {} is below 5 s",
                self.mqtt.keep_alive_s
            ));
        }
        if !MQTT_PROTOCOLS.contains(&self.mqtt.protocol.as_str()) {
            return err(format!(
                "mqtt.protocol = {:?}: expected one of {}",
                self.mqtt.protocol,
                MQTT_PROTOCOLS.join(", ")
            ));
        }
        if self.mqtt.keep_alive_s > u64::from(u16::MAX) {
            return err(format!(
                "mqtt.keep_alive_s = {} is above {} s (the MQTT maximum)",
                self.mqtt.keep_alive_s,
                u16::MAX
            ));
        }
        if !self.mqtt.url.is_empty() {
            // The value is not quoted (it could be anything typed in the wrong key), except a
            // URL with user info, shown with it redacted.
            if let Err(e) = crate::mqtt::parse_url_quiet(&self.mqtt.url) {
                let shown = crate::mqtt::redact_url(&self.mqtt.url);
                return err(if shown != self.mqtt.url {
                    format!("mqtt.url {shown:?}: {e}")
                } else {
                    format!("mqtt.url: {e}")
                });
            }
        }
        let max_age = crate::mqtt::command::MAX_COMMAND_AGE_LIMIT_S;
        if !(1..=max_age).contains(&self.security.max_command_age_s) {
            return err(format!(
                "security.max_command_age_s = {} is outside 1..={max_age} s",
                self.security.max_command_age_s
            ));
        }
        for (key, value) in [
            ("mqtt.topic_root", &self.mqtt.topic_root),
            ("board_id", &self.board_id),
            (
                "home_assistant.discovery_prefix",
                &self.home_assistant.discovery_prefix,
            ),
        ] {
            if value.len() > MAX_NAME_BYTES {
                return err(format!(
                    "{key} is {} bytes long; at most {MAX_NAME_BYTES}",
                    value.len()
                ));
            }
        }
        if self.report.interval_s == 0 {
            return err("report.interval_s must be at least 1".into());
        }
        if self.actions.reboot_command.is_empty() {
            return err("actions.reboot_command must name a program".into());
        }
        for (key, a) in self
            .security
            .allow_unsigned
            .iter()
            .map(|a| ("security.allow_unsigned", a))
            .chain(
                self.actions
                    .disabled
                    .iter()
                    .map(|a| ("actions.disabled", a)),
            )
        {
            if !crate::mqtt::command::ACTIONS.contains(&a.as_str()) {
                // Named only when it looks like a mistyped action (a value is never echoed
                // whole: it could be anything pasted there).
                let shown =
                    if a.len() <= 20 && a.bytes().all(|b| b.is_ascii_lowercase() || b == b'_') {
                        format!("{a:?}")
                    } else {
                        "a value".to_string()
                    };
                return err(format!(
                    "{key}: {shown} is not an action ({})",
                    crate::mqtt::command::ACTIONS.join(", ")
                ));
            }
        }
        if !self.mqtt.topic_root.is_empty()
            && (self.mqtt.topic_root.contains(['+', '#'])
                || self.mqtt.topic_root.starts_with('/')
                || self.mqtt.topic_root.ends_with('/'))
        {
            return err(format!(
                "mqtt.topic_root {:?} must not contain wildcards or leading/trailing '/'",
                self.mqtt.topic_root
            ));
        }
        Ok(())
    }
}

fn parse_layer(source: &str, text: &str) -> Result<Layer, ConfigError> {
    toml::from_str::<Layer>(text).map_err(|e| layer_error(source, text, &e))
}

/// A TOML/serde error message with every value it quotes hidden: serde names a refused value in
/// backticks (`` integer `12345` ``) or double quotes (`string "hunter2"`), and a value may be a
/// secret typed in the wrong place. Messages about a key (unknown, missing, duplicate) keep the
/// key's name (cut at 40 characters: a pasted key can land where a key name goes) and the list of
/// valid keys, which comes from the schema.
pub fn redact_values(message: &str) -> String {
    const KEY_MESSAGES: &[&str] = &[
        "unknown field `",
        "unknown key `",
        "missing field `",
        "duplicate key `",
        "duplicate field `",
    ];
    if let Some(p) = KEY_MESSAGES.iter().find(|p| message.starts_with(**p)) {
        let rest = &message[p.len()..];
        let (name, tail) = rest.split_once('`').unwrap_or((rest, ""));
        let shown: String = name.chars().filter(|c| !c.is_control()).take(40).collect();
        let cut = if name.chars().count() > 40 { "…" } else { "" };
        // The tail is the schema's list of keys; anything else in it is hidden too.
        let tail = if tail.starts_with(", expected") || tail.is_empty() {
            tail.to_string()
        } else {
            String::new()
        };
        return format!("{p}{shown}{cut}`{tail}");
    }
    let mut out = String::with_capacity(message.len());
    let mut chars = message.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '`' || c == '"' {
            // Skip to the matching close (a quoted string may escape its quote).
            let mut escaped = false;
            for d in chars.by_ref() {
                if escaped {
                    escaped = false;
                } else if d == '\\' && c == '"' {
                    escaped = true;
                } else if d == c {
                    break;
                }
            }
            out.push_str("(value hidden)");
        } else {
            out.push(c);
        }
    }
    out
}

fn layer_error(source: &str, text: &str, e: &toml::de::Error) -> ConfigError {
    ConfigError {
        source: source.to_string(),
        line: e.span().map(|s| {
            text.as_bytes()[..s.start.min(text.len())]
                .iter()
                .filter(|&&b| b == b'\n')
                .count()
                + 1
        }),
        message: redact_values(e.message().trim()).replace("unknown field", "unknown key"),
    }
}

/// Checks `text` as one strict layer with the top-level tables named in `consumed` left out (the
/// first-boot file's `[secrets]` and `[files]`, which [`crate::provision`] takes), and returns
/// the defaults with it applied and validated. Errors name `source` and the line in `text`.
pub fn check_layer(source: &str, text: &str, consumed: &[&str]) -> Result<Config, ConfigError> {
    let mut doc = toml::de::DeTable::parse(text).map_err(|e| layer_error(source, text, &e))?;
    for name in consumed {
        doc.get_mut().remove(*name);
    }
    let layer = Layer::deserialize(toml::de::Deserializer::from(doc))
        .map_err(|e| layer_error(source, text, &e))?;
    let mut cfg = Config::default();
    cfg.apply(layer);
    cfg.validate().map_err(|e| ConfigError {
        source: source.to_string(),
        ..e
    })?;
    Ok(cfg)
}

/// Turns `NPU_AGENT_<SECTION>_<KEY>` / `NPU_AGENT_<KEY>` variables into one TOML layer. A value
/// that parses as a TOML value (`30`, `true`, `["a","b"]`) is taken as such, else as a string.
fn env_layer(vars: &[(String, String)]) -> Result<Option<Layer>, ConfigError> {
    const SECTIONS: &[&str] = &["mqtt", "report", "actions", "security", "home_assistant"];
    let mut table = toml::Table::new();
    for (name, value) in vars {
        let Some(rest) = name.strip_prefix("NPU_AGENT_") else {
            continue;
        };
        let lower = rest.to_ascii_lowercase();
        let (section, key) = match SECTIONS
            .iter()
            .find(|s| lower.starts_with(&format!("{s}_")))
        {
            Some(s) => (Some(*s), lower[s.len() + 1..].to_string()),
            None => (None, lower),
        };
        let dotted = match section {
            Some(s) => format!("{s}.{key}"),
            None => key.clone(),
        };
        let parsed: toml::Value = if STRING_KEYS.contains(&dotted.as_str()) {
            toml::Value::String(value.clone())
        } else {
            toml::from_str::<toml::Table>(&format!("v = {value}"))
                .ok()
                .and_then(|mut t| t.remove("v"))
                .unwrap_or_else(|| toml::Value::String(value.clone()))
        };
        match section {
            Some(s) => {
                let entry = table
                    .entry(s.to_string())
                    .or_insert_with(|| toml::Value::Table(toml::Table::new()));
                if let toml::Value::Table(t) = entry {
                    t.insert(key, parsed);
                }
            }
            None => {
                table.insert(key, parsed);
            }
        }
    }
    if table.is_empty() {
        return Ok(None);
    }
    let text = toml::to_string(&table).map_err(|e| ConfigError {
        source: "NPU_AGENT_* environment".into(),
        line: None,
        message: e.to_string(),
    })?;
    parse_layer("NPU_AGENT_* environment", &text)
        .map(Some)
        .map_err(|mut e| {
            e.line = None;
            // Name the variable the user set: NPU_AGENT_<SECTION>_<KEY> for the unknown key.
            let names: Vec<&str> = vars
                .iter()
                .map(|(n, _)| n.as_str())
                .filter(|n| n.starts_with("NPU_AGENT_"))
                .collect();
            if let Some(bad) = names.iter().find(|n| {
                let k = n.to_ascii_lowercase();
                e.message
                    .split('`')
                    .nth(1)
                    .is_some_and(|key| k.ends_with(&format!("_{key}")))
            }) {
                e.source = format!("environment variable {bad}");
            }
            e.message = e.message.replace("unknown key", "unknown variable for key");
            e
        })
}

/// Where each layer came from (for `--print-config`).
#[derive(Debug, Clone, Default)]
pub struct Sources {
    /// Files and the environment, in the order applied.
    pub applied: Vec<String>,
}

/// Loads the configuration. `explicit` is `--config FILE` (a host path; it replaces
/// `/etc/npu-agent/agent.toml` and must exist); the drop-ins and environment are read under
/// `root` as usual. The first-boot file is not read here (see [`crate::provision`]).
pub fn load(
    root: &SysRoot,
    explicit: Option<&std::path::Path>,
    env: &[(String, String)],
) -> Result<(Config, Sources), ConfigError> {
    let mut cfg = Config::default();
    let mut sources = Sources::default();
    match explicit {
        Some(path) => {
            let text = read_host_text(path, MAX_CONFIG_BYTES).map_err(|e| ConfigError {
                source: path.display().to_string(),
                line: None,
                message: e.to_string(),
            })?;
            cfg.apply(parse_layer(&path.display().to_string(), &text)?);
            sources.applied.push(path.display().to_string());
        }
        None => match root.read_string(CONFIG_FILE) {
            Ok(text) => {
                cfg.apply(parse_layer(CONFIG_FILE, &text)?);
                sources.applied.push(CONFIG_FILE.into());
            }
            Err(e) if e.is_not_found() => {}
            Err(e) => {
                return Err(ConfigError {
                    source: CONFIG_FILE.into(),
                    line: None,
                    message: e.to_string(),
                })
            }
        },
    }
    let mut dropins: Vec<String> = root
        .list_dir(CONFIG_DIR)
        .unwrap_or_default()
        .into_iter()
        .filter(|n| n.ends_with(".toml"))
        .map(|n| format!("{CONFIG_DIR}/{n}"))
        .collect();
    dropins.sort();
    for path in dropins {
        let text = root.read_string(&path).map_err(|e| ConfigError {
            source: path.clone(),
            line: None,
            message: e.to_string(),
        })?;
        cfg.apply(parse_layer(&path, &text)?);
        sources.applied.push(path);
    }
    if let Some(layer) = env_layer(env)? {
        cfg.apply(layer);
        sources.applied.push("NPU_AGENT_* environment".into());
    }
    cfg.validate()?;
    Ok((cfg, sources))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(files: &[(&str, &str)]) -> tempfile::TempDir {
        let d = tempfile::tempdir().unwrap();
        for (p, t) in files {
            let path = d.path().join(p.trim_start_matches('/'));
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, t).unwrap();
        }
        d
    }

    #[test]
    fn layers_merge_in_order() {
        let d = tree(&[
            (
                "/etc/npu-agent/agent.toml",
                "board_id = \"b1\"\n[mqtt]\nurl = \"mqtt://broker:1883\"\nkeep_alive_s = 20\n",
            ),
            (
                "/etc/npu-agent/agent.d/10-a.toml",
                "[mqtt]\nkeep_alive_s = 15\n",
            ),
            (
                "/etc/npu-agent/agent.d/20-b.toml",
                "[report]\ninterval_s = 5\n",
            ),
            (
                "/etc/npu-agent/agent.d/90-provisioned.toml",
                "board_id = \"from-boot\"\n",
            ),
            // Not a layer: provisioning moves it into agent.d/ before the config is loaded.
            (
                "/boot/firmware/npu-agent.toml",
                "board_id = \"unapplied\"\n",
            ),
        ]);
        let env = vec![
            ("NPU_AGENT_MQTT_TOPIC_ROOT".to_string(), "lab".to_string()),
            ("NPU_AGENT_ACTIONS_ALLOW_REBOOT".into(), "true".into()),
        ];
        let (c, s) = load(&SysRoot::new(d.path()), None, &env).unwrap();
        assert_eq!(c.board_id, "from-boot");
        assert_eq!(c.mqtt.url, "mqtt://broker:1883");
        assert_eq!(c.mqtt.keep_alive_s, 15);
        assert_eq!(c.report.interval_s, 5);
        assert_eq!(c.mqtt.topic_root, "lab");
        assert!(c.actions.allow_reboot);
        assert_eq!(s.applied.len(), 5);
    }

    #[test]
    fn mqtt_protocol_from_file_and_environment() {
        let d = tempfile::tempdir().unwrap();
        let (c, _) = load(&SysRoot::new(d.path()), None, &[]).unwrap();
        assert_eq!(c.mqtt.protocol, "auto");
        for (value, want) in [("3.1.1", "3.1.1"), ("5", "5"), ("auto", "auto")] {
            let env = vec![("NPU_AGENT_MQTT_PROTOCOL".to_string(), value.to_string())];
            let (c, _) = load(&SysRoot::new(d.path()), None, &env).unwrap();
            assert_eq!(c.mqtt.protocol, want);
        }
        let env = vec![("NPU_AGENT_MQTT_PROTOCOL".to_string(), "4".to_string())];
        let e = load(&SysRoot::new(d.path()), None, &env).unwrap_err();
        assert!(e.message.contains("mqtt.protocol"), "{e:?}");
    }

    #[test]
    fn mqtt_protocol_of_other_types_reads_as_before() {
        // What the former `#[serde(untagged)]` derive gave, message and line included.
        let cases = [
            (
                "protocol = true",
                Err("data did not match any variant of untagged enum TextOrNumber"),
            ),
            (
                "protocol = [5]",
                Err("data did not match any variant of untagged enum TextOrNumber"),
            ),
            (
                "protocol = { v = 5 }",
                Err("data did not match any variant of untagged enum TextOrNumber"),
            ),
            (
                "protocol = 1979-05-27",
                Err("data did not match any variant of untagged enum TextOrNumber"),
            ),
            ("protocol = 5.0", Ok("5")),
            ("protocol = \"5\"", Ok("5")),
            ("protocol = 5", Ok("5")),
            ("protocol = 3.5", Err("mqtt.protocol = \"3.5\"")),
            (
                "protocol = 18446744073709551615",
                Err("mqtt.protocol = \"18446744073709552000\""),
            ),
        ];
        for (line, want) in cases {
            let d = tree(&[("/etc/npu-agent/agent.toml", &format!("[mqtt]\n{line}\n"))]);
            let got = load(&SysRoot::new(d.path()), None, &[]);
            match (want, got) {
                (Ok(p), Ok((c, _))) => assert_eq!(c.mqtt.protocol, p, "{line}"),
                (Err(m), Err(e)) => {
                    eprintln!("{line}: {e}");
                    assert!(e.message.contains(m), "{line}: {e}");
                    if !m.starts_with("mqtt.protocol") {
                        assert_eq!(e.line, Some(2), "{line}: {e}");
                    }
                }
                (w, g) => panic!("{line}: want {w:?}, got {g:?}"),
            }
        }
    }

    #[test]
    fn unknown_key_names_file_and_line() {
        let d = tree(&[(
            "/etc/npu-agent/agent.toml",
            "[mqtt]\nurl = \"mqtt://x\"\npasword_file = \"/x\"\n",
        )]);
        let e = load(&SysRoot::new(d.path()), None, &[]).unwrap_err();
        assert_eq!(e.source, "/etc/npu-agent/agent.toml");
        assert_eq!(e.line, Some(3));
        assert!(e.message.contains("unknown key `pasword_file`"), "{e}");
    }

    #[test]
    fn unknown_env_variable_is_an_error() {
        let d = tree(&[]);
        let e = load(
            &SysRoot::new(d.path()),
            None,
            &[("NPU_AGENT_MQTT_URLL".into(), "x".into())],
        )
        .unwrap_err();
        assert!(e.to_string().contains("urll"), "{e}");
        assert_eq!(e.source, "environment variable NPU_AGENT_MQTT_URLL");
    }

    #[test]
    fn bad_values_are_refused() {
        let d = tree(&[(
            "/etc/npu-agent/agent.toml",
            "[security]\nallow_unsigned = [\"format_disk\"]\n",
        )]);
        assert!(load(&SysRoot::new(d.path()), None, &[])
            .unwrap_err()
            .message
            .contains("format_disk"));
        let d = tree(&[(
            "/etc/npu-agent/agent.toml",
            "[mqtt]\nkeep_alive_s = \"soon\"\n",
        )]);
        assert_eq!(
            load(&SysRoot::new(d.path()), None, &[]).unwrap_err().line,
            Some(2)
        );
    }

    /// Item 10: environment values take the key's type; long names and extreme ages are bounded.
    #[test]
    fn config_edges_are_bounded() {
        let d = tree(&[]);
        let root = SysRoot::new(d.path());
        let (c, _) = load(
            &root,
            None,
            &[("NPU_AGENT_MQTT_TOPIC_ROOT".into(), "1883".into())],
        )
        .unwrap();
        assert_eq!(c.mqtt.topic_root, "1883");
        let (c, _) = load(&root, None, &[("NPU_AGENT_BOARD_ID".into(), "true".into())]).unwrap();
        assert_eq!(c.board_id, "true");
        let long = "a".repeat(64 * 1024 + 1);
        let e = load(&root, None, &[("NPU_AGENT_MQTT_TOPIC_ROOT".into(), long)]).unwrap_err();
        assert!(e.message.contains("at most 128"), "{e}");
        for bad in ["0", "18446744073709551615", "604801"] {
            let d = tree(&[(
                "/etc/npu-agent/agent.toml",
                &format!("[security]\nmax_command_age_s = {bad}\n"),
            )]);
            let e = load(&SysRoot::new(d.path()), None, &[]).unwrap_err();
            assert!(e.message.contains("max_command_age_s"), "{bad}: {e}");
        }
        let d = tree(&[(
            "/etc/npu-agent/agent.toml",
            "[security]\nmax_command_age_s = 604800\n",
        )]);
        assert!(load(&SysRoot::new(d.path()), None, &[]).is_ok());
    }

    /// Item 4: a secret typed where a value of another type goes is not echoed.
    #[test]
    fn type_errors_do_not_echo_values() {
        for text in [
            "[mqtt]\nkeep_alive_s = \"hunter2-pw\"\n",
            "[mqtt]\nusername = 918273645\n",
            "board_id = [77, 67, 52, 67]\n",
            "[mqtt]\npassword_file = 3.14159\n",
        ] {
            let d = tree(&[("/etc/npu-agent/agent.toml", text)]);
            let e = load(&SysRoot::new(d.path()), None, &[])
                .unwrap_err()
                .to_string();
            for v in ["hunter2", "918273645", "77, 67", "3.14159"] {
                assert!(!e.contains(v), "{text}: {e}");
            }
        }
        assert_eq!(
            redact_values("unknown field `pasword_file`, expected one of `url`, `username`"),
            "unknown field `pasword_file`, expected one of `url`, `username`"
        );
    }

    #[test]
    fn broker_user_info_is_never_printed() {
        let mut c = Config::default();
        c.mqtt.url = "mqtt://user:pw-s3cret@broker:1883".into();
        let text = c.redacted();
        assert!(
            !text.contains("pw-s3cret") && !text.contains("user:"),
            "{text}"
        );
        assert!(text.contains("mqtt://<redacted>@broker:1883"), "{text}");
        let e = crate::mqtt::parse_url(&c.mqtt.url).unwrap_err();
        assert!(!e.contains("pw-s3cret"), "{e}");
    }

    #[test]
    fn redacted_has_no_secret_values() {
        let mut c = Config::default();
        c.mqtt.password_file = "/etc/npu-agent/secret".into();
        let text = c.redacted();
        assert!(text.contains("password_file = \"/etc/npu-agent/secret\""));
        assert!(toml::from_str::<toml::Table>(&text).is_ok());
    }
}
