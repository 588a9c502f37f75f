//! `limits.nofile` and `limits.memlock`: the limits the NPU workloads really run with
//! (`/proc/<pid>/limits`), against the profile and against what is configured.

use super::{Ctx, Finding, LogHit, Status};
use crate::model::remedy::{Remedy, Step};
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

/// Why no workload's limits were read: none runs, or (a workload found by its container, unit
/// or log, say in a captured tree without `/proc`) none of its processes is in this view. The
/// latter must not read as "no workload", which `board.identity` contradicts.
fn no_running_workload(ctx: &Ctx<'_>) -> String {
    let found = &ctx.snap.workloads.workloads;
    if found.is_empty() {
        return format!(
            "no NPU workload is running (looked for: {})",
            workload_names(ctx)
        );
    }
    let labels: Vec<String> = found.iter().take(3).map(|w| w.label()).collect();
    let how = found
        .iter()
        .find_map(|w| match &w.place {
            crate::model::workload::Place::Container { engine, .. } => {
                // The CRI has no one CLI name: crictl is the one its runtimes document.
                let cli = if engine == "cri" {
                    "crictl"
                } else {
                    engine.as_str()
                };
                Some(format!(
                    "; `{cli} exec {} cat /proc/1/limits` shows a container's",
                    w.name
                ))
            }
            _ => None,
        })
        .unwrap_or_default();
    format!(
        "no running process of the NPU workload found ({}) is in this view, so its limits \
         cannot be read here{how}",
        labels.join(", ")
    )
}

fn unit_hint(ctx: &Ctx<'_>) -> String {
    ctx.profile
        .limits
        .units
        .first()
        .cloned()
        .unwrap_or_else(|| "<workload>.service".into())
}

/// The workload's systemd service when the board says which: the service a workload process
/// runs in (its cgroup), else a profile unit whose file sets the `item` limit. `None` when only
/// the profile's guess (or the `<workload>.service` placeholder) is left.
fn known_unit(ctx: &Ctx<'_>, item: &str) -> Option<String> {
    workload_procs(ctx)
        .iter()
        .find_map(|p| p.unit.clone())
        .or_else(|| {
            ctx.snap
                .configured_limits
                .iter()
                .filter(|c| c.item == item)
                .find_map(|c| c.scope.strip_prefix("unit:").map(str::to_string))
        })
}

/// Sets a limit remedy: a drop-in for the known unit with `key=value` under `[Service]`,
/// daemon-reload and a restart of the unit as steps (the text of `note` before them); without a
/// known unit, or where `/etc` is not the board's own, the `text` only.
fn with_limit_remedy(
    ctx: &Ctx<'_>,
    f: Finding,
    item: &str,
    (key, value): (&str, &str),
    note: &str,
    text: String,
) -> Finding {
    if let Some(c) = workload_container(ctx, &f) {
        // A container's limits are its engine's: the host's systemd never reaches them.
        let flag = match item {
            "memlock" => "memlock=-1:-1",
            _ => "nofile=65536:65536",
        };
        return f.remedy(format!(
            "raise the limit of {c}: recreate it with --ulimit {flag} (docker or podman run; in compose: ulimits: {}), the host's unit files and ulimit do not reach a container",
            match item {
                "memlock" => "memlock: -1",
                _ => "nofile: 65536",
            }
        ));
    }
    let Some(unit) = known_unit(ctx, item).filter(|_| ctx.stack.etc_takes_files()) else {
        return f.remedy(text);
    };
    f.with_fix(
        Remedy::of(vec![
            Step::UnitDropIn {
                unit: unit.clone(),
                // After `override.conf` (what `systemctl edit` writes), so a lower value there
                // does not win over this one.
                file: format!("zz-npu-agent-{item}.conf"),
                section: "Service".into(),
                settings: vec![(key.into(), value.into())],
            },
            Step::DaemonReload,
            Step::RestartUnit { unit },
        ])
        .with_note(note),
    )
}

/// The container that runs the workload a limit finding is about: one of its processes runs
/// in a container, or its evidence lines come from a container's log.
fn workload_container(ctx: &Ctx<'_>, f: &Finding) -> Option<String> {
    let workloads = &ctx.snap.workloads.workloads;
    let by_log = f.evidence.iter().find_map(|e| {
        workloads
            .iter()
            .find(|w| w.in_container() && w.logs.contains(&e.file))
    });
    if let Some(w) = by_log {
        return Some(format!("the {}", w.label()));
    }
    workload_procs(ctx)
        .iter()
        .find(|p| p.container.is_some())
        .map(|p| {
            format!(
                "the {} container that runs {} (pid {})",
                p.container.as_deref().unwrap_or("container"),
                p.comm,
                p.pid
            )
        })
}

/// Host-side log lines with an event matching `pred`.
fn hits<'a>(ctx: &'a Ctx<'_>, pred: impl Fn(&LogEvent) -> bool) -> Vec<&'a LogHit> {
    ctx.logs.host(pred).map(|(h, _)| h).collect()
}

/// The workload processes found (none when the process table could not be read).
fn workload_procs<'a>(ctx: &'a Ctx<'_>) -> &'a [ProcessInfo] {
    ctx.snap
        .processes
        .as_ref()
        .map(|p| p.as_slice())
        .unwrap_or(&[])
}

/// Said before the steps of the open-file limit's fix.
const NOFILE_NOTE: &str = "raise the service's open-file limit (started from a shell instead: ulimit -n 65536 before it; a shell's ulimit never reaches a service)";

/// Said before the steps of the locked-memory limit's fix.
const MEMLOCK_NOTE: &str = "raise the service's locked-memory limit (or DefaultLimitMEMLOCK= in /etc/systemd/system.conf for every service), then verify in /proc/<pid>/limits";

fn nofile(ctx: &Ctx<'_>) -> Finding {
    let id = "limits.nofile";
    let min = ctx.profile.limits.min_nofile;
    let emfile = hits(ctx, |e| matches!(e, LogEvent::Errno { errno: 24 }));
    let enfile = hits(ctx, |e| matches!(e, LogEvent::Errno { errno: 23 }));
    let unit = unit_hint(ctx);
    let remedy = format!(
        "for a service: sudo systemctl edit {unit} → [Service] LimitNOFILE=65536, then restart it; from a shell: ulimit -n 65536 before starting the workload (a shell's ulimit never reaches a service)"
    );
    let mut f = Finding::new(id, Status::Pass, "").expected("nofile_soft", min);
    let mut low = Vec::new();
    let procs = workload_procs(ctx);
    let seen = nofile_per_process(procs, min, &mut f, &mut low);
    f = f.observed("workloads", seen.clone());
    f = file_table(ctx, f, &mut low);
    low_unit_nofile(ctx, min, &mut f, &mut low);
    if !enfile.is_empty() {
        f.status = Status::Fail;
        f.summary = format!(
            "the system-wide file table ran out (errno 23, ENFILE) in {} log line(s); RKNN turns every buffer into an fd",
            enfile.len()
        );
        let f = f.with_hits(enfile);
        if !ctx.stack.etc_takes_files() {
            return f.remedy("raise fs.file-max (2097152) the way this OS sets sysctls");
        }
        return f.with_fix(
            Remedy::of(vec![Step::Sysctl {
                key: "fs.file-max".into(),
                value: "2097152".into(),
                file: "99-npu-agent-file-max.conf".into(),
            }])
            .with_note("raise fs.file-max"),
        );
    }
    if !emfile.is_empty() {
        f.status = Status::Fail;
        f.summary = format!(
            "the NPU workload ran out of file descriptors (errno 24, EMFILE) in {} log line(s){}; RKNN turns every buffer into an fd and fails near the 1024 default",
            emfile.len(),
            if low.is_empty() { String::new() } else { format!("; {}", low.join("; ")) }
        );
        let f = f.with_hits(emfile);
        return with_limit_remedy(
            ctx,
            f,
            "nofile",
            ("LimitNOFILE", "65536"),
            NOFILE_NOTE,
            remedy,
        );
    }
    if !low.is_empty() {
        f.status = Status::Warn;
        f.summary = format!("open-file limit below {min}: {}", low.join("; "));
        return with_limit_remedy(
            ctx,
            f,
            "nofile",
            ("LimitNOFILE", "65536"),
            NOFILE_NOTE,
            remedy,
        );
    }
    nofile_quiet(ctx, f, procs, &seen, min)
}

/// Each workload's soft `nofile` (`comm[pid]=value`); those below `min` go to `low` with their
/// `/proc/<pid>/limits` line as evidence.
fn nofile_per_process(
    procs: &[ProcessInfo],
    min: u64,
    f: &mut Finding,
    low: &mut Vec<String>,
) -> Vec<String> {
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
    seen
}

/// Observes the system file table and adds to `low` when it is at least 90% full.
fn file_table(ctx: &Ctx<'_>, mut f: Finding, low: &mut Vec<String>) -> Finding {
    let Ok(nr) = &ctx.snap.file_nr else { return f };
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
    f
}

/// The drop-in file name of a configured line (`zz-npu-agent-nofile.conf`), `None` for a unit
/// file or another scope's file.
fn dropin_name(c: &ConfiguredLimit) -> Option<&str> {
    c.file
        .rsplit_once('/')
        .filter(|(dir, _)| dir.ends_with(".d"))
        .map(|(_, name)| name)
}

/// The lines systemd applies: per unit and item, the unit file's last line (of the first of
/// /etc, /lib, /usr/lib that sets it, as probed in that order), overridden by the drop-ins in
/// file-name order (a name in /etc masks the same name below); other scopes as they are.
fn effective_limits(all: &[ConfiguredLimit]) -> Vec<&ConfiguredLimit> {
    let mut out: Vec<&ConfiguredLimit> = Vec::new();
    for c in all {
        let at = c.scope.starts_with("unit:").then(|| {
            out.iter()
                .position(|o| o.scope == c.scope && o.item == c.item)
        });
        let Some(Some(i)) = at else {
            out.push(c);
            continue;
        };
        let replace = match (dropin_name(c), dropin_name(out[i])) {
            (Some(n), Some(m)) => n > m || (n == m && c.file == out[i].file),
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (None, None) => c.file == out[i].file,
        };
        if replace {
            out[i] = c;
        }
    }
    out
}

/// Units configured with `LimitNOFILE=` below `min` go to `low` (the line systemd applies, not
/// one a later drop-in overrides).
fn low_unit_nofile(ctx: &Ctx<'_>, min: u64, f: &mut Finding, low: &mut Vec<String>) {
    for c in effective_limits(&ctx.snap.configured_limits)
        .into_iter()
        .filter(|c| c.item == "nofile" && c.scope.starts_with("unit:"))
    {
        if c.value.is_some_and(|v| v < min) {
            low.push(format!("{} sets {}", c.file, c.text));
            f.push_evidence(&c.file, Some(c.line), &c.text);
        }
    }
}

/// The `limits.nofile` verdict when no log error and no low limit was found: skip without
/// processes, error when a process's limits are unreadable, else pass.
fn nofile_quiet(
    ctx: &Ctx<'_>,
    mut f: Finding,
    procs: &[ProcessInfo],
    seen: &[String],
    min: u64,
) -> Finding {
    let id = "limits.nofile";
    if let Err(e) = &ctx.snap.processes {
        return Finding::skip(id, format!("cannot list processes: {e}"));
    }
    if procs.is_empty() {
        return Finding::skip(
            id,
            match ctx.snap.workloads.workloads.is_empty() {
                true => format!(
                    "{} and no open-file errors in the logs",
                    no_running_workload(ctx)
                ),
                false => format!(
                    "no open-file errors in the logs; {}",
                    no_running_workload(ctx)
                ),
            },
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

/// What the memlock scan of the workloads found.
#[derive(Default)]
struct MemlockScan {
    /// `comm[pid]=soft` per readable process.
    seen: Vec<String>,
    /// Sentences for the warn summary.
    problems: Vec<String>,
    /// Processes whose limits could not be read.
    unreadable: Vec<String>,
}

/// The setting the locked-memory fix writes.
const MEMLOCK: (&str, &str) = ("LimitMEMLOCK", "infinity");

fn memlock(ctx: &Ctx<'_>) -> Finding {
    let id = "limits.memlock";
    let min = ctx.profile.limits.min_memlock_bytes;
    let mlock_fail = hits(ctx, |e| matches!(e, LogEvent::MlockFail));
    let unit = unit_hint(ctx);
    let mut f = Finding::new(id, Status::Pass, "");
    if min > 0 {
        f = f.expected("memlock_soft_bytes", min);
    }
    let (mut f, scan) = memlock_scan(ctx, min, f);
    let remedy = format!(
        "sudo systemctl edit {unit} → [Service] LimitMEMLOCK=infinity (or DefaultLimitMEMLOCK= in /etc/systemd/system.conf), restart it, and verify in /proc/<pid>/limits"
    );
    if !mlock_fail.is_empty() {
        f.status = Status::Fail;
        f.summary = format!(
            "mlock failed in {} log line(s): the locked-memory limit is too low",
            mlock_fail.len()
        );
        let f = f.with_hits(mlock_fail);
        return with_limit_remedy(ctx, f, "memlock", MEMLOCK, MEMLOCK_NOTE, remedy);
    }
    if !scan.problems.is_empty() {
        f.status = Status::Warn;
        f.summary = scan.problems.join("; ");
        return with_limit_remedy(ctx, f, "memlock", MEMLOCK, MEMLOCK_NOTE, remedy);
    }
    if let Err(e) = &ctx.snap.processes {
        return Finding::skip(id, format!("cannot list processes: {e}"));
    }
    if !scan.unreadable.is_empty() {
        f.status = Status::Error;
        f.summary = format!("cannot read the limits of {}", scan.unreadable.join("; "));
        return f;
    }
    if scan.seen.is_empty() {
        return Finding::skip(id, no_running_workload(ctx));
    }
    f.summary = format!(
        "locked-memory limits (bytes; neither rknpu nor HailoRT needs more): {}",
        scan.seen.join(", ")
    );
    super::unseen::unless_unseen(ctx, f, "/etc", "the systemd units, system.conf and limits.conf cannot be read, and the verdict needs them to tell whether a configured limit is not in effect")
}

/// Each workload's soft memlock (bytes) against the configured limits and `min`; observations
/// and evidence go to `f`, returned with the scan.
fn memlock_scan(ctx: &Ctx<'_>, min: u64, mut f: Finding) -> (Finding, MemlockScan) {
    let mut scan = MemlockScan::default();
    let configured: Vec<&ConfiguredLimit> = effective_limits(&ctx.snap.configured_limits)
        .into_iter()
        .filter(|c| c.item == "memlock")
        .collect();
    for p in workload_procs(ctx) {
        let l = match &p.limits {
            Ok(l) => l,
            Err(e) => {
                scan.unreadable
                    .push(format!("{} (pid {}): {e}", p.comm, p.pid));
                continue;
            }
        };
        let eff = l.memlock_bytes.soft;
        let path = format!("/proc/{}/limits", p.pid);
        scan.seen
            .push(format!("{}[{}]={}", p.comm, p.pid, show(eff)));
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
        for c in configured.iter().filter(|c| below(c.value)) {
            scan.problems.push(memlock_conflict(p, eff, c));
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
        if min > 0 && below(Some(min)) {
            scan.problems.push(format!(
                "{} (pid {}) has Max locked memory {} bytes, below {min}",
                p.comm,
                p.pid,
                show(eff)
            ));
            f.push_evidence(&path, None, &format!("Max locked memory {}", show(eff)));
        }
    }
    (f, scan)
}

/// A process running below a configured memlock line, and why the line did not reach it.
fn memlock_conflict(p: &ProcessInfo, eff: Option<u64>, c: &ConfiguredLimit) -> String {
    let why = if c.scope.starts_with("pam:") {
        "limits.conf applies only to PAM logins (ssh, login, sudo), never to services"
    } else {
        "the running process predates the setting or another unit starts it"
    };
    format!(
        "{} (pid {}) runs with Max locked memory {} bytes although {} line {} says `{}`: {why}",
        p.comm,
        p.pid,
        show(eff),
        c.file,
        c.line,
        c.text
    )
}

#[cfg(test)]
mod tests {
    use crate::check::testkit::{one, Board};
    use crate::model::{LogClass, Status};

    #[test]
    fn nofile_verdicts() {
        let table = [
            (
                Board::new().process(10, "hailortcli", Some(4096), None),
                "rpi5-hailo8",
                Status::Pass,
                "open-file limits are at least 1024: hailortcli[10]=4096",
            ),
            (
                Board::new()
                    .process(11, "rkllm_server", Some(1024), None)
                    .configured_limit(
                        "/etc/systemd/system/rkllm.service",
                        "nofile",
                        Some(1024),
                        "unit:rkllm.service",
                    ),
                "rk3588-rknpu",
                Status::Warn,
                "open-file limit below 65536: rkllm_server (pid 11) runs with Max open files 1024",
            ),
            (
                Board::new().log(
                    "/var/log/kern.log",
                    LogClass::Kernel,
                    &["rkllm: Too many open files"],
                ),
                "rk3588-rknpu",
                Status::Fail,
                "ran out of file descriptors (errno 24, EMFILE)",
            ),
            (
                Board::new().no_processes(),
                "rk3588-rknpu",
                Status::Skip,
                "no NPU workload is running",
            ),
            (
                Board::new(),
                "rk3588-rknpu",
                Status::Skip,
                "cannot list processes",
            ),
        ];
        for (board, profile, status, summary) in table {
            let f = one(profile, &board.build(), "limits.nofile");
            assert_eq!(f.status, status, "{}", f.summary);
            assert!(f.summary.contains(summary), "{}", f.summary);
            if status == Status::Warn {
                assert!(f.remedy.contains("LimitNOFILE=65536"), "{}", f.remedy);
            }
        }
    }

    /// A workload found by its container (a captured tree has no /proc) is named, not denied.
    #[test]
    fn a_container_workload_without_its_process_is_named_not_denied() {
        use crate::model::workload::{Place, Workload};
        let mut snap = Board::new().no_processes().build();
        snap.workloads.workloads.push(Workload {
            name: "frigate".into(),
            app: Some("frigate".into()),
            app_name: Some("Frigate".into()),
            place: Place::Container {
                engine: "docker".into(),
                id: "4f2a".into(),
                image: "ghcr.io/blakeblackshear/frigate:stable".into(),
                addon: false,
            },
            why: "docker container frigate".into(),
            bundles_runtime: true,
            logs: Vec::new(),
            npu_context: Vec::new(),
            models: Vec::new(),
        });
        for id in ["limits.nofile", "limits.memlock"] {
            let f = one("rpi5-hailo8", &snap, id);
            assert_eq!(f.status, Status::Skip, "{}", f.summary);
            assert!(
                !f.summary.contains("no NPU workload is running"),
                "{}",
                f.summary
            );
            assert!(
                f.summary.contains("Frigate (docker container frigate)")
                    && f.summary
                        .contains("`docker exec frigate cat /proc/1/limits`"),
                "{}",
                f.summary
            );
        }
    }

    #[test]
    fn memlock_verdicts() {
        let unit = "/etc/systemd/system/rkllm.service";
        let table = [
            (
                Board::new().process(11, "rkllm_server", Some(65536), Some(65536)),
                Status::Pass,
                "locked-memory limits (bytes; neither rknpu nor HailoRT needs more): rkllm_server[11]=65536",
            ),
            (
                Board::new()
                    .process(11, "rkllm_server", Some(65536), Some(65536))
                    .configured_limit(unit, "memlock", None, "unit:rkllm.service"),
                Status::Warn,
                "although /etc/systemd/system/rkllm.service line 1 says",
            ),
            (Board::new().no_processes(), Status::Skip, "no NPU workload is running"),
        ];
        for (board, status, summary) in table {
            let f = one("rk3588-rknpu", &board.build(), "limits.memlock");
            assert_eq!(f.status, status, "{}", f.summary);
            assert!(f.summary.contains(summary), "{}", f.summary);
            if status == Status::Warn {
                assert!(f.remedy.contains("LimitMEMLOCK=infinity"), "{}", f.remedy);
            }
        }
    }

    /// Found on the booted image: a drop-in raising the limit overrides the unit file's low line,
    /// as systemd applies it; a later-named drop-in wins, and one in /etc masks the same name below.
    #[test]
    fn the_limit_systemd_applies_is_judged_not_an_overridden_line() {
        let unit = "/etc/systemd/system/rkllm-server.service";
        let d = |dir: &str, name: &str| format!("{dir}/rkllm-server.service.d/{name}");
        let scope = "unit:rkllm-server.service";
        let board = |lines: &[(String, u64)]| {
            let mut b = Board::new()
                .os("debian", "Armbian 24.11 bookworm")
                .process(11, "rkllm_server", Some(65536), Some(65536))
                .in_unit("rkllm-server.service");
            for (file, v) in lines {
                b = b.configured_limit(file, "nofile", Some(*v), scope);
            }
            b.build()
        };
        let status =
            |lines: &[(String, u64)]| one("rk3588-rknpu", &board(lines), "limits.nofile").status;
        let etc = "/etc/systemd/system";
        let usr = "/usr/lib/systemd/system";
        assert_eq!(status(&[(unit.into(), 1024)]), Status::Warn);
        assert_eq!(
            status(&[
                (unit.into(), 1024),
                (d(etc, "zz-npu-agent-nofile.conf"), 65536)
            ]),
            Status::Pass
        );
        assert_eq!(
            status(&[
                (unit.into(), 65536),
                (d(etc, "10-a.conf"), 65536),
                (d(etc, "20-b.conf"), 1024)
            ]),
            Status::Warn
        );
        assert_eq!(
            status(&[(d(etc, "50-x.conf"), 65536), (d(usr, "50-x.conf"), 1024)]),
            Status::Pass
        );
        assert_eq!(
            status(&[
                (unit.into(), 65536),
                (format!("{usr}/rkllm-server.service"), 1024)
            ]),
            Status::Pass
        );
    }

    #[test]
    fn a_known_unit_gets_a_drop_in_and_a_restart() {
        use crate::model::remedy::Step;
        let low = Board::new()
            .os("debian", "Armbian 24.11 bookworm")
            .process(11, "rkllm_server", Some(1024), Some(65536))
            .in_unit("rkllm-server.service")
            .build();
        let f = one("rk3588-rknpu", &low, "limits.nofile");
        assert_eq!(f.status, Status::Warn, "{}", f.summary);
        let fix = f.fix.expect("a typed fix");
        assert_eq!(
            fix.steps,
            vec![
                Step::UnitDropIn {
                    unit: "rkllm-server.service".into(),
                    file: "zz-npu-agent-nofile.conf".into(),
                    section: "Service".into(),
                    settings: vec![("LimitNOFILE".into(), "65536".into())],
                },
                Step::DaemonReload,
                Step::RestartUnit {
                    unit: "rkllm-server.service".into()
                },
            ]
        );
        assert!(f.remedy.contains("LimitNOFILE=65536"), "{}", f.remedy);
        assert!(
            f.remedy
                .contains("sudo systemctl restart rkllm-server.service"),
            "{}",
            f.remedy
        );
        // A unit file that sets the limit names the unit too.
        let unit = "/etc/systemd/system/rkllm.service";
        let configured = Board::new()
            .process(11, "rkllm_server", Some(65536), Some(65536))
            .configured_limit(unit, "memlock", Some(65536), "unit:rkllm.service")
            .configured_limit("/etc/security/limits.conf", "memlock", None, "pam:*");
        let f = one("rk3588-rknpu", &configured.build(), "limits.memlock");
        assert_eq!(f.status, Status::Warn, "{}", f.summary);
        let fix = f.fix.expect("a typed fix");
        assert!(
            matches!(&fix.steps[0], Step::UnitDropIn { unit, settings, .. }
                if unit == "rkllm.service" && settings[0] == ("LimitMEMLOCK".to_string(), "infinity".to_string())),
            "{:?}",
            fix.steps
        );
        // Only the profile's guess: the text names it, no automatic fix.
        let guess = Board::new().process(11, "rkllm_server", Some(1024), None);
        let f = one("rk3588-rknpu", &guess.build(), "limits.nofile");
        assert_eq!(f.status, Status::Warn, "{}", f.summary);
        assert!(f.fix.is_none(), "{:?}", f.fix);
        assert!(f.remedy.contains("rkllm.service"), "{}", f.remedy);
    }

    #[test]
    fn a_full_file_table_raises_file_max_by_sysctl() {
        let full = || {
            Board::new().log(
                "/var/log/kern.log",
                LogClass::Kernel,
                &["failed to allocate handle, ret: -1, errno: 23, errstr: Too many open files in system"],
            )
        };
        let f = one("rk3588-rknpu", &full().build(), "limits.nofile");
        assert_eq!(f.status, Status::Fail, "{}", f.summary);
        check_file_max(&f);
        let haos = full().os("haos", "Home Assistant OS 15.0").build();
        let f = one("rk3588-rknpu", &haos, "limits.nofile");
        assert!(f.fix.is_none(), "{:?}", f.fix);
    }

    fn check_file_max(f: &crate::model::Finding) {
        use crate::model::remedy::Step;
        assert!(f.summary.contains("ENFILE"), "{}", f.summary);
        let fix = f.fix.as_ref().expect("a typed fix");
        assert_eq!(
            fix.steps,
            vec![Step::Sysctl {
                key: "fs.file-max".into(),
                value: "2097152".into(),
                file: "99-npu-agent-file-max.conf".into(),
            }]
        );
    }
}
