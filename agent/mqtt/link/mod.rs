//! The MQTT connection (MQTT 5, rumqttc). One task owns the event loop and does nothing but poll
//! it and hand events over a bounded channel; it never awaits a publish (rumqttc #263).
//!
//! No incoming message is lost inside the process: the task waits for room in the channel
//! rather than drop a message. The agent's link ([`LinkOptions::ack_when_handled`]) also
//! acknowledges a QoS 1 message only when the owner has handled it ([`Link::try_ack`], after the
//! command's answer is queued), and tells the broker (MQTT 5 Receive Maximum,
//! [`RECEIVE_MAXIMUM`]) to hold back the rest until then: a flood waits on the broker, not in
//! the agent's memory, the task keeps polling (pings, status publishes and the last will keep
//! working), and a message the client has acknowledged has always been handled. MQTT 3.1.1 has
//! no Receive Maximum; there the broker's own in-flight limit (mosquitto
//! `max_inflight_messages`, 20) does the same. Errors are
//! followed by a capped exponential back-off with jitter (#703, #918). The CONNECT carries
//! Maximum Packet Size, so the broker never sends a packet bigger than the agent accepts — an
//! oversized retained message on a command topic cannot wedge the connection (#296, #884).
//! Subscriptions and retained state are re-established by the owner on every `Connected` event
//! (clean start: the session is never present, #250).
//!
//! Back-off applies to every failure, also a disconnect soon after a successful CONNACK
//! ([`Reconnect`]); repeated kicks and MQTT 5 reason 0x8E are reported once as
//! [`LinkEvent::SessionTakenOver`] and waited out, up to a minute between attempts.
//!
//! A broker that refuses MQTT 5 the way 3.1.1-only brokers do — closes the socket after CONNECT
//! (RabbitMQ before 3.13), never answers (amqtt), answers a 3.1.1-form CONNACK (`20 02 00 01`)
//! and closes, or says "unsupported protocol version" — twice before any CONNACK, is reported as
//! [`LinkEvent::ProtocolRefused`] (with `auto_protocol`); the owner then starts the link again
//! with [`Protocol::V311`] and keeps it. MQTT 3.1.1 has no Maximum Packet Size, so there the client accepts up to
//! [`MAX_INCOMING_PACKET_BYTES_V311`]; a bigger retained message on a command topic would still
//! break the connection, and only a broker-side limit (mosquitto `message_size_limit`, RabbitMQ
//! `mqtt.max_packet_size`…) prevents that.

mod failure;
mod poll;
mod reconnect;
pub use failure::*;
use poll::*;
mod protocol;
pub use protocol::{Protocol, ProtocolSetting};
pub use reconnect::*;

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

fn v5_qos(q: rumqttc::QoS) -> QoS {
    match q {
        rumqttc::QoS::AtMostOnce => QoS::AtMostOnce,
        rumqttc::QoS::AtLeastOnce => QoS::AtLeastOnce,
        rumqttc::QoS::ExactlyOnce => QoS::ExactlyOnce,
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

    /// Whether an incoming message's retain flag on a [`MqttClient::try_subscribe_no_local`]
    /// subscription is the sender's (MQTT 5 Retain As Published). Under MQTT 3.1.1 a live
    /// message always arrives with the flag clear, whatever its sender asked.
    pub fn retain_as_published(&self) -> bool {
        matches!(self, MqttClient::V5(_))
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

    /// Queues one SUBSCRIBE for `filters` that does not deliver this client's own publishes
    /// back to it (MQTT 5 No Local, with Retain As Published; MQTT 3.1.1 has neither and
    /// subscribes plainly): the agent's answers on its command topics do not come back as
    /// messages to handle. Its SUBACK ([`LinkEvent::SubAck`]) has one code per filter, in order.
    pub fn try_subscribe_no_local(&self, filters: &[String], qos: QoS) -> Result<(), String> {
        match self {
            MqttClient::V5(c) => c
                .try_subscribe_many(filters.iter().map(|f| {
                    let mut f = rumqttc::v5::mqttbytes::v5::Filter::new(f.clone(), qos);
                    f.nolocal = true;
                    // Retain As Published: a message's retain flag says whether its sender had
                    // the broker keep it (see [`MqttClient::retain_as_published`]).
                    f.preserve_retain = true;
                    f
                }))
                .map_err(|e| e.to_string()),
            MqttClient::V311(_) => self.try_subscribe_many(filters, qos),
        }
    }

    /// Queues one SUBSCRIBE carrying every filter in `filters` (the broker answers it with one
    /// SUBACK and then the retained messages of each filter, in order).
    pub fn try_subscribe_many(&self, filters: &[String], qos: QoS) -> Result<(), String> {
        match self {
            MqttClient::V5(c) => c
                .try_subscribe_many(
                    filters
                        .iter()
                        .map(|f| rumqttc::v5::mqttbytes::v5::Filter::new(f.clone(), qos)),
                )
                .map_err(|e| e.to_string()),
            MqttClient::V311(c) => c
                .try_subscribe_many(
                    filters
                        .iter()
                        .map(|f| rumqttc::SubscribeFilter::new(f.clone(), v311_qos(qos))),
                )
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
    /// User name and password (a [`crate::sys::secret::Secret`]: never in a log line or an error).
    pub credentials: Option<(String, crate::sys::secret::Secret)>,
    /// Last will: (topic, payload), retained, QoS 1.
    pub last_will: Option<(String, Vec<u8>)>,
    /// Largest packet accepted from the broker.
    pub max_incoming_packet_bytes: u32,
    /// Connection timeout, seconds (a dead link is noticed in seconds, #295).
    pub connect_timeout_s: u64,
    /// Never drop an incoming message: wait for room in the event channel (operator tools that
    /// read thousands of retained messages, and the agent). Off: drop on overflow (counted in
    /// [`Link::dropped`]).
    pub lossless: bool,
    /// The owner acknowledges each QoS 1 message once it has handled it ([`Link::try_ack`]);
    /// at most [`RECEIVE_MAXIMUM`] wait unacknowledged (MQTT 5). The agent's setting: a
    /// command flood is held back by the broker, and nothing acknowledged goes unanswered.
    pub ack_when_handled: bool,
    /// Protocol version to speak first.
    pub protocol: Protocol,
    /// `[mqtt] protocol = "auto"`: an MQTT 5 link whose CONNECT is refused the way 3.1.1-only
    /// brokers refuse it reports [`LinkEvent::ProtocolRefused`] so the owner can fall back.
    pub auto_protocol: bool,
    /// The longest reconnect wait ([`Reconnect`]): the agent's `[mqtt] reconnect_max_s`.
    pub reconnect_max: Duration,
    /// Other brokers (the nodes of a cluster), tried in turn after `url` when a connection
    /// fails or is lost ([`LinkEvent::Connected`] says which one answered).
    pub fallbacks: Vec<super::BrokerUrl>,
}

/// What the polling task reports.
#[derive(Debug, Clone, PartialEq)]
pub enum LinkEvent {
    /// CONNACK received.
    Connected {
        /// The broker kept a session (never with clean start).
        session_present: bool,
        /// MQTT 5 Maximum Packet Size from the CONNACK, bytes (`None`: no limit announced,
        /// or MQTT 3.1.1).
        max_packet_bytes: Option<u32>,
        /// Which broker answered: 0 for `url`, then the fallbacks in order.
        broker: usize,
    },
    /// The broker ended this client's session because another client connected with the same
    /// client id (MQTT 5 reason 0x8E), or closed connections soon after CONNACK again and again
    /// without a reason (a takeover under MQTT 3.1.1, or an overloaded broker). Reported once
    /// per streak; the link backs off (up to a minute) rather than fight.
    SessionTakenOver {
        /// What was seen.
        reason: String,
        /// The broker said so (reason code 0x8E); `false`: only the pattern of kicks was seen.
        said_by_broker: bool,
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
        /// The cause in a short stable form ([`Failure::cause`]): log it when it changes.
        cause: String,
        /// The connection had reached CONNACK before it ended.
        after_connack: bool,
        /// How long the link waits before the next attempt, milliseconds.
        retry_in_ms: u64,
    },
    /// A SUBACK: one code per filter of the SUBSCRIBE it answers, in order (0 to 2: granted at
    /// that QoS; 0x80 and up: refused, MQTT 5 reason codes; 3.1.1's refusal reads as 0x80).
    SubAck {
        /// The codes.
        codes: Vec<u8>,
    },
    /// An incoming PUBLISH.
    Message {
        /// Topic.
        topic: String,
        /// Payload bytes.
        payload: Vec<u8>,
        /// Retained flag.
        retain: bool,
        /// The acknowledgement to send once handled ([`Link::try_ack`]); `None` when there is
        /// none to send (QoS 0, or the link acknowledges on receipt).
        ack: Option<Ack>,
    },
}

/// Unacknowledged QoS 1 messages the broker may send an [`LinkOptions::ack_when_handled`] link
/// at once (MQTT 5 Receive Maximum): the most a flood puts in the agent's memory.
pub const RECEIVE_MAXIMUM: u16 = 32;

/// The acknowledgement of one incoming QoS 1 message, owed by the owner of an
/// [`LinkOptions::ack_when_handled`] link once it has handled the message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ack {
    /// MQTT packet identifier of the PUBLISH.
    pub pkid: u16,
    /// Its QoS (1: PUBACK; 2: PUBREC).
    pub qos: QoS,
    /// The connection it arrived on ([`Link::try_ack`] sends nothing for an older one: its
    /// packet identifier means nothing to the new session, and the broker delivers again).
    pub connection: u64,
}

/// Connection numbers, unique in the process (every link start and every failure takes one).
static CONNECTIONS: AtomicU64 = AtomicU64::new(1);

fn next_connection() -> u64 {
    CONNECTIONS.fetch_add(1, Ordering::Relaxed)
}

/// A running connection: the client to publish with, the events, and the polling task.
pub struct Link {
    /// Publish/subscribe handle (use the `try_*` methods).
    pub client: MqttClient,
    /// Events from the polling task.
    pub events: mpsc::Receiver<LinkEvent>,
    /// [`now_ms`] (monotonic) of the last poll that returned (a stalled loop stops moving it).
    pub progress_ms: Arc<AtomicU64>,
    /// Incoming messages dropped because the event channel was full (never with `lossless`).
    pub dropped: Arc<AtomicU64>,
    /// The current connection's number ([`Ack::connection`]).
    connection: Arc<AtomicU64>,
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

/// `url` then [`LinkOptions::fallbacks`].
fn brokers(o: &LinkOptions) -> Vec<&super::BrokerUrl> {
    std::iter::once(&o.url).chain(&o.fallbacks).collect()
}

/// The credentials to send to `url`: none to a plain node of a list that has a TLS node (the
/// config refuses such a list with credentials, [`super::refuse_mixed_tls`]; this is the link's
/// own guard, so a password meant for TLS is never sent in clear).
fn credentials_for<'a>(
    o: &'a LinkOptions,
    url: &super::BrokerUrl,
) -> Option<&'a (String, crate::sys::secret::Secret)> {
    let plain_beside_tls = !url.tls && brokers(o).iter().any(|b| b.tls);
    o.credentials.as_ref().filter(|_| !plain_beside_tls)
}

fn options(o: &LinkOptions, url: &super::BrokerUrl) -> MqttOptions {
    let mut m = MqttOptions::new(o.client_id.clone(), url.host.clone(), url.port);
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
    if o.ack_when_handled {
        m.set_manual_acks(true);
        m.set_receive_maximum(Some(RECEIVE_MAXIMUM));
    } else if o.lossless {
        // Operator tools: let the broker have every QoS 1 delivery in flight at once (mosquitto
        // otherwise uses max_inflight_messages, 20, and queues at most max_queued_messages, 1000,
        // dropping the rest of a large retained burst).
        m.set_receive_maximum(Some(u16::MAX));
    }
    if let Some((u, p)) = credentials_for(o, url) {
        m.set_credentials(u.clone(), p.expose().to_string());
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
    if let (true, Some(cfg)) = (url.tls, &o.tls) {
        m.set_transport(rumqttc::Transport::tls_with_config(
            rumqttc::TlsConfiguration::Rustls(cfg.clone()),
        ));
    }
    m
}

fn options_v311(o: &LinkOptions, url: &super::BrokerUrl) -> rumqttc::MqttOptions {
    let mut m = rumqttc::MqttOptions::new(o.client_id.clone(), url.host.clone(), url.port);
    m.set_keep_alive(o.keep_alive.max(Duration::from_secs(5)));
    m.set_clean_session(true);
    m.set_max_packet_size(
        MAX_INCOMING_PACKET_BYTES_V311,
        MAX_INCOMING_PACKET_BYTES_V311,
    );
    m.set_request_channel_capacity(256);
    m.set_inflight(32);
    m.set_manual_acks(o.ack_when_handled);
    if let Some((u, p)) = credentials_for(o, url) {
        m.set_credentials(u.clone(), p.expose().to_string());
    }
    if let Some((topic, payload)) = &o.last_will {
        m.set_last_will(rumqttc::LastWill::new(
            topic.clone(),
            payload.clone(),
            rumqttc::QoS::AtLeastOnce,
            true,
        ));
    }
    if let (true, Some(cfg)) = (url.tls, &o.tls) {
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
        let connection = Arc::new(AtomicU64::new(next_connection()));
        let stopping = Arc::new(AtomicBool::new(false));
        let task_ctx = TaskCtx {
            tx,
            progress: progress_ms.clone(),
            dropped: dropped.clone(),
            connection: connection.clone(),
            stopping: stopping.clone(),
            lossless: o.lossless || o.ack_when_handled,
            manual_acks: o.ack_when_handled,
            reconnect_max: o.reconnect_max,
        };
        let (client, task) = match o.protocol {
            Protocol::V5 => {
                let all: Vec<MqttOptions> = brokers(o).into_iter().map(|u| options(o, u)).collect();
                let (client, eventloop) = AsyncClient::new(all[0].clone(), 256);
                let task = tokio::spawn(poll_loop(eventloop, task_ctx, o.auto_protocol, all));
                (MqttClient::V5(client), task)
            }
            Protocol::V311 => {
                let all: Vec<rumqttc::MqttOptions> =
                    brokers(o).into_iter().map(|u| options_v311(o, u)).collect();
                let (client, mut eventloop) = rumqttc::AsyncClient::new(all[0].clone(), 256);
                let mut net = rumqttc::NetworkOptions::new();
                net.set_tcp_nodelay(true);
                net.set_connection_timeout(o.connect_timeout_s);
                eventloop.set_network_options(net);
                let task = tokio::spawn(poll_loop_v311(eventloop, task_ctx, all));
                (MqttClient::V311(client), task)
            }
        };
        Link {
            client,
            events: rx,
            progress_ms,
            dropped,
            connection,
            stopping,
            task,
        }
    }

    /// Acknowledges a handled message ([`LinkOptions::ack_when_handled`]). `Ok(true)`: queued;
    /// `Ok(false)`: nothing to send, the connection it came on has ended (the broker delivers
    /// it again); `Err`: the request queue is full, try again later.
    ///
    /// An acknowledgement never reaches a later connection: when a connection fails, rumqttc's
    /// `EventLoop::clean` drops the PUBACKs still queued, and a clean-start CONNACK (session never
    /// present) clears what it kept (PUBRECs); the polling task then takes a new connection number
    /// in the same poll, before any other task of the current-thread runtime can run, so an `ack`
    /// of the old connection queued afterwards is refused here.
    pub fn try_ack(&self, ack: &Ack) -> Result<bool, String> {
        if ack.connection != self.connection.load(Ordering::Relaxed) {
            return Ok(false);
        }
        match &self.client {
            MqttClient::V5(c) => {
                let p = rumqttc::v5::mqttbytes::v5::Publish {
                    qos: ack.qos,
                    pkid: ack.pkid,
                    ..Default::default()
                };
                c.try_ack(&p).map_err(|e| e.to_string())?;
            }
            MqttClient::V311(c) => {
                let mut p = rumqttc::Publish::new("", v311_qos(ack.qos), Vec::new());
                p.pkid = ack.pkid;
                c.try_ack(&p).map_err(|e| e.to_string())?;
            }
        }
        Ok(true)
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

#[cfg(test)]
mod tests {
    use super::*;

    /// A TCP peer that reads the client's CONNECT and then does what a 3.1.1-only broker does:
    /// `close`, `silent` (never answers), or `connack311` (`20 02 00 01`, then close). Serves
    /// every connection it gets until the test ends.
    fn refusing_peer(mode: &'static str) -> u16 {
        use std::io::{Read, Write};
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        std::thread::spawn(move || {
            for conn in l.incoming() {
                let Ok(mut c) = conn else { return };
                std::thread::spawn(move || {
                    let mut buf = [0u8; 512];
                    let _ = c.read(&mut buf); // the CONNECT
                    match mode {
                        "close" => {}
                        "connack311" => {
                            let _ = c.write_all(&[0x20, 0x02, 0x00, 0x01]);
                        }
                        _ => std::thread::sleep(Duration::from_secs(20)),
                    }
                });
            }
        });
        port
    }

    fn rt() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    /// What rumqttc 0.25 itself returns for each refusal, read by [`classify_v5`].
    fn v5_failure(port: u16) -> Failure {
        let mut m = MqttOptions::new("t", "127.0.0.1", port);
        m.set_connection_timeout(1);
        let (_c, mut ev) = AsyncClient::new(m, 10);
        let e = rt().block_on(ev.poll()).unwrap_err();
        classify_v5(&e)
    }

    #[test]
    fn real_library_errors_for_3_1_1_only_brokers_are_protocol_refusals() {
        for mode in ["close", "connack311", "silent"] {
            let f = v5_failure(refusing_peer(mode));
            let want = if mode == "silent" {
                matches!(f, Failure::NoAnswer)
            } else {
                matches!(f, Failure::ProtocolSuspect(_))
            };
            assert!(want, "{mode}: {f:?}");
        }
        // Nothing listening: an outage, not a protocol matter.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let f = v5_failure(port);
        assert!(matches!(f, Failure::Network(_)), "{f:?}");
    }

    /// Issue 37 item 1, the link's own guard: a plain node beside a TLS one never gets the
    /// credentials; a list of plain nodes only, or the TLS node, does.
    #[test]
    fn credentials_never_go_to_a_plain_node_of_a_list_with_tls() {
        let mut o = opts(1, Protocol::V5, false);
        o.credentials = Some(("u".into(), crate::sys::secret::Secret::from_file(b"pw")));
        let plain = o.url.clone();
        assert!(credentials_for(&o, &plain).is_some());
        o.url = crate::mqtt::parse_url("mqtts://127.0.0.1:2").unwrap();
        o.fallbacks = vec![plain.clone()];
        assert!(credentials_for(&o, &plain).is_none());
        assert!(credentials_for(&o, &o.url.clone()).is_some());
        assert!(options(&o, &plain).credentials().is_none());
        assert!(options_v311(&o, &plain).credentials().is_none());
    }

    fn opts(port: u16, protocol: Protocol, auto: bool) -> LinkOptions {
        LinkOptions {
            url: crate::mqtt::parse_url(&format!("mqtt://127.0.0.1:{port}")).unwrap(),
            tls: None,
            client_id: "t".into(),
            keep_alive: Duration::from_secs(30),
            credentials: None,
            last_will: None,
            max_incoming_packet_bytes: MAX_INCOMING_PACKET_BYTES,
            connect_timeout_s: 1,
            lossless: false,
            ack_when_handled: false,
            protocol,
            auto_protocol: auto,
            reconnect_max: Duration::from_secs(2),
            fallbacks: Vec::new(),
        }
    }

    #[test]
    fn auto_links_fall_back_and_fixed_ones_do_not() {
        rt().block_on(async {
            let port = refusing_peer("connack311");
            let mut link = Link::start(&opts(port, Protocol::V5, true));
            let mut disconnects = 0;
            let refused = tokio::time::timeout(Duration::from_secs(10), async {
                loop {
                    match link.events.recv().await {
                        Some(LinkEvent::ProtocolRefused { .. }) => return true,
                        Some(LinkEvent::Disconnected { cause, .. }) => {
                            assert!(cause.starts_with("no CONNACK"), "{cause}");
                            disconnects += 1;
                        }
                        _ => return false,
                    }
                }
            })
            .await;
            assert_eq!(refused, Ok(true));
            assert_eq!(disconnects, REFUSALS_BEFORE_FALLBACK - 1);
            // protocol = "5": keeps trying MQTT 5, backing off, never reports a refusal.
            let mut link = Link::start(&opts(port, Protocol::V5, false));
            let mut seen = 0;
            let _ = tokio::time::timeout(Duration::from_secs(2), async {
                while let Some(ev) = link.events.recv().await {
                    assert!(matches!(ev, LinkEvent::Disconnected { .. }), "{ev:?}");
                    seen += 1;
                }
            })
            .await;
            assert!((2..=6).contains(&seen), "{seen} attempts in 2 s");
        });
    }

    #[test]
    fn kicks_after_connack_back_off_and_are_read_as_takeover() {
        let mut p = Reconnect::default();
        let kick = Failure::Other("connection closed".into());
        let mut waits = Vec::new();
        let mut reported = 0;
        for _ in 0..6 {
            p.connack();
            match p.failed(&kick, Some(Duration::from_millis(50)), true) {
                Next::Retry {
                    wait,
                    report_takeover,
                } => {
                    waits.push(wait);
                    reported += usize::from(report_takeover);
                }
                Next::Fallback => panic!("no fallback after a CONNACK"),
            }
        }
        assert_eq!(reported, 1, "one report per streak");
        // The second kick already waits over a second, and the wait keeps growing to a minute.
        assert!(waits[1] >= Duration::from_millis(2400), "{waits:?}");
        assert!(waits[5] >= Duration::from_secs(38), "{waits:?}");
        assert!(waits.iter().all(|w| *w <= KICK_BACKOFF_MAX.mul_f64(1.25)));
        let total: Duration = waits.iter().sum();
        assert!(total >= Duration::from_secs(60), "6 kicks took {total:?}");
        // A connection that stayed up resets the streak, and after BACKOFF_RESET the back-off.
        p.connack();
        let Next::Retry { wait, .. } = p.failed(&kick, Some(BACKOFF_RESET), true) else {
            panic!()
        };
        assert!(wait < BACKOFF_BASE, "{wait:?}");
        // Reason 0x8E is a takeover at once, waited out for seconds.
        let mut p = Reconnect::default();
        p.connack();
        let next = p.failed(&Failure::SessionTakenOver, Some(STABLE_CONNECTION), true);
        let Next::Retry {
            wait,
            report_takeover,
        } = next
        else {
            panic!()
        };
        assert!(report_takeover);
        assert!(wait >= Duration::from_millis(2400), "{wait:?}");
        // Within a minute of the report, another 0x8E is the same streak: not reported again.
        p.connack();
        let Next::Retry {
            report_takeover, ..
        } = p.failed(&Failure::SessionTakenOver, Some(STABLE_CONNECTION), true)
        else {
            panic!()
        };
        assert!(!report_takeover);
        // After a connection that outlived the daemon's notice, a new takeover is reported.
        p.connack();
        let Next::Retry {
            report_takeover, ..
        } = p.failed(&Failure::SessionTakenOver, Some(TAKEOVER_FORGOTTEN), true)
        else {
            panic!()
        };
        assert!(
            report_takeover,
            "a takeover after a stable minute is reported again"
        );
    }

    #[test]
    fn backoff_is_full_jitter_doubling_to_the_cap_and_resets_after_a_stable_link() {
        let cap = Duration::from_secs(120);
        let s = Duration::from_secs;
        // The bound doubles from 1 s to the cap; the wait is a uniform share of it.
        assert_eq!(full_jitter(1, cap, 0.5), Duration::from_millis(500));
        assert_eq!(full_jitter(3, cap, 0.5), s(2));
        assert_eq!(full_jitter(8, cap, 0.5), s(60));
        assert_eq!(full_jitter(u32::MAX, cap, 1.0), cap);
        assert_eq!(full_jitter(5, cap, 0.0), Duration::ZERO);
        let wait = |n: Next| match n {
            Next::Retry { wait, .. } => wait,
            Next::Fallback => panic!("no fallback"),
        };
        let mut p = Reconnect::new(cap);
        let net = Failure::Network("connection refused".into());
        let waits: Vec<Duration> = (0..12).map(|_| wait(p.failed(&net, None, false))).collect();
        for (i, w) in waits.iter().enumerate() {
            assert!(*w < s(1 << i).min(cap) || *w == cap, "{i}: {waits:?}");
        }
        // Spread over the window, not pinned near zero (all three under 1 s: about one in 7
        // million).
        assert!(waits[9..].iter().any(|w| *w > s(1)), "{waits:?}");
        // A refused CONNECT (not authorised) waits the whole cap at once.
        let refused = Failure::Refused {
            code: 0x87,
            name: "not authorized".into(),
        };
        assert_eq!(wait(Reconnect::new(cap).failed(&refused, None, false)), cap);
        // A link up for BACKOFF_RESET starts again from the bottom; a shorter one does not.
        p.connack();
        assert!(wait(p.failed(&net, Some(BACKOFF_RESET), false)) < BACKOFF_BASE);
    }
}
