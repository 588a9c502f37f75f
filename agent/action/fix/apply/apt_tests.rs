use super::*;

/// `apt-get -s install hailo-h10-all=5.1.1` on a Pi with hailo-all 4.23 (apt 2.6), plus an
/// upgrade line and an arm64-qualified one as apt prints them.
const SWAP: &str = "Reading package lists...\nBuilding dependency tree...\nThe following packages will be REMOVED:\n  hailo-all hailort\nRemv hailo-all [4.23.0]\nPurg hailort [4.23.0]\nInst h10-hailort (5.1.1 localhost [all])\nInst hailo-h10-all (5.1.1 Raspberry Pi Foundation:stable [arm64])\nInst libc6:arm64 [2.36-9] (2.36-9+deb12u4 Debian:12.5/stable [arm64]) []\nConf h10-hailort (5.1.1 localhost [all])\nConf hailo-h10-all (5.1.1 localhost [all])\n";

fn spec(name: &str, v: &str) -> PackageSpec {
    PackageSpec {
        name: name.into(),
        version: Some(v.into()),
    }
}

#[test]
fn simulation_lines_are_read() {
    let s = parse_simulation(SWAP).unwrap();
    assert_eq!(
        s.removals,
        [
            SimRemoval {
                name: "hailo-all".into(),
                version: "4.23.0".into(),
                purge: false
            },
            SimRemoval {
                name: "hailort".into(),
                version: "4.23.0".into(),
                purge: true
            }
        ]
    );
    assert_eq!(s.installs.len(), 3);
    assert_eq!(s.installs[1].name, "hailo-h10-all");
    assert_eq!(s.installs[1].new, "5.1.1");
    assert_eq!(s.installs[1].old, None);
    assert_eq!(s.installs[2].name, "libc6");
    assert_eq!(s.installs[2].old.as_deref(), Some("2.36-9"));
    assert_eq!(s.installs[2].new, "2.36-9+deb12u4");
    assert_eq!(parse_simulation("").unwrap(), Simulation::default());
    assert_eq!(
        parse_simulation("garbage\n\u{1b}[2J\nInst").unwrap(),
        Simulation::default()
    );
    assert!(parse_simulation("Inst broken no-version-here\n").is_err());
}

#[test]
fn the_simulation_is_held_to_the_plan() {
    let mut sim = parse_simulation(SWAP).unwrap();
    sim.installs.pop(); // without the libc6 upgrade
    let plan = PlanPackages {
        install: vec![spec("hailo-h10-all", "5.1.1")],
        remove: vec!["hailo-all".into(), "hailort".into()],
    };
    let deps = check_simulation(&sim, &plan).unwrap();
    assert_eq!(deps.len(), 1);
    assert_eq!(deps[0].name, "h10-hailort");
    // A removal outside the plan is named.
    let narrow = PlanPackages {
        remove: vec!["hailo-all".into()],
        ..plan.clone()
    };
    let e = check_simulation(&sim, &narrow).unwrap_err();
    assert!(e.contains("removes hailort 4.23.0"), "{e}");
    // An upgrade of something the plan does not name, and another version than planned.
    let full = parse_simulation(SWAP).unwrap();
    let e = check_simulation(&full, &plan).unwrap_err();
    assert!(
        e.contains("changes libc6 from 2.36-9 to 2.36-9+deb12u4"),
        "{e}"
    );
    let other = PlanPackages {
        install: vec![spec("hailo-h10-all", "5.2.0")],
        ..plan
    };
    let e = check_simulation(&sim, &other).unwrap_err();
    assert!(
        e.contains("installs hailo-h10-all 5.1.1 instead of 5.2.0"),
        "{e}"
    );
}

#[test]
fn arguments_and_names() {
    let steps = vec![
        Step::PackageRemove {
            packages: vec!["hailo-all".into()],
            purge: true,
        },
        Step::PackageInstall {
            packages: vec![spec("hailo-h10-all", "5.1.1")],
        },
    ];
    assert_eq!(
        plan_args(&steps).unwrap().join(" "),
        "-s --no-install-recommends --purge install -- hailo-h10-all=5.1.1 hailo-all-"
    );
    assert_eq!(
        step_args(&steps[0], false).unwrap().join(" "),
        "-y -o Dpkg::Options::=--force-confold -o Dpkg::Options::=--force-confdef --no-install-recommends purge -- hailo-all"
    );
    assert!(step_args(&Step::DaemonReload, true).is_none());
    assert!(plan_args(&[Step::DaemonReload]).is_none());
    validate(&steps).unwrap();
    for bad in ["-o", "", "Hailo", "a b", "x;rm"] {
        assert!(package_name(bad).is_err(), "{bad}");
    }
    let bad_version = vec![Step::PackageInstall {
        packages: vec![spec("x", "1 2")],
    }];
    assert!(validate(&bad_version).is_err());
}

#[test]
fn the_log_keeps_head_and_tail() {
    let mut log = BoundedLog::new();
    for i in 0..20_000 {
        log.push(&format!("line {i:05}"));
    }
    let (text, dropped) = log.finish();
    assert!(text.len() <= LOG_KEEP_BYTES + 64, "{}", text.len());
    assert!(dropped > 0);
    assert!(text.starts_with("line 00000\n"));
    assert!(text.ends_with("line 19999\n"));
    assert!(text.contains("bytes left out"));
}
