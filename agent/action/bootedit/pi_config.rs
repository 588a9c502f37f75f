//! The Raspberry Pi `config.txt` form of the CMA size: the `dtoverlay=vc4-kms-v3d,cma-N`
//! parameter and its edit.

use super::*;

/// The overlay parameter for a size: `cma-256` for the overlay's preset sizes, else
/// `cma-size=<bytes>`.
///
/// Errors: [`SizeError::OverlayAlignment`] for a size that is not a multiple of 4 MiB.
pub fn overlay_param(size: &CmaSize) -> Result<String, SizeError> {
    if size.bytes % MIB == 0 && OVERLAY_SIZES_MB.contains(&(size.bytes / MIB)) {
        return Ok(format!("cma-{}", size.bytes / MIB));
    }
    if size.bytes % OVERLAY_SIZE_ALIGN_BYTES != 0 || size.bytes == 0 {
        return Err(SizeError::OverlayAlignment {
            size_bytes: size.bytes,
        });
    }
    Ok(format!("cma-size={}", size.bytes))
}

pub(super) fn is_size_param(p: &str) -> bool {
    let p = p.trim();
    p.strip_prefix("cma-size=")
        .is_some_and(|v| v.trim().parse::<u64>().is_ok())
        || p.strip_prefix("cma-")
            .is_some_and(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
}

/// Sizes the Raspberry Pi device-tree CMA pool in `config.txt`: replaces the size parameter of
/// the line that wins (`dtoverlay=cma,cma-N`, `dtoverlay=vc4-kms-v3d,cma-N`, `dtparam=cma-N`;
/// sections other than `[all]`/`[pi5]` are ignored, as the firmware on a Pi 5 does), adds a
/// size to a bare `dtoverlay=cma`, or appends `dtoverlay=cma,cma-N` under `[all]` at the end
/// (adding an `[all]` line when the file ends in another section).
///
/// Errors: [`EditError::Verify`] when the size is not an overlay size (call [`overlay_param`]
/// first to get the [`SizeError`]) or the result would not read back as that size.
pub fn edit_pi_config_cma(text: &str, size: &CmaSize) -> Result<FileEdit, EditError> {
    let param = overlay_param(size).map_err(|e| EditError::Verify(e.to_string()))?;
    let mut lines = split_lines(text);
    let mut warnings: Vec<String> = crlf_warning(BootFileKind::PiConfig, text)
        .into_iter()
        .collect();
    let ending = file_ending(text);
    if size.bytes > PI5_VERIFIED_MAX_MB * MIB {
        warnings.push(format!(
            "pools above {PI5_VERIFIED_MAX_MB} MiB are not verified on a Pi 5 (one report saw CmaTotal 0 with 768M/1G because of numa=fake=8): check CmaTotal after the reboot"
        ));
    }
    let summary;
    if let Some((cma, line_no)) = pi_config_cma(text) {
        let i = line_no - 1;
        if cma.size_bytes == Some(size.bytes) {
            return Ok(unchanged(
                text,
                warnings,
                format!("line {line_no}: {} already sizes the pool", cma.raw),
            ));
        }
        let Some(content) = lines.get(i).map(|l| &l.content) else {
            return Err(EditError::Verify(format!("no line {line_no}")));
        };
        let eq = content.find('=').map(|e| e + 1).unwrap_or(0);
        // Byte ranges of the comma-separated parameters after `=`.
        let mut ranges = Vec::new();
        let mut s = eq;
        for (j, c) in content[eq..].char_indices() {
            if c == ',' {
                ranges.push((s, eq + j));
                s = eq + j + 1;
            }
        }
        ranges.push((s, content.len()));
        let Some(&(a, b)) = ranges
            .iter()
            .rev()
            .find(|(a, b)| is_size_param(&content[*a..*b]))
        else {
            return Err(EditError::Verify(format!(
                "no size parameter on line {line_no}"
            )));
        };
        let old = content[a..b].trim().to_string();
        let lead = content[a..b].len() - content[a..b].trim_start().len();
        let trail = content[a..b].len() - content[a..b].trim_end().len();
        lines[i].content.replace_range(a + lead..b - trail, &param);
        summary = format!("line {line_no}: {old} -> {param}");
    } else if let Some(i) = bare_cma_overlay(&lines) {
        let end = lines[i].content.trim_end().len();
        lines[i].content.insert_str(end, &format!(",{param}"));
        summary = format!("line {}: added {param} to dtoverlay=cma", i + 1);
    } else {
        let last_section = lines
            .iter()
            .rev()
            .map(|l| l.content.trim())
            .find(|t| t.starts_with('['))
            .map(|t| t.to_ascii_lowercase());
        if !matches!(last_section.as_deref(), None | Some("[all]")) {
            push_line(&mut lines, "[all]".into(), ending);
        }
        push_line(&mut lines, format!("dtoverlay=cma,{param}"), ending);
        summary = format!("line {}: added dtoverlay=cma,{param}", lines.len());
    }
    let new_text = join_lines(&lines);
    match pi_config_cma(&new_text) {
        Some((c, _)) if c.size_bytes == Some(size.bytes) => {}
        other => {
            return Err(EditError::Verify(format!(
                "{:?}",
                other.map(|(c, _)| c.raw)
            )))
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

/// Index of the last active `dtoverlay=cma` line without a size parameter.
pub(super) fn bare_cma_overlay(lines: &[Line]) -> Option<usize> {
    let mut active = true;
    let mut found = None;
    for (i, l) in lines.iter().enumerate() {
        let t = l.content.trim();
        if t.starts_with('[') {
            let section = t
                .trim_matches(|c| c == '[' || c == ']')
                .to_ascii_lowercase();
            active = matches!(section.as_str(), "all" | "pi5");
            continue;
        }
        if !active || t.starts_with('#') {
            continue;
        }
        if let Some(v) = t.strip_prefix("dtoverlay=") {
            let mut params = v.split(',');
            if params.next().map(str::trim) == Some("cma") && !params.any(is_size_param) {
                found = Some(i);
            }
        }
    }
    found
}
