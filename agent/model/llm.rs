//! Server-profile inputs (`x86-hybrid-moe`) as probed: NUMA state, LLM command lines, the model
//! files they load, GPU memory.

use super::logs::LogFile;
use super::probed::Probed;
use crate::parse::{gguf, llmargs, numa, nvsmi};
use crate::root::{ReadError, ReadErrorKind};

/// Captured `nvidia-smi --query-gpu=index,name,memory.total,memory.used,memory.free --format=csv`
/// output in a board tree (read when the root is not the live system, or nvidia-smi is absent).
pub const NVIDIA_SMI_CSV: &str = "/run/npu-agent/nvidia-smi.csv";

/// A `kernel.numa_balancing` line in a sysctl file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SysctlSetting {
    /// Board path.
    pub file: String,
    /// 1-based line.
    pub line: usize,
    /// The value as written.
    pub value: String,
    /// The line.
    pub text: String,
}

/// One shard of a model file.
#[derive(Debug, Clone)]
pub struct ModelShard {
    /// Board path.
    pub path: String,
    /// The header, or why it could not be read.
    pub header: Probed<gguf::GgufHeader>,
    /// File length, when the file could be opened.
    pub file_len: Option<u64>,
}

/// The model a command line loads.
#[derive(Debug, Clone)]
pub struct ModelFiles {
    /// `-m` as written.
    pub arg: String,
    /// Board path it resolves to.
    pub path: String,
    /// The file and, for a split model, its other shards (first shard first).
    pub shards: Vec<ModelShard>,
}

/// One LLM command line: a running process, or the one given with `--llm-cmdline`.
#[derive(Debug, Clone)]
pub struct LlmSource {
    /// Process id; `None` for `--llm-cmdline`.
    pub pid: Option<u32>,
    /// `comm`, or `--llm-cmdline`.
    pub comm: String,
    /// The arguments, or why the command line could not be split.
    pub args: Result<llmargs::LlmArgs, String>,
    /// `/proc/<pid>/numa_maps` (processes only).
    pub numa_maps: Option<Probed<numa::NumaMaps>>,
    /// The model, when `-m` is given.
    pub model: Option<ModelFiles>,
    /// The server's own log, found from the process (`--log-file`, or standard output or error
    /// redirected to a file): its tail.
    pub log: Option<LogFile>,
    /// Other processes of the same server (an SGLang or vLLM server's workers): their pids.
    pub workers: Vec<u32>,
}

impl LlmSource {
    /// `llama-server (pid 4242)` or `--llm-cmdline`.
    pub fn label(&self) -> String {
        match self.pid {
            Some(p) => format!("{} (pid {p})", self.comm),
            None => "--llm-cmdline".to_string(),
        }
    }
}

/// Everything the server checks read.
#[derive(Debug, Clone)]
pub struct LlmProbe {
    /// The profile has server checks (`[llm]`); nothing else is read otherwise.
    pub enabled: bool,
    /// NUMA node ids from `/sys/devices/system/node/node*`.
    pub numa_nodes: Probed<Vec<u32>>,
    /// `/sys/devices/system/node/has_memory`.
    pub nodes_with_memory: Option<Vec<u32>>,
    /// `/proc/sys/kernel/numa_balancing`, trimmed.
    pub numa_balancing: Probed<String>,
    /// `kernel.numa_balancing` lines in sysctl files, in the order systemd-sysctl applies them.
    pub sysctl_settings: Vec<SysctlSetting>,
    /// Listing `/proc` failed.
    pub processes_error: Option<ReadError>,
    /// LLM command lines.
    pub sources: Vec<LlmSource>,
    /// GPU memory.
    pub gpus: Probed<Vec<nvsmi::GpuMemory>>,
    /// Where the GPU figures come from (a file, or the command run).
    pub gpu_source: String,
    /// Per-process GPU memory, when known.
    pub gpu_apps: Option<Vec<(u32, u64)>>,
}

impl LlmProbe {
    /// Nothing read (a profile without server checks).
    pub fn disabled() -> Self {
        let none = |p: &str| ReadError {
            path: p.into(),
            kind: ReadErrorKind::NotFound,
            detail: "not read: the profile has no server checks".into(),
        };
        LlmProbe {
            enabled: false,
            numa_nodes: Err(none("/sys/devices/system/node")),
            nodes_with_memory: None,
            numa_balancing: Err(none("/proc/sys/kernel/numa_balancing")),
            sysctl_settings: Vec::new(),
            processes_error: None,
            sources: Vec::new(),
            gpus: Err(none(NVIDIA_SMI_CSV)),
            gpu_source: String::new(),
            gpu_apps: None,
        }
    }
}
