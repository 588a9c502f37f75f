//! Temporary board trees and fixture helpers.

use npu_agent::root::SysRoot;
use std::fs;
use std::path::{Path, PathBuf};

/// A board tree in a temporary directory; board paths (`/proc/meminfo`) map under it.
pub struct Tree {
    pub dir: tempfile::TempDir,
}

impl Tree {
    pub fn new() -> Self {
        Tree {
            dir: tempfile::tempdir().expect("tempdir"),
        }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn host(&self, board_path: &str) -> PathBuf {
        self.dir.path().join(board_path.trim_start_matches('/'))
    }

    pub fn file(&self, board_path: &str, content: impl AsRef<[u8]>) -> &Self {
        let p = self.host(board_path);
        fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
        fs::write(&p, content).expect("write");
        self
    }

    pub fn read(&self, board_path: &str) -> String {
        fs::read_to_string(self.host(board_path)).unwrap_or_else(|e| panic!("{board_path}: {e}"))
    }

    pub fn exists(&self, board_path: &str) -> bool {
        self.host(board_path).exists()
    }

    pub fn root(&self) -> SysRoot {
        SysRoot::new(self.path())
    }

    /// Names in a directory of the tree, sorted.
    pub fn names(&self, board_dir: &str) -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(self.host(board_dir))
            .map(|rd| {
                rd.filter_map(|e| e.ok())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        v.sort();
        v
    }
}

/// A `/proc/meminfo` that the agent's parser accepts (values in kB).
pub fn meminfo(mem_total_kb: u64, cma_total_kb: u64, cma_free_kb: u64) -> String {
    format!(
        "MemTotal:       {mem_total_kb} kB\nMemFree:        {} kB\nMemAvailable:   {} kB\nBuffers:           41229 kB\nCached:          1058771 kB\nSwapCached:            0 kB\nActive:          1022992 kB\nInactive:         681994 kB\nSwapTotal:             0 kB\nSwapFree:              0 kB\nDirty:                64 kB\nWriteback:             0 kB\nMapped:           170498 kB\nSlab:             102299 kB\nCommitted_AS:    2045984 kB\nVmallocTotal:   68447887360 kB\nVmallocUsed:       20000 kB\nVmallocChunk:          0 kB\nHugePages_Total:       0\nCmaTotal:       {cma_total_kb} kB\nCmaFree:        {cma_free_kb} kB\n",
        mem_total_kb / 2,
        mem_total_kb * 3 / 4
    )
}

/// An RK3588 (Orange Pi 5) tree with `/boot/armbianEnv.txt`, `/proc/cmdline`, `/proc/meminfo`
/// (8 GiB) and a `boot_id`.
pub fn rk3588_tree(armbian_env: &str, proc_cmdline: &str, cma_total_kb: u64) -> Tree {
    let t = Tree::new();
    t.file(
        "/proc/device-tree/compatible",
        b"xunlong,orangepi-5\0rockchip,rk3588s\0",
    )
    .file("/proc/device-tree/model", b"Orange Pi 5\0")
    .file("/boot/armbianEnv.txt", armbian_env)
    .file("/proc/cmdline", format!("{proc_cmdline}\n"))
    .file(
        "/proc/meminfo",
        meminfo(8 * 1024 * 1024, cma_total_kb, cma_total_kb / 2),
    )
    .file(
        "/proc/sys/kernel/random/boot_id",
        "11111111-1111-1111-1111-111111111111\n",
    );
    t
}

/// `tests/fixtures/<rel>`.
pub fn fixtures(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(rel)
}

/// A golden input from `tests/fixtures/bootedit/`, without its `# source:` first line.
pub fn sample(name: &str) -> String {
    let text = fs::read_to_string(fixtures(&format!("bootedit/{name}")))
        .unwrap_or_else(|e| panic!("{name}: {e}"));
    match text.strip_prefix("# source:") {
        Some(rest) => rest
            .split_once('\n')
            .map(|(_, body)| body.to_string())
            .unwrap_or_default(),
        None => text,
    }
}

/// Copies a directory tree, keeping symlinks as symlinks.
pub fn copy_tree(from: &Path, to: &Path) {
    fs::create_dir_all(to).expect("mkdir");
    for e in fs::read_dir(from).expect("read_dir").filter_map(|e| e.ok()) {
        let src = e.path();
        let dst = to.join(e.file_name());
        let ft = e.file_type().expect("file type");
        if ft.is_symlink() {
            std::os::unix::fs::symlink(fs::read_link(&src).expect("readlink"), &dst)
                .expect("symlink");
        } else if ft.is_dir() {
            copy_tree(&src, &dst);
        } else {
            fs::copy(&src, &dst).expect("copy");
        }
    }
}

/// A board fixture's `root/` copied into a fresh tree (fixtures themselves stay untouched).
pub fn fixture_tree(case: &str) -> Tree {
    let t = Tree::new();
    copy_tree(&fixtures(&format!("boards/{case}/root")), t.path());
    t
}
