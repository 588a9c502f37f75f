//! Hostile input for workload discovery and the signature catalog: container logs and engine
//! metadata of any bytes, log lines of megabytes, a board with twenty thousand container
//! directories, and links out of the tree. Bounded time and memory, a clear report, never a
//! panic, never a file outside the tree.

use npu_agent::parse::{compat, containerlog, hef, kernel};
use npu_agent::profile::signature;
use proptest::prelude::*;
use std::path::Path;
use std::process::Command;

fn lines() -> impl Strategy<Value = String> {
    prop_oneof![
        proptest::collection::vec(any::<u8>(), 0..4096)
            .prop_map(|b| String::from_utf8_lossy(&b).into_owned()),
        proptest::collection::vec(
            (
                prop_oneof![
                    Just("{\"log\":\""),
                    Just("{\"log\":"),
                    Just("2026-01-01T00:00:00Z stderr P "),
                    Just("2026-01-01T00:00:00Z stdout F "),
                    Just("HAILO_OUT_OF_PHYSICAL_DEVICES("),
                    Just("status="),
                    Just("rknn_init fail! ret="),
                    Just("invalid magic"),
                    Just("Traceback (most recent call last):"),
                    Just("ValueError: "),
                    Just("(page_size="),
                ],
                "[ -~\\t\\\\\"]{0,60}"
            ),
            0..60
        )
        .prop_map(|l| l.into_iter().map(|(k, v)| format!("{k}{v}\n")).collect()),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn container_logs_and_metadata_never_panic(t in lines()) {
        let d = containerlog::docker_json_log(&t);
        prop_assert!(d.lines.iter().all(|l| l.len() <= containerlog::MAX_MESSAGE_BYTES));
        let c = containerlog::cri_log(&t);
        prop_assert!(c.lines.iter().all(|l| l.len() <= containerlog::MAX_MESSAGE_BYTES));
        let _ = containerlog::docker_config(&t);
        let _ = containerlog::docker_hostconfig(&t);
        let _ = containerlog::podman_containers(&t);
        let _ = containerlog::oci_config(&t);
        let _ = compat::parse_compat("t", &t);
        let _ = npu_agent::profile::apps::parse_apps("t", &t);
        let _ = signature::parse_catalog("t", &t);
    }

    #[test]
    fn the_matchers_never_panic(t in lines()) {
        let cat = signature::catalog();
        for l in t.lines() {
            let _ = cat.matches(l);
            let _ = cat.explain(l);
            let _ = npu_agent::parse::workload::is_exception(l);
            let _ = kernel::page_size_of_line(l);
            let _ = kernel::page_size_of_release(l);
        }
    }

    #[test]
    fn hef_headers_of_any_bytes(b in proptest::collection::vec(any::<u8>(), 0..512), arch in 0u64..200) {
        let _ = hef::parse_header(&b);
        // A real header with garbage after it still parses.
        let mut h = hef::build_header(arch, "3.29.0");
        h.extend_from_slice(&b);
        prop_assert_eq!(hef::parse_header(&h).map(|x| x.hw_arch), Ok(hef::arch_name(arch)));
    }
}

fn check_json(root: &Path) -> serde_json::Value {
    let out = Command::new(env!("CARGO_BIN_EXE_npu-agent"))
        .args(["check", "--format", "json", "--root"])
        .arg(root)
        .output()
        .unwrap();
    assert!(
        matches!(out.status.code(), Some(0 | 1)),
        "exit {:?}: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn finding<'a>(r: &'a serde_json::Value, id: &str) -> &'a serde_json::Value {
    r["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["id"] == id)
        .unwrap()
}

/// Twenty thousand container directories: discovery looks at a bounded number, says so, and
/// the check ends.
#[test]
fn a_flood_of_container_directories_is_bounded_and_said() {
    let d = tempfile::tempdir().unwrap();
    let base = d.path().join("var/lib/docker/containers");
    for i in 0..20_000 {
        std::fs::create_dir_all(base.join(format!("{i:064x}"))).unwrap();
    }
    let r = check_json(d.path());
    let f = finding(&r, "agent.log_sources");
    assert!(
        f["summary"]
            .as_str()
            .unwrap()
            .contains("only 1024 containers were looked at"),
        "{f}"
    );
    assert_eq!(f["status"], "info", "{f}");
}

/// A Frigate container whose log holds a line of megabytes, invalid UTF-8, broken JSON and a
/// real failure: the failure is found, nothing panics.
#[test]
fn a_hostile_container_log_still_gives_its_failure() {
    let d = tempfile::tempdir().unwrap();
    let id = "ab".repeat(32);
    let dir = d.path().join("var/lib/docker/containers").join(&id);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("config.v2.json"),
        r#"{"Name":"/frigate","Config":{"Image":"ghcr.io/blakeblackshear/frigate:stable"}}"#,
    )
    .unwrap();
    let mut log = Vec::new();
    log.extend_from_slice(b"{\"log\":\"");
    log.extend(std::iter::repeat_n(b'x', 3 << 20));
    log.extend_from_slice(b"\\n\",\"stream\":\"stderr\"}\n");
    log.extend_from_slice(b"{\"log\":\"\xff\xfe bad bytes\\n\"}\n");
    log.extend_from_slice(b"{\"log\": not json at all\n");
    log.extend_from_slice(
        b"{\"log\":\"[HailoRT] [error] CHECK_SUCCESS failed with status=HAILO_DRIVER_TIMEOUT(87)\\n\",\"stream\":\"stderr\"}\n",
    );
    std::fs::write(dir.join(format!("{id}-json.log")), log).unwrap();
    let r = check_json(d.path());
    let id_ = finding(&r, "board.identity");
    assert!(
        id_["summary"]
            .as_str()
            .unwrap()
            .contains("Frigate (docker container frigate)"),
        "{id_}"
    );
    assert_ne!(r["health"], "ok", "{r:#}");
    let text = r.to_string();
    assert!(
        text.contains("HAILO_DRIVER_TIMEOUT"),
        "the failure line is not in the report"
    );
}

/// A container log and an engine directory linked out of the tree: the files outside are never
/// read (links resolve inside the tree).
#[test]
fn links_out_of_the_tree_are_not_followed() {
    let outside = tempfile::tempdir().unwrap();
    let secret = outside.path().join("host-log.txt");
    std::fs::write(
        &secret,
        "E RKNN: OUTSIDE-THE-TREE errno: 24, errstr: Too many open files\n",
    )
    .unwrap();
    let d = tempfile::tempdir().unwrap();
    let id = "cd".repeat(32);
    let dir = d.path().join("var/lib/docker/containers").join(&id);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("config.v2.json"),
        r#"{"Name":"/rkllama","Config":{"Image":"rkllama:latest"}}"#,
    )
    .unwrap();
    std::os::unix::fs::symlink(&secret, dir.join(format!("{id}-json.log"))).unwrap();
    std::fs::create_dir_all(d.path().join("var/log")).unwrap();
    std::os::unix::fs::symlink(outside.path(), d.path().join("var/log/pods")).unwrap();
    let r = check_json(d.path());
    assert!(
        !r.to_string().contains("OUTSIDE-THE-TREE"),
        "a file outside the tree was read"
    );
}
