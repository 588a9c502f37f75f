//! Retained command records that outlive their command. The requester clears its command
//! after the final state (`fleet send` does), but one that gave up or crashed leaves the
//! board's answer retained for ever. The agent clears each answer it published once no command
//! can still be live (the longest command age plus the clock skew allowed), and on every
//! connect clears older answers of its own that the broker still holds from earlier runs.

use super::agent::Agent;
use crate::mqtt::command::CLOCK_SKEW_S;
use crate::mqtt::topics::{self, CommandTopic};

/// Most answers waiting to be cleared (a flood beyond it is cleared on the next connect).
pub const SWEEP_MAX: usize = 4096;

/// Answers to clear: (Unix seconds when due, topic), oldest first.
#[derive(Debug, Default)]
pub struct Sweep {
    due: Vec<(i64, String)>,
}

impl Sweep {
    /// Schedules `topic` to be cleared at `at` (Unix seconds); the oldest goes when full.
    pub fn schedule(&mut self, topic: &str, at: i64) {
        if self.due.len() == SWEEP_MAX {
            self.due.remove(0);
        }
        self.due.push((at, topic.to_string()));
    }

    /// The topics due at `now`, taken off the list.
    pub fn take_due(&mut self, now: i64) -> Vec<String> {
        let n = self.due.iter().take_while(|(at, _)| *at <= now).count();
        self.due.drain(..n).map(|(_, t)| t).collect()
    }

    /// Takes the topics that start with `prefix` off the list (cleared early).
    pub fn take_prefix(&mut self, prefix: &str) -> Vec<String> {
        let (hit, keep): (Vec<_>, Vec<_>) = std::mem::take(&mut self.due)
            .into_iter()
            .partition(|(_, t)| t.starts_with(prefix));
        self.due = keep;
        hit.into_iter().map(|(_, t)| t).collect()
    }

    /// How many answers wait.
    pub fn len(&self) -> usize {
        self.due.len()
    }

    /// Nothing waits.
    pub fn is_empty(&self) -> bool {
        self.due.is_empty()
    }
}

/// How long an answer stays retained, seconds: no command lives longer than
/// `security.max_command_age_s`, and clocks may differ by [`CLOCK_SKEW_S`].
pub(super) fn keep_s(agent: &Agent) -> i64 {
    let age = agent.s.cfg.security.max_command_age_s;
    i64::try_from(age)
        .unwrap_or(i64::MAX)
        .saturating_add(CLOCK_SKEW_S)
}

/// Called for every retained publish the agent makes: a final answer on its own command topic
/// is scheduled to be cleared. The agent made the payload (`Agent::lifecycle`, serde_json), so
/// its status is the one unescaped `"status":"<state>"` that is not nested in a `result`.
pub(super) fn published(agent: &mut Agent, topic: &str, payload: &[u8]) {
    let has = |s: &str| payload.windows(s.len()).any(|w| w == s.as_bytes());
    const FINAL: [&str; 3] = [
        r#""status":"successful""#,
        r#""status":"failed""#,
        r#""status":"rejected""#,
    ];
    let is_final = !has(r#""status":"executing""#) && FINAL.iter().any(|s| has(s));
    if !is_final || !topic.starts_with(&topics::answers_prefix(&agent.s.topic_root, &agent.s.board))
    {
        return;
    }
    let at = agent.now().saturating_add(keep_s(agent));
    agent.sweep.schedule(topic, at);
}

/// Publishes the empty retained message that clears `topic`.
fn clear(agent: &mut Agent, topic: String) {
    agent.send(topic, Vec::new(), true);
}

/// Housekeeping: clears the answers now due, except a command's still `executing` (its final
/// state is scheduled when it comes).
pub(super) fn clear_due(agent: &mut Agent) {
    if !agent.connected {
        return;
    }
    for topic in agent.sweep.take_due(agent.now()) {
        let running = topics::parse_command(&agent.s.topic_root, &topic)
            .is_some_and(|t| agent.gate.is_executing(&t.cmd_id));
        if !running {
            clear(agent, topic);
        }
    }
}

/// A retained message on one of this board's command topics that is an answer of its own
/// (a final state) older than any live command: cleared, and `true` (nothing else to do).
pub(super) fn stale_answer(agent: &mut Agent, t: &CommandTopic, payload: &[u8]) -> bool {
    if t.board != agent.s.board || payload.is_empty() {
        return false;
    }
    let Ok(v) = serde_json::from_slice::<serde_json::Value>(payload) else {
        return false;
    };
    let is_final = matches!(
        v["status"].as_str(),
        Some("successful" | "failed" | "rejected")
    );
    let answered = v["time"]
        .as_str()
        .and_then(|t| t.split_once('T'))
        .and_then(|(date, clock)| crate::sys::time::unix_from_date_time(date, clock.get(..8)?));
    let old = answered.is_some_and(|s| agent.now().saturating_sub(s) > keep_s(agent));
    if !is_final || !old {
        return false;
    }
    let topic = topics::command(&agent.s.topic_root, &t.board, &t.action, &t.cmd_id);
    // A bundle the requester never fetched goes with its answer, when the answer is this
    // board's own (sealed by its key): a forged one must not make it publish a thousand clears.
    let own = agent.sealed_by_me(&topic, payload);
    clear(agent, topic);
    if t.action == "capture" && own {
        let n = v["result"]["chunks"].as_u64().unwrap_or(0);
        let prefix = crate::mqtt::chunks::prefix(&agent.s.topic_root, &t.board, &t.cmd_id);
        for i in 0..n.min(crate::mqtt::chunks::MAX_CHUNKS as u64) {
            clear(agent, format!("{prefix}{i}"));
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_are_due_in_order_and_the_list_is_bounded() {
        let mut s = Sweep::default();
        s.schedule("a", 10);
        s.schedule("b", 20);
        assert!(s.take_due(9).is_empty());
        assert_eq!(s.take_due(15), ["a"]);
        assert_eq!(s.take_due(100), ["b"]);
        for i in 0..SWEEP_MAX + 5 {
            s.schedule(&format!("t{i}"), i as i64);
        }
        assert_eq!(s.len(), SWEEP_MAX);
        assert!(s.take_due(4).is_empty(), "the oldest five went");
        assert_eq!(s.take_due(5), ["t5"]);
        s.schedule("x/capture/c1/0", 9_000);
        s.schedule("x/capture/c2/0", 9_000);
        assert_eq!(s.take_prefix("x/capture/c1/"), ["x/capture/c1/0"]);
        assert_eq!(s.take_due(i64::MAX).last().unwrap(), "x/capture/c2/0");
    }
}
