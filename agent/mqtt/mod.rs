//! MQTT: topics, the command gate, and the connection (one task owns and only polls the rumqttc
//! event loop; everything else publishes with non-blocking `try_*` calls).

pub mod board_sig;
pub mod chunks;
pub mod command;
pub mod ed25519;
pub mod ha;
pub mod incoming;
pub mod link;
pub use crate::model::topics;

use std::sync::Arc;

/// A broker address from an `mqtt://host[:port]` or `mqtts://host[:port]` URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerUrl {
    /// Host name or IP address.
    pub host: String,
    /// Port (1883 / 8883 by default).
    pub port: u16,
    /// TLS requested (`mqtts`).
    pub tls: bool,
}

/// The broker URL as it may be printed or logged: user info (`user:password@`) replaced by
/// `<redacted>@`, whatever the scheme. Credentials belong in `username` / `password_file`.
pub fn redact_url(url: &str) -> String {
    let (scheme, rest) = match url.split_once("://") {
        Some((s, r)) => (format!("{s}://"), r),
        None => (String::new(), url),
    };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    match authority.rsplit_once('@') {
        Some((_, host)) => format!("{scheme}<redacted>@{host}{tail}"),
        None => url.to_string(),
    }
}

/// Parses a broker URL. Only `mqtt` and `mqtts` schemes; no user info or path. Errors quote the
/// URL with any user info redacted ([`redact_url`]).
pub fn parse_url(url: &str) -> Result<BrokerUrl, String> {
    parse_url_quiet(url).map_err(|e| format!("{:?}: {e}", redact_url(url)))
}

/// A broker list: one URL, or several separated by commas (`mqtt://a:1883,mqtts://b:8883`, the
/// nodes of a cluster, tried in order and in turn), each parsed as [`parse_url`] does.
///
/// Errors: the first URL that does not parse (quoted redacted).
pub fn parse_urls(list: &str) -> Result<Vec<BrokerUrl>, String> {
    split_urls(list).map(parse_url).collect()
}

/// [`parse_urls`] with errors that do not quote the URLs (config validation).
pub fn parse_urls_quiet(list: &str) -> Result<Vec<BrokerUrl>, String> {
    split_urls(list).map(parse_url_quiet).collect()
}

/// `[mqtt] url`'s broker list, parsed once: the nodes in order, and how each is shown in logs
/// (user info redacted).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerList {
    urls: Vec<BrokerUrl>,
    shown: Vec<String>,
    shown_list: String,
}

impl BrokerList {
    /// Parses `list` ([`parse_urls`]).
    ///
    /// Errors: the first URL that does not parse, quoted redacted.
    pub fn parse(list: &str) -> Result<BrokerList, String> {
        Ok(BrokerList {
            urls: parse_urls(list)?,
            shown: split_urls(list).map(redact_url).collect(),
            shown_list: redact_url(list),
        })
    }

    /// The nodes, in the order they are tried (never empty).
    pub fn urls(&self) -> &[BrokerUrl] {
        &self.urls
    }

    /// Node `i` as logs show it (user info redacted); empty past the end.
    pub fn shown(&self, i: usize) -> &str {
        self.shown.get(i).map_or("", String::as_str)
    }

    /// The whole list as logs show it.
    pub fn shown_list(&self) -> &str {
        &self.shown_list
    }
}

/// The URLs of a broker list, trimmed, in order (the list's one splitting rule).
pub fn split_urls(list: &str) -> impl Iterator<Item = &str> {
    list.split(',').map(str::trim)
}

/// Refuses a broker list that mixes `mqtts://` and `mqtt://` nodes while `secrets` (what is set
/// that a CONNECT carries or that stands for the client: "mqtt.username", "a client key") is not
/// empty: when the TLS node fails, the link moves to a plain node and the CONNECT would carry
/// the user name and password in clear. Names no URL and no secret.
///
/// Errors: why, and what to change.
pub fn refuse_mixed_tls(
    urls: &[BrokerUrl],
    list_name: &str,
    secrets: &[&str],
) -> Result<(), String> {
    let tls = urls.iter().filter(|u| u.tls).count();
    if secrets.is_empty() || tls == 0 || tls == urls.len() {
        return Ok(());
    }
    Err(format!(
        "{list_name} mixes mqtts:// and mqtt:// nodes while {} set: when a TLS node fails the \
         link moves to a plain node, and its CONNECT would carry the credentials in clear; make \
         every node mqtts:// (or leave the plain ones out)",
        match secrets {
            [one] => format!("{one} is"),
            more => format!("{} are", more.join(" and ")),
        }
    ))
}

/// [`parse_url`] with errors that do not quote the URL (for config validation: a value typed in
/// the wrong key may be anything).
pub fn parse_url_quiet(url: &str) -> Result<BrokerUrl, String> {
    if redact_url(url) != url {
        return Err(
            "the broker URL must not carry user info; use mqtt.username and mqtt.password_file \
             (fleet send/watch: NPU_AGENT_MQTT_USERNAME and NPU_AGENT_MQTT_PASSWORD_FILE)"
                .to_string(),
        );
    }
    let (tls, rest) = if let Some(r) = url.strip_prefix("mqtts://") {
        (true, r)
    } else if let Some(r) = url.strip_prefix("mqtt://") {
        (false, r)
    } else {
        return Err("the broker URL must start with mqtt:// or mqtts://".to_string());
    };
    let rest = rest.trim_end_matches('/');
    if rest.is_empty() || rest.contains(['/', '@', '?', '#', ' ']) {
        return Err("expected mqtt[s]://host[:port]".to_string());
    }
    let (host, port) = if let Some(h) = rest.strip_prefix('[') {
        // [IPv6]:port
        let (h, p) = h
            .split_once(']')
            .ok_or_else(|| "unclosed '['".to_string())?;
        (h.to_string(), p.strip_prefix(':'))
    } else {
        match rest.rsplit_once(':') {
            Some((h, p)) => (h.to_string(), Some(p)),
            None => (rest.to_string(), None),
        }
    };
    let port = match port {
        Some(p) => p
            .parse::<u16>()
            .map_err(|_| "bad port (a number 1-65535)".to_string())?,
        None if tls => 8883,
        None => 1883,
    };
    if host.is_empty() || port == 0 {
        return Err("expected mqtt[s]://host[:port]".to_string());
    }
    Ok(BrokerUrl { host, port, tls })
}

/// TLS material (PEM bytes).
#[derive(Debug, Clone, Default)]
pub struct TlsFiles {
    /// Server CA certificates; empty = the system bundle.
    pub ca_pem: Vec<u8>,
    /// Client certificate chain and key (a [`crate::sys::secret::Secret`]) for mTLS.
    pub client: Option<(Vec<u8>, crate::sys::secret::Secret)>,
}

/// The system CA bundle locations tried when no `ca_file` is set.
pub const SYSTEM_CA_FILES: &[&str] = &[
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
];

/// Builds a rustls client config with the ring provider (no aws-lc-rs).
pub fn tls_config(files: &TlsFiles) -> Result<Arc<rustls::ClientConfig>, String> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::CertificateDer;
    let mut roots = rustls::RootCertStore::empty();
    let ca = if files.ca_pem.is_empty() {
        SYSTEM_CA_FILES
            .iter()
            .find_map(|p| std::fs::read(p).ok())
            .ok_or("no ca_file set and no system CA bundle found")?
    } else {
        files.ca_pem.clone()
    };
    for cert in CertificateDer::pem_slice_iter(&ca) {
        let cert = cert.map_err(|e| format!("CA file: not PEM ({})", pem_error_kind(&e)))?;
        roots
            .add(cert)
            .map_err(|e| format!("CA certificate: {e}"))?;
    }
    if roots.is_empty() {
        return Err("the CA file holds no certificate".into());
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots);
    let config = match &files.client {
        Some((cert, key)) => {
            let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert)
                .collect::<Result<_, _>>()
                .map_err(|e| {
                    format!(
                        "client certificate (cert_file): not PEM ({})",
                        pem_error_kind(&e)
                    )
                })?;
            if chain.is_empty() {
                return Err("client certificate (cert_file) holds no PEM certificate".into());
            }
            let key = client_key(key.expose().as_bytes())?;
            builder.with_client_cert_resolver(Arc::new(rustls::sign::SingleCertAndKey::from(
                certified_client_key(chain, key)?,
            )))
        }
        None => builder.with_no_client_auth(),
    };
    Ok(Arc::new(config))
}

/// Reads the client's private key (`key_file`): PKCS#8, PKCS#1 (RSA) or SEC1 (EC) PEM.
/// Errors say what is wrong in the operator's terms (an encrypted key needs `openssl pkey`).
fn client_key(pem: &[u8]) -> Result<rustls::pki_types::PrivateKeyDer<'static>, String> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::PrivateKeyDer;
    if memchr::memmem::find(pem, b"-----BEGIN ENCRYPTED PRIVATE KEY-----").is_some()
        || memchr::memmem::find(pem, b"Proc-Type: 4,ENCRYPTED").is_some()
    {
        return Err(
            "client key (key_file) is protected by a passphrase, which the agent cannot \
                    ask for: write an unencrypted copy with `openssl pkey -in client.key -out \
                    client-plain.key` and keep it mode 0600"
                .into(),
        );
    }
    PrivateKeyDer::from_pem_slice(pem)
        .map_err(|e| {
            format!(
                "client key (key_file): not a PEM private key ({}); a key pasted on one line needs its line breaks back",
                pem_error_kind(&e)
            )
        })
}

/// The kind of a PEM decoding error, without its payload: the `Display` and `Debug` of some
/// kinds carry the offending line as a list of bytes, which may be the private key itself.
pub fn pem_error_kind(e: &rustls::pki_types::pem::Error) -> String {
    let kind: String = format!("{e:?}")
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric())
        .collect();
    if kind.is_empty() {
        "unreadable".into()
    } else {
        kind
    }
}

/// Pairs the client certificate chain with its key, checking they belong together.
///
/// rustls's own pairing check parses the certificate with webpki, which accepts only X.509 v3;
/// `openssl x509 -req` without extensions (as mosquitto's TLS guide signs client certificates)
/// makes v1 ones, which brokers accept. The key match is therefore checked on the
/// certificate's `subjectPublicKeyInfo` read directly from its DER, whatever the version.
fn certified_client_key(
    chain: Vec<rustls::pki_types::CertificateDer<'static>>,
    key: rustls::pki_types::PrivateKeyDer<'static>,
) -> Result<rustls::sign::CertifiedKey, String> {
    let provider = rustls::crypto::ring::default_provider();
    let signing_key = provider.key_provider.load_private_key(key).map_err(|e| {
        format!(
            "client key (key_file): unsupported key ({e}); RSA, ECDSA P-256/P-384 and Ed25519 work"
        )
    })?;
    let cert_spki = cert_spki_der(chain[0].as_ref())
        .ok_or("client certificate (cert_file): the first PEM block is not an X.509 certificate")?;
    if let Some(key_spki) = signing_key.public_key() {
        if key_spki.as_ref() != cert_spki {
            return Err(
                "client key (key_file) does not belong to the client certificate \
                        (cert_file): compare `openssl x509 -in client.crt -noout -pubkey` with \
                        `openssl pkey -in client.key -pubout`"
                    .into(),
            );
        }
    }
    Ok(rustls::sign::CertifiedKey::new(chain, signing_key))
}

/// One DER element at the start of `der`: (tag, content, rest). Definite lengths up to 4 bytes.
fn der_element(der: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = der.split_first()?;
    let (&first, mut rest) = rest.split_first()?;
    let len = if first < 0x80 {
        usize::from(first)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 || rest.len() < n {
            return None;
        }
        let (bytes, r) = rest.split_at(n);
        rest = r;
        bytes
            .iter()
            .fold(0usize, |acc, b| (acc << 8) | usize::from(*b))
    };
    if rest.len() < len {
        return None;
    }
    let (content, rest) = rest.split_at(len);
    Some((tag, content, rest))
}

/// The complete `subjectPublicKeyInfo` element (tag and length included) of an X.509
/// certificate in DER, v1 or v3 (RFC 5280 section 4.1: the version field is optional).
pub fn cert_spki_der(cert: &[u8]) -> Option<&[u8]> {
    const SEQUENCE: u8 = 0x30;
    let (tag, certificate, _) = der_element(cert)?;
    if tag != SEQUENCE {
        return None;
    }
    let (tag, tbs, _) = der_element(certificate)?;
    if tag != SEQUENCE {
        return None;
    }
    let mut rest = tbs;
    // [0] EXPLICIT version, absent in v1.
    if rest.first() == Some(&0xa0) {
        rest = der_element(rest)?.2;
    }
    // serialNumber, signature, issuer, validity, subject.
    for want in [0x02, SEQUENCE, SEQUENCE, SEQUENCE, SEQUENCE] {
        let (tag, _, r) = der_element(rest)?;
        if tag != want {
            return None;
        }
        rest = r;
    }
    let (tag, _, after) = der_element(rest)?;
    (tag == SEQUENCE).then(|| &rest[..rest.len() - after.len()])
}

/// Adds what to do to a connection error whose cause an operator's certificates explain
/// (the TLS library's own words name webpki error variants). Other errors are returned as they are.
pub fn explain_connection_error(error: &str) -> String {
    let hint = if error.contains("UnsupportedCertVersion") {
        Some(
            "the broker's certificate, or a CA between it and ca_file, is X.509 v1, as \
             `openssl x509 -req` makes it without extensions, and the agent verifies only v3 \
             server certificates: sign it again with `-extfile server.ext`, where server.ext \
             holds its names, e.g. `subjectAltName=DNS:broker.example.net,IP:127.0.0.1`; that \
             also makes it v3",
        )
    } else if error.contains("NotValidForName") || error.contains("not valid for name") {
        Some(
            "the broker's certificate does not list the host of the broker URL in its \
             subjectAltName, and the common name is not used: sign it again with \
             `-extfile server.ext`, where server.ext holds `subjectAltName=DNS:<host>`, or \
             `IP:<address>` for a URL with an IP address",
        )
    } else if error.contains("UnknownIssuer") {
        Some("the broker's certificate was not signed by the CA in ca_file")
    } else if error.contains("Expired") || error.contains("NotValidYet") {
        Some("a certificate is outside its validity dates: check the clocks and `-days`")
    } else {
        None
    };
    match hint {
        Some(h) => format!("{error}; what to do: {h}"),
        None => error.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_pasted_on_one_line_is_never_echoed() {
        let pem = rcgen::KeyPair::generate().unwrap().serialize_pem();
        let body: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
        for one_line in [pem.replace('\n', " "), pem.replace('\n', "")] {
            let e = client_key(one_line.as_bytes()).unwrap_err();
            assert!(e.contains("key_file") && e.contains("line breaks"), "{e}");
            // Neither the base64 text nor its bytes as a decimal list.
            assert!(!e.contains(&body[..16]) && !e.contains(", "), "{e}");
            let files = TlsFiles {
                ca_pem: one_line.clone().into_bytes(),
                client: None,
            };
            let e = tls_config(&files).err().unwrap();
            assert!(!e.contains(&body[..16]) && !e.contains(", "), "{e}");
        }
    }

    #[test]
    fn client_certificate_pairing_reads_the_spki_and_says_what_is_wrong() {
        use rustls::pki_types::pem::PemObject;
        use rustls::pki_types::{CertificateDer, PrivateKeyDer};
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec!["board".to_string()])
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let der = cert.der().to_vec();
        let signing = rustls::crypto::ring::default_provider()
            .key_provider
            .load_private_key(
                PrivateKeyDer::from_pem_slice(key.serialize_pem().as_bytes()).unwrap(),
            )
            .unwrap();
        assert_eq!(
            cert_spki_der(&der).unwrap(),
            signing.public_key().unwrap().as_ref()
        );
        assert_eq!(cert_spki_der(&der[..der.len() - 1]), None);
        assert_eq!(cert_spki_der(b"\x30\x03\x02\x01\x01"), None);
        assert_eq!(cert_spki_der(&[]), None);
        let chain = || vec![CertificateDer::from(der.clone())];
        let pem_key = |k: &rcgen::KeyPair| {
            PrivateKeyDer::from_pem_slice(k.serialize_pem().as_bytes()).unwrap()
        };
        assert!(certified_client_key(chain(), pem_key(&key)).is_ok());
        let other = rcgen::KeyPair::generate().unwrap();
        let e = certified_client_key(chain(), pem_key(&other))
            .err()
            .unwrap();
        assert!(
            e.contains("does not belong to the client certificate"),
            "{e}"
        );
        let e = client_key(
            b"-----BEGIN ENCRYPTED PRIVATE KEY-----\nAA==\n-----END ENCRYPTED PRIVATE KEY-----\n",
        )
        .err()
        .unwrap();
        assert!(e.contains("passphrase"), "{e}");
        assert!(client_key(b"garbage")
            .unwrap_err()
            .contains("not a PEM private key"));
    }

    #[test]
    fn connection_errors_about_certificates_say_what_to_do() {
        let v1 = explain_connection_error(
            "TLS: invalid peer certificate: Other(OtherError(UnsupportedCertVersion))",
        );
        assert!(v1.contains("X.509 v1") && v1.contains("-extfile"), "{v1}");
        let name =
            explain_connection_error("invalid peer certificate: NotValidForNameContext { .. }");
        assert!(name.contains("subjectAltName=DNS:<host>"), "{name}");
        assert!(name.contains("; what to do: "), "{name}");
        assert_eq!(
            explain_connection_error("connection refused"),
            "connection refused"
        );
    }

    /// Issue 37 item 1: a mixed list is refused while anything secret is set, naming what, and
    /// never the URL.
    #[test]
    fn a_mixed_list_with_credentials_is_refused() {
        let mixed = parse_urls("mqtts://a,mqtt://b").unwrap();
        let e =
            refuse_mixed_tls(&mixed, "mqtt.url", &["mqtt.username", "mqtt.key_file"]).unwrap_err();
        assert!(
            e.starts_with("mqtt.url mixes mqtts:// and mqtt:// nodes while mqtt.username and mqtt.key_file are set"),
            "{e}"
        );
        assert!(!e.contains("://a") && !e.contains("://b"), "{e}");
        assert!(refuse_mixed_tls(&mixed, "mqtt.url", &[]).is_ok());
        for same in ["mqtts://a,mqtts://b", "mqtt://a,mqtt://b", "mqtts://a"] {
            let l = parse_urls(same).unwrap();
            assert!(
                refuse_mixed_tls(&l, "x", &["mqtt.username"]).is_ok(),
                "{same}"
            );
        }
    }

    #[test]
    fn urls() {
        assert_eq!(
            parse_url("mqtt://127.0.0.1:1884").unwrap(),
            BrokerUrl {
                host: "127.0.0.1".into(),
                port: 1884,
                tls: false
            }
        );
        assert_eq!(parse_url("mqtts://broker.example.net").unwrap().port, 8883);
        assert_eq!(parse_url("mqtt://[::1]:1883").unwrap().host, "::1");
        for bad in [
            "http://x",
            "mqtt://",
            "mqtt://h:99999",
            "mqtt://u:p@h",
            "mqtt://h/x",
            "h:1883",
        ] {
            assert!(parse_url(bad).is_err(), "{bad}");
        }
        // A cluster's nodes, in order, each with its own scheme.
        let list = parse_urls("mqtt://a:1883, mqtts://b").unwrap();
        assert_eq!(list.len(), 2);
        assert_eq!((list[0].host.as_str(), list[0].tls), ("a", false));
        assert_eq!(
            (list[1].host.as_str(), list[1].port, list[1].tls),
            ("b", 8883, true)
        );
        assert_eq!(parse_urls("mqtt://a").unwrap().len(), 1);
        for bad in ["mqtt://a,", "mqtt://a,http://b", "mqtt://a,mqtt://u:p@b"] {
            let e = parse_urls(bad).unwrap_err();
            assert!(!e.contains("u:p"), "{e}");
        }
    }

    /// The broker list and the protocol are parsed once into types: the nodes in order, each
    /// shown redacted, and the protocol's first version and fallback.
    #[test]
    fn the_broker_list_and_the_protocol_are_types() {
        let l = BrokerList::parse("mqtt://a:1883, mqtts://b").unwrap();
        assert_eq!(l.urls().len(), 2);
        assert!(l.urls()[1].tls && l.urls()[1].port == 8883);
        assert_eq!(l.shown(0), "mqtt://a:1883");
        assert_eq!(l.shown(1), "mqtts://b");
        assert_eq!(l.shown(2), "");
        assert_eq!(l.shown_list(), "mqtt://a:1883, mqtts://b");
        let e = BrokerList::parse("mqtt://a, mqtt://u:pw@b").unwrap_err();
        assert!(e.contains("<redacted>@b") && !e.contains("pw"), "{e}");
        assert!(BrokerList::parse("").is_err());
        use link::{Protocol, ProtocolSetting};
        let auto: ProtocolSetting = "auto".parse().unwrap();
        assert!(auto.falls_back() && auto.first() == Protocol::V5);
        let v3: ProtocolSetting = "3.1.1".parse().unwrap();
        assert!(!v3.falls_back() && v3.first() == Protocol::V311);
        assert_eq!(
            "4".parse::<ProtocolSetting>().unwrap_err(),
            "\"4\": expected one of auto, 5, 3.1.1"
        );
    }
}
