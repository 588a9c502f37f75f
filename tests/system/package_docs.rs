//! The man pages and shell completions in the Debian packages, generated from the clap
//! definitions by examples/gen_docs.rs when packaging/build-debs.sh builds them: every command
//! has its page, the top page lists every subcommand and documents the exit status and
//! environment, each page names every option of its command, and the completion scripts are
//! valid for their shells (bash: it also completes a subcommand; zsh and fish: their syntax
//! check, under CI=true a failure when the shell is missing).

use super::package::{debs, have, member, need};
use clap::CommandFactory;
use std::path::Path;
use std::process::Command;

/// Every man page the packages install (without `.1.gz`): `npu-agent` and one per subcommand.
const MAN_PAGES_ALWAYS: [&str; 17] = [
    "npu-agent",
    "npu-agent-capture",
    "npu-agent-check",
    "npu-agent-cma",
    "npu-agent-cma-set",
    "npu-agent-cma-show",
    "npu-agent-compact",
    "npu-agent-fix",
    "npu-agent-fleet",
    "npu-agent-fleet-capture",
    "npu-agent-fleet-send",
    "npu-agent-fleet-watch",
    "npu-agent-keygen",
    "npu-agent-profiles",
    "npu-agent-profiles-list",
    "npu-agent-profiles-show",
    "npu-agent-run",
];

/// The man pages the packages carry, sorted: every command of this build's clap definitions
/// (`fleet serve` with the default feature `serve`; both packages carry the pages generated
/// once, from the default build).
pub(super) fn man_pages() -> Vec<&'static str> {
    let mut pages = MAN_PAGES_ALWAYS.to_vec();
    if cfg!(feature = "serve") {
        pages.push("npu-agent-fleet-serve");
    }
    pages.sort();
    pages
}

/// Every command of the clap definitions: its page name and its definition.
fn commands() -> Vec<(String, clap::Command)> {
    let mut todo = vec![("npu-agent".to_string(), npu_agent::cli::Cli::command())];
    let mut all = Vec::new();
    while let Some((page, cmd)) = todo.pop() {
        for sub in cmd.get_subcommands() {
            todo.push((format!("{page}-{}", sub.get_name()), sub.clone()));
        }
        all.push((page, cmd));
    }
    all
}

/// A man page from the package, uncompressed.
fn man_page(deb: &Path, page: &str) -> String {
    let gz = member(deb, &format!("/usr/share/man/man1/{page}.1.gz"));
    let mut text = String::new();
    use std::io::Read;
    flate2::read::GzDecoder::new(&gz[..])
        .read_to_string(&mut text)
        .unwrap_or_else(|e| panic!("{page}.1.gz: {e}"));
    text
}

#[test]
fn every_command_has_its_man_page_naming_its_subcommands_and_options() {
    let mut pages: Vec<String> = commands().into_iter().map(|(p, _)| p).collect();
    pages.sort();
    assert_eq!(
        pages,
        man_pages(),
        "a page per command of the clap definitions"
    );
    let Some((arm, amd)) = debs() else { return };
    for deb in [&arm, &amd] {
        for (page, cmd) in commands() {
            let man = man_page(deb, &page);
            assert!(
                man.starts_with(".ie \\n(.g .ds Aq"),
                "{page}: not roff:\n{man}"
            );
            assert!(man.contains(".SH NAME\n"), "{page}:\n{man}");
            for sub in cmd.get_subcommands() {
                let link = format!("{page}-{}(1)", sub.get_name()).replace('-', "\\-");
                assert!(man.contains(&link), "{page}: no {link} in\n{man}");
            }
            for long in cmd.get_arguments().filter_map(|a| a.get_long()) {
                let opt = format!("\\-\\-{}", long.replace('-', "\\-"));
                assert!(man.contains(&opt), "{page}: no {opt} in\n{man}");
            }
        }
        let top = man_page(deb, "npu-agent");
        for section in [
            "CONVENTIONS",
            "EXIT STATUS",
            "ENVIRONMENT",
            "FILES",
            "SEE ALSO",
        ] {
            assert!(
                top.contains(&format!(".SH \"{section}\""))
                    || top.contains(&format!(".SH {section}\n")),
                "{section}:\n{top}"
            );
        }
        assert!(top.contains("NPU_AGENT_MQTT_PASSWORD_FILE"), "{top}");
    }
}

/// Writes the package's completion script for one shell to a temporary file.
fn completion(deb: &Path, path: &str, dir: &Path) -> std::path::PathBuf {
    let file = dir.join(Path::new(path).file_name().unwrap());
    std::fs::write(&file, member(deb, path)).unwrap();
    file
}

#[test]
fn the_completion_scripts_are_valid_for_their_shells() {
    let Some((arm, amd)) = debs() else { return };
    for deb in [&arm, &amd] {
        let dir = tempfile::tempdir().unwrap();
        let bash = completion(
            deb,
            "/usr/share/bash-completion/completions/npu-agent",
            dir.path(),
        );
        let o = Command::new("bash").arg("-n").arg(&bash).output().unwrap();
        assert!(
            o.status.success(),
            "bash -n: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        // Sourced, it completes subcommands, options and their values at every level.
        let mut script = format!(
            "source '{}' && f=$(complete -p npu-agent | sed 's/.* -F \\([^ ]*\\) .*/\\1/')",
            bash.display()
        );
        let cases = [
            ("npu-agent fl", "fleet"),
            // `fleet serve` with the default feature `serve` (the pages come from that build).
            (
                "npu-agent fleet s",
                if cfg!(feature = "serve") {
                    "send serve"
                } else {
                    "send"
                },
            ),
            ("npu-agent check --fo", "--format"),
            ("npu-agent check --format ", "text json prometheus"),
            ("npu-agent fleet send --bo", "--board --board-wait"),
            ("npu-agent cma s", "show set"),
        ];
        for (line, _) in cases {
            // COMP_WORDS, COMP_CWORD and the function's arguments (command, word, previous word).
            let words: Vec<&str> = line.split(' ').collect();
            let cword = words.len() - 1;
            let (cur, prev) = (words[cword], words[cword - 1]);
            let quoted: Vec<String> = words.iter().map(|w| format!("'{w}'")).collect();
            script.push_str(&format!(
                "; COMP_WORDS=({}); COMP_CWORD={cword}; $f npu-agent '{cur}' '{prev}'; \
                 echo \"${{COMPREPLY[*]}}\"",
                quoted.join(" ")
            ));
        }
        let o = Command::new("bash")
            .arg("-c")
            .arg(&script)
            .output()
            .unwrap();
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(
            o.status.success(),
            "{out}{}",
            String::from_utf8_lossy(&o.stderr)
        );
        let want: Vec<&str> = cases.iter().map(|(_, w)| *w).collect();
        assert_eq!(out.lines().collect::<Vec<_>>(), want, "{out}");
        for (shell, path, check) in [
            ("zsh", "/usr/share/zsh/vendor-completions/_npu-agent", "-n"),
            (
                "fish",
                "/usr/share/fish/vendor_completions.d/npu-agent.fish",
                "--no-execute",
            ),
        ] {
            let file = completion(deb, path, dir.path());
            assert!(
                String::from_utf8_lossy(&member(deb, path)).contains("fleet"),
                "{path}"
            );
            if need(
                have(shell),
                &format!("{shell} is not installed (apt-get install {shell})"),
            )
            .is_none()
            {
                continue;
            }
            let o = Command::new(shell).arg(check).arg(&file).output().unwrap();
            assert!(
                o.status.success(),
                "{shell} {check}: {}",
                String::from_utf8_lossy(&o.stderr)
            );
        }
    }
}
