//! The board's own Ed25519 key: made on the first start, kept in the state directory as
//! PKCS#8 PEM (mode 0600), and used to seal every status and command answer
//! ([`crate::mqtt::board_sig`]), so that broker access alone cannot speak for the board.

use crate::action::atomic::{write_atomic, RealStorage};
use crate::action::state::StateDir;
use crate::mqtt::ed25519::SigningKey;

/// The key's file in the state directory.
pub const IDENTITY_FILE: &str = "board_identity.key";

/// The board's key: the one in [`IDENTITY_FILE`], or a new one saved there. An unreadable
/// file is replaced (the fleet tools then report the board's key as changed, which it is).
///
/// Errors: no randomness, or the key cannot be saved (the state directory is read-only).
pub(super) fn load_or_make(state: &StateDir) -> Result<SigningKey, String> {
    let path = state.board_path(IDENTITY_FILE);
    match state.root().read(&path) {
        Ok(bytes) => match SigningKey::from_pkcs8_pem(&String::from_utf8_lossy(&bytes)) {
            Ok(key) => return Ok(key),
            Err(e) => tracing::warn!(
                file = path.as_str(),
                error = e.as_str(),
                "the board's identity key is unreadable: a new one replaces it"
            ),
        },
        Err(e) if e.is_not_found() => {}
        Err(e) => return Err(e.to_string()),
    }
    let mut seed = [0u8; 32];
    getrandom::fill(&mut seed).map_err(|e| format!("no randomness for a board key: {e}"))?;
    let key = SigningKey::from_bytes(&seed);
    let dir = state.board_path("");
    state
        .root()
        .create_dir_all(dir.trim_end_matches('/'))
        .map_err(|e| e.to_string())?;
    let target = state
        .root()
        .entry_target(&path)
        .map_err(|e| e.to_string())?;
    let pem = key.to_pkcs8_pem();
    write_atomic(
        &mut RealStorage,
        &target.path(),
        pem.as_bytes(),
        None,
        0o600,
    )
    .map_err(|e| e.unpinned(&target).to_string())?;
    Ok(key)
}
