//! Loose `major.minor.patch` versions as they appear in driver, runtime and package strings:
//! `4.20.0`, `v0.9.8`, `4.19.0-3` (Debian revision), `4.20.0+1`, `1:5.1.1-1` (epoch), `0.9.8 20240828`.

use std::fmt;

/// A numeric `major.minor.patch` version; a missing patch is 0. Ordered numerically.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
pub struct Version {
    /// First number.
    pub major: u32,
    /// Second number.
    pub minor: u32,
    /// Third number (0 when the string has only two).
    pub patch: u32,
}

impl Version {
    /// A version from its three numbers.
    pub const fn new(major: u32, minor: u32, patch: u32) -> Self {
        Version {
            major,
            minor,
            patch,
        }
    }

    /// Parses the first `N.N[.N]` found after an optional Debian epoch (`1:`) and `v` prefix.
    /// Returns `None` when the text holds no such number pair.
    pub fn parse_loose(text: &str) -> Option<Version> {
        let mut s = text.trim();
        if let Some((epoch, rest)) = s.split_once(':') {
            if !epoch.is_empty() && epoch.bytes().all(|b| b.is_ascii_digit()) {
                s = rest;
            }
        }
        let start = s.find(|c: char| c.is_ascii_digit())?;
        let s = &s[start..];
        let mut nums = [0u32; 3];
        let mut count = 0;
        for part in s.split('.') {
            let digits: String = part.chars().take_while(|c| c.is_ascii_digit()).collect();
            if digits.is_empty() {
                break;
            }
            nums[count] = digits.parse().ok()?;
            count += 1;
            if count == 3 || digits.len() != part.len() {
                break;
            }
        }
        if count < 2 {
            return None;
        }
        Some(Version::new(nums[0], nums[1], nums[2]))
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

impl std::str::FromStr for Version {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Version::parse_loose(s).ok_or_else(|| format!("not a version: {s:?}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_shapes_seen_on_boards() {
        let v = |s| Version::parse_loose(s);
        assert_eq!(v("4.20.0"), Some(Version::new(4, 20, 0)));
        assert_eq!(v("RKNPU driver: v0.9.8\n"), Some(Version::new(0, 9, 8)));
        assert_eq!(v("4.19.0-3"), Some(Version::new(4, 19, 0)));
        assert_eq!(v("4.20.0+1"), Some(Version::new(4, 20, 0)));
        assert_eq!(
            v("5:28.0.0-1~debian.13~trixie"),
            Some(Version::new(28, 0, 0))
        );
        assert_eq!(v("3.31.0+1-1"), Some(Version::new(3, 31, 0)));
        assert_eq!(v("0.9"), Some(Version::new(0, 9, 0)));
        assert_eq!(v("6.1.43-20-rk2312"), Some(Version::new(6, 1, 43)));
    }

    #[test]
    fn rejects_text_without_a_version() {
        assert_eq!(Version::parse_loose(""), None);
        assert_eq!(Version::parse_loose("unknown"), None);
        assert_eq!(Version::parse_loose("7"), None);
        assert_eq!(Version::parse_loose("99999999999.1"), None);
    }

    #[test]
    fn orders_numerically() {
        assert!(Version::new(0, 9, 10) > Version::new(0, 9, 8));
        assert!(Version::new(0, 8, 2) < Version::new(0, 9, 6));
    }
}
