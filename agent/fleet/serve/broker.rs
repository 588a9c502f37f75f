//! `fleet serve`'s own broker link as the log, the page, the API and `/metrics` show it: the
//! broker named (user info redacted), each loss logged once per cause and then at most every
//! [`LOG_EVERY_S`] (the link itself backs off, doubling to [`RECONNECT_MAX_S`]).

use std::time::{Duration, Instant};

/// The longest wait between reconnect attempts while the broker is away, seconds.
pub const RECONNECT_MAX_S: u64 = 60;

/// While the same failure repeats, it is logged at most this often, seconds.
pub const LOG_EVERY_S: u64 = 300;

/// The link's state and what was last logged about it.
pub struct BrokerLog {
    nodes: Vec<String>,
    /// The node that answered last (index into `nodes`).
    node: usize,
    connected: bool,
    last_cause: Option<String>,
    last_logged: Option<Instant>,
    failures: u64,
}

impl BrokerLog {
    /// The link to the broker list `list` (`--broker`), not yet connected.
    pub fn new(list: &str) -> BrokerLog {
        BrokerLog {
            nodes: crate::mqtt::split_urls(list)
                .map(crate::mqtt::redact_url)
                .collect(),
            node: 0,
            connected: false,
            last_cause: None,
            last_logged: None,
            failures: 0,
        }
    }

    /// The broker as logs and the page show it: the node that answered last, or the list.
    pub fn shown(&self) -> String {
        match (self.connected, self.nodes.get(self.node)) {
            (true, Some(n)) => n.clone(),
            _ => self.nodes.join(","),
        }
    }

    /// Node `node` answered: logged at info.
    pub fn connected(&mut self, node: usize) {
        self.node = node;
        self.connected = true;
        let after = match self.failures {
            0 => String::new(),
            n => format!(" (after {n} failed attempts)"),
        };
        tracing::info!("connected to {}{after}", self.shown());
        self.failures = 0;
        self.last_cause = None;
        self.last_logged = None;
    }

    /// The connection failed or dropped (`cause`: its short stable form); the link retries in
    /// `retry_in_ms`. Logged at warn when the link was up, the cause changed, or
    /// [`LOG_EVERY_S`] passed; else at debug.
    pub fn lost(&mut self, reason: &str, cause: &str, retry_in_ms: u64) {
        let was_up = self.connected;
        let shown = self.shown();
        self.connected = false;
        self.failures = self.failures.saturating_add(1);
        let due = self
            .last_logged
            .is_none_or(|t| t.elapsed() >= Duration::from_secs(LOG_EVERY_S));
        let retry_s = retry_in_ms.div_ceil(1000);
        if was_up || due || self.last_cause.as_deref() != Some(cause) {
            let what = match was_up {
                true => "connection lost",
                false => "cannot connect",
            };
            tracing::warn!(
                "broker {shown}: {what}: {reason} (retrying in {retry_s} s; {} attempts so far)",
                self.failures
            );
            self.last_logged = Some(Instant::now());
            self.last_cause = Some(cause.to_string());
        } else {
            tracing::debug!("broker {shown}: {reason} (retrying in {retry_s} s)");
        }
    }

    /// Whether the link is up.
    pub fn is_connected(&self) -> bool {
        self.connected
    }
}
