//! `hailo.package_generation`, `hailo.version_mismatch` and `hailo.runtime_library`: which
//! HailoRT generation and versions the board runs, and whether they fit the device and driver.

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

pub(super) fn runtime_library(ctx: &Ctx<'_>) -> Finding {
    let id = "hailo.runtime_library";
    let libs: Vec<&str> = ctx
        .snap
        .libraries
        .iter()
        .map(|p| p.rsplit('/').next().unwrap_or(p))
        .collect();
    let mut f = Finding::new(id, Status::Pass, "");
    let mut missing = Vec::new();
    let mut set_mismatch: Vec<String> = Vec::new();
    let mut judged = false;
    for b in &ctx.snap.binaries {
        match &b.needed {
            Ok(needed) => {
                judged = true;
                for n in needed.iter().filter(|n| n.starts_with("libhailort.so")) {
                    if !libs.iter().any(|l| l == n) {
                        missing.push(format!("{} needs {n}, which is not installed", b.path));
                        f.push_evidence(&b.path, None, &format!("NEEDED {n}"));
                    }
                }
            }
            Err(e) => {
                f.push_evidence(&b.path, None, &e.to_string());
            }
        }
    }
    for (hit, ev) in ctx
        .logs
        .host(|e| matches!(e, LogEvent::HailoLibraryMissing { .. }))
    {
        if let LogEvent::HailoLibraryMissing { soname } = ev {
            judged = true;
            let m = format!("{soname} could not be loaded ({})", hit.file);
            if !missing.contains(&m) {
                missing.push(m);
            }
            f.push_evidence(&hit.file, hit.line_no(), &hit.text);
        }
    }
    // GenAI (hailo-ollama) depends on `hailort`, which can resolve to the Hailo-8 runtime (#194).
    if let (Ok(pkgs), Some(gen)) = (&ctx.snap.dpkg, ctx.profile.npu.generation) {
        for g in &ctx.profile.packages.genai {
            if pkgs.iter().any(|p| &p.name == g && p.is_installed()) {
                judged = true;
                let runtimes: Vec<_> = pkgs
                    .iter()
                    .filter(|p| p.is_installed() && ctx.profile.packages.library.contains(&p.name))
                    .collect();
                if !runtimes.is_empty()
                    && runtimes
                        .iter()
                        .all(|p| Version::parse_loose(&p.version).is_some_and(|v| v.major != gen))
                {
                    missing.push(format!(
                        "{g} is installed but the only HailoRT runtime is {} {}",
                        runtimes[0].name, runtimes[0].version
                    ));
                    f.push_evidence(
                        "/var/lib/dpkg/status",
                        Some(runtimes[0].line),
                        &format!("Package: {}", runtimes[0].name),
                    );
                }
            }
        }
    }
    // Packages of one release set against the runtime package.
    if let Ok(pkgs) = &ctx.snap.dpkg {
        let spec = &ctx.profile.packages;
        let installed = |name: &str| pkgs.iter().find(|p| p.name == name && p.is_installed());
        let gen = ctx.profile.npu.generation;
        let runtime = spec
            .library
            .iter()
            .filter_map(|n| installed(n))
            .filter_map(|p| Version::parse_loose(&p.version).map(|v| (p, v)))
            .find(|(_, v)| gen.is_none_or(|g| v.major == g));
        if let Some((rt, rv)) = runtime {
            judged = true;
            for name in spec.same_version.iter().chain(&spec.same_minor) {
                if *name == rt.name {
                    continue;
                }
                let Some(p) = installed(name) else { continue };
                let Some(v) = Version::parse_loose(&p.version) else {
                    continue;
                };
                let minor_only = spec.same_minor.contains(name);
                let differs = if minor_only {
                    v.major == rv.major && (v.major, v.minor) != (rv.major, rv.minor)
                } else {
                    v.major == rv.major && v != rv
                };
                if differs {
                    missing.push(format!(
                        "{} {} belongs to the HailoRT {} release but the runtime is {} {}",
                        p.name,
                        p.version,
                        if minor_only {
                            format!("{}.{}", v.major, v.minor)
                        } else {
                            v.to_string()
                        },
                        rt.name,
                        rt.version
                    ));
                    f.push_evidence(
                        "/var/lib/dpkg/status",
                        Some(p.line),
                        &format!("Package: {} / Version: {}", p.name, p.version),
                    );
                    set_mismatch.push(format!("{}={}", p.name, rt.version));
                }
            }
        }
    }
    f = f.observed("libraries", ctx.snap.libraries.clone());
    if !missing.is_empty() {
        if !set_mismatch.is_empty() {
            f.status = Status::Fail;
            f.summary = format!(
                "the Hailo packages are not one release: {}",
                missing.join("; ")
            );
            return f.observed("missing", missing).remedy(format!(
                "install one release of the whole set — the runtime's: sudo apt install {} && sudo apt-mark hold {} (or upgrade the runtime, driver and firmware to the newer release together once it is published)",
                set_mismatch.join(" "),
                set_mismatch
                    .iter()
                    .map(|s| s.split('=').next().unwrap_or(""))
                    .collect::<Vec<_>>()
                    .join(" ")
            ));
        }
        f.status = Status::Fail;
        f.summary = format!(
            "a Hailo program cannot load its runtime: {}",
            missing.join("; ")
        );
        return f.observed("missing", missing).remedy(gen_remedy(ctx));
    }
    if !judged && libs.is_empty() {
        return Finding::skip(
            id,
            "no libhailort.so.* and no Hailo runtime binary found to check",
        );
    }
    f.summary = if libs.is_empty() {
        "every Hailo binary's libhailort is present".into()
    } else {
        format!("installed: {}", libs.join(", "))
    };
    f
}

pub(super) fn glob_match(pattern: &str, name: &str) -> bool {
    match pattern.split_once('*') {
        None => pattern == name,
        Some((pre, suf)) => {
            name.len() >= pre.len() + suf.len() && name.starts_with(pre) && name.ends_with(suf)
        }
    }
}
