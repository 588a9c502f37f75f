//! Package generation and driver/library version agreement.

use super::*;
use crate::model::LogHit;

/// Generation of an installed package: by name for metapackages, by version major otherwise.
pub(super) fn package_gen(ctx: &Ctx<'_>, name: &str, version: &str) -> Option<u32> {
    let spec = &ctx.profile.packages;
    if let Some(g) = spec.metapackages.get(name) {
        return Some(*g);
    }
    if spec.versioned.iter().any(|p| p == name) {
        return Version::parse_loose(version).map(|v| v.major);
    }
    None
}

pub(super) fn package_generation(ctx: &Ctx<'_>, dev: Option<&PciDevice>) -> Finding {
    let id = "hailo.package_generation";
    let pkgs = match &ctx.snap.dpkg {
        Ok(p) => p,
        Err(e) if e.is_not_found() => {
            let os = match ctx.stack.os {
                crate::check::stack::OsKind::Unknown => {
                    "e.g. a Buildroot or Nerves image".to_string()
                }
                _ => ctx.stack.os_name.clone(),
            };
            return Finding::skip(id, format!("no dpkg database (/var/lib/dpkg/status not found, {os}): the generation is judged from the kernel module in hailo.driver_binding"));
        }
        Err(e) => {
            return Finding::new(
                id,
                Status::Error,
                format!("cannot read the package database: {e}"),
            )
        }
    };
    let Some(expected) = ctx.profile.npu.generation else {
        return Finding::skip(id, "profile sets no HailoRT generation");
    };
    let mut right = Vec::new();
    let mut wrong = Vec::new();
    let mut history = Vec::new();
    let mut f = Finding::new(id, Status::Pass, "");
    for p in pkgs {
        let Some(g) = package_gen(ctx, &p.name, &p.version) else {
            continue;
        };
        let label = format!("{} {} ({}.x)", p.name, p.version, g);
        if p.state == crate::parse::dpkg::DpkgState::ConfigFiles {
            history.push(label);
            continue;
        }
        if !p.is_installed() {
            continue;
        }
        if g == expected {
            right.push(label);
        } else {
            f.push_evidence(
                "/var/lib/dpkg/status",
                Some(p.line),
                &format!("Package: {} / Version: {}", p.name, p.version),
            );
            wrong.push(label);
        }
    }
    let chip = dev
        .map(|d| chip_name(d.device))
        .unwrap_or(&ctx.profile.npu.chip);
    f = f
        .observed(
            "packages",
            right
                .iter()
                .chain(wrong.iter())
                .cloned()
                .collect::<Vec<_>>(),
        )
        .observed("config_files_only", history.clone())
        .expected("hailort_generation", format!("{expected}.x"));
    match (right.is_empty(), wrong.is_empty()) {
        (false, true) => {
            f.summary = format!(
                "HailoRT {expected}.x packages only ({}), right for the {chip}",
                right.join(", ")
            );
            if !history.is_empty() {
                f.summary.push_str(&format!(
                    "; removed leftovers (rc) are history: {}",
                    history.join(", ")
                ));
            }
        }
        (true, true) if !ctx.stack.runtime_is_package() => {
            return not_a_package(ctx, f, expected, chip);
        }
        (true, true) => {
            f.status = Status::Warn;
            f.summary = format!(
                "no HailoRT package is installed (dpkg); the {chip} needs the {expected}.x line"
            );
            f = with_gen_remedy(ctx, f);
        }
        (false, false) => {
            f.status = Status::Fail;
            f.summary = format!(
                "HailoRT lines are mixed: {} next to {}; the {chip} needs {expected}.x only",
                wrong.join(", "),
                right.join(", ")
            );
            f = with_gen_remedy(ctx, f);
        }
        (true, false) => {
            f.status = Status::Fail;
            f.summary = format!(
                "the wrong HailoRT line is installed for the {chip}: {}; it needs {expected}.x",
                wrong.join(", ")
            );
            f = with_gen_remedy(ctx, f);
        }
    }
    if f.status != Status::Pass {
        f = with_missing_runtime_hits(ctx, f, dev);
    }
    f
}

/// Adds the log lines of a runtime that found no device or no library (status 74, a missing
/// `libhailort.so`). With the chip bound to the right driver, status 74 means another process
/// holds it (`npu.workload`), not a package problem, so those lines stay out.
fn with_missing_runtime_hits(ctx: &Ctx<'_>, f: Finding, dev: Option<&PciDevice>) -> Finding {
    let bound_right = dev.and_then(|d| d.driver.as_ref()).is_some_and(|b| {
        ctx.profile
            .npu
            .drivers
            .iter()
            .any(|x| x.eq_ignore_ascii_case(b))
    });
    let hits: Vec<_> = ctx
        .logs
        .host(|e| match e {
            LogEvent::HailoStatus { code: 74 } => !bound_right,
            LogEvent::HailoLibraryMissing { .. } => true,
            _ => false,
        })
        .map(|(h, _)| h)
        .collect();
    f.with_hits(hits)
}

/// No Hailo package, and the runtime is not one (a source build, a vendor copy, a container):
/// dpkg cannot judge the generation, so the library's own version does, where it is on the host.
fn not_a_package(ctx: &Ctx<'_>, f: Finding, expected: u32, chip: &str) -> Finding {
    let id = "hailo.package_generation";
    let how = ctx.stack.runtime_text();
    let Some((path, v)) = library_version(ctx) else {
        return Finding::skip(
            id,
            format!("HailoRT is not installed as a package here: the runtime is {how}; dpkg says nothing about its generation"),
        );
    };
    let f = f
        .observed("library_version", v.to_string())
        .evidence(&path, None, &v.to_string());
    if v.major == expected {
        let mut f = f;
        f.summary = format!("no HailoRT package, and none is needed: the runtime is {how}, HailoRT {v}, the {expected}.x line the {chip} needs");
        return f;
    }
    let mut f = f;
    f.status = Status::Fail;
    f.summary =
        format!("the runtime ({how}) is HailoRT {v}; the {chip} needs the {expected}.x line");
    with_gen_remedy(ctx, f)
}

/// The kernel driver's version: the bound driver's module, else the profile's modules.
pub(super) fn driver_version(ctx: &Ctx<'_>, dev: Option<&PciDevice>) -> Option<(String, Version)> {
    if let Some(drv) = dev.and_then(|d| d.driver.as_ref()) {
        if let Some(v) = module_version(ctx, &module_of_driver(drv)) {
            return Some(v);
        }
    }
    ctx.profile
        .npu
        .modules
        .iter()
        .chain(&ctx.profile.npu.wrong_modules)
        .find_map(|m| module_version(ctx, m))
}

/// The installed libhailort version: a `libhailort.so.X.Y.Z` file, else the library package.
pub(super) fn library_version(ctx: &Ctx<'_>) -> Option<(String, Version)> {
    let from_file = ctx.snap.libraries.iter().find_map(|p| {
        let v = p.rsplit("libhailort.so.").next()?;
        (v.split('.').count() == 3)
            .then(|| Version::parse_loose(v))
            .flatten()
            .map(|v| (p.clone(), v))
    });
    from_file.or_else(|| {
        let pkgs = ctx.snap.dpkg.as_ref().ok()?;
        ctx.profile.packages.library.iter().find_map(|name| {
            pkgs.iter()
                .find(|p| &p.name == name && p.is_installed())
                .and_then(|p| {
                    Version::parse_loose(&p.version).map(|v| {
                        (
                            format!("/var/lib/dpkg/status ({} {})", p.name, p.version),
                            v,
                        )
                    })
                })
        })
    })
}

pub(super) fn version_mismatch(ctx: &Ctx<'_>, dev: Option<&PciDevice>) -> Finding {
    let id = "hailo.version_mismatch";
    let driver = driver_version(ctx, dev);
    let library = library_version(ctx);
    let logged: Vec<_> = ctx
        .logs
        .host(|e| matches!(e, LogEvent::HailoVersionMismatch { .. }))
        .collect();
    if let Some((
        hit,
        LogEvent::HailoVersionMismatch {
            driver: d,
            library: l,
        },
    )) = logged.last()
    {
        let mut f = Finding::new(
            id,
            Status::Fail,
            format!("HailoRT refused the driver: driver {d} != library {l} (HAILO_INVALID_DRIVER_VERSION, 76); the library in use may be a container's, not the host's"),
        )
        .observed("driver_version", d.to_string())
        .observed("library_version", l.to_string())
        .expected("library_version", d.to_string())
        .remedy(mismatch_remedy(ctx, &d.to_string()))
        .with_hits(logged.iter().map(|(h, _)| *h));
        f.push_evidence(&hit.file, hit.line_no(), &hit.text);
        if let Some((p, v)) = &driver {
            f = f.evidence(p, None, &v.to_string());
        }
        return f;
    }
    let status76: Vec<&LogHit> = ctx
        .logs
        .host(|e| matches!(e, LogEvent::HailoStatus { code: 76 }))
        .map(|(h, _)| h)
        .collect();
    match (driver, library) {
        (Some((dp, dv)), Some((lp, lv))) if dv != lv || status76.is_empty() => {
            let f = Finding::new(id, Status::Pass, format!("driver {dv} == libhailort {lv}"))
                .observed("driver_version", dv.to_string())
                .observed("library_version", lv.to_string())
                .expected("library_version", dv.to_string())
                .evidence(&dp, None, &dv.to_string())
                .evidence(&lp, None, &lv.to_string());
            if dv == lv {
                return f;
            }
            let mut f = f;
            f.status = Status::Fail;
            f.summary = format!("kernel driver {dv} != libhailort {lv}: HailoRT refuses to open the device (HAILO_INVALID_DRIVER_VERSION)");
            f.with_hits(status76)
                .remedy(mismatch_remedy(ctx, &dv.to_string()))
        }
        (d, _) if status76.is_empty() => unknown_input(d.is_none()),
        (driver, library) => proven_by_status(ctx, driver, library, status76),
    }
}

/// Skip: a version is missing and no status line proves anything.
fn unknown_input(driver_missing: bool) -> Finding {
    let id = "hailo.version_mismatch";
    match driver_missing {
        true => Finding::skip(
            id,
            "kernel driver version unknown (no /sys/module/hailo*_pci/version)",
        ),
        false => Finding::skip(
            id,
            "libhailort version unknown (no libhailort.so.X.Y.Z and no HailoRT runtime package)",
        ),
    }
}

/// Status 76 (`HAILO_INVALID_DRIVER_VERSION`) in the workload's log proves the library it loaded
/// is not the driver's version, whatever the host has installed: the library in use is another
/// one (a container's, an app's bundled copy), or its version is not visible here.
fn proven_by_status(
    ctx: &Ctx<'_>,
    driver: Option<(String, Version)>,
    library: Option<(String, Version)>,
    hits: Vec<&LogHit>,
) -> Finding {
    let id = "hailo.version_mismatch";
    let missing = match &library {
        Some((p, v)) => {
            format!("the host's libhailort ({p}) is {v}, so the library that failed is another one")
        }
        None => "the library's version is not visible on the host".to_string(),
    };
    let drv = driver
        .as_ref()
        .map(|(_, v)| v.to_string())
        .unwrap_or_else(|| "unknown".into());
    let mut f = Finding::new(
        id,
        Status::Fail,
        format!("the workload's HailoRT refused the kernel driver {drv}: HAILO_INVALID_DRIVER_VERSION (76) means its library is not the driver's version; {missing} (runtime {})", ctx.stack.runtime_text()),
    )
    .observed("status_76_lines", hits.len() as u64)
    .expected("library_version", drv.clone())
    .with_hits(hits)
    .remedy(mismatch_remedy(ctx, &drv));
    if let Some((p, v)) = &driver {
        f = f
            .observed("driver_version", v.to_string())
            .evidence(p, None, &v.to_string());
    }
    f
}

/// How to make driver and library one release, for the way the runtime is installed.
fn mismatch_remedy(ctx: &Ctx<'_>, driver: &str) -> String {
    let apt = "HailoRT needs driver == library exactly (major.minor.revision): install the driver and runtime of one release (or the host driver that matches the container's libhailort) and hold them: sudo apt-mark hold the Hailo packages";
    if ctx.stack.runtime_is_package() {
        return apt.to_string();
    }
    let mut r = format!(
        "HailoRT needs driver == library exactly: {}",
        ctx.stack.runtime_update(&format!("HailoRT {driver}"), apt)
    );
    if ctx.stack.driver == crate::check::stack::DriverOrigin::OsImage {
        r.push_str(&format!(
            "; or run the {} release whose driver matches the runtime (the driver {driver} ships with the OS)",
            ctx.stack.os_name
        ));
    }
    r
}
