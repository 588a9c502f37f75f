//! Container engines' metadata in a bundle: Docker's `config.v2.json` and `hostconfig.json`,
//! podman's `containers.json` and a container's OCI `config.json` carry the container's
//! environment (passwords, tokens, API keys) and mounts. The bundle keeps only what discovery
//! reads (name, image, state, log path, devices, log driver, the command's words), so
//! `check --root` on it finds the same workloads and no secret leaves the board.

use crate::parse::containerlog;

/// The sanitised copy of a container metadata file at `path`, or `None` when `path` is not
/// one (or does not parse: then the caller's text redaction applies).
pub fn sanitized(path: &str, bytes: &[u8]) -> Option<Vec<u8>> {
    let text = std::str::from_utf8(bytes).ok()?;
    let name = path.rsplit('/').next()?;
    let v = if name == "config.v2.json" {
        let m = containerlog::docker_config(text).ok()?;
        serde_json::json!({
            "Name": format!("/{}", m.name),
            "Config": {"Image": m.image},
            "State": {"Running": m.running},
            "LogPath": m.log_path,
        })
    } else if name == "hostconfig.json" {
        let h = containerlog::docker_hostconfig(text).ok()?;
        let devices: Vec<_> = h
            .devices
            .iter()
            .map(|d| serde_json::json!({"PathOnHost": d}))
            .collect();
        serde_json::json!({
            "Devices": devices,
            "LogConfig": {"Type": h.log_driver},
            "Privileged": h.privileged,
        })
    } else if name == "containers.json" && path.contains("overlay-containers") {
        let list = containerlog::podman_containers(text).ok()?;
        serde_json::Value::Array(
            list.into_iter()
                .map(|(id, m)| {
                    let meta = serde_json::json!({"image-name": m.image}).to_string();
                    serde_json::json!({"id": id, "names": [m.name], "metadata": meta})
                })
                .collect(),
        )
    } else if name == "config.json" && path.ends_with("/userdata/config.json") {
        let (m, args) = containerlog::oci_config(text).ok()?;
        let words: Vec<String> = args.split(' ').map(str::to_string).collect();
        serde_json::json!({
            "annotations": {"io.podman.annotations.name": m.name, "io.kubernetes.cri-o.ImageName": m.image},
            "process": {"args": crate::sys::redact::redact_argv(&words)},
        })
    } else {
        return None;
    };
    let mut out = v.to_string().into_bytes();
    out.push(b'\n');
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_what_discovery_reads_is_kept() {
        let cfg = br#"{"ID":"ab","Name":"/frigate","Config":{"Image":"ghcr.io/blakeblackshear/frigate:stable","Env":["FRIGATE_MQTT_PASSWORD=hunter2","PATH=/usr/bin"]},"State":{"Running":true},"LogPath":"/var/lib/docker/containers/ab/ab-json.log","Mounts":{"/config":{"Source":"/home/alice/frigate"}}}"#;
        let out = String::from_utf8(
            sanitized("/var/lib/docker/containers/ab/config.v2.json", cfg).unwrap(),
        )
        .unwrap();
        assert!(!out.contains("hunter2") && !out.contains("alice"), "{out}");
        let m = containerlog::docker_config(&out).unwrap();
        assert_eq!(
            (m.name.as_str(), m.image.as_str()),
            ("frigate", "ghcr.io/blakeblackshear/frigate:stable")
        );
        let host = br#"{"Binds":["/home/alice:/x"],"Devices":[{"PathOnHost":"/dev/hailo0","PathInContainer":"/dev/hailo0","CgroupPermissions":"rwm"}],"LogConfig":{"Type":"journald"}}"#;
        let out = String::from_utf8(
            sanitized("/var/lib/docker/containers/ab/hostconfig.json", host).unwrap(),
        )
        .unwrap();
        assert!(!out.contains("alice"), "{out}");
        assert_eq!(
            containerlog::docker_hostconfig(&out).unwrap().devices,
            ["/dev/hailo0"]
        );
        let oci = br#"{"annotations":{"io.podman.annotations.name":"rkllama"},"process":{"args":["rkllama","--token","s3cret"],"env":["API_KEY=s3cret"]}}"#;
        let out = String::from_utf8(
            sanitized(
                "/var/lib/containers/storage/overlay-containers/f/userdata/config.json",
                oci,
            )
            .unwrap(),
        )
        .unwrap();
        assert!(!out.contains("s3cret"), "{out}");
        assert!(sanitized("/etc/os-release", b"ID=debian\n").is_none());
        assert!(sanitized("/var/lib/docker/containers/ab/config.v2.json", b"not json").is_none());
    }
}
