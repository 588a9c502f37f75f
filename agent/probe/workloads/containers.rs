//! Containers: Docker (and Home Assistant OS's add-ons, which are Docker containers named
//! `addon_<repository>_<slug>`), podman and CRI (Kubernetes). A container is an NPU workload
//! when the catalog knows its name or image, an NPU device node is passed into it, a process in
//! it holds the NPU or maps its runtime, or the tail of its log shows the runtime's lines.

use super::processes::Proc;
use super::{
    add_log, add_match, app_of_container, is_npu_line, MAX_ENTRIES, NPU_LOG_BYTES, SCAN_LOG_BYTES,
};
use crate::model::workload::{Discovered, LogFormat, Place, Workload};
use crate::parse::containerlog::{self, ContainerMeta};
use crate::profile::apps::AppSpec;
use crate::root::SysRoot;

/// Where Docker keeps its containers: the default data root, and Home Assistant OS's.
const DOCKER_DIRS: [&str; 2] = ["/var/lib/docker/containers", "/mnt/data/docker/containers"];

/// Where podman keeps its containers: root's, and a rootless user's under each home.
const PODMAN_ROOT: &str = "/var/lib/containers/storage/overlay-containers";
/// A rootless podman store below a home directory.
const PODMAN_USER: &str = ".local/share/containers/storage/overlay-containers";

/// Where the kubelet writes container logs.
const CRI_PODS: &str = "/var/log/pods";

/// Device nodes whose passing into a container makes it an NPU workload.
fn is_npu_node(path: &str) -> bool {
    crate::probe::npu_users::is_npu_device(path) || path == "/dev/dri"
}

/// One container found on disk, before it is judged.
struct Found<'a> {
    engine: &'static str,
    id: String,
    meta: ContainerMeta,
    /// Its log file and layout.
    log: Option<(String, LogFormat)>,
    /// What marks it as an NPU workload so far.
    marks: Vec<String>,
    app: Option<&'a AppSpec>,
    journald: bool,
}

/// Judges a found container and, when it is an NPU workload, records it with its log.
fn record(root: &SysRoot, f: Found<'_>, procs: &[Proc], d: &mut Discovered) {
    let mut marks = f.marks;
    if let Some(p) = procs
        .iter()
        .find(|p| p.container_id.as_deref() == Some(f.id.as_str()) && p.npu.is_some())
    {
        marks.push(format!(
            "its process {} (pid {}) {}",
            p.comm,
            p.pid,
            p.npu.clone().unwrap_or_default()
        ));
    }
    let scanned = match (&f.log, f.app, marks.is_empty()) {
        (Some((path, format)), None, true) => scan_for_npu_lines(root, path, *format),
        _ => None,
    };
    if let Some(s) = scanned {
        marks.push(s);
    }
    if f.app.is_none() && marks.is_empty() {
        return;
    }
    let addon = f.meta.name.starts_with("addon_");
    let mut why = format!("{} container {}", f.engine, f.meta.name);
    if !f.meta.image.is_empty() {
        why.push_str(&format!(" (image {})", f.meta.image));
    }
    for m in &marks {
        why.push_str(&format!("; {m}"));
    }
    d.workloads.push(Workload {
        name: f.meta.name.clone(),
        app: f.app.map(|a| a.id.clone()),
        app_name: f.app.map(|a| a.name.clone()),
        place: Place::Container {
            engine: f.engine.to_string(),
            id: f.id.clone(),
            image: f.meta.image.clone(),
            addon,
        },
        why,
        // A container's runtime is the image's, whatever app it is.
        bundles_runtime: true,
        logs: Vec::new(),
        npu_context: f.app.map(|a| a.npu_context.clone()).unwrap_or_default(),
        models: Vec::new(),
    });
    let at = d.workloads.len() - 1;
    if let Some((path, format)) = &f.log {
        add_log(d, at, path, *format, NPU_LOG_BYTES);
    }
    if f.journald && !f.meta.name.is_empty() {
        let m = format!("CONTAINER_NAME={}", f.meta.name);
        add_match(d, m.clone());
        if let Some(w) = d.workloads.get_mut(at) {
            w.logs.push(format!("journal:{m}"));
        }
    }
}

/// Looks at the tail of an unmarked container's log for the NPU runtime's lines.
fn scan_for_npu_lines(root: &SysRoot, path: &str, format: LogFormat) -> Option<String> {
    let text = root.read_tail(path, SCAN_LOG_BYTES).ok()?;
    let lines = match format {
        LogFormat::DockerJson => containerlog::docker_json_log(&text).lines,
        LogFormat::Cri => containerlog::cri_log(&text).lines,
        LogFormat::Plain => text.lines().map(str::to_string).collect(),
    };
    lines.iter().find(|l| is_npu_line(l)).map(|l| {
        format!(
            "its log shows the NPU runtime ({:?})",
            crate::sys::redact::redact_text(&l.chars().take(80).collect::<String>())
        )
    })
}

/// Docker's containers (and Home Assistant add-ons).
pub fn docker(root: &SysRoot, apps: &[AppSpec], procs: &[Proc], d: &mut Discovered) {
    for base in DOCKER_DIRS {
        let Ok((ids, more)) = root.list_dir_max(base, MAX_ENTRIES) else {
            continue;
        };
        if more {
            d.notes.push(format!(
                "{base}: only {MAX_ENTRIES} containers were looked at"
            ));
        }
        for id in ids {
            let dir = format!("{base}/{id}");
            let Ok(text) = root.read_string(&format!("{dir}/config.v2.json")) else {
                continue;
            };
            let meta = match containerlog::docker_config(&text) {
                Ok(m) => m,
                Err(e) => {
                    d.notes.push(format!(
                        "{dir}/config.v2.json: not a container config ({e})"
                    ));
                    continue;
                }
            };
            let host = root
                .read_string(&format!("{dir}/hostconfig.json"))
                .ok()
                .and_then(|t| containerlog::docker_hostconfig(&t).ok())
                .unwrap_or_default();
            let json_log = format!("{dir}/{id}-json.log");
            let log = root
                .exists(&json_log)
                .then_some((json_log, LogFormat::DockerJson));
            let marks: Vec<String> = host
                .devices
                .iter()
                .filter(|p| is_npu_node(p))
                .map(|p| format!("{p} passed in"))
                .collect();
            let app = app_of_container(apps, &meta.name, &meta.image);
            let journald =
                host.log_driver.as_deref() == Some("journald") || base.starts_with("/mnt/data");
            record(
                root,
                Found {
                    engine: "docker",
                    id: id.to_ascii_lowercase(),
                    meta,
                    log,
                    marks,
                    app,
                    journald,
                },
                procs,
                d,
            );
        }
    }
}

/// podman's containers, root's and rootless users'.
pub fn podman(root: &SysRoot, apps: &[AppSpec], procs: &[Proc], d: &mut Discovered) {
    let mut bases = vec![PODMAN_ROOT.to_string(), format!("/root/{PODMAN_USER}")];
    if let Ok((homes, _)) = root.list_dir_max("/home", 64) {
        bases.extend(homes.iter().map(|h| format!("/home/{h}/{PODMAN_USER}")));
    }
    for base in bases {
        let Ok((ids, more)) = root.list_dir_max(&base, MAX_ENTRIES) else {
            continue;
        };
        if more {
            d.notes.push(format!(
                "{base}: only {MAX_ENTRIES} containers were looked at"
            ));
        }
        let listed: Vec<(String, ContainerMeta)> = root
            .read_string(&format!("{base}/containers.json"))
            .ok()
            .and_then(|t| containerlog::podman_containers(&t).ok())
            .unwrap_or_default();
        for id in ids
            .into_iter()
            .filter(|i| !i.ends_with(".json") && !i.ends_with(".lock"))
        {
            let user = format!("{base}/{id}/userdata");
            let from_oci = root
                .read_string(&format!("{user}/config.json"))
                .ok()
                .and_then(|t| containerlog::oci_config(&t).ok());
            let mut meta = listed
                .iter()
                .find(|(i, _)| *i == id)
                .map(|(_, m)| m.clone())
                .unwrap_or_default();
            let mut cmdline = String::new();
            if let Some((m, args)) = from_oci {
                if meta.name.is_empty() {
                    meta.name = m.name;
                }
                if meta.image.is_empty() {
                    meta.image = m.image;
                }
                cmdline = args;
            }
            if meta.name.is_empty() && !root.exists(&format!("{user}/ctr.log")) {
                continue;
            }
            let log = root
                .exists(&format!("{user}/ctr.log"))
                .then(|| (format!("{user}/ctr.log"), LogFormat::Cri));
            let app = app_of_container(apps, &meta.name, &meta.image)
                .or_else(|| apps.iter().find(|a| a.matches_process("", &cmdline)));
            record(
                root,
                Found {
                    engine: "podman",
                    id: id.to_ascii_lowercase(),
                    meta,
                    log,
                    marks: Vec::new(),
                    app,
                    journald: false,
                },
                procs,
                d,
            );
        }
    }
}

/// Kubernetes containers from their CRI logs: `/var/log/pods/<ns>_<pod>_<uid>/<container>/<n>.log`.
pub fn cri(root: &SysRoot, apps: &[AppSpec], d: &mut Discovered) {
    let Ok((pods, more)) = root.list_dir_max(CRI_PODS, MAX_ENTRIES) else {
        return;
    };
    if more {
        d.notes.push(format!(
            "{CRI_PODS}: only {MAX_ENTRIES} pods were looked at"
        ));
    }
    for pod in pods {
        let pod_dir = format!("{CRI_PODS}/{pod}");
        let Ok((containers, _)) = root.list_dir_max(&pod_dir, 64) else {
            continue;
        };
        let pod_name = pod.split('_').nth(1).unwrap_or(&pod).to_string();
        for c in containers {
            let dir = format!("{pod_dir}/{c}");
            // The newest log: the highest restart number.
            let Ok((files, _)) = root.list_dir_max(&dir, 64) else {
                continue;
            };
            let Some(newest) = files
                .iter()
                .filter(|f| f.ends_with(".log"))
                .max_by_key(|f| f.trim_end_matches(".log").parse::<u64>().unwrap_or(0))
            else {
                continue;
            };
            let meta = ContainerMeta {
                name: format!("{pod_name}/{c}"),
                ..ContainerMeta::default()
            };
            let app =
                app_of_container(apps, &c, "").or_else(|| app_of_container(apps, &pod_name, ""));
            record(
                root,
                Found {
                    engine: "cri",
                    id: pod.clone(),
                    meta,
                    log: Some((format!("{dir}/{newest}"), LogFormat::Cri)),
                    marks: Vec::new(),
                    app,
                    journald: false,
                },
                &[],
                d,
            );
        }
    }
}
