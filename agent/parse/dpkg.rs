//! `/var/lib/dpkg/status`: one stanza per package (`Package:`, `Status:`, `Version:`, …),
//! stanzas separated by blank lines, continuation lines starting with a space.

/// Checks that `v` has the shape of a Debian version (deb-version(7)): an optional numeric
/// epoch and `:`, an upstream version that starts with a digit, then only `[A-Za-z0-9.+~-]`
/// (a revision after the last `-`), at most 100 bytes. A value that starts with `-` would reach
/// dpkg or apt as an option.
///
/// Errors: why `v` is no Debian version.
pub fn check_debian_version(v: &str) -> Result<(), String> {
    let bad = |why: &str| Err(format!("{:?} is not a Debian version: {why}", shown(v)));
    if v.is_empty() || v.len() > 100 {
        return bad("1 to 100 characters");
    }
    let rest = match v.split_once(':') {
        Some((epoch, rest)) if !epoch.is_empty() && epoch.bytes().all(|b| b.is_ascii_digit()) => {
            rest
        }
        Some(_) => return bad("an epoch is digits before one `:`"),
        None => v,
    };
    if !rest.starts_with(|c: char| c.is_ascii_digit()) {
        return bad("it starts with a digit (after an epoch)");
    }
    if !rest
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || ".+~-".contains(c))
    {
        return bad("only letters, digits and . + ~ - (one `:` after an epoch)");
    }
    Ok(())
}

/// `v` cut to 40 characters, control characters dropped (for an error message).
fn shown(v: &str) -> String {
    v.chars().filter(|c| !c.is_control()).take(40).collect()
}

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

    #[test]
    fn debian_versions_are_told_from_options_and_junk() {
        for ok in ["0.2.0-1", "1:2.3~rc1+deb12u1-4", "5.1.1", "0.2.0-1~bpo12+1"] {
            assert_eq!(super::check_debian_version(ok), Ok(()), "{ok}");
        }
        for bad in [
            "",
            "-Dh",
            "--help",
            "a1.0",
            "1.0 --option x",
            "1.0\n",
            ":1.0",
            "x:1.0",
            "1:-1",
            "1.0=2",
            "1.0/2",
            "1.0*",
            "1:2:3",
        ] {
            let e = super::check_debian_version(bad).unwrap_err();
            assert!(e.contains("is not a Debian version"), "{bad:?}: {e}");
        }
        assert!(super::check_debian_version(&"1".repeat(101)).is_err());
    }
}
