//! Pure edits of the files a fix writes: text in, new text with the lines it replaced and added
//! out. Each edit sets one key: an existing one is replaced where it stands (later duplicates of
//! it go, so the file never holds the key twice), a missing one is added; every other byte is
//! kept (comments, order, line endings). Running an edit on its own output changes nothing.

use crate::action::bootedit::{
    diff_hunks, edit_cmdline_cma, join_lines, parse_cma_size, split_lines, Line,
};
use crate::parse::bootfile::BootFileKind;
use serde::Serialize;

/// The result of a pure edit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TextEdit {
    /// The whole new text (the input when `changed` is false).
    pub new_text: String,
    /// The text differs from the input.
    pub changed: bool,
    /// Lines replaced or removed (without their endings).
    pub before: Vec<String>,
    /// Lines written in their place or added.
    pub after: Vec<String>,
    /// Unified-style hunks; empty when unchanged.
    pub diff: String,
    /// What a person should know (duplicates removed, a section added).
    pub warnings: Vec<String>,
}

/// An edit in progress: the lines, and what was replaced and added.
struct Work {
    old: String,
    lines: Vec<Line>,
    ending: &'static str,
    before: Vec<String>,
    after: Vec<String>,
    warnings: Vec<String>,
}

impl Work {
    /// Indexes of the uncommented `key=value` lines whose key (trimmed) `is_key` accepts.
    fn setting_lines(&self, is_key: impl Fn(&str) -> bool) -> Vec<usize> {
        self.lines
            .iter()
            .enumerate()
            .filter(|(_, l)| {
                !is_comment(&l.content)
                    && l.content
                        .split_once('=')
                        .is_some_and(|(k, _)| is_key(k.trim()))
            })
            .map(|(i, _)| i)
            .collect()
    }

    fn new(text: &str) -> Work {
        Work {
            old: text.to_string(),
            lines: split_lines(text),
            ending: if text.contains("\r\n") { "\r\n" } else { "\n" },
            before: Vec::new(),
            after: Vec::new(),
            warnings: Vec::new(),
        }
    }

    /// Replaces line `i` with `content` (its ending kept); no-op when equal.
    fn replace(&mut self, i: usize, content: String) {
        if self.lines[i].content != content {
            self.before.push(self.lines[i].content.clone());
            self.after.push(content.clone());
            self.lines[i].content = content;
        }
    }

    /// Removes the lines at `idx` (ascending), noting them.
    fn remove(&mut self, idx: &[usize]) {
        for &i in idx.iter().rev() {
            let l = self.lines.remove(i);
            self.before.push(l.content);
        }
    }

    /// Adds `content` as a new line at `at` (the end when `at` is the length).
    fn insert(&mut self, at: usize, content: String) {
        if at == self.lines.len() {
            if let Some(last) = self.lines.last_mut() {
                if last.ending.is_empty() {
                    last.ending = self.ending.to_string();
                }
            }
        }
        self.after.push(content.clone());
        let ending = self.ending.to_string();
        self.lines.insert(at, Line { content, ending });
    }

    fn finish(self) -> TextEdit {
        let new_text = join_lines(&self.lines);
        TextEdit {
            changed: new_text != self.old,
            diff: diff_hunks(&self.old, &new_text),
            new_text,
            before: self.before,
            after: self.after,
            warnings: self.warnings,
        }
    }

    /// Sets one line for a key: `matching` are the indices of the lines that set it (ascending).
    /// The first is replaced with `line`, the others are removed; none: `line` goes at `append_at`.
    fn set_one(&mut self, matching: &[usize], line: String, append_at: usize, what: &str) {
        match matching.split_first() {
            Some((&first, rest)) => {
                self.replace(first, line);
                if !rest.is_empty() {
                    self.warnings.push(format!(
                        "{what} was set {} times: the later ones were removed (the file now sets it once)",
                        matching.len()
                    ));
                    self.remove(rest);
                }
            }
            None => self.insert(append_at, line),
        }
    }
}

/// Refuses text that cannot be one value on one line (`what` names it in the error).
pub fn one_line(what: &str, s: &str) -> Result<(), String> {
    if s.chars().any(|c| c == '\n' || c == '\r' || c == '\0') {
        return Err(format!("{what} {s:?} holds a line break or NUL; refused"));
    }
    Ok(())
}

/// Refuses a key that is empty or holds whitespace, `=`, `#` or a control character.
fn plain_key(what: &str, s: &str) -> Result<(), String> {
    if s.is_empty()
        || s.chars()
            .any(|c| c.is_whitespace() || c.is_control() || c == '=' || c == '#')
    {
        return Err(format!("{what} {s:?} is not a plain key; refused"));
    }
    Ok(())
}

/// Refuses an empty value or one with whitespace (a word on a command line or options line).
fn word(what: &str, s: &str) -> Result<(), String> {
    if s.chars()
        .any(|c| c.is_whitespace() || c.is_control() || c == '"')
    {
        return Err(format!(
            "{what} {s:?} must be one word without quotes; refused"
        ));
    }
    Ok(())
}

fn is_comment(l: &str) -> bool {
    let t = l.trim_start();
    t.starts_with('#') || t.starts_with(';')
}

/// Sets `[section]` `key=value` settings in a systemd unit drop-in. A key set in that section is
/// replaced; a missing one is added after the section's last setting; a missing section is added
/// at the end.
///
/// Errors: a section, key or value that cannot be one line.
pub fn edit_drop_in(
    text: &str,
    section: &str,
    settings: &[(String, String)],
) -> Result<TextEdit, String> {
    plain_key("section", section)?;
    if section.contains(['[', ']']) {
        return Err(format!("section {section:?} holds a bracket; refused"));
    }
    let mut w = Work::new(text);
    for (key, value) in settings {
        plain_key("key", key)?;
        one_line("value", value)?;
        let header = format!("[{section}]");
        // Every line inside that section (it may appear more than once) and where the last
        // appearance's settings end.
        let (mut inside, mut matching, mut append_at) = (false, Vec::new(), None);
        for (i, l) in w.lines.iter().enumerate() {
            let t = l.content.trim();
            if t.starts_with('[') && t.ends_with(']') {
                inside = t == header;
                if inside {
                    append_at = Some(i + 1);
                }
                continue;
            }
            if !inside || t.is_empty() {
                continue;
            }
            append_at = Some(i + 1);
            if !is_comment(t) && t.split_once('=').is_some_and(|(k, _)| k.trim() == key) {
                matching.push(i);
            }
        }
        let line = format!("{key}={value}");
        let Some(at) = append_at else {
            if w.lines.iter().any(|l| !l.content.trim().is_empty()) {
                let end = w.lines.len();
                w.insert(end, String::new());
                w.after.pop();
            }
            let end = w.lines.len();
            w.insert(end, header);
            w.insert(end + 1, line);
            continue;
        };
        // A line already saying it (however spaced) stays as it is.
        let same = |i: &usize| {
            w.lines[*i]
                .content
                .split_once('=')
                .is_some_and(|(_, v)| v.trim() == value.trim())
        };
        if matching.len() == 1 && same(&matching[0]) {
            continue;
        }
        w.set_one(&matching, line, at, key);
    }
    Ok(w.finish())
}

/// modprobe treats `-` and `_` in module names alike.
fn same_module(a: &str, b: &str) -> bool {
    a.replace('-', "_") == b.replace('-', "_")
}

/// Sets `key=value` for `module` in a modprobe.d file (`options <module> <key>=<value>`). The
/// key on an `options` line of that module is replaced (other options on the line kept, later
/// duplicates removed); a missing key is appended to the module's last `options` line; without
/// one, an `options` line is added.
///
/// Errors: a module, key or value that is not one word; a continued (`\`) options line.
pub fn edit_modprobe(text: &str, module: &str, key: &str, value: &str) -> Result<TextEdit, String> {
    plain_key("module", module)?;
    plain_key("option", key)?;
    word("value", value)?;
    let mut w = Work::new(text);
    let ours: Vec<usize> = w
        .lines
        .iter()
        .enumerate()
        .filter(|(_, l)| {
            let mut it = l.content.split_whitespace();
            it.next() == Some("options") && it.next().is_some_and(|m| same_module(m, module))
        })
        .map(|(i, _)| i)
        .collect();
    if let Some(&i) = ours
        .iter()
        .find(|&&i| w.lines[i].content.trim_end().ends_with('\\'))
    {
        return Err(format!(
            "line {}: the options line of {module} continues on the next line; edit it by hand",
            i + 1
        ));
    }
    let setting = format!("{key}={value}");
    let with_key: Vec<usize> = ours
        .iter()
        .copied()
        .filter(|&i| rewrite_words(&w.lines[i].content, 2, key, None).1 > 0)
        .collect();
    match with_key.split_first() {
        Some((&first, rest)) => {
            let (c, n) = rewrite_words(&w.lines[first].content, 2, key, Some(&setting));
            if n > 1 {
                w.warnings.push(format!(
                    "{key} was set {n} times on line {}: the later ones were removed",
                    first + 1
                ));
            }
            w.replace(first, c);
            // Last first, so a removed line does not shift the ones still to do.
            for &i in rest.iter().rev() {
                let (c, _) = rewrite_words(&w.lines[i].content, 2, key, None);
                w.warnings.push(format!(
                    "{key} was also set on line {}: removed there",
                    i + 1
                ));
                if c.split_whitespace().count() <= 2 {
                    w.remove(&[i]);
                } else {
                    w.replace(i, c);
                }
            }
        }
        None => match ours.last() {
            Some(&i) => {
                let c = format!("{} {setting}", w.lines[i].content.trim_end());
                w.replace(i, c);
            }
            None => {
                let at = w.lines.len();
                w.insert(at, format!("options {module} {setting}"));
            }
        },
    }
    Ok(w.finish())
}

/// `content` with the words that set `key` (after the first `skip` words) rewritten: the first
/// becomes `replacement` (or goes, with `None`), the later ones go, each with the whitespace
/// before it; every other byte stays. Also returns how many words set the key.
fn rewrite_words(
    content: &str,
    skip: usize,
    key: &str,
    replacement: Option<&str>,
) -> (String, usize) {
    let key_of = |t: &str| t.split_once('=').map_or(t, |(k, _)| k).to_string();
    let hits: Vec<(usize, usize)> = word_spans(content)
        .into_iter()
        .skip(skip)
        .filter(|&(a, b)| key_of(&content[a..b]) == key)
        .collect();
    let mut s = content.to_string();
    for (n, &(a, b)) in hits.iter().enumerate().rev() {
        match (n, replacement) {
            (0, Some(r)) => s.replace_range(a..b, r),
            _ => {
                let from = content[..a].trim_end().len();
                s.replace_range(from..b, "");
            }
        }
    }
    (s, hits.len())
}

/// The sysctl key in its dotted form (`kernel/numa_balancing` is `kernel.numa_balancing`).
pub fn sysctl_dotted(key: &str) -> String {
    key.trim_start_matches('-').replace('/', ".")
}

/// Sets `key = value` in a sysctl.d file: the line setting the key (dotted or slashed, with or
/// without a leading `-`) is replaced, later duplicates removed; a missing key is appended.
///
/// Errors: a key that is not one word, a value that is not one line.
pub fn edit_sysctl(text: &str, key: &str, value: &str) -> Result<TextEdit, String> {
    plain_key("sysctl key", key)?;
    one_line("value", value)?;
    let dotted = sysctl_dotted(key);
    let mut w = Work::new(text);
    let matching = w.setting_lines(|k| sysctl_dotted(k) == dotted);
    let line = format!("{dotted} = {value}");
    // A line already saying it (however spaced) is kept as it is.
    let same = |c: &str| {
        c.split_once('=')
            .is_some_and(|(_, v)| v.trim() == value.trim())
    };
    if matching.len() == 1 && same(&w.lines[matching[0]].content) {
        return Ok(w.finish());
    }
    let at = w.lines.len();
    w.set_one(&matching, line, at, &dotted);
    Ok(w.finish())
}

/// Sets `key=value` in a U-Boot environment file (`armbianEnv.txt`): the definition is replaced,
/// later ones removed (U-Boot keeps the last); a missing key is appended.
fn edit_env_key(text: &str, key: &str, value: &str) -> TextEdit {
    let mut w = Work::new(text);
    let matching = w.setting_lines(|k| k == key);
    let at = w.lines.len();
    w.set_one(&matching, format!("{key}={value}"), at, key);
    w.finish()
}

/// Byte spans of the words of a command line; a double-quoted part does not split.
fn word_spans(s: &str) -> Vec<(usize, usize)> {
    let (mut out, mut start, mut quoted) = (Vec::new(), None, false);
    for (i, c) in s.char_indices() {
        if c == '"' {
            quoted = !quoted;
            start.get_or_insert(i);
        } else if c.is_whitespace() && !quoted {
            if let Some(st) = start.take() {
                out.push((st, i));
            }
        } else {
            start.get_or_insert(i);
        }
    }
    if let Some(st) = start {
        out.push((st, s.len()));
    }
    out
}

/// Sets the word `key=value` on a one-line kernel command line (`cmdline.txt`): the first word
/// with that key is replaced, the others removed; a missing one is appended to the line.
///
/// Errors: no command line in the file; the key inside quotes.
fn edit_cmdline_word(text: &str, key: &str, value: &str) -> Result<TextEdit, String> {
    word("value", value)?;
    let mut w = Work::new(text);
    let Some(i) = w.lines.iter().position(|l| !l.content.trim().is_empty()) else {
        return Err("the file has no kernel command line; refusing to create one".into());
    };
    let content = w.lines[i].content.clone();
    let spans = word_spans(&content);
    let key_of = |t: &str| t.split_once('=').map_or(t, |(k, _)| k).to_string();
    if spans.iter().any(|&(a, b)| {
        content[a..b].starts_with('"') && key_of(content[a..b].trim_start_matches('"')) == key
    }) {
        return Err(format!(
            "{key}= is inside quotes on the command line; edit it by hand"
        ));
    }
    let setting = format!("{key}={value}");
    let (new, n) = rewrite_words(&content, 0, key, Some(&setting));
    let new = match n {
        0 => format!("{} {setting}", content.trim_end()),
        1 => new,
        _ => {
            w.warnings.push(format!(
                "{key}= was on the command line {n} times: the later ones were removed"
            ));
            new
        }
    };
    w.replace(i, new);
    Ok(w.finish())
}

/// True for a `config.txt` section the Pi 5 firmware applies (`[all]`, `[pi5]`; none before the
/// first header).
fn pi5_section(header: &str) -> bool {
    matches!(header, "[all]" | "[pi5]")
}

/// Sets a key in a Raspberry Pi `config.txt`, looking only at lines the Pi 5 applies. `dtparam`
/// is keyed by the parameter (`dtparam=pciex1_gen=3` replaces `pciex1_gen` inside a
/// `dtparam=a,b` list), `dtoverlay` by the overlay name; other keys by themselves (later
/// duplicates removed). A missing one is appended under `[all]` at the end.
fn edit_pi_config(text: &str, key: &str, value: &str) -> TextEdit {
    let mut w = Work::new(text);
    let mut active = true;
    let mut cands: Vec<usize> = Vec::new();
    let mut last_header = None;
    for (i, l) in w.lines.iter().enumerate() {
        let t = l.content.trim();
        if t.starts_with('[') {
            active = pi5_section(t);
            last_header = Some(t.to_string());
            continue;
        }
        if active && !is_comment(t) && t.split_once('=').is_some_and(|(k, _)| k.trim() == key) {
            cands.push(i);
        }
    }
    let ident = |v: &str| -> String {
        match key {
            "dtparam" => v.split_once('=').map_or(v, |(n, _)| n).trim().to_string(),
            "dtoverlay" => v.split(',').next().unwrap_or("").trim().to_string(),
            _ => String::new(),
        }
    };
    let want = ident(value);
    let line = format!("{key}={value}");
    let mut matching = Vec::new();
    let mut in_list = None;
    for &i in &cands {
        let v = w.lines[i]
            .content
            .split_once('=')
            .map_or("", |(_, v)| v)
            .to_string();
        if key == "dtparam" {
            let params: Vec<&str> = v.split(',').collect();
            if params.len() > 1 && params.iter().any(|p| ident(p) == want) {
                in_list = Some((i, v.clone()));
            } else if ident(&v) == want {
                matching.push(i);
            }
        } else if ident(&v) == want {
            matching.push(i);
        }
    }
    if let (Some((i, v)), true) = (in_list, matching.is_empty()) {
        let params: Vec<String> = v
            .split(',')
            .map(|p| {
                if ident(p) == want {
                    value.to_string()
                } else {
                    p.to_string()
                }
            })
            .collect();
        w.replace(i, format!("{key}={}", params.join(",")));
        return w.finish();
    }
    if matching.is_empty() && last_header.as_deref().is_some_and(|h| h != "[all]") {
        let at = w.lines.len();
        w.insert(at, "[all]".into());
    }
    let at = w.lines.len();
    w.set_one(&matching, line, at, key);
    w.finish()
}

/// The kind of a boot file from its board path.
pub fn boot_kind(path: &str) -> Option<BootFileKind> {
    if path == "/etc/kernel/cmdline" {
        return Some(BootFileKind::KernelCmdline);
    }
    match path.rsplit('/').next()? {
        "cmdline.txt" => Some(BootFileKind::PiCmdline),
        "config.txt" => Some(BootFileKind::PiConfig),
        "armbianEnv.txt" => Some(BootFileKind::ArmbianEnv),
        "orangepiEnv.txt" => Some(BootFileKind::OrangepiEnv),
        "extlinux.conf" => Some(BootFileKind::Extlinux),
        _ => None,
    }
}

/// Sets `key=value` in the boot file `path` of kind `kind`. A kernel `cma=` on a kernel-arguments
/// file goes through the boot-file editor of `cma set`; other keys: a word on `cmdline.txt` /
/// `/etc/kernel/cmdline`, a line in `armbianEnv.txt` / `orangepiEnv.txt` or `config.txt`.
///
/// Errors: a kind without a generic editor (`extlinux.conf` for keys other than `cma`), a bad
/// key or value, or the editor's refusal.
pub fn edit_boot_key(
    kind: BootFileKind,
    text: &str,
    key: &str,
    value: &str,
) -> Result<TextEdit, String> {
    plain_key("key", key)?;
    one_line("value", value)?;
    if key == "cma" && kind != BootFileKind::PiConfig {
        let size = parse_cma_size(value).map_err(|e| e.to_string())?;
        let e = edit_cmdline_cma(kind, text, &size).map_err(|e| e.to_string())?;
        let mut out = edit_like(text, &e.new_text);
        out.warnings = e.warnings;
        return Ok(out);
    }
    match kind {
        BootFileKind::PiCmdline | BootFileKind::KernelCmdline => {
            edit_cmdline_word(text, key, value)
        }
        BootFileKind::ArmbianEnv | BootFileKind::OrangepiEnv => Ok(edit_env_key(text, key, value)),
        BootFileKind::PiConfig => Ok(edit_pi_config(text, key, value)),
        BootFileKind::Extlinux => Err(format!(
            "{key}= in extlinux.conf is not edited automatically (only cma=); edit it by hand"
        )),
    }
}

/// A [`TextEdit`] for a new text made elsewhere: the differing lines as before/after.
fn edit_like(old: &str, new: &str) -> TextEdit {
    let a: Vec<&str> = old.lines().collect();
    let b: Vec<&str> = new.lines().collect();
    let before = a
        .iter()
        .filter(|l| !b.contains(l))
        .map(|l| l.to_string())
        .collect();
    let after = b
        .iter()
        .filter(|l| !a.contains(l))
        .map(|l| l.to_string())
        .collect();
    TextEdit {
        new_text: new.to_string(),
        changed: old != new,
        before,
        after,
        diff: diff_hunks(old, new),
        warnings: Vec::new(),
    }
}

#[cfg(test)]
#[path = "edit_tests.rs"]
mod tests;
