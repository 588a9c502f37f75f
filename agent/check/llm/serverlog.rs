//! The server's own log for one command line: the process's log file (probed from its
//! `--log-file` or redirected output), else a workload log of the board whose run names the same
//! model, or that is the only llama.cpp-style server's. What the run says about placement then
//! confirms or refutes the rule analysis ([`compare`]).

use super::*;
use crate::model::logs::{LogClass, LogFile};
use crate::parse::llamalog::{self, ServerRun};

/// A run of the server found in a log.
pub(super) struct SourceLog {
    /// Board path of the log.
    pub path: String,
    /// The run.
    pub run: ServerRun,
    /// The log was read from its tail: line numbers are unknown.
    pub cut: bool,
    /// The lines the run's facts come from, by index.
    lines: Vec<(usize, String)>,
}

impl SourceLog {
    /// Adds the line at `idx` as evidence.
    pub fn evidence(&self, f: &mut Finding, idx: usize) {
        if let Some((_, text)) = self.lines.iter().find(|(i, _)| *i == idx) {
            f.push_evidence(&self.path, (!self.cut).then_some(idx + 1), text);
        }
    }
}

fn from_log(log: &LogFile, run: ServerRun) -> SourceLog {
    let mut idx: Vec<usize> = run.buffers.iter().map(|b| b.line).collect();
    idx.extend(run.offloaded.map(|o| o.2));
    idx.extend(run.failed_alloc.as_ref().map(|f| f.line));
    idx.extend(run.build_line.as_ref().map(|b| b.0));
    let lines = idx
        .into_iter()
        .filter_map(|i| log.lines.get(i).map(|t| (i, t.trim().to_string())))
        .collect();
    SourceLog {
        path: log.path.clone(),
        run,
        cut: log.cut,
        lines,
    }
}

/// True when `a` and `b` name the same model file (the same path, or the same file name when
/// the log was written on a host that mounts the models elsewhere).
fn same_model(a: &str, b: &str) -> bool {
    let name = |s: &str| s.rsplit('/').next().unwrap_or(s).to_string();
    a == b || name(a) == name(b)
}

/// The run of the server behind `src` in its own log or in the board's workload logs: a run
/// naming its model first, else (when no other server here loads another model) the last run
/// naming none.
pub(super) fn find(
    ctx: &Ctx<'_>,
    l: &LlmProbe,
    src: &LlmSource,
    model_path: &str,
) -> Option<SourceLog> {
    if let Some(own) = &src.log {
        if let Some(run) = pick(own, model_path, true) {
            return Some(from_log(own, run));
        }
    }
    // A log that names no model is this server's only when no other llama.cpp-style command
    // line here loads another model.
    let others = l.sources.iter().any(|s| {
        s.args.as_ref().is_ok_and(|a| {
            !a.engine.is_some_and(|e| e.places_by_own_config())
                && s.model
                    .as_ref()
                    .is_none_or(|m| !same_model(&m.path, model_path))
        })
    });
    let mut weak = None;
    for log in ctx
        .snap
        .logs
        .iter()
        .filter(|g| g.class == LogClass::Workload)
        .filter(|g| src.log.as_ref().is_none_or(|o| o.path != g.path))
    {
        if let Some(run) = pick(log, model_path, false) {
            return Some(from_log(log, run));
        }
        if !others {
            if let Some(run) = pick(log, model_path, true) {
                weak = Some(from_log(log, run));
            }
        }
    }
    weak
}

/// The last run of `log` that shows something of the server and names `model_path` (or, with
/// `unnamed`, names no model).
fn pick(log: &LogFile, model_path: &str, unnamed: bool) -> Option<ServerRun> {
    llamalog::parse_runs(&log.lines)
        .into_iter()
        .filter(|r| r.has_placement() || r.build.is_some())
        .rfind(|r| match &r.model_path {
            Some(p) => same_model(p, model_path),
            None => unnamed,
        })
}

/// What the log says against what the analysis predicts.
pub(super) struct Comparison {
    /// Sentences, each saying what the log shows and whether it agrees.
    pub said: Vec<String>,
    /// The log contradicts the prediction.
    pub refutes: bool,
    /// A device allocation failed during the load: the log's own verdict on the VRAM.
    pub load_failed: bool,
}

/// Within 15 % or 1 GiB of each other.
fn close(a: u64, b: u64) -> bool {
    let d = a.abs_diff(b);
    d <= (1 << 30) || d.saturating_mul(100) <= a.max(b).saturating_mul(15)
}

/// Compares the run with the prediction: layers offloaded, weight bytes per device, a failed
/// allocation, the tensors overrides sent to the CPU. Adds observed values and evidence to `f`.
pub(super) fn compare(ev: &Eval<'_>, g: &SourceLog, f: &mut Finding) -> Comparison {
    let m = &ev.model;
    let mut c = Comparison {
        said: Vec::new(),
        refutes: false,
        load_failed: false,
    };
    let predicted_w = moe::gpu_bytes(m, &ev.placed);
    let build = ev.program.describe();
    if let Some((n, total, line)) = g.run.offloaded {
        let want = ev.ngl.min(m.n_layer + 1);
        let agrees = u64::from(n) == want;
        c.refutes |= !agrees;
        c.said.push(format!(
            "the server's log shows {n}/{total} layers offloaded ({})",
            if agrees {
                "as predicted".to_string()
            } else {
                format!("this analysis expects {want}")
            }
        ));
        f.observed.insert("log_offloaded_layers".into(), json!(n));
        g.evidence(f, line);
    }
    if let Some(w) = g.run.gpu_model_bytes() {
        let agrees = close(w, predicted_w);
        c.refutes |= !agrees;
        c.said.push(format!(
            "it put {} of weights on the GPU ({})",
            gib(w),
            if agrees {
                format!("the analysis predicts {}: agrees", gib(predicted_w))
            } else {
                format!("the analysis predicts {}: the placement differs from what this agent assumes for {build}", gib(predicted_w))
            }
        ));
        f.observed.insert("log_gpu_weight_bytes".into(), json!(w));
        for b in g
            .run
            .buffers
            .iter()
            .filter(|b| b.kind == llamalog::BufferKind::Model)
        {
            g.evidence(f, b.line);
        }
    }
    if let Some(fa) = &g.run.failed_alloc {
        c.load_failed = true;
        let agrees = close(fa.bytes, predicted_w);
        let s = format!(
            "the server's log shows the load failing: it asked for {} on CUDA{} (cudaMalloc failed: out of memory){}",
            gib(fa.bytes),
            fa.device,
            if agrees {
                format!(", in line with the {} of weights this analysis puts on the GPU", gib(predicted_w))
            } else if predicted_w < fa.bytes {
                format!(", more than the {} of weights this analysis puts on the GPU (the model header may not list every tensor, or {build} places more)", gib(predicted_w))
            } else {
                format!(", less than the {} of weights this analysis puts on the GPU (a later allocation, or fewer layers)", gib(predicted_w))
            }
        );
        c.said.push(s);
        f.observed
            .insert("log_failed_alloc_bytes".into(), json!(fa.bytes));
        f.push_evidence(&g.path, (!g.cut).then_some(fa.line + 1), &fa.text);
    }
    if let Some((line, text)) = &g.run.unknown_buffer {
        c.said.push(
            "the server's log shows it stopping at startup: an -ot rule names a buffer type no device offers (\"unknown buffer type\")".into(),
        );
        f.push_evidence(&g.path, (!g.cut).then_some(line + 1), text);
    }
    overridden(ev, g, &mut c);
    if let Some((line, _)) = &g.run.build_line {
        g.evidence(f, *line);
    }
    c
}

/// ik_llama.cpp lists every tensor an override placed: the routed experts it sent to the CPU
/// against those the rules send there.
fn overridden(ev: &Eval<'_>, g: &SourceLog, c: &mut Comparison) {
    if g.run.overridden.is_empty() {
        return;
    }
    let m = &ev.model;
    let logged: Vec<&str> = g
        .run
        .overridden
        .iter()
        .filter(|(_, b)| b.starts_with("CPU"))
        .map(|(t, _)| t.as_str())
        .collect();
    let predicted: Vec<&str> = m
        .tensors
        .iter()
        .zip(&ev.placed)
        .filter(|(t, p)| t.routed_expert && p.rule.is_some() && !p.gpu)
        .map(|(t, _)| t.name.as_str())
        .collect();
    let missing: Vec<&str> = predicted
        .iter()
        .copied()
        .filter(|t| !logged.contains(t))
        .collect();
    let extra = logged
        .iter()
        .filter(|t| {
            m.tensors.iter().any(|x| x.name == **t && x.routed_expert) && !predicted.contains(t)
        })
        .count();
    if missing.is_empty() && extra == 0 {
        c.said.push(format!(
            "its override lines send the same {} routed-expert tensors to the CPU as predicted",
            predicted.len()
        ));
    } else {
        c.refutes = true;
        c.said.push(format!(
            "its override lines disagree: {} predicted tensors are not among them ({}), {extra} others are",
            missing.len(),
            describe_tensors(&missing)
        ));
    }
}
