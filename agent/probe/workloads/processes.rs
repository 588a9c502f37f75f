//! Workload processes: a catalog app's name or command line, a mapped NPU runtime library, an
//! open NPU device node; with the container or unit each runs in (from its cgroup).

use super::MAX_ENTRIES;
use crate::model::stack::NpuUser;
use crate::model::workload::{Discovered, Place, Workload};
use crate::profile::apps::AppSpec;
use crate::root::SysRoot;

/// The NPU runtime libraries whose mapping makes a process a workload.
const RUNTIME_LIBS: [&str; 3] = ["libhailort", "librknnrt", "librkllmrt"];

/// Most bytes of `/proc/<pid>/maps` read.
const MAX_MAPS_BYTES: u64 = 512 * 1024;

/// One process as discovery sees it.
#[derive(Debug, Clone, Default)]
pub struct Proc {
    /// Process id.
    pub pid: u32,
    /// `comm`.
    pub comm: String,
    /// The container id its cgroup names (Docker, podman, containerd), if any.
    pub container_id: Option<String>,
    /// The systemd service it runs in, if any.
    pub unit: Option<String>,
    /// The catalog app it is, by index.
    pub app: Option<usize>,
    /// Why it is an NPU workload (`maps librknnrt.so`, `holds /dev/hailo0 open`), if it is one.
    pub npu: Option<String>,
    /// Model files (`*.hef`) its command line names by absolute path.
    pub models: Vec<String>,
}

/// The container id in a `/proc/<pid>/cgroup` text: the 64-hex-digit id after `docker-`,
/// `libpod-`, `cri-containerd-`, `crio-` or a `/docker/` segment.
pub fn container_id_of_cgroup(text: &str) -> Option<String> {
    for line in text.lines() {
        let path = line.splitn(3, ':').nth(2).unwrap_or("");
        for seg in path.split('/') {
            let id = seg
                .trim_end_matches(".scope")
                .rsplit(['-', '/'])
                .next()
                .unwrap_or("");
            if id.len() == 64 && id.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Some(id.to_ascii_lowercase());
            }
        }
    }
    None
}

/// True when a process is worth reading `/proc/<pid>/maps` for: an interpreter or a command
/// line that names an NPU word (the maps of every process would cost megabytes per cycle).
fn maps_worth_reading(comm: &str, cmdline: &str) -> bool {
    let lower = cmdline.to_ascii_lowercase();
    ["python", "node", "java", "dotnet"]
        .iter()
        .any(|i| comm.starts_with(i))
        || ["hailo", "rknn", "rkllm", "npu", "detect", "infer", "llm"]
            .iter()
            .any(|w| lower.contains(w))
}

/// The NPU runtime library a process maps, if any.
fn mapped_runtime(root: &SysRoot, pid: u32) -> Option<String> {
    let text = root
        .read_head(&format!("/proc/{pid}/maps"), MAX_MAPS_BYTES)
        .ok()?
        .0;
    let text = String::from_utf8_lossy(&text);
    text.lines().find_map(|l| {
        let path = l.split_whitespace().nth(5)?;
        let base = path.rsplit('/').next()?;
        RUNTIME_LIBS
            .iter()
            .any(|r| base.starts_with(r))
            .then(|| base.to_string())
    })
}

/// Reads every process (at most [`MAX_ENTRIES`]) and marks the NPU workloads among them.
pub fn scan(
    root: &SysRoot,
    apps: &[AppSpec],
    npu_users: &[NpuUser],
    notes: &mut Vec<String>,
) -> Vec<Proc> {
    let Ok((entries, more)) = root.list_dir_max("/proc", MAX_ENTRIES * 4) else {
        return Vec::new();
    };
    if more {
        notes.push(format!(
            "/proc: only the first {} entries were read",
            MAX_ENTRIES * 4
        ));
    }
    let mut out = Vec::new();
    for pid in entries.iter().filter_map(|e| e.parse::<u32>().ok()) {
        let Ok(comm) = root.read_string(&format!("/proc/{pid}/comm")) else {
            continue;
        };
        let argv = root
            .read(&format!("/proc/{pid}/cmdline"))
            .map(|b| crate::parse::devicetree::string_list(&b))
            .unwrap_or_default();
        let cmdline = crate::sys::redact::redact_argv(&argv).join(" ");
        let comm = comm.trim().to_string();
        let app = apps.iter().position(|a| a.matches_process(&comm, &cmdline));
        let held = npu_users.iter().find(|u| u.pid == pid);
        let npu = match held {
            Some(u) => Some(format!("holds {} open", u.device)),
            None if maps_worth_reading(&comm, &cmdline) => {
                mapped_runtime(root, pid).map(|l| format!("maps {l}"))
            }
            None => None,
        };
        if app.is_none() && npu.is_none() {
            continue;
        }
        let cgroup = root.read_string(&format!("/proc/{pid}/cgroup")).ok();
        out.push(Proc {
            pid,
            container_id: cgroup.as_deref().and_then(container_id_of_cgroup),
            unit: cgroup.as_deref().and_then(crate::probe::unit_of_cgroup),
            models: argv
                .iter()
                .filter(|a| a.starts_with('/') && a.ends_with(".hef"))
                .take(8)
                .cloned()
                .collect(),
            comm,
            app,
            npu,
        });
    }
    out
}

/// The workload processes that run on the host itself (not in a container found on disk).
pub fn add_host_processes(apps: &[AppSpec], procs: &[Proc], d: &mut Discovered) {
    for p in procs {
        let in_known_container = p.container_id.as_ref().is_some_and(|id| {
            d.workloads
                .iter()
                .any(|w| matches!(&w.place, Place::Container { id: c, .. } if c == id))
        });
        if in_known_container {
            continue;
        }
        let app = p.app.and_then(|i| apps.get(i));
        let mut why = format!("process {} (pid {})", p.comm, p.pid);
        if let Some(n) = &p.npu {
            why.push_str(&format!(" {n}"));
        }
        if let Some(u) = &p.unit {
            why.push_str(&format!(", in unit {u}"));
            super::add_match(d, format!("_SYSTEMD_UNIT={u}"));
        }
        d.workloads.push(Workload {
            name: p.comm.clone(),
            app: app.map(|a| a.id.clone()),
            app_name: app.map(|a| a.name.clone()),
            place: match &p.unit {
                Some(u) => Place::Unit { unit: u.clone() },
                None => Place::Process { pid: p.pid },
            },
            why,
            bundles_runtime: app.is_some_and(|a| a.bundles_runtime),
            logs: Vec::new(),
            npu_context: app.map(|a| a.npu_context.clone()).unwrap_or_default(),
            models: p.models.clone(),
        });
    }
}
