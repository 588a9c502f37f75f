//! Server-profile probes (`x86-hybrid-moe`): NUMA nodes and `kernel.numa_balancing`, the
//! sysctl files that set it, the LLM server processes (argv, `numa_maps`, the log their output
//! goes to), the GGUF headers of their models (every shard of a split model), and GPU memory from
//! `nvidia-smi`. The servers are llama.cpp-style ones and the Python servers that place weights
//! themselves (KTransformers, SGLang, vLLM, with or without DeepEP).
//!
//! Like every probe these only read: under a captured tree `nvidia-smi` output comes from
//! [`NVIDIA_SMI_CSV`] (and, optionally, [`NVIDIA_SMI_APPS_CSV`]); on the live system `nvidia-smi`
//! is run, when it is installed, with a 5 s timeout. NVML is not used: the agent is a static musl
//! binary and cannot `dlopen` `libnvidia-ml.so`.

use super::Probed;
pub use crate::model::llm::*;
use crate::model::logs::{LogClass, LogFile, LOG_TAIL_BYTES};
use crate::parse::llmargs::{Engine, LlmArgs};
use crate::parse::{devicetree, gguf, llmargs, numa, nvsmi};
use crate::profile::Profile;
use crate::root::{ReadError, ReadErrorKind, SysRoot};
use crate::sys::process::run_capture;
use std::time::Duration;

/// Captured `nvidia-smi --query-compute-apps=pid,used_memory --format=csv` output (optional).
pub const NVIDIA_SMI_APPS_CSV: &str = "/run/npu-agent/nvidia-smi-apps.csv";
/// First read of a model header; most fit (a 671B model's header with its tokenizer is ~6 MB).
const HEAD_FIRST: u64 = 8 << 20;
/// Largest header read.
const HEAD_MAX: u64 = 64 << 20;
/// Most LLM processes examined.
const MAX_SOURCES: usize = 16;

fn basename(s: &str) -> &str {
    s.rsplit('/').next().unwrap_or(s)
}

/// The server name a Python process (or a worker that renamed itself) runs, from its argv:
/// `ktransformers`, `sglang`, `vllm`.
fn python_server(argv: &[String]) -> Option<&'static str> {
    let first = argv.first().map(String::as_str).unwrap_or("");
    if llmargs::is_ktransformers(argv) {
        Some("ktransformers")
    } else if llmargs::is_sglang(argv) || first.starts_with("sglang::") {
        Some("sglang")
    } else if llmargs::is_vllm(argv) || first.starts_with("VLLM::") {
        Some("vllm")
    } else {
        None
    }
}

/// True for a `comm` whose argv is worth reading to find a Python server: Python itself, or the
/// process titles SGLang and vLLM workers set (`sglang::schedul`, `VLLM::EngineCor`).
fn maybe_python_server(comm: &str) -> bool {
    comm.starts_with("python")
        || comm.starts_with("sglang")
        || comm.starts_with("VLLM::")
        || comm == "vllm"
}

/// True when a process is an LLM server the profile names: `comm` (15 characters at most, so a
/// longer name matches by prefix), argv[0]'s basename, or the server a Python process runs
/// (`ktransformers`, `sglang`, `vllm`).
pub fn is_llm_process(comm: &str, argv: &[String], names: &[String]) -> bool {
    let hit = |s: &str| names.iter().any(|n| n == s);
    if hit(comm)
        || names
            .iter()
            .any(|n| n.len() > 15 && comm.len() == 15 && n.starts_with(comm))
    {
        return true;
    }
    if argv.first().is_some_and(|a| hit(basename(a))) {
        return true;
    }
    python_server(argv).is_some_and(hit)
}

/// Names of running processes for profile detection: `comm`, and the server a Python process
/// runs (`ktransformers`, `sglang`, `vllm`).
pub fn detect_process_names(root: &SysRoot) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for entry in root.list_dir("/proc").unwrap_or_default() {
        let Ok(pid) = entry.parse::<u32>() else {
            continue;
        };
        let Ok(comm) = root.read_string(&format!("/proc/{pid}/comm")) else {
            continue;
        };
        let comm = comm.trim().to_string();
        if maybe_python_server(&comm) {
            let argv = root
                .read(&format!("/proc/{pid}/cmdline"))
                .map(|b| devicetree::string_list(&b))
                .unwrap_or_default();
            if let Some(name) = python_server(&argv) {
                if !out.iter().any(|n| n == name) {
                    out.push(name.into());
                }
            }
        }
        if !out.contains(&comm) {
            out.push(comm);
        }
    }
    out
}

/// Reads what the server checks need; [`LlmProbe::disabled`] for other profiles.
pub fn probe_llm(root: &SysRoot, profile: &Profile) -> LlmProbe {
    if !profile.llm.enabled() {
        return LlmProbe::disabled();
    }
    let numa_nodes = root.list_dir("/sys/devices/system/node").map(|names| {
        let mut ids: Vec<u32> = names
            .iter()
            .filter_map(|n| n.strip_prefix("node").and_then(|d| d.parse().ok()))
            .collect();
        ids.sort();
        ids
    });
    let nodes_with_memory = root
        .read_string("/sys/devices/system/node/has_memory")
        .ok()
        .and_then(|t| numa::parse_node_list(&t));
    let numa_balancing = root
        .read_string("/proc/sys/kernel/numa_balancing")
        .map(|s| s.trim().to_string());
    let (gpus, gpu_source, gpu_apps) = probe_gpus(root);
    let mut p = LlmProbe {
        enabled: true,
        numa_nodes,
        nodes_with_memory,
        numa_balancing,
        sysctl_settings: probe_sysctl(root),
        processes_error: None,
        sources: Vec::new(),
        gpus,
        gpu_source,
        gpu_apps,
    };
    match root.list_dir("/proc") {
        Err(e) => p.processes_error = Some(e),
        Ok(entries) => {
            for entry in entries {
                let Ok(pid) = entry.parse::<u32>() else {
                    continue;
                };
                let Ok(comm) = root.read_string(&format!("/proc/{pid}/comm")) else {
                    continue;
                };
                let comm = comm.trim().to_string();
                let cheap = profile.llm.servers.iter().any(|n| {
                    *n == comm || (n.len() > 15 && comm.len() == 15 && n.starts_with(&comm))
                });
                if !cheap && !maybe_python_server(&comm) {
                    continue;
                }
                let argv = root
                    .read(&format!("/proc/{pid}/cmdline"))
                    .map(|b| devicetree::string_list(&b))
                    .unwrap_or_default();
                if argv.is_empty() || !is_llm_process(&comm, &argv, &profile.llm.servers) {
                    continue;
                }
                let mut args = llmargs::parse_llm_args(&argv);
                if let Some(own) = python_worker(&argv, &mut args) {
                    // A worker of a server already listed (same argv, or a renamed worker).
                    if let Some(main) = p.sources.iter_mut().find(|s| same_server(s, &argv, own)) {
                        main.workers.push(pid);
                        continue;
                    }
                }
                if p.sources.len() >= MAX_SOURCES {
                    break;
                }
                if args.engine.is_some_and(|e| e.places_by_own_config()) && !args.deepep {
                    args.deepep = maps_deepep(root, pid);
                }
                p.sources.push(process_source(root, pid, comm, args));
            }
        }
    }
    p
}

/// For a Python server's process: its engine, with `args` completed for a renamed worker (whose
/// argv is its process title).
fn python_worker(argv: &[String], args: &mut LlmArgs) -> Option<Engine> {
    let first = argv.first().map(String::as_str).unwrap_or("");
    if args.engine.is_none_or(|e| e == Engine::LlamaCpp) {
        if first.starts_with("sglang::") {
            args.engine = Some(Engine::SGLang);
        } else if first.starts_with("VLLM::") {
            args.engine = Some(Engine::Vllm);
        }
    }
    args.engine.filter(|e| e.places_by_own_config())
}

/// True when `s` is the same Python server as a process with `argv` running `engine`.
fn same_server(s: &LlmSource, argv: &[String], engine: Engine) -> bool {
    let Ok(a) = &s.args else { return false };
    if a.engine != Some(engine) {
        return false;
    }
    let renamed = argv
        .first()
        .is_some_and(|x| x.starts_with("sglang::") || x.starts_with("VLLM::"));
    renamed || a.argv == crate::sys::redact::redact_argv(argv)
}

/// True when the process has DeepEP's extension mapped (`deep_ep` in `/proc/<pid>/maps`).
fn maps_deepep(root: &SysRoot, pid: u32) -> bool {
    root.read_head(&format!("/proc/{pid}/maps"), 8 << 20)
        .map(|(b, _)| memchr::memmem::find(&b, b"deep_ep").is_some())
        .unwrap_or(false)
}

/// One server process: its model, NUMA placement and log.
fn process_source(root: &SysRoot, pid: u32, comm: String, args: LlmArgs) -> LlmSource {
    let cwd = std::fs::read_link(root.join(&format!("/proc/{pid}/cwd")).unwrap_or_default())
        .ok()
        .map(|t| t.to_string_lossy().into_owned())
        .filter(|t| t.starts_with('/'));
    let model = args
        .model
        .as_ref()
        .map(|m| probe_model(root, m, cwd.as_deref()));
    let model_paths: Vec<String> = model
        .iter()
        .flat_map(|m| m.shards.iter().map(|s| s.path.clone()))
        .collect();
    let numa_maps = Some(
        root.read_string(&format!("/proc/{pid}/numa_maps"))
            .map(|t| numa::parse_numa_maps(&t, &model_paths)),
    );
    let log = server_log(root, pid, args.log_file.as_deref(), cwd.as_deref());
    LlmSource {
        pid: Some(pid),
        comm,
        args: Ok(args),
        numa_maps,
        model,
        log,
        workers: Vec::new(),
    }
}

/// The file a server logs to: its `--log-file`, else the regular file its standard error or
/// output goes to (`/proc/<pid>/fd/2`, `fd/1`); its last [`LOG_TAIL_BYTES`].
fn server_log(
    root: &SysRoot,
    pid: u32,
    log_file: Option<&str>,
    cwd: Option<&str>,
) -> Option<LogFile> {
    let mut candidates: Vec<String> = Vec::new();
    if let Some(f) = log_file {
        if f.starts_with('/') || cwd.is_some() {
            candidates.push(normalize(cwd.unwrap_or("/"), f));
        }
    }
    for fd in [2, 1] {
        let Ok(link) = root.join(&format!("/proc/{pid}/fd/{fd}")) else {
            continue;
        };
        if let Ok(t) = std::fs::read_link(link) {
            let t = t.to_string_lossy().into_owned();
            let file_like =
                t.starts_with('/') && !t.starts_with("/dev/") && !t.ends_with(" (deleted)");
            if file_like && !candidates.contains(&t) {
                candidates.push(t);
            }
        }
    }
    for path in candidates {
        let Ok((_, len)) = root.inode_len(&path) else {
            continue;
        };
        let Ok(text) = root.read_tail(&path, LOG_TAIL_BYTES) else {
            continue;
        };
        return Some(LogFile {
            path,
            class: LogClass::Workload,
            lines: text.lines().map(str::to_string).collect(),
            cut: len > LOG_TAIL_BYTES,
        });
    }
    None
}

/// Adds the command line given with `check --llm-cmdline` (relative `-m` paths resolve against
/// the current directory on the live system, against `/` under a captured tree).
pub fn add_cmdline(root: &SysRoot, probe: &mut LlmProbe, line: &str) {
    let args = llmargs::shell_words(line).map(|w| llmargs::parse_llm_args(&w));
    let cwd = if root.is_live() {
        std::env::current_dir()
            .ok()
            .map(|d| d.to_string_lossy().into_owned())
    } else {
        Some("/".to_string())
    };
    let model = args
        .as_ref()
        .ok()
        .and_then(|a| a.model.as_ref())
        .map(|m| probe_model(root, m, cwd.as_deref()));
    probe.sources.push(LlmSource {
        pid: None,
        comm: "--llm-cmdline".into(),
        args,
        numa_maps: None,
        model,
        log: None,
        workers: Vec::new(),
    });
}

/// Joins `rel` to `base` and removes `.` and `..` (never above `/`).
fn normalize(base: &str, rel: &str) -> String {
    let joined = if rel.starts_with('/') {
        rel.to_string()
    } else {
        format!("{base}/{rel}")
    };
    let mut parts: Vec<&str> = Vec::new();
    for c in joined.split('/') {
        match c {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            c => parts.push(c),
        }
    }
    format!("/{}", parts.join("/"))
}

fn probe_model(root: &SysRoot, arg: &str, cwd: Option<&str>) -> ModelFiles {
    if !arg.starts_with('/') && cwd.is_none() {
        let header = Err(ReadError { path: arg.to_string(), kind: ReadErrorKind::NotFound, detail: "a relative path, and the process's working directory (/proc/<pid>/cwd) is unreadable".into() });
        return ModelFiles {
            arg: arg.to_string(),
            path: arg.to_string(),
            shards: vec![ModelShard {
                path: arg.to_string(),
                header,
                file_len: None,
            }],
        };
    }
    let path = normalize(cwd.unwrap_or("/"), arg);
    let first = read_shard(root, &path);
    let mut shards = vec![];
    let count = first
        .header
        .as_ref()
        .ok()
        .and_then(|h| h.get("split.count"))
        .and_then(gguf::MetaValue::as_u64)
        .unwrap_or(1);
    let others: Vec<String> = if count > 1 {
        gguf::split_paths(&path, count.min(512))
            .into_iter()
            .filter(|p| *p != path)
            .collect()
    } else {
        Vec::new()
    };
    shards.push(first);
    for p in others {
        shards.push(read_shard(root, &p));
    }
    ModelFiles {
        arg: arg.to_string(),
        path,
        shards,
    }
}

fn read_shard(root: &SysRoot, path: &str) -> ModelShard {
    let mut cap = HEAD_FIRST;
    loop {
        let (buf, len) = match root.read_head(path, cap) {
            Ok(x) => x,
            Err(e) => {
                return ModelShard {
                    path: path.to_string(),
                    header: Err(e),
                    file_len: None,
                }
            }
        };
        let header = match gguf::parse_header(&buf) {
            Ok(h) => Ok(h),
            Err(gguf::GgufError::Truncated { needed }) if (buf.len() as u64) < len && cap < HEAD_MAX => {
                cap = needed.max(cap.saturating_mul(4)).min(HEAD_MAX);
                continue;
            }
            Err(gguf::GgufError::Truncated { needed }) if (buf.len() as u64) >= len => Err(ReadError::malformed(
                path,
                format!("the file ends inside its GGUF header (needs offset {needed}, the file has {len} bytes)"),
            )),
            Err(gguf::GgufError::Truncated { .. }) => Err(ReadError::malformed(path, format!("GGUF header larger than {} MiB", HEAD_MAX >> 20))),
            Err(e) => Err(ReadError::malformed(path, e.to_string())),
        };
        return ModelShard {
            path: path.to_string(),
            header,
            file_len: Some(len),
        };
    }
}

/// `kernel.numa_balancing` in sysctl files, in systemd-sysctl's order: files from
/// `/etc/sysctl.d`, `/run/sysctl.d`, `/usr/local/lib/sysctl.d`, `/usr/lib/sysctl.d`, `/lib/sysctl.d`
/// (a name in an earlier directory hides the same name in later ones) sorted by name, then
/// `/etc/sysctl.conf`; the last setting wins at boot.
pub fn probe_sysctl(root: &SysRoot) -> Vec<SysctlSetting> {
    let dirs = [
        "/etc/sysctl.d",
        "/run/sysctl.d",
        "/usr/local/lib/sysctl.d",
        "/usr/lib/sysctl.d",
        "/lib/sysctl.d",
    ];
    let mut files: Vec<(String, String)> = Vec::new();
    for d in dirs {
        for name in root.list_dir(d).unwrap_or_default() {
            if name.ends_with(".conf") && !files.iter().any(|(n, _)| *n == name) {
                files.push((name.clone(), format!("{d}/{name}")));
            }
        }
    }
    files.sort();
    let mut paths: Vec<String> = files.into_iter().map(|(_, p)| p).collect();
    paths.push("/etc/sysctl.conf".into());
    let mut out = Vec::new();
    for path in paths {
        let Ok(text) = root.read_string(&path) else {
            continue;
        };
        for (i, line) in text.lines().enumerate() {
            let t = line.trim();
            if t.starts_with('#') || t.starts_with(';') {
                continue;
            }
            let Some((k, v)) = t.split_once('=') else {
                continue;
            };
            let k = k.trim().trim_start_matches('-').replace('/', ".");
            if k == "kernel.numa_balancing" {
                out.push(SysctlSetting {
                    file: path.clone(),
                    line: i + 1,
                    value: v.trim().to_string(),
                    text: t.to_string(),
                });
            }
        }
    }
    out
}

fn find_in_path(name: &str) -> Option<std::path::PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_else(|| "/usr/local/bin:/usr/bin:/bin".into());
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// Runs `bin args` for at most `timeout`; its standard output (at most 1 MiB), or why not.
fn run_tool(bin: &std::path::Path, args: &[&str], timeout: Duration) -> Result<String, String> {
    let mut cmd = std::process::Command::new(bin);
    cmd.args(args);
    let (done, out) = run_capture(&mut cmd, timeout, 1 << 20).map_err(|e| e.to_string())?;
    if done.status.success() {
        Ok(out)
    } else {
        Err(format!("{} exited with {}", bin.display(), done.status))
    }
}

const QUERY_GPU: &str = "--query-gpu=index,name,memory.total,memory.used,memory.free";

/// GPU memory, where it came from, and per-process use.
type GpuProbe = (
    Probed<Vec<nvsmi::GpuMemory>>,
    String,
    Option<Vec<(u32, u64)>>,
);

fn probe_gpus(root: &SysRoot) -> GpuProbe {
    if root.is_live() {
        if let Some(bin) = find_in_path("nvidia-smi") {
            let source = format!("nvidia-smi {QUERY_GPU} --format=csv");
            let gpus = run_tool(&bin, &[QUERY_GPU, "--format=csv"], Duration::from_secs(5))
                .map_err(|e| ReadError {
                    path: "nvidia-smi".into(),
                    kind: ReadErrorKind::Io,
                    detail: e,
                })
                .and_then(|t| {
                    nvsmi::parse_query_gpu(&t).map_err(|e| ReadError::malformed("nvidia-smi", e))
                });
            let apps = run_tool(
                &bin,
                &["--query-compute-apps=pid,used_memory", "--format=csv"],
                Duration::from_secs(5),
            )
            .ok()
            .map(|t| nvsmi::parse_compute_apps(&t));
            return (gpus, source, apps);
        }
    }
    let gpus = root.read_string(NVIDIA_SMI_CSV).and_then(|t| {
        nvsmi::parse_query_gpu(&t).map_err(|e| ReadError::malformed(NVIDIA_SMI_CSV, e))
    });
    let apps = root
        .read_string(NVIDIA_SMI_APPS_CSV)
        .ok()
        .map(|t| nvsmi::parse_compute_apps(&t));
    (gpus, NVIDIA_SMI_CSV.to_string(), apps)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_normalize() {
        assert_eq!(
            normalize("/opt/ik", "../models/./r1.gguf"),
            "/opt/models/r1.gguf"
        );
        assert_eq!(normalize("/", "/m/x.gguf"), "/m/x.gguf");
        assert_eq!(normalize("/", "../../x"), "/x");
    }

    #[test]
    fn llm_process_names() {
        let names = vec![
            "llama-server".to_string(),
            "llama-sweep-bench".to_string(),
            "ktransformers".to_string(),
        ];
        let v = |s: &[&str]| s.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        assert!(is_llm_process("llama-server", &[], &names));
        assert!(
            is_llm_process("llama-sweep-ben", &[], &names),
            "comm is cut to 15 characters"
        );
        assert!(is_llm_process(
            "python3",
            &v(&["python3", "-m", "ktransformers.server.main"]),
            &names
        ));
        assert!(!is_llm_process(
            "python3",
            &v(&["python3", "app.py"]),
            &names
        ));
        assert!(!is_llm_process("bash", &v(&["bash"]), &names));
    }
}
