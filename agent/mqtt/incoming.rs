//! A message on a command topic, decoded once: its topic parsed (the action a kind), its
//! retain flag, and its payload's JSON decoded at most once, by whichever reader asks first —
//! the gate ([`super::command::parse`]), the clock hold, interrupted-command recovery and the
//! sweep of old answers all take this one value.

use super::topics::CommandTopic;
use serde_json::Value;
use std::cell::OnceCell;

/// One message on a command topic.
#[derive(Debug)]
pub struct Incoming<'a> {
    /// The topic, parsed.
    pub topic: CommandTopic,
    /// The payload as it came (hashed and seal-checked as bytes).
    pub payload: &'a [u8],
    /// The broker delivered it retained (a stored record, not a live message).
    pub retain: bool,
    json: OnceCell<Result<Value, serde_json::Error>>,
}

impl<'a> Incoming<'a> {
    /// The message `payload` on `topic`, `retain`ed or not; nothing is decoded yet.
    pub fn new(topic: CommandTopic, payload: &'a [u8], retain: bool) -> Incoming<'a> {
        Incoming {
            topic,
            payload,
            retain,
            json: OnceCell::new(),
        }
    }

    /// The payload's JSON, decoded on the first call only.
    ///
    /// Errors: the JSON decoder's, for a payload that is no JSON (an empty one included).
    pub fn json(&self) -> Result<&Value, &serde_json::Error> {
        self.json
            .get_or_init(|| serde_json::from_slice(self.payload))
            .as_ref()
    }

    /// The string field `name` of a JSON object payload.
    pub fn str_field(&self, name: &str) -> Option<&str> {
        self.json().ok()?.get(name)?.as_str()
    }

    /// The integer field `name` of a JSON object payload.
    pub fn i64_field(&self, name: &str) -> Option<i64> {
        self.json().ok()?.get(name)?.as_i64()
    }

    /// The lifecycle state the payload names (`status`), as written.
    pub fn status_word(&self) -> Option<&str> {
        self.str_field("status")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_payload_is_read_as_written_and_junk_is_no_field() {
        let t = CommandTopic::new("b1", "reboot", "c1");
        let m = Incoming::new(
            t,
            br#"{"status":"init","issued_at":5,"expires_at":"x"}"#,
            true,
        );
        assert_eq!(m.status_word(), Some("init"));
        assert_eq!(m.i64_field("issued_at"), Some(5));
        assert_eq!(m.i64_field("expires_at"), None);
        assert!(m.topic.kind.is_some() && m.retain);
        let junk = Incoming::new(CommandTopic::new("b1", "x", "c"), b"{", false);
        assert!(junk.json().is_err() && junk.status_word().is_none());
    }
}
