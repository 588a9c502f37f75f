//! The command line (docs/reference.md "Commands"). `main.rs` only calls [`run`].
//!
//! The commands and their options are declared as [`args::Spec`]s, one file per command
//! (`check`, `profiles`, `act` for compact and cma, `capture`, `run`, `fleet`, `keygen`);
//! [`Cli::try_parse_from`] reads them into a [`Command`].

pub mod args;

mod act;
mod capture;
mod check;
pub mod fix;
mod fleet;
mod keygen;
mod profiles;
mod run;
pub use act::*;
pub use capture::*;
pub use check::*;
pub use fleet::*;
pub use keygen::*;
pub use profiles::*;
pub use run::*;

use crate::diagnose::{diagnose, DiagnoseError, ProfileChoice};
use crate::profile;
use crate::report::{render_text, Style};
use crate::root::SysRoot;
use args::{ErrorKind, Matches, Opt, Parsed, Pos, Spec, UsageError};
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

/// Keeps edge AI boards (Raspberry Pi 5 + Hailo, RK3588 + rknpu) healthy.
#[derive(Debug)]
pub struct Cli {
    /// What to do.
    pub command: Command,
}

/// Why the command line was not run: a text for standard output (exit 0) or a usage error
/// (standard error, exit 2).
#[derive(Debug)]
pub enum ParseError {
    /// `-h`, `--help` or `help [COMMAND]…`: the help text.
    Help(String),
    /// `-V` or `--version`: `npu-agent VERSION`.
    Version(String),
    /// The arguments were refused.
    Usage(UsageError),
}

impl Cli {
    /// Parses `args` (the program name first, as `std::env::args_os` gives it) into a command.
    ///
    /// Errors: [`ParseError`]: help or version asked for, or a usage error.
    pub fn try_parse_from<I, T>(args: I) -> Result<Cli, ParseError>
    where
        I: IntoIterator<Item = T>,
        T: Into<OsString>,
    {
        parse_os(args.into_iter().skip(1).map(Into::into).collect())
    }
}

/// [`Cli::try_parse_from`] on the arguments after the program name.
fn parse_os(args: Vec<OsString>) -> Result<Cli, ParseError> {
    let m = match args::parse(&TOP, args) {
        Ok(Parsed::Run(m)) => m,
        Ok(Parsed::Help(h)) => return Err(ParseError::Help(h)),
        Ok(Parsed::Version(v)) => return Err(ParseError::Version(v)),
        Err(e) => return Err(ParseError::Usage(e)),
    };
    command(&m)
        .map(|command| Cli { command })
        .map_err(ParseError::Usage)
}

/// The [`Command`] the parsed arguments select.
fn command(m: &Matches) -> Result<Command, UsageError> {
    Ok(match m.commands.as_slice() {
        ["check"] => Command::Check(CheckArgs::from_matches(m)?),
        ["profiles", "list"] => Command::Profiles {
            action: ProfilesAction::List { root: root(m) },
        },
        ["profiles", "show"] => Command::Profiles {
            action: ProfilesAction::Show {
                id: m.positional(0)?,
                root: root(m),
            },
        },
        ["compact"] => Command::Compact(CompactArgs {
            root: root(m),
            drop_caches: m.flag("drop-caches"),
            dry_run: m.flag("dry-run"),
        }),
        ["cma", "show"] => Command::Cma {
            action: CmaAction::Show {
                root: root(m),
                profile: profile_arg(m)?,
            },
        },
        ["cma", "set"] => Command::Cma {
            action: CmaAction::Set {
                size: m.positional(0)?,
                root: root(m),
                profile: profile_arg(m)?,
                dry_run: m.flag("dry-run"),
            },
        },
        ["run"] => Command::Run(RunArgs::from_matches(m)),
        ["fleet", _] => Command::Fleet {
            action: FleetAction::from_matches(m)?,
        },
        ["capture"] => Command::Capture(CaptureArgs {
            out: m.path("out").unwrap_or_default(),
            root: root(m),
            profile: profile_arg(m)?,
            no_redact: m.flag("no-redact"),
            force: m.flag("force"),
        }),
        ["fix"] => Command::Fix(fix::FixOptions::from_matches(m)?),
        ["keygen"] => Command::Keygen {
            out: m.path("out").unwrap_or_default(),
        },
        other => {
            return Err(m.error(
                ErrorKind::UnknownCommand,
                format!("unrecognized subcommand '{}'", other.join(" ")),
            ))
        }
    })
}

/// `--root` (default `/`).
fn root(m: &Matches) -> PathBuf {
    m.path("root").unwrap_or_else(|| PathBuf::from("/"))
}

/// `--profile` (default `auto`).
fn profile_arg(m: &Matches) -> Result<String, UsageError> {
    Ok(m.text("profile")?.unwrap_or_else(|| "auto".to_string()))
}

/// The whole command tree: `npu-agent` and its subcommands.
pub static TOP: Spec = Spec {
    name: "npu-agent",
    about: env!("CARGO_PKG_DESCRIPTION"),
    opts: &[],
    args: &[],
    commands: &[
        &CHECK,
        &PROFILES,
        &COMPACT,
        &CMA,
        &fix::FIX,
        &RUN,
        &FLEET,
        &CAPTURE,
        &KEYGEN,
    ],
    one_of: None,
};

/// `--root DIR` for the commands that read a board tree.
const ROOT_READ: Opt = Opt::path(
    "root",
    "DIR",
    "Read every file under DIR instead of / (a captured board tree).",
)
.default("/");
/// `--profile ID|FILE`.
const PROFILE: Opt =
    Opt::text("profile", "ID|FILE", "Profile id, profile file, or auto.").default("auto");

/// Subcommands.
#[derive(Debug)]
pub enum Command {
    /// Diagnose this machine, or a captured board tree under --root.
    Check(CheckArgs),
    /// List or show the board profiles (built in and in /etc/npu-agent/profiles.d).
    Profiles {
        /// list or show.
        action: ProfilesAction,
    },
    /// Compact memory now (see `npu-agent compact --help`).
    Compact(CompactArgs),
    /// The boot-time CMA pool (cma=): as configured, as booted and as in effect; or edit it.
    Cma {
        /// show or set.
        action: CmaAction,
    },
    /// Plan and apply the fixes of what the checks found (see `npu-agent fix --help`).
    Fix(fix::FixOptions),
    /// The daemon: periodic checks, MQTT status, remote commands.
    Run(RunArgs),
    /// Operator side: watch the fleet's status, or send a command to one board or all.
    Fleet {
        /// watch or send.
        action: FleetAction,
    },
    /// Write a support bundle (see `npu-agent capture --help`).
    Capture(CaptureArgs),
    /// Write an Ed25519 key pair for signing commands: FILE (private, mode 0600) and FILE.pub.
    Keygen {
        /// Where to write the private key.
        out: PathBuf,
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
    run_os(args.into_iter().skip(1).map(Into::into).collect(), out, err)
}

/// [`run`] on the arguments after the program name.
fn run_os(args: Vec<OsString>, out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    // Board-controlled text never drives the operator's terminal (see crate::sys::term); only
    // `fleet watch` may home the cursor and clear the screen, to redraw its table.
    let mut out = crate::sys::term::TerminalSafe::new(out);
    let mut err = crate::sys::term::TerminalSafe::new(err);
    let code = match parse_os(args) {
        Ok(cli) => {
            if redraws(&cli.command) {
                out = out.with_redraw();
            }
            // `run` installs its own log (info by default, or `[log] level`); the other commands
            // log warnings and errors only unless RUST_LOG asks for more.
            if !matches!(cli.command, Command::Run(_)) {
                crate::sys::log::init_for(None, tracing::Level::WARN);
            }
            let (o, e): (&mut dyn Write, &mut dyn Write) = (&mut out, &mut err);
            match cli.command {
                Command::Check(a) => check(a, o, e),
                Command::Profiles { action } => profiles(action, o, e),
                Command::Compact(a) => compact(a, o, e),
                Command::Cma { action } => cma(action, o, e),
                Command::Run(a) => run::run(a, o, e),
                Command::Fleet { action } => fleet::fleet(action, o, e),
                Command::Keygen { out: path } => keygen::keygen(&path, o, e),
                Command::Capture(a) => capture(a, o, e),
                Command::Fix(a) => fix::run(a, o, e),
            }
        }
        Err(ParseError::Help(text) | ParseError::Version(text)) => {
            let _ = write!(out, "{text}");
            EXIT_OK
        }
        Err(ParseError::Usage(e)) => {
            let _ = write!(err, "{e}");
            return EXIT_USAGE;
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

/// Whether `command` redraws the screen (cursor home, clear screen): `fleet watch` only, as
/// parsed, never because "fleet" and "watch" appear somewhere among the arguments.
pub fn redraws(command: &Command) -> bool {
    matches!(
        command,
        Command::Fleet {
            action: FleetAction::Watch { .. }
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

/// The parser against the real command tree: every error kind, both value forms, help at each
/// level, the `--board`/`--all` pair, values that start with `-`, and non-UTF-8 arguments.
#[cfg(test)]
mod parse_tests {
    use super::args::{ErrorKind, Spec, UsageError};
    use super::*;
    use std::os::unix::ffi::OsStringExt;

    fn parse(args: &[&str]) -> Result<Cli, ParseError> {
        Cli::try_parse_from(std::iter::once("npu-agent").chain(args.iter().copied()))
    }

    fn ok(args: &[&str]) -> Command {
        match parse(args) {
            Ok(c) => c.command,
            Err(e) => panic!("{args:?}: {e:?}"),
        }
    }

    fn usage_error(args: &[&str]) -> UsageError {
        match parse(args) {
            Err(ParseError::Usage(e)) => e,
            other => panic!("{args:?}: not a usage error: {other:?}"),
        }
    }

    fn help(args: &[&str]) -> String {
        match parse(args) {
            Err(ParseError::Help(h)) => h,
            other => panic!("{args:?}: no help: {other:?}"),
        }
    }

    fn check_args(args: &[&str]) -> CheckArgs {
        match ok(args) {
            Command::Check(a) => a,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn check_defaults_and_both_value_forms() {
        let a = check_args(&["check"]);
        assert_eq!(a.root, PathBuf::from("/"));
        assert_eq!(a.profile, "auto");
        assert_eq!(a.format, Format::Text);
        assert_eq!(a.fail_on, FailOn::Fail);
        assert!(!a.verbose);
        assert_eq!(a.llm_cmdline, None);
        for args in [
            &[
                "check",
                "--root",
                "/tmp/b",
                "--profile",
                "rk3588-rknpu",
                "--format",
                "json",
                "--fail-on",
                "warn",
                "-v",
            ][..],
            &[
                "check",
                "--root=/tmp/b",
                "--profile=rk3588-rknpu",
                "--format=json",
                "--fail-on=warn",
                "--verbose",
            ][..],
        ] {
            let a = check_args(args);
            assert_eq!(a.root, PathBuf::from("/tmp/b"), "{args:?}");
            assert_eq!(a.profile, "rk3588-rknpu");
            assert_eq!(a.format, Format::Json);
            assert_eq!(a.fail_on, FailOn::Warn);
            assert!(a.verbose);
        }
        assert_eq!(
            check_args(&["check", "--format", "prometheus"]).format,
            Format::Prometheus
        );
    }

    #[test]
    fn every_command_builds_with_its_options() {
        match ok(&["profiles", "show", "rk3588-rknpu", "--root", "/r"]) {
            Command::Profiles {
                action: ProfilesAction::Show { id, root },
            } => assert_eq!((id.as_str(), root), ("rk3588-rknpu", PathBuf::from("/r"))),
            other => panic!("{other:?}"),
        }
        match ok(&["profiles", "list"]) {
            Command::Profiles {
                action: ProfilesAction::List { root },
            } => assert_eq!(root, PathBuf::from("/")),
            other => panic!("{other:?}"),
        }
        match ok(&["compact", "--drop-caches", "--root", "/r"]) {
            Command::Compact(a) => {
                assert!(a.drop_caches && !a.dry_run);
                assert_eq!(a.root, PathBuf::from("/r"));
            }
            other => panic!("{other:?}"),
        }
        match ok(&["cma", "set", "256M", "--dry-run", "--profile", "p.toml"]) {
            Command::Cma {
                action:
                    CmaAction::Set {
                        size,
                        root,
                        profile,
                        dry_run,
                    },
            } => {
                assert_eq!((size.as_str(), profile.as_str()), ("256M", "p.toml"));
                assert_eq!(root, PathBuf::from("/"));
                assert!(dry_run);
            }
            other => panic!("{other:?}"),
        }
        match ok(&["cma", "show", "--root=/r"]) {
            Command::Cma {
                action: CmaAction::Show { root, profile },
            } => assert_eq!((root, profile.as_str()), (PathBuf::from("/r"), "auto")),
            other => panic!("{other:?}"),
        }
        match ok(&["run", "--config", "/c.toml", "--print-config"]) {
            Command::Run(a) => {
                assert_eq!(a.config, Some(PathBuf::from("/c.toml")));
                assert_eq!(a.root, None);
                assert!(a.print_config);
            }
            other => panic!("{other:?}"),
        }
        match ok(&["capture", "--out", "b.tar.gz", "--no-redact", "--force"]) {
            Command::Capture(a) => {
                assert_eq!(a.out, PathBuf::from("b.tar.gz"));
                assert_eq!((a.root, a.profile.as_str()), (PathBuf::from("/"), "auto"));
                assert!(a.no_redact && a.force);
            }
            other => panic!("{other:?}"),
        }
        match ok(&["keygen", "--out", "k"]) {
            Command::Keygen { out } => assert_eq!(out, PathBuf::from("k")),
            other => panic!("{other:?}"),
        }
        match ok(&[
            "fleet", "watch", "--broker", "mqtt://h", "--once", "--format", "json",
        ]) {
            Command::Fleet {
                action:
                    FleetAction::Watch {
                        broker,
                        topic_root,
                        once,
                        format,
                        ..
                    },
            } => {
                assert_eq!(
                    (broker.as_str(), topic_root.as_str()),
                    ("mqtt://h", "npu-fleet")
                );
                assert!(once);
                assert_eq!(format, WatchFormat::Json);
            }
            other => panic!("{other:?}"),
        }
    }

    fn send(args: &[&str]) -> (Option<String>, bool, Vec<String>, u64, String) {
        match ok(args) {
            Command::Fleet {
                action:
                    FleetAction::Send {
                        board,
                        all,
                        args,
                        wait,
                        topic_root,
                        ..
                    },
            } => (board, all, args, wait, topic_root),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn fleet_send_needs_exactly_one_of_board_and_all() {
        let b = ["fleet", "send", "rescan", "--broker", "mqtt://h"];
        let (board, all, args, wait, root) = send(&[&b[..], &["--board", "b1"]].concat());
        assert_eq!((board.as_deref(), all), (Some("b1"), false));
        assert_eq!((args.len(), wait, root.as_str()), (0, 30, "npu-fleet"));
        let (board, all, ..) = send(&[&b[..], &["--all"]].concat());
        assert_eq!((board, all), (None, true));
        let e = usage_error(&b);
        assert_eq!(e.kind, ErrorKind::MissingRequired);
        assert!(e.message.contains("'--board <BOARD>'") && e.message.contains("'--all'"));
        let e = usage_error(&[&b[..], &["--all", "--board", "b1"]].concat());
        assert_eq!(e.kind, ErrorKind::Conflict);
        assert_eq!(
            e.message,
            "the argument '--board <BOARD>' cannot be used with '--all'"
        );
        assert!(e
            .usage
            .contains("fleet send [OPTIONS] --broker <BROKER> <--board <BOARD>|--all> <ACTION>"));
        // --arg repeats, in order; --wait is a whole number of seconds.
        let (_, _, args, wait, root) = send(
            &[
                &b[..],
                &[
                    "--all",
                    "--arg",
                    "size=256M",
                    "--arg=x=1",
                    "--wait",
                    "5",
                    "--topic-root=t",
                ],
            ]
            .concat(),
        );
        assert_eq!(args, ["size=256M", "x=1"]);
        assert_eq!((wait, root.as_str()), (5, "t"));
        let e = usage_error(&[&b[..], &["--all", "--wait", "soon"]].concat());
        assert_eq!(e.kind, ErrorKind::InvalidValue);
        assert!(e
            .message
            .starts_with("invalid value 'soon' for '--wait <SECS>'"));
    }

    #[test]
    fn each_usage_error_kind() {
        for (args, kind, message) in [
            (&["check", "--foo"][..], ErrorKind::UnexpectedArgument, "unexpected argument '--foo' found"),
            (&["check", "-x"], ErrorKind::UnexpectedArgument, "unexpected argument '-x' found"),
            (&["check", "extra"], ErrorKind::UnexpectedArgument, "unexpected argument 'extra' found"),
            (&["cma", "set", "1G", "2G"], ErrorKind::UnexpectedArgument, "unexpected argument '2G' found"),
            (&["check", "-V"], ErrorKind::UnexpectedArgument, "unexpected argument '-V' found"),
            (&["frobnicate"], ErrorKind::UnknownCommand, "unrecognized subcommand 'frobnicate'"),
            (&["cma", "edit"], ErrorKind::UnknownCommand, "unrecognized subcommand 'edit'"),
            (&["help", "nope"], ErrorKind::UnknownCommand, "unrecognized subcommand 'nope'"),
            (&["fleet", "send", "rescan", "--board", "", "--broker", "b"], ErrorKind::InvalidValue, "invalid value '' for '--board': a board id is one non-empty topic level, without '/'"),
            (&["fleet", "send", "rescan", "--board", "a/b", "--broker", "b"], ErrorKind::InvalidValue, "invalid value 'a/b' for '--board': a board id is one non-empty topic level, without '/'"),
            (&["fleet", "watch", "--broker", "b", "--topic-root", "a/#"], ErrorKind::InvalidValue, "invalid value 'a/#' for '--topic-root': an MQTT topic may not hold '+', '#' or NUL here"),
            (&["fleet", "watch", "--broker", "b", "--topic-root=fleet/"], ErrorKind::InvalidValue, "invalid value 'fleet/' for '--topic-root': a topic root may not start or end with '/'"),
            (&["fleet", "send", "rescan", "--all", "--broker", "b", "--wait", "86401"], ErrorKind::InvalidValue, "invalid value '86401' for '--wait <SECS>': at most 86400 seconds (a day)"),
            (&["chek"], ErrorKind::UnknownCommand, "unrecognized subcommand 'chek'; did you mean 'check'?"),
            (&["Check"], ErrorKind::UnknownCommand, "unrecognized subcommand 'Check'; did you mean 'check'?"),
            (&["fleet", "sned"], ErrorKind::UnknownCommand, "unrecognized subcommand 'sned'; did you mean 'send'?"),
            (&["help", "cma", "shwo"], ErrorKind::UnknownCommand, "unrecognized subcommand 'shwo'; did you mean 'show'?"),
            (&["check", "--rooot", "x"], ErrorKind::UnexpectedArgument, "unexpected argument '--rooot' found; did you mean '--root'?"),
            (&["check", "--form", "json"], ErrorKind::UnexpectedArgument, "unexpected argument '--form' found; did you mean '--format'?"),
            (&["check", "--zzzzzz"], ErrorKind::UnexpectedArgument, "unexpected argument '--zzzzzz' found"),
            (&["check", "--root"], ErrorKind::MissingValue, "a value is required for '--root <DIR>' but none was supplied"),
            (&["check", "--root", "-d"], ErrorKind::MissingValue, "a value is required for '--root <DIR>' but none was supplied; a value starting with '-' must be attached: '--root=-d'"),
            (&["check", "--root", "--profile", "x"], ErrorKind::MissingValue, "a value is required for '--root <DIR>' but none was supplied"),
            (&["check", "--root", "--", "x"], ErrorKind::MissingValue, "a value is required for '--root <DIR>' but none was supplied"),
            (&["compact", "--dry-run=yes"], ErrorKind::UnexpectedValue, "unexpected value 'yes' for '--dry-run' found; no more were expected"),
            (&["check", "--format", "yaml"], ErrorKind::InvalidValue, "invalid value 'yaml' for '--format <FORMAT>' [possible values: text, json, prometheus]"),
            (&["check", "--fail-on=info"], ErrorKind::InvalidValue, "invalid value 'info' for '--fail-on <FAIL_ON>' [possible values: warn, fail]"),
            (&["fleet", "watch", "--broker", "b", "--format", "prometheus"], ErrorKind::InvalidValue, "invalid value 'prometheus' for '--format <FORMAT>' [possible values: text, json]"),
            (&["keygen"], ErrorKind::MissingRequired, "the following required arguments were not provided: --out <FILE>"),
            (&["cma", "set"], ErrorKind::MissingRequired, "the following required arguments were not provided: <SIZE>"),
            (&["fleet", "send", "--all"], ErrorKind::MissingRequired, "the following required arguments were not provided: --broker <BROKER>, <ACTION>"),
            (&["check", "--root=/a", "--root", "/b"], ErrorKind::Conflict, "the argument '--root <DIR>' cannot be used multiple times"),
            (&["compact", "--dry-run", "--dry-run"], ErrorKind::Conflict, "the argument '--dry-run' cannot be used multiple times"),
        ] {
            let e = usage_error(args);
            assert_eq!((e.kind, e.message.as_str()), (kind, message), "{args:?}");
            // Rendered: the one-line error, the usage line, a hint to --help.
            let text = e.to_string();
            let mut lines = text.lines();
            assert_eq!(lines.next(), Some(format!("error: {message}").as_str()));
            assert_eq!(lines.next(), Some(""));
            let usage = lines.next().unwrap_or_default();
            assert!(usage.starts_with("Usage: npu-agent"), "{text}");
            assert!(text.ends_with("\n\nFor more information, try '--help'.\n"), "{text}");
        }
        assert_eq!(
            usage_error(&["check", "--foo"]).usage,
            "npu-agent check [OPTIONS]"
        );
        assert_eq!(
            usage_error(&["keygen"]).usage,
            "npu-agent keygen --out <FILE>"
        );
    }

    #[test]
    fn a_missing_subcommand_prints_that_level_s_help() {
        for (args, usage) in [
            (&[][..], "Usage: npu-agent <COMMAND>"),
            (&["cma"], "Usage: npu-agent cma <COMMAND>"),
            (&["fleet"], "Usage: npu-agent fleet <COMMAND>"),
            (&["profiles"], "Usage: npu-agent profiles <COMMAND>"),
        ] {
            let e = usage_error(args);
            assert_eq!(e.kind, ErrorKind::MissingCommand);
            let text = e.to_string();
            assert!(text.contains(usage), "{text}");
            assert!(text.contains("\nCommands:\n"), "{text}");
        }
    }

    #[test]
    fn values_that_start_with_a_hyphen() {
        // --llm-cmdline takes any text, even one that looks like an option.
        let a = check_args(&["check", "--llm-cmdline", "-m /m/r1.gguf -ngl 99"]);
        assert_eq!(a.llm_cmdline.as_deref(), Some("-m /m/r1.gguf -ngl 99"));
        let a = check_args(&["check", "--llm-cmdline", "--root", "--root", "/r"]);
        assert_eq!(a.llm_cmdline.as_deref(), Some("--root"));
        assert_eq!(a.root, PathBuf::from("/r"));
        // Other options: only attached, or a lone "-".
        assert_eq!(
            check_args(&["check", "--root=-d"]).root,
            PathBuf::from("-d")
        );
        assert_eq!(
            check_args(&["check", "--root", "-"]).root,
            PathBuf::from("-")
        );
        assert_eq!(
            usage_error(&["check", "--root", "-d"]).kind,
            ErrorKind::MissingValue
        );
        // After --, everything is positional.
        match ok(&["profiles", "show", "--", "--odd"]) {
            Command::Profiles {
                action: ProfilesAction::Show { id, .. },
            } => assert_eq!(id, "--odd"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn non_utf8_is_an_error_for_text_and_accepted_for_paths() {
        let bad = OsString::from_vec(b"p\xff".to_vec());
        let argv = |flag: &str| {
            ["npu-agent", "check", flag]
                .map(OsString::from)
                .into_iter()
                .chain([bad.clone()])
        };
        match Cli::try_parse_from(argv("--profile")) {
            Err(ParseError::Usage(e)) => {
                assert_eq!(e.kind, ErrorKind::NotUtf8);
                assert_eq!(
                    e.message,
                    "invalid UTF-8 in the value of '--profile <ID|FILE>'"
                );
            }
            other => panic!("{other:?}"),
        }
        match Cli::try_parse_from(argv("--root")).map(|c| c.command) {
            Ok(Command::Check(a)) => assert_eq!(a.root, PathBuf::from(bad.clone())),
            other => panic!("{other:?}"),
        }
        let cmd = ["npu-agent".into(), bad.clone()];
        match Cli::try_parse_from(cmd) {
            Err(ParseError::Usage(e)) => assert_eq!(e.kind, ErrorKind::UnknownCommand),
            other => panic!("{other:?}"),
        }
        let pos = ["npu-agent", "cma", "set"].map(OsString::from);
        match Cli::try_parse_from(pos.into_iter().chain([bad])) {
            Err(ParseError::Usage(e)) => {
                assert_eq!(e.kind, ErrorKind::NotUtf8);
                assert!(e.message.contains("<SIZE>"), "{}", e.message);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn version_at_the_top_only() {
        for flag in ["-V", "--version"] {
            match parse(&[flag]) {
                Err(ParseError::Version(v)) => {
                    assert_eq!(v, format!("npu-agent {}\n", env!("CARGO_PKG_VERSION")))
                }
                other => panic!("{other:?}"),
            }
        }
    }

    /// Every command of the tree, with its path from the top.
    fn all_specs() -> Vec<(Vec<&'static str>, &'static Spec)> {
        let mut todo = vec![(Vec::new(), &TOP)];
        let mut all = Vec::new();
        while let Some((path, spec)) = todo.pop() {
            for c in spec.commands {
                let mut p = path.clone();
                p.push(c.name);
                todo.push((p, *c));
            }
            all.push((path, spec));
        }
        all
    }

    /// The man page (packaging/npu-agent.1) is kept by hand: its synopsis names every command
    /// and every option of each, so it cannot fall behind the specs unnoticed.
    #[test]
    fn the_man_page_synopsis_has_every_command_and_option() {
        let man = include_str!("../../packaging/npu-agent.1");
        let synopsis = &man[..man.find(".SH DESCRIPTION").unwrap()];
        for (path, spec) in all_specs() {
            if !spec.commands.is_empty() {
                continue;
            }
            let head = format!(".B npu-agent {}", path.join(" "));
            let at = synopsis
                .find(&format!("{head}\n"))
                .or_else(|| synopsis.find(&format!("{head} ")))
                .unwrap_or_else(|| panic!("{head} missing from the man page synopsis"));
            let end = synopsis[at..]
                .find(".br")
                .map_or(synopsis.len(), |e| at + e);
            let entry = &synopsis[at..end];
            for o in spec.opts {
                let long = format!("\\-\\-{}", o.long.replace('-', "\\-"));
                let short = o.short.map(|c| format!("[ \\-{c} ]"));
                assert!(
                    entry.contains(&long) || short.is_some_and(|s| entry.contains(&s)),
                    "{head}: --{} missing in\n{entry}",
                    o.long
                );
            }
        }
    }

    #[test]
    fn help_at_every_level_lists_what_the_command_takes() {
        let all = all_specs();
        assert_eq!(all.len(), 1 + 9 + 2 + 2 + 3, "commands in the tree");
        for (path, spec) in all {
            let h = help(&[&path[..], &["--help"]].concat());
            assert_eq!(h, help(&[&path[..], &["-h"]].concat()), "{path:?}");
            assert_eq!(h, help(&[&["help"][..], &path[..]].concat()), "{path:?}");
            // `help ... help`, `help ... -h`: the same text (help on help).
            for tail in ["help", "-h", "--help"] {
                assert_eq!(
                    h,
                    help(&[&["help"][..], &path[..], &[tail]].concat()),
                    "{path:?}"
                );
            }
            let name = std::iter::once("npu-agent")
                .chain(path.iter().copied())
                .collect::<Vec<_>>()
                .join(" ");
            assert!(h.contains(&format!("\nUsage: {name}")), "{h}");
            assert!(h.contains("  -h, --help\n"), "{h}");
            assert_eq!(h.contains("-V, --version"), path.is_empty(), "{h}");
            for c in spec.commands {
                let line = h
                    .lines()
                    .find(|l| l.starts_with(&format!("  {:<10}", c.name)))
                    .unwrap_or_else(|| panic!("{}: no line in\n{h}", c.name));
                let first_words: String = c
                    .about
                    .split_whitespace()
                    .take(3)
                    .collect::<Vec<_>>()
                    .join(" ");
                assert!(line.contains(&first_words), "{line}");
            }
            for o in spec.opts {
                assert!(h.contains(&format!("--{}", o.long)), "--{} in\n{h}", o.long);
                if let Some(d) = o.default {
                    assert!(h.contains(&format!("[default: {d}]")), "{h}");
                }
                for (c, _) in o.choices {
                    assert!(h.contains(&format!("- {c}: ")), "{h}");
                }
            }
            for a in spec.args {
                let shown = if a.many {
                    format!("  [{}]...\n", a.name)
                } else {
                    format!("  <{}>\n", a.name)
                };
                assert!(h.contains(&shown), "{h}");
            }
        }
        let h = help(&["check", "-h"]);
        for want in [
            "Usage: npu-agent check [OPTIONS]\n",
            "  -v, --verbose\n          Text format: also show evidence of passing checks.\n",
            "      --format <FORMAT>\n          Output format. [default: text]\n",
            "          - prometheus: Prometheus text exposition format",
            "      --llm-cmdline <CMDLINE>\n",
        ] {
            assert!(h.contains(want), "{want:?} in\n{h}");
        }
        // No line of any help is wider than the wrap width, but for one unbreakable word.
        let top = help(&["--help"]);
        assert!(top.starts_with(env!("CARGO_PKG_DESCRIPTION").split(':').next().unwrap()));
        assert!(top.lines().all(|l| l.chars().count() <= 100), "{top}");
        // A short-flag cluster reaching -h is help too.
        assert_eq!(help(&["check", "-vh"]), h);
    }
}
