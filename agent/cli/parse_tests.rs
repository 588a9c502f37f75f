//! The clap definitions against the real command tree: defaults, both value forms, every kind
//! of usage error (exit 2 on stderr), help at each level (exit 0 on stdout), the
//! `--board`/`--all` pair, values that start with `-`, and non-UTF-8 arguments.

use super::*;
use clap::error::ErrorKind;
use clap::CommandFactory;
use std::os::unix::ffi::OsStringExt;

fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
    Cli::try_parse_from(std::iter::once("npu-agent").chain(args.iter().copied()))
}

fn ok(args: &[&str]) -> Command {
    match parse(args) {
        Ok(c) => c.command,
        Err(e) => panic!("{args:?}: {e}"),
    }
}

/// The usage error `args` give: its kind and its rendered text, which goes to stderr.
fn usage_error(args: &[&str]) -> (ErrorKind, String) {
    match parse(args) {
        Err(e) if e.use_stderr() => {
            assert_eq!(e.exit_code(), EXIT_USAGE, "{args:?}");
            (e.kind(), e.render().to_string())
        }
        Err(e) => panic!("{args:?}: not a usage error: {e}"),
        Ok(c) => panic!("{args:?}: parsed: {:?}", c.command),
    }
}

/// The help `args` ask for, which goes to stdout with exit 0.
fn help(args: &[&str]) -> String {
    match parse(args) {
        Err(e) if !e.use_stderr() && e.kind() == ErrorKind::DisplayHelp => {
            assert_eq!(e.exit_code(), EXIT_OK);
            e.render().to_string()
        }
        Err(e) => panic!("{args:?}: no help: {e}"),
        Ok(c) => panic!("{args:?}: parsed: {:?}", c.command),
    }
}

fn check_args(args: &[&str]) -> CheckArgs {
    match ok(args) {
        Command::Check(a) => a,
        other => panic!("{other:?}"),
    }
}

#[test]
fn the_clap_definitions_are_consistent() {
    Cli::command().debug_assert();
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
    let spaced = [
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
    ];
    let attached = [
        "check",
        "--root=/tmp/b",
        "--profile=rk3588-rknpu",
        "--format=json",
        "--fail-on=warn",
        "--verbose",
    ];
    for args in [&spaced[..], &attached[..]] {
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
fn profiles_compact_and_cma_build_with_their_options() {
    match ok(&["profiles", "show", "rk3588-rknpu", "--root", "/r"]) {
        Command::Profiles {
            action: ProfilesAction::Show { id, root, .. },
        } => assert_eq!((id.as_str(), root), ("rk3588-rknpu", PathBuf::from("/r"))),
        other => panic!("{other:?}"),
    }
    match ok(&["profiles", "list"]) {
        Command::Profiles {
            action: ProfilesAction::List { root, .. },
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
                    ..
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
            action: CmaAction::Show { root, profile, .. },
        } => assert_eq!((root, profile.as_str()), (PathBuf::from("/r"), "auto")),
        other => panic!("{other:?}"),
    }
}

#[test]
fn run_capture_keygen_fix_and_watch_build_with_their_options() {
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
        Command::Keygen { out, .. } => assert_eq!(out, PathBuf::from("k")),
        other => panic!("{other:?}"),
    }
    match ok(&["fix", "npu.device", "cma.pool", "--dry-run", "--root=/r"]) {
        Command::Fix(a) => {
            assert_eq!(a.checks, ["npu.device", "cma.pool"]);
            assert!(a.dry_run && !a.yes && !a.json && !a.terminal);
            assert_eq!((a.root, a.profile.as_str()), (PathBuf::from("/r"), "auto"));
        }
        other => panic!("{other:?}"),
    }
    match fleet(&[
        "watch", "--broker", "mqtt://h", "--once", "--format", "json",
    ]) {
        FleetAction::Watch {
            flags,
            once,
            format,
            accept_new_boards,
            max_rows,
        } => {
            assert_eq!((accept_new_boards, max_rows), (20, 20000));
            let op = resolved(flags);
            assert_eq!(
                (op.broker.as_str(), op.topic_root.as_str()),
                ("mqtt://h", "npu-fleet")
            );
            assert!(once);
            assert_eq!(format, WatchFormat::Json);
        }
        other => panic!("{other:?}"),
    }
}

/// The settings `flags` resolve to without an operator config file or variables.
fn resolved(flags: crate::fleet::operator::OperatorFlags) -> crate::fleet::operator::Operator {
    crate::fleet::operator::Operator::resolve_with(flags, &|_| None).expect("resolves")
}

/// `npu-agent fleet ARGS...` as the action it runs.
fn fleet(args: &[&str]) -> FleetAction {
    match ok(&[&["fleet"][..], args].concat()) {
        Command::Fleet { action } => action.into_action().expect("a usable action"),
        other => panic!("{other:?}"),
    }
}

fn send(args: &[&str]) -> (Option<String>, bool, Vec<String>, u64, String) {
    match fleet(args) {
        FleetAction::Send {
            board,
            all,
            args,
            wait,
            flags,
            ..
        } => (board, all, args, wait, resolved(flags).topic_root),
        other => panic!("{other:?}"),
    }
}

#[test]
fn fleet_send_needs_exactly_one_of_board_and_all() {
    let b = ["send", "rescan", "--broker", "mqtt://h"];
    let (board, all, args, wait, root) = send(&[&b[..], &["--board", "b1"]].concat());
    assert_eq!((board.as_deref(), all), (Some("b1"), false));
    assert_eq!((args.len(), wait, root.as_str()), (0, 30, "npu-fleet"));
    let (board, all, ..) = send(&[&b[..], &["--all"]].concat());
    assert_eq!((board, all), (None, true));
    let fb = [&["fleet"][..], &b[..]].concat();
    let (kind, text) = usage_error(&fb);
    assert_eq!(kind, ErrorKind::MissingRequiredArgument);
    assert!(text.contains("<--board <BOARD>|--all>"), "{text}");
    let (kind, text) = usage_error(&[&fb[..], &["--all", "--board", "b1"]].concat());
    assert_eq!(kind, ErrorKind::ArgumentConflict);
    assert!(
        text.contains("the argument '--all' cannot be used with '--board <BOARD>'"),
        "{text}"
    );
    assert!(
        text.contains(
            "Usage: npu-agent fleet send --broker <BROKER> <--board <BOARD>|--all> <ACTION>"
        ),
        "{text}"
    );
    // --arg repeats, in order; --wait is a whole number of seconds.
    let more = [
        "--all",
        "--arg",
        "size=256M",
        "--arg=x=1",
        "--wait",
        "5",
        "--topic-root=t",
    ];
    let (_, _, args, wait, root) = send(&[&b[..], &more[..]].concat());
    assert_eq!(args, ["size=256M", "x=1"]);
    assert_eq!((wait, root.as_str()), (5, "t"));
    let (kind, text) = usage_error(&[&fb[..], &["--all", "--wait", "soon"]].concat());
    assert_eq!(kind, ErrorKind::ValueValidation);
    assert!(
        text.starts_with("error: invalid value 'soon' for '--wait <SECS>'"),
        "{text}"
    );
    // --board-wait over --wait parses, and is refused before anything is sent.
    let over = ["--all", "--wait", "3", "--board-wait", "4"];
    match ok(&[&fb[..], &over[..]].concat()) {
        Command::Fleet { action } => assert_eq!(
            action.into_action().unwrap_err(),
            "--board-wait 4 is over --wait 3: at most --wait seconds"
        ),
        other => panic!("{other:?}"),
    }
}

#[test]
fn fleet_capture_sends_the_capture_action() {
    let args = [
        "capture", "--board", "b1", "--broker", "mqtt://h", "--out", "b.tar.gz",
    ];
    match fleet(&args) {
        FleetAction::Send {
            action,
            args,
            board,
            all,
            wait,
            board_wait,
            out,
            force,
            ..
        } => {
            assert_eq!(
                (action.as_str(), args),
                ("capture", vec!["max_bytes=8388608".into()])
            );
            assert_eq!((board.as_deref(), all), (Some("b1"), false));
            assert_eq!((wait, board_wait), (120, 5));
            assert_eq!((out, force), (Some(PathBuf::from("b.tar.gz")), false));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn each_usage_error_kind() {
    use ErrorKind::*;
    #[rustfmt::skip]
    let cases: &[(&[&str], ErrorKind, &str)] = &[
        (&["check", "--foo"], UnknownArgument, "unexpected argument '--foo' found"),
        (&["check", "-x"], UnknownArgument, "unexpected argument '-x' found"),
        (&["check", "extra"], UnknownArgument, "unexpected argument 'extra' found"),
        (&["cma", "set", "1G", "2G"], UnknownArgument, "unexpected argument '2G' found"),
        (&["check", "-V"], UnknownArgument, "unexpected argument '-V' found"),
        (&["frobnicate"], InvalidSubcommand, "unrecognized subcommand 'frobnicate'"),
        (&["cma", "edit"], InvalidSubcommand, "unrecognized subcommand 'edit'"),
        (&["fleet", "send", "rescan", "--board", "", "--broker", "b"], ValueValidation, "invalid value '' for '--board <BOARD>': a board id is one non-empty topic level, without '/'"),
        (&["fleet", "send", "rescan", "--board", "a/b", "--broker", "b"], ValueValidation, "invalid value 'a/b' for '--board <BOARD>': a board id is one non-empty topic level, without '/'"),
        (&["fleet", "watch", "--broker", "b", "--topic-root", "a/#"], ValueValidation, "invalid value 'a/#' for '--topic-root <TOPIC_ROOT>': an MQTT topic may not hold '+', '#' or NUL here"),
        (&["fleet", "watch", "--broker", "b", "--topic-root=fleet/"], ValueValidation, "invalid value 'fleet/' for '--topic-root <TOPIC_ROOT>': a topic root may not start or end with '/'"),
        (&["fleet", "send", "rescan", "--all", "--broker", "b", "--wait", "86401"], ValueValidation, "invalid value '86401' for '--wait <SECS>': at most 86400 seconds (a day)"),
        (&["fleet", "capture", "--board", "b", "--broker", "b", "--out", "o", "--max-bytes", "0"], ValueValidation, "invalid value '0' for '--max-bytes <BYTES>': a whole number of bytes from 1 to 33554432"),
        (&["chek"], InvalidSubcommand, "unrecognized subcommand 'chek'"),
        (&["fleet", "sned"], InvalidSubcommand, "unrecognized subcommand 'sned'"),
        (&["check", "--rooot", "x"], UnknownArgument, "unexpected argument '--rooot' found"),
        (&["check", "--root"], InvalidValue, "a value is required for '--root <DIR>' but none was supplied"),
        (&["check", "--root", "-d"], UnknownArgument, "unexpected argument '-d' found"),
        (&["check", "--root", "--profile", "x"], InvalidValue, "a value is required for '--root <DIR>' but none was supplied"),
        (&["compact", "--dry-run=yes"], TooManyValues, "unexpected value 'yes' for '--dry-run' found; no more were expected"),
        (&["check", "--format", "yaml"], InvalidValue, "invalid value 'yaml' for '--format <FORMAT>'"),
        (&["check", "--fail-on=info"], InvalidValue, "invalid value 'info' for '--fail-on <FAIL_ON>'"),
        (&["fleet", "watch", "--broker", "b", "--format", "prometheus"], InvalidValue, "invalid value 'prometheus' for '--format <FORMAT>'"),
        (&["keygen"], MissingRequiredArgument, "the following required arguments were not provided:\n  --out <FILE>"),
        (&["cma", "set"], MissingRequiredArgument, "the following required arguments were not provided:\n  <SIZE>"),
        // --broker is not required here: fleet.toml may give it (fleet::operator's tests).
        (&["fleet", "send", "--all"], MissingRequiredArgument, "the following required arguments were not provided:\n  <ACTION>"),
        (&["check", "--root=/a", "--root", "/b"], ArgumentConflict, "the argument '--root <DIR>' cannot be used multiple times"),
        (&["compact", "--dry-run", "--dry-run"], ArgumentConflict, "the argument '--dry-run' cannot be used multiple times"),
    ];
    for (args, kind, message) in cases {
        let (k, text) = usage_error(args);
        assert_eq!(k, *kind, "{args:?}: {text}");
        // Rendered: the error, the usage line, a hint to --help.
        assert!(
            text.starts_with(&format!("error: {message}")),
            "{args:?}: {text}"
        );
        // The usage line where clap gives one: not for a bad or missing value.
        let usage = text.contains("\n\nUsage: npu-agent");
        assert_eq!(
            usage,
            ![ValueValidation, InvalidValue].contains(kind),
            "{text}"
        );
        assert!(
            text.ends_with("\n\nFor more information, try '--help'.\n"),
            "{text}"
        );
    }
    let (_, text) = usage_error(&["check", "--zzzzzz"]);
    assert!(
        text.contains("\nUsage: npu-agent check [OPTIONS]\n"),
        "{text}"
    );
    assert!(!text.contains("tip:"), "{text}");
    let (_, text) = usage_error(&["keygen"]);
    assert!(
        text.contains("\nUsage: npu-agent keygen --out <FILE>\n"),
        "{text}"
    );
    // A mistyped command or option: the closest known one as a tip.
    for (args, tip) in [
        (&["chek"][..], "'check'"),
        (&["fleet", "sned"], "'send'"),
        (&["check", "--rooot", "x"], "'--root'"),
        (&["check", "--format", "jsn"], "'json'"),
    ] {
        let (_, text) = usage_error(args);
        assert!(
            text.contains("tip: a similar") && text.contains(tip),
            "{text}"
        );
    }
}

#[test]
fn a_missing_subcommand_prints_that_level_s_help_as_an_error() {
    for (args, usage) in [
        (&[][..], "Usage: npu-agent <COMMAND>"),
        (&["cma"], "Usage: npu-agent cma <COMMAND>"),
        (&["fleet"], "Usage: npu-agent fleet <COMMAND>"),
        (&["profiles"], "Usage: npu-agent profiles <COMMAND>"),
    ] {
        let (kind, text) = usage_error(args);
        assert_eq!(kind, ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand);
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
    let argv = |words: &[&str]| {
        std::iter::once("npu-agent")
            .chain(words.iter().copied())
            .map(OsString::from)
            .chain([bad.clone()])
            .collect::<Vec<_>>()
    };
    for words in [&["check", "--profile"][..], &[], &["cma", "set"]] {
        match Cli::try_parse_from(argv(words)) {
            Err(e) => {
                assert_eq!(e.exit_code(), EXIT_USAGE, "{words:?}");
                assert!(e.use_stderr());
            }
            Ok(c) => panic!("{words:?}: {:?}", c.command),
        }
    }
    match Cli::try_parse_from(argv(&["check", "--root"])).map(|c| c.command) {
        Ok(Command::Check(a)) => assert_eq!(a.root, PathBuf::from(bad.clone())),
        other => panic!("{other:?}"),
    }
}

#[test]
fn version_at_the_top_only() {
    for flag in ["-V", "--version"] {
        match parse(&[flag]) {
            Err(e) => {
                assert_eq!(e.kind(), ErrorKind::DisplayVersion);
                assert_eq!(e.exit_code(), EXIT_OK);
                assert_eq!(
                    e.render().to_string(),
                    format!("npu-agent {}\n", env!("CARGO_PKG_VERSION"))
                );
            }
            Ok(c) => panic!("{:?}", c.command),
        }
    }
}

/// Every command of the tree, with its path from the top.
fn all_commands() -> Vec<(Vec<String>, clap::Command)> {
    let mut todo = vec![(Vec::new(), Cli::command())];
    let mut all = Vec::new();
    while let Some((path, cmd)) = todo.pop() {
        for c in cmd.get_subcommands() {
            let mut p: Vec<String> = path.clone();
            p.push(c.get_name().to_string());
            todo.push((p, c.clone()));
        }
        all.push((path, cmd));
    }
    all
}

#[test]
fn help_at_every_level_lists_what_the_command_takes() {
    let all = all_commands();
    // `fleet serve` is the fourth fleet subcommand where the feature `serve` is on.
    let fleet = 3 + usize::from(cfg!(feature = "serve"));
    assert_eq!(all.len(), 1 + 9 + 2 + 2 + fleet, "commands in the tree");
    for (path, cmd) in all {
        let path: Vec<&str> = path.iter().map(String::as_str).collect();
        let h = help(&[&path[..], &["--help"]].concat());
        assert_eq!(h, help(&[&["help"][..], &path[..]].concat()), "{path:?}");
        let short = help(&[&path[..], &["-h"]].concat());
        let name = std::iter::once("npu-agent")
            .chain(path.iter().copied())
            .collect::<Vec<_>>()
            .join(" ");
        for h in [&h, &short] {
            assert!(h.contains(&format!("\nUsage: {name}")), "{h}");
            assert!(h.contains("-h, --help"), "{h}");
            assert_eq!(h.contains("-V, --version"), path.is_empty(), "{h}");
            for c in cmd.get_subcommands() {
                let line = format!("  {} ", c.get_name());
                assert!(h.lines().any(|l| l.starts_with(&line)), "{line} in\n{h}");
            }
            for a in cmd.get_arguments() {
                if let Some(long) = a.get_long() {
                    assert!(h.contains(&format!("--{long}")), "--{long} in\n{h}");
                } else if a.is_positional() {
                    let id = a.get_value_names().unwrap_or_default().join(" ");
                    assert!(h.contains(&id), "{id} in\n{h}");
                }
                for d in a.get_default_values() {
                    let d = d.to_string_lossy();
                    assert!(h.contains(&format!("[default: {d}]")), "{d} in\n{h}");
                }
            }
        }
    }
    let h = help(&["check", "--help"]);
    for want in [
        "Usage: npu-agent check [OPTIONS]\n",
        "  -v, --verbose\n          Text format: also show evidence of passing checks\n",
        "      --format <FORMAT>\n          Output format\n",
        "          - prometheus: Prometheus text exposition format",
        "      --llm-cmdline <CMDLINE>\n",
    ] {
        assert!(h.contains(want), "{want:?} in\n{h}");
    }
    assert!(help(&["check", "-h"]).contains("[possible values: text, json, prometheus]"));
    // A short-flag cluster reaching -h is help too.
    assert_eq!(help(&["check", "-vh"]), help(&["check", "-h"]));
}

#[test]
fn fleet_trust_on_first_use_options() {
    let watch = [
        "watch",
        "--broker",
        "mqtt://h",
        "--accept-new-boards",
        "500",
        "--max-rows=0",
    ];
    match fleet(&watch) {
        FleetAction::Watch {
            accept_new_boards,
            max_rows,
            ..
        } => assert_eq!((accept_new_boards, max_rows), (500, 1), "at least one row"),
        other => panic!("{other:?}"),
    }
    let capture = [
        "capture",
        "--board",
        "b",
        "--broker",
        "b",
        "--out",
        "o",
        "--accept-new-key",
    ];
    match fleet(&capture) {
        FleetAction::Send { accept_new_key, .. } => assert!(accept_new_key),
        other => panic!("{other:?}"),
    }
    let (kind, _) = usage_error(&["fleet", "watch", "--broker", "b", "--max-rows", "-1"]);
    assert_eq!(kind, ErrorKind::UnknownArgument);
    let (kind, _) = usage_error(&["fleet", "watch", "--broker", "b", "--max-rows", "x"]);
    assert_eq!(kind, ErrorKind::ValueValidation);
}

#[test]
fn fleet_watch_json_is_format_json() {
    match fleet(&["watch", "--once", "--json"]) {
        FleetAction::Watch { format, once, .. } => {
            assert_eq!((format, once), (WatchFormat::Json, true));
        }
        other => panic!("{other:?}"),
    }
}
