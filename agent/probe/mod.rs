//! Probes: read the board's files under a [`SysRoot`] into a [`Snapshot`]. Probes never decide
//! anything; a file that cannot be read is kept as a [`ReadError`] (with the board path and the
//! reason) so the check that needed it can say `skip` or `error` and the run goes on.
//!
//! Two phases: [`probe_identity`] reads what profile detection needs (device tree, PCI, dpkg);
//! [`probe`] then reads what the chosen profile names (workloads, logs, boot files, firmware).

pub mod clock;
pub mod evidence;
mod files;
pub mod llm;
pub mod npu_users;
pub mod pi_firmware;
pub mod sensors;
pub mod stack;
pub mod workloads;

pub use crate::model::logs::{LogClass, LogFile, LOG_TAIL_BYTES};
pub use crate::model::snapshot::*;
pub use crate::model::Probed;
use crate::parse::{buddyinfo, devicetree, dpkg, kv, limits, meminfo, vmstat};
use crate::profile::Profile;
use crate::root::{ReadError, SysRoot};
pub use files::*;

/// Reads the identity files.
pub fn probe_identity(root: &SysRoot) -> Identity {
    let model = root
        .read("/proc/device-tree/model")
        .map(|b| devicetree::string(&b));
    let compatible = root
        .read("/proc/device-tree/compatible")
        .map(|b| devicetree::string_list(&b));
    let serial = root
        .read("/proc/device-tree/serial-number")
        .ok()
        .map(|b| devicetree::string(&b))
        .filter(|s| !s.is_empty());
    let armbian_release = root
        .read_string("/etc/armbian-release")
        .map(|t| kv::parse_kv(&t))
        .unwrap_or_default();
    let os_pretty_name = root
        .read_string("/etc/os-release")
        .ok()
        .and_then(|t| kv::last(&kv::parse_kv(&t), "PRETTY_NAME").map(|e| e.value.clone()));
    let kernel_release = root
        .read_string("/proc/sys/kernel/osrelease")
        .map(|s| devicetree::printable(s.trim()).chars().take(128).collect());
    let arch = root
        .read_string("/proc/sys/kernel/arch")
        .ok()
        .map(|s| s.trim().to_string())
        .filter(|s| !s.is_empty())
        .or_else(|| root.is_live().then(|| std::env::consts::ARCH.to_string()));
    Identity {
        model,
        compatible,
        serial,
        has_pcie3x4_node: root.exists("/proc/device-tree/pcie@fe150000"),
        armbian_release,
        os_pretty_name,
        kernel_release,
        arch,
    }
}

/// Reads every PCI function under `/sys/bus/pci/devices`.
pub fn probe_pci(root: &SysRoot) -> Probed<Vec<PciDevice>> {
    let base = "/sys/bus/pci/devices";
    let mut out = Vec::new();
    for bdf in root.list_dir(base)? {
        let dir = format!("{base}/{bdf}");
        let hex = |name: &str| {
            root.read_string(&format!("{dir}/{name}"))
                .ok()
                .and_then(|s| u16::from_str_radix(s.trim().trim_start_matches("0x"), 16).ok())
        };
        let (Some(vendor), Some(device)) = (hex("vendor"), hex("device")) else {
            continue;
        };
        let driver = root.link_basename(&format!("{dir}/driver")).ok();
        let link_speed = root
            .read_string(&format!("{dir}/current_link_speed"))
            .ok()
            .map(|s| s.trim().to_string());
        let link_width = root
            .read_string(&format!("{dir}/current_link_width"))
            .ok()
            .and_then(|s| s.trim().parse().ok());
        let aer = probe_aer(root, &dir);
        out.push(PciDevice {
            aer,
            bdf,
            vendor,
            device,
            driver,
            link_speed,
            link_width,
        });
    }
    Ok(out)
}

/// The AER totals of a PCI device directory, when any of its `aer_dev_*` files exists.
fn probe_aer(root: &SysRoot, dir: &str) -> Option<AerTotals> {
    let total = |file: &str, key: &str| -> Option<u64> {
        let t = root.read_string(&format!("{dir}/{file}")).ok()?;
        t.lines().find_map(|l| {
            let (k, v) = l.trim().split_once(char::is_whitespace)?;
            (k == key).then(|| v.trim().parse().ok()).flatten()
        })
    };
    let c = total("aer_dev_correctable", "TOTAL_ERR_COR");
    let n = total("aer_dev_nonfatal", "TOTAL_ERR_NONFATAL");
    let f = total("aer_dev_fatal", "TOTAL_ERR_FATAL");
    (c.is_some() || n.is_some() || f.is_some()).then(|| AerTotals {
        correctable: c.unwrap_or(0),
        nonfatal: n.unwrap_or(0),
        fatal: f.unwrap_or(0),
    })
}

/// Reads the dpkg status database.
pub fn probe_dpkg(root: &SysRoot) -> Probed<Vec<dpkg::DpkgPackage>> {
    let path = "/var/lib/dpkg/status";
    let text = root.read_string(path)?;
    dpkg::parse_dpkg_status(&text).map_err(|e| ReadError::malformed(path, e))
}

/// Where the rknpu driver's version may be read, in order.
const RKNPU_VERSION_FILES: [&str; 3] = [
    "/sys/kernel/debug/rknpu/version",
    "/proc/rknpu/version",
    "/sys/module/rknpu/version",
];

/// `/proc/uptime`'s first field: seconds since boot.
fn parse_uptime(t: &str) -> Result<f64, String> {
    t.split_whitespace()
        .next()
        .and_then(|f| f.parse::<f64>().ok())
        .filter(|f| f.is_finite() && *f >= 0.0)
        .ok_or_else(|| "first field is not a number of seconds".to_string())
}

/// `/proc/sys/fs/file-nr`: allocated, free, maximum.
fn parse_file_nr(t: &str) -> Result<FileNr, String> {
    let f: Vec<u64> = t
        .split_whitespace()
        .filter_map(|x| x.parse().ok())
        .collect();
    match f.as_slice() {
        [allocated, _free, max] => Ok(FileNr {
            allocated: *allocated,
            max: *max,
        }),
        _ => Err("expected three numbers".to_string()),
    }
}

/// Module names from `/proc/modules`.
fn probe_proc_modules(root: &SysRoot) -> Probed<Vec<String>> {
    root.read_string("/proc/modules").map(|t| {
        t.lines()
            .filter_map(|l| l.split_whitespace().next().map(str::to_string))
            .collect()
    })
}

/// `/var/log/dpkg.log`, read only when the profile names a firmware package (the one check
/// that reads it).
fn probe_dpkg_log_for(root: &SysRoot, profile: &Profile) -> Probed<Vec<DpkgLogEntry>> {
    if profile.packages.firmware.is_empty() {
        return Err(ReadError {
            path: "/var/log/dpkg.log".into(),
            kind: crate::root::ReadErrorKind::NotFound,
            detail: "not read: the profile names no firmware package".into(),
        });
    }
    probe_dpkg_log(root)
}

/// The runtime binaries that exist and the `NEEDED` entries of each.
fn probe_binaries(root: &SysRoot, paths: &[String]) -> Vec<BinaryNeeded> {
    paths
        .iter()
        .filter(|p| root.exists(p))
        .map(|p| BinaryNeeded {
            path: p.clone(),
            needed: root
                .read(p)
                .and_then(|b| elf_needed(&b).map_err(|e| ReadError::malformed(p, e))),
        })
        .collect()
}

/// The profile's boot files that exist, with their text.
fn probe_boot_files(root: &SysRoot, profile: &Profile) -> Vec<BootFileRead> {
    profile
        .cma
        .boot_files
        .iter()
        .filter(|b| root.exists(&b.path))
        .map(|b| BootFileRead {
            path: b.path.clone(),
            kind: b.kind,
            text: root.read_string(&b.path),
        })
        .collect()
}

/// Reads everything the checks need for `profile`. `identity`, `pci` and `dpkg` come from the
/// detection phase so they are read once.
///
/// `log_cursors` (the daemon) makes the log sources read incrementally; `None` reads everything
/// of this boot (see [`evidence::probe_logs`]).
pub fn probe(
    root: &SysRoot,
    profile: &Profile,
    identity: Identity,
    pci: Probed<Vec<PciDevice>>,
    dpkg: Probed<Vec<dpkg::DpkgPackage>>,
    apps: &[crate::profile::apps::AppSpec],
    log_cursors: Option<&mut evidence::LogCursors>,
) -> Snapshot {
    let meminfo = read_parsed(root, "/proc/meminfo", meminfo::parse_meminfo);
    let buddyinfo = read_parsed(root, "/proc/buddyinfo", buddyinfo::parse_buddyinfo);
    let vmstat = read_parsed(root, "/proc/vmstat", vmstat::parse_vmstat);
    let cmdline = root
        .read_string("/proc/cmdline")
        .map(|s| s.trim().to_string());
    let uptime_s = read_parsed(root, "/proc/uptime", parse_uptime);
    let boot_id = root
        .read_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_string());
    let stack = stack::probe_stack(root);
    let discovered = workloads::discover(root, apps, &stack.npu_users);
    let (logs, log_sources) = evidence::probe_logs(
        root,
        profile,
        &discovered,
        log_cursors,
        boot_id.as_deref().ok(),
    );
    let page_size = evidence::page_size_from(root, identity.kernel_release.as_deref().ok(), &logs);
    let live = root.is_live();
    let now_unix_s = live.then(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs() as i64)
            .unwrap_or(0)
    });
    Snapshot {
        live,
        now_unix_s,
        clock: clock::probe(root),
        modules: probe_modules(root, profile),
        proc_modules: probe_proc_modules(root),
        module_files: probe_module_files(root, profile, identity.kernel_release.as_ref().ok()),
        device_nodes: probe_device_nodes(root),
        drm: probe_drm(root),
        rknpu_version_files: RKNPU_VERSION_FILES
            .iter()
            .map(|p| (p.to_string(), root.read_string(p)))
            .collect(),
        dpkg,
        dpkg_log: probe_dpkg_log_for(root, profile),
        libraries: probe_libraries(root),
        rknn_runtime: if profile.npu.kind == crate::profile::NpuKind::Rknpu {
            probe_rknn_runtime(root)
        } else {
            Vec::new()
        },
        firmware: if profile.npu.firmware_dir.is_empty() {
            Ok(Vec::new())
        } else {
            root.list_dir(&profile.npu.firmware_dir)
        },
        firmware_root_exists: root.is_dir("/lib/firmware"),
        binaries: probe_binaries(root, &profile.npu.runtime_binaries),
        processes: probe_processes(root, &profile.limits.workloads),
        file_nr: read_parsed(root, "/proc/sys/fs/file-nr", parse_file_nr),
        configured_limits: probe_configured_limits(root, &profile.limits.units),
        meminfo,
        buddyinfo,
        vmstat,
        cmdline,
        boot_files: probe_boot_files(root, profile),
        dt_cma: probe_dt_cma(root),
        logs,
        log_sources,
        page_size,
        uptime_s,
        boot_id,
        llm: llm::probe_llm(root, profile),
        sensors: sensors::probe_sensors(root),
        stack,
        workloads: discovered,
        unseen_dirs: crate::model::snapshot::VIEW_DIRS
            .iter()
            .filter(|d| !root.is_dir(d))
            .map(|d| d.to_string())
            .collect(),
        identity,
        pci,
    }
}

/// Reads `path` and parses it, turning a parse error into a `Malformed` read error.
pub fn read_parsed<T>(
    root: &SysRoot,
    path: &str,
    parse: impl Fn(&str) -> Result<T, String>,
) -> Probed<T> {
    let text = root.read_string(path)?;
    parse(&text).map_err(|e| ReadError::malformed(path, e))
}

/// What accelerator detection reads ([`crate::profile::accel::detect`]): PCI ids, platform and
/// DRM drivers, device nodes, the SoC and the loaded modules. `pci` is the detection phase's.
pub fn probe_host_facts(
    root: &SysRoot,
    identity: &Identity,
    pci: &Probed<Vec<PciDevice>>,
) -> crate::profile::accel::HostFacts {
    crate::profile::accel::HostFacts {
        pci: pci
            .as_ref()
            .map(|d| {
                d.iter()
                    .map(|d| (d.bdf.clone(), d.vendor, d.device))
                    .collect()
            })
            .unwrap_or_default(),
        platform: stack::probe_platform_npus(root)
            .into_iter()
            .filter_map(|d| d.driver.map(|drv| (d.name, drv)))
            .collect(),
        drm: probe_drm(root)
            .unwrap_or_default()
            .into_iter()
            .filter_map(|n| n.driver.map(|drv| (n.name, drv)))
            .collect(),
        device_nodes: probe_device_nodes(root),
        compatible: identity.compatible.clone().unwrap_or_default(),
        modules: root.list_dir("/sys/module").unwrap_or_default(),
    }
}
