//! Messages from the broker on their way into the fleet. A broker keeps a bounded queue per
//! client and drops what a slow reader leaves in it (mosquitto: `max_queued_messages`, 1000 by
//! default, for QoS 0 too; NATS: `max_pending`), and a fleet publishes statuses faster than
//! their seal checks and history writes go (a few thousand a second on one core): when
//! `fleet serve` read and checked in one loop, on the one runtime thread that also serves HTTP,
//! it lost boards for good (100,000 boards on mosquitto: 24,223 taken; bench
//! `fleet_serve_brokers`). So the subscription is read as fast as the broker sends, and a
//! thread of its own takes the messages into the fleet in batches, one hold of the fleet's lock
//! each. The queue is bounded by bytes ([`MAX_QUEUED_BYTES`]): past it the reader waits, and the
//! broker's own bound applies again.

use super::http::Shared;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use tokio::sync::{mpsc, Notify};

/// The most bytes (topics and payloads) waiting for the fleet: about 130,000 compact statuses.
pub const MAX_QUEUED_BYTES: usize = 256 << 20;

/// The most messages taken under one hold of the fleet's lock (a page or `/metrics` waits at
/// most that long).
pub const BATCH: usize = 256;

struct Msg {
    topic: String,
    payload: Vec<u8>,
    at_s: i64,
}

impl Msg {
    fn bytes(&self) -> usize {
        self.topic.len() + self.payload.len()
    }
}

/// The reader's end: messages go in, a thread takes them into the fleet. Dropping it ends that
/// thread once the queue is empty.
pub struct Inbox {
    tx: mpsc::UnboundedSender<Msg>,
    queued: Arc<AtomicUsize>,
    drained: Arc<Notify>,
    max_bytes: usize,
}

impl Inbox {
    /// Starts the thread that takes queued messages into `shared`'s fleet, with at most
    /// `max_bytes` queued ([`MAX_QUEUED_BYTES`] in the service).
    ///
    /// Errors: the thread cannot be started.
    pub fn start(shared: Arc<Shared>, max_bytes: usize) -> std::io::Result<Inbox> {
        let (tx, rx) = mpsc::unbounded_channel();
        let queued = Arc::new(AtomicUsize::new(0));
        let drained = Arc::new(Notify::new());
        let (q, d) = (queued.clone(), drained.clone());
        std::thread::Builder::new()
            .name("serve-fleet".into())
            .spawn(move || take_all(rx, &shared, &q, &d))?;
        Ok(Inbox {
            tx,
            queued,
            drained,
            max_bytes,
        })
    }

    /// Queues a message received at `at_s` (Unix seconds); first waits while more than the
    /// bound is queued.
    pub async fn push(&self, topic: String, payload: Vec<u8>, at_s: i64) {
        while self.queued.load(Ordering::Acquire) > self.max_bytes {
            self.drained.notified().await;
        }
        let m = Msg {
            topic,
            payload,
            at_s,
        };
        self.queued.fetch_add(m.bytes(), Ordering::AcqRel);
        let _ = self.tx.send(m);
    }

    /// Bytes waiting for the fleet now.
    pub fn queued_bytes(&self) -> usize {
        self.queued.load(Ordering::Acquire)
    }
}

/// The thread: batches of at most [`BATCH`] messages into the fleet until the inbox is gone.
fn take_all(
    mut rx: mpsc::UnboundedReceiver<Msg>,
    shared: &Shared,
    queued: &AtomicUsize,
    drained: &Notify,
) {
    while let Some(first) = rx.blocking_recv() {
        let mut batch = vec![first];
        while batch.len() < BATCH {
            match rx.try_recv() {
                Ok(m) => batch.push(m),
                Err(_) => break,
            }
        }
        {
            let mut fleet = super::lock(shared);
            for m in &batch {
                fleet.take(&m.topic, &m.payload, m.at_s);
            }
        }
        let bytes: usize = batch.iter().map(Msg::bytes).sum();
        queued.fetch_sub(bytes, Ordering::AcqRel);
        drained.notify_one();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fleet::known::KnownBoards;
    use crate::fleet::serve::metrics::Cardinality;
    use crate::fleet::serve::state::{Fleet, Staleness};
    use crate::fleet::serve::store::Sqlite;
    use crate::fleet::serve::tests::{sealed, NOW};
    use crate::mqtt::ed25519::SigningKey;
    use std::time::{Duration, Instant};

    fn shared(dir: &std::path::Path) -> Arc<Shared> {
        let keys = KnownBoards::load_accepting(Some(&dir.join("known_boards")), 1000);
        let store = Box::new(Sqlite::open(dir).unwrap());
        let fleet = Fleet::new("npu-fleet", 1000, keys, store, Staleness::AfterS(60));
        Arc::new(Shared::new(
            fleet,
            Cardinality::All,
            std::net::Ipv4Addr::LOCALHOST.into(),
        ))
    }

    fn status(i: u8) -> (String, Vec<u8>) {
        let board = format!("b{i}");
        let key = SigningKey::from_bytes(&[i; 32]);
        let p = sealed(&key, &board, NOW, "ok", "");
        (format!("npu-fleet/{board}/status"), p)
    }

    /// Waits until the fleet holds `n` boards whose status is sealed by their key.
    fn wait_taken(s: &Shared, n: usize) {
        let t0 = Instant::now();
        loop {
            let boards = super::super::lock(s).boards(NOW);
            let sealed = boards
                .iter()
                .filter(|b| b.row.identity == "new key")
                .count();
            if sealed == n {
                return;
            }
            assert!(
                t0.elapsed() < Duration::from_secs(30),
                "{sealed} of {n} taken"
            );
            std::thread::yield_now();
        }
    }

    fn rt() -> tokio::runtime::Runtime {
        crate::sys::runtime::current_thread().unwrap()
    }

    #[test]
    fn the_reader_is_not_held_by_the_fleet_and_every_message_is_taken() {
        let dir = tempfile::tempdir().unwrap();
        let s = shared(dir.path());
        let inbox = Inbox::start(s.clone(), MAX_QUEUED_BYTES).unwrap();
        // The fleet locked, as while a page of 100,000 boards is rendered: before, the reader
        // waited here, and the broker dropped what came meanwhile.
        let held = super::super::lock(&s);
        let mut bytes = 0;
        rt().block_on(async {
            for i in 1..=200 {
                let (t, p) = status(i);
                bytes += t.len() + p.len();
                inbox.push(t, p, NOW).await;
            }
        });
        assert_eq!(
            inbox.queued_bytes(),
            bytes,
            "every push returned, nothing taken yet"
        );
        assert!(held.boards(NOW).is_empty());
        drop(held);
        wait_taken(&s, 200);
        let t0 = Instant::now();
        while inbox.queued_bytes() > 0 {
            assert!(t0.elapsed() < Duration::from_secs(30));
            std::thread::yield_now();
        }
    }

    #[test]
    fn past_the_bound_the_reader_waits_for_the_fleet() {
        let dir = tempfile::tempdir().unwrap();
        let s = shared(dir.path());
        let inbox = Inbox::start(s.clone(), 1).unwrap();
        let held = super::super::lock(&s);
        let rt = rt();
        let (t, p) = status(1);
        rt.block_on(inbox.push(t, p, NOW));
        let (t, p) = status(2);
        let second =
            async { tokio::time::timeout(Duration::from_millis(300), inbox.push(t, p, NOW)).await };
        assert!(
            rt.block_on(second).is_err(),
            "a second message went in past the bound while the fleet could take nothing"
        );
        drop(held);
        let (t, p) = status(2);
        let second =
            async { tokio::time::timeout(Duration::from_secs(30), inbox.push(t, p, NOW)).await };
        assert!(rt.block_on(second).is_ok(), "the reader waits for ever");
        wait_taken(&s, 2);
    }
}
