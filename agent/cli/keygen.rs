//! `npu-agent keygen`: an Ed25519 key pair for signed commands.

use super::*;

/// `npu-agent keygen --out FILE`.
pub fn keygen(path: &std::path::Path, out: &mut dyn Write, err: &mut dyn Write) -> i32 {
    if path.as_os_str().is_empty() {
        let _ = writeln!(
            err,
            "npu-agent: --out is empty: give the private key's file name"
        );
        return EXIT_USAGE;
    }
    match crate::mqtt::command::keygen(path) {
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
