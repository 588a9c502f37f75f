//! `npu-agent keygen`: an Ed25519 key pair for signed commands.

use super::*;

/// `npu-agent keygen --out FILE`.
/// With `json`, one object: `private_key` and `public_key` (paths) and `public_key_base64` (the
/// raw 32-byte key, as boards list it and the fleet tools show it).
pub fn keygen(path: &std::path::Path, json: bool, out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    if path.as_os_str().is_empty() {
        let _ = writeln!(
            err,
            "npu-agent: --out is empty: give the private key's file name"
        );
        return EXIT_USAGE;
    }
    match crate::mqtt::command::keygen(path) {
        Ok(pubp) if json => {
            let key = crate::mqtt::command::load_signing_key(path).map(|k| {
                base64::Engine::encode(
                    &base64::engine::general_purpose::STANDARD,
                    k.verifying_key().to_bytes(),
                )
            });
            match key {
                Ok(b64) => {
                    write_json(
                        out,
                        &serde_json::json!({
                            "private_key": path,
                            "public_key": pubp,
                            "public_key_base64": b64,
                        }),
                    );
                    EXIT_OK
                }
                Err(e) => {
                    let _ = writeln!(err, "npu-agent: {e}");
                    EXIT_USAGE
                }
            }
        }
        Ok(pubp) => {
            let _ = writeln!(
                out,
                "private key: {} (mode 0600; keep it on the operator's machine)",
                path.display()
            );
            let _ = writeln!(
                out,
                "public key:  {} (list it in [security] trusted_keys on the boards)",
                pubp.display()
            );
            EXIT_OK
        }
        Err(e) => {
            let _ = writeln!(err, "npu-agent: {e}");
            EXIT_USAGE
        }
    }
}
