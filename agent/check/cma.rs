//! CMA checks: pool size, free space, the boot-time `cma=` and whether a reboot is pending.

use super::{mib, Ctx, Finding, LogHit, Status};
use crate::model::LogClass;
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

/// CMA figures from every source the board offers: `/proc/meminfo` first, then the kernel log
/// (the boot `Memory:` line, `cma: Reserved`/`created CMA memory pool`, and the `number of
/// available pages` line printed after a failure).
struct CmaFigures {
    /// `CmaTotal` in bytes and where it came from.
    total: Option<(u64, String)>,
    /// `CmaFree` in bytes and where it came from.
    free: Option<(u64, String)>,
    /// `MemFree` in bytes (meminfo only).
    mem_free: Option<u64>,
    /// Why meminfo gave no CMA figures, when it did not.
    meminfo_gap: Option<String>,
    /// A needed meminfo field is present but malformed (the check ends in `error`).
    malformed: Option<String>,
}

fn figures(ctx: &Ctx<'_>) -> CmaFigures {
    let mut f = CmaFigures {
        total: None,
        free: None,
        mem_free: None,
        meminfo_gap: None,
        malformed: None,
    };
    match &ctx.snap.meminfo {
        Ok(m) => {
            f.malformed = m
                .field_error("CmaTotal")
                .or_else(|| m.field_error("CmaFree"));
            f.total = m.cma_total_bytes.map(|t| (t, "/proc/meminfo".to_string()));
            f.free = m.cma_free_bytes.map(|t| (t, "/proc/meminfo".to_string()));
            f.mem_free = m.mem_free_bytes;
            if f.total.is_none() {
                f.meminfo_gap = Some(if m.is_complete() {
                    "/proc/meminfo has no CmaTotal line (no CONFIG_CMA)".into()
                } else {
                    "/proc/meminfo in this tree has no CmaTotal line".into()
                });
            }
        }
        Err(e) if e.is_not_found() => f.meminfo_gap = Some("no /proc/meminfo in this tree".into()),
        Err(e) => {
            f.meminfo_gap = Some(format!("cannot read /proc/meminfo: {e}"));
            if e.kind == crate::root::ReadErrorKind::Malformed {
                f.malformed = Some(e.to_string());
            }
        }
    }
    let kernel = |pred: fn(&LogEvent) -> bool| {
        ctx.logs
            .find(Some(LogClass::Kernel), pred)
            .last()
            .map(|(h, e)| (h.file.clone(), e.clone()))
    };
    if f.total.is_none() {
        if let Some((
            file,
            LogEvent::CmaAvailablePages {
                free_pages,
                total_pages,
            },
        )) = kernel(|e| matches!(e, LogEvent::CmaAvailablePages { .. }))
        {
            f.total = Some((
                total_pages.saturating_mul(ctx.snap.page_size.bytes),
                file.clone(),
            ));
            f.free = Some((free_pages.saturating_mul(ctx.snap.page_size.bytes), file));
        } else if let Some((file, LogEvent::BootCmaReserved { bytes })) =
            kernel(|e| matches!(e, LogEvent::BootCmaReserved { .. }))
        {
            f.total = Some((bytes, file));
        } else if let Some((file, LogEvent::CmaReserved { bytes, .. })) =
            kernel(|e| matches!(e, LogEvent::CmaReserved { .. }))
        {
            f.total = Some((bytes, file));
        }
    }
    f
}

/// Devices the kernel log shows holding or failing to get contiguous memory, named as the
/// kernel names them (`nvme nvme0 (host memory buffer 40 MiB)`, `vc4 (allocation failed)`).
fn consumers<'a>(ctx: &'a Ctx<'_>) -> (Vec<String>, Vec<&'a LogHit>) {
    let mut names: Vec<String> = Vec::new();
    let mut hits = Vec::new();
    for (h, e) in ctx.logs.find(Some(LogClass::Kernel), |e| {
        matches!(e, LogEvent::CmaConsumer { .. })
    }) {
        if let LogEvent::CmaConsumer {
            device,
            bytes,
            failed,
        } = e
        {
            let what = match (bytes, failed) {
                (Some(b), _) if h.text.contains("host memory buffer") => {
                    format!("{device} (NVMe host memory buffer {})", mib(*b))
                }
                (Some(b), _) => format!("{device} ({})", mib(*b)),
                (None, true) => format!("{device} (contiguous allocation failed)"),
                (None, false) => device.clone(),
            };
            if !names.contains(&what) {
                names.push(what);
                hits.push(h);
            }
        }
    }
    (names, hits)
}

fn pool_size(ctx: &Ctx<'_>) -> Finding {
    let id = "cma.pool_size";
    let spec = &ctx.profile.cma;
    let fig = figures(ctx);
    if let Some(e) = &fig.malformed {
        return Finding::new(id, Status::Error, format!("cannot read CmaTotal: {e}"));
    }
    let min = spec.min_total_bytes.unwrap_or(0);
    let Some((total, source)) = fig.total.clone() else {
        let complete = ctx.snap.meminfo.as_ref().is_ok_and(|m| m.is_complete());
        if !complete {
            return Finding::skip(
                id,
                format!(
                    "CmaTotal unknown: {} and no CMA reservation line in the kernel log",
                    fig.meminfo_gap.clone().unwrap_or_default()
                ),
            );
        }
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
        .observed("sources", vec![source.clone()])
        .expected("cma_total_bytes", min)
        .evidence(
            &source,
            None,
            &if source == "/proc/meminfo" {
                format!("CmaTotal: {} kB", total / 1024)
            } else {
                format!("CMA pool reserved at boot: {}", mib(total))
            },
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
    // Other devices (display, capture, NVMe, codecs) that ran out of contiguous memory: a
    // profile whose NPU does not need CMA must not hide them.
    let failures: Vec<&LogHit> = ctx
        .logs
        .find(Some(LogClass::Kernel), |e| {
            matches!(e, LogEvent::CmaAllocFail { ret: -12, .. })
        })
        .map(|(h, _)| h)
        .collect();
    if !failures.is_empty() && total < (256 << 20) {
        let (names, hits) = consumers(ctx);
        let mut f = f.with_hits(failures.iter().copied()).with_hits(hits);
        f.status = Status::Warn;
        f.summary = format!(
            "CmaTotal is {} and contiguous allocations already failed (cma_alloc -12){}; the NPU may not need the pool, but these devices do",
            mib(total),
            if names.is_empty() { String::new() } else { format!(": {}", names.join(", ")) }
        );
        return f
            .observed("cma_consumers", names)
            .remedy(format!("sudo npu-agent cma set {suggest} && sudo reboot"));
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
    let fig = figures(ctx);
    let suggest = if ctx.profile.cma.suggested_size.is_empty() {
        "256M"
    } else {
        &ctx.profile.cma.suggested_size
    };
    let (names, consumer_hits) = consumers(ctx);
    let enomem: Vec<&LogHit> = ctx
        .logs
        .find(Some(LogClass::Kernel), |e| {
            matches!(e, LogEvent::CmaAllocFail { ret: -12, .. })
        })
        .map(|(h, _)| h)
        .collect();
    let mut sources: Vec<String> = Vec::new();
    for (_, src) in fig.total.iter().chain(fig.free.iter()) {
        if !sources.contains(src) {
            sources.push(src.clone());
        }
    }
    // 1. The kernel log already shows the pool running out: that is enough, whatever else can
    //    be read.
    if !enomem.is_empty() {
        for h in &enomem {
            if !sources.contains(&h.file) {
                sources.push(h.file.clone());
            }
        }
        let largest = ctx
            .logs
            .find(Some(LogClass::Kernel), |e| {
                matches!(e, LogEvent::CmaAllocFail { ret: -12, .. })
            })
            .filter_map(|(_, e)| match e {
                LogEvent::CmaAllocFail { pages, .. } => Some(*pages),
                _ => None,
            })
            .max()
            .unwrap_or(0);
        let now = match (&fig.total, &fig.free) {
            (Some((t, _)), Some((fr, src))) => {
                format!("; CmaFree {} of {} ({src})", mib(*fr), mib(*t))
            }
            (Some((t, src)), None) => format!("; CmaTotal {} ({src}), CmaFree unknown", mib(*t)),
            _ => format!(
                "; CmaTotal/CmaFree could not be read ({})",
                fig.meminfo_gap
                    .clone()
                    .unwrap_or_else(|| "no figures".into())
            ),
        };
        let mut f = Finding::new(
            id,
            Status::Fail,
            format!(
                "CMA ran out: {} cma_alloc failure(s) with -12 (ENOMEM, no free range; largest request {} pages = {}) in the kernel log{}{now}",
                enomem.len(),
                largest,
                mib(largest.saturating_mul(ctx.snap.page_size.bytes)),
                if names.is_empty() { String::new() } else { format!("; CMA users in the log: {}", names.join(", ")) },
            ),
        )
        .observed("cma_alloc_enomem_failures", enomem.len() as u64)
        .observed("largest_failed_request_bytes", largest.saturating_mul(ctx.snap.page_size.bytes))
        .observed("cma_consumers", names.clone())
        .with_hits(enomem.iter().copied())
        .with_hits(consumer_hits.iter().copied());
        if let Some((t, _)) = &fig.total {
            f = f.observed("cma_total_bytes", *t);
        }
        if let Some((fr, _)) = &fig.free {
            f = f.observed("cma_free_bytes", *fr);
        }
        return f.observed("sources", sources).remedy(format!(
            "the pool is too small or held by other devices: give the device that failed its own reserved-memory pool (device tree), or enlarge the pool: sudo npu-agent cma set {suggest} && sudo reboot; compaction does not help with -12"
        ));
    }
    if let Some(e) = &fig.malformed {
        return Finding::new(id, Status::Error, format!("cannot read CmaFree: {e}"));
    }
    let (Some((total, _)), Some((free, free_src))) = (fig.total.clone(), fig.free.clone()) else {
        return Finding::skip(
            id,
            format!(
                "CmaFree unknown ({}) and no cma_alloc failure in the kernel log",
                fig.meminfo_gap
                    .clone()
                    .unwrap_or_else(|| "no CmaFree line".into())
            ),
        );
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
    .observed("sources", sources)
    .expected("cma_free_percent", format!(">= {min_pct}"))
    .evidence(&free_src, None, &format!("CmaFree: {} kB", free / 1024));
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
    if pct >= min_pct {
        return f;
    }
    // The kernel serves movable allocations from CMA only while free CMA is more than half of
    // the free memory. With MemFree at least twice the whole pool that can never have been the
    // case lately, so the used part of the pool is held by real CMA allocations.
    if let Some(mem_free) = fig.mem_free.filter(|m| *m >= total.saturating_mul(2)) {
        f.status = Status::Fail;
        if let Some(h) = consumer_hits.first() {
            if let Some(serde_json::Value::Array(a)) = f.observed.get_mut("sources") {
                a.push(h.file.clone().into());
            }
        }
        f.summary = format!(
            "CMA is held by real CMA users: CmaFree is {} of {} ({pct}%) while MemFree is {} — the kernel lends CMA to movable pages only when free CMA exceeds half of free memory, so this is not page cache; the next contiguous allocation will fail{}",
            mib(free),
            mib(total),
            mib(mem_free),
            if names.is_empty() {
                "; the kernel log read names no CMA user (display, video capture, NVMe host memory buffers and the NPU are the usual ones)".to_string()
            } else {
                format!("; CMA users in the kernel log: {}", names.join(", "))
            }
        );
        return f
            .observed("mem_free_bytes", mem_free)
            .observed("cma_consumers", names)
            .with_hits(consumer_hits)
            .remedy(format!("enlarge the pool so every device fits (sudo npu-agent cma set {suggest} && sudo reboot), or give the largest user its own reserved-memory pool; compaction cannot free memory that drivers hold"));
    }
    f.status = if fails > 0 {
        Status::Warn
    } else {
        Status::Info
    };
    f.summary = format!(
        "CmaFree is {} of {} ({pct}%){}; {}, so free CMA may be lent to movable pages and this alone is not proof of exhaustion",
        mib(free),
        mib(total),
        if fails > 0 { format!(", and {fails} CMA allocation(s) failed since boot") } else { String::new() },
        match fig.mem_free {
            Some(m) => format!("MemFree ({}) is under twice the pool", mib(m)),
            None => "MemFree is unknown".to_string(),
        }
    );
    f.remedy("if allocations fail: sudo npu-agent compact --drop-caches; if they keep failing, enlarge the pool")
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
    let (booted_line, booted_src) = booted_cmdline(ctx);
    let booted_found = booted_line.as_deref().map(find_cma);
    let booted = booted_found.clone().map(|o| o.map(|c| c.0));
    let booted_count = booted_found.flatten().map(|c| c.1).unwrap_or(0);
    let fig = figures(ctx);
    let total = fig.total.as_ref().map(|(t, _)| *t);
    let reserve_failed: Vec<&LogHit> = ctx
        .logs
        .find(Some(LogClass::Kernel), |e| {
            matches!(e, LogEvent::CmaReserveFailed { .. })
        })
        .map(|(h, _)| h)
        .collect();
    let boot_reserved: Vec<&LogHit> = ctx
        .logs
        .find(Some(LogClass::Kernel), |e| {
            matches!(e, LogEvent::BootCmaReserved { .. })
        })
        .map(|(h, _)| h)
        .collect();
    if view.cmdline_file.is_none() && view.overlay.is_none() && booted.is_none() {
        return Finding::skip(
            id,
            "no boot file, no /proc/cmdline and no `Kernel command line:` in the kernel log",
        );
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
            f.push_evidence(&booted_src, None, &format!("cma={}", c.raw));
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
            let path = view
                .cmdline_file
                .as_ref()
                .map(|(p, _, _)| p.clone())
                .unwrap_or_else(|| "/boot/firmware/cmdline.txt".into());
            // The edit is already made (`cma set` moved the size to config.txt): the running
            // kernel still has the old command line until the reboot.
            let removed = view
                .cmdline_file
                .as_ref()
                .is_some_and(|(_, _, b)| b.cma.is_none());
            if removed && booted.as_ref().is_some_and(|b| b.is_some()) {
                f.status = Status::Warn;
                f.summary = format!(
                    "reboot pending: {path} no longer sets cma= ({}), but the running kernel booted with cma={} and still bypasses the device-tree CMA pool{detail}",
                    view.overlay
                        .as_ref()
                        .map(|(p, o, _)| format!("{p}: {}", o.raw))
                        .unwrap_or_else(|| "the device tree sizes the pool".into()),
                    c.raw
                );
                return f.with_hits(bypass.iter().map(|(h, _)| *h)).remedy(
                    "sudo reboot (or `npu-agent fleet send reboot` from the operator side)",
                );
            }
            f.status = Status::Fail;
            f.summary = format!(
                "cma={} on the kernel command line bypasses the device-tree CMA pool{detail}: on a Pi 5 this breaks the firmware mailbox (vcgencmd, cpufreq)",
                c.raw
            );
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
    let mut sources: Vec<String> = Vec::new();
    if let Some((p, _, _)) = &view.cmdline_file {
        sources.push(p.clone());
    }
    if booted.is_some() {
        sources.push(booted_src.clone());
    }
    if let Some((_, src)) = &fig.total {
        if !sources.contains(src) {
            sources.push(src.clone());
        }
    }
    for h in reserve_failed.iter().chain(&boot_reserved) {
        if !sources.contains(&h.file) {
            sources.push(h.file.clone());
        }
    }
    f = f.observed("sources", sources);
    let dup_file = view
        .cmdline_file
        .as_ref()
        .filter(|(_, _, b)| b.occurrences > 1)
        .map(|(p, _, b)| (p.clone(), b.occurrences));
    let dup = dup_file.or_else(|| (booted_count > 1).then(|| (booted_src.clone(), booted_count)));
    let dup_note = |d: &Option<(String, usize)>| {
        d.as_ref()
            .map(|(p, n)| format!("cma= appears {n} times in {p} (only the last one counts); "))
            .unwrap_or_default()
    };
    // 2. Deliberately disabled.
    if effective
        .as_ref()
        .is_some_and(|c| c.size_bytes == Some(0) && c.size_is_number)
    {
        f.status = Status::Info;
        f.summary = format!(
            "CMA is deliberately disabled (cma=0){}: fine for blocks behind an IOMMU (the RK3588 NPU, VPUs); raise it only for a device that needs contiguous memory",
            total.map(|t| format!(", CmaTotal {}", mib(t))).unwrap_or_default()
        );
        return f;
    }
    // 3. A value that is not a number: memparse reads it as 0, so there is no pool at all.
    if let Some(c) = effective
        .as_ref()
        .filter(|c| !c.size_is_number || c.size_bytes.is_none())
    {
        let needs_pool = spec.min_total_bytes.unwrap_or(0) > 0;
        f.status = if needs_pool {
            Status::Fail
        } else {
            Status::Warn
        };
        f.summary = format!(
            "{}cma={} is not a size: the kernel's memparse reads it as 0, so there is no CMA pool at all{}",
            dup_note(&dup),
            c.raw,
            total.map(|t| format!(" (CmaTotal {})", mib(t))).unwrap_or_default()
        );
        return f.remedy(format!("sudo npu-agent cma set {suggest} && sudo reboot"));
    }
    // 4. A pool was asked for but none (or not that one) was reserved.
    if let Some(c) = &effective {
        let want = c.size_bytes.unwrap_or(0);
        let failed_line = reserve_failed.last().map(|h| h.text.trim().to_string());
        let absent = total == Some(0);
        if want > 0 && (absent || !reserve_failed.is_empty()) {
            f.status = if absent || total.is_none() {
                Status::Fail
            } else {
                Status::Warn
            };
            f.summary = format!(
                "{}cma={} asks for a {} pool but the kernel could not reserve it{}{}",
                dup_note(&dup),
                c.raw,
                mib(want),
                failed_line
                    .map(|l| format!(" ({:?})", l.rsplit("] ").next().unwrap_or(&l)))
                    .unwrap_or_default(),
                match total {
                    Some(0) => ": CmaTotal is 0, there is no CMA at all".to_string(),
                    Some(t) => format!("; CmaTotal is {}", mib(t)),
                    None => String::new(),
                }
            );
            return f
                .with_hits(reserve_failed.iter().copied())
                .with_hits(boot_reserved.iter().copied())
                .remedy(
                    "keep a single cma= with a size this kernel can place (smaller, e.g. sudo npu-agent cma set 64M; a 32-bit kernel needs the pool below the highmem boundary; on a Raspberry Pi size it with the overlay's cma-NNN parameter instead), then reboot and check CmaTotal",
                );
        }
    }
    // 5. Boot file and running kernel disagree.
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
    if let Some((path, n)) = &dup {
        f.status = Status::Warn;
        f.summary = format!("cma= is set {n} times in {path}; only the last one counts");
        return f.remedy(format!(
            "keep a single cma= (sudo npu-agent cma set {suggest} rewrites the one that wins)"
        ));
    }
    // 6. In effect? CmaTotal should equal the requested size.
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

/// The command line the kernel booted with: `/proc/cmdline`, else the `Kernel command line:`
/// line of the kernel log. Returns the line and where it came from.
fn booted_cmdline(ctx: &Ctx<'_>) -> (Option<String>, String) {
    if let Ok(l) = &ctx.snap.cmdline {
        return (Some(l.clone()), "/proc/cmdline".into());
    }
    for log in ctx.snap.logs.iter().filter(|l| l.class == LogClass::Kernel) {
        if let Some(rest) = log
            .lines
            .iter()
            .rev()
            .find_map(|l| l.split_once("Kernel command line: ").map(|(_, r)| r))
        {
            return (Some(rest.trim().to_string()), log.path.clone());
        }
    }
    (None, "/proc/cmdline".into())
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
