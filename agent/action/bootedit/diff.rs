//! Unified diffs of an edit, as `cma set --dry-run` and the command result show them.

use super::FileEdit;

/// Unified-style hunks between two texts (one hunk around the changed region, one line of
/// context each side). Lines are shown without their endings, control characters escaped
/// (`\u{1b}`).
pub fn diff_hunks(old: &str, new: &str) -> String {
    let a: Vec<&str> = old.split_inclusive('\n').collect();
    let b: Vec<&str> = new.split_inclusive('\n').collect();
    if a == b {
        return String::new();
    }
    let prefix = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
    let max_suffix = a.len().min(b.len()) - prefix;
    let suffix = a
        .iter()
        .rev()
        .zip(b.iter().rev())
        .take(max_suffix)
        .take_while(|(x, y)| x == y)
        .count();
    let ctx_before = prefix.min(1);
    let ctx_after = suffix.min(1);
    let start = prefix - ctx_before;
    let a_end = a.len() - suffix + ctx_after;
    let b_end = b.len() - suffix + ctx_after;
    // A boot file is board text: a control character (an escape sequence that would clear the
    // operator's screen or move the cursor) is shown as `\u{1b}`, visible and inert.
    let show = |l: &str| {
        l.trim_end_matches('\n')
            .trim_end_matches('\r')
            .chars()
            .map(|c| {
                if c.is_control() && c != '\t' {
                    c.escape_default().to_string()
                } else {
                    c.to_string()
                }
            })
            .collect::<String>()
    };
    let range = |start: usize, len: usize| {
        if len == 0 {
            format!("{start},0")
        } else {
            format!("{},{len}", start + 1)
        }
    };
    let mut out = format!(
        "@@ -{} +{} @@\n",
        range(start, a_end - start),
        range(start, b_end - start)
    );
    for l in &a[start..prefix] {
        out.push_str(&format!(" {}\n", show(l)));
    }
    for l in &a[prefix..a.len() - suffix] {
        out.push_str(&format!("-{}\n", show(l)));
    }
    for l in &b[prefix..b.len() - suffix] {
        out.push_str(&format!("+{}\n", show(l)));
    }
    for l in &a[a.len() - suffix..a_end] {
        out.push_str(&format!(" {}\n", show(l)));
    }
    out
}

/// `--- path` / `+++ path` header plus the edit's hunks.
pub fn diff_with_header(path: &str, edit: &FileEdit) -> String {
    if edit.diff.is_empty() {
        return String::new();
    }
    format!("--- {path}\n+++ {path}\n{}", edit.diff)
}
