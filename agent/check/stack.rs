//! Provenance: how each part of the NPU stack came onto the board — the OS, the kernel driver
//! (in-tree, DKMS, a module file, the OS image) and the runtime library (a dpkg package, a file
//! outside any package, or inside a container) — and the tools a remedy may name there.
//!
//! A remedy is written for the board as it is: no `apt` where dpkg does not manage the part, no
//! `systemctl` without systemd, no `sudo` on an appliance OS. [`fit_remedies`] is the last guard
//! that keeps every printed remedy runnable on this board.

use super::{Ctx, Finding};
use crate::model::stack::OsRelease;
use crate::model::Snapshot;
use crate::profile::{NpuKind, Profile};

/// The operating system family, from `/etc/os-release` `ID`/`ID_LIKE`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OsKind {
    /// Raspberry Pi OS (`ID=debian` with a Raspberry Pi model, or `raspbian`).
    RaspberryPiOs,
    /// Debian and derivatives not named below.
    Debian,
    /// Ubuntu and derivatives (Pop!_OS, ...).
    Ubuntu,
    /// Armbian (Debian or Ubuntu userland, `/etc/armbian-release`).
    Armbian,
    /// Home Assistant OS: an appliance; the host takes no packages, apps run as add-ons.
    HomeAssistantOs,
    /// Buildroot-made firmware (no package manager on the board).
    Buildroot,
    /// NixOS (packages come from the system configuration).
    NixOs,
    /// Another named OS (Fedora, Alpine, ...): none of the tools below is assumed.
    Other,
    /// No os-release in the tree.
    Unknown,
}

/// How the kernel driver got onto the board.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DriverOrigin {
    /// A module built with the kernel (`/lib/modules/<release>/kernel/...`).
    InTree,
    /// A DKMS build (`/var/lib/dkms/<module>`, `updates/dkms/`).
    Dkms,
    /// An out-of-tree module file (`extra/`, `updates/`).
    ModuleFile(String),
    /// Shipped inside the OS image (Home Assistant OS, Buildroot): changed by updating the OS.
    OsImage,
    /// The tree does not say.
    Unknown,
}

/// How the NPU runtime library got onto the board.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RuntimeOrigin {
    /// A dpkg package.
    Package {
        /// Package name.
        name: String,
        /// Its version.
        version: String,
    },
    /// A file no package owns: a source build (`/usr/local/lib`) or a vendor copy.
    Unpackaged {
        /// Board path of the library.
        path: String,
    },
    /// Inside a container image, so the host's packages do not reach it.
    Container {
        /// What carries it (`the Frigate add-on or container`, `a docker container`).
        what: String,
        /// How the agent knows (a log path, a process's cgroup, the OS).
        evidence: String,
    },
    /// No runtime library found on the host.
    Absent,
}

/// The provenance of the board's NPU stack and the tools a remedy may use.
#[derive(Debug, Clone)]
pub struct Stack {
    /// OS family.
    pub os: OsKind,
    /// OS name as the board gives it (`Home Assistant OS 15.0`), or `unknown OS`.
    pub os_name: String,
    /// dpkg/apt manage software here: `Some(false)` when known absent.
    pub dpkg: Option<bool>,
    /// systemd is the init system: `Some(false)` when known absent.
    pub systemd: Option<bool>,
    /// `sudo` is expected (a general-purpose OS); appliance OSes have a root shell only.
    pub sudo: bool,
    /// The NPU kernel driver's origin.
    pub driver: DriverOrigin,
    /// The NPU runtime library's origin.
    pub runtime: RuntimeOrigin,
}

fn os_kind(os: Option<&OsRelease>, armbian: bool, model: &str) -> OsKind {
    let Some(os) = os else {
        return OsKind::Unknown;
    };
    let is = |w: &str| os.id == w || os.id_like.iter().any(|l| l == w);
    match os.id.as_str() {
        "haos" | "hassos" => OsKind::HomeAssistantOs,
        "buildroot" => OsKind::Buildroot,
        "nixos" => OsKind::NixOs,
        _ if armbian => OsKind::Armbian,
        "raspbian" => OsKind::RaspberryPiOs,
        "debian" if model.contains("Raspberry Pi") => OsKind::RaspberryPiOs,
        _ if is("ubuntu") => OsKind::Ubuntu,
        _ if is("debian") => OsKind::Debian,
        _ => OsKind::Other,
    }
}

impl Stack {
    /// Derives the provenance from the snapshot (pure).
    pub fn derive(profile: &Profile, snap: &Snapshot) -> Stack {
        let facts = &snap.stack;
        let model = snap.identity.model.as_deref().unwrap_or("");
        let os = os_kind(facts.os_release.as_ref(), facts.armbian, model);
        let os_name = facts
            .os_release
            .as_ref()
            .and_then(|o| o.pretty_name.clone().or_else(|| o.name.clone()))
            .or_else(|| snap.identity.os_pretty_name.clone())
            .unwrap_or_else(|| "unknown OS".into());
        let appliance = matches!(
            os,
            OsKind::HomeAssistantOs | OsKind::Buildroot | OsKind::NixOs
        );
        let dpkg = if facts.dpkg || snap.dpkg.is_ok() {
            Some(true)
        } else if appliance || os == OsKind::Other {
            Some(false)
        } else if os == OsKind::Unknown {
            None
        } else {
            Some(true)
        };
        // HAOS runs systemd, but its apps are add-ons the Supervisor starts, not units a user edits.
        let systemd = match os {
            OsKind::HomeAssistantOs => Some(false),
            OsKind::Buildroot => Some(facts.systemd == Some(true)),
            _ => facts.systemd,
        };
        Stack {
            os,
            os_name,
            dpkg,
            systemd,
            sudo: !matches!(os, OsKind::HomeAssistantOs | OsKind::Buildroot),
            driver: driver_origin(profile, snap, os),
            runtime: runtime_origin(profile, snap, os),
        }
    }

    /// True when dpkg/apt may be named in a remedy for the runtime: dpkg is there and the
    /// runtime is a package (or nothing says otherwise).
    pub fn runtime_is_package(&self) -> bool {
        self.dpkg != Some(false)
            && matches!(
                self.runtime,
                RuntimeOrigin::Package { .. } | RuntimeOrigin::Absent
            )
    }

    /// One line for `board.identity`: the OS and how driver and runtime are installed.
    pub fn describe(&self) -> String {
        format!(
            "{}; driver {}; runtime {}",
            self.os_name,
            self.driver_text(),
            self.runtime_text()
        )
    }

    /// How the driver is installed, in words.
    pub fn driver_text(&self) -> String {
        match &self.driver {
            DriverOrigin::InTree => "built with the kernel".into(),
            DriverOrigin::Dkms => "built by DKMS".into(),
            DriverOrigin::ModuleFile(p) => format!("from the module file {p}"),
            DriverOrigin::OsImage => format!("shipped in the {} image", self.os_name),
            DriverOrigin::Unknown => "of unknown origin".into(),
        }
    }

    /// How the runtime is installed, in words.
    pub fn runtime_text(&self) -> String {
        match &self.runtime {
            RuntimeOrigin::Package { name, version } => {
                format!("from the package {name} {version}")
            }
            RuntimeOrigin::Unpackaged { path } => {
                format!("{path}, outside any package (built from source or copied)")
            }
            RuntimeOrigin::Container { what, evidence } => format!("inside {what} ({evidence})"),
            RuntimeOrigin::Absent => "no library file found on the host".into(),
        }
    }

    /// How to bring the runtime to version `want` for the way it is installed; `apt` is the
    /// package line to use where dpkg manages it.
    pub fn runtime_update(&self, want: &str, apt: &str) -> String {
        match &self.runtime {
            RuntimeOrigin::Container { what, .. } => format!(
                "update {what} to a build that bundles runtime {want} (the host's packages do not reach a container's library)"
            ),
            RuntimeOrigin::Unpackaged { path } => format!(
                "rebuild the runtime {want} from its source tag and install it over {path} (it is not a package: apt cannot change it)"
            ),
            _ if self.dpkg == Some(false) => self.no_packages_note(),
            _ => apt.to_string(),
        }
    }

    /// The remedy of a catalog row for the way this board's runtime is installed: the
    /// container's (or Home Assistant OS's) words where it lives in one, the package's or the
    /// source build's where given, else the row's default.
    pub fn pick_remedy(&self, r: &crate::profile::signature::RemedyByProvenance) -> String {
        let specific = match (&self.runtime, self.os) {
            (_, OsKind::HomeAssistantOs) => r.haos.as_ref().or(r.container.as_ref()),
            (RuntimeOrigin::Container { .. }, _) => r.container.as_ref(),
            (RuntimeOrigin::Package { .. }, _) => r.apt.as_ref(),
            (RuntimeOrigin::Unpackaged { .. }, _) => r.source.as_ref(),
            (RuntimeOrigin::Absent, _) => None,
        };
        specific.cloned().unwrap_or_else(|| r.default.clone())
    }

    /// What to do instead of a package command on a board without dpkg.
    pub fn no_packages_note(&self) -> String {
        match self.os {
            OsKind::HomeAssistantOs => format!(
                "{} takes no packages: the driver comes with the OS release and the runtime with the add-on; update Home Assistant OS or the add-on so their versions agree",
                self.os_name
            ),
            OsKind::NixOs => "set the driver and runtime versions in the system configuration and rebuild (nixos-rebuild switch)".into(),
            _ => format!(
                "{} has no package manager on the board: rebuild the image with the matching driver and runtime",
                self.os_name
            ),
        }
    }

    /// True when files the agent adds under `/etc` (`modprobe.d`, `sysctl.d`, systemd drop-ins)
    /// are the board's own way to configure it: not on an appliance OS whose image or system
    /// configuration owns `/etc` (Home Assistant OS, Buildroot, NixOS).
    pub fn etc_takes_files(&self) -> bool {
        !matches!(
            self.os,
            OsKind::HomeAssistantOs | OsKind::Buildroot | OsKind::NixOs
        )
    }

    /// The board's reboot command.
    pub fn reboot_cmd(&self) -> &'static str {
        match self.os {
            OsKind::HomeAssistantOs => "ha host reboot",
            _ if !self.sudo => "reboot",
            _ => "sudo reboot",
        }
    }
}

fn driver_origin(profile: &Profile, snap: &Snapshot, os: OsKind) -> DriverOrigin {
    if matches!(os, OsKind::HomeAssistantOs | OsKind::Buildroot) {
        return DriverOrigin::OsImage;
    }
    let mods = &profile.npu.modules;
    if snap.stack.dkms_modules.iter().any(|d| {
        mods.iter()
            .any(|m| d.replace('-', "_").starts_with(m.as_str()))
    }) {
        return DriverOrigin::Dkms;
    }
    match snap.module_files.first() {
        Some(p) if p.contains("/dkms/") => DriverOrigin::Dkms,
        Some(p) if p.contains("/kernel/") => DriverOrigin::InTree,
        Some(p) => DriverOrigin::ModuleFile(p.clone()),
        None => DriverOrigin::Unknown,
    }
}

fn runtime_origin(profile: &Profile, snap: &Snapshot, os: OsKind) -> RuntimeOrigin {
    if let Some(c) = container_hint(snap, os) {
        return c;
    }
    if let Ok(pkgs) = &snap.dpkg {
        let lib_pkgs = &profile.packages.library;
        if let Some(p) = pkgs
            .iter()
            .find(|p| p.is_installed() && lib_pkgs.contains(&p.name))
        {
            return RuntimeOrigin::Package {
                name: p.name.clone(),
                version: p.version.clone(),
            };
        }
    }
    let lib = match profile.npu.kind {
        NpuKind::Rknpu => snap
            .rknn_runtime
            .iter()
            .find(|c| !c.path.starts_with("/var/lib/dpkg"))
            .map(|c| c.path.clone()),
        _ => snap.libraries.first().cloned(),
    };
    match lib {
        Some(path) => RuntimeOrigin::Unpackaged { path },
        None => RuntimeOrigin::Absent,
    }
}

/// A workload that runs in a container: its process's cgroup, a bundling app's log, or an OS
/// whose apps are all containers.
fn container_hint(snap: &Snapshot, os: OsKind) -> Option<RuntimeOrigin> {
    if let Some(p) = snap
        .processes
        .as_ref()
        .ok()
        .and_then(|ps| ps.iter().find(|p| p.container.is_some()))
    {
        return Some(RuntimeOrigin::Container {
            what: format!("the {} container of {}", p.container.as_deref()?, p.comm),
            evidence: format!("/proc/{}/cgroup", p.pid),
        });
    }
    // A workload whose runtime comes in its image: a container found on disk, or a catalog app
    // that ships only as one (Frigate, Viseron) known from its log.
    let app = snap
        .workloads
        .workloads
        .iter()
        .filter(|w| w.bundles_runtime)
        .max_by_key(|w| w.in_container())
        .map(|w| {
            let what = match (&w.app_name, &w.place) {
                (_, crate::model::workload::Place::Container { .. }) => {
                    format!("the {}", w.label())
                }
                (Some(a), _) => format!("the {a} add-on or container"),
                (None, _) => format!("the container of {}", w.name),
            };
            (w.why.clone(), what)
        });
    // A workload log of such an app, where discovery did not run (a snapshot built by hand).
    let app = app.or_else(|| {
        let apps = crate::profile::apps::builtin();
        snap.logs
            .iter()
            .filter(|l| l.class == crate::model::LogClass::Workload)
            .find_map(|l| {
                let lower = l.path.to_ascii_lowercase();
                apps.iter()
                    .filter(|a| a.bundles_runtime)
                    .find(|a| lower.contains(&a.id))
                    .map(|a| {
                        (
                            format!("its log {}", l.path),
                            format!("the {} add-on or container", a.name),
                        )
                    })
            })
    });
    match (app, os) {
        (Some((why, what)), _) => Some(RuntimeOrigin::Container {
            what,
            evidence: why,
        }),
        (None, OsKind::HomeAssistantOs) => Some(RuntimeOrigin::Container {
            what: "the add-on that uses the NPU".into(),
            evidence: "Home Assistant OS runs apps only as add-on containers".into(),
        }),
        _ => None,
    }
}

/// Tools a remedy may name, and what the board needs for each.
const TOOLS: [(&str, Need); 8] = [
    ("apt ", Need::Dpkg),
    ("apt-get ", Need::Dpkg),
    ("apt-mark ", Need::Dpkg),
    ("dpkg ", Need::Dpkg),
    ("dkms ", Need::Dpkg),
    ("systemctl ", Need::Systemd),
    ("journalctl ", Need::Systemd),
    ("sudo ", Need::Sudo),
];

#[derive(Debug, Clone, Copy)]
enum Need {
    Dpkg,
    Systemd,
    Sudo,
}

impl Stack {
    /// The first tool `remedy` names that this board does not have.
    pub fn missing_tool(&self, remedy: &str) -> Option<&'static str> {
        TOOLS.iter().find_map(|(tool, need)| {
            let absent = match need {
                Need::Dpkg => self.dpkg == Some(false),
                Need::Systemd => self.systemd == Some(false),
                Need::Sudo => !self.sudo,
            };
            (absent && names_tool(remedy, tool)).then(|| tool.trim_end())
        })
    }
}

/// `tool` (with its trailing space) at a word start in `text`.
fn names_tool(text: &str, tool: &str) -> bool {
    text.match_indices(tool).any(|(i, _)| {
        text[..i]
            .chars()
            .next_back()
            .is_none_or(|c| !c.is_ascii_alphanumeric() && c != '-' && c != '_')
    })
}

/// The words [`fit_remedies`] puts before the tool a rewritten remedy would have named.
const LACKS_TOOL: &str = "the usual fix names `";

/// The tool a remedy rewritten by [`fit_remedies`] would have needed (`apt-get`), when the
/// board lacks it; `None` for every other remedy.
pub fn lacked_tool(remedy: &str) -> Option<&str> {
    let (_, rest) = remedy.rsplit_once(LACKS_TOOL)?;
    let (tool, tail) = rest.split_once('`')?;
    (tail.starts_with(", which ") && tail.ends_with(" does not have)")).then_some(tool)
}

/// The last guard: a remedy that names a tool this board lacks is rewritten for the board (a
/// reboot or power-off in the board's own words; otherwise the way this board changes software),
/// so no printed remedy is a command the board cannot run.
pub(super) fn fit_remedies(ctx: &Ctx<'_>, findings: &mut [Finding]) {
    let stack = &ctx.stack;
    for f in findings.iter_mut().filter(|f| !f.remedy.is_empty()) {
        if let Some(fix) = &f.fix {
            // With sudo, so the lines below turn `sudo reboot` into the board's own reboot.
            f.remedy = fix.text(true);
        }
        if !stack.sudo {
            // An appliance's shell is root already: its own reboot, then the bare command.
            f.remedy = f.remedy.replace("sudo reboot", stack.reboot_cmd());
            if stack.os == OsKind::HomeAssistantOs {
                f.remedy = f.remedy.replace("sudo poweroff", "ha host shutdown");
            }
            f.remedy = f.remedy.replace("sudo ", "");
        }
        if mentions_sharing(&f.remedy) {
            if let Some(genai) = super::workload::genai_on_hailo10h(ctx) {
                f.fix = None;
                f.remedy = format!(
                    "let one process own the Hailo-10H: {genai} runs a GenAI model, which HailoRT serves in one process only (its multi-process service does not share GenAI models); stop the other app, or unload the model first (npu-agent release_npu)"
                );
            }
        }
        if ctx.snap.boot_files.is_empty() && f.remedy.contains("npu-agent cma set ") {
            f.fix = None;
            f.remedy = without_cma_set(&f.remedy, ctx.profile);
        }
        if let Some(tool) = stack.missing_tool(&f.remedy) {
            // No automatic fix either: its steps would need the same tool.
            f.fix = None;
            f.remedy = format!(
                "{} ({LACKS_TOOL}{tool}`, which {} does not have)",
                stack.no_packages_note_for(tool),
                stack.os_name
            );
        }
    }
}

/// True when a remedy tells to share the chip through HailoRT's multi-process service.
fn mentions_sharing(remedy: &str) -> bool {
    !remedy.contains("does not share GenAI")
        && (remedy.contains("hailort_service")
            || remedy.contains("multi-process service")
            || remedy.contains("multi_process_service"))
}

/// `remedy` with its `npu-agent cma set SIZE` (which edits one of the profile's boot files)
/// turned into words for a board where none of them exists: the size goes on the kernel command
/// line wherever this board's bootloader keeps it.
fn without_cma_set(remedy: &str, profile: &Profile) -> String {
    let files: Vec<&str> = profile
        .cma
        .boot_files
        .iter()
        .map(|b| b.path.as_str())
        .collect();
    let none = if files.is_empty() {
        "this board's profile names no boot file".to_string()
    } else {
        format!("none of {} exists here", files.join(", "))
    };
    let mut out = String::new();
    let mut rest = remedy;
    while let Some(i) = rest.find("npu-agent cma set ") {
        let head = rest[..i].strip_suffix("sudo ").unwrap_or(&rest[..i]);
        out.push_str(head);
        let after = &rest[i + "npu-agent cma set ".len()..];
        let size: String = after
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric())
            .collect();
        out.push_str(&format!(
            "setting cma={size} by hand on the kernel command line in the file this board's bootloader reads (`npu-agent cma set` edits a boot file, and {none})"
        ));
        rest = &after[size.len()..];
        rest = rest.strip_prefix(" && sudo reboot").map_or(rest, |r| {
            out.push_str(", then reboot");
            r
        });
    }
    out.push_str(rest);
    out
}

impl Stack {
    /// What to say instead of a command that needs `tool`.
    fn no_packages_note_for(&self, tool: &str) -> String {
        match tool {
            "systemctl" | "journalctl" => {
                "raise the limit in the script or supervisor that starts the workload".into()
            }
            "sudo" => "run the command from a root shell".into(),
            _ => match &self.runtime {
                RuntimeOrigin::Container { what, .. } => format!(
                    "{}; the runtime lives in {what}: update that image",
                    self.no_packages_note()
                ),
                _ => self.no_packages_note(),
            },
        }
    }
}

#[cfg(test)]
mod tests;
