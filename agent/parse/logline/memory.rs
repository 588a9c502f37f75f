//! Memory log shapes: CMA allocation and reservation, page allocation, OOM, mlock.

use super::*;

/// CMA allocation failures, page allocation failures and OOM kills.
pub(super) fn alloc_events(line: &str, out: &mut Vec<LogEvent>) {
    if let Some(c) = line
        .contains("cma_alloc")
        .then(|| re_cma_fail().captures(line))
        .flatten()
    {
        if let (Ok(pages), Ok(ret)) = (c[1].parse(), c[2].parse()) {
            out.push(LogEvent::CmaAllocFail { pages, ret });
        }
    }
    if let Some(c) = line
        .contains("page allocation failure")
        .then(|| re_page_alloc().captures(line))
        .flatten()
    {
        if let Ok(order) = c[1].parse() {
            out.push(LogEvent::PageAllocFailure { order });
        }
    }
    if line.contains("invoked oom-killer") || line.contains("Out of memory: Kill") {
        out.push(LogEvent::OomKill);
    }
}

/// CMA reservations (and cmdline bypass) at boot, and mlock failures.
pub(super) fn reservation_events(line: &str, out: &mut Vec<LogEvent>) {
    if line.contains("Reserved memory: bypass") && line.contains("cmdline CMA params") {
        out.push(LogEvent::CmaCmdlineBypass);
    }
    if let Some(c) = line
        .contains("cma: Reserved")
        .then(|| re_cma_reserved().captures(line))
        .flatten()
    {
        let mib: Option<u64> = c[1].parse().ok();
        let base = u64::from_str_radix(c[2].trim_start_matches("0x"), 16).ok();
        if let (Some(mib), Some(base)) = (mib, base) {
            out.push(LogEvent::CmaReserved {
                bytes: mib << 20,
                base,
            });
        }
    }
    if line.contains("failed to mlock")
        || line.contains("RLIMIT_MLOCK")
        || line.contains("RLIMIT_MEMLOCK")
    {
        out.push(LogEvent::MlockFail);
    }
}

/// CMA pool reservation failures, pool sizes and free pages, and CMA consumers.
pub(super) fn pool_events(line: &str, lower: &str, out: &mut Vec<LogEvent>) {
    if let Some(c) = line
        .contains("Failed to reserve")
        .then(|| re_cma_reserve_failed().captures(line))
        .flatten()
    {
        if let Ok(mib) = c[1].parse::<u64>() {
            out.push(LogEvent::CmaReserveFailed { bytes: mib << 20 });
        }
    }
    if let Some(c) = line
        .contains("linux,cma")
        .then(|| re_cma_node_failed().captures(line))
        .flatten()
    {
        let bytes = c.get(1).and_then(|m| m.as_str().parse::<u64>().ok());
        out.push(LogEvent::CmaNodeFailed {
            bytes: bytes.map(|mib| mib << 20),
        });
    }
    if let Some(c) = line
        .contains("cma-reserved")
        .then(|| re_boot_memory().captures(line))
        .flatten()
    {
        if let Ok(kb) = c[1].parse::<u64>() {
            out.push(LogEvent::BootCmaReserved { bytes: kb << 10 });
        }
    }
    if let Some(c) = line
        .contains("CMA memory pool")
        .then(|| re_cma_pool_created().captures(line))
        .flatten()
    {
        let base = u64::from_str_radix(c[1].trim_start_matches("0x"), 16).ok();
        if let (Some(base), Ok(mib)) = (base, c[2].parse::<u64>()) {
            out.push(LogEvent::CmaReserved {
                bytes: mib << 20,
                base,
            });
        }
    }
    if let Some(c) = line
        .contains("total pages")
        .then(|| re_cma_pages().captures(line))
        .flatten()
    {
        if let (Ok(free_pages), Ok(total_pages)) = (c[1].parse(), c[2].parse()) {
            out.push(LogEvent::CmaAvailablePages {
                free_pages,
                total_pages,
            });
        }
    }
    if let Some(c) = line
        .contains("host memory buffer")
        .then(|| re_hmb().captures(line))
        .flatten()
    {
        if let Ok(mib) = c[2].parse::<u64>() {
            out.push(LogEvent::CmaConsumer {
                device: c[1].to_string(),
                bytes: Some(mib << 20),
                failed: false,
            });
        }
    } else if contiguous_alloc_failure(lower) {
        if let Some(device) = device_of(line) {
            out.push(LogEvent::CmaConsumer {
                device,
                bytes: None,
                failed: true,
            });
        }
    }
}
