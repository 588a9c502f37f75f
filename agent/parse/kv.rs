//! `KEY=value` files: `/etc/os-release`, `/etc/armbian-release`, and the `key=value` boot
//! environments (`armbianEnv.txt`, `orangepiEnv.txt`). Quotes around values are removed;
//! comments and lines without `=` are skipped. When a key repeats, the last one wins (as with
//! U-Boot's `env import`), and every occurrence is kept with its 1-based line number.

/// One `key=value` line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KvEntry {
    /// Key, trimmed.
    pub key: String,
    /// Value with surrounding quotes removed; a trailing `\r` (CRLF file) is dropped.
    pub value: String,
    /// 1-based line number.
    pub line: usize,
}

/// All `key=value` lines of `text`, in file order.
pub fn parse_kv(text: &str) -> Vec<KvEntry> {
    let mut out = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim_end_matches('\r').trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let Some((k, v)) = line.split_once('=') else {
            continue;
        };
        let key = k.trim();
        if key.is_empty() || key.contains(char::is_whitespace) {
            continue;
        }
        let v = v.trim();
        let value = v
            .strip_prefix('"')
            .and_then(|s| s.strip_suffix('"'))
            .or_else(|| v.strip_prefix('\'').and_then(|s| s.strip_suffix('\'')))
            .unwrap_or(v);
        out.push(KvEntry {
            key: key.to_string(),
            value: value.to_string(),
            line: i + 1,
        });
    }
    out
}

/// The winning (last) value of `key`, if any.
pub fn last<'a>(entries: &'a [KvEntry], key: &str) -> Option<&'a KvEntry> {
    entries.iter().rev().find(|e| e.key == key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_os_release_and_armbian_env() {
        let e = parse_kv(
            "PRETTY_NAME=\"Debian GNU/Linux 13 (trixie)\"\n# c\nID=debian\r\nbad line\n=x\n",
        );
        assert_eq!(e.len(), 2);
        assert_eq!(e[0].value, "Debian GNU/Linux 13 (trixie)");
        assert_eq!(e[1].value, "debian");
        assert_eq!(e[1].line, 3);
    }

    #[test]
    fn last_definition_wins() {
        let e = parse_kv("extraargs=cma=128M\nverbosity=1\nextraargs=cma=256M\n");
        let w = last(&e, "extraargs").unwrap();
        assert_eq!(w.value, "cma=256M");
        assert_eq!(w.line, 3);
    }
}
