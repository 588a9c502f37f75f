//! The documentation against the program: docs/reference.md's "Commands" table against the clap
//! definitions the binary parses with, the user guide's check table, and every relative link.

use std::path::Path;

/// The reference's command table (docs/reference.md, "Commands") names every option and
/// argument each command takes (the parser's own definitions, `npu_agent::cli::Cli`).
#[test]
fn readme_command_table_lists_every_option() {
    use clap::CommandFactory;
    let readme = include_str!("../../docs/reference.md");
    let mut todo = vec![(String::from("npu-agent"), npu_agent::cli::Cli::command())];
    let mut leaves = 0;
    while let Some((name, cmd)) = todo.pop() {
        for c in cmd.get_subcommands() {
            todo.push((format!("{name} {}", c.get_name()), c.clone()));
        }
        if cmd.has_subcommands() {
            continue;
        }
        leaves += 1;
        let row = readme
            .lines()
            .find(|l| l.starts_with("| `npu-agent") && l.contains(&format!("`{name}")))
            .unwrap_or_else(|| panic!("no docs/reference.md row for {name}"));
        for a in cmd.get_arguments().filter(|a| a.get_id() != "help") {
            let short = a
                .get_short()
                .is_some_and(|c| row.contains(&format!("[-{c}]")));
            match a.get_long() {
                Some(long) => assert!(
                    row.contains(&format!("--{long}")) || short,
                    "{name} --{long}: {row}"
                ),
                None => {
                    let value = a.get_value_names().unwrap_or_default().join(" ");
                    assert!(row.contains(&value), "{name} {value}: {row}");
                }
            }
        }
    }
    // `fleet serve` is the default feature `serve`.
    let serve = usize::from(cfg!(feature = "serve"));
    assert_eq!(leaves, 13 + serve, "commands without subcommands");
}

/// GitHub's anchor for a Markdown heading: lower case, punctuation other than `-` and `_`
/// dropped, spaces as `-`.
fn heading_anchor(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | ' '))
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// A Markdown file's text outside fenced code blocks.
fn outside_code(text: &str) -> Vec<&str> {
    let mut fenced = false;
    text.lines()
        .filter(|l| {
            if l.starts_with("```") {
                fenced = !fenced;
                return false;
            }
            !fenced
        })
        .collect()
}

/// The user guide's check table has a row for every check id the agent reports.
#[test]
fn user_guide_lists_every_check_id() {
    let guide =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/user-guide.md"))
            .expect("docs/user-guide.md");
    let missing: Vec<&str> = npu_agent::check::CHECK_IDS
        .iter()
        .filter(|id| !guide.contains(&format!("\n| `{id}` | ")))
        .copied()
        .collect();
    assert!(
        missing.is_empty(),
        "no row in docs/user-guide.md \"Checks\" for {missing:?}"
    );
}

/// Every relative link in README.md, CHANGELOG.md and docs/*.md names a file that exists, and a
/// `#fragment` into a Markdown file names one of its headings.
#[test]
fn doc_links_resolve() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut pages = vec![root.join("README.md"), root.join("CHANGELOG.md")];
    for e in std::fs::read_dir(root.join("docs")).expect("docs/") {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "md") {
            pages.push(p);
        }
    }
    let anchors = |p: &Path| -> Vec<String> {
        let text = std::fs::read_to_string(p).unwrap();
        outside_code(&text)
            .into_iter()
            .filter(|l| l.starts_with('#'))
            .map(|l| heading_anchor(l.trim_start_matches('#')))
            .collect()
    };
    let mut links = 0;
    for page in &pages {
        let text = std::fs::read_to_string(page).unwrap();
        for line in outside_code(&text) {
            for part in line.split("](").skip(1) {
                let Some(target) = part.split(')').next() else {
                    continue;
                };
                if target.contains("://") || target.starts_with("mailto:") {
                    continue;
                }
                links += 1;
                let (file, fragment) = target.split_once('#').unwrap_or((target, ""));
                let dest = if file.is_empty() {
                    page.clone()
                } else {
                    page.parent().unwrap().join(file)
                };
                assert!(dest.exists(), "{}: {target}: no such file", page.display());
                if !fragment.is_empty() && dest.extension().is_some_and(|x| x == "md") {
                    assert!(
                        anchors(&dest).iter().any(|a| a == fragment),
                        "{}: {target}: no such heading",
                        page.display()
                    );
                }
            }
        }
    }
    assert!(links > 50, "only {links} links found");
}
