//! Issue 37 item 2: `capture` redacts a log whatever its encoding. A GBK workload log (Rockchip
//! tools print Chinese) keeps its Chinese bytes and loses its secrets; a UTF-16 log (with or
//! without a byte-order mark) is decoded, redacted and stored as UTF-8; the manifest says what
//! was done. Bundles are unpacked with the system's `tar`.

use std::path::{Path, PathBuf};
use std::process::Command;

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/boards/own-pi5-hailo8-16k-pages-max-desc-page-size/root")
}

/// "推理失败，模型加载错误" (inference failed, model load error) in GBK.
const GBK_CHINESE: &[u8] =
    b"\xcd\xc6\xc0\xed\xca\xa7\xb0\xdc\xa3\xac\xc4\xa3\xd0\xcd\xbc\xd3\xd4\xd8\xb4\xed\xce\xf3";

fn utf16(text: &str, le: bool, bom: bool) -> Vec<u8> {
    let units = bom
        .then_some(0xfeffu16)
        .into_iter()
        .chain(text.encode_utf16());
    units
        .flat_map(|u| if le { u.to_le_bytes() } else { u.to_be_bytes() })
        .collect()
}

/// Captures `root` and unpacks the bundle into `tmp`; returns the unpacked tree's directory and
/// the manifest.
fn capture(root: &Path, tmp: &Path) -> (PathBuf, serde_json::Value) {
    let out = tmp.join("b.tar.gz");
    let o = Command::new(env!("CARGO_BIN_EXE_npu-agent"))
        .args(["capture", "--out"])
        .arg(&out)
        .arg("--root")
        .arg(root)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let dir = tmp.join("unpacked");
    std::fs::create_dir_all(&dir).unwrap();
    assert!(Command::new("tar")
        .arg("xzf")
        .arg(&out)
        .arg("-C")
        .arg(&dir)
        .status()
        .unwrap()
        .success());
    let m = std::fs::read(dir.join("npu-agent-capture/manifest.json")).unwrap();
    (dir, serde_json::from_slice(&m).unwrap())
}

fn note(manifest: &serde_json::Value, path: &str) -> String {
    manifest["files"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["path"] == path)
        .map(|f| f["note"].as_str().unwrap_or("").to_string())
        .unwrap_or_else(|| panic!("{path} not in the bundle: {manifest}"))
}

/// Makes a log file's bytes around a line of text.
type Encoder = Box<dyn Fn(&str) -> Vec<u8>>;

#[test]
fn gbk_and_utf16_logs_lose_their_secrets_in_a_bundle() {
    let cases: [(&str, Encoder, &str); 3] = [
        (
            "GBK",
            Box::new(|secret_line: &str| {
                let mut b = Vec::new();
                for _ in 0..20 {
                    b.extend_from_slice(GBK_CHINESE);
                    b.push(b'\n');
                }
                b.extend_from_slice(GBK_CHINESE);
                b.extend_from_slice(secret_line.as_bytes());
                b
            }),
            "not UTF-8: its ASCII text redacted, other bytes kept",
        ),
        (
            "UTF-16LE with a BOM",
            Box::new(|l: &str| utf16(&format!("推理失败\n{l}"), true, true)),
            "decoded from UTF-16LE",
        ),
        (
            "UTF-16BE without a BOM",
            Box::new(|l: &str| utf16(&format!("推理失败\n{l}"), false, false)),
            "decoded from UTF-16BE",
        ),
    ];
    for (name, encode, want_note) in cases {
        let t = tempfile::tempdir().unwrap();
        assert!(Command::new("cp")
            .arg("-a")
            .arg(format!("{}/.", fixture().display()))
            .arg(t.path())
            .status()
            .unwrap()
            .success());
        let line = " rknn_init: password=EncPw4417 --api-key sk9encKey55 loaded\n";
        std::fs::write(t.path().join("var/log/hailort.log"), encode(line)).unwrap();
        let tmp = tempfile::tempdir().unwrap();
        let (dir, manifest) = capture(t.path(), tmp.path());
        let raw = std::fs::read(dir.join("var/log/hailort.log")).unwrap();
        // Searched in the stored bytes as they are and as UTF-16 (never both ways missed).
        let as_text = String::from_utf8_lossy(&raw).replace('\0', "");
        for s in ["EncPw4417", "sk9encKey55"] {
            assert!(!as_text.contains(s), "{name}: {s} in the bundle");
        }
        assert!(
            as_text.contains("password=<redacted>") && as_text.contains("loaded"),
            "{name}: {as_text}"
        );
        assert_eq!(note(&manifest, "/var/log/hailort.log"), want_note, "{name}");
        if name == "GBK" {
            assert!(
                raw.starts_with(GBK_CHINESE),
                "the GBK bytes are kept as they were"
            );
        } else {
            assert!(as_text.starts_with("推理失败\n"), "{name}: {as_text}");
        }
    }
}
