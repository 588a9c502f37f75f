//! A remedy as data: the steps that fix a finding, from which both the printed remedy text and
//! the `fix` action are made, so that what a person reads and what the agent does never differ.
//! Pure data and rendering; the steps are carried out by `action::fix`.

use serde::{Deserialize, Serialize};

/// One package with an optional exact version (`hailo-h10-all` or `hailo-h10-all=5.1.1`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PackageSpec {
    /// Debian package name.
    pub name: String,
    /// Exact version to install; the candidate version when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
}

impl PackageSpec {
    /// `name` or `name=version`, as apt takes it.
    pub fn apt_arg(&self) -> String {
        match &self.version {
            Some(v) => format!("{}={v}", self.name),
            None => self.name.clone(),
        }
    }
}

/// One step of a fix. Paths are board paths (under `--root` when acting on a tree).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Step {
    /// `apt-get remove` (or `purge`) of these packages.
    PackageRemove {
        /// Package names.
        packages: Vec<String>,
        /// Purge their configuration files too.
        purge: bool,
    },
    /// `apt-get install` of these packages.
    PackageInstall {
        /// Packages, each with an optional exact version.
        packages: Vec<PackageSpec>,
    },
    /// `apt-mark hold` of these packages (an upgrade must not bring the wrong ones back).
    PackageHold {
        /// Package names.
        packages: Vec<String>,
    },
    /// A systemd drop-in `/etc/systemd/system/<unit>.d/<file>` holding `[<section>]` settings.
    UnitDropIn {
        /// Unit name (`hailo-ollama.service`).
        unit: String,
        /// Drop-in file name (`90-npu-agent.conf`).
        file: String,
        /// Section (`Service`).
        section: String,
        /// `key=value` settings in order (`LimitMEMLOCK`, `infinity`).
        settings: Vec<(String, String)>,
    },
    /// `systemctl daemon-reload`.
    DaemonReload,
    /// `systemctl restart <unit>`.
    RestartUnit {
        /// Unit name.
        unit: String,
    },
    /// `options <module> <key>=<value>` in `/etc/modprobe.d/<file>`; the module reads it when it
    /// is next loaded (a reboot, or unloading and loading it again).
    ModuleOption {
        /// Kernel module (`hailo1x_pci`).
        module: String,
        /// File name under `/etc/modprobe.d/` (`hailo_pci.conf`).
        file: String,
        /// Option name (`force_desc_page_size`).
        key: String,
        /// Option value (`4096`).
        value: String,
    },
    /// A `key=value` in a boot file (`config.txt`, `armbianEnv.txt`) or a `key=value` word on the
    /// kernel command line (`cmdline.txt`), through the boot-file editor.
    BootKey {
        /// Board path of the boot file (`/boot/firmware/config.txt`).
        file: String,
        /// Key (`dtparam`, `usbcurrentlimit`, `cma`).
        key: String,
        /// Value.
        value: String,
    },
    /// `<key> = <value>` in `/etc/sysctl.d/<file>`, then applied now with `sysctl -p <file>`.
    Sysctl {
        /// sysctl key (`kernel.numa_balancing`).
        key: String,
        /// Value (`0`).
        value: String,
        /// File name under `/etc/sysctl.d/` (`90-npu-agent.conf`).
        file: String,
    },
    /// The steps before it take effect only after a reboot.
    RebootNeeded,
}

impl Step {
    /// The step as a command or edit a person can run (`sudo` before privileged commands when
    /// `sudo` is true).
    pub fn text(&self, sudo: bool) -> String {
        let s = if sudo { "sudo " } else { "" };
        match self {
            Step::PackageRemove { packages, purge } => format!(
                "{s}apt-get {} {}",
                if *purge { "purge" } else { "remove" },
                packages.join(" ")
            ),
            Step::PackageInstall { packages } => {
                let args: Vec<String> = packages.iter().map(PackageSpec::apt_arg).collect();
                format!("{s}apt-get install {}", args.join(" "))
            }
            Step::PackageHold { packages } => format!("{s}apt-mark hold {}", packages.join(" ")),
            Step::UnitDropIn {
                unit,
                file,
                section,
                settings,
            } => {
                let lines: Vec<String> = settings.iter().map(|(k, v)| format!("{k}={v}")).collect();
                format!(
                    "{s}systemctl edit {unit} (drop-in /etc/systemd/system/{unit}.d/{file}) → [{section}] {}",
                    lines.join(" ")
                )
            }
            Step::DaemonReload => format!("{s}systemctl daemon-reload"),
            Step::RestartUnit { unit } => format!("{s}systemctl restart {unit}"),
            Step::ModuleOption {
                module,
                file,
                key,
                value,
            } => format!(
                "echo 'options {module} {key}={value}' | {s}tee /etc/modprobe.d/{file}"
            ),
            Step::BootKey { file, key, value } => format!("set {key}={value} in {file}"),
            Step::Sysctl { key, value, file } => format!(
                "echo '{key} = {value}' | {s}tee /etc/sysctl.d/{file} && {s}sysctl -p /etc/sysctl.d/{file}"
            ),
            Step::RebootNeeded => format!("{s}reboot"),
        }
    }

    /// The tool the step needs on the board (`apt-get`, `systemctl`, ...); `None` for file edits.
    pub fn tool(&self) -> Option<&'static str> {
        match self {
            Step::PackageRemove { .. } | Step::PackageInstall { .. } => Some("apt-get"),
            Step::PackageHold { .. } => Some("apt-mark"),
            Step::UnitDropIn { .. } | Step::DaemonReload | Step::RestartUnit { .. } => {
                Some("systemctl")
            }
            Step::Sysctl { .. } => Some("sysctl"),
            Step::ModuleOption { .. } | Step::BootKey { .. } | Step::RebootNeeded => None,
        }
    }
}

/// The fix of one finding: its steps in order, and a sentence said before them when a person
/// needs context (`the 10H needs HailoRT 5.x`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Remedy {
    /// Steps in order.
    pub steps: Vec<Step>,
    /// Said before the steps in the printed text; empty for none.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub note: String,
}

impl Remedy {
    /// A remedy of these steps.
    pub fn of(steps: Vec<Step>) -> Remedy {
        Remedy {
            steps,
            note: String::new(),
        }
    }

    /// Adds the sentence said before the steps.
    pub fn with_note(mut self, note: impl Into<String>) -> Remedy {
        self.note = note.into();
        self
    }

    /// The printed remedy: the note, then the steps joined by `; then `.
    pub fn text(&self, sudo: bool) -> String {
        let steps: Vec<String> = self.steps.iter().map(|s| s.text(sudo)).collect();
        match (self.note.is_empty(), steps.is_empty()) {
            (_, true) => self.note.clone(),
            (true, false) => steps.join("; then "),
            (false, false) => format!("{}: {}", self.note, steps.join("; then ")),
        }
    }

    /// The remedy needs a reboot before it takes effect.
    pub fn needs_reboot(&self) -> bool {
        self.steps.iter().any(|s| matches!(s, Step::RebootNeeded))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn swap() -> Remedy {
        Remedy::of(vec![
            Step::PackageRemove {
                packages: vec!["hailo-all".into()],
                purge: true,
            },
            Step::PackageInstall {
                packages: vec![PackageSpec {
                    name: "hailo-h10-all".into(),
                    version: Some("5.1.1".into()),
                }],
            },
            Step::RebootNeeded,
        ])
        .with_note("the Hailo-10H needs HailoRT 5.x")
    }

    #[test]
    fn text_is_made_from_the_steps() {
        assert_eq!(
            swap().text(true),
            "the Hailo-10H needs HailoRT 5.x: sudo apt-get purge hailo-all; then sudo apt-get install hailo-h10-all=5.1.1; then sudo reboot"
        );
        assert!(!swap().text(false).contains("sudo"));
        assert!(swap().needs_reboot());
    }

    #[test]
    fn steps_round_trip_as_tagged_json() {
        let json = serde_json::to_string(&swap()).unwrap();
        assert!(json.contains(r#""kind":"package_remove""#), "{json}");
        let back: Remedy = serde_json::from_str(&json).unwrap();
        assert_eq!(back, swap());
    }

    #[test]
    fn each_step_names_its_tool() {
        let drop_in = Step::UnitDropIn {
            unit: "hailo-ollama.service".into(),
            file: "90-npu-agent.conf".into(),
            section: "Service".into(),
            settings: vec![("LimitMEMLOCK".into(), "infinity".into())],
        };
        assert_eq!(drop_in.tool(), Some("systemctl"));
        assert!(drop_in
            .text(true)
            .contains("[Service] LimitMEMLOCK=infinity"));
        let opt = Step::ModuleOption {
            module: "hailo1x_pci".into(),
            file: "hailo_pci.conf".into(),
            key: "force_desc_page_size".into(),
            value: "4096".into(),
        };
        assert_eq!(opt.tool(), None);
        assert_eq!(
            opt.text(false),
            "echo 'options hailo1x_pci force_desc_page_size=4096' | tee /etc/modprobe.d/hailo_pci.conf"
        );
    }
}
