//! `npu-agent cma show` and `npu-agent cma set SIZE` (docs/reference.md "Commands"; the `set_cma` command).
//!
//! `show` compares the `cma=` configured in the profile's boot file, the one on
//! `/proc/cmdline` and the pool in effect (`CmaTotal`) and gives a verdict. `set` validates the
//! size (K/M/G, the profile minimum, at most [`MAX_RAM_PERCENT`] % of `MemTotal`), edits the
//! boot file the profile names with the pure edits of [`super::bootedit`], and writes it with
//! [`super::atomic::write_atomic`] (backup, temp file, fsync, rename, directory fsync), re-reads
//! and re-parses it, and records `reboot_required` in `boot_edit.json`.
//!
//! On a Raspberry Pi 5 (profile `cmdline_cma = "harmful"`, or a `brcm,bcm2712` device tree) a
//! command-line `cma=` bypasses the device-tree pool the firmware needs (BR-08), so `set` sizes
//! the pool with `dtoverlay=cma,cma-N` in `config.txt` and removes `cma=` from `cmdline.txt`,
//! in that order (a cut between the two leaves the old command-line pool in force).

use super::atomic::{existing_mode, write_atomic, Storage, BACKUP_SUFFIX, DEFAULT_MODE};
use super::bootedit::{
    diff_with_header, edit_cmdline_cma, edit_pi_config_cma, overlay_param, parse_cma_size,
    remove_cmdline_cma, validate_cma_size, CmaSize, FileEdit, MAX_RAM_PERCENT,
};
use super::read_boot_id;
use super::state::{BootEditState, EditOp, EditedFile, StateDir, BOOT_EDIT_FILE};
use crate::diagnose::Diagnosis;
use crate::parse::bootfile::{find_boot_cma, pi_config_cma, BootFileKind};
use crate::parse::cmdline::find_cma;
use crate::parse::size::human_bytes;
use crate::profile::{CmdlineCma, Profile};
use crate::root::SysRoot;
use serde::Serialize;
use std::os::unix::fs::PermissionsExt;

mod show;
pub use show::*;

mod lock;
pub use lock::*;

/// Where `/etc/kernel/cmdline` is (the source of a generated `extlinux.conf`).
pub const KERNEL_CMDLINE: &str = "/etc/kernel/cmdline";
/// `config.txt` locations tried on a Pi 5 whose profile does not name one.
pub const PI_CONFIG_PATHS: &[&str] = &["/boot/firmware/config.txt", "/boot/config.txt"];

/// How `cma set` ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CmaSetOutcome {
    /// Files written, re-read and verified; `reboot_required` recorded.
    Written,
    /// The value is already there: nothing written, no backup.
    Unchanged,
    /// `--dry-run`: the diff was computed, nothing written.
    DryRun,
    /// Not attempted (bad size, no boot file, read-only file, ...).
    Refused,
    /// A write or the verification failed.
    Failed,
}

impl CmaSetOutcome {
    /// Exit code for the CLI: 0 for written/unchanged/dry run, 1 otherwise.
    pub fn exit_code(self) -> i32 {
        match self {
            CmaSetOutcome::Written | CmaSetOutcome::Unchanged | CmaSetOutcome::DryRun => 0,
            CmaSetOutcome::Refused | CmaSetOutcome::Failed => 1,
        }
    }
}

/// One file `cma set` changes (or would change).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FileChange {
    /// Board path.
    pub path: String,
    /// Kind.
    pub kind: BootFileKind,
    /// What the edit does.
    pub op: EditOp,
    /// The pure edit (new text, diff, warnings).
    pub edit: FileEdit,
    /// Board path of the backup, once written.
    pub backup: Option<String>,
    /// True once the file was written.
    pub written: bool,
}

/// The result of `cma set`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CmaSetReport {
    /// How it ended.
    pub outcome: CmaSetOutcome,
    /// Profile id in force.
    pub profile: String,
    /// The size asked for, when it parsed.
    pub requested: Option<CmaSize>,
    /// Largest accepted size (bytes): [`MAX_RAM_PERCENT`] % of `MemTotal`.
    pub max_bytes: Option<u64>,
    /// The files, in write order.
    pub changes: Vec<FileChange>,
    /// Why these files and this form (Pi 5, generated extlinux, ...).
    pub explanation: Vec<String>,
    /// Why it was refused or failed (empty otherwise).
    pub error: String,
}

impl CmaSetReport {
    fn new(profile: &str) -> Self {
        CmaSetReport {
            outcome: CmaSetOutcome::Refused,
            profile: profile.to_string(),
            requested: None,
            max_bytes: None,
            changes: Vec::new(),
            explanation: Vec::new(),
            error: String::new(),
        }
    }

    fn stop(self, outcome: CmaSetOutcome, error: impl Into<String>) -> Self {
        self.stop_with(outcome, error.into())
    }

    #[inline(never)]
    fn stop_with(mut self, outcome: CmaSetOutcome, error: String) -> Self {
        self.outcome = outcome;
        self.error = error;
        self
    }
}

/// A file to edit: board path, kind, operation.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Planned {
    path: String,
    kind: BootFileKind,
    op: EditOp,
}

/// Reads a boot file as UTF-8 text, byte-exact.
fn read_text(root: &SysRoot, path: &str) -> Result<String, String> {
    let bytes = root.read(path).map_err(|e| e.to_string())?;
    String::from_utf8(bytes).map_err(|_| format!("{path} is not UTF-8 text; refusing to edit it"))
}

/// Runs the pure edit of one planned file.
fn apply(p: &Planned, text: &str, size: &CmaSize) -> Result<FileEdit, String> {
    let r = match p.op {
        EditOp::SetCma => edit_cmdline_cma(p.kind, text, size),
        EditOp::RemoveCma => remove_cmdline_cma(p.kind, text),
        EditOp::SetOverlay => edit_pi_config_cma(text, size),
    };
    r.map_err(|e| format!("{}: {e}", p.path))
}

fn existing<'a>(
    root: &SysRoot,
    profile: &'a Profile,
    kinds: &[BootFileKind],
) -> Vec<(&'a str, BootFileKind)> {
    profile
        .cma
        .boot_files
        .iter()
        .filter(|b| kinds.contains(&b.kind) && root.exists(&b.path))
        .map(|b| (b.path.as_str(), b.kind))
        .collect()
}

/// Which of the present boot files the bootloader reads, as a sentence: U-Boot's distro boot
/// takes `extlinux/extlinux.conf` before `boot.scr` (which reads `armbianEnv.txt` /
/// `orangepiEnv.txt`); `/etc/kernel/cmdline` is read by no bootloader, only by `u-boot-update`
/// and `kernel-install` when they regenerate the boot files.
fn bootloader_reads(present: &[(&str, BootFileKind)]) -> String {
    let find = |k: BootFileKind| present.iter().find(|(_, kind)| *kind == k).map(|(p, _)| *p);
    let read = find(BootFileKind::Extlinux)
        .or_else(|| find(BootFileKind::ArmbianEnv))
        .or_else(|| find(BootFileKind::OrangepiEnv))
        .or_else(|| find(BootFileKind::PiCmdline));
    match read {
        Some(p) => format!(
            "the bootloader reads {p}{}",
            if find(BootFileKind::KernelCmdline).is_some() {
                format!(" ({KERNEL_CMDLINE} only feeds u-boot-update / kernel-install)")
            } else {
                String::new()
            }
        ),
        None => format!("no bootloader reads {KERNEL_CMDLINE} directly"),
    }
}

/// The Pi 5 plan: size the pool with the cma overlay in config.txt and remove cma= from every
/// cmdline.txt. Errors when there is no config.txt.
fn choose_pi5(
    root: &SysRoot,
    d: &Diagnosis,
    explanation: &mut Vec<String>,
) -> Result<Vec<Planned>, String> {
    let profile = &d.profile;
    let mut configs: Vec<String> = existing(root, profile, &[BootFileKind::PiConfig])
        .into_iter()
        .map(|(p, _)| p.to_string())
        .collect();
    if configs.is_empty() {
        configs = PI_CONFIG_PATHS
            .iter()
            .filter(|p| root.exists(p))
            .map(|p| p.to_string())
            .collect();
    }
    let Some(config) = configs.first() else {
        return Err("this board needs the pool sized in config.txt (a command-line cma= is harmful here), but no config.txt exists".into());
    };
    explanation.push(
        "on a Raspberry Pi 5 a cma= on the kernel command line bypasses the device-tree CMA pool, whose alloc-ranges keep it where the firmware can reach it; one board got its pool above the firmware's reach and a broken firmware mailbox (a reported Pi 5 16 GB + Hailo-10H bug). The pool is sized with the cma overlay in config.txt instead, and cma= is removed from cmdline.txt.".into(),
    );
    if profile.cma.cmdline_cma != CmdlineCma::Harmful {
        explanation.push(format!("the profile {} does not say so, but the device tree is a Pi 5 family one (brcm,bcm2712)", profile.id));
    }
    let mut out = vec![Planned {
        path: config.clone(),
        kind: BootFileKind::PiConfig,
        op: EditOp::SetOverlay,
    }];
    let mut cmdlines: Vec<String> = existing(root, profile, &[BootFileKind::PiCmdline])
        .into_iter()
        .map(|(p, _)| p.to_string())
        .collect();
    if cmdlines.is_empty() {
        cmdlines = ["/boot/firmware/cmdline.txt", "/boot/cmdline.txt"]
            .iter()
            .filter(|p| root.exists(p))
            .map(|p| p.to_string())
            .collect();
    }
    // Every cmdline.txt that carries cma= loses it (the firmware reads one of them).
    for path in cmdlines {
        out.push(Planned {
            path,
            kind: BootFileKind::PiCmdline,
            op: EditOp::RemoveCma,
        });
    }
    Ok(out)
}

/// The plan for the chosen boot file: a generated extlinux.conf is edited through
/// `KERNEL_CMDLINE` (u-boot-update rewrites it); any other file is edited in place.
fn plan_chosen(
    root: &SysRoot,
    path: &str,
    kind: BootFileKind,
    explanation: &mut Vec<String>,
) -> Result<Vec<Planned>, String> {
    if kind == BootFileKind::Extlinux {
        let generated = read_text(root, path)
            .map(|t| find_boot_cma(kind, &t).generated)
            .unwrap_or(false);
        if generated {
            if !root.exists(KERNEL_CMDLINE) {
                return Err(format!(
                    "{path} is generated by u-boot-update (edits there are overwritten) and {KERNEL_CMDLINE} does not exist: create it with the board's kernel arguments plus cma=SIZE, then run `sudo u-boot-update`"
                ));
            }
            explanation.push(format!(
                "{path} says it is generated by u-boot-update, so {KERNEL_CMDLINE} is edited instead; run `sudo u-boot-update` before rebooting so {path} picks it up"
            ));
            return Ok(vec![Planned {
                path: KERNEL_CMDLINE.into(),
                kind: BootFileKind::KernelCmdline,
                op: EditOp::SetCma,
            }]);
        }
    }
    Ok(vec![Planned {
        path: path.to_string(),
        kind,
        op: EditOp::SetCma,
    }])
}

/// Chooses the files to edit. Errors with a sentence when there is nothing safe to edit.
fn choose(
    root: &SysRoot,
    d: &Diagnosis,
    explanation: &mut Vec<String>,
) -> Result<Vec<Planned>, String> {
    let profile = &d.profile;
    if cmdline_cma_harmful(d) {
        return choose_pi5(root, d, explanation);
    }
    let kinds = [
        BootFileKind::ArmbianEnv,
        BootFileKind::OrangepiEnv,
        BootFileKind::PiCmdline,
        BootFileKind::Extlinux,
        BootFileKind::KernelCmdline,
    ];
    let present = existing(root, profile, &kinds);
    if present.is_empty() {
        let names: Vec<&str> = profile
            .cma
            .boot_files
            .iter()
            .filter(|b| kinds.contains(&b.kind))
            .map(|b| b.path.as_str())
            .collect();
        return Err(format!(
            "none of the boot files of profile {} exists ({}); nothing to edit",
            profile.id,
            if names.is_empty() {
                "the profile names none".to_string()
            } else {
                names.join(", ")
            }
        ));
    }
    // Like the cma.boot_param check: the first one that holds cma=, else the first present.
    let mut carrying: Vec<(&str, BootFileKind, bool)> = Vec::new();
    for (path, kind) in &present {
        if let Ok(t) = read_text(root, path) {
            let b = find_boot_cma(*kind, &t);
            if b.cma.is_some() {
                carrying.push((path, *kind, b.generated));
            }
        }
    }
    let chosen = carrying
        .first()
        .map(|(p, k, _)| (*p, *k))
        .unwrap_or(present[0]);
    if carrying.len() > 1 {
        let names: Vec<&str> = carrying.iter().map(|(p, _, _)| *p).collect();
        let reads = bootloader_reads(&present);
        // A generated extlinux.conf and /etc/kernel/cmdline are one setting (u-boot-update
        // writes the first from the second): edited through /etc/kernel/cmdline below.
        let one_setting = carrying.len() == 2
            && carrying
                .iter()
                .any(|(_, k, g)| *k == BootFileKind::Extlinux && *g)
            && carrying
                .iter()
                .any(|(_, k, _)| *k == BootFileKind::KernelCmdline);
        if !one_setting {
            return Err(format!(
                "cma= is set in {} boot files: {}; {reads}. Editing one would leave the others                  disagreeing: remove cma= from the files the bootloader does not read, then run                  `cma set` again",
                names.len(),
                names.join(", ")
            ));
        }
        explanation.push(format!("cma= is set in {}; {reads}", names.join(" and ")));
    }
    let (path, kind) = chosen;
    plan_chosen(root, path, kind, explanation)
}

/// Re-reads every file of a recorded edit and checks that it says what was asked (running the
/// same edit again changes nothing). Reads the files under `root`.
///
/// Errors: a sentence naming the first file that does not.
pub fn verify_edit(root: &SysRoot, edit: &BootEditState) -> Result<(), String> {
    let size = CmaSize {
        bytes: edit.requested_bytes,
        token: edit.requested.clone(),
    };
    for f in &edit.files {
        let p = Planned {
            path: f.path.clone(),
            kind: f.kind,
            op: f.op,
        };
        let text = read_text(root, &f.path)?;
        let again = apply(&p, &text, &size)?;
        if again.changed {
            return Err(format!(
                "{} does not hold the edit (re-applying it would change {})",
                f.path, again.summary
            ));
        }
    }
    Ok(())
}

/// Reconciles `boot_edit.json` at start: an unverified edit whose files now verify becomes
/// verified; a `reboot_required` edit made under another `boot_id` than the current one has
/// been booted (`reboot_required` false, `applied_boot_id` set). Reads the boot files and
/// `/proc/sys/kernel/random/boot_id` under the state directory's root; writes the state file
/// when it changed. Returns the state after reconciliation.
///
/// Errors: a sentence when the state cannot be read or written.
pub fn reconcile_boot_edit(state: &StateDir) -> Result<Option<BootEditState>, String> {
    let Some(mut e) = state
        .load::<BootEditState>(BOOT_EDIT_FILE)
        .map_err(|e| e.to_string())?
    else {
        return Ok(None);
    };
    let before = e.clone();
    if !e.verified && verify_edit(state.root(), &e).is_ok() {
        e.verified = true;
        e.reboot_required = true;
    }
    if let Some(now) = read_boot_id(state.root()) {
        if e.verified && e.reboot_required && !e.boot_id.is_empty() && now != e.boot_id {
            e.reboot_required = false;
            e.applied_boot_id = Some(now);
        }
    }
    if e != before {
        state.save(BOOT_EDIT_FILE, &e).map_err(|e| e.to_string())?;
    }
    Ok(Some(e))
}

/// Runs `cma set SIZE` on the board under `root` with the diagnosis `d` (profile, `MemTotal`,
/// device tree). With `dry_run`, computes the diffs and writes nothing. Otherwise: records the
/// edit as unverified in `boot_edit.json`, writes each changed file through `storage` with a
/// backup (`<file>.npu-agent.bak`), re-reads and re-parses them, and records the edit as
/// verified with `reboot_required`. Setting the value already there writes nothing at all.
/// `now_unix_s` is seconds since the epoch.
///
/// Never panics; refusals and failures are in the report.
pub fn cma_set(
    root: &SysRoot,
    d: &Diagnosis,
    size_text: &str,
    dry_run: bool,
    storage: &mut dyn Storage,
    state: &StateDir,
    now_unix_s: i64,
) -> CmaSetReport {
    let mut r = CmaSetReport::new(&d.profile.id);
    let size = match parse_cma_size(size_text) {
        Ok(s) => s,
        Err(e) => return r.stop(CmaSetOutcome::Refused, e.to_string()),
    };
    r.requested = Some(size.clone());
    if let Err(e) = accept_size(d, &size, &mut r) {
        return r.stop(CmaSetOutcome::Refused, e);
    }
    let planned = match choose(root, d, &mut r.explanation) {
        Ok(p) => p,
        Err(e) => return r.stop(CmaSetOutcome::Refused, e),
    };
    if planned.iter().any(|p| p.op == EditOp::SetOverlay) {
        if let Err(e) = overlay_param(&size) {
            return r.stop(CmaSetOutcome::Refused, e.to_string());
        }
    }
    // One edit at a time (the daemon's set_cma racing an administrator's `cma set`): held from
    // reading the boot files to recording the result.
    let _lock = if dry_run {
        None
    } else {
        match BootEditLock::acquire(state) {
            Ok(l) => Some(l),
            Err(e) => return r.stop(CmaSetOutcome::Refused, e),
        }
    };
    let originals = match plan_changes(root, &planned, &size, &mut r) {
        Ok(o) => o,
        Err(e) => return r.stop(CmaSetOutcome::Refused, e),
    };
    if r.changes.iter().all(|c| !c.edit.changed) {
        r.outcome = CmaSetOutcome::Unchanged;
        if !dry_run {
            confirm_unverified(root, state, &size, &mut r);
        }
        return r;
    }
    // Refuse a read-only file (mode without any write bit) before anything is written.
    let hosts = match host_paths(root, &r.changes) {
        Ok(h) => h,
        Err(e) => return r.stop(CmaSetOutcome::Refused, e),
    };
    if dry_run {
        r.outcome = CmaSetOutcome::DryRun;
        return r;
    }
    if let Some(why) = container_refusal(root, &r.changes) {
        return r.stop(CmaSetOutcome::Refused, why);
    }
    let mut record = new_record(root, &r, &size, now_unix_s);
    if let Err(e) = state.save(BOOT_EDIT_FILE, &record) {
        return r.stop(
            CmaSetOutcome::Failed,
            format!("the edit could not be recorded before writing, so nothing was written: {e}"),
        );
    }
    if let Err(e) = write_changes(storage, &hosts, &originals, &mut r.changes) {
        return r.stop(CmaSetOutcome::Failed, e);
    }
    for f in record.files.iter_mut() {
        f.backup = Some(format!("{}{BACKUP_SUFFIX}", f.path));
    }
    // Re-read: the bytes must be the new text, and the edit must now be a no-op.
    let reread = reread_error(root, &r.changes);
    if let Some(e) = reread {
        return r.stop(CmaSetOutcome::Failed, e);
    }
    if let Err(e) = verify_edit(root, &record) {
        return r.stop(CmaSetOutcome::Failed, format!("verification failed: {e}"));
    }
    record.verified = true;
    record.reboot_required = true;
    if let Err(e) = state.save(BOOT_EDIT_FILE, &record) {
        return r.stop(
            CmaSetOutcome::Failed,
            format!("the files were written and verified, but reboot_required could not be recorded ({e}); reboots stay refused until `npu-agent cma set` runs again"),
        );
    }
    r.outcome = CmaSetOutcome::Written;
    r
}

/// Checks `size` against the profile's floor and the RAM cap; notes the accepted range in
/// `r`. Errors: the refusal sentence.
fn accept_size(d: &Diagnosis, size: &CmaSize, r: &mut CmaSetReport) -> Result<(), String> {
    let mem_total = match &d.snapshot.meminfo {
        Ok(m) => m
            .mem_total_bytes
            .ok_or_else(|| "/proc/meminfo has no MemTotal line".to_string()),
        Err(e) => Err(e.to_string()),
    };
    match validate_cma_size(size, d.profile.cma.min_total_bytes, mem_total) {
        Ok(max) => {
            r.max_bytes = Some(max);
            r.explanation.push(format!(
                "size {} accepted: at most {MAX_RAM_PERCENT}% of RAM ({}) is allowed{}",
                human_bytes(size.bytes),
                human_bytes(max),
                d.profile
                    .cma
                    .min_total_bytes
                    .filter(|m| *m > 0)
                    .map(|m| format!(", at least {} (profile {})", human_bytes(m), d.profile.id))
                    .unwrap_or_default()
            ));
        }
        Err(e) => return Err(e.to_string()),
    }
    Ok(())
}

/// Reads and edits (in memory) each planned file, adding a change to `r`; returns the
/// original texts in the same order. Errors: the first file that cannot be read or edited.
fn plan_changes(
    root: &SysRoot,
    planned: &[Planned],
    size: &CmaSize,
    r: &mut CmaSetReport,
) -> Result<Vec<String>, String> {
    let mut originals = Vec::new();
    for p in planned {
        let text = read_text(root, &p.path)?;
        let edit = apply(p, &text, size)?;
        originals.push(text);
        r.changes.push(FileChange {
            path: p.path.clone(),
            kind: p.kind,
            op: p.op,
            edit,
            backup: None,
            written: false,
        });
    }
    Ok(originals)
}

/// The unverified record of the changed files, saved before anything is written.
fn new_record(root: &SysRoot, r: &CmaSetReport, size: &CmaSize, now_unix_s: i64) -> BootEditState {
    BootEditState {
        schema: 1,
        requested: size.token.clone(),
        requested_bytes: size.bytes,
        files: r
            .changes
            .iter()
            .filter(|c| c.edit.changed)
            .map(|c| EditedFile {
                path: c.path.clone(),
                kind: c.kind,
                op: c.op,
                summary: c.edit.summary.clone(),
                backup: None,
            })
            .collect(),
        edited_unix_s: now_unix_s,
        boot_id: read_boot_id(root).unwrap_or_default(),
        verified: false,
        reboot_required: false,
        applied_boot_id: None,
    }
}

/// Writes each changed file atomically with a backup beside it, marking it written.
/// Errors: the first write that failed (that file is unchanged or complete).
fn write_changes(
    storage: &mut dyn Storage,
    hosts: &[crate::root::WriteTarget],
    originals: &[String],
    changes: &mut [FileChange],
) -> Result<(), String> {
    for (i, c) in changes.iter_mut().enumerate() {
        if !c.edit.changed {
            continue;
        }
        // Every step through the file's directory as opened when the edit was planned.
        let host = &hosts[i].path();
        // Under the lock: temp files beside it are leftovers of a cut-off edit (or planted).
        super::atomic::remove_stale_temps(host);
        let mode = existing_mode(host).unwrap_or(DEFAULT_MODE);
        match write_atomic(
            storage,
            host,
            c.edit.new_text.as_bytes(),
            Some(originals[i].as_bytes()),
            mode,
        ) {
            Ok(w) => {
                c.written = true;
                c.backup = w.backup.map(|_| format!("{}{BACKUP_SUFFIX}", c.path));
            }
            Err(e) => {
                let e = e.unpinned(&hosts[i]);
                let msg = format!(
                    "{}: {e}; the file is unchanged or complete, the backup is beside it",
                    c.path
                );
                return Err(msg);
            }
        }
    }
    Ok(())
}

/// The first changed file whose bytes on disk are not the new text, as a sentence.
fn reread_error(root: &SysRoot, changes: &[FileChange]) -> Option<String> {
    changes
        .iter()
        .filter(|c| c.edit.changed)
        .find_map(|c| match root.read(&c.path) {
            Ok(b) if b == c.edit.new_text.as_bytes() => None,
            Ok(_) => Some(format!(
                "{}: re-read after the write does not match what was written",
                c.path
            )),
            Err(e) => Some(format!("re-read after the write failed: {e}")),
        })
}

/// After a cut-off write the files may already hold the value while `boot_edit.json` still
/// says unverified: when the recorded request is this size and the files verify, record it as
/// verified with `reboot_required` (no file is written).
fn confirm_unverified(root: &SysRoot, state: &StateDir, size: &CmaSize, r: &mut CmaSetReport) {
    let Ok(Some(mut e)) = state.load::<BootEditState>(BOOT_EDIT_FILE) else {
        return;
    };
    if e.verified || e.requested_bytes != size.bytes {
        return;
    }
    match verify_edit(root, &e) {
        Ok(()) => {
            e.verified = true;
            e.reboot_required = true;
            match state.save(BOOT_EDIT_FILE, &e) {
                Ok(()) => r.explanation.push("the previous, interrupted edit of this size is complete: recorded it as verified (reboot required)".into()),
                Err(err) => r.explanation.push(format!("the previous edit is complete but could not be recorded as verified: {err}")),
            }
        }
        Err(err) => r
            .explanation
            .push(format!("a previous edit is recorded as unverified: {err}")),
    }
}

/// In a container, why a changed boot file must not be written from here (the host's boot files
/// only where the host layout allows it: agent/sys/container.rs).
pub fn container_refusal(root: &SysRoot, changes: &[FileChange]) -> Option<String> {
    changes.iter().filter(|c| c.edit.changed).find_map(|c| {
        let host = root.join(&c.path).ok()?;
        crate::sys::container::refuse_host_write(root.is_live(), &c.path, &host)
    })
}

/// The files to write, their directories pinned; refuses a read-only file (no write bit in its
/// mode).
fn host_paths(
    root: &SysRoot,
    changes: &[FileChange],
) -> Result<Vec<crate::root::WriteTarget>, String> {
    let mut hosts = Vec::new();
    for c in changes {
        let host = root.write_target(&c.path).map_err(|e| e.to_string())?;
        if c.edit.changed {
            if let Ok(m) = std::fs::metadata(host.path()) {
                let mode = m.permissions().mode() & 0o7777;
                if mode & 0o222 == 0 {
                    return Err(format!(
                        "{} is read-only (mode {mode:04o}): refusing to replace it; make it writable (chmod u+w) if the edit is intended",
                        c.path
                    ));
                }
            }
        }
        hosts.push(host);
    }
    Ok(hosts)
}

/// `cma set` as text: outcome, explanation, diffs with warnings, next step. `args` is what the
/// hint repeats of the user's command line after the subcommand (such as ` --root /tmp/board`,
/// empty for the live board), so the suggested `cma show` looks at the same tree.
pub fn render_cma_set(r: &CmaSetReport, args: &str) -> String {
    let mut out = String::new();
    let size = r
        .requested
        .as_ref()
        .map(|s| format!("cma {}", s.token))
        .unwrap_or_else(|| "cma".into());
    match r.outcome {
        CmaSetOutcome::Refused => out.push_str(&format!("refused: {}\n", r.error)),
        CmaSetOutcome::Failed => out.push_str(&format!("failed: {}\n", r.error)),
        CmaSetOutcome::Unchanged => out.push_str(&format!(
            "{size} is already set: nothing to do (no write, no backup)\n"
        )),
        CmaSetOutcome::DryRun => out.push_str(&format!(
            "dry run: {size} would change the files below; nothing was written\n"
        )),
        CmaSetOutcome::Written => out.push_str(&format!(
            "{size} written and verified; reboot required for it to take effect\n"
        )),
    }
    for e in &r.explanation {
        out.push_str(&format!("note: {e}\n"));
    }
    for c in &r.changes {
        if c.edit.changed {
            out.push('\n');
            out.push_str(&diff_with_header(&c.path, &c.edit));
        } else {
            out.push_str(&format!("{}: {}\n", c.path, c.edit.summary));
        }
        for w in &c.edit.warnings {
            out.push_str(&format!("warning: {}: {w}\n", c.path));
        }
        if let Some(b) = &c.backup {
            out.push_str(&format!("backup: {b}\n"));
        }
    }
    if r.outcome == CmaSetOutcome::Written {
        out.push_str(&format!(
            "\nnext: reboot (sudo reboot), then `npu-agent cma show{args}` should say \"in effect\"\n"
        ));
    }
    out
}
