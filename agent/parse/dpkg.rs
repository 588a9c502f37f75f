//! `/var/lib/dpkg/status`: one stanza per package (`Package:`, `Status:`, `Version:`, …),
//! stanzas separated by blank lines, continuation lines starting with a space.

/// The installation state from the third word of `Status:` (dpkg-query(1)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum DpkgState {
    /// `installed` (`ii` in `dpkg -l`).
    Installed,
    /// `config-files` (`rc`): removed, conffiles left; history only.
    ConfigFiles,
    /// `unpacked`, `half-configured`, `half-installed`, `triggers-*`: an interrupted install.
    Partial,
    /// `not-installed` or anything else.
    NotInstalled,
}

/// One package stanza.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct DpkgPackage {
    /// `Package:`.
    pub name: String,
    /// `Version:` (may be empty for `not-installed`).
    pub version: String,
    /// Parsed `Status:`.
    pub state: DpkgState,
    /// `Architecture:`.
    pub arch: String,
    /// 1-based line of the `Package:` field in the file.
    pub line: usize,
}

impl DpkgPackage {
    /// True for `install ok installed` and the like (`ii`, `hi`).
    pub fn is_installed(&self) -> bool {
        self.state == DpkgState::Installed
    }
}

fn state_of(status: &str) -> DpkgState {
    match status.split_whitespace().nth(2) {
        Some("installed") => DpkgState::Installed,
        Some("config-files") => DpkgState::ConfigFiles,
        Some(
            "unpacked" | "half-configured" | "half-installed" | "triggers-awaited"
            | "triggers-pending",
        ) => DpkgState::Partial,
        _ => DpkgState::NotInstalled,
    }
}

/// Parses the dpkg status database. Stanzas without `Package:` are skipped; an input with no
/// stanza at all is an error (a truncated or foreign file).
pub fn parse_dpkg_status(text: &str) -> Result<Vec<DpkgPackage>, String> {
    let mut out = Vec::new();
    let mut cur: Option<DpkgPackage> = None;
    let mut status = String::new();
    let flush = |cur: &mut Option<DpkgPackage>, status: &mut String, out: &mut Vec<DpkgPackage>| {
        if let Some(mut p) = cur.take() {
            p.state = state_of(status);
            out.push(p);
        }
        status.clear();
    };
    for (i, line) in text.lines().enumerate() {
        let line = line.trim_end_matches('\r');
        if line.trim().is_empty() {
            flush(&mut cur, &mut status, &mut out);
            continue;
        }
        // Only four fields matter; skip continuation lines and other fields cheaply.
        if !matches!(line.as_bytes().first(), Some(b'P' | b'S' | b'V' | b'A')) {
            continue;
        }
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        match key {
            "Package" => {
                flush(&mut cur, &mut status, &mut out);
                cur = Some(DpkgPackage {
                    name: value.to_string(),
                    version: String::new(),
                    state: DpkgState::NotInstalled,
                    arch: String::new(),
                    line: i + 1,
                });
            }
            "Status" => status = value.to_string(),
            "Version" => {
                if let Some(p) = cur.as_mut() {
                    p.version = value.to_string();
                }
            }
            "Architecture" => {
                if let Some(p) = cur.as_mut() {
                    p.arch = value.to_string();
                }
            }
            _ => {}
        }
    }
    flush(&mut cur, &mut status, &mut out);
    if out.is_empty() && !text.trim().is_empty() {
        return Err("no `Package:` stanza".into());
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_states_and_versions() {
        let text = "Package: h10-hailort\nStatus: install ok installed\nArchitecture: arm64\nVersion: 5.1.1\nDescription: x\n continued\n\nPackage: hailort\nStatus: deinstall ok config-files\nVersion: 4.23.0\n\nPackage: hailo-dkms\nStatus: install ok unpacked\nVersion: 4.20.0\n";
        let p = parse_dpkg_status(text).unwrap();
        assert_eq!(p.len(), 3);
        assert!(p[0].is_installed());
        assert_eq!(p[0].version, "5.1.1");
        assert_eq!(p[1].state, DpkgState::ConfigFiles);
        assert_eq!(p[1].line, 8);
        assert_eq!(p[2].state, DpkgState::Partial);
    }

    #[test]
    fn empty_is_empty_and_garbage_is_an_error() {
        assert_eq!(parse_dpkg_status("").unwrap(), vec![]);
        assert!(parse_dpkg_status("\u{0}\u{1}garbage\n").is_err());
    }
}
