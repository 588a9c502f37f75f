//! The operator's settings for the fleet tools (`fleet watch`, `fleet send`, `fleet capture`,
//! `fleet serve`): the broker list, topic root, signing key, TLS files, credentials, MQTT
//! protocol and the `known_boards` file, resolved once per run.
//!
//! Each setting comes from, first to last: the command line (`--broker`, `--topic-root`,
//! `--key`), the `NPU_AGENT_MQTT_*` variables (the same names as the agent's), the operator
//! config file `fleet.toml`, then the default. The file is `NPU_AGENT_FLEET_CONFIG`, else
//! `$XDG_CONFIG_HOME/npu-agent/fleet.toml`, else `~/.config/npu-agent/fleet.toml`; a missing
//! file sets nothing. It is read as the agent's config is: strict UTF-8, unknown keys refused
//! with their line, secrets only by file (`password_file`). Paths in it are relative to its
//! directory. `known_boards` lives beside it unless the file or `NPU_AGENT_KNOWN_BOARDS` says
//! otherwise.

use crate::config::{ConfigError, MAX_CONFIG_BYTES};
use serde::Deserialize;
use std::path::{Path, PathBuf};

/// The topic root when nothing sets one (the agent's default `mqtt.topic_root`).
pub const DEFAULT_TOPIC_ROOT: &str = "npu-fleet";

/// `fleet.toml`, as written. Every key is optional.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FleetToml {
    /// One URL, a comma list, or an array of URLs (the first is tried first).
    broker: Option<Brokers>,
    topic_root: Option<String>,
    /// Ed25519 private key (from `npu-agent keygen`) that `fleet send` and `fleet capture`
    /// sign with.
    signing_key: Option<PathBuf>,
    /// `auto`, `5` or `3.1.1` (a bare 5 too, as in the agent's config).
    protocol: Option<crate::config::TextOrNumber>,
    known_boards: Option<PathBuf>,
    #[serde(default)]
    tls: TlsToml,
    #[serde(default)]
    auth: AuthToml,
    #[serde(default)]
    serve: ServeDefaults,
}

/// `[serve]`: the defaults of `fleet serve` (its flags win).
#[derive(Debug, Default, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServeDefaults {
    /// `--listen` (`ADDR:PORT`).
    pub listen: Option<std::net::SocketAddr>,
    /// `--state-dir` (relative to the file's directory when not absolute).
    pub state_dir: Option<PathBuf>,
    /// `--retention-days`.
    pub retention_days: Option<u64>,
    /// `--max-unsealed-boards`.
    pub max_unsealed_boards: Option<usize>,
    /// `--history-rows-per-board`.
    pub history_rows_per_board: Option<usize>,
    /// `--accept-new-boards`: new board keys recorded in known_boards per run.
    pub accept_new_boards: Option<usize>,
    /// `--max-boards`.
    pub max_boards: Option<usize>,
    /// `--metrics-boards`.
    pub metrics_boards: Option<MetricsBoards>,
    /// `--stale-after`, seconds.
    pub stale_after: Option<u64>,
}

/// `metrics_boards` under `[serve]`: which boards get per-board series in `/metrics`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MetricsBoards {
    /// Every board.
    All,
    /// Only boards that fail, warn or are not online.
    Failing,
}

/// `broker = "mqtts://a:8883"` or `broker = ["mqtts://a:8883", "mqtts://b:8883"]`.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Brokers {
    One(String),
    Many(Vec<String>),
}

/// `[tls]`: PEM files.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct TlsToml {
    ca_file: Option<PathBuf>,
    cert_file: Option<PathBuf>,
    key_file: Option<PathBuf>,
}

/// `[auth]`: the broker's user name and the file holding its password.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct AuthToml {
    username: Option<String>,
    password_file: Option<PathBuf>,
}

/// What the command line gave (each `None` when not given).
#[derive(Debug, Default, Clone)]
pub struct OperatorFlags {
    /// `--broker`.
    pub broker: Option<String>,
    /// `--topic-root`.
    pub topic_root: Option<String>,
    /// `--key`.
    pub key: Option<PathBuf>,
}

/// The resolved settings of one run of a fleet tool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Operator {
    /// Broker URLs, comma-separated (mqtt://host[:port] or mqtts://host[:port]).
    pub broker: String,
    /// Topic root.
    pub topic_root: String,
    /// Ed25519 private key to sign commands with.
    pub signing_key: Option<PathBuf>,
    /// CA bundle (PEM) for mqtts; `None`: the system's roots.
    pub ca_file: Option<PathBuf>,
    /// Client certificate (PEM) for mutual TLS.
    pub cert_file: Option<PathBuf>,
    /// Its private key (PEM).
    pub key_file: Option<PathBuf>,
    /// Broker user name.
    pub username: Option<String>,
    /// The file holding the broker password.
    pub password_file: Option<PathBuf>,
    /// `auto`, `5` or `3.1.1`, parsed.
    pub protocol: crate::mqtt::link::ProtocolSetting,
    /// Where the known board keys are read and recorded (`None`: no home directory).
    pub known_boards: Option<PathBuf>,
    /// The operator config file that was read, if one was.
    pub config_file: Option<PathBuf>,
    /// `[serve]` from the file (`fleet serve`'s defaults).
    pub serve: ServeDefaults,
}

/// The process environment's non-empty, UTF-8 variable `name`.
fn process_env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

/// Where `fleet.toml` is looked for ([module docs](self)), with the variables from `env`;
/// `None` without a home directory.
pub fn config_path(env: &dyn Fn(&str) -> Option<String>) -> Option<PathBuf> {
    if let Some(p) = env("NPU_AGENT_FLEET_CONFIG") {
        return Some(PathBuf::from(p));
    }
    // An absolute $XDG_CONFIG_HOME only, as the XDG base directory spec says.
    let xdg = env("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute());
    let base = xdg.or_else(|| env("HOME").map(|h| PathBuf::from(h).join(".config")))?;
    Some(base.join("npu-agent").join("fleet.toml"))
}

impl Operator {
    /// Resolves the settings from `flags`, the environment and the operator config file.
    ///
    /// Errors (for `npu-agent: ...`, a usage error): the file cannot be read, is not UTF-8 or
    /// not valid TOML, has an unknown key or a value of the wrong type (its line); no broker
    /// anywhere; a protocol that is not `auto`, `5` or `3.1.1`.
    pub fn resolve(flags: OperatorFlags) -> Result<Operator, String> {
        Operator::resolve_with(flags, &process_env)
    }

    /// [`Operator::resolve`] with the variables from `env` (tests give their own).
    ///
    /// Errors: as [`Operator::resolve`].
    pub fn resolve_with(
        flags: OperatorFlags,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Operator, String> {
        let env_path = |name: &str| env(name).map(PathBuf::from);
        let path = config_path(env);
        let file = match path.as_deref() {
            Some(p) => read_fleet_toml(p).map_err(|e| e.to_string())?,
            None => None,
        };
        let config_file = file.as_ref().and(path.clone());
        let dir = path
            .as_deref()
            .and_then(Path::parent)
            .map(Path::to_path_buf);
        let f = file.unwrap_or_default();
        let rel = |p: Option<PathBuf>| p.map(|p| anchor(dir.as_deref(), p));
        let broker = flags
            .broker
            .or_else(|| f.broker.map(Brokers::joined))
            .ok_or_else(|| no_broker(path.as_deref()))?;
        let protocol = env("NPU_AGENT_MQTT_PROTOCOL")
            .or(f.protocol.map(crate::config::TextOrNumber::into_text))
            .unwrap_or_else(|| "auto".into())
            .parse()
            .map_err(|e| format!("MQTT protocol {e}"))?;
        let known_boards = env_path("NPU_AGENT_KNOWN_BOARDS")
            .or_else(|| rel(f.known_boards))
            .or_else(|| dir.as_deref().map(|d| d.join("known_boards")));
        let topic_root = match (flags.topic_root, f.topic_root) {
            (Some(r), _) => r,
            (None, Some(r)) => checked_root(r, path.as_deref())?,
            (None, None) => DEFAULT_TOPIC_ROOT.into(),
        };
        Ok(Operator {
            broker,
            topic_root,
            signing_key: flags.key.or_else(|| rel(f.signing_key)),
            ca_file: env_path("NPU_AGENT_MQTT_CA_FILE").or_else(|| rel(f.tls.ca_file)),
            cert_file: env_path("NPU_AGENT_MQTT_CERT_FILE").or_else(|| rel(f.tls.cert_file)),
            key_file: env_path("NPU_AGENT_MQTT_KEY_FILE").or_else(|| rel(f.tls.key_file)),
            username: env("NPU_AGENT_MQTT_USERNAME").or(f.auth.username),
            password_file: env_path("NPU_AGENT_MQTT_PASSWORD_FILE")
                .or_else(|| rel(f.auth.password_file)),
            protocol,
            known_boards,
            config_file,
            serve: ServeDefaults {
                state_dir: rel(f.serve.state_dir),
                ..f.serve
            },
        })
    }

    /// The names of the secrets set (for refusing a plain `mqtt://` node while they are).
    pub fn secrets_set(&self) -> Vec<&'static str> {
        let mut set = Vec::new();
        if self.username.is_some() {
            set.push("username");
        }
        if self.password_file.is_some() {
            set.push("password_file");
        }
        if self.key_file.is_some() {
            set.push("TLS key_file");
        }
        set
    }
}

impl Brokers {
    /// The comma list the link parses.
    fn joined(self) -> String {
        match self {
            Brokers::One(s) => s,
            Brokers::Many(v) => v.join(","),
        }
    }
}

/// A path from the file, relative to the file's directory when not absolute.
fn anchor(dir: Option<&Path>, p: PathBuf) -> PathBuf {
    match dir {
        Some(d) if p.is_relative() => d.join(p),
        _ => p,
    }
}

/// `topic_root` from the file, held to what `--topic-root` takes: a wildcard or an extra level
/// would make the tools subscribe where no board is.
///
/// Errors: what is wrong, naming the file.
fn checked_root(root: String, path: Option<&Path>) -> Result<String, String> {
    let bad = if root.len() > crate::config::MAX_NAME_BYTES {
        Some("longer than 128 bytes")
    } else if root.contains(['+', '#', '\0']) || root.chars().any(char::is_control) {
        Some("an MQTT topic root may not hold '+', '#' or control characters")
    } else if root.is_empty() || root.starts_with('/') || root.ends_with('/') {
        Some("a topic root is not empty and does not start or end with '/'")
    } else {
        None
    };
    match bad {
        Some(why) => Err(format!(
            "{}: topic_root: {why}",
            path.map_or_else(|| "fleet.toml".into(), |p| p.display().to_string())
        )),
        None => Ok(root),
    }
}

/// The error when nothing gives a broker.
fn no_broker(path: Option<&Path>) -> String {
    match path {
        Some(p) => format!(
            "no broker: give --broker URL, or set broker = \"mqtts://host:8883\" in {}",
            p.display()
        ),
        None => "no broker: give --broker URL (no home directory for fleet.toml)".into(),
    }
}

/// Reads `fleet.toml` at `path`; `Ok(None)` when there is no such file.
///
/// Errors: unreadable, over [`MAX_CONFIG_BYTES`], not UTF-8 (line, byte, column), not TOML or
/// with an unknown key or a wrong type (line; values hidden, as in the agent's config).
fn read_fleet_toml(path: &Path) -> Result<Option<FleetToml>, ConfigError> {
    let shown = path.display().to_string();
    let text = match crate::config::read_host_text(path, MAX_CONFIG_BYTES) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(ConfigError {
                source: shown,
                line: None,
                message: e.to_string(),
            })
        }
    };
    toml::from_str::<FleetToml>(&text)
        .map(Some)
        .map_err(|e| crate::config::toml_error(&shown, &text, &e))
}

#[cfg(test)]
#[path = "operator_tests.rs"]
mod tests;
