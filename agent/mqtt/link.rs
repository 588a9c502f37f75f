//! The MQTT connection (MQTT 5, rumqttc). One task owns the event loop and does nothing but poll
//! it and hand events over a bounded channel; it never awaits a publish (rumqttc #263). Errors are
//! followed by a capped exponential back-off with jitter (#703, #918). The CONNECT carries
//! Maximum Packet Size, so the broker never sends a packet bigger than the agent accepts — an
//! oversized retained message on a command topic cannot wedge the connection (#296, #884).
//! Subscriptions and retained state are re-established by the owner on every `Connected` event
//! (clean start: the session is never present, #250).

use rumqttc::v5::mqttbytes::v5::{LastWill, Packet};
use rumqttc::v5::mqttbytes::QoS;
use rumqttc::v5::{AsyncClient, Event, EventLoop, MqttOptions};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

/// Largest packet the agent accepts from the broker (commands are at most 4 KiB).
pub const MAX_INCOMING_PACKET_BYTES: u32 = 16 * 1024;

/// First back-off after a failed connection, and the cap.
pub const BACKOFF_MIN: Duration = Duration::from_millis(100);
/// Back-off cap: reconnect within about 2 s of the broker coming back.
pub const BACKOFF_MAX: Duration = Duration::from_millis(1600);

/// How to connect.
#[derive(Clone)]
pub struct LinkOptions {
    /// Broker host and port, TLS or not.
    pub url: super::BrokerUrl,
    /// TLS configuration when `url.tls`.
    pub tls: Option<Arc<rustls::ClientConfig>>,
    /// MQTT client id.
    pub client_id: String,
    /// Keep-alive.
    pub keep_alive: Duration,
    /// User name and password.
    pub credentials: Option<(String, String)>,
    /// Last will: (topic, payload), retained, QoS 1.
    pub last_will: Option<(String, Vec<u8>)>,
    /// Largest packet accepted from the broker.
    pub max_incoming_packet_bytes: u32,
    /// Connection timeout, seconds (a dead link is noticed in seconds, #295).
    pub connect_timeout_s: u64,
    /// Never drop an incoming message: wait for room in the event channel (operator tools that
    /// read thousands of retained messages). The agent leaves this off and drops on overflow.
    pub lossless: bool,
}

/// What the polling task reports.
#[derive(Debug, Clone, PartialEq)]
pub enum LinkEvent {
    /// CONNACK received.
    Connected {
        /// The broker kept a session (never with clean start).
        session_present: bool,
    },
    /// The connection failed or dropped; the task backs off and retries by itself.
    Disconnected {
        /// The error, as text.
        reason: String,
    },
    /// An incoming PUBLISH.
    Message {
        /// Topic.
        topic: String,
        /// Payload bytes.
        payload: Vec<u8>,
        /// Retained flag.
        retain: bool,
    },
}

/// A running connection: the client to publish with, the events, and the polling task.
pub struct Link {
    /// Publish/subscribe handle (use the `try_*` methods).
    pub client: AsyncClient,
    /// Events from the polling task.
    pub events: mpsc::Receiver<LinkEvent>,
    /// Unix milliseconds of the last poll that returned (a stalled loop stops moving it).
    pub progress_ms: Arc<AtomicU64>,
    /// Incoming messages dropped because the event channel was full.
    pub dropped: Arc<AtomicU64>,
    stopping: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// The next back-off: doubled, capped, with ±25 % jitter.
pub fn next_backoff(prev: Duration) -> Duration {
    let doubled = (prev * 2).clamp(BACKOFF_MIN, BACKOFF_MAX);
    let mut b = [0u8; 2];
    let _ = getrandom::fill(&mut b);
    let r = f64::from(u16::from_le_bytes(b)) / f64::from(u16::MAX); // 0..1
    doubled.mul_f64(0.75 + r * 0.5)
}

fn options(o: &LinkOptions) -> MqttOptions {
    let mut m = MqttOptions::new(o.client_id.clone(), o.url.host.clone(), o.url.port);
    m.set_keep_alive(o.keep_alive.max(Duration::from_secs(5)));
    m.set_clean_start(true);
    m.set_connection_timeout(o.connect_timeout_s);
    // Small packets (command states) must not wait for Nagle + delayed ACK (~40 ms each way).
    let mut net = rumqttc::NetworkOptions::new();
    net.set_tcp_nodelay(true);
    net.set_connection_timeout(o.connect_timeout_s);
    m.set_network_options(net);
    m.set_max_packet_size(Some(o.max_incoming_packet_bytes));
    m.set_request_channel_capacity(256);
    m.set_outgoing_inflight_upper_limit(32);
    if let Some((u, p)) = &o.credentials {
        m.set_credentials(u.clone(), p.clone());
    }
    if let Some((topic, payload)) = &o.last_will {
        m.set_last_will(LastWill::new(
            topic.clone(),
            payload.clone(),
            QoS::AtLeastOnce,
            true,
            None,
        ));
    }
    if let (true, Some(cfg)) = (o.url.tls, &o.tls) {
        m.set_transport(rumqttc::Transport::tls_with_config(
            rumqttc::TlsConfiguration::Rustls(cfg.clone()),
        ));
    }
    m
}

impl Link {
    /// Starts the connection and its polling task (on the current tokio runtime).
    pub fn start(o: &LinkOptions) -> Link {
        let (client, eventloop) = AsyncClient::new(options(o), 256);
        let (tx, rx) = mpsc::channel(1024);
        let progress_ms = Arc::new(AtomicU64::new(now_ms()));
        let dropped = Arc::new(AtomicU64::new(0));
        let stopping = Arc::new(AtomicBool::new(false));
        let task = tokio::spawn(poll_loop(
            eventloop,
            tx,
            progress_ms.clone(),
            dropped.clone(),
            stopping.clone(),
            o.lossless,
        ));
        Link {
            client,
            events: rx,
            progress_ms,
            dropped,
            stopping,
            task,
        }
    }

    /// Ends the connection: publishes nothing itself (publish `offline` first), sends DISCONNECT,
    /// and waits up to `wait` for the polling task to flush and stop.
    pub async fn shutdown(self, wait: Duration) {
        self.stopping.store(true, Ordering::SeqCst);
        let _ = self.client.try_disconnect();
        let mut task = self.task;
        if tokio::time::timeout(wait, &mut task).await.is_err() {
            task.abort();
        }
    }

    /// Abandons the connection at once (the broker then sends the last will).
    pub fn abort(self) {
        self.task.abort();
    }
}

async fn poll_loop(
    mut eventloop: EventLoop,
    tx: mpsc::Sender<LinkEvent>,
    progress: Arc<AtomicU64>,
    dropped: Arc<AtomicU64>,
    stopping: Arc<AtomicBool>,
    lossless: bool,
) {
    let mut backoff = Duration::ZERO;
    loop {
        let polled = eventloop.poll().await;
        progress.store(now_ms(), Ordering::Relaxed);
        match polled {
            Ok(Event::Incoming(Packet::ConnAck(ack))) => {
                backoff = Duration::ZERO;
                let _ = tx
                    .send(LinkEvent::Connected {
                        session_present: ack.session_present,
                    })
                    .await;
            }
            Ok(Event::Incoming(Packet::Publish(p))) => {
                let ev = LinkEvent::Message {
                    topic: String::from_utf8_lossy(&p.topic).into_owned(),
                    payload: p.payload.to_vec(),
                    retain: p.retain,
                };
                if lossless {
                    if tx.send(ev).await.is_err() {
                        return;
                    }
                } else if tx.try_send(ev).is_err() {
                    dropped.fetch_add(1, Ordering::Relaxed);
                }
            }
            Ok(Event::Outgoing(rumqttc::Outgoing::Disconnect))
                if stopping.load(Ordering::SeqCst) =>
            {
                // Let the DISCONNECT reach the socket, then stop.
                let _ = tokio::time::timeout(Duration::from_millis(200), eventloop.poll()).await;
                return;
            }
            Ok(_) => {}
            Err(e) => {
                if stopping.load(Ordering::SeqCst) {
                    return;
                }
                let _ = tx.try_send(LinkEvent::Disconnected {
                    reason: e.to_string(),
                });
                backoff = next_backoff(backoff);
                tokio::time::sleep(backoff).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_grows_and_is_capped() {
        let mut b = Duration::ZERO;
        let mut seen = Vec::new();
        for _ in 0..10 {
            b = next_backoff(b);
            seen.push(b);
        }
        assert!(
            seen[0] >= BACKOFF_MIN.mul_f64(0.75) && seen[0] <= BACKOFF_MIN.mul_f64(1.25),
            "{seen:?}"
        );
        assert!(
            seen.iter().all(|d| *d <= BACKOFF_MAX.mul_f64(1.25)),
            "{seen:?}"
        );
        assert!(seen[9] >= BACKOFF_MAX.mul_f64(0.75), "{seen:?}");
    }
}
