//! `npu-agent fleet send|watch|capture`: the operator side of the fleet link.

use super::args::{ErrorKind, Matches, Opt, Pos, Spec, UsageError};
use super::run::TOPIC_ROOT;
use super::EXIT_USAGE;
use crate::config;
use crate::fleet::MAX_WAIT_S;
use std::io::Write;
use std::path::PathBuf;

/// `npu-agent fleet`: `watch`, `send` and `capture`, their options and help.
pub static FLEET: Spec = Spec {
    name: "fleet",
    about: "Operator side: watch the fleet's status, send a command to one board or all, or fetch a \
            board's support bundle. For mqtts:// brokers the CA, client certificate and \
            credentials come from the NPU_AGENT_MQTT_CA_FILE, NPU_AGENT_MQTT_CERT_FILE, \
            NPU_AGENT_MQTT_KEY_FILE, NPU_AGENT_MQTT_USERNAME and NPU_AGENT_MQTT_PASSWORD_FILE.",
    opts: &[],
    args: &[],
    commands: &[
        &Spec {
            name: "watch",
            about: "A live table of every board (health, worst findings, CMA free, hottest \
                    zone SOC_C, under-voltage UV, last seen, online). Exit 0; 1 broker \
                    unreachable for 10 s or list incomplete (--once); 2 usage error.",
            opts: &[
                Opt::text(
                    "broker",
                    "BROKER",
                    "Broker URL (mqtt://host[:port] or mqtts://host[:port]).",
                )
                .required(),
                TOPIC_ROOT,
                Opt::flag(
                    "once",
                    "Print once when every board's retained availability and status have been \
                     read (wildcard bursts, then exact subscriptions for what a burst lost), \
                     then exit.",
                ),
                Opt::text(
                    "format",
                    "FORMAT",
                    "Output format (json needs --once). json prints one object: `boards`, an \
                     array with one object per board (`board`, `availability` \
                     online/offline/unknown, `health`, `profile`, `model`, `cma_free_bytes`, \
                     `cma_total_bytes`, `soc_temp_c`, `undervoltage_now`, `worst` \
                     failing/warning check ids, `fixable`, `last_seen` RFC 3339, `session`, \
                     `commands` subscribed/subscribing/not subscribed; absent metrics are null), and `incomplete` (true when repeated availability passes kept \
                     revealing new boards or a retained burst did not end within 30 s; then also \
                     `incomplete_reason`, and the exit code is 1).",
                )
                .default("text")
                .choices(&[
                    ("text", "A table for people."),
                    ("json", "One JSON object with every board (needs --once)."),
                ]),
                ACCEPT_NEW_BOARDS,
                Opt::text(
                    "max-rows",
                    "N",
                    "The most boards the table holds: past that the least recently seen row \
                     goes (boards without a status sealed by their key first) and a note says \
                     how many; with --once the list is then incomplete.",
                )
                .default("20000"),
            ],
            args: &[],
            commands: &[],
            one_of: None,
        },
        &Spec {
            name: "send",
            about: "Send a command and print its lifecycle; exit 0 only on successful.",
            opts: &SEND_OPTS,
            args: &[Pos {
                name: "ACTION",
                help: "compact, set_cma, reboot, rescan, release_npu, fix or capture.",
                many: false,
            }],
            commands: &[],
            one_of: Some(["board", "all"]),
        },
        &Spec {
            name: "capture",
            about: "Fetch a board's support bundle: sends the signed `capture` command, takes the \
                    chunks the board publishes, checks them against the size and sha256 of the \
                    board's sealed answer and writes FILE (never over an existing one unless \
                    --force). Exit 0 written; 1 refused, failed, not the board's answer, chunks \
                    missing or altered; 2 usage error.",
            opts: &[
                Opt::text("board", "BOARD", "The board to fetch it from.").required(),
                Opt::text("broker", "BROKER", "Broker URL.").required(),
                TOPIC_ROOT,
                Opt::path(
                    "key",
                    "FILE",
                    "Ed25519 private key to sign the command with (the board refuses an \
                     unsigned capture unless security.allow_unsigned lists it).",
                ),
                Opt::path("out", "FILE.tar.gz", "Where to write the bundle.").required(),
                Opt::text(
                    "max-bytes",
                    "BYTES",
                    "Largest bundle to take (at most 33554432).",
                )
                .default("8388608"),
                Opt::flag("force", "Replace FILE if it exists."),
                Opt::flag(
                    "accept-new-key",
                    "Write the bundle even when the board's key was first seen in this run \
                     (not yet in known_boards): without it such a bundle is refused.",
                ),
                Opt::text("wait", "SECS", "Seconds to wait for the whole bundle (at most 86400).")
                    .default("120"),
                Opt::text(
                    "board-wait",
                    "SECS",
                    "Seconds to wait after the SUBACK for the board's status (at most \
                     --wait).",
                )
                .default("5"),
            ],
            args: &[],
            commands: &[],
            one_of: None,
        },
    ],
    one_of: None,
};

/// `--accept-new-boards N` of `fleet watch` and `fleet send`.
const ACCEPT_NEW_BOARDS: Opt = Opt::text(
    "accept-new-boards",
    "N",
    "Boards seen for the first time that this run records in known_boards (trust on first \
     use); past N they are shown as `new unsaved`, counted and not recorded. Raise it for a \
     first look at a whole fleet.",
)
.default("20");

/// `fleet send`'s options.
static SEND_OPTS: [Opt; 9] = [
    Opt::text(
        "arg",
        "K=V",
        "Argument KEY=VALUE (repeatable), e.g. --arg size=256M.",
    )
    .repeatable(),
    Opt::text("board", "BOARD", "The board to send it to."),
    Opt::flag("all", "Send it to every board."),
    Opt::text("broker", "BROKER", "Broker URL.").required(),
    TOPIC_ROOT,
    Opt::path(
        "key",
        "FILE",
        "Ed25519 private key (from `npu-agent keygen`) to sign the command with.",
    ),
    Opt::text(
        "wait",
        "SECS",
        "Seconds to wait for the final state (at most 86400).",
    )
    .default("30"),
    Opt::text(
        "board-wait",
        "SECS",
        "Seconds to wait after the SUBACK for the board's retained status before \
                     saying there is no such board (at most --wait).",
    )
    .default("5"),
    ACCEPT_NEW_BOARDS,
];

/// `fleet watch --format`: a table, or (with `--once`) one JSON object. Not the `check`
/// formats: there is no Prometheus form of the fleet list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WatchFormat {
    /// A table for people.
    Text,
    /// One JSON object with every board (needs --once).
    Json,
}

/// `fleet` actions.
#[derive(Debug)]
pub enum FleetAction {
    /// A live table of every board (health, worst findings, CMA free, last seen, online).
    Watch {
        /// Broker URL (mqtt://host[:port] or mqtts://host[:port]).
        broker: String,
        /// Topic root.
        topic_root: String,
        /// Print once when every board's retained availability and status have been read, then
        /// exit.
        once: bool,
        /// Output format (json needs --once).
        format: WatchFormat,
        /// New boards this run records in known_boards.
        accept_new_boards: usize,
        /// The most rows the table holds.
        max_rows: usize,
    },
    /// Send a command and print its lifecycle; exit 0 only on successful.
    Send {
        /// compact, set_cma, reboot, rescan or release_npu.
        action: String,
        /// Arguments KEY=VALUE, in the order given.
        args: Vec<String>,
        /// The board to send it to (`None` with `all`: exactly one of the two is set).
        board: Option<String>,
        /// Send it to every board.
        all: bool,
        /// Broker URL.
        broker: String,
        /// Topic root.
        topic_root: String,
        /// Ed25519 private key (from `npu-agent keygen`) to sign the command with.
        key: Option<PathBuf>,
        /// Seconds to wait for the final state.
        wait: u64,
        /// Seconds to wait, after the SUBACK, for the board's retained availability or status.
        board_wait: u64,
        /// `fleet capture`: where to write the bundle (the action is `capture`).
        out: Option<PathBuf>,
        /// `fleet capture`: replace `out` if it exists.
        force: bool,
        /// New boards this run records in known_boards.
        accept_new_boards: usize,
        /// `fleet capture`: write a bundle sealed by a key first seen in this run.
        accept_new_key: bool,
    },
}

impl FleetAction {
    /// From the parsed `fleet watch` or `fleet send` arguments.
    ///
    /// Errors: [`ErrorKind::InvalidValue`] for a `--wait` that is not a whole number of
    /// seconds up to a day, a `--board` or `--topic-root` that is not a usable topic level;
    /// [`ErrorKind::NotUtf8`].
    pub(crate) fn from_matches(m: &Matches) -> Result<FleetAction, UsageError> {
        let text =
            |long: &str| -> Result<String, UsageError> { Ok(m.text(long)?.unwrap_or_default()) };
        // Topic levels the fleet's topics are built from: a wildcard or an extra level would
        // make the operator publish or subscribe somewhere no board is.
        let level = |long: &str, value: String, root: bool| -> Result<String, UsageError> {
            let problem = if value.len() > config::MAX_NAME_BYTES {
                Some(format!("longer than {} bytes", config::MAX_NAME_BYTES))
            } else if value.contains(['+', '#', '\0']) {
                Some("an MQTT topic may not hold '+', '#' or NUL here".to_string())
            } else if root && (value.starts_with('/') || value.ends_with('/')) {
                Some("a topic root may not start or end with '/'".to_string())
            } else if !root && (value.is_empty() || value.contains('/')) {
                Some("a board id is one non-empty topic level, without '/'".to_string())
            } else {
                None
            };
            match problem {
                None => Ok(value),
                Some(p) => Err(m.error(
                    ErrorKind::InvalidValue,
                    format!(
                        "invalid value '{}' for '--{long}': {p}",
                        crate::report::clean(&value)
                    ),
                )),
            }
        };
        let topic_root = level("topic-root", text("topic-root")?, true)?;
        if m.commands.last() == Some(&"watch") {
            return Ok(FleetAction::Watch {
                broker: text("broker")?,
                topic_root,
                once: m.flag("once"),
                format: if text("format")? == "json" {
                    WatchFormat::Json
                } else {
                    WatchFormat::Text
                },
                accept_new_boards: accept_new_boards(m)?,
                max_rows: whole(m, "max-rows")?.max(1),
            });
        }
        let seconds = |long: &str, max: u64, what: &str| -> Result<u64, UsageError> {
            let v = text(long)?;
            v.parse::<u64>()
                .map_err(|e| e.to_string())
                .and_then(|s| {
                    (s <= max)
                        .then_some(s)
                        .ok_or_else(|| format!("at most {max} seconds ({what})"))
                })
                .map_err(|e| {
                    m.error(
                        ErrorKind::InvalidValue,
                        format!(
                            "invalid value '{}' for '--{long} <SECS>': {e}",
                            crate::report::clean(&v)
                        ),
                    )
                })
        };
        let wait = seconds("wait", MAX_WAIT_S, "a day")?;
        let board_wait = seconds("board-wait", wait, "the --wait")?;
        let out = match m.commands.last() {
            Some(&"capture") => m.path("out"),
            _ => None,
        };
        let force = out.is_some() && m.flag("force");
        let accept_new_key = out.is_some() && m.flag("accept-new-key");
        let accept_new = match out {
            Some(_) => crate::fleet::known::DEFAULT_NEW_PER_RUN,
            None => accept_new_boards(m)?,
        };
        // `fleet capture` has --out and no --all, --arg or ACTION.
        let (action, args, all) = match out {
            Some(_) => ("capture".to_string(), vec![max_bytes(m)?], false),
            None => (m.positional(0)?, m.texts("arg")?, m.flag("all")),
        };
        Ok(FleetAction::Send {
            action,
            args,
            board: m
                .text("board")?
                .map(|b| level("board", b, false))
                .transpose()?,
            all,
            broker: text("broker")?,
            topic_root,
            key: m.path("key"),
            wait,
            board_wait,
            out,
            force,
            accept_new_boards: accept_new,
            accept_new_key,
        })
    }
}

/// `--accept-new-boards N`.
///
/// Errors: [`ErrorKind::InvalidValue`] unless N is a whole number.
fn accept_new_boards(m: &Matches) -> Result<usize, UsageError> {
    whole(m, "accept-new-boards")
}

/// The whole number `--long N`.
///
/// Errors: [`ErrorKind::InvalidValue`] unless N is a whole number.
fn whole(m: &Matches, long: &str) -> Result<usize, UsageError> {
    let v = m.text(long)?.unwrap_or_default();
    v.parse::<usize>().map_err(|e| {
        m.error(
            ErrorKind::InvalidValue,
            format!(
                "invalid value '{}' for '--{long} <N>': {e}",
                crate::report::clean(&v)
            ),
        )
    })
}

/// `fleet capture --max-bytes` as the command's argument `max_bytes=N`.
///
/// Errors: [`ErrorKind::InvalidValue`] unless N is a whole number from 1 to
/// [`crate::mqtt::chunks::MAX_BUNDLE_BYTES`].
fn max_bytes(m: &Matches) -> Result<String, UsageError> {
    let v = m.text("max-bytes")?.unwrap_or_default();
    let max = crate::mqtt::chunks::MAX_BUNDLE_BYTES;
    match v.parse::<u64>() {
        Ok(n) if (1..=max).contains(&n) => Ok(format!("max_bytes={n}")),
        _ => Err(m.error(
            ErrorKind::InvalidValue,
            format!(
                "invalid value '{}' for '--max-bytes <BYTES>': a whole number of bytes from 1 \
                 to {max}",
                crate::report::clean(&v)
            ),
        )),
    }
}

/// `npu-agent fleet …`: the operator's tools, in every build (a board answers them too).
pub fn fleet(a: FleetAction, out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    match a {
        FleetAction::Watch {
            broker,
            topic_root,
            once,
            format,
            accept_new_boards,
            max_rows,
        } => {
            let json = format == WatchFormat::Json;
            if json && !once {
                let _ = writeln!(err, "npu-agent: --format json needs --once");
                return EXIT_USAGE;
            }
            crate::fleet::watch(
                &crate::fleet::WatchArgs {
                    broker,
                    topic_root,
                    once,
                    json,
                    accept_new_boards,
                    max_rows,
                },
                out,
                err,
            )
        }
        FleetAction::Send {
            action,
            args,
            board,
            all: _,
            broker,
            topic_root,
            key,
            wait,
            board_wait,
            out: bundle,
            force,
            accept_new_boards,
            accept_new_key,
        } => {
            if let Some(Err(code)) = bundle.as_ref().map(|o| writable_out(o, force, err)) {
                return code;
            }
            crate::fleet::send(
                &crate::fleet::SendArgs {
                    action,
                    args,
                    board,
                    broker,
                    topic_root,
                    key,
                    wait_s: wait,
                    board_wait_s: board_wait,
                    out: bundle,
                    force,
                    accept_new_boards,
                    accept_new_key,
                },
                out,
                err,
            )
        }
    }
}

/// `fleet capture --out`: checked before the board does the work. Its directory must exist,
/// it must not be a directory, and an existing file needs `--force`.
fn writable_out(o: &std::path::Path, force: bool, err: &mut dyn Write) -> Result<(), i32> {
    super::refuse_existing(o, force, err)?;
    let dir = o.parent().filter(|d| !d.as_os_str().is_empty());
    if o.is_dir() || !dir.is_none_or(std::path::Path::is_dir) {
        let _ = writeln!(
            err,
            "npu-agent: {}: not a file in an existing directory",
            o.display()
        );
        return Err(EXIT_USAGE);
    }
    Ok(())
}
