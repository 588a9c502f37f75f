use super::*;
use crate::check::testkit::{one, profile, Board};
use crate::model::Status;

fn stack_of(profile_id: &str, b: Board) -> Stack {
    Stack::derive(&profile(profile_id), &b.build())
}

#[test]
fn os_families_and_their_tools() {
    let haos = stack_of(
        "rpi5-hailo8",
        Board::new().os("haos", "Home Assistant OS 15.0"),
    );
    assert_eq!(haos.os, OsKind::HomeAssistantOs);
    assert_eq!(haos.dpkg, Some(false));
    assert_eq!(haos.driver, DriverOrigin::OsImage);
    assert!(matches!(haos.runtime, RuntimeOrigin::Container { .. }));
    assert_eq!(haos.missing_tool("sudo apt install hailo-all"), Some("apt"));
    assert_eq!(haos.reboot_cmd(), "ha host reboot");
    let ubuntu = stack_of("rpi5-hailo8", Board::new().os("ubuntu", "Ubuntu 24.04 LTS"));
    assert_eq!(ubuntu.os, OsKind::Ubuntu);
    assert_eq!(ubuntu.dpkg, Some(true));
    assert_eq!(ubuntu.missing_tool("sudo apt install hailo-all"), None);
    let unknown = stack_of("rpi5-hailo8", Board::new());
    assert_eq!(unknown.os, OsKind::Unknown);
    assert_eq!(unknown.dpkg, None);
    assert_eq!(unknown.runtime, RuntimeOrigin::Absent);
}

#[test]
fn runtime_origin_package_file_container() {
    let pkg = stack_of("rpi5-hailo8", Board::new().package("hailort", "4.20.0"));
    assert_eq!(
        pkg.runtime,
        RuntimeOrigin::Package {
            name: "hailort".into(),
            version: "4.20.0".into()
        }
    );
    assert!(pkg.runtime_is_package());
    let src = stack_of(
        "rpi5-hailo8",
        Board::new()
            .os("ubuntu", "Ubuntu 24.04 LTS")
            .library("/usr/local/lib/libhailort.so.4.20.0"),
    );
    assert!(
        matches!(&src.runtime, RuntimeOrigin::Unpackaged { path } if path.starts_with("/usr/local/lib"))
    );
    assert!(!src.runtime_is_package());
    assert!(src.runtime_update("4.20.0", "apt").contains("source tag"));
    let boxed = stack_of(
        "rpi5-hailo8",
        Board::new()
            .process(7, "frigate.detector", Some(1024), None)
            .in_container("docker"),
    );
    assert!(
        matches!(&boxed.runtime, RuntimeOrigin::Container { evidence, .. } if evidence == "/proc/7/cgroup")
    );
    let logged = stack_of(
        "rpi5-hailo8",
        Board::new().log(
            "/var/log/frigate.log",
            crate::model::LogClass::Workload,
            &["x"],
        ),
    );
    assert!(
        logged.runtime_text().contains("Frigate"),
        "{}",
        logged.runtime_text()
    );
}

#[test]
fn tool_names_match_whole_words() {
    assert!(names_tool("sudo apt install x", "apt "));
    assert!(!names_tool("sudo snapt install x", "apt "));
    assert!(!names_tool("use the-apt thing", "apt "));
    assert!(names_tool("then: systemctl restart x", "systemctl "));
}

#[test]
fn fitted_remedies_name_no_missing_tool() {
    // A Hailo-10H line on a Hailo-8 board asks for a package swap: on HAOS that is not apt.
    let b = Board::new()
        .os("haos", "Home Assistant OS 15.0")
        .pci(0x1e60, 0x2864, Some("hailo1x"));
    let f = one("rpi5-hailo8", &b.build(), "hailo.driver_binding");
    assert_eq!(f.status, Status::Fail, "{}", f.summary);
    assert!(!f.remedy.contains("apt "), "{}", f.remedy);
    assert!(!f.remedy.contains("sudo"), "{}", f.remedy);
    assert!(f.remedy.contains("add-on"), "{}", f.remedy);
    // A signature's or a generic remedy with apt is rewritten by the last guard.
    let stack = stack_of(
        "rpi5-hailo8",
        Board::new().os("haos", "Home Assistant OS 15.0"),
    );
    assert_eq!(
        stack.missing_tool("sudo apt install --reinstall hailofw"),
        Some("apt")
    );
    let b = Board::new()
        .os("haos", "Home Assistant OS 15.0")
        .pci(0x1e60, 0x2864, Some("hailo"))
        .log(
            "/var/log/kern.log",
            crate::model::LogClass::Kernel,
            &["hailo 0001:01:00.0: Firmware file not found (/lib/firmware/hailo/hailo8_fw.bin)"],
        );
    let f = one("rpi5-hailo8", &b.build(), "hailo.firmware");
    assert_eq!(f.status, Status::Fail, "{}", f.summary);
    assert_eq!(stack.missing_tool(&f.remedy), None, "{}", f.remedy);
    assert!(f.remedy.contains("Home Assistant OS 15.0"), "{}", f.remedy);
}

#[test]
fn a_rewritten_remedy_names_the_tool_it_lacked() {
    // A typed fix whose steps need systemctl, on an OS without units: text rewritten, fix gone.
    let b = Board::new()
        .os("haos", "Home Assistant OS 15.0")
        .process(11, "rkllm_server", Some(1024), None)
        .in_unit("rkllm.service");
    let f = one("rk3588-rknpu", &b.build(), "limits.nofile");
    assert_eq!(f.status, Status::Warn, "{}", f.summary);
    assert!(f.fix.is_none(), "{:?}", f.fix);
    assert_eq!(lacked_tool(&f.remedy), Some("systemctl"), "{}", f.remedy);
    assert_eq!(lacked_tool("sudo systemctl restart x"), None);
    assert_eq!(lacked_tool("the usual fix names `apt` here"), None);
}
