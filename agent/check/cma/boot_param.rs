//! The boot-time `cma=` check.

use super::*;

pub(super) fn boot_param(ctx: &Ctx<'_>) -> Finding {
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

#[cfg(test)]
mod tests {
    use crate::check::testkit::{one, Board, MIB};
    use crate::model::{LogClass, Status};

    fn board(cmdline: &str, cma_total: u64) -> Board {
        Board::new()
            .meminfo(8192 * MIB, 4096 * MIB, Some((cma_total, cma_total / 2)))
            .cmdline(cmdline)
    }

    /// The rungs of the ladder the board tests do not reach, pinned word for word.
    #[test]
    fn boot_param_ladder() {
        let failed = board("console=ttyS2 cma=256M", 64 * MIB).log(
            "/var/log/kern.log",
            LogClass::Kernel,
            &["[    0.000000] cma: Failed to reserve 256 MiB"],
        );
        let table = [
            (
                "rk3588-rknpu",
                board("console=ttyS2 cma=128M cma=256M", 256 * MIB),
                Status::Warn,
                "cma= is set 2 times in /proc/cmdline; only the last one counts",
                "keep a single cma= (sudo npu-agent cma set 256M rewrites the one that wins)",
            ),
            (
                "rk3588-rknpu",
                board("console=ttyS2 cma=256M", 64 * MIB),
                Status::Warn,
                "cma=256M is on the command line but CmaTotal is 64 MiB: something overrides it (device tree, firmware, NUMA emulation) or the reservation failed",
                "check `dmesg | grep -i cma` for the reservation line; try a smaller size",
            ),
            (
                "rk3588-rknpu",
                failed,
                Status::Warn,
                "cma=256M asks for a 256 MiB pool but the kernel could not reserve it (\"cma: Failed to reserve 256 MiB\"); CmaTotal is 64 MiB",
                "keep a single cma= with a size this kernel can place (smaller, e.g. sudo npu-agent cma set 64M; a 32-bit kernel needs the pool below the highmem boundary; on a Raspberry Pi size it with the overlay's cma-NNN parameter instead), then reboot and check CmaTotal",
            ),
            (
                "rpi5-hailo8",
                board("console=tty1 cma=lots", 64 * MIB),
                Status::Fail,
                "cma=lots is not a size: the kernel's memparse reads it as 0, so there is no CMA pool at all (CmaTotal 64 MiB)",
                "sudo npu-agent cma set 256M && sudo reboot",
            ),
            (
                "generic",
                board("console=ttyS2 cma=lots", 64 * MIB),
                Status::Warn,
                "cma=lots is not a size: the kernel's memparse reads it as 0, so there is no CMA pool at all (CmaTotal 64 MiB)",
                "sudo npu-agent cma set 256M && sudo reboot",
            ),
            (
                "rk3588-rknpu",
                board("console=ttyS2 cma=0", 0),
                Status::Info,
                "CMA is deliberately disabled (cma=0), CmaTotal 0 B: fine for blocks behind an IOMMU (the RK3588 NPU, VPUs); raise it only for a device that needs contiguous memory",
                "",
            ),
        ];
        for (profile, b, status, summary, remedy) in table {
            let f = one(profile, &b.build(), "cma.boot_param");
            assert_eq!((f.status, f.summary.as_str()), (status, summary));
            assert_eq!(f.remedy, remedy, "{summary}");
        }
    }
}
