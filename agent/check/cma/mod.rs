//! CMA checks: pool size, free space, the boot-time `cma=` and whether a reboot is pending.

mod boot;
use boot::*;

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
