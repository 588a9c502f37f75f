//! Reads how the board's software is installed ([`StackFacts`]): os-release, dpkg, systemd,
//! DKMS trees and the NPU's platform devices with their bound drivers.

use crate::model::stack::{ModuleOptions, OsRelease, PlatformDevice, StackFacts};
use crate::parse::kv;
use crate::root::SysRoot;

/// Where the platform devices are listed: the bus view (live) and the device tree view (a
/// capture may keep only one).
const PLATFORM_DIRS: [&str; 2] = ["/sys/bus/platform/devices", "/sys/devices/platform"];

/// Reads the stack facts under `root`.
pub fn probe_stack(root: &SysRoot) -> StackFacts {
    let systemd_known =
        root.is_dir("/run") || root.is_dir("/lib/systemd") || root.is_dir("/usr/lib/systemd");
    let systemd = systemd_known.then(|| {
        root.is_dir("/run/systemd/system")
            || root.exists("/lib/systemd/systemd")
            || root.exists("/usr/lib/systemd/systemd")
    });
    let users = super::npu_users::probe_npu_users(root);
    StackFacts {
        os_release: ["/etc/os-release", "/usr/lib/os-release"]
            .iter()
            .find_map(|p| root.read_string(p).ok())
            .map(|t| parse_os_release(&t)),
        armbian: root.exists("/etc/armbian-release"),
        dpkg: root.exists("/usr/bin/dpkg") || root.exists("/var/lib/dpkg/status"),
        systemd,
        dkms_modules: root.list_dir("/var/lib/dkms").unwrap_or_default(),
        platform_npus: probe_platform_npus(root),
        npu_dt_nodes: probe_npu_dt_nodes(root),
        npu_users: users.users,
        npu_users_unreadable: users.unreadable,
        hailort_service_pid: users.hailort_service_pid,
        module_options: probe_module_options(root),
        modprobe_dirs_seen: MODPROBE_DIRS.iter().any(|d| root.is_dir(d)),
    }
}

/// Where modprobe reads module options (modprobe.d(5)); `/etc` first.
const MODPROBE_DIRS: [&str; 2] = ["/etc/modprobe.d", "/lib/modprobe.d"];

/// The `options <module> ...` lines of every `*.conf` in the modprobe.d directories.
pub fn probe_module_options(root: &SysRoot) -> Vec<ModuleOptions> {
    let mut out = Vec::new();
    for dir in MODPROBE_DIRS {
        let Ok(names) = root.list_dir(dir) else {
            continue;
        };
        for name in names.iter().filter(|n| n.ends_with(".conf")) {
            let file = format!("{dir}/{name}");
            let Ok(text) = root.read_string(&file) else {
                continue;
            };
            out.extend(
                parse_module_options(&text)
                    .into_iter()
                    .map(|(module, options)| ModuleOptions {
                        file: file.clone(),
                        module,
                        options,
                    }),
            );
        }
    }
    out
}

/// `(module, options)` of each `options` line (comments and other commands left out).
pub fn parse_module_options(text: &str) -> Vec<(String, String)> {
    text.lines()
        .filter_map(|l| {
            let mut w = l.split('#').next()?.split_whitespace();
            (w.next()? == "options").then_some(())?;
            let module = w.next()?.replace('-', "_");
            Some((module, w.collect::<Vec<_>>().join(" ")))
        })
        .collect()
}

/// `npu@...` nodes at the device tree's top level and their `status`.
pub fn probe_npu_dt_nodes(root: &SysRoot) -> Vec<(String, String)> {
    let base = "/proc/device-tree";
    let mut out: Vec<(String, String)> = root
        .list_dir(base)
        .unwrap_or_default()
        .into_iter()
        .filter(|n| n.starts_with("npu@"))
        .map(|n| {
            let status = root
                .read(&format!("{base}/{n}/status"))
                .map(|b| crate::parse::devicetree::string(&b))
                .unwrap_or_else(|_| "okay".into());
            (n, status)
        })
        .collect();
    out.sort();
    out
}

/// Parses os-release(5) text; `ID` defaults to `linux` as the spec says.
pub fn parse_os_release(text: &str) -> OsRelease {
    let e = kv::parse_kv(text);
    let get = |k: &str| kv::last(&e, k).map(|x| x.value.trim().to_string());
    OsRelease {
        id: get("ID")
            .unwrap_or_else(|| "linux".into())
            .to_ascii_lowercase(),
        id_like: get("ID_LIKE")
            .map(|v| {
                v.split_whitespace()
                    .map(|s| s.to_ascii_lowercase())
                    .collect()
            })
            .unwrap_or_default(),
        name: get("NAME"),
        version_id: get("VERSION_ID"),
        pretty_name: get("PRETTY_NAME"),
    }
}

/// Platform devices named `<addr>.npu` and the driver each is bound to.
pub fn probe_platform_npus(root: &SysRoot) -> Vec<PlatformDevice> {
    let mut out: Vec<PlatformDevice> = Vec::new();
    for dir in PLATFORM_DIRS {
        let Ok(names) = root.list_dir(dir) else {
            continue;
        };
        for name in names.into_iter().filter(|n| n.ends_with(".npu")) {
            if out.iter().any(|d| d.name == name) {
                continue;
            }
            let source = format!("{dir}/{name}/driver");
            out.push(PlatformDevice {
                driver: root.link_basename(&source).ok(),
                name,
                source,
            });
        }
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn os_release_fields() {
        let r = parse_os_release(
            "NAME=\"Home Assistant OS\"\nVERSION_ID=15.0\nID=haos\nPRETTY_NAME=\"Home Assistant OS 15.0\"\n",
        );
        assert_eq!(r.id, "haos");
        assert_eq!(r.version_id.as_deref(), Some("15.0"));
        assert_eq!(r.pretty_name.as_deref(), Some("Home Assistant OS 15.0"));
        let u = parse_os_release("ID=ubuntu\nID_LIKE=debian\n");
        assert_eq!(u.id_like, vec!["debian".to_string()]);
        assert_eq!(parse_os_release("").id, "linux");
    }

    #[test]
    fn modprobe_options_lines() {
        assert_eq!(
            parse_module_options("# Hailo\noptions hailo_pci force_desc_page_size=4096 # 16K\nblacklist x\noptions\n  options hailo-pci a=1 b=2\n"),
            vec![
                ("hailo_pci".to_string(), "force_desc_page_size=4096".to_string()),
                ("hailo_pci".to_string(), "a=1 b=2".to_string())
            ]
        );
        assert!(parse_module_options("").is_empty());
    }

    #[test]
    fn platform_npus_from_either_view() {
        let dir = std::env::temp_dir().join(format!("npu-stack-{}", std::process::id()));
        let dev = dir.join("sys/devices/platform/fdab0000.npu");
        std::fs::create_dir_all(&dev).unwrap();
        std::fs::write(dev.join("driver"), "../../../bus/platform/drivers/rocket\n").unwrap();
        std::fs::create_dir_all(dir.join("sys/devices/platform/fe1c0000.ethernet")).unwrap();
        let root = SysRoot::new(&dir);
        let npus = probe_platform_npus(&root);
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(npus.len(), 1);
        assert_eq!(npus[0].name, "fdab0000.npu");
        assert_eq!(npus[0].driver.as_deref(), Some("rocket"));
    }
}
