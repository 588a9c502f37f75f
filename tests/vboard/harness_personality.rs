//! What each virtual board is: its device tree, boot files and the kernel command line its bootloader builds.

use super::*;

// ---------------------------------------------------------------------------------------------
// Board personalities and the boot chain the harness plays.

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Personality {
    /// Radxa ROCK 5B (RK3588) on Armbian: `/boot/armbianEnv.txt`, kernel args in `extraargs`.
    Rock5b,
    /// Raspberry Pi 5 on Raspberry Pi OS: `/boot/firmware/cmdline.txt` and `config.txt`.
    Pi5,
}

impl Personality {
    pub fn model(self) -> &'static str {
        match self {
            Personality::Rock5b => "Radxa ROCK 5B",
            Personality::Pi5 => "Raspberry Pi 5 Model B Rev 1.0",
        }
    }

    pub fn compatible(self) -> [&'static str; 2] {
        match self {
            Personality::Rock5b => ["radxa,rock-5b", "rockchip,rk3588"],
            Personality::Pi5 => ["raspberrypi,5-model-b", "brcm,bcm2712"],
        }
    }

    /// Where the guest mounts the boot partition.
    pub fn boot_mount(self) -> &'static str {
        match self {
            Personality::Rock5b => "/boot",
            Personality::Pi5 => "/boot/firmware",
        }
    }

    pub(super) fn hostname(self) -> &'static str {
        match self {
            Personality::Rock5b => "rock-5b",
            Personality::Pi5 => "raspberrypi",
        }
    }

    /// The boot partition as the distribution ships it.
    pub fn default_boot_files(self) -> Vec<(String, String)> {
        match self {
            Personality::Rock5b => vec![(
                "armbianEnv.txt".into(),
                "verbosity=1\nbootlogo=false\nconsole=serial\noverlay_prefix=rockchip-rk3588\nfdtfile=rockchip/rk3588-rock-5b.dtb\n\
                 rootdev=UUID=6a1f3c2e-8d4b-4e55-9a7e-2f0c1b3d4e5f\nrootfstype=ext4\nextraargs=cma=256M\n\
                 usbstoragequirks=0x2537:0x1066:u,0x2537:0x1068:u\n"
                    .into(),
            )],
            Personality::Pi5 => vec![
                (
                    "cmdline.txt".into(),
                    "console=serial0,115200 console=tty1 root=PARTUUID=4e639091-02 rootfstype=ext4 fsck.repair=yes rootwait quiet\n".into(),
                ),
                (
                    "config.txt".into(),
                    "# For more options and information see\n# http://rptl.io/configtxt\n\ndtparam=audio=on\ncamera_auto_detect=1\n\
                     display_auto_detect=1\nauto_initramfs=1\ndtoverlay=vc4-kms-v3d\nmax_framebuffers=2\ndisable_fw_kms_setup=1\n\
                     arm_64bit=1\ndisable_overscan=1\narm_boost=1\n\n[cm4]\notg_mode=1\n\n[cm5]\ndtoverlay=dwc2,dr_mode=host\n\n\
                     [all]\ndtparam=pciex1_gen=3\n"
                        .into(),
                ),
            ],
        }
    }

    pub(super) fn os_release(self) -> &'static str {
        match self {
            Personality::Rock5b => "PRETTY_NAME=\"Armbian 25.2.1 bookworm\"\nNAME=\"Debian GNU/Linux\"\nVERSION_ID=\"12\"\nVERSION_CODENAME=bookworm\nID=debian\n",
            Personality::Pi5 => "PRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\nNAME=\"Debian GNU/Linux\"\nVERSION_ID=\"12\"\nVERSION_CODENAME=bookworm\nID=debian\n",
        }
    }

    /// The boot chain, from the boot partition as it is now: the kernel command line, and the
    /// size of the device tree's CMA pool (`/reserved-memory/linux,cma`), if the board has one.
    ///
    /// Armbian's boot.scr: `root=... rootwait rootfstype=... console consoleblank=0
    /// loglevel=${verbosity} ... ${extraargs} ${extraboardargs}` from armbianEnv.txt.
    /// Raspberry Pi firmware: a few args of its own, then cmdline.txt (`serial0` made concrete);
    /// config.txt's CMA overlays (`dtoverlay=cma,cma-N`, `dtoverlay=vc4-kms-v3d,cma-N`,
    /// `cma-size=BYTES`) resize the device tree's pool — they do not add a `cma=` (the base Pi 5
    /// tree has a 64 MiB pool). A `cma=` in cmdline.txt still wins, as on the real board.
    pub fn boot_chain(self, read: &dyn Fn(&str) -> Option<String>) -> (String, Option<u64>) {
        match self {
            Personality::Rock5b => {
                let env = read("/armbianEnv.txt").unwrap_or_default();
                let get = |k: &str| {
                    // The last assignment wins, as when U-Boot's env import reads the file.
                    env.lines()
                        .rev()
                        .filter_map(|l| l.trim_end_matches('\r').split_once('='))
                        .find(|(key, _)| key.trim() == k)
                        .map(|(_, v)| v.trim().to_string())
                };
                let mut args = format!(
                    "root={} rootwait rootfstype={} consoleblank=0 loglevel={}",
                    get("rootdev").unwrap_or_else(|| "/dev/mmcblk0p1".into()),
                    get("rootfstype").unwrap_or_else(|| "ext4".into()),
                    get("verbosity").unwrap_or_else(|| "1".into())
                );
                for k in ["extraargs", "extraboardargs"] {
                    if let Some(v) = get(k).filter(|v| !v.is_empty()) {
                        args.push(' ');
                        args.push_str(&v);
                    }
                }
                (format!("{args} {HARNESS_ARGS}"), None)
            }
            Personality::Pi5 => {
                let cmdline = read("/cmdline.txt").unwrap_or_default();
                let first = cmdline.lines().next().unwrap_or("").trim();
                let first = first
                    .split_whitespace()
                    .map(|w| {
                        if let Some(rest) = w.strip_prefix("console=serial0") {
                            format!("console=ttyAMA0{rest}")
                        } else {
                            w.to_string()
                        }
                    })
                    .collect::<Vec<_>>()
                    .join(" ");
                let config = read("/config.txt").unwrap_or_default();
                let pool = pi_config_cma(&config).unwrap_or(64 << 20);
                (
                    format!("coherent_pool=1M 8250.nr_uarts=1 {first} {HARNESS_ARGS}"),
                    Some(pool),
                )
            }
        }
    }

    /// Appended to qemu's own dts: later properties override, so the root reads as the board.
    pub(super) fn dts_block(self, serial: &str, dt_cma: Option<u64>) -> String {
        let [c0, c1] = self.compatible();
        let mut s = format!(
            "\n/ {{\n\tmodel = \"{}\";\n\tcompatible = \"{c0}\", \"{c1}\";\n\tserial-number = \"{serial}\";\n",
            self.model()
        );
        if self == Personality::Rock5b {
            s.push_str(
                "\tnpu@fdab0000 {\n\t\tcompatible = \"rockchip,rk3588-rknpu\";\n\t\treg = <0x0 0xfdab0000 0x0 0x10000>;\n\t\tstatus = \"okay\";\n\t};\n",
            );
        }
        if let Some(size) = dt_cma {
            // As in the Pi 5's tree (and its cma overlay): a reusable default pool in the first
            // GiB of RAM (-M virt's RAM starts at 1 GiB). Cells follow virt's root (2 + 2).
            let _ = write!(
                s,
                "\treserved-memory {{\n\t\t#address-cells = <2>;\n\t\t#size-cells = <2>;\n\t\tranges;\n\t\tlinux,cma {{\n\t\t\tcompatible = \"shared-dma-pool\";\n\t\t\treusable;\n\t\t\tsize = <0x0 {size:#x}>;\n\t\t\talloc-ranges = <0x0 0x40000000 0x0 0x40000000>;\n\t\t\tlinux,cma-default;\n\t\t}};\n\t}};\n"
            );
        }
        s.push_str("};\n");
        s
    }
}

/// The CMA pool size config.txt's overlays set on a Pi 5 (sections that apply to a Pi 5 only;
/// the last overlay wins), or None when no overlay sizes it.
pub fn pi_config_cma(config: &str) -> Option<u64> {
    let mut applies = true;
    let mut size = None;
    for line in config.lines() {
        let l = line.split('#').next().unwrap_or("").trim();
        if l.starts_with('[') && l.ends_with(']') {
            applies = matches!(&l[1..l.len() - 1], "all" | "pi5");
            continue;
        }
        let Some(ov) = l.strip_prefix("dtoverlay=") else {
            continue;
        };
        if !applies {
            continue;
        }
        let mut parts = ov.split(',');
        let name = parts.next().unwrap_or("").trim();
        if !matches!(
            name,
            "cma" | "vc4-kms-v3d" | "vc4-kms-v3d-pi5" | "vc4-fkms-v3d"
        ) {
            continue;
        }
        for p in parts {
            let p = p.trim();
            if let Some(mb) = p.strip_prefix("cma-").and_then(|n| n.parse::<u64>().ok()) {
                size = Some(mb << 20);
            } else if let Some(v) = p.strip_prefix("cma-size=") {
                size = v
                    .strip_prefix("0x")
                    .map_or_else(|| v.parse().ok(), |h| u64::from_str_radix(h, 16).ok())
                    .or(size);
            } else if p == "cma-default" {
                size = None;
            }
        }
    }
    size
}
