//! The HailoRT runtime library check.

use super::*;
use crate::model::remedy::{PackageSpec, Remedy, Step};

/// What the runtime scan found.
#[derive(Default)]
struct RuntimeScan {
    /// Sentences for the fail summary.
    missing: Vec<String>,
    /// `package=version` pins that would make the release set whole.
    set_mismatch: Vec<String>,
    /// Some source (a binary, a log line, the package set) could be judged.
    judged: bool,
}

pub(super) fn runtime_library(ctx: &Ctx<'_>) -> Finding {
    let libs: Vec<&str> = ctx
        .snap
        .libraries
        .iter()
        .map(|p| p.rsplit('/').next().unwrap_or(p))
        .collect();
    let mut f = Finding::new("hailo.runtime_library", Status::Pass, "");
    let mut s = RuntimeScan::default();
    scan_binaries(ctx, &libs, &mut f, &mut s);
    scan_load_errors(ctx, &mut f, &mut s);
    scan_genai(ctx, &mut f, &mut s);
    scan_release_set(ctx, &mut f, &mut s);
    verdict(ctx, f, s, &libs)
}

/// Binaries whose `NEEDED` libhailort is not installed.
fn scan_binaries(ctx: &Ctx<'_>, libs: &[&str], f: &mut Finding, s: &mut RuntimeScan) {
    for b in &ctx.snap.binaries {
        match &b.needed {
            Ok(needed) => {
                s.judged = true;
                for n in needed.iter().filter(|n| n.starts_with("libhailort.so")) {
                    if !libs.iter().any(|l| l == n) {
                        s.missing
                            .push(format!("{} needs {n}, which is not installed", b.path));
                        f.push_evidence(&b.path, None, &format!("NEEDED {n}"));
                    }
                }
            }
            Err(e) => {
                f.push_evidence(&b.path, None, &e.to_string());
            }
        }
    }
}

/// Log lines of a libhailort that could not be loaded.
fn scan_load_errors(ctx: &Ctx<'_>, f: &mut Finding, s: &mut RuntimeScan) {
    for (hit, ev) in ctx
        .logs
        .host(|e| matches!(e, LogEvent::HailoLibraryMissing { .. }))
    {
        if let LogEvent::HailoLibraryMissing { soname } = ev {
            s.judged = true;
            let m = format!("{soname} could not be loaded ({})", hit.file);
            if !s.missing.contains(&m) {
                s.missing.push(m);
            }
            f.push_evidence(&hit.file, hit.line_no(), &hit.text);
        }
    }
}

/// A GenAI package whose only HailoRT runtime is of the other generation.
fn scan_genai(ctx: &Ctx<'_>, f: &mut Finding, s: &mut RuntimeScan) {
    // GenAI (hailo-ollama) depends on `hailort`, which can resolve to the Hailo-8 runtime (#194).
    if let (Ok(pkgs), Some(gen)) = (&ctx.snap.dpkg, ctx.profile.npu.generation) {
        for g in &ctx.profile.packages.genai {
            if pkgs.iter().any(|p| &p.name == g && p.is_installed()) {
                s.judged = true;
                let runtimes: Vec<_> = pkgs
                    .iter()
                    .filter(|p| p.is_installed() && ctx.profile.packages.library.contains(&p.name))
                    .collect();
                if !runtimes.is_empty()
                    && runtimes
                        .iter()
                        .all(|p| Version::parse_loose(&p.version).is_some_and(|v| v.major != gen))
                {
                    s.missing.push(format!(
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
}

/// Packages of one release set whose version differs from the runtime package.
fn scan_release_set(ctx: &Ctx<'_>, f: &mut Finding, s: &mut RuntimeScan) {
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
            s.judged = true;
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
                    s.missing.push(format!(
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
                    s.set_mismatch.push(format!("{}={}", p.name, rt.version));
                }
            }
        }
    }
}

/// Installs the runtime's release of every package out of the set (`name=version`) and holds
/// them, so an upgrade does not split the set again.
fn one_release_fix(set_mismatch: &[String]) -> Remedy {
    let packages: Vec<PackageSpec> = set_mismatch
        .iter()
        .map(|s| match s.split_once('=') {
            Some((name, v)) => PackageSpec {
                name: name.into(),
                version: Some(v.into()),
            },
            None => PackageSpec {
                name: s.clone(),
                version: None,
            },
        })
        .collect();
    let names = packages.iter().map(|p| p.name.clone()).collect();
    Remedy::of(vec![
        Step::PackageInstall { packages },
        Step::PackageHold { packages: names },
    ])
    .with_note("install one release of the whole set, the runtime's (or upgrade the runtime, driver and firmware to the newer release together once it is published)")
}

/// `fail` when anything is missing or out of the release set, `skip` when nothing could be
/// judged, else `pass`.
fn verdict(ctx: &Ctx<'_>, mut f: Finding, s: RuntimeScan, libs: &[&str]) -> Finding {
    let id = "hailo.runtime_library";
    let RuntimeScan {
        missing,
        set_mismatch,
        judged,
    } = s;
    f = f.observed("libraries", ctx.snap.libraries.clone());
    if !missing.is_empty() {
        if !set_mismatch.is_empty() {
            f.status = Status::Fail;
            f.summary = format!(
                "the Hailo packages are not one release: {}",
                missing.join("; ")
            );
            return f
                .observed("missing", missing)
                .with_fix(one_release_fix(&set_mismatch));
        }
        f.status = Status::Fail;
        f.summary = format!(
            "a Hailo program cannot load its runtime: {}",
            missing.join("; ")
        );
        return with_gen_remedy(ctx, f.observed("missing", missing));
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
    // No dpkg on an OS without it (os-release in /etc says so) is not a blind spot.
    if ctx.snap.dpkg.is_ok() || !ctx.snap.unseen("/etc") {
        return f;
    }
    crate::check::unseen::unless_unseen(ctx, f, "/var/lib/dpkg", "the Hailo packages cannot be listed, and the verdict needs them to tell whether they are one release")
}
