//! What a llama.cpp / ik_llama.cpp server says about itself while it loads a model: its build,
//! the CUDA devices and their free memory, how many layers it offloaded, the buffer it allocated
//! on each device, a failed device allocation, and the tensors an override sent elsewhere.
//!
//! The lines are the ones both programs print at their default log level (`src/llama-model.cpp`
//! / `src/llama.cpp` `load_tensors`, `ggml/src/ggml-cuda/ggml-cuda.cu` `ggml_cuda_init` and
//! `ggml_backend_cuda_buffer_type_alloc_buffer`, `common/common.cpp` and the servers' build-info
//! line); a prefix (a timestamp, a journal or container tag) before them is ignored. A log may
//! hold several starts of the server: each start is one [`ServerRun`], in log order.

use regex_lite::Regex;
use std::sync::OnceLock;

const MIB: f64 = 1_048_576.0;

/// One CUDA device as the server listed it at start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogDevice {
    /// `Device N` / `CUDA<N>`.
    pub index: u32,
    /// Its name.
    pub name: String,
    /// Total memory, when printed.
    pub total_bytes: Option<u64>,
    /// Free memory when the server started, when printed.
    pub free_bytes: Option<u64>,
}

/// Which buffer a `... buffer size = X MiB` line is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BufferKind {
    /// Model weights (`model buffer size`, or `load_tensors: X buffer size`).
    Model,
    /// The KV cache.
    Kv,
    /// Compute buffers.
    Compute,
}

/// One `<device> <kind> buffer size = X MiB` line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogBuffer {
    /// Buffer name as printed: `CUDA0`, `CPU_Mapped`, `CPU`, `CUDA_Host`, `CUDA0_Split`.
    pub device: String,
    /// What it holds.
    pub kind: BufferKind,
    /// Its size.
    pub bytes: u64,
    /// Line index (0-based) in the lines given.
    pub line: usize,
}

impl LogBuffer {
    /// The CUDA device index of a device buffer (`CUDA0` → 0), `None` for host buffers.
    pub fn cuda_index(&self) -> Option<u32> {
        let d = self.device.strip_prefix("CUDA")?;
        let digits: String = d.chars().take_while(char::is_ascii_digit).collect();
        if digits.is_empty() {
            return None;
        }
        digits.parse().ok()
    }
}

/// A device allocation that failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FailedAlloc {
    /// CUDA device index.
    pub device: u32,
    /// Bytes asked for.
    pub bytes: u64,
    /// Line index (0-based).
    pub line: usize,
    /// The line.
    pub text: String,
}

/// One start of the server, as far as its log shows it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ServerRun {
    /// Build number (`version: 8284 (00de61534)`, `build = 4290 (...)`, `build_info: b9014-...`).
    pub build: Option<u32>,
    /// The build line, with its index.
    pub build_line: Option<(usize, String)>,
    /// Lines only ik_llama.cpp prints were seen.
    pub ik_llama: bool,
    /// The model file (`loaded meta data ... from PATH`).
    pub model_path: Option<String>,
    /// CUDA devices.
    pub devices: Vec<LogDevice>,
    /// `offloaded N/M layers to GPU`, with its line index.
    pub offloaded: Option<(u32, u32, usize)>,
    /// Buffer sizes, in log order.
    pub buffers: Vec<LogBuffer>,
    /// A failed device allocation.
    pub failed_alloc: Option<FailedAlloc>,
    /// Tensors an override placed (`Tensor X buffer type overridden to CPU`): (name, buffer).
    pub overridden: Vec<(String, String)>,
    /// The server stopped at an `-ot` buffer no device offers ("unknown buffer type"): the line
    /// index and text.
    pub unknown_buffer: Option<(usize, String)>,
}

impl ServerRun {
    /// True when the run shows anything of the model's placement.
    pub fn has_placement(&self) -> bool {
        self.offloaded.is_some()
            || self.buffers.iter().any(|b| b.kind == BufferKind::Model)
            || self.failed_alloc.is_some()
            || !self.overridden.is_empty()
            || self.unknown_buffer.is_some()
    }

    /// True when the run shows any loading at all (a later start begins a new run).
    fn started_loading(&self) -> bool {
        self.has_placement() || self.model_path.is_some()
    }

    /// Weight bytes the run put on CUDA devices (`CUDA<n> model buffer size`, not `CUDA_Host`).
    pub fn gpu_model_bytes(&self) -> Option<u64> {
        let b: Vec<&LogBuffer> = self
            .buffers
            .iter()
            .filter(|b| b.kind == BufferKind::Model && b.cuda_index().is_some())
            .collect();
        (!b.is_empty()).then(|| b.iter().map(|b| b.bytes).sum())
    }
}

struct Patterns {
    version: Regex,
    build_eq: Regex,
    build_info: Regex,
    build_kv: Regex,
    device: Regex,
    using_device: Regex,
    offloaded: Regex,
    buffer: Regex,
    alloc_failed: Regex,
    overridden: Regex,
    meta: Regex,
}

fn patterns() -> &'static Patterns {
    static P: OnceLock<Patterns> = OnceLock::new();
    P.get_or_init(|| {
        let re = |s: &str| Regex::new(s).expect("static pattern");
        Patterns {
            version: re(r"\bversion: (\d{1,7}) \(([0-9a-f]{6,40})\)"),
            build_eq: re(r"\bbuild(?: =|:) (\d{1,7}) \(([0-9a-f]{6,40})\)"),
            build_info: re(r"\bbuild_info: b(\d{1,7})-([0-9a-f]{6,40})"),
            build_kv: re(r#"\bbuild info\b.*\bbuild=(\d{1,7})\b"#),
            device: re(
                r"\bDevice (\d{1,3}): (.+?), compute capability [0-9.]+(?:.*?\bVRAM: (\d{1,9}) MiB(?: \((\d{1,9}) MiB free\))?)?",
            ),
            using_device: re(r"\busing device CUDA(\d{1,3}) \((.+?)\).*? - (\d{1,9}) MiB free"),
            offloaded: re(r"\boffloaded (\d{1,6})/(\d{1,6}) layers to GPU"),
            buffer: re(r"(\S+) +(model |KV |compute )?buffer size = +([0-9]{1,12}(?:\.[0-9]{1,6})?) MiB"),
            alloc_failed: re(
                r"\ballocating ([0-9]{1,12}(?:\.[0-9]{1,6})?) MiB on device (\d{1,3}): cudaMalloc failed",
            ),
            overridden: re(r"(?i)\btensor (\S+) .*?buffer type overrid(?:d)?en to (\S+)"),
            meta: re(r"\bloaded meta data with \d+ key-value pairs and \d+ tensors from (.+?) \(version"),
        }
    })
}

fn mib_to_bytes(s: &str) -> Option<u64> {
    let v: f64 = s.parse().ok()?;
    (0.0..1e12).contains(&v).then(|| (v * MIB).round() as u64)
}

fn num<T: std::str::FromStr>(s: Option<regex_lite::Match<'_>>) -> Option<T> {
    s?.as_str().parse().ok()
}

/// Splits `lines` into server starts and reads each. Lines too long to be the server's own
/// (over 64 KiB) are skipped; a log without any of these lines gives no run.
pub fn parse_runs(lines: &[String]) -> Vec<ServerRun> {
    let p = patterns();
    let mut runs: Vec<ServerRun> = Vec::new();
    let mut cur = ServerRun::default();
    let mut any = false;
    for (i, line) in lines.iter().enumerate() {
        if line.len() > 64 * 1024 || !worth_reading(line) {
            continue;
        }
        let starts = line.contains("ggml_cuda_init: found")
            || p.version.is_match(line)
            || p.build_eq.is_match(line)
            || p.build_info.is_match(line)
            || p.build_kv.is_match(line);
        if starts && cur.started_loading() {
            runs.push(std::mem::take(&mut cur));
        }
        any |= read_line(p, &mut cur, i, line);
    }
    if any {
        runs.push(cur);
    }
    runs
}

/// A cheap test before the patterns: every line read holds one of these words (a large log of
/// another program costs a few substring searches per line).
fn worth_reading(line: &str) -> bool {
    const WORDS: [&str; 9] = [
        "build",
        "version",
        "Device ",
        "device",
        "loaded meta",
        "offloaded",
        "buffer",
        "overrid",
        "FANCY_SIMD",
    ];
    WORDS.iter().any(|w| line.contains(w))
}

/// Reads one line into `run`; true when it told something.
fn read_line(p: &Patterns, run: &mut ServerRun, i: usize, line: &str) -> bool {
    if let Some(c) = p
        .version
        .captures(line)
        .or_else(|| p.build_eq.captures(line))
        .or_else(|| p.build_info.captures(line))
        .or_else(|| p.build_kv.captures(line))
    {
        run.build = num(c.get(1));
        run.build_line = Some((i, line.trim().to_string()));
        if line.contains("build info") {
            // The server's `LOG_INFO("build info", {...})` shape is ik_llama.cpp's (and old
            // upstream's) server; upstream prints `build_info:` / `version:` today.
            run.ik_llama |= line.contains("INFO [");
        }
        return true;
    }
    if line.contains("unknown buffer type") {
        run.unknown_buffer = Some((i, line.trim().to_string()));
        return true;
    }
    if line.contains("HAVE_FANCY_SIMD") {
        run.ik_llama = true;
        return true;
    }
    if let Some(c) = p.device.captures(line) {
        let index = num(c.get(1)).unwrap_or(0);
        let dev = LogDevice {
            index,
            name: c
                .get(2)
                .map(|m| m.as_str().trim().to_string())
                .unwrap_or_default(),
            total_bytes: num::<u64>(c.get(3)).map(|m| m << 20),
            free_bytes: num::<u64>(c.get(4)).map(|m| m << 20),
        };
        upsert_device(run, dev);
        return true;
    }
    if let Some(c) = p.using_device.captures(line) {
        let dev = LogDevice {
            index: num(c.get(1)).unwrap_or(0),
            name: c.get(2).map(|m| m.as_str().to_string()).unwrap_or_default(),
            total_bytes: None,
            free_bytes: num::<u64>(c.get(3)).map(|m| m << 20),
        };
        upsert_device(run, dev);
        return true;
    }
    if let Some(c) = p.meta.captures(line) {
        run.model_path = c.get(1).map(|m| m.as_str().to_string());
        return true;
    }
    if let Some(c) = p.offloaded.captures(line) {
        if let (Some(n), Some(m)) = (num(c.get(1)), num(c.get(2))) {
            run.offloaded = Some((n, m, i));
            return true;
        }
    }
    if let Some(c) = p.alloc_failed.captures(line) {
        if let (Some(bytes), Some(device)) = (
            c.get(1).and_then(|m| mib_to_bytes(m.as_str())),
            num(c.get(2)),
        ) {
            run.failed_alloc = Some(FailedAlloc {
                device,
                bytes,
                line: i,
                text: line.trim().to_string(),
            });
            return true;
        }
    }
    if let Some(c) = p.buffer.captures(line) {
        let kind = match c.get(2).map(|m| m.as_str()) {
            Some("model ") => Some(BufferKind::Model),
            Some("KV ") => Some(BufferKind::Kv),
            Some("compute ") => Some(BufferKind::Compute),
            // ik_llama.cpp and older upstream: `llm_load_tensors:  CUDA0 buffer size = ...`.
            _ if line.contains("load_tensors:") => Some(BufferKind::Model),
            _ => None,
        };
        if let (Some(kind), Some(bytes)) = (kind, c.get(3).and_then(|m| mib_to_bytes(m.as_str()))) {
            run.buffers.push(LogBuffer {
                device: c.get(1).map(|m| m.as_str().to_string()).unwrap_or_default(),
                kind,
                bytes,
                line: i,
            });
            return true;
        }
    }
    if line.contains("overrid") {
        if let Some(c) = p.overridden.captures(line) {
            if run.overridden.len() < 100_000 {
                run.overridden.push((
                    c[1].to_string(),
                    c[2].trim_end_matches(['.', ',']).to_string(),
                ));
            }
            return true;
        }
    }
    false
}

fn upsert_device(run: &mut ServerRun, dev: LogDevice) {
    if let Some(d) = run.devices.iter_mut().find(|d| d.index == dev.index) {
        d.total_bytes = d.total_bytes.or(dev.total_bytes);
        d.free_bytes = dev.free_bytes.or(d.free_bytes);
    } else if run.devices.len() < 64 {
        run.devices.push(dev);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(t: &str) -> Vec<String> {
        t.lines().map(str::to_string).collect()
    }

    #[test]
    fn upstream_failed_load() {
        let runs = parse_runs(&lines(
            "ggml_cuda_init: found 1 CUDA devices (Total VRAM: 24126 MiB):
  Device 0: NVIDIA GeForce RTX 3090, compute capability 8.6, VMM: yes, VRAM: 24126 MiB (23863 MiB free)
version: 8284 (00de61534)
built with GNU 13.3.0 for Linux x86_64
ggml_backend_cuda_buffer_type_alloc_buffer: allocating 144817.04 MiB on device 0: cudaMalloc failed: out of memory
alloc_tensor_range: failed to allocate CUDA0 buffer of size 151851674624",
        ));
        assert_eq!(runs.len(), 1);
        let r = &runs[0];
        assert_eq!(r.build, Some(8284));
        assert_eq!(r.devices[0].free_bytes, Some(23863 << 20));
        assert_eq!(r.devices[0].total_bytes, Some(24126 << 20));
        let f = r.failed_alloc.as_ref().unwrap();
        assert_eq!((f.device, f.bytes, f.line), (0, 151_851_672_535, 4));
        assert!(r.has_placement() && !r.ik_llama);
    }

    #[test]
    fn ik_load_and_restart() {
        let runs = parse_runs(&lines(
            "INFO [                    main] build info | tid=\"1\" timestamp=1 build=4800 commit=\"abc1234\"
======================================= HAVE_FANCY_SIMD is defined
llama_model_loader: loaded meta data with 40 key-value pairs and 579 tensors from /m/q.gguf (version GGUF V3 (latest))
Tensor blk.47.ffn_up_exps.weight (size = 1.50 MiB) buffer type overriden to CPU
llm_load_tensors: offloaded 49/49 layers to GPU
llm_load_tensors:        CPU buffer size = 16000.50 MiB
llm_load_tensors:      CUDA0 buffer size =  2500.25 MiB
llama_kv_cache_init:      CUDA0 KV buffer size =   768.00 MiB
llama_new_context_with_model:      CUDA0 compute buffer size =   300.00 MiB
Jan 01 12:00:00 host llama-server[9]: version: 4801 (def5678)
load_tensors:        CUDA0 model buffer size = 100.00 MiB",
        ));
        assert_eq!(runs.len(), 2);
        let r = &runs[0];
        assert_eq!(r.build, Some(4800));
        assert!(r.ik_llama);
        assert_eq!(r.model_path.as_deref(), Some("/m/q.gguf"));
        assert_eq!(r.offloaded.map(|o| (o.0, o.1)), Some((49, 49)));
        assert_eq!(r.gpu_model_bytes(), Some((2500.25 * MIB) as u64));
        assert_eq!(
            r.overridden,
            vec![("blk.47.ffn_up_exps.weight".into(), "CPU".into())]
        );
        assert_eq!(
            r.buffers.iter().map(|b| b.kind).collect::<Vec<_>>(),
            [
                BufferKind::Model,
                BufferKind::Model,
                BufferKind::Kv,
                BufferKind::Compute
            ]
        );
        assert_eq!(runs[1].build, Some(4801));
        let stop = parse_runs(&lines(
            "error while handling argument \"-ot\": unknown buffer type",
        ));
        assert_eq!(stop[0].unknown_buffer.as_ref().map(|u| u.0), Some(0));
        assert_eq!(runs[1].gpu_model_bytes(), Some(100 << 20));
    }

    #[test]
    fn noise_gives_nothing() {
        assert!(parse_runs(&lines("hello\nbuffer size = x MiB\nversion: abc")).is_empty());
        let long = vec!["offloaded 1/2 layers to GPU ".repeat(10_000)];
        assert!(parse_runs(&long).is_empty());
        let huge =
            vec!["allocating 99999999999999999999.5 MiB on device 0: cudaMalloc failed".into()];
        assert!(parse_runs(&huge).iter().all(|r| r.failed_alloc.is_none()));
    }
}
