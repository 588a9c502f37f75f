//! The agent's configuration (docs/reference.md "Config keys"): `/etc/npu-agent/agent.toml`, merged with
//! `/etc/npu-agent/agent.d/*.toml` in name order, and `NPU_AGENT_*` environment variables, in
//! that order (later wins, key by key). The first-boot file on the boot partition
//! (`/boot/firmware/npu-agent.toml` or `/boot/npu-agent.toml`) is not a layer: `run` moves it
//! into `agent.d/` first ([`crate::provision`]), and a broken one is never applied, even in part.
//!
//! Parsing is strict: an unknown key is an error naming the file, line and key. Secrets are file
//! references (`password_file`, `key_file`); [`Config::redacted`] prints the effective
//! configuration without them.
//!
//! Files: `layer` (one strict layer, the environment), `validate` (checks of the effective
//! config), [`Settings`] (what it means for actions, the gate and the state directory,
//! assembled once for the daemon and the command line).

use crate::root::SysRoot;
use crate::sys::text::strict_utf8;
use layer::{env_layer, parse_layer};
use serde::Serialize;
use std::fmt;

mod env;
mod layer;
mod settings;
mod validate;

pub use env::agent_env;
pub use layer::{check_layer, redact_values};
pub(crate) use layer::{layer_error as toml_error, TextOrNumber};
pub use settings::Settings;

/// Main config file (under the root).
pub const CONFIG_FILE: &str = "/etc/npu-agent/agent.toml";
/// Drop-in directory merged after it, in name order.
pub const CONFIG_DIR: &str = "/etc/npu-agent/agent.d";
/// First-boot provisioning files on the boot partition, Pi OS then Armbian.
pub const FIRST_BOOT_FILES: &[&str] = &[
    "/boot/firmware/npu-agent.toml",
    "/boot/npu-agent.toml",
    // What Notepad saves when "Save as type" stays on text files (Windows hides the extension).
    "/boot/firmware/npu-agent.toml.txt",
    "/boot/npu-agent.toml.txt",
];

pub use crate::sys::hostfile::{read_host_bytes, read_host_text, MAX_CONFIG_BYTES};

/// The error for a config file `source` that is not UTF-8 (its line, and the byte and column).
fn not_utf8(source: &str, e: crate::sys::text::NotUtf8) -> ConfigError {
    ConfigError {
        source: source.to_string(),
        line: Some(e.line),
        message: e.without_line(),
    }
}

/// Longest `mqtt.topic_root`, `board_id` and `home_assistant.discovery_prefix` (bytes): every
/// topic is built from them, and the broker limits a topic to 64 KiB.
pub const MAX_NAME_BYTES: usize = 128;

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
    /// QoS of the command subscription: 1 (each command acknowledged once handled, a flood held
    /// back on the broker) or 0 (every retained `init` still arrives on subscribing; on a
    /// clustered broker a QoS 1 subscription is a stored consumer per board).
    pub command_qos: u64,
    /// Longest wait between reconnect attempts, seconds (issue: a fleet's reconnect storm):
    /// waits grow from about 1 s with full jitter up to it; a refused CONNECT waits this long.
    pub reconnect_max_s: u64,
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
    /// [`crate::model::action::ActionKind`].
    pub disabled: Vec<String>,
    /// Hidden, for tests: per-action rate limits in seconds replacing the built-in ones
    /// ([`crate::action::limits::Limits`]), so a test need not sleep through a window. Not
    /// printed when empty.
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub rate_limit_overrides_s: std::collections::BTreeMap<String, u64>,
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
    /// Also accept signatures over the v1 bytes, which do not bind the topic root (senders of
    /// versions before the v2 form); off by default.
    pub accept_v1_signatures: bool,
}

/// `[home_assistant]`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct HomeAssistantConfig {
    /// Publish Home Assistant MQTT discovery.
    pub enabled: bool,
    /// Discovery prefix (default `homeassistant`).
    pub discovery_prefix: String,
}

/// `[log]`.
#[derive(Debug, Clone, PartialEq, Serialize, Default)]
pub struct LogConfig {
    /// What the daemon logs: a level (`info`) or `target=level` directives
    /// (`warn,mqtt::link=debug`); `RUST_LOG` wins over it. `None`: `info`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub level: Option<String>,
}

impl LogConfig {
    fn is_unset(&self) -> bool {
        self.level.is_none()
    }
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
    /// `[log]` (left out of `--print-config` while nothing is set in it).
    #[serde(skip_serializing_if = "LogConfig::is_unset")]
    pub log: LogConfig,
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
                command_qos: 1,
                reconnect_max_s: 120,
            },
            report: ReportConfig { interval_s: 60 },
            actions: ActionsConfig {
                auto_compact: true,
                compact_cooldown_s: 600,
                allow_reboot: false,
                reboot_command: vec!["systemctl".into(), "reboot".into()],
                reboot_timeout_s: 120,
                disabled: Vec::new(),
                rate_limit_overrides_s: Default::default(),
            },
            security: SecurityConfig {
                trusted_keys: Vec::new(),
                allow_unsigned: crate::model::action::ActionKind::ALL
                    .into_iter()
                    .filter(|k| k.unsigned_by_default())
                    .map(|k| k.as_str().to_string())
                    .collect(),
                max_command_age_s: 300,
                accept_v1_signatures: false,
            },
            home_assistant: HomeAssistantConfig {
                enabled: false,
                discovery_prefix: "homeassistant".into(),
            },
            log: LogConfig::default(),
        }
    }
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
            let shown = path.display().to_string();
            let bytes = read_host_bytes(path, MAX_CONFIG_BYTES).map_err(|e| ConfigError {
                source: shown.clone(),
                line: None,
                message: e.to_string(),
            })?;
            let text = strict_utf8(bytes).map_err(|e| not_utf8(&shown, e))?;
            cfg.apply(parse_layer(&shown, &text)?);
            sources.applied.push(shown);
        }
        None => match read_board_text(root, CONFIG_FILE) {
            Ok(text) => {
                cfg.apply(parse_layer(CONFIG_FILE, &text)?);
                sources.applied.push(CONFIG_FILE.into());
            }
            Err(None) => {}
            Err(Some(e)) => return Err(e),
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
        let text = read_board_text(root, &path).map_err(|e| {
            e.unwrap_or_else(|| ConfigError {
                source: path.clone(),
                line: None,
                message: "removed while being read".into(),
            })
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

/// [`load`] again for a reload (SIGHUP). `main_seen`: `/etc/npu-agent/agent.toml` existed when
/// the running config was read. Then a main file that is missing or empty (0 bytes) now counts
/// as unreadable (an editor renaming it away or truncating it while saving must not bring back
/// the built-in defaults: unsigned commands, no `disabled` actions, no `trusted_keys`). Returns the config and whether the main
/// file was read.
///
/// Errors: as [`load`], and the missing main file.
pub fn reload(
    root: &SysRoot,
    explicit: Option<&std::path::Path>,
    env: &[(String, String)],
    main_seen: bool,
) -> Result<(Config, bool), ConfigError> {
    let (cfg, sources) = load(root, explicit, env)?;
    let main_read = sources.applied.iter().any(|s| s == CONFIG_FILE);
    let unreadable = |what: &str| ConfigError {
        source: CONFIG_FILE.into(),
        line: None,
        message: format!(
            "{what}, though it was there when the running config was read (an editor saving \
             it?); it counts as unreadable"
        ),
    };
    if explicit.is_none() && main_seen && !main_read {
        return Err(unreadable("missing"));
    }
    // Truncated before being written again: no byte of it is a config (a file that means the
    // defaults holds at least a comment).
    if explicit.is_none() && main_seen && root.inode_len(CONFIG_FILE).is_ok_and(|(_, n)| n == 0) {
        return Err(unreadable("empty"));
    }
    Ok((cfg, main_read))
}

/// The text of the config file `path` under `root`: `Err(None)` when it does not exist, else an
/// error naming the file (unreadable, or not UTF-8: its line, byte and column).
fn read_board_text(root: &SysRoot, path: &str) -> Result<String, Option<ConfigError>> {
    let bytes = root.read(path).map_err(|e| {
        (!e.is_not_found()).then(|| ConfigError {
            source: path.into(),
            line: None,
            message: e.to_string(),
        })
    })?;
    strict_utf8(bytes).map_err(|e| Some(not_utf8(path, e)))
}

#[cfg(test)]
mod tests;
