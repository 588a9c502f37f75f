//! Whether a reboot is pending to apply a boot-file `cma=`.

use super::*;

pub(super) fn reboot_pending(ctx: &Ctx<'_>) -> Finding {
    unless_boot_unseen(
        ctx,
        pending(ctx),
        "whether a boot-file cma= waits for a reboot",
    )
}

fn pending(ctx: &Ctx<'_>) -> Finding {
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
