//! `check` on a board with 50 containers and 1 GB of container logs (printed, not asserted):
//! the time of a whole `check --root` run (the release binary), and the bytes the process read
//! (`rchar` of /proc/<pid>/io, every read(2) it made). Ten of the containers are NPU workloads
//! (Frigate and RKLLama images); the other forty are ordinary services whose logs discovery only
//! looks at the tail of.
//!
//! Run: `bash bench/workloads.sh` (= `cargo bench --bench workloads`).

// Benches build board trees with plain writes (clippy.toml: disallowed_methods).
#![allow(clippy::disallowed_methods)]

use std::io::Write;
use std::path::Path;
use std::time::Instant;

const CONTAINERS: usize = 50;
const LOG_BYTES: usize = 20 * 1024 * 1024;
const RUNS: usize = 5;

fn tree(root: &Path) -> usize {
    std::fs::create_dir_all(root.join("proc/device-tree")).unwrap();
    std::fs::write(
        root.join("proc/device-tree/compatible"),
        b"radxa,rock-5b\0rockchip,rk3588\0",
    )
    .unwrap();
    std::fs::write(root.join("proc/device-tree/model"), b"Radxa ROCK 5B\0").unwrap();
    let mut total = 0;
    for i in 0..CONTAINERS {
        let (name, image, line) = match i % 5 {
            0 => (
                "frigate",
                "ghcr.io/blakeblackshear/frigate:0.16.0-rk",
                "[2026-11-20 09:14:02] frigate.video INFO : front: camera ok",
            ),
            1 if i < 10 => (
                "rkllama",
                "ghcr.io/notpunchnox/rkllama:0.0.4",
                "I rkllm: token 42 generated",
            ),
            _ => (
                "web",
                "nginx:1.27",
                "10.0.0.1 - - [20/Nov/2026:09:14:02 +0000] \"GET / HTTP/1.1\" 200 612",
            ),
        };
        let id = format!("{i:064x}");
        let dir = root.join("var/lib/docker/containers").join(&id);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("config.v2.json"),
            format!(r#"{{"Name":"/{name}-{i}","Config":{{"Image":"{image}"}},"State":{{"Running":true}}}}"#),
        )
        .unwrap();
        let entry = format!("{{\"log\":\"{line}\\n\",\"stream\":\"stdout\",\"time\":\"2026-11-20T09:14:02.000000000Z\"}}\n");
        let mut f = std::io::BufWriter::new(
            std::fs::File::create(dir.join(format!("{id}-json.log"))).unwrap(),
        );
        let mut n = 0;
        while n < LOG_BYTES {
            f.write_all(entry.as_bytes()).unwrap();
            n += entry.len();
        }
        total += n;
    }
    total
}

/// Bytes read by a child process: its `rchar` just before it exits is not visible after, so
/// the run is wrapped in `sh -c` and the child's counter read by the shell's own `/proc`.
fn run(root: &Path) -> (f64, u64) {
    let bin = env!("CARGO_BIN_EXE_npu-agent");
    let t = Instant::now();
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!(
            "{bin} check --format json --root {} >/dev/null & pid=$!; io=''; while kill -0 $pid 2>/dev/null; do io=$(grep '^rchar' /proc/$pid/io 2>/dev/null || echo \"$io\"); done; wait $pid; echo \"$io\"",
            root.display()
        ))
        .output()
        .unwrap();
    let secs = t.elapsed().as_secs_f64();
    let rchar = String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    (secs, rchar)
}

fn main() {
    let d = tempfile::tempdir().unwrap();
    let total = tree(d.path());
    println!(
        "board tree: {CONTAINERS} containers, {:.2} GB of container logs",
        total as f64 / 1e9
    );
    let mut times = Vec::new();
    let mut reads = Vec::new();
    for _ in 0..RUNS {
        let (s, r) = run(d.path());
        times.push(s);
        reads.push(r);
    }
    times.sort_by(|a, b| a.partial_cmp(b).unwrap());
    reads.sort();
    println!(
        "check --root: median {:.2} s, max {:.2} s over {RUNS} runs; bytes read (rchar, last sample before exit): median {:.1} MB",
        times[RUNS / 2],
        times[RUNS - 1],
        reads[RUNS / 2] as f64 / 1e6
    );
}
