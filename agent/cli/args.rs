//! The argument parser under [`crate::cli`]: each command is a [`Spec`] (its options, positional
//! arguments and subcommands, with the one-line descriptions its `--help` prints), read with
//! `lexopt` (which only splits `argv` into options and values) and checked here: unknown
//! arguments, missing or malformed values, value lists, repeats, the required options and the
//! "exactly one of" pair. The help texts and usage lines are generated from the same specs, so
//! what `--help` lists is what the parser accepts.
//!
//! Rules, as docs/reference.md "Commands" states them: `--flag value` and `--flag=value` are the same;
//! a value that starts with `-` must be attached (`--root=-dir`) unless the option takes any
//! text (`--llm-cmdline`); an option given twice is an error unless it is repeatable
//! (`--arg`); `--` ends the options. Values of path options may be any bytes; other values,
//! command names and positional arguments must be UTF-8.

use std::ffi::OsString;
use std::fmt;
use std::path::PathBuf;

mod suggest;
use suggest::did_you_mean;

/// Width the help texts wrap their descriptions at (columns).
const HELP_WIDTH: usize = 100;
/// Indentation of an option's or argument's description under its name in a help text.
const HELP_INDENT: usize = 10;

/// One `--long` option of a command, as the parser reads it and its help lists it.
#[derive(Debug, Clone, Copy)]
pub struct Opt {
    /// The name without the leading `--` (`drop-caches`).
    pub long: &'static str,
    /// An optional one-letter alias (`-v`).
    pub short: Option<char>,
    /// The value's name in help and errors (`DIR`); `None` for a flag that takes no value.
    pub value_name: Option<&'static str>,
    /// The value used when the option is absent, shown as `[default: …]`.
    pub default: Option<&'static str>,
    /// The only accepted values, each with its description; empty for any value.
    pub choices: &'static [(&'static str, &'static str)],
    /// The command is refused without it.
    pub required: bool,
    /// May be given more than once (every value is kept, in order).
    pub repeatable: bool,
    /// The value may start with `-` when given as the next argument.
    pub hyphen_values: bool,
    /// The one-line description `--help` prints.
    pub help: &'static str,
}

impl Opt {
    /// A flag (`--force`): present or not.
    pub const fn flag(long: &'static str, help: &'static str) -> Opt {
        Opt {
            long,
            short: None,
            value_name: None,
            default: None,
            choices: &[],
            required: false,
            repeatable: false,
            hyphen_values: false,
            help,
        }
    }

    /// An option taking a UTF-8 text value named `value_name` in help (`--profile ID|FILE`).
    pub const fn text(long: &'static str, value_name: &'static str, help: &'static str) -> Opt {
        Opt {
            value_name: Some(value_name),
            ..Opt::flag(long, help)
        }
    }

    /// An option taking a path named `value_name` in help (`--root DIR`): the same as
    /// [`Opt::text`] for the parser; its value is read with [`Matches::path`], which takes any
    /// bytes, where [`Matches::text`] wants UTF-8.
    pub const fn path(long: &'static str, value_name: &'static str, help: &'static str) -> Opt {
        Opt::text(long, value_name, help)
    }

    /// The same option with a one-letter alias.
    pub const fn short(self, c: char) -> Opt {
        Opt {
            short: Some(c),
            ..self
        }
    }

    /// The same option with a default value.
    pub const fn default(self, value: &'static str) -> Opt {
        Opt {
            default: Some(value),
            ..self
        }
    }

    /// The same option accepting only `choices` (value, description).
    pub const fn choices(self, choices: &'static [(&'static str, &'static str)]) -> Opt {
        Opt { choices, ..self }
    }

    /// The same option, required.
    pub const fn required(self) -> Opt {
        Opt {
            required: true,
            ..self
        }
    }

    /// The same option, repeatable.
    pub const fn repeatable(self) -> Opt {
        Opt {
            repeatable: true,
            ..self
        }
    }

    /// The same option, taking a value that may start with `-`.
    pub const fn hyphen_values(self) -> Opt {
        Opt {
            hyphen_values: true,
            ..self
        }
    }

    /// `--root <DIR>` or `--force`, as errors and usage lines name it.
    fn display(&self) -> String {
        match self.value_name {
            Some(v) => format!("--{} <{v}>", self.long),
            None => format!("--{}", self.long),
        }
    }
}

/// A positional argument: required (`SIZE`), or, as the last one, zero or more (`CHECK_ID...`).
#[derive(Debug, Clone, Copy)]
pub struct Pos {
    /// Its name in help and errors.
    pub name: &'static str,
    /// The one-line description `--help` prints.
    pub help: &'static str,
    /// Takes every remaining value, none included (only the last positional may).
    pub many: bool,
}

/// A command or subcommand: what it accepts and what its help says.
#[derive(Debug)]
pub struct Spec {
    /// The word that selects it (`set`); the program name for the top level.
    pub name: &'static str,
    /// What it does: the first sentence is its line in the parent's command list, the whole
    /// text heads its own help.
    pub about: &'static str,
    /// Its options (`-h/--help` is implied, and `-V/--version` at the top level).
    pub opts: &'static [Opt],
    /// Its positional arguments, all required, in order.
    pub args: &'static [Pos],
    /// Its subcommands; when not empty, one of them is required (and `help` is implied).
    pub commands: &'static [&'static Spec],
    /// Two options (long names) of which exactly one must be given.
    pub one_of: Option<[&'static str; 2]>,
}

impl Spec {
    /// Whether a positional value after `given` others is taken (a `many` last one takes all).
    fn takes_positional(&self, given: usize) -> bool {
        given < self.args.len() || self.args.last().is_some_and(|a| a.many)
    }

    /// The required positionals missing after `given` were read, as `<NAME>`.
    fn missing_args(&self, given: usize) -> impl Iterator<Item = String> + '_ {
        self.args[given.min(self.args.len())..]
            .iter()
            .filter(|a| !a.many)
            .map(|a| format!("<{}>", a.name))
    }
}

/// Why the arguments were refused (each is a usage error, exit code 2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// An option the command does not have, or a positional argument too many.
    UnexpectedArgument,
    /// A subcommand name that does not exist.
    UnknownCommand,
    /// A command that needs a subcommand got none.
    MissingCommand,
    /// An option that needs a value got none (or only the next option).
    MissingValue,
    /// A flag got a value (`--force=yes`).
    UnexpectedValue,
    /// A value outside the option's choices or not of its type.
    InvalidValue,
    /// A required option or positional argument is missing.
    MissingRequired,
    /// An option given twice, or both of an "exactly one of" pair.
    Conflict,
    /// An argument that is not valid UTF-8 where text is needed.
    NotUtf8,
}

/// A usage error: its kind, a one-line message, and the usage line of the command it is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UsageError {
    /// What went wrong.
    pub kind: ErrorKind,
    /// One line, without the `error: ` prefix.
    pub message: String,
    /// The command's usage line (`npu-agent check [OPTIONS]`).
    pub usage: String,
    /// For [`ErrorKind::MissingCommand`]: the command's whole help, printed instead.
    pub help: Option<String>,
}

impl fmt::Display for UsageError {
    /// `error: MESSAGE`, a blank line, `Usage: …`, and a hint to `--help`; for a missing
    /// subcommand the command's help instead (as clap printed).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(h) = &self.help {
            return f.write_str(h);
        }
        write!(
            f,
            "error: {}\n\nUsage: {}\n\nFor more information, try '--help'.\n",
            self.message, self.usage
        )
    }
}

/// What parsing gave: a command to run, or a text for standard output and exit code 0.
#[derive(Debug)]
pub enum Parsed {
    /// A command with its arguments.
    Run(Matches),
    /// `-h`, `--help` or `help [COMMAND]…`: that command's help text.
    Help(String),
    /// `-V` or `--version`: `npu-agent VERSION` and a newline.
    Version(String),
}

/// The arguments of the command that was selected.
#[derive(Debug)]
pub struct Matches {
    /// The subcommand names from the top (`["cma", "set"]`).
    pub commands: Vec<&'static str>,
    spec: &'static Spec,
    usage: String,
    /// Per option of `spec.opts` (same index): its values in order (an empty value for a flag).
    values: Vec<Vec<OsString>>,
    positionals: Vec<OsString>,
}

impl Matches {
    fn index(&self, long: &str) -> Option<usize> {
        let i = self.spec.opts.iter().position(|o| o.long == long);
        debug_assert!(i.is_some(), "no option --{long} in {}", self.spec.name);
        i
    }

    /// A usage error about this command (for a value the caller checks itself).
    pub fn error(&self, kind: ErrorKind, message: String) -> UsageError {
        UsageError {
            kind,
            message,
            usage: self.usage.clone(),
            help: None,
        }
    }

    /// Whether the flag `--long` was given.
    pub fn flag(&self, long: &str) -> bool {
        self.index(long).is_some_and(|i| !self.values[i].is_empty())
    }

    /// The raw value of `--long`: the last one given, else its default.
    fn raw(&self, long: &str) -> Option<(OsString, &'static Opt)> {
        let i = self.index(long)?;
        let opt = &self.spec.opts[i];
        match self.values[i].last() {
            Some(v) => Some((v.clone(), opt)),
            None => opt.default.map(|d| (OsString::from(d), opt)),
        }
    }

    /// The text value of `--long` (its default when absent; `None` without one).
    ///
    /// Errors: [`ErrorKind::NotUtf8`].
    pub fn text(&self, long: &str) -> Result<Option<String>, UsageError> {
        match self.raw(long) {
            None => Ok(None),
            Some((v, opt)) => utf8(v, &opt.display(), &self.usage).map(Some),
        }
    }

    /// Every value of the repeatable `--long`, in order.
    ///
    /// Errors: [`ErrorKind::NotUtf8`].
    pub fn texts(&self, long: &str) -> Result<Vec<String>, UsageError> {
        let Some(i) = self.index(long) else {
            return Ok(Vec::new());
        };
        let name = self.spec.opts[i].display();
        self.values[i]
            .iter()
            .map(|v| utf8(v.clone(), &name, &self.usage))
            .collect()
    }

    /// The path value of `--long` (its default when absent; `None` without one).
    pub fn path(&self, long: &str) -> Option<PathBuf> {
        self.raw(long).map(|(v, _)| PathBuf::from(v))
    }

    /// The positional arguments from `index` on (a `many` positional's values).
    ///
    /// Errors: [`ErrorKind::NotUtf8`].
    pub fn positionals_from(&self, index: usize) -> Result<Vec<String>, UsageError> {
        let name = self.spec.args.get(index).map_or("ARG", |p| p.name);
        self.positionals
            .iter()
            .skip(index)
            .map(|v| utf8(v.clone(), &format!("[{name}]"), &self.usage))
            .collect()
    }

    /// The positional argument at `index` (present: the parser required it).
    ///
    /// Errors: [`ErrorKind::NotUtf8`].
    pub fn positional(&self, index: usize) -> Result<String, UsageError> {
        let name = self.spec.args.get(index).map_or("ARG", |p| p.name);
        let v = self.positionals.get(index).cloned().unwrap_or_default();
        utf8(v, &format!("<{name}>"), &self.usage)
    }
}

/// `v` as UTF-8, or a [`ErrorKind::NotUtf8`] error naming the argument `what`.
fn utf8(v: OsString, what: &str, usage: &str) -> Result<String, UsageError> {
    v.into_string().map_err(|_| UsageError {
        kind: ErrorKind::NotUtf8,
        message: format!("invalid UTF-8 in the value of '{what}'"),
        usage: usage.to_string(),
        help: None,
    })
}

/// Parses `args` (without the program name) against the command tree under `top`.
///
/// Errors: a [`UsageError`] for anything the specs do not accept (see [`ErrorKind`]).
pub fn parse(top: &'static Spec, args: Vec<OsString>) -> Result<Parsed, UsageError> {
    let mut p = lexopt::Parser::from_args(args);
    let mut spec = top;
    let mut path: Vec<&'static str> = Vec::new();
    let mut values: Vec<Vec<OsString>> = vec![Vec::new(); spec.opts.len()];
    let mut positionals: Vec<OsString> = Vec::new();
    let err = |spec: &'static Spec, path: &[&'static str], kind, message| UsageError {
        kind,
        message,
        usage: usage_line(top, spec, path),
        help: None,
    };
    loop {
        let arg = match p.next() {
            Ok(Some(a)) => a,
            Ok(None) => break,
            Err(lexopt::Error::UnexpectedValue { option, value }) => {
                return Err(err(
                    spec,
                    &path,
                    ErrorKind::UnexpectedValue,
                    format!(
                        "unexpected value '{}' for '{option}' found; no more were expected",
                        value.to_string_lossy()
                    ),
                ));
            }
            Err(e) => {
                return Err(err(
                    spec,
                    &path,
                    ErrorKind::UnexpectedArgument,
                    e.to_string(),
                ))
            }
        };
        let (index, shown) = match arg {
            lexopt::Arg::Long("help") | lexopt::Arg::Short('h') => {
                return Ok(Parsed::Help(help_text(top, spec, &path)));
            }
            lexopt::Arg::Long("version") | lexopt::Arg::Short('V') if path.is_empty() => {
                return Ok(Parsed::Version(format!(
                    "{} {}\n",
                    top.name,
                    env!("CARGO_PKG_VERSION")
                )));
            }
            lexopt::Arg::Long(name) => {
                let shown = format!("--{name}");
                (spec.opts.iter().position(|o| o.long == name), shown)
            }
            lexopt::Arg::Short(c) => {
                let shown = format!("-{c}");
                (spec.opts.iter().position(|o| o.short == Some(c)), shown)
            }
            lexopt::Arg::Value(v) => {
                if spec.commands.is_empty() {
                    if spec.takes_positional(positionals.len()) {
                        positionals.push(v);
                        continue;
                    }
                    return Err(err(
                        spec,
                        &path,
                        ErrorKind::UnexpectedArgument,
                        format!("unexpected argument '{}' found", v.to_string_lossy()),
                    ));
                }
                let name = v.to_string_lossy();
                if name == "help" {
                    return help_for(top, spec, path, &mut p).map(Parsed::Help);
                }
                match spec.commands.iter().find(|c| c.name == name) {
                    Some(sub) => {
                        spec = sub;
                        path.push(sub.name);
                        values = vec![Vec::new(); spec.opts.len()];
                        continue;
                    }
                    None => {
                        return Err(err(
                            spec,
                            &path,
                            ErrorKind::UnknownCommand,
                            format!(
                                "unrecognized subcommand '{name}'{}",
                                did_you_mean(&name, spec.commands.iter().map(|c| c.name), "")
                            ),
                        ))
                    }
                }
            }
        };
        let Some(i) = index else {
            let tip = match shown.strip_prefix("--") {
                Some(name) => did_you_mean(name, spec.opts.iter().map(|o| o.long), "--"),
                None => String::new(),
            };
            return Err(err(
                spec,
                &path,
                ErrorKind::UnexpectedArgument,
                format!("unexpected argument '{shown}' found{tip}"),
            ));
        };
        let opt = &spec.opts[i];
        if !values[i].is_empty() && !opt.repeatable {
            return Err(err(
                spec,
                &path,
                ErrorKind::Conflict,
                format!(
                    "the argument '{}' cannot be used multiple times",
                    opt.display()
                ),
            ));
        }
        let is_long = shown.starts_with("--");
        if opt.value_name.is_none() {
            // A flag: `--force=x` is refused (a short flag's cluster, `-vh`, is not a value).
            if is_long {
                if let Some(v) = p.optional_value() {
                    return Err(err(
                        spec,
                        &path,
                        ErrorKind::UnexpectedValue,
                        format!(
                            "unexpected value '{}' for '{}' found; no more were expected",
                            v.to_string_lossy(),
                            opt.display()
                        ),
                    ));
                }
            }
            values[i].push(OsString::new());
            continue;
        }
        let value = match p.optional_value() {
            Some(v) => Some(v),
            None => next_value(&mut p, opt.hyphen_values),
        };
        let Some(value) = value else {
            // `--root -d`: the next argument was taken for an option; say how to pass it.
            let attach = p
                .raw_args()
                .ok()
                .and_then(|raw| raw.peek().map(|v| v.to_string_lossy().into_owned()))
                .filter(|v| v.len() > 1 && v.starts_with('-') && !v.starts_with("--"))
                .map(|v| {
                    format!(
                        "; a value starting with '-' must be attached: '--{}={v}'",
                        opt.long
                    )
                })
                .unwrap_or_default();
            return Err(err(
                spec,
                &path,
                ErrorKind::MissingValue,
                format!(
                    "a value is required for '{}' but none was supplied{attach}",
                    opt.display()
                ),
            ));
        };
        if !opt.choices.is_empty() && !opt.choices.iter().any(|(c, _)| value == *c) {
            return Err(err(
                spec,
                &path,
                ErrorKind::InvalidValue,
                format!(
                    "invalid value '{}' for '{}' [possible values: {}]",
                    value.to_string_lossy(),
                    opt.display(),
                    opt.choices
                        .iter()
                        .map(|(c, _)| *c)
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ));
        }
        values[i].push(value);
    }
    if !spec.commands.is_empty() {
        return Err(UsageError {
            kind: ErrorKind::MissingCommand,
            message: format!("'{}' requires a subcommand", command_name(top, &path)),
            usage: usage_line(top, spec, &path),
            help: Some(help_text(top, spec, &path)),
        });
    }
    if let Some([a, b]) = spec.one_of {
        let find = |l: &str| spec.opts.iter().position(|o| o.long == l);
        if let (Some(ia), Some(ib)) = (find(a), find(b)) {
            let (oa, ob) = (&spec.opts[ia], &spec.opts[ib]);
            match (values[ia].is_empty(), values[ib].is_empty()) {
                (false, false) => {
                    return Err(err(
                        spec,
                        &path,
                        ErrorKind::Conflict,
                        format!(
                            "the argument '{}' cannot be used with '{}'",
                            oa.display(),
                            ob.display()
                        ),
                    ))
                }
                (true, true) => {
                    return Err(err(
                        spec,
                        &path,
                        ErrorKind::MissingRequired,
                        format!(
                            "one of '{}' or '{}' is required but neither was provided",
                            oa.display(),
                            ob.display()
                        ),
                    ))
                }
                _ => {}
            }
        }
    }
    let mut missing: Vec<String> = spec
        .opts
        .iter()
        .zip(&values)
        .filter(|(o, v)| o.required && v.is_empty())
        .map(|(o, _)| o.display())
        .collect();
    missing.extend(spec.missing_args(positionals.len()));
    if !missing.is_empty() {
        return Err(err(
            spec,
            &path,
            ErrorKind::MissingRequired,
            format!(
                "the following required arguments were not provided: {}",
                missing.join(", ")
            ),
        ));
    }
    Ok(Parsed::Run(Matches {
        usage: usage_line(top, spec, &path),
        commands: path,
        spec,
        values,
        positionals,
    }))
}

/// The next argument as an option's value: taken when it does not look like an option
/// (`-x`, `--x`; a lone `-` is a value), or whatever it is with `hyphen_values`; `None` at the
/// end or after `--`.
fn next_value(p: &mut lexopt::Parser, hyphen_values: bool) -> Option<OsString> {
    let mut raw = p.raw_args().ok()?;
    let next = raw.peek()?;
    let b = next.as_encoded_bytes();
    let looks_like_option = b.len() > 1 && b[0] == b'-';
    if looks_like_option && !hyphen_values {
        return None;
    }
    raw.next()
}

/// `help [COMMAND]…` under `spec`: the help of the command the remaining words name.
fn help_for(
    top: &'static Spec,
    mut spec: &'static Spec,
    mut path: Vec<&'static str>,
    p: &mut lexopt::Parser,
) -> Result<String, UsageError> {
    loop {
        let arg = match p.next() {
            Ok(Some(a)) => a,
            Ok(None) => return Ok(help_text(top, spec, &path)),
            Err(e) => {
                return Err(UsageError {
                    kind: ErrorKind::UnexpectedArgument,
                    message: e.to_string(),
                    usage: usage_line(top, spec, &path),
                    help: None,
                })
            }
        };
        let name = match arg {
            lexopt::Arg::Value(v) => v.to_string_lossy().into_owned(),
            lexopt::Arg::Long(l) => format!("--{l}"),
            lexopt::Arg::Short(c) => format!("-{c}"),
        };
        if matches!(name.as_str(), "help" | "--help" | "-h") {
            // `help help`, `help -h`: the help of the level reached so far.
            return Ok(help_text(top, spec, &path));
        }
        match spec.commands.iter().find(|c| c.name == name) {
            Some(sub) => {
                spec = sub;
                path.push(sub.name);
            }
            None => {
                return Err(UsageError {
                    kind: ErrorKind::UnknownCommand,
                    message: format!(
                        "unrecognized subcommand '{name}'{}",
                        did_you_mean(&name, spec.commands.iter().map(|c| c.name), "")
                    ),
                    usage: usage_line(top, spec, &path),
                    help: None,
                })
            }
        }
    }
}

/// `npu-agent cma set`: the program name and the subcommand names.
fn command_name(top: &Spec, path: &[&str]) -> String {
    let mut s = top.name.to_string();
    for p in path {
        s.push(' ');
        s.push_str(p);
    }
    s
}

/// The usage line: `npu-agent fleet send [OPTIONS] --broker <BROKER> <--board <BOARD>|--all>
/// <ACTION>`, or `npu-agent cma <COMMAND>` for a command with subcommands.
fn usage_line(top: &Spec, spec: &Spec, path: &[&str]) -> String {
    let mut s = command_name(top, path);
    if !spec.commands.is_empty() {
        s.push_str(" <COMMAND>");
        return s;
    }
    let in_group = |o: &Opt| spec.one_of.is_some_and(|g| g.contains(&o.long));
    if spec.opts.iter().any(|o| !o.required && !in_group(o)) {
        s.push_str(" [OPTIONS]");
    }
    for o in spec.opts.iter().filter(|o| o.required) {
        s.push(' ');
        s.push_str(&o.display());
    }
    if let Some([a, b]) = spec.one_of {
        let show = |l: &str| {
            spec.opts
                .iter()
                .find(|o| o.long == l)
                .map_or(format!("--{l}"), Opt::display)
        };
        s.push_str(&format!(" <{}|{}>", show(a), show(b)));
    }
    for a in spec.args {
        if a.many {
            s.push_str(&format!(" [{}]...", a.name));
        } else {
            s.push_str(&format!(" <{}>", a.name));
        }
    }
    s
}

/// The first sentence of `about` (up to the first ". " or the end), without its period: the
/// command's line in its parent's list.
fn summary(about: &str) -> &str {
    let first = about.split_once(". ").map_or(about, |(s, _)| s);
    first.trim_end_matches('.')
}

/// Appends `prefix` and then `text`, wrapped at [`HELP_WIDTH`] columns; continuation lines are
/// indented by `indent` spaces (a long word is never split).
fn wrap(prefix: &str, text: &str, indent: usize, out: &mut String) {
    out.push_str(prefix);
    let mut col = prefix.chars().count();
    let mut fresh = true;
    for word in text.split_whitespace() {
        let len = word.chars().count();
        if !fresh && col + 1 + len > HELP_WIDTH {
            out.push('\n');
            out.extend(std::iter::repeat_n(' ', indent));
            col = indent;
            fresh = true;
        }
        if !fresh {
            out.push(' ');
            col += 1;
        }
        out.push_str(word);
        col += len;
        fresh = false;
    }
    out.push('\n');
}

/// The help text of `spec` (reached by `path` from `top`): its description, usage line,
/// subcommands, positional arguments and options, each with its description, default and
/// possible values.
pub fn help_text(top: &Spec, spec: &Spec, path: &[&str]) -> String {
    let pad = " ".repeat(HELP_INDENT);
    let mut h = String::new();
    wrap("", spec.about, 0, &mut h);
    h.push_str(&format!("\nUsage: {}\n", usage_line(top, spec, path)));
    if !spec.commands.is_empty() {
        h.push_str("\nCommands:\n");
        let help = "Print this message or the help of the given subcommand(s)";
        let lines = spec
            .commands
            .iter()
            .map(|c| (c.name, summary(c.about)))
            .chain(std::iter::once(("help", help)));
        for (name, about) in lines {
            wrap(&format!("  {name:<10}"), about, 12, &mut h);
        }
    }
    if !spec.args.is_empty() {
        h.push_str("\nArguments:\n");
        for a in spec.args {
            if a.many {
                h.push_str(&format!("  [{}]...\n", a.name));
            } else {
                h.push_str(&format!("  <{}>\n", a.name));
            }
            wrap(&pad, a.help, HELP_INDENT, &mut h);
        }
    }
    h.push_str("\nOptions:\n");
    for o in spec.opts {
        let short = o.short.map_or("    ".to_string(), |c| format!("-{c}, "));
        h.push_str(&format!("  {short}{}\n", o.display()));
        let mut text = o.help.to_string();
        if let Some(d) = o.default {
            text.push_str(&format!(" [default: {d}]"));
        }
        wrap(&pad, &text, HELP_INDENT, &mut h);
        if !o.choices.is_empty() {
            h.push_str(&format!("{pad}Possible values:\n"));
            for (c, about) in o.choices {
                wrap(&format!("{pad}- {c}: "), about, HELP_INDENT + 2, &mut h);
            }
        }
    }
    h.push_str(&format!("  -h, --help\n{pad}Print help\n"));
    if path.is_empty() {
        h.push_str(&format!("  -V, --version\n{pad}Print version\n"));
    }
    h
}
