//! `fleet watch`'s rows: what one board's status and availability show, kept small whatever
//! the broker sends. A status over [`MAX_STATUS_BYTES`] is not parsed (its row says `too
//! large`), each text cell keeps at most [`MAX_CELL_CHARS`] characters and each list
//! [`MAX_LISTED`] entries, the payload is dropped once parsed, and the [`Table`] holds at most
//! [`MAX_ROWS`] rows (`--max-rows`): past that the least recently seen row goes, boards without a trusted
//! status first, and a note says how many went. A sealed status older than the one the row
//! shows (a replay) is not shown as current: the row keeps its data and says `REPLAYED`.

use super::show;
use super::*;

/// One board's row in `fleet watch`.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct BoardRow {
    /// Board id.
    pub board: String,
    /// `online` / `offline` / `unknown` (no availability seen).
    pub availability: String,
    /// Health from the status.
    pub health: String,
    /// Profile id.
    pub profile: String,
    /// Model.
    pub model: String,
    /// The agent's version (`agent_version` of the status).
    pub agent_version: String,
    /// `CmaFree`, bytes.
    pub cma_free_bytes: Option<u64>,
    /// `CmaTotal`, bytes.
    pub cma_total_bytes: Option<u64>,
    /// Hottest thermal zone, degrees C (`soc_temp_c`).
    pub soc_temp_c: Option<f64>,
    /// Under-voltage now (`undervoltage_now`), when the board has a way to tell.
    pub undervoltage_now: Option<bool>,
    /// Failing and warning checks, most severe first.
    pub worst: Vec<String>,
    /// Firing checks whose finding carries steps `fix` can carry out (`fleet send fix`).
    pub fixable: Vec<String>,
    /// Status time (RFC 3339).
    pub last_seen: String,
    /// MQTT session counter.
    pub session: u64,
    /// The status's `commands`: `subscribed`, `subscribing`, `not subscribed` (a deaf board:
    /// online, but the broker refused its command subscription), or empty (an older agent).
    pub commands: String,
    /// Seconds between the board's statuses (`interval_s`), when it says.
    #[serde(skip)]
    pub interval_s: Option<u64>,
    /// Why the board is stale ([`super::stale_reason`]), when it is: `LINK` says `stale`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stale: Option<String>,
    /// Whose the status is ([`super::known::Trust::word`]): `signed` (the key known for the
    /// board), `new key` (first seen, now recorded), `new unsaved`, `KEY CHANGED`, `UNSIGNED`,
    /// `BAD SIG`; `REPLAYED` while the last status sealed by the board's key was older than the
    /// one the row shows.
    pub identity: String,
    /// Why the last status was not shown ([`replay_reason`]), when it was a replay.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub replayed: Option<String>,
    /// When the row was last touched, in the [`Table`]'s order.
    #[serde(skip)]
    pub(super) seq: u64,
    /// The row has a status sealed by a key taken as the board's.
    #[serde(skip)]
    pub(super) trusted: bool,
    /// The time of the newest status sealed by the board's key, Unix seconds (what a replay
    /// is told by: a forged status's time does not count).
    #[serde(skip)]
    pub(super) sealed_s: Option<i64>,
}

/// The largest status `fleet watch` parses, bytes (an agent's is about 2 KB; its largest
/// well under this).
pub const MAX_STATUS_BYTES: usize = 256 << 10;

/// The most characters a row keeps of one text field of a status.
pub const MAX_CELL_CHARS: usize = 128;

/// The most entries a row keeps of `worst` and of `fixable`.
pub const MAX_LISTED: usize = 16;

/// The most rows `fleet watch` holds unless told (`--max-rows`).
pub const MAX_ROWS: usize = 20_000;

/// `s` cut to [`MAX_CELL_CHARS`] characters.
fn capped(mut s: String) -> String {
    if let Some((at, _)) = s.char_indices().nth(MAX_CELL_CHARS) {
        s.truncate(at);
    }
    s
}

#[derive(Debug, Deserialize)]
pub(super) struct LightFinding {
    id: String,
    status: String,
    #[serde(default)]
    fix: Option<serde::de::IgnoredAny>,
}

/// The metrics a row shows (the rest is skipped unparsed).
#[derive(Debug, Default, Deserialize)]
struct LightMetrics {
    #[serde(default)]
    cma_free_bytes: Value,
    #[serde(default)]
    cma_total_bytes: Value,
    #[serde(default)]
    soc_temp_c: Value,
    #[serde(default)]
    undervoltage_now: Value,
}

#[derive(Debug, Deserialize)]
pub(super) struct LightStatus {
    #[serde(default)]
    health: String,
    #[serde(default)]
    profile: String,
    #[serde(default)]
    model: String,
    #[serde(default)]
    agent_version: String,
    #[serde(default)]
    time: String,
    #[serde(default)]
    session: u64,
    #[serde(default)]
    commands: String,
    #[serde(default)]
    interval_s: Option<u64>,
    #[serde(default)]
    findings: Vec<LightFinding>,
    #[serde(default)]
    metrics: LightMetrics,
}

/// Folds one status payload into a row, keeping only what the row shows (a status over
/// [`MAX_STATUS_BYTES`] is not parsed: the row says `too large`).
pub fn apply_status(row: &mut BoardRow, payload: &[u8]) {
    if payload.len() > MAX_STATUS_BYTES {
        row.health = "too large".into();
        return;
    }
    let Ok(s) = serde_json::from_slice::<LightStatus>(payload) else {
        row.health = "unparsable".into();
        return;
    };
    row.health = capped(s.health);
    row.profile = capped(s.profile);
    row.model = capped(s.model);
    row.agent_version = capped(s.agent_version);
    row.last_seen = capped(s.time);
    row.session = s.session;
    row.commands = capped(s.commands);
    row.interval_s = s.interval_s;
    row.cma_free_bytes = s.metrics.cma_free_bytes.as_u64();
    row.cma_total_bytes = s.metrics.cma_total_bytes.as_u64();
    row.soc_temp_c = s.metrics.soc_temp_c.as_f64();
    row.undervoltage_now = s.metrics.undervoltage_now.as_bool();
    row.fixable = s
        .findings
        .iter()
        .filter(|f| f.fix.is_some() && matches!(f.status.as_str(), "fail" | "warn"))
        .take(MAX_LISTED)
        .map(|f| capped(f.id.clone()))
        .collect();
    let mut worst: Vec<(u8, String)> = s
        .findings
        .into_iter()
        .filter_map(|f| match f.status.as_str() {
            "fail" => Some((0, format!("{} fail", capped(f.id)))),
            "warn" => Some((1, format!("{} warn", capped(f.id)))),
            _ => None,
        })
        .collect();
    worst.sort();
    row.worst = worst.into_iter().take(MAX_LISTED).map(|(_, s)| s).collect();
}

/// A status's time, Unix seconds, when it has one.
fn status_time_s(time: &str) -> Option<i64> {
    let (date, clock) = time.split_once('T')?;
    crate::sys::time::unix_from_date_time(date, clock.get(..8)?)
}

/// Why `payload`, sealed by the board's key, is a replay, if it is: its `time` is older than
/// that of the newest status sealed by that key the row has shown (a board's statuses only
/// move forward).
pub fn replay_reason(row: &BoardRow, payload: &[u8]) -> Option<String> {
    #[derive(Deserialize)]
    struct TimeOnly {
        #[serde(default)]
        time: String,
    }
    if payload.len() > MAX_STATUS_BYTES {
        return None;
    }
    let t = serde_json::from_slice::<TimeOnly>(payload).ok()?.time;
    let (new_s, shown_s) = (status_time_s(&t)?, row.sealed_s?);
    (new_s < shown_s).then(|| {
        format!(
            "a status sealed by the board's key from {} came after one {} s newer: a replay, \
             not shown",
            show::text(&t, 40),
            shown_s - new_s
        )
    })
}

/// Folds a status sealed by the board's key into its row ([`apply_status`]), its time now the
/// one replays are told by.
pub fn apply_sealed_status(row: &mut BoardRow, payload: &[u8]) {
    apply_status(row, payload);
    row.sealed_s = status_time_s(&row.last_seen).max(row.sealed_s);
}

/// Every board's row, at most `max_rows` (least recently seen out first, boards without a
/// trusted status before the others; of those at most `max_untrusted`), and how many went.
#[derive(Debug)]
pub struct Table {
    rows: BTreeMap<String, BoardRow>,
    /// Row ids by `seq`: [untrusted, trusted].
    order: [BTreeMap<u64, String>; 2],
    next: u64,
    max_rows: usize,
    /// The most rows of boards without a trusted status (at most `max_rows`).
    max_untrusted: usize,
    dropped: u64,
    /// Rows of boards without a trusted status dropped at `max_untrusted`.
    dropped_untrusted: u64,
    /// Messages under a board id no agent could have: no row, and the list is still whole.
    refused: u64,
}

impl Default for Table {
    fn default() -> Table {
        Table::new(MAX_ROWS)
    }
}

impl Table {
    /// An empty table of at most `max_rows` rows.
    pub fn new(max_rows: usize) -> Table {
        Table::with_untrusted_cap(max_rows, max_rows)
    }

    /// An empty table of at most `max_rows` rows, of which at most `max_untrusted` (at least 1)
    /// are of boards without a trusted status: a flood of invented board ids churns only
    /// those, never evicts a trusted row and never fills the table.
    pub fn with_untrusted_cap(max_rows: usize, max_untrusted: usize) -> Table {
        let max_rows = max_rows.max(1);
        Table {
            rows: BTreeMap::new(),
            order: Default::default(),
            next: 0,
            max_rows,
            max_untrusted: max_untrusted.clamp(1, max_rows),
            dropped: 0,
            dropped_untrusted: 0,
            refused: 0,
        }
    }

    /// `board`'s row, made (availability `unknown`) when new and marked as just seen;
    /// `trusted`: the message is sealed by the board's key (a row once trusted stays so). A new
    /// untrusted row past the cap on them replaces the least recently seen of them. `None` when
    /// the table is full of trusted rows and this one is not: it is dropped.
    pub fn touch(&mut self, board: &str, trusted: bool) -> Option<&mut BoardRow> {
        self.next += 1;
        let seq = self.next;
        if !self.rows.contains_key(board) {
            let untrusted_full = self.order[0].len() >= self.max_untrusted;
            let evict = match (self.rows.len() >= self.max_rows, trusted) {
                // At the cap on untrusted rows (below the table's): the least recently seen of
                // them goes, counted on its own.
                (false, false) if untrusted_full => {
                    if let Some((_, gone)) = self.order[0].pop_first() {
                        self.rows.remove(&gone);
                        self.dropped_untrusted += 1;
                    }
                    None
                }
                (false, _) => None,
                (true, true) => Some(self.order[0].first_key_value().map_or(1, |_| 0)),
                (true, false) if self.order[0].is_empty() => {
                    self.dropped += 1;
                    return None;
                }
                (true, false) => Some(0),
            };
            if let Some(class) = evict {
                if let Some((_, gone)) = self.order[class].pop_first() {
                    self.rows.remove(&gone);
                    self.dropped += 1;
                }
            }
            let row = BoardRow {
                board: board.to_string(),
                availability: "unknown".into(),
                ..BoardRow::default()
            };
            self.rows.insert(board.to_string(), row);
        }
        let row = self.rows.get_mut(board)?;
        self.order[usize::from(row.trusted)].remove(&row.seq);
        row.trusted |= trusted;
        row.seq = seq;
        self.order[usize::from(row.trusted)].insert(seq, board.to_string());
        Some(row)
    }

    /// Takes `board`'s row out (an empty retained status), unless the row shows a status sealed
    /// by the board's key: anyone can publish an empty status, and taking such a row out would
    /// forget the newest sealed time that tells a replayed status from a current one.
    pub fn remove(&mut self, board: &str) {
        if self.rows.get(board).is_some_and(|r| r.sealed_s.is_some()) {
            return;
        }
        if let Some(r) = self.rows.remove(board) {
            self.order[usize::from(r.trusted)].remove(&r.seq);
        }
    }

    /// Counts a message whose board id no agent could have (too long): not kept.
    pub fn refuse(&mut self) {
        self.refused += 1;
    }

    /// How many messages came under board ids no agent could have, when some did.
    pub fn refused_note(&self) -> Option<String> {
        (self.refused > 0).then(|| {
            format!(
                "{} message(s) under a board id longer than any agent may have (128 bytes) were \
                 left out",
                self.refused
            )
        })
    }

    /// `board`'s row, if held.
    pub fn get(&self, board: &str) -> Option<&BoardRow> {
        self.rows.get(board)
    }

    /// The rows, by board id.
    pub fn rows(&self) -> impl Iterator<Item = &BoardRow> {
        self.rows.values()
    }

    /// The rows whose board id sorts after `after` (every row when `None`), by board id.
    pub fn rows_after<'a>(&'a self, after: Option<&str>) -> impl Iterator<Item = &'a BoardRow> {
        use std::ops::Bound;
        let lo = after.map_or(Bound::Unbounded, Bound::Excluded);
        self.rows
            .range::<str, _>((lo, Bound::Unbounded))
            .map(|(_, r)| r)
    }

    /// How many rows of boards without a trusted status are held.
    pub fn untrusted_len(&self) -> usize {
        self.order[0].len()
    }

    /// Why boards without a trusted status are missing, when some went at the cap on them;
    /// `flag`: the option that sets it.
    pub fn dropped_untrusted_note(&self, flag: &str) -> Option<String> {
        (self.dropped_untrusted > 0).then(|| {
            format!(
                "a row of a board without a status sealed by its key was dropped {} times: at \
                 most {} such rows are held ({flag}; boards whose key is in known_boards are not \
                 counted)",
                self.dropped_untrusted, self.max_untrusted
            )
        })
    }

    /// The rows, by board id, taken out.
    pub fn into_rows(self) -> Vec<BoardRow> {
        self.rows.into_values().collect()
    }

    /// The most rows it holds.
    pub fn max_rows(&self) -> usize {
        self.max_rows
    }

    /// How many rows are held.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// No row is held.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// Why boards are missing from the table, when some went.
    pub fn dropped_note(&self) -> Option<String> {
        (self.dropped > 0).then(|| {
            format!(
                "a board's row was dropped or not made {} times: fleet watch holds at most {} \
                 rows (--max-rows; the least recently seen go first, boards without a status \
                 sealed by their key before the others)",
                self.dropped, self.max_rows
            )
        })
    }
}

/// An RFC 3339 time without its fraction of a second (`2026-11-30T18:08:27.123456789Z` ->
/// `2026-11-30T18:08:27Z`); other text is returned as it is.
pub fn whole_seconds(rfc3339: &str) -> String {
    match rfc3339.split_once('.') {
        Some((head, frac)) if head.len() == 19 && head.as_bytes()[10] == b'T' => {
            let zone = frac.trim_start_matches(|c: char| c.is_ascii_digit());
            format!("{head}{zone}")
        }
        _ => rfc3339.to_string(),
    }
}

/// The LINK cell: the availability, or `deaf` for a board online whose command subscription
/// the broker refused (it publishes, but hears no command).
pub(super) fn link_cell(r: &BoardRow) -> &str {
    match (r.availability.as_str(), r.commands.as_str()) {
        (a, _) if a != "offline" && r.stale.is_some() => "stale",
        ("online", "not subscribed") => "deaf",
        (a, _) => a,
    }
}

/// Marks each row stale, or not, at `now_s` ([`super::stale_reason`]).
pub fn mark_stale(rows: &mut [BoardRow], now_s: i64) {
    for r in rows {
        r.stale = super::stale_reason(&r.last_seen, r.interval_s, now_s);
    }
}

/// The widest WORST cell, characters (three findings' ids and verdicts).
pub const WORST_WIDTH: usize = 160;

/// Renders rows as a table.
pub fn render_rows(rows: &[BoardRow]) -> String {
    let mut out = format!(
        "{:<24} {:<8} {:<11} {:<6} {:<14} {:<10} {:>10} {:>6} {:<3} {:>3} {:<20} {}
",
        "BOARD",
        "LINK",
        "IDENTITY",
        "HEALTH",
        "PROFILE",
        "VERSION",
        "CMA_FREE",
        "SOC_C",
        "UV",
        "FIX",
        "LAST_SEEN",
        "WORST"
    );
    for r in rows {
        let cma = r
            .cma_free_bytes
            .map(crate::parse::size::human_bytes)
            .unwrap_or_else(|| "-".into());
        let worst = if r.worst.is_empty() {
            "-".to_string()
        } else {
            r.worst
                .iter()
                .take(3)
                .cloned()
                .collect::<Vec<_>>()
                .join(", ")
        };
        let soc = r
            .soc_temp_c
            .map(|t| format!("{t:.1}"))
            .unwrap_or_else(|| "-".into());
        let uv = match r.undervoltage_now {
            Some(true) => "YES",
            Some(false) => "no",
            None => "-",
        };
        out.push_str(&format!(
            "{:<24} {:<8} {:<11} {:<6} {:<14} {:<10} {:>10} {:>6} {:<3} {:>3} {:<20} {}
",
            // Other boards' text is escaped and cut here ([`super::show`]): a status or a
            // topic cannot clear the screen, add rows, hide a column or pass for another board
            // (the filter on stdout passes home/clear for this view's own use).
            show::id(&r.board, 24),
            show::text(link_cell(r), 8),
            match r.identity.as_str() {
                "" => "-",
                id => id,
            },
            show::text(&r.health, 10),
            show::text(&r.profile, 24),
            match r.agent_version.as_str() {
                "" => "-".to_string(),
                v => show::text(v, 16),
            },
            cma,
            soc,
            uv,
            match r.fixable.len() {
                0 => "-".to_string(),
                n => n.to_string(),
            },
            show::text(&whole_seconds(&r.last_seen), 25),
            show::text(&worst, WORST_WIDTH)
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A flood keeps only what rows show: a huge status is not parsed, cells and lists are
    /// capped, and the table holds at most its rows, trusted ones before invented ids (issue
    /// 37, item 5).
    #[test]
    fn a_flood_keeps_only_what_rows_show() {
        let mut r = BoardRow::default();
        let huge = format!(r#"{{"health":"ok","profile":"{}"}}"#, "p".repeat(4 << 20));
        apply_status(&mut r, huge.as_bytes());
        assert_eq!((r.health.as_str(), r.profile.as_str()), ("too large", ""));
        let findings: Vec<String> = (0..10_000)
            .map(|i| {
                format!(
                    r#"{{"id":"c{i}{}","status":"fail","fix":{{}}}}"#,
                    "x".repeat(300)
                )
            })
            .collect();
        let big = format!(
            r#"{{"health":"fail","model":"{}","findings":[{}],"metrics":{{"soc_temp_c":50,"junk":[1,2,3]}}}}"#,
            "m".repeat(1000),
            findings.join(",")
        );
        assert!(big.len() < MAX_STATUS_BYTES * 16);
        let mut r = BoardRow::default();
        apply_status(
            &mut r,
            &big.as_bytes()[..big.len().min(MAX_STATUS_BYTES + 1)],
        );
        assert_eq!(r.health, "too large", "over the limit, cut or not");
        let fits: String = format!(
            r#"{{"health":"fail","model":"{}","findings":[{}],"metrics":{{"soc_temp_c":50,"junk":[1,2,3]}}}}"#,
            "m".repeat(1000),
            findings[..500].join(",")
        );
        apply_status(&mut r, fits.as_bytes());
        assert_eq!(r.model.chars().count(), MAX_CELL_CHARS);
        assert_eq!((r.worst.len(), r.fixable.len()), (MAX_LISTED, MAX_LISTED));
        assert!(r.worst.iter().all(|w| w.len() <= MAX_CELL_CHARS + 5));
        assert_eq!(r.soc_temp_c, Some(50.0));

        let mut t = Table::new(3);
        t.touch("real-1", true).unwrap();
        t.touch("real-2", true).unwrap();
        for i in 0..1000 {
            t.touch(&format!("fake-{i}"), false);
        }
        assert_eq!(t.len(), 3);
        let ids: Vec<&str> = t.rows().map(|r| r.board.as_str()).collect();
        assert_eq!(ids, ["fake-999", "real-1", "real-2"]);
        assert!(t.dropped_note().unwrap().contains("not made 999 times"));
        // Full of trusted rows: an untrusted newcomer is dropped, a trusted one evicts the
        // least recently seen.
        t.touch("real-3", true).unwrap();
        assert!(t.touch("fake-x", false).is_none());
        t.touch("real-1", false).unwrap(); // seen again: still trusted, now the newest
        t.touch("real-4", true).unwrap();
        let ids: Vec<&str> = t.rows().map(|r| r.board.as_str()).collect();
        assert_eq!(ids, ["real-1", "real-3", "real-4"]);
        t.remove("real-3");
        assert_eq!(t.len(), 2);
        t.touch("fake-y", false).unwrap();
        assert_eq!(t.len(), 3);
    }

    /// A board's own older status, sent again, is a replay (issue 37, item 10).
    #[test]
    fn an_older_status_is_a_replay() {
        let mut r = BoardRow::default();
        let old = br#"{"health":"ok","time":"2026-12-01T10:00:00.1Z"}"#;
        // A forged status far in the future does not make the board's own look replayed.
        apply_status(&mut r, br#"{"health":"ok","time":"2099-01-01T00:00:00Z"}"#);
        assert_eq!(replay_reason(&r, old), None);
        apply_sealed_status(
            &mut r,
            br#"{"health":"fail","time":"2026-12-01T10:05:00.5Z"}"#,
        );
        let why = replay_reason(&r, old).unwrap();
        assert!(
            why.contains("2026-12-01T10:00:00.1Z") && why.contains("300 s newer"),
            "{why}"
        );
        let same = br#"{"health":"ok","time":"2026-12-01T10:05:00.9Z"}"#;
        assert_eq!(replay_reason(&r, same), None, "the same second");
        let newer = br#"{"health":"ok","time":"2026-12-01T10:06:00Z"}"#;
        assert_eq!(replay_reason(&r, newer), None);
        assert_eq!(replay_reason(&r, br#"{"health":"ok"}"#), None, "no time");
        assert_eq!(
            replay_reason(&BoardRow::default(), old),
            None,
            "nothing shown yet"
        );
    }

    #[test]
    fn an_empty_status_does_not_make_a_sealed_row_forget_its_newest_time() {
        let mut t = Table::new(10);
        let new = br#"{"health":"ok","time":"2026-12-07T10:00:00Z"}"#;
        let old = br#"{"health":"fail","time":"2026-12-07T09:00:00Z"}"#;
        apply_sealed_status(t.touch("b1", true).unwrap(), new);
        t.remove("b1");
        assert_eq!(t.len(), 1, "anyone can send an empty status");
        let row = t.touch("b1", true).unwrap();
        assert!(replay_reason(row, old).is_some());
        // A row without a sealed status still goes.
        t.touch("b2", false).unwrap();
        t.remove("b2");
        assert_eq!(t.len(), 1);
    }

    /// The VERSION column is the status's `agent_version` (`-` for an agent that does not
    /// say), cut like any other cell.
    #[test]
    fn the_agent_version_has_its_column() {
        let mut r = BoardRow {
            board: "b1".into(),
            ..BoardRow::default()
        };
        apply_status(&mut r, br#"{"health":"ok","agent_version":"0.2.0"}"#);
        assert_eq!(r.agent_version, "0.2.0");
        let t = render_rows(std::slice::from_ref(&r));
        let (head, row) = t.split_once('\n').unwrap();
        let at = head.find("VERSION").unwrap();
        assert_eq!(&row[at..at + 6], "0.2.0 ");
        apply_status(&mut r, br#"{"health":"ok"}"#);
        let t = render_rows(&[r]);
        assert_eq!(&t.lines().nth(1).unwrap()[at..at + 2], "- ");
    }
}
