//! The MQTT protocol version the link speaks, and `[mqtt] protocol` parsed once into what it
//! tries first and whether it falls back.

/// The MQTT protocol version spoken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// MQTT 5 (the default; Maximum Packet Size protects the connection).
    V5,
    /// MQTT 3.1.1, for brokers that refuse 5.
    V311,
}

/// `[mqtt] protocol`, parsed once: `auto` (MQTT 5, falling back to 3.1.1 when the broker
/// refuses 5), or one version only.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProtocolSetting {
    /// `auto`.
    Auto,
    /// `5` or `3.1.1`.
    Only(Protocol),
}

impl ProtocolSetting {
    /// Every setting as written, in the order the docs list them.
    pub const ALL: [ProtocolSetting; 3] = [
        ProtocolSetting::Auto,
        ProtocolSetting::Only(Protocol::V5),
        ProtocolSetting::Only(Protocol::V311),
    ];

    /// The setting as written in the config.
    pub fn as_str(self) -> &'static str {
        match self {
            ProtocolSetting::Auto => "auto",
            ProtocolSetting::Only(p) => p.as_str(),
        }
    }

    /// The version tried first.
    pub fn first(self) -> Protocol {
        match self {
            ProtocolSetting::Auto => Protocol::V5,
            ProtocolSetting::Only(p) => p,
        }
    }

    /// Whether a broker that refuses MQTT 5 is spoken to in 3.1.1.
    pub fn falls_back(self) -> bool {
        self == ProtocolSetting::Auto
    }
}

impl std::str::FromStr for ProtocolSetting {
    type Err = String;

    /// Errors: not one of [`ProtocolSetting::ALL`] (the message lists them).
    fn from_str(s: &str) -> Result<ProtocolSetting, String> {
        ProtocolSetting::ALL
            .into_iter()
            .find(|p| p.as_str() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = ProtocolSetting::ALL.map(ProtocolSetting::as_str).into();
                format!("{s:?}: expected one of {}", names.join(", "))
            })
    }
}

impl Protocol {
    /// The version as people write it.
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::V5 => "5",
            Protocol::V311 => "3.1.1",
        }
    }
}
