//! The board keys the operator's fleet tools know, as ssh's `known_hosts` knows hosts: one line
//! per board, `<board_id> <board_key>` (the base64 public key a board publishes in every
//! status as `board_key`, and logs at start as "this board's identity"). The file is
//! `NPU_AGENT_KNOWN_BOARDS`, else `known_boards` in `fleet.toml`, else `known_boards` beside
//! `fleet.toml` ([`super::operator`]); the operator may fill it,
//! and a board seen for the first time is added to it (trust on first use) when its directory
//! exists (the tools never create it).
//!
//! New keys are written in batches, atomically, merged with what the file holds then (never
//! once per board), and one run records at most [`DEFAULT_NEW_PER_RUN`] new boards unless told
//! more (`--accept-new-boards N`): ids anyone on the broker can invent are shown, counted and
//! not recorded beyond that.

use crate::action::atomic::{write_atomic, RealStorage};
use crate::mqtt::board_sig::{self, Seal};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// How a board's status or answer stands against the known keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trust {
    /// Sealed by the key known for this board.
    Known,
    /// Sealed by a key seen for the first time for this board (now recorded).
    New,
    /// Sealed by a key seen for the first time, past the number of new boards this run may
    /// record: not recorded, and not taken as the board's.
    Unrecorded,
    /// Sealed by another key than the one known for this board: not the board, or a board
    /// whose state directory was wiped.
    Changed,
    /// Not sealed (an older agent, or someone else).
    Unsigned,
    /// A seal that does not verify.
    Bad,
}

impl Trust {
    /// The word `fleet watch` and `fleet send` show.
    pub fn word(self) -> &'static str {
        match self {
            Trust::Known => "signed",
            Trust::New => "new key",
            Trust::Unrecorded => "new unsaved",
            Trust::Changed => "KEY CHANGED",
            Trust::Unsigned => "UNSIGNED",
            Trust::Bad => "BAD SIG",
        }
    }

    /// Whether the message can be taken as the board's.
    pub fn is_trusted(self) -> bool {
        matches!(self, Trust::Known | Trust::New)
    }
}

/// What takes more new boards in `fleet watch` and `fleet send`.
pub const MORE_BOARDS: &str = "--accept-new-boards N takes more, for a first look at a whole fleet";

/// New boards one run records unless told more (`--accept-new-boards N`).
pub const DEFAULT_NEW_PER_RUN: usize = 20;

/// Boards not recorded that are counted one by one (past this, the note says "more than").
pub const MAX_REFUSED_COUNTED: usize = 100_000;

/// The known board keys, and where new ones are recorded.
#[derive(Debug, Default)]
pub struct KnownBoards {
    path: Option<PathBuf>,
    keys: BTreeMap<String, String>,
    /// Boards first seen in this run and not yet written, in order.
    unsaved: Vec<String>,
    /// Boards first seen in this run (recorded or to be).
    added: usize,
    /// How many new boards this run may record.
    max_new: usize,
    /// Boards seen past `max_new` (not recorded), at most [`MAX_REFUSED_COUNTED`] of them.
    refused: std::collections::BTreeSet<String>,
    /// Boards whose key was first seen in this run and not yet said so ([`Self::announce_new`]).
    fresh: std::collections::BTreeSet<String>,
}

impl KnownBoards {
    /// The keys in the file at `path` ([`super::operator::Operator::known_boards`]), recording
    /// at most `max_new` new boards in this run there.
    pub fn load_accepting(path: Option<&std::path::Path>, max_new: usize) -> KnownBoards {
        KnownBoards {
            max_new,
            ..KnownBoards::from_file(path.map(PathBuf::from))
        }
    }

    /// Checks the operator's file before a tool connects: a file that exists but cannot be read,
    /// or is not UTF-8, would make every board's key look new (trusted on first use again, and
    /// the pinned keys written over).
    ///
    /// Errors: the file, and why (for a byte that is not UTF-8: its line, value and column).
    pub fn check(path: Option<&std::path::Path>) -> Result<(), String> {
        match path {
            Some(p) => read_text(p).map(|_| ()),
            None => Ok(()),
        }
    }

    /// The keys in the file at `path` (`<board_id> <board_key>` lines), recording there; a
    /// missing file knows nothing; an unreadable one knows nothing and is not recorded in.
    pub(super) fn from_file(path: Option<PathBuf>) -> KnownBoards {
        let (text, path) = match path.as_deref().map(read_text) {
            Some(Ok(t)) => (t.unwrap_or_default(), path),
            Some(Err(_)) | None => (String::new(), None),
        };
        let keys = text
            .lines()
            .filter_map(|l| l.split_once(' '))
            .map(|(b, k)| (b.to_string(), k.to_string()))
            .collect();
        KnownBoards {
            path,
            keys,
            max_new: DEFAULT_NEW_PER_RUN,
            ..KnownBoards::default()
        }
    }

    /// Judges `payload`, published on `topic` by (or for) `board`; a first seal of a board is
    /// recorded.
    pub fn judge(&mut self, board: &str, topic: &str, payload: &[u8]) -> Trust {
        // No agent publishes under another id shape (a space or a Unicode blank would make a
        // line of the file that reads back as another board's).
        if !crate::mqtt::command::valid_cmd_id(board) {
            return Trust::Bad;
        }
        let key = match board_sig::open(topic, payload) {
            Seal::Unsigned => return Trust::Unsigned,
            Seal::Bad => return Trust::Bad,
            Seal::By(key) => key,
        };
        match self.keys.get(board) {
            Some(k) if *k == key => Trust::Known,
            Some(_) => Trust::Changed,
            None if self.added >= self.max_new => {
                if self.refused.len() < MAX_REFUSED_COUNTED {
                    self.refused.insert(board.to_string());
                }
                Trust::Unrecorded
            }
            None => {
                self.keys.insert(board.to_string(), key);
                self.unsaved.push(board.to_string());
                self.fresh.insert(board.to_string());
                self.added += 1;
                Trust::New
            }
        }
    }

    /// Whether a key is pinned for `board` (in the file, or first seen in this run).
    pub fn is_pinned(&self, board: &str) -> bool {
        self.keys.contains_key(board)
    }

    /// Whether `board`'s key was first seen in this run and this is the first time to say so
    /// (true once per board: `fleet send` marks that board's first line).
    pub fn announce_new(&mut self, board: &str) -> bool {
        self.fresh.remove(board)
    }

    /// Why new boards were not recorded, when some were not: how many boards (each counted
    /// once, however often it reported), the limit, and `hint` (the flag that takes more).
    pub fn refused_note(&self, hint: &str) -> Option<String> {
        let n = self.refused.len();
        let more = match n >= MAX_REFUSED_COUNTED {
            true => "more than ",
            false => "",
        };
        (n > 0).then(|| {
            format!(
                "{more}{n} boards' keys were not recorded in known_boards and not taken as \
                 theirs: this run records at most {} new boards ({hint}); they are shown as \
                 `new unsaved`",
                self.max_new
            )
        })
    }

    /// Writes the keys first seen since the last save, at once, when the file's directory
    /// exists: the file as it is now plus a line for each new board it does not name (another
    /// run's additions are kept). Best effort: the judgement stands for this run either way.
    pub fn save(&mut self) {
        if self.unsaved.is_empty() {
            return;
        }
        let unsaved = std::mem::take(&mut self.unsaved);
        let Some(path) = &self.path else { return };
        if !path.parent().is_some_and(|d| d.is_dir()) {
            return;
        }
        // The file as it is now (another run may have added lines); one that became unreadable
        // is never written over.
        let Ok(now) = read_text(path) else { return };
        let mut text = now.unwrap_or_default();
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        let named: std::collections::BTreeSet<&str> = text
            .lines()
            .filter_map(|l| l.split_once(' ').map(|(b, _)| b))
            .collect();
        let mut add = String::new();
        for b in unsaved.iter().filter(|b| !named.contains(b.as_str())) {
            if let Some(k) = self.keys.get(b) {
                add.push_str(&format!("{b} {k}\n"));
            }
        }
        text.push_str(&add);
        let _ = write_atomic(&mut RealStorage, path, text.as_bytes(), None, 0o644);
    }
}

/// The text of the known-boards file at `path`; `None` when it does not exist.
///
/// Errors: unreadable, or not UTF-8 (line, byte and column), naming the file.
fn read_text(path: &std::path::Path) -> Result<Option<String>, String> {
    let shown = |e: String| {
        format!(
            "known boards file {}: {e}; fix or move it (the fleet tools would trust every \
             board's key anew)",
            path.display()
        )
    };
    match std::fs::read(path) {
        Ok(b) => crate::sys::text::strict_utf8(b)
            .map(Some)
            .map_err(|e| shown(e.to_string())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(shown(e.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mqtt::ed25519::SigningKey;

    #[test]
    fn first_use_is_recorded_then_held_to() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("known_boards");
        let mut k = KnownBoards::from_file(Some(file.clone()));
        let t = "npu-fleet/b1/status";
        let real = SigningKey::from_bytes(&[1; 32]);
        let fake = SigningKey::from_bytes(&[2; 32]);
        let status = |key: &SigningKey| board_sig::seal(key, t, br#"{"health":"ok"}"#.to_vec());
        assert_eq!(k.judge("b1", t, &status(&real)), Trust::New);
        assert!(!file.exists(), "written in batches, not per board");
        k.save();
        assert_eq!(k.judge("b1", t, &status(&real)), Trust::Known);
        assert_eq!(k.judge("b1", t, &status(&fake)), Trust::Changed);
        assert_eq!(k.judge("b1", t, br#"{"health":"ok"}"#), Trust::Unsigned);
        let mut bad = status(&real);
        let n = bad.len();
        bad[n - 5] ^= 1;
        assert_eq!(k.judge("b1", t, &bad), Trust::Bad);
        // Recorded on disk, read back by the next run.
        let text = std::fs::read_to_string(&file).unwrap();
        assert_eq!(
            text,
            format!("b1 {}\n", board_sig::key_text(&real.verifying_key()))
        );
        let mut again = KnownBoards::from_file(Some(file));
        assert_eq!(again.judge("b1", t, &status(&fake)), Trust::Changed);
        // A board id no agent uses (a blank would make a line that reads back as b1's): never
        // trusted, never recorded.
        for id in ["b1 ", "b1\u{3000}", "b1\nb2 x"] {
            assert_eq!(again.judge(id, t, &status(&fake)), Trust::Bad, "{id:?}");
        }
        let after = std::fs::read_to_string(again.path.as_ref().unwrap()).unwrap();
        assert_eq!(after, text);
        // No directory: judged, not written.
        let mut nowhere = KnownBoards::from_file(Some(dir.path().join("missing/known_boards")));
        assert_eq!(nowhere.judge("b1", t, &status(&real)), Trust::New);
        nowhere.save();
        assert!(!dir.path().join("missing").exists());
    }

    /// Boards an attacker invents (the issue's 4,000; 300 here, each sealed and checked): one
    /// write, at most the run's limit recorded, the rest counted and said (issue 37, item 3).
    #[test]
    fn a_flood_of_new_boards_is_bounded_and_written_once() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("known_boards");
        std::fs::write(&file, "old AAAA").unwrap();
        let mut k = KnownBoards {
            max_new: 25,
            ..KnownBoards::from_file(Some(file.clone()))
        };
        let key = SigningKey::from_bytes(&[3; 32]);
        let mut new = 0;
        for i in 0..300 {
            let b = format!("fake-{i}");
            let t = format!("npu-fleet/{b}/status");
            let p = board_sig::seal(&key, &t, br#"{"health":"ok"}"#.to_vec());
            match k.judge(&b, &t, &p) {
                Trust::New => new += 1,
                Trust::Unrecorded => assert!(i >= 25),
                other => panic!("{other:?}"),
            }
            assert_eq!(k.announce_new(&b), i < 25);
            assert!(!k.announce_new(&b), "said once");
        }
        assert_eq!(new, 25);
        assert_eq!(
            std::fs::read_to_string(&file).unwrap(),
            "old AAAA",
            "not yet written"
        );
        // Another run added a line meanwhile: kept.
        std::fs::write(&file, "old AAAA\nother BBBB\n").unwrap();
        k.save();
        let text = std::fs::read_to_string(&file).unwrap();
        assert_eq!(text.lines().count(), 27, "{text}");
        assert!(text.starts_with("old AAAA\nother BBBB\nfake-0 "), "{text}");
        let note = k.refused_note(MORE_BOARDS).unwrap();
        assert!(note.contains("275 boards'") && note.contains("--accept-new-boards"));
        // The same boards again: still 275 boards, not sightings.
        for i in 25..300 {
            let b = format!("fake-{i}");
            let t = format!("npu-fleet/{b}/status");
            let p = board_sig::seal(&key, &t, br#"{"health":"ok"}"#.to_vec());
            assert_eq!(k.judge(&b, &t, &p), Trust::Unrecorded);
        }
        let note = k.refused_note(MORE_BOARDS).unwrap();
        assert!(note.starts_with("275 boards'"), "{note}");
        assert!(!Trust::Unrecorded.is_trusted());
    }

    /// Issue 37 item 12: a known-boards file that is not UTF-8 is refused with its line and
    /// byte, and never written over with only the keys seen this time.
    #[test]
    fn a_known_boards_file_that_is_not_utf8_is_refused_and_never_written_over() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("known_boards");
        let body = b"b1 AAAA\nb2 caf\xe9\n".to_vec();
        std::fs::write(&file, &body).unwrap();
        let e = read_text(&file).unwrap_err();
        assert!(
            e.contains("line 2: byte 0xe9 at column 7 is not UTF-8"),
            "{e}"
        );
        let mut k = KnownBoards::from_file(Some(file.clone()));
        let t = "npu-fleet/b3/status";
        let key = SigningKey::from_bytes(&[3; 32]);
        let sealed = board_sig::seal(&key, t, br#"{"health":"ok"}"#.to_vec());
        assert_eq!(k.judge("b3", t, &sealed), Trust::New);
        k.save();
        assert_eq!(
            std::fs::read(&file).unwrap(),
            body,
            "the file was written over"
        );
        assert_eq!(read_text(&dir.path().join("none")).unwrap(), None);
    }
}
