//! Publishes a dropped connection took with it, sent again on the next one.
//!
//! When a connection fails, rumqttc moves the unacknowledged publishes and the requests still
//! in its channel to `EventLoop::pending`, and a clean-start CONNACK (the session is never
//! present here) clears that list: a command's final state queued just before a session
//! takeover would be gone, and the broker would keep `executing` (or `init`) for good. The
//! polling task takes the list out after each failure ([`Unsent::take`]) and puts the
//! publishes under one topic prefix back first after the CONNACK ([`Unsent::restore`]), newest
//! per topic, in their order, with new packet identifiers.

use std::collections::{HashSet, VecDeque};

/// Most publishes kept across a run of failed connections (the oldest go first).
pub const UNSENT_MAX: usize = 1024;

/// A request of either protocol's event loop that may be a publish.
pub(super) trait Resendable: Sized {
    /// The topic when this is a publish.
    fn publish_topic(&self) -> Option<&[u8]>;
    /// The same publish for a new session: no packet identifier (the event loop assigns one),
    /// not a duplicate.
    fn for_new_session(self) -> Self;
}

impl Resendable for rumqttc::v5::Request {
    fn publish_topic(&self) -> Option<&[u8]> {
        match self {
            rumqttc::v5::Request::Publish(p) => Some(&p.topic),
            _ => None,
        }
    }
    fn for_new_session(self) -> Self {
        match self {
            rumqttc::v5::Request::Publish(mut p) => {
                p.pkid = 0;
                p.dup = false;
                rumqttc::v5::Request::Publish(p)
            }
            other => other,
        }
    }
}

impl Resendable for rumqttc::Request {
    fn publish_topic(&self) -> Option<&[u8]> {
        match self {
            rumqttc::Request::Publish(p) => Some(p.topic.as_bytes()),
            _ => None,
        }
    }
    fn for_new_session(self) -> Self {
        match self {
            rumqttc::Request::Publish(mut p) => {
                p.pkid = 0;
                p.dup = false;
                rumqttc::Request::Publish(p)
            }
            other => other,
        }
    }
}

/// What the failed connections set aside, waiting for the next CONNACK.
pub(super) struct Unsent<R> {
    /// Publishes under this prefix are sent again; `None`: rumqttc's own behaviour.
    prefix: Option<String>,
    kept: VecDeque<R>,
}

impl<R: Resendable> Unsent<R> {
    pub(super) fn new(prefix: Option<String>) -> Self {
        Unsent {
            prefix,
            kept: VecDeque::new(),
        }
    }

    /// After a failed poll: takes what the event loop set aside (`EventLoop::pending`).
    pub(super) fn take(&mut self, pending: &mut VecDeque<R>) {
        if self.prefix.is_some() {
            self.kept.extend(pending.drain(..));
        }
    }

    /// On a CONNACK: puts back in front of `pending` what is to be sent (all of it when the
    /// broker kept the session, as rumqttc would; else the publishes under the prefix, the
    /// newest per topic). Returns how many publishes go again.
    pub(super) fn restore(&mut self, pending: &mut VecDeque<R>, session_present: bool) -> usize {
        let Some(prefix) = &self.prefix else {
            return 0;
        };
        let kept = std::mem::take(&mut self.kept);
        let mut back: VecDeque<R> = if session_present {
            kept
        } else {
            newest_per_topic(kept, prefix.as_bytes())
        };
        let n = back.iter().filter(|r| r.publish_topic().is_some()).count();
        back.extend(pending.drain(..));
        *pending = back;
        n
    }
}

/// The publishes under `prefix`, the last one of each topic (a later state supersedes an
/// earlier one), in their order, at most [`UNSENT_MAX`] of the newest, ready for a new session.
fn newest_per_topic<R: Resendable>(kept: VecDeque<R>, prefix: &[u8]) -> VecDeque<R> {
    let mut seen = HashSet::new();
    let mut out = VecDeque::new();
    for r in kept.into_iter().rev() {
        let Some(topic) = r.publish_topic() else {
            continue;
        };
        if !topic.starts_with(prefix) || !seen.insert(topic.to_vec()) {
            continue;
        }
        if out.len() == UNSENT_MAX {
            break;
        }
        out.push_front(r.for_new_session());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use rumqttc::v5::mqttbytes::v5::Publish;
    use rumqttc::v5::mqttbytes::QoS;
    use rumqttc::v5::Request;

    fn publish(topic: &str, body: &str, pkid: u16) -> Request {
        let mut p = Publish::new(topic, QoS::AtLeastOnce, body.as_bytes().to_vec(), None);
        p.pkid = pkid;
        p.dup = true;
        Request::Publish(p)
    }

    fn bodies(q: &VecDeque<Request>) -> Vec<(String, String, u16, bool)> {
        q.iter()
            .filter_map(|r| match r {
                Request::Publish(p) => Some((
                    String::from_utf8_lossy(&p.topic).into_owned(),
                    String::from_utf8_lossy(&p.payload).into_owned(),
                    p.pkid,
                    p.dup,
                )),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn a_clean_session_gets_the_newest_answer_per_command_topic_back_first() {
        let mut u = Unsent::new(Some("r/b1/cmd/".to_string()));
        let mut pending: VecDeque<Request> = [
            publish("r/b1/cmd/rescan/a", "executing", 3),
            publish("r/b1/status", "{}", 4),
            Request::PingReq,
            publish("r/b1/cmd/rescan/b", "rejected", 5),
            publish("r/b1/cmd/rescan/a", "successful", 6),
        ]
        .into();
        u.take(&mut pending);
        assert!(pending.is_empty());
        // A failed connect in between keeps what was taken.
        u.take(&mut pending);
        // The CONNACK: a request queued since then goes after the restored ones.
        pending.push_back(publish("r/b1/status", "{new}", 0));
        assert_eq!(u.restore(&mut pending, false), 2);
        assert_eq!(
            bodies(&pending),
            [
                ("r/b1/cmd/rescan/b".into(), "rejected".into(), 0, false),
                ("r/b1/cmd/rescan/a".into(), "successful".into(), 0, false),
                ("r/b1/status".into(), "{new}".into(), 0, true),
            ]
        );
        // Nothing is sent twice on the connection after.
        assert_eq!(u.restore(&mut pending, false), 0);
        assert_eq!(pending.len(), 3);
    }

    #[test]
    fn a_present_session_gets_everything_back_unchanged_and_no_prefix_changes_nothing() {
        let mut u = Unsent::new(Some("r/".to_string()));
        let mut pending: VecDeque<Request> = [
            publish("x/1", "a", 7),
            Request::PingReq,
            publish("r/2", "b", 8),
        ]
        .into();
        u.take(&mut pending);
        assert_eq!(u.restore(&mut pending, true), 2);
        assert_eq!(pending.len(), 3);
        assert_eq!(bodies(&pending)[0], ("x/1".into(), "a".into(), 7, true));
        let mut off = Unsent::new(None);
        off.take(&mut pending);
        assert_eq!(
            pending.len(),
            3,
            "without a prefix the list is left to rumqttc"
        );
        assert_eq!(off.restore(&mut pending, false), 0);
    }

    #[test]
    fn at_most_the_newest_unsent_max_topics_are_kept() {
        let mut u = Unsent::new(Some("c/".to_string()));
        let mut pending: VecDeque<Request> = (0..UNSENT_MAX + 10)
            .map(|i| publish(&format!("c/{i}"), "x", 1))
            .collect();
        u.take(&mut pending);
        assert_eq!(u.restore(&mut pending, false), UNSENT_MAX);
        assert_eq!(bodies(&pending)[0].0, "c/10");
        assert_eq!(
            bodies(&pending)[UNSENT_MAX - 1].0,
            format!("c/{}", UNSENT_MAX + 9)
        );
    }
}
