//! The profile schema as serde types. Every table denies unknown keys; every field not marked
//! required has a default, so a profile states only what differs.

use crate::parse::bootfile::BootFileKind;
use serde::Deserialize;

/// One board profile (`schema = 1`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Profile {
    /// Schema version; must be 1.
    pub schema: u32,
    /// Stable id (`rpi5-hailo10h`), lowercase letters, digits and `-`.
    pub id: String,
    /// Human name.
    pub name: String,
    /// One paragraph on what the profile is for.
    #[serde(default)]
    pub description: String,
    /// How the board is recognised.
    #[serde(default, rename = "match")]
    pub r#match: MatchRules,
    /// The NPU this board family carries.
    #[serde(default)]
    pub npu: NpuSpec,
    /// Package generations, decided by version.
    #[serde(default)]
    pub packages: PackageSpec,
    /// Workload processes and units whose limits matter.
    #[serde(default)]
    pub limits: LimitsSpec,
    /// CMA thresholds and the boot files that carry `cma=`.
    #[serde(default)]
    pub cma: CmaSpec,
    /// Fragmentation thresholds.
    #[serde(default)]
    pub memory: MemorySpec,
    /// Which log files to read.
    #[serde(default)]
    pub logs: LogSpec,
    /// Known fault lines: a substring raises a check with a diagnosis and remedy.
    #[serde(default)]
    pub signature: Vec<Signature>,
    /// Server checks (`kernel.numa_balancing`, `llm.override_tensor`, `llm.vram_budget`).
    #[serde(default)]
    pub llm: LlmSpec,
    /// Accelerators found on the host and joined to this profile (not a file key: set by
    /// [`Profile::join_accelerator`]).
    #[serde(skip)]
    pub accelerators: Vec<Found>,
    /// Joined accelerators of another NPU family than `npu` (not a file key).
    #[serde(skip)]
    pub extra_npus: Vec<ExtraNpu>,
}

/// Server checks: which processes are LLM servers, and the VRAM kept back. A profile without
/// `servers` skips the three server checks.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LlmSpec {
    /// Process names (`comm` or argv[0]'s basename) of llama.cpp-style servers whose `-ot`, `-ngl`
    /// and cache flags are checked; `ktransformers` matches a Python process running it.
    #[serde(default)]
    pub servers: Vec<String>,
    /// VRAM (bytes) counted on top of weights and KV cache for the CUDA context and compute
    /// buffers: an estimate, the real figure depends on `-b`/`-ub` and the build.
    #[serde(default)]
    pub vram_reserve_bytes: u64,
}

impl LlmSpec {
    /// True when the profile runs the server checks.
    pub fn enabled(&self) -> bool {
        !self.servers.is_empty()
    }
}

/// Detection rules; a profile with none of them matches only when chosen by id.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MatchRules {
    /// `/proc/device-tree/compatible` entries, any of; a trailing `*` matches a prefix.
    #[serde(default)]
    pub compatible: Vec<String>,
    /// Substrings of `/proc/device-tree/model`, any of.
    #[serde(default)]
    pub model: Vec<String>,
    /// PCI `vendor:device` ids (hex), any of; the strongest evidence.
    #[serde(default)]
    pub pci_ids: Vec<String>,
    /// Installed packages that hint at this profile, any of.
    #[serde(default)]
    pub packages: Vec<String>,
    /// CPU architectures (`x86_64`): when set, the profile matches only on one of them.
    #[serde(default)]
    pub arch: Vec<String>,
    /// PCI vendor ids (hex, `10de` = NVIDIA), any device of the vendor, any of.
    #[serde(default)]
    pub pci_vendors: Vec<String>,
    /// Running processes (`comm`; `ktransformers` for a Python process running it), any of.
    #[serde(default)]
    pub processes: Vec<String>,
}

impl MatchRules {
    /// True when the profile declares no rule (e.g. `generic`).
    pub fn is_empty(&self) -> bool {
        self.compatible.is_empty()
            && self.model.is_empty()
            && self.pci_ids.is_empty()
            && self.packages.is_empty()
            && self.pci_vendors.is_empty()
            && self.processes.is_empty()
    }
}

/// Which NPU family the profile expects.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NpuKind {
    /// No NPU checks (generic boards).
    #[default]
    None,
    /// Hailo on PCIe (Hailo-8/8L/10H).
    Hailo,
    /// Rockchip rknpu (RK3588/RK3588S).
    Rknpu,
}

/// What the NPU should look like.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NpuSpec {
    /// NPU family.
    #[serde(default)]
    pub kind: NpuKind,
    /// Chip name for messages (`Hailo-10H`).
    #[serde(default)]
    pub chip: String,
    /// PCI ids of the expected chip (Hailo).
    #[serde(default)]
    pub pci_ids: Vec<String>,
    /// PCI driver names that are right for the chip (`hailo1x`).
    #[serde(default)]
    pub drivers: Vec<String>,
    /// PCI driver names of the other generation (`hailo`).
    #[serde(default)]
    pub wrong_drivers: Vec<String>,
    /// Kernel modules that are right (`hailo1x_pci`); versions from `/sys/module/<m>/version`.
    #[serde(default)]
    pub modules: Vec<String>,
    /// Kernel modules of the other generation (`hailo_pci`).
    #[serde(default)]
    pub wrong_modules: Vec<String>,
    /// HailoRT generation (major version) the chip needs: 5 for Hailo-10H, 4 for Hailo-8/8L.
    #[serde(default)]
    pub generation: Option<u32>,
    /// Firmware directory or file prefix (`/lib/firmware/hailo/hailo10h`).
    #[serde(default)]
    pub firmware_dir: String,
    /// Files that must be in `firmware_dir` (a trailing `*` matches a prefix).
    #[serde(default)]
    pub firmware_files: Vec<String>,
    /// Expected negotiated PCIe speed as sysfs prints it without the " PCIe" suffix (`8.0 GT/s`).
    #[serde(default)]
    pub pcie_link_speed: String,
    /// Expected negotiated PCIe width.
    #[serde(default)]
    pub pcie_link_width: Option<u32>,
    /// Binaries whose ELF `NEEDED` libhailort must exist (`/usr/bin/hailo-ollama`).
    #[serde(default)]
    pub runtime_binaries: Vec<String>,
    /// Minimum driver version (rknpu: 0.9.8 for RKLLM).
    #[serde(default)]
    pub min_driver_version: Option<String>,
    /// How to install the chip's driver and runtime line where no metapackage does it (an x86
    /// host with a Hailo card): the words of the remedy.
    #[serde(default)]
    pub install: String,
}

/// Package generations for the Hailo stack.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PackageSpec {
    /// Metapackages whose *name* fixes the generation (their version is a packaging number):
    /// `{ "hailo-all" = 4, "hailo-h10-all" = 5 }`.
    #[serde(default)]
    pub metapackages: std::collections::BTreeMap<String, u32>,
    /// Packages whose *version major* is the HailoRT generation.
    #[serde(default)]
    pub versioned: Vec<String>,
    /// Packages whose version is the libhailort version (for the driver == library rule).
    #[serde(default)]
    pub library: Vec<String>,
    /// Packages that own the firmware files (their upgrade after boot leaves old firmware running).
    #[serde(default)]
    pub firmware: Vec<String>,
    /// Packages whose `Depends: hailort` can pull the wrong runtime (GenAI: `hailo-gen-ai-model-zoo`).
    #[serde(default)]
    pub genai: Vec<String>,
    /// Packages built for exactly one runtime release: their version (without the Debian
    /// revision) must equal the installed runtime's (`library`) major.minor.patch
    /// (`hailo-gen-ai-model-zoo`, `python3-h10-hailort`).
    #[serde(default)]
    pub same_version: Vec<String>,
    /// Packages released in step with the runtime by major.minor (TAPPAS 5.1.x with HailoRT
    /// 5.1.x); compared only when their major equals the runtime's (TAPPAS 3.x went with 4.x).
    #[serde(default)]
    pub same_minor: Vec<String>,
}

/// Workloads whose limits matter, and thresholds.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsSpec {
    /// Process names (`/proc/<pid>/comm`, or argv[0]'s basename) of the NPU workloads.
    #[serde(default)]
    pub workloads: Vec<String>,
    /// systemd units that run them (their `LimitNOFILE=`/`LimitMEMLOCK=` lines are read).
    #[serde(default)]
    pub units: Vec<String>,
    /// Soft `Max open files` below this is a warning (RKNN turns every buffer into an fd).
    #[serde(default = "default_min_nofile")]
    pub min_nofile: u64,
    /// Soft `Max locked memory` below this (bytes) is a warning; 0 = information only.
    #[serde(default)]
    pub min_memlock_bytes: u64,
}

fn default_min_nofile() -> u64 {
    4096
}

impl Default for LimitsSpec {
    fn default() -> Self {
        LimitsSpec {
            workloads: Vec::new(),
            units: Vec::new(),
            min_nofile: default_min_nofile(),
            min_memlock_bytes: 0,
        }
    }
}

/// What a `cma=` on the kernel command line means on this board.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum CmdlineCma {
    /// The usual way to size the pool.
    #[default]
    Ok,
    /// Harmful: it replaces a device-tree pool that firmware depends on (Pi 5).
    Harmful,
}

/// A boot file candidate.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BootFileSpec {
    /// Absolute path on the board.
    pub path: String,
    /// How to read it.
    pub kind: BootFileKind,
}

/// CMA thresholds (bytes) and boot files.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CmaSpec {
    /// `CmaTotal` below this fails `cma.pool_size`.
    #[serde(default)]
    pub min_total_bytes: Option<u64>,
    /// `CmaTotal` below this is `info` (a workload may need more).
    #[serde(default)]
    pub recommended_total_bytes: Option<u64>,
    /// `CmaFree` below this percentage of `CmaTotal` is a warning.
    #[serde(default = "default_min_free_percent")]
    pub min_free_percent: u64,
    /// Boot files that may carry `cma=`, in order of preference (the first present one is used).
    #[serde(default)]
    pub boot_files: Vec<BootFileSpec>,
    /// What a command-line `cma=` means here.
    #[serde(default)]
    pub cmdline_cma: CmdlineCma,
    /// The size to suggest in remedies (`256M`).
    #[serde(default)]
    pub suggested_size: String,
    /// True when the NPU allocates through an IOMMU (RK3588), so a small pool rarely limits it.
    #[serde(default)]
    pub npu_behind_iommu: bool,
}

fn default_min_free_percent() -> u64 {
    10
}

impl Default for CmaSpec {
    fn default() -> Self {
        CmaSpec {
            min_total_bytes: None,
            recommended_total_bytes: None,
            min_free_percent: default_min_free_percent(),
            boot_files: Vec::new(),
            cmdline_cma: CmdlineCma::Ok,
            suggested_size: String::new(),
            npu_behind_iommu: false,
        }
    }
}

/// Fragmentation thresholds.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MemorySpec {
    /// Buddy order that counts as "large" (9 = 2 MiB blocks on 4 KiB pages).
    #[serde(default = "default_order")]
    pub fragmentation_order: usize,
    /// Free memory in blocks of at least that order below this (bytes) is a warning.
    #[serde(default = "default_min_high_order")]
    pub min_free_high_order_bytes: u64,
}

fn default_order() -> usize {
    9
}
fn default_min_high_order() -> u64 {
    32 << 20
}

impl Default for MemorySpec {
    fn default() -> Self {
        MemorySpec {
            fragmentation_order: default_order(),
            min_free_high_order_bytes: default_min_high_order(),
        }
    }
}

/// Log files to read (absolute paths; `*` allowed in the last component).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogSpec {
    /// The host kernel log (or a journal export of it).
    #[serde(default)]
    pub kernel: Vec<String>,
    /// Workload logs (`/var/log/rkllm/*.log`, `hailort.log`, app logs).
    #[serde(default)]
    pub workload: Vec<String>,
    /// Logs written by the accelerator's own OS (Hailo-10H device side): their CMA lines are not
    /// host CMA.
    #[serde(default)]
    pub device: Vec<String>,
}

impl LogSpec {
    /// Every path, kernel first.
    pub fn all(&self) -> impl Iterator<Item = &String> {
        self.kernel
            .iter()
            .chain(self.workload.iter())
            .chain(self.device.iter())
    }
}

/// A known fault line.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Signature {
    /// Check id it raises.
    pub check: String,
    /// Substring to look for.
    pub contains: String,
    /// Status it raises (`info`, `warn`, `fail`).
    pub status: crate::model::Status,
    /// What it means.
    pub diagnosis: String,
    /// What to do.
    pub remedy: String,
}

/// An accelerator found on the host, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    /// Catalog id.
    pub id: String,
    /// Name for people.
    pub name: String,
    /// Its NPU family (`None` for one the agent only names).
    pub kind: NpuKind,
    /// What showed it (`PCI 1e60:2864 at 0000:02:00.0`).
    pub why: String,
}

/// An accelerator of another NPU family than the board profile's own, joined to it.
#[derive(Debug, Clone)]
pub struct ExtraNpu {
    /// Its NPU expectations.
    pub npu: NpuSpec,
    /// Its package generations.
    pub packages: PackageSpec,
}
