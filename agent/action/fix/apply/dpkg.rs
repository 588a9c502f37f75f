//! The dpkg side of the package guard: is the database locked by a running apt or dpkg, and is
//! any package left half-way (`dpkg --audit` territory) in `/var/lib/dpkg/status`.

use crate::root::SysRoot;
use serde::Serialize;

/// The dpkg lock files: apt's front-end lock first, then dpkg's own (both `fcntl` locks).
pub const LOCK_FILES: &[&str] = &["/var/lib/dpkg/lock-frontend", "/var/lib/dpkg/lock"];
/// The dpkg status database.
pub const STATUS: &str = "/var/lib/dpkg/status";

/// A package dpkg left half-way through an operation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Interrupted {
    /// Package name.
    pub name: String,
    /// Its version.
    pub version: String,
    /// The state word of `Status:` (`half-configured`, `unpacked`, `half-installed`), with
    /// ` reinst-required` when dpkg marked it so.
    pub state: String,
}

/// One package's `Status:` as dpkg has it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PackageState {
    /// Package name.
    pub name: String,
    /// Its version.
    pub version: String,
    /// `Status:` (`install ok installed`, `hold ok installed`, `deinstall ok config-files`).
    pub status: String,
}

/// dpkg's journal of status changes not yet folded into [`STATUS`]: while dpkg runs, each change
/// (unpacked, half-configured, installed) is a numbered file here, applied in order.
pub const UPDATES_DIR: &str = "/var/lib/dpkg/updates";
/// Journal files read at most (dpkg folds them into the status file every few hundred).
const UPDATES_MAX: usize = 4096;

/// Every package's state as dpkg itself reads it: [`STATUS`], then each numbered journal file of
/// [`UPDATES_DIR`] in order, a later stanza of a package replacing the earlier one. While dpkg
/// runs (a maintainer script, say) the status file alone is stale: it holds the last checkpoint.
///
/// Errors: the status file cannot be read.
pub fn read_states(root: &SysRoot) -> Result<Vec<PackageState>, String> {
    let text = root.read_string(STATUS).map_err(|e| e.to_string())?;
    let mut states = parse_states(&text);
    let names = root
        .list_dir_max(UPDATES_DIR, UPDATES_MAX)
        .map(|(n, _)| n)
        .unwrap_or_default();
    for name in names
        .iter()
        .filter(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
    {
        let Ok(t) = root.read_string(&format!("{UPDATES_DIR}/{name}")) else {
            continue;
        };
        for p in parse_states(&t) {
            match states.iter_mut().find(|s| s.name == p.name) {
                Some(s) => *s = p,
                None => states.push(p),
            }
        }
    }
    Ok(states)
}

/// Every stanza's name, version and `Status:` (continuation lines and other fields skipped).
pub fn parse_states(text: &str) -> Vec<PackageState> {
    let mut out = Vec::new();
    for stanza in text.split("\n\n") {
        let (mut name, mut version, mut status) = (None, String::new(), String::new());
        for line in stanza.lines() {
            let line = line.trim_end_matches('\r');
            if let Some(v) = line.strip_prefix("Package:") {
                name = Some(v.trim().to_string());
            } else if let Some(v) = line.strip_prefix("Version:") {
                version = v.trim().to_string();
            } else if let Some(v) = line.strip_prefix("Status:") {
                status = v.split_whitespace().collect::<Vec<_>>().join(" ");
            }
        }
        if let Some(name) = name {
            out.push(PackageState {
                name,
                version,
                status,
            });
        }
    }
    out
}

/// Packages in `unpacked`, `half-configured` or `half-installed` state, or with dpkg's
/// `reinst-required` flag: an earlier run was cut off, and apt would try to finish it first.
pub fn interrupted(text: &str) -> Vec<Interrupted> {
    parse_states(text)
        .into_iter()
        .filter_map(|p| {
            let words: Vec<&str> = p.status.split_whitespace().collect();
            let flag = words.get(1).copied().unwrap_or("");
            let state = words.get(2).copied().unwrap_or("");
            let half = matches!(state, "unpacked" | "half-configured" | "half-installed");
            let reinst = flag == "reinstreq" || flag == "reinst-required";
            (half || reinst).then(|| Interrupted {
                name: p.name,
                version: p.version,
                state: if reinst {
                    format!("{state} reinst-required")
                } else {
                    state.to_string()
                },
            })
        })
        .collect()
}

/// Reads the status database under `root` and lists interrupted packages.
///
/// Errors: the read error (a missing database means no dpkg here).
pub fn read_interrupted(root: &SysRoot) -> Result<Vec<Interrupted>, String> {
    let text = root.read_string(STATUS).map_err(|e| e.to_string())?;
    Ok(interrupted(&text))
}

/// The first dpkg lock file another process holds, as a sentence; `None` when none is held.
///
/// Each lock file is opened read-only (never created, never through a symlink in its last
/// component) and probed with a non-blocking shared `fcntl` lock, released at once: a process
/// holding the write lock (apt, dpkg, unattended-upgrades) makes the probe fail. A lock file that
/// is missing is not held.
pub fn held_lock(root: &SysRoot) -> Option<String> {
    use rustix::fs::{fcntl_lock, FlockOperation};
    use std::os::unix::fs::OpenOptionsExt;
    for path in LOCK_FILES {
        let Ok(host) = root.entry_path(path) else {
            continue;
        };
        let file = match std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(
                (rustix::fs::OFlags::NOFOLLOW | rustix::fs::OFlags::NONBLOCK).bits() as i32,
            )
            .open(&host)
        {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(e) => return Some(format!("{path} cannot be opened to check the lock: {e}")),
        };
        match fcntl_lock(&file, FlockOperation::NonBlockingLockShared) {
            Ok(()) => {
                let _ = fcntl_lock(&file, FlockOperation::NonBlockingUnlock);
            }
            Err(e) if e == rustix::io::Errno::AGAIN || e == rustix::io::Errno::ACCESS => {
                return Some(format!(
                    "dpkg is locked: another process holds {path} (apt, dpkg or unattended-upgrades is running); try again when it is done"
                ));
            }
            Err(e) => return Some(format!("{path}: the lock cannot be checked: {e}")),
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// dpkg mid-run: the status file holds the checkpoint (`unpacked`), the journal the later
    /// `half-configured`; the journal wins, in numeric order.
    #[test]
    fn the_journal_of_a_running_dpkg_overrides_the_status_file() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join("var/lib/dpkg/updates");
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(
            dir.path().join("var/lib/dpkg/status"),
            "Package: npu-agent\nStatus: install ok unpacked\nVersion: 2\n\nPackage: a\nStatus: install ok installed\nVersion: 1\n\n",
        )
        .unwrap();
        std::fs::write(
            d.join("0000"),
            "Package: npu-agent\nStatus: install ok unpacked\nVersion: 2\n\n",
        )
        .unwrap();
        std::fs::write(
            d.join("0001"),
            "Package: npu-agent\nStatus: install ok half-configured\nVersion: 2\n\n",
        )
        .unwrap();
        std::fs::write(
            d.join("tmp.i"),
            "Package: npu-agent\nStatus: install ok installed\nVersion: 9\n\n",
        )
        .unwrap();
        let states = read_states(&SysRoot::new(dir.path())).unwrap();
        let agent = states.iter().find(|p| p.name == "npu-agent").unwrap();
        assert_eq!(
            (agent.status.as_str(), agent.version.as_str()),
            ("install ok half-configured", "2")
        );
        assert_eq!(states.len(), 2);
    }

    #[test]
    fn interrupted_states_are_named() {
        let text = "Package: hailort\nStatus: install ok half-configured\nVersion: 4.23.0\nDescription: x\n y\n\nPackage: ok\nStatus: hold ok installed\nVersion: 1\n\nPackage: cut\nStatus: install reinstreq half-installed\nVersion: 2\n\nPackage: u\nStatus: install ok unpacked\nVersion: 3\n\nPackage: gone\nStatus: deinstall ok config-files\nVersion: 4\n";
        let i = interrupted(text);
        let names: Vec<(&str, &str)> = i
            .iter()
            .map(|p| (p.name.as_str(), p.state.as_str()))
            .collect();
        assert_eq!(
            names,
            [
                ("hailort", "half-configured"),
                ("cut", "half-installed reinst-required"),
                ("u", "unpacked")
            ]
        );
        assert_eq!(i[0].version, "4.23.0");
        assert!(interrupted("").is_empty());
        assert!(interrupted("garbage\n\n\n").is_empty());
        let s = parse_states(text);
        assert_eq!(s[1].status, "hold ok installed");
    }

    #[test]
    fn a_lock_nobody_holds_is_free_and_a_missing_one_too() {
        let dir = tempfile::tempdir().unwrap();
        let root = SysRoot::new(dir.path());
        assert_eq!(held_lock(&root), None);
        std::fs::create_dir_all(dir.path().join("var/lib/dpkg")).unwrap();
        std::fs::write(dir.path().join("var/lib/dpkg/lock"), "").unwrap();
        assert_eq!(held_lock(&root), None);
    }
}
