//! A [`Snapshot`] builder for table tests of the pure checks. [`Board::new`] starts from an empty
//! board: every probed value is a clear "not read" error (or empty), and chainable setters add
//! what a check reads. [`run`] judges the board with a built-in profile.

use super::{run_all, Finding};
use crate::model::sensors::{Sensors, ThermalZone, TripPoint};
use crate::model::*;
use crate::parse::bootfile::BootFileKind;
use crate::parse::dpkg::{DpkgPackage, DpkgState};
use crate::parse::limits::{LimitPair, ProcessLimits};
use crate::parse::meminfo::MemInfo;
use crate::profile::{parse_profile, Profile, BUILTIN};
use crate::root::{ReadError, ReadErrorKind};

/// A `NotFound` error for `path`: the test board has no such file.
pub(crate) fn not_read<T>(path: &str) -> Probed<T> {
    Err(ReadError {
        path: path.into(),
        kind: ReadErrorKind::NotFound,
        detail: "not read: absent from the test board".into(),
    })
}

/// The built-in profile `id` (`rpi5-hailo8`, `rk3588-rknpu`, `generic`...).
///
/// Panics (test-only) when no built-in profile has that id.
pub(crate) fn profile(id: &str) -> Profile {
    let (name, text) = BUILTIN
        .iter()
        .find(|(n, _)| *n == format!("{id}.toml"))
        .unwrap_or_else(|| panic!("no built-in profile {id}"));
    parse_profile(name, text).unwrap_or_else(|e| panic!("{e}"))
}

/// Runs every check on `snap` under the built-in profile `profile_id` and keeps the findings of
/// check `id`.
pub(crate) fn run(profile_id: &str, snap: &Snapshot, id: &str) -> Vec<Finding> {
    let p = profile(profile_id);
    let out: Vec<Finding> = run_all(&p, snap, "test", false)
        .into_iter()
        .filter(|f| f.id == id)
        .collect();
    assert!(!out.is_empty(), "no finding for {id}");
    out
}

/// The single (or most severe) finding of check `id`.
pub(crate) fn one(profile_id: &str, snap: &Snapshot, id: &str) -> Finding {
    run(profile_id, snap, id)
        .into_iter()
        .max_by_key(|f| f.status.severity())
        .expect("run() returns at least one finding")
}

/// The list of a probed value, marking it read (an empty list) when it was not.
fn read_list<T>(p: &mut Probed<Vec<T>>) -> &mut Vec<T> {
    if p.is_err() {
        *p = Ok(Vec::new());
    }
    match p {
        Ok(v) => v,
        Err(_) => unreachable!("set to Ok above"),
    }
}

/// A test board under construction.
pub(crate) struct Board {
    snap: Snapshot,
}

/// Mebibytes to bytes.
pub(crate) const MIB: u64 = 1024 * 1024;

impl Board {
    /// An empty board: nothing read, no devices, no logs, clock state unknown.
    pub(crate) fn new() -> Self {
        let identity = Identity {
            model: not_read("/proc/device-tree/model"),
            compatible: not_read("/proc/device-tree/compatible"),
            serial: None,
            has_pcie3x4_node: false,
            armbian_release: Vec::new(),
            os_pretty_name: None,
            kernel_release: not_read("/proc/sys/kernel/osrelease"),
            arch: None,
        };
        let sensors = Sensors {
            thermal: not_read(sensors::THERMAL_DIR),
            hwmon: Vec::new(),
            rpi_volt: None,
            hailo_temp_mc: None,
            npu_load: None,
            npu_freq_hz: None,
            npu_devfreq: None,
            usb_max_current_enable: None,
            fs: Vec::new(),
            agent: None,
            pi: Default::default(),
        };
        let snap = Snapshot {
            live: false,
            now_unix_s: None,
            clock: ClockSync::Unknown("no time service state in the test board".into()),
            identity,
            pci: not_read("/sys/bus/pci/devices"),
            modules: Vec::new(),
            proc_modules: not_read("/proc/modules"),
            module_files: Vec::new(),
            device_nodes: Vec::new(),
            drm: not_read("/sys/class/drm"),
            rknpu_version_files: Vec::new(),
            dpkg: not_read("/var/lib/dpkg/status"),
            dpkg_log: not_read("/var/log/dpkg.log"),
            libraries: Vec::new(),
            rknn_runtime: Vec::new(),
            firmware: not_read("/lib/firmware"),
            firmware_root_exists: false,
            binaries: Vec::new(),
            processes: not_read("/proc"),
            file_nr: not_read("/proc/sys/fs/file-nr"),
            configured_limits: Vec::new(),
            meminfo: not_read("/proc/meminfo"),
            buddyinfo: not_read("/proc/buddyinfo"),
            vmstat: not_read("/proc/vmstat"),
            cmdline: not_read("/proc/cmdline"),
            boot_files: Vec::new(),
            dt_cma: None,
            logs: Vec::new(),
            log_sources: Vec::new(),
            page_size: PageSize {
                bytes: 4096,
                source: "fallback".into(),
            },
            uptime_s: not_read("/proc/uptime"),
            boot_id: not_read("/proc/sys/kernel/random/boot_id"),
            llm: llm::LlmProbe::disabled(),
            sensors,
            stack: stack::StackFacts::default(),
            workloads: Default::default(),
            unseen_dirs: Vec::new(),
        };
        Board { snap }
    }

    /// `dir` (`/etc`, `/boot`, `/var/lib/dpkg`) is not visible at all, as in a container.
    pub(crate) fn unseen(mut self, dir: &str) -> Self {
        self.snap.unseen_dirs.push(dir.into());
        self
    }

    /// The finished snapshot.
    pub(crate) fn build(self) -> Snapshot {
        self.snap
    }

    /// `/proc/meminfo` with `MemTotal`/`MemFree`/`MemAvailable` (bytes) and, when given,
    /// `CmaTotal`/`CmaFree` (bytes).
    pub(crate) fn meminfo(mut self, total: u64, free: u64, cma: Option<(u64, u64)>) -> Self {
        self.snap.meminfo = Ok(MemInfo {
            mem_total_bytes: Some(total),
            mem_free_bytes: Some(free),
            mem_available_bytes: Some(free),
            cma_total_bytes: cma.map(|c| c.0),
            cma_free_bytes: cma.map(|c| c.1),
            malformed: Vec::new(),
        });
        self
    }

    /// `/proc/cmdline`.
    pub(crate) fn cmdline(mut self, line: &str) -> Self {
        self.snap.cmdline = Ok(line.into());
        self
    }

    /// A boot file the profile names, with its text.
    pub(crate) fn boot_file(mut self, path: &str, kind: BootFileKind, text: &str) -> Self {
        self.snap.boot_files.push(BootFileRead {
            path: path.into(),
            kind,
            text: Ok(text.into()),
        });
        self
    }

    /// An installed dpkg package (the database counts as read from then on).
    pub(crate) fn package(mut self, name: &str, version: &str) -> Self {
        let list = read_list(&mut self.snap.dpkg);
        list.push(DpkgPackage {
            name: name.into(),
            version: version.into(),
            state: DpkgState::Installed,
            arch: "arm64".into(),
            line: list.len() * 10 + 1,
        });
        self
    }

    /// A PCI function (the PCI tree counts as read from then on).
    pub(crate) fn pci(mut self, vendor: u16, device: u16, driver: Option<&str>) -> Self {
        let list = read_list(&mut self.snap.pci);
        list.push(PciDevice {
            aer: None,
            bdf: format!("0001:{:02x}:00.0", list.len() + 1),
            vendor,
            device,
            driver: driver.map(Into::into),
            link_speed: Some("8.0 GT/s PCIe".into()),
            link_width: Some(1),
        });
        self
    }

    /// A `/sys/module/<name>/version` and the name in `/proc/modules`.
    pub(crate) fn module(mut self, name: &str, version: Option<&str>) -> Self {
        self.snap.modules.push(ModuleVersion {
            name: name.into(),
            version: version.map(Into::into),
        });
        read_list(&mut self.snap.proc_modules).push(name.into());
        self
    }

    /// A runtime binary and the sonames its ELF `NEEDED` entries name.
    pub(crate) fn binary(mut self, path: &str, needed: &[&str]) -> Self {
        self.snap.binaries.push(BinaryNeeded {
            path: path.into(),
            needed: Ok(needed.iter().map(|n| n.to_string()).collect()),
        });
        self
    }

    /// A device node that exists (`/dev/hailo0`, `/dev/rknpu`).
    pub(crate) fn device_node(mut self, path: &str) -> Self {
        self.snap.device_nodes.push(path.into());
        self
    }

    /// An rknpu version source and its content.
    pub(crate) fn rknpu_version_file(mut self, path: &str, text: &str) -> Self {
        self.snap
            .rknpu_version_files
            .push((path.into(), Ok(text.into())));
        self
    }

    /// A workload process with soft=hard `nofile` (files) and `memlock` (bytes) limits;
    /// `None` = unlimited. The process table counts as read from then on.
    pub(crate) fn process(
        mut self,
        pid: u32,
        comm: &str,
        nofile: Option<u64>,
        memlock_bytes: Option<u64>,
    ) -> Self {
        let limits = ProcessLimits {
            nofile: LimitPair {
                soft: nofile,
                hard: nofile,
            },
            memlock_bytes: LimitPair {
                soft: memlock_bytes,
                hard: memlock_bytes,
            },
        };
        read_list(&mut self.snap.processes).push(ProcessInfo {
            pid,
            comm: comm.into(),
            cmdline: vec![comm.into()],
            limits: Ok(limits),
            container: None,
            unit: None,
        });
        self
    }

    /// `/etc/os-release` with `ID` and `PRETTY_NAME`; Debian-like ids also get dpkg.
    pub(crate) fn os(mut self, id: &str, pretty: &str) -> Self {
        self.snap.stack.os_release = Some(stack::OsRelease {
            id: id.into(),
            pretty_name: Some(pretty.into()),
            ..Default::default()
        });
        self.snap.identity.os_pretty_name = Some(pretty.into());
        self
    }

    /// A `libhailort.so.*` (or other runtime library) file at `path`.
    pub(crate) fn library(mut self, path: &str) -> Self {
        self.snap.libraries.push(path.into());
        self
    }

    /// A platform NPU device bound to `driver`.
    pub(crate) fn platform_npu(mut self, name: &str, driver: Option<&str>) -> Self {
        self.snap.stack.platform_npus.push(stack::PlatformDevice {
            name: name.into(),
            driver: driver.map(str::to_string),
            source: format!("/sys/devices/platform/{name}/driver"),
        });
        self
    }

    /// The last workload process runs in a container (`docker`, ...).
    pub(crate) fn in_container(mut self, runtime: &str) -> Self {
        if let Some(p) = read_list(&mut self.snap.processes).last_mut() {
            p.container = Some(runtime.into());
        }
        self
    }

    /// The last workload process runs in this systemd service (from its cgroup).
    pub(crate) fn in_unit(mut self, unit: &str) -> Self {
        if let Some(p) = read_list(&mut self.snap.processes).last_mut() {
            p.unit = Some(unit.into());
        }
        self
    }

    /// The process table, read and empty.
    pub(crate) fn no_processes(mut self) -> Self {
        self.snap.processes = Ok(Vec::new());
        self
    }

    /// A configured `nofile`/`memlock` limit (`scope` as in [`ConfiguredLimit`]).
    pub(crate) fn configured_limit(
        mut self,
        file: &str,
        item: &str,
        value: Option<u64>,
        scope: &str,
    ) -> Self {
        self.snap.configured_limits.push(ConfiguredLimit {
            file: file.into(),
            line: 1,
            item: item.into(),
            value,
            scope: scope.into(),
            text: format!("{item}={value:?}"),
        });
        self
    }

    /// A log of `class` at `path` holding `lines`.
    pub(crate) fn log(mut self, path: &str, class: LogClass, lines: &[&str]) -> Self {
        self.snap.logs.push(LogFile {
            path: path.into(),
            class,
            lines: lines.iter().map(|l| l.to_string()).collect(),
            cut: false,
        });
        self
    }

    /// A thermal zone of `kind` at `temp_mc` millidegrees with (trip type, millidegrees) trips.
    pub(crate) fn thermal_zone(mut self, kind: &str, temp_mc: i64, trips: &[(&str, i64)]) -> Self {
        let zones = read_list(&mut self.snap.sensors.thermal);
        zones.push(ThermalZone {
            zone: format!("thermal_zone{}", zones.len()),
            kind: kind.into(),
            temp_mc: Ok(temp_mc),
            trips: trips
                .iter()
                .enumerate()
                .map(|(i, (k, t))| TripPoint {
                    index: i as u32,
                    kind: k.to_string(),
                    temp_mc: *t,
                })
                .collect(),
        });
        self
    }

    /// The clock state a time service reports.
    pub(crate) fn clock(mut self, clock: ClockSync) -> Self {
        self.snap.clock = clock;
        self
    }

    /// A process `pid` (`comm`) holding the device node `device` open (as fd 23).
    pub(crate) fn npu_user(mut self, pid: u32, comm: &str, device: &str) -> Self {
        self.snap.stack.npu_users.push(stack::NpuUser {
            pid,
            comm: comm.into(),
            cmdline: String::new(),
            device: device.into(),
            source: format!("/proc/{pid}/fd/23"),
        });
        self
    }

    /// HailoRT's multi-process service runs as `pid`.
    pub(crate) fn hailort_service(mut self, pid: u32) -> Self {
        self.snap.stack.hailort_service_pid = Some(pid);
        self
    }

    /// An `options <module> <options>` line of the modprobe.d file `file`.
    pub(crate) fn module_option(mut self, file: &str, module: &str, options: &str) -> Self {
        self.snap.stack.module_options.push(stack::ModuleOptions {
            file: file.into(),
            module: module.into(),
            options: options.into(),
        });
        self
    }

    /// The kernel's page size, bytes.
    pub(crate) fn page_size(mut self, bytes: u64) -> Self {
        self.snap.page_size = PageSize {
            bytes,
            source: "kernel".into(),
        };
        self
    }
}
