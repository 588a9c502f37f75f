//! Ed25519 keys for signed commands, through ed25519-dalek: one implementation for signing,
//! verifying (`verify_strict`: RFC 8032's canonical `S < L`, no small-order key or `R`) and the
//! key files' DER (PKCS#8 / SPKI, RFC 8410). The PEM armour (RFC 7468) is read by rustls'
//! `pki-types`, the reader the certificates already go through, because it allows text around the
//! block as in the files operators hand-edit; the block itself is decoded strictly.
//!
//! Key files are the forms `openssl` writes: the private key as PKCS#8 PEM (`PRIVATE KEY`: v1 as
//! `openssl genpkey -algorithm ed25519` writes it, and v2 with the public key inside), the public
//! key as SPKI PEM (`PUBLIC KEY`, as `openssl pkey -pubout` writes it).

use ed25519_dalek::pkcs8::spki::der::pem::LineEnding;
use ed25519_dalek::pkcs8::{
    DecodePrivateKey, DecodePublicKey, EncodePrivateKey, EncodePublicKey, KeypairBytes,
};
use ed25519_dalek::Signer;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{PrivatePkcs8KeyDer, SubjectPublicKeyInfoDer};

/// An Ed25519 private key (RFC 8032 section 5.1.5).
pub struct SigningKey(ed25519_dalek::SigningKey);

impl SigningKey {
    /// The key of a 32-byte seed (the private key as RFC 8032 and PKCS#8 files hold it).
    pub fn from_bytes(seed: &[u8; 32]) -> SigningKey {
        SigningKey(ed25519_dalek::SigningKey::from_bytes(seed))
    }

    /// The 32-byte seed.
    pub fn to_bytes(&self) -> [u8; 32] {
        self.0.to_bytes()
    }

    /// The matching public key.
    pub fn verifying_key(&self) -> VerifyingKey {
        VerifyingKey(self.0.verifying_key().to_bytes())
    }

    /// The 64-byte signature of `message` (deterministic, RFC 8032).
    pub fn sign(&self, message: &[u8]) -> [u8; 64] {
        self.0.sign(message).to_bytes()
    }

    /// Reads a PKCS#8 PEM private key (v1 or v2; in a v2 key the public key must match the seed).
    ///
    /// Errors: no `PRIVATE KEY` PEM block, a block that is not an unencrypted Ed25519 PKCS#8
    /// key, or a v2 key whose public key is not its seed's.
    pub fn from_pkcs8_pem(text: &str) -> Result<SigningKey, String> {
        let der = PrivatePkcs8KeyDer::from_pem_slice(text.as_bytes())
            .map_err(|e| pem_error("PRIVATE KEY", &e))?;
        ed25519_dalek::SigningKey::from_pkcs8_der(der.secret_pkcs8_der())
            .map(SigningKey)
            .map_err(|e| format!("not an Ed25519 PKCS#8 key ({e})"))
    }

    /// The PKCS#8 v1 PEM form (what `openssl genpkey -algorithm ed25519` writes), LF line ends.
    pub fn to_pkcs8_pem(&self) -> String {
        // v1 holds the seed only, as openssl writes it.
        let v1 = KeypairBytes {
            secret_key: self.to_bytes(),
            public_key: None,
        };
        match v1.to_pkcs8_pem(LineEnding::LF) {
            Ok(pem) => pem.to_string(),
            // Encoding 32 known bytes into a fixed-size DER cannot fail.
            Err(e) => unreachable!("PKCS#8 encoding of an Ed25519 seed failed: {e}"),
        }
    }
}

impl std::fmt::Debug for SigningKey {
    /// Shows the public key only: the seed is a secret.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("SigningKey")
            .field(&self.verifying_key())
            .finish()
    }
}

/// An Ed25519 public key (32 bytes, RFC 8032 section 5.1.5).
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct VerifyingKey([u8; 32]);

impl VerifyingKey {
    /// The key of 32 bytes as published (a board's `board_key`); a small-order or off-curve key
    /// verifies nothing ([`VerifyingKey::verify`]).
    pub fn from_bytes(key: &[u8; 32]) -> VerifyingKey {
        VerifyingKey(*key)
    }

    /// The 32 key bytes.
    pub fn to_bytes(&self) -> [u8; 32] {
        self.0
    }

    /// True when `sig` (64 bytes) is this key's signature of `message` under `verify_strict`'s
    /// rules: a key that is not a valid curve point, a small-order key or `R`, and a non-canonical
    /// `S` verify nothing.
    pub fn verify(&self, message: &[u8], sig: &[u8]) -> bool {
        let Ok(sig) = ed25519_dalek::Signature::from_slice(sig) else {
            return false;
        };
        ed25519_dalek::VerifyingKey::from_bytes(&self.0)
            .is_ok_and(|key| !key.is_weak() && key.verify_strict(message, &sig).is_ok())
    }

    /// Reads an SPKI PEM public key (`PUBLIC KEY`).
    ///
    /// Errors: no `PUBLIC KEY` PEM block, a block that is not an Ed25519 key, or a key of small
    /// order (a weak key, which would verify forged signatures).
    pub fn from_public_key_pem(text: &str) -> Result<VerifyingKey, String> {
        let der = SubjectPublicKeyInfoDer::from_pem_slice(text.as_bytes())
            .map_err(|e| pem_error("PUBLIC KEY", &e))?;
        let key = ed25519_dalek::VerifyingKey::from_public_key_der(&der).map_err(|e| {
            format!("not an Ed25519 SubjectPublicKeyInfo ({e}), or a key off the curve")
        })?;
        if key.is_weak() {
            return Err(
                "an Ed25519 public key of small order (a weak key that verifies forged \
                 signatures)"
                    .into(),
            );
        }
        Ok(VerifyingKey(key.to_bytes()))
    }

    /// The SPKI PEM form (what `openssl pkey -pubout` writes), LF line ends.
    pub fn to_public_key_pem(&self) -> String {
        let spki = ed25519_dalek::pkcs8::PublicKeyBytes(self.0);
        match spki.to_public_key_pem(LineEnding::LF) {
            Ok(pem) => pem,
            Err(e) => unreachable!("SPKI encoding of 32 key bytes failed: {e}"),
        }
    }
}

impl std::fmt::Debug for VerifyingKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "VerifyingKey(")?;
        for b in self.0 {
            write!(f, "{b:02x}")?;
        }
        write!(f, ")")
    }
}

/// Why a key file has no usable `label` PEM block (never its bytes: a pasted key is a secret).
fn pem_error(label: &str, e: &rustls::pki_types::pem::Error) -> String {
    match e {
        rustls::pki_types::pem::Error::NoItemsFound => {
            format!("no \"-----BEGIN {label}-----\" block")
        }
        e => format!(
            "the {label} PEM block is malformed ({})",
            crate::mqtt::pem_error_kind(e)
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// DER of an Ed25519 SubjectPublicKeyInfo up to the 32-byte key (RFC 8410 section 4), to
    /// build odd keys with.
    const SPKI_PREFIX: [u8; 12] = [
        0x30, 0x2a, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x03, 0x21, 0x00,
    ];

    /// The encodings of the points of order 1, 2, 4 and 8 on edwards25519 (sign bit cleared),
    /// including the non-canonical ones (y >= p) of 0 and 1 (the list libsodium checks).
    const SMALL_ORDER_KEYS: [[u8; 32]; 7] = [
        [0; 32],
        [
            1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
            0, 0, 0,
        ],
        [
            0x26, 0xe8, 0x95, 0x8f, 0xc2, 0xb2, 0x27, 0xb0, 0x45, 0xc3, 0xf4, 0x89, 0xf2, 0xef,
            0x98, 0xf0, 0xd5, 0xdf, 0xac, 0x05, 0xd3, 0xc6, 0x33, 0x39, 0xb1, 0x38, 0x02, 0x88,
            0x6d, 0x53, 0xfc, 0x05,
        ],
        [
            0xc7, 0x17, 0x6a, 0x70, 0x3d, 0x4d, 0xd8, 0x4f, 0xba, 0x3c, 0x0b, 0x76, 0x0d, 0x10,
            0x67, 0x0f, 0x2a, 0x20, 0x53, 0xfa, 0x2c, 0x39, 0xcc, 0xc6, 0x4e, 0xc7, 0xfd, 0x77,
            0x92, 0xac, 0x03, 0x7a,
        ],
        near_p(0xec),
        near_p(0xed),
        near_p(0xee),
    ];

    /// `p - 1`, `p` or `p + 1` (p = 2^255 - 19) as 32 little-endian bytes, by their first byte.
    const fn near_p(first: u8) -> [u8; 32] {
        let mut b = [0xff; 32];
        b[0] = first;
        b[31] = 0x7f;
        b
    }

    /// `der` as a PEM block (RFC 7468), built independently of the encoder under test.
    fn pem_encode(der: &[u8], label: &str) -> String {
        use base64::Engine;
        let b64 = base64::engine::general_purpose::STANDARD.encode(der);
        let mut out = format!("-----BEGIN {label}-----\n");
        for line in b64.as_bytes().chunks(64) {
            out.push_str(std::str::from_utf8(line).unwrap());
            out.push('\n');
        }
        out.push_str(&format!("-----END {label}-----\n"));
        out
    }

    // RFC 8032 section 7.1, TEST 2: seed, public key, message 0x72 and its signature.
    const SEED: &str = "4ccd089b28ff96da9db6c346ec114e0f5b8a319f35aba624da8cf6ed4fb8a6fb";
    const PUBLIC: &str = "3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c";
    const SIG: &str = "92a009a9f0d4cab8720e820b5f642540a2b27b5416503f8fb3762223ebdb69da\
                       085ac1e43e15996e458f3613d0f11d8c387b2eaeb4302aeeb00d291612bb0c00";

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    fn key() -> SigningKey {
        SigningKey::from_bytes(&hex(SEED).try_into().unwrap())
    }

    #[test]
    fn rfc8032_test_vector() {
        let k = key();
        assert_eq!(k.verifying_key().to_bytes().to_vec(), hex(PUBLIC));
        assert_eq!(k.sign(&[0x72]).to_vec(), hex(SIG));
        assert!(k.verifying_key().verify(&[0x72], &hex(SIG)));
        assert!(!k.verifying_key().verify(&[0x73], &hex(SIG)));
        assert!(!k.verifying_key().verify(&[0x72], &hex(SIG)[..63]));
        let other = SigningKey::from_bytes(&[1; 32]).verifying_key();
        assert!(!other.verify(&[0x72], &hex(SIG)));
    }

    #[test]
    fn pem_round_trips_and_openssl_layout() {
        let k = key();
        let pem = k.to_pkcs8_pem();
        // As openssl writes an Ed25519 key: one base64 line of 64 characters.
        assert!(pem.starts_with("-----BEGIN PRIVATE KEY-----\nMC4CAQAwBQYDK2VwBCIEI"));
        assert_eq!(pem.lines().count(), 3);
        assert_eq!(
            SigningKey::from_pkcs8_pem(&pem).unwrap().to_bytes(),
            k.to_bytes()
        );
        let public = k.verifying_key().to_public_key_pem();
        assert!(public.starts_with("-----BEGIN PUBLIC KEY-----\nMCowBQYDK2VwAyEA"));
        assert_eq!(
            VerifyingKey::from_public_key_pem(&public).unwrap(),
            k.verifying_key()
        );
        // CRLF and text around the block are fine.
        let crlf = format!("comment\r\n{}", public.replace('\n', "\r\n"));
        assert_eq!(
            VerifyingKey::from_public_key_pem(&crlf).unwrap(),
            k.verifying_key()
        );
    }

    #[test]
    fn wrong_keys_and_garbage_are_errors() {
        let k = key();
        let public = k.verifying_key().to_public_key_pem();
        let private = k.to_pkcs8_pem();
        assert!(SigningKey::from_pkcs8_pem(&public).is_err());
        assert!(VerifyingKey::from_public_key_pem(&private).is_err());
        assert!(VerifyingKey::from_public_key_pem("nope").is_err());
        assert!(VerifyingKey::from_public_key_pem(
            "-----BEGIN PUBLIC KEY-----\n!!!\n-----END PUBLIC KEY-----\n"
        )
        .is_err());
        // A v2 key whose public key is not the seed's is refused.
        let mut der = vec![
            0x30, 0x51, 0x02, 0x01, 0x01, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22,
            0x04, 0x20,
        ];
        der.extend_from_slice(&k.to_bytes());
        der.extend_from_slice(&[0x81, 0x21, 0x00]);
        der.extend_from_slice(&k.verifying_key().to_bytes());
        let good = pem_encode(&der, "PRIVATE KEY");
        assert_eq!(
            SigningKey::from_pkcs8_pem(&good).unwrap().to_bytes(),
            k.to_bytes()
        );
        let n = der.len();
        der[n - 1] ^= 1;
        assert!(SigningKey::from_pkcs8_pem(&pem_encode(&der, "PRIVATE KEY")).is_err());
        // An RSA-sized or truncated DER is refused without a panic.
        assert!(SigningKey::from_pkcs8_pem(&pem_encode(&der[..20], "PRIVATE KEY")).is_err());
        assert!(VerifyingKey::from_public_key_pem(&pem_encode(&[0x30], "PUBLIC KEY")).is_err());
    }

    /// A signature that only a small-order public key accepts, for every message: R is the
    /// identity point and S is 0, so `[S]B = R + [k]A` holds whenever `[k]A` is the identity.
    fn forged_for_any_message() -> Vec<u8> {
        let mut sig = vec![0u8; 64];
        sig[0] = 1;
        sig
    }

    #[test]
    fn small_order_public_keys_are_refused() {
        for (i, key) in SMALL_ORDER_KEYS.iter().enumerate() {
            // Each one (with the sign bit either way) is a key the forged signature verifies
            // for some of 64 messages: proof that these bytes are weak keys ...
            for sign in [0u8, 0x80] {
                let mut bytes = *key;
                bytes[31] |= sign;
                let weak = VerifyingKey(bytes);
                // Where the bytes decode to a point at all, an independent check calls it weak
                // (some non-canonical encodings are no point) ...
                if let Ok(p) = ed25519_dalek::VerifyingKey::from_bytes(&bytes) {
                    assert!(p.is_weak(), "entry {i} sign {sign:#x}");
                }
                // ... the forged signature verifies under none of them (verify_strict) ...
                let forged = (0u8..64).any(|m| weak.verify(&[m], &forged_for_any_message()));
                assert!(!forged, "entry {i} sign {sign:#x}");
                // ... and none of them loads as a trusted key.
                let pem = weak.to_public_key_pem();
                let err = VerifyingKey::from_public_key_pem(&pem).unwrap_err();
                assert!(err.contains("small order"), "{err}");
            }
        }
        // The all-zero key (a zeroed buffer written by a broken provisioning step) is one.
        let mut der = SPKI_PREFIX.to_vec();
        der.extend_from_slice(&[0; 32]);
        assert!(VerifyingKey::from_public_key_pem(&pem_encode(&der, "PUBLIC KEY")).is_err());
        // A real key still loads, and the forged signature does not verify under it.
        let good = key().verifying_key();
        assert_eq!(
            VerifyingKey::from_public_key_pem(&good.to_public_key_pem()).unwrap(),
            good
        );
        assert!(!(0u8..64).any(|m| good.verify(&[m], &forged_for_any_message())));
    }

    #[test]
    fn non_canonical_s_and_trailing_der_are_refused() {
        let k = key();
        let sig = k.sign(b"m");
        assert!(k.verifying_key().verify(b"m", &sig));
        // S + L (little-endian) is the same scalar mod L: RFC 8032 requires S < L.
        const L: [u8; 32] = [
            0xed, 0xd3, 0xf5, 0x5c, 0x1a, 0x63, 0x12, 0x58, 0xd6, 0x9c, 0xf7, 0xa2, 0xde, 0xf9,
            0xde, 0x14, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x10,
        ];
        let mut malleable = sig;
        let mut carry = 0u16;
        for i in 0..32 {
            let v = malleable[32 + i] as u16 + L[i] as u16 + carry;
            malleable[32 + i] = v as u8;
            carry = v >> 8;
        }
        assert_ne!(malleable, sig);
        assert!(!k.verifying_key().verify(b"m", &malleable));
        // DER with bytes after the key, and a PEM with junk after the block.
        let mut der = SPKI_PREFIX.to_vec();
        der.extend_from_slice(&k.verifying_key().to_bytes());
        der.push(0);
        assert!(VerifyingKey::from_public_key_pem(&pem_encode(&der, "PUBLIC KEY")).is_err());
        let junk = format!(
            "{}garbage\n-----BEGIN",
            k.verifying_key().to_public_key_pem()
        );
        assert_eq!(
            VerifyingKey::from_public_key_pem(&junk).unwrap(),
            k.verifying_key()
        );
        assert!(VerifyingKey::from_public_key_pem("").is_err());
    }

    #[test]
    fn agrees_with_an_independent_implementation() {
        use ed25519_dalek::pkcs8::{spki::der::pem::LineEnding, EncodePrivateKey, EncodePublicKey};
        use ed25519_dalek::{Signer, Verifier};
        for seed in [[0u8; 32], [7; 32], [0xff; 32]] {
            let ours = SigningKey::from_bytes(&seed);
            let theirs = ed25519_dalek::SigningKey::from_bytes(&seed);
            let msg = b"npu-agent-command-v1\nb1\nreboot\nc1\n{}\n1\n2\n";
            let sig = ours.sign(msg);
            assert_eq!(sig, theirs.sign(msg).to_bytes());
            let dalek_sig = ed25519_dalek::Signature::from_bytes(&sig);
            assert!(theirs.verifying_key().verify(msg, &dalek_sig).is_ok());
            assert!(ours
                .verifying_key()
                .verify(msg, &theirs.sign(msg).to_bytes()));
            // Their PEM encodings (v2 private key, SPKI public key) read here, and ours there.
            let v2 = theirs.to_pkcs8_pem(LineEnding::LF).unwrap();
            assert_eq!(SigningKey::from_pkcs8_pem(&v2).unwrap().to_bytes(), seed);
            let public = theirs
                .verifying_key()
                .to_public_key_pem(LineEnding::LF)
                .unwrap();
            assert_eq!(public, ours.verifying_key().to_public_key_pem());
            use ed25519_dalek::pkcs8::DecodePrivateKey;
            let back = ed25519_dalek::SigningKey::from_pkcs8_pem(&ours.to_pkcs8_pem()).unwrap();
            assert_eq!(back.to_bytes(), seed);
        }
    }
}
