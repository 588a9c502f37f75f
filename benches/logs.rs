//! Per-cycle cost of reading the log evidence (printed, not asserted): a 16 MiB kernel log file
//! and a journal of 100,000 entries (written by systemd-journal-remote into a temporary
//! directory, read with `journalctl -D` as on a captured tree; on a live board the same command
//! runs without `-D`). For each source: a one-shot `check` read, the daemon's first cycle, a
//! steady cycle with nothing new, and a cycle with 100 new lines/entries; median and max over
//! RUNS cycles.
//!
//! Run: `bash bench/logs.sh` (= `cargo bench --bench logs`; needs systemd-journal-remote).

// Tests build board trees and fixtures with plain writes (clippy.toml: disallowed_methods).
#![allow(clippy::disallowed_methods)]

#[path = "../tests/support/journal.rs"]
mod journal;

use npu_agent::probe::evidence::{probe_logs, LogCursors};
use npu_agent::root::SysRoot;
use std::io::Write;
use std::path::Path;
use std::time::Instant;

const RUNS: usize = 20;

fn ms(mut v: Vec<f64>) -> String {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    format!(
        "median {:8.2} ms  max {:8.2} ms",
        v[v.len() / 2],
        v[v.len() - 1]
    )
}

fn time(f: impl FnOnce()) -> f64 {
    let t = Instant::now();
    f();
    t.elapsed().as_secs_f64() * 1e3
}

fn profile(root: &SysRoot) -> npu_agent::profile::Profile {
    npu_agent::profile::load_all(root)
        .0
        .into_iter()
        .find(|p| p.id == "rpi5-hailo10h")
        .expect("rpi5-hailo10h profile")
}

fn kernel_line(i: usize) -> String {
    if i % 5000 == 0 {
        format!("May 15 10:02:11 board kernel: [{:6}.000000] cma: cma_alloc: alloc failed, req-size: 8 pages, ret: -12\n", i / 100)
    } else {
        format!("May 15 10:02:11 board kernel: [{:6}.000000] usb 1-1.{}: new high-speed USB device number {} using xhci_hcd\n", i / 100, i % 4, i % 128)
    }
}

fn bench_file(dir: &Path) {
    std::fs::create_dir_all(dir.join("var/log")).unwrap();
    let path = dir.join("var/log/kern.log");
    let mut f = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
    let mut n = 0usize;
    let mut bytes = 0usize;
    while bytes < 16 << 20 {
        let l = kernel_line(n);
        bytes += l.len();
        f.write_all(l.as_bytes()).unwrap();
        n += 1;
    }
    drop(f);
    let root = SysRoot::new(dir);
    let p = profile(&root);
    println!("kernel log file: {} MiB, {n} lines", bytes >> 20);
    let one_shot: Vec<f64> = (0..RUNS)
        .map(|_| time(|| drop(probe_logs(&root, &p, &Default::default(), None, None))))
        .collect();
    println!(
        "  one-shot check (tail {} MiB)      {}",
        npu_agent::probe::LOG_TAIL_BYTES >> 20,
        ms(one_shot)
    );
    let mut first = Vec::new();
    let mut steady = Vec::new();
    let mut new100 = Vec::new();
    for _ in 0..RUNS {
        let mut c = LogCursors::default();
        first.push(time(|| {
            drop(probe_logs(
                &root,
                &p,
                &Default::default(),
                Some(&mut c),
                Some("b"),
            ))
        }));
        steady.push(time(|| {
            drop(probe_logs(
                &root,
                &p,
                &Default::default(),
                Some(&mut c),
                Some("b"),
            ))
        }));
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        for i in 0..100 {
            f.write_all(kernel_line(n + i).as_bytes()).unwrap();
        }
        new100.push(time(|| {
            drop(probe_logs(
                &root,
                &p,
                &Default::default(),
                Some(&mut c),
                Some("b"),
            ))
        }));
    }
    println!("  daemon, first cycle              {}", ms(first));
    println!("  daemon, nothing new              {}", ms(steady));
    println!("  daemon, 100 new lines            {}", ms(new100));
}

fn bench_journal(dir: &Path) {
    let n = 100_000usize;
    let msgs: Vec<String> = (0..n)
        .map(|i| {
            kernel_line(i)
                .split("] ")
                .nth(1)
                .unwrap()
                .trim_end()
                .to_string()
        })
        .collect();
    let entries: Vec<journal::Entry<'_>> = msgs
        .iter()
        .enumerate()
        .map(|(i, m)| journal::Entry {
            unit: (i % 10 == 0).then_some(("hailo-ollama.service", "hailo-ollama")),
            message: m,
        })
        .collect();
    let t = Instant::now();
    let file = journal::write_journal(dir, "system", 1, &entries);
    println!(
        "journal: {n} entries (90% kernel transport, 10% hailo-ollama.service), {} MiB on disk, written in {:.1} s",
        std::fs::metadata(&file).unwrap().len() >> 20,
        t.elapsed().as_secs_f64()
    );
    let root = SysRoot::new(dir);
    let p = profile(&root);
    let runs = RUNS / 4;
    let one_shot: Vec<f64> = (0..runs)
        .map(|_| time(|| drop(probe_logs(&root, &p, &Default::default(), None, None))))
        .collect();
    println!("  one-shot check (whole boot)      {}", ms(one_shot));
    let mut first = Vec::new();
    let mut steady = Vec::new();
    let mut new100 = Vec::new();
    for r in 0..runs {
        let mut c = LogCursors::default();
        first.push(time(|| {
            drop(probe_logs(
                &root,
                &p,
                &Default::default(),
                Some(&mut c),
                Some("b"),
            ))
        }));
        steady.push(time(|| {
            drop(probe_logs(
                &root,
                &p,
                &Default::default(),
                Some(&mut c),
                Some("b"),
            ))
        }));
        let more: Vec<journal::Entry<'_>> = msgs[..100]
            .iter()
            .map(|m| journal::Entry {
                unit: None,
                message: m,
            })
            .collect();
        let extra = journal::write_journal(
            dir,
            &format!("system@more{r}"),
            1_000_000 + r as u64 * 1000,
            &more,
        );
        new100.push(time(|| {
            drop(probe_logs(
                &root,
                &p,
                &Default::default(),
                Some(&mut c),
                Some("b"),
            ))
        }));
        std::fs::remove_file(extra).unwrap();
    }
    println!("  daemon, first cycle              {}", ms(first));
    println!("  daemon, nothing new              {}", ms(steady));
    println!("  daemon, 100 new entries          {}", ms(new100));
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let f = tempfile::tempdir().unwrap();
    bench_file(f.path());
    if journal::journal_tools() {
        let j = tempfile::tempdir().unwrap();
        bench_journal(j.path());
    }
}
