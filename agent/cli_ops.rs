//! The `run`, `fleet` and `keygen` subcommands (wired into [`crate::cli`]).

use crate::cli::{EXIT_OK, EXIT_USAGE};
use crate::config;
use crate::root::SysRoot;
use clap::Subcommand;
use std::io::Write;
use std::path::PathBuf;

/// `run` options.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// Config file instead of /etc/npu-agent/agent.toml (drop-ins, the first-boot file and
    /// NPU_AGENT_* variables still apply).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Read and write every board file under DIR instead of / (overrides `root` in the config).
    #[arg(long, value_name = "DIR")]
    pub root: Option<PathBuf>,
    /// Print the effective configuration (secrets are file references only) and exit.
    #[arg(long)]
    pub print_config: bool,
}

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
#[derive(Debug, Subcommand)]
pub enum FleetAction {
    /// A live table of every board (health, worst findings, CMA free, last seen, online).
    Watch {
        /// Broker URL (mqtt://host[:port] or mqtts://host[:port]).
        #[arg(long)]
        broker: String,
        /// Topic root.
        #[arg(long, default_value = "npu-fleet")]
        topic_root: String,
        /// Print once when every board's retained availability and status have been read
        /// (wildcard bursts, then exact subscriptions for what a burst lost), then exit.
        #[arg(long)]
        once: bool,
        /// Output format (json needs --once). json prints one object: `boards`, an array with
        /// one object per board (`board`, `availability` online/offline/unknown, `health`,
        /// `profile`, `model`, `cma_free_bytes`, `cma_total_bytes`, `soc_temp_c`,
        /// `undervoltage_now`, `worst` failing/warning check ids, `last_seen` RFC 3339,
        /// `session`; absent metrics are null), and `incomplete` (true when repeated availability
        /// passes kept revealing new boards or a retained burst did not end within 30 s; then
        /// also `incomplete_reason`, and the exit code is 1).
        #[arg(long, value_enum, default_value = "text")]
        format: WatchFormat,
    },
    /// Send a command and print its lifecycle; exit 0 only on successful.
    #[command(group = clap::ArgGroup::new("target").required(true).args(["board", "all"]))]
    Send {
        /// compact, set_cma, reboot, rescan or release_npu.
        action: String,
        /// Argument KEY=VALUE (repeatable), e.g. --arg size=256M.
        #[arg(long = "arg", value_name = "K=V")]
        args: Vec<String>,
        /// The board to send it to.
        #[arg(long)]
        board: Option<String>,
        /// Send it to every board.
        #[arg(long)]
        all: bool,
        /// Broker URL.
        #[arg(long)]
        broker: String,
        /// Topic root.
        #[arg(long, default_value = "npu-fleet")]
        topic_root: String,
        /// Ed25519 private key (from `npu-agent keygen`) to sign the command with.
        #[arg(long, value_name = "FILE")]
        key: Option<PathBuf>,
        /// Seconds to wait for the final state.
        #[arg(long, value_name = "SECS", default_value_t = 30)]
        wait: u64,
    },
}

/// `npu-agent run`.
pub fn run(a: RunArgs, out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    let env: Vec<(String, String)> = std::env::vars()
        .filter(|(k, _)| k.starts_with("NPU_AGENT_"))
        .collect();
    // The root decides where the config is read: --root first, else the config's own default /.
    let root_dir = a.root.clone().unwrap_or_else(|| PathBuf::from("/"));
    // First-boot provisioning (agent/provision.rs) before the config is read; --print-config only looks.
    let provisioned = crate::provision::at_start(&SysRoot::new(&root_dir), a.print_config, err);
    let (mut cfg, sources) = match config::load(&SysRoot::new(&root_dir), a.config.as_deref(), &env)
    {
        Ok(c) => c,
        Err(e) => {
            let _ = writeln!(err, "npu-agent: {e}");
            return EXIT_USAGE;
        }
    };
    if let Some(r) = &a.root {
        cfg.root = r.display().to_string();
    }
    if a.print_config {
        let _ = writeln!(
            out,
            "# effective configuration, from: {}",
            if sources.applied.is_empty() {
                "defaults".to_string()
            } else {
                sources.applied.join(", ")
            }
        );
        // state_dir is a board path, resolved under root like every other file.
        let state_path = SysRoot::new(&cfg.root)
            .join(&cfg.state_dir)
            .map(|p| p.display().to_string())
            .unwrap_or_else(|e| format!("invalid: {e}"));
        let _ = write!(
            out,
            "{}# state_dir {:?} under root {:?} is {state_path}\n{}",
            cfg.redacted(),
            cfg.state_dir,
            cfg.root,
            crate::provision::print_config_note(&provisioned)
        );
        return EXIT_OK;
    }
    // A long-running process from here on: no transparent huge pages (crate::runtime).
    if let Err(e) = crate::runtime::no_huge_pages() {
        let _ = writeln!(
            err,
            "npu-agent: cannot turn transparent huge pages off ({e}); memory may grow in 2 MiB steps"
        );
    }
    // No broker yet (fresh install, unprovisioned image): stand by until one is configured.
    let reload = |again| {
        crate::standby::reload(
            &root_dir,
            a.config.as_deref(),
            &env,
            a.root.as_deref(),
            again,
        )
    };
    let Some(cfg) = crate::standby::until_configured(cfg, provisioned, reload) else {
        return EXIT_OK;
    };
    match crate::daemon::run(cfg) {
        Ok(code) => code,
        Err(e) => {
            let _ = writeln!(err, "npu-agent: {e}");
            EXIT_USAGE
        }
    }
}

/// `npu-agent fleet …`.
pub fn fleet(a: FleetAction, out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    match a {
        FleetAction::Watch {
            broker,
            topic_root,
            once,
            format,
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
        } => crate::fleet::send(
            &crate::fleet::SendArgs {
                action,
                args,
                board,
                broker,
                topic_root,
                key,
                wait_s: wait,
            },
            out,
            err,
        ),
    }
}

/// `npu-agent keygen --out FILE`.
pub fn keygen(path: &std::path::Path, out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    match crate::mqtt::command::keygen(path) {
        Ok(pubp) => {
            let _ = writeln!(
                out,
                "private key: {} (mode 0600; keep it on the operator's machine)",
                path.display()
            );
            let _ = writeln!(
                out,
                "public key:  {} (list it in [security] trusted_keys on the boards)",
                pubp.display()
            );
            EXIT_OK
        }
        Err(e) => {
            let _ = writeln!(err, "npu-agent: {e}");
            EXIT_USAGE
        }
    }
}
