//! Retained command records that outlive their command. The requester clears its command
//! after the final state (`fleet send` does), but one that gave up or crashed leaves the
//! board's answer retained for ever. The agent clears each answer it published once no command
//! can still be live (the longest command age plus the clock skew allowed), and on every
//! connect clears older answers of its own that the broker still holds from earlier runs.

use super::effect::Effect;
use crate::model::action::ActionKind;
use crate::mqtt::command::{CmdStatus, CLOCK_SKEW_S};
use crate::mqtt::incoming::Incoming;
use crate::mqtt::topics;

/// Most answers whose topics wait to be cleared one by one. Past it the oldest is let go and
/// the agent instead scans its own command topics once that answer is due ([`Sweep::rescan`]):
/// the broker sends what it still retains there, and every old answer of the board's own is
/// cleared then ([`stale_answer`]). The work stays bounded, and nothing the board published is
/// forgotten.
pub const SWEEP_MAX: usize = 4096;

/// Answers to clear: (Unix seconds when due, topic), oldest first; a `capture`'s chunks as one
/// entry each (never let go: they come from accepted commands only); when to scan the board's
/// command topics for answers let go.
#[derive(Debug, Default)]
pub struct Sweep {
    due: std::collections::VecDeque<(i64, String)>,
    /// (due, chunk topic prefix, chunks).
    chunks: Vec<(i64, String, usize)>,
    rescan_at: Option<i64>,
    /// Capture commands whose chunks a stale answer already cleared, newest last: a replayed
    /// answer must not make the board publish its chunk clears again.
    chunks_cleared: std::collections::VecDeque<String>,
}

/// How many capture commands [`Sweep::first_chunk_clear`] remembers.
const CHUNKS_CLEARED_MAX: usize = 256;

impl Sweep {
    /// Schedules `topic` to be cleared at `at` (Unix seconds); when full, the oldest is let go
    /// and a scan of the command topics is due when it was ([`Sweep::take_rescan`]).
    pub fn schedule(&mut self, topic: &str, at: i64) {
        if self.due.len() >= SWEEP_MAX {
            if let Some((old, _)) = self.due.pop_front() {
                // One second later: the scan clears answers older than their window.
                let scan = old.saturating_add(1);
                self.rescan_at = Some(self.rescan_at.map_or(scan, |r| r.max(scan)));
            }
        }
        self.due.push_back((at, topic.to_string()));
    }

    /// True the first time the chunks of capture `cmd_id` are cleared for a stale answer; false
    /// for the same command again (its answer replayed), among the last [`CHUNKS_CLEARED_MAX`].
    pub fn first_chunk_clear(&mut self, cmd_id: &str) -> bool {
        if self.chunks_cleared.iter().any(|c| c == cmd_id) {
            return false;
        }
        if self.chunks_cleared.len() >= CHUNKS_CLEARED_MAX {
            self.chunks_cleared.pop_front();
        }
        self.chunks_cleared.push_back(cmd_id.to_string());
        true
    }

    /// Schedules the `chunks` chunk topics `<prefix><i>` of a bundle to be cleared at `at`.
    pub fn schedule_chunks(&mut self, prefix: &str, chunks: usize, at: i64) {
        self.chunks.push((at, prefix.to_string(), chunks));
    }

    /// The topics due at `now`, taken off the list (a bundle's chunks one by one).
    pub fn take_due(&mut self, now: i64) -> Vec<String> {
        let n = self.due.iter().take_while(|(at, _)| *at <= now).count();
        let mut out: Vec<String> = self.due.drain(..n).map(|(_, t)| t).collect();
        let (due, keep) = std::mem::take(&mut self.chunks)
            .into_iter()
            .partition(|(at, _, _)| *at <= now);
        self.chunks = keep;
        out.extend(expand(due));
        out
    }

    /// Takes the chunk topics that start with `prefix` off the list (cleared early).
    pub fn take_prefix(&mut self, prefix: &str) -> Vec<String> {
        let (hit, keep) = std::mem::take(&mut self.chunks)
            .into_iter()
            .partition(|(_, p, _)| p.starts_with(prefix));
        self.chunks = keep;
        expand(hit)
    }

    /// Whether the scan of the command topics for answers let go is due at `now` (once).
    pub fn take_rescan(&mut self, now: i64) -> bool {
        let due = self.rescan_at.is_some_and(|at| at <= now);
        if due {
            self.rescan_at = None;
        }
        due
    }

    /// How many entries wait (a bundle's chunks count as one).
    pub fn len(&self) -> usize {
        self.due.len() + self.chunks.len()
    }

    /// Nothing waits.
    pub fn is_empty(&self) -> bool {
        self.due.is_empty() && self.chunks.is_empty()
    }
}

/// The chunk topics of bundle entries.
fn expand(entries: Vec<(i64, String, usize)>) -> Vec<String> {
    let mut out = Vec::new();
    for (_, prefix, n) in entries {
        out.extend((0..n.min(crate::mqtt::chunks::MAX_CHUNKS)).map(|i| format!("{prefix}{i}")));
    }
    out
}

/// How long an answer stays retained, seconds: no command lives longer than
/// `max_command_age_s` (`security.max_command_age_s`), and clocks may differ by
/// [`CLOCK_SKEW_S`].
pub fn keep_s(max_command_age_s: u64) -> i64 {
    i64::try_from(max_command_age_s)
        .unwrap_or(i64::MAX)
        .saturating_add(CLOCK_SKEW_S)
}

/// The board whose answers a [`Sweep`] clears, and when: its topic root, its id, the time now
/// and how long an answer stays ([`keep_s`]).
#[derive(Debug, Clone, Copy)]
pub struct Board<'a> {
    /// The topic root (`npu-fleet`).
    pub topic_root: &'a str,
    /// The board id.
    pub board: &'a str,
    /// Unix seconds now, by the agent's clock.
    pub now_s: i64,
    /// How long an answer stays retained, seconds ([`keep_s`]).
    pub keep_s: i64,
}

impl Sweep {
    /// Called for every retained publish the agent makes: a final answer on `b`'s own command
    /// topics is scheduled to be cleared. The agent made the payload (`Agent::lifecycle`,
    /// serde_json), so its status is the one unescaped `"status":"<state>"` that is not nested
    /// in a `result`.
    pub fn published(&mut self, b: Board, topic: &str, payload: &[u8]) {
        let has = |s: &str| payload.windows(s.len()).any(|w| w == s.as_bytes());
        const FINAL: [&str; 3] = [
            r#""status":"successful""#,
            r#""status":"failed""#,
            r#""status":"rejected""#,
        ];
        let is_final = !has(r#""status":"executing""#) && FINAL.iter().any(|s| has(s));
        if !is_final || !topic.starts_with(&topics::answers_prefix(b.topic_root, b.board)) {
            return;
        }
        self.schedule(topic, b.now_s.saturating_add(b.keep_s));
    }

    /// Housekeeping while connected: clears the answers now due, except a command's still
    /// executing (`running(cmd_id)`; its final state is scheduled when it comes), and scans
    /// the command topics when that is due and the subscription is `granted` (a SUBACK of one
    /// code while another SUBSCRIBE waits would read as a refusal).
    pub fn due(&mut self, b: Board, granted: bool, running: &dyn Fn(&str) -> bool) -> Vec<Effect> {
        let mut out = Vec::new();
        if granted && self.take_rescan(b.now_s) {
            out.push(Effect::Rescan);
        }
        for topic in self.take_due(b.now_s) {
            let busy =
                topics::parse_command(b.topic_root, &topic).is_some_and(|t| running(&t.cmd_id));
            if !busy {
                out.push(Effect::Clear(topic));
            }
        }
        out
    }

    /// A retained message on one of `b`'s command topics that is an answer of its own (a final
    /// state) older than any live command: `Some` with the clears to publish (nothing else is
    /// to be done with it), else `None`. `sealed_by_me(topic)` tells whether the payload
    /// carries the board's seal for `topic`.
    pub fn stale_answer(
        &mut self,
        b: Board,
        m: &Incoming,
        sealed_by_me: &dyn Fn(&str) -> bool,
    ) -> Option<Vec<Effect>> {
        let t = &m.topic;
        if t.board != b.board || m.payload.is_empty() {
            return None;
        }
        let v = m.json().ok()?;
        let is_final = m
            .status_word()
            .and_then(CmdStatus::from_wire)
            .is_some_and(CmdStatus::is_final);
        let answered = m
            .str_field("time")
            .and_then(|t| t.split_once('T'))
            .and_then(|(date, clock)| crate::sys::time::unix_from_date_time(date, clock.get(..8)?));
        let old = answered.is_some_and(|s| b.now_s.saturating_sub(s) > b.keep_s);
        if !is_final || !old {
            return None;
        }
        let topic = topics::command(b.topic_root, &t.board, &t.action, &t.cmd_id);
        // A bundle the requester never fetched goes with its answer, when the answer is this
        // board's own (sealed by its key): a forged one must not make it publish a thousand
        // clears.
        let own = sealed_by_me(&topic);
        let mut out = vec![Effect::Clear(topic)];
        // Once per command: an answer replayed again and again costs one clear each, not a
        // thousand.
        if t.kind == Some(ActionKind::Capture) && own && self.first_chunk_clear(&t.cmd_id) {
            let n = v["result"]["chunks"].as_u64().unwrap_or(0);
            let prefix = crate::mqtt::chunks::prefix(b.topic_root, &t.board, &t.cmd_id);
            let n = n.min(crate::mqtt::chunks::MAX_CHUNKS as u64);
            out.extend((0..n).map(|i| Effect::Clear(format!("{prefix}{i}"))));
        }
        Some(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_capture_s_chunks_are_cleared_once_however_often_its_answer_comes_back() {
        let mut s = Sweep::default();
        assert!(s.first_chunk_clear("c1"));
        assert!(!s.first_chunk_clear("c1"));
        assert!(s.first_chunk_clear("c2"));
        for i in 0..CHUNKS_CLEARED_MAX {
            s.first_chunk_clear(&format!("x{i}"));
        }
        assert_eq!(s.chunks_cleared.len(), CHUNKS_CLEARED_MAX);
        // Forgotten after that many others: the memory stays bounded.
        assert!(s.first_chunk_clear("c1"));
    }

    #[test]
    fn answers_are_due_in_order_and_the_list_is_bounded() {
        let mut s = Sweep::default();
        s.schedule("a", 10);
        s.schedule("b", 20);
        assert!(s.take_due(9).is_empty());
        assert_eq!(s.take_due(15), ["a"]);
        assert_eq!(s.take_due(100), ["b"]);
        s.schedule_chunks("x/capture/c1/", 2, 9_000);
        s.schedule_chunks("x/capture/c2/", 1, 9_000);
        assert_eq!(
            s.take_prefix("x/capture/c1/"),
            ["x/capture/c1/0", "x/capture/c1/1"]
        );
        assert_eq!(s.take_due(i64::MAX), ["x/capture/c2/0"]);
        assert!(s.is_empty());
    }

    /// 4,300 retained junk commands answered within one window: the list stays bounded, an
    /// unfetched capture's chunks are never let go, and the answers let go are cleared by a
    /// scan once due (issue 37, item 9).
    #[test]
    fn a_flood_of_answers_lets_nothing_the_board_published_stay_retained() {
        let mut s = Sweep::default();
        s.schedule("r/b/cmd/capture/c1", 100);
        s.schedule_chunks("r/b/capture/c1/", 40, 100);
        for i in 0..4300 {
            s.schedule(&format!("r/b/cmd/rescan/junk-{i}"), 100 + i / 1000);
        }
        assert_eq!(
            s.len(),
            SWEEP_MAX + 1,
            "the answers bounded, the bundle one entry"
        );
        assert!(!s.take_rescan(100), "not before the answers let go are due");
        let due = s.take_due(100);
        assert_eq!(
            due.iter()
                .filter(|t| t.starts_with("r/b/capture/c1/"))
                .count(),
            40,
            "every chunk cleared in time"
        );
        assert!(s.take_rescan(101), "a scan for the answers let go");
        assert!(!s.take_rescan(1000), "once");
        assert_eq!(s.take_due(i64::MAX).len() + due.len(), SWEEP_MAX + 40);
    }
}
