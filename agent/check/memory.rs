//! Memory checks: fragmentation (buddyinfo), whether compaction would help, and real
//! out-of-memory.

use super::{mib, Ctx, Finding, LogHit, Status};
use crate::model::action::ActionKind;
use crate::model::LogClass;
use crate::parse::logline::LogEvent;

pub(super) fn all(ctx: &Ctx<'_>) -> Vec<Finding> {
    let oom = oom_evidence(ctx);
    vec![
        fragmentation(ctx),
        compaction(ctx, !oom.is_empty()),
        oom_check(ctx, oom),
    ]
}

/// Free bytes, free bytes in blocks of order >= `order`, and the largest free block, over all
/// zones. `page_bytes` is the running kernel's page size (`/proc/buddyinfo` counts blocks of
/// `page_bytes << order`: order 9 is 2 MiB on 4 KiB pages, 8 MiB on the Pi 5's 16 KiB pages).
pub fn buddy_summary(
    zones: &[crate::parse::buddyinfo::BuddyZone],
    order: usize,
    page_bytes: u64,
) -> (u64, u64, u64) {
    let free: u64 = zones
        .iter()
        .map(|z| z.free_pages())
        .fold(0, u64::saturating_add);
    let high: u64 = zones
        .iter()
        .map(|z| z.free_pages_at_or_above(order))
        .fold(0, u64::saturating_add);
    let largest = zones
        .iter()
        .filter_map(|z| z.largest_order())
        .max()
        .map(|o| 1u64 << o)
        .unwrap_or(0);
    (
        free.saturating_mul(page_bytes),
        high.saturating_mul(page_bytes),
        largest.saturating_mul(page_bytes),
    )
}

fn fragmentation(ctx: &Ctx<'_>) -> Finding {
    let id = "memory.fragmentation";
    let spec = &ctx.profile.memory;
    let zones = match &ctx.snap.buddyinfo {
        Ok(z) => z,
        Err(e) if e.is_not_found() => return Finding::skip(id, "no /proc/buddyinfo in this tree"),
        Err(e) => return Finding::new(id, Status::Error, format!("cannot read buddyinfo: {e}")),
    };
    let order = spec.fragmentation_order;
    let page = ctx.snap.page_size.bytes;
    let (free, high, largest) = buddy_summary(zones, order, page);
    let block = page << order;
    let mut f = Finding::new(
        id,
        Status::Pass,
        format!(
            "{} free, {} of it in blocks of {} or more; largest free block {}",
            mib(free),
            mib(high),
            mib(block),
            mib(largest)
        ),
    )
    .observed("free_bytes", free)
    .observed("free_high_order_bytes", high)
    .observed("largest_free_block_bytes", largest)
    .observed("page_size_bytes", page)
    .observed("page_size_source", ctx.snap.page_size.source.clone())
    .expected(
        "free_high_order_bytes",
        format!(">= {}", spec.min_free_high_order_bytes),
    )
    .evidence(
        "/proc/buddyinfo",
        None,
        &zones
            .iter()
            .map(|z| format!("Node {}, zone {} {:?}", z.node, z.zone, z.free_blocks))
            .collect::<Vec<_>>()
            .join(" | "),
    );
    // Fragmented = plenty free overall, little of it in large blocks.
    if high < spec.min_free_high_order_bytes
        && free >= spec.min_free_high_order_bytes.saturating_mul(4)
    {
        f.status = Status::Warn;
        f.summary = format!(
            "memory is fragmented: {} free but only {} in blocks of {} or more (largest {})",
            mib(free),
            mib(high),
            mib(block),
            mib(largest)
        );
        f = f.remedy("sudo npu-agent compact (sync, then compact_memory=1); it runs by itself when the profile allows");
    }
    if !ctx.snap.page_size.known() {
        // Block sizes are pages times 2^order: with the page size unknown, the figures are
        // an assumption, never a verdict.
        f.summary.push_str(&format!(
            " — if the pages are 4 KiB; the page size of this tree is unknown ({})",
            ctx.snap.page_size.source
        ));
        if f.status.severity() > Status::Info.severity() {
            f.status = Status::Info;
        }
    }
    f
}

fn oom_evidence<'a>(ctx: &'a Ctx<'_>) -> Vec<&'a LogHit> {
    ctx.logs
        .find(Some(LogClass::Kernel), |e| {
            matches!(
                e,
                LogEvent::PageAllocFailure { order: 0 } | LogEvent::OomKill
            )
        })
        .map(|(h, _)| h)
        .collect()
}

fn compaction(ctx: &Ctx<'_>, real_oom: bool) -> Finding {
    let id = "memory.compaction";
    let mem = ctx.snap.meminfo.as_ref().ok();
    let cma_free = mem.and_then(|m| m.cma_free_bytes).unwrap_or(0);
    // -16 (EBUSY) while CMA still has room for the request: pages could not be migrated.
    let ebusy: Vec<&LogHit> = ctx
        .logs
        .find(Some(LogClass::Kernel), |e| matches!(e, LogEvent::CmaAllocFail { ret: -16, .. }))
        .filter(|(_, e)| matches!(e, LogEvent::CmaAllocFail { pages, .. } if pages.saturating_mul(ctx.snap.page_size.bytes) <= cma_free))
        .map(|(h, _)| h)
        .collect();
    let high_order: Vec<&LogHit> = ctx
        .logs
        .find(
            Some(LogClass::Kernel),
            |e| matches!(e, LogEvent::PageAllocFailure { order } if *order > 0),
        )
        .map(|(h, _)| h)
        .collect();
    let vm = ctx.snap.vmstat.as_ref().ok();
    let counter = |k: &str| vm.and_then(|v| v.get(k).copied()).unwrap_or(0);
    let (stall, fail, success) = (
        counter("compact_stall"),
        counter("compact_fail"),
        counter("compact_success"),
    );
    let mut f = Finding::new(id, Status::Pass, "");
    if vm.is_some() {
        f = f
            .observed("compact_stall", stall)
            .observed("compact_fail", fail)
            .observed("compact_success", success)
            .observed("cma_alloc_fail", counter("cma_alloc_fail"));
    }
    if real_oom {
        f.summary = "compaction would not help: the kernel log shows order-0 allocation failures or OOM kills, i.e. memory is exhausted (see memory.oom)".into();
        return f;
    }
    let remedy = "sudo npu-agent compact --drop-caches (sync, drop_caches=1, compact_memory=1); reboot if the failures continue";
    if !ebusy.is_empty() {
        f.status = Status::Fail;
        f.summary = format!(
            "{} CMA allocation(s) failed with -16 (EBUSY) while CmaFree ({}) could hold them: pages in the pool could not be migrated — compaction is the first step",
            ebusy.len(),
            mib(cma_free)
        );
        return f
            .with_hits(ebusy)
            .observed("action", ActionKind::Compact.as_str())
            .remedy(remedy);
    }
    if !high_order.is_empty() {
        f.status = Status::Warn;
        f.summary = format!("{} higher-order page allocation failure(s) in the kernel log: free memory is fragmented", high_order.len());
        return f
            .with_hits(high_order)
            .observed("action", ActionKind::Compact.as_str())
            .remedy(remedy);
    }
    let frag = ctx.snap.buddyinfo.as_ref().ok().map(|z| {
        let (free, high, _) = buddy_summary(
            z,
            ctx.profile.memory.fragmentation_order,
            ctx.snap.page_size.bytes,
        );
        high < ctx.profile.memory.min_free_high_order_bytes
            && free
                >= ctx
                    .profile
                    .memory
                    .min_free_high_order_bytes
                    .saturating_mul(4)
    });
    if fail > success && fail >= 10 && frag == Some(true) {
        f.status = Status::Warn;
        f.summary = format!("direct compaction keeps failing (compact_fail {fail} > compact_success {success}) and free memory is fragmented");
        return f
            .evidence(
                "/proc/vmstat",
                None,
                &format!("compact_fail {fail} compact_success {success}"),
            )
            .observed("action", ActionKind::Compact.as_str())
            .remedy(remedy);
    }
    if vm.is_none() && ctx.logs.hits.is_empty() {
        return match &ctx.snap.vmstat {
            Err(e) if !e.is_not_found() => Finding::new(
                id,
                Status::Error,
                format!("cannot read the compaction counters: {e}"),
            ),
            _ => Finding::skip(id, "no /proc/vmstat and no kernel log to judge from"),
        };
    }
    f.summary = "no contiguous-allocation failures that compaction could fix".into();
    f
}

fn oom_check(ctx: &Ctx<'_>, oom: Vec<&LogHit>) -> Finding {
    let id = "memory.oom";
    let mem = ctx.snap.meminfo.as_ref().ok();
    let mut f = Finding::new(id, Status::Pass, "");
    let avail_pct = mem
        .and_then(|m| Some((m.mem_available_bytes?, m.mem_total_bytes?)))
        .map(|(a, t)| {
            f.observed.insert("mem_available_bytes".into(), a.into());
            f.observed.insert("mem_total_bytes".into(), t.into());
            a.saturating_mul(100).checked_div(t).unwrap_or(100)
        });
    let remedy = "the workload does not fit: use a smaller or more quantised model, stop the desktop (Xorg, lightdm) on inference boxes, or use a board with more RAM; compaction will not help";
    if !oom.is_empty() {
        f.status = Status::Fail;
        f.summary = format!(
            "real out-of-memory: {} order-0 allocation failure(s) / OOM kill(s) in the kernel log{}",
            oom.len(),
            avail_pct.map(|p| format!("; MemAvailable is {p}% of RAM")).unwrap_or_default()
        );
        return f.with_hits(oom).remedy(remedy);
    }
    let enomem: Vec<&LogHit> = ctx
        .logs
        .host(|e| matches!(e, LogEvent::Errno { errno: 12 }))
        .map(|(h, _)| h)
        .collect();
    if let Some(p) = avail_pct {
        if p < 5 {
            f.status = Status::Warn;
            f.summary = format!("MemAvailable is {p}% of RAM: the next large allocation will fail");
            return f.with_hits(enomem).remedy(remedy);
        }
    }
    if !enomem.is_empty() {
        f.status = Status::Info;
        f.summary = format!(
            "{} errno 12 (ENOMEM) line(s) in the workload log{}: not memory exhaustion — with an IOMMU this points at the driver or its 4 GiB IOMMU domains (see rknpu.driver_version)",
            enomem.len(),
            avail_pct.map(|p| format!(" while {p}% of RAM is available")).unwrap_or_default()
        );
        return f.with_hits(enomem);
    }
    if mem.is_none() {
        return match &ctx.snap.meminfo {
            Err(e) if !e.is_not_found() => {
                Finding::new(id, Status::Error, format!("cannot read MemAvailable: {e}"))
            }
            _ => Finding::skip(id, "no /proc/meminfo and no OOM lines in the logs read"),
        };
    }
    f.summary = format!(
        "no OOM in the logs read{}",
        avail_pct
            .map(|p| format!("; MemAvailable {p}% of RAM"))
            .unwrap_or_default()
    );
    f
}

#[cfg(test)]
mod tests {
    use crate::check::testkit::{one, Board, MIB};
    use crate::model::Status;

    #[test]
    fn memory_verdicts() {
        let gib = 1024 * MIB;
        let read = Board::new().meminfo(8 * gib, 4 * gib, None).build();
        let empty = Board::new().build();
        let table = [
            (
                &read,
                "memory.oom",
                Status::Pass,
                "no OOM in the logs read; MemAvailable 50% of RAM",
            ),
            (
                &empty,
                "memory.oom",
                Status::Skip,
                "no /proc/meminfo and no OOM lines",
            ),
            (
                &empty,
                "memory.fragmentation",
                Status::Skip,
                "no /proc/buddyinfo in this tree",
            ),
            (
                &empty,
                "memory.compaction",
                Status::Skip,
                "no /proc/vmstat and no kernel log",
            ),
        ];
        for (snap, id, status, summary) in table {
            let f = one("rpi5-hailo8", snap, id);
            assert_eq!(f.status, status, "{id}: {}", f.summary);
            assert!(f.summary.contains(summary), "{id}: {}", f.summary);
        }
    }
}
