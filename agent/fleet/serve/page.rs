//! The server-rendered page: the fleet table worst first with its counts and filters (GET
//! query: `health`, `check`, `version`, `q`), and each board's page. No JavaScript. Every
//! string a board sent is hostile: it goes through [`show`] (control, BIDI and invisible
//! characters written out as escapes, cut to a width) and then maud's HTML escaping.

use super::metrics::link_word;
use super::state::BoardView;
use super::store::Event;
use crate::fleet::show;
use maud::{html, Markup, DOCTYPE};
use serde::Deserialize;
use std::collections::BTreeMap;

/// The most rows the fleet page lists (worst first); the counts cover every board, and the
/// filters narrow the list.
pub const MAX_PAGE_ROWS: usize = 2000;

/// The fleet table's filters, as a GET query.
#[derive(Debug, Default, Deserialize)]
pub struct Filter {
    /// `ok`, `warn`, `fail`, or empty for all.
    #[serde(default)]
    pub health: String,
    /// A check id that warns or fails on the board.
    #[serde(default)]
    pub check: String,
    /// Text one of the board's versions contains.
    #[serde(default)]
    pub version: String,
    /// Text the board id, profile, model or a finding's id contains.
    #[serde(default)]
    pub q: String,
}

impl Filter {
    /// Whether `v` passes every filter set.
    pub fn keeps(&self, v: &BoardView) -> bool {
        let d = v.detail.clone().unwrap_or_default();
        let has = |hay: &str, needle: &str| hay.to_lowercase().contains(&needle.to_lowercase());
        (self.health.is_empty() || v.row.health == self.health)
            && (self.check.is_empty()
                || d.checks
                    .get(&self.check)
                    .is_some_and(|s| matches!(s.as_str(), "warn" | "fail")))
            && (self.version.is_empty()
                || d.versions
                    .pairs()
                    .iter()
                    .any(|(_, x)| has(x, &self.version)))
            && (self.q.is_empty()
                || [&v.row.board, &v.row.profile, &v.row.model]
                    .iter()
                    .any(|x| has(x, &self.q))
                || v.row.worst.iter().any(|w| has(w, &self.q)))
    }
}

/// A board id in a URL path: every byte outside `[A-Za-z0-9_.-]` percent-encoded.
pub fn path_id(id: &str) -> String {
    let mut out = String::new();
    for b in id.bytes() {
        match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'_' | b'-' | b'.' => out.push(b as char),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

fn t(s: &str, width: usize) -> String {
    show::text(s, width)
}

fn layout(title: &str, body: Markup) -> String {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                title { (title) }
                style { "body{font-family:sans-serif;margin:1em}table{border-collapse:collapse}\
                    td,th{border:1px solid #ccc;padding:2px 6px;text-align:left}pre{white-space:pre-wrap}\
                    .fail{background:#fdd}.warn{background:#ffd}.offline,.stale{color:#888}" }
            }
            body { (body) }
        }
    }
    .into_string()
}

/// The fleet page: counts, the filter form, and the boards `filter` keeps, worst first.
pub fn fleet_page(boards: &[BoardView], filter: &Filter, notes: &[String]) -> String {
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for v in boards {
        *counts.entry(v.row.health.as_str()).or_default() += 1;
        *counts.entry(v.link.as_str()).or_default() += 1;
    }
    let kept: Vec<&BoardView> = boards.iter().filter(|v| filter.keeps(v)).collect();
    let body = html! {
        h1 { "Fleet" }
        p id="counts" {
            "boards " span id="count-all" { (boards.len()) }
            @for k in ["fail", "warn", "ok", "online", "offline", "stale"] {
                " · " (k) " " span id={ "count-" (k) } { (counts.get(k).copied().unwrap_or(0)) }
            }
            " · shown " span id="count-shown" { (kept.len()) }
        }
        @if kept.len() > MAX_PAGE_ROWS {
            p.note { "The first " (MAX_PAGE_ROWS) " (worst first) are listed: filter to narrow the list." }
        }
        @for n in notes { p.note { (t(n, 400)) } }
        form method="get" action="/" {
            select name="health" {
                @for h in ["", "fail", "warn", "ok"] {
                    option value=(h) selected[filter.health == h] { @if h.is_empty() { "any health" } @else { (h) } }
                }
            }
            " " input name="check" placeholder="check id" value=(t(&filter.check, 128));
            " " input name="version" placeholder="version" value=(t(&filter.version, 128));
            " " input name="q" placeholder="text" value=(t(&filter.q, 128));
            " " button type="submit" { "Filter" }
        }
        table id="boards" {
            tr { th{"Board"} th{"Health"} th{"Link"} th{"Identity"} th{"Profile"} th{"Agent"}
                 th{"CMA free"} th{"SoC °C"} th{"Last seen"} th{"Worst"} }
            @for v in kept.iter().take(MAX_PAGE_ROWS) {
                tr class={ "board " (t(&v.row.health, 12)) } data-board=(t(&v.row.board, 128)) {
                    td { a href={ "/boards/" (path_id(&v.row.board)) } { (show::id(&v.row.board, 64)) } }
                    td.health { (t(&v.row.health, 12)) }
                    td class=(link_word(&v.link)) { (t(&v.link, 16)) }
                    td { (t(&v.row.identity, 16)) }
                    td { (t(&v.row.profile, 32)) }
                    td { (t(&v.detail.as_ref().map(|d| d.versions.agent.clone()).unwrap_or_default(), 24)) }
                    td { (v.row.cma_free_bytes.map(crate::parse::size::human_bytes).unwrap_or_else(|| "-".into())) }
                    td { (v.row.soc_temp_c.map(|c| format!("{c:.1}")).unwrap_or_else(|| "-".into())) }
                    td { (t(&crate::fleet::whole_seconds(&v.row.last_seen), 32)) }
                    td.worst { (t(&v.row.worst.iter().take(3).cloned().collect::<Vec<_>>().join(", "), 160)) }
                }
            }
        }
        p { a href="/inventory.csv" { "inventory.csv" } " · " a href="/api/boards" { "JSON" } " · " a href="/metrics" { "metrics" } }
    };
    layout("npu-agent fleet", body)
}

/// One board's page: its row, findings (evidence, remedy, fixable), versions, history
/// timeline and last commands.
pub fn board_page(v: &BoardView, history: &[Event]) -> String {
    let d = v.detail.clone().unwrap_or_default();
    let id = show::id(&v.row.board, 64);
    let body = html! {
        p { a href="/" { "← fleet" } }
        h1 id="board" { (id) }
        p { "health " span id="health" { (t(&v.row.health, 12)) } " · link " (t(&v.link, 16))
            " · identity " (t(&v.row.identity, 16)) " · last seen " (t(&v.row.last_seen, 40)) }
        @if let Some(r) = &v.row.replayed { p.warn { (t(r, 300)) } }
        h2 { "Versions" }
        table { @for (k, x) in d.versions.pairs() { tr { th { (k) } td { (t(x, 64)) } } } }
        h2 { "Findings" }
        @if v.detail.is_none() { p { "No status sealed by this board's key yet." } }
        @for f in &d.findings {
            div class={ "finding " (t(&f.status, 8)) } id={ "finding-" (t(&f.id, 128)) } {
                h3 { (t(&f.id, 128)) " " (t(&f.status, 8)) @if f.fixable { " · fixable (fleet send fix)" } }
                p.summary { (t(&f.summary, 600)) }
                @if !f.remedy.is_empty() { pre.remedy { (t(&f.remedy, 600)) } }
                @if !f.evidence.is_empty() {
                    ul.evidence { @for e in &f.evidence {
                        li { code { (t(&e.file, 128)) @if let Some(l) = e.line { ":" (l) } } " " (t(&e.text, 300)) }
                    } }
                }
            }
        }
        h2 { "Last commands" }
        table id="commands" {
            tr { th{"Time"} th{"Action"} th{"State"} th{"Command id"} th{"Detail"} }
            @for c in d.commands.iter().rev() {
                tr { td{(t(&c.time, 40))} td{(t(&c.action, 32))} td{(t(&c.status, 16))} td{(t(&c.cmd_id, 64))} td{(t(&c.detail, 300))} }
            }
        }
        h2 { "History" }
        table id="history" {
            tr { th{"Time"} th{"Change"} th{"Subject"} th{"From"} th{"To"} th{"Summary"} }
            @for e in history {
                tr {
                    td { (crate::sys::time::rfc3339_utc(u64::try_from(e.at_s).unwrap_or(0), 0)) }
                    td { (t(&e.change.kind, 16)) } td { (t(&e.change.subject, 128)) }
                    td { (t(&e.change.previous, 64)) } td { (t(&e.change.value, 64)) }
                    td { (t(&e.change.summary, 300)) }
                }
            }
        }
    };
    layout(&format!("{id} · npu-agent fleet"), body)
}
