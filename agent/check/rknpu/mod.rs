//! Rockchip NPU checks: the rknpu driver, its device node, and the RKNN/RKLLM userland on top.
//! The vendor driver registers as `RKNPU` (upper case), so every
//! kernel-provided name is compared without regard to case.

use super::driver_probe::{cause_remedy, cause_text};
use super::{Ctx, Finding, LogHit, Status};
use crate::model::{DrmNode, LogClass};
use crate::parse::logline::{LogEvent, ProbeCause};
use crate::parse::version::Version;
use crate::profile::NpuKind;

mod runtime;

use runtime::*;

/// The rknpu checks, in report order.
pub const IDS: &[&str] = &[
    "rknpu.driver_version",
    "rknpu.device_node",
    "rknpu.runtime_library",
];

pub(super) fn all(ctx: &Ctx<'_>) -> Vec<Finding> {
    if ctx.profile.npu.kind != NpuKind::Rknpu {
        return IDS
            .iter()
            .map(|id| {
                Finding::skip(
                    id,
                    format!(
                        "no Rockchip NPU: profile {} names none and the host shows no rknpu or rocket device, driver or Rockchip NPU SoC",
                        ctx.profile.id
                    ),
                )
            })
            .collect();
    }
    vec![driver_version(ctx), device_node(ctx), runtime_library(ctx)]
}

/// True when `name` is the rknpu driver as the kernel spells it (`RKNPU`, `rknpu`).
fn is_rknpu(name: &str) -> bool {
    name.eq_ignore_ascii_case("rknpu")
}

/// Evidence that the NPU is in use or wanted: a workload process, or a workload log with
/// RKNN/RKLLM lines. Returns a short description.
fn npu_workload(ctx: &Ctx<'_>) -> Option<String> {
    if let Ok(p) = &ctx.snap.processes {
        if let Some(p) = p.first() {
            return Some(format!("process {} (pid {})", p.comm, p.pid));
        }
    }
    ctx.snap
        .logs
        .iter()
        .find(|l| {
            l.class == LogClass::Workload
                && l.lines.iter().any(|x| {
                    let t = x.to_ascii_lowercase();
                    t.contains("rknn") || t.contains("rkllm")
                })
        })
        .map(|l| format!("workload log {}", l.path))
}

/// Evidence the vendor driver is loaded even when its version cannot be read.
fn driver_present(ctx: &Ctx<'_>) -> Option<(String, String)> {
    if let Ok(d) = &ctx.snap.drm {
        if let Some(n) = d.iter().find(|n| n.driver.as_deref().is_some_and(is_rknpu)) {
            return Some((
                format!("/sys/class/drm/{}/device/driver", n.name),
                n.driver.clone().unwrap_or_default(),
            ));
        }
    }
    if let Some(m) = ctx.snap.modules.iter().find(|m| is_rknpu(&m.name)) {
        return Some((format!("/sys/module/{}", m.name), "module loaded".into()));
    }
    if let Some(d) = ctx
        .snap
        .stack
        .platform_npus
        .iter()
        .find(|d| d.driver.as_deref().is_some_and(is_rknpu))
    {
        return Some((d.source.clone(), format!("{} is bound to rknpu", d.name)));
    }
    ctx.logs
        .host(|e| matches!(e, LogEvent::RknpuBound))
        .next()
        .map(|(h, _)| (h.file.clone(), h.text.clone()))
}

/// The kernel log covers this boot from its start (it holds the first lines the kernel
/// prints), so a driver line missing from it is evidence of absence.
fn kernel_log_from_boot(ctx: &Ctx<'_>) -> bool {
    ctx.snap.logs.iter().any(|l| {
        l.class == LogClass::Kernel
            && !l.cut
            && l.lines.iter().take(50).any(|x| {
                x.contains("Booting Linux")
                    || x.contains("Linux version ")
                    || x.contains("] Machine model:")
            })
    })
}

/// No driver came up because the NPU itself is not described or not powered: its device-tree
/// node is disabled, or its supply regulator failed (the kernel's lines about it).
fn npu_node_fault(ctx: &Ctx<'_>) -> Option<Finding> {
    let id = "rknpu.driver_version";
    for log in ctx.snap.logs.iter().filter(|l| l.class == LogClass::Kernel) {
        for (i, t) in log.lines.iter().enumerate() {
            let l = t.to_ascii_lowercase();
            let npu = l.contains("rknpu") || l.contains(".npu");
            let bad = ["fail", "not found", "-517", "dummy regulator", "error"]
                .iter()
                .any(|w| l.contains(w));
            if npu && l.contains("regulator") && bad {
                return Some(
                    Finding::new(id, Status::Warn, format!("the NPU's supply regulator did not come up, so no driver can run it: {}", t.trim()))
                        .evidence(&log.path, (!log.cut).then_some(i + 1), t)
                        .remedy("boot the device tree made for this board (its NPU supply, `rknpu-supply`/`vdd_npu`, comes from the board's own DTB or image); a kernel or DTB for another board leaves the NPU unpowered"),
                );
            }
        }
    }
    let nodes = &ctx.snap.stack.npu_dt_nodes;
    if !nodes.is_empty() && nodes.iter().all(|(_, s)| s == "disabled") {
        let (name, _) = &nodes[0];
        return Some(
            Finding::new(id, Status::Warn, format!("the NPU's device-tree node {name} is disabled (status = \"disabled\"): no driver binds to it"))
                .evidence(&format!("/proc/device-tree/{name}/status"), None, "disabled")
                .remedy("enable the NPU in the device tree: the board's NPU overlay (Armbian: add it to overlays= in /boot/armbianEnv.txt) or status = \"okay\" in its DTS, then reboot"),
        );
    }
    None
}

/// Where the version came from, its text and the parsed version.
struct Found {
    file: String,
    line: Option<usize>,
    text: String,
    version: Version,
}

fn find_version(ctx: &Ctx<'_>) -> Option<Found> {
    for (path, content) in &ctx.snap.rknpu_version_files {
        if let Ok(text) = content {
            if let Some(version) = Version::parse_loose(text) {
                return Some(Found {
                    file: path.clone(),
                    line: None,
                    text: text.trim().to_string(),
                    version,
                });
            }
        }
    }
    let from_log = |pred: fn(&LogEvent) -> Option<Version>| {
        ctx.logs
            .host(move |e| pred(e).is_some())
            .last()
            .and_then(|(h, e)| {
                pred(e).map(|v| Found {
                    file: h.file.clone(),
                    line: h.line_no(),
                    text: h.text.clone(),
                    version: v,
                })
            })
    };
    from_log(|e| match e {
        LogEvent::RknpuDrmInit { version } => Some(*version),
        _ => None,
    })
    .or_else(|| {
        from_log(|e| match e {
            LogEvent::RknpuReported { driver } => Some(*driver),
            _ => None,
        })
    })
}

fn rocket_present(ctx: &Ctx<'_>) -> Vec<(String, String)> {
    let mut why = Vec::new();
    if ctx
        .snap
        .modules
        .iter()
        .any(|m| m.name.eq_ignore_ascii_case("rocket"))
    {
        why.push((
            "/sys/module/rocket".to_string(),
            "module rocket loaded".to_string(),
        ));
    }
    for d in ctx.snap.stack.platform_npus.iter().filter(|d| {
        d.driver
            .as_deref()
            .is_some_and(|x| x.eq_ignore_ascii_case("rocket"))
    }) {
        why.push((d.source.clone(), format!("{} is bound to rocket", d.name)));
    }
    if let Some((h, _)) = ctx.logs.host(|e| matches!(e, LogEvent::RocketInit)).next() {
        why.push((h.file.clone(), h.text.clone()));
    }
    for n in ctx
        .snap
        .device_nodes
        .iter()
        .filter(|n| n.starts_with("/dev/accel/"))
    {
        why.push((n.clone(), "accel device node".to_string()));
    }
    why
}

fn driver_version(ctx: &Ctx<'_>) -> Finding {
    let id = "rknpu.driver_version";
    let min = ctx
        .profile
        .npu
        .min_driver_version
        .as_deref()
        .and_then(Version::parse_loose)
        .unwrap_or(Version::new(0, 9, 8));
    let kernel = ctx
        .snap
        .identity
        .kernel_release
        .as_ref()
        .ok()
        .cloned()
        .unwrap_or_default();
    let Some(found) = find_version(ctx) else {
        return version_unknown(ctx, min, &kernel);
    };
    let builtin = !ctx
        .snap
        .modules
        .iter()
        .any(|m| is_rknpu(&m.name) && m.version.is_some());
    let v = found.version;
    let f = Finding::new(id, Status::Pass, format!("rknpu {v} (>= {min})"))
        .observed("driver_version", v.to_string())
        .observed("kernel_release", kernel.clone())
        .observed("builtin", builtin)
        .expected("driver_version", format!(">= {min}"))
        .evidence(&found.file, found.line, &found.text);
    if v >= min {
        return f;
    }
    below_min(ctx, f, v, min, &kernel, builtin)
}

/// The verdict when no source holds the rknpu version: a malformed version file (`error`), the
/// mainline `rocket` driver (`warn`), a driver present without a readable version (`info`), or
/// whether its absence matters (`skip`/`info`/`warn`).
fn version_unknown(ctx: &Ctx<'_>, min: Version, kernel: &str) -> Finding {
    let id = "rknpu.driver_version";
    let malformed = ctx
        .snap
        .rknpu_version_files
        .iter()
        .find(|(_, r)| r.as_ref().is_ok_and(|t| Version::parse_loose(t).is_none()));
    if let Some((path, Ok(text))) = malformed {
        return Finding::new(
            id,
            Status::Error,
            format!(
                "{path} does not hold a version: {:?}",
                text.trim().chars().take(60).collect::<String>()
            ),
        )
        .evidence(path, None, text.trim());
    }
    let rocket = rocket_present(ctx);
    if !rocket.is_empty() {
        let mut f = Finding::new(
            id,
            Status::Warn,
            format!("the NPU is driven by the mainline `rocket` accel driver (kernel {kernel}); the vendor rknpu driver that RKNN/RKLLM need is absent"),
        )
        .observed("driver", "rocket")
        .expected("driver", format!("rknpu >= {min}"))
        .remedy("for RKLLM/RKNN boot a vendor (BSP) kernel that carries rknpu >= 0.9.8, e.g. Armbian's vendor 6.1 kernel; or use a rocket-based stack (Mesa Teflon) for the models it supports");
        for (file, text) in rocket {
            f.push_evidence(&file, None, &text);
        }
        return f;
    }
    let kernel_part = if kernel.is_empty() {
        "kernel release unknown".to_string()
    } else {
        format!("kernel {kernel}")
    };
    let denied = ctx
        .snap
        .rknpu_version_files
        .iter()
        .find(|(_, r)| r.as_ref().is_err_and(|e| !e.is_not_found()));
    // Before "the driver is present": a driver that speaks but cannot power the NPU is no driver.
    if let Some(f) = npu_node_fault(ctx) {
        return f;
    }
    if let Some((file, why)) = driver_present(ctx) {
        let how = match denied {
            Some((path, Err(e))) => format!("{path} is not readable ({e}): run the agent as root"),
            _ => "debugfs is not mounted here (no /sys/kernel/debug/rknpu/version) and the driver is built in (no /sys/module/rknpu/version)".to_string(),
        };
        return Finding::new(
            id,
            Status::Info,
            format!("the rknpu driver is present ({file}: {why}) but its version cannot be read: {how}"),
        )
        .evidence(&file, None, &why)
        .expected("driver_version", format!(">= {min}"))
        .remedy("to see the version: sudo mount -t debugfs none /sys/kernel/debug && sudo cat /sys/kernel/debug/rknpu/version");
    }
    if let Some((path, Err(e))) = denied {
        return Finding::skip(
            id,
            format!("cannot read the rknpu version ({path}: {e}) and no other source names the driver; run the agent as root with debugfs mounted"),
        );
    }
    let drm_listed = ctx.snap.drm.as_ref().is_ok_and(|d| !d.is_empty());
    // A live kernel's sysfs is complete (a loaded or built-in rknpu shows in /sys/module or
    // as a DRM node); in a captured tree only a DRM listing or a boot log shows absence.
    let evidence_of_absence = ctx.snap.live || drm_listed || kernel_log_from_boot(ctx);
    let workload = npu_workload(ctx);
    match (evidence_of_absence, workload) {
        (false, _) => Finding::skip(
            id,
            format!("no source names the rknpu driver in this tree (no debugfs rknpu/version, /proc/rknpu, /sys/module/rknpu, DRM node listing or boot kernel log; {kernel_part}): its absence is not shown either"),
        ),
        (true, None) => Finding::new(
            id,
            Status::Info,
            format!("no rknpu driver in this kernel ({kernel_part}) and nothing here uses the NPU: fine unless you want RKNN/RKLLM"),
        )
        .expected("driver_version", format!(">= {min}"))
        .remedy(format!("only to run RKNN/RKLLM: boot a vendor kernel that carries rknpu >= {min}")),
        (true, Some(w)) => Finding::new(
            id,
            Status::Warn,
            format!("no rknpu driver in this kernel ({kernel_part}), but {w} wants the NPU"),
        )
        .expected("driver_version", format!(">= {min}"))
        .remedy(format!("boot a vendor kernel that carries rknpu >= {min} (e.g. Armbian's vendor 6.1 kernel)")),
    }
}

/// The verdict for rknpu `v` below `min`: `info` when the rkllm-runtime in use works with it,
/// else `warn`, raised to `fail` by workload log lines the old driver broke.
fn below_min(
    ctx: &Ctx<'_>,
    mut f: Finding,
    v: Version,
    min: Version,
    kernel: &str,
    builtin: bool,
) -> Finding {
    // The runtime in use may be one that this driver serves (RKLLM 1.0.x ships with 0.9.6):
    // then the profile minimum is about a future upgrade, not a fault.
    // Workload evidence that the old driver already broke something.
    let driver_faults: Vec<&LogHit> = ctx
        .logs
        .host(|e| {
            matches!(
                e,
                LogEvent::RknpuTooLow { .. }
                    | LogEvent::RknnBadModelMagic
                    | LogEvent::Errno { errno: 14 }
            )
        })
        .map(|(h, _)| h)
        .collect();
    let hard_fail = !driver_faults.is_empty();
    if let Some(rt) = runtime_versions(ctx).rkllm {
        if let Some(need) = rkllm_needs_driver(rt.0) {
            if v >= need && !hard_fail {
                f.status = Status::Info;
                f.summary = format!(
                    "rknpu {v} is below the {min} that RKLLM >= 1.1 needs, but the runtime in use (rkllm-runtime {}) works with it (needs >= {need})",
                    rt.0
                );
                return f.observed("runtime", format!("rkllm-runtime {}", rt.0)).remedy(format!(
                    "nothing for the current runtime; only to move to RKLLM >= 1.1: a kernel carrying rknpu >= {min}"
                ));
            }
        }
    }
    f.status = Status::Warn;
    let below_066 = if v < Version::new(0, 9, 6) {
        " (below 0.9.6, which even RKLLM 1.0 needs)"
    } else {
        ""
    };
    let kernel_part = if kernel.is_empty() {
        "the kernel".to_string()
    } else {
        format!("kernel {kernel}")
    };
    f.summary = format!(
        "rknpu {v} is below {min}, which current RKLLM needs{below_066}; the driver is part of {kernel_part}{}",
        if builtin { " (no /sys/module/rknpu/version: built into the image, no module to swap)" } else { "" }
    );
    f = f.remedy(format!(
        "upgrade the board's kernel to one carrying rknpu >= {min} (vendor BSP 5.10.209 / 6.1.84 or newer, e.g. Armbian vendor 6.1); modprobe/DKMS cannot replace a driver built into the kernel"
    ));
    // The workload's evidence raises it to fail.
    let hits = driver_faults;
    if !hits.is_empty() {
        f.status = Status::Fail;
        f.summary.push_str(&format!(
            "; the workload already failed on it ({} log line(s))",
            hits.len()
        ));
        f = f.with_hits(hits);
    }
    f
}

fn device_node(ctx: &Ctx<'_>) -> Finding {
    let id = "rknpu.device_node";
    let stray = ctx.snap.device_nodes.iter().any(|n| n == "/dev/rknpu");
    let drm = match &ctx.snap.drm {
        Ok(d) => d,
        Err(e) => return Finding::skip(id, format!("cannot list DRM nodes: {e}")),
    };
    let nodes: Vec<(&str, &str)> = drm
        .iter()
        .filter_map(|n| {
            n.driver
                .as_deref()
                .filter(|d| is_rknpu(d))
                .map(|d| (n.name.as_str(), d))
        })
        .collect();
    let listed: Vec<String> = drm
        .iter()
        .map(|n| format!("{}={}", n.name, n.driver.clone().unwrap_or_default()))
        .collect();
    if nodes.is_empty() {
        return no_rknpu_drm_node(ctx, drm, listed, stray);
    }
    let names: Vec<&str> = nodes.iter().map(|(n, _)| *n).collect();
    let mut f = Finding::new(
        id,
        Status::Pass,
        format!("rknpu DRM node(s): {}", names.join(", ")),
    )
    .observed(
        "rknpu_nodes",
        names
            .iter()
            .map(|s| format!("/dev/dri/{s}"))
            .collect::<Vec<_>>(),
    );
    for (n, d) in &nodes {
        f.push_evidence(&format!("/sys/class/drm/{n}/device/driver"), None, d);
    }
    if stray {
        f = stray_misc_node(ctx, f, &names);
    }
    f
}

/// The verdict when no DRM node is rknpu's: rocket, a DMA_HEAP misc device, or no driver.
fn no_rknpu_drm_node(ctx: &Ctx<'_>, drm: &[DrmNode], listed: Vec<String>, stray: bool) -> Finding {
    let id = "rknpu.device_node";
    let rocket = !rocket_present(ctx).is_empty();
    if rocket {
        return Finding::new(
            id,
            Status::Warn,
            "no DRM node is driven by rknpu; the NPU belongs to the mainline rocket driver (/dev/accel)",
        )
        .observed("drm_nodes", listed)
        .remedy("for RKNN/RKLLM boot a vendor kernel with the rknpu driver (CONFIG_ROCKCHIP_RKNPU)");
    }
    // A DMA_HEAP build (CONFIG_ROCKCHIP_RKNPU_DMA_HEAP) serves the misc device /dev/rknpu and
    // no DRM node; DRM_GEM builds the reverse. The flip between kernel builds is no fault.
    if stray {
        return Finding::new(
            id,
            Status::Pass,
            "/dev/rknpu, the rknpu misc device of a DMA_HEAP build (no DRM node is rknpu's; librknnrt opens /dev/rknpu first)",
        )
        .observed("drm_nodes", listed)
        .evidence("/dev/rknpu", None, "misc device");
    }
    if drm.is_empty() {
        return Finding::skip(id, "/sys/class/drm lists no DRM node in this tree");
    }
    // Severity follows the consequence: only a workload that wants the NPU is hurt.
    let workload = npu_workload(ctx);
    let probe = probe_failure(ctx);
    let mut f = Finding::new(
        id,
        if workload.is_some() || probe.is_some() {
            Status::Fail
        } else {
            Status::Info
        },
        match (&probe, &workload) {
            (Some((cause, _)), _) => format!("no DRM node is driven by rknpu: the driver failed to probe ({})", cause_text(*cause)),
            (None, Some(w)) => format!("no DRM node is driven by rknpu, but {w} wants the NPU: RKNN/RKLLM cannot run"),
            (None, None) => "no DRM node is driven by rknpu and nothing here uses the NPU".to_string(),
        },
    )
    .observed("drm_nodes", listed)
    .remedy(match &probe {
        Some((cause, _)) => cause_remedy(*cause),
        None => "to use the NPU: boot a vendor kernel with the rknpu driver enabled (CONFIG_ROCKCHIP_RKNPU) and the npu@fdab0000 node".to_string(),
    });
    if let Some((_, h)) = probe {
        f.push_evidence(&h.file, h.line_no(), &h.text);
    }
    f
}

/// A /dev/rknpu beside an rknpu DRM node: librknnrt takes the legacy path and fails.
fn stray_misc_node(ctx: &Ctx<'_>, mut f: Finding, names: &[&str]) -> Finding {
    // librknnrt tries /dev/rknpu first and then speaks the legacy misc-device ioctls,
    // which a DRM build does not have.
    let broken: Vec<&LogHit> = ctx
        .logs
        .host(|e| {
            matches!(
                e,
                LogEvent::RknnLegacyPathFailed | LogEvent::Errno { errno: 25 }
            )
        })
        .map(|(h, _)| h)
        .collect();
    f.status = if broken.is_empty() {
        Status::Warn
    } else {
        Status::Fail
    };
    f.summary = format!(
        "/dev/rknpu exists on a DRM build of rknpu ({}): librknnrt then uses the legacy ioctls, which fail (ENOTTY, hw_version = -1){}",
        names.join(", "),
        if broken.is_empty() {
            String::new()
        } else {
            format!("; the workload log shows it failing ({} line(s))", broken.len())
        }
    );
    f = f
        .evidence("/dev/rknpu", None, "")
        .with_hits(broken)
        .remedy("remove the /dev/rknpu link or node (and the udev rule, container entrypoint or script that creates it); pass /dev/dri/* into containers and let librknnrt find the render node whose driver is rknpu");
    f
}

/// The newest rknpu probe failure in the kernel log and its cause.
fn probe_failure<'a>(ctx: &'a Ctx<'_>) -> Option<(ProbeCause, &'a LogHit)> {
    ctx.logs
        .find(Some(LogClass::Kernel), |e| {
            matches!(e, LogEvent::ProbeFailure { .. })
        })
        .rfind(|(h, _)| {
            let t = h.text.to_ascii_lowercase();
            t.contains("rknpu") || t.contains(".npu")
        })
        .and_then(|(h, e)| match e {
            LogEvent::ProbeFailure { cause, .. } => Some((*cause, h)),
            _ => None,
        })
}

#[cfg(test)]
mod tests {
    use crate::check::testkit::{one, Board};
    use crate::model::{LogClass, Status};

    const DEBUGFS: &str = "/sys/kernel/debug/rknpu/version";

    #[test]
    fn driver_version_verdicts() {
        let table = [
            (
                "RKNPU driver: v0.9.8",
                Status::Pass,
                "rknpu 0.9.8 (>= 0.9.8)",
                "",
            ),
            (
                "RKNPU driver: v0.9.6",
                Status::Warn,
                "rknpu 0.9.6 is below 0.9.8",
                "upgrade the board\x27s kernel",
            ),
        ];
        for (line, status, summary, remedy) in table {
            let b = Board::new().rknpu_version_file(DEBUGFS, line);
            let f = one("rk3588-rknpu", &b.build(), "rknpu.driver_version");
            assert_eq!(f.status, status, "{}", f.summary);
            assert!(f.summary.contains(summary), "{}", f.summary);
            assert!(f.remedy.contains(remedy), "{}", f.remedy);
        }
        let f = one(
            "rk3588-rknpu",
            &Board::new().build(),
            "rknpu.driver_version",
        );
        assert_eq!(f.status, Status::Skip);
        assert!(
            f.summary.contains("no source names the rknpu driver"),
            "{}",
            f.summary
        );
    }

    #[test]
    fn an_npu_without_node_or_supply_is_named() {
        let id = "rknpu.driver_version";
        let mut snap = Board::new().build();
        snap.stack.npu_dt_nodes = vec![("npu@fdab0000".into(), "disabled".into())];
        let f = one("rk3588-rknpu", &snap, id);
        assert_eq!(f.status, Status::Warn, "{}", f.summary);
        assert!(
            f.summary.contains("npu@fdab0000 is disabled"),
            "{}",
            f.summary
        );
        let reg = Board::new().log(
            "/var/log/kern.log",
            LogClass::Kernel,
            &["[    5.1] RKNPU fdab0000.npu: Looking up rknpu-supply from device tree, failed to get regulator"],
        );
        let f = one("rk3588-rknpu", &reg.build(), id);
        assert_eq!(f.status, Status::Warn, "{}", f.summary);
        assert!(f.summary.contains("supply regulator"), "{}", f.summary);
    }

    #[test]
    fn a_dma_heap_build_serves_dev_rknpu() {
        let mut snap = Board::new().device_node("/dev/rknpu").build();
        snap.drm = Ok(vec![crate::model::DrmNode {
            name: "card0".into(),
            driver: Some("rockchip-drm".into()),
        }]);
        let f = one("rk3588-rknpu", &snap, "rknpu.device_node");
        assert_eq!(f.status, Status::Pass, "{}", f.summary);
        assert!(f.summary.contains("DMA_HEAP"), "{}", f.summary);
    }

    #[test]
    fn rocket_found_wherever_the_kernel_names_it() {
        let id = "rknpu.driver_version";
        let bound = Board::new().platform_npu("fdab0000.npu", Some("rocket"));
        let f = one("rk3588-rknpu", &bound.build(), id);
        assert_eq!(f.status, Status::Warn, "{}", f.summary);
        assert!(f.summary.contains("`rocket`"), "{}", f.summary);
        assert_eq!(
            f.evidence[0].file,
            "/sys/devices/platform/fdab0000.npu/driver"
        );
        let logged = Board::new().log(
            "/var/log/kern.log",
            LogClass::Kernel,
            &["[    9.681491] rocket fdab0000.npu: Rockchip NPU core 0 version: 1179210309"],
        );
        let f = one("rk3588-rknpu", &logged.build(), id);
        assert_eq!(f.status, Status::Warn, "{}", f.summary);
        assert!(
            f.evidence[0].text.contains("rocket fdab0000.npu"),
            "{:?}",
            f.evidence
        );
        // The vendor driver bound without a readable version: present, version unknown.
        let vendor = Board::new().platform_npu("fdab0000.npu", Some("RKNPU"));
        let f = one("rk3588-rknpu", &vendor.build(), id);
        assert_eq!(f.status, Status::Info, "{}", f.summary);
    }

    #[test]
    fn other_profiles_and_missing_sources_skip() {
        let empty = Board::new().build();
        for id in [
            "rknpu.driver_version",
            "rknpu.device_node",
            "rknpu.runtime_library",
        ] {
            let f = one("rpi5-hailo8", &empty, id);
            assert_eq!(f.status, Status::Skip);
            assert!(f.summary.contains("no Rockchip NPU"), "{}", f.summary);
        }
        let f = one("rk3588-rknpu", &empty, "rknpu.device_node");
        assert!(f.summary.contains("cannot list DRM nodes"), "{}", f.summary);
        let f = one("rk3588-rknpu", &empty, "rknpu.runtime_library");
        assert_eq!(f.status, Status::Skip);
        assert!(
            f.summary.contains("no RKNN/RKLLM runtime found"),
            "{}",
            f.summary
        );
    }
}
