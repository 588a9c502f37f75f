//! Redaction of secrets (passwords, tokens, host names) from captured text.

use super::*;

/// Replaces personal details in text and paths.
pub struct Redactor {
    pub(super) literals: Vec<(String, String)>,
    pub(super) enabled: bool,
}

macro_rules! re {
    ($name:ident, $pat:expr) => {
        fn $name() -> &'static Regex {
            static R: std::sync::OnceLock<Regex> = std::sync::OnceLock::new();
            R.get_or_init(|| Regex::new($pat).expect("valid pattern"))
        }
    };
}
re!(re_mac, r"\b[0-9A-Fa-f]{2}(?::[0-9A-Fa-f]{2}){5}\b");
re!(
    re_ipv4,
    r"\b(?:(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\.){3}(?:25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\b"
);
re!(re_ipv6, r"\b[0-9A-Fa-f]{0,4}(?::[0-9A-Fa-f]{0,4}){2,7}\b");
re!(
    re_user,
    r#"(?i)((?:username|user)["']?\s*[=:]\s*["']?)[^\s"',&]+"#
);

impl Redactor {
    /// A redactor for the board under `root`: learns its host name, user names (`/etc/passwd`
    /// uid >= 1000), device-tree serial and machine id. `enabled = false` changes nothing.
    pub fn new(root: &SysRoot, enabled: bool) -> Self {
        let mut literals = Vec::new();
        if enabled {
            for p in ["/proc/sys/kernel/hostname", "/etc/hostname"] {
                if let Ok(h) = root.read_string(p) {
                    let h = h.trim().to_string();
                    if h.len() >= 2 && h != "localhost" {
                        literals.push((h, "redacted-host".to_string()));
                    }
                }
            }
            for p in [
                "/proc/device-tree/serial-number",
                "/sys/firmware/devicetree/base/serial-number",
            ] {
                if let Ok(b) = root.read(p) {
                    let s = crate::parse::devicetree::string(&b);
                    if s.len() >= 4 {
                        literals.push((s.clone(), "0".repeat(s.len())));
                    }
                }
            }
            if let Ok(m) = root.read_string("/etc/machine-id") {
                let m = m.trim().to_string();
                if m.len() >= 8 {
                    literals.push((m.clone(), "0".repeat(m.len())));
                }
            }
            if let Ok(pw) = root.read_string("/etc/passwd") {
                for l in pw.lines() {
                    let f: Vec<&str> = l.split(':').collect();
                    if let (Some(name), Some(uid)) = (f.first(), f.get(2)) {
                        let uid: u32 = uid.parse().unwrap_or(0);
                        if (1000..60000).contains(&uid) && name.len() >= 2 {
                            literals.push((name.to_string(), "user".to_string()));
                        }
                    }
                }
            }
            literals.sort_by_key(|(a, _)| std::cmp::Reverse(a.len()));
            literals.dedup();
        }
        Redactor { literals, enabled }
    }

    /// A board path with user and host names replaced (`/home/alice/x` -> `/home/user/x`).
    pub fn path(&self, p: &str) -> String {
        if !self.enabled {
            return p.to_string();
        }
        p.split('/')
            .map(|c| {
                self.literals
                    .iter()
                    .find(|(l, _)| l == c)
                    .map(|(_, r)| r.clone())
                    .unwrap_or_else(|| c.to_string())
            })
            .collect::<Vec<_>>()
            .join("/")
    }

    /// Text with every personal detail replaced.
    pub fn text(&self, t: &str) -> String {
        if !self.enabled {
            return t.to_string();
        }
        let mut out = t.to_string();
        for (l, r) in &self.literals {
            if out.contains(l.as_str()) {
                out = replace_word(&out, l, r);
            }
        }
        // Secrets by the status's rules; then what only a bundle hides (user names, addresses).
        out = crate::sys::redact::redact_text(&out);
        out = re_user().replace_all(&out, "${1}user").into_owned();
        out = re_mac().replace_all(&out, "00:00:00:00:00:00").into_owned();
        out = re_ipv4()
            .replace_all(&out, |c: &regex_lite::Captures<'_>| {
                let ip = &c[0];
                if ip.starts_with("127.") || ip == "0.0.0.0" {
                    ip.to_string()
                } else {
                    "192.0.2.0".to_string()
                }
            })
            .into_owned();
        out = re_ipv6()
            .replace_all(&out, |c: &regex_lite::Captures<'_>| {
                let ip = &c[0];
                // Addresses only: "::" compression or eight groups; not times or PCI addresses.
                let groups = ip.split(':').count();
                if ip == "::1" || !(ip.contains("::") || groups == 8) || ip.len() < 3 {
                    ip.to_string()
                } else {
                    "2001:db8::".to_string()
                }
            })
            .into_owned();
        out
    }

    /// A NUL-separated command line with secret option values replaced (the status's rules,
    /// [`crate::sys::redact::redact_argv`]), then personal details.
    pub fn cmdline(&self, raw: &[u8]) -> Vec<u8> {
        let args: Vec<String> = raw
            .split(|b| *b == 0)
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        let out: Vec<String> = crate::sys::redact::redact_argv(&args)
            .iter()
            .map(|a| self.text(a))
            .collect();
        out.join("\0").into_bytes()
    }
}

/// Replaces `word` where it is not part of a longer identifier.
pub(super) fn replace_word(text: &str, word: &str, with: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    while let Some(i) = rest.find(word) {
        let before = rest[..i].chars().next_back();
        let after = rest[i + word.len()..].chars().next();
        out.push_str(&rest[..i]);
        if before.is_some_and(ident) || after.is_some_and(ident) {
            out.push_str(word);
        } else {
            out.push_str(with);
        }
        rest = &rest[i + word.len()..];
    }
    out.push_str(rest);
    out
}
