//! `npu-agent check`: diagnose the board (or a board tree) and print the report.

use super::*;

/// Output format of `check` (`--format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    /// A table for people.
    Text,
    /// The report object (the same JSON the MQTT status carries).
    Json,
    /// Prometheus text exposition format (metrics and one gauge per check), for
    /// node_exporter's textfile collector.
    Prometheus,
}

/// Lowest status that makes `check` exit 1 (`--fail-on`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum FailOn {
    /// warn, error or fail.
    Warn,
    /// fail only.
    Fail,
}

/// `check` options.
#[derive(Debug, clap::Args)]
pub struct CheckArgs {
    /// Read every file under DIR instead of / (a captured board tree).
    #[arg(long, value_name = "DIR", default_value = "/")]
    pub root: PathBuf,
    /// Profile id, profile file, or auto.
    #[arg(long, value_name = "ID|FILE", default_value = "auto")]
    pub profile: String,
    /// Output format.
    #[arg(long, value_enum, default_value = "text")]
    pub format: Format,
    /// The same as --format json (as every other command that prints a result has it).
    #[arg(long, conflicts_with = "format")]
    pub json: bool,
    /// Exit 1 when a finding is at or above this status.
    #[arg(long, value_enum, default_value = "fail")]
    pub fail_on: FailOn,
    /// Text format: also show evidence of passing checks.
    #[arg(short, long)]
    pub verbose: bool,
    /// A llama.cpp / ik_llama.cpp command line to check as if it were running (its -m model,
    /// -ot rules, -ngl, -c, -ctk/-ctv, -fa, -mla), e.g. "llama-server -m /models/r1.gguf -ngl 99
    /// -ot 'exps=CPU'"; -m resolves under --root.
    #[arg(long, value_name = "CMDLINE", allow_hyphen_values = true)]
    pub llm_cmdline: Option<String>,
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
    let format = if a.json { Format::Json } else { a.format };
    match format {
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
