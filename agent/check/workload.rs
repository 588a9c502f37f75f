//! `npu.workload`: the NPU workload's own failure lines, each accounted for. A failure is
//! **explained** when another finding that fired cites it (that finding then carries it, and a
//! warning becomes a failure: the fault is no longer potential, the jobs fail with it), or
//! reported here as **unexplained**, so a board whose workload fails is never "health OK".
//!
//! Failures whose lines name their own cause are decided here at `fail`, before any other
//! finding may claim them ([`known`]): a model (or app) built for another chip or runtime
//! release, and a Hailo held by another process while its driver is bound right.

use super::{Ctx, Finding, Status};
use crate::model::LogClass;
use crate::parse::workload::{
    class_of, is_exception, is_failure, is_kernel_npu_failure, FailureClass,
};
use crate::profile::signature::SignatureRow;

mod known;
pub(crate) use known::genai_on_hailo10h;

const ID: &str = "npu.workload";

/// Lines after a line of an app's NPU part in which the app's exceptions are its NPU failures.
const CONTEXT_LINES: usize = 40;

/// Failure lines this close together (in lines) are one failure.
const BLOCK_GAP_LINES: usize = 4;

/// One failure: consecutive error lines of one log.
#[derive(Debug, Clone)]
struct Block {
    file: String,
    /// Line numbers are known (the log was read whole).
    numbered: bool,
    /// (1-based line, text).
    lines: Vec<(usize, String)>,
}

impl Block {
    fn first(&self) -> usize {
        self.lines.first().map(|l| l.0).unwrap_or(0)
    }
    fn last(&self) -> usize {
        self.lines.last().map(|l| l.0).unwrap_or(0)
    }
    /// True when `f` explains this failure: it cites one of its lines, or it is a finding that
    /// causes failures of this class (an rknpu driver below the minimum explains jobs that never
    /// complete).
    fn explained_by(&self, f: &Finding) -> bool {
        self.cited_by(f)
            || self
                .lines
                .iter()
                .any(|(_, t)| explainers(class_of(t)).contains(&f.id.as_str()))
    }

    /// The catalog row that best names this failure: a row that points at a cause another
    /// check carries (`invalid magic` -> the runtime) before one that only says the workload
    /// failed (`failed to load model`), the newest line first within each.
    fn catalog_row(&self) -> Option<&'static SignatureRow> {
        // Memory, file-descriptor and hung-job failures have causes the checks weigh (and a
        // hint when none fires); a return code after them is their echo, not their cause.
        if self.lines.iter().any(|(_, t)| {
            matches!(
                class_of(t),
                FailureClass::NpuMemory
                    | FailureClass::FileDescriptors
                    | FailureClass::JobNeverCompleted
            )
        }) {
            return None;
        }
        let c = crate::profile::signature::catalog();
        let rows: Vec<&SignatureRow> = self
            .lines
            .iter()
            .rev()
            .filter_map(|(_, t)| c.explain(t))
            .collect();
        rows.iter()
            .find(|r| r.check != ID)
            .or_else(|| rows.first())
            .copied()
    }

    /// True when `f` cites one of this block's lines.
    fn cited_by(&self, f: &Finding) -> bool {
        f.evidence.iter().any(|e| {
            e.file == self.file
                && match e.line {
                    Some(l) => (self.first()..=self.last()).contains(&l),
                    None => self.lines.iter().any(|(_, t)| t.starts_with(&e.text)),
                }
        })
    }
}

/// The findings that cause failures of a class.
fn explainers(class: FailureClass) -> &'static [&'static str] {
    match class {
        FailureClass::JobNeverCompleted => &["rknpu.driver_version", "rknpu.runtime_library"],
        FailureClass::NpuMemory => &[
            "rknpu.driver_version",
            "cma.free",
            "cma.pool_size",
            "memory.oom",
            "limits.memlock",
        ],
        FailureClass::FileDescriptors => &["limits.nofile"],
        FailureClass::DriverOrDevice => &[
            "hailo.version_mismatch",
            "hailo.driver_binding",
            "hailo.package_generation",
            "hailo.pci_device",
            "hailo.runtime_library",
            "rknpu.driver_version",
        ],
        FailureClass::Other | FailureClass::ModelForOtherTarget => &[],
    }
}

/// A kernel line that reports an NPU job or driver failure of the workload.
fn kernel_failure(line: &str) -> bool {
    is_kernel_npu_failure(line)
        || crate::profile::signature::catalog()
            .matches(line)
            .iter()
            .any(|r| r.is_failure() && r.runtime.ends_with("-kernel"))
}

/// A workload line that reports a failure: an error line of the runtime or an app about the
/// NPU, or any line a catalog row names as a failure.
fn workload_failure(line: &str) -> bool {
    is_failure(line) || crate::profile::signature::catalog().is_failure(line)
}

/// The failure blocks of the host-side workload logs (package-manager logs left out) and the
/// kernel's NPU job failures.
fn failure_blocks(ctx: &Ctx<'_>) -> Vec<Block> {
    let mut out = Vec::new();
    for log in ctx.snap.logs.iter().filter(|l| {
        l.class == LogClass::Kernel || l.class == LogClass::Workload && !l.path.contains("/apt/")
    }) {
        let fails: fn(&str) -> bool = match log.class {
            LogClass::Kernel => kernel_failure,
            _ => workload_failure,
        };
        // Lines of the app's NPU part open a window in which its exceptions are NPU failures.
        let context: Vec<String> = ctx
            .snap
            .workloads
            .workloads
            .iter()
            .filter(|w| w.logs.contains(&log.path))
            .flat_map(|w| w.npu_context.iter().map(|c| c.to_ascii_lowercase()))
            .collect();
        let mut open_until = 0usize;
        let mut in_context = |i: usize, line: &str| {
            if !context.is_empty() {
                let lower = line.to_ascii_lowercase();
                if context.iter().any(|c| lower.contains(c.as_str())) {
                    open_until = i + CONTEXT_LINES;
                }
            }
            i <= open_until && open_until > 0
        };
        let mut cur: Option<Block> = None;
        for (i, line) in log.lines.iter().enumerate().filter(|(i, l)| {
            let open = in_context(*i, l);
            fails(l) || open && is_exception(l)
        }) {
            let n = i + 1;
            match cur.as_mut() {
                Some(b) if n - b.last() <= BLOCK_GAP_LINES => b.lines.push((n, line.clone())),
                _ => {
                    out.extend(cur.take());
                    cur = Some(Block {
                        file: log.path.clone(),
                        numbered: !log.cut,
                        lines: vec![(n, line.clone())],
                    });
                }
            }
        }
        out.extend(cur);
    }
    out
}

/// Judges the workload's failures: the known causes first ([`known`]), then the rest against the
/// other findings, raising those that explain one. Returns the `npu.workload` findings.
pub(super) fn workload(ctx: &Ctx<'_>, findings: &mut [Finding]) -> Vec<Finding> {
    let blocks = failure_blocks(ctx);
    let (mut decided, rest) = known::decide(ctx, blocks);
    if decided.is_empty() && rest.is_empty() {
        decided.extend(known::predicted_soc(ctx));
        decided.extend(known::predicted_hef(ctx));
    }
    if decided.is_empty() || !rest.is_empty() {
        let mut out = decided;
        out.push(judge(ctx, rest, findings));
        return out;
    }
    decided
}

/// The `npu.workload` finding for the failures no known pattern decided.
fn judge(ctx: &Ctx<'_>, blocks: Vec<Block>, findings: &mut [Finding]) -> Finding {
    let workload_logs = ctx
        .snap
        .logs
        .iter()
        .filter(|l| l.class == LogClass::Workload)
        .count();
    if blocks.is_empty() && workload_logs == 0 {
        return Finding::skip(ID, "no NPU workload log was read (the profile's [logs] workload files and the journal hold none) and the kernel log has no NPU job failure");
    }
    if blocks.is_empty() {
        // Hailo's decay is hailo.device_degraded's; the Rockchip NPU's is reported here.
        if ctx.profile.npu.kind == crate::profile::NpuKind::Rknpu {
            if let Some(d) = super::throughput::worst_decay(ctx) {
                return rknpu_decay(ctx, d);
            }
        }
        return Finding::new(
            ID,
            Status::Pass,
            format!("no NPU workload failure in the {workload_logs} workload log(s) read"),
        );
    }
    let mut explained = Vec::new();
    let mut cataloged: Vec<(&Block, &SignatureRow)> = Vec::new();
    let mut unexplained = Vec::new();
    for b in &blocks {
        let by: Vec<String> = findings
            .iter_mut()
            .filter(|f| f.id != ID && f.status.fires() && b.explained_by(f))
            .map(|f| carry(f, b))
            .collect();
        if !by.is_empty() {
            explained.push(by.join(", "));
            continue;
        }
        // The log outranks the rule: a row of the catalog names the cause.
        match b.catalog_row() {
            Some(row) if row.check != ID => explained.push(raise_by_row(ctx, findings, b, row)),
            Some(row) => cataloged.push((b, row)),
            None => unexplained.push(b),
        }
    }
    if !unexplained.is_empty() {
        return unexplained_finding(ctx, &unexplained, explained.len() + cataloged.len());
    }
    if !cataloged.is_empty() {
        return cataloged_finding(ctx, &cataloged, explained.len());
    }
    explained.dedup();
    Finding::new(
        ID,
        Status::Info,
        format!(
            "the NPU workload failed ({} failure(s)); explained by {}",
            blocks.len(),
            explained.join("; ")
        ),
    )
}

/// Raises the finding the catalog row `row` points to with the failure `b`: the log outranks a
/// version rule that passed it. Returns the finding's id.
fn raise_by_row(ctx: &Ctx<'_>, findings: &mut [Finding], b: &Block, row: &SignatureRow) -> String {
    let Some(f) = findings.iter_mut().find(|f| f.id == row.check) else {
        return row.check.clone();
    };
    if !f.status.fires() || f.status.severity() < row.severity.severity() {
        f.summary = format!(
            "the NPU workload failed with {}: {} — {} ({})",
            row.label(),
            row.meaning,
            row.cause,
            b.file
        );
        f.fix = None;
        f.remedy = ctx.stack.pick_remedy(&row.remedy);
        f.status = row.severity;
        f.observed.insert("signature".into(), row.id.clone().into());
    }
    carry(f, b)
}

/// `npu.workload` for failures the catalog names and no other check carries: the newest one's
/// meaning, cause and remedy for this board, at the most severe row's status.
fn cataloged_finding(
    ctx: &Ctx<'_>,
    items: &[(&Block, &SignatureRow)],
    explained: usize,
) -> Finding {
    let (b, row) = items[items.len() - 1];
    let worst = items
        .iter()
        .map(|(_, r)| r.severity)
        .max_by_key(|s| s.severity())
        .unwrap_or(row.severity);
    let others = match (items.len(), explained) {
        (1, 0) => String::new(),
        (n, e) => format!(
            "; {} failure(s) in all, {e} explained by other checks",
            n + e
        ),
    };
    let line: String = b.lines[b.lines.len() - 1]
        .1
        .trim()
        .chars()
        .take(160)
        .collect();
    let mut f = Finding::new(
        ID,
        worst,
        format!(
            "the NPU workload failed with {}: {} — {} ({}: {line:?}{others})",
            row.label(),
            row.meaning,
            row.cause,
            b.file
        ),
    )
    .observed("signature", row.id.clone())
    .observed("signature_source", row.source.clone())
    .remedy(ctx.stack.pick_remedy(&row.remedy));
    for (b, _) in items.iter().rev() {
        for (n, t) in &b.lines {
            f.push_evidence(&b.file, b.numbered.then_some(*n), t);
        }
    }
    f
}

/// Makes `f` carry the failure `b` and raises a warning to a failure. Returns `f`'s id.
fn carry(f: &mut Finding, b: &Block) -> String {
    let (n, text) = &b.lines[b.lines.len() - 1];
    f.push_evidence(&b.file, b.numbered.then_some(*n), text);
    if f.status == Status::Warn {
        f.status = Status::Fail;
        f.summary
            .push_str(&format!("; the NPU workload fails with it ({})", b.file));
    }
    f.id.clone()
}

/// The same RKNN model far slower than before; the NPU's devfreq policy says whether the clock
/// is held down (vendor benchmarks assume the NPU pinned at its highest frequency).
fn rknpu_decay(ctx: &Ctx<'_>, d: super::throughput::Decay) -> Finding {
    let sensors = &ctx.snap.sensors;
    let cur = sensors
        .npu_freq_hz
        .as_ref()
        .and_then(|f| f.value.as_ref().ok().copied());
    let policy = sensors.npu_devfreq.as_ref();
    let max = policy.and_then(|p| p.available_max_hz);
    let governor = policy.and_then(|p| p.governor.clone());
    let clock = match (cur, max) {
        (Some(c), Some(m)) => format!(
            "; the NPU clock is {} of {} MHz{}",
            c / 1_000_000,
            m / 1_000_000,
            governor
                .as_ref()
                .map(|g| format!(" (governor {g})"))
                .unwrap_or_default()
        ),
        _ => String::new(),
    };
    let held_low = matches!((cur, max), (Some(c), Some(m)) if c < m);
    let mut f = Finding::new(
        ID,
        Status::Warn,
        format!(
            "the NPU runs the same model far slower than before: {}{clock}",
            d.describe()
        ),
    )
    .observed("fps_before", d.best.0)
    .observed("fps_now", d.latest.0)
    .evidence(&d.file, Some(d.best.1), &format!("{} FPS", d.best.0))
    .evidence(&d.file, Some(d.latest.1), &format!("{} FPS", d.latest.0));
    if let Some(p) = policy {
        f.push_evidence(&p.dir, None, governor.as_deref().unwrap_or(""));
    }
    f.remedy(if held_low {
        "the NPU clock is below its maximum: compare with the board's thermal zones (board.thermal) and pin it for a benchmark (echo performance | sudo tee /sys/class/devfreq/<npu>/governor); if it stays slow at the maximum clock, check the model and runtime versions"
    } else {
        "compare the runtime and model versions of the fast and the slow run, and the NPU temperature (board.thermal); the NPU clock is not held below its maximum"
    })
}

fn unexplained_finding(ctx: &Ctx<'_>, blocks: &[&Block], explained: usize) -> Finding {
    let last = blocks[blocks.len() - 1];
    let first_line = &last.lines[0].1;
    let mut f = Finding::new(
        ID,
        Status::Warn,
        format!(
            "the NPU workload failed and no other check explains it: {} ({}{})",
            first_line.trim(),
            last.file,
            if explained > 0 {
                format!("; {explained} other failure(s) are explained")
            } else {
                String::new()
            }
        ),
    )
    .observed("unexplained_failures", blocks.len() as u64)
    .observed("explained_failures", explained as u64)
    .remedy(hint(ctx, blocks));
    for b in blocks.iter().rev() {
        for (n, t) in &b.lines {
            f.push_evidence(&b.file, b.numbered.then_some(*n), t);
        }
    }
    f
}

/// What the lines suggest where a known pattern fits, else how to take them further.
fn hint(ctx: &Ctx<'_>, blocks: &[&Block]) -> String {
    let text = |w: &str| {
        blocks
            .iter()
            .any(|b| b.lines.iter().any(|(_, t)| t.contains(w)))
    };
    if text("failed to malloc npu memory") && (text("errno: 14") || text("Bad address")) {
        return "errno 14 (Bad address) while mapping NPU memory with a current driver: the NPU's IOMMU address space is cut into 4 GiB domains, and a large model already loaded can fill the first one; load the LLM into another domain (RKLLMParam.extend_param.base_domain_id = 1) or use a smaller model; RAM, CMA, ulimit and the driver are not the cause".into();
    }
    if blocks.iter().any(|b| {
        b.lines
            .iter()
            .any(|(_, t)| class_of(t) == FailureClass::JobNeverCompleted)
    }) {
        return "an NPU job was accepted and never completed (run task counter 0, or the kernel's job timeout): keep librknnrt and the rknpu driver one release apart at most (the runtime's `RKNN Driver Information` line names the driver), give each thread its own rknn_context, and where only some NPU cores fail boot a kernel with a newer rknpu; a reboot resets a hung NPU".into();
    }
    let capture = if ctx.snap.live {
        "sudo npu-agent capture"
    } else {
        "npu-agent capture"
    };
    format!("the agent has no check that explains these lines: read them in the evidence, and attach a support bundle ({capture}) when you report them to the runtime's maintainers")
}

#[cfg(test)]
mod tests {
    use crate::check::testkit::{one, Board};
    use crate::model::{LogClass, Status};

    #[test]
    fn unexplained_failure_is_a_warning_with_its_lines() {
        let b = Board::new().log(
            "/var/log/rkllm/demo.log",
            LogClass::Workload,
            &[
                "rkllm init success",
                "E RKNN: [01:13:18.648] failed to allocate handle, ret: -1, errno: 14, errstr: Bad address",
                "E RKNN: [01:13:18.656] failed to malloc npu memory, size: 1427746880, flags: 0x2",
                "rknn_init fail! ret=-6",
            ],
        );
        let f = one("rk3588-rknpu", &b.build(), "npu.workload");
        assert_eq!(f.status, Status::Warn, "{}", f.summary);
        assert!(
            f.summary.contains("no other check explains it"),
            "{}",
            f.summary
        );
        assert_eq!(f.evidence.len(), 3);
        assert!(f.remedy.contains("base_domain_id"), "{}", f.remedy);
    }

    #[test]
    fn explained_failure_raises_the_explaining_finding() {
        let b = Board::new()
            .pci(0x1e60, 0x2864, Some("hailo"))
            .module("hailo_pci", Some("4.20.1"))
            .log(
                "/var/log/frigate.log",
                LogClass::Workload,
                &["x [HailoRT] [error] CHECK_SUCCESS failed with status=HAILO_INVALID_DRIVER_VERSION(76)"],
            )
            .build();
        let f = one("rpi5-hailo8", &b, "npu.workload");
        assert_eq!(f.status, Status::Info, "{}", f.summary);
        assert!(
            f.summary.contains("hailo.version_mismatch"),
            "{}",
            f.summary
        );
        let m = one("rpi5-hailo8", &b, "hailo.version_mismatch");
        assert_eq!(m.status, Status::Fail, "{}", m.summary);
    }

    #[test]
    fn a_class_of_failure_is_explained_by_its_cause() {
        let b = Board::new()
            .rknpu_version_file("/sys/kernel/debug/rknpu/version", "RKNPU driver: v0.9.3")
            .log(
                "/var/log/rknn/app.log",
                LogClass::Workload,
                &["E RKNN: [17:19:34.670] failed to submit!, op id: 1, op name: Conv:/model.0/conv/Conv, flags: 0x1, task start: 0, task number: 30, run task counter: 0, int status: 0"],
            )
            .build();
        let f = one("rk3588-rknpu", &b, "npu.workload");
        assert_eq!(f.status, Status::Info, "{}", f.summary);
        assert!(f.summary.contains("rknpu.driver_version"), "{}", f.summary);
        let d = one("rk3588-rknpu", &b, "rknpu.driver_version");
        assert_eq!(d.status, Status::Fail, "{}", d.summary);
        assert!(
            d.summary.contains("the NPU workload fails with it"),
            "{}",
            d.summary
        );
        // The kernel's side of the same fault, with no workload log at all.
        let k = Board::new()
            .log(
                "/var/log/kern.log",
                LogClass::Kernel,
                &["[  578.9] RKNPU: job timeout, flags: 0x1"],
            )
            .build();
        let f = one("rk3588-rknpu", &k, "npu.workload");
        assert_eq!(f.status, Status::Warn, "{}", f.summary);
        assert!(f.summary.contains("RKNPU: job timeout"), "{}", f.summary);
    }

    #[test]
    fn rknpu_decay_names_the_npu_clock() {
        use crate::model::sensors::{FileValue, NpuDevfreq};
        let mut b = Board::new()
            .log(
                "/var/log/rknn/bench.log",
                LogClass::Workload,
                &[
                    "model: ./yolov5s.rknn",
                    "Avg Time 13.21ms, Avg FPS = 75.7",
                    "model: ./yolov5s.rknn",
                    "Avg Time 66.0ms, Avg FPS = 15.1",
                ],
            )
            .build();
        b.sensors.npu_freq_hz = Some(FileValue {
            path: "/sys/class/devfreq/fdab0000.npu/cur_freq".into(),
            value: Ok(300_000_000),
        });
        b.sensors.npu_devfreq = Some(NpuDevfreq {
            dir: "/sys/class/devfreq/fdab0000.npu".into(),
            governor: Some("rknpu_ondemand".into()),
            available_max_hz: Some(1_000_000_000),
        });
        let f = one("rk3588-rknpu", &b, "npu.workload");
        assert_eq!(f.status, Status::Warn, "{}", f.summary);
        assert!(f.summary.contains("75.70 to 15.10 FPS"), "{}", f.summary);
        assert!(
            f.summary
                .contains("300 of 1000 MHz (governor rknpu_ondemand)"),
            "{}",
            f.summary
        );
        assert!(f.remedy.contains("performance"), "{}", f.remedy);
    }

    #[test]
    fn quiet_logs_pass_and_no_logs_skip() {
        let b = Board::new().log(
            "/var/log/hailort.log",
            LogClass::Workload,
            &["[HailoRT] [info] ok"],
        );
        assert_eq!(
            one("rpi5-hailo8", &b.build(), "npu.workload").status,
            Status::Pass
        );
        assert_eq!(
            one("rpi5-hailo8", &Board::new().build(), "npu.workload").status,
            Status::Skip
        );
    }
}
