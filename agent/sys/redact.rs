//! The one rule set that takes secrets out of free text bound for a status (evidence lines), a
//! log line or a support bundle: a log line, a config line, a command line written as text.
//!
//! A secret is found by its name (`password=`, `--pass X`, `"api_key": "…"`, `wifi.psk=`, a
//! value that is itself a pair: `systemd.setenv=API_KEY=…`), by the header that carries it
//! (`Authorization: Basic …`, `Cookie: …`), by the word before it (`Bearer …`, `token hf_…`), by
//! its shape (`hf_…`, `sk-…`, `ghp_…`, long high-entropy base64 or hex), in a URL
//! (`https://user:pw@host`, `?token=`) or as a private-key PEM block. Names are
//! [`is_secret_name`]'s, by the words they are made of, not a list of options. A command line
//! ([`redact_argv`]) goes word by word through the same rules.

#[path = "redact_shape.rs"]
mod shape;
pub use shape::is_secret_name;
use shape::{
    has_token_shape, is_digest_name, is_option_word, is_port_like, is_short_secret_option,
};

/// Every string in `v` (at any depth) through [`redact_text`]: a command's result (an apt log, a
/// file's new lines) before it is published.
pub fn redact_value(v: &mut serde_json::Value) {
    use serde_json::Value;
    match v {
        Value::String(t) => *t = redact_text(t),
        Value::Array(a) => a.iter_mut().for_each(redact_value),
        // A digest under its own name (`"sha256": "…"`, a bundle's checksum) is no secret.
        Value::Object(m) => m
            .iter_mut()
            .filter(|(k, v)| !(is_digest_name(k) && v.as_str().is_some_and(is_hex)))
            .for_each(|(_, v)| redact_value(v)),
        _ => {}
    }
}

/// `text` with every secret value replaced by [`REDACTED`], line by line; everything else is
/// kept as it is (spacing included).
pub fn redact_text(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut in_pem = false;
    for (i, line) in text.split('\n').enumerate() {
        if i > 0 {
            out.push('\n');
        }
        // A NUL carries no meaning in text and would hide a name from the rules (UTF-16 read
        // as bytes: `p\0a\0s\0s\0…`): it is dropped.
        let line = match line.contains('\0') {
            true => std::borrow::Cow::Owned(line.replace('\0', "")),
            false => std::borrow::Cow::Borrowed(line),
        };
        redact_line(&shape::pem_line(&line, &mut in_pem), &mut out);
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
    /// Inside a quoted secret that has spaces (`password="two words"`): hidden up to this quote.
    UntilQuote(char),
}

/// The quote `word` leaves open (an odd number of `"` or `'`), after a secret was hidden in it.
fn open_quote(word: &str) -> Option<char> {
    ['"', '\'']
        .into_iter()
        .find(|q| word.matches(*q).count() % 2 == 1)
}

fn redact_line(line: &str, out: &mut String) {
    let mut next = Next::Keep;
    let mut pieces = line.split_inclusive(char::is_whitespace);
    // What follows a quoted secret's closing quote in the same word, to be read as a word.
    let mut after_quote: Option<&str> = None;
    while let Some(piece) = after_quote.take().or_else(|| pieces.next()) {
        let word = piece.trim_end();
        let space = &piece[word.len()..];
        if word.is_empty() {
            // A second space: the next word is still the one the words before speak of.
            out.push_str(space);
            continue;
        }
        if let Next::UntilQuote(q) = next {
            // The rest of a quoted secret: hidden, and the text from its closing quote kept.
            if let Some(at) = word.find(q) {
                out.push(q);
                next = Next::Keep;
                // `"two words","api_key":"x"` is one word after the quote: still redacted.
                after_quote = Some(&piece[at + q.len_utf8()..]).filter(|r| !r.is_empty());
            }
            continue;
        }
        let core = word.trim_matches(|c: char| "\"'`,;()[]{}".contains(c));
        let lower = core.to_ascii_lowercase();
        if next == Next::Hide && word == "--" {
            // `--api-key -- X`: the end of options; the value is still the next word.
            out.push_str(piece);
            continue;
        }
        if next == Next::Hide && (shape::is_option_word(core) || core.starts_with("-----")) {
            // `--no-auth --port 80`: a flag, and the next option; or a PEM marker, whose body
            // is already out.
            next = Next::Keep;
        }
        let hide = match next {
            Next::Hide => true,
            Next::Scheme => !matches!(lower.as_str(), "basic" | "bearer" | "digest" | "token"),
            Next::IfCredential => looks_like_credential(core),
            Next::Keep | Next::UntilQuote(_) => false,
        };
        if hide {
            out.push_str(&splice(word, core));
            next = match open_quote(word) {
                Some(q) => Next::UntilQuote(q),
                None => {
                    out.push_str(space);
                    Next::Keep
                }
            };
            continue;
        }
        if next == Next::Scheme || (next == Next::IfCredential && matches!(core, "" | "=" | ":")) {
            // `Basic`/`Bearer`, or the `=`/`:` of `password = x`: the value is the next word.
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
        next = match open_quote(word).filter(|_| text != word && then == Next::Keep) {
            Some(q) => Next::UntilQuote(q),
            None => {
                out.push_str(space);
                then
            }
        };
    }
}

/// One word: its text with a secret taken out, and what it asks of the next word.
fn redact_word(word: &str, core: &str, lower: &str) -> (String, Next) {
    if has_token_shape(core) {
        return (splice(word, core), Next::Keep);
    }
    let text = match word.contains("://") {
        true => redact_url(word),
        false => word.to_string(),
    };
    if text.contains(['=', ':']) {
        let (text, pending) = redact_pairs(&text);
        return (text, if pending { Next::Hide } else { Next::Keep });
    }
    if core.starts_with('-') && is_secret_name(core) {
        return (text, Next::Hide);
    }
    let next = match lower {
        "bearer" => Next::Hide,
        _ if is_secret_name(lower) => Next::IfCredential,
        _ => Next::Keep,
    };
    (text, next)
}

/// Every `NAME=VALUE`, `NAME:VALUE` or `"NAME":"VALUE"` pair of `word` (pairs apart at `,` `&`
/// `;` `{` `}`: a query, compact JSON, a list) whose name is a secret name, its value replaced;
/// `true` when the last such pair has no value in the word (it is the next word).
fn redact_pairs(word: &str) -> (String, bool) {
    let mut out = String::with_capacity(word.len());
    let mut pending = false;
    for seg in word.split_inclusive([',', '&', ';', '{', '}']) {
        pending = false;
        let secret = pair(seg).and_then(|(name, value)| secret_value(seg, name, value));
        match secret {
            Some("") => {
                pending = true;
                out.push_str(seg);
            }
            Some(value) => out.push_str(&splice(seg, value)),
            None => out.push_str(seg),
        }
    }
    (out, pending)
}

/// The part of `value` (the value of `name` in `seg`) that is secret: all of it for a secret
/// name, or a value shaped like a secret under a name that is no digest's; the value of a pair
/// inside it (`systemd.setenv=API_KEY=x`, `--env=TOKEN=x`); else none.
fn secret_value<'a>(seg: &str, name: &str, value: &'a str) -> Option<&'a str> {
    if seg.contains("://") {
        return None;
    }
    if is_secret_name(name) {
        return Some(value);
    }
    if has_token_shape(value) && !is_digest_name(name) {
        return Some(value);
    }
    let (inner_name, inner_value) = value.split_once('=')?;
    is_secret_name(inner_name).then_some(inner_value)
}

/// The name and value of a `NAME=VALUE` / `NAME:VALUE` piece, quotes and brackets trimmed.
fn pair(seg: &str) -> Option<(&str, &str)> {
    let i = seg.find(['=', ':'])?;
    let trim = |t: &'static str| move |c: char| t.contains(c);
    let name = seg[..i].trim_matches(trim("\"'`([{,;&"));
    let value = seg[i + 1..].trim_matches(trim("\"'`)]},;&"));
    Some((name, value))
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

fn is_hex(s: &str) -> bool {
    s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// A word after a bare `token` or `password` that is a value, not prose: 8 or more characters
/// with a digit, of the characters credentials are made of.
fn looks_like_credential(w: &str) -> bool {
    w.len() >= 8 && w.bytes().any(|b| b.is_ascii_digit()) && w.bytes().all(|b| b.is_ascii_graphic())
}

/// What a redacted value is replaced with.
pub const REDACTED: &str = "<redacted>";

/// A word with the credentials of any URL in it replaced: the `user:password@` part
/// (`https://u:pw@host/m.gguf` -> `https://<redacted>@host/m.gguf`) and the value of a query
/// parameter with a secret name (`?token=...`). Other text is kept as it is.
pub fn redact_url(word: &str) -> String {
    let Some(scheme_end) = word.find("://") else {
        return word.to_string();
    };
    let (head, rest) = word.split_at(scheme_end + 3);
    let auth_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(auth_end);
    let mut out = head.to_string();
    match authority.rfind('@') {
        Some(at) => {
            out.push_str(REDACTED);
            out.push_str(&authority[at..]);
        }
        None => out.push_str(authority),
    }
    match tail.split_once('?') {
        Some((path, query)) => {
            out.push_str(path);
            out.push('?');
            let (query, frag) = match query.split_once('#') {
                Some((q, f)) => (q, Some(f)),
                None => (query, None),
            };
            let pairs: Vec<String> = query
                .split('&')
                .map(|kv| match kv.split_once('=') {
                    Some((k, _)) if is_secret_name(k) => format!("{k}={REDACTED}"),
                    _ => kv.to_string(),
                })
                .collect();
            out.push_str(&pairs.join("&"));
            if let Some(f) = frag {
                out.push('#');
                out.push_str(f);
            }
        }
        None => out.push_str(tail),
    }
    out
}

/// A command line with every secret value replaced by [`REDACTED`]: the word after a secret
/// option (`--api-key SECRET`, `--api-key -- SECRET`, `-p SECRET` unless a port), the value of
/// `--api-key=SECRET`, `NAME=SECRET` words (an `env HF_TOKEN=... llama-server` prefix), and
/// every word through [`redact_text`] (URLs, secret shapes, nested pairs). Options are secret by
/// [`is_secret_name`]'s meaning, not a list. Everything else is kept as it is.
pub fn redact_argv(argv: &[String]) -> Vec<String> {
    #[derive(PartialEq)]
    enum Pending {
        No,
        Value,
        UnlessPort,
    }
    let mut out = Vec::with_capacity(argv.len());
    let mut pending = Pending::No;
    for word in argv {
        match std::mem::replace(&mut pending, Pending::No) {
            Pending::Value if word == "--" => {
                out.push(word.clone());
                pending = Pending::Value;
                continue;
            }
            Pending::Value if !is_option_word(word) => {
                out.push(REDACTED.to_string());
                continue;
            }
            Pending::UnlessPort if !is_port_like(word) && !is_option_word(word) => {
                out.push(REDACTED.to_string());
                continue;
            }
            _ => {}
        }
        // `NAME=VALUE` (an option or a variable; a URL's query is left to `redact_url`).
        if let Some((name, _)) = word.split_once('=').filter(|(n, _)| !n.contains("://")) {
            if is_secret_name(name) {
                out.push(format!("{name}={REDACTED}"));
                continue;
            }
        } else if word.starts_with('-') && is_secret_name(word) {
            pending = Pending::Value;
        } else if is_short_secret_option(word) {
            pending = Pending::UnlessPort;
        }
        out.push(redact_text(word));
    }
    out
}

#[cfg(test)]
mod redact_tests {
    use super::*;

    fn v(s: &str) -> Vec<String> {
        s.split(' ').map(str::to_string).collect()
    }

    #[test]
    fn command_lines_lose_their_secrets() {
        let argv = v("env HF_TOKEN=hf_abc llama-server -m /m.gguf --api-key sk-123 --hf-token=hf_def \
                      --ssl-key-file /k.pem --db-password pw1 --client-secret s2 -ngl 99 --ssl-key kk");
        let r = redact_argv(&argv).join(" ");
        for s in ["hf_abc", "sk-123", "hf_def", "pw1", "s2", " kk"] {
            assert!(!r.contains(s), "{s} in {r}");
        }
        assert!(r.contains("-m /m.gguf") && r.contains("-ngl 99"), "{r}");
        assert!(
            r.contains("--ssl-key-file /k.pem"),
            "a key file path is not a secret: {r}"
        );
        assert!(r.contains("--api-key <redacted>"), "{r}");
    }

    /// URL credentials and llama.cpp's `-hft` never survive; the host and path do.
    #[test]
    fn urls_and_short_token_options_lose_their_secrets() {
        let argv = v(
            "llama-server -mu https://bob:pw9xq@models.example/q4.gguf?token=tk7z&x=1 \
                      -hf org/repo -hft hf_short --model-url=http://u2:p2zz@h/m.gguf",
        );
        let r = redact_argv(&argv).join(" ");
        for s in ["pw9xq", "bob", "tk7z", "hf_short", "p2zz", "u2:"] {
            assert!(!r.contains(s), "{s} in {r}");
        }
        assert!(
            r.contains("@models.example/q4.gguf?token=<redacted>&x=1"),
            "{r}"
        );
        assert!(r.contains("-hf org/repo"), "{r}");
        assert_eq!(redact_url("no url here"), "no url here");
        assert_eq!(redact_url("https://h/p"), "https://h/p");
    }
}

#[cfg(test)]
#[path = "redact_tests.rs"]
pub(crate) mod tests;
