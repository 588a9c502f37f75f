use super::*;

/// (secret, text) pairs and kept texts of `redact_corpus.txt`.
pub(crate) fn corpus() -> (Vec<(&'static str, &'static str)>, Vec<&'static str>) {
    let mut secrets = Vec::new();
    let mut keep = Vec::new();
    for l in include_str!("redact_corpus.txt").lines() {
        if l.starts_with('#') || l.is_empty() {
            continue;
        }
        let (secret, text) = l.split_once('\t').expect("SECRET<TAB>TEXT");
        assert!(secret == "KEEP" || text.contains(secret), "{l}");
        match secret {
            "KEEP" => keep.push(text),
            _ => secrets.push((secret, text)),
        }
    }
    (secrets, keep)
}

#[test]
fn no_secret_of_the_corpus_survives_and_plain_text_is_kept() {
    let (secrets, keep) = corpus();
    assert!(secrets.len() >= 25, "{}", secrets.len());
    for (secret, text) in secrets {
        let r = redact_text(text);
        assert!(!r.contains(secret), "{secret:?} survived in {r:?}");
        assert!(r.contains(REDACTED), "{r:?}");
    }
    for text in keep {
        assert_eq!(redact_text(text), text);
    }
}

#[test]
fn spacing_lines_and_the_name_are_kept() {
    assert_eq!(
        redact_text("a  pass=pa\n\tpassword:  x9x9x9x9 end"),
        "a  pass=<redacted>\n\tpassword:  <redacted> end"
    );
    assert_eq!(redact_text(""), "");
}

/// A command line's words (the status's `cmdline`) go through the same rules.
#[test]
fn command_lines_in_the_status_use_the_same_rules() {
    let argv: Vec<String> = [
        "llama-server",
        "--header",
        "Authorization: Bearer hdrTok99",
        "--pass",
        "p1p1p1",
        "--passphrase",
        "ph2",
        "--api-key=k3k3k3",
    ]
    .map(String::from)
    .to_vec();
    let r = crate::sys::redact::redact_argv(&argv).join(" ");
    for s in ["hdrTok99", "p1p1p1", "ph2", "k3k3k3"] {
        assert!(!r.contains(s), "{s} in {r}");
    }
    assert!(r.contains("llama-server --header"), "{r}");
}

/// A command's result is redacted at every depth; prose about signatures is left alone.
#[test]
fn results_lose_secrets_at_any_depth() {
    let mut v = serde_json::json!({"reason": "bad signature: no trusted key verifies it",
        "result": {"log": ["Get:1 http://bob:proxyPw9@proxy:3128 stable"], "n": 3}});
    redact_value(&mut v);
    let t = v.to_string();
    assert!(!t.contains("proxyPw9") && t.contains(REDACTED), "{t}");
    assert_eq!(v["reason"], "bad signature: no trusted key verifies it");
    assert_eq!(v["result"]["n"], 3);
}

/// Issue 37 item 7: the corpus of expected redactions (`tests/fixtures/redaction/corpus.txt`),
/// text and command lines, secrets out and legitimate values kept byte for byte.
#[test]
fn the_redaction_corpus() {
    let corpus = include_str!("../../tests/fixtures/redaction/corpus.txt");
    let mut failures = Vec::new();
    let mut n = 0;
    for l in corpus.lines() {
        if l.starts_with('#') || l.is_empty() {
            continue;
        }
        let f: Vec<&str> = l.split('\t').collect();
        assert_eq!(f.len(), 3, "KIND<TAB>INPUT<TAB>EXPECTED: {l}");
        let input = f[1].replace("<NL>", "\n");
        let want = match f[2] {
            "=" => input.clone(),
            w => w.replace("<NL>", "\n"),
        };
        let got = match f[0] {
            "text" => redact_text(&input),
            "argv" => {
                let argv: Vec<String> = input.split(' ').map(String::from).collect();
                crate::sys::redact::redact_argv(&argv).join(" ")
            }
            k => panic!("unknown kind {k:?}: {l}"),
        };
        n += 1;
        if got != want {
            failures.push(format!("{}\n  got:  {got:?}\n  want: {want:?}", f[1]));
        }
    }
    assert!(n >= 30, "{n} lines");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
