//! `npu-agent run`: the daemon (or the standby wait on a board nobody configured yet).

use super::{EXIT_OK, EXIT_USAGE};
use crate::config;
use crate::root::SysRoot;
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

/// `npu-agent run`.
pub fn run(a: RunArgs, out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    if let Err(e) = crate::sys::runtime::survive_file_size_limit() {
        let _ = writeln!(err, "npu-agent: cannot handle SIGXFSZ: {e}");
    }
    let env = match config::agent_env() {
        Ok(env) => env,
        Err(e) => {
            let _ = writeln!(err, "npu-agent: {e}");
            return EXIT_USAGE;
        }
    };
    if let Some(r) = &a.root {
        if let Err(code) = crate::cli::require_root_dir(r, err) {
            return code;
        }
    }
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
    // A long-running process from here on: no transparent huge pages (crate::sys::runtime).
    if let Err(e) = crate::sys::runtime::no_huge_pages() {
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
    let Some((cfg, provisioned)) = crate::standby::until_configured(cfg, provisioned, reload)
    else {
        return EXIT_OK;
    };
    let (root_dir, explicit, root_override) = (root_dir.clone(), a.config.clone(), a.root.clone());
    // Once the main file was there, its absence at a reload is an error, not the defaults.
    let main_seen = std::cell::Cell::new(SysRoot::new(&root_dir).exists(config::CONFIG_FILE));
    let reread = Box::new(move || {
        let root = SysRoot::new(&root_dir);
        let (mut cfg, main_read) =
            config::reload(&root, explicit.as_deref(), &env, main_seen.get())
                .map_err(|e| e.to_string())?;
        main_seen.set(main_seen.get() || main_read);
        if let Some(r) = &root_override {
            cfg.root = r.display().to_string();
        }
        Ok(cfg)
    });
    match crate::daemon::run(cfg, provisioned.finding(), reread) {
        Ok(code) => code,
        Err(e) => {
            let _ = writeln!(err, "npu-agent: {e}");
            EXIT_USAGE
        }
    }
}
