//! `fleet serve`'s HTTP routes: `/` and `/boards/{id}` (the page), `/metrics`,
//! `/api/boards`, `/api/boards/{id}`, `/api/boards/{id}/history` (JSON) and `/inventory.csv`.
//! Read-only: commands stay with the signing tools.
//!
//! The fleet is locked only to copy what a response needs (a snapshot); the page, `/metrics`,
//! the CSV and the API are rendered after the lock is let go, on tokio's blocking pool, so the
//! MQTT link goes on taking statuses meanwhile. At most [`MAX_RENDERS`] such snapshots are held
//! at once.

use super::metrics::render;
use super::page::{board_page, fleet_page, Filter};
use super::shared::{not_found, now_s, off_thread, with, St};
pub use super::shared::{Shared, MAX_HISTORY_ROWS, MAX_RENDERS};
use super::state::{sort_worst_first, BoardView, Fleet};
use axum::extract::{Path, Query, State};
use axum::http::{header, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use std::sync::Arc;

/// Every response's `Content-Security-Policy`: no scripts, frames or fetches; inline style only.
pub const CSP: &str = "default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'";

/// Whether a request with `Host: host` may be answered by a server listening on `listen`. On a
/// loopback address only `localhost`, a loopback address or `listen` itself (any port) are
/// taken: a web page whose name an attacker rebinds to 127.0.0.1 (DNS rebinding) is refused. A
/// server on another address (behind a reverse proxy, or on the LAN) takes any.
pub fn host_ok(listen: std::net::IpAddr, host: Option<&str>) -> bool {
    let Some(host) = host else { return true };
    if !listen.is_loopback() {
        return true;
    }
    let name = match host.strip_prefix('[') {
        Some(rest) => rest.split(']').next().unwrap_or(""),
        None => host.rsplit_once(':').map_or(host, |(n, _)| n),
    };
    name.eq_ignore_ascii_case("localhost")
        || name
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback() || ip == listen)
}

async fn guard(
    State(s): St,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let host = req
        .headers()
        .get(header::HOST)
        .map(|h| h.to_str().unwrap_or("?"));
    let mut resp = match host_ok(s.listen, host) {
        true => next.run(req).await,
        false => (
            StatusCode::MISDIRECTED_REQUEST,
            "this server answers only requests for its loopback address (Host)\n",
        )
            .into_response(),
    };
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        header::HeaderValue::from_static(CSP),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        header::HeaderValue::from_static("nosniff"),
    );
    resp
}

/// The router over `shared`.
pub fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/", get(index))
        .route("/boards/{id}", get(board_html))
        .route("/metrics", get(metrics))
        .route("/api/boards", get(super::api::boards))
        .route("/api/boards/{id}", get(super::api::board))
        .route("/api/boards/{id}/history", get(super::api::history))
        .route("/inventory.csv", get(inventory))
        .layer(axum::middleware::from_fn_with_state(shared.clone(), guard))
        .with_state(shared)
}

/// `render` of every board's view (worst first) and the notes: the fleet is locked only to
/// copy its rows and details; the views are worked out and rendered on tokio's blocking pool,
/// within one of the [`MAX_RENDERS`] permits.
///
/// Errors: a 503 response when shutting down, a 500 when rendering panicked.
async fn render_fleet<T: Send + 'static>(
    s: &Shared,
    render: impl FnOnce(&[BoardView], &[String]) -> T + Send + 'static,
) -> Result<T, Response> {
    let _permit = s
        .renders
        .acquire()
        .await
        .map_err(|_| (StatusCode::SERVICE_UNAVAILABLE, "shutting down\n").into_response())?;
    let (snap, notes) = with(s, |fl| (fl.snapshot(), fl.notes()));
    off_thread(move || {
        let mut boards = snap.views(now_s());
        sort_worst_first(&mut boards);
        render(&boards, &notes)
    })
    .await
}

async fn index(State(s): St, Query(f): Query<Filter>) -> Response {
    match render_fleet(&s, move |boards, notes| fleet_page(boards, &f, notes)).await {
        Ok(p) => Html(p).into_response(),
        Err(r) => r,
    }
}

async fn board_html(State(s): St, Path(id): Path<String>) -> Response {
    let got = with(&s, |fl| {
        let v = fl.board(&id, now_s())?;
        Some((v, fl.history(&id, 200).unwrap_or_default()))
    });
    match got {
        Some((v, h)) => Html(board_page(&v, &h)).into_response(),
        None => not_found(),
    }
}

async fn metrics(State(s): St) -> Response {
    let c = s.cardinality;
    let up = with(&s, Fleet::broker_connected);
    let text = match render_fleet(&s, move |boards, _| render(boards, c)).await {
        Ok(t) => super::metrics::broker_gauge(up) + &t,
        Err(r) => return r,
    };
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    )
        .into_response()
}

/// The inventory: one line per board (board, health, link, last seen, profile, model and the
/// versions), to answer "which boards run X".
pub fn inventory_csv(boards: &[BoardView]) -> Result<Vec<u8>, String> {
    let mut w = csv::Writer::from_writer(Vec::new());
    let head = [
        "board",
        "health",
        "link",
        "last_seen",
        "profile",
        "model",
        "agent",
        "kernel",
        "driver",
        "runtime",
        "firmware",
    ];
    w.write_record(head).map_err(|e| e.to_string())?;
    for v in boards {
        let d = v.detail.clone().unwrap_or_default();
        let mut rec = vec![
            v.row.board.clone(),
            v.row.health.clone(),
            v.link.clone(),
            v.row.last_seen.clone(),
            v.row.profile.clone(),
            v.row.model.clone(),
        ];
        rec.extend(d.versions.pairs().iter().map(|(_, x)| x.to_string()));
        let rec: Vec<String> = rec.iter().map(|c| csv_cell(c)).collect();
        w.write_record(&rec).map_err(|e| e.to_string())?;
    }
    w.into_inner().map_err(|e| e.to_string())
}

/// A cell a spreadsheet will not run as a formula and a terminal will not take as control: its
/// text as the page shows it ([`crate::fleet::show::text`], control and BIDI characters written
/// visibly, at most 256 characters), then one starting `=`, `+`, `-`, `@`, tab, CR or LF gets a
/// leading `'`.
fn csv_cell(s: &str) -> String {
    let s = crate::fleet::show::text(s, 256);
    match s.starts_with(['=', '+', '-', '@', '\t', '\r', '\n']) {
        true => format!("'{s}"),
        false => s.to_string(),
    }
}

async fn inventory(State(s): St) -> Response {
    match render_fleet(&s, |boards, _| inventory_csv(boards)).await {
        Ok(Ok(b)) => ([(header::CONTENT_TYPE, "text/csv; charset=utf-8")], b).into_response(),
        Ok(Err(e)) => (StatusCode::INTERNAL_SERVER_ERROR, e).into_response(),
        Err(r) => r,
    }
}
