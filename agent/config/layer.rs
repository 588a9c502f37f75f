//! Config layers: one file, drop-in or the environment, parsed strictly (every key optional,
//! unknown keys refused) and applied over the defaults key by key.

use super::{Config, ConfigError};
use serde::Deserialize;
use std::fmt;

/// Keys whose value is text: from the environment they take the variable's text as it is
/// (`NPU_AGENT_MQTT_TOPIC_ROOT=1883` is the topic root "1883", not a number).
pub(super) const STRING_KEYS: &[&str] = &[
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
    "log.level",
];

/// A setting given as a string or a bare number (`protocol = 5`, `NPU_AGENT_MQTT_PROTOCOL=5`).
#[derive(Debug)]
pub(crate) enum TextOrNumber {
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
    /// The setting as text (`5` for a bare 5).
    pub(crate) fn into_text(self) -> String {
        match self {
            TextOrNumber::Text(s) => s,
            TextOrNumber::Int(i) => i.to_string(),
            TextOrNumber::Float(f) => f.to_string(),
        }
    }
}

// One partial layer: every key optional, unknown keys refused.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Layer {
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
    #[serde(default)]
    log: LogLayer,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct LogLayer {
    level: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct MqttLayer {
    url: Option<String>,
    topic_root: Option<String>,
    username: Option<String>,
    password_file: Option<String>,
    ca_file: Option<String>,
    cert_file: Option<String>,
    key_file: Option<String>,
    keep_alive_s: Option<u64>,
    protocol: Option<TextOrNumber>,
    command_qos: Option<u64>,
    reconnect_max_s: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ReportLayer {
    interval_s: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct ActionsLayer {
    auto_compact: Option<bool>,
    compact_cooldown_s: Option<u64>,
    allow_reboot: Option<bool>,
    reboot_command: Option<Vec<String>>,
    reboot_timeout_s: Option<u64>,
    disabled: Option<Vec<String>>,
    rate_limit_overrides_s: Option<std::collections::BTreeMap<String, u64>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct SecurityLayer {
    trusted_keys: Option<Vec<String>>,
    allow_unsigned: Option<Vec<String>>,
    max_command_age_s: Option<u64>,
    accept_v1_signatures: Option<bool>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct HaLayer {
    enabled: Option<bool>,
    discovery_prefix: Option<String>,
}

macro_rules! apply {
    ($dst:expr, $src:expr, $($field:ident),*) => {
        $( if let Some(v) = $src.$field { $dst.$field = v; } )*
    };
}

impl Config {
    pub(super) fn apply(&mut self, l: Layer) {
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
            keep_alive_s,
            command_qos,
            reconnect_max_s
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
            disabled,
            rate_limit_overrides_s
        );
        apply!(
            self.security,
            l.security,
            trusted_keys,
            allow_unsigned,
            max_command_age_s,
            accept_v1_signatures
        );
        apply!(
            self.home_assistant,
            l.home_assistant,
            enabled,
            discovery_prefix
        );
        if let Some(level) = l.log.level {
            self.log.level = Some(level);
        }
    }
}

pub(super) fn parse_layer(source: &str, text: &str) -> Result<Layer, ConfigError> {
    toml::from_str::<Layer>(text).map_err(|e| layer_error(source, text, &e))
}

/// A TOML/serde error message with every value it quotes hidden: serde names a refused value in
/// backticks (`` integer `12345` ``) or double quotes (`string "hunter2"`), and a value may be a
/// secret typed in the wrong place. Messages about a key (unknown, missing, duplicate) keep the
/// list of valid keys, which comes from the schema, and the key's name only when it is one of
/// them or a typo of one (two edits at most): a secret pasted where a key name goes is not shown.
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
        // The tail is the schema's list of keys; anything else in it is hidden too.
        let tail = if tail.starts_with(", expected") || tail.is_empty() {
            tail.to_string()
        } else {
            String::new()
        };
        let known = tail.split('`').skip(1).step_by(2);
        if p.starts_with("missing")
            || snake_case_words(name)
            || known
                .clone()
                .any(|k| crate::sys::distance::edit_distance(k, name) <= 2)
        {
            let shown: String = name.chars().filter(|c| !c.is_control()).collect();
            return format!("{p}{shown}`{tail}");
        }
        let what = &p[..p.len() - 2];
        return format!(
            "{what} (not shown: {} characters that are no key's name; a secret?){tail}",
            name.chars().count()
        );
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

/// True for a name made of two or more lowercase words joined by `_` (`max_boards`): the shape
/// of a config key, which a password or token pasted where a key goes does not have.
fn snake_case_words(name: &str) -> bool {
    name.len() <= 64
        && name.split('_').count() >= 2
        && name
            .split('_')
            .all(|w| !w.is_empty() && w.bytes().all(|b| b.is_ascii_lowercase()))
}

/// A TOML error in `text` from `source` as a [`ConfigError`]: its line, the message with values hidden
/// and "unknown key" for serde's "unknown field".
pub(crate) fn layer_error(source: &str, text: &str, e: &toml::de::Error) -> ConfigError {
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
pub(super) fn env_layer(vars: &[(String, String)]) -> Result<Option<Layer>, ConfigError> {
    let table = env_table(vars);
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
            // Name the variable the user set: the one that fails alone.
            let bad = vars.iter().find(|v| {
                let t = env_table(std::slice::from_ref(v));
                !t.is_empty()
                    && toml::to_string(&t)
                        .map(|text| parse_layer("", &text).is_err())
                        .unwrap_or(true)
            });
            if let Some((name, _)) = bad {
                e.source = format!("environment variable {name}");
            }
            e.message = e.message.replace("unknown key", "unknown variable for key");
            e
        })
}

/// The `NPU_AGENT_*` variables among `vars` as one TOML table (sections as subtables).
fn env_table(vars: &[(String, String)]) -> toml::Table {
    const SECTIONS: &[&str] = &[
        "mqtt",
        "report",
        "actions",
        "security",
        "home_assistant",
        "log",
    ];
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
    table
}
