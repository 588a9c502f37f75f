//! `fleet serve`'s JSON API: `/api/boards` a page at a time (`limit`, `after`),
//! `/api/boards/{id}`, and `/api/boards/{id}/history` a page at a time (`limit`, `before`).
//! A full page carries a `Link: <…>; rel="next"` header with the next page's URL; a shorter
//! page is the last.

use super::page::path_id;
use super::shared::{not_found, now_s, off_thread, with, St, MAX_HISTORY_ROWS};
use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;

/// Boards one page of `/api/boards` holds unless told (`limit`).
pub const DEFAULT_PAGE_BOARDS: usize = 1000;

/// The most boards one page of `/api/boards` holds.
pub const MAX_PAGE_BOARDS: usize = 10_000;

/// History rows one page holds unless told (`limit`).
pub const DEFAULT_HISTORY_ROWS: usize = 200;

/// `/api/boards?limit=N&after=ID`: at most N boards (default [`DEFAULT_PAGE_BOARDS`], at most
/// [`MAX_PAGE_BOARDS`]) whose id sorts after ID, by board id.
#[derive(Deserialize)]
pub struct BoardsQuery {
    limit: Option<usize>,
    after: Option<String>,
}

/// `/api/boards/{id}/history?limit=N&before=ROW`: at most N rows (default
/// [`DEFAULT_HISTORY_ROWS`], at most [`MAX_HISTORY_ROWS`]) recorded before row id ROW, newest
/// first.
#[derive(Deserialize)]
pub struct HistoryQuery {
    limit: Option<usize>,
    before: Option<i64>,
}

/// A JSON error: `{"error": message}` with `code`.
pub fn json_error(code: StatusCode, message: &str) -> Response {
    (code, Json(serde_json::json!({ "error": message }))).into_response()
}

/// A query string that does not parse: 400 with the reason as JSON (not axum's plain text).
fn bad_query(e: &QueryRejection) -> Response {
    json_error(StatusCode::BAD_REQUEST, &e.body_text())
}

/// `body` as JSON with, when `next` is given, a `Link` header to it.
fn json_page(body: Vec<u8>, next: Option<String>) -> Response {
    let mut r = ([(header::CONTENT_TYPE, "application/json")], body).into_response();
    if let Some(url) =
        next.and_then(|u| HeaderValue::from_str(&format!("<{u}>; rel=\"next\"")).ok())
    {
        r.headers_mut().insert(header::LINK, url);
    }
    r
}

/// `GET /api/boards`: one page of boards by id.
pub async fn boards(State(s): St, q: Result<Query<BoardsQuery>, QueryRejection>) -> Response {
    let q = match q {
        Ok(Query(q)) => q,
        Err(e) => return bad_query(&e),
    };
    let n = q
        .limit
        .unwrap_or(DEFAULT_PAGE_BOARDS)
        .clamp(1, MAX_PAGE_BOARDS);
    let Ok(_permit) = s.renders.acquire().await else {
        return (StatusCode::SERVICE_UNAVAILABLE, "shutting down\n").into_response();
    };
    let snap = with(&s, |fl| fl.snapshot_after(q.after.as_deref(), n));
    let page = off_thread(move || {
        let page = snap.views(now_s());
        let next = match page.len() == n {
            true => page
                .last()
                .map(|v| format!("/api/boards?after={}&limit={n}", path_id(&v.row.board))),
            false => None,
        };
        serde_json::to_vec(&page).map(|body| (body, next))
    });
    match page.await {
        Ok(Ok((body, next))) => json_page(body, next),
        Ok(Err(e)) => (StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")).into_response(),
        Err(r) => r,
    }
}

/// `GET /api/boards/{id}`: one board.
pub async fn board(State(s): St, Path(id): Path<String>) -> Response {
    match with(&s, |fl| fl.board(&id, now_s())) {
        Some(v) => Json(v).into_response(),
        None => not_found(),
    }
}

/// `GET /api/boards/{id}/history`: one page of the board's history, newest first; 404 for a
/// board neither held nor in the history.
pub async fn history(
    State(s): St,
    Path(id): Path<String>,
    q: Result<Query<HistoryQuery>, QueryRejection>,
) -> Response {
    let q = match q {
        Ok(Query(q)) => q,
        Err(e) => return bad_query(&e),
    };
    let n = q
        .limit
        .unwrap_or(DEFAULT_HISTORY_ROWS)
        .clamp(1, MAX_HISTORY_ROWS);
    let got = with(&s, |fl| {
        let held = fl.board(&id, now_s()).is_some();
        fl.history_before(&id, n, q.before).map(|rows| (held, rows))
    });
    match got {
        // Neither held nor in the history: as `/api/boards/{id}`.
        Ok((false, rows)) if rows.is_empty() && q.before.is_none() => not_found(),
        Ok((_, rows)) => {
            let next = match rows.len() == n {
                true => rows.last().map(|e| {
                    format!(
                        "/api/boards/{}/history?before={}&limit={n}",
                        path_id(&id),
                        e.id
                    )
                }),
                false => None,
            };
            match serde_json::to_vec(&rows) {
                Ok(body) => json_page(body, next),
                Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")).into_response(),
            }
        }
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e).into_response(),
    }
}
