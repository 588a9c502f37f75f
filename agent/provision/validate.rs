//! Checks on the provisioning file: key paths, key lines and PEM content.

/// Line of the first `key =` in the file (for errors found after parsing).
pub(super) fn find_key_line(text: &str, key: &str) -> Option<usize> {
    text.lines()
        .position(|l| {
            let t = l.trim_start();
            t.strip_prefix(key)
                .is_some_and(|r| r.trim_start().starts_with('='))
        })
        .map(|i| i + 1)
}

/// `section.key` for every key in the table, sorted.
pub(super) fn key_paths(table: &toml::Table) -> Vec<String> {
    let mut out = Vec::new();
    for (k, v) in table {
        match v {
            toml::Value::Table(t) => out.extend(t.keys().map(|sub| format!("{k}.{sub}"))),
            _ => out.push(k.clone()),
        }
    }
    out.sort();
    out
}

/// The kind of a PEM decoding error, without its payload.
pub(super) fn pem_error_kind(e: &rustls::pki_types::pem::Error) -> String {
    crate::mqtt::pem_error_kind(e)
}

/// Checks an inline value is what its name says. Messages never quote the value.
pub(super) fn check_content(name: &str, content: &str) -> Result<(), String> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    match name {
        "secrets.mqtt_password" => {
            let p = content.trim_end_matches(['\n', '\r']);
            if p.is_empty() {
                return Err(format!("{name} is empty"));
            }
            if p.contains(['\n', '\r']) {
                return Err(format!(
                    "{name} spans several lines; a password is one line"
                ));
            }
            Ok(())
        }
        "secrets.mqtt_key" => PrivateKeyDer::from_pem_slice(content.as_bytes())
            .map(|_| ())
            .map_err(|e| format!("{name} is not a PEM private key ({})", pem_error_kind(&e))),
        _ => {
            let certs: Result<Vec<_>, _> =
                CertificateDer::pem_slice_iter(content.as_bytes()).collect();
            match certs {
                Ok(c) if !c.is_empty() => Ok(()),
                Ok(_) => Err(format!("{name} holds no PEM certificate")),
                Err(e) => Err(format!(
                    "{name} is not PEM certificates ({})",
                    pem_error_kind(&e)
                )),
            }
        }
    }
}
