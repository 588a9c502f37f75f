//! `board.identity`: model, compatible, SoC, kernel, and which profile matched and why.

use super::{Ctx, Finding, Status};

/// SoC from the compatible list. RK3588S is tested first (`rockchip,rk3588s`, then an `rk3588s`
/// token in a board compatible) because vendor trees of RK3588S boards often list only
/// `rockchip,rk3588`.
pub fn soc_of(compatible: &[String], has_pcie3x4_node: bool) -> Option<String> {
    let any = |f: &dyn Fn(&str) -> bool| compatible.iter().any(|c| f(c));
    if any(&|c| c == "rockchip,rk3588s") || any(&|c| c.contains("rk3588s")) {
        return Some("RK3588S".into());
    }
    if any(&|c| c == "rockchip,rk3588") {
        return Some(
            if has_pcie3x4_node {
                "RK3588 (pcie3x4 node present)"
            } else {
                "RK3588"
            }
            .into(),
        );
    }
    if any(&|c| c.starts_with("brcm,bcm2712")) {
        return Some("BCM2712".into());
    }
    compatible
        .iter()
        .rev()
        .find(|c| c.contains(','))
        .and_then(|c| c.split_once(',').map(|(_, soc)| soc.to_uppercase()))
}

pub(super) fn identity(ctx: &Ctx<'_>) -> Finding {
    let id = &ctx.snap.identity;
    let model = id.model.as_ref().ok().cloned();
    let compatible = id.compatible.as_ref().ok().cloned().unwrap_or_default();
    let soc = soc_of(&compatible, id.has_pcie3x4_node);
    let armbian_board =
        crate::parse::kv::last(&id.armbian_release, "BOARD").map(|e| e.value.clone());
    let name = model
        .clone()
        .or_else(|| armbian_board.clone())
        .or_else(|| {
            id.arch
                .clone()
                .map(|a| format!("{a} machine without a device tree"))
        })
        .or_else(|| {
            id.os_pretty_name
                .clone()
                .map(|o| format!("{o} machine without a device tree"))
        })
        .unwrap_or_else(|| "unknown board".into());
    let kernel = id
        .kernel_release
        .as_ref()
        .ok()
        .filter(|k| !k.trim().is_empty())
        .cloned();
    let mut summary = name.clone();
    if let Some(s) = &soc {
        summary.push_str(&format!(" ({s})"));
    }
    match (&kernel, &id.kernel_release) {
        (Some(k), _) => summary.push_str(&format!(", kernel {k}")),
        (None, Ok(_)) => summary.push_str(", kernel release empty"),
        (None, Err(_)) => {}
    }
    let status = if ctx.fallback {
        summary.push_str("; no board profile targets it, generic checks only");
        Status::Info
    } else {
        summary.push_str(&format!("; profile {} ({})", ctx.profile.id, ctx.reason));
        Status::Pass
    };
    let accels = &ctx.profile.accelerators;
    if !accels.is_empty() {
        let list: Vec<String> = accels
            .iter()
            .map(|a| format!("{} ({})", a.name, a.why))
            .collect();
        summary.push_str(&format!("; accelerator(s) found: {}", list.join(", ")));
    }
    let workloads = &ctx.snap.workloads.workloads;
    if !workloads.is_empty() {
        let list: Vec<String> = workloads.iter().take(6).map(|w| w.label()).collect();
        let more = workloads.len().saturating_sub(6);
        summary.push_str(&format!(
            "; NPU workload(s): {}{}",
            list.join(", "),
            if more > 0 {
                format!(" and {more} more")
            } else {
                String::new()
            }
        ));
    }
    if ctx.profile.npu.kind != crate::profile::NpuKind::None {
        // What a remedy has to fit: the OS and how the driver and runtime were installed.
        summary.push_str(&format!("; {}", ctx.stack.describe()));
    }
    let mut f = Finding::new("board.identity", status, summary)
        .observed("model", model.clone().unwrap_or_default())
        .observed("compatible", compatible.clone())
        .observed("soc", soc.unwrap_or_default())
        .observed("kernel_release", kernel.unwrap_or_default())
        .observed("profile", ctx.profile.id.clone())
        .observed("profile_reason", ctx.reason.to_string());
    if !workloads.is_empty() {
        f = f.observed(
            "workloads",
            workloads
                .iter()
                .map(|w| serde_json::json!({"name": w.name, "app": w.app, "place": w.place, "why": w.why, "logs": w.logs}))
                .collect::<Vec<_>>(),
        );
    }
    if !accels.is_empty() {
        f = f.observed(
            "accelerators",
            accels.iter().map(|a| a.id.clone()).collect::<Vec<_>>(),
        );
    }
    if let Some(a) = &id.arch {
        f = f.observed("arch", a.clone());
    }
    if let Some(b) = armbian_board {
        f = f.observed("armbian_board", b);
    }
    if let Some(os) = &id.os_pretty_name {
        f = f.observed("os", os.clone());
    }
    f = f
        .observed("os_family", format!("{:?}", ctx.stack.os))
        .observed("driver_install", ctx.stack.driver_text())
        .observed("runtime_install", ctx.stack.runtime_text());
    if let Some(d) = ctx.stack.dpkg {
        f = f.observed("dpkg", d);
    }
    if let Some(m) = model {
        f = f.evidence("/proc/device-tree/model", None, &m);
    } else if let Err(e) = &id.model {
        f = f.observed("model_error", e.to_string());
    }
    if !compatible.is_empty() {
        f = f.evidence("/proc/device-tree/compatible", None, &compatible.join(" "));
    }
    f
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &[&str]) -> Vec<String> {
        s.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn rk3588s_before_rk3588() {
        assert_eq!(
            soc_of(&v(&["xunlong,orangepi-5", "rockchip,rk3588s"]), false).as_deref(),
            Some("RK3588S")
        );
        // Vendor DT of an RK3588S board that lists only rockchip,rk3588.
        assert_eq!(
            soc_of(
                &v(&["rockchip,rk3588s-orangepi-5", "rockchip,rk3588"]),
                false
            )
            .as_deref(),
            Some("RK3588S")
        );
        assert_eq!(
            soc_of(&v(&["radxa,rock-5b", "rockchip,rk3588"]), false).as_deref(),
            Some("RK3588")
        );
        assert_eq!(
            soc_of(&v(&["raspberrypi,5-model-b", "brcm,bcm2712"]), false).as_deref(),
            Some("BCM2712")
        );
        assert_eq!(
            soc_of(&v(&["rockchip,rk3318-box", "rockchip,rk3328"]), false).as_deref(),
            Some("RK3328")
        );
        assert_eq!(soc_of(&[], false), None);
    }
}
