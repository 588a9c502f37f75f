//! Kernel driver checks: binding and stale drivers.

use super::*;
use crate::model::remedy::{Remedy, Step};

pub(super) fn module_version(ctx: &Ctx<'_>, name: &str) -> Option<(String, Version)> {
    ctx.snap
        .modules
        .iter()
        .find(|m| m.name.eq_ignore_ascii_case(name))
        .and_then(|m| m.version.as_deref())
        .and_then(|v| Version::parse_loose(v).map(|p| (format!("/sys/module/{name}/version"), p)))
}

/// Module behind a PCI driver name (`hailo1x` -> `hailo1x_pci`).
pub(super) fn module_of_driver(driver: &str) -> String {
    format!("{}_pci", driver.to_ascii_lowercase())
}

pub(super) fn gen_remedy(ctx: &Ctx<'_>) -> String {
    let want = match ctx.profile.npu.generation {
        Some(g) => format!("HailoRT {g}.x"),
        None => "the HailoRT line of the chip".into(),
    };
    ctx.stack.runtime_update(&want, &apt_gen_remedy(ctx))
}

/// The package swap to the chip's HailoRT line, for a board where dpkg manages it; the
/// accelerator's own install words where no metapackage carries the line (an x86 host).
fn apt_gen_remedy(ctx: &Ctx<'_>) -> String {
    if !ctx.profile.npu.install.is_empty() {
        return format!("{}, then reboot", ctx.profile.npu.install);
    }
    match ctx.profile.npu.generation {
        Some(5) => "sudo apt purge 'hailo-all' 'hailort' 'hailort-pcie-driver' 'python3-hailort' 'hailo-dkms' 'hailofw' && sudo apt install dkms hailo-h10-all && sudo reboot".into(),
        Some(4) => "sudo apt purge 'hailo-h10-all' 'h10-hailort' 'h10-hailort-pcie-driver' 'python3-h10-hailort' && sudo apt install dkms hailo-all && sudo reboot".into(),
        _ => "install the HailoRT line that matches the chip, then reboot".into(),
    }
}

pub(super) fn driver_binding(ctx: &Ctx<'_>, dev: Option<&PciDevice>) -> Finding {
    let id = "hailo.driver_binding";
    let Some(d) = dev else {
        return Finding::skip(id, "no Hailo device on PCI (see hailo.pci_device)");
    };
    let npu = &ctx.profile.npu;
    let right = npu.drivers.join(" or ");
    let mut f = match &d.driver {
        Some(drv) if npu.drivers.iter().any(|x| x.eq_ignore_ascii_case(drv)) => Finding::new(
            id,
            Status::Pass,
            format!(
                "{} is bound to {drv}, the right driver for the {}",
                d.bdf, npu.chip
            ),
        ),
        Some(drv) => {
            let ver = module_version(ctx, &module_of_driver(drv))
                .map(|(_, v)| format!(" {v}"))
                .unwrap_or_default();
            let why = if npu
                .wrong_drivers
                .iter()
                .any(|x| x.eq_ignore_ascii_case(drv))
            {
                format!(
                    "the other generation's driver ({}{ver})",
                    module_of_driver(drv)
                )
            } else {
                "an unexpected driver".into()
            };
            let f = Finding::new(
                id,
                Status::Fail,
                format!(
                    "{} ({}) is bound to {drv}: {why}; the {} needs {right}",
                    d.bdf,
                    chip_name(d.device),
                    npu.chip
                ),
            );
            with_gen_remedy(ctx, f)
        }
        None => {
            let loaded: Vec<String> = ctx
                .snap
                .modules
                .iter()
                .filter(|m| m.name.to_ascii_lowercase().starts_with("hailo"))
                .map(|m| {
                    format!("{} {}", m.name, m.version.clone().unwrap_or_default())
                        .trim()
                        .to_string()
                })
                .collect();
            let detail = match (loaded.is_empty(), d.device) {
                (true, _) => "no Hailo module is loaded".to_string(),
                // Only 4.20-4.22's hailo_pci also claims the Hailo-10H's id.
                (false, 0x45c4) => format!(
                    "loaded: {} (HailoRT 4.23 hailo_pci claims only 1e60:2864)",
                    loaded.join(", ")
                ),
                (false, _) => format!("loaded: {}", loaded.join(", ")),
            };
            let fails = probe_failures(ctx, Some(d));
            let wrong = fails.last().and_then(|(_, h)| wrong_driver_of(ctx, h));
            match fails.last() {
                Some((_, h)) if wrong.is_some() => {
                    let w = wrong.unwrap_or_default();
                    wrong_driver_probed(ctx, d, &w, h, &detail)
                        .with_hits(fails.iter().map(|(_, h)| *h))
                }
                Some((cause, _)) => {
                    let (what, remedy) = probe_cause_advice(ctx, *cause, Some(d));
                    Finding::new(
                        id,
                        Status::Fail,
                        format!(
                            "no driver is bound to {} ({}): {what}; {detail}",
                            d.bdf,
                            chip_name(d.device)
                        ),
                    )
                    .observed("probe_failure", format!("{cause:?}"))
                    .with_hits(fails.iter().map(|(_, h)| *h))
                    .remedy(remedy)
                }
                None => with_gen_remedy(
                    ctx,
                    Finding::new(
                        id,
                        Status::Fail,
                        format!(
                            "no driver is bound to {} ({}); {detail}",
                            d.bdf,
                            chip_name(d.device)
                        ),
                    ),
                ),
            }
        }
    };
    f = f
        .observed("driver", d.driver.clone().unwrap_or_default())
        .expected("driver", right)
        .evidence(
            &pci_path(d, "driver"),
            None,
            d.driver.as_deref().unwrap_or("(no driver link)"),
        );
    if let Some(drv) = &d.driver {
        if let Some((path, v)) = module_version(ctx, &module_of_driver(drv)) {
            f = f
                .observed("driver_version", v.to_string())
                .evidence(&path, None, &v.to_string());
        }
    }
    log_verdicts(ctx, f)
}

/// No driver bound because the other generation's driver probed the chip and failed: its
/// module cannot drive this chip, whatever the kernel or the slot (BR-61: hailo1x_pci 5.x on a
/// Hailo-8L, `probe with driver hailo1x failed with error -22`).
fn wrong_driver_probed(
    ctx: &Ctx<'_>,
    d: &PciDevice,
    wrong: &str,
    hit: &super::super::LogHit,
    detail: &str,
) -> Finding {
    let npu = &ctx.profile.npu;
    let module = module_of_driver(wrong);
    let ver = module_version(ctx, &module)
        .map(|(_, v)| format!(" {v}"))
        .unwrap_or_default();
    let errno = hit
        .events
        .iter()
        .find_map(|e| match e {
            LogEvent::ProbeFailure { errno: Some(n), .. } => Some(format!(" ({n})")),
            _ => None,
        })
        .unwrap_or_default();
    let other_gen = if npu.generation == Some(4) { 5 } else { 4 };
    let remove = format!("sudo modprobe -r {module}, remove what installed it (its package or DKMS tree) and blacklist it: echo 'blacklist {module}' | sudo tee /etc/modprobe.d/blacklist-{module}.conf");
    let install = ctx.stack.runtime_update(
        &format!("HailoRT {}.x", npu.generation.unwrap_or(4)),
        &apt_gen_remedy(ctx),
    );
    Finding::new(
        id_binding(),
        Status::Fail,
        format!(
            "no driver is bound to {} ({}): {wrong} ({module}{ver}), the HailoRT {other_gen}.x driver of the other Hailo generation, tried to probe it and failed{errno}: it cannot drive the {}; {detail}",
            d.bdf,
            chip_name(d.device),
            npu.chip
        ),
    )
    .observed("probed_by", wrong.to_string())
    .remedy(format!(
        "{remove}; then {install}; no kernel parameter, slot or ASPM change is needed"
    ))
}

fn id_binding() -> &'static str {
    "hailo.driver_binding"
}

/// What the logs add to the binding's verdict: a right binding HailoRT still refuses (descriptor
/// page size), or, with no usable binding, the runtime's `HAILO_OUT_OF_PHYSICAL_DEVICES(74)` lines.
fn log_verdicts(ctx: &Ctx<'_>, f: Finding) -> Finding {
    if f.status == Status::Pass {
        return desc_page_size(ctx, f);
    }
    let hits: Vec<_> = ctx
        .logs
        .host(|e| matches!(e, LogEvent::HailoStatus { code: 74 }))
        .map(|(h, _)| h)
        .collect();
    f.with_hits(hits)
}

/// A bound driver HailoRT cannot use on this kernel: it offers DMA descriptor pages of the
/// kernel's page size (16 KiB on the Pi 5's default kernel) and a Hailo-8/8L takes 4 KiB at most
/// (`max_desc_page_size given 16384 is bigger than hw max desc page size 4096`). Without that
/// line, a 4.x chip on a kernel with pages over 4 KiB and no `force_desc_page_size` option is an
/// `info` hint.
fn desc_page_size(ctx: &Ctx<'_>, f: Finding) -> Finding {
    let hits: Vec<(&super::super::LogHit, (u32, u32))> = ctx.logs.host_pick(|e| match e {
        LogEvent::HailoDescPageSize {
            given_bytes,
            hw_max_bytes,
        } => Some((*given_bytes, *hw_max_bytes)),
        _ => None,
    });
    let set = ctx
        .snap
        .stack
        .module_options
        .iter()
        .find(|o| o.module == "hailo_pci" && o.options.contains("force_desc_page_size="));
    let page = &ctx.snap.page_size;
    let Some((_, (given, hw_max))) = hits.last().copied() else {
        let big_pages = page.bytes > 4096 && page.known();
        // With no modprobe.d in a captured tree, whether the option is set is unknown.
        let unset_known = set.is_none() && (ctx.snap.stack.modprobe_dirs_seen || ctx.snap.live);
        if !big_pages || ctx.profile.npu.generation != Some(4) {
            return f;
        }
        let mut f = f;
        if set.is_none() && !unset_known && ctx.snap.host_config_unseen() {
            // No /etc, /boot or dpkg at all (a container view): the hint cannot be ruled out.
            f.status = Status::Info;
            f.summary = format!("{}; the kernel uses {}-byte pages and /etc/modprobe.d cannot be read (no /etc, /boot or /var/lib/dpkg in this view: a container without the host's files?): whether hailo_pci's force_desc_page_size is set, which HailoRT needs on these pages, is unknown", f.summary, page.bytes);
            return f.observed("unseen", "/etc");
        }
        if !unset_known {
            return f;
        }
        f.status = Status::Info;
        f.summary = format!("{}; the kernel uses {}-byte pages and no /etc/modprobe.d file sets hailo_pci's force_desc_page_size, so HailoRT may refuse the chip (max_desc_page_size)", f.summary, page.bytes);
        return with_desc_page_remedy(ctx, f, 4096);
    };
    let mut f = f;
    f.status = Status::Fail;
    f.summary = format!(
        "{}, but HailoRT cannot use it: the driver offers DMA descriptor pages of {given} bytes ({}) and the chip takes at most {hw_max}",
        f.summary,
        if page.known() {
            format!("the kernel pages are {} bytes", page.bytes)
        } else {
            "the kernel's page size is not recorded in this tree".to_string()
        }
    );
    let f = f
        .observed("desc_page_size_bytes", given as u64)
        .expected("desc_page_size_bytes", hw_max as u64)
        .with_hits(hits.iter().map(|(h, _)| *h));
    match set {
        // The option is written but the running driver was loaded without it.
        Some(o) => {
            let mut f = f;
            f.summary.push_str(&format!(
                "; {} sets `{}` but the loaded driver does not use it",
                o.file, o.options
            ));
            f.remedy("reload the driver so it reads its options (sudo modprobe -r hailo_pci && sudo modprobe hailo_pci) or sudo reboot")
        }
        None => with_desc_page_remedy(ctx, f, hw_max),
    }
}

/// Sets the remedy that makes hailo_pci use descriptor pages of `bytes`: the module option in
/// `/etc/modprobe.d/hailo_pci.conf` and a reboot (or a reload of the driver). Where the driver
/// ships inside the OS image (Home Assistant OS, Buildroot) the OS decides its options: the same
/// text, no automatic fix.
fn with_desc_page_remedy(ctx: &Ctx<'_>, f: Finding, bytes: u32) -> Finding {
    let fix = Remedy::of(vec![
        Step::ModuleOption {
            module: "hailo_pci".into(),
            file: "hailo_pci.conf".into(),
            key: "force_desc_page_size".into(),
            value: bytes.to_string(),
        },
        Step::RebootNeeded,
    ])
    .with_note("the packages and the model are not the cause; make the driver use the chip's page size, then reboot (or reload it: sudo modprobe -r hailo_pci && sudo modprobe hailo_pci)");
    if ctx.stack.driver == crate::check::stack::DriverOrigin::OsImage
        || !ctx.stack.etc_takes_files()
    {
        return f.remedy(fix.text(true));
    }
    f.with_fix(fix)
}

pub(super) fn stale_driver(ctx: &Ctx<'_>, dev: Option<&PciDevice>) -> Finding {
    let id = "hailo.stale_driver";
    let npu = &ctx.profile.npu;
    let bound = dev.and_then(|d| d.driver.clone());
    if bound
        .as_ref()
        .is_some_and(|b| npu.wrong_drivers.iter().any(|x| x.eq_ignore_ascii_case(b)))
    {
        return Finding::new(
            id,
            Status::Pass,
            "the wrong-family driver is bound, not merely installed: see hailo.driver_binding",
        );
    }
    let mut stale = Vec::new();
    let mut f = Finding::new(id, Status::Pass, "");
    for m in &npu.wrong_modules {
        if let Some(mv) = ctx
            .snap
            .modules
            .iter()
            .find(|x| x.name.eq_ignore_ascii_case(m))
        {
            stale.push(format!(
                "{m} loaded{}",
                mv.version
                    .as_ref()
                    .map(|v| format!(" ({v})"))
                    .unwrap_or_default()
            ));
            f.push_evidence(
                &format!("/sys/module/{m}"),
                None,
                mv.version.as_deref().unwrap_or(""),
            );
        }
        for file in ctx.snap.module_files.iter().filter(|p| {
            p.rsplit('/')
                .next()
                .is_some_and(|n| n.starts_with(&format!("{m}.ko")))
        }) {
            stale.push(format!("{m} installed at {file}"));
            f.push_evidence(file, None, "");
        }
    }
    if stale.is_empty() {
        f.summary = format!(
            "no {} module is installed or loaded",
            npu.wrong_modules.join("/")
        );
        return f;
    }
    f.status = Status::Warn;
    f.summary = format!(
        "a wrong-family Hailo module is present but not bound: {}; it can take the device on a later boot or collide with {}",
        stale.join("; "),
        npu.modules.join("/")
    );
    f.observed("stale_modules", stale).remedy(format!(
        "echo 'blacklist {}' | sudo tee /etc/modprobe.d/blacklist-{}.conf (or purge the package that installed it)",
        npu.wrong_modules.first().cloned().unwrap_or_default(),
        npu.wrong_modules.first().cloned().unwrap_or_default()
    ))
}

#[cfg(test)]
mod tests {
    use crate::check::testkit::{one, Board};
    use crate::model::{LogClass, Status};

    const LINE: &str = "[HailoRT] [error] CHECK_AS_EXPECTED failed - max_desc_page_size given 16384 is bigger than hw max desc page size 4096";

    #[test]
    fn descriptor_pages_bigger_than_the_chip_takes() {
        let b = Board::new()
            .page_size(16384)
            .pci(0x1e60, 0x2864, Some("hailo"))
            .module("hailo_pci", Some("4.20.0"))
            .log("/var/log/hailort.log", LogClass::Workload, &[LINE]);
        let snap = b.build();
        let f = one("rpi5-hailo8", &snap, "hailo.driver_binding");
        assert_eq!(f.status, Status::Fail, "{}", f.summary);
        assert!(
            f.summary
                .contains("descriptor pages of 16384 bytes (the kernel pages are 16384 bytes)"),
            "{}",
            f.summary
        );
        assert!(
            f.remedy
                .contains("options hailo_pci force_desc_page_size=4096"),
            "{}",
            f.remedy
        );
        assert!(
            f.remedy.contains("/etc/modprobe.d/hailo_pci.conf"),
            "{}",
            f.remedy
        );
        assert!(
            f.evidence.iter().any(|e| e.text == LINE),
            "{:?}",
            f.evidence
        );
        // The workload's failure is this finding's: explained, not reported twice.
        let w = one("rpi5-hailo8", &snap, "npu.workload");
        assert_eq!(w.status, Status::Info, "{}", w.summary);
        assert!(w.summary.contains("hailo.driver_binding"), "{}", w.summary);
        // On Home Assistant OS the same advice loses sudo and reboots the host its own way.
        let haos = Board::new()
            .os("haos", "Home Assistant OS 16.0")
            .pci(0x1e60, 0x2864, Some("hailo"))
            .log("/var/log/hailort.log", LogClass::Workload, &[LINE])
            .build();
        let f = one("rpi5-hailo8", &haos, "hailo.driver_binding");
        assert_eq!(f.status, Status::Fail, "{}", f.summary);
        assert!(!f.remedy.contains("sudo"), "{}", f.remedy);
        // Without the line: a hint on 16 KiB pages with no option set, a pass with it.
        let quiet = Board::new()
            .page_size(16384)
            .pci(0x1e60, 0x2864, Some("hailo"));
        // A tree without modprobe.d cannot say the option is unset: no hint.
        let mut snap = quiet.build();
        let f = one("rpi5-hailo8", &snap, "hailo.driver_binding");
        assert_eq!(f.status, Status::Pass, "{}", f.summary);
        snap.stack.modprobe_dirs_seen = true;
        let f = one("rpi5-hailo8", &snap, "hailo.driver_binding");
        assert_eq!(f.status, Status::Info, "{}", f.summary);
        assert!(
            f.remedy.contains("force_desc_page_size=4096"),
            "{}",
            f.remedy
        );
        let set = Board::new()
            .page_size(16384)
            .pci(0x1e60, 0x2864, Some("hailo"))
            .module_option(
                "/etc/modprobe.d/hailo_pci.conf",
                "hailo_pci",
                "force_desc_page_size=4096",
            );
        let snap = set.build();
        assert_eq!(
            one("rpi5-hailo8", &snap, "hailo.driver_binding").status,
            Status::Pass
        );
        // The 10H's driver is another one: no hint there; nor on 4 KiB pages.
        let h10 = Board::new()
            .page_size(16384)
            .pci(0x1e60, 0x45c4, Some("hailo1x"))
            .build();
        assert_eq!(
            one("rpi5-hailo10h", &h10, "hailo.driver_binding").status,
            Status::Pass
        );
        let small = Board::new().pci(0x1e60, 0x2864, Some("hailo")).build();
        assert_eq!(
            one("rpi5-hailo8", &small, "hailo.driver_binding").status,
            Status::Pass
        );
        // Set but not in effect: the remedy is the reload, not the file again.
        let stale = Board::new()
            .page_size(16384)
            .pci(0x1e60, 0x2864, Some("hailo"))
            .module_option(
                "/etc/modprobe.d/hailo_pci.conf",
                "hailo_pci",
                "force_desc_page_size=4096",
            )
            .log("/var/log/hailort.log", LogClass::Workload, &[LINE])
            .build();
        let f = one("rpi5-hailo8", &stale, "hailo.driver_binding");
        assert_eq!(f.status, Status::Fail, "{}", f.summary);
        assert!(
            f.summary.contains("but the loaded driver does not use it"),
            "{}",
            f.summary
        );
        assert!(f.remedy.starts_with("reload the driver"), "{}", f.remedy);
    }

    #[test]
    fn no_etc_at_all_is_not_a_pass_on_big_pages() {
        let board = || {
            Board::new()
                .page_size(16384)
                .pci(0x1e60, 0x2864, Some("hailo"))
        };
        let blind = board()
            .unseen("/etc")
            .unseen("/boot")
            .unseen("/var/lib/dpkg");
        let f = one("rpi5-hailo8", &blind.build(), "hailo.driver_binding");
        assert_eq!(f.status, Status::Info, "{}", f.summary);
        assert!(
            f.summary.contains("/etc/modprobe.d cannot be read"),
            "{}",
            f.summary
        );
        assert!(f.summary.contains("no /etc, /boot"), "{}", f.summary);
        // A captured tree that left /etc (or only modprobe.d) out: no hint, as before.
        for b in [board(), board().unseen("/etc")] {
            let f = one("rpi5-hailo8", &b.build(), "hailo.driver_binding");
            assert_eq!(f.status, Status::Pass, "{}", f.summary);
        }
    }
}
