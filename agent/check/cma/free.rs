//! The CMA free-space check.

use super::*;

pub(super) fn free(ctx: &Ctx<'_>) -> Finding {
    let id = "cma.free";
    let fig = figures(ctx);
    let profile_size = match ctx.profile.cma.suggested_size.as_str() {
        "" => "256M",
        s => s,
    };
    let mem_total = ctx
        .snap
        .meminfo
        .as_ref()
        .ok()
        .and_then(|m| m.mem_total_bytes);
    let suggest = &enlarged(profile_size, fig.total.as_ref().map(|t| t.0), mem_total);
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
        return ran_out(ctx, &fig, suggest, &names, &consumer_hits, &enomem, sources);
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
        return held_by_users(
            f,
            (free, total, pct),
            mem_free,
            suggest,
            names,
            consumer_hits,
        );
    }
    lendable(f, &fig, (free, total, pct), fails)
}

/// `fail`: the kernel log shows `cma_alloc` failing with -12 (ENOMEM); enough on its own,
/// whatever else can be read.
fn ran_out(
    ctx: &Ctx<'_>,
    fig: &CmaFigures,
    suggest: &str,
    names: &[String],
    consumer_hits: &[&LogHit],
    enomem: &[&LogHit],
    mut sources: Vec<String>,
) -> Finding {
    let id = "cma.free";
    for h in enomem {
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
    .observed("cma_consumers", names.to_vec())
    .with_hits(enomem.iter().copied())
    .with_hits(consumer_hits.iter().copied());
    if let Some((t, _)) = &fig.total {
        f = f.observed("cma_total_bytes", *t);
    }
    if let Some((fr, _)) = &fig.free {
        f = f.observed("cma_free_bytes", *fr);
    }
    f.observed("sources", sources).remedy(format!(
        "the pool is too small or held by other devices: give the device that failed its own reserved-memory pool (device tree), or enlarge the pool: sudo npu-agent cma set {suggest} && sudo reboot; compaction does not help with -12"
    ))
}

/// The size to enlarge the pool to: the profile's suggestion when it is larger than the pool in
/// effect (`total_bytes`), else twice the pool, as `cma set` takes it (`512M`), while that stays
/// within a quarter of RAM (`cma set`'s bound); at the bound, the profile's size (the remedy's
/// other half, a pool of the device's own, then matters).
pub(super) fn enlarged(
    profile_size: &str,
    total_bytes: Option<u64>,
    mem_total_bytes: Option<u64>,
) -> String {
    let (Some(total), Some(wanted)) = (
        total_bytes,
        crate::parse::size::parse_size_bytes(profile_size),
    ) else {
        return profile_size.to_string();
    };
    if wanted > total {
        return profile_size.to_string();
    }
    let doubled_mib = (total * 2).div_ceil(1 << 20);
    match mem_total_bytes {
        Some(ram) if doubled_mib << 20 > ram / 4 => profile_size.to_string(),
        _ => format!("{doubled_mib}M"),
    }
}

/// `fail`: the pool is mostly used while MemFree is at least twice the pool, so real CMA
/// allocations (not lent page cache) hold it. `figs` = (CmaFree, CmaTotal, percent free).
fn held_by_users(
    mut f: Finding,
    figs: (u64, u64, u64),
    mem_free: u64,
    suggest: &str,
    names: Vec<String>,
    consumer_hits: Vec<&LogHit>,
) -> Finding {
    let (free, total, pct) = figs;
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
    f
        .observed("mem_free_bytes", mem_free)
        .observed("cma_consumers", names)
        .with_hits(consumer_hits)
        .remedy(format!("enlarge the pool so every device fits (sudo npu-agent cma set {suggest} && sudo reboot), or give the largest user its own reserved-memory pool; compaction cannot free memory that drivers hold"))
}

/// `warn` (CMA allocations failed since boot) or `info`: the pool is low but free CMA may be
/// lent to movable pages. `figs` = (CmaFree, CmaTotal, percent free).
fn lendable(mut f: Finding, fig: &CmaFigures, figs: (u64, u64, u64), fails: u64) -> Finding {
    let (free, total, pct) = figs;
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
