//! `npu-agent check`: diagnose the board (or a board tree) and print the report.

use super::*;

pub(super) static CHECK: Spec = Spec {
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
pub(super) const FORMATS: &[(&str, &str)] = &[
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
pub(super) const FAIL_ONS: &[(&str, &str)] =
    &[("warn", "warn, error or fail."), ("fail", "fail only.")];

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
    pub(super) fn from_matches(m: &Matches) -> Result<CheckArgs, UsageError> {
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

pub(super) fn check(a: CheckArgs, out: &mut dyn Write, err: &mut dyn Write) -> i32 {
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
        // One line, byte for byte the status payload's encoding (one serialiser of the report
        // in the binary; `jq .` lays it out).
        Format::Json => match serde_json::to_vec(r) {
            Ok(s) => {
                let _ = out.write_all(&s);
                let _ = writeln!(out);
            }
            Err(e) => {
                let _ = writeln!(err, "npu-agent: cannot encode the report: {e}");
                return EXIT_USAGE;
            }
        },
        Format::Prometheus => {
            let _ = write!(out, "{}", crate::report::prometheus::render(r));
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
