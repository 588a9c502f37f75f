//! Finds the NPU workloads where they run (DESIGN 4.1): containers (Docker's json-file logs with
//! the name and image of `config.v2.json`, podman's k8s-file logs, CRI logs under
//! `/var/log/pods`, the journald log driver, Home Assistant add-ons), processes (a catalog app's
//! name or command line, a mapped `libhailort`/`librknnrt`/`librkllmrt`, an open NPU device
//! node), systemd units, and the catalog apps' own log files.
//!
//! Everything is bounded: at most [`MAX_ENTRIES`] containers or processes per directory, the
//! tail of each log ([`NPU_LOG_BYTES`] for a workload, [`SCAN_LOG_BYTES`] to look at a container
//! nothing else marks), so a board with a thousand containers and gigabytes of logs costs
//! milliseconds to seconds, not minutes.

mod containers;
mod processes;

use crate::model::stack::NpuUser;
use crate::model::workload::{Discovered, LogFormat, Place, Workload, WorkloadLog};
use crate::profile::apps::AppSpec;
use crate::root::SysRoot;

/// Most entries read of one directory (containers, pods, processes).
pub const MAX_ENTRIES: usize = 1024;
/// Bytes of a workload's log tail read.
pub const NPU_LOG_BYTES: u64 = 1024 * 1024;
/// Bytes of a container's log tail looked at when nothing else marks it as an NPU workload.
pub const SCAN_LOG_BYTES: u64 = 64 * 1024;

/// True when a log line is the NPU runtime's or names an NPU failure: what makes an unmarked
/// container an NPU workload.
pub fn is_npu_line(line: &str) -> bool {
    let lower = line.to_ascii_lowercase();
    ["hailo", "rknn", "rkllm", "rknpu"]
        .iter()
        .any(|w| lower.contains(w))
        || crate::parse::workload::is_failure(line)
        || crate::profile::signature::catalog().is_failure(line)
}

/// The catalog app a container (name, image) is.
fn app_of_container<'a>(apps: &'a [AppSpec], name: &str, image: &str) -> Option<&'a AppSpec> {
    apps.iter().find(|a| a.matches_container(name, image))
}

/// Finds the workloads under `root` with the `apps` catalog; `npu_users` are the processes that
/// hold an NPU device node open (`crate::probe::npu_users`).
pub fn discover(root: &SysRoot, apps: &[AppSpec], npu_users: &[NpuUser]) -> Discovered {
    let mut d = Discovered::default();
    let procs = processes::scan(root, apps, npu_users, &mut d.notes);
    containers::docker(root, apps, &procs, &mut d);
    containers::podman(root, apps, &procs, &mut d);
    containers::cri(root, apps, &mut d);
    processes::add_host_processes(apps, &procs, &mut d);
    units(root, apps, &procs, &mut d);
    app_logs(root, apps, &mut d);
    d.models = models(root, &d.workloads);
    d
}

/// Most model files whose headers are read.
const MAX_MODELS: usize = 16;
/// Bytes of a model file read for its header.
const MODEL_HEAD_BYTES: u64 = 64 * 1024;

/// The HEF headers of the models the host's workloads name.
fn models(root: &SysRoot, workloads: &[Workload]) -> Vec<crate::model::workload::ModelFile> {
    let mut out: Vec<crate::model::workload::ModelFile> = Vec::new();
    for w in workloads.iter().filter(|w| !w.in_container()) {
        for path in &w.models {
            if out.len() >= MAX_MODELS || out.iter().any(|m| &m.path == path) {
                continue;
            }
            let hef = root
                .read_head(path, MODEL_HEAD_BYTES)
                .map_err(|e| e.to_string())
                .and_then(|(b, _)| crate::parse::hef::parse_header(&b));
            out.push(crate::model::workload::ModelFile {
                path: path.clone(),
                workload: w.label(),
                hef,
            });
        }
    }
    out
}

/// Adds a journal match once.
fn add_match(d: &mut Discovered, m: String) {
    if !d.journal_matches.contains(&m) {
        d.journal_matches.push(m);
    }
}

/// Adds a log to read once, and names it on its workload.
fn add_log(d: &mut Discovered, workload: usize, path: &str, format: LogFormat, max_bytes: u64) {
    if !d.logs.iter().any(|l| l.path == path) {
        d.logs.push(WorkloadLog {
            path: path.to_string(),
            format,
            max_bytes,
        });
    }
    if let Some(w) = d.workloads.get_mut(workload) {
        if !w.logs.iter().any(|l| l == path) {
            w.logs.push(path.to_string());
        }
    }
}

/// The catalog apps' systemd units that exist (with those of the workload processes), read from
/// the journal by unit.
fn units(root: &SysRoot, apps: &[AppSpec], procs: &[processes::Proc], d: &mut Discovered) {
    const DIRS: [&str; 3] = [
        "/etc/systemd/system",
        "/lib/systemd/system",
        "/usr/lib/systemd/system",
    ];
    for app in apps {
        for unit in &app.units {
            let on_disk = DIRS.iter().any(|dir| root.exists(&format!("{dir}/{unit}")));
            let running = procs
                .iter()
                .any(|p| p.unit.as_deref() == Some(unit.as_str()));
            if !on_disk && !running {
                continue;
            }
            add_match(d, format!("_SYSTEMD_UNIT={unit}"));
            if d.workloads.iter().any(|w| {
                matches!(&w.place, Place::Unit { unit: u } if u == unit)
                    || w.app.as_deref() == Some(app.id.as_str()) && !w.in_container()
            }) {
                continue;
            }
            d.workloads.push(Workload {
                name: unit.clone(),
                app: Some(app.id.clone()),
                app_name: Some(app.name.clone()),
                place: Place::Unit { unit: unit.clone() },
                why: format!(
                    "systemd unit {unit} {}",
                    if running { "runs" } else { "is installed" }
                ),
                bundles_runtime: app.bundles_runtime,
                logs: vec![format!("journal:_SYSTEMD_UNIT={unit}")],
                npu_context: app.npu_context.clone(),
                models: Vec::new(),
            });
        }
    }
}

/// The catalog apps' log files that exist on the host; a file of an app found elsewhere joins
/// that workload, else it stands for the app.
fn app_logs(root: &SysRoot, apps: &[AppSpec], d: &mut Discovered) {
    for app in apps {
        for pat in &app.logs {
            for path in super::files::expand(root, pat) {
                if !root.exists(&path) || root.is_dir(&path) {
                    continue;
                }
                let at = match d
                    .workloads
                    .iter()
                    .position(|w| w.app.as_deref() == Some(app.id.as_str()))
                {
                    Some(i) => i,
                    None => {
                        d.workloads.push(Workload {
                            name: app.id.clone(),
                            app: Some(app.id.clone()),
                            app_name: Some(app.name.clone()),
                            place: Place::LogFile,
                            why: format!("its log {path}"),
                            bundles_runtime: app.bundles_runtime,
                            logs: Vec::new(),
                            npu_context: app.npu_context.clone(),
                            models: Vec::new(),
                        });
                        d.workloads.len() - 1
                    }
                };
                add_log(d, at, &path, LogFormat::Plain, NPU_LOG_BYTES);
            }
        }
    }
}
