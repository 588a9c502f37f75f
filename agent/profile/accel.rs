//! Accelerators found by what the host shows (`catalog/accelerators.toml`): a Hailo chip by its
//! PCI id or device node, a Rockchip NPU by its platform device, DRM node, driver or SoC. A board
//! profile says what the board is; every accelerator found joins its checks, on any host and
//! architecture (an x86 Frigate box with a Hailo-8 gets every Hailo check).

pub use super::raw::{ExtraNpu, Found};
use super::raw::{LogSpec, NpuKind, NpuSpec, PackageSpec, Signature};
use super::{parse_pci_id, Profile, ProfileError};
use serde::Deserialize;

/// The accelerator catalog compiled into the binary.
pub const CATALOG: &str = include_str!("../../catalog/accelerators.toml");

/// The catalog file: its schema and accelerators.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct CatalogFile {
    schema: u32,
    accelerator: Vec<AcceleratorSpec>,
}

/// One accelerator of the catalog.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AcceleratorSpec {
    /// Stable id (`hailo8`, `hailo10h`, `rknpu`).
    pub id: String,
    /// Name for people (`Hailo-8/8L`).
    pub name: String,
    /// What on the host shows it.
    #[serde(default)]
    pub detect: DetectSpec,
    /// The NPU's expectations, as a board profile's `[npu]`; `kind = "none"` (the default)
    /// names the accelerator in `board.identity` and runs no checks.
    #[serde(default)]
    pub npu: NpuSpec,
    /// Package generations, as a board profile's `[packages]`.
    #[serde(default)]
    pub packages: PackageSpec,
    /// Workload processes and units, as a board profile's `[limits]` (only these two keys).
    #[serde(default)]
    pub limits: AccelLimits,
    /// Its log files.
    #[serde(default)]
    pub logs: LogSpec,
    /// Its known fault lines.
    #[serde(default)]
    pub signature: Vec<Signature>,
}

/// Workloads an accelerator brings.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AccelLimits {
    /// Process names.
    #[serde(default)]
    pub workloads: Vec<String>,
    /// systemd units.
    #[serde(default)]
    pub units: Vec<String>,
}

/// What shows an accelerator on the host.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DetectSpec {
    /// PCI `vendor:device` ids (hex).
    #[serde(default)]
    pub pci_ids: Vec<String>,
    /// Drivers bound to a platform device (`/sys/bus/platform/devices/*/driver`).
    #[serde(default)]
    pub platform_drivers: Vec<String>,
    /// Drivers behind a DRM or accel node (`/sys/class/drm/*/device/driver`).
    #[serde(default)]
    pub drm_drivers: Vec<String>,
    /// Device nodes (`/dev/h1x-*`; a trailing `*` matches a prefix).
    #[serde(default)]
    pub device_nodes: Vec<String>,
    /// SoC entries of `/proc/device-tree/compatible` whose silicon carries it.
    #[serde(default)]
    pub compatible: Vec<String>,
    /// Loaded kernel modules (`/sys/module/<m>`): counted only when nothing else shows a chip of
    /// the same family.
    #[serde(default)]
    pub modules: Vec<String>,
}

/// What the host shows, as detection reads it.
#[derive(Debug, Clone, Default)]
pub struct HostFacts {
    /// PCI functions: (address, vendor, device).
    pub pci: Vec<(String, u16, u16)>,
    /// Platform devices and their bound driver.
    pub platform: Vec<(String, String)>,
    /// DRM/accel nodes and their driver.
    pub drm: Vec<(String, String)>,
    /// Device nodes that exist (`/dev/hailo0`).
    pub device_nodes: Vec<String>,
    /// `/proc/device-tree/compatible` entries.
    pub compatible: Vec<String>,
    /// Kernel modules present under `/sys/module`.
    pub modules: Vec<String>,
}

/// Parses the built-in catalog.
///
/// Errors: a catalog that does not parse or validate (a build with a broken catalog fails its
/// unit tests).
pub fn catalog() -> Result<Vec<AcceleratorSpec>, ProfileError> {
    parse_catalog("catalog/accelerators.toml", CATALOG)
}

/// Parses and validates an accelerator catalog; `file` names it in errors.
pub fn parse_catalog(file: &str, text: &str) -> Result<Vec<AcceleratorSpec>, ProfileError> {
    let err = |line: Option<usize>, message: String| ProfileError {
        file: file.to_string(),
        line,
        message,
    };
    let raw: CatalogFile = super::parse_toml(file, text)?;
    if raw.schema != 1 {
        return Err(err(None, format!("unsupported schema {}", raw.schema)));
    }
    for a in &raw.accelerator {
        for id in a.detect.pci_ids.iter().chain(&a.npu.pci_ids) {
            if parse_pci_id(id).is_none() {
                return Err(err(None, format!("{}: {id:?} is not `vvvv:dddd`", a.id)));
            }
        }
        for s in &a.signature {
            if !crate::model::CHECK_IDS.contains(&s.check.as_str()) || s.contains.is_empty() {
                return Err(err(None, format!("{}: bad signature {:?}", a.id, s.check)));
            }
        }
    }
    Ok(raw.accelerator)
}

/// `pattern` with a trailing `*` matches a prefix; otherwise the whole text (any case).
fn glob(pattern: &str, text: &str) -> bool {
    let (p, t) = (pattern.to_ascii_lowercase(), text.to_ascii_lowercase());
    match p.strip_suffix('*') {
        Some(prefix) => t.starts_with(prefix),
        None => t == p,
    }
}

/// What in `host` shows the chip of `a` itself (not a module alone), if anything.
fn chip_evidence(a: &AcceleratorSpec, host: &HostFacts) -> Option<String> {
    let d = &a.detect;
    for (bdf, v, dev) in &host.pci {
        if d.pci_ids
            .iter()
            .any(|id| parse_pci_id(id) == Some((*v, *dev)))
        {
            return Some(format!("PCI {v:04x}:{dev:04x} at {bdf}"));
        }
    }
    let by_driver = |list: &[(String, String)], pats: &[String], what: &str| {
        list.iter()
            .find(|(_, drv)| pats.iter().any(|p| glob(p, drv)))
            .map(|(name, drv)| format!("{what} {name} bound to {drv}"))
    };
    by_driver(&host.platform, &d.platform_drivers, "platform device")
        .or_else(|| by_driver(&host.drm, &d.drm_drivers, "DRM node"))
        .or_else(|| {
            host.device_nodes
                .iter()
                .find(|n| d.device_nodes.iter().any(|p| glob(p, n)))
                .map(|n| format!("device node {n}"))
        })
        .or_else(|| {
            host.compatible
                .iter()
                .find(|c| d.compatible.iter().any(|p| glob(p, c)))
                .map(|c| format!("SoC {c}"))
        })
}

/// The accelerators `host` shows, in catalog order. A loaded module alone counts only when no
/// chip of its family was found otherwise.
pub fn detect(catalog: &[AcceleratorSpec], host: &HostFacts) -> Vec<Found> {
    let found = |a: &AcceleratorSpec, why: String| Found {
        id: a.id.clone(),
        name: a.name.clone(),
        kind: a.npu.kind,
        why,
    };
    let mut out: Vec<Found> = catalog
        .iter()
        .filter_map(|a| chip_evidence(a, host).map(|why| found(a, why)))
        .collect();
    for a in catalog {
        let family_seen = out
            .iter()
            .any(|f| f.id == a.id || (a.npu.kind != NpuKind::None && f.kind == a.npu.kind));
        if family_seen {
            continue;
        }
        if let Some(m) = host
            .modules
            .iter()
            .find(|m| a.detect.modules.iter().any(|p| glob(p, m)))
        {
            out.push(found(a, format!("module {m} loaded")));
        }
    }
    out
}

/// Adds `items` to `list`, keeping the order and leaving out what is there.
fn extend_unique(list: &mut Vec<String>, items: &[String]) {
    for i in items {
        if !list.contains(i) {
            list.push(i.clone());
        }
    }
}

impl Profile {
    /// Joins an accelerator found on the host: its workloads, logs and signatures always; its
    /// `[npu]` and `[packages]` when the profile has no NPU of its own (a generic or x86 host), or
    /// as an extra NPU when the profile's is of another family.
    pub fn join_accelerator(&mut self, a: &AcceleratorSpec, found: &Found) {
        self.accelerators.push(found.clone());
        if a.npu.kind == NpuKind::None {
            return;
        }
        extend_unique(&mut self.limits.workloads, &a.limits.workloads);
        extend_unique(&mut self.limits.units, &a.limits.units);
        extend_unique(&mut self.logs.workload, &a.logs.workload);
        extend_unique(&mut self.logs.device, &a.logs.device);
        for s in &a.signature {
            if !self.signature.iter().any(|o| o.contains == s.contains) {
                self.signature.push(s.clone());
            }
        }
        if self.npu.kind == NpuKind::None {
            self.npu = a.npu.clone();
            self.packages = a.packages.clone();
        } else if self.npu.kind != a.npu.kind
            && !self.extra_npus.iter().any(|e| e.npu.kind == a.npu.kind)
        {
            self.extra_npus.push(ExtraNpu {
                npu: a.npu.clone(),
                packages: a.packages.clone(),
            });
        }
    }

    /// The profile as the checks of NPU family `kind` see it: itself when its NPU is of that
    /// family, else a copy carrying the joined accelerator of that family, else `None`.
    pub fn for_npu(&self, kind: NpuKind) -> Option<std::borrow::Cow<'_, Profile>> {
        if self.npu.kind == kind {
            return Some(std::borrow::Cow::Borrowed(self));
        }
        let extra = self.extra_npus.iter().find(|e| e.npu.kind == kind)?;
        let mut p = self.clone();
        p.npu = extra.npu.clone();
        p.packages = extra.packages.clone();
        Some(std::borrow::Cow::Owned(p))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host_pci(v: u16, d: u16) -> HostFacts {
        HostFacts {
            pci: vec![("0000:02:00.0".into(), v, d)],
            ..HostFacts::default()
        }
    }

    #[test]
    fn the_catalog_loads() {
        let c = catalog().unwrap();
        let ids: Vec<&str> = c.iter().map(|a| a.id.as_str()).collect();
        assert_eq!(ids, ["hailo8", "hailo10h", "rknpu", "amd-xdna"]);
    }

    #[test]
    fn a_chip_outranks_a_wrong_generation_module() {
        let c = catalog().unwrap();
        let mut host = host_pci(0x1e60, 0x2864);
        host.modules = vec!["hailo1x_pci".into()];
        let f = detect(&c, &host);
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0].id, "hailo8");
        assert_eq!(f[0].why, "PCI 1e60:2864 at 0000:02:00.0");
        // A module alone (no PCI view, e.g. inside a container) still names the family.
        let only = HostFacts {
            modules: vec!["hailo1x_pci".into()],
            ..HostFacts::default()
        };
        let f = detect(&c, &only);
        assert_eq!(f.len(), 1);
        assert_eq!(
            (f[0].id.as_str(), f[0].why.as_str()),
            ("hailo10h", "module hailo1x_pci loaded")
        );
    }

    #[test]
    fn on_chip_npus_by_driver_or_soc() {
        let c = catalog().unwrap();
        let host = HostFacts {
            platform: vec![("fdab0000.npu".into(), "rocket".into())],
            ..HostFacts::default()
        };
        assert_eq!(
            detect(&c, &host)[0].why,
            "platform device fdab0000.npu bound to rocket"
        );
        let soc = HostFacts {
            compatible: vec!["vendor,board".into(), "rockchip,rk3588f".into()],
            ..HostFacts::default()
        };
        let f = detect(&c, &soc);
        assert_eq!(
            (f[0].id.as_str(), f[0].why.as_str()),
            ("rknpu", "SoC rockchip,rk3588f")
        );
        assert!(detect(&c, &HostFacts::default()).is_empty());
    }

    #[test]
    fn joining_fills_a_profile_without_npu_and_adds_another_family() {
        let c = catalog().unwrap();
        let (all, _) = super::super::load_all(&crate::root::SysRoot::new("/nonexistent"));
        let mut generic = all.iter().find(|p| p.id == "generic").unwrap().clone();
        let hailo8 = c.iter().find(|a| a.id == "hailo8").unwrap();
        let f = detect(&c, &host_pci(0x1e60, 0x2864));
        generic.join_accelerator(hailo8, &f[0]);
        assert_eq!(generic.npu.kind, NpuKind::Hailo);
        assert_eq!(generic.npu.generation, Some(4));
        assert!(generic
            .logs
            .workload
            .contains(&"/var/log/hailort.log".to_string()));
        let mut rk = all.iter().find(|p| p.id == "rk3588-rknpu").unwrap().clone();
        rk.join_accelerator(hailo8, &f[0]);
        assert_eq!(rk.npu.kind, NpuKind::Rknpu);
        let h = rk
            .for_npu(NpuKind::Hailo)
            .expect("the Hailo joins as an extra NPU");
        assert_eq!(h.npu.chip, "Hailo-8/8L");
        assert!(rk.for_npu(NpuKind::Rknpu).is_some());
        assert!(generic.for_npu(NpuKind::Rknpu).is_none());
    }
}
