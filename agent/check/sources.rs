//! `agent.log_sources`: which evidence the agent could read this cycle (the kernel ring buffer,
//! the systemd journal, log files), so silence in the logs is never mistaken for health. A source
//! that is denied or missing makes this `info` with the reason, never `warn`; the checks that
//! read kernel lines say in their summary that the kernel log was not read.

use super::{Ctx, Finding, Status};
use crate::model::logs::LogSource;
use crate::model::logs::SourceState;
use crate::model::LogClass;
use serde_json::json;

/// Checks whose verdict rests partly on kernel log lines.
pub const KERNEL_LOG_CHECKS: &[&str] = &[
    "hailo.driver_binding",
    "hailo.device_degraded",
    "rknpu.driver_version",
    "cma.free",
    "memory.compaction",
    "memory.oom",
];

/// A source's `detail` without the source's own name in front (a file error already reads
/// `/var/log/kern.log: not found`), so a message naming the source does not name it twice.
fn reason(s: &LogSource) -> &str {
    s.detail
        .strip_prefix(s.name.as_str())
        .and_then(|d| d.strip_prefix(": "))
        .unwrap_or(&s.detail)
}

/// Why no kernel messages were read (every kernel source denied or missing), or `None` when
/// one was read.
pub fn kernel_log_unavailable(ctx: &Ctx<'_>) -> Option<String> {
    let kernel: Vec<_> = ctx
        .snap
        .log_sources
        .iter()
        .filter(|s| s.class == LogClass::Kernel)
        .collect();
    if kernel.iter().any(|s| s.state == SourceState::Read) {
        return None;
    }
    let why: Vec<String> = kernel
        .iter()
        .map(|s| format!("{}: {}", s.name, reason(s)))
        .collect();
    Some(if why.is_empty() {
        "no kernel log source".into()
    } else {
        why.join("; ")
    })
}

pub(super) fn log_sources(ctx: &Ctx<'_>) -> Finding {
    let id = "agent.log_sources";
    let srcs = &ctx.snap.log_sources;
    let read: Vec<_> = srcs
        .iter()
        .filter(|s| s.state == SourceState::Read)
        .collect();
    let bad: Vec<_> = srcs
        .iter()
        .filter(|s| matches!(s.state, SourceState::Denied))
        .collect();
    let kernel_from = read
        .iter()
        .find(|s| s.class == LogClass::Kernel)
        .map(|s| s.name.clone());
    let mut f = Finding::new(id, Status::Pass, "");
    for s in srcs {
        f.observed.insert(
            format!("source:{}", s.name),
            json!({"class": s.class, "state": s.state, "detail": s.detail, "lines": s.lines}),
        );
    }
    f = f.observed(
        "kernel_log_source",
        kernel_from.clone().unwrap_or_else(|| "none".into()),
    );
    match (&kernel_from, kernel_log_unavailable(ctx)) {
        (Some(k), _) => {
            f.summary = format!(
                "kernel messages from {k}; {} source(s) read{}",
                read.len(),
                if bad.is_empty() {
                    String::new()
                } else {
                    format!(
                        "; denied: {}",
                        bad.iter()
                            .map(|s| s.name.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                }
            );
            if !bad.is_empty() {
                f.status = Status::Info;
            }
        }
        (None, Some(why)) if !ctx.snap.live => {
            // A captured tree without a kernel log: nothing to read, nothing denied.
            f.status = Status::Skip;
            f.summary = format!("no kernel log in this tree ({why})");
        }
        (None, Some(why)) => {
            f.status = Status::Info;
            f.summary = format!(
                "no kernel messages could be read, so {} cannot see kernel log lines ({why})",
                KERNEL_LOG_CHECKS.join(", ")
            );
            if ctx.snap.live {
                f.remedy = "let the agent read the kernel log: ProtectKernelLogs=no and CAP_SYSLOG in the unit (kernel.dmesg_restrict=1), or install the journal/rsyslog".into();
            }
        }
        (None, None) => {}
    }
    for s in bad.iter().take(8) {
        f.push_evidence(&s.name, None, reason(s));
    }
    // Where workload discovery stopped at a bound, the silence of what it did not read is no
    // health: say so.
    let notes = &ctx.snap.workloads.notes;
    if !notes.is_empty() {
        f = f.observed("discovery_notes", notes.clone());
        f.summary = format!(
            "{}{}workload discovery was bounded: {}",
            f.summary,
            if f.summary.is_empty() { "" } else { "; " },
            notes.join("; ")
        );
        if f.status.severity() < Status::Info.severity() {
            f.status = Status::Info;
        }
    }
    f
}

/// The checks whose faults show only in the kernel and device logs: in a view without logs
/// and without the host's configuration (a container given only `/proc`, `/sys`, `/dev`), their
/// pass becomes a skip (and `memory.oom`'s where a workload runs whose logs are out of view).
const LOG_ONLY_FAULTS: &[&str] = &[
    "hailo.pci_device",
    "hailo.driver_binding",
    "hailo.device_degraded",
];

/// The checks that still judge without logs, on less evidence (a `fail` the logs prove may
/// read `warn`): in a view without logs their findings say so.
const LESS_EVIDENCE: &[&str] = &[
    "memory.oom",
    "limits.nofile",
    "rknpu.driver_version",
    "rknpu.device_node",
];

/// Appends the reason to every passing kernel-log check when no kernel messages were read; in a
/// view with no `/var/log` and none of the host's configuration, [`LOG_ONLY_FAULTS`] skip and
/// the findings of [`LESS_EVIDENCE`] say they were judged without logs.
pub(super) fn annotate_blind_checks(ctx: &Ctx<'_>, findings: &mut [Finding]) {
    let Some(why) = kernel_log_unavailable(ctx) else {
        return;
    };
    let logless = ctx.snap.host_config_unseen() && ctx.snap.unseen("/var/log");
    // A running workload whose logs are out of view: its ENOMEM lines cannot be seen either.
    let workload_running = ctx.snap.processes.as_ref().is_ok_and(|p| !p.is_empty());
    for f in findings
        .iter_mut()
        .filter(|f| {
            LOG_ONLY_FAULTS.contains(&f.id.as_str()) || (f.id == "memory.oom" && workload_running)
        })
        .filter(|f| logless && f.status == Status::Pass)
    {
        f.status = Status::Skip;
        f.summary = format!("{}; but no kernel or device log could be read ({why}) and this view holds no /var/log, /etc, /boot or /var/lib/dpkg (a container given only /proc, /sys and /dev?): the probe failures and device-side faults the verdict needs are in those logs", f.summary);
        f.observed.insert("kernel_log".into(), "unavailable".into());
    }
    for f in findings
        .iter_mut()
        .filter(|f| KERNEL_LOG_CHECKS.contains(&f.id.as_str()) && f.status == Status::Pass)
    {
        f.summary
            .push_str(&format!(" (kernel log not read: {why})"));
        f.observed.insert("kernel_log".into(), "unavailable".into());
    }
    for f in findings
        .iter_mut()
        .filter(|f| logless && LESS_EVIDENCE.contains(&f.id.as_str()))
        .filter(|f| matches!(f.status, Status::Info | Status::Warn | Status::Fail))
    {
        f.summary = format!("{} (judged without logs: no kernel or workload log can be read here ({why}) and this view holds no /var/log, /etc, /boot or /var/lib/dpkg)", f.summary);
        f.observed.insert("kernel_log".into(), "unavailable".into());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn src(name: &str, detail: &str) -> LogSource {
        LogSource {
            name: name.into(),
            class: LogClass::Kernel,
            state: SourceState::Missing,
            detail: detail.into(),
            lines: 0,
        }
    }

    #[test]
    fn a_source_reason_does_not_repeat_the_source_name() {
        let file = src("/var/log/kern.log", "/var/log/kern.log: not found");
        assert_eq!(reason(&file), "not found");
        let journal = src(
            "journal:_TRANSPORT=kernel",
            "no /var/log/journal in this tree",
        );
        assert_eq!(reason(&journal), "no /var/log/journal in this tree");
        // A name that is only a prefix of the detail's first word is not stripped.
        let other = src("/var/log/kern", "/var/log/kern.log: not found");
        assert_eq!(reason(&other), "/var/log/kern.log: not found");
    }

    #[test]
    fn hailo_checks_skip_in_a_view_without_logs_or_host_files() {
        use crate::check::testkit::{one, Board};
        let board = || {
            Board::new()
                .pci(0x1e60, 0x2864, Some("hailo"))
                .module("hailo_pci", Some("4.20.0"))
        };
        let blind = board()
            .unseen("/etc")
            .unseen("/boot")
            .unseen("/var/lib/dpkg")
            .unseen("/var/log")
            .build();
        for id in LOG_ONLY_FAULTS {
            let f = one("rpi5-hailo8", &blind, id);
            assert_eq!(f.status, Status::Skip, "{id}: {}", f.summary);
            assert!(
                f.summary.contains("no kernel or device log could be read"),
                "{}",
                f.summary
            );
            assert!(
                f.summary.contains("no /var/log, /etc, /boot"),
                "{}",
                f.summary
            );
        }
        // /var/log there (a tree whose logs hold nothing about the chip): the passes stand.
        let logs = board()
            .unseen("/etc")
            .unseen("/boot")
            .unseen("/var/lib/dpkg")
            .build();
        for id in LOG_ONLY_FAULTS {
            assert_eq!(one("rpi5-hailo8", &logs, id).status, Status::Pass, "{id}");
        }
    }

    #[test]
    fn findings_judged_without_logs_say_so() {
        use crate::check::testkit::{one, Board, MIB};
        let low = || {
            Board::new().meminfo(8192 * MIB, 6144 * MIB, None).process(
                11,
                "rkllm_server",
                Some(1024),
                None,
            )
        };
        let blind = low()
            .unseen("/etc")
            .unseen("/boot")
            .unseen("/var/lib/dpkg")
            .unseen("/var/log")
            .build();
        let f = one("rk3588-rknpu", &blind, "limits.nofile");
        assert_eq!(f.status, Status::Warn, "{}", f.summary);
        assert!(f.summary.contains("judged without logs"), "{}", f.summary);
        let f = one("rk3588-rknpu", &blind, "memory.oom");
        assert_eq!(f.status, Status::Skip, "{}", f.summary);
        assert!(
            f.summary.contains("no kernel or device log could be read"),
            "{}",
            f.summary
        );
        // With /var/log in the view (logs that say nothing): no such note.
        let f = one("rk3588-rknpu", &low().build(), "limits.nofile");
        assert!(!f.summary.contains("judged without logs"), "{}", f.summary);
        assert_eq!(
            one("rk3588-rknpu", &low().build(), "memory.oom").status,
            Status::Pass
        );
    }
}
