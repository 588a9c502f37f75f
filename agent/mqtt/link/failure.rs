//! Why a connection ended, in the terms the reconnect policy decides on: refused (and how),
//! kicked, a protocol the broker does not speak, or the network.

/// How a failed or dropped connection is read (see [`classify_v5`] and [`classify_v311`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// The broker could not be reached (TCP refused, unreachable, DNS, TLS): not a protocol matter.
    Network(String),
    /// The broker answered CONNACK with a refusal reason code (bad password, not authorised…).
    Refused {
        /// The reason code as sent on the wire (MQTT 5: 0x80 and up; MQTT 3.1.1: 1 to 5).
        code: u8,
        /// The code's name.
        name: String,
    },
    /// Something a broker that does not speak this protocol version does after CONNECT: closes
    /// the socket, never answers (timeout), answers with a packet that is not a CONNACK of this
    /// version (a 3.1.1 CONNACK `20 02 00 01` read as MQTT 5 is incomplete), or says
    /// "unsupported protocol version".
    ProtocolSuspect(String),
    /// No answer to CONNECT before the connection timeout (amqtt ignores an MQTT 5 CONNECT);
    /// one is enough to fall back, as waiting again would only double the delay.
    NoAnswer,
    /// MQTT 5 DISCONNECT with reason 0x8E: another client connected with this client id.
    SessionTakenOver,
    /// Anything else (keep-alive lost, a closed connection after CONNACK…).
    Other(String),
}

impl Failure {
    /// A short, stable text naming the cause (what the log prints once per change).
    pub fn cause(&self) -> String {
        match self {
            Failure::Network(s) => format!("network: {s}"),
            Failure::Refused { code, name } => {
                format!("broker refused the connection: {name} (reason code 0x{code:02x})")
            }
            Failure::ProtocolSuspect(s) => format!("no CONNACK: {s}"),
            Failure::NoAnswer => "no CONNACK: no answer before the connection timeout".into(),
            Failure::SessionTakenOver => {
                "session taken over (reason code 0x8e): another client uses this board id".into()
            }
            Failure::Other(s) => s.clone(),
        }
    }
}

pub(super) fn io_failure(e: &std::io::Error) -> Failure {
    use std::io::ErrorKind as K;
    match e.kind() {
        K::UnexpectedEof | K::ConnectionReset | K::ConnectionAborted | K::BrokenPipe => {
            Failure::ProtocolSuspect(format!("connection closed ({e})"))
        }
        _ => Failure::Network(e.to_string()),
    }
}

/// The MQTT 5 reason code of a CONNACK refusal (MQTT 5 section 3.2.2.2; 3.1.1 codes 1 to 3
/// where the library maps them).
pub fn v5_reason_code(c: rumqttc::v5::mqttbytes::v5::ConnectReturnCode) -> u8 {
    use rumqttc::v5::mqttbytes::v5::ConnectReturnCode as C;
    match c {
        C::Success => 0x00,
        C::RefusedProtocolVersion => 0x01,
        C::BadClientId => 0x02,
        C::ServiceUnavailable => 0x03,
        C::UnspecifiedError => 0x80,
        C::MalformedPacket => 0x81,
        C::ProtocolError => 0x82,
        C::ImplementationSpecificError => 0x83,
        C::UnsupportedProtocolVersion => 0x84,
        C::ClientIdentifierNotValid => 0x85,
        C::BadUserNamePassword => 0x86,
        C::NotAuthorized => 0x87,
        C::ServerUnavailable => 0x88,
        C::ServerBusy => 0x89,
        C::Banned => 0x8a,
        C::BadAuthenticationMethod => 0x8c,
        C::TopicNameInvalid => 0x90,
        C::PacketTooLarge => 0x95,
        C::QuotaExceeded => 0x97,
        C::PayloadFormatInvalid => 0x99,
        C::RetainNotSupported => 0x9a,
        C::QoSNotSupported => 0x9b,
        C::UseAnotherServer => 0x9c,
        C::ServerMoved => 0x9d,
        C::ConnectionRateExceeded => 0x9f,
    }
}

/// An MQTT 5 SUBACK refusal code, named.
pub fn suback_refusal_name(code: u8) -> String {
    let name = match code {
        0x80 => "unspecified error",
        0x83 => "implementation specific error",
        0x87 => "not authorized",
        0x8f => "topic filter invalid",
        0x91 => "packet identifier in use",
        0x97 => "quota exceeded",
        0x9e => "shared subscriptions not supported",
        0xa1 => "subscription identifiers not supported",
        0xa2 => "wildcard subscriptions not supported",
        _ => "refused",
    };
    format!("{name}, reason code 0x{code:02x}")
}

/// Reads an MQTT 5 connection error as rumqttc 0.25 reports it. What real 3.1.1-only brokers do
/// to an MQTT 5 CONNECT arrives as: `MqttState(ConnectionAborted)` (RabbitMQ before 3.13 closes
/// the socket), `Timeout` (amqtt never answers), `MqttState(Deserialization(Io(..)))` or
/// `MqttState(ConnectionAborted)` (a `20 02 00 01` CONNACK, incomplete as MQTT 5, then a close),
/// `ConnectionRefused(UnsupportedProtocolVersion)` or `(RefusedProtocolVersion)`.
pub fn classify_v5(e: &rumqttc::v5::ConnectionError) -> Failure {
    use rumqttc::v5::mqttbytes::v5::{ConnectReturnCode, DisconnectReasonCode};
    use rumqttc::v5::{ConnectionError as E, StateError as S};
    match e {
        E::ConnectionRefused(
            ConnectReturnCode::UnsupportedProtocolVersion
            | ConnectReturnCode::RefusedProtocolVersion,
        ) => Failure::ProtocolSuspect(e.to_string()),
        E::ConnectionRefused(c) => Failure::Refused {
            code: v5_reason_code(*c),
            name: format!("{c:?}"),
        },
        E::MqttState(S::ServerDisconnect {
            reason_code: DisconnectReasonCode::SessionTakenOver,
            ..
        }) => Failure::SessionTakenOver,
        E::MqttState(S::ConnectionAborted) => {
            Failure::ProtocolSuspect("connection closed by the broker".into())
        }
        E::MqttState(S::Io(io)) => io_failure(io),
        E::MqttState(S::Deserialization(_)) | E::NotConnAck(_) => {
            Failure::ProtocolSuspect(e.to_string())
        }
        E::Timeout(_) => Failure::NoAnswer,
        E::Io(io) => io_failure(io),
        E::Tls(t) => Failure::Network(format!("TLS: {t}")),
        other => Failure::Other(other.to_string()),
    }
}

/// Reads an MQTT 3.1.1 connection error (CONNACK return codes 1 to 5 are refusals).
pub fn classify_v311(e: &rumqttc::ConnectionError) -> Failure {
    use rumqttc::{ConnectionError as E, StateError as S};
    match e {
        E::ConnectionRefused(c) => Failure::Refused {
            code: *c as u8,
            name: format!("{c:?}"),
        },
        E::MqttState(S::Io(io)) | E::Io(io) => io_failure(io),
        E::MqttState(S::ConnectionAborted) => {
            Failure::ProtocolSuspect("connection closed by the broker".into())
        }
        E::NetworkTimeout => Failure::NoAnswer,
        E::NotConnAck(_) => Failure::ProtocolSuspect(e.to_string()),
        E::Tls(t) => Failure::Network(format!("TLS: {t}")),
        other => Failure::Other(other.to_string()),
    }
}
