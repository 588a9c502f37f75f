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
