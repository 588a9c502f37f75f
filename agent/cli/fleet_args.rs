//! `npu-agent fleet watch|send|capture`: their options (clap definitions), the checks of their
//! values, and the [`FleetAction`] they make.

use super::fleet::{FleetAction, WatchFormat};
use crate::config;
use crate::fleet::operator::OperatorFlags;
use crate::fleet::MAX_WAIT_S;
use std::path::PathBuf;

/// `fleet` subcommands, as parsed.
#[derive(Debug, clap::Subcommand)]
pub enum FleetCommand {
    /// A live table of every board (health, worst findings, CMA free, hottest zone SOC_C,
    /// under-voltage UV, last seen, online).
    ///
    /// Exit 0; 1 broker unreachable for 10 s or list incomplete (--once); 2 usage error.
    Watch(WatchArgs),
    /// Send a command and print its lifecycle; exit 0 only on successful.
    Send(SendArgs),
    /// Fetch a board's support bundle.
    ///
    /// Sends the signed `capture` command, takes the chunks the board publishes, checks them
    /// against the size and sha256 of the board's sealed answer and writes FILE (never over an
    /// existing one unless --force). Exit 0 written; 1 refused, failed, not the board's answer,
    /// chunks missing or altered; 2 usage error.
    Capture(CaptureFromArgs),
    /// The operator's fleet service: keeps every board's latest status and its history, and
    /// serves a web page, a JSON API, an inventory CSV and Prometheus /metrics.
    ///
    /// Listens on 127.0.0.1:9465 unless told (put TLS and authentication in front with a
    /// reverse proxy: docs/operator-guide.md "Fleet service"). Runs until SIGTERM or SIGINT:
    /// exit 0; 1 the broker link ended; 2 usage or setup error.
    #[cfg(feature = "serve")]
    Serve(ServeArgs),
    /// Not in this build: the board build leaves the fleet service out; it runs from the amd64
    /// package or, on an arm64 machine, from the npu-agent-operator package.
    ///
    /// Exit 2.
    #[cfg(not(feature = "serve"))]
    Serve(NoServeArgs),
}

/// `fleet serve` in a build without it: whatever follows is taken, and the answer says where the
/// service is.
#[cfg(not(feature = "serve"))]
#[derive(Debug, clap::Args)]
pub struct NoServeArgs {
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, hide = true)]
    rest: Vec<String>,
}

/// Why `fleet serve` does not run in a build without the `serve` feature (the board build).
pub const NO_SERVE: &str = "fleet serve is not in this build (the board build leaves the fleet \
    service out): install the amd64 package, or npu-agent-operator on an arm64 machine, where \
    the fleet service runs";

/// `fleet serve` options.
#[cfg(feature = "serve")]
#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// Broker URL (mqtt://host[:port] or mqtts://host[:port]; a comma list tries them in
    /// turn). Default: `broker` in fleet.toml.
    #[arg(long)]
    pub broker: Option<String>,
    /// Topic root. Default: `topic_root` in fleet.toml, else npu-fleet.
    #[arg(long, value_parser = topic_root)]
    pub topic_root: Option<String>,
    /// Where the web page, API and /metrics listen (ADDR:PORT; port 0 picks a free one).
    /// Default: `listen` under `[serve]` in fleet.toml, else 127.0.0.1:9465.
    #[arg(long, value_name = "ADDR:PORT", value_parser = crate::fleet::serve::setup::parse_listen)]
    pub listen: Option<std::net::SocketAddr>,
    /// Where the history database (history.sqlite3) is kept; made if missing. Default:
    /// `state_dir` under `[serve]` in fleet.toml, else /var/lib/npu-agent-fleet.
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    /// Days of history kept (older rows are pruned hourly); 0 keeps everything. Default:
    /// `retention_days` under `[serve]` in fleet.toml, else 90.
    #[arg(long, value_name = "DAYS")]
    pub retention_days: Option<u64>,
    /// Which boards get per-board series in /metrics: all, or only boards that fail, warn or
    /// are not online (the fleet-wide counts always cover every board). Default:
    /// `metrics_boards` under `[serve]` in fleet.toml, else all.
    #[arg(long, value_enum)]
    pub metrics_boards: Option<crate::fleet::serve::metrics::Cardinality>,
    /// The most boards held (past that the least recently seen go, boards without a status
    /// sealed by their key first). Default: `max_boards` under `[serve]` in fleet.toml, else
    /// 200000.
    #[arg(long, value_name = "N")]
    pub max_boards: Option<usize>,
    /// Of those, the most boards neither in known_boards nor sealing a status with their key
    /// (a flood of invented board ids churns only these rows). Default:
    /// `max_unsealed_boards` under `[serve]` in fleet.toml, else 1000.
    #[arg(long, value_name = "N")]
    pub max_unsealed_boards: Option<usize>,
    /// The most history rows one board keeps (its oldest go first; besides
    /// --retention-days); 0 keeps every row. Default: `history_rows_per_board` under `[serve]`
    /// in fleet.toml, else 10000.
    #[arg(long, value_name = "ROWS")]
    pub history_rows_per_board: Option<usize>,
    /// Boards seen for the first time that this run records in known_boards (trust on first
    /// use); past N they are shown as `new unsaved` and get no history. Default:
    /// `accept_new_boards` under `[serve]` in fleet.toml, else 20.
    #[arg(long, value_name = "N")]
    pub accept_new_boards: Option<usize>,
    /// A board whose last status is older than this is stale. Default: `stale_after` under
    /// `[serve]` in fleet.toml, else three of its report intervals and a minute, as fleet watch.
    #[arg(long, value_name = "SECS")]
    pub stale_after: Option<u64>,
}

/// `fleet watch` options.
#[derive(Debug, clap::Args)]
pub struct WatchArgs {
    /// Broker URL (mqtt://host[:port] or mqtts://host[:port]; a comma list tries them in
    /// turn). Default: `broker` in fleet.toml.
    #[arg(long)]
    pub broker: Option<String>,
    /// Topic root. Default: `topic_root` in fleet.toml, else npu-fleet.
    #[arg(long, value_parser = topic_root)]
    pub topic_root: Option<String>,
    /// Print once when every board's retained availability and status have been read (wildcard
    /// bursts, then exact subscriptions for what a burst lost), then exit.
    #[arg(long)]
    pub once: bool,
    /// Output format (json needs --once).
    ///
    /// json prints one object: `boards`, an array with one object per board (`board`,
    /// `availability` online/offline/unknown, `health`, `profile`, `model`, `cma_free_bytes`,
    /// `cma_total_bytes`, `soc_temp_c`, `undervoltage_now`, `worst` failing/warning check ids,
    /// `fixable`, `last_seen` RFC 3339, `session`, `commands` subscribed/subscribing/not
    /// subscribed; absent metrics are null), and `incomplete` (true when repeated availability
    /// passes kept revealing new boards or a retained burst did not end within 30 s; then also
    /// `incomplete_reason`, and the exit code is 1).
    #[arg(long, value_enum, default_value = "text")]
    pub format: WatchFormat,
    /// The same as `--format json`, as the other commands spell it (needs --once).
    #[arg(long)]
    pub json: bool,
    /// Boards seen for the first time that this run records in known_boards (trust on first
    /// use); past N they are shown as `new unsaved`, counted and not recorded. Raise it for a
    /// first look at a whole fleet.
    #[arg(long, value_name = "N", default_value = "20")]
    pub accept_new_boards: usize,
    /// The most boards the table holds: past that the least recently seen row goes (boards
    /// without a status sealed by their key first) and a note says how many; with --once the
    /// list is then incomplete.
    #[arg(long, value_name = "N", default_value = "20000")]
    pub max_rows: usize,
}

/// `fleet send` options: exactly one of `--board` and `--all`.
#[derive(Debug, clap::Args)]
#[command(group(clap::ArgGroup::new("target").required(true).args(["board", "all"])))]
pub struct SendArgs {
    /// compact, set_cma, reboot, rescan, release_npu, fix, capture or update.
    pub action: String,
    /// Argument KEY=VALUE (repeatable), e.g. --arg size=256M.
    #[arg(long = "arg", value_name = "K=V")]
    pub args: Vec<String>,
    /// The board to send it to.
    #[arg(long, value_parser = board_id)]
    pub board: Option<String>,
    /// Send it to every board.
    #[arg(long)]
    pub all: bool,
    /// Broker URL (a comma list tries them in turn). Default: `broker` in fleet.toml.
    #[arg(long)]
    pub broker: Option<String>,
    /// Topic root. Default: `topic_root` in fleet.toml, else npu-fleet.
    #[arg(long, value_parser = topic_root)]
    pub topic_root: Option<String>,
    /// Ed25519 private key (from `npu-agent keygen`) to sign the command with. Default:
    /// `signing_key` in fleet.toml.
    #[arg(long, value_name = "FILE")]
    pub key: Option<PathBuf>,
    /// Seconds to wait for the final state (at most 86400).
    #[arg(long, value_name = "SECS", default_value = "30", value_parser = wait_s)]
    pub wait: u64,
    /// Seconds to wait after the SUBACK for the board's retained status before saying there is
    /// no such board (at most --wait).
    #[arg(long, value_name = "SECS", default_value = "5", value_parser = wait_s)]
    pub board_wait: u64,
    /// Boards seen for the first time that this run records in known_boards (trust on first
    /// use); past N they are shown as `new unsaved`, counted and not recorded.
    #[arg(long, value_name = "N", default_value = "20")]
    pub accept_new_boards: usize,
    /// Print each lifecycle message as one JSON object per line (`board`, `cmd_id`, `status`,
    /// `reason`, `step`, `result`, `identity`, `trusted`).
    #[arg(long)]
    pub json: bool,
    /// With --all: a staged rollout in waves of cumulative shares, e.g. 10%,100%; each wave
    /// waits for its answers and the first with a failure stops it.
    #[arg(
        long,
        value_name = "PCT,...",
        requires = "all",
        conflicts_with = "canary"
    )]
    pub waves: Option<String>,
    /// With --all: a canary wave of PCT of the boards, then the rest (--waves PCT,100%).
    #[arg(long, value_name = "PCT", requires = "all")]
    pub canary: Option<String>,
}

/// The `--waves` / `--canary` shares (a canary's share gets the 100% wave added); empty when
/// neither is given.
///
/// Errors: the shares are not understood.
fn waves(waves: Option<String>, canary: Option<String>) -> Result<Vec<u32>, String> {
    match (waves, canary) {
        (Some(w), _) => crate::fleet::parse_waves(&w),
        (None, Some(c)) => crate::fleet::parse_waves(&format!("{c},100%"))
            .map_err(|e| e.replace("--waves", "--canary")),
        (None, None) => Ok(Vec::new()),
    }
}

/// `fleet capture` options.
#[derive(Debug, clap::Args)]
pub struct CaptureFromArgs {
    /// The board to fetch it from.
    #[arg(long, value_parser = board_id)]
    pub board: String,
    /// Broker URL (a comma list tries them in turn). Default: `broker` in fleet.toml.
    #[arg(long)]
    pub broker: Option<String>,
    /// Topic root. Default: `topic_root` in fleet.toml, else npu-fleet.
    #[arg(long, value_parser = topic_root)]
    pub topic_root: Option<String>,
    /// Ed25519 private key to sign the command with (the board refuses an unsigned capture
    /// unless security.allow_unsigned lists it). Default: `signing_key` in fleet.toml.
    #[arg(long, value_name = "FILE")]
    pub key: Option<PathBuf>,
    /// Where to write the bundle.
    #[arg(long, value_name = "FILE.tar.gz")]
    pub out: PathBuf,
    /// Largest bundle to take (at most 33554432).
    #[arg(long, value_name = "BYTES", default_value = "8388608", value_parser = max_bytes)]
    pub max_bytes: u64,
    /// Replace FILE if it exists.
    #[arg(long)]
    pub force: bool,
    /// Write the bundle even when the board's key was first seen in this run (not yet in
    /// known_boards): without it such a bundle is refused.
    #[arg(long)]
    pub accept_new_key: bool,
    /// Print each lifecycle message as one JSON object per line, as `fleet send --json`, and
    /// the written bundle as one (`file`, `bytes`, `sha256`).
    #[arg(long)]
    pub json: bool,
    /// Seconds to wait for the whole bundle (at most 86400).
    #[arg(long, value_name = "SECS", default_value = "120", value_parser = wait_s)]
    pub wait: u64,
    /// Seconds to wait after the SUBACK for the board's status (at most --wait).
    #[arg(long, value_name = "SECS", default_value = "5", value_parser = wait_s)]
    pub board_wait: u64,
}

impl FleetCommand {
    /// The action to carry out.
    ///
    /// Errors: a `--board-wait` over `--wait` (the message, for `npu-agent: ...`).
    pub fn into_action(self) -> Result<FleetAction, String> {
        let (wait, board_wait) = match &self {
            FleetCommand::Watch(_) | FleetCommand::Serve(_) => (0, 0),
            FleetCommand::Send(a) => (a.wait, a.board_wait),
            FleetCommand::Capture(a) => (a.wait, a.board_wait),
        };
        if board_wait > wait {
            return Err(format!(
                "--board-wait {board_wait} is over --wait {wait}: at most --wait seconds"
            ));
        }
        Ok(match self {
            #[cfg(not(feature = "serve"))]
            FleetCommand::Serve(_) => return Err(NO_SERVE.into()),
            #[cfg(feature = "serve")]
            FleetCommand::Serve(a) => FleetAction::Serve {
                flags: OperatorFlags {
                    broker: a.broker,
                    topic_root: a.topic_root,
                    key: None,
                },
                listen: a.listen,
                state_dir: a.state_dir,
                retention_days: a.retention_days,
                cardinality: a.metrics_boards,
                max_boards: a.max_boards,
                max_unsealed_boards: a.max_unsealed_boards,
                history_rows_per_board: a.history_rows_per_board,
                accept_new_boards: a.accept_new_boards,
                stale_after_s: a.stale_after,
            },
            FleetCommand::Watch(a) => FleetAction::Watch {
                flags: OperatorFlags {
                    broker: a.broker,
                    topic_root: a.topic_root,
                    key: None,
                },
                once: a.once,
                format: match a.json {
                    true => super::fleet::WatchFormat::Json,
                    false => a.format,
                },
                accept_new_boards: a.accept_new_boards,
                max_rows: a.max_rows.max(1),
            },
            FleetCommand::Send(a) => FleetAction::Send {
                action: a.action,
                args: a.args,
                board: a.board,
                all: a.all,
                flags: OperatorFlags {
                    broker: a.broker,
                    topic_root: a.topic_root,
                    key: a.key,
                },
                wait,
                board_wait,
                out: None,
                force: false,
                accept_new_boards: a.accept_new_boards,
                accept_new_key: false,
                json: a.json,
                waves: waves(a.waves, a.canary)?,
            },
            FleetCommand::Capture(a) => FleetAction::Send {
                action: crate::model::action::ActionKind::Capture
                    .as_str()
                    .to_string(),
                args: vec![format!("max_bytes={}", a.max_bytes)],
                board: Some(a.board),
                all: false,
                flags: OperatorFlags {
                    broker: a.broker,
                    topic_root: a.topic_root,
                    key: a.key,
                },
                wait,
                board_wait,
                out: Some(a.out),
                force: a.force,
                accept_new_boards: crate::fleet::known::DEFAULT_NEW_PER_RUN,
                accept_new_key: a.accept_new_key,
                json: a.json,
                waves: Vec::new(),
            },
        })
    }
}

/// A topic level the fleet's topics are built from (a board id, or with `root` a topic root):
/// a wildcard or an extra level would make the operator publish or subscribe where no board is.
///
/// Errors: what is wrong with `value`.
fn topic_level(value: &str, root: bool) -> Result<String, String> {
    if value.len() > config::MAX_NAME_BYTES {
        Err(format!("longer than {} bytes", config::MAX_NAME_BYTES))
    } else if value.contains(['+', '#', '\0']) {
        Err("an MQTT topic may not hold '+', '#' or NUL here".to_string())
    } else if root && (value.starts_with('/') || value.ends_with('/')) {
        Err("a topic root may not start or end with '/'".to_string())
    } else if !root && (value.is_empty() || value.contains('/')) {
        Err("a board id is one non-empty topic level, without '/'".to_string())
    } else {
        Ok(value.to_string())
    }
}

/// `--board`'s value parser (see [`topic_level`]).
fn board_id(value: &str) -> Result<String, String> {
    topic_level(value, false)
}

/// `--topic-root`'s value parser (see [`topic_level`]).
fn topic_root(value: &str) -> Result<String, String> {
    topic_level(value, true)
}

/// `--wait` and `--board-wait`: whole seconds up to [`MAX_WAIT_S`] (a day).
///
/// Errors: not a whole number, or over a day.
fn wait_s(value: &str) -> Result<u64, String> {
    match value.parse::<u64>() {
        Ok(s) if s <= MAX_WAIT_S => Ok(s),
        Ok(_) => Err(format!("at most {MAX_WAIT_S} seconds (a day)")),
        Err(e) => Err(e.to_string()),
    }
}

/// `fleet capture --max-bytes`: a whole number of bytes from 1 to
/// [`crate::mqtt::chunks::MAX_BUNDLE_BYTES`].
///
/// Errors: anything else.
fn max_bytes(value: &str) -> Result<u64, String> {
    let max = crate::mqtt::chunks::MAX_BUNDLE_BYTES;
    match value.parse::<u64>() {
        Ok(n) if (1..=max).contains(&n) => Ok(n),
        _ => Err(format!("a whole number of bytes from 1 to {max}")),
    }
}
