//! Server profile (issue 7): the GGUF reader against gguf-py's own writer and reader, exact byte
//! counts on the board fixtures (OWN-10..15), full-size DeepSeek-V3 (61 layers, 256 experts) and
//! Qwen3-235B-A22B (94 layers, 128 experts) headers written by the test writer, every `-ot`
//! mistake the check names, the KV-cache arithmetic, NUMA balancing states, profile detection,
//! and hostile GGUF bytes.

mod overrides;
mod servers;

use crate::support::gguf as gguf_writer;
use gguf_writer::*;
use npu_agent::parse::gguf as reader;
use proptest::prelude::*;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

const GIB: u64 = 1 << 30;
const GUIDE: &str = r"blk\.[0-9]+\.ffn_.*_exps\.weight=CPU";

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// `check --format json --root ROOT [extra]` → (exit code, report).
fn check(root: &Path, extra: &[&str]) -> (i32, Value) {
    let out = Command::new(env!("CARGO_BIN_EXE_npu-agent"))
        .args(["check", "--format", "json", "--root"])
        .arg(root)
        .args(extra)
        .output()
        .expect("run npu-agent");
    let code = out.status.code().expect("no signal");
    let v: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    (code, v)
}

fn findings<'a>(r: &'a Value, id: &str) -> Vec<&'a Value> {
    r["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["id"] == id)
        .collect()
}

fn one<'a>(r: &'a Value, id: &str) -> &'a Value {
    let f = findings(r, id);
    assert_eq!(f.len(), 1, "{id}: {f:?}");
    f[0]
}

fn summary(f: &Value) -> &str {
    f["summary"].as_str().unwrap_or("")
}

fn names(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_str().unwrap().to_string())
        .collect()
}

fn board(case: &str) -> PathBuf {
    repo().join("tests/fixtures/boards").join(case).join("root")
}

fn experts(layers: impl Iterator<Item = u64>) -> Vec<String> {
    layers
        .flat_map(|l| ["gate", "up", "down"].map(|k| format!("blk.{l}.ffn_{k}_exps.weight")))
        .collect()
}

/// A DeepSeek-V3 MoE layer's routed experts: gate and up Q4_K, down Q6_K.
fn ds_layer_expert_bytes(n_expert: u64) -> u64 {
    2 * bytes(&[7168, 2048, n_expert], Q4_K) + bytes(&[2048, 7168, n_expert], Q6_K)
}

/// Bytes of `tensors` that the guide's placement keeps on the GPU with -ngl 99: everything but
/// token_embd and the routed experts.
fn guide_gpu_bytes(tensors: &[Tensor]) -> u64 {
    tensors
        .iter()
        .filter(|(n, _, _)| n != "token_embd.weight" && !is_expert(n))
        .map(|(_, ne, ty)| bytes(ne, *ty))
        .sum()
}

// ---------------------------------------------------------------------------------------------
// Board fixtures: exact figures

fn fixture_model() -> Vec<Tensor> {
    deepseek_tensors(14, 3, 256)
}

// ---------------------------------------------------------------------------------------------
// Generated trees: full-size models and every rule mistake

struct Host {
    dir: tempfile::TempDir,
}

impl Host {
    /// An x86_64 host with an NVIDIA GPU (`free_mib` free, 844 MiB used) and `nodes` NUMA nodes.
    fn new(nodes: u32, balancing: &str, free_mib: u64) -> Host {
        let h = Host {
            dir: tempfile::tempdir().unwrap(),
        };
        h.put("proc/sys/kernel/arch", "x86_64\n");
        h.put("proc/sys/kernel/numa_balancing", &format!("{balancing}\n"));
        for n in 0..nodes {
            h.put(
                &format!("sys/devices/system/node/node{n}/cpulist"),
                "0-63\n",
            );
        }
        h.put("sys/bus/pci/devices/0000:01:00.0/vendor", "0x10de\n");
        h.put("sys/bus/pci/devices/0000:01:00.0/device", "0x2684\n");
        h.put(
            "run/npu-agent/nvidia-smi.csv",
            &format!("index, name, memory.total [MiB], memory.used [MiB], memory.free [MiB]\n0, NVIDIA GPU, {} MiB, 844 MiB, {free_mib} MiB\n", free_mib + 844),
        );
        h
    }
    fn put(&self, rel: &str, text: &str) {
        let p = self.dir.path().join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
    fn root(&self) -> &Path {
        self.dir.path()
    }
    fn deepseek(&self) -> &Self {
        write(
            &self.root().join("models/ds/DeepSeek-V3-Q4_K_M.gguf"),
            &deepseek_kv(61, 256),
            &deepseek_tensors(61, 3, 256),
        );
        self
    }
    fn qwen(&self) -> &Self {
        write(
            &self.root().join("models/qwen/Qwen3-235B-A22B-Q4_K_M.gguf"),
            &qwen3moe_kv(94),
            &qwen3moe_tensors(94),
        );
        self
    }
    fn process(&self, pid: u32, comm: &str, argv: &[&str]) {
        self.put(&format!("proc/{pid}/comm"), &format!("{comm}\n"));
        let mut b = Vec::new();
        for a in argv {
            b.extend_from_slice(a.as_bytes());
            b.push(0);
        }
        let p = self.root().join(format!("proc/{pid}/cmdline"));
        std::fs::write(p, b).unwrap();
    }
    fn run(&self, cmdline: &str) -> Value {
        check(self.root(), &["--llm-cmdline", cmdline]).1
    }
}

const DS: &str = "/opt/ik_llama.cpp/build/bin/llama-server -m /models/ds/DeepSeek-V3-Q4_K_M.gguf";
const QW: &str = "llama-server -m /models/qwen/Qwen3-235B-A22B-Q4_K_M.gguf";

// ---------------------------------------------------------------------------------------------
// Profile detection

fn profile_of(h: &Host, extra: &[&str]) -> String {
    check(h.root(), extra).1["profile"]
        .as_str()
        .unwrap()
        .to_string()
}

// ---------------------------------------------------------------------------------------------
// Hostile GGUF bytes

fn valid_header() -> Vec<u8> {
    header(&deepseek_kv(4, 8), &deepseek_tensors(4, 3, 8))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    #[test]
    fn gguf_mutations_never_panic(flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..16), cut in any::<prop::sample::Index>()) {
        let mut b = valid_header();
        for (i, v) in flips {
            let at = i.index(b.len());
            b[at] = v;
        }
        let n = cut.index(b.len() + 1);
        if let Ok(h) = reader::parse_header(&b[..n]) {
            for i in 0..h.tensors.len() {
                let _ = h.tensor_bytes(i, Some(n as u64));
            }
            let _ = h.data_end();
        }
    }

    #[test]
    fn gguf_prefixes_of_a_valid_header_ask_for_more(cut in any::<prop::sample::Index>()) {
        let b = valid_header();
        let n = cut.index(b.len());
        let is_truncated = matches!(reader::parse_header(&b[..n]), Err(reader::GgufError::Truncated { .. }));
        prop_assert!(is_truncated);
    }
}

// ---------------------------------------------------------------------------------------------
// Upstream behaviour by program and build (issue 35, class 8)

/// Qwen3-MoE with the fused gate+up experts of Qwen3.5-style conversions.
fn fused_qwen(n_layer: u64) -> Vec<Tensor> {
    qwen3moe_tensors(n_layer)
        .into_iter()
        .filter(|(n, _, _)| !n.ends_with("ffn_up_exps.weight"))
        .map(|(n, ne, ty)| match n.strip_suffix("ffn_gate_exps.weight") {
            Some(p) => (
                format!("{p}ffn_gate_up_exps.weight"),
                vec![ne[0], 2 * ne[1], ne[2]],
                ty,
            ),
            None => (n, ne, ty),
        })
        .collect()
}

const FUSED: &str = "llama-server -m /models/f/fused.gguf";

impl Host {
    fn fused(&self, n_layer: u64) -> &Self {
        write(
            &self.root().join("models/f/fused.gguf"),
            &qwen3moe_kv(n_layer as u32),
            &fused_qwen(n_layer),
        );
        self
    }
    /// The server's log where the profile reads workload logs.
    fn log(&self, text: &str) -> &Self {
        self.put("var/log/llama-server.log", text);
        self
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// A server log's load lines with hostile values: no panic, and every figure read is one
    /// the line holds.
    #[test]
    fn server_log_lines_with_hostile_values(
        lines in proptest::collection::vec(
            (
                prop_oneof![
                    Just("version: "),
                    Just("main: build = "),
                    Just("build_info: b"),
                    Just("  Device 0: X, compute capability 8.9, VMM: yes, VRAM: "),
                    Just("load_tensors: offloaded "),
                    Just("load_tensors:        CUDA0 model buffer size = "),
                    Just("ggml_backend_cuda_buffer_type_alloc_buffer: allocating "),
                    Just("Tensor blk.0.ffn_up_exps.weight buffer type overriden to "),
                ],
                "[ -~]{0,60}",
            ),
            0..30,
        )
    ) {
        let text: Vec<String> = lines.iter().map(|(k, v)| format!("{k}{v}")).collect();
        for run in npu_agent::parse::llamalog::parse_runs(&text) {
            if let Some(f) = &run.failed_alloc {
                prop_assert!(f.line < text.len());
                prop_assert!(f.bytes < (1u64 << 60));
            }
            for b in &run.buffers {
                prop_assert!(b.line < text.len());
            }
        }
    }
}
