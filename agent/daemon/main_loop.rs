//! The event loop: timers (the check period, housekeeping, the watchdog), finished work, link
//! events and signals, each routed to its handler; the clean stop.

use super::agent::Agent;
use super::clock::SystemClock;
use super::jobs::{handle_done, reconcile_reboot, Dispatch, Done};
use super::link::handle_link;
use super::setup::Setup;
use super::{CHECK_PERIOD_MAX_S, HOUSEKEEPING_BUSY, HOUSEKEEPING_IDLE};
use crate::mqtt::link::{Link, LinkEvent};
use crate::mqtt::topics;
use rumqttc::v5::mqttbytes::QoS;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// What a start settles before the loop: commands a crash left `executing`, a reboot asked for
/// before this start, a boot-file edit now in effect.
pub(super) fn settle_on_start(agent: &mut Agent) {
    use crate::model::action::ActionKind;
    let fix = ActionKind::Fix;
    if agent.gate.policy().allow_unsigned.contains(&fix) {
        // The operator's choice (off by default), said once per start where the journal keeps it.
        tracing::warn!("security.allow_unsigned lists fix: whoever may publish on this board's command or Home Assistant topics can run the fixes its findings plan (package swaps, unit limits, boot keys)");
    }
    let update = ActionKind::Update;
    if agent.gate.policy().allow_unsigned.contains(&update) {
        tracing::warn!("security.allow_unsigned lists update: whoever may publish on this board's command topics can install any version of npu-agent its apt sources hold (a downgrade with allow_downgrade)");
    }
    // Commands a crash left `executing`: finished as failed, published once the broker's
    // retained records are in (a final answer it holds is kept instead).
    let update_pending = matches!(
        agent
            .s
            .state
            .load::<serde_json::Value>(crate::action::update::PENDING_FILE),
        Ok(Some(_))
    );
    let interrupted = agent.gate.finish_interrupted_but(if update_pending {
        &[ActionKind::Reboot, ActionKind::Update]
    } else {
        &[ActionKind::Reboot]
    });
    for (c, _) in &interrupted {
        tracing::warn!(action = %c.action, cmd_id = %c.cmd_id, "command interrupted by an agent restart: failed, unless the broker holds its answer");
    }
    agent.interrupted = super::interrupted::Interrupted::new(interrupted);
    // The command path's first clock state, read before the loop serves the link (later ones
    // on the blocking pool).
    agent.read_clock();
    // A reboot asked for before this start: did the board really reboot? And is a boot-file
    // edit now in effect?
    reconcile_reboot(agent, crate::action::reboot::ReconcileWhen::Start);
    if let Err(e) = crate::action::cma::reconcile_boot_edit(&agent.s.state) {
        tracing::error!("cannot reconcile the boot-file edit state: {e}");
    }
}

/// Runs the loop until SIGTERM or SIGINT (SIGHUP reloads the config with `reload`); returns
/// the exit code.
pub(super) async fn main_loop(s: Setup, reload: super::reload::Reloader) -> i32 {
    let (tx, mut rx) = mpsc::unbounded_channel::<Done>();
    let mut agent = Agent::new(s, Arc::new(SystemClock), Dispatch::Blocking);
    settle_on_start(&mut agent);
    super::jobs::spawn_diagnose(&mut agent, &tx);
    agent.link = Some(Link::start(&agent.s.link));
    let mut interval = tokio::time::interval(Duration::from_secs(
        agent.s.cfg.report.interval_s.min(CHECK_PERIOD_MAX_S),
    ));
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    interval.tick().await;
    let watchdog = sd_notify::watchdog_enabled();
    let housekeeping_idle = watchdog.map_or(HOUSEKEEPING_IDLE, |w| {
        (w / 4).clamp(HOUSEKEEPING_BUSY, HOUSEKEEPING_IDLE)
    });
    let mut housekeeping_at = tokio::time::Instant::now() + HOUSEKEEPING_BUSY;
    let mut last_watchdog = Instant::now();
    let mut sigterm = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
    {
        Ok(s) => s,
        Err(e) => {
            tracing::error!("cannot watch SIGTERM: {e}");
            return 2;
        }
    };
    let mut sighup = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) {
        Ok(s) => s,
        Err(e) => {
            tracing::error!("cannot watch SIGHUP: {e}");
            return 2;
        }
    };
    let signal = loop {
        // What the last event changed in the command ledger, written on the blocking pool.
        super::jobs::save_ledger_behind(&mut agent, &tx);
        if agent.work_waiting() {
            housekeeping_at = housekeeping_at.min(tokio::time::Instant::now() + HOUSEKEEPING_BUSY);
        }
        tokio::select! {
            _ = interval.tick() => {
                if !agent.diagnosing {
                    super::jobs::start_diagnosis(&mut agent, &tx);
                }
                super::jobs::spawn_reconcile_reboot(&mut agent, &tx);
            }
            Some(done) = rx.recv() => handle_done(&mut agent, done, &tx),
            ev = next_event(&mut agent.link) => {
                if let Some(ev) = ev {
                    let ack = match &ev {
                        LinkEvent::Message { ack, .. } => *ack,
                        _ => None,
                    };
                    handle_link(&mut agent, ev, &tx);
                    // Handled (a command has its answer queued): the broker may send the next.
                    if let Some(a) = ack {
                        agent.send_ack(a);
                    }
                }
            }
            _ = tokio::time::sleep_until(housekeeping_at) => {
                housekeeping(&mut agent, watchdog, &mut last_watchdog);
                housekeeping_at = tokio::time::Instant::now() + housekeeping_idle;
            }
            _ = sighup.recv() => super::reload::reload(&mut agent, &reload),
            _ = sigterm.recv() => break "SIGTERM",
            _ = tokio::signal::ctrl_c() => break "SIGINT",
        }
    };
    tracing::info!(signal, "stopping");
    stop(agent, signal).await;
    0
}

/// Housekeeping: retries what waits, summarises rejections, feeds the watchdog while diagnoses
/// finish, restarts a stalled link, and forgets a session takeover after a stable minute.
fn housekeeping(agent: &mut Agent, watchdog: Option<Duration>, last_watchdog: &mut Instant) {
    agent.flush();
    agent.rejections.roll();
    if let Some(w) = watchdog {
        // Fed only while diagnoses finish: one stuck longer than the watchdog
        // period lets systemd restart the agent.
        if last_watchdog.elapsed() >= w / 2 && agent.making_progress(w) {
            let _ = sd_notify::notify(&[sd_notify::NotifyState::Watchdog]);
            *last_watchdog = Instant::now();
        }
    }
    restart_stalled_link(agent);
    super::apply::retry_due(agent);
    super::apply::answer_due(agent);
    super::apply::clear_due(agent);
    super::apply::reassert_due(agent);
    if agent.taken_over.is_some()
        && agent
            .connected_since
            .is_some_and(|t| t.elapsed() > crate::mqtt::link::TAKEOVER_FORGOTTEN)
    {
        agent.taken_over = None;
        tracing::info!("this board id's connection has been stable for a minute");
    }
}

/// Clean stop: offline first (a DISCONNECT discards the last will), then disconnect.
async fn stop(mut agent: Agent, signal: &'static str) {
    let _ = sd_notify::notify(&[sd_notify::NotifyState::Stopping]);
    // The ledger's last changes are on disk before the agent ends.
    if let Some(save) = agent.gate.take_unsaved() {
        match tokio::task::spawn_blocking(move || save.write()).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => tracing::error!(error = %e, "cannot save the command ledger"),
            Err(e) => tracing::error!(error = %e, "the command ledger's last save did not finish"),
        }
    }
    let availability = topics::availability(&agent.s.topic_root, &agent.s.board);
    match agent.link.take() {
        Some(l) => {
            let queued = l.client.try_publish(
                availability.clone(),
                QoS::AtLeastOnce,
                true,
                b"offline".to_vec(),
            );
            let connected = agent.connected;
            l.shutdown(Duration::from_secs(2)).await;
            match queued {
                Ok(()) if connected => tracing::info!(
                    signal,
                    topic = %availability,
                    "stopped: published the retained availability offline and disconnected"
                ),
                Ok(()) => tracing::info!(
                    signal,
                    topic = %availability,
                    "stopped while not connected to the broker: its last will marks the board offline"
                ),
                Err(e) => tracing::warn!(
                    signal,
                    topic = %availability,
                    error = %e,
                    "stopped, but offline could not be queued: the broker's last will marks the board offline"
                ),
            }
        }
        None => tracing::info!(signal, "stopped (no MQTT link)"),
    }
}

async fn next_event(link: &mut Option<Link>) -> Option<LinkEvent> {
    match link {
        Some(l) => l.events.recv().await,
        None => std::future::pending().await,
    }
}

fn restart_stalled_link(agent: &mut Agent) {
    let Some(l) = &agent.link else { return };
    // Both stamps on the monotonic clock: a wall-clock jump (NTP on a board without an RTC)
    // neither fakes a stall nor hides one.
    let idle_ms = crate::mqtt::link::now_ms().saturating_sub(l.progress_ms.load(Ordering::Relaxed));
    // With keep-alive pings the loop returns at least every keep-alive; three missed means stuck.
    if agent.connected && idle_ms > 3 * agent.s.link.keep_alive.as_millis() as u64 {
        tracing::warn!(
            idle_ms,
            "MQTT event loop made no progress; restarting the client"
        );
        if let Some(old) = agent.link.take() {
            old.abort();
        }
        agent.connected = false;
        agent.link = Some(Link::start(&agent.s.link));
    }
}
