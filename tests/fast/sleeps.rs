//! The suite's own rule on waiting: a test waits for what it expects (a message, a file, a
//! process state) with a deadline, polling in a loop; a fixed sleep, one that is not the body
//! of a loop, stands for something the test could wait on instead. The few left are listed
//! here with what they cost, and their total stays under [`MAX_FIXED_SLEEP_S`].

use std::path::{Path, PathBuf};

/// The most the listed fixed sleeps may add up to in one run of the suite, seconds.
const MAX_FIXED_SLEEP_S: f64 = 20.0;

/// The fixed sleeps left: file, the call as written (whitespace collapsed), and the seconds it
/// costs per run of the suite (its duration times how often it runs). Shrink-only: a fixed
/// sleep not listed fails, and so does a listed one no longer found.
const FIXED_SLEEPS_LEFT: &[(&str, &str, f64)] = &[
    // A negative check: no second "cannot connect" line per cause within 4 s (the agent
    // retries about four times in it under the tests' 2 s cap); two tests.
    (
        "tests/system/interop.rs",
        "sleep(Duration::from_secs(4))",
        8.0,
    ),
    // A rate: at most 8 statuses in 6 s with interval_s = 2 (not a publish loop).
    (
        "tests/system/mqtt/commands.rs",
        "sleep(Duration::from_secs(6))",
        6.0,
    ),
    // Lets the publisher thread put retained statuses on the broker before `fleet watch`.
    (
        "tests/system/mqtt/fleet_tools.rs",
        "sleep(Duration::from_millis(200))",
        0.2,
    ),
    // Holds a session takeover open for a moment, twice in the flood.
    (
        "tests/system/mqtt/commands.rs",
        "sleep(Duration::from_millis(300))",
        0.6,
    ),
];

/// Every `.rs` file under `dir`, sorted.
fn sources(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let p = entry.unwrap().path();
        if p.is_dir() {
            out.extend(sources(&p));
        } else if p.extension().is_some_and(|e| e == "rs") {
            out.push(p);
        }
    }
    out.sort();
    out
}

/// `text` with comments and the insides of string and char literals blanked (newlines kept),
/// so that braces in format strings do not count as blocks.
fn code_only(text: &str) -> String {
    let c: Vec<char> = text.chars().collect();
    let at = |k: usize| c.get(k).copied().unwrap_or('\0');
    let blank = |ch: char| if ch == '\n' { '\n' } else { ' ' };
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < c.len() {
        let (now, next, after) = (c[i], at(i + 1), at(i + 2));
        // The end of what is skipped (exclusive), and how much of each end is kept as is.
        let (end, keep_open, keep_close) = if now == '/' && next == '/' {
            let e = (i..c.len()).find(|&k| c[k] == '\n').unwrap_or(c.len());
            (e, 0, 0)
        } else if now == '/' && next == '*' {
            let e = (i + 2..c.len()).find(|&k| c[k] == '*' && at(k + 1) == '/');
            (e.map_or(c.len(), |e| e + 2), 0, 0)
        } else if now == 'r' && (next == '"' || (next == '#' && (after == '"' || after == '#'))) {
            // r"...", r#"..."#, r##"..."##
            let hashes = (i + 1..c.len()).take_while(|&k| c[k] == '#').count();
            let body = i + 2 + hashes;
            let close = (body..c.len())
                .find(|&k| c[k] == '"' && (1..=hashes).all(|h| at(k + h) == '#'))
                .unwrap_or(c.len());
            (close + 1 + hashes, 2 + hashes, 1 + hashes)
        } else if now == '"' || (now == '\'' && (after == '\'' || next == '\\')) {
            // A string, or a char literal ('{', '\n', '\''); a lifetime ('a) has no closing quote.
            let mut k = i + 1;
            while k < c.len() && c[k] != now {
                k += if c[k] == '\\' { 2 } else { 1 };
            }
            (k + 1, 1, 1)
        } else {
            out.push(now);
            i += 1;
            continue;
        };
        let end = end.min(c.len());
        for (k, &ch) in c.iter().enumerate().take(end).skip(i) {
            let kept = k < i + keep_open || k + keep_close >= end;
            out.push(if kept { ch } else { blank(ch) });
        }
        i = end;
    }
    out
}

/// Whether `header` (the code before a block's `{`) opens a loop body.
fn opens_loop(header: &str) -> bool {
    header
        .split(|ch: char| !(ch.is_alphanumeric() || ch == '_'))
        .any(|w| w == "loop" || w == "while" || w == "for")
}

/// Whether `header` opens a `match` or one of its arms (looked through: a poll often sleeps in
/// an `Err(_) =>` arm).
fn opens_match(header: &str) -> bool {
    let h = header.trim_end();
    h.ends_with("=>")
        || h.split(|ch: char| !(ch.is_alphanumeric() || ch == '_'))
            .any(|w| w == "match")
}

/// The fixed sleeps of `text`: each `sleep(...)` call (whitespace collapsed) whose nearest
/// enclosing block, `match` blocks and arms aside, is not the body of a loop.
fn fixed_sleeps(text: &str) -> Vec<String> {
    let code = code_only(text);
    let mut out = Vec::new();
    let mut headers: Vec<String> = Vec::new();
    let mut current = String::new();
    for (at, ch) in code.char_indices() {
        if code[at..].starts_with("sleep(") {
            let polls = headers
                .iter()
                .rev()
                .find(|h| !opens_match(h))
                .is_some_and(|h| opens_loop(h));
            if !polls {
                let mut depth = 0;
                let end = code[at..]
                    .char_indices()
                    .find(|&(_, c)| {
                        depth += i32::from(c == '(') - i32::from(c == ')');
                        c == ')' && depth == 0
                    })
                    .map_or(code.len(), |(k, _)| at + k + 1);
                out.push(code[at..end].split_whitespace().collect::<String>());
            }
        }
        match ch {
            '{' => headers.push(std::mem::take(&mut current)),
            '}' => {
                headers.pop();
                current.clear();
            }
            ';' => current.clear(),
            _ => current.push(ch),
        }
    }
    out
}

/// Seconds in a `from_secs(N)` / `from_millis(N)` literal, if the call has one.
fn literal_s(call: &str) -> Option<f64> {
    let n = |after: &str| -> Option<f64> {
        let rest = call.split(after).nth(1)?;
        rest.split(')').next()?.replace('_', "").parse().ok()
    };
    n("from_secs(").or_else(|| n("from_millis(").map(|ms| ms / 1000.0))
}

#[test]
fn fixed_sleeps_are_listed_and_stay_under_the_limit() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut found = Vec::new();
    for p in sources(&root.join("tests")) {
        let file = p.strip_prefix(root).unwrap().display().to_string();
        for call in fixed_sleeps(&std::fs::read_to_string(&p).unwrap()) {
            found.push((file.clone(), call));
        }
    }
    let mut unlisted = found.clone();
    let mut gone = Vec::new();
    for (file, call, s) in FIXED_SLEEPS_LEFT {
        match unlisted.iter().position(|(f, c)| f == file && c == call) {
            Some(k) => {
                unlisted.remove(k);
            }
            None => gone.push(format!("{file}: {call}")),
        }
        if let Some(lit) = literal_s(call) {
            assert!(
                *s >= lit,
                "{file}: {call} costs at least {lit} s, listed {s}"
            );
        }
    }
    assert!(
        unlisted.is_empty(),
        "fixed sleeps: wait on the condition they stand for (or list them): {unlisted:?}"
    );
    assert!(
        gone.is_empty(),
        "listed but not found: take them out of FIXED_SLEEPS_LEFT: {gone:?}"
    );
    let total: f64 = FIXED_SLEEPS_LEFT.iter().map(|(_, _, s)| s).sum();
    assert!(
        total < MAX_FIXED_SLEEP_S,
        "fixed sleeps add up to {total} s"
    );
    eprintln!("fixed sleeps: {} calls, {total:.1} s", found.len());
}

#[test]
fn the_sleep_finder_tells_polls_from_fixed_sleeps() {
    let text = r##"
fn a() {
    sleep(Duration::from_secs(3)); // fixed
    loop {
        if done() { break; }
        sleep(Duration::from_millis(10)); // a poll
    }
    while !format!("{}", x).contains("{") {
        match try_it() {
            Ok(_) => break,
            Err(_) => sleep(Duration::from_millis(50)), // a poll
        }
    }
    for i in 0..3 {
        if i == 1 {
            sleep(Duration::from_millis(300)); // fixed, in a loop
        }
    }
    let c = '{';
    /* sleep(Duration::from_secs(9)) in a comment */
    let s = r#"sleep(Duration::from_secs(9)) in a string"#;
    let t = "a \" sleep(Duration::from_secs(9)) {";
}
"##;
    assert_eq!(
        fixed_sleeps(text),
        [
            "sleep(Duration::from_secs(3))",
            "sleep(Duration::from_millis(300))"
        ]
    );
    assert_eq!(literal_s("sleep(Duration::from_millis(5_100))"), Some(5.1));
}
