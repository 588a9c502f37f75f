//! Checks of the effective configuration, and its printable (redacted) form.

use super::{Config, ConfigError, MAX_NAME_BYTES};

impl Config {
    /// The configuration without secrets' contents (paths to secret files are shown; there are
    /// no inline secrets; user info in the broker URL is replaced by `<redacted>`), as TOML.
    pub fn redacted(&self) -> String {
        let mut c = self.clone();
        c.mqtt.url = crate::mqtt::redact_url(&c.mqtt.url);
        toml::to_string(&c).unwrap_or_else(|_| "# cannot render the configuration\n".into())
    }

    /// What is wrong with `[mqtt]`'s keep-alive, protocol and command QoS, if anything.
    fn mqtt_number_problem(&self) -> Option<String> {
        let m = &self.mqtt;
        if m.keep_alive_s != 0 && m.keep_alive_s < 5 {
            return Some(format!(
                "mqtt.keep_alive_s = {} is below 5 s",
                m.keep_alive_s
            ));
        }
        if let Err(e) = m.protocol.parse::<crate::mqtt::link::ProtocolSetting>() {
            return Some(format!("mqtt.protocol = {e}"));
        }
        if m.command_qos > 1 {
            return Some(format!(
                "mqtt.command_qos = {}: expected 0 or 1",
                m.command_qos
            ));
        }
        (m.keep_alive_s > u64::from(u16::MAX)).then(|| {
            format!(
                "mqtt.keep_alive_s = {} is above {} s (the MQTT maximum)",
                m.keep_alive_s,
                u16::MAX
            )
        })
    }

    /// The `[mqtt]` keys set that a CONNECT carries or that stand for the board (a password, a
    /// client key), by name.
    fn mqtt_secrets(&self) -> Vec<&'static str> {
        let m = &self.mqtt;
        [
            ("mqtt.username", &m.username),
            ("mqtt.password_file", &m.password_file),
            ("mqtt.key_file", &m.key_file),
        ]
        .into_iter()
        .filter(|(_, v)| !v.is_empty())
        .map(|(k, _)| k)
        .collect()
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
        if let Some(m) = self.mqtt_number_problem() {
            return err(m);
        }
        if !self.mqtt.url.is_empty() {
            // The value is not quoted (it could be anything typed in the wrong key), except a
            // URL with user info, shown with it redacted.
            match crate::mqtt::parse_urls_quiet(&self.mqtt.url) {
                Err(e) => {
                    let shown = crate::mqtt::redact_url(&self.mqtt.url);
                    return err(if shown != self.mqtt.url {
                        format!("mqtt.url {shown:?}: {e}")
                    } else {
                        format!("mqtt.url: {e}")
                    });
                }
                Ok(urls) => {
                    if let Err(e) =
                        crate::mqtt::refuse_mixed_tls(&urls, "mqtt.url", &self.mqtt_secrets())
                    {
                        return err(e);
                    }
                }
            }
        }
        if let Some(level) = &self.log.level {
            if let Err(e) = crate::sys::log::parse_level(level) {
                return err(format!("log.level: {e}"));
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
        if let Err(m) = self.check_fields() {
            return err(m);
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
            .chain(
                self.actions
                    .rate_limit_overrides_s
                    .keys()
                    .map(|a| ("actions.rate_limit_overrides_s", a)),
            )
        {
            if a.parse::<crate::model::action::ActionKind>().is_err() {
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
                    crate::model::action::ActionKind::names()
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

/// Inclusive ranges of the duration keys: no later arithmetic on a config value can overflow
/// (a deadline of `now + u64::MAX` seconds panics).
const BOUNDS_S: &[(&str, u64, u64)] = &[
    ("report.interval_s", 1, 86_400),
    ("mqtt.reconnect_max_s", 1, 3_600),
    ("actions.compact_cooldown_s", 0, 604_800),
    ("actions.reboot_timeout_s", 1, 86_400),
    ("actions.rate_limit_overrides_s", 0, 604_800),
];

impl Config {
    /// Every duration key within its range (`BOUNDS_S`).
    fn check_bounds(&self) -> Result<(), String> {
        let values = [
            ("report.interval_s", self.report.interval_s),
            ("mqtt.reconnect_max_s", self.mqtt.reconnect_max_s),
            (
                "actions.compact_cooldown_s",
                self.actions.compact_cooldown_s,
            ),
            ("actions.reboot_timeout_s", self.actions.reboot_timeout_s),
        ]
        .into_iter()
        .chain(
            self.actions
                .rate_limit_overrides_s
                .values()
                .map(|v| ("actions.rate_limit_overrides_s", *v)),
        );
        for (key, v) in values {
            let Some((_, min, max)) = BOUNDS_S.iter().find(|(k, _, _)| *k == key) else {
                continue;
            };
            if !(*min..=*max).contains(&v) {
                return Err(format!("{key} = {v} is outside {min}..={max} s"));
            }
        }
        Ok(())
    }

    /// [`Self::check_bounds`] and [`Self::check_names`] in turn.
    fn check_fields(&self) -> Result<(), String> {
        self.check_bounds()?;
        self.check_names()
    }

    /// Names that become topic levels: no control character (MQTT forbids U+0000 in a topic),
    /// and a board id that is not the fleet-wide `all`.
    fn check_names(&self) -> Result<(), String> {
        for (key, value) in [
            ("mqtt.topic_root", &self.mqtt.topic_root),
            ("board_id", &self.board_id),
            (
                "home_assistant.discovery_prefix",
                &self.home_assistant.discovery_prefix,
            ),
        ] {
            if value.chars().any(char::is_control) {
                return Err(format!("{key} contains a control character"));
            }
        }
        if crate::model::board_id::sanitize_board_id(&self.board_id) == crate::model::topics::ALL {
            return Err(format!(
                "board_id {:?} is reserved: `{}` addresses every board",
                self.board_id,
                crate::mqtt::topics::ALL
            ));
        }
        Ok(())
    }
}
