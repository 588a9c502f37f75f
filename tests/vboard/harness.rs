//! The virtual-board harness: Debian's arm64 cloud kernel under `qemu-system-aarch64 -M virt`, a
//! device tree that reads like a real board, a boot partition and a persistent state disk, the
//! static aarch64 agent in a busybox initramfs, and the harness itself as the board's bootloader.
//! The API is documented at the top of tests/system/vboard.rs.
#![allow(dead_code)]

use crate::common::{self, skip, which};
use crate::newc::Newc;
use serde_json::Value;
use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::fs;
use std::io::Write as _;
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// Modules the guest loads, in dependency order (the package ships no modules.dep for busybox).
const MODULES: [&str; 7] = [
    "virtio_ring",
    "virtio",
    "virtio_mmio",
    "virtio_blk",
    "failover",
    "net_failover",
    "virtio_net",
];
const INIT: &str = include_str!("guest/init");
const LIB_SH: &str = include_str!("guest/lib.sh");
/// What the harness-as-bootloader always adds: the serial console of `-M virt` (last, so it is
/// /dev/console whatever console= the board's boot files name), no reboot loop on a panic, our
/// /init, and a quiet kernel.
const HARNESS_ARGS: &str = "console=ttyAMA0 panic=-1 rdinit=/init quiet";

// ---------------------------------------------------------------------------------------------
// Tools, downloads and the shared part of the initramfs (once per test process).

pub struct Assets {
    pub qemu: PathBuf,
    pub dtc: PathBuf,
    pub mkfs: PathBuf,
    pub debugfs: PathBuf,
    pub gzip: PathBuf,
    /// Unpacked from Debian's packages, cached in `<target>/vboard-cache/guest/`.
    pub kernel: PathBuf,
    pub modules_dir: PathBuf,
    pub busybox: PathBuf,
    /// e.g. "linux-image-6.1.0-57-cloud-arm64 6.1.192-3; busybox-static 1:1.35.0-4+deb12u1+b1".
    pub packages: String,
    pub agent: PathBuf,
    /// busybox, modules, agent, /init, lib.sh, /dev/console: gzip'd newc, first part of every initrd.
    base_initrd: Vec<u8>,
}

/// Everything a virtual board needs, or None after `skip` (a panic when CI is set).
pub fn assets() -> Option<&'static Assets> {
    static A: OnceLock<Option<Assets>> = OnceLock::new();
    A.get_or_init(|| {
        let [qemu, dtc, mkfs, debugfs, gzip] = common::tools(
            ["qemu-system-aarch64", "dtc", "mkfs.ext4", "debugfs", "gzip"],
            "virtual boards; Debian packages qemu-system-arm, device-tree-compiler, e2fsprogs",
        )?;
        let agent = common::aarch64_agent()?;
        let cache = cache_dir();
        let guest = match fetch_guest(&cache) {
            Ok(g) => g,
            Err(e) => {
                skip(&format!(
                    "the guest kernel and busybox could not be fetched into {}: {e}",
                    cache.display()
                ));
                return None;
            }
        };
        let packages = fs::read_to_string(guest.join("READY"))
            .unwrap_or_default()
            .trim()
            .to_string();
        let mut a = Assets {
            qemu,
            dtc,
            mkfs,
            debugfs,
            gzip,
            kernel: guest.join("vmlinuz"),
            modules_dir: guest.join("modules"),
            busybox: guest.join("busybox"),
            packages,
            agent,
            base_initrd: Vec::new(),
        };
        a.base_initrd = a.gzip(&a.base_archive());
        Some(a)
    })
    .as_ref()
}

/// `NPU_AGENT_VBOARD_CACHE`, else `<target>/vboard-cache`. Delete it to fetch the current kernel.
pub fn cache_dir() -> PathBuf {
    std::env::var_os("NPU_AGENT_VBOARD_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| common::target_dir().join("vboard-cache"))
}

/// Where consoles and qemu logs of every boot are kept for a look after the run.
pub fn log_dir() -> PathBuf {
    common::target_dir().join("vboard-logs")
}

fn run(cmd: &mut Command) -> Result<Output, String> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{cmd:?}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{cmd:?} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(out)
}

/// Debian's arm64 cloud kernel (the image package linux-image-cloud-arm64 depends on today) and
/// busybox-static, fetched with `apt-get download` and unpacked with `dpkg -x`, once.
fn fetch_guest(cache: &Path) -> Result<PathBuf, String> {
    let dir = cache.join("guest");
    if dir.join("READY").is_file() {
        return Ok(dir);
    }
    for t in ["apt-get", "apt-cache", "dpkg"] {
        which(t).ok_or_else(|| format!("{t} not found (a Debian host is needed)"))?;
    }
    fs::create_dir_all(cache).map_err(|e| e.to_string())?;
    let t0 = Instant::now();
    // arm64 package lists: .ci/run adds them once per machine; a test never changes this
    // machine's dpkg or apt configuration itself.
    let archs = run(Command::new("dpkg").arg("--print-foreign-architectures"))?;
    if !String::from_utf8_lossy(&archs.stdout)
        .split_whitespace()
        .any(|a| a == "arm64")
    {
        return Err("no arm64 package lists: run `dpkg --add-architecture arm64 && apt-get update` (.ci/run does)".into());
    }
    let kernel_pkg = {
        let show = Command::new("apt-cache")
            .args(["show", "--no-all-versions", "linux-image-cloud-arm64:arm64"])
            .output();
        let depends = show.ok().filter(|o| o.status.success()).and_then(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .find_map(|l| l.strip_prefix("Depends:").map(str::to_string))
        });
        // "Depends: linux-image-6.1.0-57-cloud-arm64 (= 6.1.192-3)"
        let name = depends
            .as_deref()
            .and_then(|d| {
                d.split([',', '|'])
                    .map(str::trim)
                    .find(|p| p.starts_with("linux-image-"))
            })
            .and_then(|p| p.split_whitespace().next())
            .map(str::to_string);
        name.ok_or_else(|| format!("cannot resolve the image package of linux-image-cloud-arm64:arm64 (Depends: {depends:?}; `apt-get update` may help)"))?
    };
    let tmp = cache.join(format!("guest.tmp-{}", std::process::id()));
    let _ = fs::remove_dir_all(&tmp);
    let debs = tmp.join("debs");
    let x = tmp.join("x");
    let out = tmp.join("guest");
    for d in [&debs, &x, &out.join("modules")] {
        fs::create_dir_all(d).map_err(|e| e.to_string())?;
    }
    run(Command::new("apt-get")
        .args(["download", "-q", "-o", "APT::Sandbox::User=root"])
        .arg(format!("{kernel_pkg}:arm64"))
        .arg("busybox-static:arm64")
        .current_dir(&debs))?;
    let mut versions = Vec::new();
    for e in fs::read_dir(&debs).map_err(|e| e.to_string())? {
        let deb = e.map_err(|e| e.to_string())?.path();
        run(Command::new("dpkg").arg("-x").arg(&deb).arg(&x))?;
        let v = run(Command::new("dpkg-deb")
            .args(["-f"])
            .arg(&deb)
            .args(["Package", "Version"]))?;
        versions.push(
            String::from_utf8_lossy(&v.stdout)
                .lines()
                .map(|l| l.split_once(": ").map_or(l, |p| p.1))
                .collect::<Vec<_>>()
                .join(" "),
        );
    }
    versions.sort();
    let vmlinuz = fs::read_dir(x.join("boot"))
        .map_err(|e| e.to_string())?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("vmlinuz-"))
        })
        .ok_or("no /boot/vmlinuz-* in the kernel package")?;
    fs::copy(&vmlinuz, out.join("vmlinuz")).map_err(|e| e.to_string())?;
    let mods = fs::read_dir(x.join("lib/modules"))
        .map_err(|e| e.to_string())?
        .next()
        .ok_or("no /lib/modules")?
        .map_err(|e| e.to_string())?
        .path();
    for m in MODULES {
        let found = find_file(&mods.join("kernel"), &format!("{m}.ko"))
            .ok_or_else(|| format!("module {m}.ko not in {kernel_pkg}"))?;
        fs::copy(found, out.join("modules").join(format!("{m}.ko"))).map_err(|e| e.to_string())?;
    }
    fs::copy(x.join("bin/busybox"), out.join("busybox")).map_err(|e| e.to_string())?;
    fs::write(out.join("READY"), versions.join("; ") + "\n").map_err(|e| e.to_string())?;
    // Atomic publish: a concurrent run that got there first wins, ours is dropped.
    if fs::rename(&out, &dir).is_err() && !dir.join("READY").is_file() {
        return Err(format!(
            "cannot move {} to {}",
            out.display(),
            dir.display()
        ));
    }
    let _ = fs::remove_dir_all(&tmp);
    eprintln!(
        "vboard: fetched {} in {:.1} s",
        versions.join("; "),
        t0.elapsed().as_secs_f64()
    );
    Ok(dir)
}

fn find_file(dir: &Path, name: &str) -> Option<PathBuf> {
    for e in fs::read_dir(dir).ok()?.flatten() {
        let p = e.path();
        if p.is_dir() {
            if let Some(f) = find_file(&p, name) {
                return Some(f);
            }
        } else if p.file_name().is_some_and(|n| n == name) {
            return Some(p);
        }
    }
    None
}

impl Assets {
    fn base_archive(&self) -> Vec<u8> {
        let mut a = Newc::new();
        for d in [
            "bin",
            "sbin",
            "usr",
            "usr/bin",
            "usr/sbin",
            "lib",
            "lib/modules",
            "etc",
            "etc/vboard",
            "etc/npu-agent",
            "dev",
            "proc",
            "sys",
            "tmp",
            "run",
            "root",
            "var",
            "var/lib",
            "var/log",
        ] {
            a.dir(d);
        }
        a.char_dev("dev/console", 0o600, 5, 1);
        a.char_dev("dev/null", 0o666, 1, 3);
        a.file(
            "bin/busybox",
            0o755,
            &fs::read(&self.busybox).expect("cached busybox"),
        );
        a.symlink("bin/sh", "busybox");
        for m in MODULES {
            a.file(
                &format!("lib/modules/{m}.ko"),
                0o644,
                &fs::read(self.modules_dir.join(format!("{m}.ko"))).expect("cached module"),
            );
        }
        a.file(
            "usr/bin/npu-agent",
            0o755,
            &fs::read(&self.agent).expect("aarch64 agent"),
        );
        a.file("init", 0o755, INIT.as_bytes());
        a.file("etc/vboard/lib.sh", 0o644, LIB_SH.as_bytes());
        a.finish()
    }

    fn gzip(&self, data: &[u8]) -> Vec<u8> {
        let mut child = Command::new(&self.gzip)
            .args(["-1", "-n", "-c"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("run gzip");
        let mut stdin = child.stdin.take().expect("stdin");
        let data = data.to_vec();
        let writer = std::thread::spawn(move || stdin.write_all(&data));
        let out = child.wait_with_output().expect("gzip output");
        writer
            .join()
            .expect("writer thread")
            .expect("write to gzip");
        assert!(out.status.success(), "gzip failed");
        out.stdout
    }

    /// `qemu-system-aarch64 -M virt,dumpdtb=...` with the machine options every boot uses, as dts.
    fn virt_dts(&self, mem_mb: u32, dir: &Path) -> String {
        let dtb = dir.join("virt.dtb");
        run(Command::new(&self.qemu)
            .arg("-M")
            .arg(format!("virt,dumpdtb={}", dtb.display()))
            .args([
                "-cpu",
                "cortex-a72",
                "-smp",
                "1",
                "-m",
                &mem_mb.to_string(),
                "-nodefaults",
                "-display",
                "none",
            ]))
        .expect("dump qemu's virt device tree");
        let out = run(Command::new(&self.dtc)
            .args(["-q", "-I", "dtb", "-O", "dts"])
            .arg(&dtb))
        .expect("dtc -I dtb");
        String::from_utf8(out.stdout).expect("dts is text")
    }

    /// debugfs reads one file of an ext4 image (the guest must be off). None if it is not there.
    pub fn read_image_file(&self, image: &Path, path: &str) -> Option<String> {
        let out = Command::new(&self.debugfs)
            .arg("-R")
            .arg(format!("cat {path}"))
            .arg(image)
            .stdin(Stdio::null())
            .output()
            .expect("run debugfs");
        let err = String::from_utf8_lossy(&out.stderr);
        if !out.status.success() || err.contains("not found") {
            return None;
        }
        Some(String::from_utf8_lossy(&out.stdout).into_owned())
    }
}

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

    fn hostname(self) -> &'static str {
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

    fn os_release(self) -> &'static str {
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
    fn dts_block(self, serial: &str, dt_cma: Option<u64>) -> String {
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

// ---------------------------------------------------------------------------------------------
// The board: spec, disks, boots.

/// A file placed in the guest's initramfs.
#[derive(Clone)]
pub struct GuestFile {
    pub path: String,
    pub mode: u32,
    pub data: Vec<u8>,
}

#[derive(Clone)]
pub struct BoardSpec {
    /// Names the log files (`<target>/vboard-logs/<name>-bootN.console`).
    pub name: String,
    pub personality: Personality,
    /// The device tree's `serial-number` (the agent's default board id).
    pub serial: String,
    /// Files on the boot partition (name in the partition, content).
    pub boot_files: Vec<(String, String)>,
    /// Extra files in the initramfs (profiles, config, a fake workload, ...).
    pub files: Vec<GuestFile>,
    /// Shell commands run after boot, every boot (lib.sh's functions are available; $VBOARD_BOOT
    /// is the boot number, 1-based). After them the board powers off.
    pub init: String,
    /// Port of a mosquitto on 127.0.0.1: the guest gets eth0 and reaches it at 10.0.2.100:1883.
    pub broker_port: Option<u16>,
    pub mem_mb: u32,
}

impl BoardSpec {
    pub fn new(name: &str, personality: Personality) -> Self {
        BoardSpec {
            name: name.into(),
            personality,
            serial: match personality {
                Personality::Rock5b => "6c3a91f0e2d4b587".into(),
                Personality::Pi5 => "9f2b7c61d0e4a835".into(),
            },
            boot_files: personality.default_boot_files(),
            files: Vec::new(),
            init: String::new(),
            broker_port: None,
            mem_mb: 1024,
        }
    }

    /// Replaces (or adds) a file on the boot partition.
    pub fn boot_file(mut self, name: &str, content: &str) -> Self {
        self.boot_files.retain(|(n, _)| n != name);
        self.boot_files.push((name.into(), content.into()));
        self
    }

    pub fn file(mut self, path: &str, mode: u32, data: impl Into<Vec<u8>>) -> Self {
        self.files.push(GuestFile {
            path: path.into(),
            mode,
            data: data.into(),
        });
        self
    }

    pub fn init(mut self, script: &str) -> Self {
        self.init = script.into();
        self
    }

    /// Guest RAM in MiB (default 1024).
    pub fn mem(mut self, mb: u32) -> Self {
        self.mem_mb = mb;
        self
    }

    pub fn broker(mut self, port: u16) -> Self {
        self.broker_port = Some(port);
        self
    }
}

pub struct Board {
    pub spec: BoardSpec,
    assets: &'static Assets,
    dir: tempfile::TempDir,
    boot_img: PathBuf,
    state_img: PathBuf,
    virt_dts: String,
    boots: u32,
    running: Arc<AtomicBool>,
    /// netcat-openbsd's `nc`, the host side of the broker forward (only with a broker).
    nc: Option<PathBuf>,
}

impl Board {
    /// Builds the disks (boot partition from `spec.boot_files`, an empty persistent state disk)
    /// and reads qemu's device tree. None after `skip` when tools or downloads are missing.
    pub fn new(spec: BoardSpec) -> Option<Board> {
        let assets = assets()?;
        let nc = match spec.broker_port {
            Some(_) => Some(common::tools(["nc"], "relays the guest's broker connections to 127.0.0.1; Debian package netcat-openbsd")?[0].clone()),
            None => None,
        };
        let dir = tempfile::Builder::new()
            .prefix("vboard-")
            .tempdir()
            .expect("temp dir");
        let stage = dir.path().join("boot-stage");
        fs::create_dir_all(&stage).expect("stage dir");
        for (name, content) in &spec.boot_files {
            let p = stage.join(name.trim_start_matches('/'));
            fs::create_dir_all(p.parent().expect("parent")).expect("boot file dir");
            fs::write(&p, content).expect("boot file");
        }
        let boot_img = dir.path().join("boot.img");
        let state_img = dir.path().join("state.img");
        // ext4 without a journal: what the guest syncs before a reboot is in place for debugfs
        // (a journal would hold it until a checkpoint that a `reboot -f` never reaches).
        run(Command::new(&assets.mkfs)
            .args(["-q", "-F", "-L", "vb-boot", "-O", "^has_journal", "-d"])
            .arg(&stage)
            .arg(&boot_img)
            .arg("16M"))
        .expect("mkfs.ext4 boot partition");
        run(Command::new(&assets.mkfs)
            .args(["-q", "-F", "-L", "vb-state", "-O", "^has_journal"])
            .arg(&state_img)
            .arg("16M"))
        .expect("mkfs.ext4 state disk");
        let virt_dts = assets.virt_dts(spec.mem_mb, dir.path());
        Some(Board {
            spec,
            assets,
            dir,
            boot_img,
            state_img,
            virt_dts,
            boots: 0,
            running: Arc::new(AtomicBool::new(false)),
            nc,
        })
    }

    /// A file on the boot partition as it is now (the board must be off).
    pub fn boot_file(&self, name: &str) -> Option<String> {
        assert!(
            !self.running.load(Ordering::SeqCst),
            "read the boot partition only while the board is off"
        );
        self.assets.read_image_file(
            &self.boot_img,
            &format!("/{}", name.trim_start_matches('/')),
        )
    }

    /// A file on the persistent state disk (`/var/lib/npu-agent/NAME` in the guest).
    pub fn state_file(&self, name: &str) -> Option<String> {
        assert!(
            !self.running.load(Ordering::SeqCst),
            "read the state disk only while the board is off"
        );
        self.assets.read_image_file(
            &self.state_img,
            &format!("/{}", name.trim_start_matches('/')),
        )
    }

    /// What the bootloader would boot with now: (kernel command line, device-tree CMA pool).
    pub fn boot_chain(&self) -> (String, Option<u64>) {
        let img = self.boot_img.clone();
        let assets = self.assets;
        self.spec
            .personality
            .boot_chain(&move |p| assets.read_image_file(&img, p))
    }

    pub fn boots(&self) -> u32 {
        self.boots
    }

    /// Boots with `spec.init`.
    pub fn boot(&mut self) -> Boot {
        let init = self.spec.init.clone();
        self.boot_with(&init)
    }

    /// Boots once more, with these commands for this boot only.
    pub fn boot_with(&mut self, init: &str) -> Boot {
        assert!(
            !self.running.swap(true, Ordering::SeqCst),
            "the previous boot is still running: wait_end() or drop it first"
        );
        self.boots += 1;
        let n = self.boots;
        let p = self.spec.personality;
        let (cmdline, dt_cma) = self.boot_chain();
        let dir = self.dir.path();

        let dts = format!(
            "{}{}",
            self.virt_dts,
            p.dts_block(&self.spec.serial, dt_cma)
        );
        let dtb = dir.join(format!("board-boot{n}.dtb"));
        let mut dtc = Command::new(&self.assets.dtc)
            .args(["-q", "-I", "dts", "-O", "dtb", "-o"])
            .arg(&dtb)
            .arg("-")
            .stdin(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run dtc");
        dtc.stdin
            .take()
            .expect("stdin")
            .write_all(dts.as_bytes())
            .expect("dts to dtc");
        let out = dtc.wait_with_output().expect("dtc");
        assert!(
            out.status.success(),
            "dtc: {}",
            String::from_utf8_lossy(&out.stderr)
        );

        // initrd = shared part + this board's files and this boot's commands (the kernel unpacks
        // concatenated archives in order; later files replace earlier ones).
        let mut a = Newc::new();
        let mut have = BTreeSet::new();
        let env = format!(
            "VBOARD_BOOT={n}\nVB_BOOT_MOUNT={}\nVB_HOSTNAME={}\nVB_NET={}\n",
            p.boot_mount(),
            p.hostname(),
            u8::from(self.spec.broker_port.is_some())
        );
        let mut files = vec![
            GuestFile {
                path: "/etc/vboard/boot.env".into(),
                mode: 0o644,
                data: env.into_bytes(),
            },
            GuestFile {
                path: "/etc/vboard/run.sh".into(),
                mode: 0o644,
                data: init.as_bytes().to_vec(),
            },
            GuestFile {
                path: "/etc/os-release".into(),
                mode: 0o644,
                data: p.os_release().into(),
            },
        ];
        files.extend(self.spec.files.iter().cloned());
        for f in &files {
            a.dirs_for(&f.path, &mut have);
            a.file(&f.path, f.mode, &f.data);
        }
        let mut initrd = self.assets.base_initrd.clone();
        initrd.extend(self.assets.gzip(&a.finish()));
        let initrd_path = dir.join(format!("initrd-boot{n}.cpio.gz"));
        fs::write(&initrd_path, initrd).expect("write initrd");

        let console = dir.join(format!("console-boot{n}.log"));
        let qemu_log = dir.join(format!("qemu-boot{n}.log"));
        let mut cmd = Command::new(&self.assets.qemu);
        cmd.args([
            "-M",
            "virt",
            "-cpu",
            "cortex-a72",
            "-smp",
            "1",
            "-m",
            &self.spec.mem_mb.to_string(),
        ])
        // No default devices (no unrestricted user network), no display, no monitor; the
        // serial console goes to a file; a guest reboot ends qemu (the harness reboots it).
        .args([
            "-nodefaults",
            "-no-reboot",
            "-display",
            "none",
            "-monitor",
            "none",
        ])
        .arg("-serial")
        .arg(format!("file:{}", console.display()))
        .arg("-kernel")
        .arg(&self.assets.kernel)
        .arg("-initrd")
        .arg(&initrd_path)
        .arg("-dtb")
        .arg(&dtb)
        .arg("-append")
        .arg(&cmdline);
        for (img, id) in [(&self.boot_img, "boot"), (&self.state_img, "state")] {
            cmd.arg("-drive")
                .arg(format!("file={},format=raw,if=none,id={id}", img.display()))
                .args(["-device", &format!("virtio-blk-device,drive={id}")]);
        }
        if let Some(port) = self.spec.broker_port {
            // restrict=on: the guest reaches nothing but the forward, 10.0.2.100:1883, which
            // leads to 127.0.0.1:PORT on the host. `cmd:` spawns the relay per guest connection,
            // so, as with a real broker, a connection can fail while the broker is down and
            // succeed later, and either side's close reaches the other. (`-tcp:127.0.0.1:PORT`
            // would be one connection made at qemu's start: no late broker, no reconnect.)
            let nc = self.nc.as_ref().expect("nc checked in Board::new");
            cmd.arg("-netdev")
                .arg(format!("user,id=n0,restrict=on,guestfwd=tcp:10.0.2.100:1883-cmd:{} -N 127.0.0.1 {port}", nc.display()))
                .args(["-device", "virtio-net-device,netdev=n0"]);
        }
        let log = fs::File::create(&qemu_log).expect("qemu log");
        let child = cmd
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("log fd"))
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", self.assets.qemu.display()));
        Boot {
            name: self.spec.name.clone(),
            number: n,
            cmdline,
            dt_cma,
            child: Some(child),
            console,
            qemu_log,
            started: Instant::now(),
            ended: None,
            running: self.running.clone(),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// One boot: the running qemu and its serial console.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BootEnd {
    /// The guest rebooted ("reboot: Restarting system"): call `Board::boot` again.
    Reboot,
    /// The guest powered off ("reboot: Power down"), as /init does after the test's commands.
    PowerOff,
}

/// The complete `vb_mem COMM` lines of a console, in order. A line another writer cut short on
/// the shared serial console (the agent's own output runs beside the sampler) is left out.
pub fn parse_mem(console: &str, comm: &str) -> Vec<Mem> {
    let prefix = format!("VBOARD-MEM comm={comm} ");
    console
        .lines()
        .filter_map(|l| l.strip_prefix(&prefix))
        .filter_map(|rest| {
            let field = |k: &str| {
                rest.split_whitespace()
                    .find_map(|w| w.strip_prefix(&format!("{k}=")))
                    .and_then(|v| v.parse::<u64>().ok())
            };
            Some(Mem {
                pid: u32::try_from(field("pid")?).ok()?,
                rss_kb: field("rss_kb")?,
                hwm_kb: field("hwm_kb")?,
                anon_huge_kb: field("anon_huge_kb")?,
                threads: field("threads")?,
                cpu_ticks: field("cpu_ticks")?,
                ctxsw: field("ctxsw")?,
                rss_anon_kb: field("rss_anon_kb")?,
                rss_file_kb: field("rss_file_kb")?,
            })
        })
        .collect()
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mem {
    pub pid: u32,
    pub rss_kb: u64,
    pub hwm_kb: u64,
    /// Transparent huge pages mapped (AnonHugePages summed over /proc/PID/smaps), kB.
    pub anon_huge_kb: u64,
    /// Live threads.
    pub threads: u64,
    /// utime + stime of the whole process, clock ticks (USER_HZ, 100 a second).
    pub cpu_ticks: u64,
    /// Voluntary context switches of the main thread (its wake-ups after sleeping).
    pub ctxsw: u64,
    /// The anonymous part of VmRSS (heap, stacks, writable data), kB.
    pub rss_anon_kb: u64,
    /// The file-backed part of VmRSS (the binary's code and read-only data), kB.
    pub rss_file_kb: u64,
}

pub struct Boot {
    pub name: String,
    pub number: u32,
    /// The kernel command line the harness-as-bootloader passed.
    pub cmdline: String,
    /// The device tree's CMA pool size passed, if any.
    pub dt_cma: Option<u64>,
    child: Option<Child>,
    console: PathBuf,
    qemu_log: PathBuf,
    started: Instant,
    ended: Option<(BootEnd, Duration)>,
    running: Arc<AtomicBool>,
}

impl Boot {
    /// The serial console so far (CR LF as LF).
    pub fn console(&self) -> String {
        let raw = fs::read(&self.console).unwrap_or_default();
        String::from_utf8_lossy(&raw)
            .replace("\r\n", "\n")
            .replace('\r', "")
    }

    /// The last 40 console lines and qemu's own log, for a failure message.
    pub fn tail(&self) -> String {
        let c = self.console();
        let lines: Vec<&str> = c.lines().collect();
        let from = lines.len().saturating_sub(40);
        format!(
            "--- {} boot {} console (last 40 lines) ---\n{}\n--- qemu ---\n{}",
            self.name,
            self.number,
            lines[from..].join("\n"),
            fs::read_to_string(&self.qemu_log).unwrap_or_default()
        )
    }

    /// True while qemu runs (the guest has neither rebooted nor powered off).
    pub fn alive(&mut self) -> bool {
        !self.exited()
    }

    fn exited(&mut self) -> bool {
        match self.child.as_mut() {
            Some(c) => c.try_wait().expect("poll qemu").is_some(),
            None => true,
        }
    }

    /// Waits until the console satisfies `pred`; panics with the console's tail on timeout, or if
    /// qemu exits first. Returns the console.
    pub fn wait_until(
        &mut self,
        what: &str,
        timeout: Duration,
        pred: impl Fn(&str) -> bool,
    ) -> String {
        let deadline = Instant::now() + timeout;
        loop {
            let c = self.console();
            if pred(&c) {
                return c;
            }
            if c.contains("VBOARD-FAIL") || c.contains("Kernel panic") {
                panic!(
                    "{} boot {}: guest failed while waiting for {what}\n{}",
                    self.name,
                    self.number,
                    self.tail()
                );
            }
            if self.exited() {
                // One last read: the line may have landed just before the exit.
                let c = self.console();
                if pred(&c) {
                    return c;
                }
                panic!(
                    "{} boot {}: qemu exited before {what}\n{}",
                    self.name,
                    self.number,
                    self.tail()
                );
            }
            if Instant::now() > deadline {
                panic!(
                    "{} boot {}: no {what} after {timeout:?}\n{}",
                    self.name,
                    self.number,
                    self.tail()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits for a console line containing `needle` (a `vb_mark` text, a section's end, ...).
    pub fn wait_for(&mut self, needle: &str, timeout: Duration) -> String {
        self.wait_until(&format!("{needle:?}"), timeout, |c| c.contains(needle))
    }

    /// Waits for qemu to exit and tells why: a guest reboot or a power-off. Panics on a kernel
    /// panic, a /init failure, or the timeout (qemu is killed then).
    pub fn wait_end(&mut self, timeout: Duration) -> BootEnd {
        if let Some((end, _)) = self.ended {
            return end;
        }
        let deadline = Instant::now() + timeout;
        while !self.exited() {
            if Instant::now() > deadline {
                self.kill();
                panic!(
                    "{} boot {}: still running after {timeout:?}\n{}",
                    self.name,
                    self.number,
                    self.tail()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let took = self.started.elapsed();
        self.release();
        let c = self.console();
        let end = if c.contains("Kernel panic") || c.contains("VBOARD-FAIL") {
            panic!(
                "{} boot {}: the guest failed\n{}",
                self.name,
                self.number,
                self.tail()
            );
        } else if c.contains("reboot: Restarting system") {
            BootEnd::Reboot
        } else if c.contains("reboot: Power down") {
            BootEnd::PowerOff
        } else {
            panic!(
                "{} boot {}: qemu exited without a reboot or power-off\n{}",
                self.name,
                self.number,
                self.tail()
            );
        };
        eprintln!(
            "vboard: {} boot {} ended ({end:?}) after {:.2} s",
            self.name,
            self.number,
            took.as_secs_f64()
        );
        self.ended = Some((end, took));
        end
    }

    /// Wall time from qemu's start to its exit (after `wait_end`).
    pub fn duration(&self) -> Option<Duration> {
        self.ended.map(|e| e.1)
    }

    /// The guest's `/proc/sys/kernel/random/boot_id`, from the line /init prints after mounting.
    pub fn boot_id(&self) -> String {
        self.up_field("boot_id")
    }

    /// CmaTotal in bytes as /init read it from /proc/meminfo.
    pub fn cma_total_bytes(&self) -> u64 {
        self.up_field("cma_total_kb")
            .parse::<u64>()
            .expect("cma_total_kb is a number")
            * 1024
    }

    fn up_field(&self, key: &str) -> String {
        let c = self.console();
        let line = c
            .lines()
            .find(|l| l.starts_with("VBOARD-UP "))
            .unwrap_or_else(|| panic!("no VBOARD-UP line\n{}", self.tail()));
        line.split_whitespace()
            .find_map(|w| w.strip_prefix(&format!("{key}=")).map(str::to_string))
            .unwrap_or_else(|| panic!("no {key}= in {line:?}"))
    }

    /// The output of `vb_section NAME ...` (the last one of that name) and its exit code.
    pub fn section_rc(&self, name: &str) -> (String, i32) {
        let c = self.console();
        let begin = format!("VBOARD-BEGIN {name}\n");
        let end = format!("VBOARD-END {name} rc=");
        let start = c
            .rfind(&begin)
            .unwrap_or_else(|| panic!("no section {name}\n{}", self.tail()))
            + begin.len();
        let len = c[start..]
            .find(&end)
            .unwrap_or_else(|| panic!("section {name} not ended\n{}", self.tail()));
        let rc = c[start + len + end.len()..]
            .split_whitespace()
            .next()
            .and_then(|r| r.parse().ok())
            .expect("rc");
        (c[start..start + len].trim_end_matches('\n').to_string(), rc)
    }

    pub fn section(&self, name: &str) -> String {
        self.section_rc(name).0
    }

    /// A section parsed as JSON (e.g. `vb_section check npu-agent check --format json`).
    pub fn json(&self, name: &str) -> Value {
        let s = self.section(name);
        serde_json::from_str(s.trim())
            .unwrap_or_else(|e| panic!("section {name} is not JSON ({e}):\n{s}"))
    }

    /// `vb_mem COMM` lines: VmRSS / VmHWM of each process with that name.
    pub fn mem(&self, comm: &str) -> Vec<Mem> {
        parse_mem(&self.console(), comm)
    }

    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        self.release();
    }

    fn release(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.wait();
        }
        if self.running.swap(false, Ordering::SeqCst) {
            // Keep the console for a look after the run.
            let logs = log_dir();
            if fs::create_dir_all(&logs).is_ok() {
                let _ = fs::copy(
                    &self.console,
                    logs.join(format!("{}-boot{}.console", self.name, self.number)),
                );
            }
        }
    }
}

impl Drop for Boot {
    fn drop(&mut self) {
        self.kill();
    }
}

// ---------------------------------------------------------------------------------------------
// A broker on loopback.

pub struct Mosquitto {
    pub port: u16,
    child: Option<Child>,
    dir: tempfile::TempDir,
}

impl Mosquitto {
    /// A port on 127.0.0.1 that was free a moment ago.
    pub fn free_port() -> u16 {
        TcpListener::bind("127.0.0.1:0")
            .expect("bind 127.0.0.1:0")
            .local_addr()
            .expect("addr")
            .port()
    }

    pub fn start() -> Option<Mosquitto> {
        Self::start_on(Self::free_port())
    }

    /// mosquitto on 127.0.0.1:PORT only, anonymous, no persistence; waits until it accepts.
    pub fn start_on(port: u16) -> Option<Mosquitto> {
        let [bin] = common::tools(["mosquitto"], "the MQTT broker; Debian package mosquitto")?;
        let dir = tempfile::Builder::new()
            .prefix("vboard-mosquitto-")
            .tempdir()
            .expect("temp dir");
        let conf = dir.path().join("mosquitto.conf");
        fs::write(&conf, format!("listener {port} 127.0.0.1\nallow_anonymous true\npersistence false\nlog_dest stderr\nlog_type all\n"))
            .expect("write mosquitto.conf");
        let log = fs::File::create(dir.path().join("mosquitto.log")).expect("log");
        let child = Command::new(bin)
            .arg("-c")
            .arg(&conf)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("fd"))
            .stderr(log)
            .spawn()
            .expect("start mosquitto");
        let mut m = Mosquitto {
            port,
            child: Some(child),
            dir,
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            if let Some(st) = m
                .child
                .as_mut()
                .and_then(|c| c.try_wait().expect("poll mosquitto"))
            {
                panic!("mosquitto exited ({st}) on port {port}:\n{}", m.log());
            }
            assert!(
                Instant::now() < deadline,
                "mosquitto did not listen on {port}:\n{}",
                m.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Some(m)
    }

    pub fn url(&self) -> String {
        format!("mqtt://127.0.0.1:{}", self.port)
    }

    pub fn log(&self) -> String {
        fs::read_to_string(self.dir.path().join("mosquitto.log")).unwrap_or_default()
    }

    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Mosquitto {
    fn drop(&mut self) {
        self.stop();
    }
}
