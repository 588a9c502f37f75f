//! A virtual board: its disk image, the files on it, and booting it.

use super::*;

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
    /// The kernel it boots (default: the cloud kernel, 4 KiB pages).
    pub kernel: Kernel,
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
            kernel: Kernel::Cloud,
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

    /// Boots `kernel` instead of the cloud kernel.
    pub fn kernel(mut self, kernel: Kernel) -> Self {
        self.kernel = kernel;
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
        let assets = assets_for(spec.kernel)?;
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
            self.assets.flavour.cpu(),
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
