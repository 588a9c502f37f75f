use super::*;
use crate::check::testkit::{profile, Board};

fn finding(id: &str, status: Status, remedy: &str) -> Finding {
    Finding::new(id, status, format!("{id} summary")).remedy(remedy)
}

fn drop_in(unit: &str) -> Remedy {
    Remedy::of(vec![
        Step::UnitDropIn {
            unit: unit.into(),
            file: "zz-npu-agent-nofile.conf".into(),
            section: "Service".into(),
            settings: vec![("LimitNOFILE".into(), "65536".into())],
        },
        Step::DaemonReload,
        Step::RestartUnit { unit: unit.into() },
    ])
    .with_note("raise the service's open-file limit")
}

fn swap() -> Remedy {
    Remedy::of(vec![
        Step::PackageRemove {
            packages: vec!["hailo-all".into(), "python3-hailort".into()],
            purge: true,
        },
        Step::PackageInstall {
            packages: vec![
                PackageSpec {
                    name: "hailo-h10-all".into(),
                    version: None,
                },
                PackageSpec {
                    name: "h10-hailort".into(),
                    version: Some("5.1.1".into()),
                },
            ],
        },
        Step::RebootNeeded,
    ])
    .with_note("the Hailo-10H needs the HailoRT 5.x line only")
}

/// The findings of one made-up diagnosis: two with the same swap, a drop-in, advice, a rewritten
/// remedy, one without a remedy and a passing check.
fn findings() -> Vec<Finding> {
    vec![
        Finding::new("board.identity", Status::Pass, "a Pi 5"),
        Finding::new("hailo.package_generation", Status::Fail, "mixed").with_fix(swap()),
        Finding::new("hailo.runtime_library", Status::Fail, "mixed too").with_fix(swap()),
        Finding::new("limits.nofile", Status::Warn, "1024").with_fix(drop_in("rkllm.service")),
        finding(
            "hailo.version_mismatch",
            Status::Fail,
            "update the Frigate add-on to a build that bundles HailoRT 4.20.1",
        ),
        finding(
            "limits.memlock",
            Status::Warn,
            "raise the limit in the script or supervisor that starts the workload (the usual fix names `systemctl`, which Home Assistant OS 15.0 does not have)",
        ),
        finding("npu.workload", Status::Info, ""),
    ]
}

#[test]
fn every_fired_finding_gets_steps_or_the_reason_it_has_none() {
    let p = plan(&findings(), &[]);
    let got: Vec<(&str, &Outcome)> = p
        .entries
        .iter()
        .map(|e| (e.check.as_str(), &e.outcome))
        .collect();
    let no_fix = |reason: NoFix, advice: &str| Outcome::NoFix {
        reason,
        advice: advice.into(),
    };
    let f = findings();
    assert_eq!(
        got,
        vec![
            (
                "hailo.package_generation",
                &Outcome::Steps { remedy: swap() }
            ),
            (
                "hailo.runtime_library",
                &Outcome::SameAs {
                    check: "hailo.package_generation".into()
                }
            ),
            (
                "limits.nofile",
                &Outcome::Steps {
                    remedy: drop_in("rkllm.service")
                }
            ),
            (
                "hailo.version_mismatch",
                &no_fix(NoFix::AdviceOnly, &f[4].remedy)
            ),
            (
                "limits.memlock",
                &no_fix(
                    NoFix::ToolMissing {
                        tool: "systemctl".into()
                    },
                    &f[5].remedy
                )
            ),
            ("npu.workload", &no_fix(NoFix::NoRemedy, "")),
        ]
    );
    assert!(p.has_steps());
    // The repeated swap is counted once.
    assert_eq!(p.steps().count(), 6);
}

#[test]
fn named_checks_are_planned_whatever_their_status() {
    let only = vec![
        "board.identity".to_string(),
        "limits.nofile".into(),
        "limits.nofile".into(),
        "hailo.no_such_check".into(),
    ];
    let p = plan(&findings(), &only);
    let got: Vec<(&str, &Outcome)> = p
        .entries
        .iter()
        .map(|e| (e.check.as_str(), &e.outcome))
        .collect();
    assert_eq!(got.len(), 3, "{got:?}");
    assert_eq!(
        got[0].1,
        &Outcome::NoFix {
            reason: NoFix::NotFiring,
            advice: String::new()
        }
    );
    assert!(matches!(got[1], ("limits.nofile", Outcome::Steps { .. })));
    assert_eq!(
        got[2],
        (
            "hailo.no_such_check",
            &Outcome::NoFix {
                reason: NoFix::UnknownCheck,
                advice: String::new()
            }
        )
    );
    // Only the named fix's changes.
    assert!(p.changes.install.is_empty(), "{:?}", p.changes);
    assert_eq!(p.changes.restart, vec!["rkllm.service".to_string()]);
}

#[test]
fn the_changes_add_up_each_once() {
    let c = plan(&findings(), &[]).changes;
    assert_eq!(
        c.purge,
        vec!["hailo-all".to_string(), "python3-hailort".into()]
    );
    assert!(c.remove.is_empty());
    assert_eq!(
        c.install
            .iter()
            .map(PackageSpec::apt_arg)
            .collect::<Vec<_>>(),
        vec!["hailo-h10-all", "h10-hailort=5.1.1"]
    );
    assert_eq!(
        c.files,
        vec![FileChange {
            path: "/etc/systemd/system/rkllm.service.d/zz-npu-agent-nofile.conf".into(),
            lines: vec!["[Service]".into(), "LimitNOFILE=65536".into()],
        }]
    );
    assert!(c.daemon_reload);
    assert_eq!(c.restart, vec!["rkllm.service".to_string()]);
    assert!(c.reboot_needed);
    // Nothing fires: an empty plan, no steps.
    let quiet = plan(&findings()[..1], &[]);
    assert!(quiet.entries.is_empty() && !quiet.has_steps());
    assert!(!quiet.changes.reboot_needed);
    assert_eq!(quiet.render(), "Nothing to fix: no check fires.\n");
}

#[test]
fn each_file_step_names_its_file_and_lines() {
    let cases = [
        (
            Step::ModuleOption {
                module: "hailo_pci".into(),
                file: "hailo_pci.conf".into(),
                key: "force_desc_page_size".into(),
                value: "4096".into(),
            },
            "/etc/modprobe.d/hailo_pci.conf",
            "options hailo_pci force_desc_page_size=4096",
        ),
        (
            Step::Sysctl {
                key: "kernel.numa_balancing".into(),
                value: "0".into(),
                file: "99-npu-agent-numa-balancing.conf".into(),
            },
            "/etc/sysctl.d/99-npu-agent-numa-balancing.conf",
            "kernel.numa_balancing = 0",
        ),
        (
            Step::BootKey {
                file: "/boot/firmware/config.txt".into(),
                key: "dtparam".into(),
                value: "pciex1_gen=2".into(),
            },
            "/boot/firmware/config.txt",
            "dtparam=pciex1_gen=2",
        ),
    ];
    for (step, path, line) in cases {
        let fc = file_lines(&step).expect("a file step");
        assert_eq!(fc.path, path);
        assert_eq!(fc.lines, vec![line.to_string()]);
    }
    assert_eq!(file_lines(&Step::DaemonReload), None);
    assert_eq!(file_lines(&Step::RebootNeeded), None);
}

#[test]
fn the_plan_reads_for_a_person() {
    let text = plan(&findings(), &[]).render();
    let want = "\
Fix plan (3 finding(s) with steps):

hailo.package_generation (fail): mixed
  the Hailo-10H needs the HailoRT 5.x line only
  1. purge (with their configuration files) packages: hailo-all, python3-hailort
  2. install packages: hailo-h10-all (candidate version), h10-hailort=5.1.1
  3. reboot needed: the steps above take effect after it

hailo.runtime_library (fail): mixed too
  the same steps as hailo.package_generation

limits.nofile (warn): 1024
  raise the service's open-file limit
  1. drop-in for rkllm.service, write /etc/systemd/system/rkllm.service.d/zz-npu-agent-nofile.conf:
        [Service]
        LimitNOFILE=65536
  2. reload systemd's units (systemctl daemon-reload)
  3. restart rkllm.service

No automatic fix:
- hailo.version_mismatch (fail): hailo.version_mismatch summary
  why: the remedy is advice for a person, not steps the agent runs
  what to do: update the Frigate add-on to a build that bundles HailoRT 4.20.1
";
    assert!(text.starts_with(want), "{text}");
    assert!(
        text.contains("  why: the usual fix needs `systemctl`, which this board does not have\n"),
        "{text}"
    );
    assert!(
        text.contains(
            "- npu.workload (info): npu.workload summary\n  why: the finding has no remedy\n"
        ),
        "{text}"
    );
    let tail = "
In all:
  packages to purge: hailo-all, python3-hailort
  packages to install: hailo-h10-all (candidate version), h10-hailort=5.1.1
  file /etc/systemd/system/rkllm.service.d/zz-npu-agent-nofile.conf gets:
      [Service]
      LimitNOFILE=65536
  systemd reloads its units
  units to restart: rkllm.service
  reboot needed: yes
";
    assert!(text.ends_with(tail), "{text}");
}

#[test]
fn the_plan_round_trips_as_json() {
    let p = plan(&findings(), &["limits.memlock".to_string()]);
    let json = serde_json::to_string(&p).unwrap();
    assert!(
        json.contains(r#""reason":"tool_missing","tool":"systemctl""#),
        "{json}"
    );
    let back: FixPlan = serde_json::from_str(&json).unwrap();
    assert_eq!(back, p);
    let full = plan(&findings(), &[]);
    let json = serde_json::to_value(&full).unwrap();
    assert_eq!(json["entries"][0]["outcome"]["kind"], "steps");
    assert_eq!(
        json["entries"][0]["outcome"]["remedy"]["steps"][0]["kind"],
        "package_remove"
    );
    assert_eq!(json["changes"]["reboot_needed"], true);
}

/// From the real checks: the mixed 10H userland plans the swap once for both findings; on Home
/// Assistant OS the same chip fault has no automatic fix and no package step.
#[test]
fn the_checks_plan_the_swap_only_where_dpkg_manages_the_runtime() {
    let mixed = Board::new()
        .os("debian", "Debian GNU/Linux 12 (bookworm)")
        .pci(0x1e60, 0x45c4, Some("hailo1x"))
        .module("hailo1x_pci", Some("5.1.1"))
        .package("hailo-all", "4.20.0+1")
        .package("python3-hailort", "4.20.0-1")
        .package("h10-hailort", "5.1.1")
        .build();
    let findings = crate::check::run_all(&profile("rpi5-hailo10h"), &mixed, "test", false);
    let p = plan(&findings, &["hailo.package_generation".to_string()]);
    assert_eq!(
        p.changes.purge,
        vec!["hailo-all".to_string(), "python3-hailort".into()]
    );
    assert!(p.changes.install.iter().any(|s| s.name == "hailo-h10-all"));
    assert!(p.changes.reboot_needed);
    let haos = Board::new()
        .os("haos", "Home Assistant OS 15.0")
        .pci(0x1e60, 0x2864, Some("hailo1x"))
        .build();
    let findings = crate::check::run_all(&profile("rpi5-hailo8"), &haos, "test", false);
    let p = plan(&findings, &[]);
    let e = p
        .entries
        .iter()
        .find(|e| e.check == "hailo.driver_binding")
        .expect("planned");
    assert!(
        matches!(&e.outcome, Outcome::NoFix { reason: NoFix::AdviceOnly, advice } if advice.contains("add-on")),
        "{:?}",
        e.outcome
    );
    assert!(
        p.steps().all(|(_, s)| s.tool() != Some("apt-get")),
        "{:?}",
        p.entries
    );
}
