//! The task that owns and polls the rumqttc event loop and turns what it sees into
//! [`LinkEvent`]s, one loop per protocol version.

use super::*;

/// What the polling task shares with its [`Link`].
pub(super) struct TaskCtx {
    pub(super) tx: mpsc::Sender<LinkEvent>,
    pub(super) progress: Arc<AtomicU64>,
    pub(super) dropped: Arc<AtomicU64>,
    pub(super) connection: Arc<AtomicU64>,
    pub(super) stopping: Arc<AtomicBool>,
    /// Wait for room in the channel instead of dropping.
    pub(super) lossless: bool,
    /// The owner acknowledges QoS 1 messages ([`Ack`]).
    pub(super) manual_acks: bool,
    /// The longest reconnect wait.
    pub(super) reconnect_max: Duration,
}

impl TaskCtx {
    /// The acknowledgement the owner owes for a message with this QoS and packet id.
    fn ack(&self, qos: QoS, pkid: u16) -> Option<Ack> {
        (self.manual_acks && qos != QoS::AtMostOnce).then(|| Ack {
            pkid,
            qos,
            connection: self.connection.load(Ordering::Relaxed),
        })
    }

    /// The connection ended: acknowledgements owed for it are void from now on.
    fn connection_ended(&self) {
        self.connection.store(next_connection(), Ordering::Relaxed);
    }

    /// Hands an incoming message to the owner: waiting for room when `lossless` (the poll loop
    /// then pauses; with acknowledgements owed, the broker holds back the rest), else dropping
    /// it (counted) when the channel is full. `false` when the owner is gone.
    async fn forward(&self, ev: LinkEvent) -> bool {
        if self.lossless {
            return self.tx.send(ev).await.is_ok();
        }
        if self.tx.try_send(ev).is_err() {
            self.dropped.fetch_add(1, Ordering::Relaxed);
        }
        true
    }
}

/// An MQTT 5 SUBACK reason code as sent on the wire (section 3.9.3).
fn v5_suback_code(c: &rumqttc::v5::mqttbytes::v5::SubscribeReasonCode) -> u8 {
    use rumqttc::v5::mqttbytes::v5::SubscribeReasonCode as R;
    match c {
        R::Success(q) => *q as u8,
        R::Failure | R::Unspecified => 0x80,
        R::ImplementationSpecific => 0x83,
        R::NotAuthorized => 0x87,
        R::TopicFilterInvalid => 0x8f,
        R::PkidInUse => 0x91,
        R::QuotaExceeded => 0x97,
        R::SharedSubscriptionsNotSupported => 0x9e,
        R::SubscriptionIdNotSupported => 0xa1,
        R::WildcardSubscriptionsNotSupported => 0xa2,
    }
}

/// Applies the policy to a failure: reports it, then sleeps. `false`: stop the task.
pub(super) async fn after_failure(
    policy: &mut Reconnect,
    tx: &mpsc::Sender<LinkEvent>,
    f: Failure,
    reason: String,
    auto: bool,
) -> bool {
    let up_for = policy.up_for();
    // The daemon logs each loss at warn (rate-limited); this is the link's own trace of it.
    tracing::debug!(
        cause = f.cause(),
        after_connack = up_for.is_some(),
        "connection failed: {reason}"
    );
    match policy.failed(&f, up_for, auto) {
        Next::Fallback => {
            let _ = tx.send(LinkEvent::ProtocolRefused { reason }).await;
            false
        }
        Next::Retry {
            wait,
            report_takeover,
        } => {
            if report_takeover {
                let _ = tx
                    .send(LinkEvent::SessionTakenOver {
                        reason: f.cause(),
                        said_by_broker: f == Failure::SessionTakenOver,
                    })
                    .await;
            }
            let _ = tx.try_send(LinkEvent::Disconnected {
                reason,
                cause: f.cause(),
                after_connack: up_for.is_some(),
                retry_in_ms: wait.as_millis() as u64,
            });
            tokio::time::sleep(wait).await;
            true
        }
    }
}

pub(super) async fn poll_loop(
    mut eventloop: EventLoop,
    ctx: TaskCtx,
    auto: bool,
    brokers: Vec<rumqttc::v5::MqttOptions>,
) {
    let tx = &ctx.tx;
    let mut policy = Reconnect::new(ctx.reconnect_max);
    let mut broker = 0;
    loop {
        let polled = eventloop.poll().await;
        ctx.progress.store(now_ms(), Ordering::Relaxed);
        match polled {
            Ok(Event::Incoming(Packet::ConnAck(ack))) => {
                policy.connack();
                let _ = tx
                    .send(LinkEvent::Connected {
                        session_present: ack.session_present,
                        max_packet_bytes: ack.properties.and_then(|p| p.max_packet_size),
                        broker,
                    })
                    .await;
            }
            Ok(Event::Incoming(Packet::SubAck(ack))) => {
                let codes = ack.return_codes.iter().map(v5_suback_code).collect();
                // Not awaited: a SUBACK lost to a full channel is taken as none (sent again).
                let _ = tx.try_send(LinkEvent::SubAck { codes });
            }
            Ok(Event::Incoming(Packet::Publish(p))) => {
                let ev = LinkEvent::Message {
                    topic: String::from_utf8_lossy(&p.topic).into_owned(),
                    payload: p.payload.to_vec(),
                    retain: p.retain,
                    ack: ctx.ack(p.qos, p.pkid),
                };
                if !ctx.forward(ev).await {
                    return;
                }
            }
            Ok(Event::Outgoing(rumqttc::Outgoing::Disconnect))
                if ctx.stopping.load(Ordering::SeqCst) =>
            {
                // Let the DISCONNECT reach the socket, then stop.
                let _ = tokio::time::timeout(Duration::from_millis(200), eventloop.poll()).await;
                return;
            }
            Ok(_) => {}
            Err(e) => {
                ctx.connection_ended();
                if ctx.stopping.load(Ordering::SeqCst) {
                    return;
                }
                let f = classify_v5(&e);
                // Another node of the cluster next (the back-off still applies).
                if brokers.len() > 1 {
                    broker = (broker + 1) % brokers.len();
                    eventloop.options = brokers[broker].clone();
                }
                if !after_failure(
                    &mut policy,
                    tx,
                    f,
                    crate::mqtt::explain_connection_error(&e.to_string()),
                    auto,
                )
                .await
                {
                    return;
                }
            }
        }
    }
}

pub(super) async fn poll_loop_v311(
    mut eventloop: rumqttc::EventLoop,
    ctx: TaskCtx,
    brokers: Vec<rumqttc::MqttOptions>,
) {
    let tx = &ctx.tx;
    let mut policy = Reconnect::new(ctx.reconnect_max);
    let mut broker = 0;
    loop {
        let polled = eventloop.poll().await;
        ctx.progress.store(now_ms(), Ordering::Relaxed);
        match polled {
            Ok(rumqttc::Event::Incoming(rumqttc::Packet::ConnAck(ack))) => {
                policy.connack();
                let _ = tx
                    .send(LinkEvent::Connected {
                        session_present: ack.session_present,
                        max_packet_bytes: None,
                        broker,
                    })
                    .await;
            }
            Ok(rumqttc::Event::Incoming(rumqttc::Packet::SubAck(ack))) => {
                let codes = ack
                    .return_codes
                    .iter()
                    .map(|c| match c {
                        rumqttc::SubscribeReasonCode::Success(q) => *q as u8,
                        rumqttc::SubscribeReasonCode::Failure => 0x80,
                    })
                    .collect();
                let _ = tx.try_send(LinkEvent::SubAck { codes });
            }
            Ok(rumqttc::Event::Incoming(rumqttc::Packet::Publish(p))) => {
                let ev = LinkEvent::Message {
                    topic: p.topic.clone(),
                    payload: p.payload.to_vec(),
                    retain: p.retain,
                    ack: ctx.ack(v5_qos(p.qos), p.pkid),
                };
                if !ctx.forward(ev).await {
                    return;
                }
            }
            Ok(rumqttc::Event::Outgoing(rumqttc::Outgoing::Disconnect))
                if ctx.stopping.load(Ordering::SeqCst) =>
            {
                let _ = tokio::time::timeout(Duration::from_millis(200), eventloop.poll()).await;
                return;
            }
            Ok(_) => {}
            Err(e) => {
                ctx.connection_ended();
                if ctx.stopping.load(Ordering::SeqCst) {
                    return;
                }
                // 3.1.1 is the last resort: it never falls back further.
                let f = classify_v311(&e);
                if brokers.len() > 1 {
                    broker = (broker + 1) % brokers.len();
                    eventloop.mqtt_options = brokers[broker].clone();
                }
                if !after_failure(
                    &mut policy,
                    tx,
                    f,
                    crate::mqtt::explain_connection_error(&e.to_string()),
                    false,
                )
                .await
                {
                    return;
                }
            }
        }
    }
}
