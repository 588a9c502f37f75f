//! `fleet serve`'s HTTP/1.1 server: the router on hyper's connections, with the bounds
//! `axum::serve` does not set. A client has [`HEADER_READ_TIMEOUT_S`] to send a request's
//! headers (a connection that sends nothing, trickles its headers a byte at a time, or idles
//! between keep-alive requests is closed), and at most [`MAX_CONNECTIONS`] connections are
//! served at once (past that, new ones wait in the listen backlog until one closes).

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use std::sync::Arc;
use std::time::Duration;

/// Seconds a client has to send a request's headers.
pub const HEADER_READ_TIMEOUT_S: u64 = 10;

/// Connections served at once.
pub const MAX_CONNECTIONS: usize = 256;

/// The server's bounds.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Time a client has to send a request's headers.
    pub header_read_timeout: Duration,
    /// Connections served at once (at least 1).
    pub max_connections: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            header_read_timeout: Duration::from_secs(HEADER_READ_TIMEOUT_S),
            max_connections: MAX_CONNECTIONS,
        }
    }
}

/// Serves `router` on `listener` within `limits`, until the future is dropped.
pub async fn serve(listener: tokio::net::TcpListener, router: Router, limits: Limits) {
    let slots = Arc::new(tokio::sync::Semaphore::new(limits.max_connections.max(1)));
    loop {
        let Ok(slot) = slots.clone().acquire_owned().await else {
            return;
        };
        let tcp = match listener.accept().await {
            Ok((tcp, _)) => tcp,
            Err(e) => {
                // Out of file descriptors, or a connection reset before it was taken: the
                // next accept may work; a moment's pause keeps this from spinning.
                tracing::warn!("HTTP accept: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let service = TowerToHyperService::new(router.clone());
        tokio::spawn(async move {
            let mut conn = hyper::server::conn::http1::Builder::new();
            conn.timer(TokioTimer::new())
                .header_read_timeout(limits.header_read_timeout);
            if let Err(e) = conn.serve_connection(TokioIo::new(tcp), service).await {
                tracing::debug!("HTTP connection: {e}");
            }
            drop(slot);
        });
    }
}
