//! The typed remedy of a wrong HailoRT line: purge the other line's packages that dpkg shows
//! installed, install the chip's metapackage (keeping the runtime at the bound driver's version
//! when the two agree), reboot. Offered only where dpkg manages the runtime; elsewhere the text
//! says how this board changes its software and there is no automatic fix.

use super::*;
use crate::model::remedy::{PackageSpec, Remedy, Step};

/// Sets the remedy that brings the board to the chip's HailoRT line: the package swap as steps
/// where dpkg manages the runtime and its database was read, else the text for this board.
pub(super) fn with_gen_remedy(ctx: &Ctx<'_>, f: Finding) -> Finding {
    match gen_fix(ctx) {
        Some(fix) => f.with_fix(fix),
        None => f.remedy(gen_remedy(ctx)),
    }
}

/// The package swap as steps, or `None` when dpkg does not manage the runtime (a container, a
/// source build, an appliance OS), its database was not read, or the profile names no
/// metapackage for the chip's line.
pub(super) fn gen_fix(ctx: &Ctx<'_>) -> Option<Remedy> {
    let want = ctx.profile.npu.generation?;
    if !ctx.stack.runtime_is_package() {
        return None;
    }
    let pkgs = ctx.snap.dpkg.as_ref().ok()?;
    let meta = ctx
        .profile
        .packages
        .metapackages
        .iter()
        .find(|(_, g)| **g == want)
        .map(|(name, _)| name.clone())?;
    let mut purge: Vec<String> = Vec::new();
    for p in pkgs.iter().filter(|p| p.is_installed()) {
        let other = package_gen(ctx, &p.name, &p.version).is_some_and(|g| g != want);
        if other && !purge.contains(&p.name) {
            purge.push(p.name.clone());
        }
    }
    let mut install = vec![
        PackageSpec {
            name: "dkms".into(),
            version: None,
        },
        PackageSpec {
            name: meta,
            version: None,
        },
    ];
    install.extend(kept_runtime(ctx, want));
    let mut steps = Vec::new();
    if !purge.is_empty() {
        steps.push(Step::PackageRemove {
            packages: purge,
            purge: true,
        });
    }
    steps.push(Step::PackageInstall { packages: install });
    steps.push(Step::RebootNeeded);
    Some(Remedy::of(steps).with_note(format!(
        "the {} needs the HailoRT {want}.x line only",
        ctx.profile.npu.chip
    )))
}

/// The right line's runtime package pinned at its installed version, when that version is the
/// bound driver's (HailoRT needs driver == library exactly, and the metapackage's candidate may
/// be a newer release than the driver).
fn kept_runtime(ctx: &Ctx<'_>, want: u32) -> Option<PackageSpec> {
    let pkgs = ctx.snap.dpkg.as_ref().ok()?;
    let driver = ctx
        .profile
        .npu
        .modules
        .iter()
        .find_map(|m| module_version(ctx, m))
        .map(|(_, v)| v)?;
    let lib = ctx.profile.packages.library.iter().find_map(|name| {
        pkgs.iter().find(|p| {
            &p.name == name
                && p.is_installed()
                && package_gen(ctx, &p.name, &p.version) == Some(want)
        })
    })?;
    (Version::parse_loose(&lib.version).as_ref() == Some(&driver)).then(|| PackageSpec {
        name: lib.name.clone(),
        version: Some(lib.version.clone()),
    })
}

#[cfg(test)]
mod tests {
    use crate::check::testkit::{one, Board};
    use crate::model::remedy::{PackageSpec, Step};
    use crate::model::Status;

    #[test]
    fn a_mixed_userland_plans_the_swap_from_what_dpkg_shows() {
        let mixed = Board::new()
            .os("debian", "Debian GNU/Linux 12 (bookworm)")
            .pci(0x1e60, 0x45c4, Some("hailo1x"))
            .module("hailo1x_pci", Some("5.1.1"))
            .package("hailo-all", "4.20.0+1")
            .package("python3-hailort", "4.20.0-1")
            .package("h10-hailort", "5.1.1")
            .build();
        let f = one("rpi5-hailo10h", &mixed, "hailo.package_generation");
        assert_eq!(f.status, Status::Fail, "{}", f.summary);
        let fix = f.fix.expect("a typed fix");
        assert_eq!(
            fix.steps,
            vec![
                Step::PackageRemove {
                    packages: vec!["hailo-all".into(), "python3-hailort".into()],
                    purge: true
                },
                Step::PackageInstall {
                    packages: vec![
                        PackageSpec {
                            name: "dkms".into(),
                            version: None
                        },
                        PackageSpec {
                            name: "hailo-h10-all".into(),
                            version: None
                        },
                        PackageSpec {
                            name: "h10-hailort".into(),
                            version: Some("5.1.1".into())
                        },
                    ]
                },
                Step::RebootNeeded,
            ]
        );
        assert_eq!(
            f.remedy,
            "the Hailo-10H needs the HailoRT 5.x line only: sudo apt-get purge hailo-all python3-hailort; then sudo apt-get install dkms hailo-h10-all h10-hailort=5.1.1; then sudo reboot"
        );
    }

    #[test]
    fn no_package_steps_where_dpkg_does_not_manage_the_runtime() {
        // A source build in /usr/local/lib of the other line: the text says rebuild, no fix.
        let source = Board::new()
            .os("ubuntu", "Ubuntu 24.04 LTS")
            .package("bash", "5.2.21-2")
            .pci(0x1e60, 0x45c4, Some("hailo1x"))
            .library("/usr/local/lib/libhailort.so.4.20.0")
            .build();
        let f = one("rpi5-hailo10h", &source, "hailo.package_generation");
        assert_eq!(f.status, Status::Fail, "{}", f.summary);
        assert!(f.fix.is_none(), "{:?}", f.fix);
        assert!(!f.remedy.contains("apt-get "), "{}", f.remedy);
        assert!(f.remedy.contains("rebuild the runtime"), "{}", f.remedy);
        // Home Assistant OS: no dpkg at all.
        let haos = Board::new()
            .os("haos", "Home Assistant OS 15.0")
            .pci(0x1e60, 0x2864, Some("hailo1x"))
            .build();
        let f = one("rpi5-hailo8", &haos, "hailo.driver_binding");
        assert_eq!(f.status, Status::Fail, "{}", f.summary);
        assert!(f.fix.is_none(), "{:?}", f.fix);
    }
}
