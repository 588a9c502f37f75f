//! The file steps of a fix under the root: a unit drop-in, a modprobe.d option, a sysctl.d
//! setting (also written to `/proc/sys` now), a boot-file key. Each one reads the file, makes
//! the pure edit of [`super::edit`], writes it with [`write_atomic`] (the old file kept as
//! `<file>.npu-agent.bak`), re-reads it (the bytes must be the new text and the edit must now
//! change nothing), and returns what changed with what undoes it. Paths resolve through
//! [`SysRoot::write_path`], so no file outside `--root` is ever written; a directory is created
//! only where its parent already is a directory on the board.

use super::edit::{
    boot_kind, edit_boot_key, edit_drop_in, edit_modprobe, edit_sysctl, sysctl_dotted, TextEdit,
};
use crate::action::atomic::{
    existing_mode, remove_stale_temps, write_atomic, Storage, BACKUP_SUFFIX, DEFAULT_MODE,
};
use crate::model::remedy::Step;
use crate::root::SysRoot;
use serde::Serialize;

/// Where systemd reads drop-ins of system units.
pub const UNIT_DIR: &str = "/etc/systemd/system";
/// Where modprobe reads options (`*.conf`).
pub const MODPROBE_DIR: &str = "/etc/modprobe.d";
/// Where systemd-sysctl reads settings at boot (`*.conf`).
pub const SYSCTL_DIR: &str = "/etc/sysctl.d";

/// What a file step changed (or found already so).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FileChange {
    /// Board path of the file.
    pub path: String,
    /// The file did not exist and was created.
    pub created: bool,
    /// The file was written (false: it already said so; nothing written).
    pub changed: bool,
    /// Lines replaced or removed.
    pub before: Vec<String>,
    /// Lines written or added.
    pub after: Vec<String>,
    /// Unified-style hunks.
    pub diff: String,
    /// What a person should know.
    pub warnings: Vec<String>,
    /// Board path of the backup of the old file, when there was one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub backup: Option<String>,
    /// For a sysctl: the running value before and after (`/proc/sys/...`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runtime: Option<(String, String)>,
}

/// How to take a file step back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Undo {
    path: String,
    /// The old bytes to put back; `None`: the file was created, remove it.
    old: Option<Vec<u8>>,
    /// A directory the step created (removed when empty).
    created_dir: Option<String>,
    /// `/proc/sys` path and the value to write back.
    knob: Option<(String, String)>,
}

/// A file name inside a fixed directory: one component, no leading dot or dash.
fn file_name(what: &str, s: &str) -> Result<(), String> {
    let ok = !s.is_empty()
        && !s.starts_with(['.', '-'])
        && !s
            .chars()
            .any(|c| c == '/' || c.is_whitespace() || c.is_control());
    if ok {
        Ok(())
    } else {
        Err(format!("{what} {s:?} is not a plain file name; refused"))
    }
}

/// A systemd unit name (`hailo-ollama.service`): a plain name with a unit type suffix.
pub fn unit_name(s: &str) -> Result<(), String> {
    file_name("unit", s)?;
    let ok = s.rsplit_once('.').is_some_and(|(n, t)| {
        !n.is_empty()
            && matches!(
                t,
                "service" | "socket" | "target" | "timer" | "mount" | "path" | "slice" | "scope"
            )
    }) && s
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || ":_.\\@-".contains(c));
    if ok {
        Ok(())
    } else {
        Err(format!("unit {s:?} is not a systemd unit name; refused"))
    }
}

/// Board path of the file a step writes, and the directory to create when missing (whose parent
/// must exist). `None` for steps that are not file steps.
///
/// Errors: a name that is not plain, a modprobe.d or sysctl.d file not ending in `.conf` (it
/// would never be read).
pub fn target(step: &Step) -> Result<Option<(String, Option<String>)>, String> {
    let conf = |what: &str, f: &str| {
        file_name(what, f)?;
        if f.ends_with(".conf") {
            Ok(())
        } else {
            Err(format!(
                "{what} {f:?} does not end in .conf, so it would never be read; refused"
            ))
        }
    };
    Ok(Some(match step {
        Step::UnitDropIn { unit, file, .. } => {
            unit_name(unit)?;
            conf("drop-in", file)?;
            let dir = format!("{UNIT_DIR}/{unit}.d");
            (format!("{dir}/{file}"), Some(dir))
        }
        Step::ModuleOption { file, .. } => {
            conf("modprobe.d file", file)?;
            (
                format!("{MODPROBE_DIR}/{file}"),
                Some(MODPROBE_DIR.to_string()),
            )
        }
        Step::Sysctl { file, .. } => {
            conf("sysctl.d file", file)?;
            (format!("{SYSCTL_DIR}/{file}"), Some(SYSCTL_DIR.to_string()))
        }
        Step::BootKey { file, .. } => {
            if !file.starts_with('/') || file.split('/').any(|c| c == "..") {
                return Err(format!(
                    "boot file {file:?} is not an absolute board path; refused"
                ));
            }
            (file.clone(), None)
        }
        _ => return Ok(None),
    }))
}

/// The pure edit a file step makes of `text`.
fn edit_for(step: &Step, path: &str, text: &str) -> Result<TextEdit, String> {
    match step {
        Step::UnitDropIn {
            section, settings, ..
        } => edit_drop_in(text, section, settings),
        Step::ModuleOption {
            module, key, value, ..
        } => edit_modprobe(text, module, key, value),
        Step::Sysctl { key, value, .. } => edit_sysctl(text, key, value),
        Step::BootKey { key, value, .. } => {
            let kind = boot_kind(path).ok_or_else(|| {
                format!("{path} is not a boot file the agent edits (config.txt, cmdline.txt, armbianEnv.txt, orangepiEnv.txt, extlinux.conf, /etc/kernel/cmdline)")
            })?;
            edit_boot_key(kind, text, key, value)
        }
        other => Err(format!("{} is not a file step", other.text(false))),
    }
}

/// Carries out one file step under `root` (see the module). Returns what changed and how to undo
/// it.
///
/// Errors: a sentence naming the file: a refused name or path (outside the root, a directory
/// missing on the board), a file that is not UTF-8 or is read-only, the edit's refusal, a failed
/// write, or a re-read that does not hold the edit (the file is then as the write left it; the
/// returned error does not undo it, the caller does with the backup).
pub fn apply_file(
    root: &SysRoot,
    storage: &mut dyn Storage,
    step: &Step,
) -> Result<(FileChange, Undo), String> {
    let Some((path, dir)) = target(step)? else {
        return Err(format!("{} is not a file step", step.text(false)));
    };
    let created_dir = match &dir {
        Some(d) => ensure_dir(root, d)?,
        None => None,
    };
    let result = write_file(root, storage, step, &path, created_dir.clone());
    if result.is_err() {
        if let Some(d) = &created_dir {
            remove_empty_dir(root, d);
        }
    }
    let (mut change, mut undo) = result?;
    if let Step::Sysctl { key, value, .. } = step {
        match set_knob(root, key, value) {
            Ok((knob, old)) => {
                change.runtime = Some((old.clone(), value.clone()));
                undo.knob = Some((knob, old));
            }
            Err(e) => {
                let back = undo_file(root, storage, &undo);
                return Err(match back {
                    Ok(()) => format!("{e} (the file was put back as it was)"),
                    Err(u) => format!("{e}; putting the file back failed too: {u}"),
                });
            }
        }
    }
    Ok((change, undo))
}

/// Creates `dir` when missing; its parent must be a directory on the board. Returns the board
/// path when it was created.
fn ensure_dir(root: &SysRoot, dir: &str) -> Result<Option<String>, String> {
    if root.is_dir(dir) {
        return Ok(None);
    }
    let parent = dir
        .rsplit_once('/')
        .map_or("/", |(p, _)| if p.is_empty() { "/" } else { p });
    if !root.is_dir(parent) {
        return Err(format!(
            "{parent} is not a directory on this board (missing, or a link that leads out of the root); refused"
        ));
    }
    root.create_dir_all(dir).map_err(|e| e.to_string())?;
    Ok(Some(dir.to_string()))
}

fn remove_empty_dir(root: &SysRoot, dir: &str) {
    if let Ok(host) = root.entry_path(dir) {
        let _ = std::fs::remove_dir(host);
    }
}

/// Reads, edits, writes and re-reads the step's file.
fn write_file(
    root: &SysRoot,
    storage: &mut dyn Storage,
    step: &Step,
    path: &str,
    created_dir: Option<String>,
) -> Result<(FileChange, Undo), String> {
    // Every step through the file's directory as opened now (a swapped directory cannot move it).
    let target = root.write_target(path).map_err(|e| e.to_string())?;
    let host = target.path();
    let old = match root.read(path) {
        Ok(b) => Some(b),
        Err(e) if e.is_not_found() && !matches!(step, Step::BootKey { .. }) => None,
        Err(e) => return Err(e.to_string()),
    };
    let text = match &old {
        Some(b) => std::str::from_utf8(b)
            .map_err(|_| format!("{path} is not UTF-8 text; refusing to edit it"))?
            .to_string(),
        None => String::new(),
    };
    let edit = edit_for(step, path, &text).map_err(|e| format!("{path}: {e}"))?;
    let mut change = FileChange {
        path: path.to_string(),
        created: old.is_none(),
        changed: edit.changed,
        before: edit.before.clone(),
        after: edit.after.clone(),
        diff: edit.diff.clone(),
        warnings: edit.warnings.clone(),
        backup: None,
        runtime: None,
    };
    let undo = Undo {
        path: path.to_string(),
        old: old.clone(),
        created_dir,
        knob: None,
    };
    if !edit.changed {
        change.created = false;
        return Ok((
            change,
            Undo {
                old: Some(text.into_bytes()),
                ..undo
            },
        ));
    }
    let mode = existing_mode(&host).unwrap_or(DEFAULT_MODE);
    if old.is_some() && mode & 0o222 == 0 {
        return Err(format!(
            "{path} is read-only (mode {mode:04o}): refusing to replace it"
        ));
    }
    remove_stale_temps(&host);
    write_atomic(
        storage,
        &host,
        edit.new_text.as_bytes(),
        old.as_deref(),
        mode,
    )
    .map_err(|e| {
        format!(
            "{path}: {}; the file is unchanged or complete",
            e.unpinned(&target)
        )
    })?;
    if old.is_some() {
        change.backup = Some(format!("{path}{BACKUP_SUFFIX}"));
    }
    verify(root, step, path, &edit.new_text).map_err(|e| {
        let back = undo_file(root, storage, &undo);
        match back {
            Ok(()) => format!("{e} (the file was put back as it was)"),
            Err(u) => format!("{e}; putting the file back failed too: {u}"),
        }
    })?;
    Ok((change, undo))
}

/// The file must hold exactly the new text, and the edit must now change nothing.
fn verify(root: &SysRoot, step: &Step, path: &str, new_text: &str) -> Result<(), String> {
    let bytes = root
        .read(path)
        .map_err(|e| format!("re-read after the write failed: {e}"))?;
    if bytes != new_text.as_bytes() {
        return Err(format!(
            "{path}: re-read after the write does not match what was written"
        ));
    }
    let again = edit_for(step, path, new_text)?;
    if again.changed {
        return Err(format!(
            "{path} does not hold the edit (applying it again would change it)"
        ));
    }
    Ok(())
}

/// `/proc/sys` path of a sysctl key.
pub fn knob_path(key: &str) -> String {
    format!("/proc/sys/{}", sysctl_dotted(key).replace('.', "/"))
}

/// Writes `value` to the key's `/proc/sys` file; returns the path and the value before.
fn set_knob(root: &SysRoot, key: &str, value: &str) -> Result<(String, String), String> {
    let knob = knob_path(key);
    let old = root
        .read_string(&knob)
        .map_err(|e| format!("sysctl {key} cannot be read ({e}); the kernel may not have it"))?;
    root.write_existing(&knob, format!("{value}\n").as_bytes())
        .map_err(|e| format!("sysctl {key} = {value} could not be set now: {e}"))?;
    Ok((knob, old.trim().to_string()))
}

/// Takes a file step back: the old bytes written back atomically (no new backup), or the created
/// file and directory removed; a sysctl's running value written back.
///
/// Errors: a sentence naming what could not be put back.
pub fn undo_file(root: &SysRoot, storage: &mut dyn Storage, undo: &Undo) -> Result<(), String> {
    let mut errors = Vec::new();
    if let Some((knob, old)) = &undo.knob {
        if let Err(e) = root.write_existing(knob, format!("{old}\n").as_bytes()) {
            errors.push(format!("{knob}: {e}"));
        }
    }
    match &undo.old {
        Some(old) => {
            let current = root.read(&undo.path).ok();
            if current.as_deref() != Some(old.as_slice()) {
                let r = root
                    .write_target(&undo.path)
                    .map_err(|e| e.to_string())
                    .and_then(|target| {
                        let host = target.path();
                        let mode = existing_mode(&host).unwrap_or(DEFAULT_MODE);
                        write_atomic(storage, &host, old, None, mode)
                            .map(|_| ())
                            .map_err(|e| e.unpinned(&target).to_string())
                    });
                if let Err(e) = r {
                    errors.push(format!("{}: {e}", undo.path));
                }
            }
        }
        None => {
            let r = root
                .entry_path(&undo.path)
                .map_err(|e| e.to_string())
                .and_then(|host| match storage.remove_file(&host) {
                    Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(e.to_string()),
                    _ => Ok(()),
                });
            if let Err(e) = r {
                errors.push(format!("{}: {e}", undo.path));
            }
        }
    }
    if let Some(d) = &undo.created_dir {
        remove_empty_dir(root, d);
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors.join("; "))
    }
}

#[cfg(test)]
#[path = "files_tests.rs"]
mod tests;
