//! Writes the man pages and shell completions of `npu-agent`, generated from its clap
//! definitions (`npu_agent::cli::Cli`), into a directory:
//!
//! ```text
//! cargo run --example gen_docs -- DIR
//! ```
//!
//! `DIR/man/npu-agent.1` (with the conventions, exit status, environment, files and first-boot
//! sections below) and one page per subcommand (`npu-agent-fleet-send.1`, ...);
//! `DIR/completions/npu-agent.bash`, `_npu-agent` (zsh) and `npu-agent.fish`.
//! packaging/build-debs.sh runs it; the `.deb` installs them where Debian looks
//! (Cargo.toml `[package.metadata.deb] assets`). clap_mangen and clap_complete are
//! dev-dependencies: none of this is in the agent's binary.
// Build outputs in a directory build-debs.sh empties first, not files on a board.
#![allow(clippy::disallowed_methods)]

use clap::CommandFactory;
use clap_complete::aot::{generate, Shell};
use clap_mangen::roff::{bold, italic, roman, Roff};
use std::path::{Path, PathBuf};

fn main() {
    let Some(dir) = std::env::args_os().nth(1).map(PathBuf::from) else {
        eprintln!("usage: cargo run --example gen_docs -- DIR");
        std::process::exit(2);
    };
    if let Err(e) = write_all(&dir) {
        eprintln!("gen_docs: {}: {e}", dir.display());
        std::process::exit(1);
    }
}

/// The man pages under `dir/man`, the completions under `dir/completions`.
fn write_all(dir: &Path) -> std::io::Result<()> {
    let man = dir.join("man");
    let completions = dir.join("completions");
    std::fs::create_dir_all(&man)?;
    std::fs::create_dir_all(&completions)?;
    // Built, the commands know their page names (`npu-agent-cma-set`); `help` is no page.
    let mut cmd = npu_agent::cli::Cli::command().disable_help_subcommand(true);
    cmd.build();
    write_pages(&cmd, &man)?;
    for (shell, name) in [
        (Shell::Bash, "npu-agent.bash"),
        (Shell::Zsh, "_npu-agent"),
        (Shell::Fish, "npu-agent.fish"),
    ] {
        let mut script = Vec::new();
        generate(
            shell,
            &mut npu_agent::cli::Cli::command(),
            "npu-agent",
            &mut script,
        );
        if shell == Shell::Bash {
            script = bash_fix(&String::from_utf8_lossy(&script)).into_bytes();
        }
        std::fs::write(completions.join(name), script)?;
    }
    Ok(())
}

/// clap_complete 4.6 names the bash states of a hyphenated program's subcommands two ways
/// (`npu__agent__subcmd__fleet` where it sets them, `npu__subcmd__agent__subcmd__fleet` where
/// it reads them: clap-rs/clap issue 6421), so nothing past the first word completed: one name.
fn bash_fix(script: &str) -> String {
    script.replace("npu__subcmd__agent", "npu__agent")
}

/// The page of `cmd` (`npu-agent.1` with the sections that are no option's help) and, under
/// it, one per subcommand.
fn write_pages(cmd: &clap::Command, man: &Path) -> std::io::Result<()> {
    for sub in cmd.get_subcommands() {
        write_pages(sub, man)?;
    }
    let source = format!("npu-agent {}", env!("CARGO_PKG_VERSION"));
    let page = clap_mangen::Man::new(cmd.clone()).source(source);
    let mut text = Vec::new();
    page.render_title(&mut text)?;
    page.render_name_section(&mut text)?;
    page.render_synopsis_section(&mut text)?;
    page.render_description_section(&mut text)?;
    page.render_options_section(&mut text)?;
    if cmd.has_subcommands() {
        page.render_subcommands_section(&mut text)?;
    }
    if cmd.get_name() == "npu-agent" {
        text.extend(extra_sections().to_roff().into_bytes());
        page.render_version_section(&mut text)?;
    }
    // Each section renders roff's apostrophe preamble: keep the first only.
    let preamble = ".ie \\n(.g .ds Aq \\(aq\n.el .ds Aq '\n";
    let body = String::from_utf8_lossy(&text).replace(preamble, "");
    std::fs::write(man.join(page.get_filename()), format!("{preamble}{body}"))
}

/// The top page's sections after the generated ones: conventions, exit status, environment,
/// files, first-boot provisioning, logs, see also.
fn extra_sections() -> Roff {
    let mut r = Roff::new();
    r.control("SH", ["CONVENTIONS"]).text([
        bold("-h"),
        roman(", "),
        bold("--help"),
        roman(" at any level (also "),
        bold("npu-agent help"),
        roman(
            " [COMMAND]...) print the command's usage, subcommands and options on standard \
               output and exit 0; ",
        ),
        bold("-V"),
        roman(", "),
        bold("--version"),
        roman(
            " (top level only) print npu-agent and the version. --opt VALUE and --opt=VALUE \
               are the same; a value starting with - must be attached, except for \
               --llm-cmdline; -- ends the options. An option given twice is an error (only \
               fleet send --arg repeats). A usage error prints error: ..., the usage line and \
               a hint to --help on standard error and exits 2; npu-agent without a command \
               (or cma, fleet, profiles without theirs) prints that level's help on standard \
               error and exits 2.",
        ),
    ]);
    r.control("SH", ["EXIT STATUS"]).text([roman(
        "0 healthy or done; 1 a finding at or above --fail-on (check), or an action refused, \
         failed or timed out; 2 usage or configuration error, or output that could not be \
         written. Each command's page says which of these it gives.",
    )]);
    r.control("SH", ["ENVIRONMENT"]).text([
        bold("NPU_AGENT_*"),
        roman(" variables override the configuration of "),
        bold("run"),
        roman(" (docs/reference.md lists each key's variable). For mqtts:// brokers, "),
        bold("fleet"),
        roman(
            " reads NPU_AGENT_MQTT_CA_FILE, NPU_AGENT_MQTT_CERT_FILE, NPU_AGENT_MQTT_KEY_FILE, \
               NPU_AGENT_MQTT_USERNAME and NPU_AGENT_MQTT_PASSWORD_FILE. RUST_LOG sets the log \
               level of the other commands (warnings and errors by default).",
        ),
    ]);
    files(&mut r);
    r.control("SH", ["FIRST-BOOT PROVISIONING"]).text([
        roman("On start, "),
        bold("run"),
        roman(" reads "),
        italic("/boot/firmware/npu-agent.toml"),
        roman(" (Raspberry Pi OS) or "),
        italic("/boot/npu-agent.toml"),
        roman(" (Armbian), validates all of it, writes its [secrets] to "),
        italic("/etc/npu-agent/secrets/"),
        roman(" (mode 0600), its configuration, rewritten to reference them, to "),
        italic("/etc/npu-agent/agent.d/90-provisioned.toml"),
        roman(
            ", and deletes it from the boot partition. A broken file is left in place, \
               nothing from it is applied, and the error is reported. The template is ",
        ),
        italic("/usr/share/npu-agent/npu-agent.toml.example"),
        roman(". Without a broker ([mqtt] url) the service stands by until one is configured."),
    ]);
    r.control("SH", ["LOGS"])
        .text([bold("journalctl -u npu-agent")]);
    r.control("SH", ["SEE ALSO"]).text([
        bold("systemctl"),
        roman("(1), "),
        bold("journalctl"),
        roman("(1), "),
        italic("/usr/share/doc/npu-agent/README.md"),
    ]);
    r
}

/// The FILES section.
fn files(r: &mut Roff) {
    r.control("SH", ["FILES"]);
    for (path, what) in [
        (
            "/etc/npu-agent/agent.toml",
            "configuration; then /etc/npu-agent/agent.d/*.toml in name order, then NPU_AGENT_* \
             environment variables (/etc/default/npu-agent).",
        ),
        (
            "/etc/npu-agent/profiles.d/*.toml",
            "board profiles added to or replacing the built-in ones.",
        ),
        (
            "/var/lib/npu-agent/",
            "state: pending command, seen command ids, last compaction.",
        ),
    ] {
        r.control("TP", []).text([italic(path)]).text([roman(what)]);
    }
}
