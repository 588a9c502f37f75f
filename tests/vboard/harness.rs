//! The virtual-board harness: Debian's arm64 cloud kernel under `qemu-system-aarch64 -M virt`, a
//! device tree that reads like a real board, a boot partition and a persistent state disk, the
//! static aarch64 agent in a busybox initramfs, and the harness itself as the board's bootloader.
//! The API is documented at the top of tests/system/vboard.rs.

#![allow(dead_code)]

#[path = "harness_personality.rs"]
mod personality;
pub use personality::*;
#[path = "harness_board.rs"]
mod board;
pub use board::*;
#[path = "harness_boot.rs"]
mod boot;
pub use boot::*;
#[path = "harness_mosquitto.rs"]
mod mosquitto;
pub use mosquitto::*;

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
/// One a kernel builds in (its `modules.builtin` names it) is left out of that kernel's initramfs,
/// and /init skips it.
/// (The cloud kernel builds ext4 in; the 16k kernel has it and its helpers as modules.)
const MODULES: [&str; 12] = [
    "virtio_ring",
    "virtio",
    "virtio_mmio",
    "virtio_blk",
    "failover",
    "net_failover",
    "virtio_net",
    "crc16",
    "mbcache",
    "jbd2",
    "crc32c_generic",
    "ext4",
];
const INIT: &str = include_str!("guest/init");
const LIB_SH: &str = include_str!("guest/lib.sh");
/// What the harness-as-bootloader always adds: the serial console of `-M virt` (last, so it is
/// /dev/console whatever console= the board's boot files name), no reboot loop on a panic, our
/// /init, and a quiet kernel.
const HARNESS_ARGS: &str = "console=ttyAMA0 panic=-1 rdinit=/init quiet";

// ---------------------------------------------------------------------------------------------
// Tools, downloads and the shared part of the initramfs (once per test process).

/// Which of Debian's arm64 kernels a board boots.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Kernel {
    /// The image package linux-image-cloud-arm64 depends on: 4 KiB pages.
    #[default]
    Cloud,
    /// The image package linux-image-6.12-arm64-16k depends on: 16 KiB pages, as the Pi 5's
    /// own kernel (`-rpi-2712`) uses.
    Pages16k,
}

impl Kernel {
    /// The meta-package whose `Depends:` names the image package to fetch.
    fn meta_package(self) -> &'static str {
        match self {
            Kernel::Cloud => "linux-image-cloud-arm64",
            Kernel::Pages16k => "linux-image-6.12-arm64-16k",
        }
    }

    /// The directory under [`cache_dir`] the unpacked guest is kept in.
    fn cache_name(self) -> &'static str {
        match self {
            Kernel::Cloud => "guest",
            Kernel::Pages16k => "guest-16k",
        }
    }

    /// qemu's `-cpu`. A Cortex-A72 has no 16 KiB translation granule (the 16k kernel prints
    /// nothing on it); the Cortex-A76, the Pi 5's core, has one.
    pub fn cpu(self) -> &'static str {
        match self {
            Kernel::Cloud => "cortex-a72",
            Kernel::Pages16k => "cortex-a76",
        }
    }
}

pub struct Assets {
    pub qemu: PathBuf,
    pub dtc: PathBuf,
    pub mkfs: PathBuf,
    pub debugfs: PathBuf,
    pub gzip: PathBuf,
    /// The kernel the assets are for (its qemu CPU with it).
    pub flavour: Kernel,
    /// Unpacked from Debian's packages, cached in `<target>/vboard-cache/guest/` (`guest-16k/`).
    pub kernel: PathBuf,
    pub modules_dir: PathBuf,
    pub busybox: PathBuf,
    /// e.g. "linux-image-6.1.0-57-cloud-arm64 6.1.192-3; busybox-static 1:1.35.0-4+deb12u1+b1".
    pub packages: String,
    pub agent: PathBuf,
    /// busybox, modules, agent, /init, lib.sh, /dev/console: gzip'd newc, first part of every initrd.
    base_initrd: Vec<u8>,
}

/// Everything a virtual board on the cloud kernel needs, or None after `skip` (a panic when CI
/// is set).
pub fn assets() -> Option<&'static Assets> {
    assets_for(Kernel::Cloud)
}

/// [`assets`] for a board booting `flavour`.
pub fn assets_for(flavour: Kernel) -> Option<&'static Assets> {
    static A: [OnceLock<Option<Assets>>; 2] = [OnceLock::new(), OnceLock::new()];
    let cell = &A[flavour as usize];
    cell.get_or_init(|| {
        let [qemu, dtc, mkfs, debugfs, gzip] = common::tools(
            ["qemu-system-aarch64", "dtc", "mkfs.ext4", "debugfs", "gzip"],
            "virtual boards; Debian packages qemu-system-arm, device-tree-compiler, e2fsprogs",
        )?;
        let agent = common::aarch64_agent()?;
        let cache = cache_dir();
        let guest = match fetch_guest(&cache, flavour) {
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
            flavour,
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

/// Debian's arm64 kernel of `flavour` (the image package its meta-package depends on today) and
/// busybox-static, fetched with `apt-get download` and unpacked with `dpkg -x`, once. Modules
/// compressed with xz (`.ko.xz`, the 6.12 kernels) are unpacked with `xz -d`.
fn fetch_guest(cache: &Path, flavour: Kernel) -> Result<PathBuf, String> {
    let dir = cache.join(flavour.cache_name());
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
    let meta = flavour.meta_package();
    let kernel_pkg = {
        let show = Command::new("apt-cache")
            .args(["show", "--no-all-versions", &format!("{meta}:arm64")])
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
        name.ok_or_else(|| format!("cannot resolve the image package of {meta}:arm64 (Depends: {depends:?}; `apt-get update` may help)"))?
    };
    let tmp = cache.join(format!(
        "{}.tmp-{}",
        flavour.cache_name(),
        std::process::id()
    ));
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
    let builtin = fs::read_to_string(mods.join("modules.builtin")).unwrap_or_default();
    for m in MODULES {
        let dest = out.join("modules").join(format!("{m}.ko"));
        if let Some(found) = find_file(&mods.join("kernel"), &format!("{m}.ko")) {
            fs::copy(found, dest).map_err(|e| e.to_string())?;
        } else if let Some(xz) = find_file(&mods.join("kernel"), &format!("{m}.ko.xz")) {
            let xz_tool = which("xz").ok_or("xz not found (Debian package xz-utils)")?;
            let plain = run(Command::new(xz_tool).arg("-dc").arg(&xz))?;
            fs::write(dest, plain.stdout).map_err(|e| e.to_string())?;
        } else if !builtin.lines().any(|l| l.ends_with(&format!("/{m}.ko"))) {
            return Err(format!("module {m} neither in {kernel_pkg} nor built in"));
        }
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
            // Absent: built into this kernel (fetch_guest checked modules.builtin).
            if let Ok(ko) = fs::read(self.modules_dir.join(format!("{m}.ko"))) {
                a.file(&format!("lib/modules/{m}.ko"), 0o644, &ko);
            }
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
                self.flavour.cpu(),
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
