//! `kernel.numa_balancing`: automatic NUMA balancing on a multi-node server, which migrates the
//! pages of a model mapped across nodes and costs llama.cpp-style servers throughput, and whose
//! page-table scanning (`task_numa_work`) sits on the critical path of SGLang, vLLM and DeepEP
//! servers (deepseek-ai/DeepEP#624). The sysctl is a bitmask (`kernel/sched/fair.c`,
//! Documentation/admin-guide/sysctl/kernel.rst): 1 = NUMA_BALANCING_NORMAL, 2 =
//! NUMA_BALANCING_MEMORY_TIERING; any non-zero value runs the scanner.

use super::*;
use crate::model::llm::SysctlSetting;
use crate::model::remedy::{Remedy, Step};

const ID: &str = "kernel.numa_balancing";

pub(super) fn numa_balancing(ctx: &Ctx<'_>) -> Finding {
    let l = &ctx.snap.llm;
    let live = ctx.snap.live;
    let nodes = match numa_nodes(l, live) {
        Ok(n) => n,
        Err(why) => return Finding::skip(ID, why),
    };
    let mem_nodes: Vec<u32> = match &l.nodes_with_memory {
        Some(m) if !m.is_empty() => m.clone(),
        _ => nodes.clone(),
    };
    let mut f = base_finding(l, &nodes, &mem_nodes);
    let report = process_report(l, &mut f);
    let value = match &l.numa_balancing {
        Ok(v) => v.clone(),
        Err(e) if e.is_not_found() && live => {
            f.summary = format!("this kernel has no automatic NUMA balancing (no /proc/sys/kernel/numa_balancing){report}");
            return f;
        }
        Err(e) if e.is_not_found() && mem_nodes.len() <= 1 => {
            f.summary = format!("one NUMA node with memory: automatic NUMA balancing has nothing to migrate{report}");
            return f;
        }
        Err(e) if e.is_not_found() => {
            return Finding::skip(ID, "/proc/sys/kernel/numa_balancing is not in this tree")
        }
        Err(e) => {
            f.status = Status::Error;
            f.summary = format!("cannot read kernel.numa_balancing: {e}");
            return f;
        }
    };
    f.push_evidence("/proc/sys/kernel/numa_balancing", None, &value);
    let Ok(mode) = value.parse::<u32>() else {
        f.status = Status::Error;
        f.summary = format!("/proc/sys/kernel/numa_balancing holds {value:?}, not a number");
        return f;
    };
    f = f.observed("numa_balancing", mode);
    if mem_nodes.len() <= 1 {
        f.summary = format!(
            "one NUMA node with memory (node{}): automatic NUMA balancing (kernel.numa_balancing = {mode}) has nothing to migrate{report}",
            mem_nodes.first().copied().unwrap_or(0)
        );
        return f;
    }
    let f = f.expected("numa_balancing", 0);
    let n = mem_nodes.len();
    if mode == 0 {
        off(f, n, &report, l.sysctl_settings.last())
    } else {
        on(f, mode, n, &report, l, ctx)
    }
}

/// True when a sysctl value turns balancing on: any value but 0 (a bitmask; a value that is no
/// number counts as on, since it is not the 0 that turns it off).
fn sets_on(value: &str) -> bool {
    value.trim().parse::<u32>() != Ok(0)
}

/// "1", "2, memory-tiering mode", "3: normal and memory-tiering balancing".
fn mode_words(mode: u32) -> String {
    match mode {
        1 => "1".to_string(),
        2 => "2, memory-tiering mode: the value is a bitmask and any non-zero value runs the NUMA scanner".to_string(),
        3 => "3, normal and memory-tiering balancing".to_string(),
        m => format!("{m}, a bitmask: any non-zero value runs the NUMA scanner"),
    }
}

/// What balancing costs the servers running here: llama.cpp-style servers lose decode speed as
/// the model's pages move; SGLang, vLLM and DeepEP servers pay the scanner's page-table work
/// on their critical path.
fn harm(l: &LlmProbe) -> String {
    let python: Vec<String> = l
        .sources
        .iter()
        .filter_map(|s| s.args.as_ref().ok())
        .filter(|a| a.engine.is_some_and(|e| e.places_by_own_config()))
        .map(|a| {
            let e = a.engine.map(Engine::name).unwrap_or("");
            if a.deepep {
                format!("the {e} server's threads (with DeepEP)")
            } else {
                format!("the {e} server's threads")
            }
        })
        .collect();
    let llama = l.sources.iter().any(|s| {
        s.args
            .as_ref()
            .is_ok_and(|a| !a.engine.is_some_and(|e| e.places_by_own_config()))
    });
    let llama_text = "the kernel keeps migrating the model's weight pages between nodes while the experts run on the CPU, and decode speed collapses (about 14 to 4 tok/s in the guide)";
    if python.is_empty() {
        return llama_text.to_string();
    }
    let mut names = python;
    names.sort();
    names.dedup();
    let py = format!(
        "the kernel's NUMA scanner (task_numa_work) periodically rewrites the page tables of {}, stalls that land on the dispatch and scheduling path (measured on SGLang with DeepEP, deepseek-ai/DeepEP#624)",
        names.join(" and ")
    );
    if llama {
        format!("{llama_text}; and {py}")
    } else {
        py
    }
}

/// The NUMA nodes to judge (a live host without node directories has one), or why the check
/// is skipped.
fn numa_nodes(l: &LlmProbe, live: bool) -> Result<Vec<u32>, String> {
    match &l.numa_nodes {
        Ok(n) if !n.is_empty() => Ok(n.clone()),
        Ok(_) | Err(_) if live => Ok(vec![0]),
        Ok(_) => Err("no node directories under /sys/devices/system/node in this tree".into()),
        Err(e) => Err(format!("cannot list NUMA nodes: {e}")),
    }
}

/// A passing finding with the nodes and the boot-time sysctl settings observed.
fn base_finding(l: &LlmProbe, nodes: &[u32], mem_nodes: &[u32]) -> Finding {
    let mut f = Finding::new(ID, Status::Pass, "")
        .observed("numa_nodes", nodes.to_vec())
        .observed("numa_nodes_with_memory", mem_nodes.to_vec());
    f.push_evidence(
        "/sys/devices/system/node",
        None,
        &nodes
            .iter()
            .map(|n| format!("node{n}"))
            .collect::<Vec<_>>()
            .join(" "),
    );
    let settings: Vec<Value> = l
        .sysctl_settings
        .iter()
        .map(|s| json!({"file": s.file, "line": s.line, "value": s.value}))
        .collect();
    if !settings.is_empty() {
        f = f.observed("sysctl_settings", settings);
    }
    f
}

/// Balancing is off; a warning when the setting boot applies last (`last`) turns it back on.
fn off(mut f: Finding, n: usize, report: &str, last: Option<&SysctlSetting>) -> Finding {
    f.summary = format!(
        "automatic NUMA balancing is off on this {n}-node host (kernel.numa_balancing = 0){report}"
    );
    if let Some(s) = last.filter(|s| sets_on(&s.value)) {
        f.status = Status::Warn;
        f.summary.push_str(&format!(
            "; but {} line {} sets it to {} at the next boot",
            s.file, s.line, s.value
        ));
        f.push_evidence(&s.file, Some(s.line), &s.text);
        f.remedy = format!(
            "set kernel.numa_balancing = 0 in {} (line {}) so the setting survives a reboot",
            s.file, s.line
        );
    }
    f
}

/// How to place the server's pages anew: interleaved for a CPU-side MoE server, bound to each
/// GPU's node for GPU-only servers.
fn restart_hint(l: &LlmProbe) -> &'static str {
    let gpu_only = !l.sources.is_empty()
        && l.sources.iter().all(|s| {
            s.args.as_ref().is_ok_and(|a| {
                a.engine
                    .is_some_and(|e| e.places_by_own_config() && e != Engine::KTransformers)
            })
        });
    if gpu_only {
        "so its pages are placed anew (bind each GPU worker to its GPU's NUMA node: numactl --cpunodebind/--membind)"
    } else {
        "so its pages are placed anew (numactl --interleave=all spreads them over every node)"
    }
}

/// Balancing is on (any non-zero `mode`): a failure, with what keeps it on at boot and the
/// commands that turn it off for good.
fn on(mut f: Finding, mode: u32, n: usize, report: &str, l: &LlmProbe, ctx: &Ctx<'_>) -> Finding {
    let cmdline = ctx.snap.cmdline.as_ref().ok();
    // The kernel command line can override the sysctl files.
    let cmdline_token = cmdline.and_then(|c| {
        c.split_whitespace()
            .find(|t| t.starts_with("numa_balancing="))
            .map(str::to_string)
    });
    f.status = Status::Fail;
    let mut s = format!(
        "automatic NUMA balancing is on (kernel.numa_balancing = {}) on this {n}-node host: {}{report}",
        mode_words(mode),
        harm(l)
    );
    if let Some(set) = l.sysctl_settings.last().filter(|x| !sets_on(&x.value)) {
        s.push_str(&format!(
            "; {} line {} sets 0 but it is not in effect (not applied since boot, or overridden)",
            set.file, set.line
        ));
        f.push_evidence(&set.file, Some(set.line), &set.text);
    }
    if let Some(t) = &cmdline_token {
        s.push_str(&format!("; the kernel command line has {t}"));
        f.push_evidence("/proc/cmdline", None, t);
    }
    f.summary = s;
    let overridden = l.sysctl_settings.iter().any(|x| sets_on(&x.value));
    let cmdline_on = cmdline_token
        .as_deref()
        .is_some_and(|t| t != "numa_balancing=disable");
    if !overridden && !cmdline_on && ctx.stack.etc_takes_files() {
        // Nothing else turns it on again: the sysctl file is the whole fix.
        return f.with_fix(
            Remedy::of(vec![Step::Sysctl {
                key: "kernel.numa_balancing".into(),
                value: "0".into(),
                file: "99-npu-agent-numa-balancing.conf".into(),
            }])
            .with_note(format!("turn automatic NUMA balancing off now and at every boot (sudo sysctl -w kernel.numa_balancing=0, kept in /etc/sysctl.d/), then restart the server {}", restart_hint(l))),
        );
    }
    let mut remedy = "sudo sysctl -w kernel.numa_balancing=0 && echo 'kernel.numa_balancing = 0' | sudo tee /etc/sysctl.d/99-numa-balancing.conf".to_string();
    for set in l.sysctl_settings.iter().filter(|x| sets_on(&x.value)) {
        remedy.push_str(&format!(
            "; remove `{}` from {} line {}",
            set.text, set.file, set.line
        ));
        f.push_evidence(&set.file, Some(set.line), &set.text);
    }
    if cmdline_on {
        remedy.push_str("; drop numa_balancing=enable from the kernel command line");
    }
    remedy.push_str(&format!("; then restart the server {}", restart_hint(l)));
    f.remedy = remedy;
    f
}

#[cfg(test)]
mod tests {
    use crate::check::testkit::{not_read, one, Board};
    use crate::model::llm::SysctlSetting;
    use crate::model::{Snapshot, Status};
    use crate::root::{ReadError, ReadErrorKind};

    const ID: &str = "kernel.numa_balancing";

    /// A board with `nodes` NUMA nodes (None: not listed) and `value` in numa_balancing
    /// (None: no such file).
    fn snap(live: bool, nodes: Option<Vec<u32>>, value: Option<&str>) -> Snapshot {
        let mut s = Board::new().build();
        s.live = live;
        s.llm.enabled = true;
        s.llm.numa_nodes = nodes
            .map(Ok)
            .unwrap_or_else(|| not_read("/sys/devices/system/node"));
        s.llm.numa_balancing = value
            .map(|v| Ok(v.to_string()))
            .unwrap_or_else(|| not_read("/proc/sys/kernel/numa_balancing"));
        s
    }

    fn setting(file: &str, line: usize, value: &str) -> SysctlSetting {
        SysctlSetting {
            file: file.into(),
            line,
            value: value.into(),
            text: format!("kernel.numa_balancing = {value}"),
        }
    }

    /// The rungs the server tests do not reach, pinned word for word.
    #[test]
    fn numa_balancing_ladder() {
        let table = [
            (
                snap(false, Some(vec![]), None),
                Status::Skip,
                "no node directories under /sys/devices/system/node in this tree",
            ),
            (
                snap(true, None, None),
                Status::Pass,
                "this kernel has no automatic NUMA balancing (no /proc/sys/kernel/numa_balancing)",
            ),
            (
                snap(false, Some(vec![0]), None),
                Status::Pass,
                "one NUMA node with memory: automatic NUMA balancing has nothing to migrate",
            ),
            (
                snap(false, Some(vec![0, 1]), None),
                Status::Skip,
                "/proc/sys/kernel/numa_balancing is not in this tree",
            ),
        ];
        for (s, status, summary) in table {
            let f = one("x86-hybrid-moe", &s, ID);
            assert_eq!((f.status, f.summary.as_str()), (status, summary));
        }
        let mut s = snap(false, Some(vec![0, 1]), None);
        let denied = ReadError {
            path: "/proc/sys/kernel/numa_balancing".into(),
            kind: ReadErrorKind::PermissionDenied,
            detail: "permission denied".into(),
        };
        s.llm.numa_balancing = Err(denied.clone());
        let f = one("x86-hybrid-moe", &s, ID);
        assert_eq!(f.status, Status::Error);
        assert_eq!(
            f.summary,
            format!("cannot read kernel.numa_balancing: {denied}")
        );
    }

    /// Balancing on, with a sysctl file that sets 0, one that sets 1 and a command-line override.
    #[test]
    fn numa_balancing_on_names_every_override() {
        let mut s = snap(false, Some(vec![0, 1]), Some("1"));
        s.cmdline = Ok("ro numa_balancing=enable".into());
        s.llm.sysctl_settings = vec![
            setting("/etc/sysctl.d/10-on.conf", 3, "1"),
            setting("/etc/sysctl.d/99-off.conf", 1, "0"),
        ];
        let f = one("x86-hybrid-moe", &s, ID);
        assert_eq!(f.status, Status::Fail);
        assert_eq!(
            f.summary,
            "automatic NUMA balancing is on (kernel.numa_balancing = 1) on this 2-node host: the kernel keeps migrating the model's weight pages between nodes while the experts run on the CPU, and decode speed collapses (about 14 to 4 tok/s in the guide); /etc/sysctl.d/99-off.conf line 1 sets 0 but it is not in effect (not applied since boot, or overridden); the kernel command line has numa_balancing=enable"
        );
        assert_eq!(
            f.remedy,
            "sudo sysctl -w kernel.numa_balancing=0 && echo 'kernel.numa_balancing = 0' | sudo tee /etc/sysctl.d/99-numa-balancing.conf; remove `kernel.numa_balancing = 1` from /etc/sysctl.d/10-on.conf line 3; drop numa_balancing=enable from the kernel command line; then restart the server so its pages are placed anew (numactl --interleave=all spreads them over every node)"
        );
        let files: Vec<&str> = f.evidence.iter().map(|e| e.file.as_str()).collect();
        assert_eq!(
            files,
            [
                "/sys/devices/system/node",
                "/proc/sys/kernel/numa_balancing",
                "/etc/sysctl.d/99-off.conf",
                "/proc/cmdline",
                "/etc/sysctl.d/10-on.conf"
            ]
        );
        assert_eq!(
            f.observed["sysctl_settings"].as_array().map(Vec::len),
            Some(2)
        );
        assert_eq!(f.expected["numa_balancing"], 0);
    }
}
