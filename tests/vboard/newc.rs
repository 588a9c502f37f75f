//! A cpio archive in the "newc" format the kernel unpacks as an initramfs, written in memory so
//! device nodes (/dev/console) and root ownership need no privileges and no staging directory.

pub struct Newc {
    buf: Vec<u8>,
    ino: u32,
}

const S_IFDIR: u32 = 0o040000;
const S_IFREG: u32 = 0o100000;
const S_IFLNK: u32 = 0o120000;
const S_IFCHR: u32 = 0o020000;

impl Newc {
    pub fn new() -> Self {
        Newc {
            buf: Vec::new(),
            ino: 1,
        }
    }

    fn entry(&mut self, name: &str, mode: u32, rdev: (u32, u32), data: &[u8]) {
        let name = name.trim_start_matches('/');
        let nlink = if mode & S_IFDIR != 0 { 2 } else { 1 };
        let fields = [
            self.ino,
            mode,
            0, // uid root
            0, // gid root
            nlink,
            0, // mtime: fixed, so archives are reproducible
            u32::try_from(data.len()).expect("file under 4 GiB"),
            0,
            0,
            rdev.0,
            rdev.1,
            u32::try_from(name.len() + 1).expect("name length"),
            0,
        ];
        self.ino += 1;
        self.buf.extend_from_slice(b"070701");
        for f in fields {
            self.buf.extend_from_slice(format!("{f:08x}").as_bytes());
        }
        self.buf.extend_from_slice(name.as_bytes());
        self.buf.push(0);
        self.pad();
        self.buf.extend_from_slice(data);
        self.pad();
    }

    fn pad(&mut self) {
        while self.buf.len() % 4 != 0 {
            self.buf.push(0);
        }
    }

    pub fn dir(&mut self, path: &str) {
        self.entry(path, S_IFDIR | 0o755, (0, 0), &[]);
    }

    /// Every missing parent of `path` is added first (the kernel does not create them).
    pub fn dirs_for(&mut self, path: &str, have: &mut std::collections::BTreeSet<String>) {
        let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
        for i in 1..parts.len() {
            let d = parts[..i].join("/");
            if have.insert(d.clone()) {
                self.dir(&d);
            }
        }
    }

    pub fn file(&mut self, path: &str, mode: u32, data: &[u8]) {
        self.entry(path, S_IFREG | (mode & 0o7777), (0, 0), data);
    }

    pub fn symlink(&mut self, path: &str, target: &str) {
        self.entry(path, S_IFLNK | 0o777, (0, 0), target.as_bytes());
    }

    pub fn char_dev(&mut self, path: &str, mode: u32, major: u32, minor: u32) {
        self.entry(path, S_IFCHR | (mode & 0o7777), (major, minor), &[]);
    }

    pub fn finish(mut self) -> Vec<u8> {
        self.entry("TRAILER!!!", 0, (0, 0), &[]);
        // The kernel reads the initramfs in 512-byte blocks, as cpio(1) writes it.
        while self.buf.len() % 512 != 0 {
            self.buf.push(0);
        }
        self.buf
    }
}
