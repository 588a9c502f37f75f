//! Unit tests for the capture bundle and its redaction.

#[test]
fn gzip_stream_round_trips_and_its_crc_catches_a_flipped_byte() {
    use std::io::{Read, Write};
    let data: Vec<u8> = (0..200_000u32).map(|i| (i * 7 % 251) as u8).collect();
    let mut w = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    w.write_all(&data).unwrap();
    let gz = w.finish().unwrap();
    let mut back = Vec::new();
    flate2::read::GzDecoder::new(gz.as_slice())
        .read_to_end(&mut back)
        .unwrap();
    assert_eq!(back, data);
    // A flipped data byte is caught by the trailer's CRC.
    let mut bad = gz.clone();
    let n = bad.len();
    bad[n - 8] ^= 1;
    assert!(flate2::read::GzDecoder::new(bad.as_slice())
        .read_to_end(&mut Vec::new())
        .is_err());
}

use super::*;

fn red_with(literals: &[(&str, &str)]) -> Redactor {
    Redactor {
        literals: literals
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect(),
        enabled: true,
    }
}

#[test]
fn text_redaction() {
    let r = red_with(&[("pi-kitchen", "redacted-host"), ("alice", "user")]);
    let t = r.text("May 1 pi-kitchen kernel: eth0 dc:a6:32:01:02:03 192.168.1.20 fe80::1ff:fe23:4567:890a /home/alice/m.gguf mqtts://bob:s3cret@broker:8883 password=hunter2 Bearer abc.def alicex");
    assert!(
        !t.contains("pi-kitchen") && t.contains("redacted-host"),
        "{t}"
    );
    assert!(
        !t.contains("dc:a6:32") && !t.contains("192.168.1.20"),
        "{t}"
    );
    assert!(!t.contains("fe80::1ff"), "{t}");
    assert!(t.contains("/home/user/m.gguf"), "{t}");
    assert!(!t.contains("s3cret") && !t.contains("bob:"), "{t}");
    assert!(!t.contains("hunter2") && !t.contains("abc.def"), "{t}");
    // A longer identifier that merely contains a user name is left alone.
    assert!(t.contains("alicex"), "{t}");
}

#[test]
fn evidence_survives_redaction() {
    let r = red_with(&[]);
    for l in [
        "[ 12.345678] cma: cma_alloc: alloc failed, req-size: 8 pages, ret: -12",
        "hailo1x 0001:01:00.0: Probing: Added board 1e60-45c4, /dev/hailo0",
        "May 15 10:02:11 kernel: [drm] Initialized rknpu 0.9.8 20240828 for fdab0000.npu",
        "RKNN Runtime Information, librknnrt version: 2.3.0 (c949ad889d@2024-11-07T11:35:33)",
        "--host 127.0.0.1 --port 8080",
    ] {
        assert_eq!(r.text(l), l);
    }
}

#[test]
fn cmdline_secrets() {
    let r = red_with(&[]);
    let raw = b"llama-server\0--api-key\0sk-123\0--token=abc\0-m\0/models/x.gguf\0--port\08080";
    let out = String::from_utf8(r.cmdline(raw)).unwrap();
    assert_eq!(
        out,
        "llama-server\0--api-key\0<redacted>\0--token=<redacted>\0-m\0/models/x.gguf\0--port\08080"
    );
}

/// llama.cpp's short `-hft` and a secret-named option the status already hides are hidden
/// in a capture too (one list of secret names for both).
#[test]
fn short_token_options_are_hidden() {
    let r = red_with(&[]);
    let raw = b"llama-server\0-hf\0org/repo\0-hft\0hf_zq81\0--client-secret\0cs_zq82";
    let out = String::from_utf8(r.cmdline(raw)).unwrap();
    assert_eq!(
        out,
        "llama-server\0-hf\0org/repo\0-hft\0<redacted>\0--client-secret\0<redacted>"
    );
}

#[test]
fn unwritable_output_leaves_nothing() {
    let d = tempfile::tempdir().unwrap();
    let out = d.path().join("no-such-dir/x.tar.gz");
    let e = capture(
        &SysRoot::new(d.path()),
        &ProfileChoice::Id("generic".into()),
        &out,
        true,
        false,
    );
    assert!(matches!(e, Err(CaptureError::Write { .. })));
    assert!(!out.exists());
}

/// Issue 26 item 12: a support bundle and a status evidence line lose every secret of the
/// shared corpus (one rule set, `sys/redact.rs`).
#[test]
fn bundle_and_status_lose_every_secret_of_the_corpus() {
    let (secrets, _) = crate::sys::redact::tests::corpus();
    let r = red_with(&[]);
    for (secret, text) in secrets {
        let bundle = r.text(text);
        assert!(!bundle.contains(secret), "bundle: {secret:?} in {bundle:?}");
        let mut f = crate::model::Finding::new("x.y", crate::model::Status::Fail, "s");
        f.push_evidence("/var/log/app.log", Some(1), text);
        let status = serde_json::to_string(&f).unwrap();
        assert!(!status.contains(secret), "status: {secret:?} in {status}");
    }
}

/// A log with a stray byte (Latin-1, NUL padding) is still text: redacted, never kept as is;
/// an ELF file stays as it is.
#[test]
fn a_log_with_stray_bytes_is_redacted_as_text() {
    let raw = b"start password=Sup3rS3cretPW caf\xe9\0\0 loaded\n";
    let encoding::Redacted::Keep(out, _) = encoding::redact_bytes(&red_with(&[]), raw, false)
    else {
        panic!("left out")
    };
    let out = String::from_utf8_lossy(&out);
    assert!(
        !out.contains("Sup3rS3cretPW") && out.contains("caf\u{fffd}\0\0 loaded"),
        "{out}"
    );
    let elf = b"\x7fELF\x02\x01\x01 password=x";
    assert_eq!(
        encoding::redact_bytes(&red_with(&[]), elf, false),
        encoding::Redacted::Keep(elf.to_vec(), "")
    );
}
