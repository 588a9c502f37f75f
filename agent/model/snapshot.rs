//! The snapshot: everything the probes read from a board, gathered once, and what the checks
//! judge. Probes fill it (`crate::probe`); nothing here reads a file.

use super::clock::ClockSync;
use super::logs::{LogFile, LogSource, PageSize};
use super::probed::Probed;
use super::sensors::Sensors;
use crate::parse::{buddyinfo, dpkg, kv, limits, meminfo};
use std::collections::BTreeMap;

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
    /// PCIe AER totals (`aer_dev_correctable` `TOTAL_ERR_COR`, `aer_dev_nonfatal`
    /// `TOTAL_ERR_NONFATAL`, `aer_dev_fatal` `TOTAL_ERR_FATAL`), when the kernel exports them.
    pub aer: Option<AerTotals>,
}

/// PCIe Advanced Error Reporting totals of one device since boot.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AerTotals {
    /// Corrected errors (the link retried: a marginal cable or connector).
    pub correctable: u64,
    /// Uncorrectable, non-fatal errors.
    pub nonfatal: u64,
    /// Uncorrectable, fatal errors.
    pub fatal: u64,
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
    /// The container it runs in, from `/proc/<pid>/cgroup` (`docker`, `containerd`, `libpod`,
    /// `kubepods`, `lxc`), if any.
    pub container: Option<String>,
    /// The systemd service it runs in, from `/proc/<pid>/cgroup` (`rkllm.service`), if any.
    pub unit: Option<String>,
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
    pub clock: ClockSync,
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
    pub log_sources: Vec<LogSource>,
    /// Page size buddy orders are converted with.
    pub page_size: PageSize,
    /// `/proc/uptime` first field, seconds.
    pub uptime_s: Probed<f64>,
    /// `/proc/sys/kernel/random/boot_id`.
    pub boot_id: Probed<String>,
    /// Server-profile inputs (NUMA, LLM processes, model headers, GPU memory).
    pub llm: super::llm::LlmProbe,
    /// Power, thermal and NPU-load sensors (and, live, file-system free space and the agent's
    /// own footprint).
    pub sensors: Sensors,
    /// How the software is installed: os-release, dpkg, systemd, DKMS, platform NPUs.
    pub stack: super::stack::StackFacts,
    /// The NPU workloads found where they run, and their logs.
    pub workloads: super::workload::Discovered,
    /// Host directories of [`VIEW_DIRS`] that are not directories in this view at all
    /// (a container given only `/proc`, `/sys`, `/dev` and the logs): checks that need a file
    /// under one of them say so instead of passing.
    pub unseen_dirs: Vec<String>,
}

/// The host's configuration directories a container view may lack as a whole.
pub const HOST_CONFIG_DIRS: [&str; 3] = ["/etc", "/boot", "/var/lib/dpkg"];

/// The directories whose absence [`Snapshot::unseen_dirs`] records: the configuration ones and
/// `/var/log` (the log files).
pub const VIEW_DIRS: [&str; 4] = ["/etc", "/boot", "/var/lib/dpkg", "/var/log"];

impl Snapshot {
    /// True when `dir` (one of [`VIEW_DIRS`]) is not visible in this view at all.
    pub fn unseen(&self, dir: &str) -> bool {
        self.unseen_dirs.iter().any(|d| d == dir)
    }

    /// True when none of [`HOST_CONFIG_DIRS`] is visible: a container view, not a captured
    /// tree that merely left one out.
    pub fn host_config_unseen(&self) -> bool {
        HOST_CONFIG_DIRS.iter().all(|d| self.unseen(d))
    }
}
