//! `fleet serve`'s HTTP routes: `/` and `/boards/{id}` (the page), `/metrics`,
//! `/api/boards`, `/api/boards/{id}`, `/api/boards/{id}/history` (JSON) and `/inventory.csv`.
//! Read-only: commands stay with the signing tools.

use super::metrics::{render, Cardinality};
use super::page::{board_page, fleet_page, Filter};
use super::state::Fleet;
use axum::extract::{Path, Query, State};
use axum::http::{header, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde::Deserialize;
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
}

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

/// The most history rows one request returns.
pub const MAX_HISTORY_ROWS: usize = 1000;

type St = State<Arc<Shared>>;

fn now_s() -> i64 {
    crate::action::now_unix_s()
}

fn with<T>(s: &Shared, f: impl FnOnce(&Fleet) -> T) -> T {
    let fleet = s
        .fleet
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    f(&fleet)
}

/// The router over `shared`.
pub fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/", get(index))
        .route("/boards/{id}", get(board_html))
        .route("/metrics", get(metrics))
        .route("/api/boards", get(boards_json))
        .route("/api/boards/{id}", get(board_json))
        .route("/api/boards/{id}/history", get(history_json))
        .route("/inventory.csv", get(inventory))
        .layer(axum::middleware::from_fn_with_state(shared.clone(), guard))
        .with_state(shared)
}

fn not_found() -> Response {
    (StatusCode::NOT_FOUND, "no such board\n").into_response()
}

async fn index(State(s): St, Query(f): Query<Filter>) -> Html<String> {
    Html(with(&s, |fl| {
        fleet_page(&fl.boards(now_s()), &f, &fl.notes())
    }))
}

async fn board_html(State(s): St, Path(id): Path<String>) -> Response {
    with(&s, |fl| match fl.board(&id, now_s()) {
        Some(v) => {
            let h = fl.history(&id, 200).unwrap_or_default();
            Html(board_page(&v, &h)).into_response()
        }
        None => not_found(),
    })
}

async fn metrics(State(s): St) -> Response {
    let text = with(&s, |fl| render(&fl.boards(now_s()), s.cardinality));
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    )
        .into_response()
}

async fn boards_json(State(s): St) -> Response {
    with(&s, |fl| Json(fl.boards(now_s())).into_response())
}

async fn board_json(State(s): St, Path(id): Path<String>) -> Response {
    with(&s, |fl| match fl.board(&id, now_s()) {
        Some(v) => Json(v).into_response(),
        None => not_found(),
    })
}

/// `/api/boards/{id}/history?limit=N` (at most [`MAX_HISTORY_ROWS`]).
#[derive(Deserialize)]
struct Limit {
    limit: Option<usize>,
}

async fn history_json(State(s): St, Path(id): Path<String>, Query(l): Query<Limit>) -> Response {
    let n = l.limit.unwrap_or(200).min(MAX_HISTORY_ROWS);
    with(&s, |fl| match fl.history(&id, n) {
        Ok(h) => Json(h).into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e).into_response(),
    })
}

/// The inventory: one line per board (board, health, link, last seen, profile, model and the
/// versions), to answer "which boards run X".
pub fn inventory_csv(fl: &Fleet) -> Result<Vec<u8>, String> {
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
    for v in fl.boards(now_s()) {
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
    match with(&s, inventory_csv) {
        Ok(b) => ([(header::CONTENT_TYPE, "text/csv; charset=utf-8")], b).into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e).into_response(),
    }
}
