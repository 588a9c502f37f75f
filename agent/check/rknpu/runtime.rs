//! The RKNN/RKLLM userland: runtime versions and the rknpu.runtime_library check.

use super::*;

/// Versions of the Rockchip userland from every source: (version, where).
#[derive(Default)]
pub(super) struct RuntimeVersions {
    pub(super) rknnrt: Option<(Version, String)>,
    pub(super) rkllm: Option<(Version, String)>,
    pub(super) lite: Option<(Version, String)>,
}

pub(super) fn runtime_versions(ctx: &Ctx<'_>) -> RuntimeVersions {
    let mut v = RuntimeVersions::default();
    // The runtime's own log lines say what was really loaded: they come first.
    for (h, e) in ctx.logs.host(|e| {
        matches!(
            e,
            LogEvent::RknnRuntimeVersion { .. }
                | LogEvent::RkllmRuntimeVersion { .. }
                | LogEvent::RknnLiteVersion { .. }
        )
    }) {
        let at = format!(
            "{}{}",
            h.file,
            h.line_no().map(|n| format!(":{n}")).unwrap_or_default()
        );
        match e {
            LogEvent::RknnRuntimeVersion { version } => v.rknnrt = Some((*version, at)),
            LogEvent::RkllmRuntimeVersion { version } => v.rkllm = Some((*version, at)),
            LogEvent::RknnLiteVersion { version } => v.lite = Some((*version, at)),
            _ => {}
        }
    }
    for c in &ctx.snap.rknn_runtime {
        let Some(ver) = c.version.as_deref().and_then(Version::parse_loose) else {
            continue;
        };
        let slot = match c.name.as_str() {
            "librknnrt" => &mut v.rknnrt,
            "librkllmrt" => &mut v.rkllm,
            _ => &mut v.lite,
        };
        if slot.is_none() {
            *slot = Some((ver, c.path.clone()));
        }
    }
    if let Ok(pkgs) = &ctx.snap.dpkg {
        for p in pkgs.iter().filter(|p| p.is_installed()) {
            let n = p.name.to_ascii_lowercase();
            let slot = if n.contains("rkllm") {
                &mut v.rkllm
            } else if n.contains("lite2") {
                &mut v.lite
            } else if n.contains("rknnrt") || n.starts_with("rknpu2") || n == "rknn-runtime" {
                &mut v.rknnrt
            } else {
                continue;
            };
            if slot.is_none() {
                if let Some(ver) = Version::parse_loose(&p.version) {
                    *slot = Some((
                        ver,
                        format!("/var/lib/dpkg/status ({} {})", p.name, p.version),
                    ));
                }
            }
        }
    }
    v
}

/// The rknpu version an rkllm-runtime release needs: 1.0.x shipped with 0.9.6; from 1.1 the
/// runtime asks for 0.9.7 and the manual for 0.9.8.
pub(super) fn rkllm_needs_driver(runtime: Version) -> Option<Version> {
    if runtime < Version::new(1, 0, 0) {
        None
    } else if runtime < Version::new(1, 1, 0) {
        Some(Version::new(0, 9, 6))
    } else {
        Some(Version::new(0, 9, 8))
    }
}

/// rkllm-runtime releases with a known fault and the release that fixed it.
const RKLLM_KNOWN_BAD: &[(Version, &str, Version)] = &[(
    Version::new(1, 0, 1),
    "fails its platform query on RK3588/RK3588S/RK3582 ('Query platform error!')",
    Version::new(1, 0, 2),
)];

/// Runtime faults found: sentences, remedies and the log lines behind them.
#[derive(Default)]
struct RuntimeFaults<'a> {
    problems: Vec<String>,
    remedies: Vec<String>,
    hits: Vec<&'a LogHit>,
}

pub(super) fn runtime_library(ctx: &Ctx<'_>) -> Finding {
    let id = "rknpu.runtime_library";
    let v = runtime_versions(ctx);
    let driver = find_version(ctx).map(|f| f.version);
    let mut f = Finding::new(id, Status::Pass, "");
    let (parts, sources) = runtime_parts(ctx, &v, &mut f);
    if let Some(d) = driver {
        f = f.observed("driver_version", d.to_string());
    }
    f = f.observed("sources", sources);
    let mut x = RuntimeFaults::default();
    query_platform_fault(ctx, &v, driver, &mut x);
    invalid_model_fault(ctx, &v, &mut x);
    driver_mismatch_fault(ctx, &v, driver, &mut x);
    if !x.problems.is_empty() {
        f.status = Status::Fail;
        f.summary = format!(
            "the RKNN/RKLLM runtime is the fault{}: {}",
            if parts.is_empty() {
                String::new()
            } else {
                format!(" ({})", parts.join(", "))
            },
            x.problems.join("; ")
        );
        return f.with_hits(x.hits).remedy(x.remedies.join("; "));
    }
    if parts.is_empty() {
        return Finding::skip(
            id,
            "no RKNN/RKLLM runtime found (no librknnrt.so/librkllmrt.so in the library directories, no runtime version line in the workload logs, no rknn-toolkit-lite2)",
        );
    }
    f.summary = format!(
        "{}{}",
        parts.join(", "),
        driver
            .map(|d| format!(" on rknpu {d}; no runtime fault in the logs read"))
            .unwrap_or_else(|| "; no runtime fault in the logs read".into())
    );
    f
}

/// What was found of each runtime (`name version`) and where; versions go to `f.observed`.
fn runtime_parts(
    ctx: &Ctx<'_>,
    v: &RuntimeVersions,
    f: &mut Finding,
) -> (Vec<String>, Vec<String>) {
    let mut sources: Vec<String> = Vec::new();
    let mut parts: Vec<String> = Vec::new();
    for (name, slot) in [
        ("librknnrt", &v.rknnrt),
        ("rkllm-runtime (librkllmrt)", &v.rkllm),
        ("rknn-toolkit-lite2", &v.lite),
    ] {
        if let Some((ver, at)) = slot {
            parts.push(format!("{name} {ver}"));
            f.observed.insert(
                format!(
                    "{}_version",
                    name.split(' ').next().unwrap_or(name).replace('-', "_")
                ),
                ver.to_string().into(),
            );
            sources.push(at.clone());
        }
    }
    for c in ctx.snap.rknn_runtime.iter().filter(|c| c.version.is_none()) {
        parts.push(format!(
            "{} (version string not found in {})",
            c.name, c.path
        ));
        sources.push(c.path.clone());
    }
    (parts, sources)
}

/// rkllm-runtime's 'Query platform error!' (a log line or a known-bad release).
fn query_platform_fault<'a>(
    ctx: &'a Ctx<'_>,
    v: &RuntimeVersions,
    driver: Option<Version>,
    x: &mut RuntimeFaults<'a>,
) {
    let qpe: Vec<&LogHit> = ctx
        .logs
        .host(|e| matches!(e, LogEvent::RkllmQueryPlatformError))
        .map(|(h, _)| h)
        .collect();
    let known_bad = v
        .rkllm
        .as_ref()
        .and_then(|(rv, _)| RKLLM_KNOWN_BAD.iter().find(|(b, _, _)| b == rv));
    if !qpe.is_empty() || known_bad.is_some() {
        let fixed = known_bad
            .map(|(_, _, fix)| *fix)
            .unwrap_or(Version::new(1, 0, 2));
        x.problems.push(match (&v.rkllm, qpe.is_empty()) {
            (Some((rv, _)), false) => format!("rkllm-runtime {rv} stops at 'Query platform error!' (a runtime fault, fixed in {fixed} on the same driver)"),
            (None, false) => "rkllm-runtime stops at 'Query platform error!' (rkllm-runtime 1.0.1's fault, fixed in 1.0.2 on the same driver)".into(),
            (Some((rv, _)), true) => format!("rkllm-runtime {rv} {}", known_bad.map(|k| k.1).unwrap_or("")),
            (None, true) => String::new(),
        });
        // The fixed release has a driver floor of its own: "keep the driver" only where the
        // driver meets it, else the kernel comes first (the same floor the driver finding gives).
        let fixed_needs = rkllm_needs_driver(fixed);
        let replace = format!("rkllm-runtime {fixed} or newer (from airockchip/rknn-llm, rkllm-runtime/Linux/librkllm_api/aarch64/librkllmrt.so -> /usr/lib/)");
        x.remedies.push(match (driver, fixed_needs) {
            (Some(d), Some(need)) if d < need => format!(
                "move the kernel to one carrying rknpu >= {need} (rknpu {d} serves no RKLLM release), then replace librkllmrt.so with {replace}"
            ),
            (Some(d), _) => format!(
                "replace librkllmrt.so with {replace}; it works on the installed rknpu {d} — RKLLM >= 1.1 would also need rknpu >= 0.9.8"
            ),
            (None, _) => format!(
                "replace librkllmrt.so with {replace}{}",
                fixed_needs.map(|n| format!(" (it needs rknpu >= {n})")).unwrap_or_default()
            ),
        });
        x.hits.extend(qpe);
    }
}

/// librknnrt refusing a model converted by a newer toolkit.
fn invalid_model_fault<'a>(ctx: &'a Ctx<'_>, v: &RuntimeVersions, x: &mut RuntimeFaults<'a>) {
    let invalid: Vec<(&LogHit, u32)> = ctx.logs.host_pick(|e| match e {
        LogEvent::RknnInvalidModelVersion { model_version } => Some(*model_version),
        _ => None,
    });
    if let Some((_, mv)) = invalid.last() {
        x.problems.push(format!(
            "librknnrt{} refuses the model ('Invalid RKNN model version {mv}'): the .rknn file was converted by a newer rknn-toolkit2 than this runtime",
            v.rknnrt.as_ref().map(|(r, _)| format!(" {r}")).unwrap_or_default()
        ));
        x.remedies.push("install the librknnrt.so of the rknn-toolkit2 release that converted the model (airockchip/rknn-toolkit2, rknpu2/runtime/Linux/librknn_api/aarch64/librknnrt.so -> /usr/lib/), or convert the model again with the toolkit matching the installed runtime".into());
        x.hits.extend(invalid.iter().map(|(h, _)| *h));
    }
}

/// A runtime too new for the installed rknpu driver.
fn driver_mismatch_fault<'a>(
    ctx: &'a Ctx<'_>,
    v: &RuntimeVersions,
    driver: Option<Version>,
    x: &mut RuntimeFaults<'a>,
) {
    // The runtime against the driver.
    let too_low: Vec<(&LogHit, Version)> = ctx.logs.host_pick(|e| match e {
        LogEvent::RknpuTooLow { wanted } => Some(*wanted),
        _ => None,
    });
    let needs = v
        .rkllm
        .as_ref()
        .and_then(|(rv, _)| rkllm_needs_driver(*rv).map(|n| (*rv, n)));
    let mismatch = match (needs, driver, too_low.last()) {
        (Some((rv, need)), Some(d), _) if d < need => {
            Some((format!("rkllm-runtime {rv}"), need, d))
        }
        (_, Some(d), Some((_, wanted))) if d < *wanted => {
            Some(("the runtime".to_string(), *wanted, d))
        }
        _ => None,
    };
    if let Some((what, need, d)) = mismatch {
        x.problems.push(format!(
            "{what} is too new for rknpu {d}: it needs rknpu >= {need}"
        ));
        // A runtime made for the installed driver is advice only where one exists (the oldest
        // RKLLM, 1.0.x, needs 0.9.6); below that the kernel is the only way, as the driver
        // finding says.
        let oldest = rkllm_needs_driver(Version::new(1, 0, 0)).unwrap_or(need);
        let kernel = format!("move the kernel to one carrying rknpu >= {need}");
        let advice = if d >= oldest {
            format!("either use a runtime release made for rknpu {d} (RKLLM 1.0.x works with {oldest}; replace librkllmrt.so), or {kernel}")
        } else {
            format!(
                "{kernel}: no RKLLM release runs on rknpu {d} (even RKLLM 1.0.x needs {oldest})"
            )
        };
        // Said once: the known-bad runtime's remedy may already start with this kernel move.
        if !x.remedies.iter().any(|r| r.starts_with(&kernel)) || d >= oldest {
            x.remedies.push(advice);
        }
        x.hits.extend(too_low.iter().map(|(h, _)| *h));
    }
}
