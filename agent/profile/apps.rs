//! The app catalog (`catalog/apps.toml`, plus a site's own apps in
//! `/etc/npu-agent/apps.d/*.toml` under the root): the apps that use these NPUs, how each is
//! recognised as a process, unit or container, and where it logs.

use super::ProfileError;
use crate::root::SysRoot;
use serde::Deserialize;

/// The catalog compiled into the binary.
pub const CATALOG: &str = include_str!("../../catalog/apps.toml");

/// Directory (under the root) whose `*.toml` files add a site's own apps (same format).
pub const APPS_DIR: &str = "/etc/npu-agent/apps.d";

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct AppsFile {
    schema: u32,
    #[serde(default)]
    app: Vec<AppSpec>,
}

/// One app.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AppSpec {
    /// Stable id (`frigate`).
    pub id: String,
    /// Name for people.
    pub name: String,
    /// Process names (`comm` or argv[0]'s basename; a trailing `*` matches a prefix).
    #[serde(default)]
    pub processes: Vec<String>,
    /// Substrings of the command line.
    #[serde(default)]
    pub cmdline: Vec<String>,
    /// Substrings of a container's image.
    #[serde(default)]
    pub images: Vec<String>,
    /// Substrings of a container's name.
    #[serde(default)]
    pub containers: Vec<String>,
    /// systemd units.
    #[serde(default)]
    pub units: Vec<String>,
    /// Log files on the host (`*` in the last component).
    #[serde(default)]
    pub logs: Vec<String>,
    /// Words that mark the lines of the app's NPU part.
    #[serde(default)]
    pub npu_context: Vec<String>,
    /// Its NPU runtime comes inside its image.
    #[serde(default)]
    pub bundles_runtime: bool,
}

/// `pattern` (a trailing `*` matches a prefix) against `text`.
fn name_matches(pattern: &str, text: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => text.starts_with(prefix),
        None => text == pattern,
    }
}

impl AppSpec {
    /// True when a process with this `comm` and command line is this app.
    pub fn matches_process(&self, comm: &str, cmdline: &str) -> bool {
        let argv0 = cmdline
            .split(' ')
            .next()
            .map(|a| a.rsplit('/').next().unwrap_or(a))
            .unwrap_or("");
        self.processes
            .iter()
            .any(|p| name_matches(p, comm) || name_matches(p, argv0))
            || self
                .cmdline
                .iter()
                .any(|c| !c.is_empty() && cmdline.contains(c.as_str()))
    }

    /// True when a container with this name and image is this app.
    pub fn matches_container(&self, name: &str, image: &str) -> bool {
        let (name, image) = (name.to_ascii_lowercase(), image.to_ascii_lowercase());
        self.containers
            .iter()
            .any(|c| !c.is_empty() && name.contains(&c.to_ascii_lowercase()))
            || self
                .images
                .iter()
                .any(|i| !i.is_empty() && image.contains(&i.to_ascii_lowercase()))
    }
}

/// Parses an apps file; `file` names it in errors.
///
/// Errors: TOML that does not parse, an unknown key, a schema other than 1, an app without id.
pub fn parse_apps(file: &str, text: &str) -> Result<Vec<AppSpec>, ProfileError> {
    let err = |line: Option<usize>, message: String| ProfileError {
        file: file.to_string(),
        line,
        message,
    };
    let raw: AppsFile = super::parse_toml(file, text)?;
    if raw.schema != 1 {
        return Err(err(None, format!("unsupported schema {}", raw.schema)));
    }
    if let Some(a) = raw.app.iter().find(|a| a.id.trim().is_empty()) {
        return Err(err(None, format!("an app without id ({:?})", a.name)));
    }
    Ok(raw.app)
}

/// The built-in apps alone, parsed once (empty, and logged, if the catalog does not parse).
pub fn builtin() -> &'static [AppSpec] {
    static A: std::sync::OnceLock<Vec<AppSpec>> = std::sync::OnceLock::new();
    A.get_or_init(|| {
        parse_apps("catalog/apps.toml", CATALOG).unwrap_or_else(|e| {
            tracing::error!("app catalog: {e}");
            Vec::new()
        })
    })
}

/// The built-in apps plus the site's (`/etc/npu-agent/apps.d/*.toml` under `root`; one with the
/// id of a built-in app replaces it), and the files that failed.
pub fn load_apps(root: &SysRoot) -> (Vec<AppSpec>, Vec<ProfileError>) {
    let mut errors = Vec::new();
    let mut apps = parse_apps("catalog/apps.toml", CATALOG).unwrap_or_else(|e| {
        errors.push(e);
        Vec::new()
    });
    for name in root
        .list_dir(APPS_DIR)
        .unwrap_or_default()
        .iter()
        .filter(|n| n.ends_with(".toml"))
    {
        let path = format!("{APPS_DIR}/{name}");
        let parsed = super::read_site_toml(root, &path).and_then(|t| parse_apps(&path, &t));
        match parsed {
            Ok(site) => {
                for a in site {
                    apps.retain(|b| b.id != a.id);
                    apps.push(a);
                }
            }
            Err(e) => errors.push(e),
        }
    }
    (apps, errors)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_catalog_loads_and_matches() {
        let apps = parse_apps("catalog/apps.toml", CATALOG).unwrap();
        let frigate = apps.iter().find(|a| a.id == "frigate").unwrap();
        assert!(frigate.matches_container("frigate", "ghcr.io/blakeblackshear/frigate:0.16.0-rk"));
        assert!(frigate.matches_container("addon_ccab4aaf_frigate", ""));
        assert!(frigate.matches_process("frigate.detector", ""));
        assert!(!frigate.matches_process("python3", "python3 -m viseron"));
        let viseron = apps.iter().find(|a| a.id == "viseron").unwrap();
        assert!(viseron.matches_process("python3", "python3 -m viseron"));
    }

    #[test]
    fn a_site_adds_and_replaces_apps() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(d.path().join("etc/npu-agent/apps.d")).unwrap();
        std::fs::write(
            d.path().join("etc/npu-agent/apps.d/site.toml"),
            "schema = 1\n[[app]]\nid = \"line-counter\"\nname = \"Line counter\"\nprocesses = [\"counter\"]\nlogs = [\"/srv/counter/log.txt\"]\n",
        )
        .unwrap();
        std::fs::write(
            d.path().join("etc/npu-agent/apps.d/bad.toml"),
            "schema = 1\n[[app]]\nid = \"x\"\nname = \"X\"\nimage = \"typo\"\n",
        )
        .unwrap();
        let (apps, errors) = load_apps(&SysRoot::new(d.path()));
        assert!(apps.iter().any(|a| a.id == "line-counter"));
        assert!(apps.iter().any(|a| a.id == "frigate"));
        assert_eq!(errors.len(), 1);
        assert!(
            errors[0].to_string().contains("unknown key `image`"),
            "{}",
            errors[0]
        );
        assert_eq!(errors[0].line, Some(5), "{}", errors[0]);
    }
}
