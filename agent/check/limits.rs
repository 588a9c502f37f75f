//! `limits.nofile` and `limits.memlock`: the limits the NPU workloads really run with
//! (`/proc/<pid>/limits`), against the profile and against what is configured.

use super::{Ctx, Finding, LogHit, Status};
use crate::model::{ConfiguredLimit, ProcessInfo};
use crate::parse::limits::show;
use crate::parse::logline::LogEvent;

pub(super) fn all(ctx: &Ctx<'_>) -> Vec<Finding> {
    vec![nofile(ctx), memlock(ctx)]
}

fn workload_names(ctx: &Ctx<'_>) -> String {
    if ctx.profile.limits.workloads.is_empty() {
        format!("none: profile {} names no workload process", ctx.profile.id)
    } else {
        ctx.profile.limits.workloads.join(", ")
    }
}

fn unit_hint(ctx: &Ctx<'_>) -> String {
    ctx.profile
        .limits
        .units
        .first()
        .cloned()
        .unwrap_or_else(|| "<workload>.service".into())
}

fn nofile(ctx: &Ctx<'_>) -> Finding {
    let id = "limits.nofile";
    let min = ctx.profile.limits.min_nofile;
    let emfile: Vec<&LogHit> = ctx
        .logs
        .host(|e| matches!(e, LogEvent::Errno { errno: 24 }))
        .map(|(h, _)| h)
        .collect();
    let enfile: Vec<&LogHit> = ctx
        .logs
        .host(|e| matches!(e, LogEvent::Errno { errno: 23 }))
        .map(|(h, _)| h)
        .collect();
    let unit = unit_hint(ctx);
    let remedy = format!(
        "for a service: sudo systemctl edit {unit} → [Service] LimitNOFILE=65536, then restart it; from a shell: ulimit -n 65536 before starting the workload (a shell's ulimit never reaches a service)"
    );
    let mut f = Finding::new(id, Status::Pass, "").expected("nofile_soft", min);
    let mut low = Vec::new();
    let procs: &[ProcessInfo] = ctx
        .snap
        .processes
        .as_ref()
        .map(|p| p.as_slice())
        .unwrap_or(&[]);
    let mut seen = Vec::new();
    for p in procs {
        let path = format!("/proc/{}/limits", p.pid);
        match &p.limits {
            Ok(l) => {
                seen.push(format!("{}[{}]={}", p.comm, p.pid, show(l.nofile.soft)));
                if l.nofile.soft.is_some_and(|s| s < min) {
                    low.push(format!(
                        "{} (pid {}) runs with Max open files {} (hard {})",
                        p.comm,
                        p.pid,
                        show(l.nofile.soft),
                        show(l.nofile.hard)
                    ));
                    f.push_evidence(
                        &path,
                        None,
                        &format!(
                            "Max open files {} {}",
                            show(l.nofile.soft),
                            show(l.nofile.hard)
                        ),
                    );
                }
            }
            Err(e) => {
                seen.push(format!("{}[{}]=?", p.comm, p.pid));
                f.push_evidence(&path, None, &e.detail);
            }
        }
    }
    f = f.observed("workloads", seen.clone());
    if let Ok(nr) = &ctx.snap.file_nr {
        f = f
            .observed("file_handles_allocated", nr.allocated)
            .observed("file_max", nr.max);
        if nr.max > 0 && nr.allocated.saturating_mul(10) >= nr.max.saturating_mul(9) {
            low.push(format!(
                "the system file table is {}% full ({} of {})",
                nr.allocated * 100 / nr.max,
                nr.allocated,
                nr.max
            ));
            f.push_evidence(
                "/proc/sys/fs/file-nr",
                None,
                &format!("{} {}", nr.allocated, nr.max),
            );
        }
    }
    for c in ctx
        .snap
        .configured_limits
        .iter()
        .filter(|c| c.item == "nofile" && c.scope.starts_with("unit:"))
    {
        if c.value.is_some_and(|v| v < min) {
            low.push(format!("{} sets {}", c.file, c.text));
            f.push_evidence(&c.file, Some(c.line), &c.text);
        }
    }
    if !enfile.is_empty() {
        f.status = Status::Fail;
        f.summary = format!(
            "the system-wide file table ran out (errno 23, ENFILE) in {} log line(s); RKNN turns every buffer into an fd",
            enfile.len()
        );
        return f.with_hits(enfile).remedy("raise fs.file-max: echo 'fs.file-max = 2097152' | sudo tee /etc/sysctl.d/90-npu.conf && sudo sysctl --system");
    }
    if !emfile.is_empty() {
        f.status = Status::Fail;
        f.summary = format!(
            "the NPU workload ran out of file descriptors (errno 24, EMFILE) in {} log line(s){}; RKNN turns every buffer into an fd and fails near the 1024 default",
            emfile.len(),
            if low.is_empty() { String::new() } else { format!("; {}", low.join("; ")) }
        );
        return f.with_hits(emfile).remedy(remedy);
    }
    if !low.is_empty() {
        f.status = Status::Warn;
        f.summary = format!("open-file limit below {min}: {}", low.join("; "));
        return f.remedy(remedy);
    }
    if let Err(e) = &ctx.snap.processes {
        return Finding::skip(id, format!("cannot list processes: {e}"));
    }
    if procs.is_empty() {
        return Finding::skip(
            id,
            format!(
                "no NPU workload is running (looked for: {}) and no open-file errors in the logs",
                workload_names(ctx)
            ),
        );
    }
    if let Some(p) = procs.iter().find(|p| p.limits.is_err()) {
        f.status = Status::Error;
        f.summary = format!(
            "cannot read the limits of {} (pid {}): {}",
            p.comm,
            p.pid,
            p.limits
                .as_ref()
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default()
        );
        return f;
    }
    f.summary = format!("open-file limits are at least {min}: {}", seen.join(", "));
    f
}

fn memlock(ctx: &Ctx<'_>) -> Finding {
    let id = "limits.memlock";
    let min = ctx.profile.limits.min_memlock_bytes;
    let mlock_fail: Vec<&LogHit> = ctx
        .logs
        .host(|e| matches!(e, LogEvent::MlockFail))
        .map(|(h, _)| h)
        .collect();
    let unit = unit_hint(ctx);
    let procs: &[ProcessInfo] = ctx
        .snap
        .processes
        .as_ref()
        .map(|p| p.as_slice())
        .unwrap_or(&[]);
    let mut f = Finding::new(id, Status::Pass, "");
    if min > 0 {
        f = f.expected("memlock_soft_bytes", min);
    }
    let mut seen = Vec::new();
    let mut problems = Vec::new();
    let configured: Vec<&ConfiguredLimit> = ctx
        .snap
        .configured_limits
        .iter()
        .filter(|c| c.item == "memlock")
        .collect();
    let mut unreadable = Vec::new();
    for p in procs {
        let l = match &p.limits {
            Ok(l) => l,
            Err(e) => {
                unreadable.push(format!("{} (pid {}): {e}", p.comm, p.pid));
                continue;
            }
        };
        let eff = l.memlock_bytes.soft;
        let path = format!("/proc/{}/limits", p.pid);
        seen.push(format!("{}[{}]={}", p.comm, p.pid, show(eff)));
        f = f.observed(
            &format!("memlock_soft_bytes.{}", p.pid),
            eff.map(serde_json::Value::from)
                .unwrap_or("unlimited".into()),
        );
        let below = |want: Option<u64>| match (eff, want) {
            (None, _) => false,
            (Some(_), None) => true,
            (Some(e), Some(w)) => e < w,
        };
        for c in &configured {
            if below(c.value) {
                let why = if c.scope.starts_with("pam:") {
                    "limits.conf applies only to PAM logins (ssh, login, sudo), never to services"
                } else {
                    "the running process predates the setting or another unit starts it"
                };
                problems.push(format!(
                    "{} (pid {}) runs with Max locked memory {} bytes although {} line {} says `{}`: {why}",
                    p.comm,
                    p.pid,
                    show(eff),
                    c.file,
                    c.line,
                    c.text
                ));
                f.push_evidence(&c.file, Some(c.line), &c.text);
                f.push_evidence(
                    &path,
                    None,
                    &format!(
                        "Max locked memory {} {} bytes",
                        show(eff),
                        show(l.memlock_bytes.hard)
                    ),
                );
            }
        }
        if min > 0 && below(Some(min)) {
            problems.push(format!(
                "{} (pid {}) has Max locked memory {} bytes, below {min}",
                p.comm,
                p.pid,
                show(eff)
            ));
            f.push_evidence(&path, None, &format!("Max locked memory {}", show(eff)));
        }
    }
    let remedy = format!(
        "sudo systemctl edit {unit} → [Service] LimitMEMLOCK=infinity (or DefaultLimitMEMLOCK= in /etc/systemd/system.conf), restart it, and verify in /proc/<pid>/limits"
    );
    if !mlock_fail.is_empty() {
        f.status = Status::Fail;
        f.summary = format!(
            "mlock failed in {} log line(s): the locked-memory limit is too low",
            mlock_fail.len()
        );
        return f.with_hits(mlock_fail).remedy(remedy);
    }
    if !problems.is_empty() {
        f.status = Status::Warn;
        f.summary = problems.join("; ");
        return f.remedy(remedy);
    }
    if let Err(e) = &ctx.snap.processes {
        return Finding::skip(id, format!("cannot list processes: {e}"));
    }
    if !unreadable.is_empty() {
        f.status = Status::Error;
        f.summary = format!("cannot read the limits of {}", unreadable.join("; "));
        return f;
    }
    if seen.is_empty() {
        return Finding::skip(
            id,
            format!(
                "no NPU workload is running (looked for: {})",
                workload_names(ctx)
            ),
        );
    }
    f.summary = format!(
        "locked-memory limits (bytes; neither rknpu nor HailoRT needs more): {}",
        seen.join(", ")
    );
    f
}
