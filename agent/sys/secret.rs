//! [`Secret`]: a text value that never reaches a log line, a status or an error message by
//! accident. Its `Debug` and `Display` print `<redacted>`; the value is read only through
//! [`Secret::expose`], at the one place that hands it to the broker or writes it to its file.

use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;
use std::fmt;

/// A password, private key or token. See the module docs.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct Secret(String);

impl Secret {
    /// Wraps a value.
    pub fn new(value: impl Into<String>) -> Secret {
        Secret(value.into())
    }

    /// The value itself: for the broker login or the secret file only.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// The contents of a secret file (a password file, a PEM key), invalid UTF-8 replaced.
    pub fn from_file(bytes: &[u8]) -> Secret {
        Secret(String::from_utf8_lossy(bytes).into_owned())
    }

    /// A password file's contents without the line end an editor leaves (`\n`, `\r\n`).
    pub fn password_from_file(bytes: &[u8]) -> Secret {
        let mut s = Secret::from_file(bytes);
        let len = s.0.trim_end_matches(['\n', '\r']).len();
        s.0.truncate(len);
        s
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

struct SecretVisitor;

impl<'de> Visitor<'de> for SecretVisitor {
    type Value = Secret;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a quoted string")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Secret, E> {
        Ok(Secret(v.to_string()))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Secret, E> {
        Ok(Secret(v))
    }

    // Every other type is refused without quoting the value (serde's default message would).
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Secret, E> {
        Err(E::custom(
            "a secret must be a quoted string (the value is not shown)",
        ))
    }

    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Secret, E> {
        Err(E::custom(
            "a secret must be a quoted string (the value is not shown)",
        ))
    }

    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Secret, E> {
        Err(E::custom(
            "a secret must be a quoted string (the value is not shown)",
        ))
    }

    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Secret, E> {
        Err(E::custom(
            "a secret must be a quoted string (the value is not shown)",
        ))
    }

    fn visit_seq<A: de::SeqAccess<'de>>(self, _: A) -> Result<Secret, A::Error> {
        Err(de::Error::custom(
            "a secret must be a quoted string (the value is not shown)",
        ))
    }

    fn visit_map<A: de::MapAccess<'de>>(self, _: A) -> Result<Secret, A::Error> {
        Err(de::Error::custom(
            "a secret must be a quoted string (the value is not shown)",
        ))
    }
}

impl<'de> Deserialize<'de> for Secret {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Secret, D::Error> {
        d.deserialize_any(SecretVisitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Deserialize)]
    struct T {
        #[allow(dead_code)]
        pw: Secret,
    }

    #[test]
    fn never_printed() {
        let s = Secret::new("hunter2");
        assert_eq!(format!("{s} {s:?}"), "<redacted> <redacted>");
        assert_eq!(s.expose(), "hunter2");
        let t: T = toml::from_str("pw = \"hunter2\"").unwrap();
        assert!(!format!("{t:?}").contains("hunter2"));
        for bad in [
            "pw = 918273645",
            "pw = 3.14159",
            "pw = [77, 67, 52]",
            "pw = true",
        ] {
            let e = toml::from_str::<T>(bad).unwrap_err().to_string();
            assert!(e.contains("quoted string"), "{e}");
            for v in ["918273645", "3.14159", "77, 67"] {
                assert!(!e.lines().next().unwrap_or("").contains(v), "{e}");
            }
        }
    }

    /// The link's credentials and the mTLS key are [`Secret`]s from the file to the broker
    /// login: a `{:?}` of what carries them shows no value (this would not compile with the
    /// plain `String` / `Vec<u8>` they used to be).
    #[test]
    fn link_credentials_and_client_key_are_secrets_end_to_end() {
        let pw = Secret::password_from_file(b"pw-LINK-0042\r\n");
        assert_eq!(pw.expose(), "pw-LINK-0042");
        assert_eq!(Secret::password_from_file(b"a b\n\n").expose(), "a b");
        let creds: Option<(String, Secret)> = Some(("agent".into(), pw));
        let shown = format!("{creds:?}");
        assert!(
            shown.contains("agent") && !shown.contains("pw-LINK"),
            "{shown}"
        );
        fn link_password(o: &crate::mqtt::link::LinkOptions) -> Option<&Secret> {
            o.credentials.as_ref().map(|(_, p)| p)
        }
        fn client_key(t: &crate::mqtt::TlsFiles) -> Option<&Secret> {
            t.client.as_ref().map(|(_, k)| k)
        }
        let _ = (link_password, client_key);
        let key = Secret::from_file(b"-----BEGIN PRIVATE KEY-----\nMC4CAQ\n");
        // A key that is not a key: the error names the file, never its content.
        let e = crate::mqtt::tls_config(&crate::mqtt::TlsFiles {
            ca_pem: Vec::new(),
            client: Some((Vec::new(), key)),
        })
        .err()
        .unwrap_or_default();
        assert!(!e.contains("MC4CAQ"), "{e}");
    }
}

/// What a redacted value is replaced with.
pub const REDACTED: &str = "<redacted>";

/// True for an option or variable name whose value is a secret: `--api-key`, `--hf-token`,
/// anything with `token`, `password`, `passwd`, `passphrase`, `secret`, `auth`, `bearer` or
/// `cookie` in it, `pass`, `pwd`, `psk` or `pw` alone or at the end (`--db-pass`, `wifi_psk`),
/// or ending in `key` (`--ssl-key`... but not `--key-file`: a path). Case and `-`/`_` do not
/// matter.
pub fn is_secret_name(name: &str) -> bool {
    let n = name
        .trim_start_matches('-')
        .to_ascii_lowercase()
        .replace('_', "-");
    if n.is_empty() {
        return false;
    }
    [
        "token",
        "password",
        "passwd",
        "secret",
        "auth",
        "credential",
        "api-key",
        "apikey",
        "passphrase",
        "bearer",
        "cookie",
    ]
    .iter()
    .any(|w| n.contains(w))
        || n == "key"
        || n.ends_with("-key")
        || ["pass", "pwd", "psk", "pw"]
            .iter()
            .any(|w| n == *w || n.ends_with(&format!("-{w}")))
        // llama.cpp's short form of --hf-token.
        || n == "hft"
}

/// A word with the credentials of any URL in it replaced: the `user:password@` part
/// (`https://u:pw@host/m.gguf` -> `https://<redacted>@host/m.gguf`) and the value of a query
/// parameter with a secret name (`?token=...`). Other text is kept as it is.
pub fn redact_url(word: &str) -> String {
    let Some(scheme_end) = word.find("://") else {
        return word.to_string();
    };
    let (head, rest) = word.split_at(scheme_end + 3);
    let auth_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(auth_end);
    let mut out = head.to_string();
    match authority.rfind('@') {
        Some(at) => {
            out.push_str(REDACTED);
            out.push_str(&authority[at..]);
        }
        None => out.push_str(authority),
    }
    match tail.split_once('?') {
        Some((path, query)) => {
            out.push_str(path);
            out.push('?');
            let (query, frag) = match query.split_once('#') {
                Some((q, f)) => (q, Some(f)),
                None => (query, None),
            };
            let pairs: Vec<String> = query
                .split('&')
                .map(|kv| match kv.split_once('=') {
                    Some((k, _)) if is_secret_name(k) => format!("{k}={REDACTED}"),
                    _ => kv.to_string(),
                })
                .collect();
            out.push_str(&pairs.join("&"));
            if let Some(f) = frag {
                out.push('#');
                out.push_str(f);
            }
        }
        None => out.push_str(tail),
    }
    out
}

/// A command line with every secret value replaced by [`REDACTED`]: the word after a secret
/// option (`--api-key SECRET`), the value of `--api-key=SECRET`, and `NAME=SECRET` words (an
/// `env HF_TOKEN=... llama-server` prefix). Everything else is kept as it is.
pub fn redact_argv(argv: &[String]) -> Vec<String> {
    let mut out = Vec::with_capacity(argv.len());
    let mut hide_next = false;
    for word in argv {
        if hide_next {
            hide_next = false;
            out.push(REDACTED.to_string());
            continue;
        }
        // `NAME=VALUE` (an option or a variable; a URL's query is left to `redact_url`).
        if let Some((name, _)) = word.split_once('=').filter(|(n, _)| !n.contains("://")) {
            if is_secret_name(name) {
                out.push(format!("{name}={REDACTED}"));
                continue;
            }
        } else if word.starts_with('-') && is_secret_name(word) {
            hide_next = true;
        }
        out.push(super::redact::redact_text(word));
    }
    out
}

#[cfg(test)]
mod redact_tests {
    use super::*;

    fn v(s: &str) -> Vec<String> {
        s.split(' ').map(str::to_string).collect()
    }

    #[test]
    fn command_lines_lose_their_secrets() {
        let argv = v("env HF_TOKEN=hf_abc llama-server -m /m.gguf --api-key sk-123 --hf-token=hf_def \
                      --ssl-key-file /k.pem --db-password pw1 --client-secret s2 -ngl 99 --ssl-key kk");
        let r = redact_argv(&argv).join(" ");
        for s in ["hf_abc", "sk-123", "hf_def", "pw1", "s2", " kk"] {
            assert!(!r.contains(s), "{s} in {r}");
        }
        assert!(r.contains("-m /m.gguf") && r.contains("-ngl 99"), "{r}");
        assert!(
            r.contains("--ssl-key-file /k.pem"),
            "a key file path is not a secret: {r}"
        );
        assert!(r.contains("--api-key <redacted>"), "{r}");
    }

    /// URL credentials and llama.cpp's `-hft` never survive; the host and path do.
    #[test]
    fn urls_and_short_token_options_lose_their_secrets() {
        let argv = v(
            "llama-server -mu https://bob:pw9xq@models.example/q4.gguf?token=tk7z&x=1 \
                      -hf org/repo -hft hf_short --model-url=http://u2:p2zz@h/m.gguf",
        );
        let r = redact_argv(&argv).join(" ");
        for s in ["pw9xq", "bob", "tk7z", "hf_short", "p2zz", "u2:"] {
            assert!(!r.contains(s), "{s} in {r}");
        }
        assert!(
            r.contains("@models.example/q4.gguf?token=<redacted>&x=1"),
            "{r}"
        );
        assert!(r.contains("-hf org/repo"), "{r}");
        assert_eq!(redact_url("no url here"), "no url here");
        assert_eq!(redact_url("https://h/p"), "https://h/p");
    }
}
