//! A local apt repository for the image's package fix: `dpkg-deb` packages named and versioned
//! as the real Hailo ones (the Hailo-8 line `hailo-all` with `hailort` 4.23.0, the Hailo-10H
//! line `hailo-h10-all` with `h10-hailort` 5.1.1, and the `dkms` the 10H metapackage needs),
//! and `frigate-detector-hailo`, an application that depends on HailoRT 4.23.0 (so swapping the
//! line would remove it), indexed by `dpkg-scanpackages`, served to the guest's apt as
//! `[trusted=yes] file:` source.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Where the repository sits in the guest's root file system.
pub const GUEST_DIR: &str = "/srv/npu-test-repo";

/// (name, version, Depends) of each package.
const PACKAGES: [(&str, &str, &str); 6] = [
    ("hailort", "4.23.0", ""),
    ("hailo-all", "4.23.0", "hailort (= 4.23.0)"),
    ("h10-hailort", "5.1.1", ""),
    ("hailo-h10-all", "5.1.1", "h10-hailort (= 5.1.1), dkms"),
    ("dkms", "3.0.10-8+npu-test", ""),
    ("frigate-detector-hailo", "0.14.1", "hailort (= 4.23.0)"),
];

/// The application a package swap would take away with the Hailo-8 line.
pub const DEPENDENT_APP: &str = "frigate-detector-hailo";

/// Builds the packages and their `Packages` index under `dir`; returns the `--file DEST=SRC`
/// arguments of build-test-image.sh that put the repository at [`GUEST_DIR`].
pub fn build(dir: &Path) -> Vec<String> {
    let repo = dir.join("repo");
    fs::create_dir_all(&repo).unwrap();
    for (name, version, depends) in PACKAGES {
        let tree = dir.join(format!("pkg-{name}"));
        fs::create_dir_all(tree.join("DEBIAN")).unwrap();
        let doc = tree.join(format!("usr/share/doc/{name}"));
        fs::create_dir_all(&doc).unwrap();
        fs::write(
            doc.join("README"),
            format!("{name} {version}: npu-agent test package\n"),
        )
        .unwrap();
        let mut control = format!(
            "Package: {name}\nVersion: {version}\nArchitecture: all\nMaintainer: npu-agent tests <t@example.org>\nDescription: {name} for the npu-agent image test\n"
        );
        if !depends.is_empty() {
            control.push_str(&format!("Depends: {depends}\n"));
        }
        fs::write(tree.join("DEBIAN/control"), control).unwrap();
        let deb = repo.join(format!("{name}_{version}_all.deb"));
        run(Command::new("dpkg-deb")
            .args(["--root-owner-group", "-b"])
            .arg(&tree)
            .arg(&deb));
    }
    let index = Command::new("dpkg-scanpackages")
        .args(["--multiversion", "."])
        .current_dir(&repo)
        .output()
        .unwrap();
    assert!(index.status.success(), "dpkg-scanpackages: {index:?}");
    fs::write(repo.join("Packages"), &index.stdout).unwrap();
    let mut files: Vec<PathBuf> = fs::read_dir(&repo)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    files
        .iter()
        .map(|p| {
            let name = p.file_name().unwrap().to_string_lossy();
            format!("{GUEST_DIR}/{name}={}", p.display())
        })
        .collect()
}

/// The guest's shell lines that make the repository its only apt source and install the
/// Hailo-8 line (the wrong generation for a Hailo-10H) and [`DEPENDENT_APP`]. apt reads nothing from the console,
/// where the harness's next line waits.
pub fn install_wrong_line() -> String {
    format!(
        "mkdir -p /root/apt-sources && mv /etc/apt/sources.list /etc/apt/sources.list.d/* /root/apt-sources/ 2>/dev/null; \
         echo 'deb [trusted=yes] file:{GUEST_DIR} ./' > /etc/apt/sources.list.d/npu-test.list && \
         apt-get update -qq < /dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq hailo-all {DEPENDENT_APP} < /dev/null >/dev/null && \
         dpkg-query -W hailo-all hailort"
    )
}

fn run(c: &mut Command) {
    let o = c.output().unwrap();
    assert!(o.status.success(), "{c:?}: {o:?}");
}
