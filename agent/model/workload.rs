//! NPU workloads as found on the board: where each runs (a process, a systemd unit, a
//! container or Home Assistant add-on, or only its log file), which app of the catalog it is,
//! and which log sources were read for it.

use serde::Serialize;

/// Where a workload runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Place {
    /// A process on the host.
    Process {
        /// Process id.
        pid: u32,
    },
    /// A systemd service.
    Unit {
        /// Unit name (`hailo-ollama.service`).
        unit: String,
    },
    /// A container.
    Container {
        /// `docker`, `podman` or `cri`.
        engine: String,
        /// Container id (or the pod's directory for CRI).
        id: String,
        /// Image reference, when known.
        image: String,
        /// True for a Home Assistant add-on (`addon_<repository>_<slug>`).
        addon: bool,
    },
    /// Known only from its log file.
    LogFile,
}

/// One NPU workload.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Workload {
    /// Its name where it runs: the container's, the unit's, the process's, or the app's.
    pub name: String,
    /// The catalog app it is (`frigate`), if any.
    pub app: Option<String>,
    /// The app's name for people.
    pub app_name: Option<String>,
    /// Where it runs.
    pub place: Place,
    /// How it was found (`docker container frigate, image …; /dev/hailo0 passed in`).
    pub why: String,
    /// Its NPU runtime comes inside its image (the host's packages do not reach it).
    pub bundles_runtime: bool,
    /// The log sources read for it (board paths, or `journal:…`).
    pub logs: Vec<String>,
    /// Words that mark its NPU part's lines (the catalog app's `npu_context`).
    pub npu_context: Vec<String>,
    /// Model files its command line names (`--hef-path /home/pi/yolov8m.hef`), host paths.
    pub models: Vec<String>,
}

impl Workload {
    /// `Frigate (docker container frigate)`: how a summary names it.
    pub fn label(&self) -> String {
        let place = match &self.place {
            Place::Process { pid } => format!("process {} (pid {pid})", self.name),
            Place::Unit { unit } => format!("unit {unit}"),
            Place::Container { addon: true, .. } => format!("Home Assistant add-on {}", self.name),
            Place::Container { engine, .. } => format!("{engine} container {}", self.name),
            Place::LogFile => format!("log {}", self.logs.first().cloned().unwrap_or_default()),
        };
        match &self.app_name {
            Some(a) => format!("{a} ({place})"),
            None => place,
        }
    }

    /// True when it runs in a container or add-on.
    pub fn in_container(&self) -> bool {
        matches!(self.place, Place::Container { .. })
    }
}

/// How a log source's bytes are laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum LogFormat {
    /// One message per line.
    Plain,
    /// Docker's json-file driver.
    DockerJson,
    /// CRI / podman k8s-file.
    Cri,
}

/// A workload log to read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkloadLog {
    /// Board path.
    pub path: String,
    /// Its layout.
    pub format: LogFormat,
    /// Most bytes of its tail to read.
    pub max_bytes: u64,
}

/// A model file a workload names, with what its header says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelFile {
    /// Board path.
    pub path: String,
    /// The workload that names it.
    pub workload: String,
    /// The HEF header, or why it could not be read.
    pub hef: Result<crate::parse::hef::HefHeader, String>,
}

/// What discovery found: the workloads, their log files, and the journal matches of their
/// units and containers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Discovered {
    /// The workloads, in the order found.
    pub workloads: Vec<Workload>,
    /// Their log files.
    pub logs: Vec<WorkloadLog>,
    /// `journalctl` matches (`_SYSTEMD_UNIT=…`, `CONTAINER_NAME=…`) for their journal lines.
    pub journal_matches: Vec<String>,
    /// What discovery could not look at, and why (a directory cut at its bound, an
    /// unreadable engine directory).
    pub notes: Vec<String>,
    /// HEF models the workloads on the host name, with their headers.
    pub models: Vec<ModelFile>,
}
