//! The one rule set that takes secrets out of free text bound for a status (evidence lines), a
//! log line or a support bundle: a log line, a config line, a command line written as text.
//!
//! A secret is found by its name (`password=`, `--pass X`, `"api_key": "…"`, `psk=`), by the
//! header that carries it (`Authorization: Basic …`, `Cookie: …`), by the word before it
//! (`Bearer …`, `token hf_…`), by its shape (`hf_…`, `sk-…`, `ghp_…`) or in a URL
//! (`https://user:pw@host`, `?token=`). Names are [`is_secret_name`]'s.

use super::secret::{is_secret_name, redact_url, REDACTED};

/// `text` with every secret value replaced by [`REDACTED`], line by line; everything else is
/// kept as it is (spacing included).
pub fn redact_text(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for (i, line) in text.split('\n').enumerate() {
        if i > 0 {
            out.push('\n');
        }
        redact_line(line, &mut out);
    }
    out
}

/// What the words before ask of the next one.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Next {
    Keep,
    /// The value of a secret option or name: hidden.
    Hide,
    /// After `Authorization:`: a scheme word (`Basic`, `Bearer`) is kept, then the value hidden.
    Scheme,
    /// After a bare word such as `token`: hidden when it looks like a credential.
    IfCredential,
}

fn redact_line(line: &str, out: &mut String) {
    let mut next = Next::Keep;
    for piece in line.split_inclusive(char::is_whitespace) {
        let word = piece.trim_end();
        let space = &piece[word.len()..];
        if word.is_empty() {
            // A second space: the next word is still the one the words before speak of.
            out.push_str(space);
            continue;
        }
        let core = word.trim_matches(|c: char| "\"'`,;()[]{}".contains(c));
        let lower = core.to_ascii_lowercase();
        let hide = match next {
            Next::Hide => true,
            Next::Scheme => !matches!(lower.as_str(), "basic" | "bearer" | "digest" | "token"),
            Next::IfCredential => looks_like_credential(core),
            Next::Keep => false,
        };
        if hide {
            out.push_str(&splice(word, core));
            out.push_str(space);
            next = Next::Keep;
            continue;
        }
        if next == Next::Scheme {
            out.push_str(piece);
            next = Next::Hide;
            continue;
        }
        if matches!(lower.as_str(), "cookie:" | "set-cookie:") {
            // A cookie header's value runs to the end of the line.
            out.push_str(piece);
            out.push_str(REDACTED);
            return;
        }
        if matches!(lower.as_str(), "authorization:" | "proxy-authorization:") {
            next = Next::Scheme;
            out.push_str(piece);
            continue;
        }
        let (text, then) = redact_word(word, core, &lower);
        out.push_str(&text);
        out.push_str(space);
        next = then;
    }
}

/// One word: its text with a secret taken out, and what it asks of the next word.
fn redact_word(word: &str, core: &str, lower: &str) -> (String, Next) {
    if word.contains("://") {
        return (redact_url(word), Next::Keep);
    }
    if has_token_shape(core) {
        return (splice(word, core), Next::Keep);
    }
    // NAME=VALUE, NAME:VALUE, "NAME":"VALUE".
    if let Some(i) = core.find(['=', ':']) {
        let name = core[..i].trim_matches(|c: char| "\"'".contains(c));
        let value = core[i + 1..].trim_matches(|c: char| "\"'".contains(c));
        if is_secret_name(name) {
            if value.is_empty() {
                return (word.to_string(), Next::Hide);
            }
            return (splice(word, value), Next::Keep);
        }
        return (word.to_string(), Next::Keep);
    }
    if core.starts_with('-') && is_secret_name(core) {
        return (word.to_string(), Next::Hide);
    }
    let next = match lower {
        "bearer" => Next::Hide,
        _ if is_secret_name(lower) => Next::IfCredential,
        _ => Next::Keep,
    };
    (word.to_string(), next)
}

/// `word` with `part`, a slice of it, replaced by [`REDACTED`].
fn splice(word: &str, part: &str) -> String {
    let start = (part.as_ptr() as usize).saturating_sub(word.as_ptr() as usize);
    let end = (start + part.len()).min(word.len());
    match (word.get(..start), word.get(end..)) {
        (Some(head), Some(tail)) => format!("{head}{REDACTED}{tail}"),
        _ => REDACTED.to_string(),
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

fn has_token_shape(w: &str) -> bool {
    w.len() >= 16
        && TOKEN_PREFIXES.iter().any(|p| w.starts_with(p))
        && w.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_-".contains(&b))
}

/// A word after a bare `token` or `password` that is a value, not prose: 8 or more characters
/// with a digit, of the characters credentials are made of.
fn looks_like_credential(w: &str) -> bool {
    w.len() >= 8 && w.bytes().any(|b| b.is_ascii_digit()) && w.bytes().all(|b| b.is_ascii_graphic())
}

#[cfg(test)]
#[path = "redact_tests.rs"]
pub(crate) mod tests;
