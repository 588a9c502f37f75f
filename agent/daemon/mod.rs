//! `npu-agent run`: the daemon, as an event loop only. It routes link events (`link`),
//! finished work (`jobs`) and timers (`main_loop`) to the gate, the executor and the report
//! (`status`), on one current-thread tokio runtime where the loop never blocks: checks and
//! actions run on blocking threads and report back over a channel, MQTT publishes use
//! `try_publish` with a latest-wins status slot, and a separate task owns the rumqttc event loop
//! ([`crate::mqtt::link`]). Time comes from a [`clock::Clock`], so the routing is unit-tested
//! with a test clock instead of sleeps.

mod agent;
mod apply;
mod availability;
mod capture;
pub mod clock;
pub mod effect;
mod identity;
mod interrupted;
mod jobs;
mod link;
mod main_loop;
pub mod reload;
mod setup;
mod status;
pub mod subscribe;
pub mod sweep;
#[cfg(test)]
mod tests;
mod work;

use std::time::Duration;

/// State file with the seen command ids and per-action last runs.
pub const LEDGER_FILE: &str = crate::action::gate::LEDGER_FILE;
/// Shortest time between two Home Assistant discovery messages.
pub const HA_DISCOVERY_MIN_INTERVAL: Duration = Duration::from_secs(5);
/// How long the command path trusts a clock state read earlier before reading the board's
/// time-sync files again.
pub const CLOCK_REPROBE: Duration = Duration::from_secs(5);

/// Longest time between two check cycles (a changed finding is published within it), seconds.
pub const CHECK_PERIOD_MAX_S: u64 = 15;

/// State file with the MQTT session counter.
pub const SESSION_FILE: &str = "session.json";

/// Rejections logged one by one per second at most; the rest are counted and summarised.
pub const REJECTIONS_LOGGED_PER_S: u32 = 20;

/// Housekeeping period while work waits (a reply or status the client's request queue
/// refused, rejections not yet summarised): retried this often.
pub const HOUSEKEEPING_BUSY: Duration = Duration::from_millis(250);

/// Housekeeping period when nothing waits (link-stall check, watchdog feed, takeover reset):
/// this, or a quarter of the systemd watchdog period when that is shorter. An idle agent then
/// wakes for it 12 times a minute instead of 240.
pub const HOUSEKEEPING_IDLE: Duration = Duration::from_secs(5);

/// The daemon's fatal errors (exit code 2).
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// Bad configuration.
    #[error("{0}")]
    Config(String),
    /// The tokio runtime could not start.
    #[error("cannot start the runtime: {0}")]
    Runtime(String),
}

/// Runs the daemon until SIGTERM/SIGINT; on SIGHUP it reads the config again with `reload`
/// ([`reload`]). `provisioning` is the first-boot provisioning's finding, shown first in every
/// status. Returns the process exit code.
///
/// Errors: [`RunError`] for a bad configuration or a runtime that cannot start.
pub fn run(
    cfg: crate::config::Config,
    provisioning: Option<crate::model::Finding>,
    reload: reload::Reloader,
) -> Result<i32, RunError> {
    crate::sys::log::init_for(cfg.log.level.as_deref(), tracing::Level::INFO);
    let mut s = setup::setup(cfg)?;
    s.provisioning = provisioning;
    let rt = crate::sys::runtime::current_thread().map_err(|e| RunError::Runtime(e.to_string()))?;
    Ok(rt.block_on(main_loop::main_loop(s, reload)))
}
