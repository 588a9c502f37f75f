//! The signed apt repository recipe (docs/image-guide.md "A signed apt repository"): a fresh
//! gpg key in a temp GNUPGHOME, packaging/apt-repo/publish.sh (apt-ftparchive) holding the agent's two
//! .debs (built once by packaging/build-debs.sh, see tests/system/package.rs), the board's source
//! written by image/add-apt-repo.sh into a throwaway root, and the real `apt-get` on that root
//! (`-o Dir=ROOT`, its own empty dpkg status): it verifies the InRelease signature and downloads
//! the very package published; a repository signed by another key is refused. Nothing outside
//! temp dirs is read or written by apt (the machine's sources and keys are not used).
//! A missing tool fails under `CI=true` and skips otherwise.

use crate::common;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn gpg(home: &Path) -> Command {
    let mut c = Command::new("gpg");
    c.env("GNUPGHOME", home).arg("--batch").stdin(Stdio::null());
    c
}

/// A new passphrase-less Ed25519 signing key in its own GNUPGHOME under `dir`; returns
/// (home, fingerprint).
pub(crate) fn new_key(dir: &Path, name: &str) -> (PathBuf, String) {
    let home = dir.join(format!("gnupg-{name}"));
    std::fs::create_dir_all(&home).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&home, std::fs::Permissions::from_mode(0o700)).unwrap();
    let uid = format!("npu-agent test {name} <{name}@example.invalid>");
    let o = gpg(&home)
        .args([
            "--passphrase",
            "",
            "--quick-gen-key",
            &uid,
            "ed25519",
            "sign",
            "never",
        ])
        .output()
        .unwrap();
    assert!(o.status.success(), "gpg key: {}", text(&o));
    let o = gpg(&home)
        .args(["--with-colons", "--list-secret-keys"])
        .output()
        .unwrap();
    let fpr = String::from_utf8_lossy(&o.stdout)
        .lines()
        .find_map(|l| {
            l.strip_prefix("fpr:")
                .map(|r| r.trim_matches(':').to_string())
        })
        .expect("a fingerprint");
    (home, fpr)
}

/// publish.sh with `home`'s key `fpr` into `repo`.
pub(crate) fn publish(home: &Path, fpr: &str, repo: &Path, debs: &[&Path]) {
    let o = Command::new("bash")
        .arg(common::manifest_dir().join("packaging/apt-repo/publish.sh"))
        .arg("--repo")
        .arg(repo)
        .args(["--key", fpr])
        .args(debs)
        .env("GNUPGHOME", home)
        .output()
        .unwrap();
    assert!(o.status.success(), "publish.sh: {}", text(&o));
    for f in ["InRelease", "Release.gpg", "main/binary-arm64/Packages"] {
        assert!(repo.join("dists/bookworm").join(f).is_file(), "no {f}");
    }
}

/// A throwaway board root with the repository added by image/add-apt-repo.sh and `key` (.asc).
fn board(dir: &Path, repo: &Path, key: &Path) -> PathBuf {
    let root = dir.join("board");
    let o = Command::new("sh")
        .arg(common::manifest_dir().join("image/add-apt-repo.sh"))
        .arg(&root)
        .arg(format!("file:{}", repo.display()))
        .arg(key)
        .output()
        .unwrap();
    assert!(o.status.success(), "add-apt-repo.sh: {}", text(&o));
    for d in [
        "var/lib/apt/lists/partial",
        "var/cache/apt/archives/partial",
        "var/lib/dpkg",
        "etc/apt/apt.conf.d",
        "etc/apt/preferences.d",
        "etc/apt/trusted.gpg.d",
    ] {
        std::fs::create_dir_all(root.join(d)).unwrap();
    }
    std::fs::write(root.join("var/lib/dpkg/status"), "").unwrap();
    root
}

/// `apt-get` confined to `root` for `arch`, run in `cwd`.
fn apt(root: &Path, arch: &str, cwd: &Path, args: &[&str]) -> Output {
    Command::new("apt-get")
        .arg("-o")
        .arg(format!("Dir={}", root.display()))
        .arg("-o")
        .arg(format!(
            "Dir::State::status={}/var/lib/dpkg/status",
            root.display()
        ))
        .args(["-o", &format!("APT::Architecture={arch}")])
        .args(["-o", &format!("APT::Architectures::={arch}")])
        .args(["-o", "Debug::NoLocking=1", "-o", "APT::Sandbox::User=root"])
        .args(args)
        .current_dir(cwd)
        .env("LC_ALL", "C")
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn tools() -> Option<(PathBuf, PathBuf)> {
    let why = "the signed apt repository recipe; Debian packages apt-utils, gnupg, apt";
    common::tools(["apt-ftparchive", "gpg", "apt-get"], why)?;
    super::package::debs()
}

#[test]
fn apt_on_a_board_verifies_the_signed_repository_and_downloads_the_agent() {
    let Some((arm, amd)) = tools() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (home, fpr) = new_key(dir.path(), "archive");
    let repo = dir.path().join("repo");
    publish(&home, &fpr, &repo, &[&arm, &amd]);
    let key = repo.join("npu-agent-archive-keyring.asc");
    let root = board(dir.path(), &repo, &key);
    let source =
        std::fs::read_to_string(root.join("etc/apt/sources.list.d/npu-agent.sources")).unwrap();
    assert!(
        source.contains("Signed-By:\n -----BEGIN PGP PUBLIC KEY BLOCK-----"),
        "{source}"
    );
    assert!(
        source.contains(&format!("URIs: file:{}\n", repo.display())),
        "{source}"
    );
    for (arch, deb) in [("arm64", &arm), ("amd64", &amd)] {
        let o = apt(&root, arch, dir.path(), &["update"]);
        assert!(o.status.success(), "apt-get update ({arch}): {}", text(&o));
        let out = text(&o);
        assert!(out.contains("bookworm InRelease"), "{out}");
        assert!(!out.contains("W:") && !out.contains("E:"), "{out}");
        let got = dir.path().join(arch);
        std::fs::create_dir_all(&got).unwrap();
        let o = apt(&root, arch, &got, &["download", "npu-agent"]);
        assert!(
            o.status.success(),
            "apt-get download ({arch}): {}",
            text(&o)
        );
        let name = deb.file_name().unwrap();
        assert_eq!(
            std::fs::read(got.join(name)).unwrap(),
            std::fs::read(deb).unwrap(),
            "{arch}: the downloaded package is the published one"
        );
    }
}

#[test]
fn a_repository_signed_by_another_key_is_refused() {
    let Some((arm, _)) = tools() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (home, fpr) = new_key(dir.path(), "archive");
    let (other_home, other) = new_key(dir.path(), "other");
    let repo = dir.path().join("repo");
    publish(&home, &fpr, &repo, &[&arm]);
    // The board trusts another key than the one that signed the repository.
    let key = dir.path().join("other.asc");
    let o = gpg(&other_home)
        .args(["--armor", "--export", &other])
        .output()
        .unwrap();
    std::fs::write(&key, &o.stdout).unwrap();
    let root = board(dir.path(), &repo, &key);
    let o = apt(&root, "arm64", dir.path(), &["update"]);
    let out = text(&o);
    assert!(!o.status.success(), "apt-get update accepted it: {out}");
    assert!(
        out.contains("NO_PUBKEY") || out.contains("is not signed"),
        "{out}"
    );
    let got = dir.path().join("got");
    std::fs::create_dir_all(&got).unwrap();
    let o = apt(&root, "arm64", &got, &["download", "npu-agent"]);
    assert!(
        !o.status.success(),
        "downloaded from an unverified repository"
    );
    assert_eq!(std::fs::read_dir(&got).unwrap().count(), 0);
}

/// `deb` with its version set to `version` (and `note` added as a file when given), under `dir`.
fn with_version(deb: &Path, version: &str, dir: &Path, note: Option<&str>) -> PathBuf {
    let tree = dir.join(format!("tree-{version}"));
    let o = Command::new("dpkg-deb")
        .arg("-R")
        .arg(deb)
        .arg(&tree)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    let control = tree.join("DEBIAN/control");
    let c = std::fs::read_to_string(&control).unwrap();
    let c: String = c
        .lines()
        .map(|l| match l.starts_with("Version: ") {
            true => format!("Version: {version}\n"),
            false => format!("{l}\n"),
        })
        .collect();
    std::fs::write(&control, c).unwrap();
    if let Some(n) = note {
        std::fs::write(tree.join("usr/share/doc/npu-agent/REBUILT"), n).unwrap();
    }
    let out = dir.join(format!("npu-agent_{version}_arm64.deb"));
    let o = Command::new("dpkg-deb")
        .args(["--root-owner-group", "-b"])
        .arg(&tree)
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", text(&o));
    out
}

/// A board rolls back by installing the version it had from the repository: publishing the next
/// version keeps the earlier one in the index (apt lists both), and a published version cannot
/// be published again with other contents.
#[test]
fn every_published_version_stays_listed_for_a_rollback() {
    let Some((arm, _)) = tools() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (home, fpr) = new_key(dir.path(), "archive");
    let repo = dir.path().join("repo");
    let v = env!("CARGO_PKG_VERSION");
    publish(&home, &fpr, &repo, &[&arm]);
    let next = with_version(&arm, &format!("{v}-2"), dir.path(), None);
    publish(&home, &fpr, &repo, &[&next]);
    let root = board(
        dir.path(),
        &repo,
        &repo.join("npu-agent-archive-keyring.asc"),
    );
    let o = apt(&root, "arm64", dir.path(), &["update"]);
    assert!(o.status.success(), "apt-get update: {}", text(&o));
    let o = Command::new("apt-cache")
        .arg("-o")
        .arg(format!("Dir={}", root.display()))
        .arg("-o")
        .arg(format!(
            "Dir::State::status={}/var/lib/dpkg/status",
            root.display()
        ))
        .args(["-o", "APT::Architecture=arm64", "madison", "npu-agent"])
        .env("LC_ALL", "C")
        .output()
        .unwrap();
    let listed = text(&o);
    for version in [format!("{v}-1"), format!("{v}-2")] {
        assert!(
            listed.contains(&format!(" {version} ")),
            "{version}:\n{listed}"
        );
    }
    // The same name and version with other contents (a rebuilt -2) is refused, the pool kept.
    let other = dir.path().join("other");
    std::fs::create_dir_all(&other).unwrap();
    let rebuilt = with_version(&arm, &format!("{v}-2"), &other, Some("rebuilt\n"));
    let o = Command::new("bash")
        .arg(common::manifest_dir().join("packaging/apt-repo/publish.sh"))
        .arg("--repo")
        .arg(&repo)
        .args(["--key", &fpr])
        .arg(&rebuilt)
        .env("GNUPGHOME", &home)
        .output()
        .unwrap();
    assert!(!o.status.success(), "published again: {}", text(&o));
    assert!(
        text(&o).contains("already published with other contents"),
        "{}",
        text(&o)
    );
    let pooled = repo.join(format!("pool/main/n/npu-agent/npu-agent_{v}-2_arm64.deb"));
    assert_eq!(
        std::fs::read(pooled).unwrap(),
        std::fs::read(&next).unwrap()
    );
}
