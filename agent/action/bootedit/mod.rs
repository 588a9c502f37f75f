//! Pure edits of the boot-time CMA size: text in, new text + unified-style diff + warnings out.
//! Nothing here opens a file; [`super::cma`] reads, writes and verifies.
//!
//! Rules (the `set_cma` action; the kernel's `cma=` and the Pi 5 firmware's `dtoverlay=cma`):
//! - Replace the one `cma=` token that wins (the kernel keeps the last one; U-Boot's
//!   `env import` keeps the last definition of a key); never add a duplicate. Where there is
//!   none, add it to the line that carries kernel arguments (creating `extraargs=` in an
//!   Armbian/Orange Pi env file that has none).
//! - Keep every other byte: comments, order, quoting, line endings (CRLF stays CRLF).
//! - A Raspberry Pi `config.txt` sizes the device-tree pool with `dtoverlay=cma,cma-N`
//!   (N in [`OVERLAY_SIZES_MB`]) or `cma-size=<bytes>` (4 MiB aligned).

mod diff;
mod locate;
mod pi_config;
pub use diff::*;
use locate::*;
pub use pi_config::*;

use crate::parse::bootfile::{find_boot_cma, pi_config_cma, BootFileKind};
pub use crate::parse::cma_size::*;

/// Pool sizes (MiB) the Raspberry Pi `cma` overlay offers as `cma-N` parameters.
pub const OVERLAY_SIZES_MB: &[u64] = &[64, 96, 128, 192, 256, 320, 384, 448, 512];

/// Largest pool known to work through the overlay on a Pi 5 (MiB); above it a warning is given
/// (on a Pi 5, 768M/1G gave `CmaTotal: 0` with `numa=fake=8`).
pub const PI5_VERIFIED_MAX_MB: u64 = 512;

const MIB: u64 = 1 << 20;

/// Smallest non-zero pool `cma set` accepts (4 MiB): anything smaller is almost surely a missing
/// suffix.
pub const MIN_SENSIBLE_BYTES: u64 = 4 << 20;

/// Checks a size against the profile minimum (`min_total_bytes`, bytes; `None` or 0 = no
/// minimum) and against [`MAX_RAM_PERCENT`] of `mem_total_bytes` (`/proc/meminfo` `MemTotal`,
/// bytes). Returns the accepted maximum in bytes.
///
/// Errors: [`SizeError::BelowMinimum`], [`SizeError::BelowFloor`], [`SizeError::AboveSafeFraction`],
/// [`SizeError::UnknownRam`] when `mem_total_bytes` is `Err` (its text says why).
pub fn validate_cma_size(
    size: &CmaSize,
    min_total_bytes: Option<u64>,
    mem_total_bytes: Result<u64, String>,
) -> Result<u64, SizeError> {
    if let Some(min) = min_total_bytes.filter(|m| *m > 0) {
        if size.bytes < min {
            return Err(SizeError::BelowMinimum {
                size_bytes: size.bytes,
                min_bytes: min,
            });
        }
    }
    // A non-zero pool under 4 MiB is a typo (`cma=256` is 256 bytes), whatever the profile says;
    // `0` stays allowed (CMA deliberately off). Checked after the profile minimum, so a profile
    // that asks for more names its own figure.
    if size.bytes > 0 && size.bytes < MIN_SENSIBLE_BYTES {
        return Err(SizeError::BelowFloor {
            size_bytes: size.bytes,
        });
    }
    let ram = mem_total_bytes.map_err(SizeError::UnknownRam)?;
    let limit =
        u64::try_from(u128::from(ram) * u128::from(MAX_RAM_PERCENT) / 100).unwrap_or(u64::MAX);
    if size.bytes > limit {
        return Err(SizeError::AboveSafeFraction {
            size_bytes: size.bytes,
            mem_total_bytes: ram,
            limit_bytes: limit,
        });
    }
    Ok(limit)
}

/// Why a boot file cannot be edited safely.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EditError {
    /// A `cmdline.txt` or `/etc/kernel/cmdline` without a non-empty line.
    #[error("the file has no kernel-arguments line; refusing to create a command line that has only cma=")]
    NoArgsLine,
    /// An extlinux file without a `label`.
    #[error("no `label` entry in the file")]
    NoLabel,
    /// The extlinux label that boots has no `append` line.
    #[error("label {0:?} has no `append` line to carry cma=")]
    NoAppend(String),
    /// The winning `cma=` sits inside quotes, which the editor does not rewrite.
    #[error("line {0}: cma= is inside quotes; edit it by hand")]
    Quoted(usize),
    /// The kind is not handled by this function (e.g. `config.txt` given to a cmdline edit).
    #[error("{0:?} files are not edited this way")]
    WrongKind(BootFileKind),
    /// After the edit the file would not say what was asked (an editor bug; nothing written).
    #[error("internal check failed: after the edit the file would read {0}")]
    Verify(String),
}

/// The result of a pure edit.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct FileEdit {
    /// The whole new text (equal to the input when `changed` is false).
    pub new_text: String,
    /// True when the text differs (false: the value is already there; nothing to write).
    pub changed: bool,
    /// Unified-style hunks (`@@ -4,1 +4,1 @@`, `-old`, `+new`) without the `---`/`+++` header;
    /// empty when unchanged. See [`diff_with_header`].
    pub diff: String,
    /// What a person should know: duplicates left in place, CRLF, keys created.
    pub warnings: Vec<String>,
    /// One line: what was done (`line 4: cma=256M -> cma=512M`).
    pub summary: String,
}

/// One line: content without its ending, and the ending (`\n`, `\r\n` or empty at EOF).
#[derive(Debug, Clone)]
pub(crate) struct Line {
    /// The line without its ending.
    pub(crate) content: String,
    /// `\n`, `\r\n`, or empty for a last line without one.
    pub(crate) ending: String,
}

/// `text` as lines, every byte kept (see [`join_lines`]).
pub(crate) fn split_lines(text: &str) -> Vec<Line> {
    text.split_inclusive('\n')
        .map(|l| {
            let (content, ending) = if let Some(c) = l.strip_suffix("\r\n") {
                (c, "\r\n")
            } else if let Some(c) = l.strip_suffix('\n') {
                (c, "\n")
            } else {
                (l, "")
            };
            Line {
                content: content.to_string(),
                ending: ending.to_string(),
            }
        })
        .collect()
}

/// The text of `lines`, the inverse of [`split_lines`].
pub(crate) fn join_lines(lines: &[Line]) -> String {
    lines
        .iter()
        .map(|l| format!("{}{}", l.content, l.ending))
        .collect()
}

/// The ending new lines get: CRLF when the file uses it anywhere, else LF.
fn file_ending(text: &str) -> &'static str {
    if text.contains("\r\n") {
        "\r\n"
    } else {
        "\n"
    }
}

/// Appends a line, first ending the last line when the file does not end in a newline.
fn push_line(lines: &mut Vec<Line>, content: String, ending: &str) {
    if let Some(last) = lines.last_mut() {
        if last.ending.is_empty() {
            last.ending = ending.to_string();
        }
    }
    lines.push(Line {
        content,
        ending: ending.to_string(),
    });
}

/// Byte spans of whitespace-separated arguments in `s`; with `quotes`, a double-quoted part
/// does not split (`a="x y"` is one argument), as the kernel's parser treats it.
fn arg_spans(s: &str, quotes: bool) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    let mut start = None;
    let mut in_quotes = false;
    for (i, c) in s.char_indices() {
        if quotes && c == '"' {
            in_quotes = !in_quotes;
            start.get_or_insert(i);
        } else if c.is_whitespace() && !in_quotes {
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

/// A `cma=` argument: its span inside the line's content.
#[derive(Debug, Clone, Copy)]
struct CmaArg {
    line: usize,
    start: usize,
    end: usize,
}

/// `cma=` arguments inside `content[from..to]`. Errors on a quoted `"cma=`.
fn cma_args(
    content: &str,
    line: usize,
    from: usize,
    to: usize,
    quotes: bool,
) -> Result<Vec<CmaArg>, EditError> {
    let part = &content[from..to];
    let mut out = Vec::new();
    for (s, e) in arg_spans(part, quotes) {
        let arg = &part[s..e];
        if arg.starts_with("cma=") {
            out.push(CmaArg {
                line,
                start: from + s,
                end: from + e,
            });
        } else if arg.starts_with("\"cma=") {
            return Err(EditError::Quoted(line + 1));
        }
    }
    Ok(out)
}

/// New text for one `cma=` argument: the new size, keeping an `@placement`.
fn replace_arg(old_arg: &str, size: &CmaSize) -> String {
    let value = old_arg.strip_prefix("cma=").unwrap_or("");
    match value.split_once('@') {
        Some((_, placement)) => format!("cma={}@{placement}", size.token),
        None => format!("cma={}", size.token),
    }
}

/// Size in bytes of an existing `cma=` argument (`None` when it does not parse).
fn arg_bytes(arg: &str) -> Option<u64> {
    let value = arg.strip_prefix("cma=")?;
    crate::parse::cmdline::parse_cma_value(value).size_bytes
}

/// Span `(from, to)` of the kernel arguments in a line, by file kind. `None` when the line
/// does not carry arguments.
fn env_value_span(content: &str) -> Option<(String, usize, usize)> {
    let t = content.trim_start();
    if t.is_empty() || t.starts_with('#') {
        return None;
    }
    let eq = content.find('=')?;
    let key = content[..eq].trim();
    if key.is_empty() || key.contains(char::is_whitespace) {
        return None;
    }
    let mut from = eq + 1;
    let mut to = content.len();
    while from < to && content.as_bytes()[from].is_ascii_whitespace() {
        from += 1;
    }
    while to > from && content.as_bytes()[to - 1].is_ascii_whitespace() {
        to -= 1;
    }
    let inner = &content[from..to];
    if inner.len() >= 2
        && ((inner.starts_with('"') && inner.ends_with('"'))
            || (inner.starts_with('\'') && inner.ends_with('\'')))
    {
        from += 1;
        to -= 1;
    }
    Some((key.to_string(), from, to))
}

/// Inserts ` cma=X` after the last argument in `content[from..to]` (no space when empty).
fn append_arg(content: &mut String, from: usize, to: usize, size: &CmaSize) {
    let part = &content[from..to];
    let end = from + part.trim_end().len();
    let arg = format!("cma={}", size.token);
    if end == from {
        content.insert_str(end, &arg);
    } else {
        content.insert_str(end, &format!(" {arg}"));
    }
}

fn crlf_warning(kind: BootFileKind, text: &str) -> Option<String> {
    if !text.contains("\r\n") {
        return None;
    }
    Some(match kind {
        BootFileKind::ArmbianEnv | BootFileKind::OrangepiEnv => {
            "the file has CRLF line endings (kept as they are); U-Boot's env import keeps the CR inside values, so consider converting it to LF".into()
        }
        _ => "the file has CRLF line endings (kept as they are)".into(),
    })
}

/// Sets the boot-time `cma=` size in a kernel-arguments file: Armbian `armbianEnv.txt` /
/// Orange Pi `orangepiEnv.txt` (`extraargs=`), Raspberry Pi `cmdline.txt` (first line),
/// extlinux `append` of the label that boots, or `/etc/kernel/cmdline`. The winning `cma=` is
/// replaced (its `@placement` kept); without one, `cma=` is added to the arguments line.
/// Setting the size already there returns `changed: false`.
///
/// Errors: [`EditError`] when the file has no place for kernel arguments or the `cma=` is
/// quoted; [`EditError::WrongKind`] for `config.txt` (use [`edit_pi_config_cma`]).
pub fn edit_cmdline_cma(
    kind: BootFileKind,
    text: &str,
    size: &CmaSize,
) -> Result<FileEdit, EditError> {
    let mut lines = split_lines(text);
    let mut warnings: Vec<String> = crlf_warning(kind, text).into_iter().collect();
    let ending = file_ending(text);
    let target = locate(kind, &lines, &mut warnings)?;
    let summary;
    match target.winner {
        Some(arg) => {
            let content = &lines[arg.line].content;
            let old = content[arg.start..arg.end].to_string();
            if arg_bytes(&old) == Some(size.bytes) {
                return Ok(unchanged(
                    text,
                    warnings,
                    format!("line {}: {old} is already set", arg.line + 1),
                ));
            }
            let new = replace_arg(&old, size);
            if old.contains('@') {
                warnings.push(format!(
                    "kept the placement of {old}: only the size changes"
                ));
            }
            summary = format!("line {}: {old} -> {new}", arg.line + 1);
            lines[arg.line]
                .content
                .replace_range(arg.start..arg.end, &new);
        }
        None => match target.args_line {
            Some((i, from, to)) => {
                append_arg(&mut lines[i].content, from, to, size);
                summary = format!("line {}: added cma={}", i + 1, size.token);
            }
            None => {
                // Only env files get here (the other kinds error out in `locate`).
                push_line(&mut lines, format!("extraargs=cma={}", size.token), ending);
                let n = lines.len();
                summary = format!(
                    "line {n}: created extraargs=cma={} (the file had no extraargs=)",
                    size.token
                );
                warnings.push("the file had no extraargs= line; added one at the end".into());
            }
        },
    }
    let new_text = join_lines(&lines);
    let check = locate(kind, &split_lines(&new_text), &mut Vec::new())?;
    let got = check
        .winner
        .map(|a| split_lines(&new_text)[a.line].content[a.start..a.end].to_string());
    if got.as_deref().and_then(arg_bytes) != Some(size.bytes) {
        return Err(EditError::Verify(got.unwrap_or_else(|| "no cma=".into())));
    }
    if kind != BootFileKind::Extlinux {
        let parsed = find_boot_cma(kind, &new_text);
        if parsed.cma.as_ref().and_then(|c| c.size_bytes) != Some(size.bytes) {
            return Err(EditError::Verify(format!(
                "{:?}",
                parsed.cma.map(|c| c.raw)
            )));
        }
    }
    Ok(FileEdit {
        diff: diff_hunks(text, &new_text),
        new_text,
        changed: true,
        warnings,
        summary,
    })
}

/// Removes every `cma=` from the kernel-arguments line (Raspberry Pi 5: a command-line `cma=`
/// bypasses the device-tree pool the firmware needs). Each argument goes with one adjacent run
/// of whitespace; nothing else changes. Without a `cma=`, `changed: false`.
///
/// Errors: as [`edit_cmdline_cma`].
pub fn remove_cmdline_cma(kind: BootFileKind, text: &str) -> Result<FileEdit, EditError> {
    let mut lines = split_lines(text);
    let mut warnings: Vec<String> = crlf_warning(kind, text).into_iter().collect();
    let target = locate(kind, &lines, &mut warnings)?;
    if target.all.is_empty() {
        return Ok(unchanged(text, warnings, "no cma= to remove".into()));
    }
    let mut removed = Vec::new();
    let mut args = target.all.clone();
    args.sort_by_key(|a| (a.line, std::cmp::Reverse(a.start)));
    for a in args {
        let content = &mut lines[a.line].content;
        removed.push(format!(
            "line {}: removed {}",
            a.line + 1,
            &content[a.start..a.end]
        ));
        let before = content[..a.start]
            .trim_end_matches(|c: char| c.is_whitespace())
            .len();
        let (from, to) = if before < a.start {
            (before, a.end)
        } else {
            let rest = &content[a.end..];
            (a.start, a.end + (rest.len() - rest.trim_start().len()))
        };
        content.replace_range(from..to, "");
    }
    removed.reverse();
    let new_text = join_lines(&lines);
    let check = locate(kind, &split_lines(&new_text), &mut Vec::new())?;
    if !check.all.is_empty() {
        return Err(EditError::Verify("a cma= is still there".into()));
    }
    Ok(FileEdit {
        diff: diff_hunks(text, &new_text),
        new_text,
        changed: true,
        warnings,
        summary: removed.join("; "),
    })
}

fn unchanged(text: &str, warnings: Vec<String>, summary: String) -> FileEdit {
    FileEdit {
        new_text: text.to_string(),
        changed: false,
        diff: String::new(),
        warnings,
        summary,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn size(s: &str) -> CmaSize {
        parse_cma_size(s).unwrap()
    }

    /// Escape sequences in a boot file reach the diff as visible, inert text.
    #[test]
    fn diff_escapes_control_characters() {
        let d = diff_hunks(
            "a\n\x1b[2J\x1b[Hcma=64M\x1b[8m\tx\n",
            "a\n\x1b[2J\x1b[Hcma=128M\x1b[8m\tx\n",
        );
        assert!(!d.contains('\x1b'), "{d:?}");
        assert!(
            d.contains("-\\u{1b}[2J\\u{1b}[Hcma=64M\\u{1b}[8m\tx\n"),
            "{d}"
        );
    }

    #[test]
    fn tokens_are_canonical() {
        assert_eq!(size("262144K").token, "256M");
        assert_eq!(size("1024M").token, "1G");
        assert_eq!(size("0").token, "0");
        assert_eq!(size("4097").token, "4097");
        assert!(matches!(
            parse_cma_size("64M@0-1G"),
            Err(SizeError::Placement(_))
        ));
    }

    #[test]
    fn sizes_follow_the_kernels_memparse() {
        // Hex and every suffix letter, either case, as `cma=` on the kernel command line.
        assert_eq!(size("0x10000000").bytes, 256 << 20);
        assert_eq!(size("0x10000000").token, "256M");
        assert_eq!(size("0x10M").bytes, 16 << 20);
        assert_eq!(size("256m").token, "256M");
        assert_eq!(size("1g").token, "1G");
        assert_eq!(size("1T").bytes, 1 << 40);
        // The kernel ignores a B after the suffix; so does cma set.
        assert_eq!(size("256MB").token, "256M");
        assert_eq!(size("256MiB").token, "256M");
        // What memparse would not read as a size.
        for bad in ["lots", "", "M", "-1M", "256Mx", "256 M", "0x", "16E"] {
            assert!(
                matches!(parse_cma_size(bad), Err(SizeError::Syntax(_))),
                "{bad:?}: {:?}",
                parse_cma_size(bad)
            );
        }
        // A leading 0 is octal to the kernel: refused with the value it would have read.
        assert_eq!(
            parse_cma_size("0256M"),
            Err(SizeError::Octal {
                text: "0256M".into(),
                bytes: 0o256 << 20
            })
        );
    }

    #[test]
    fn size_limits() {
        let ram = Ok(4u64 << 30);
        assert_eq!(
            validate_cma_size(&size("1G"), None, ram.clone()),
            Ok(1 << 30)
        );
        assert!(
            matches!(validate_cma_size(&size("1028M"), None, ram.clone()), Err(SizeError::AboveSafeFraction { limit_bytes, .. }) if limit_bytes == 1 << 30)
        );
        assert!(matches!(
            validate_cma_size(&size("32M"), Some(64 << 20), ram),
            Err(SizeError::BelowMinimum { .. })
        ));
        assert!(matches!(
            validate_cma_size(&size("32M"), None, Err("x".into())),
            Err(SizeError::UnknownRam(_))
        ));
    }

    #[test]
    fn env_replace_keeps_other_args_and_placement() {
        let t = "verbosity=1\nextraargs=cma=128M@0-2G net.ifnames=0\nconsole=both\n";
        let e = edit_cmdline_cma(BootFileKind::ArmbianEnv, t, &size("512M")).unwrap();
        assert_eq!(
            e.new_text,
            "verbosity=1\nextraargs=cma=512M@0-2G net.ifnames=0\nconsole=both\n"
        );
        assert_eq!(e.diff, "@@ -1,3 +1,3 @@\n verbosity=1\n-extraargs=cma=128M@0-2G net.ifnames=0\n+extraargs=cma=512M@0-2G net.ifnames=0\n console=both\n");
        assert!(
            e.warnings.iter().any(|w| w.contains("placement")),
            "{:?}",
            e.warnings
        );
    }

    #[test]
    fn env_extraboardargs_wins_over_extraargs() {
        let t = "extraargs=cma=128M\nextraboardargs=cma=64M\n";
        let e = edit_cmdline_cma(BootFileKind::OrangepiEnv, t, &size("256M")).unwrap();
        assert_eq!(e.new_text, "extraargs=cma=128M\nextraboardargs=cma=256M\n");
    }

    #[test]
    fn env_quoted_value_gets_the_arg_inside_the_quotes() {
        let t = "extraargs=\"net.ifnames=0\"\n";
        let e = edit_cmdline_cma(BootFileKind::ArmbianEnv, t, &size("256M")).unwrap();
        assert_eq!(e.new_text, "extraargs=\"net.ifnames=0 cma=256M\"\n");
        let t = "extraargs=\n";
        let e = edit_cmdline_cma(BootFileKind::ArmbianEnv, t, &size("256M")).unwrap();
        assert_eq!(e.new_text, "extraargs=cma=256M\n");
    }

    #[test]
    fn env_without_final_newline_gets_one_before_the_new_line() {
        let e = edit_cmdline_cma(BootFileKind::ArmbianEnv, "verbosity=1", &size("256M")).unwrap();
        assert_eq!(e.new_text, "verbosity=1\nextraargs=cma=256M\n");
        assert_eq!(
            e.diff,
            "@@ -1,1 +1,2 @@\n-verbosity=1\n+verbosity=1\n+extraargs=cma=256M\n"
        );
    }

    #[test]
    fn cmdline_append_and_remove() {
        let t = "console=tty1 root=/dev/x rootwait \n";
        let e = edit_cmdline_cma(BootFileKind::PiCmdline, t, &size("256M")).unwrap();
        assert_eq!(e.new_text, "console=tty1 root=/dev/x rootwait cma=256M \n");
        let r = remove_cmdline_cma(
            BootFileKind::PiCmdline,
            "cma=64M console=tty1 cma=256M rootwait\n",
        )
        .unwrap();
        assert_eq!(r.new_text, "console=tty1 rootwait\n");
        assert_eq!(
            r.summary,
            "line 1: removed cma=64M; line 1: removed cma=256M"
        );
        assert!(
            !remove_cmdline_cma(BootFileKind::PiCmdline, "console=tty1\n")
                .unwrap()
                .changed
        );
        assert_eq!(
            edit_cmdline_cma(BootFileKind::KernelCmdline, "\n\n", &size("1G")),
            Err(EditError::NoArgsLine)
        );
    }

    #[test]
    fn quoted_cma_is_refused() {
        let e = edit_cmdline_cma(BootFileKind::PiCmdline, "a \"cma=64M\" b\n", &size("1G"));
        assert_eq!(e, Err(EditError::Quoted(1)));
    }

    #[test]
    fn extlinux_edits_the_default_label() {
        let t = "default rescue\nlabel normal\n  linux /vmlinuz\n  append root=/dev/a cma=64M\nlabel rescue\n  linux /vmlinuz\n  append root=/dev/b\n";
        let e = edit_cmdline_cma(BootFileKind::Extlinux, t, &size("256M")).unwrap();
        assert_eq!(e.new_text, t.replace("root=/dev/b", "root=/dev/b cma=256M"));
        assert!(
            e.warnings.iter().any(|w| w.contains("label \"normal\"")),
            "{:?}",
            e.warnings
        );
        assert_eq!(
            edit_cmdline_cma(BootFileKind::Extlinux, "timeout 1\n", &size("1G")),
            Err(EditError::NoLabel)
        );
        assert_eq!(
            edit_cmdline_cma(BootFileKind::Extlinux, "label a\n  linux /v\n", &size("1G")),
            Err(EditError::NoAppend("a".into()))
        );
    }

    #[test]
    fn pi_config_variants() {
        let e =
            edit_pi_config_cma("dtoverlay=vc4-kms-v3d,cma-512,noaudio\n", &size("256M")).unwrap();
        assert_eq!(e.new_text, "dtoverlay=vc4-kms-v3d,cma-256,noaudio\n");
        let e = edit_pi_config_cma("dtoverlay=cma\n", &size("128M")).unwrap();
        assert_eq!(e.new_text, "dtoverlay=cma,cma-128\n");
        let e = edit_pi_config_cma("[cm4]\notg_mode=1\n", &size("200M")).unwrap();
        assert_eq!(
            e.new_text,
            "[cm4]\notg_mode=1\n[all]\ndtoverlay=cma,cma-size=209715200\n"
        );
        assert!(
            !edit_pi_config_cma("[all]\ndtoverlay=cma,cma-256\n", &size("256M"))
                .unwrap()
                .changed
        );
        assert_eq!(
            overlay_param(&size("130M")),
            Err(SizeError::OverlayAlignment {
                size_bytes: 130 << 20
            })
        );
        let big = edit_pi_config_cma("[all]\n", &size("1G")).unwrap();
        assert!(big.warnings.iter().any(|w| w.contains("not verified")));
        assert_eq!(big.new_text, "[all]\ndtoverlay=cma,cma-size=1073741824\n");
    }
}

#[cfg(test)]
mod floor_tests {
    use super::*;

    #[test]
    fn sizes_without_a_suffix_are_refused_but_zero_is_allowed() {
        let ram = Ok(16u64 << 30);
        for typo in ["256", "1K", "2M"] {
            let s = parse_cma_size(typo).unwrap();
            assert!(
                matches!(
                    validate_cma_size(&s, None, ram.clone()),
                    Err(SizeError::BelowFloor { .. })
                ),
                "{typo}"
            );
        }
        assert!(validate_cma_size(&parse_cma_size("0").unwrap(), None, ram.clone()).is_ok());
        assert!(validate_cma_size(&parse_cma_size("4M").unwrap(), None, ram.clone()).is_ok());
        // A profile minimum above the floor is the figure the refusal names, not 4 MiB.
        assert!(matches!(
            validate_cma_size(&parse_cma_size("3M").unwrap(), Some(64 << 20), ram),
            Err(SizeError::BelowMinimum { min_bytes, .. }) if min_bytes == 64 << 20
        ));
    }
}
