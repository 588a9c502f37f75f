//! The history's one seam: [`History`] is everything `fleet serve` asks of its storage, and
//! [`Sqlite`] the one implementation (one file, `history.sqlite3`, under the state directory).
//! A fleet that outgrows one file moves by writing another implementation of the trait
//! (PostgreSQL, a TSDB) and nothing else.
//!
//! Two tables: `events` (one row per change: board, Unix seconds, kind, subject, value, previous,
//! summary) and `boards` (each board's last [`Detail`] as JSON: what the next status is compared
//! with, so a restart does not record every board again; its `sealed_s`, the newest sealed status
//! time taken, is where replays start after a restart). A board keeps at most
//! [`DEFAULT_ROWS_PER_BOARD`] rows unless told ([`Sqlite::with_rows_per_board`]): past that its
//! oldest go, besides the pruning by age.

use super::detail::{Change, Detail};
use serde::Serialize;
use std::path::Path;

/// One row of a board's history.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Event {
    /// The row's id: rows are numbered in the order the service recorded them (the cursor of
    /// `before`).
    pub id: i64,
    /// Board id.
    pub board: String,
    /// When the service saw the change, Unix seconds.
    pub at_s: i64,
    /// The change.
    #[serde(flatten)]
    pub change: Change,
}

/// The storage `fleet serve` keeps its history in.
pub trait History: Send {
    /// Records `changes` of `board` at `at_s` (Unix seconds) and its new baseline `detail`, in
    /// one transaction; past the storage's rows per board, that board's oldest rows go.
    ///
    /// Errors: the storage's, as text.
    fn record(
        &mut self,
        board: &str,
        at_s: i64,
        changes: &[Change],
        detail: &Detail,
    ) -> Result<(), String>;

    /// The newest `limit` rows of `board`'s history, newest first.
    ///
    /// Errors: the storage's, as text.
    fn history(&self, board: &str, limit: usize) -> Result<Vec<Event>, String> {
        self.history_before(board, limit, None)
    }

    /// The newest `limit` rows of `board`'s history recorded before the row with id
    /// `before` (all when `None`), newest first: walks the whole history a page at a time.
    ///
    /// Errors: the storage's, as text.
    fn history_before(
        &self,
        board: &str,
        limit: usize,
        before: Option<i64>,
    ) -> Result<Vec<Event>, String>;

    /// Every board's last recorded detail (to compare the next status with after a restart).
    ///
    /// Errors: the storage's, as text.
    fn baselines(&self) -> Result<Vec<(String, Detail)>, String>;

    /// Deletes history rows older than `before_s` (Unix seconds); returns how many went.
    ///
    /// Errors: the storage's, as text.
    fn prune(&mut self, before_s: i64) -> Result<usize, String>;
}

/// Rows one board keeps unless told ([`Sqlite::with_rows_per_board`]): a board a few rows a
/// day never reaches it; one whose own key seals a changing status every few seconds keeps
/// its newest rows and cannot fill the disk.
pub const DEFAULT_ROWS_PER_BOARD: usize = 10_000;

/// Boards whose row count is kept in memory at most; past that the counts are dropped and
/// read again as boards record.
const MAX_COUNTED_BOARDS: usize = 500_000;

/// The history in one SQLite file.
pub struct Sqlite {
    db: rusqlite::Connection,
    /// The most rows a board keeps (0: no cap).
    rows_per_board: usize,
    /// Rows each board that recorded in this run has (read from the file on its first record).
    counts: std::collections::HashMap<String, usize>,
}

/// The database file's name under the state directory.
pub const FILE_NAME: &str = "history.sqlite3";

fn err(e: rusqlite::Error) -> String {
    format!("history database: {e}")
}

/// Makes the state directory `dir` (and its missing parents) readable by its owner only (0700);
/// an existing directory is left as it is.
///
/// Errors: the directory cannot be made.
pub fn make_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

impl Sqlite {
    /// Opens (or creates, owner-only 0600, as SQLite's WAL files then are) `dir/history.sqlite3`,
    /// in WAL mode.
    ///
    /// Errors: the directory or file cannot be opened, or is not such a database.
    pub fn open(dir: &Path) -> Result<Sqlite, String> {
        use std::os::unix::fs::OpenOptionsExt;
        let path = dir.join(FILE_NAME);
        let made = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path);
        if let Err(e) = made.as_ref().map_err(std::io::Error::kind) {
            if e != std::io::ErrorKind::AlreadyExists {
                return Err(format!("{}: {e}", path.display()));
            }
        }
        let db =
            rusqlite::Connection::open(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        db.execute_batch(
            "PRAGMA journal_mode=WAL;
             PRAGMA synchronous=NORMAL;
             CREATE TABLE IF NOT EXISTS events (
               id INTEGER PRIMARY KEY, board TEXT NOT NULL, at_s INTEGER NOT NULL,
               kind TEXT NOT NULL, subject TEXT NOT NULL, value TEXT NOT NULL,
               previous TEXT NOT NULL, summary TEXT NOT NULL);
             DROP INDEX IF EXISTS events_board_at;
             CREATE INDEX IF NOT EXISTS events_board_id ON events(board, id);
             CREATE INDEX IF NOT EXISTS events_at ON events(at_s);
             CREATE TABLE IF NOT EXISTS boards (board TEXT PRIMARY KEY, detail TEXT NOT NULL);",
        )
        .map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(Sqlite {
            db,
            rows_per_board: DEFAULT_ROWS_PER_BOARD,
            counts: std::collections::HashMap::new(),
        })
    }

    /// The same history keeping at most `rows` rows per board (0: no cap), oldest out first.
    pub fn with_rows_per_board(mut self, rows: usize) -> Sqlite {
        self.rows_per_board = rows;
        self
    }
}

/// Within `tx`: adds `added` rows to `board`'s count in `counts` (read from the file when not
/// held) and deletes its oldest rows past `cap`.
fn cap_rows(
    tx: &rusqlite::Transaction<'_>,
    counts: &mut std::collections::HashMap<String, usize>,
    board: &str,
    added: usize,
    cap: usize,
) -> Result<(), String> {
    if cap == 0 || added == 0 {
        return Ok(());
    }
    let n = match counts.get(board) {
        Some(n) => n.saturating_add(added),
        None => {
            if counts.len() >= MAX_COUNTED_BOARDS {
                counts.clear();
            }
            let n: i64 = tx
                .query_row(
                    "SELECT COUNT(*) FROM events WHERE board = ?1",
                    [board],
                    |r| r.get(0),
                )
                .map_err(err)?;
            usize::try_from(n).unwrap_or(0)
        }
    };
    if n > cap {
        let excess = i64::try_from(n - cap).unwrap_or(i64::MAX);
        tx.prepare_cached(
            "DELETE FROM events WHERE id IN
               (SELECT id FROM events WHERE board = ?1 ORDER BY id LIMIT ?2)",
        )
        .and_then(|mut d| d.execute(rusqlite::params![board, excess]))
        .map_err(err)?;
    }
    counts.insert(board.to_string(), n.min(cap));
    Ok(())
}

impl History for Sqlite {
    fn record(
        &mut self,
        board: &str,
        at_s: i64,
        changes: &[Change],
        detail: &Detail,
    ) -> Result<(), String> {
        let tx = self.db.transaction().map_err(err)?;
        {
            let mut ins = tx
                .prepare_cached(
                    "INSERT INTO events (board, at_s, kind, subject, value, previous, summary)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                )
                .map_err(err)?;
            for c in changes {
                ins.execute(rusqlite::params![
                    board, at_s, c.kind, c.subject, c.value, c.previous, c.summary
                ])
                .map_err(err)?;
            }
            cap_rows(
                &tx,
                &mut self.counts,
                board,
                changes.len(),
                self.rows_per_board,
            )?;
            let json = serde_json::to_string(detail).map_err(|e| e.to_string())?;
            tx.execute(
                "INSERT INTO boards (board, detail) VALUES (?1, ?2)
                 ON CONFLICT(board) DO UPDATE SET detail = excluded.detail",
                rusqlite::params![board, json],
            )
            .map_err(err)?;
        }
        tx.commit().map_err(err)
    }

    fn history_before(
        &self,
        board: &str,
        limit: usize,
        before: Option<i64>,
    ) -> Result<Vec<Event>, String> {
        let mut q = self
            .db
            .prepare_cached(
                "SELECT id, at_s, kind, subject, value, previous, summary FROM events
                 WHERE board = ?1 AND id < ?3 ORDER BY id DESC LIMIT ?2",
            )
            .map_err(err)?;
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let before = before.unwrap_or(i64::MAX);
        let rows = q
            .query_map(rusqlite::params![board, limit, before], |r| {
                Ok(Event {
                    id: r.get(0)?,
                    board: board.to_string(),
                    at_s: r.get(1)?,
                    change: Change {
                        kind: r.get(2)?,
                        subject: r.get(3)?,
                        value: r.get(4)?,
                        previous: r.get(5)?,
                        summary: r.get(6)?,
                    },
                })
            })
            .map_err(err)?;
        rows.collect::<Result<_, _>>().map_err(err)
    }

    fn baselines(&self) -> Result<Vec<(String, Detail)>, String> {
        let mut q = self
            .db
            .prepare("SELECT board, detail FROM boards")
            .map_err(err)?;
        let rows = q
            .query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))
            .map_err(err)?;
        let mut out = Vec::new();
        for row in rows {
            let (board, json) = row.map_err(err)?;
            // A row an older service wrote in another shape starts that board afresh.
            out.push((board, serde_json::from_str(&json).unwrap_or_default()));
        }
        Ok(out)
    }

    fn prune(&mut self, before_s: i64) -> Result<usize, String> {
        // The counts are read again from the file as boards record.
        self.counts.clear();
        self.db
            .execute("DELETE FROM events WHERE at_s < ?1", [before_s])
            .map_err(err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn health(v: &str) -> Change {
        Change {
            kind: "health".into(),
            subject: String::new(),
            value: v.into(),
            previous: String::new(),
            summary: String::new(),
        }
    }

    #[test]
    fn history_survives_a_reopen_and_pruning_removes_only_old_rows() {
        let dir = tempfile::tempdir().unwrap();
        let mut db = Sqlite::open(dir.path()).unwrap();
        let d = Detail {
            health: "fail".into(),
            ..Detail::default()
        };
        db.record("b1", 1_000, &[health("ok")], &d).unwrap();
        db.record("b1", 2_000, &[health("fail")], &d).unwrap();
        db.record("b2", 1_500, &[health("warn")], &Detail::default())
            .unwrap();
        drop(db);
        let mut db = Sqlite::open(dir.path()).unwrap();
        let h = db.history("b1", 10).unwrap();
        assert_eq!(h.len(), 2);
        assert_eq!((h[0].at_s, h[0].change.value.as_str()), (2_000, "fail"));
        let base = db.baselines().unwrap();
        assert_eq!(base.len(), 2);
        assert_eq!(base[0], ("b1".to_string(), d));
        assert_eq!(db.prune(1_600).unwrap(), 2);
        assert_eq!(db.history("b1", 10).unwrap().len(), 1);
        assert!(db.history("b2", 10).unwrap().is_empty());
        assert_eq!(db.history("b1", 10).unwrap()[0].at_s, 2_000);
    }
}
