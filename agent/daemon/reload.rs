//! SIGHUP (`systemctl reload npu-agent`): the config and the trusted keys read again, and what
//! the command path decides by applied at once — trusted keys, `allow_unsigned`,
//! `max_command_age_s`, `[actions]` (disabled actions, reboot, rate limits, cooldowns). What the
//! link and the board's identity are built from (`[mqtt]`, `board_id`, `root`, `state_dir`,
//! `profile`, `[report]`, `[log]`, `[home_assistant]`) is named in the log as waiting for a
//! restart. A config that cannot be read keeps the running one (a warning with the cause), and so
//! does a main file that existed and is missing now ([`crate::config::reload`]).

use super::agent::Agent;
use crate::action::executor::Executor;
use crate::config::{Config, Settings};

/// Reads the config again (the same files, `--config` and environment as at start).
pub type Reloader = Box<dyn Fn() -> Result<Config, String>>;

/// Reloads the config into `agent` (see the module).
pub(super) fn reload(agent: &mut Agent, read: &Reloader) {
    let settings = read().and_then(|cfg| Settings::assemble(cfg).for_board(agent.s.board.clone()));
    let settings = match settings {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(error = %e, "SIGHUP: the config was not reloaded; the running one stays");
            return;
        }
    };
    let waiting = restart_needed(&agent.s.cfg, &settings.cfg);
    let mut policy = settings.policy.clone();
    // Signatures bind the topic root the agent is subscribed under, until a restart moves it.
    policy.topic_root.clone_from(&agent.s.topic_root);
    agent.gate.set_policy(policy);
    agent.gate.set_limits(settings.limits.clone());
    agent.s.executor = Executor::new(
        agent.s.root.clone(),
        agent.s.state.clone(),
        settings.actions.clone(),
        agent.s.profile.clone(),
    );
    tracing::info!(
        "SIGHUP: config reloaded; the command policy and [actions] apply now{}",
        match waiting.is_empty() {
            true => String::new(),
            false => format!("; restart_needed: {}", waiting.join(", ")),
        }
    );
    agent.s.settings = settings;
}

/// The settings that differ between `old` and `new` and take effect only on a restart.
fn restart_needed(old: &Config, new: &Config) -> Vec<&'static str> {
    [
        ("mqtt", old.mqtt == new.mqtt),
        ("board_id", old.board_id == new.board_id),
        ("root", old.root == new.root),
        ("state_dir", old.state_dir == new.state_dir),
        ("profile", old.profile == new.profile),
        ("report", old.report == new.report),
        ("log", old.log == new.log),
        ("home_assistant", old.home_assistant == new.home_assistant),
    ]
    .into_iter()
    .filter(|(_, same)| !same)
    .map(|(name, _)| name)
    .collect()
}
