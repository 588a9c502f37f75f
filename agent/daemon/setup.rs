//! What the daemon resolves once at start: the assembled settings ([`crate::config::Settings`]),
//! the board id, the MQTT link options (TLS material and credentials read under the root), and
//! the executor every action runs through.

use super::RunError;
use crate::action::executor::Executor;
use crate::action::state::StateDir;
use crate::config::{Config, Settings};
use crate::diagnose::{self, ProfileChoice};
use crate::mqtt::link::{LinkOptions, MAX_INCOMING_PACKET_BYTES};
use crate::mqtt::{self, topics};
use crate::root::SysRoot;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// State file of the log cursors (kmsg sequence number, journal cursors, file inode + offset).
pub(super) const LOG_CURSORS_FILE: &str = "log_cursors.json";

/// Everything resolved at start from the config.
pub(super) struct Setup {
    pub cfg: Config,
    pub root: SysRoot,
    pub board: String,
    pub topic_root: String,
    pub state: StateDir,
    pub settings: Settings,
    pub executor: Executor,
    pub link: LinkOptions,
    /// `[mqtt] url`'s nodes as parsed at start (what the link connects to until a restart).
    pub brokers: mqtt::BrokerList,
    pub profile: ProfileChoice,
    /// Log read positions and the evidence kept this boot (persisted as [`LOG_CURSORS_FILE`]).
    pub log_cursors: Arc<Mutex<crate::probe::evidence::LogCursors>>,
    /// The board's own key, which seals its statuses and answers (`None`: it could not be
    /// made or saved; they go out unsigned, as the log says).
    pub identity: Option<crate::mqtt::ed25519::SigningKey>,
    /// The first-boot provisioning's finding for every status, when it has something to say.
    pub provisioning: Option<crate::model::Finding>,
}

impl Setup {
    /// Whether `payload` on `topic` is this board's own: sealed with its key (broker access
    /// alone cannot make one); never without a key.
    pub fn sealed_by_me(&self, topic: &str, payload: &[u8]) -> bool {
        use crate::mqtt::board_sig::{key_text, open, Seal};
        self.identity
            .as_ref()
            .is_some_and(|k| open(topic, payload) == Seal::By(key_text(&k.verifying_key())))
    }

    /// This board at `now_s` (Unix seconds) and its answers' lifetime, for the sweep.
    pub fn sweep_board(&self, now_s: i64) -> super::sweep::Board<'_> {
        super::sweep::Board {
            topic_root: &self.topic_root,
            board: &self.board,
            now_s,
            keep_s: super::sweep::keep_s(self.cfg.security.max_command_age_s),
        }
    }
}

/// Reads a secret or key file the config names (`password_file`, `ca_file`, `cert_file`,
/// `key_file`) under the root, as every board file is read: a symlink in a board tree resolves
/// inside it, never outside.
fn read_secret(root: &SysRoot, path: &str) -> Result<Vec<u8>, String> {
    root.read(path).map_err(|e| e.to_string())
}

/// The board id: the configured one, sanitised, or (`auto`) the device-tree serial number, else
/// `/etc/machine-id`.
fn board_id(root: &SysRoot, configured: &str) -> String {
    if configured == "auto" {
        let serial = root
            .read("/proc/device-tree/serial-number")
            .ok()
            .map(|b| crate::parse::devicetree::string(&b))
            .filter(|s| !s.is_empty());
        diagnose::auto_board_id(root, serial.as_deref())
    } else {
        diagnose::sanitize_board_id(configured)
    }
}

/// Resolves `cfg` for the daemon.
///
/// Errors: [`RunError::Config`] naming what is wrong (no `mqtt.url`, an unreadable key or
/// certificate, a client certificate without its key).
pub(super) fn setup(cfg: Config) -> Result<Setup, RunError> {
    let cerr = |m: String| RunError::Config(m);
    if cfg.mqtt.url.is_empty() {
        return Err(cerr(
            "mqtt.url is not set (in /etc/npu-agent/agent.toml, or NPU_AGENT_MQTT_URL)".into(),
        ));
    }
    // One URL, or a cluster's nodes separated by commas: the first, then the others in turn.
    let assembled = Settings::assemble(cfg.clone());
    let brokers = assembled.brokers.clone().map_err(cerr)?;
    let mut fallbacks = brokers.urls().to_vec();
    let url = fallbacks.remove(0);
    let root = SysRoot::new(&cfg.root);
    let board = board_id(&root, &cfg.board_id);
    let settings = assembled.for_board(board.clone()).map_err(cerr)?;
    let tls = if url.tls || fallbacks.iter().any(|u| u.tls) {
        let ca_pem = if cfg.mqtt.ca_file.is_empty() {
            Vec::new()
        } else {
            read_secret(&root, &cfg.mqtt.ca_file).map_err(cerr)?
        };
        let client = match (cfg.mqtt.cert_file.is_empty(), cfg.mqtt.key_file.is_empty()) {
            (true, true) => None,
            (false, false) => Some((
                read_secret(&root, &cfg.mqtt.cert_file).map_err(cerr)?,
                crate::sys::secret::Secret::from_file(
                    &read_secret(&root, &cfg.mqtt.key_file).map_err(cerr)?,
                ),
            )),
            _ => {
                return Err(cerr(
                    "mqtt.cert_file and mqtt.key_file go together (mTLS)".into(),
                ))
            }
        };
        Some(mqtt::tls_config(&mqtt::TlsFiles { ca_pem, client }).map_err(cerr)?)
    } else {
        None
    };
    let credentials = if cfg.mqtt.username.is_empty() {
        None
    } else {
        let password = if cfg.mqtt.password_file.is_empty() {
            crate::sys::secret::Secret::default()
        } else {
            crate::sys::secret::Secret::password_from_file(
                &read_secret(&root, &cfg.mqtt.password_file).map_err(cerr)?,
            )
        };
        Some((cfg.mqtt.username.clone(), password))
    };
    let topic_root = cfg.mqtt.topic_root.clone();
    let link = LinkOptions {
        url,
        tls,
        client_id: format!("npu-agent-{board}"),
        keep_alive: Duration::from_secs(cfg.mqtt.keep_alive_s.max(5)),
        credentials,
        last_will: Some((
            topics::availability(&topic_root, &board),
            b"offline".to_vec(),
        )),
        max_incoming_packet_bytes: MAX_INCOMING_PACKET_BYTES,
        connect_timeout_s: 5,
        lossless: true,
        ack_when_handled: true,
        protocol: settings.protocol.first(),
        auto_protocol: settings.protocol.falls_back(),
        reconnect_max: Duration::from_secs(cfg.mqtt.reconnect_max_s),
        fallbacks,
    };
    let state = settings.state.clone();
    let profile = ProfileChoice::parse(&cfg.profile);
    let executor = Executor::new(
        root.clone(),
        state.clone(),
        settings.actions.clone(),
        profile.clone(),
    );
    let log_cursors = match state.load(LOG_CURSORS_FILE) {
        Ok(c) => c.unwrap_or_default(),
        Err(e) => {
            tracing::warn!(error = %e, "log cursors unreadable: reading this boot's logs afresh");
            Default::default()
        }
    };
    let identity = match super::identity::load_or_make(&state) {
        Ok(key) => {
            let text = crate::mqtt::board_sig::key_text(&key.verifying_key());
            tracing::info!(board_key = text.as_str(), "this board's identity");
            Some(key)
        }
        Err(e) => {
            tracing::error!(
                error = e.as_str(),
                "no board identity key: statuses and answers go out unsigned"
            );
            None
        }
    };
    Ok(Setup {
        brokers,
        identity,
        cfg,
        root,
        board,
        topic_root,
        state,
        settings,
        executor,
        link,
        profile,
        log_cursors: Arc::new(Mutex::new(log_cursors)),
        provisioning: None,
    })
}
