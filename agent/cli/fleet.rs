//! `npu-agent fleet send|watch|capture`: the operator side of the fleet link.

use super::EXIT_USAGE;
use crate::fleet::operator::{Operator, OperatorFlags};
use std::io::Write;
use std::path::PathBuf;

/// `fleet watch --format`: a table, or (with `--once`) one JSON object. Not the `check`
/// formats: there is no Prometheus form of the fleet list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum WatchFormat {
    /// A table for people.
    Text,
    /// One JSON object with every board (needs --once).
    Json,
}

/// `fleet` actions.
#[derive(Debug)]
pub enum FleetAction {
    /// The operator's fleet service (`fleet serve`).
    #[cfg(feature = "serve")]
    Serve {
        /// `--broker` and `--topic-root` as given (resolved with fleet.toml).
        flags: OperatorFlags,
        /// Where the HTTP server listens (`None`: fleet.toml's, else the default).
        listen: Option<std::net::SocketAddr>,
        /// Where the history database lives (`None`: fleet.toml's, else the default).
        state_dir: Option<PathBuf>,
        /// Days of history kept; 0 keeps everything (`None`: fleet.toml's, else 90).
        retention_days: Option<u64>,
        /// Which boards get per-board series in `/metrics` (`None`: fleet.toml's, else all).
        cardinality: Option<crate::fleet::serve::metrics::Cardinality>,
        /// The most boards held (`None`: fleet.toml's, else 200,000).
        max_boards: Option<usize>,
        /// The most boards held neither in known_boards nor sealing a status (`None`:
        /// fleet.toml's, else the default).
        max_unsealed_boards: Option<usize>,
        /// The most history rows a board keeps (`None`: fleet.toml's, else the default).
        history_rows_per_board: Option<usize>,
        /// New board keys recorded in known_boards in this run (`None`: fleet.toml's, else
        /// 20).
        accept_new_boards: Option<usize>,
        /// A status older than this is stale (`None`: fleet.toml's, else three intervals and
        /// a minute).
        stale_after_s: Option<u64>,
    },
    /// A live table of every board (health, worst findings, CMA free, last seen, online).
    Watch {
        /// `--broker`, `--topic-root` and `--key` as given (resolved with fleet.toml).
        flags: OperatorFlags,
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
        /// `--broker`, `--topic-root` and `--key` as given (resolved with fleet.toml).
        flags: OperatorFlags,
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
        /// Lifecycle messages (and the written bundle) as JSON lines.
        json: bool,
        /// With `all`: a staged rollout in these cumulative shares (percent); empty: not
        /// staged.
        waves: Vec<u32>,
    },
}

/// `npu-agent fleet …`: the operator's tools, in every build (a board answers them too).
pub fn fleet(a: FleetAction, out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    match a {
        #[cfg(feature = "serve")]
        a @ FleetAction::Serve { .. } => serve(a, err),
        FleetAction::Watch {
            flags,
            once,
            format,
            accept_new_boards,
            max_rows,
        } => {
            let json = format == WatchFormat::Json;
            if json && !once {
                let _ = writeln!(err, "npu-agent: --format json (--json) needs --once");
                return EXIT_USAGE;
            }
            let Some(op) = resolve(flags, err) else {
                return EXIT_USAGE;
            };
            crate::fleet::watch(
                &crate::fleet::WatchArgs {
                    op,
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
            flags,
            wait,
            board_wait,
            out: bundle,
            force,
            accept_new_boards,
            accept_new_key,
            json,
            waves,
        } => {
            if let Some(Err(code)) = bundle.as_ref().map(|o| writable_out(o, force, err)) {
                return code;
            }
            let Some(op) = resolve(flags, err) else {
                return EXIT_USAGE;
            };
            let send_args = crate::fleet::SendArgs {
                action,
                args,
                board,
                op,
                wait_s: wait,
                board_wait_s: board_wait,
                out: bundle,
                force,
                accept_new_boards,
                accept_new_key,
                json,
            };
            if waves.is_empty() {
                crate::fleet::send(&send_args, out, err)
            } else {
                crate::fleet::rollout(&send_args, &waves, out, err)
            }
        }
    }
}

/// `fleet serve`: its flags over the `[serve]` defaults of the operator's file over the built-in
/// ones; runs the service.
#[cfg(feature = "serve")]
fn serve(a: FleetAction, err: &mut dyn Write) -> i32 {
    let FleetAction::Serve {
        flags,
        listen,
        state_dir,
        retention_days,
        cardinality,
        max_boards,
        max_unsealed_boards,
        history_rows_per_board,
        accept_new_boards,
        stale_after_s,
    } = a
    else {
        return EXIT_USAGE;
    };
    let Some(op) = resolve(flags, err) else {
        return EXIT_USAGE;
    };
    let d = op.serve.clone();
    let a = crate::fleet::serve::ServeArgs {
        listen: listen
            .or(d.listen)
            .unwrap_or(crate::fleet::serve::DEFAULT_LISTEN),
        state_dir: state_dir
            .or(d.state_dir)
            .unwrap_or_else(|| crate::fleet::serve::DEFAULT_STATE_DIR.into()),
        retention_days: retention_days.or(d.retention_days).unwrap_or(90),
        op,
        cardinality: cardinality.unwrap_or(match d.metrics_boards {
            Some(crate::fleet::operator::MetricsBoards::Failing) => {
                crate::fleet::serve::metrics::Cardinality::Failing
            }
            _ => crate::fleet::serve::metrics::Cardinality::All,
        }),
        max_boards: max_boards
            .or(d.max_boards)
            .unwrap_or(crate::fleet::serve::DEFAULT_MAX_BOARDS)
            .max(1),
        max_unsealed_boards: max_unsealed_boards
            .or(d.max_unsealed_boards)
            .unwrap_or(crate::fleet::serve::DEFAULT_MAX_UNSEALED_BOARDS),
        history_rows_per_board: history_rows_per_board
            .or(d.history_rows_per_board)
            .unwrap_or(crate::fleet::serve::DEFAULT_ROWS_PER_BOARD),
        accept_new_boards: accept_new_boards
            .or(d.accept_new_boards)
            .unwrap_or(crate::fleet::known::DEFAULT_NEW_PER_RUN),
        stale_after_s: stale_after_s.or(d.stale_after),
    };
    crate::fleet::serve::serve(&a, err)
}

/// The operator's settings for this run ([`crate::fleet::operator`]); `None` when they cannot
/// be resolved (the reason printed).
fn resolve(flags: OperatorFlags, err: &mut dyn Write) -> Option<Operator> {
    match Operator::resolve(flags) {
        Ok(op) => Some(op),
        Err(e) => {
            let _ = writeln!(err, "npu-agent: {e}");
            None
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
