//! What makes a name or a value secret for [`super`]: an option or variable name by its meaning
//! (the words it is made of), a value by its shape (an issued token, a long high-entropy
//! base64 or hex string), and private-key PEM blocks.

/// Words that make a name secret wherever they stand in it as a whole word (`--api-key`,
/// `wifi.psk`, `accessToken`, `X-Amz-Signature`); compounds ending in one of the long ones count
/// too (`hftoken`, `dbpassword`, `clientsecret`).
const SECRET_WORDS: &[&str] = &[
    "token",
    "password",
    "passwd",
    "passphrase",
    "secret",
    "secrets",
    "credential",
    "credentials",
    "cred",
    "creds",
    "apikey",
    "privatekey",
    "accesskey",
    "secretkey",
    "authkey",
    "sslkey",
    "tlskey",
    "hmackey",
    "signingkey",
    "masterkey",
    "webhook",
    "cookie",
    "cookies",
    "bearer",
    "key",
    "pass",
    "pwd",
    "psk",
    "pw",
    "sig",
    "access",
    "session",
    "sessionid",
    "jwt",
    "hft",
    "otp",
];

/// Long words a compound may end in and still be secret (`hftoken`, `dbpassword`).
const SECRET_SUFFIXES: &[&str] = &[
    "token",
    "password",
    "passwd",
    "passphrase",
    "secret",
    "credential",
    "credentials",
    "apikey",
    "privatekey",
    "webhook",
    "cookie",
];

/// A last word that says the value is where a secret is, or a measure of one, not the secret:
/// `--ssl-key-file /k.pem`, `--max-tokens 512`... (`tokens` alone is no secret word either),
/// `--session-timeout 30`, `access_log=/var/log/x`, `--password-stdin`.
const NOT_A_VALUE: &[&str] = &[
    "file",
    "path",
    "dir",
    "directory",
    "folder",
    "log",
    "size",
    "len",
    "length",
    "count",
    "limit",
    "max",
    "min",
    "timeout",
    "ttl",
    "interval",
    "type",
    "mode",
    "format",
    "level",
    "port",
    "host",
    "stdin",
    "required",
    "enabled",
];

/// The words of a name: split at `-`, `_`, `.`, `/`, space and a lower-to-upper case change
/// (`privateKeyPem` -> private, key, pem), lower-cased.
fn words(name: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut prev_lower = false;
    for c in name.chars() {
        if matches!(c, '-' | '_' | '.' | '/' | ' ') {
            if !cur.is_empty() {
                out.push(std::mem::take(&mut cur));
            }
            prev_lower = false;
            continue;
        }
        if c.is_ascii_uppercase() && prev_lower && !cur.is_empty() {
            out.push(std::mem::take(&mut cur));
        }
        prev_lower = c.is_ascii_lowercase() || c.is_ascii_digit();
        cur.push(c.to_ascii_lowercase());
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// True for an option or variable name whose value is a secret, by what it means: any of its
/// words is a secret word (`key`, `token`, `secret`, `pass`, `pwd`, `psk`, `auth…`,
/// `credential`, `access`, `webhook`, `cookie`, `session`…, see `SECRET_WORDS`) or a compound
/// ending in one (`hftoken`), unless its last word says the value is a location or a measure
/// (`--ssl-key-file`, `--max-tokens`, `--session-timeout`). A bare `signature` is prose, not a
/// name (`bad signature: ...`); `X-Amz-Signature` is one. Case and separators do not matter.
pub fn is_secret_name(name: &str) -> bool {
    let w = words(name.trim_start_matches('-'));
    let Some(last) = w.last() else {
        return false;
    };
    if NOT_A_VALUE.contains(&last.as_str()) {
        return false;
    }
    let secret_word = |s: &String| {
        SECRET_WORDS.contains(&s.as_str())
            || SECRET_SUFFIXES.iter().any(|x| s.ends_with(x))
            || (s.starts_with("auth") && !s.starts_with("author"))
            || s.contains("oauth")
    };
    w.iter().any(secret_word) || (w.len() > 1 && last == "signature")
}

/// Short options whose value is a password by custom (`mysql -p`, `sshpass -p`), unless the
/// value is a port or a port mapping (`ssh -p 22`, `docker run -p 8080:80/tcp`).
pub fn is_short_secret_option(word: &str) -> bool {
    word == "-p"
}

/// A value that is a port or a port mapping (`22`, `8080:80`, `127.0.0.1:8080:80/tcp`).
pub fn is_port_like(value: &str) -> bool {
    !value.is_empty()
        && value
            .trim_end_matches("/tcp")
            .trim_end_matches("/udp")
            .bytes()
            .all(|b| b.is_ascii_digit() || b == b':' || b == b'.' || b == b'-')
}

/// An option word (`--port`, `-ngl`): after a secret option that takes no value (`--no-auth
/// --port 80`), it is the next option, not a value.
pub fn is_option_word(word: &str) -> bool {
    let b = word.as_bytes();
    match b {
        [b'-', b'-', c, ..] => c.is_ascii_alphabetic(),
        [b'-', c, ..] => c.is_ascii_alphabetic(),
        _ => false,
    }
}

/// Prefixes of issued tokens (Hugging Face, OpenAI, GitHub, GitLab, Slack), at 16 characters
/// or more.
const TOKEN_PREFIXES: [&str; 8] = [
    "hf_",
    "sk-",
    "ghp_",
    "gho_",
    "github_pat_",
    "glpat-",
    "xoxb-",
    "xoxp-",
];

/// An issued token by its prefix, or a value shaped like a generated secret
/// ([`is_high_entropy`]).
pub fn has_token_shape(w: &str) -> bool {
    (w.len() >= 16
        && TOKEN_PREFIXES.iter().any(|p| w.starts_with(p))
        && w.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_-".contains(&b)))
        || is_high_entropy(w)
}

/// A generated secret by its shape: 32 characters or more of base64/base64url with upper and
/// lower case letters and digits, few separators (a model name such as
/// `Meta-Llama-3-8B-Instruct-Q4_K_M` has many) and high entropy; or 32 hex digits or more with
/// both digits and letters. Not a path (`/...`), not an option (`--...`). Digests named as such
/// (`sha256:…`) are the caller's to keep.
pub fn is_high_entropy(w: &str) -> bool {
    if w.len() < 32 || w.starts_with(['/', '-', '.', '~']) {
        return false;
    }
    // Base64 padding only at the end: `name=value` is a pair, not one value.
    let bytes = w.trim_end_matches('=').as_bytes();
    if !bytes
        .iter()
        .all(|b| b.is_ascii_alphanumeric() || b"+/_-".contains(b))
    {
        return false;
    }
    let count = |f: fn(&u8) -> bool| bytes.iter().filter(|b| f(b)).count();
    let digits = count(u8::is_ascii_digit);
    if bytes.iter().all(u8::is_ascii_hexdigit) {
        return digits > 0 && digits < bytes.len();
    }
    let (upper, lower) = (count(u8::is_ascii_uppercase), count(u8::is_ascii_lowercase));
    let separators = count(|b| b"-_/".contains(b));
    upper >= 2
        && lower >= 2
        && digits >= 2
        && separators * 8 <= bytes.len()
        && entropy_bits(w) >= 4.2
}

/// Shannon entropy of `w`'s bytes, bits per byte.
fn entropy_bits(w: &str) -> f64 {
    let mut n = [0u32; 256];
    for b in w.bytes() {
        n[b as usize] += 1;
    }
    let len = w.len() as f64;
    n.iter()
        .filter(|c| **c > 0)
        .map(|c| {
            let p = f64::from(*c) / len;
            -p * p.log2()
        })
        .sum()
}

/// Names of digests whose hex value is no secret (`sha256:…`, `"digest": "…"`).
pub fn is_digest_name(name: &str) -> bool {
    words(name).iter().any(|w| {
        matches!(
            w.as_str(),
            "sha1" | "sha256" | "sha512" | "md5" | "digest" | "hash" | "checksum" | "commit"
        )
    })
}

/// A line with private-key PEM blocks taken out: the body between `-----BEGIN … PRIVATE
/// KEY-----` (any label: RSA, EC, OPENSSH, ENCRYPTED, PGP … BLOCK) and its `-----END …-----`
/// becomes [`super::REDACTED`], in one line (a key pasted on one line, or with `\n` escapes) or
/// across lines: `in_block` carries an open block to the next line, whose text is hidden until
/// the END line.
pub fn pem_line(line: &str, in_block: &mut bool) -> String {
    let mut out = String::with_capacity(line.len());
    let mut rest = line;
    loop {
        if *in_block {
            match rest.find("-----END") {
                Some(end) => {
                    if !rest[..end].trim().is_empty() {
                        out.push_str(super::REDACTED);
                    }
                    *in_block = false;
                    rest = &rest[end..];
                }
                None => {
                    if !rest.trim().is_empty() {
                        out.push_str(super::REDACTED);
                    }
                    return out;
                }
            }
        }
        let Some(begin) = rest.find("-----BEGIN") else {
            out.push_str(rest);
            return out;
        };
        let after = &rest[begin + 10..];
        let Some(close) = after.find("-----") else {
            out.push_str(rest);
            return out;
        };
        let label = &after[..close];
        let marker_end = begin + 10 + close + 5;
        out.push_str(&rest[..marker_end]);
        rest = &rest[marker_end..];
        if label.contains("PRIVATE KEY") {
            *in_block = true;
        }
    }
}
