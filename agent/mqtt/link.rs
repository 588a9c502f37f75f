//! The MQTT connection (MQTT 5, rumqttc). One task owns the event loop and does nothing but poll
//! it and hand events over a bounded channel; it never awaits a publish (rumqttc #263). Errors are
//! followed by a capped exponential back-off with jitter (#703, #918). The CONNECT carries
//! Maximum Packet Size, so the broker never sends a packet bigger than the agent accepts — an
//! oversized retained message on a command topic cannot wedge the connection (#296, #884).
//! Subscriptions and retained state are re-established by the owner on every `Connected` event
//! (clean start: the session is never present, #250).
//!
//! A broker that refuses MQTT 5 (an unsupported-protocol CONNACK, or a CONNACK in 3.1.1 form) is
//! reported as [`LinkEvent::ProtocolRefused`]; the owner then starts the link again with
//! [`Protocol::V311`]. MQTT 3.1.1 has no Maximum Packet Size, so there the client accepts up to
//! [`MAX_INCOMING_PACKET_BYTES_V311`]; a bigger retained message on a command topic would still
//! break the connection, and only a broker-side limit (mosquitto `message_size_limit`, RabbitMQ
//! `mqtt.max_packet_size`…) prevents that.

use rumqttc::v5::mqttbytes::v5::{LastWill, Packet};
use rumqttc::v5::mqttbytes::QoS;
use rumqttc::v5::{AsyncClient, Event, EventLoop, MqttOptions};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

/// Largest packet the agent accepts from the broker (commands are at most 4 KiB).
pub const MAX_INCOMING_PACKET_BYTES: u32 = 16 * 1024;

/// Largest incoming packet over MQTT 3.1.1, where the broker cannot be told a limit.
pub const MAX_INCOMING_PACKET_BYTES_V311: usize = 1 << 20;

/// The MQTT protocol version spoken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// MQTT 5 (the default; Maximum Packet Size protects the connection).
    V5,
    /// MQTT 3.1.1, for brokers that refuse 5.
    V311,
}

/// A publish/subscribe handle for either protocol (the `try_*` calls never wait).
#[derive(Clone)]
pub enum MqttClient {
    /// MQTT 5.
    V5(AsyncClient),
    /// MQTT 3.1.1.
    V311(rumqttc::AsyncClient),
}

fn v311_qos(q: QoS) -> rumqttc::QoS {
    match q {
        QoS::AtMostOnce => rumqttc::QoS::AtMostOnce,
        QoS::AtLeastOnce => rumqttc::QoS::AtLeastOnce,
        QoS::ExactlyOnce => rumqttc::QoS::ExactlyOnce,
    }
}

impl MqttClient {
    /// Queues a publish; `Err` when the request queue is full (the caller keeps it for later).
    pub fn try_publish<S: Into<String>>(
        &self,
        topic: S,
        qos: QoS,
        retain: bool,
        payload: Vec<u8>,
    ) -> Result<(), String> {
        match self {
            MqttClient::V5(c) => c
                .try_publish(topic, qos, retain, payload)
                .map_err(|e| e.to_string()),
            MqttClient::V311(c) => c
                .try_publish(topic, v311_qos(qos), retain, payload)
                .map_err(|e| e.to_string()),
        }
    }

    /// Queues a subscription.
    pub fn try_subscribe<S: Into<String>>(&self, filter: S, qos: QoS) -> Result<(), String> {
        match self {
            MqttClient::V5(c) => c.try_subscribe(filter, qos).map_err(|e| e.to_string()),
            MqttClient::V311(c) => c
                .try_subscribe(filter, v311_qos(qos))
                .map_err(|e| e.to_string()),
        }
    }

    /// Queues a DISCONNECT.
    pub fn try_disconnect(&self) -> Result<(), String> {
        match self {
            MqttClient::V5(c) => c.try_disconnect().map_err(|e| e.to_string()),
            MqttClient::V311(c) => c.try_disconnect().map_err(|e| e.to_string()),
        }
    }
}

/// True when a failed MQTT 5 connection attempt means the broker does not speak MQTT 5 (rather
/// than being down, unreachable or refusing the credentials).
pub fn is_protocol_refusal(e: &rumqttc::v5::ConnectionError) -> bool {
    use rumqttc::v5::mqttbytes::v5::ConnectReturnCode;
    use rumqttc::v5::{ConnectionError, StateError};
    matches!(
        e,
        ConnectionError::ConnectionRefused(ConnectReturnCode::UnsupportedProtocolVersion)
            | ConnectionError::MqttState(StateError::Deserialization(_))
            | ConnectionError::NotConnAck(_)
    )
}

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
    /// Protocol version to speak.
    pub protocol: Protocol,
}

/// What the polling task reports.
#[derive(Debug, Clone, PartialEq)]
pub enum LinkEvent {
    /// CONNACK received.
    Connected {
        /// The broker kept a session (never with clean start).
        session_present: bool,
    },
    /// The broker does not speak MQTT 5: start the link again with [`Protocol::V311`]. The
    /// polling task has stopped.
    ProtocolRefused {
        /// The error, as text.
        reason: String,
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
    pub client: MqttClient,
    /// Events from the polling task.
    pub events: mpsc::Receiver<LinkEvent>,
    /// [`now_ms`] (monotonic) of the last poll that returned (a stalled loop stops moving it).
    pub progress_ms: Arc<AtomicU64>,
    /// Incoming messages dropped because the event channel was full.
    pub dropped: Arc<AtomicU64>,
    stopping: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

/// Milliseconds on a monotonic clock (since the first call in this process): the event loop's
/// progress stamp. Not the wall clock, which jumps on boards without an RTC when NTP sets it.
pub fn now_ms() -> u64 {
    static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    let start = START.get_or_init(std::time::Instant::now);
    u64::try_from(start.elapsed().as_millis()).unwrap_or(u64::MAX)
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

fn options_v311(o: &LinkOptions) -> rumqttc::MqttOptions {
    let mut m = rumqttc::MqttOptions::new(o.client_id.clone(), o.url.host.clone(), o.url.port);
    m.set_keep_alive(o.keep_alive.max(Duration::from_secs(5)));
    m.set_clean_session(true);
    m.set_max_packet_size(
        MAX_INCOMING_PACKET_BYTES_V311,
        MAX_INCOMING_PACKET_BYTES_V311,
    );
    m.set_request_channel_capacity(256);
    m.set_inflight(32);
    if let Some((u, p)) = &o.credentials {
        m.set_credentials(u.clone(), p.clone());
    }
    if let Some((topic, payload)) = &o.last_will {
        m.set_last_will(rumqttc::LastWill::new(
            topic.clone(),
            payload.clone(),
            rumqttc::QoS::AtLeastOnce,
            true,
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
        let (tx, rx) = mpsc::channel(1024);
        let progress_ms = Arc::new(AtomicU64::new(now_ms()));
        let dropped = Arc::new(AtomicU64::new(0));
        let stopping = Arc::new(AtomicBool::new(false));
        let (client, task) = match o.protocol {
            Protocol::V5 => {
                let (client, eventloop) = AsyncClient::new(options(o), 256);
                let task = tokio::spawn(poll_loop(
                    eventloop,
                    tx,
                    progress_ms.clone(),
                    dropped.clone(),
                    stopping.clone(),
                    o.lossless,
                ));
                (MqttClient::V5(client), task)
            }
            Protocol::V311 => {
                let (client, mut eventloop) = rumqttc::AsyncClient::new(options_v311(o), 256);
                let mut net = rumqttc::NetworkOptions::new();
                net.set_tcp_nodelay(true);
                net.set_connection_timeout(o.connect_timeout_s);
                eventloop.set_network_options(net);
                let task = tokio::spawn(poll_loop_v311(
                    eventloop,
                    tx,
                    progress_ms.clone(),
                    dropped.clone(),
                    stopping.clone(),
                    o.lossless,
                ));
                (MqttClient::V311(client), task)
            }
        };
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

/// Hands an incoming message to the owner: waiting for room when `lossless`, else dropping it
/// (counted) when the channel is full. `false` when the owner is gone.
async fn forward(
    tx: &mpsc::Sender<LinkEvent>,
    ev: LinkEvent,
    lossless: bool,
    dropped: &AtomicU64,
) -> bool {
    if lossless {
        return tx.send(ev).await.is_ok();
    }
    if tx.try_send(ev).is_err() {
        dropped.fetch_add(1, Ordering::Relaxed);
    }
    true
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
    let mut ever_connected = false;
    let mut refusals = 0;
    loop {
        let polled = eventloop.poll().await;
        progress.store(now_ms(), Ordering::Relaxed);
        match polled {
            Ok(Event::Incoming(Packet::ConnAck(ack))) => {
                backoff = Duration::ZERO;
                ever_connected = true;
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
                if !forward(&tx, ev, lossless, &dropped).await {
                    return;
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
                // Twice refused before ever connecting: the broker does not speak MQTT 5.
                if !ever_connected && is_protocol_refusal(&e) {
                    refusals += 1;
                    if refusals >= 2 {
                        let _ = tx
                            .send(LinkEvent::ProtocolRefused {
                                reason: e.to_string(),
                            })
                            .await;
                        return;
                    }
                }
                let _ = tx.try_send(LinkEvent::Disconnected {
                    reason: super::explain_connection_error(&e.to_string()),
                });
                backoff = next_backoff(backoff);
                tokio::time::sleep(backoff).await;
            }
        }
    }
}

async fn poll_loop_v311(
    mut eventloop: rumqttc::EventLoop,
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
            Ok(rumqttc::Event::Incoming(rumqttc::Packet::ConnAck(ack))) => {
                backoff = Duration::ZERO;
                let _ = tx
                    .send(LinkEvent::Connected {
                        session_present: ack.session_present,
                    })
                    .await;
            }
            Ok(rumqttc::Event::Incoming(rumqttc::Packet::Publish(p))) => {
                let ev = LinkEvent::Message {
                    topic: p.topic.clone(),
                    payload: p.payload.to_vec(),
                    retain: p.retain,
                };
                if !forward(&tx, ev, lossless, &dropped).await {
                    return;
                }
            }
            Ok(rumqttc::Event::Outgoing(rumqttc::Outgoing::Disconnect))
                if stopping.load(Ordering::SeqCst) =>
            {
                let _ = tokio::time::timeout(Duration::from_millis(200), eventloop.poll()).await;
                return;
            }
            Ok(_) => {}
            Err(e) => {
                if stopping.load(Ordering::SeqCst) {
                    return;
                }
                let _ = tx.try_send(LinkEvent::Disconnected {
                    reason: super::explain_connection_error(&e.to_string()),
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
    fn protocol_refusals_are_told_from_outages() {
        use rumqttc::v5::mqttbytes::v5::ConnectReturnCode;
        use rumqttc::v5::{ConnectionError, StateError};
        assert!(is_protocol_refusal(&ConnectionError::ConnectionRefused(
            ConnectReturnCode::UnsupportedProtocolVersion
        )));
        // A 3.1.1 broker answers CONNACK return code 1, which is no MQTT 5 reason code.
        assert!(is_protocol_refusal(&ConnectionError::MqttState(
            StateError::Deserialization(rumqttc::v5::mqttbytes::Error::InvalidConnectReturnCode(1))
        )));
        assert!(!is_protocol_refusal(&ConnectionError::ConnectionRefused(
            ConnectReturnCode::NotAuthorized
        )));
        assert!(!is_protocol_refusal(&ConnectionError::Io(
            std::io::Error::from(std::io::ErrorKind::ConnectionRefused)
        )));
    }

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
