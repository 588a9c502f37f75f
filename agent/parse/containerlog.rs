//! Container log files and metadata, as text in and typed values out: Docker's json-file log
//! (`{"log":"...\n","stream":"stderr","time":"..."}` a line), the CRI / podman k8s-file log
//! (`<RFC 3339> <stream> <P|F> <text>`), Docker's `config.v2.json` and `hostconfig.json`, and
//! podman's `containers.json`.
//!
//! Bounded and total: a malformed line is counted, never fatal; a message is kept up to
//! [`MAX_MESSAGE_BYTES`]; partial entries (a runtime splits long lines) are joined up to the same
//! bound.

use serde::Deserialize;

/// Longest message kept from one log entry (longer ones are cut).
pub const MAX_MESSAGE_BYTES: usize = 16 * 1024;

/// Messages of a container log, and how many entries could not be read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogLines {
    /// One message per line, newline stripped.
    pub lines: Vec<String>,
    /// Entries that were not in the log's format.
    pub malformed: usize,
}

/// Appends `part` to `buf` up to [`MAX_MESSAGE_BYTES`], at a char boundary.
fn push_bounded(buf: &mut String, part: &str) {
    let room = MAX_MESSAGE_BYTES.saturating_sub(buf.len());
    if part.len() <= room {
        buf.push_str(part);
        return;
    }
    let mut end = room;
    while !part.is_char_boundary(end) {
        end -= 1;
    }
    buf.push_str(&part[..end]);
}

#[derive(Deserialize)]
struct JsonEntry {
    log: String,
}

/// Docker's json-file log. An entry whose `log` does not end in a newline is a partial line
/// (Docker splits lines over 16 KiB) and joins the next.
pub fn docker_json_log(text: &str) -> LogLines {
    let mut out = LogLines::default();
    let mut cur = String::new();
    for raw in text.lines() {
        let raw = raw.trim();
        if raw.is_empty() {
            continue;
        }
        let Ok(e) = serde_json::from_str::<JsonEntry>(raw) else {
            out.malformed += 1;
            continue;
        };
        let done = e.log.ends_with('\n');
        push_bounded(&mut cur, e.log.trim_end_matches(['\n', '\r']));
        if done {
            out.lines.push(std::mem::take(&mut cur));
        }
    }
    if !cur.is_empty() {
        out.lines.push(cur);
    }
    out
}

/// The CRI log format (Kubernetes `/var/log/pods`, podman's k8s-file driver):
/// `<time> <stdout|stderr> <P|F> <message>`; `P` is a partial line that joins the next.
pub fn cri_log(text: &str) -> LogLines {
    let mut out = LogLines::default();
    let mut cur = String::new();
    for raw in text.lines() {
        if raw.trim().is_empty() {
            continue;
        }
        let mut f = raw.splitn(4, ' ');
        let (Some(_time), Some(stream), Some(tag)) = (f.next(), f.next(), f.next()) else {
            out.malformed += 1;
            continue;
        };
        if !matches!(stream, "stdout" | "stderr") || !matches!(tag, "P" | "F") {
            out.malformed += 1;
            continue;
        }
        push_bounded(&mut cur, f.next().unwrap_or(""));
        if tag == "F" {
            out.lines.push(std::mem::take(&mut cur));
        }
    }
    if !cur.is_empty() {
        out.lines.push(cur);
    }
    out
}

/// A container as its engine describes it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ContainerMeta {
    /// Name without the leading `/` (`frigate`).
    pub name: String,
    /// Image reference (`ghcr.io/blakeblackshear/frigate:0.16.0-rk`).
    pub image: String,
    /// Running, when the metadata says.
    pub running: Option<bool>,
    /// The engine's log path, when given.
    pub log_path: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct DockerConfig {
    #[serde(default)]
    name: String,
    #[serde(default)]
    config: Option<DockerInner>,
    #[serde(default)]
    state: Option<DockerState>,
    #[serde(default)]
    log_path: Option<String>,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct DockerInner {
    #[serde(default)]
    image: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct DockerState {
    #[serde(default)]
    running: Option<bool>,
}

/// Docker's `config.v2.json`.
///
/// Errors: text that is not a JSON object of that shape.
pub fn docker_config(text: &str) -> Result<ContainerMeta, String> {
    let v: serde_json::Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
    if !v.is_object() {
        return Err("not a JSON object".into());
    }
    let c: DockerConfig = serde_json::from_value(v).map_err(|e| e.to_string())?;
    Ok(ContainerMeta {
        name: c.name.trim_start_matches('/').to_string(),
        image: c.config.map(|i| i.image).unwrap_or_default(),
        running: c.state.and_then(|s| s.running),
        log_path: c.log_path.filter(|p| !p.is_empty()),
    })
}

/// What `hostconfig.json` says about a Docker container's devices and log driver.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostConfig {
    /// Device nodes passed in (`PathOnHost`).
    pub devices: Vec<String>,
    /// `LogConfig.Type` (`json-file`, `journald`, `local`).
    pub log_driver: Option<String>,
    /// The container runs privileged (it sees every device).
    pub privileged: bool,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct RawHostConfig {
    #[serde(default)]
    devices: Option<Vec<RawDevice>>,
    #[serde(default)]
    log_config: Option<RawLogConfig>,
    #[serde(default)]
    privileged: bool,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct RawDevice {
    #[serde(default)]
    path_on_host: String,
}

#[derive(Deserialize)]
#[serde(rename_all = "PascalCase")]
struct RawLogConfig {
    #[serde(default, rename = "Type")]
    kind: String,
}

/// Docker's `hostconfig.json`.
///
/// Errors: text that is not a JSON object of that shape.
pub fn docker_hostconfig(text: &str) -> Result<HostConfig, String> {
    let h: RawHostConfig = serde_json::from_str(text).map_err(|e| e.to_string())?;
    Ok(HostConfig {
        devices: h
            .devices
            .unwrap_or_default()
            .into_iter()
            .map(|d| d.path_on_host)
            .filter(|p| !p.is_empty())
            .collect(),
        log_driver: h.log_config.map(|l| l.kind).filter(|k| !k.is_empty()),
        privileged: h.privileged,
    })
}

#[derive(Deserialize)]
struct PodmanEntry {
    id: String,
    #[serde(default)]
    names: Vec<String>,
    #[serde(default)]
    metadata: String,
}

#[derive(Deserialize)]
struct PodmanMetadata {
    #[serde(default, rename = "image-name")]
    image_name: String,
}

/// podman's `overlay-containers/containers.json`: (id, name, image) of each container.
///
/// Errors: text that is not a JSON array of that shape.
pub fn podman_containers(text: &str) -> Result<Vec<(String, ContainerMeta)>, String> {
    let list: Vec<PodmanEntry> = serde_json::from_str(text).map_err(|e| e.to_string())?;
    Ok(list
        .into_iter()
        .map(|e| {
            let image = serde_json::from_str::<PodmanMetadata>(&e.metadata)
                .map(|m| m.image_name)
                .unwrap_or_default();
            (
                e.id,
                ContainerMeta {
                    name: e.names.into_iter().next().unwrap_or_default(),
                    image,
                    running: None,
                    log_path: None,
                },
            )
        })
        .collect())
}

#[derive(Deserialize)]
struct OciConfig {
    #[serde(default)]
    annotations: std::collections::BTreeMap<String, String>,
    #[serde(default)]
    process: Option<OciProcess>,
}

#[derive(Deserialize)]
struct OciProcess {
    #[serde(default)]
    args: Vec<String>,
}

/// A podman container's OCI `userdata/config.json`: its name from the annotations podman and
/// CRI-O write, else its command's first word, and its command line.
///
/// Errors: text that is not a JSON object of that shape.
pub fn oci_config(text: &str) -> Result<(ContainerMeta, String), String> {
    let c: OciConfig = serde_json::from_str(text).map_err(|e| e.to_string())?;
    let args = c.process.map(|p| p.args).unwrap_or_default();
    let name = [
        "io.podman.annotations.name",
        "io.kubernetes.cri-o.ContainerName",
        "io.kubernetes.container.name",
    ]
    .iter()
    .find_map(|k| c.annotations.get(*k).cloned())
    .or_else(|| {
        args.first()
            .map(|a| a.rsplit('/').next().unwrap_or(a).to_string())
    })
    .unwrap_or_default();
    let image = c
        .annotations
        .get("io.kubernetes.cri-o.ImageName")
        .cloned()
        .unwrap_or_default();
    Ok((
        ContainerMeta {
            name,
            image,
            running: None,
            log_path: None,
        },
        args.join(" "),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn docker_lines_partials_and_junk() {
        let text = concat!(
            "{\"log\":\"first\\n\",\"stream\":\"stderr\",\"time\":\"2026-01-01T00:00:00Z\"}\n",
            "{\"log\":\"part one \",\"stream\":\"stderr\",\"time\":\"t\"}\n",
            "{\"log\":\"part two\\r\\n\",\"stream\":\"stderr\",\"time\":\"t\"}\n",
            "not json\n",
            "{\"stream\":\"stderr\"}\n",
            "{\"log\":\"no newline at the end\",\"stream\":\"stdout\",\"time\":\"t\"}\n",
        );
        let l = docker_json_log(text);
        assert_eq!(
            l.lines,
            ["first", "part one part two", "no newline at the end"]
        );
        assert_eq!(l.malformed, 2);
    }

    #[test]
    fn cri_lines_partials_and_junk() {
        let text = "2026-01-01T00:00:00.000000000+00:00 stderr F E RKNN: failed\n\
                    2026-01-01T00:00:01Z stdout P half \n\
                    2026-01-01T00:00:01Z stdout F and half\n\
                    garbage\n\
                    2026-01-01T00:00:02Z stdin F x\n";
        let l = cri_log(text);
        assert_eq!(l.lines, ["E RKNN: failed", "half and half"]);
        assert_eq!(l.malformed, 2);
    }

    #[test]
    fn messages_are_bounded() {
        let huge = format!(
            "{{\"log\":\"{}\\n\",\"stream\":\"stderr\",\"time\":\"t\"}}\n",
            "é".repeat(MAX_MESSAGE_BYTES)
        );
        let l = docker_json_log(&huge);
        assert_eq!(l.lines.len(), 1);
        assert!(l.lines[0].len() <= MAX_MESSAGE_BYTES);
        // Endless partials never grow one message past the bound.
        let parts = "2026-01-01T00:00:00Z stderr P xxxxxxxx\n".repeat(10_000);
        let l = cri_log(&parts);
        assert!(l.lines[0].len() <= MAX_MESSAGE_BYTES);
    }

    #[test]
    fn container_metadata() {
        let c = docker_config(r#"{"ID":"abc","Name":"/frigate","Config":{"Image":"ghcr.io/blakeblackshear/frigate:0.16.0-rk"},"State":{"Running":true},"LogPath":"/var/lib/docker/containers/abc/abc-json.log"}"#).unwrap();
        assert_eq!(c.name, "frigate");
        assert_eq!(c.image, "ghcr.io/blakeblackshear/frigate:0.16.0-rk");
        assert_eq!(c.running, Some(true));
        assert!(docker_config("[]").is_err());
        let h = docker_hostconfig(r#"{"Devices":[{"PathOnHost":"/dev/hailo0","PathInContainer":"/dev/hailo0"}],"LogConfig":{"Type":"journald","Config":{}},"Privileged":false}"#).unwrap();
        assert_eq!(h.devices, ["/dev/hailo0"]);
        assert_eq!(h.log_driver.as_deref(), Some("journald"));
        let p = podman_containers(r#"[{"id":"f00","names":["rkllama"],"image":"sha","metadata":"{\"image-name\":\"docker.io/x/rkllama:latest\",\"name\":\"rkllama\"}"}]"#).unwrap();
        assert_eq!(p[0].0, "f00");
        assert_eq!(p[0].1.name, "rkllama");
        assert_eq!(p[0].1.image, "docker.io/x/rkllama:latest");
        let (m, args) = oci_config(r#"{"ociVersion":"1.0.2","annotations":{"io.podman.annotations.name":"frigate"},"process":{"args":["/init","frigate"]}}"#).unwrap();
        assert_eq!(
            (m.name.as_str(), args.as_str()),
            ("frigate", "/init frigate")
        );
    }
}
