//! Rockchip NPU checks. Facts: shared/domain/RK3588-MEMORY.md §2.

use super::{Ctx, Finding, Status};
use crate::parse::logline::LogEvent;
use crate::parse::version::Version;
use crate::profile::NpuKind;

pub(super) fn all(ctx: &Ctx<'_>) -> Vec<Finding> {
    if ctx.profile.npu.kind != NpuKind::Rknpu {
        return ["rknpu.driver_version", "rknpu.device_node"]
            .iter()
            .map(|id| {
                Finding::skip(
                    id,
                    format!("profile {} has no Rockchip NPU", ctx.profile.id),
                )
            })
            .collect();
    }
    vec![driver_version(ctx), device_node(ctx)]
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
    if ctx.snap.modules.iter().any(|m| m.name == "rocket") {
        why.push((
            "/sys/module/rocket".to_string(),
            "module rocket loaded".to_string(),
        ));
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
    let malformed = ctx
        .snap
        .rknpu_version_files
        .iter()
        .find(|(_, r)| r.as_ref().is_ok_and(|t| Version::parse_loose(t).is_none()));
    let Some(found) = find_version(ctx) else {
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
        let denied = ctx
            .snap
            .rknpu_version_files
            .iter()
            .find(|(_, r)| r.as_ref().is_err_and(|e| !e.is_not_found()));
        if let Some((path, Err(e))) = denied {
            return Finding::new(id, Status::Error, format!("cannot read the rknpu version: {e}"))
                .remedy(format!("run the agent as root with debugfs mounted (mount -t debugfs none /sys/kernel/debug) so {path} is readable"));
        }
        return Finding::new(id, Status::Warn, format!("no rknpu driver found (no debugfs rknpu/version, /proc/rknpu, /sys/module/rknpu or kernel log line; kernel {kernel})"))
            .expected("driver_version", min.to_string())
            .remedy("mount debugfs (sudo mount -t debugfs none /sys/kernel/debug) and check again; if it is still missing, boot a vendor kernel that carries rknpu >= 0.9.8");
    };
    let builtin = !ctx
        .snap
        .modules
        .iter()
        .any(|m| m.name == "rknpu" && m.version.is_some());
    let v = found.version;
    let mut f = Finding::new(id, Status::Pass, format!("rknpu {v} (>= {min})"))
        .observed("driver_version", v.to_string())
        .observed("kernel_release", kernel.clone())
        .observed("builtin", builtin)
        .expected("driver_version", format!(">= {min}"))
        .evidence(&found.file, found.line, &found.text);
    if v >= min {
        return f;
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
    // Workload evidence that the old driver already broke something raises it to fail.
    let hits: Vec<_> = ctx
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
    let nodes: Vec<&str> = drm
        .iter()
        .filter(|n| n.driver.as_deref() == Some("rknpu"))
        .map(|n| n.name.as_str())
        .collect();
    if nodes.is_empty() {
        let rocket = !rocket_present(ctx).is_empty();
        return Finding::new(
            id,
            if rocket { Status::Warn } else { Status::Fail },
            if rocket {
                "no DRM node is driven by rknpu; the NPU belongs to the mainline rocket driver (/dev/accel)".to_string()
            } else {
                "no DRM node is driven by rknpu: the NPU is not usable by RKNN/RKLLM".to_string()
            },
        )
        .observed("drm_nodes", drm.iter().map(|n| format!("{}={}", n.name, n.driver.clone().unwrap_or_default())).collect::<Vec<_>>())
        .remedy("boot a vendor kernel with the rknpu driver enabled (CONFIG_ROCKCHIP_RKNPU) and the npu@fdab0000 node");
    }
    let mut f = Finding::new(
        id,
        Status::Pass,
        format!("rknpu DRM node(s): {}", nodes.join(", ")),
    )
    .observed(
        "rknpu_nodes",
        nodes
            .iter()
            .map(|s| format!("/dev/dri/{s}"))
            .collect::<Vec<_>>(),
    );
    for n in &nodes {
        f.push_evidence(&format!("/sys/class/drm/{n}/device/driver"), None, "rknpu");
    }
    if stray {
        f.status = Status::Warn;
        f.summary = format!("/dev/rknpu exists on a DRM build ({}): librknnrt then uses the legacy ioctls (ENOTTY, hw_version -1)", nodes.join(", "));
        f = f
            .evidence("/dev/rknpu", None, "")
            .remedy("remove the /dev/rknpu link or node (and the udev rule or script that creates it); librknnrt finds the DRM render node by itself");
    }
    f
}
