//! Publishes a dropped connection took with it, sent again on the next one.
//!
//! When a connection fails, rumqttc moves the unacknowledged publishes and the requests still
//! in its channel to `EventLoop::pending`, and a clean-start CONNACK (the session is never
//! present here) clears that list: a command's final state queued just before a session
//! takeover would be gone, and the broker would keep `executing` (or `init`) for good. The
//! polling task takes that list after each failure ([`Unsent::take`]) and puts the publishes
//! under one topic prefix back first after the CONNACK ([`Unsent::restore`]), in their order,
//! with new packet identifiers.

use std::collections::VecDeque;

/// Most requests kept across a run of failed connections (the oldest go first).
pub const UNSENT_MAX: usize = 1024;

/// A request of either protocol's event loop that may be a publish.
pub(super) trait Resendable {
    /// A publish whose topic starts with `prefix`, made ready for a new session (no packet
    /// identifier, not a duplicate); `false` for anything else.
    fn renew_under(&mut self, prefix: &[u8]) -> bool;
}

impl Resendable for rumqttc::v5::Request {
    fn renew_under(&mut self, prefix: &[u8]) -> bool {
        let rumqttc::v5::Request::Publish(p) = self else {
            return false;
        };
        (p.pkid, p.dup) = (0, false);
        p.topic.starts_with(prefix)
    }
}

impl Resendable for rumqttc::Request {
    fn renew_under(&mut self, prefix: &[u8]) -> bool {
        let rumqttc::Request::Publish(p) = self else {
            return false;
        };
        (p.pkid, p.dup) = (0, false);
        p.topic.as_bytes().starts_with(prefix)
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
            self.kept.append(pending);
            let over = self.kept.len().saturating_sub(UNSENT_MAX);
            self.kept.drain(..over);
        }
    }

    /// On a CONNACK (a clean start: the session is never present): puts the kept publishes
    /// under the prefix back in front of `pending`, in their order; a later state of a topic
    /// goes after an earlier one, so the broker keeps the newest. Returns how many go again.
    pub(super) fn restore(&mut self, pending: &mut VecDeque<R>) -> usize {
        let Some(prefix) = &self.prefix else {
            return 0;
        };
        let mut back = std::mem::take(&mut self.kept);
        back.retain_mut(|r| r.renew_under(prefix.as_bytes()));
        let n = back.len();
        back.append(pending);
        *pending = back;
        n
    }
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
    fn the_answers_go_first_on_the_next_connection_in_their_order() {
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
        assert_eq!(u.restore(&mut pending), 3);
        assert_eq!(
            bodies(&pending),
            [
                ("r/b1/cmd/rescan/a".into(), "executing".into(), 0, false),
                ("r/b1/cmd/rescan/b".into(), "rejected".into(), 0, false),
                ("r/b1/cmd/rescan/a".into(), "successful".into(), 0, false),
                ("r/b1/status".into(), "{new}".into(), 0, true),
            ]
        );
        // Nothing is sent twice on the connection after.
        assert_eq!(u.restore(&mut pending), 0);
        assert_eq!(pending.len(), 4);
    }

    #[test]
    fn without_a_prefix_the_list_is_left_to_rumqttc() {
        let mut off = Unsent::new(None);
        let mut pending: VecDeque<Request> = [publish("x/1", "a", 7), Request::PingReq].into();
        off.take(&mut pending);
        assert_eq!(pending.len(), 2);
        assert_eq!(off.restore(&mut pending), 0);
        // MQTT 3.1.1 requests go the same way.
        let mut u = Unsent::new(Some("c/".to_string()));
        let mut q: VecDeque<rumqttc::Request> = [rumqttc::Request::Publish(rumqttc::Publish::new(
            "c/1",
            rumqttc::QoS::AtLeastOnce,
            b"x".to_vec(),
        ))]
        .into();
        u.take(&mut q);
        assert_eq!(u.restore(&mut q), 1);
        assert!(matches!(&q[0], rumqttc::Request::Publish(p) if p.topic == "c/1" && p.pkid == 0));
    }

    #[test]
    fn at_most_the_newest_unsent_max_are_kept() {
        let mut u = Unsent::new(Some("c/".to_string()));
        let mut pending: VecDeque<Request> = (0..UNSENT_MAX + 10)
            .map(|i| publish(&format!("c/{i}"), "x", 1))
            .collect();
        u.take(&mut pending);
        assert_eq!(u.restore(&mut pending), UNSENT_MAX);
        assert_eq!(bodies(&pending)[0].0, "c/10");
    }
}
