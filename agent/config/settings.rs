//! The settings every consumer uses, assembled once from the effective [`Config`]: the daemon
//! and the command line build the same action settings, command policy and state directory
//! here instead of each converting the config again.

use super::Config;
use crate::action::limits::Limits;
use crate::action::state::StateDir;
use crate::action::ActionConfig;
use crate::model::action::ActionKind;
use crate::mqtt::command::Policy;
use crate::mqtt::link::ProtocolSetting;
use crate::mqtt::BrokerList;
use crate::root::SysRoot;

/// The assembled settings (what the config means for actions, the gate and the state files).
#[derive(Debug, Clone)]
pub struct Settings {
    /// The effective configuration they came from.
    pub cfg: Config,
    /// The board tree every file is read and written under (`root`).
    pub root: SysRoot,
    /// The state directory under the root (`state_dir`).
    pub state: StateDir,
    /// The `[actions]` settings as the action modules take them.
    pub actions: ActionConfig,
    /// The rate limits and cooldowns the gate applies.
    pub limits: Limits,
    /// The command policy of the gate: `board` is empty and no trusted key is read until
    /// [`Settings::for_board`] (the command line needs neither).
    pub policy: Policy,
    /// `[mqtt] protocol`, parsed (validated with the config; `auto` for one never validated).
    pub protocol: ProtocolSetting,
    /// `[mqtt] url`'s broker list, parsed, or why it does not parse (an empty `url` too).
    pub brokers: Result<BrokerList, String>,
}

/// The action kinds `names` list (validated with the config: every name is one).
fn kinds(names: &[String]) -> Vec<ActionKind> {
    names.iter().filter_map(|a| a.parse().ok()).collect()
}

impl Settings {
    /// Assembles the settings from `cfg` (no I/O).
    pub fn assemble(cfg: Config) -> Settings {
        let root = SysRoot::new(&cfg.root);
        let state = StateDir::new(&root, &cfg.state_dir);
        let actions = ActionConfig {
            auto_compact: cfg.actions.auto_compact,
            compact_cooldown_s: cfg.actions.compact_cooldown_s,
            allow_reboot: cfg.actions.allow_reboot,
            reboot_command: cfg.actions.reboot_command.clone(),
            reboot_timeout_s: cfg.actions.reboot_timeout_s,
            ..ActionConfig::default()
        };
        let limits = Limits {
            compact_cooldown_s: cfg.actions.compact_cooldown_s,
            rate_limit_overrides_s: cfg
                .actions
                .rate_limit_overrides_s
                .iter()
                .filter_map(|(a, s)| Some((a.parse().ok()?, *s)))
                .collect(),
        };
        let policy = Policy {
            board: String::new(),
            trusted_keys: Vec::new(),
            allow_unsigned: kinds(&cfg.security.allow_unsigned),
            max_command_age_s: cfg.security.max_command_age_s,
            topic_root: cfg.mqtt.topic_root.clone(),
            accept_v1: cfg.security.accept_v1_signatures,
            refused: crate::action::gate::config_refusals(&kinds(&cfg.actions.disabled)),
        };
        Settings {
            protocol: cfg.mqtt.protocol.parse().unwrap_or(ProtocolSetting::Auto),
            brokers: BrokerList::parse(&cfg.mqtt.url),
            cfg,
            root,
            state,
            actions,
            limits,
            policy,
        }
    }

    /// Loads the config (see [`super::load`]) and assembles it.
    ///
    /// Errors: the config's, unchanged.
    pub fn load(
        root: &SysRoot,
        explicit: Option<&std::path::Path>,
        env: &[(String, String)],
    ) -> Result<(Settings, super::Sources), super::ConfigError> {
        let (cfg, sources) = super::load(root, explicit, env)?;
        Ok((Settings::assemble(cfg), sources))
    }

    /// The policy for this `board`, with the trusted keys (`security.trusted_keys`) read under
    /// the root, as every board file is read.
    ///
    /// Errors: a key file that cannot be read, is not text or holds no Ed25519 key, named.
    pub fn for_board(mut self, board: String) -> Result<Settings, String> {
        let mut trusted = Vec::new();
        for path in &self.cfg.security.trusted_keys {
            let bytes = self.root.read(path).map_err(|e| e.to_string())?;
            let text = String::from_utf8(bytes).map_err(|_| format!("{path}: not text"))?;
            let key = crate::mqtt::command::parse_verifying_key(&text)
                .map_err(|e| format!("{path}: {e}"))?;
            trusted.push(key);
        }
        self.policy.board = board;
        self.policy.trusted_keys = trusted;
        Ok(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn assembled_once_from_the_config() {
        let mut cfg = Config::default();
        cfg.actions.compact_cooldown_s = 42;
        cfg.actions.disabled = vec!["set_cma".into()];
        cfg.security.max_command_age_s = 77;
        let s = Settings::assemble(cfg);
        assert_eq!(s.actions.compact_cooldown_s, 42);
        assert_eq!(s.policy.max_command_age_s, 77);
        assert!(s.policy.refused.contains_key(&ActionKind::SetCma));
        assert_eq!(s.limits.compact_cooldown_s, 42);
        assert!(s.policy.board.is_empty() && s.policy.trusted_keys.is_empty());
    }

    #[test]
    fn a_missing_trusted_key_is_named() {
        let d = tempfile::tempdir().unwrap();
        let mut cfg = Config {
            root: d.path().display().to_string(),
            ..Config::default()
        };
        cfg.security.trusted_keys = vec!["/etc/npu-agent/keys/op.pub".into()];
        let e = Settings::assemble(cfg).for_board("b1".into()).unwrap_err();
        assert!(e.contains("op.pub"), "{e}");
    }
}
