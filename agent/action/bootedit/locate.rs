//! Where the `cma=` setting lives in each boot file kind: the line and span of the kernel
//! command line in cmdline.txt, armbianEnv.txt (`extraargs=`) and extlinux.conf (`append`).

use super::*;

/// Where a kernel-arguments file's `cma=` is, or where it would go.
pub(super) struct Target {
    /// The winning `cma=` argument.
    pub(super) winner: Option<CmaArg>,
    /// Every `cma=` argument that takes part in the effective command line.
    pub(super) all: Vec<CmaArg>,
    /// (line, from, to) of the arguments where a new `cma=` is appended; `None` for an env file
    /// without `extraargs=`.
    pub(super) args_line: Option<(usize, usize, usize)>,
}

pub(super) fn locate(
    kind: BootFileKind,
    lines: &[Line],
    warnings: &mut Vec<String>,
) -> Result<Target, EditError> {
    match kind {
        BootFileKind::ArmbianEnv | BootFileKind::OrangepiEnv => locate_env(lines, warnings),
        BootFileKind::PiCmdline | BootFileKind::KernelCmdline => {
            locate_cmdline(kind, lines, warnings)
        }
        BootFileKind::Extlinux => locate_extlinux(lines, warnings),
        BootFileKind::PiConfig => Err(EditError::WrongKind(kind)),
    }
}

pub(super) fn locate_env(lines: &[Line], warnings: &mut Vec<String>) -> Result<Target, EditError> {
    let mut defs: Vec<(String, usize, usize, usize)> = Vec::new();
    for (i, l) in lines.iter().enumerate() {
        if let Some((key, from, to)) = env_value_span(&l.content) {
            if key == "extraargs" || key == "extraboardargs" {
                defs.push((key, i, from, to));
            }
        }
    }
    let last_of = |k: &str| defs.iter().rev().find(|d| d.0 == k).cloned();
    let extra = last_of("extraargs");
    let board = last_of("extraboardargs");
    // U-Boot: bootargs = "... ${extraargs} ${extraboardargs}", last definition of each key.
    let mut all = Vec::new();
    for d in [&extra, &board].into_iter().flatten() {
        all.extend(cma_args(&lines[d.1].content, d.1, d.2, d.3, false)?);
    }
    for key in ["extraargs", "extraboardargs"] {
        let n = defs.iter().filter(|d| d.0 == key).count();
        if n > 1 {
            let winner = defs
                .iter()
                .rev()
                .find(|d| d.0 == key)
                .map(|d| d.1 + 1)
                .unwrap_or(0);
            warnings.push(format!(
                "{key}= is defined {n} times; U-Boot's env import keeps only the last (line {winner}), so only that one is edited; the others are left as they are"
            ));
        }
    }
    if all.len() > 1 {
        let last = all.last().map(|a| a.line + 1).unwrap_or(0);
        warnings.push(format!(
            "cma= appears {} times in the arguments the kernel gets; the last one (line {last}) wins and is the one edited; remove the others by hand",
            all.len()
        ));
    }
    Ok(Target {
        winner: all.last().copied(),
        args_line: extra.map(|d| (d.1, d.2, d.3)),
        all,
    })
}

pub(super) fn locate_cmdline(
    kind: BootFileKind,
    lines: &[Line],
    warnings: &mut Vec<String>,
) -> Result<Target, EditError> {
    let first = lines
        .iter()
        .position(|l| !l.content.trim().is_empty())
        .ok_or(EditError::NoArgsLine)?;
    let content = &lines[first].content;
    let all = cma_args(content, first, 0, content.len(), true)?;
    if lines
        .iter()
        .skip(first + 1)
        .any(|l| !l.content.trim().is_empty())
    {
        warnings.push(match kind {
            BootFileKind::PiCmdline => format!("only line {} is the kernel command line (the firmware reads one line); the other lines are ignored by it and left as they are", first + 1),
            _ => format!("the file has more than one non-empty line; line {} was edited", first + 1),
        });
    }
    if all.len() > 1 {
        warnings.push(format!("cma= appears {} times on line {}; the last one wins and is the one edited; remove the others by hand", all.len(), first + 1));
    }
    Ok(Target {
        winner: all.last().copied(),
        args_line: Some((first, 0, content.len())),
        all,
    })
}

pub(super) fn first_word(s: &str) -> (String, &str) {
    let t = s.trim_start();
    let end = t.find(char::is_whitespace).unwrap_or(t.len());
    (t[..end].to_ascii_lowercase(), t[end..].trim())
}

pub(super) fn locate_extlinux(
    lines: &[Line],
    warnings: &mut Vec<String>,
) -> Result<Target, EditError> {
    // Label blocks: (name, first line, one past last line).
    let mut labels: Vec<(String, usize, usize)> = Vec::new();
    let mut default = None;
    for (i, l) in lines.iter().enumerate() {
        let (word, rest) = first_word(&l.content);
        if word == "label" {
            if let Some(last) = labels.last_mut() {
                last.2 = i;
            }
            labels.push((rest.to_string(), i, lines.len()));
        } else if word == "default" && labels.is_empty() {
            default = Some(rest.to_string());
        }
    }
    if labels.is_empty() {
        return Err(EditError::NoLabel);
    }
    let menu_default = labels.iter().position(|(_, s, e)| {
        lines[*s..*e]
            .iter()
            .any(|l| l.content.trim().eq_ignore_ascii_case("menu default"))
    });
    let chosen = menu_default
        .or_else(|| {
            default
                .as_ref()
                .and_then(|d| labels.iter().position(|(n, _, _)| n == d))
        })
        .unwrap_or(0);
    let (name, start, end) = labels[chosen].clone();
    let appends: Vec<usize> = (start..end)
        .filter(|&i| first_word(&lines[i].content).0 == "append")
        .collect();
    let Some(&line) = appends.last() else {
        return Err(EditError::NoAppend(name));
    };
    if appends.len() > 1 {
        warnings.push(format!(
            "label {name:?} has {} append lines; the last (line {}) is edited",
            appends.len(),
            line + 1
        ));
    }
    let content = &lines[line].content;
    let kw = content.len() - content.trim_start().len() + "append".len();
    let all = cma_args(content, line, kw, content.len(), true)?;
    if all.len() > 1 {
        warnings.push(format!(
            "cma= appears {} times on line {}; the last one wins and is the one edited",
            all.len(),
            line + 1
        ));
    }
    for (other, (n, s, e)) in labels.iter().enumerate() {
        if other == chosen {
            continue;
        }
        for (i, l) in lines.iter().enumerate().take(*e).skip(*s) {
            if first_word(&l.content).0 == "append" && l.content.contains("cma=") {
                warnings.push(format!(
                    "label {n:?} (line {}) also sets cma=; it is not the default label and is left as it is",
                    i + 1
                ));
            }
        }
    }
    if labels.len() > 1 {
        warnings.push(format!(
            "edited label {name:?}, the one that boots by default"
        ));
    }
    Ok(Target {
        winner: all.last().copied(),
        args_line: Some((line, kw, content.len())),
        all,
    })
}
