//! CMA checks: pool size, free space, the boot-time `cma=` and whether a reboot is pending.
//! Facts: RK3588-MEMORY.md §4-5, HAILO-PI5.md §6.3.

use super::{mib, Ctx, Finding, Status};
use crate::parse::bootfile::{find_boot_cma, BootCma, BootFileKind};
use crate::parse::cmdline::{find_cma, CmaParam};
use crate::parse::logline::LogEvent;
use crate::profile::CmdlineCma;

pub(super) fn all(ctx: &Ctx<'_>) -> Vec<Finding> {
    vec![
        pool_size(ctx),
        free(ctx),
        boot_param(ctx),
        reboot_pending(ctx),
    ]
}

fn pool_size(ctx: &Ctx<'_>) -> Finding {
    let id = "cma.pool_size";
    let spec = &ctx.profile.cma;
    let m = match &ctx.snap.meminfo {
        Ok(m) => m,
        Err(e) if e.is_not_found() => return Finding::skip(id, "no /proc/meminfo in this tree"),
        Err(e) => return Finding::new(id, Status::Error, format!("cannot read CmaTotal: {e}")),
    };
    let min = spec.min_total_bytes.unwrap_or(0);
    let Some(total) = m.cma_total_bytes else {
        return if min == 0 {
            Finding::new(id, Status::Pass, "no CMA pool: this kernel has no CONFIG_CMA (no CmaTotal line), and the profile needs none")
        } else {
            Finding::new(
                id,
                Status::Fail,
                format!(
                    "no CmaTotal line: the kernel has no CONFIG_CMA, but the profile needs {}",
                    mib(min)
                ),
            )
            .expected("cma_total_bytes", min)
        };
    };
    let suggest = if spec.suggested_size.is_empty() {
        "256M".to_string()
    } else {
        spec.suggested_size.clone()
    };
    let f = Finding::new(id, Status::Pass, format!("CmaTotal {}", mib(total)))
        .observed("cma_total_bytes", total)
        .expected("cma_total_bytes", min)
        .evidence(
            "/proc/meminfo",
            None,
            &format!("CmaTotal: {} kB", total / 1024),
        );
    if total < min {
        let mut f = f;
        f.status = Status::Fail;
        f.summary = format!(
            "CmaTotal is {}, below the {} the profile needs",
            mib(total),
            mib(min)
        );
        return f.remedy(format!("sudo npu-agent cma set {suggest} && sudo reboot"));
    }
    if let Some(rec) = spec.recommended_total_bytes {
        if total < rec {
            let mut f = f.expected("recommended_cma_total_bytes", rec);
            f.status = Status::Info;
            f.summary = format!(
                "CmaTotal is {}; large models on this NPU have needed about {}",
                mib(total),
                mib(rec)
            );
            return f.remedy(format!("only if a model fails to allocate: sudo npu-agent cma set {suggest} && sudo reboot"));
        }
    }
    let mut f = f;
    if total == 0 && spec.npu_behind_iommu {
        f.summary = "CmaTotal is 0: fine for the NPU, which allocates through its IOMMU; MPP/RGA/display may still want a pool".into();
    }
    f
}

fn free(ctx: &Ctx<'_>) -> Finding {
    let id = "cma.free";
    let m = match &ctx.snap.meminfo {
        Ok(m) => m,
        Err(e) if e.is_not_found() => return Finding::skip(id, "no /proc/meminfo in this tree"),
        Err(e) => return Finding::new(id, Status::Error, format!("cannot read CmaFree: {e}")),
    };
    let (Some(total), Some(free)) = (m.cma_total_bytes, m.cma_free_bytes) else {
        return Finding::skip(id, "no CMA pool (no CmaTotal/CmaFree)");
    };
    if total == 0 {
        return Finding::skip(id, "no CMA pool (CmaTotal 0 kB): nothing can be exhausted");
    }
    let pct = free.saturating_mul(100) / total;
    let min_pct = ctx.profile.cma.min_free_percent;
    let mut f = Finding::new(
        id,
        Status::Pass,
        format!("CmaFree {} of {} ({pct}%)", mib(free), mib(total)),
    )
    .observed("cma_free_bytes", free)
    .observed("cma_total_bytes", total)
    .observed("cma_free_percent", pct)
    .expected("cma_free_percent", format!(">= {min_pct}"))
    .evidence(
        "/proc/meminfo",
        None,
        &format!("CmaFree: {} kB", free / 1024),
    );
    let enomem: Vec<_> = ctx
        .logs
        .host(|e| matches!(e, LogEvent::CmaAllocFail { ret: -12, .. }))
        .filter(|(h, _)| h.class == crate::probe::LogClass::Kernel)
        .map(|(h, _)| h)
        .collect();
    let suggest = if ctx.profile.cma.suggested_size.is_empty() {
        "256M"
    } else {
        &ctx.profile.cma.suggested_size
    };
    if !enomem.is_empty() {
        f.status = Status::Fail;
        f.summary = format!(
            "CMA ran out: {} cma_alloc failure(s) with -12 (ENOMEM, no free range) in the kernel log; CmaFree now {} of {}",
            enomem.len(),
            mib(free),
            mib(total)
        );
        return f.with_hits(enomem).remedy(format!("the pool is too small for the workload: sudo npu-agent cma set {suggest} && sudo reboot"));
    }
    let fails = ctx
        .snap
        .vmstat
        .as_ref()
        .ok()
        .and_then(|v| v.get("cma_alloc_fail").copied())
        .unwrap_or(0);
    if fails > 0 {
        f = f.observed("cma_alloc_fail", fails).evidence(
            "/proc/vmstat",
            None,
            &format!("cma_alloc_fail {fails}"),
        );
    }
    if pct < min_pct {
        f.status = if fails > 0 {
            Status::Warn
        } else {
            Status::Info
        };
        f.summary = format!(
            "CmaFree is {} of {} ({pct}%){}; free CMA is lent to movable pages, so this alone is not proof of exhaustion",
            mib(free),
            mib(total),
            if fails > 0 { format!(", and {fails} CMA allocation(s) failed since boot") } else { String::new() }
        );
        f = f.remedy("if allocations fail: sudo npu-agent compact --drop-caches; if they keep failing, enlarge the pool");
    }
    f
}

/// The `cma=` of the kernel-argument boot files and the Pi `config.txt` overlay.
struct BootView {
    /// (path, kind, parsed) of the first kernel-argument file holding `cma=` (or the first one
    /// present when none holds it).
    cmdline_file: Option<(String, BootFileKind, BootCma)>,
    /// (path, parsed) of the Pi config.txt overlay pool.
    overlay: Option<(String, CmaParam, usize)>,
}

fn boot_view(ctx: &Ctx<'_>) -> BootView {
    let mut cmdline_file: Option<(String, BootFileKind, BootCma)> = None;
    let mut overlay = None;
    for b in &ctx.snap.boot_files {
        let Ok(text) = &b.text else { continue };
        let parsed = find_boot_cma(b.kind, text);
        if b.kind == BootFileKind::PiConfig {
            if overlay.is_none() {
                if let (Some(c), Some(line)) = (parsed.cma, parsed.line) {
                    overlay = Some((b.path.clone(), c, line));
                }
            }
            continue;
        }
        let replace = match &cmdline_file {
            None => true,
            Some((_, _, cur)) => cur.cma.is_none() && parsed.cma.is_some(),
        };
        if replace {
            cmdline_file = Some((b.path.clone(), b.kind, parsed));
        }
    }
    BootView {
        cmdline_file,
        overlay,
    }
}

fn show_cma(c: &Option<CmaParam>) -> String {
    c.as_ref()
        .map(|c| format!("cma={}", c.raw))
        .unwrap_or_else(|| "no cma=".into())
}

fn boot_param(ctx: &Ctx<'_>) -> Finding {
    let id = "cma.boot_param";
    let spec = &ctx.profile.cma;
    let view = boot_view(ctx);
    let booted = ctx
        .snap
        .cmdline
        .as_ref()
        .ok()
        .map(|l| find_cma(l).map(|c| c.0));
    let total = ctx
        .snap
        .meminfo
        .as_ref()
        .ok()
        .and_then(|m| m.cma_total_bytes);
    if view.cmdline_file.is_none() && view.overlay.is_none() && booted.is_none() {
        return Finding::skip(id, "no boot file and no /proc/cmdline in this tree");
    }
    let configured = view
        .cmdline_file
        .as_ref()
        .and_then(|(_, _, b)| b.cma.clone());
    let mut f = Finding::new(id, Status::Pass, "");
    if let Some((path, _, b)) = &view.cmdline_file {
        f = f
            .observed("boot_file", path.clone())
            .observed("boot_file_cma", show_cma(&b.cma));
        if let (Some(c), Some(line)) = (&b.cma, b.line) {
            f.push_evidence(path, Some(line), &format!("cma={}", c.raw));
        }
    }
    if let Some(b) = &booted {
        f = f.observed("proc_cmdline_cma", show_cma(b));
        if let Some(c) = b {
            f.push_evidence("/proc/cmdline", None, &format!("cma={}", c.raw));
        }
    }
    if let Some((path, c, line)) = &view.overlay {
        f = f.observed("config_txt_cma", c.raw.clone());
        f.push_evidence(path, Some(*line), &c.raw);
    }
    if let Some(t) = total {
        f = f.observed("cma_total_bytes", t);
    }
    let effective = booted.clone().flatten().or(configured.clone());
    let suggest = if spec.suggested_size.is_empty() {
        "256M".to_string()
    } else {
        spec.suggested_size.clone()
    };

    // 1. A command-line cma= where it is harmful (Pi 5: replaces the DT pool in the first GB).
    if spec.cmdline_cma == CmdlineCma::Harmful {
        if let Some(c) = effective.as_ref().filter(|c| c.size_bytes != Some(0)) {
            let mut detail = String::new();
            let bypass: Vec<_> = ctx
                .logs
                .host(|e| matches!(e, LogEvent::CmaCmdlineBypass | LogEvent::CmaReserved { .. }))
                .collect();
            if let Some((_, LogEvent::CmaReserved { base, bytes })) = bypass
                .iter()
                .find(|(_, e)| matches!(e, LogEvent::CmaReserved { .. }))
            {
                let limit = ctx
                    .snap
                    .dt_cma
                    .as_ref()
                    .and_then(|d| d.alloc_ranges.first().map(|(s, l)| s + l));
                detail = match limit {
                    Some(end) if base + bytes > end => format!(
                        "; the kernel placed it at {base:#x}, beyond the device tree's alloc-ranges end {end:#x} that the firmware can reach"
                    ),
                    _ => format!("; the kernel placed it at {base:#x}"),
                };
            }
            f.status = Status::Fail;
            f.summary = format!(
                "cma={} on the kernel command line bypasses the device-tree CMA pool{detail}: on a Pi 5 this breaks the firmware mailbox (vcgencmd, cpufreq)",
                c.raw
            );
            let path = view
                .cmdline_file
                .as_ref()
                .map(|(p, _, _)| p.clone())
                .unwrap_or_else(|| "/boot/firmware/cmdline.txt".into());
            let mb = c
                .size_bytes
                .map(|b| b >> 20)
                .filter(|m| [64, 96, 128, 192, 256, 320, 384, 512].contains(m))
                .unwrap_or(256);
            f = f
                .with_hits(bypass.iter().map(|(h, _)| *h))
                .remedy(format!(
                    "remove `cma={}` from {path}, add `dtoverlay=cma,cma-{mb}` under [all] in /boot/firmware/config.txt (sizes the pool through the device tree), then reboot",
                    c.raw
                ));
            return f;
        }
    }
    // 2. Deliberately disabled.
    if effective.as_ref().is_some_and(|c| c.size_bytes == Some(0)) {
        f.status = Status::Info;
        f.summary = format!(
            "CMA is deliberately disabled (cma=0){}: fine for blocks behind an IOMMU (the RK3588 NPU, VPUs); raise it only for a device that needs contiguous memory",
            total.map(|t| format!(", CmaTotal {}", mib(t))).unwrap_or_default()
        );
        return f;
    }
    // 3. A value the kernel cannot parse.
    if let Some(c) = effective.as_ref().filter(|c| c.size_bytes.is_none()) {
        f.status = Status::Warn;
        f.summary = format!(
            "cma={} is not a size the kernel understands; it is ignored",
            c.raw
        );
        return f.remedy(format!("sudo npu-agent cma set {suggest}"));
    }
    // 4. Boot file and running kernel disagree.
    if let (Some(b), Some(conf_file)) = (&booted, &view.cmdline_file) {
        if b.as_ref().map(|c| c.size_bytes) != conf_file.2.cma.as_ref().map(|c| c.size_bytes) {
            f.status = Status::Warn;
            f.summary = format!(
                "{} has {} but the running kernel booted with {}: the edit is not in effect yet (reboot), or the boot chain reads another file",
                conf_file.0,
                show_cma(&conf_file.2.cma),
                show_cma(b)
            );
            return f.remedy(
                "sudo reboot; if it persists, check which boot file the bootloader really reads",
            );
        }
    }
    if conf_dup(&view) {
        f.status = Status::Warn;
        f.summary = format!(
            "cma= is set more than once in {}; only the last one counts",
            view.cmdline_file
                .as_ref()
                .map(|c| c.0.clone())
                .unwrap_or_default()
        );
        return f.remedy(format!(
            "keep a single cma= (sudo npu-agent cma set {suggest} rewrites the one that wins)"
        ));
    }
    // 5. In effect? CmaTotal should equal the requested size.
    if let (Some(c), Some(t)) = (&effective, total) {
        if let Some(want) = c.size_bytes {
            let diff = want.abs_diff(t);
            if diff > want / 50 + (1 << 20) {
                f.status = Status::Warn;
                f.summary = format!(
                    "cma={} is on the command line but CmaTotal is {}: something overrides it (device tree, firmware, NUMA emulation) or the reservation failed",
                    c.raw,
                    mib(t)
                );
                return f.remedy(
                    "check `dmesg | grep -i cma` for the reservation line; try a smaller size",
                );
            }
        }
        f.summary = format!("cma={} is in effect (CmaTotal {})", c.raw, mib(t));
        return f;
    }
    if let Some((_, c, _)) = &view.overlay {
        f.summary = format!(
            "the pool is sized by the device tree ({}){}",
            c.raw,
            total
                .map(|t| format!(", CmaTotal {}", mib(t)))
                .unwrap_or_default()
        );
        return f;
    }
    f.summary = format!(
        "no cma= set: the device tree or kernel config sizes the pool{}",
        total
            .map(|t| format!(" (CmaTotal {})", mib(t)))
            .unwrap_or_default()
    );
    f
}

fn conf_dup(view: &BootView) -> bool {
    view.cmdline_file
        .as_ref()
        .is_some_and(|(_, _, b)| b.occurrences > 1)
}

fn reboot_pending(ctx: &Ctx<'_>) -> Finding {
    let id = "reboot.pending";
    let view = boot_view(ctx);
    let booted = match &ctx.snap.cmdline {
        Ok(l) => find_cma(l).map(|c| c.0),
        Err(e) if view.cmdline_file.is_none() && view.overlay.is_none() && e.is_not_found() => {
            return Finding::skip(id, "no boot file and no /proc/cmdline in this tree")
        }
        Err(e) => return Finding::skip(id, format!("cannot compare with the running kernel: {e}")),
    };
    let total = ctx
        .snap
        .meminfo
        .as_ref()
        .ok()
        .and_then(|m| m.cma_total_bytes);
    if let Some((path, _, b)) = &view.cmdline_file {
        let same = booted.as_ref().map(|c| c.size_bytes) == b.cma.as_ref().map(|c| c.size_bytes);
        let f = Finding::new(
            id,
            Status::Pass,
            format!("{path} and /proc/cmdline agree ({})", show_cma(&b.cma)),
        )
        .observed("boot_file_cma", show_cma(&b.cma))
        .observed("proc_cmdline_cma", show_cma(&booted))
        .expected("proc_cmdline_cma", show_cma(&b.cma));
        if !same {
            let mut f = f.evidence(path, b.line, &show_cma(&b.cma)).evidence(
                "/proc/cmdline",
                None,
                &show_cma(&booted),
            );
            f.status = Status::Warn;
            f.summary = format!(
                "{path} sets {} but the kernel booted with {}: a reboot is pending",
                show_cma(&b.cma),
                show_cma(&booted)
            );
            return f
                .remedy("sudo reboot (or `npu-agent fleet send reboot` from the operator side)");
        }
        if booted.is_some() {
            return f;
        }
    }
    if let (Some((path, c, line)), Some(t), None) = (&view.overlay, total, &booted) {
        if let Some(want) = c.size_bytes {
            if want.abs_diff(t) > want / 50 + (1 << 20) {
                let mut f = Finding::new(
                    id,
                    Status::Warn,
                    format!("{path} asks for a {} pool ({}) but CmaTotal is {}: a reboot is pending, or the overlay is not applied", mib(want), c.raw, mib(t)),
                )
                .observed("config_txt_cma_bytes", want)
                .observed("cma_total_bytes", t)
                .evidence(path, Some(*line), &c.raw);
                f = f.remedy("sudo reboot");
                return f;
            }
        }
        return Finding::new(
            id,
            Status::Pass,
            format!("{path} overlay pool matches CmaTotal {}", mib(t)),
        );
    }
    Finding::new(
        id,
        Status::Pass,
        "no boot-time cma= change waiting for a reboot",
    )
}
