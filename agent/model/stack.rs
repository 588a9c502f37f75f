//! How the board's software is installed, as probed: the OS release, whether the package and
//! init tools exist, DKMS trees, and the NPU's platform devices. The checks turn these facts into
//! the provenance of each part of the NPU stack (`crate::check::stack`); nothing here decides.

/// `/etc/os-release` (os-release(5)), the fields the agent uses.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OsRelease {
    /// `ID` (`debian`, `ubuntu`, `raspbian`, `haos`, `buildroot`, `nixos`), lower case.
    pub id: String,
    /// `ID_LIKE`, split on spaces.
    pub id_like: Vec<String>,
    /// `NAME`.
    pub name: Option<String>,
    /// `VERSION_ID`.
    pub version_id: Option<String>,
    /// `PRETTY_NAME`.
    pub pretty_name: Option<String>,
}

/// Facts about the board's tooling, each `None` when the tree cannot tell.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StackFacts {
    /// `/etc/os-release` (or `/usr/lib/os-release`), when present.
    pub os_release: Option<OsRelease>,
    /// `/etc/armbian-release` exists (Armbian keeps Debian's os-release).
    pub armbian: bool,
    /// `dpkg` exists: `/usr/bin/dpkg` or `/var/lib/dpkg/status` (a captured tree may hold only
    /// the status file).
    pub dpkg: bool,
    /// systemd is the init system: `/run/systemd/system` (live) or a systemd binary in the tree;
    /// `None` when the tree holds neither `/run` nor `/lib/systemd` nor `/usr/lib/systemd`.
    pub systemd: Option<bool>,
    /// Module names with a DKMS tree (`/var/lib/dkms/<name>`).
    pub dkms_modules: Vec<String>,
    /// Platform devices of an on-chip NPU (`fdab0000.npu`) and the driver bound to each.
    pub platform_npus: Vec<PlatformDevice>,
    /// Device-tree NPU nodes (`/proc/device-tree/npu@fdab0000`) and their `status` (`okay` when
    /// the node has none).
    pub npu_dt_nodes: Vec<(String, String)>,
    /// Processes with an NPU device node open (`/proc/<pid>/fd/*` -> `/dev/hailo0`, `/dev/rknpu`,
    /// `/dev/dri/renderD*`, `/dev/accel/*`).
    pub npu_users: Vec<NpuUser>,
    /// Processes whose open files could not be read (another user's, without root).
    pub npu_users_unreadable: usize,
    /// The pid of HailoRT's multi-process service (`hailort_service`), when it runs.
    pub hailort_service_pid: Option<u32>,
    /// `options <module> ...` lines of `/etc/modprobe.d/*.conf` and `/lib/modprobe.d/*.conf`.
    pub module_options: Vec<ModuleOptions>,
    /// A modprobe.d directory exists (a captured tree may leave them out: then the absence of
    /// an option is unknown, not a fact).
    pub modprobe_dirs_seen: bool,
}

/// One `options <module> key=value...` line of a modprobe.d file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModuleOptions {
    /// The file (`/etc/modprobe.d/hailo_pci.conf`).
    pub file: String,
    /// The module (`hailo_pci`).
    pub module: String,
    /// The rest of the line (`force_desc_page_size=4096`).
    pub options: String,
}

/// A process holding an NPU device node open.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NpuUser {
    /// Process id.
    pub pid: u32,
    /// `/proc/<pid>/comm`.
    pub comm: String,
    /// The first arguments of `/proc/<pid>/cmdline` (secrets redacted), space-joined; empty
    /// when unreadable.
    pub cmdline: String,
    /// The device node (`/dev/hailo0`).
    pub device: String,
    /// The fd link it was read from (`/proc/<pid>/fd/<n>`).
    pub source: String,
}

/// A platform device and its bound driver (`/sys/bus/platform/devices/<name>/driver`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlatformDevice {
    /// Device name (`fdab0000.npu`).
    pub name: String,
    /// Basename of the `driver` link (`rknpu`, `rocket`), if bound.
    pub driver: Option<String>,
    /// The board path the driver was read from.
    pub source: String,
}
