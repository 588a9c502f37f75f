//! The `cma show` view: verdict and rendering of the current CMA setup.

use super::*;

/// The verdict of `cma show`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CmaVerdict {
    /// No `cma=` anywhere and no overlay: the device tree or kernel config sizes the pool.
    NotSet,
    /// The boot configuration differs from what the running kernel booted with.
    PendingReboot,
    /// The kernel booted with `cma=` but `CmaTotal` differs: the device tree, firmware or NUMA
    /// emulation overrode it, or the reservation failed.
    Overridden,
    /// What is configured is what is in effect.
    InEffect,
    /// Not enough data (no `/proc/cmdline`, no `CmaTotal`).
    Unknown,
}

impl CmaVerdict {
    /// Words for people (`pending reboot`).
    pub fn as_str(self) -> &'static str {
        match self {
            CmaVerdict::NotSet => "not set",
            CmaVerdict::PendingReboot => "pending reboot",
            CmaVerdict::Overridden => "overridden by the device tree or firmware",
            CmaVerdict::InEffect => "in effect",
            CmaVerdict::Unknown => "unknown",
        }
    }
}

/// What `cma show` reports.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CmaShow {
    /// Profile id in force.
    pub profile: String,
    /// True when a command-line `cma=` is harmful on this board (Pi 5).
    pub cmdline_cma_harmful: bool,
    /// Board path of the kernel-arguments boot file read.
    pub boot_file: Option<String>,
    /// Its winning `cma=` (`cma=256M`), `None` when it has none.
    pub boot_file_cma: Option<String>,
    /// 1-based line of that `cma=`.
    pub boot_file_line: Option<usize>,
    /// Board path of the Pi `config.txt` read.
    pub config_txt: Option<String>,
    /// Its pool line (`dtoverlay=cma,cma-256`).
    pub config_txt_cma: Option<String>,
    /// The `cma=` on `/proc/cmdline` (`cma=256M`); `None` when there is none or the file is missing.
    pub proc_cmdline_cma: Option<String>,
    /// True when `/proc/cmdline` could be read.
    pub proc_cmdline_read: bool,
    /// `CmaTotal` in bytes.
    pub cma_total_bytes: Option<u64>,
    /// Verdict.
    pub verdict: CmaVerdict,
    /// One or two sentences explaining the verdict.
    pub explanation: String,
    /// The last edit recorded in the state directory.
    pub last_edit: Option<BootEditState>,
}

pub(super) fn show_arg(c: &Option<crate::parse::cmdline::CmaParam>) -> Option<String> {
    c.as_ref().map(|c| format!("cma={}", c.raw))
}

pub(super) fn close(want: u64, total: u64) -> bool {
    want.abs_diff(total) <= want / 50 + (1 << 20)
}

/// True when a command-line `cma=` is harmful on this board: the profile says so, or the device
/// tree is a Raspberry Pi 5 family one (`brcm,bcm2712*`), whatever the profile.
pub fn cmdline_cma_harmful(d: &Diagnosis) -> bool {
    d.profile.cma.cmdline_cma == CmdlineCma::Harmful
        || d.snapshot
            .identity
            .compatible
            .as_ref()
            .is_ok_and(|c| c.iter().any(|s| s.starts_with("brcm,bcm2712")))
}

/// Builds the `cma show` view from a diagnosis (its snapshot holds the boot files,
/// `/proc/cmdline` and `/proc/meminfo`) and `boot_edit.json` in `state`.
pub fn cma_show(d: &Diagnosis, state: &StateDir) -> CmaShow {
    let snap = &d.snapshot;
    let mut cmdline_file: Option<(String, crate::parse::bootfile::BootCma)> = None;
    let mut overlay: Option<(String, crate::parse::cmdline::CmaParam)> = None;
    for b in &snap.boot_files {
        let Ok(text) = &b.text else { continue };
        if b.kind == BootFileKind::PiConfig {
            if overlay.is_none() {
                overlay = pi_config_cma(text).map(|(c, _)| (b.path.clone(), c));
            }
            continue;
        }
        let parsed = find_boot_cma(b.kind, text);
        let replace = match &cmdline_file {
            None => true,
            Some((_, cur)) => cur.cma.is_none() && parsed.cma.is_some(),
        };
        if replace {
            cmdline_file = Some((b.path.clone(), parsed));
        }
    }
    let booted = snap.cmdline.as_ref().ok().map(|l| find_cma(l).map(|c| c.0));
    let total = snap.meminfo.as_ref().ok().and_then(|m| m.cma_total_bytes);
    let harmful = cmdline_cma_harmful(d);
    let configured = cmdline_file.as_ref().map(|(_, b)| b.cma.clone());
    let size_of = |c: &Option<crate::parse::cmdline::CmaParam>| c.as_ref().map(|c| c.size_bytes);
    let (verdict, explanation) = match (&booted, &configured) {
        (None, _) => (CmaVerdict::Unknown, "/proc/cmdline cannot be read, so what the kernel booted with is unknown".to_string()),
        (Some(b), Some(c)) if size_of(b) != size_of(c) => (
            CmaVerdict::PendingReboot,
            format!(
                "{} has {} but the running kernel booted with {}: reboot to apply it",
                cmdline_file.as_ref().map(|f| f.0.as_str()).unwrap_or("the boot file"),
                show_arg(c).unwrap_or_else(|| "no cma=".into()),
                show_arg(b).unwrap_or_else(|| "no cma=".into())
            ),
        ),
        (Some(Some(b)), _) => match (b.size_bytes.filter(|_| b.size_is_number), total) {
            (_, None) => (CmaVerdict::Unknown, format!("the kernel booted with cma={} but /proc/meminfo has no CmaTotal", b.raw)),
            (None, Some(t)) => (
                CmaVerdict::Overridden,
                format!("cma={} is not a number: the kernel's memparse reads it as 0 (no pool); the pool is {}", b.raw, human_bytes(t)),
            ),
            (Some(want), Some(t)) if close(want, t) => (
                CmaVerdict::InEffect,
                format!(
                    "cma={} is in effect (CmaTotal {}){}",
                    b.raw,
                    human_bytes(t),
                    if harmful && want > 0 {
                        "; on this board a command-line cma= bypasses the device-tree pool the firmware needs: `npu-agent cma set` moves it to config.txt"
                    } else {
                        ""
                    }
                ),
            ),
            (Some(want), Some(t)) => (
                CmaVerdict::Overridden,
                format!(
                    "the kernel booted with cma={} ({}) but CmaTotal is {}: the device tree, firmware or NUMA emulation overrode it, or the reservation failed (see `dmesg | grep -i cma`)",
                    b.raw,
                    human_bytes(want),
                    human_bytes(t)
                ),
            ),
        },
        (Some(None), _) => match (&overlay, total) {
            (Some((path, c)), Some(t)) => match c.size_bytes {
                Some(want) if close(want, t) => (CmaVerdict::InEffect, format!("{path} sizes the pool ({}); CmaTotal {}", c.raw, human_bytes(t))),
                Some(want) => (
                    CmaVerdict::PendingReboot,
                    format!("{path} asks for {} ({}) but CmaTotal is {}: reboot to apply it, or the overlay is not applied", human_bytes(want), c.raw, human_bytes(t)),
                ),
                None => (CmaVerdict::Unknown, format!("{path}: {} has no size", c.raw)),
            },
            (Some((path, c)), None) => (CmaVerdict::Unknown, format!("{path} has {} but /proc/meminfo has no CmaTotal", c.raw)),
            (None, t) => (
                CmaVerdict::NotSet,
                format!(
                    "no cma= is set: the device tree or the kernel configuration sizes the pool{}",
                    t.map(|t| format!(" (CmaTotal {})", human_bytes(t))).unwrap_or_default()
                ),
            ),
        },
    };
    CmaShow {
        profile: d.profile.id.clone(),
        cmdline_cma_harmful: harmful,
        boot_file: cmdline_file.as_ref().map(|f| f.0.clone()),
        boot_file_cma: cmdline_file.as_ref().and_then(|f| show_arg(&f.1.cma)),
        boot_file_line: cmdline_file.as_ref().and_then(|f| f.1.line),
        config_txt: overlay.as_ref().map(|o| o.0.clone()),
        config_txt_cma: overlay.as_ref().map(|o| o.1.raw.clone()),
        proc_cmdline_cma: booted.clone().flatten().map(|c| format!("cma={}", c.raw)),
        proc_cmdline_read: booted.is_some(),
        cma_total_bytes: total,
        verdict,
        explanation,
        last_edit: state.load(BOOT_EDIT_FILE).ok().flatten(),
    }
}

/// `cma show` as text. `args` is what a hint repeats of the user's command line after the
/// subcommand (such as ` --root /tmp/board`, empty for the live board).
pub fn render_cma_show(s: &CmaShow, args: &str) -> String {
    let none = || "-".to_string();
    let mut out = String::new();
    out.push_str(&format!("profile             {}\n", s.profile));
    match &s.boot_file {
        Some(f) => out.push_str(&format!(
            "boot file           {f}: {}{}\n",
            s.boot_file_cma.clone().unwrap_or_else(|| "no cma=".into()),
            s.boot_file_line
                .map(|l| format!(" (line {l})"))
                .unwrap_or_default()
        )),
        None => out.push_str("boot file           none of the profile's boot files exists\n"),
    }
    if let Some(c) = &s.config_txt {
        out.push_str(&format!(
            "config.txt          {c}: {}\n",
            s.config_txt_cma.clone().unwrap_or_else(none)
        ));
    }
    let booted = if s.proc_cmdline_read {
        s.proc_cmdline_cma
            .clone()
            .unwrap_or_else(|| "no cma=".into())
    } else {
        "not read (missing or unreadable)".into()
    };
    out.push_str(&format!("/proc/cmdline       {booted}\n"));
    out.push_str(&format!(
        "CmaTotal            {}\n",
        s.cma_total_bytes.map(human_bytes).unwrap_or_else(none)
    ));
    out.push_str(&format!("verdict             {}\n", s.verdict.as_str()));
    out.push_str(&format!("                    {}\n", s.explanation));
    if let Some(e) = &s.last_edit {
        let files: Vec<&str> = e.files.iter().map(|f| f.path.as_str()).collect();
        let not_verified = format!(
            "NOT verified (the write may have been cut off; run `npu-agent cma set{args}` again)"
        );
        let state = if !e.verified {
            not_verified.as_str()
        } else if e.reboot_required {
            "verified; reboot required"
        } else {
            "verified; booted"
        };
        out.push_str(&format!(
            "last edit           cma {} in {}: {state}\n",
            e.requested,
            files.join(", ")
        ));
    }
    out
}
