//! `npu-agent profiles list|show`.

use super::*;

/// `profiles` actions.
#[derive(Debug, clap::Subcommand)]
pub enum ProfilesAction {
    /// One line per profile: id, name, where it comes from.
    List {
        /// Read /etc/npu-agent/profiles.d under DIR.
        #[arg(long, value_name = "DIR", default_value = "/")]
        root: PathBuf,
        /// Print one JSON object: `profiles` (`id`, `name`, `source`) and `errors`.
        #[arg(long)]
        json: bool,
    },
    /// A profile's TOML text, as loaded (the built-in file or the profiles.d one replacing it).
    Show {
        /// Profile id.
        id: String,
        /// Read /etc/npu-agent/profiles.d under DIR.
        #[arg(long, value_name = "DIR", default_value = "/")]
        root: PathBuf,
        /// Print one JSON object: `id`, `name`, `source` and `toml` (the text as loaded).
        #[arg(long)]
        json: bool,
    },
}

pub(super) fn profiles(action: ProfilesAction, out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    let root_dir = match &action {
        ProfilesAction::List { root, .. } | ProfilesAction::Show { root, .. } => root.clone(),
    };
    if let Err(code) = require_root_dir(&root_dir, err) {
        return code;
    }
    let root = SysRoot::new(&root_dir);
    let (all, errors) = profile::load_all_with_text(&root);
    for e in &errors {
        let _ = writeln!(err, "npu-agent: {e}");
    }
    // Where a profile comes from: built in, unless profiles.d under the root replaces it.
    let source = |id: &str| {
        if profile::BUILTIN
            .iter()
            .any(|(n, _)| *n == format!("{id}.toml"))
            && !root.exists(&format!("{}/{id}.toml", profile::PROFILES_DIR))
        {
            "built-in"
        } else {
            profile::PROFILES_DIR
        }
    };
    match action {
        ProfilesAction::List { json: true, .. } => {
            let list: Vec<_> = all
                .iter()
                .map(|(p, _)| serde_json::json!({"id": p.id, "name": p.name, "source": source(&p.id)}))
                .collect();
            let errors: Vec<String> = errors.iter().map(ToString::to_string).collect();
            write_json(
                out,
                &serde_json::json!({"profiles": list, "errors": errors}),
            );
            if errors.is_empty() {
                EXIT_OK
            } else {
                EXIT_USAGE
            }
        }
        ProfilesAction::List { .. } => {
            for (p, _) in &all {
                let _ = writeln!(out, "{:<16} {:<48} {}", p.id, p.name, source(&p.id));
            }
            if errors.is_empty() {
                EXIT_OK
            } else {
                EXIT_USAGE
            }
        }
        // The profile's TOML text as loaded (comments kept), not a re-serialisation of it.
        ProfilesAction::Show { id, json, .. } => match all.iter().find(|(p, _)| p.id == id) {
            Some((p, text)) if json => {
                write_json(
                    out,
                    &serde_json::json!({"id": p.id, "name": p.name, "source": source(&p.id), "toml": text}),
                );
                EXIT_OK
            }
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
