//! Package generation and driver/library version agreement.

use super::*;

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
            return Finding::skip(id, "no dpkg database (/var/lib/dpkg/status not found, e.g. a Buildroot or Nerves image): the generation is judged from the kernel module in hailo.driver_binding")
        }
        Err(e) => return Finding::new(id, Status::Error, format!("cannot read the package database: {e}")),
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
        (true, true) => {
            f.status = Status::Warn;
            f.summary = format!(
                "no HailoRT package is installed (dpkg); the {chip} needs the {expected}.x line"
            );
            f = f.remedy(gen_remedy(ctx));
        }
        (false, false) => {
            f.status = Status::Fail;
            f.summary = format!(
                "HailoRT lines are mixed: {} next to {}; the {chip} needs {expected}.x only",
                wrong.join(", "),
                right.join(", ")
            );
            f = f.remedy(gen_remedy(ctx));
        }
        (true, false) => {
            f.status = Status::Fail;
            f.summary = format!(
                "the wrong HailoRT line is installed for the {chip}: {}; it needs {expected}.x",
                wrong.join(", ")
            );
            f = f.remedy(gen_remedy(ctx));
        }
    }
    if f.status != Status::Pass {
        let hits: Vec<_> = ctx
            .logs
            .host(|e| {
                matches!(
                    e,
                    LogEvent::HailoStatus { code: 74 } | LogEvent::HailoLibraryMissing { .. }
                )
            })
            .map(|(h, _)| h)
            .collect();
        f = f.with_hits(hits);
    }
    f
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
    let remedy = "HailoRT needs driver == library exactly (major.minor.revision): install the driver and runtime of one release (or the host driver that matches the container's libhailort) and hold them: sudo apt-mark hold the Hailo packages";
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
        .remedy(remedy)
        .with_hits(logged.iter().map(|(h, _)| *h));
        f.push_evidence(&hit.file, hit.line_no(), &hit.text);
        if let Some((p, v)) = &driver {
            f = f.evidence(p, None, &v.to_string());
        }
        return f;
    }
    match (driver, library) {
        (Some((dp, dv)), Some((lp, lv))) => {
            let f = Finding::new(id, Status::Pass, format!("driver {dv} == libhailort {lv}"))
                .observed("driver_version", dv.to_string())
                .observed("library_version", lv.to_string())
                .expected("library_version", dv.to_string())
                .evidence(&dp, None, &dv.to_string())
                .evidence(&lp, None, &lv.to_string());
            if dv == lv {
                f
            } else {
                let mut f = f;
                f.status = Status::Fail;
                f.summary = format!("kernel driver {dv} != libhailort {lv}: HailoRT refuses to open the device (HAILO_INVALID_DRIVER_VERSION)");
                let hits: Vec<_> = ctx
                    .logs
                    .host(|e| matches!(e, LogEvent::HailoStatus { code: 76 }))
                    .map(|(h, _)| h)
                    .collect();
                f.with_hits(hits).remedy(remedy)
            }
        }
        (None, _) => Finding::skip(
            id,
            "kernel driver version unknown (no /sys/module/hailo*_pci/version)",
        ),
        (_, None) => Finding::skip(
            id,
            "libhailort version unknown (no libhailort.so.X.Y.Z and no HailoRT runtime package)",
        ),
    }
}
