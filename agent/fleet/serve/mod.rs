//! `npu-agent fleet serve`: the operator's long-lived fleet service (feature `serve`). One
//! subscription to the fleet (`<root>/+/availability`, `<root>/+/status`) over the same
//! connection options as the other fleet tools ([`super::operator_link`]); every status's seal
//! judged against known_boards as `fleet watch` judges it; every board's latest status in
//! memory; each change in the history ([`store`]); and an HTTP server on `--listen`
//! (127.0.0.1:[`DEFAULT_PORT`] by default) with the page, the JSON API, the inventory CSV and
//! `/metrics` ([`http`]).

pub mod api;
pub mod broker;
pub mod detail;
pub mod http;
pub mod inbox;
pub mod metrics;
pub mod page;
pub mod server;
pub mod setup;
pub mod shared;
pub mod state;
pub mod store;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_attacks;
#[cfg(test)]
mod tests_bounds;
#[cfg(test)]
mod tests_review;

use super::{operator_link, runtime, EXIT_FAILED, EXIT_OK, EXIT_USAGE};
use crate::mqtt::link::{Link, LinkEvent, LinkOptions};
use rumqttc::v5::mqttbytes::QoS;
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The port `fleet serve` listens on unless told (`--listen`).
pub const DEFAULT_PORT: u16 = 9465;

/// History kept unless told (`--retention-days`), days.
pub const DEFAULT_RETENTION_DAYS: u64 = 90;

/// Rows of boards neither in known_boards nor sealing a status held unless told
/// (`--max-unsealed-boards`, `max_unsealed_boards` under `[serve]`).
pub const DEFAULT_MAX_UNSEALED_BOARDS: usize = 1000;

pub use store::DEFAULT_ROWS_PER_BOARD;

/// Boards held unless told (`--max-boards`, `max_boards` under `[serve]`).
pub const DEFAULT_MAX_BOARDS: usize = 200_000;

/// How often link states are looked at again (boards turn stale by time alone), seconds.
pub const TICK_S: u64 = 2;

/// How often the history is pruned, seconds.
pub const PRUNE_EVERY_S: u64 = 3600;

/// Where `fleet serve` listens unless told: loopback only (a reverse proxy adds TLS and
/// authentication), the port the docs name.
pub const DEFAULT_LISTEN: std::net::SocketAddr =
    std::net::SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 9465);

/// Where `fleet serve` keeps its history unless told (the systemd unit's `StateDirectory`).
pub const DEFAULT_STATE_DIR: &str = "/var/lib/npu-agent-fleet";

/// `fleet serve` options.
#[derive(Debug, Clone)]
pub struct ServeArgs {
    /// The broker, topic root, TLS and credentials (flags, variables and fleet.toml resolved).
    pub op: crate::fleet::operator::Operator,
    /// Where the HTTP server listens.
    pub listen: SocketAddr,
    /// Where the history database lives (made if missing).
    pub state_dir: PathBuf,
    /// Days of history kept; 0 keeps everything.
    pub retention_days: u64,
    /// Which boards get per-board series in `/metrics`.
    pub cardinality: metrics::Cardinality,
    /// The most boards held.
    pub max_boards: usize,
    /// The most boards held that are neither in known_boards nor sealing a status.
    pub max_unsealed_boards: usize,
    /// The most history rows one board keeps (oldest out first); 0: no cap.
    pub history_rows_per_board: usize,
    /// New board keys recorded in known_boards in this run.
    pub accept_new_boards: usize,
    /// A status older than this is stale; `None`: three intervals and a minute.
    pub stale_after_s: Option<u64>,
}

/// Runs `fleet serve` until SIGTERM or SIGINT. Returns the exit code (2 usage or setup
/// error: the broker options, the state directory, the database, the listen address).
pub fn serve(a: &ServeArgs, err: &mut dyn Write) -> i32 {
    let opts = match operator_link(&a.op, "npu-agent-serve") {
        Ok(o) => o,
        Err(e) => {
            let _ = writeln!(err, "npu-agent: {e}");
            return EXIT_USAGE;
        }
    };
    // The port first: a serve that cannot listen changes nothing on disk.
    let listener = match setup::bind(a.listen) {
        Ok(l) => l,
        Err(e) => {
            let _ = writeln!(err, "npu-agent: {e}");
            return EXIT_USAGE;
        }
    };
    let state = open_state(a);
    let (_lock, store) = match state {
        Ok(s) => s,
        Err(e) => {
            let _ = writeln!(err, "npu-agent: {e}");
            return EXIT_USAGE;
        }
    };
    let staleness = match a.stale_after_s {
        Some(s) => state::Staleness::AfterS(s),
        None => state::Staleness::Intervals,
    };
    let fleet = state::Fleet::new(
        &a.op.topic_root,
        a.max_boards,
        crate::fleet::known::KnownBoards::load_accepting(
            a.op.known_boards.as_deref(),
            a.accept_new_boards,
        ),
        Box::new(store),
        staleness,
    )
    .with_unsealed_cap(a.max_unsealed_boards);
    let shared = Arc::new(http::Shared::new(fleet, a.cardinality, a.listen.ip()));
    let Some(rt) = runtime(err) else {
        return EXIT_USAGE;
    };
    rt.block_on(run(a, opts, shared, listener, err))
}

/// The state directory made and locked for this process (the lock is held while the file is
/// open), and the history in it.
///
/// Errors: the directory cannot be made, another service holds it, the database will not open.
fn open_state(a: &ServeArgs) -> Result<(std::fs::File, store::Sqlite), String> {
    store::make_dir(&a.state_dir).map_err(|e| {
        format!(
            "{}: {e} (give --state-dir DIR, or state_dir under [serve] in fleet.toml)",
            a.state_dir.display()
        )
    })?;
    let lock = setup::lock_state_dir(&a.state_dir)?;
    let store = store::Sqlite::open(&a.state_dir)?.with_rows_per_board(a.history_rows_per_board);
    Ok((lock, store))
}

async fn run(
    a: &ServeArgs,
    opts: LinkOptions,
    shared: Arc<http::Shared>,
    listener: std::net::TcpListener,
    err: &mut dyn Write,
) -> i32 {
    let listener = match tokio::net::TcpListener::from_std(listener) {
        Ok(l) => l,
        Err(e) => {
            let _ = writeln!(err, "npu-agent: cannot listen on {}: {e}", a.listen);
            return EXIT_USAGE;
        }
    };
    let addr = listener.local_addr().map_or(a.listen, |x| x);
    let _ = writeln!(
        err,
        "npu-agent: fleet serve on http://{addr}/ (history in {})",
        a.state_dir.join(store::FILE_NAME).display()
    );
    let router = http::router(shared.clone());
    let code = tokio::select! {
        () = server::serve(listener, router, server::Limits::default()) => EXIT_FAILED,
        () = follow(a, opts, &shared) => EXIT_FAILED,
        () = stop_signal() => EXIT_OK,
    };
    lock(&shared).tick(crate::action::now_unix_s(), None);
    code
}

fn lock(s: &http::Shared) -> std::sync::MutexGuard<'_, state::Fleet> {
    s.fleet
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Resolves on SIGTERM or SIGINT (never, when they cannot be watched).
async fn stop_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    match (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) {
        (Ok(mut t), Ok(mut i)) => {
            tokio::select! { _ = t.recv() => {}, _ = i.recv() => {} }
        }
        _ => std::future::pending().await,
    }
}

/// The subscription: every message into the fleet (through the [`inbox`]), link states looked
/// at every [`TICK_S`], the history pruned every [`PRUNE_EVERY_S`]. Returns only when the link
/// ends (or the inbox's thread cannot start).
async fn follow(a: &ServeArgs, mut opts: LinkOptions, shared: &Arc<http::Shared>) {
    let root = &a.op.topic_root;
    let inbox = match inbox::Inbox::start(shared.clone(), inbox::MAX_QUEUED_BYTES) {
        Ok(i) => i,
        Err(e) => {
            tracing::error!("cannot start the thread that takes statuses in: {e}");
            return;
        }
    };
    let mut blog = broker::BrokerLog::new(&a.op.broker);
    lock(shared).set_broker(false, &blog.shown(), crate::action::now_unix_s());
    opts.reconnect_max = Duration::from_secs(broker::RECONNECT_MAX_S);
    let mut link = Link::start(&opts);
    let mut tick = tokio::time::interval(Duration::from_secs(TICK_S));
    let mut last_prune: Option<Instant> = None;
    let retention_s = i64::try_from(a.retention_days.saturating_mul(86_400)).unwrap_or(i64::MAX);
    loop {
        tokio::select! {
            ev = link.events.recv() => match ev {
                None => return,
                Some(LinkEvent::Connected { broker, .. }) => {
                    blog.connected(broker);
                    lock(shared).set_broker(true, &blog.shown(), crate::action::now_unix_s());
                    let filters = [format!("{root}/+/availability"), format!("{root}/+/status")];
                    let _ = link.client.try_subscribe_many(&filters, QoS::AtMostOnce);
                }
                Some(LinkEvent::ProtocolRefused { reason }) => {
                    tracing::warn!("the broker refuses MQTT 5 ({reason}); using MQTT 3.1.1");
                    opts.protocol = crate::mqtt::link::Protocol::V311;
                    link = Link::start(&opts);
                }
                Some(LinkEvent::Disconnected { reason, cause, retry_in_ms, .. }) => {
                    blog.lost(&reason, &cause, retry_in_ms);
                    lock(shared).set_broker(false, &blog.shown(), crate::action::now_unix_s());
                }
                Some(LinkEvent::Message { topic, payload, .. }) => {
                    inbox.push(topic, payload, crate::action::now_unix_s()).await;
                }
                Some(_) => {}
            },
            _ = tick.tick() => {
                let now = crate::action::now_unix_s();
                let prune = a.retention_days > 0
                    && last_prune.is_none_or(|t| t.elapsed() >= Duration::from_secs(PRUNE_EVERY_S));
                if prune {
                    last_prune = Some(Instant::now());
                }
                let before = prune.then(|| now.saturating_sub(retention_s));
                lock(shared).tick(now, before);
            }
        }
    }
}
