//! Words for `llm.override_tensor`: tensor names described by their common shape, layer
//! ranges, and why an `-ot` pattern matches no tensor (a misspelt literal, an unescaped dot, a
//! digit class without `+`) with the pattern that would.

use super::moe::{self, Model, Pattern, Rule};

/// `blk.N.ffn_{gate,up,down}_exps.weight for N in 10-13`, or a plain list when the layers differ in
/// their tensor kinds.
pub(super) fn describe_tensors(names: &[&str]) -> String {
    // (layer, tensor kinds), kept sorted by layer.
    let mut by_layer: Vec<(u64, Vec<String>)> = Vec::new();
    let mut other = Vec::new();
    for n in names {
        match moe::layer_of(n) {
            Some(l) => {
                let kind = n.splitn(3, '.').nth(2).unwrap_or("").to_string();
                match by_layer.binary_search_by_key(&l, |(k, _)| *k) {
                    Ok(i) => by_layer[i].1.push(kind),
                    Err(i) => by_layer.insert(i, (l, vec![kind])),
                }
            }
            None => other.push(n.to_string()),
        }
    }
    let kinds: Vec<&Vec<String>> = by_layer.iter().map(|(_, k)| k).collect();
    let same = kinds.windows(2).all(|w| w[0] == w[1]);
    if !by_layer.is_empty() && same && other.is_empty() {
        let k = kinds[0];
        let layers: Vec<u64> = by_layer.iter().map(|(l, _)| *l).collect();
        let kind = if k.len() == 1 {
            k[0].clone()
        } else {
            // ffn_gate_exps.weight, ffn_up_exps.weight → ffn_{gate,up}_exps.weight
            let pre = common_prefix(k);
            let suf = common_suffix(k);
            if pre.len() + suf.len() < k.iter().map(String::len).min().unwrap_or(0) {
                let mids: Vec<&str> = k
                    .iter()
                    .map(|s| &s[pre.len()..s.len() - suf.len()])
                    .collect();
                format!("{pre}{{{}}}{suf}", mids.join(","))
            } else {
                k.join(", ")
            }
        };
        return format!("blk.N.{kind} for N in {}", ranges(&layers));
    }
    let mut all: Vec<String> = names.iter().take(12).map(|s| s.to_string()).collect();
    if names.len() > 12 {
        all.push(format!("… {} more", names.len() - 12));
    }
    all.join(", ")
}

pub(super) fn common_prefix(v: &[String]) -> String {
    let first = &v[0];
    let mut n = first.len();
    for s in v {
        n = n.min(
            first
                .bytes()
                .zip(s.bytes())
                .take_while(|(a, b)| a == b)
                .count(),
        );
    }
    while !first.is_char_boundary(n) {
        n -= 1;
    }
    // Keep whole `_`-separated words.
    let cut = first[..n].rfind('_').map(|i| i + 1).unwrap_or(0);
    first[..cut].to_string()
}

pub(super) fn common_suffix(v: &[String]) -> String {
    let first = &v[0];
    let mut n = first.len();
    for s in v {
        n = n.min(
            first
                .bytes()
                .rev()
                .zip(s.bytes().rev())
                .take_while(|(a, b)| a == b)
                .count(),
        );
    }
    // Back off to a character boundary: names may hold multi-byte characters.
    while !first.is_char_boundary(first.len() - n) {
        n -= 1;
    }
    let tail = &first[first.len() - n..];
    let cut = tail.find('_').unwrap_or(tail.len());
    tail[cut..].to_string()
}

/// The distinct values in ascending order (what collecting into a `BTreeSet` gives, without
/// another copy of the B-tree code).
pub(super) fn sorted_set(values: impl Iterator<Item = u64>) -> Vec<u64> {
    let mut v: Vec<u64> = values.collect();
    v.sort();
    v.dedup();
    v
}

/// `3-9, 12, 14-20`.
pub(super) fn ranges(v: &[u64]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < v.len() {
        let mut j = i;
        while j + 1 < v.len() && v[j + 1] == v[j] + 1 {
            j += 1;
        }
        out.push(if i == j {
            v[i].to_string()
        } else {
            format!("{}-{}", v[i], v[j])
        });
        i = j + 1;
    }
    out.join(", ")
}

pub(super) fn levenshtein(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            let v = (prev[j] + usize::from(ca != *cb))
                .min(prev[j + 1] + 1)
                .min(cur[j] + 1);
            cur.push(v);
        }
        prev = cur;
    }
    prev[b.len()]
}

/// Runs of literal characters in a pattern, with their byte span in the pattern
/// (`blk\.[0-9]+\.ffn_.*_exp\.weight` → `blk.`, `.ffn_`, `_exp.weight`). A character followed
/// by `?`, `*` or `{` is optional and ends a run.
pub(super) fn literal_runs(p: &str) -> Vec<(String, usize, usize)> {
    let b: Vec<(usize, char)> = p.char_indices().collect();
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut start = 0;
    let mut end = 0;
    let mut i = 0;
    let flush =
        |cur: &mut String, start: usize, end: usize, out: &mut Vec<(String, usize, usize)>| {
            if cur.len() >= 3 {
                out.push((std::mem::take(cur), start, end));
            }
            cur.clear();
        };
    while i < b.len() {
        let (pos, c) = b[i];
        let (lit, width) = match c {
            '\\' => match b.get(i + 1) {
                Some((_, n)) if !n.is_ascii_alphanumeric() => (Some(*n), 2),
                _ => (None, 2),
            },
            '[' => {
                // Skip the class.
                let mut j = i + 1;
                while j < b.len() && b[j].1 != ']' {
                    j += if b[j].1 == '\\' { 2 } else { 1 };
                }
                (None, j + 1 - i)
            }
            c if c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == ':' || c == '/' => {
                (Some(c), 1)
            }
            _ => (None, 1),
        };
        let next = b.get(i + width).map(|x| x.1);
        let optional = matches!(next, Some('?' | '*' | '{'));
        match lit {
            Some(ch) if !optional => {
                if cur.is_empty() {
                    start = pos;
                }
                cur.push(ch);
                end = b.get(i + width).map(|x| x.0).unwrap_or(p.len());
            }
            _ => flush(&mut cur, start, end, &mut out),
        }
        i += width;
    }
    flush(&mut cur, start, end, &mut out);
    out
}

/// The substring of a name closest to `lit` (edit distance at most 2), if any.
pub(super) fn closest_substring(lit: &str, names: &[String]) -> Option<(usize, String, String)> {
    let l = lit.chars().count();
    let mut best: Option<(usize, String, String)> = None;
    for n in names {
        let chars: Vec<char> = n.chars().collect();
        for w in l.saturating_sub(2).max(1)..=l + 2 {
            if w > chars.len() {
                break;
            }
            for s in 0..=chars.len() - w {
                let cand: String = chars[s..s + w].iter().collect();
                let d = levenshtein(lit, &cand);
                if d <= 2
                    && best
                        .as_ref()
                        .is_none_or(|(bd, bc, _)| d < *bd || (d == *bd && cand.len() > bc.len()))
                {
                    best = Some((d, cand, n.clone()));
                }
            }
        }
    }
    best.filter(|(d, _, _)| *d > 0)
}

pub(super) fn escape_regex(s: &str) -> String {
    let mut out = String::new();
    for c in s.chars() {
        if "\\.+*?()|[]{}^$".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// Why a rule matches no tensor: an anchor, a misspelt word, or just that; and the corrected
/// pattern when one passes `accept` (it must do what the rule was meant to).
pub(super) fn explain_no_match(
    r: &Rule,
    model: &Model,
    accept: &dyn Fn(&str) -> bool,
) -> (String, Option<String>) {
    let p = r.raw.pattern.as_deref().unwrap_or("");
    let matches_any = |q: &str| match moe::compile(q) {
        Pattern::Ok(re) => model
            .tensors
            .iter()
            .filter(|t| re.is_match(&t.name))
            .count(),
        _ => 0,
    };
    if let Some(rest) = p.strip_prefix('^') {
        let n = matches_any(rest);
        if n > 0 && accept(rest) {
            return (format!("the `^` anchor ties it to the start of the name, and the names start with `blk.N.` (without `^` it matches {n} tensors)"), Some(rest.to_string()));
        }
    }
    if let Some(rest) = p.strip_suffix('$').filter(|r| !r.ends_with('\\')) {
        let n = matches_any(rest);
        if n > 0 && accept(rest) {
            return (format!("the `$` anchor ties it to the end of the name, and the names end in `.weight`/`.bias` (without `$` it matches {n} tensors)"), Some(rest.to_string()));
        }
    }
    // Distinct name shapes (`blk.N.ffn_gate_exps.weight`) keep the search short.
    let mut shapes: Vec<String> = model
        .tensors
        .iter()
        .map(|t| {
            t.name
                .chars()
                .map(|c| if c.is_ascii_digit() { '0' } else { c })
                .collect()
        })
        .collect();
    shapes.sort();
    shapes.dedup();
    for (lit, s, e) in literal_runs(p) {
        if model.tensors.iter().any(|t| t.name.contains(&lit)) {
            continue;
        }
        if let Some((_, cand, example)) = closest_substring(&lit, &shapes) {
            let fixed = format!("{}{}{}", &p[..s], escape_regex(&cand), &p[e..]);
            let n = matches_any(&fixed);
            if n > 0 && accept(&fixed) {
                let example = model
                    .tensors
                    .iter()
                    .find(|t| {
                        t.name
                            .chars()
                            .map(|c| if c.is_ascii_digit() { '0' } else { c })
                            .collect::<String>()
                            == example
                    })
                    .map(|t| t.name.clone())
                    .unwrap_or(example);
                return (format!("`{lit}` is in no tensor name of this model (did you mean `{cand}`, as in {example}? With it the pattern matches {n} tensors)"), Some(fixed));
            }
        }
        return (
            format!(
                "`{lit}` is in no tensor name of this model{}",
                expert_names(model)
            ),
            None,
        );
    }
    let text = format!(
        "it matches none of the {} tensor names (e.g. {})",
        model.tensors.len(),
        model
            .tensors
            .iter()
            .find(|t| t.routed_expert)
            .or(model.tensors.first())
            .map(|t| t.name.as_str())
            .unwrap_or("")
    );
    (text, None)
}

/// " (its routed experts are named blk.N.ffn_gate_up_exps.weight, blk.N.ffn_down_exps.weight)",
/// or nothing for a model without routed experts.
fn expert_names(model: &Model) -> String {
    let mut shapes: Vec<String> = model
        .tensors
        .iter()
        .filter(|t| t.routed_expert)
        .map(|t| {
            let mut parts = t.name.splitn(3, '.');
            let (_, _, rest) = (parts.next(), parts.next(), parts.next().unwrap_or(""));
            format!("blk.N.{rest}")
        })
        .collect();
    shapes.sort();
    shapes.dedup();
    if shapes.is_empty() {
        return String::new();
    }
    shapes.truncate(6);
    format!(" (its routed experts are named {})", shapes.join(", "))
}

/// `[0-9]` / `\d` without a quantifier, made `[0-9]+`.
pub(super) fn widen_digit_classes(p: &str) -> Option<String> {
    let mut out = String::new();
    let mut changed = false;
    let mut i = 0;
    let b = p.as_bytes();
    while i < p.len() {
        let rest = &p[i..];
        let tok = if rest.starts_with("[0-9]") {
            Some(5)
        } else if rest.starts_with("\\d") {
            Some(2)
        } else {
            None
        };
        if let Some(n) = tok {
            out.push_str(&rest[..n]);
            i += n;
            if !matches!(b.get(i), Some(b'+' | b'*' | b'{' | b'?')) {
                out.push('+');
                changed = true;
            }
            continue;
        }
        let c = rest.chars().next().unwrap_or(' ');
        out.push(c);
        i += c.len_utf8();
    }
    changed.then_some(out)
}

/// Dots meant literally (not followed by a quantifier), escaped.
pub(super) fn escape_literal_dots(p: &str) -> Option<String> {
    let chars: Vec<char> = p.chars().collect();
    let mut out = String::new();
    let mut changed = false;
    let mut in_class = false;
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        match c {
            '\\' => {
                out.push(c);
                if let Some(n) = chars.get(i + 1) {
                    out.push(*n);
                }
                i += 2;
                continue;
            }
            '[' => in_class = true,
            ']' => in_class = false,
            '.' if !in_class && !matches!(chars.get(i + 1), Some('*' | '+' | '?' | '{')) => {
                out.push_str("\\.");
                changed = true;
                i += 1;
                continue;
            }
            _ => {}
        }
        out.push(c);
        i += 1;
    }
    changed.then_some(out)
}
