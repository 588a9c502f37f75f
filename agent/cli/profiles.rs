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
    },
    /// A profile's TOML text, as loaded (the built-in file or the profiles.d one replacing it).
    Show {
        /// Profile id.
        id: String,
        /// Read /etc/npu-agent/profiles.d under DIR.
        #[arg(long, value_name = "DIR", default_value = "/")]
        root: PathBuf,
    },
}

pub(super) fn profiles(action: ProfilesAction, out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    let root_dir = match &action {
        ProfilesAction::List { root } | ProfilesAction::Show { root, .. } => root.clone(),
    };
    if let Err(code) = require_root_dir(&root_dir, err) {
        return code;
    }
    let root = SysRoot::new(&root_dir);
    let (all, errors) = profile::load_all_with_text(&root);
    for e in &errors {
        let _ = writeln!(err, "npu-agent: {e}");
    }
    match action {
        ProfilesAction::List { .. } => {
            for (p, _) in &all {
                let source = if profile::BUILTIN
                    .iter()
                    .any(|(n, _)| *n == format!("{}.toml", p.id))
                    && !root.exists(&format!("{}/{}.toml", profile::PROFILES_DIR, p.id))
                {
                    "built-in".to_string()
                } else {
                    profile::PROFILES_DIR.to_string()
                };
                let _ = writeln!(out, "{:<16} {:<48} {}", p.id, p.name, source);
            }
            if errors.is_empty() {
                EXIT_OK
            } else {
                EXIT_USAGE
            }
        }
        // The profile's TOML text as loaded (comments kept), not a re-serialisation of it.
        ProfilesAction::Show { id, .. } => match all.iter().find(|(p, _)| p.id == id) {
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
