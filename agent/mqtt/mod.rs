//! MQTT: topics, the command gate, and the connection (one task owns and only polls the rumqttc
//! event loop; everything else publishes with non-blocking `try_*` calls).

pub mod command;
pub mod link;
pub mod topics;

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

/// Parses a broker URL. Only `mqtt` and `mqtts` schemes; no user info or path.
pub fn parse_url(url: &str) -> Result<BrokerUrl, String> {
    let (tls, rest) = if let Some(r) = url.strip_prefix("mqtts://") {
        (true, r)
    } else if let Some(r) = url.strip_prefix("mqtt://") {
        (false, r)
    } else {
        return Err(format!(
            "{url:?}: the broker URL must start with mqtt:// or mqtts://"
        ));
    };
    let rest = rest.trim_end_matches('/');
    if rest.is_empty() || rest.contains(['/', '@', '?', '#', ' ']) {
        return Err(format!("{url:?}: expected mqtt[s]://host[:port]"));
    }
    let (host, port) = if let Some(h) = rest.strip_prefix('[') {
        // [IPv6]:port
        let (h, p) = h
            .split_once(']')
            .ok_or_else(|| format!("{url:?}: unclosed '['"))?;
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
            .map_err(|_| format!("{url:?}: bad port {p:?}"))?,
        None if tls => 8883,
        None => 1883,
    };
    if host.is_empty() || port == 0 {
        return Err(format!("{url:?}: expected mqtt[s]://host[:port]"));
    }
    Ok(BrokerUrl { host, port, tls })
}

/// TLS material (PEM bytes).
#[derive(Debug, Clone, Default)]
pub struct TlsFiles {
    /// Server CA certificates; empty = the system bundle.
    pub ca_pem: Vec<u8>,
    /// Client certificate chain and key for mTLS.
    pub client: Option<(Vec<u8>, Vec<u8>)>,
}

/// The system CA bundle locations tried when no `ca_file` is set.
pub const SYSTEM_CA_FILES: &[&str] = &[
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
];

/// Builds a rustls client config with the ring provider (no aws-lc-rs).
pub fn tls_config(files: &TlsFiles) -> Result<Arc<rustls::ClientConfig>, String> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
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
        let cert = cert.map_err(|e| format!("CA file: {e}"))?;
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
                .map_err(|e| format!("client certificate: {e}"))?;
            let key = PrivateKeyDer::from_pem_slice(key).map_err(|e| format!("client key: {e}"))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| format!("client certificate/key: {e}"))?
        }
        None => builder.with_no_client_auth(),
    };
    Ok(Arc::new(config))
}

#[cfg(test)]
mod tests {
    use super::*;

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
    }
}
