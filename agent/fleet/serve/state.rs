//! The fleet as `fleet serve` holds it: `fleet watch`'s rows ([`Table`], with its bounds and
//! eviction order), each status's seal judged against known_boards as `fleet watch` judges it
//! (a replayed status is not shown as current), and for each board whose status is sealed by
//! its key a [`Detail`] whose changes go to the [`History`].

use super::detail::{changes, read_status, severity, Detail};
use super::store::{Event, History};
use crate::fleet::known::KnownBoards;
use crate::fleet::{self, BoardRow, Table};
use crate::model::topics;
use serde::Serialize;
use std::collections::BTreeMap;

/// A board as the API and page show it: `fleet watch`'s row, its link state, the age of its
/// status and (once a status sealed by its key came) its detail.
#[derive(Debug, Clone, Serialize)]
pub struct BoardView {
    /// `fleet watch`'s row (`board`, `availability`, `health`, `identity`, ...).
    #[serde(flatten)]
    pub row: BoardRow,
    /// `online`, `offline`, `stale`, `deaf` or `unknown`.
    pub link: String,
    /// Seconds since the time of its last status (board clock), when known.
    pub status_age_s: Option<i64>,
    /// What a status sealed by its key said.
    pub detail: Option<Detail>,
}

/// How `fleet serve` tells a stale board.
#[derive(Debug, Clone, Copy)]
pub enum Staleness {
    /// As `fleet watch`: three intervals and a minute ([`fleet::stale_reason`]).
    Intervals,
    /// A status older than this many seconds.
    AfterS(u64),
}

/// The fleet's state and its history.
pub struct Fleet {
    root: String,
    table: Table,
    keys: KnownBoards,
    details: BTreeMap<String, Detail>,
    store: Box<dyn History>,
    staleness: Staleness,
    /// Errors of the storage since the last one was logged.
    store_errors: u64,
    /// Boards that sealed a status in this run, and their link row budget: only these get
    /// link rows (availability is unsealed).
    link_rows: BTreeMap<String, Budget>,
    /// The service's own broker link.
    broker: Broker,
}

/// The service's own broker link as the fleet sees it: while it is down, and for
/// [`RECONNECT_QUIET_S`] after it came back (the broker sends every retained status and
/// availability again), no link transitions are recorded: what changed was this service's
/// view, not the boards' links.
#[derive(Debug, Clone, Default)]
struct Broker {
    /// The broker as shown (user info redacted); `None`: up.
    down: Option<String>,
    /// Link rows wait until this time (Unix seconds).
    quiet_until_s: i64,
    /// The link has been up in this run (the first connection is no reconnect).
    was_up: bool,
}

/// Seconds after the service's broker link came back during which no link rows are written.
pub const RECONNECT_QUIET_S: i64 = 30;

/// Link rows one board may write at once (online, stale, offline in a few seconds).
pub const LINK_ROW_BURST: u32 = 3;

/// Past the burst, at most one link row per board per this many seconds: flapping in between
/// is merged (the next row says where the link went).
pub const LINK_ROW_EVERY_S: i64 = 60;

/// A board's link row budget: a token bucket of [`LINK_ROW_BURST`] refilled one per
/// [`LINK_ROW_EVERY_S`].
#[derive(Debug, Clone, Copy)]
struct Budget {
    rows: u32,
    at_s: i64,
}

impl Budget {
    /// Takes one row at `now_s` if the budget has one.
    fn take(&mut self, now_s: i64) -> bool {
        let gained = now_s.saturating_sub(self.at_s) / LINK_ROW_EVERY_S;
        if gained > 0 {
            let rows = u64::from(self.rows).saturating_add(gained.unsigned_abs());
            self.rows = u32::try_from(rows.min(u64::from(LINK_ROW_BURST))).unwrap_or(0);
            self.at_s = self
                .at_s
                .saturating_add(gained.saturating_mul(LINK_ROW_EVERY_S));
        }
        if self.rows == LINK_ROW_BURST {
            self.at_s = now_s;
        }
        let ok = self.rows > 0;
        self.rows = self.rows.saturating_sub(1);
        ok
    }
}

/// A status's time (RFC 3339), Unix seconds.
pub fn time_s(t: &str) -> Option<i64> {
    let (date, clock) = t.split_once('T')?;
    crate::sys::time::unix_from_date_time(date, clock.get(..8)?)
}

impl Fleet {
    /// A fleet under topic `root`, holding at most `max_boards` rows, judging seals against
    /// `keys`, with its history in `store` (whose baselines are loaded now).
    pub fn new(
        root: &str,
        max_boards: usize,
        keys: KnownBoards,
        store: Box<dyn History>,
        staleness: Staleness,
    ) -> Fleet {
        let details = match store.baselines() {
            Ok(b) => b.into_iter().collect(),
            Err(e) => {
                tracing::warn!("{e}: the history starts without baselines");
                BTreeMap::new()
            }
        };
        Fleet {
            root: root.to_string(),
            table: Table::new(max_boards),
            keys,
            details,
            store,
            staleness,
            store_errors: 0,
            link_rows: BTreeMap::new(),
            broker: Broker::default(),
        }
    }

    /// The service's broker link (shown as `broker`, user info redacted) went up or down at
    /// `now_s`. While it is down, and for [`RECONNECT_QUIET_S`] after a reconnect, no link rows
    /// are written.
    pub fn set_broker(&mut self, up: bool, broker: &str, now_s: i64) {
        self.broker.down = (!up).then(|| broker.to_string());
        if up && self.broker.was_up {
            self.broker.quiet_until_s = now_s.saturating_add(RECONNECT_QUIET_S);
        }
        self.broker.was_up |= up;
    }

    /// Whether the service's broker link is up.
    pub fn broker_connected(&self) -> bool {
        self.broker.down.is_none()
    }

    /// The same fleet holding at most `max_unsealed` rows (at least 1) of boards that are
    /// neither in known_boards nor have sealed a status: invented board ids churn only those.
    /// Set before the first message.
    pub fn with_unsealed_cap(mut self, max_unsealed: usize) -> Fleet {
        self.table = Table::with_untrusted_cap(self.table.max_rows(), max_unsealed);
        self
    }

    /// Whether `board` is one the operator knows: its key is in known_boards, or the history
    /// has its baseline. Its row does not count against the cap on unsealed rows.
    fn known(&self, board: &str) -> bool {
        self.keys.is_pinned(board) || self.details.contains_key(board)
    }

    /// Takes one message (a status or availability) received at `now_s`.
    pub fn take(&mut self, topic: &str, payload: &[u8], now_s: i64) {
        let leaf = topic.rsplit('/').next().unwrap_or("");
        let Some(board) = topics::parse_board_leaf(&self.root, topic, leaf) else {
            return;
        };
        if !fleet::board_id_fits(board) {
            self.table.refuse();
            return;
        }
        let board = board.to_string();
        match leaf {
            "status" if payload.is_empty() => self.table.remove(&board),
            "status" => self.take_status(&board, topic, payload, now_s),
            "availability" if !payload.is_empty() => {
                let known = self.known(&board);
                if let Some(row) = self.table.touch(&board, known) {
                    row.availability = String::from_utf8_lossy(&payload[..payload.len().min(64)])
                        .chars()
                        .take(16)
                        .collect();
                }
                self.update_link(&board, now_s);
            }
            _ => {}
        }
    }

    fn take_status(&mut self, board: &str, topic: &str, payload: &[u8], now_s: i64) {
        let trust = self.keys.judge(board, topic, payload);
        let pinned = self.keys.is_pinned(board);
        let known = trust.is_trusted() || self.known(board);
        let Some(row) = self.table.touch(board, known) else {
            return;
        };
        // After a restart the last sealed time the history took is where replays start.
        let baseline_s = self.details.get(board).and_then(|d| d.sealed_s);
        if row.sealed_s.is_none() {
            row.sealed_s = baseline_s;
        }
        let replay = match trust.is_trusted() {
            true => fleet::replay_reason(row, payload),
            false => None,
        };
        // Unlike `fleet watch`, a row that shows a status sealed by the board's key keeps it
        // against anything else: an unsealed status cannot make a failing board look healthy
        // or a silent one fresh here (the identity cell still says what came). Nor can it for a
        // board whose key is pinned but that has not sealed a status in this run yet.
        match (&replay, trust.is_trusted()) {
            (Some(_), _) => {}
            (None, true) => fleet::apply_sealed_status(row, payload),
            (None, false) if row.sealed_s.is_some() || pinned => {}
            (None, false) => fleet::apply_status(row, payload),
        }
        row.identity = match replay {
            Some(_) => "REPLAYED".into(),
            None => trust.word().into(),
        };
        let fresh = replay.is_none() && trust.is_trusted();
        if fresh {
            self.link_rows.entry(board.to_string()).or_insert(Budget {
                rows: LINK_ROW_BURST,
                at_s: now_s,
            });
        }
        row.replayed = replay;
        if fresh && payload.len() <= fleet::MAX_STATUS_BYTES {
            if let Ok(doc) = serde_json::from_slice::<serde_json::Value>(payload) {
                let at_s = doc.get("time").and_then(|t| t.as_str()).and_then(time_s);
                // Not newer than what the history took (a replay across a restart, or the same
                // status twice): no rows.
                let newer = match (at_s, baseline_s) {
                    (_, None) => true,
                    (Some(t), Some(b)) => t > b,
                    (None, Some(_)) => false,
                };
                let prev = self.details.get(board).cloned().unwrap_or_default();
                if newer {
                    let mut next = read_status(&doc, &prev);
                    next.sealed_s = at_s.max(prev.sealed_s);
                    self.commit(board, prev, next, now_s);
                }
            }
        }
        self.update_link(board, now_s);
        self.forget_evicted();
    }

    /// Records what changed of `board` from `prev` to `next` (nothing when nothing did).
    fn commit(&mut self, board: &str, prev: Detail, next: Detail, now_s: i64) {
        let list = changes(&prev, &next);
        if !list.is_empty() || !self.details.contains_key(board) {
            if let Err(e) = self.store.record(board, now_s, &list, &next) {
                self.store_errors += 1;
                if self.store_errors == 1 {
                    tracing::warn!("{e}");
                }
            }
        }
        self.details.insert(board.to_string(), next);
    }

    /// The link state of `row` at `now_s` (`fleet watch`'s LINK cell, with this service's
    /// staleness).
    fn link_of(&self, row: &BoardRow, now_s: i64) -> String {
        link_at(row, self.staleness, now_s)
    }

    /// Sets `board`'s link state in its detail, recording a transition.
    fn update_link(&mut self, board: &str, now_s: i64) {
        let (Some(row), Some(d)) = (self.table.get(board), self.details.get(board)) else {
            return;
        };
        // Not while this service's own link is down or just came back.
        if self.broker.down.is_some() || now_s < self.broker.quiet_until_s {
            return;
        }
        let link = self.link_of(row, now_s);
        // Only for a board that sealed a status in this run, within its budget.
        let Some(budget) = self.link_rows.get_mut(board) else {
            return;
        };
        // `unknown` (no availability seen yet, as after a restart) is this service's knowledge,
        // not the board's link: no transition.
        if d.link != link && link != "unknown" && budget.take(now_s) {
            let mut next = d.clone();
            next.link = link;
            self.commit(board, d.clone(), next, now_s);
        }
    }

    /// Drops the detail of boards whose row the table let go.
    fn forget_evicted(&mut self) {
        if self.details.len() > self.table.len() + 1024 {
            let table = &self.table;
            self.details.retain(|b, _| table.get(b).is_some());
            self.link_rows.retain(|b, _| table.get(b).is_some());
        }
    }

    /// Every board's link state at `now_s` (boards turn stale by time alone), new board keys
    /// written, and history older than `before_s` pruned.
    pub fn tick(&mut self, now_s: i64, before_s: Option<i64>) {
        let boards: Vec<String> = self.details.keys().cloned().collect();
        for b in boards {
            self.update_link(&b, now_s);
        }
        self.keys.save();
        if let Some(t) = before_s {
            match self.store.prune(t) {
                Ok(0) => {}
                Ok(n) => tracing::info!("history: {n} rows older than the retention pruned"),
                Err(e) => tracing::warn!("{e}"),
            }
        }
    }

    /// Every board, worst first (failing, warning, then not online, then by id).
    pub fn boards(&self, now_s: i64) -> Vec<BoardView> {
        let mut out = self.views(now_s);
        sort_worst_first(&mut out);
        out
    }

    /// One board, when held.
    pub fn board(&self, board: &str, now_s: i64) -> Option<BoardView> {
        self.table.get(board).map(|r| self.view(r, now_s))
    }

    fn view(&self, r: &BoardRow, now_s: i64) -> BoardView {
        BoardView {
            row: r.clone(),
            link: self.link_of(r, now_s),
            status_age_s: status_age_s(r, now_s),
            detail: self.details.get(&r.board).cloned(),
        }
    }

    /// `board`'s history, newest first (at most `limit` rows).
    ///
    /// Errors: the storage's.
    pub fn history(&self, board: &str, limit: usize) -> Result<Vec<Event>, String> {
        self.store.history(board, limit)
    }

    /// `board`'s history before the row with id `before` (from the newest when `None`),
    /// newest first, at most `limit` rows.
    ///
    /// Errors: the storage's.
    pub fn history_before(
        &self,
        board: &str,
        limit: usize,
        before: Option<i64>,
    ) -> Result<Vec<Event>, String> {
        self.store.history_before(board, limit, before)
    }

    /// The views of the boards whose id sorts after `after` (from the first when `None`), by
    /// board id, at most `limit`: one page of the API, the rest of the fleet not copied.
    pub fn boards_after(&self, after: Option<&str>, limit: usize, now_s: i64) -> Vec<BoardView> {
        self.snapshot_after(after, limit).views(now_s)
    }

    /// Every board's view, in no order ([`sort_worst_first`] orders it).
    pub fn views(&self, now_s: i64) -> Vec<BoardView> {
        self.snapshot().views(now_s)
    }

    /// Every board's row and detail, copied: what a response over the whole fleet is rendered
    /// from once the lock is let go ([`Snapshot::views`] works out the rest).
    pub fn snapshot(&self) -> Snapshot {
        self.snapshot_after(None, usize::MAX)
    }

    /// [`Self::snapshot`] of the boards whose id sorts after `after` (from the first when
    /// `None`), by board id, at most `limit`.
    pub fn snapshot_after(&self, after: Option<&str>, limit: usize) -> Snapshot {
        let rows = self.table.rows_after(after).take(limit);
        let boards = rows.map(|r| BoardView {
            row: r.clone(),
            link: String::new(),
            status_age_s: None,
            detail: self.details.get(&r.board).cloned(),
        });
        Snapshot {
            boards: boards.collect(),
            staleness: self.staleness,
        }
    }

    /// Notes on what the table leaves out (rows dropped, ids refused, keys not recorded).
    pub fn notes(&self) -> Vec<String> {
        let broker = self.broker.down.as_ref().map(|b| {
            format!(
                "This service is not connected to the broker {b}: what is shown is as last \
                 seen, and boards turn stale here by time alone (see the log)."
            )
        });
        [
            broker,
            self.table.dropped_note(),
            self.table
                .dropped_untrusted_note("--max-unsealed-boards, or max_unsealed_boards in [serve]"),
            self.table.refused_note(),
            self.keys.refused_note(
                "--accept-new-boards N, or accept_new_boards under [serve], takes more; or seed \
                 the service's known_boards with the operator's",
            ),
        ]
        .into_iter()
        .flatten()
        .collect()
    }
}

/// Every board's row and detail as copied under the fleet's lock ([`Fleet::snapshot`]).
pub struct Snapshot {
    boards: Vec<BoardView>,
    staleness: Staleness,
}

impl Snapshot {
    /// The boards' views at `now_s` (link states and status ages worked out), in no order.
    pub fn views(mut self, now_s: i64) -> Vec<BoardView> {
        for v in &mut self.boards {
            v.link = link_at(&v.row, self.staleness, now_s);
            v.status_age_s = status_age_s(&v.row, now_s);
        }
        self.boards
    }
}

/// The link state of `row` at `now_s` (`fleet watch`'s LINK cell, stale by `staleness`).
fn link_at(row: &BoardRow, staleness: Staleness, now_s: i64) -> String {
    let mut r = row.clone();
    r.last_seen = last_status_time(row);
    r.stale = match staleness {
        Staleness::Intervals => fleet::stale_reason(&r.last_seen, r.interval_s, now_s),
        Staleness::AfterS(s) => time_s(&r.last_seen)
            .filter(|t| now_s.saturating_sub(*t) > i64::try_from(s).unwrap_or(i64::MAX))
            .map(|t| format!("its last status is {} s old", now_s - t)),
    };
    fleet::link_cell(&r).to_string()
}

/// Seconds since the time of `r`'s last status, when known.
fn status_age_s(r: &BoardRow, now_s: i64) -> Option<i64> {
    time_s(&last_status_time(r)).map(|t| now_s.saturating_sub(t))
}

/// The time of the row's last status: the newest sealed by the board's key when it has one.
fn last_status_time(r: &BoardRow) -> String {
    match r.sealed_s.and_then(|s| u64::try_from(s).ok()) {
        Some(s) => crate::sys::time::rfc3339_utc(s, 0),
        None => r.last_seen.clone(),
    }
}

/// Orders `boards` worst first (failing, warning, then not online, then by id).
pub fn sort_worst_first(boards: &mut [BoardView]) {
    boards.sort_by(|a, b| {
        rank(b)
            .cmp(&rank(a))
            .then_with(|| a.row.board.cmp(&b.row.board))
    });
}

/// How bad a board looks: its health's severity, and whether it is off its link.
pub fn rank(v: &BoardView) -> (u8, u8) {
    let health = match v.row.health.as_str() {
        "fail" => 4,
        "warn" => 3,
        "ok" => 0,
        _ => 2,
    };
    let link = u8::from(v.link != "online");
    (health.max(severity(&v.row.health)), link)
}
