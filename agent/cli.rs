//! The command line (README "Commands"). `main.rs` only calls [`run`].
//!
//! The commands and their options are declared as [`args::Spec`]s (the `fleet` and `run` ones in
//! [`crate::cli_ops`]); [`Cli::try_parse_from`] reads them into a [`Command`].

pub mod args;

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
        ["run"] => Command::Run(crate::cli_ops::RunArgs::from_matches(m)),
        ["fleet", _] => Command::Fleet {
            action: crate::cli_ops::FleetAction::from_matches(m)?,
        },
        ["capture"] => Command::Capture(CaptureArgs {
            out: m.path("out").unwrap_or_default(),
            root: root(m),
            profile: profile_arg(m)?,
            no_redact: m.flag("no-redact"),
            force: m.flag("force"),
        }),
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
        &crate::cli_ops::RUN,
        &crate::cli_ops::FLEET,
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

static CHECK: Spec = Spec {
    name: "check",
    about: "Diagnose this machine, or a captured board tree under --root.",
    opts: &[
        ROOT_READ,
        PROFILE,
        Opt::text("format", "FORMAT", "Output format.")
            .default("text")
            .choices(FORMATS),
        Opt::text(
            "fail-on",
            "FAIL_ON",
            "Exit 1 when a finding is at or above this status.",
        )
        .default("fail")
        .choices(FAIL_ONS),
        Opt::flag(
            "verbose",
            "Text format: also show evidence of passing checks.",
        )
        .short('v'),
        Opt::text(
            "llm-cmdline",
            "CMDLINE",
            "A llama.cpp / ik_llama.cpp command line to check as if it were running (its -m \
             model, -ot rules, -ngl, -c, -ctk/-ctv, -fa, -mla), e.g. \"llama-server -m \
             /models/r1.gguf -ngl 99 -ot 'exps=CPU'\"; -m resolves under --root.",
        )
        .hyphen_values(),
    ],
    args: &[],
    commands: &[],
    one_of: None,
};

const PROFILES_ROOT: Opt =
    Opt::path("root", "DIR", "Read /etc/npu-agent/profiles.d under DIR.").default("/");

static PROFILES: Spec = Spec {
    name: "profiles",
    about: "List or show the board profiles (built in and in /etc/npu-agent/profiles.d).",
    opts: &[],
    args: &[],
    commands: &[
        &Spec {
            name: "list",
            about: "One line per profile: id, name, where it comes from.",
            opts: &[PROFILES_ROOT],
            args: &[],
            commands: &[],
            one_of: None,
        },
        &Spec {
            name: "show",
            about: "A profile's TOML text, as loaded.",
            opts: &[PROFILES_ROOT],
            args: &[Pos {
                name: "ID",
                help: "Profile id.",
            }],
            commands: &[],
            one_of: None,
        },
    ],
    one_of: None,
};

static COMPACT: Spec = Spec {
    name: "compact",
    about: "Compact memory now (sync, optionally drop the page cache, compact_memory=1) and show \
            CmaFree, MemFree, buddyinfo and compaction counters before and after. Passes the gate \
            ([actions] disabled in the config under --root). Exit 0 done, 1 refused or failed, 2 \
            usage or config error.",
    opts: &[
        Opt::path(
            "root",
            "DIR",
            "Write every file under DIR instead of / (a captured or test tree).",
        )
        .default("/"),
        Opt::flag(
            "drop-caches",
            "Also write 1 to /proc/sys/vm/drop_caches (page cache only) before compacting.",
        ),
        Opt::flag(
            "dry-run",
            "Show the current figures and what would be done; write nothing.",
        ),
    ],
    args: &[],
    commands: &[],
    one_of: None,
};

static CMA: Spec = Spec {
    name: "cma",
    about: "The boot-time CMA pool (cma=): as configured, as booted and as in effect; or edit it.",
    opts: &[],
    args: &[],
    commands: &[
        &Spec {
            name: "show",
            about: "The cma= in the boot file, on /proc/cmdline, the pool in effect (CmaTotal), \
                    and the verdict: not set, pending reboot, overridden, in effect. Exit 0; 2 usage \
                    error (a --root that is not a directory, a --profile that names no profile).",
            opts: &[
                Opt::path("root", "DIR", "Read every file under DIR instead of /.").default("/"),
                PROFILE,
            ],
            args: &[],
            commands: &[],
            one_of: None,
        },
        &Spec {
            name: "set",
            about: "Set the boot-time CMA size in the boot file the profile names (on a Pi 5: the \
                    cma overlay in config.txt). Backup, atomic write, re-read; a reboot applies \
                    it. Passes the gate ([actions] disabled in the config under --root). Exit 0 \
                    done or nothing to do, 1 refused or failed, 2 usage or config error.",
            opts: &[
                Opt::path("root", "DIR", "Edit files under DIR instead of /.").default("/"),
                PROFILE,
                Opt::flag("dry-run", "Print the diff; write nothing."),
            ],
            args: &[Pos {
                name: "SIZE",
                help: "Size as the kernel reads cma=: decimal or 0x hex with an optional K, M, \
                       G, T, P or E suffix (256M); at least 4 MiB and the profile minimum, at \
                       most 25% of RAM; 0 (no pool) where the profile has no minimum.",
            }],
            commands: &[],
            one_of: None,
        },
    ],
    one_of: None,
};

static CAPTURE: Spec = Spec {
    name: "capture",
    about: "Write a support bundle (.tar.gz): every file the checks read, the kernel log and the \
            workloads' journal as files, page size, uname and a manifest; redacted unless \
            --no-redact. `check --root` on the unpacked bundle gives the same verdicts. Never \
            overwrites FILE unless --force. Exit 0 written, 1 could not write, 2 usage error \
            (such as a --root that is not a directory, a --profile that names no profile, or \
            FILE exists).",
    opts: &[
        Opt::path(
            "out",
            "FILE.tar.gz",
            "The bundle to write (a .tar.gz; written to a temporary file, then renamed).",
        )
        .required(),
        Opt::path(
            "root",
            "DIR",
            "Capture the board tree under DIR instead of this machine.",
        )
        .default("/"),
        Opt::text(
            "profile",
            "ID|FILE",
            "Board profile: auto, an id, or a profile file.",
        )
        .default("auto"),
        Opt::flag(
            "no-redact",
            "Keep host names, user names, serials, addresses and credentials as they are.",
        ),
        Opt::flag(
            "force",
            "Replace FILE if it exists (without it, an existing FILE is refused with exit 2).",
        ),
    ],
    args: &[],
    commands: &[],
    one_of: None,
};

static KEYGEN: Spec = Spec {
    name: "keygen",
    about: "Write an Ed25519 key pair for signing commands: FILE (private, mode 0600) and \
            FILE.pub.",
    opts: &[Opt::path("out", "FILE", "Where to write the private key.").required()],
    args: &[],
    commands: &[],
    one_of: None,
};

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
    /// The daemon: periodic checks, MQTT status, remote commands.
    Run(crate::cli_ops::RunArgs),
    /// Operator side: watch the fleet's status, or send a command to one board or all.
    Fleet {
        /// watch or send.
        action: crate::cli_ops::FleetAction,
    },
    /// Write a support bundle (see `npu-agent capture --help`).
    Capture(CaptureArgs),
    /// Write an Ed25519 key pair for signing commands: FILE (private, mode 0600) and FILE.pub.
    Keygen {
        /// Where to write the private key.
        out: PathBuf,
    },
}

/// `capture` options (see [`CAPTURE`] for each one's meaning).
#[derive(Debug)]
pub struct CaptureArgs {
    /// The bundle to write (a .tar.gz; written to a temporary file, then renamed).
    pub out: PathBuf,
    /// Capture the board tree under this directory instead of this machine.
    pub root: PathBuf,
    /// Board profile: auto, an id, or a profile file.
    pub profile: String,
    /// Keep host names, user names, serials, addresses and credentials as they are.
    pub no_redact: bool,
    /// Replace `out` if it exists.
    pub force: bool,
}

/// `compact` options.
#[derive(Debug)]
pub struct CompactArgs {
    /// Write every file under this directory instead of / (a captured or test tree).
    pub root: PathBuf,
    /// Also write 1 to /proc/sys/vm/drop_caches (page cache only) before compacting.
    pub drop_caches: bool,
    /// Show the current figures and what would be done; write nothing.
    pub dry_run: bool,
}

/// `cma` actions.
#[derive(Debug)]
pub enum CmaAction {
    /// The cma= in the boot file, on /proc/cmdline, the pool in effect (CmaTotal), and the
    /// verdict.
    Show {
        /// Read every file under this directory instead of /.
        root: PathBuf,
        /// Profile id, profile file, or auto.
        profile: String,
    },
    /// Set the boot-time CMA size in the boot file the profile names.
    Set {
        /// Size as the kernel reads cma= (256M).
        size: String,
        /// Edit files under this directory instead of /.
        root: PathBuf,
        /// Profile id, profile file, or auto.
        profile: String,
        /// Print the diff; write nothing.
        dry_run: bool,
    },
}

/// Output format of `check` (`--format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// A table for people.
    Text,
    /// The report object (the same JSON the MQTT status carries).
    Json,
    /// Prometheus text exposition format (metrics and one gauge per check), for
    /// node_exporter's textfile collector.
    Prometheus,
}

/// `--format` values of `check`, with their help.
const FORMATS: &[(&str, &str)] = &[
    ("text", "A table for people."),
    (
        "json",
        "The report object (the same JSON the MQTT status carries).",
    ),
    (
        "prometheus",
        "Prometheus text exposition format (metrics and one gauge per check), for \
         node_exporter's textfile collector.",
    ),
];

/// Lowest status that makes `check` exit 1 (`--fail-on`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailOn {
    /// warn, error or fail.
    Warn,
    /// fail only.
    Fail,
}

/// `--fail-on` values of `check`, with their help.
const FAIL_ONS: &[(&str, &str)] = &[("warn", "warn, error or fail."), ("fail", "fail only.")];

/// `check` options.
#[derive(Debug)]
pub struct CheckArgs {
    /// Read every file under this directory instead of / (a captured board tree).
    pub root: PathBuf,
    /// Profile id, profile file, or auto.
    pub profile: String,
    /// Output format.
    pub format: Format,
    /// Exit 1 when a finding is at or above this status.
    pub fail_on: FailOn,
    /// Text format: also show evidence of passing checks.
    pub verbose: bool,
    /// A llama.cpp / ik_llama.cpp command line to check as if it were running.
    pub llm_cmdline: Option<String>,
}

impl CheckArgs {
    /// From the parsed `check` arguments (the parser already checked the value lists).
    fn from_matches(m: &Matches) -> Result<CheckArgs, UsageError> {
        Ok(CheckArgs {
            root: root(m),
            profile: profile_arg(m)?,
            format: match m.text("format")?.as_deref() {
                Some("json") => Format::Json,
                Some("prometheus") => Format::Prometheus,
                _ => Format::Text,
            },
            fail_on: match m.text("fail-on")?.as_deref() {
                Some("warn") => FailOn::Warn,
                _ => FailOn::Fail,
            },
            verbose: m.flag("verbose"),
            llm_cmdline: m.text("llm-cmdline")?,
        })
    }
}

/// `profiles` actions.
#[derive(Debug)]
pub enum ProfilesAction {
    /// One line per profile: id, name, where it comes from.
    List {
        /// Read /etc/npu-agent/profiles.d under this directory.
        root: PathBuf,
    },
    /// A profile's TOML text, as loaded (the built-in file or the profiles.d one replacing it).
    Show {
        /// Profile id.
        id: String,
        /// Read /etc/npu-agent/profiles.d under this directory.
        root: PathBuf,
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
    // Board-controlled text never drives the operator's terminal (see crate::term); only
    // `fleet watch` may home the cursor and clear the screen, to redraw its table.
    let mut out = crate::term::TerminalSafe::new(out);
    let mut err = crate::term::TerminalSafe::new(err);
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
                Command::Run(a) => crate::cli_ops::run(a, o, e),
                Command::Fleet { action } => crate::cli_ops::fleet(action, o, e),
                Command::Keygen { out: path } => crate::cli_ops::keygen(&path, o, e),
                Command::Capture(a) => capture(a, o, e),
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
            action: crate::cli_ops::FleetAction::Watch { .. }
        }
    )
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

fn capture(a: CaptureArgs, out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    if let Err(code) = require_root_dir(&a.root, err) {
        return code;
    }
    // As `keygen`: an existing file (or a link) is never replaced without being asked to.
    if !a.force && std::fs::symlink_metadata(&a.out).is_ok() {
        let _ = writeln!(
            err,
            "npu-agent: {}: file exists; pass --force to replace it",
            a.out.display()
        );
        return EXIT_USAGE;
    }
    let root = SysRoot::new(&a.root);
    match crate::capture::capture(
        &root,
        &ProfileChoice::parse(&a.profile),
        &a.out,
        !a.no_redact,
    ) {
        Ok(s) => {
            let m = &s.manifest;
            let _ = writeln!(
                out,
                "wrote {} ({} bytes): {} entries, {} path(s) not captured, profile {}, page size {} bytes, {}",
                a.out.display(),
                s.archive_bytes,
                m.files.len() + 1,
                m.missing.len(),
                crate::report::clean(&m.profile),
                m.page_size_bytes,
                if m.redacted { "redacted" } else { "not redacted" }
            );
            for x in m.missing.iter().take(20) {
                // Board-controlled names: no control characters reach the terminal.
                // The reason often starts with the path itself: say it once.
                let reason = x
                    .reason
                    .strip_prefix(x.path.as_str())
                    .and_then(|r| r.strip_prefix(": "))
                    .unwrap_or(&x.reason);
                let _ = writeln!(
                    out,
                    "  not captured: {}: {}",
                    crate::report::clean(&x.path),
                    crate::report::clean(reason)
                );
            }
            EXIT_OK
        }
        Err(e) => {
            let _ = writeln!(err, "npu-agent: {e}");
            // A --profile that names no profile is the user's mistake, as for `check`.
            match e {
                crate::capture::CaptureError::Profile(_) => EXIT_USAGE,
                crate::capture::CaptureError::Write { .. } => EXIT_FINDINGS,
            }
        }
    }
}

fn compact(a: CompactArgs, out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    use crate::action::compact::{render_compact_text, CompactOutcome};
    use crate::action::executor::{ActionReport, ExecJob};
    if let Err(code) = require_root_dir(&a.root, err) {
        return code;
    }
    let root = SysRoot::new(&a.root);
    let action = crate::mqtt::command::Action::Compact {
        drop_caches: a.drop_caches,
    };
    let now = crate::action::now_unix_s();
    let (mut gate, state) = match admit_cli(&root, &action, BTreeMap::new(), now, err) {
        Ok(g) => g,
        Err(code) => return code,
    };
    let mut job = ExecJob::new(action.clone(), "cli", now);
    job.dry_run = a.dry_run;
    let ActionReport::Compact(report) = cli_executor(&root, &state).execute(job).report else {
        unreachable!("a compaction reports as one")
    };
    let _ = write!(out, "{}", render_compact_text(&report));
    if report.outcome == CompactOutcome::Done {
        record_cli_run(&mut gate, &action, now, err);
    }
    match report.outcome {
        CompactOutcome::Done | CompactOutcome::DryRun => EXIT_OK,
        CompactOutcome::Refused | CompactOutcome::Failed => EXIT_FINDINGS,
    }
}

/// The gate every origin passes, for an action the admin runs here: the config (and its
/// `[actions] disabled`) is read under `root` as the daemon reads it, and the gate decides with
/// the board's refusals (`board_refused`, e.g. the profile's) and the daemon's ledger in the
/// configured state directory. Returns the gate (to record the run) and that state directory.
///
/// Errors: the exit code, after the reason went to `err`: [`EXIT_USAGE`] for a config error,
/// [`EXIT_FINDINGS`] when the gate refuses.
fn admit_cli(
    root: &SysRoot,
    action: &crate::mqtt::command::Action,
    board_refused: BTreeMap<String, String>,
    now: i64,
    err: &mut dyn Write,
) -> Result<(crate::action::gate::Gate, crate::action::state::StateDir), i32> {
    use crate::action::gate::{Gate, Origin};
    let s = match crate::config::Settings::load(root, None, &agent_env()) {
        Ok((s, _)) => s,
        Err(e) => {
            let _ = writeln!(err, "npu-agent: {e}");
            return Err(EXIT_USAGE);
        }
    };
    let state = crate::action::state::StateDir::new(root, &s.cfg.state_dir);
    let mut gate = Gate::new(s.policy, Some(state.clone()), s.actions.compact_cooldown_s);
    gate.set_limits(s.limits);
    gate.set_refused(board_refused);
    match gate.admit_local(Origin::Cli, action.clone(), now) {
        Ok(()) => Ok((gate, state)),
        Err(why) => {
            let _ = writeln!(err, "npu-agent: refused: {why}");
            Err(EXIT_FINDINGS)
        }
    }
}

/// The executor for an action the admin runs here, under `root`, recording in `state`.
fn cli_executor(
    root: &SysRoot,
    state: &crate::action::state::StateDir,
) -> crate::action::executor::Executor {
    crate::action::executor::Executor::new(
        root.clone(),
        state.clone(),
        crate::action::ActionConfig::default(),
        ProfileChoice::parse("auto"),
    )
}

/// The `NPU_AGENT_*` environment variables (config overrides).
fn agent_env() -> Vec<(String, String)> {
    std::env::vars()
        .filter(|(k, _)| k.starts_with("NPU_AGENT_"))
        .collect()
}

/// Records in the ledger that `action` ran from the command line; a failure is said, not fatal
/// (the action already ran).
fn record_cli_run(
    gate: &mut crate::action::gate::Gate,
    action: &crate::mqtt::command::Action,
    now: i64,
    err: &mut dyn Write,
) {
    if let Err(e) = gate.record_local(action, now) {
        let _ = writeln!(err, "npu-agent: the run was not recorded: {e}");
    }
}

fn cma(action: CmaAction, out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    use crate::action::cma::{cma_show, render_cma_set, render_cma_show};
    let (root_dir, profile_arg) = match &action {
        CmaAction::Show { root, profile } | CmaAction::Set { root, profile, .. } => {
            (root.clone(), profile.clone())
        }
    };
    if let Err(code) = require_root_dir(&root_dir, err) {
        return code;
    }
    let root = SysRoot::new(&root_dir);
    let d = match diagnose(&root, &ProfileChoice::parse(&profile_arg)) {
        Ok(d) => d,
        Err(e) => {
            let _ = writeln!(err, "npu-agent: {e}");
            return EXIT_USAGE;
        }
    };
    match action {
        CmaAction::Show { .. } => {
            // The state directory `cma set` records its edits in: the config's (under the root).
            let state = match crate::config::load(&root, None, &agent_env()) {
                Ok((c, _)) => crate::action::state::StateDir::new(&root, &c.state_dir),
                Err(e) => {
                    let _ = writeln!(
                        err,
                        "npu-agent: {e}; the last edit is looked up in {}",
                        crate::action::state::DEFAULT_STATE_DIR
                    );
                    crate::action::state::StateDir::default_for(&root)
                }
            };
            let _ = write!(
                out,
                "{}",
                render_cma_show(&cma_show(&d, &state), &hint_args(&root_dir, &profile_arg))
            );
            EXIT_OK
        }
        CmaAction::Set { size, dry_run, .. } => {
            // A SIZE that is no size at all is the user's typo (exit 2 on stderr), not a refusal
            // by the board or the gate (exit 1): nothing is asked of the gate for it.
            if let Err(
                e @ (crate::action::bootedit::SizeError::Syntax(_)
                | crate::action::bootedit::SizeError::Octal { .. }),
            ) = crate::action::bootedit::parse_cma_size(&size)
            {
                let _ = writeln!(
                    err,
                    "npu-agent: cma set: {}",
                    crate::report::clean(&e.to_string())
                );
                return EXIT_USAGE;
            }
            let gate_action = crate::mqtt::command::Action::SetCma { size: size.clone() };
            let board_refused = d
                .profile
                .refuses_action(gate_action.name())
                .map(|why| (gate_action.name().to_string(), why))
                .into_iter()
                .collect();
            let now = crate::action::now_unix_s();
            let (mut gate, state) = match admit_cli(&root, &gate_action, board_refused, now, err) {
                Ok(g) => g,
                Err(code) => return code,
            };
            let mut job = crate::action::executor::ExecJob::new(gate_action.clone(), "cli", now);
            (job.dry_run, job.diagnosis) = (dry_run, Some(std::sync::Arc::new(d)));
            let crate::action::executor::ActionReport::CmaSet(r) =
                cli_executor(&root, &state).execute(job).report
            else {
                unreachable!("a boot-file edit reports as one")
            };
            let _ = write!(
                out,
                "{}",
                render_cma_set(&r, &hint_args(&root_dir, &profile_arg))
            );
            if r.outcome == crate::action::cma::CmaSetOutcome::Written {
                record_cli_run(&mut gate, &gate_action, now, err);
            }
            r.outcome.exit_code()
        }
    }
}

/// The `--root` and `--profile` the user gave, as a hint repeats them after a subcommand
/// (` --root DIR --profile ID`; nothing for the defaults `/` and `auto`), quoted for a POSIX
/// shell when needed.
fn hint_args(root: &std::path::Path, profile: &str) -> String {
    fn quoted(s: &str) -> String {
        let plain = !s.is_empty()
            && s.chars()
                .all(|c| c.is_ascii_alphanumeric() || "/._-+:=,@%".contains(c));
        if plain {
            s.to_string()
        } else {
            format!("'{}'", s.replace('\'', "'\\''"))
        }
    }
    let mut args = String::new();
    if root != std::path::Path::new("/") {
        args.push_str(&format!(" --root {}", quoted(&root.to_string_lossy())));
    }
    if profile != "auto" {
        args.push_str(&format!(" --profile {}", quoted(profile)));
    }
    // Board-controlled or user text never carries control characters to the terminal.
    crate::report::clean(&args)
}

fn check(a: CheckArgs, out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    if let Err(code) = require_root_dir(&a.root, err) {
        return code;
    }
    let root = SysRoot::new(&a.root);
    let opts = crate::diagnose::DiagnoseOptions {
        llm_cmdline: a.llm_cmdline.clone(),
        ..Default::default()
    };
    let d = match crate::diagnose::diagnose_with(&root, &ProfileChoice::parse(&a.profile), &opts) {
        Ok(d) => d,
        Err(e) => {
            let _ = writeln!(err, "npu-agent: {e}");
            return match e {
                DiagnoseError::Profile(_)
                | DiagnoseError::UnknownProfile { .. }
                | DiagnoseError::ProfileFile { .. } => EXIT_USAGE,
            };
        }
    };
    let r = &d.report;
    match a.format {
        Format::Json => match serde_json::to_string_pretty(r) {
            Ok(s) => {
                let _ = writeln!(out, "{s}");
            }
            Err(e) => {
                let _ = writeln!(err, "npu-agent: cannot encode the report: {e}");
                return EXIT_USAGE;
            }
        },
        Format::Prometheus => {
            let _ = write!(out, "{}", crate::prometheus::render(r));
        }
        Format::Text => {
            // no-color.org: NO_COLOR turns colour off when set to a non-empty value.
            let color = std::io::stdout().is_terminal()
                && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
            let _ = write!(
                out,
                "{}",
                render_text(
                    r,
                    Style {
                        color,
                        verbose: a.verbose
                    }
                )
            );
        }
    }
    let worst = r.worst();
    let threshold = match a.fail_on {
        FailOn::Fail => 4,
        FailOn::Warn => 2,
    };
    if worst.severity() >= threshold {
        EXIT_FINDINGS
    } else {
        EXIT_OK
    }
}

fn profiles(action: ProfilesAction, out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    let root_dir = match &action {
        ProfilesAction::List { root } | ProfilesAction::Show { root, .. } => root.clone(),
    };
    if let Err(code) = require_root_dir(&root_dir, err) {
        return code;
    }
    let root = SysRoot::new(&root_dir);
    let (all, errors) = profile::load_all_with_text(&root);
    for e in &errors {
        let _ = writeln!(err, "npu-agent: {e}");
    }
    match action {
        ProfilesAction::List { .. } => {
            for (p, _) in &all {
                let source = if profile::BUILTIN
                    .iter()
                    .any(|(n, _)| *n == format!("{}.toml", p.id))
                    && !root.exists(&format!("{}/{}.toml", profile::PROFILES_DIR, p.id))
                {
                    "built-in".to_string()
                } else {
                    profile::PROFILES_DIR.to_string()
                };
                let _ = writeln!(out, "{:<16} {:<48} {}", p.id, p.name, source);
            }
            if errors.is_empty() {
                EXIT_OK
            } else {
                EXIT_USAGE
            }
        }
        // The profile's TOML text as loaded (comments kept), not a re-serialisation of it.
        ProfilesAction::Show { id, .. } => match all.iter().find(|(p, _)| p.id == id) {
            Some((_, text)) => {
                let newline = if text.ends_with('\n') { "" } else { "\n" };
                let _ = write!(out, "{text}{newline}");
                EXIT_OK
            }
            None => {
                let _ = writeln!(
                    err,
                    "npu-agent: no profile with id {id:?} (available: {})",
                    all.iter()
                        .map(|(p, _)| p.id.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                );
                EXIT_USAGE
            }
        },
    }
}

#[cfg(test)]
mod tests {
    use super::hint_args;
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
                    crate::cli_ops::FleetAction::Watch {
                        broker,
                        topic_root,
                        once,
                        format,
                    },
            } => {
                assert_eq!(
                    (broker.as_str(), topic_root.as_str()),
                    ("mqtt://h", "npu-fleet")
                );
                assert!(once);
                assert_eq!(format, crate::cli_ops::WatchFormat::Json);
            }
            other => panic!("{other:?}"),
        }
    }

    fn send(args: &[&str]) -> (Option<String>, bool, Vec<String>, u64, String) {
        match ok(args) {
            Command::Fleet {
                action:
                    crate::cli_ops::FleetAction::Send {
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

    #[test]
    fn help_at_every_level_lists_what_the_command_takes() {
        let all = all_specs();
        assert_eq!(all.len(), 1 + 8 + 2 + 2 + 2, "commands in the tree");
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
                assert!(h.contains(&format!("  <{}>\n", a.name)), "{h}");
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
