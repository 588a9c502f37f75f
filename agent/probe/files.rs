//! The individual probes behind [`super::probe`].

use super::*;
use crate::parse::size::parse_size_bytes;

/// `/sys/module/<m>/version` for the profile's modules and the NPU modules every check may ask
/// about (`rknpu`, `rocket`, both Hailo modules).
pub fn probe_modules(root: &SysRoot, profile: &Profile) -> Vec<ModuleVersion> {
    let mut names: Vec<&str> = vec!["hailo_pci", "hailo1x_pci", "rknpu", "rocket"];
    for m in profile.npu.modules.iter().chain(&profile.npu.wrong_modules) {
        if !names.contains(&m.as_str()) {
            names.push(m);
        }
    }
    names
        .into_iter()
        .filter(|n| root.is_dir(&format!("/sys/module/{n}")))
        .map(|n| ModuleVersion {
            name: n.to_string(),
            version: root
                .read_string(&format!("/sys/module/{n}/version"))
                .ok()
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty()),
        })
        .collect()
}

/// `.ko` files of Hailo modules in the places DKMS, the non-DKMS fallback and Raspberry Pi's
/// in-tree build put them.
pub fn probe_module_files(
    root: &SysRoot,
    profile: &Profile,
    release: Option<&String>,
) -> Vec<String> {
    let Some(release) = release else {
        return Vec::new();
    };
    let mut names: Vec<&String> = profile
        .npu
        .modules
        .iter()
        .chain(&profile.npu.wrong_modules)
        .collect();
    names.dedup();
    let dirs = [
        "updates/dkms",
        "updates",
        "extra",
        "kernel/drivers/misc",
        "kernel/drivers/media/pci/hailo",
        "kernel/drivers/misc/hailo",
    ];
    let mut out = Vec::new();
    for d in dirs {
        let dir = format!("/lib/modules/{release}/{d}");
        for f in root.list_dir(&dir).unwrap_or_default() {
            let stem = f.split(".ko").next().unwrap_or("");
            if f.contains(".ko") && names.iter().any(|n| n.as_str() == stem) {
                out.push(format!("{dir}/{f}"));
            }
        }
    }
    out
}

/// Existing NPU device nodes.
pub fn probe_device_nodes(root: &SysRoot) -> Vec<String> {
    let mut out = Vec::new();
    for name in root.list_dir("/dev").unwrap_or_default() {
        if name.starts_with("hailo") || name.starts_with("h1x-") || name == "rknpu" {
            out.push(format!("/dev/{name}"));
        }
    }
    for name in root.list_dir("/dev/accel").unwrap_or_default() {
        out.push(format!("/dev/accel/{name}"));
    }
    out
}

/// DRM nodes and their drivers from `/sys/class/drm`: the basename of `device/driver`, else
/// `DRIVER=` of `device/uevent` (a container may see one without the other). The name is kept
/// as the kernel spells it (`RKNPU`).
pub fn probe_drm(root: &SysRoot) -> Probed<Vec<DrmNode>> {
    let names = root.list_dir("/sys/class/drm")?;
    Ok(names
        .into_iter()
        .filter(|n| n.starts_with("renderD") || (n.starts_with("card") && !n.contains('-')))
        .map(|n| DrmNode {
            driver: root
                .link_basename(&format!("/sys/class/drm/{n}/device/driver"))
                .ok()
                .or_else(|| {
                    root.read_string(&format!("/sys/class/drm/{n}/device/uevent"))
                        .ok()
                        .and_then(|t| {
                            t.lines()
                                .find_map(|l| l.trim().strip_prefix("DRIVER=").map(str::to_string))
                        })
                        .filter(|d| !d.is_empty())
                }),
            name: n,
        })
        .collect())
}

/// Install and upgrade lines of `/var/log/dpkg.log` (`2026-05-15 10:02:11 upgrade pkg:arm64 a b`).
pub fn probe_dpkg_log(root: &SysRoot) -> Probed<Vec<DpkgLogEntry>> {
    let text = root.read_tail("/var/log/dpkg.log", LOG_TAIL_BYTES)?;
    Ok(parse_dpkg_log(&text))
}

/// Parses dpkg.log text; lines of other shapes are skipped.
pub fn parse_dpkg_log(text: &str) -> Vec<DpkgLogEntry> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        // Most lines are `status`/`configure`/`trigproc`; skip them before splitting.
        if !(line.contains(" upgrade ") || line.contains(" install ")) {
            continue;
        }
        let f: Vec<&str> = line.split_whitespace().collect();
        if f.len() != 6 || !(f[2] == "install" || f[2] == "upgrade") {
            continue;
        }
        let Some(time_unix_s) = crate::sys::time::unix_from_date_time(f[0], f[1]) else {
            continue;
        };
        out.push(DpkgLogEntry {
            time_unix_s,
            action: f[2].to_string(),
            package: f[3].split(':').next().unwrap_or("").to_string(),
            from: f[4].to_string(),
            to: f[5].to_string(),
            line: i + 1,
        });
    }
    out
}

/// `libhailort.so.*` files in the usual library directories.
pub fn probe_libraries(root: &SysRoot) -> Vec<String> {
    let dirs = [
        "/usr/lib",
        "/usr/lib/aarch64-linux-gnu",
        "/usr/local/lib",
        "/lib",
        "/lib/aarch64-linux-gnu",
        "/usr/lib/x86_64-linux-gnu",
    ];
    let mut out = Vec::new();
    for d in dirs {
        for f in root.list_dir(d).unwrap_or_default() {
            if f.starts_with("libhailort.so") {
                out.push(format!("{d}/{f}"));
            }
        }
    }
    out
}

/// Longest part of a runtime library searched for its version string (32 MiB; librknnrt.so is
/// about 7 MiB).
const RUNTIME_LIB_SCAN_BYTES: u64 = 32 << 20;

/// The version a runtime library carries in its `.rodata`: `librknnrt version: 2.3.2 (…)` or
/// `rkllm-runtime version: 1.0.1`.
pub fn embedded_runtime_version(bytes: &[u8], marker: &str) -> Option<String> {
    let at = memchr::memmem::find(bytes, marker.as_bytes())? + marker.len();
    let tail = &bytes[at..bytes.len().min(at + 40)];
    let text: String = tail
        .iter()
        .map(|&b| b as char)
        .skip_while(|c| *c == ' ' || *c == 'v')
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    crate::parse::version::Version::parse_loose(&text).map(|v| v.to_string())
}

/// `librknnrt.so` / `librkllmrt.so` in the library directories (version from the embedded
/// string), rknn-toolkit-lite2 in Python's package directories (version from the dist-info
/// name).
pub fn probe_rknn_runtime(root: &SysRoot) -> Vec<RuntimeComponent> {
    let dirs = [
        "/usr/lib",
        "/usr/lib64",
        "/usr/local/lib",
        "/usr/lib/aarch64-linux-gnu",
        "/lib",
        "/lib/aarch64-linux-gnu",
    ];
    let libs = [
        ("librknnrt", "librknnrt version:"),
        ("librkllmrt", "rkllm-runtime version:"),
    ];
    let mut out = Vec::new();
    for d in dirs {
        for f in root.list_dir(d).unwrap_or_default() {
            for (name, marker) in libs {
                if f == format!("{name}.so") || f.starts_with(&format!("{name}.so.")) {
                    let path = format!("{d}/{f}");
                    let version = root
                        .read_head(&path, RUNTIME_LIB_SCAN_BYTES)
                        .ok()
                        .and_then(|(b, _)| embedded_runtime_version(&b, marker))
                        .or_else(|| {
                            f.strip_prefix(&format!("{name}.so."))
                                .and_then(crate::parse::version::Version::parse_loose)
                                .map(|v| v.to_string())
                        });
                    out.push(RuntimeComponent {
                        name: name.to_string(),
                        path,
                        version,
                    });
                }
            }
        }
    }
    let mut py_dirs = vec!["/usr/lib/python3/dist-packages".to_string()];
    for base in ["/usr/local/lib", "/usr/lib"] {
        for p in root.list_dir(base).unwrap_or_default() {
            if p.starts_with("python3") {
                py_dirs.push(format!("{base}/{p}/dist-packages"));
                py_dirs.push(format!("{base}/{p}/site-packages"));
            }
        }
    }
    for d in py_dirs {
        for f in root.list_dir(&d).unwrap_or_default() {
            let lower = f.to_ascii_lowercase();
            if let Some(rest) = lower
                .strip_prefix("rknn_toolkit_lite2-")
                .and_then(|r| r.strip_suffix(".dist-info"))
            {
                out.push(RuntimeComponent {
                    name: "rknn-toolkit-lite2".into(),
                    path: format!("{d}/{f}"),
                    version: crate::parse::version::Version::parse_loose(rest)
                        .map(|v| v.to_string()),
                });
            }
        }
    }
    out
}

/// ELF `DT_NEEDED` sonames of a binary (object crate). An empty placeholder file is an error.
pub fn elf_needed(bytes: &[u8]) -> Result<Vec<String>, String> {
    use object::read::elf::{ElfFile32, ElfFile64};
    use object::Endianness;
    fn needed<E: object::read::elf::FileHeader<Endian = Endianness>>(
        f: &object::read::elf::ElfFile<'_, E>,
    ) -> Result<Vec<String>, String> {
        use object::read::elf::{Dyn, SectionHeader};
        let endian = f.endian();
        let data = f.data();
        let sections = f
            .elf_header()
            .sections(endian, data)
            .map_err(|e| e.to_string())?;
        let mut out = Vec::new();
        for (index, section) in sections.iter().enumerate() {
            if let Some((dynamic, link)) =
                section.dynamic(endian, data).map_err(|e| e.to_string())?
            {
                let strings = sections
                    .strings(endian, data, link)
                    .map_err(|e| e.to_string())?;
                for d in dynamic {
                    if d.tag32(endian) == Some(object::elf::DT_NEEDED) {
                        let name = d.string(endian, strings).map_err(|e| e.to_string())?;
                        out.push(String::from_utf8_lossy(name).into_owned());
                    }
                }
                let _ = index;
            }
        }
        Ok(out)
    }
    match object::FileKind::parse(bytes).map_err(|e| format!("not an ELF file: {e}"))? {
        object::FileKind::Elf64 => {
            needed(&ElfFile64::<Endianness>::parse(bytes).map_err(|e| e.to_string())?)
        }
        object::FileKind::Elf32 => {
            needed(&ElfFile32::<Endianness>::parse(bytes).map_err(|e| e.to_string())?)
        }
        other => Err(format!("not an ELF file ({other:?})")),
    }
}

fn basename(s: &str) -> &str {
    s.rsplit('/').next().unwrap_or(s)
}

/// True when a process is one of the named workloads: `comm`, argv[0]'s basename, or for an
/// interpreter (python, node) argv[1]'s basename without its extension.
pub fn is_workload(comm: &str, cmdline: &[String], names: &[String]) -> bool {
    let hit = |s: &str| names.iter().any(|n| n == s);
    if hit(comm) || cmdline.first().is_some_and(|a| hit(basename(a))) {
        return true;
    }
    let interp = comm.starts_with("python") || comm.starts_with("node");
    interp
        && cmdline.get(1).is_some_and(|a| {
            let b = basename(a);
            hit(b.rsplit_once('.').map(|(stem, _)| stem).unwrap_or(b))
        })
}

/// The container runtime a `/proc/<pid>/cgroup` text names, if any.
pub fn container_of_cgroup(text: &str) -> Option<String> {
    const RUNTIMES: [&str; 5] = ["docker", "containerd", "libpod", "kubepods", "lxc"];
    text.lines().find_map(|l| {
        let path = l.rsplit(':').next().unwrap_or("");
        RUNTIMES
            .iter()
            .find(|r| path.contains(*r))
            .map(|r| r.to_string())
    })
}

/// The systemd service a `/proc/<pid>/cgroup` text names (`0::/system.slice/rkllm.service` ->
/// `rkllm.service`), if any; a container's scope or a user session is none.
pub fn unit_of_cgroup(text: &str) -> Option<String> {
    if container_of_cgroup(text).is_some() {
        return None;
    }
    text.lines().find_map(|l| {
        let path = l.splitn(3, ':').nth(2)?;
        if !path.starts_with("/system.slice/") {
            return None;
        }
        path.split('/')
            .find(|seg| seg.ends_with(".service") && seg.len() > ".service".len())
            .filter(|seg| {
                seg.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_.@:\\".contains(&b))
            })
            .map(str::to_string)
    })
}

/// Workload processes: every `/proc/<pid>` whose name matches, with its limits.
pub fn probe_processes(root: &SysRoot, names: &[String]) -> Probed<Vec<ProcessInfo>> {
    let mut out = Vec::new();
    if names.is_empty() {
        return Ok(out);
    }
    for entry in root.list_dir("/proc")? {
        let Ok(pid) = entry.parse::<u32>() else {
            continue;
        };
        let Ok(comm) = root.read_string(&format!("/proc/{pid}/comm")) else {
            continue;
        };
        let comm = comm.trim().to_string();
        let interp = comm.starts_with("python") || comm.starts_with("node");
        let cheap_hit = names
            .iter()
            .any(|n| *n == comm || (n.len() > 15 && n.starts_with(&comm)));
        if !cheap_hit && !interp {
            continue;
        }
        let cmdline: Vec<String> = root
            .read(&format!("/proc/{pid}/cmdline"))
            .map(|b| devicetree::string_list(&b))
            .unwrap_or_default();
        if !is_workload(&comm, &cmdline, names) && !cheap_hit {
            continue;
        }
        let lpath = format!("/proc/{pid}/limits");
        let cgroup = root.read_string(&format!("/proc/{pid}/cgroup")).ok();
        out.push(ProcessInfo {
            pid,
            comm,
            // Secret values (`--api-key`, tokens, passwords) never reach a finding.
            cmdline: crate::sys::redact::redact_argv(&cmdline),
            limits: read_parsed(root, &lpath, limits::parse_limits),
            container: cgroup.as_deref().and_then(container_of_cgroup),
            unit: cgroup.as_deref().and_then(unit_of_cgroup),
        });
    }
    Ok(out)
}

/// Parses a systemd limit value (`65536`, `infinity`, `8M`, `1024:524288` → the soft part).
pub fn parse_systemd_limit(value: &str) -> Option<Option<u64>> {
    let soft = value.split(':').next()?.trim();
    if soft.eq_ignore_ascii_case("infinity") {
        return Some(None);
    }
    parse_size_bytes(soft).map(Some)
}

/// `LimitNOFILE=`/`LimitMEMLOCK=` of the workload units (with drop-ins), `DefaultLimit*=` of
/// system.conf, and memlock/nofile lines of `limits.conf`/`limits.d`.
pub fn probe_configured_limits(root: &SysRoot, units: &[String]) -> Vec<ConfiguredLimit> {
    let mut out = Vec::new();
    let scan_systemd = |path: &str, scope: &str, default: bool, out: &mut Vec<ConfiguredLimit>| {
        let Ok(text) = root.read_string(path) else {
            return;
        };
        for (i, line) in text.lines().enumerate() {
            let t = line.trim();
            let (prefix_nofile, prefix_memlock) = if default {
                ("DefaultLimitNOFILE=", "DefaultLimitMEMLOCK=")
            } else {
                ("LimitNOFILE=", "LimitMEMLOCK=")
            };
            let (item, v) = if let Some(v) = t.strip_prefix(prefix_nofile) {
                ("nofile", v)
            } else if let Some(v) = t.strip_prefix(prefix_memlock) {
                ("memlock", v)
            } else {
                continue;
            };
            if let Some(value) = parse_systemd_limit(v) {
                out.push(ConfiguredLimit {
                    file: path.to_string(),
                    line: i + 1,
                    item: item.to_string(),
                    value,
                    scope: scope.to_string(),
                    text: t.to_string(),
                });
            }
        }
    };
    for unit in units {
        for dir in [
            "/etc/systemd/system",
            "/lib/systemd/system",
            "/usr/lib/systemd/system",
        ] {
            scan_systemd(
                &format!("{dir}/{unit}"),
                &format!("unit:{unit}"),
                false,
                &mut out,
            );
            let dropins = format!("{dir}/{unit}.d");
            for f in root.list_dir(&dropins).unwrap_or_default() {
                if f.ends_with(".conf") {
                    scan_systemd(
                        &format!("{dropins}/{f}"),
                        &format!("unit:{unit}"),
                        false,
                        &mut out,
                    );
                }
            }
        }
    }
    scan_systemd("/etc/systemd/system.conf", "default", true, &mut out);
    for f in root
        .list_dir("/etc/systemd/system.conf.d")
        .unwrap_or_default()
    {
        scan_systemd(
            &format!("/etc/systemd/system.conf.d/{f}"),
            "default",
            true,
            &mut out,
        );
    }
    let mut pam_files = vec!["/etc/security/limits.conf".to_string()];
    for f in root.list_dir("/etc/security/limits.d").unwrap_or_default() {
        if f.ends_with(".conf") {
            pam_files.push(format!("/etc/security/limits.d/{f}"));
        }
    }
    for path in pam_files {
        let Ok(text) = root.read_string(&path) else {
            continue;
        };
        for (i, line) in text.lines().enumerate() {
            let t = line.trim();
            if t.starts_with('#') {
                continue;
            }
            let f: Vec<&str> = t.split_whitespace().collect();
            if f.len() != 4 || !(f[2] == "memlock" || f[2] == "nofile") || f[1] == "hard" {
                continue;
            }
            let value = if f[3] == "unlimited" || f[3] == "infinity" {
                None
            } else {
                match f[3].parse::<u64>() {
                    // limits.conf memlock is in KiB.
                    Ok(n) if f[2] == "memlock" => Some(n.saturating_mul(1024)),
                    Ok(n) => Some(n),
                    Err(_) => continue,
                }
            };
            out.push(ConfiguredLimit {
                file: path.clone(),
                line: i + 1,
                item: f[2].to_string(),
                value,
                scope: format!("pam:{}", f[0]),
                text: t.to_string(),
            });
        }
    }
    out
}

/// The device-tree CMA node, when present.
pub fn probe_dt_cma(root: &SysRoot) -> Option<DtCma> {
    let base = "/proc/device-tree/reserved-memory/linux,cma";
    if !root.is_dir(base) {
        return None;
    }
    let size_bytes = root
        .read(&format!("{base}/size"))
        .ok()
        .and_then(|b| devicetree::cells(&b).ok())
        .and_then(|c| devicetree::cells_to_u64(&c));
    let alloc_ranges = root
        .read(&format!("{base}/alloc-ranges"))
        .ok()
        .and_then(|b| devicetree::cells(&b).ok())
        .map(|c| {
            // Pi 5: #address-cells = 2, #size-cells = 1 (3 cells per range); else 2 + 2.
            let per = if c.len() % 3 == 0 {
                3
            } else if c.len() % 4 == 0 {
                4
            } else {
                2
            };
            c.chunks_exact(per)
                .map(|r| match per {
                    3 => ((u64::from(r[0]) << 32) | u64::from(r[1]), u64::from(r[2])),
                    4 => (
                        (u64::from(r[0]) << 32) | u64::from(r[1]),
                        (u64::from(r[2]) << 32) | u64::from(r[3]),
                    ),
                    _ => (u64::from(r[0]), u64::from(r[1])),
                })
                .collect()
        })
        .unwrap_or_default();
    Some(DtCma {
        size_bytes,
        alloc_ranges,
    })
}

/// Expands `*` in the last path component against the directory listing.
pub(super) fn expand(root: &SysRoot, pattern: &str) -> Vec<String> {
    let Some((dir, name)) = pattern.rsplit_once('/') else {
        return Vec::new();
    };
    match name.split_once('*') {
        None => vec![pattern.to_string()],
        Some((pre, suf)) => root
            .list_dir(if dir.is_empty() { "/" } else { dir })
            .unwrap_or_default()
            .into_iter()
            .filter(|n| n.starts_with(pre) && n.ends_with(suf) && n.len() >= pre.len() + suf.len())
            .map(|n| format!("{dir}/{n}"))
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dpkg_log_lines() {
        let e = parse_dpkg_log("2026-05-15 10:02:11 upgrade h10-hailort-pcie-driver:arm64 5.1.1 5.3.0\n2026-05-15 10:02:12 status installed x 1\nbad\n");
        assert_eq!(e.len(), 1);
        assert_eq!(e[0].package, "h10-hailort-pcie-driver");
        assert_eq!(e[0].from, "5.1.1");
        assert_eq!(e[0].time_unix_s, 1_778_839_331);
    }

    #[test]
    fn workload_matching() {
        let names = vec!["flask_server".to_string(), "llm_demo".to_string()];
        assert!(is_workload("llm_demo", &[], &names));
        assert!(is_workload(
            "python3",
            &["python3".into(), "/opt/x/flask_server.py".into()],
            &names
        ));
        assert!(!is_workload(
            "bash",
            &["bash".into(), "flask_server.py".into()],
            &names
        ));
    }

    #[test]
    fn service_from_cgroup() {
        let unit = |t: &str| unit_of_cgroup(t);
        assert_eq!(
            unit("0::/system.slice/rkllm.service\n").as_deref(),
            Some("rkllm.service")
        );
        // cgroup v1: the name=systemd hierarchy carries it.
        assert_eq!(
            unit("12:pids:/system.slice/hailo-ollama.service\n1:name=systemd:/system.slice/hailo-ollama.service\n")
                .as_deref(),
            Some("hailo-ollama.service")
        );
        assert_eq!(
            unit("0::/user.slice/user-1000.slice/session-3.scope\n"),
            None
        );
        assert_eq!(
            unit("0::/system.slice/docker-0123abcd.scope\n"),
            None,
            "a container is no unit"
        );
        assert_eq!(unit("0::/system.slice/.service\n"), None);
        assert_eq!(unit("0::/system.slice/a b.service\n"), None);
        assert_eq!(unit(""), None);
    }

    #[test]
    fn systemd_limit_values() {
        assert_eq!(parse_systemd_limit("infinity"), Some(None));
        assert_eq!(parse_systemd_limit("65536"), Some(Some(65536)));
        assert_eq!(parse_systemd_limit("8M"), Some(Some(8 << 20)));
        assert_eq!(parse_systemd_limit("1024:524288"), Some(Some(1024)));
        assert_eq!(parse_systemd_limit("lots"), None);
    }

    #[test]
    fn runtime_version_strings() {
        let blob = b"\0\0RKNN Runtime Information, librknnrt version: 2.3.2 (429f97ae6b@2025-04-09T09:09:27)\0";
        assert_eq!(
            embedded_runtime_version(blob, "librknnrt version:").as_deref(),
            Some("2.3.2")
        );
        assert_eq!(
            embedded_runtime_version(
                b"xx rkllm-runtime version: 1.0.1\0",
                "rkllm-runtime version:"
            )
            .as_deref(),
            Some("1.0.1")
        );
        assert_eq!(embedded_runtime_version(b"", "librknnrt version:"), None);
    }

    #[test]
    fn elf_needed_rejects_placeholders() {
        assert!(elf_needed(b"").is_err());
        assert!(elf_needed(b"#!/bin/sh\n").is_err());
    }

    #[test]
    fn elf_needed_reads_a_real_binary() {
        // The test binary itself is a dynamically linked ELF on glibc hosts.
        let me = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        let needed = elf_needed(&me).unwrap();
        assert!(
            needed.iter().any(|n| n.starts_with("libc.so")),
            "{needed:?}"
        );
    }
}
