//! `kernel.numa_balancing`: automatic NUMA balancing on a multi-node server, which migrates the
//! pages of a model mapped across nodes and costs llama.cpp-style servers throughput.

use super::*;

pub(super) fn numa_balancing(ctx: &Ctx<'_>) -> Finding {
    let id = "kernel.numa_balancing";
    let l = &ctx.snap.llm;
    let live = ctx.snap.live;
    let nodes: Vec<u32> = match &l.numa_nodes {
        Ok(n) if !n.is_empty() => n.clone(),
        Ok(_) | Err(_) if live => vec![0],
        Ok(_) => {
            return Finding::skip(
                id,
                "no node directories under /sys/devices/system/node in this tree",
            )
        }
        Err(e) => return Finding::skip(id, format!("cannot list NUMA nodes: {e}")),
    };
    let mem_nodes: Vec<u32> = match &l.nodes_with_memory {
        Some(m) if !m.is_empty() => m.clone(),
        _ => nodes.clone(),
    };
    let mut f = Finding::new(id, Status::Pass, "")
        .observed("numa_nodes", nodes.clone())
        .observed("numa_nodes_with_memory", mem_nodes.clone());
    f.push_evidence(
        "/sys/devices/system/node",
        None,
        &nodes
            .iter()
            .map(|n| format!("node{n}"))
            .collect::<Vec<_>>()
            .join(" "),
    );
    let report = process_report(l, &mut f);
    let settings: Vec<Value> = l
        .sysctl_settings
        .iter()
        .map(|s| json!({"file": s.file, "line": s.line, "value": s.value}))
        .collect();
    if !settings.is_empty() {
        f = f.observed("sysctl_settings", settings);
    }
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
            return Finding::skip(id, "/proc/sys/kernel/numa_balancing is not in this tree")
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
    f = f.expected("numa_balancing", 0);
    let n = mem_nodes.len();
    // The setting that boot will apply last, and kernel command-line overrides.
    let last = l.sysctl_settings.last();
    let cmdline_token = ctx.snap.cmdline.as_ref().ok().and_then(|c| {
        c.split_whitespace()
            .find(|t| t.starts_with("numa_balancing="))
            .map(str::to_string)
    });
    match mode {
        0 => {
            f.summary = format!("automatic NUMA balancing is off on this {n}-node host (kernel.numa_balancing = 0){report}");
            if let Some(s) = last.filter(|s| s.value.trim() != "0") {
                f.status = Status::Warn;
                f.summary.push_str(&format!(
                    "; but {} line {} sets it to {} at the next boot",
                    s.file, s.line, s.value
                ));
                f.push_evidence(&s.file, Some(s.line), &s.text);
                f.remedy = format!("set kernel.numa_balancing = 0 in {} (line {}) so the setting survives a reboot", s.file, s.line);
            }
            f
        }
        2 => {
            f.summary = format!(
                "kernel.numa_balancing = 2 (memory-tiering mode) on this {n}-node host: it promotes hot pages from slower memory tiers (CXL, PMEM) and, as the kernel documents it, does not balance between DRAM nodes; set 0 if decode speed still drops{report}"
            );
            f
        }
        _ => {
            f.status = Status::Fail;
            let mut s = format!(
                "automatic NUMA balancing is on (kernel.numa_balancing = {mode}) on this {n}-node host: the kernel keeps migrating the model's weight pages between nodes while the experts run on the CPU, and decode speed collapses (about 14 to 4 tok/s in the guide){report}"
            );
            if let Some(set) = last.filter(|x| x.value.trim() == "0") {
                s.push_str(&format!("; {} line {} sets 0 but it is not in effect (not applied since boot, or overridden)", set.file, set.line));
                f.push_evidence(&set.file, Some(set.line), &set.text);
            }
            if let Some(t) = &cmdline_token {
                s.push_str(&format!("; the kernel command line has {t}"));
                f.push_evidence("/proc/cmdline", None, t);
            }
            f.summary = s;
            let mut remedy = "sudo sysctl -w kernel.numa_balancing=0 && echo 'kernel.numa_balancing = 0' | sudo tee /etc/sysctl.d/99-numa-balancing.conf".to_string();
            for set in l.sysctl_settings.iter().filter(|x| x.value.trim() != "0") {
                remedy.push_str(&format!(
                    "; remove `{}` from {} line {}",
                    set.text, set.file, set.line
                ));
                f.push_evidence(&set.file, Some(set.line), &set.text);
            }
            if cmdline_token
                .as_deref()
                .is_some_and(|t| t != "numa_balancing=disable")
            {
                remedy.push_str("; drop numa_balancing=enable from the kernel command line");
            }
            remedy.push_str("; then restart the server so its pages are placed anew (numactl --interleave=all spreads them over every node)");
            f.remedy = remedy;
            f
        }
    }
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
