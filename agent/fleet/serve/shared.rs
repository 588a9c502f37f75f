//! What `fleet serve`'s routes share ([`Shared`]: the fleet under its lock) and the helpers the
//! page routes (`http`) and the JSON API (`api`) both use: taking a copy under the lock,
//! rendering on the blocking pool, the 404.

use super::metrics::Cardinality;
use super::state::Fleet;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use std::sync::{Arc, Mutex};

/// What the routes share: the fleet, the metrics' cardinality and the listen address.
pub struct Shared {
    /// The fleet (the MQTT task writes, the routes read).
    pub fleet: Mutex<Fleet>,
    /// Which boards get per-board series.
    pub cardinality: Cardinality,
    /// The address the server listens on: on loopback, only requests whose `Host` names
    /// loopback or this address are answered ([`host_ok`]).
    pub listen: std::net::IpAddr,
    /// Snapshots of the whole fleet held at once (the rest wait): [`MAX_RENDERS`].
    pub renders: tokio::sync::Semaphore,
}

/// Responses over the whole fleet (page, `/metrics`, CSV, a page of the API) rendered at once;
/// each holds a copy of what it shows.
pub const MAX_RENDERS: usize = 2;

impl Shared {
    /// `fleet` shared by the routes, with `cardinality` for `/metrics`, served on `listen`.
    pub fn new(fleet: Fleet, cardinality: Cardinality, listen: std::net::IpAddr) -> Shared {
        Shared {
            fleet: Mutex::new(fleet),
            cardinality,
            listen,
            renders: tokio::sync::Semaphore::new(MAX_RENDERS),
        }
    }
}

/// The most history rows one request returns.
pub const MAX_HISTORY_ROWS: usize = 1000;

pub(super) type St = State<Arc<Shared>>;

pub(super) fn now_s() -> i64 {
    crate::action::now_unix_s()
}

/// `f` of the fleet, under its lock: only to copy what a response needs.
pub(super) fn with<T>(s: &Shared, f: impl FnOnce(&Fleet) -> T) -> T {
    let fleet = s
        .fleet
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    f(&fleet)
}

pub(super) fn not_found() -> Response {
    (StatusCode::NOT_FOUND, "no such board\n").into_response()
}

/// Runs `render` on tokio's blocking pool (the runtime, and the MQTT link on it, goes on).
///
/// Errors: a 500 response when `render` panicked.
pub(super) async fn off_thread<T: Send + 'static>(
    render: impl FnOnce() -> T + Send + 'static,
) -> Result<T, Response> {
    tokio::task::spawn_blocking(render).await.map_err(|e| {
        tracing::warn!("rendering a response: {e}");
        (StatusCode::INTERNAL_SERVER_ERROR, "rendering failed\n").into_response()
    })
}
