//! The CMA pool size check.

use super::*;

pub(super) fn pool_size(ctx: &Ctx<'_>) -> Finding {
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
