//! The boot-time `cma=` check: a ladder of rules over the boot files, the command line the
//! kernel booted with, `CmaTotal` and the kernel log; the first rule that fires decides.

use super::*;

const ID: &str = "cma.boot_param";

/// Everything the ladder reads, gathered once.
struct Inputs<'a> {
    view: BootView,
    /// `cma=` of the booted command line: None when there is no command line, Some(None) when
    /// it has no `cma=`.
    booted: Option<Option<CmaParam>>,
    /// Where the booted command line came from.
    booted_src: String,
    fig: CmaFigures,
    /// `CmaTotal` in bytes.
    total: Option<u64>,
    reserve_failed: Vec<&'a LogHit>,
    boot_reserved: Vec<&'a LogHit>,
    /// The `cma=` in force: the booted one, else the boot file's.
    effective: Option<CmaParam>,
    /// The profile says a command-line `cma=` is harmful (Pi 5).
    harmful: bool,
    /// The profile needs a pool (`min_total_bytes` above 0).
    needs_pool: bool,
    /// The size `cma set` should write.
    suggest: String,
    /// Where `cma=` appears more than once, and how many times.
    dup: Option<(String, usize)>,
}

pub(super) fn boot_param(ctx: &Ctx<'_>) -> Finding {
    unless_boot_unseen(
        ctx,
        ladder(ctx),
        "comparing the boot files' cma= with the booted one",
    )
}

fn ladder(ctx: &Ctx<'_>) -> Finding {
    let inp = gather(ctx);
    if let Some(f) = not_placed(ctx, &inp) {
        return f;
    }
    if inp.view.cmdline_file.is_none() && inp.view.overlay.is_none() && inp.booted.is_none() {
        return Finding::skip(
            ID,
            "no boot file, no /proc/cmdline and no `Kernel command line:` in the kernel log",
        );
    }
    let f = observe(&inp);
    if let Some(done) = harmful(ctx, &inp, &f) {
        return done;
    }
    let f = f.observed("sources", sources(&inp));
    disabled(&inp, &f)
        .or_else(|| not_a_size(&inp, &f))
        .or_else(|| not_reserved(&inp, &f))
        .or_else(|| disagree(&inp, &f))
        .or_else(|| duplicated(&inp, &f))
        .or_else(|| in_effect(&inp, &f))
        .unwrap_or_else(|| unset(&inp, f))
}

fn gather<'a>(ctx: &'a Ctx<'_>) -> Inputs<'a> {
    let spec = &ctx.profile.cma;
    let view = boot_view(ctx);
    let (booted_line, booted_src) = booted_cmdline(ctx);
    let booted_found = booted_line.as_deref().map(find_cma);
    let booted = booted_found.clone().map(|o| o.map(|c| c.0));
    let booted_count = booted_found.flatten().map(|c| c.1).unwrap_or(0);
    let fig = figures(ctx);
    let total = fig.total.as_ref().map(|(t, _)| *t);
    let kernel_hits = |pred: fn(&LogEvent) -> bool| -> Vec<&'a LogHit> {
        ctx.logs
            .find(Some(LogClass::Kernel), pred)
            .map(|(h, _)| h)
            .collect()
    };
    let reserve_failed = kernel_hits(|e| matches!(e, LogEvent::CmaReserveFailed { .. }));
    let boot_reserved = kernel_hits(|e| matches!(e, LogEvent::BootCmaReserved { .. }));
    let configured = view
        .cmdline_file
        .as_ref()
        .and_then(|(_, _, b)| b.cma.clone());
    let effective = booted.clone().flatten().or(configured);
    let dup_file = view
        .cmdline_file
        .as_ref()
        .filter(|(_, _, b)| b.occurrences > 1)
        .map(|(p, _, b)| (p.clone(), b.occurrences));
    let dup = dup_file.or_else(|| (booted_count > 1).then(|| (booted_src.clone(), booted_count)));
    Inputs {
        view,
        booted,
        booted_src,
        fig,
        total,
        reserve_failed,
        boot_reserved,
        effective,
        harmful: spec.cmdline_cma == CmdlineCma::Harmful,
        needs_pool: spec.min_total_bytes.unwrap_or(0) > 0,
        suggest: if spec.suggested_size.is_empty() {
            "256M".to_string()
        } else {
            spec.suggested_size.clone()
        },
        dup,
    }
}

/// A passing finding with every `cma=` and `CmaTotal` observed, as evidence too.
fn observe(inp: &Inputs<'_>) -> Finding {
    let mut f = Finding::new(ID, Status::Pass, "");
    if let Some((path, _, b)) = &inp.view.cmdline_file {
        f = f
            .observed("boot_file", path.clone())
            .observed("boot_file_cma", show_cma(&b.cma));
        if let (Some(c), Some(line)) = (&b.cma, b.line) {
            f.push_evidence(path, Some(line), &format!("cma={}", c.raw));
        }
    }
    if let Some(b) = &inp.booted {
        f = f.observed("proc_cmdline_cma", show_cma(b));
        if let Some(c) = b {
            f.push_evidence(&inp.booted_src, None, &format!("cma={}", c.raw));
        }
    }
    if let Some((path, c, line)) = &inp.view.overlay {
        f = f.observed("config_txt_cma", c.raw.clone());
        f.push_evidence(path, Some(*line), &c.raw);
    }
    if let Some(t) = inp.total {
        f = f.observed("cma_total_bytes", t);
    }
    f
}

/// Every file the verdict rests on, once each.
fn sources(inp: &Inputs<'_>) -> Vec<String> {
    let mut sources: Vec<String> = Vec::new();
    if let Some((p, _, _)) = &inp.view.cmdline_file {
        sources.push(p.clone());
    }
    if inp.booted.is_some() {
        sources.push(inp.booted_src.clone());
    }
    if let Some((_, src)) = &inp.fig.total {
        if !sources.contains(src) {
            sources.push(src.clone());
        }
    }
    for h in inp.reserve_failed.iter().chain(&inp.boot_reserved) {
        if !sources.contains(&h.file) {
            sources.push(h.file.clone());
        }
    }
    sources
}

/// "cma= appears 2 times in /proc/cmdline (only the last one counts); ", or nothing.
fn dup_note(inp: &Inputs<'_>) -> String {
    inp.dup
        .as_ref()
        .map(|(p, n)| format!("cma= appears {n} times in {p} (only the last one counts); "))
        .unwrap_or_default()
}

/// ", CmaTotal 256 MiB" (with `open` and `close` around it), or nothing when unknown.
fn total_note(inp: &Inputs<'_>, open: &str, close: &str) -> String {
    inp.total
        .map(|t| format!("{open}CmaTotal {}{close}", mib(t)))
        .unwrap_or_default()
}

/// 1. A command-line cma= where it is harmful (Pi 5: replaces the DT pool in the first GB).
fn harmful(ctx: &Ctx<'_>, inp: &Inputs<'_>, base: &Finding) -> Option<Finding> {
    if !inp.harmful {
        return None;
    }
    let c = inp.effective.as_ref().filter(|c| c.size_bytes != Some(0))?;
    let bypass: Vec<_> = ctx
        .logs
        .host(|e| matches!(e, LogEvent::CmaCmdlineBypass | LogEvent::CmaReserved { .. }))
        .collect();
    let detail = placement_detail(ctx, &bypass);
    let path = inp
        .view
        .cmdline_file
        .as_ref()
        .map(|(p, _, _)| p.clone())
        .unwrap_or_else(|| "/boot/firmware/cmdline.txt".into());
    let mut f = base.clone();
    // The edit is already made (`cma set` moved the size to config.txt): the running
    // kernel still has the old command line until the reboot.
    let removed = inp
        .view
        .cmdline_file
        .as_ref()
        .is_some_and(|(_, _, b)| b.cma.is_none());
    if removed && inp.booted.as_ref().is_some_and(|b| b.is_some()) {
        f.status = Status::Warn;
        f.summary = format!(
            "reboot pending: {path} no longer sets cma= ({}), but the running kernel booted with cma={} and still bypasses the device-tree CMA pool{detail}",
            inp.view.overlay
                .as_ref()
                .map(|(p, o, _)| format!("{p}: {}", o.raw))
                .unwrap_or_else(|| "the device tree sizes the pool".into()),
            c.raw
        );
        return Some(
            f.with_hits(bypass.iter().map(|(h, _)| *h))
                .remedy("sudo reboot (or `npu-agent fleet send reboot` from the operator side)"),
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
    Some(
        f.with_hits(bypass.iter().map(|(h, _)| *h))
            .remedy(format!(
                "remove `cma={}` from {path}, add `dtoverlay=cma,cma-{mb}` under [all] in /boot/firmware/config.txt (sizes the pool through the device tree), then reboot",
                c.raw
            )),
    )
}

/// "; the kernel placed it at 0x…" (and whether that is beyond what the firmware can reach),
/// from the kernel's `cma: Reserved` line; empty without one.
fn placement_detail(ctx: &Ctx<'_>, bypass: &[(&LogHit, &LogEvent)]) -> String {
    let Some((_, LogEvent::CmaReserved { base, bytes })) = bypass
        .iter()
        .find(|(_, e)| matches!(e, LogEvent::CmaReserved { .. }))
    else {
        return String::new();
    };
    let limit = ctx
        .snap
        .dt_cma
        .as_ref()
        .and_then(|d| d.alloc_ranges.first().map(|(s, l)| s + l));
    match limit {
        Some(end) if base + bytes > end => format!(
            "; the kernel placed it at {base:#x}, beyond the device tree's alloc-ranges end {end:#x} that the firmware can reach"
        ),
        _ => format!("; the kernel placed it at {base:#x}"),
    }
}

/// Rung 0: the pool the device tree asks for could not be placed at boot (`failed to allocate
/// memory for node 'linux,cma'`), so the kernel ran with a small fallback pool or none. Asking
/// for more cannot help, as the asked size did not fit; a smaller pool, or a boot chain that
/// leaves the range free, does (BR-33). Decided from the kernel log alone, boot file or not.
fn not_placed(ctx: &Ctx<'_>, inp: &Inputs<'_>) -> Option<Finding> {
    let hits: Vec<(&LogHit, &LogEvent)> = ctx
        .logs
        .find(Some(LogClass::Kernel), |e| {
            matches!(e, LogEvent::CmaNodeFailed { .. })
        })
        .collect();
    let (hit, asked) = match hits.last()? {
        (h, LogEvent::CmaNodeFailed { bytes }) => (*h, *bytes),
        _ => return None,
    };
    let fallback = ctx
        .logs
        .find(Some(LogClass::Kernel), |e| {
            matches!(e, LogEvent::CmaReserved { .. })
        })
        .filter(|(h, _)| h.file == hit.file && h.line > hit.line)
        .find_map(|(h, e)| match e {
            LogEvent::CmaReserved { bytes, .. } => Some((h, *bytes)),
            _ => None,
        });
    let asked_text = asked.map(|b| format!("{} ", mib(b))).unwrap_or_default();
    let got = match (fallback, inp.total) {
        (Some((_, b)), Some(t)) => format!(
            "the kernel fell back to a {} pool (CmaTotal {})",
            mib(b),
            mib(t)
        ),
        (Some((_, b)), None) => format!("the kernel fell back to a {} pool", mib(b)),
        (None, Some(t)) => format!("CmaTotal is {}", mib(t)),
        (None, None) => "no pool of that size exists".into(),
    };
    let mut f = observe(inp);
    f.status = Status::Fail;
    f.summary = format!(
        "the {asked_text}CMA pool the device tree asks for (node linux,cma) could not be placed at boot; {got}: contiguous allocations (display, camera, NPU buffers) fail with ENOMEM, and asking for a larger pool cannot help — the asked size did not fit"
    );
    if let Some(b) = asked {
        f = f.observed("cma_asked_bytes", b);
    }
    if let Some((_, b)) = fallback {
        f = f.observed("cma_fallback_bytes", b);
    }
    f = f.with_hits(std::iter::once(hit).chain(fallback.map(|(h, _)| h)));
    Some(f.remedy(smaller_pool_remedy(ctx, inp)))
}

/// How this board asks for a smaller pool that fits, and the OS update that frees the range.
fn smaller_pool_remedy(ctx: &Ctx<'_>, inp: &Inputs<'_>) -> String {
    let pi = ctx
        .snap
        .identity
        .compatible
        .as_ref()
        .is_ok_and(|c| c.iter().any(|e| e.starts_with("raspberrypi,")));
    let smaller = if pi {
        "ask for a smaller pool through the overlay that sizes it, e.g. dtoverlay=vc4-kms-v3d,cma-256 (or cma-128) in the boot partition's config.txt".to_string()
    } else if inp.view.cmdline_file.is_some() {
        "ask for a smaller pool that fits: sudo npu-agent cma set 256M".to_string()
    } else {
        "ask for a smaller pool that fits with cma=256M on the kernel command line (no boot file was found to edit)".to_string()
    };
    let update = match ctx.stack.os {
        super::super::stack::OsKind::HomeAssistantOs => format!(
            "or update {} to a release whose boot chain leaves that range free",
            ctx.stack.os_name
        ),
        _ => "or update the bootloader and kernel to a release that loads the device tree and initramfs out of that range".into(),
    };
    format!("{smaller}, then reboot and check CmaTotal; {update}; compaction cannot help")
}

/// 2. Deliberately disabled.
fn disabled(inp: &Inputs<'_>, base: &Finding) -> Option<Finding> {
    inp.effective
        .as_ref()
        .filter(|c| c.size_bytes == Some(0) && c.size_is_number)?;
    let mut f = base.clone();
    f.status = Status::Info;
    f.summary = format!(
        "CMA is deliberately disabled (cma=0){}: fine for blocks behind an IOMMU (the RK3588 NPU, VPUs); raise it only for a device that needs contiguous memory",
        total_note(inp, ", ", "")
    );
    Some(f)
}

/// 3. A value that is not a number: memparse reads it as 0, so there is no pool at all.
fn not_a_size(inp: &Inputs<'_>, base: &Finding) -> Option<Finding> {
    let c = inp
        .effective
        .as_ref()
        .filter(|c| !c.size_is_number || c.size_bytes.is_none())?;
    let mut f = base.clone();
    f.status = if inp.needs_pool {
        Status::Fail
    } else {
        Status::Warn
    };
    f.summary = format!(
        "{}cma={} is not a size: the kernel's memparse reads it as 0, so there is no CMA pool at all{}",
        dup_note(inp),
        c.raw,
        total_note(inp, " (", ")")
    );
    Some(f.remedy(format!(
        "sudo npu-agent cma set {} && sudo reboot",
        inp.suggest
    )))
}

/// 4. A pool was asked for but none (or not that one) was reserved.
fn not_reserved(inp: &Inputs<'_>, base: &Finding) -> Option<Finding> {
    let c = inp.effective.as_ref()?;
    let want = c.size_bytes.unwrap_or(0);
    let absent = inp.total == Some(0);
    // Reserved, or nothing asked for: not this rung.
    if want == 0 || (!absent && inp.reserve_failed.is_empty()) {
        return None;
    }
    let failed_line = inp.reserve_failed.last().map(|h| h.text.trim().to_string());
    let mut f = base.clone();
    f.status = if absent || inp.total.is_none() {
        Status::Fail
    } else {
        Status::Warn
    };
    f.summary = format!(
        "{}cma={} asks for a {} pool but the kernel could not reserve it{}{}",
        dup_note(inp),
        c.raw,
        mib(want),
        failed_line
            .map(|l| format!(" ({:?})", l.rsplit("] ").next().unwrap_or(&l)))
            .unwrap_or_default(),
        match inp.total {
            Some(0) => ": CmaTotal is 0, there is no CMA at all".to_string(),
            Some(t) => format!("; CmaTotal is {}", mib(t)),
            None => String::new(),
        }
    );
    Some(
        f.with_hits(inp.reserve_failed.iter().copied())
            .with_hits(inp.boot_reserved.iter().copied())
            .remedy(
                "keep a single cma= with a size this kernel can place (smaller, e.g. setting cma=64M by hand on the kernel command line in the file this board's bootloader reads (`npu-agent cma set` edits a boot file, and none of /boot/armbianEnv.txt, /boot/orangepiEnv.txt, /boot/extlinux/extlinux.conf, /etc/kernel/cmdline exists here); a 32-bit kernel needs the pool below the highmem boundary; on a Raspberry Pi size it with the overlay's cma-NNN parameter instead), then reboot and check CmaTotal",
            ),
    )
}

/// 5. Boot file and running kernel disagree.
fn disagree(inp: &Inputs<'_>, base: &Finding) -> Option<Finding> {
    let (Some(b), Some((path, _, file))) = (&inp.booted, &inp.view.cmdline_file) else {
        return None;
    };
    if b.as_ref().map(|c| c.size_bytes) == file.cma.as_ref().map(|c| c.size_bytes) {
        return None;
    }
    let mut f = base.clone();
    f.status = Status::Warn;
    f.summary = format!(
        "{path} has {} but the running kernel booted with {}: the edit is not in effect yet (reboot), or the boot chain reads another file",
        show_cma(&file.cma),
        show_cma(b)
    );
    Some(f.remedy("sudo reboot; if it persists, check which boot file the bootloader really reads"))
}

/// 5b. `cma=` given more than once: only the last one counts.
fn duplicated(inp: &Inputs<'_>, base: &Finding) -> Option<Finding> {
    let (path, n) = inp.dup.as_ref()?;
    let mut f = base.clone();
    f.status = Status::Warn;
    f.summary = format!("cma= is set {n} times in {path}; only the last one counts");
    Some(f.remedy(format!(
        "keep a single cma= (sudo npu-agent cma set {} rewrites the one that wins)",
        inp.suggest
    )))
}

/// 6. In effect? CmaTotal should equal the requested size.
fn in_effect(inp: &Inputs<'_>, base: &Finding) -> Option<Finding> {
    let (Some(c), Some(t)) = (&inp.effective, inp.total) else {
        return None;
    };
    let mut f = base.clone();
    if let Some(want) = c.size_bytes {
        // Within 2% and a MiB: the kernel rounds the pool to its alignment.
        if want.abs_diff(t) > want / 50 + (1 << 20) {
            f.status = Status::Warn;
            f.summary = format!(
                "cma={} is on the command line but CmaTotal is {}: something overrides it (device tree, firmware, NUMA emulation) or the reservation failed",
                c.raw,
                mib(t)
            );
            return Some(f.remedy(
                "check `dmesg | grep -i cma` for the reservation line; try a smaller size",
            ));
        }
    }
    f.summary = format!("cma={} is in effect (CmaTotal {})", c.raw, mib(t));
    Some(f)
}

/// 7. No `cma=` in force: the device tree (a Pi overlay) or the kernel config sizes the pool.
fn unset(inp: &Inputs<'_>, mut f: Finding) -> Finding {
    f.summary = match &inp.view.overlay {
        Some((_, c, _)) => format!(
            "the pool is sized by the device tree ({}){}",
            c.raw,
            total_note(inp, ", ", "")
        ),
        None => format!(
            "no cma= set: the device tree or kernel config sizes the pool{}",
            total_note(inp, " (", ")")
        ),
    };
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
                "keep a single cma= (setting cma=256M by hand on the kernel command line in the file this board's bootloader reads (`npu-agent cma set` edits a boot file, and none of /boot/armbianEnv.txt, /boot/orangepiEnv.txt, /boot/extlinux/extlinux.conf, /etc/kernel/cmdline exists here) rewrites the one that wins)",
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
                "keep a single cma= with a size this kernel can place (smaller, e.g. setting cma=64M by hand on the kernel command line in the file this board's bootloader reads (`npu-agent cma set` edits a boot file, and none of /boot/armbianEnv.txt, /boot/orangepiEnv.txt, /boot/extlinux/extlinux.conf, /etc/kernel/cmdline exists here); a 32-bit kernel needs the pool below the highmem boundary; on a Raspberry Pi size it with the overlay's cma-NNN parameter instead), then reboot and check CmaTotal",
            ),
            (
                "rpi5-hailo8",
                board("console=tty1 cma=lots", 64 * MIB),
                Status::Fail,
                "cma=lots is not a size: the kernel's memparse reads it as 0, so there is no CMA pool at all (CmaTotal 64 MiB)",
                "setting cma=256M by hand on the kernel command line in the file this board's bootloader reads (`npu-agent cma set` edits a boot file, and none of /boot/firmware/config.txt, /boot/firmware/cmdline.txt, /boot/config.txt, /boot/cmdline.txt exists here), then reboot",
            ),
            (
                "generic",
                board("console=ttyS2 cma=lots", 64 * MIB),
                Status::Warn,
                "cma=lots is not a size: the kernel's memparse reads it as 0, so there is no CMA pool at all (CmaTotal 64 MiB)",
                "setting cma=256M by hand on the kernel command line in the file this board's bootloader reads (`npu-agent cma set` edits a boot file, and none of /boot/armbianEnv.txt, /boot/orangepiEnv.txt, /boot/firmware/cmdline.txt, /boot/cmdline.txt, /boot/extlinux/extlinux.conf, /etc/kernel/cmdline exists here), then reboot",
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
        // With a boot file the agent can edit, the remedy is `cma set` itself.
        let with_file = board("console=tty1 cma=lots", 64 * MIB).boot_file(
            "/boot/firmware/cmdline.txt",
            crate::parse::bootfile::BootFileKind::PiCmdline,
            "console=tty1 cma=lots",
        );
        let f = one("rpi5-hailo8", &with_file.build(), "cma.boot_param");
        assert_eq!(f.remedy, "sudo npu-agent cma set 256M && sudo reboot");
    }

    /// A pool the device tree asks for and the kernel cannot place: decided from the kernel
    /// log, without a boot file, and never by asking for more.
    #[test]
    fn a_pool_that_could_not_be_placed_is_not_enlarged() {
        let b = Board::new()
            .meminfo(4096 * MIB, 2048 * MIB, Some((8 * MIB, 0)))
            .log(
                "/var/log/kern.log",
                LogClass::Kernel,
                &[
                    "[    0.000000] OF: reserved mem: failed to allocate memory for node 'linux,cma': size 512 MiB",
                    "[    0.000000] cma: Reserved 5 MiB at 0x000000003ac00000",
                ],
            );
        let f = one("generic", &b.build(), "cma.boot_param");
        assert_eq!(f.status, Status::Fail, "{}", f.summary);
        assert!(
            f.summary
                .contains("512 MiB CMA pool the device tree asks for")
                && f.summary
                    .contains("fell back to a 5 MiB pool (CmaTotal 8 MiB)"),
            "{}",
            f.summary
        );
        assert!(!f.remedy.contains("cma set"), "{}", f.remedy);
        assert!(f.remedy.contains("compaction cannot help"), "{}", f.remedy);
    }
}
