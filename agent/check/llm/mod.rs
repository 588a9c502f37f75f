//! Server checks (profile `x86-hybrid-moe`): `kernel.numa_balancing`, `llm.override_tensor` and
//! `llm.vram_budget`. The first reads NUMA state; the other two place every tensor of the model a
//! llama.cpp-style command line loads ([`super::moe`]) and judge the `-ot` rules and the VRAM
//! the result needs. One finding per command line (running server or `--llm-cmdline`).

mod explain;
mod fix;
mod gpus;
mod numa;
mod override_tensor;
mod serverlog;
mod upstream;
mod vram;

use super::moe::{self, BufferKind, KvArgs, Model, Pattern, Placed, Rule};
use super::{Ctx, Finding, Status};
use crate::model::llm::{LlmProbe, LlmSource};
use crate::parse::llmargs::{Engine, LlmArgs, RawRule, RuleOrigin};
use crate::root::ReadErrorKind;
use explain::*;
use numa::numa_balancing;
use override_tensor::override_tensor;
use serde_json::{json, Value};
use upstream::Program;
use vram::{vram, Budget};

/// The rule the guide recommends: every routed expert of every layer stays in RAM.
pub const GUIDE_RULE: &str = r"blk\.[0-9]+\.ffn_.*_exps\.weight=CPU";

/// The server findings of a profile that names LLM servers (see [`super::server`]).
pub(super) fn all(ctx: &Ctx<'_>) -> Vec<Finding> {
    let mut out = vec![numa_balancing(ctx)];
    let l = &ctx.snap.llm;
    if l.sources.is_empty() {
        let why = match &l.processes_error {
            Some(e) => format!("cannot list processes ({e}) and no --llm-cmdline was given"),
            None => format!(
                "no LLM server is running (looked for: {}) and no --llm-cmdline was given",
                ctx.profile.llm.servers.join(", ")
            ),
        };
        out.push(Finding::skip("llm.override_tensor", why.clone()));
        out.push(Finding::skip("llm.vram_budget", why));
        return out;
    }
    for src in &l.sources {
        let (ot, vram) = per_source(ctx, l, src);
        out.push(ot);
        out.push(vram);
    }
    out
}

pub(crate) fn gib(b: u64) -> String {
    format!("{:.2} GiB", b as f64 / (1u64 << 30) as f64)
}

// ---------------------------------------------------------------------------------------------
// kernel.numa_balancing

/// `llama-server (pid 4242)`, `SGLang server python3 (pid 7, with DeepEP)`.
fn server_label(src: &LlmSource) -> String {
    match src
        .args
        .as_ref()
        .ok()
        .filter(|a| a.engine.is_some_and(|e| e.places_by_own_config()))
    {
        Some(a) => {
            let name = a.engine.map(Engine::name).unwrap_or("");
            let pid = src.pid.map(|p| format!("pid {p}")).unwrap_or_default();
            let deepep = if a.deepep { ", with DeepEP" } else { "" };
            format!("{name} server {} ({pid}{deepep})", src.comm)
        }
        None => src.label(),
    }
}

/// "; llama-server (pid 4242) runs with interleave:0-1 (model pages: node0 3.10 GiB, node1 …)".
fn process_report(l: &LlmProbe, f: &mut Finding) -> String {
    let mut parts = Vec::new();
    let mut obs = Vec::new();
    for src in l.sources.iter().filter(|s| s.pid.is_some()) {
        let pid = src.pid.unwrap_or(0);
        let Some(maps) = &src.numa_maps else { continue };
        match maps {
            Ok(m) if m.mappings > 0 => {
                let policy = if m.model_policies.is_empty() {
                    m.dominant_policy().unwrap_or("default").to_string()
                } else {
                    m.model_policies.join("+")
                };
                let nodes: Vec<String> = m
                    .model_bytes_by_node
                    .iter()
                    .map(|(n, b)| format!("node{n} {}", gib(*b)))
                    .collect();
                let il = if m.interleaved() {
                    "interleaved"
                } else {
                    "not interleaved"
                };
                let mut p = format!(
                    "{} runs with memory policy {policy} ({il})",
                    server_label(src)
                );
                if !nodes.is_empty() {
                    p.push_str(&format!(", model pages {}", nodes.join(", ")));
                }
                parts.push(p);
                let mut by_node = serde_json::Map::new();
                for (n, b) in &m.model_bytes_by_node {
                    by_node.insert(format!("node{n}"), json!(b));
                }
                obs.push(json!({"pid": pid, "comm": src.comm, "policy": policy, "interleaved": m.interleaved(),
                    "model_bytes_by_node": by_node}));
                f.push_evidence(
                    &format!("/proc/{pid}/numa_maps"),
                    None,
                    &format!("{policy} ({} mappings)", m.mappings),
                );
            }
            Ok(_) => parts.push(format!("{}: numa_maps is empty", src.label())),
            Err(e) if e.kind == ReadErrorKind::NotFound => {}
            Err(e) => parts.push(format!("{}: cannot read numa_maps ({e})", src.label())),
        }
    }
    if !obs.is_empty() {
        f.observed.insert("processes".into(), Value::Array(obs));
    }
    if parts.is_empty() {
        String::new()
    } else {
        format!("; {}", parts.join("; "))
    }
}

// ---------------------------------------------------------------------------------------------
// llm.override_tensor and llm.vram_budget

/// Everything worked out for one command line.
struct Eval<'a> {
    args: &'a LlmArgs,
    /// The program and its build.
    program: Program,
    model: Model,
    /// The rules as the program tries them (`--cpu-moe`/`--n-cpu-moe` expanded).
    raw_rules: Vec<RawRule>,
    rules: Vec<Rule>,
    /// Winning rule per tensor (independent of -ngl).
    winners: Vec<Option<usize>>,
    ngl: u64,
    /// llama.cpp's `--fit` chose `ngl` and the rules of origin `Fit` (why).
    fit: Option<String>,
    placed: Vec<Placed>,
    model_path: String,
    notes: Vec<String>,
    /// The server's own log, when one shows this command line's run.
    log: Option<serverlog::SourceLog>,
}

impl Eval<'_> {
    /// `--cpu-moe` / `--n-cpu-moe` were given.
    fn has_moe_flags(&self) -> bool {
        !self.args.moe_flags.is_empty()
    }
}

fn winners(model: &Model, rules: &[Rule]) -> Vec<Option<usize>> {
    let placed = moe::place(model, rules, 0);
    placed.into_iter().map(|p| p.rule).collect()
}

fn placement(model: &Model, rules: &[Rule], winners: &[Option<usize>], ngl: u64) -> Vec<Placed> {
    model
        .tensors
        .iter()
        .zip(winners)
        .map(|(t, w)| match w {
            Some(ri) => Placed {
                gpu: rules[*ri].to_gpu(),
                rule: Some(*ri),
            },
            None => Placed {
                gpu: moe::default_on_gpu(t, model.n_layer, ngl),
                rule: None,
            },
        })
        .collect()
}

fn source_evidence(src: &LlmSource, f: &mut Finding) {
    let text = match &src.args {
        Ok(a) => a.argv.join(" "),
        Err(_) => String::new(),
    };
    match src.pid {
        Some(pid) => f.push_evidence(&format!("/proc/{pid}/cmdline"), None, &text),
        None => f.push_evidence("--llm-cmdline", None, &text),
    }
}

/// The command line's arguments, or the finding to report instead (no model is needed yet).
fn checked_args<'a>(src: &'a LlmSource, id: &str) -> Result<&'a LlmArgs, Box<Finding>> {
    let label = src.label();
    let args = match &src.args {
        Ok(a) => a,
        Err(e) => {
            let mut f = Finding::new(
                id,
                Status::Error,
                format!("{label}: cannot split the command line: {e}"),
            );
            source_evidence(src, &mut f);
            return Err(Box::new(f));
        }
    };
    if let Some(e) = args.engine.filter(|e| e.places_by_own_config()) {
        let how = match e {
            Engine::KTransformers => "its optimize-rule YAML (--optimize_config_path)",
            _ => "its own tensor/expert-parallel settings",
        };
        let workers = if src.workers.is_empty() {
            String::new()
        } else {
            format!(" (and {} worker process(es))", src.workers.len())
        };
        let mut f = Finding::skip(
            id,
            format!(
                "{label}{workers} runs {}, which places experts by {how}, not by -ot: not checked",
                e.name()
            ),
        );
        source_evidence(src, &mut f);
        return Err(Box::new(f));
    }
    Ok(args)
}

/// The model's headers, or the finding to report instead.
fn model_of(
    src: &LlmSource,
    args: &LlmArgs,
    id: &str,
) -> Result<(Model, Vec<String>, String), Box<Finding>> {
    let label = src.label();
    let Some(mf) = &src.model else {
        let why = match &args.remote_model {
            Some(r) => format!(
                "{label} loads its model from {r} (-hf/-mu), which this agent does not fetch"
            ),
            None => format!("{label} has no -m model path"),
        };
        let mut f = Finding::skip(id, why);
        source_evidence(src, &mut f);
        return Err(Box::new(f));
    };
    let mut notes = Vec::new();
    let mut headers = Vec::new();
    for sh in &mf.shards {
        match &sh.header {
            Ok(h) => headers.push((h, sh.file_len)),
            Err(e) => {
                let (status, what) = match e.kind {
                    ReadErrorKind::Malformed => (Status::Error, "is not a readable GGUF file"),
                    _ => (Status::Skip, "cannot be read"),
                };
                let mut f = Finding::new(
                    id,
                    status,
                    format!("{label}: the model {} {what}: {e}", sh.path),
                );
                source_evidence(src, &mut f);
                return Err(Box::new(f));
            }
        }
    }
    if let Some((h, _)) = headers.first() {
        if h.get("split.no")
            .and_then(|v| v.as_u64())
            .is_some_and(|n| n > 0)
        {
            notes.push(format!("-m {} is not the first shard of a split model (llama.cpp wants the -00001-of-NNNNN file)", mf.arg));
        }
    }
    let model = Model::from_shards(&headers)
        .map_err(|e| Box::new(Finding::skip(id, format!("{label}: {e}"))))?;
    if !model.not_sized.is_empty() {
        notes.push(format!(
            "{} tensor(s) of a type this agent cannot size are not counted ({})",
            model.not_sized.len(),
            model
                .not_sized
                .iter()
                .take(3)
                .cloned()
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    let inexact = model.tensors.iter().filter(|t| !t.exact).count();
    if inexact > 0 {
        notes.push(format!("{inexact} tensor(s) of types outside ggml's upstream table (ik_llama.cpp quants) are sized from their data offsets"));
    }
    Ok((model, notes, mf.path.clone()))
}

/// Works out the program, model and placement, or the finding to report instead (same for both
/// checks).
fn evaluate<'a>(
    ctx: &Ctx<'_>,
    l: &LlmProbe,
    src: &'a LlmSource,
    id: &str,
) -> Result<Eval<'a>, Box<Finding>> {
    let args = checked_args(src, id)?;
    let (model, mut notes, model_path) = model_of(src, args, id)?;
    let log = serverlog::find(ctx, l, src, &model_path);
    let program = Program::of(args, log.as_ref().map(|g| (&g.run, g.path.as_str())));
    let gpu_count = gpus::count(l, log.as_ref());
    let (raw_rules, expand_notes) = upstream::expand_rules(&program, args, &model);
    notes.extend(expand_notes);
    let rules = moe::compile_rules(&raw_rules, gpu_count);
    let w = winners(&model, &rules);
    let mut ev = Eval {
        args,
        program,
        placed: Vec::new(),
        winners: w,
        rules,
        raw_rules,
        model,
        ngl: 0,
        fit: None,
        model_path,
        notes,
        log,
    };
    match upstream::ngl(&ev.program, args, gpu_count) {
        upstream::Ngl::Count(n, why) => {
            ev.ngl = n;
            ev.notes.extend(why);
        }
        upstream::Ngl::Fit(why) => vram::emulate_fit(ctx, l, &mut ev, why),
    }
    ev.placed = placement(&ev.model, &ev.rules, &ev.winners, ev.ngl);
    Ok(ev)
}

fn per_source(ctx: &Ctx<'_>, l: &LlmProbe, src: &LlmSource) -> (Finding, Finding) {
    // Startup errors need no model.
    let ev = match evaluate(ctx, l, src, "llm.override_tensor") {
        Ok(ev) => ev,
        Err(f) => {
            let f = *f;
            let mut v = f.clone();
            v.id = "llm.vram_budget".into();
            let ot = if let Ok(a) = &src.args {
                startup_only(l, src, a).unwrap_or(f)
            } else {
                f
            };
            return (ot, v);
        }
    };
    let budget = vram(ctx, l, src, &ev);
    let ot = override_tensor(src, &ev, &budget);
    (ot, budget.finding)
}

/// Without a readable model: the rule errors that stop llama.cpp at startup still fail.
fn startup_only(l: &LlmProbe, src: &LlmSource, a: &LlmArgs) -> Option<Finding> {
    let rules = moe::compile_rules(&a.rules, l.gpus.as_ref().ok().map(Vec::len));
    let errs = startup_errors(&rules);
    if errs.is_empty() {
        return None;
    }
    let mut f = Finding::new(
        "llm.override_tensor",
        Status::Fail,
        format!("{}: {}", src.label(), errs.join("; ")),
    );
    f.remedy = "write every -ot rule as REGEX=BUFFER with BUFFER one of CPU, CUDA0, CUDA1, …, and keep commas out of the regex".into();
    source_evidence(src, &mut f);
    Some(f)
}

fn startup_errors(rules: &[Rule]) -> Vec<String> {
    let mut out = Vec::new();
    for r in rules {
        if r.raw.pattern.is_none() {
            let comma = if r.raw.text.contains('{')
                || r.raw.text.contains('}')
                || r.raw.text.ends_with('(')
            {
                " (a comma inside the regex, as in `{1,3}`, splits the rule: llama.cpp splits -ot values on every comma)"
            } else {
                ""
            };
            out.push(format!(
                "rule {} `{}` has no `=BUFFER`: llama.cpp stops with \"invalid value\"{comma}",
                r.n, r.raw.text
            ));
            continue;
        }
        if let BufferKind::Unknown(hint) = &r.kind {
            out.push(format!("{} names buffer type `{}`, which no device offers: llama.cpp stops at startup with \"unknown buffer type\" ({hint})", r.label(), r.raw.buffer));
        }
        if let Some(Pattern::Rejected(why)) = &r.pattern {
            out.push(format!("{}: llama.cpp's std::regex (ECMAScript) will refuse the pattern, as far as this agent can tell: {why}", r.label()));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn non_ascii_tensor_names_never_split_a_character() {
        // `é` (C3 A9) and `ѩ` (D1 A9) share their last byte: the common tail starts inside a
        // character, and the suffix must back off to a boundary instead of slicing through it.
        let names = vec!["blk.0.up_é_w".to_string(), "blk.1.up_ѩ_w".to_string()];
        assert_eq!(common_suffix(&names), "_w");
        let names = vec!["blk.0.up_é".to_string(), "blk.1.up_ѩ".to_string()];
        assert_eq!(common_suffix(&names), "");
        let names = vec!["ффн_вверх.вес".to_string(), "ффн_вниз.вес".to_string()];
        assert_eq!(common_prefix(&names), "ффн_");
        assert_eq!(common_suffix(&names), "");
        let one = vec!["blk.0.ффн_up".to_string()];
        assert_eq!(common_suffix(&one), "_up");
        assert!(!describe_tensors(&["blk.0.ффн", "blk.1.ффн"]).is_empty());
        assert_eq!(
            widen_digit_classes("блок[0-9]"),
            Some("блок[0-9]+".to_string())
        );
        assert_eq!(
            escape_literal_dots("блок.вес"),
            Some("блок\\.вес".to_string())
        );
    }

    #[test]
    fn helpers() {
        assert_eq!(ranges(&[3, 4, 5, 9, 11, 12]), "3-5, 9, 11-12");
        assert_eq!(levenshtein("exp", "exps"), 1);
        let runs: Vec<String> = literal_runs(r"blk\.[0-9]+\.ffn_.*_exp\.weight")
            .into_iter()
            .map(|r| r.0)
            .collect();
        assert_eq!(runs, vec!["blk.", ".ffn_", "_exp.weight"]);
        assert_eq!(
            literal_runs(r"^ffn_up_exps?")[0],
            ("ffn_up_exp".to_string(), 1, 11)
        );
        let names = vec!["blk.0.ffn_gate_exps.weight".to_string()];
        assert_eq!(
            closest_substring("_exp.weight", &names).map(|c| c.1),
            Some("_exps.weight".to_string())
        );
        assert_eq!(
            widen_digit_classes(r"blk\.[0-9]\.ffn"),
            Some(r"blk\.[0-9]+\.ffn".to_string())
        );
        assert_eq!(widen_digit_classes(r"blk\.[0-9]+\.ffn"), None);
        assert_eq!(
            widen_digit_classes(r"blk\.\d\.ffn"),
            Some(r"blk\.\d+\.ffn".to_string())
        );
        assert_eq!(
            escape_literal_dots("blk.[0-9]+.ffn_.*_exps.weight"),
            Some(r"blk\.[0-9]+\.ffn_.*_exps\.weight".to_string())
        );
        assert_eq!(escape_literal_dots(r"blk\.[0-9]+\.ffn_.*"), None);
        assert_eq!(
            describe_tensors(&[
                "blk.10.ffn_gate_exps.weight",
                "blk.10.ffn_up_exps.weight",
                "blk.11.ffn_gate_exps.weight",
                "blk.11.ffn_up_exps.weight"
            ]),
            "blk.N.ffn_{gate,up}_exps.weight for N in 10-11"
        );
        assert_eq!(describe_tensors(&["output.weight"]), "output.weight");
    }
}
