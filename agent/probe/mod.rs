//! Probes: read the board's files under a [`SysRoot`] into a [`Snapshot`]. Probes never decide
//! anything; a file that cannot be read is kept as a [`ReadError`] (with the board path and the
//! reason) so the check that needed it can say `skip` or `error` and the run goes on.
//!
//! Two phases: [`probe_identity`] reads what profile detection needs (device tree, PCI, dpkg);
//! [`probe`] then reads what the chosen profile names (workloads, logs, boot files, firmware).

pub mod evidence;
mod files;
pub mod llm;
pub mod sensors;

use crate::parse::{buddyinfo, devicetree, dpkg, kv, limits, meminfo, vmstat};
use crate::profile::Profile;
use crate::root::{ReadError, SysRoot};
pub use files::*;
use std::collections::BTreeMap;

/// A probed value or why it could not be read.
pub type Probed<T> = Result<T, ReadError>;

/// Longest log tail read per file (2 MiB).
pub const LOG_TAIL_BYTES: u64 = 2 * 1024 * 1024;

/// The board's identity: device tree, release files, kernel.
#[derive(Debug, Clone)]
pub struct Identity {
    /// `/proc/device-tree/model`.
    pub model: Probed<String>,
    /// `/proc/device-tree/compatible` entries.
    pub compatible: Probed<Vec<String>>,
    /// `/proc/device-tree/serial-number`.
    pub serial: Option<String>,
    /// `/proc/device-tree/pcie@fe150000` exists (only in a full-RK3588 device tree).
    pub has_pcie3x4_node: bool,
    /// `/etc/armbian-release` entries (`BOARD=`, `BOARDFAMILY=`).
    pub armbian_release: Vec<kv::KvEntry>,
    /// `/etc/os-release` `PRETTY_NAME`.
    pub os_pretty_name: Option<String>,
    /// `/proc/sys/kernel/osrelease`.
    pub kernel_release: Probed<String>,
    /// CPU architecture: `/proc/sys/kernel/arch`, else the agent's own when the root is live.
    pub arch: Option<String>,
}

/// One PCI function from `/sys/bus/pci/devices/<bdf>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PciDevice {
    /// Bus address (`0001:01:00.0`).
    pub bdf: String,
    /// Vendor id.
    pub vendor: u16,
    /// Device id.
    pub device: u16,
    /// Bound driver (basename of the `driver` link), if any.
    pub driver: Option<String>,
    /// `current_link_speed` (`8.0 GT/s PCIe`).
    pub link_speed: Option<String>,
    /// `current_link_width`.
    pub link_width: Option<u32>,
}

/// A kernel module's version file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModuleVersion {
    /// Module name (`hailo1x_pci`).
    pub name: String,
    /// `/sys/module/<name>/version` content, trimmed; `None` when the module directory exists
    /// without a version file.
    pub version: Option<String>,
}

/// A DRM device node and the driver behind it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DrmNode {
    /// Node name (`renderD129`, `card1`).
    pub name: String,
    /// Driver basename from `/sys/class/drm/<name>/device/driver`.
    pub driver: Option<String>,
}

/// A process that the profile names as an NPU workload.
#[derive(Debug, Clone)]
pub struct ProcessInfo {
    /// Process id.
    pub pid: u32,
    /// `/proc/<pid>/comm`.
    pub comm: String,
    /// `/proc/<pid>/cmdline`, NUL-separated arguments.
    pub cmdline: Vec<String>,
    /// `/proc/<pid>/limits`.
    pub limits: Probed<limits::ProcessLimits>,
}

/// `/proc/sys/fs/file-nr`: allocated handles, free handles, maximum.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileNr {
    /// Allocated file handles.
    pub allocated: u64,
    /// The system-wide maximum (`file-max`).
    pub max: u64,
}

/// One `Limit*=`/`DefaultLimit*=` line from a systemd unit or system.conf, or a `limits.conf`
/// memlock/nofile line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfiguredLimit {
    /// File it is in.
    pub file: String,
    /// 1-based line.
    pub line: usize,
    /// `nofile` or `memlock`.
    pub item: String,
    /// Value in files or bytes; `None` = infinity/unlimited.
    pub value: Option<u64>,
    /// Where it applies: `unit:<name>`, `default` (system.conf) or `pam:<domain>` (limits.conf).
    pub scope: String,
    /// The line as written.
    pub text: String,
}

/// A boot file the profile names, as read.
#[derive(Debug, Clone)]
pub struct BootFileRead {
    /// Board path.
    pub path: String,
    /// How to read it.
    pub kind: crate::parse::bootfile::BootFileKind,
    /// Its text.
    pub text: Probed<String>,
}

/// The device-tree CMA node (`/proc/device-tree/reserved-memory/linux,cma`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DtCma {
    /// `size` in bytes.
    pub size_bytes: Option<u64>,
    /// `alloc-ranges` as (start, size) pairs in bytes.
    pub alloc_ranges: Vec<(u64, u64)>,
}

/// Which side a log comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogClass {
    /// The host kernel.
    Kernel,
    /// An NPU workload on the host.
    Workload,
    /// The accelerator's own operating system (not host memory).
    Device,
}

/// Lines of one log source: a file's tail, the kernel ring buffer, or journal entries.
#[derive(Debug, Clone)]
pub struct LogFile {
    /// Board path, or the source's name (`/dev/kmsg`, `journal:_TRANSPORT=kernel`,
    /// `journal:workloads`; see [`evidence`]).
    pub path: String,
    /// Which side wrote it.
    pub class: LogClass,
    /// Lines (at most [`LOG_TAIL_BYTES`] from the end).
    pub lines: Vec<String>,
    /// The file was longer than the tail read, so line numbers in the file are unknown.
    pub cut: bool,
}

/// An upgrade or install line from `/var/log/dpkg.log`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DpkgLogEntry {
    /// Seconds since the epoch (UTC; dpkg writes local time, taken as UTC).
    pub time_unix_s: i64,
    /// `install` or `upgrade`.
    pub action: String,
    /// Package name without `:arch`.
    pub package: String,
    /// Version before (`<none>` for an install).
    pub from: String,
    /// Version after.
    pub to: String,
    /// 1-based line.
    pub line: usize,
}

/// A binary and the shared libraries its ELF `DT_NEEDED` entries name.
#[derive(Debug, Clone)]
pub struct BinaryNeeded {
    /// Board path.
    pub path: String,
    /// `NEEDED` sonames.
    pub needed: Probed<Vec<String>>,
}

/// A piece of the Rockchip NPU userland found on the board (`librknnrt.so`, `librkllmrt.so`, the
/// rknn-toolkit-lite2 Python package, a dpkg package).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuntimeComponent {
    /// `librknnrt`, `librkllmrt` or `rknn-toolkit-lite2`.
    pub name: String,
    /// Board path, or `/var/lib/dpkg/status (<package>)`.
    pub path: String,
    /// Version from the library's embedded version string, the dist-info name or the package;
    /// `None` when the file holds none (an empty placeholder, a stripped build).
    pub version: Option<String>,
}

/// Everything the checks read, gathered once.
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// True when the root is the live system.
    pub live: bool,
    /// Wall clock (seconds since the epoch) when live; for a captured tree, `None`.
    pub now_unix_s: Option<i64>,
    /// Whether a time service reports the wall clock synchronised (`clock.sync`).
    pub clock: crate::check::clock::ClockSync,
    /// Board identity.
    pub identity: Identity,
    /// PCI devices.
    pub pci: Probed<Vec<PciDevice>>,
    /// `/sys/module/<m>/version` of the modules the profile names, plus rknpu and rocket.
    pub modules: Vec<ModuleVersion>,
    /// Names in `/proc/modules`.
    pub proc_modules: Probed<Vec<String>>,
    /// Module files (`*.ko*`) of the profile's modules under `/lib/modules/<release>`.
    pub module_files: Vec<String>,
    /// Device nodes that exist among `/dev/hailo*`, `/dev/h1x-*`, `/dev/rknpu`, `/dev/accel/*`.
    pub device_nodes: Vec<String>,
    /// DRM nodes by driver.
    pub drm: Probed<Vec<DrmNode>>,
    /// rknpu version sources: (board path, content).
    pub rknpu_version_files: Vec<(String, Probed<String>)>,
    /// dpkg status database.
    pub dpkg: Probed<Vec<dpkg::DpkgPackage>>,
    /// `/var/log/dpkg.log` install/upgrade lines.
    pub dpkg_log: Probed<Vec<DpkgLogEntry>>,
    /// Paths of `libhailort.so.*` files in the library directories.
    pub libraries: Vec<String>,
    /// The Rockchip NPU userland (only read for an rknpu profile).
    pub rknn_runtime: Vec<RuntimeComponent>,
    /// Names in the profile's firmware directory.
    pub firmware: Probed<Vec<String>>,
    /// `/lib/firmware` exists at all (a captured tree may leave it out).
    pub firmware_root_exists: bool,
    /// The profile's runtime binaries and their `NEEDED` entries.
    pub binaries: Vec<BinaryNeeded>,
    /// Workload processes.
    pub processes: Probed<Vec<ProcessInfo>>,
    /// System file table.
    pub file_nr: Probed<FileNr>,
    /// Configured limits (units, system.conf, limits.conf).
    pub configured_limits: Vec<ConfiguredLimit>,
    /// `/proc/meminfo`.
    pub meminfo: Probed<meminfo::MemInfo>,
    /// `/proc/buddyinfo`.
    pub buddyinfo: Probed<Vec<buddyinfo::BuddyZone>>,
    /// `/proc/vmstat`.
    pub vmstat: Probed<BTreeMap<String, u64>>,
    /// `/proc/cmdline`.
    pub cmdline: Probed<String>,
    /// The profile's boot files that exist (missing ones are left out).
    pub boot_files: Vec<BootFileRead>,
    /// Device-tree CMA node.
    pub dt_cma: Option<DtCma>,
    /// Logs: kernel lines (class [`LogClass::Kernel`], from `/dev/kmsg`, the journal or files),
    /// workload and device lines, each named by its source.
    pub logs: Vec<LogFile>,
    /// Every log source tried and what happened (read, denied, missing, unused).
    pub log_sources: Vec<evidence::LogSource>,
    /// Page size buddy orders are converted with.
    pub page_size: evidence::PageSize,
    /// `/proc/uptime` first field, seconds.
    pub uptime_s: Probed<f64>,
    /// `/proc/sys/kernel/random/boot_id`.
    pub boot_id: Probed<String>,
    /// Server-profile inputs (NUMA, LLM processes, model headers, GPU memory).
    pub llm: llm::LlmProbe,
    /// Power, thermal and NPU-load sensors (and, live, file-system free space and the agent's
    /// own footprint).
    pub sensors: sensors::Sensors,
}

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
        out.push(PciDevice {
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

/// Reads the dpkg status database.
pub fn probe_dpkg(root: &SysRoot) -> Probed<Vec<dpkg::DpkgPackage>> {
    let path = "/var/lib/dpkg/status";
    let text = root.read_string(path)?;
    dpkg::parse_dpkg_status(&text).map_err(|e| ReadError::malformed(path, e))
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
    log_cursors: Option<&mut evidence::LogCursors>,
) -> Snapshot {
    let meminfo = read_parsed(root, "/proc/meminfo", meminfo::parse_meminfo);
    let buddyinfo = read_parsed(root, "/proc/buddyinfo", buddyinfo::parse_buddyinfo);
    let vmstat = read_parsed(root, "/proc/vmstat", vmstat::parse_vmstat);
    let cmdline = root
        .read_string("/proc/cmdline")
        .map(|s| s.trim().to_string());
    let uptime_s = read_parsed(root, "/proc/uptime", |t| {
        t.split_whitespace()
            .next()
            .and_then(|f| f.parse::<f64>().ok())
            .filter(|f| f.is_finite() && *f >= 0.0)
            .ok_or_else(|| "first field is not a number of seconds".to_string())
    });
    let boot_id = root
        .read_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_string());
    let (logs, log_sources) =
        evidence::probe_logs(root, profile, log_cursors, boot_id.as_deref().ok());
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
        clock: crate::check::clock::probe(root),
        modules: probe_modules(root, profile),
        proc_modules: root.read_string("/proc/modules").map(|t| {
            t.lines()
                .filter_map(|l| l.split_whitespace().next().map(str::to_string))
                .collect()
        }),
        module_files: probe_module_files(root, profile, identity.kernel_release.as_ref().ok()),
        device_nodes: probe_device_nodes(root),
        drm: probe_drm(root),
        rknpu_version_files: [
            "/sys/kernel/debug/rknpu/version",
            "/proc/rknpu/version",
            "/sys/module/rknpu/version",
        ]
        .iter()
        .map(|p| (p.to_string(), root.read_string(p)))
        .collect(),
        dpkg,
        // Only the firmware-package check reads dpkg.log; a profile without one skips the read.
        dpkg_log: if profile.packages.firmware.is_empty() {
            Err(ReadError {
                path: "/var/log/dpkg.log".into(),
                kind: crate::root::ReadErrorKind::NotFound,
                detail: "not read: the profile names no firmware package".into(),
            })
        } else {
            probe_dpkg_log(root)
        },
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
        binaries: profile
            .npu
            .runtime_binaries
            .iter()
            .filter(|p| root.exists(p))
            .map(|p| BinaryNeeded {
                path: p.clone(),
                needed: root
                    .read(p)
                    .and_then(|b| elf_needed(&b).map_err(|e| ReadError::malformed(p, e))),
            })
            .collect(),
        processes: probe_processes(root, &profile.limits.workloads),
        file_nr: read_parsed(root, "/proc/sys/fs/file-nr", |t| {
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
        }),
        configured_limits: probe_configured_limits(root, &profile.limits.units),
        meminfo,
        buddyinfo,
        vmstat,
        cmdline,
        boot_files: profile
            .cma
            .boot_files
            .iter()
            .filter(|b| root.exists(&b.path))
            .map(|b| BootFileRead {
                path: b.path.clone(),
                kind: b.kind,
                text: root.read_string(&b.path),
            })
            .collect(),
        dt_cma: probe_dt_cma(root),
        logs,
        log_sources,
        page_size: evidence::page_size(root),
        uptime_s,
        boot_id,
        llm: llm::probe_llm(root, profile),
        sensors: sensors::probe_sensors(root),
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
