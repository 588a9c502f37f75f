//! Boot files that carry kernel arguments, and where `cma=` sits in each:
//! Armbian `armbianEnv.txt` / Orange Pi `orangepiEnv.txt` (`extraargs=`; last definition wins),
//! Raspberry Pi `cmdline.txt` (one line) and `config.txt` (`dtoverlay=…,cma-N` sizes the
//! device-tree pool), extlinux `append`, and `/etc/kernel/cmdline`.

use super::cmdline::{find_cma, CmaParam};
use super::kv;

/// The kinds of boot file the agent understands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum BootFileKind {
    /// Armbian `/boot/armbianEnv.txt` (U-Boot `env import -t`).
    ArmbianEnv,
    /// Orange Pi OS `/boot/orangepiEnv.txt` (same format as Armbian).
    OrangepiEnv,
    /// Raspberry Pi `cmdline.txt`: the whole command line on one line.
    PiCmdline,
    /// Raspberry Pi `config.txt`: firmware settings and device-tree overlays.
    PiConfig,
    /// `extlinux.conf`: `append` lines.
    Extlinux,
    /// `/etc/kernel/cmdline` (input of `u-boot-update` / kernel-install).
    KernelCmdline,
}

/// Where `cma=` is (or is not) in one boot file.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct BootCma {
    /// The winning `cma=` (or, for `config.txt`, the overlay's pool size as a `CmaParam`).
    pub cma: Option<CmaParam>,
    /// 1-based line holding the winning value.
    pub line: Option<usize>,
    /// How many times `cma=` (or the key carrying it) is set; more than one deserves a warning.
    pub occurrences: usize,
    /// The file says it is generated (extlinux by `u-boot-update`): edit its source instead.
    pub generated: bool,
}

/// Finds the `cma=` a boot file passes to the kernel.
pub fn find_boot_cma(kind: BootFileKind, text: &str) -> BootCma {
    match kind {
        BootFileKind::ArmbianEnv | BootFileKind::OrangepiEnv => {
            let entries = kv::parse_kv(text);
            let args: Vec<&kv::KvEntry> = entries
                .iter()
                .filter(|e| e.key == "extraargs" || e.key == "extraboardargs")
                .collect();
            let mut found = None;
            let mut occurrences = 0;
            // U-Boot keeps the last definition of each key; both keys end up on the line.
            for key in ["extraargs", "extraboardargs"] {
                let defs: Vec<&&kv::KvEntry> = args.iter().filter(|e| e.key == key).collect();
                if let Some(last) = defs.last() {
                    if let Some((cma, n)) = find_cma(&last.value) {
                        occurrences += n;
                        found = Some((cma, last.line));
                    }
                }
                occurrences += defs
                    .iter()
                    .rev()
                    .skip(1)
                    .filter(|e| find_cma(&e.value).is_some())
                    .count();
            }
            BootCma {
                line: found.as_ref().map(|f| f.1),
                cma: found.map(|f| f.0),
                occurrences,
                generated: false,
            }
        }
        BootFileKind::PiCmdline | BootFileKind::KernelCmdline => {
            // Only the first line counts on a Pi; /etc/kernel/cmdline is one line too.
            let first = text.lines().position(|l| !l.trim().is_empty());
            let line = first.map(|i| text.lines().nth(i).unwrap_or(""));
            let hit = line.and_then(find_cma);
            BootCma {
                occurrences: hit.as_ref().map(|h| h.1).unwrap_or(0),
                line: hit.as_ref().and(first.map(|i| i + 1)),
                cma: hit.map(|h| h.0),
                generated: false,
            }
        }
        BootFileKind::Extlinux => {
            let generated =
                text.contains("u-boot-update") || text.to_ascii_lowercase().contains("do not edit");
            let mut best: Option<(CmaParam, usize)> = None;
            let mut occurrences = 0;
            for (i, l) in text.lines().enumerate() {
                let t = l.trim();
                let rest = t
                    .strip_prefix("append")
                    .or_else(|| t.strip_prefix("APPEND"));
                if let Some(args) = rest {
                    if let Some((cma, n)) = find_cma(args) {
                        occurrences += n;
                        if best.is_none() {
                            best = Some((cma, i + 1));
                        }
                    }
                }
            }
            BootCma {
                line: best.as_ref().map(|b| b.1),
                cma: best.map(|b| b.0),
                occurrences,
                generated,
            }
        }
        BootFileKind::PiConfig => {
            let hit = pi_config_cma(text);
            BootCma {
                occurrences: usize::from(hit.is_some()),
                line: hit.as_ref().map(|h| h.1),
                cma: hit.map(|h| h.0),
                generated: false,
            }
        }
    }
}

/// The CMA pool a Raspberry Pi `config.txt` asks the device tree for: `dtoverlay=cma,cma-256`,
/// `dtoverlay=vc4-kms-v3d,cma-512`, `cma-size=N` (bytes), or the `dtparam=cma-…` form. Lines in
/// conditional sections other than `[all]`, `[pi5]` and `[none]`-free top level are ignored.
/// Returns the size as a [`CmaParam`] (raw text = the overlay parameter) and its line.
pub fn pi_config_cma(text: &str) -> Option<(CmaParam, usize)> {
    let mut active = true;
    let mut found = None;
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim_end_matches('\r').trim();
        if line.starts_with('#') || line.is_empty() {
            continue;
        }
        if line.starts_with('[') {
            let section = line
                .trim_matches(|c| c == '[' || c == ']')
                .to_ascii_lowercase();
            active = matches!(section.as_str(), "all" | "pi5");
            continue;
        }
        if !active {
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        let key = key.trim();
        if key != "dtoverlay" && key != "dtparam" {
            continue;
        }
        let mut params = value.split(',').map(str::trim);
        if key == "dtoverlay" {
            let overlay = params.next().unwrap_or("");
            if !(overlay == "cma"
                || overlay.starts_with("vc4-kms-v3d")
                || overlay.starts_with("vc4-fkms-v3d"))
            {
                continue;
            }
        }
        for p in params {
            let size = if let Some(bytes) = p.strip_prefix("cma-size=") {
                let b = bytes.trim();
                match b.strip_prefix("0x").or_else(|| b.strip_prefix("0X")) {
                    Some(hex) => u64::from_str_radix(hex, 16).ok(),
                    None => b.parse::<u64>().ok(),
                }
            } else if let Some(mb) = p.strip_prefix("cma-") {
                mb.parse::<u64>().ok().map(|m| m << 20)
            } else {
                None
            };
            if let Some(bytes) = size {
                found = Some((
                    CmaParam {
                        raw: format!("{key}={}", value.trim()),
                        size_bytes: Some(bytes),
                        size_is_number: true,
                        ignored: String::new(),
                        placement: None,
                    },
                    i + 1,
                ));
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn armbian_extraargs_last_definition_wins() {
        let t =
            "verbosity=1\nextraargs=cma=128M\nfdtfile=x.dtb\nextraargs=net.ifnames=0 cma=256M\n";
        let c = find_boot_cma(BootFileKind::ArmbianEnv, t);
        assert_eq!(c.cma.unwrap().size_bytes, Some(256 << 20));
        assert_eq!(c.line, Some(4));
        assert_eq!(c.occurrences, 2);
    }

    #[test]
    fn armbian_without_extraargs_has_no_cma() {
        let c = find_boot_cma(BootFileKind::ArmbianEnv, "verbosity=1\nconsole=both\n");
        assert_eq!(c.cma, None);
        assert_eq!(c.occurrences, 0);
    }

    #[test]
    fn pi_cmdline_reads_first_line_only() {
        let c = find_boot_cma(
            BootFileKind::PiCmdline,
            "console=tty1 rootwait cma=256M\ncma=64M\n",
        );
        assert_eq!(c.cma.unwrap().size_bytes, Some(256 << 20));
        assert_eq!(c.line, Some(1));
    }

    #[test]
    fn pi_config_overlays() {
        let t =
            "dtoverlay=vc4-kms-v3d\n[cm4]\ndtoverlay=cma,cma-64\n[all]\ndtoverlay=cma,cma-512\n";
        let (cma, line) = pi_config_cma(t).unwrap();
        assert_eq!(cma.size_bytes, Some(512 << 20));
        assert_eq!(line, 5);
        assert_eq!(
            pi_config_cma("dtoverlay=vc4-kms-v3d,cma-size=134217728\n")
                .unwrap()
                .0
                .size_bytes,
            Some(128 << 20)
        );
        assert_eq!(pi_config_cma("dtoverlay=vc4-kms-v3d\n"), None);
    }

    #[test]
    fn extlinux_generated_and_append() {
        let t = "## /boot/extlinux/extlinux.conf\n## Do not edit this file manually, use: u-boot-update\nlabel l0\n  append root=/dev/mmcblk0p2 cma=128M quiet\n";
        let c = find_boot_cma(BootFileKind::Extlinux, t);
        assert!(c.generated);
        assert_eq!(c.line, Some(4));
        assert_eq!(c.cma.unwrap().raw, "128M");
    }
}
