//! The command line (docs/reference.md "Commands"). `main.rs` only calls [`run`].
//!
//! The commands and their options are clap 4 derive definitions, one file per command (`check`,
//! `profiles`, `act` for compact and cma, `fix`, `run`, `fleet`, `capture`, `keygen`): clap
//! parses, checks and prints the help, usage errors and version; the man pages and shell
//! completions are generated from the same definitions (examples/gen_docs.rs).

mod act;
mod capture;
mod check;
pub mod fix;
mod fleet;
mod fleet_args;
mod keygen;
mod profiles;
mod run;
pub use act::*;
pub use capture::*;
pub use check::*;
pub use fleet::*;
pub use fleet_args::*;
pub use keygen::*;
pub use profiles::*;
pub use run::*;

use crate::diagnose::{diagnose, DiagnoseError, ProfileChoice};
use crate::profile;
use crate::report::{render_text, Style};
use crate::root::SysRoot;
use clap::Parser;
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::{IsTerminal, Write};
use std::path::PathBuf;

/// Exit code: healthy / done.
pub const EXIT_OK: i32 = 0;
/// Exit code: a finding at or above `--fail-on`.
pub const EXIT_FINDINGS: i32 = 1;
/// Exit code: usage or configuration error.
pub const EXIT_USAGE: i32 = 2;

/// The whole command line: `npu-agent COMMAND ...` (`clap::Parser::try_parse_from` reads it,
/// `clap::CommandFactory::command` gives its clap definition).
#[derive(Debug, Parser)]
#[command(name = "npu-agent", version, about, long_about = LONG_ABOUT)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// `npu-agent --help`'s description (and the man page's).
const LONG_ABOUT: &str = "Keeps Raspberry Pi 5 boards with a Hailo NPU and Rockchip RK3588 \
    boards with rknpu healthy: detects the board, loads its board profile, checks the NPU device, \
    driver and packages, process limits, the CMA pool, the boot-time cma= setting and memory \
    fragmentation, and says what is wrong and what to paste to fix it.";

/// Subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Diagnose this machine, or a captured board tree under --root.
    Check(CheckArgs),
    /// List or show the board profiles (built in and in /etc/npu-agent/profiles.d).
    Profiles {
        /// list or show.
        #[command(subcommand)]
        action: ProfilesAction,
    },
    /// Compact memory now (sync, optionally drop the page cache, compact_memory=1).
    ///
    /// Shows CmaFree, MemFree, buddyinfo and compaction counters before and after. Passes the gate
    /// ([actions] disabled in the config under --root). Exit 0 done, 1 refused or failed, 2
    /// usage or config error.
    Compact(CompactArgs),
    /// The boot-time CMA pool (cma=): as configured, as booted and as in effect; or edit it.
    Cma {
        /// show or set.
        #[command(subcommand)]
        action: CmaAction,
    },
    /// Fix what the checks found.
    ///
    /// Prints the plan of every fired finding's fix (or of the named checks): packages with
    /// versions, files with their new lines, units to restart, reboot needed; or no automatic fix
    /// and why. Then applies it after confirmation (--yes for scripts), through the gate
    /// ([actions] disabled), and checks again. Exit 0 plan shown or
    /// fixed, 1 refused, failed or still firing, 2 usage error.
    Fix(fix::FixOptions),
    /// The daemon: periodic checks, MQTT status, remote commands (non-zero only on a fatal
    /// config error).
    Run(RunArgs),
    /// Operator side: watch the fleet's status, send a command to one board or all, fetch a
    /// board's support bundle, or serve the fleet's page, history and metrics.
    ///
    /// The broker list, topic root, signing key, TLS files and credentials come from the
    /// operator config file ($XDG_CONFIG_HOME/npu-agent/fleet.toml, else
    /// ~/.config/npu-agent/fleet.toml), which NPU_AGENT_MQTT_CA_FILE, NPU_AGENT_MQTT_CERT_FILE,
    /// NPU_AGENT_MQTT_KEY_FILE, NPU_AGENT_MQTT_USERNAME, NPU_AGENT_MQTT_PASSWORD_FILE and the
    /// flags override.
    Fleet {
        /// watch, send, capture or serve.
        #[command(subcommand)]
        action: FleetCommand,
    },
    /// Write a support bundle (.tar.gz).
    ///
    /// It holds every file the checks read, the kernel log and the
    /// workloads' journal as files, page size, uname and a manifest; redacted unless
    /// --no-redact. `check --root` on the unpacked bundle gives the same verdicts. Never
    /// overwrites FILE unless --force. Exit 0 written, 1 could not write, 2 usage error (such as
    /// a --root that is not a directory, a --profile that names no profile, or FILE exists).
    Capture(CaptureArgs),
    /// Write an Ed25519 key pair for signing commands: FILE (private, mode 0600) and FILE.pub.
    Keygen {
        /// Where to write the private key.
        #[arg(long, value_name = "FILE")]
        out: PathBuf,
        /// Print one JSON object (`private_key`, `public_key` paths, `public_key_base64`).
        #[arg(long)]
        json: bool,
    },
}

/// Parses `args` (the program name first) and runs the command, writing to `out`/`err`.
/// Returns the exit code: help and version go to `out` with [`EXIT_OK`], usage errors to `err`
/// with [`EXIT_USAGE`].
pub fn run<I, T>(args: I, out: &mut dyn Write, err: &mut dyn Write) -> i32
where
    I: IntoIterator<Item = T>,
    T: Into<OsString>,
{
    let args: Vec<OsString> = args.into_iter().map(Into::into).collect();
    // Board-controlled text never drives the operator's terminal (see crate::sys::term); only
    // `fleet watch` may home the cursor and clear the screen, to redraw its table.
    let mut out = crate::sys::term::TerminalSafe::new(out);
    let mut err = crate::sys::term::TerminalSafe::new(err);
    let code = match Cli::try_parse_from(args) {
        Ok(cli) => {
            if redraws(&cli.command) {
                out = out.with_redraw();
            }
            // `run` installs its own log (info by default, or `[log] level`); the other commands
            // log at [`default_log_level`] unless RUST_LOG asks otherwise.
            if !matches!(cli.command, Command::Run(_)) {
                crate::sys::log::init_for(None, default_log_level(&cli.command));
            }
            let (o, e): (&mut dyn Write, &mut dyn Write) = (&mut out, &mut err);
            match cli.command {
                Command::Check(a) => check(a, o, e),
                Command::Profiles { action } => profiles(action, o, e),
                Command::Compact(a) => compact(a, o, e),
                Command::Cma { action } => cma(action, o, e),
                Command::Run(a) => run::run(a, o, e),
                Command::Fleet { action } => match action.into_action() {
                    Ok(a) => fleet::fleet(a, o, e),
                    Err(message) => {
                        let _ = writeln!(e, "npu-agent: {message}");
                        EXIT_USAGE
                    }
                },
                Command::Keygen { out: path, json } => keygen::keygen(&path, json, o, e),
                Command::Capture(a) => capture(a, o, e),
                Command::Fix(a) => fix::run(
                    fix::FixOptions {
                        terminal: std::io::stdin().is_terminal(),
                        ..a
                    },
                    o,
                    e,
                ),
            }
        }
        // Help and version on stdout with exit 0; usage errors, and the help of a command run
        // without its subcommand, on stderr with exit 2.
        Err(e) if e.use_stderr() => {
            let _ = write!(err, "{}", e.render());
            return EXIT_USAGE;
        }
        Err(e) => {
            let _ = write!(out, "{}", e.render());
            EXIT_OK
        }
    };
    // Output that did not all reach stdout is not a success: a report cut short by a full disk
    // must not be taken for a whole one (the Prometheus textfile unit keeps its file only when
    // the exit code is 0 or 1). A closed pipe (`| head`) is the reader's choice: no message.
    let _ = out.flush();
    match out.write_error() {
        None | Some(std::io::ErrorKind::BrokenPipe) => code,
        Some(kind) => {
            let _ = writeln!(
                err,
                "npu-agent: cannot write the output: {}",
                std::io::Error::from(kind)
            );
            code.max(EXIT_USAGE)
        }
    }
}

/// The level `command` logs at unless RUST_LOG says otherwise: the long-lived `fleet serve`
/// at info, as `run` (its broker link comes and goes in the log); the one-shot commands at warn.
pub fn default_log_level(command: &Command) -> tracing::Level {
    #[cfg(feature = "serve")]
    if matches!(
        command,
        Command::Fleet {
            action: FleetCommand::Serve(_)
        }
    ) {
        return tracing::Level::INFO;
    }
    let _ = command;
    tracing::Level::WARN
}

/// Whether `command` redraws the screen (cursor home, clear screen): `fleet watch` only, as
/// parsed, never because "fleet" and "watch" appear somewhere among the arguments.
pub fn redraws(command: &Command) -> bool {
    matches!(
        command,
        Command::Fleet {
            action: FleetCommand::Watch(_)
        }
    )
}

/// An output file that exists (or a link in its place) is replaced only with `--force`: without
/// it, says so on `err` and gives the usage exit code ([`EXIT_USAGE`]) for the caller to return.
pub(crate) fn refuse_existing(
    out: &std::path::Path,
    force: bool,
    err: &mut dyn Write,
) -> Result<(), i32> {
    if force || std::fs::symlink_metadata(out).is_err() {
        return Ok(());
    }
    let _ = writeln!(
        err,
        "npu-agent: {}: file exists; pass --force to replace it",
        out.display()
    );
    Err(EXIT_USAGE)
}

/// `--root DIR` must be a directory: otherwise says so on `err` and gives the usage exit code
/// ([`EXIT_USAGE`]) for the caller to return.
pub(crate) fn require_root_dir(root: &std::path::Path, err: &mut dyn Write) -> Result<(), i32> {
    if root.is_dir() {
        return Ok(());
    }
    if root.as_os_str().is_empty() {
        let _ = writeln!(err, "npu-agent: --root is empty: give a directory");
    } else {
        let _ = writeln!(err, "npu-agent: --root {}: not a directory", root.display());
    }
    Err(EXIT_USAGE)
}

/// Writes `value` as one JSON document and a newline: the `--json` output of every command
/// (serde_json escapes every control character a board's text may hold).
pub(crate) fn write_json<T: serde::Serialize + ?Sized>(out: &mut dyn Write, value: &T) {
    match serde_json::to_string_pretty(value) {
        Ok(s) => {
            let _ = writeln!(out, "{s}");
        }
        // Only a map with non-string keys fails here, which none of the outputs has.
        Err(e) => tracing::error!("cannot write the JSON output: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::act::hint_args;
    use std::path::Path;

    #[test]
    fn hints_repeat_root_and_profile_quoted_for_a_shell() {
        assert_eq!(hint_args(Path::new("/"), "auto"), "");
        assert_eq!(
            hint_args(Path::new("/tmp/board"), "rk3588-rknpu"),
            " --root /tmp/board --profile rk3588-rknpu"
        );
        assert_eq!(
            hint_args(Path::new("/tmp/a board"), "auto"),
            " --root '/tmp/a board'"
        );
        assert_eq!(
            hint_args(Path::new("/"), "/tmp/it's.toml"),
            r" --profile '/tmp/it'\''s.toml'"
        );
    }
}

#[cfg(test)]
mod parse_tests;
