//! Server checks (profile `x86-hybrid-moe`): `kernel.numa_balancing`, `llm.override_tensor` and
//! `llm.vram_budget`. The first reads NUMA state; the other two place every tensor of the model a
//! llama.cpp-style command line loads ([`super::moe`]) and judge the `-ot` rules and the VRAM
//! the result needs. One finding per command line (running server or `--llm-cmdline`).

use super::moe::{self, BufferKind, KvArgs, Model, Pattern, Placed, Rule};
use super::{Ctx, Finding, Status};
use crate::model::llm::{LlmProbe, LlmSource};
use crate::parse::llmargs::{Engine, LlmArgs, RuleOrigin};
use crate::root::ReadErrorKind;
use serde_json::{json, Value};

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

fn numa_balancing(ctx: &Ctx<'_>) -> Finding {
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
                let mut p = format!("{} runs with memory policy {policy} ({il})", src.label());
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
    model: Model,
    rules: Vec<Rule>,
    /// Winning rule per tensor (independent of -ngl).
    winners: Vec<Option<usize>>,
    ngl: u64,
    placed: Vec<Placed>,
    model_path: String,
    notes: Vec<String>,
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

/// Works out the model and placement, or the finding to report instead (same for both checks).
fn evaluate<'a>(l: &LlmProbe, src: &'a LlmSource, id: &str) -> Result<Eval<'a>, Box<Finding>> {
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
    if args.engine == Some(Engine::KTransformers) {
        let mut f = Finding::skip(id, format!("{label} runs KTransformers, which places experts by its optimize-rule YAML (--optimize_config_path), not by -ot: not checked"));
        source_evidence(src, &mut f);
        return Err(Box::new(f));
    }
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
    let gpu_count = l.gpus.as_ref().ok().map(Vec::len);
    let rules = moe::compile_rules(&args.rules, gpu_count);
    let ngl_given = moe::ngl_value(args);
    let ngl = ngl_given.unwrap_or(0);
    if ngl_given.is_none() {
        notes.push(match args.ngl.as_deref() {
            Some(v) => format!("-ngl {v} is not a layer count this agent evaluates: assuming 0"),
            None => "no -ngl: assuming 0 (ik_llama.cpp and older llama.cpp keep every layer on the CPU by default; newer llama.cpp builds may offload all layers: pass -ngl explicitly)".into(),
        });
    }
    let w = winners(&model, &rules);
    let placed = placement(&model, &rules, &w, ngl);
    Ok(Eval {
        args,
        model,
        rules,
        winners: w,
        ngl,
        placed,
        model_path: mf.path.clone(),
        notes,
    })
}

fn per_source(ctx: &Ctx<'_>, l: &LlmProbe, src: &LlmSource) -> (Finding, Finding) {
    // Startup errors need no model.
    let ev = match evaluate(l, src, "llm.override_tensor") {
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
    let ot = override_tensor(src, &ev, budget.fits);
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

/// `blk.N.ffn_{gate,up,down}_exps.weight for N in 10-13`, or a plain list when the layers differ in
/// their tensor kinds.
fn describe_tensors(names: &[&str]) -> String {
    // (layer, tensor kinds), kept sorted by layer.
    let mut by_layer: Vec<(u64, Vec<String>)> = Vec::new();
    let mut other = Vec::new();
    for n in names {
        match moe::layer_of(n) {
            Some(l) => {
                let kind = n.splitn(3, '.').nth(2).unwrap_or("").to_string();
                match by_layer.binary_search_by_key(&l, |(k, _)| *k) {
                    Ok(i) => by_layer[i].1.push(kind),
                    Err(i) => by_layer.insert(i, (l, vec![kind])),
                }
            }
            None => other.push(n.to_string()),
        }
    }
    let kinds: Vec<&Vec<String>> = by_layer.iter().map(|(_, k)| k).collect();
    let same = kinds.windows(2).all(|w| w[0] == w[1]);
    if !by_layer.is_empty() && same && other.is_empty() {
        let k = kinds[0];
        let layers: Vec<u64> = by_layer.iter().map(|(l, _)| *l).collect();
        let kind = if k.len() == 1 {
            k[0].clone()
        } else {
            // ffn_gate_exps.weight, ffn_up_exps.weight → ffn_{gate,up}_exps.weight
            let pre = common_prefix(k);
            let suf = common_suffix(k);
            if pre.len() + suf.len() < k.iter().map(String::len).min().unwrap_or(0) {
                let mids: Vec<&str> = k
                    .iter()
                    .map(|s| &s[pre.len()..s.len() - suf.len()])
                    .collect();
                format!("{pre}{{{}}}{suf}", mids.join(","))
            } else {
                k.join(", ")
            }
        };
        return format!("blk.N.{kind} for N in {}", ranges(&layers));
    }
    let mut all: Vec<String> = names.iter().take(12).map(|s| s.to_string()).collect();
    if names.len() > 12 {
        all.push(format!("… {} more", names.len() - 12));
    }
    all.join(", ")
}

fn common_prefix(v: &[String]) -> String {
    let first = &v[0];
    let mut n = first.len();
    for s in v {
        n = n.min(
            first
                .bytes()
                .zip(s.bytes())
                .take_while(|(a, b)| a == b)
                .count(),
        );
    }
    while !first.is_char_boundary(n) {
        n -= 1;
    }
    // Keep whole `_`-separated words.
    let cut = first[..n].rfind('_').map(|i| i + 1).unwrap_or(0);
    first[..cut].to_string()
}

fn common_suffix(v: &[String]) -> String {
    let first = &v[0];
    let mut n = first.len();
    for s in v {
        n = n.min(
            first
                .bytes()
                .rev()
                .zip(s.bytes().rev())
                .take_while(|(a, b)| a == b)
                .count(),
        );
    }
    // Back off to a character boundary: names may hold multi-byte characters.
    while !first.is_char_boundary(first.len() - n) {
        n -= 1;
    }
    let tail = &first[first.len() - n..];
    let cut = tail.find('_').unwrap_or(tail.len());
    tail[cut..].to_string()
}

/// The distinct values in ascending order (what collecting into a `BTreeSet` gives, without
/// another copy of the B-tree code).
fn sorted_set(values: impl Iterator<Item = u64>) -> Vec<u64> {
    let mut v: Vec<u64> = values.collect();
    v.sort();
    v.dedup();
    v
}

/// `3-9, 12, 14-20`.
fn ranges(v: &[u64]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < v.len() {
        let mut j = i;
        while j + 1 < v.len() && v[j + 1] == v[j] + 1 {
            j += 1;
        }
        out.push(if i == j {
            v[i].to_string()
        } else {
            format!("{}-{}", v[i], v[j])
        });
        i = j + 1;
    }
    out.join(", ")
}

fn levenshtein(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut cur = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            let v = (prev[j] + usize::from(ca != *cb))
                .min(prev[j + 1] + 1)
                .min(cur[j] + 1);
            cur.push(v);
        }
        prev = cur;
    }
    prev[b.len()]
}

/// Runs of literal characters in a pattern, with their byte span in the pattern
/// (`blk\.[0-9]+\.ffn_.*_exp\.weight` → `blk.`, `.ffn_`, `_exp.weight`). A character followed
/// by `?`, `*` or `{` is optional and ends a run.
fn literal_runs(p: &str) -> Vec<(String, usize, usize)> {
    let b: Vec<(usize, char)> = p.char_indices().collect();
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut start = 0;
    let mut end = 0;
    let mut i = 0;
    let flush =
        |cur: &mut String, start: usize, end: usize, out: &mut Vec<(String, usize, usize)>| {
            if cur.len() >= 3 {
                out.push((std::mem::take(cur), start, end));
            }
            cur.clear();
        };
    while i < b.len() {
        let (pos, c) = b[i];
        let (lit, width) = match c {
            '\\' => match b.get(i + 1) {
                Some((_, n)) if !n.is_ascii_alphanumeric() => (Some(*n), 2),
                _ => (None, 2),
            },
            '[' => {
                // Skip the class.
                let mut j = i + 1;
                while j < b.len() && b[j].1 != ']' {
                    j += if b[j].1 == '\\' { 2 } else { 1 };
                }
                (None, j + 1 - i)
            }
            c if c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == ':' || c == '/' => {
                (Some(c), 1)
            }
            _ => (None, 1),
        };
        let next = b.get(i + width).map(|x| x.1);
        let optional = matches!(next, Some('?' | '*' | '{'));
        match lit {
            Some(ch) if !optional => {
                if cur.is_empty() {
                    start = pos;
                }
                cur.push(ch);
                end = b.get(i + width).map(|x| x.0).unwrap_or(p.len());
            }
            _ => flush(&mut cur, start, end, &mut out),
        }
        i += width;
    }
    flush(&mut cur, start, end, &mut out);
    out
}

/// The substring of a name closest to `lit` (edit distance at most 2), if any.
fn closest_substring(lit: &str, names: &[String]) -> Option<(usize, String, String)> {
    let l = lit.chars().count();
    let mut best: Option<(usize, String, String)> = None;
    for n in names {
        let chars: Vec<char> = n.chars().collect();
        for w in l.saturating_sub(2).max(1)..=l + 2 {
            if w > chars.len() {
                break;
            }
            for s in 0..=chars.len() - w {
                let cand: String = chars[s..s + w].iter().collect();
                let d = levenshtein(lit, &cand);
                if d <= 2
                    && best
                        .as_ref()
                        .is_none_or(|(bd, bc, _)| d < *bd || (d == *bd && cand.len() > bc.len()))
                {
                    best = Some((d, cand, n.clone()));
                }
            }
        }
    }
    best.filter(|(d, _, _)| *d > 0)
}

fn escape_regex(s: &str) -> String {
    let mut out = String::new();
    for c in s.chars() {
        if "\\.+*?()|[]{}^$".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// Why a rule matches no tensor: an anchor, a misspelt word, or just that.
fn explain_no_match(r: &Rule, model: &Model) -> (String, Option<String>) {
    let p = r.raw.pattern.as_deref().unwrap_or("");
    let matches_any = |q: &str| match moe::compile(q) {
        Pattern::Ok(re) => model
            .tensors
            .iter()
            .filter(|t| re.is_match(&t.name))
            .count(),
        _ => 0,
    };
    if let Some(rest) = p.strip_prefix('^') {
        let n = matches_any(rest);
        if n > 0 {
            return (format!("the `^` anchor ties it to the start of the name, and the names start with `blk.N.` (without `^` it matches {n} tensors)"), Some(rest.to_string()));
        }
    }
    if let Some(rest) = p.strip_suffix('$').filter(|r| !r.ends_with('\\')) {
        let n = matches_any(rest);
        if n > 0 {
            return (format!("the `$` anchor ties it to the end of the name, and the names end in `.weight`/`.bias` (without `$` it matches {n} tensors)"), Some(rest.to_string()));
        }
    }
    // Distinct name shapes (`blk.N.ffn_gate_exps.weight`) keep the search short.
    let mut shapes: Vec<String> = model
        .tensors
        .iter()
        .map(|t| {
            t.name
                .chars()
                .map(|c| if c.is_ascii_digit() { '0' } else { c })
                .collect()
        })
        .collect();
    shapes.sort();
    shapes.dedup();
    for (lit, s, e) in literal_runs(p) {
        if model.tensors.iter().any(|t| t.name.contains(&lit)) {
            continue;
        }
        if let Some((_, cand, example)) = closest_substring(&lit, &shapes) {
            let fixed = format!("{}{}{}", &p[..s], escape_regex(&cand), &p[e..]);
            let n = matches_any(&fixed);
            let example = model
                .tensors
                .iter()
                .find(|t| {
                    t.name
                        .chars()
                        .map(|c| if c.is_ascii_digit() { '0' } else { c })
                        .collect::<String>()
                        == example
                })
                .map(|t| t.name.clone())
                .unwrap_or(example);
            let tail = if n > 0 {
                format!(" With it the pattern matches {n} tensors")
            } else {
                String::new()
            };
            return (format!("`{lit}` is in no tensor name of this model (did you mean `{cand}`, as in {example}?{tail})"), (n > 0).then_some(fixed));
        }
        return (format!("`{lit}` is in no tensor name of this model"), None);
    }
    let text = format!(
        "it matches none of the {} tensor names (e.g. {})",
        model.tensors.len(),
        model
            .tensors
            .iter()
            .find(|t| t.routed_expert)
            .or(model.tensors.first())
            .map(|t| t.name.as_str())
            .unwrap_or("")
    );
    (text, None)
}

/// `[0-9]` / `\d` without a quantifier, made `[0-9]+`.
fn widen_digit_classes(p: &str) -> Option<String> {
    let mut out = String::new();
    let mut changed = false;
    let mut i = 0;
    let b = p.as_bytes();
    while i < p.len() {
        let rest = &p[i..];
        let tok = if rest.starts_with("[0-9]") {
            Some(5)
        } else if rest.starts_with("\\d") {
            Some(2)
        } else {
            None
        };
        if let Some(n) = tok {
            out.push_str(&rest[..n]);
            i += n;
            if !matches!(b.get(i), Some(b'+' | b'*' | b'{' | b'?')) {
                out.push('+');
                changed = true;
            }
            continue;
        }
        let c = rest.chars().next().unwrap_or(' ');
        out.push(c);
        i += c.len_utf8();
    }
    changed.then_some(out)
}

/// Dots meant literally (not followed by a quantifier), escaped.
fn escape_literal_dots(p: &str) -> Option<String> {
    let chars: Vec<char> = p.chars().collect();
    let mut out = String::new();
    let mut changed = false;
    let mut in_class = false;
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        match c {
            '\\' => {
                out.push(c);
                if let Some(n) = chars.get(i + 1) {
                    out.push(*n);
                }
                i += 2;
                continue;
            }
            '[' => in_class = true,
            ']' => in_class = false,
            '.' if !in_class && !matches!(chars.get(i + 1), Some('*' | '+' | '?' | '{')) => {
                out.push_str("\\.");
                changed = true;
                i += 1;
                continue;
            }
            _ => {}
        }
        out.push(c);
        i += 1;
    }
    changed.then_some(out)
}

fn override_tensor(src: &LlmSource, ev: &Eval<'_>, fits: Option<bool>) -> Finding {
    let id = "llm.override_tensor";
    let label = src.label();
    let m = &ev.model;
    let mut f = Finding::new(id, Status::Pass, "");
    source_evidence(src, &mut f);
    f.push_evidence(
        &ev.model_path,
        None,
        &format!(
            "GGUF v{}, {} {} layers, {} tensors",
            m.header.version,
            m.arch,
            m.n_layer,
            m.tensors.len()
        ),
    );
    let engine = ev.args.engine.unwrap_or(Engine::LlamaCpp);
    f = f
        .observed("engine", engine.name())
        .observed("model", ev.model_path.clone())
        .observed("n_layer", m.n_layer)
        .observed("ngl", ev.ngl)
        .observed(
            "rules",
            ev.rules
                .iter()
                .map(|r| r.raw.text.clone())
                .collect::<Vec<_>>(),
        );
    let experts: Vec<usize> = (0..m.tensors.len())
        .filter(|i| m.tensors[*i].routed_expert)
        .collect();
    let expert_bytes: u64 = experts.iter().map(|i| m.tensors[*i].bytes).sum();
    f = f
        .observed("routed_expert_tensors", experts.len())
        .observed("routed_expert_bytes", expert_bytes);
    // Per-rule matches and wins.
    let mut matched: Vec<Vec<usize>> = vec![Vec::new(); ev.rules.len()];
    for (ri, r) in ev.rules.iter().enumerate() {
        if let Some(Pattern::Ok(re)) = &r.pattern {
            matched[ri] = (0..m.tensors.len())
                .filter(|i| re.is_match(&m.tensors[*i].name))
                .collect();
        }
    }
    let won: Vec<Vec<usize>> = (0..ev.rules.len())
        .map(|ri| {
            (0..m.tensors.len())
                .filter(|i| ev.winners[*i] == Some(ri))
                .collect()
        })
        .collect();
    f = f.observed(
        "rule_matches",
        ev.rules
            .iter()
            .enumerate()
            .map(|(ri, r)| json!({"rule": r.n, "text": r.raw.text, "buffer": r.raw.buffer, "matched": matched[ri].len(), "applied": won[ri].len()}))
            .collect::<Vec<_>>(),
    );
    let on_gpu: Vec<usize> = experts
        .iter()
        .copied()
        .filter(|i| ev.placed[*i].gpu)
        .collect();
    let by_default: Vec<usize> = on_gpu
        .iter()
        .copied()
        .filter(|i| ev.placed[*i].rule.is_none())
        .collect();
    let on_gpu_bytes: u64 = on_gpu.iter().map(|i| m.tensors[*i].bytes).sum();
    let default_bytes: u64 = by_default.iter().map(|i| m.tensors[*i].bytes).sum();
    f = f
        .observed(
            "experts_on_gpu",
            on_gpu
                .iter()
                .map(|i| m.tensors[*i].name.clone())
                .collect::<Vec<_>>(),
        )
        .observed("experts_on_gpu_bytes", on_gpu_bytes)
        .observed("gpu_weight_bytes", moe::gpu_bytes(m, &ev.placed))
        .observed("experts_on_gpu_by_ngl", by_default.len())
        .expected("experts_on_gpu_by_ngl", 0);

    let mut fails: Vec<String> = startup_errors(&ev.rules);
    let mut warns: Vec<String> = Vec::new();
    let mut notes: Vec<String> = ev.notes.clone();
    let mut fixes: Vec<String> = Vec::new();
    for r in &ev.rules {
        if let Some(Pattern::NotEvaluated(why)) = &r.pattern {
            warns.push(format!(
                "{} uses {why}, which this agent does not evaluate: the placement below ignores it",
                r.label()
            ));
        }
        if let BufferKind::Unknown(_) = r.kind {
            fixes.push(format!("write the buffer of {} as CPU or CUDA0", r.label()));
        }
    }
    let usable = |ri: usize| {
        matches!(ev.rules[ri].pattern, Some(Pattern::Ok(_)))
            && !matches!(ev.rules[ri].kind, BufferKind::Unknown(_))
    };
    // Rules that match nothing.
    let mut dead: Vec<String> = Vec::new();
    for (ri, r) in ev.rules.iter().enumerate() {
        if usable(ri) && matched[ri].is_empty() {
            let (why, fixed) = explain_no_match(r, m);
            dead.push(format!("{} matches no tensor: {why}", r.label()));
            if let Some(fx) = fixed {
                fixes.push(format!("write rule {} as -ot '{fx}={}'", r.n, r.raw.buffer));
            }
        }
    }
    // Shadowed rules.
    for (ri, r) in ev.rules.iter().enumerate() {
        if !usable(ri) || matched[ri].is_empty() || !won[ri].is_empty() {
            continue;
        }
        let first = matched[ri]
            .iter()
            .filter_map(|i| ev.winners[*i])
            .min()
            .unwrap_or(0);
        let earlier = &ev.rules[first];
        if earlier.to_gpu() != r.to_gpu() || earlier.raw.buffer != r.raw.buffer {
            warns.push(format!(
                "{} never applies: every tensor it matches ({}) is taken first by {}, which sends it to {} (the first matching rule wins: put {} before it)",
                r.label(),
                matched[ri].len(),
                earlier.label(),
                earlier.raw.buffer,
                r.label()
            ));
        } else {
            notes.push(format!(
                "{} is redundant: {} already sends the same tensors to {}",
                r.label(),
                earlier.label(),
                r.raw.buffer
            ));
        }
    }
    // Literal dots and over-broad CPU rules.
    for (ri, r) in ev.rules.iter().enumerate() {
        if !usable(ri) || matched[ri].is_empty() {
            continue;
        }
        let p = r.raw.pattern.as_deref().unwrap_or("");
        if let Some(esc) = escape_literal_dots(p) {
            if let Pattern::Ok(re) = moe::compile(&esc) {
                let strict: Vec<usize> = (0..m.tensors.len())
                    .filter(|i| re.is_match(&m.tensors[*i].name))
                    .collect();
                if strict == matched[ri] {
                    notes.push(format!("{} has unescaped `.` (any character); on this model it matches the same {} tensors as `\\.` would", r.label(), strict.len()));
                } else {
                    let extra: Vec<&str> = matched[ri]
                        .iter()
                        .filter(|i| !strict.contains(i))
                        .map(|i| m.tensors[*i].name.as_str())
                        .collect();
                    notes.push(format!("{} has unescaped `.` (any character) and matches {} tensors more than with `\\.`: {}", r.label(), extra.len(), describe_tensors(&extra)));
                }
            }
        }
        if r.kind == BufferKind::Cpu {
            let extra: Vec<usize> = won[ri]
                .iter()
                .copied()
                .filter(|i| {
                    !m.tensors[*i].routed_expert
                        && moe::default_on_gpu(&m.tensors[*i], m.n_layer, ev.ngl)
                })
                .collect();
            if !extra.is_empty() {
                let b: u64 = extra.iter().map(|i| m.tensors[*i].bytes).sum();
                let names: Vec<&str> = extra.iter().map(|i| m.tensors[*i].name.as_str()).collect();
                notes.push(format!(
                    "{} also keeps {} tensors that -ngl {} would offload in RAM ({}; {}): slower, not wrong",
                    r.label(),
                    extra.len(),
                    ev.ngl,
                    gib(b),
                    describe_tensors(&names)
                ));
            }
        }
    }
    // Routed experts left on the GPU by -ngl.
    if experts.is_empty() {
        notes.push(format!(
            "the model ({}) has no routed-expert tensors",
            m.arch
        ));
    } else if !by_default.is_empty() {
        let names: Vec<&str> = by_default
            .iter()
            .map(|i| m.tensors[*i].name.as_str())
            .collect();
        let offloaded = (0..m.n_layer)
            .filter(|il| moe::layer_on_gpu(*il, m.n_layer, ev.ngl))
            .count();
        let what = format!(
            "{} routed-expert tensors ({}) stay on the GPU: {}",
            by_default.len(),
            gib(default_bytes),
            describe_tensors(&names)
        );
        let unevaluated: Vec<String> = ev
            .rules
            .iter()
            .filter(|r| matches!(r.pattern, Some(Pattern::NotEvaluated(_))))
            .map(Rule::label)
            .collect();
        let deliberate = ev
            .rules
            .iter()
            .any(|r| matches!(r.raw.origin, RuleOrigin::NCpuMoe { .. }));
        let touches_experts = ev.rules.iter().enumerate().any(|(ri, r)| {
            usable(ri)
                && r.kind == BufferKind::Cpu
                && matched[ri].iter().any(|i| m.tensors[*i].routed_expert)
        });
        let miss_layers = sorted_set(by_default.iter().filter_map(|i| m.tensors[*i].layer));
        let miss_text = ranges(&miss_layers);
        if !unevaluated.is_empty() {
            warns.push(format!("{what}, as far as this agent can tell: the placement ignores {}, which it cannot evaluate", unevaluated.join(", ")));
        } else if !touches_experts && dead.is_empty() {
            let s = format!(
                "no -ot rule keeps the experts in RAM: -ngl {} offloads {offloaded} of {} layers and {what}",
                ev.args.ngl.as_deref().unwrap_or("?"),
                m.n_layer
            );
            if fits == Some(true) {
                notes.push(format!("{s}; they fit in free VRAM (see llm.vram_budget)"));
            } else {
                fails.push(s);
                fixes.push(format!("add -ot '{GUIDE_RULE}'"));
            }
        } else {
            let mut why = Vec::new();
            let mut mistake = false;
            // The digit counts of layer numbers (`[10, 12]` → `[2]`), sorted.
            let digits = |s: &[u64]| sorted_set(s.iter().map(|l| l.to_string().len() as u64));
            let miss_digits = digits(&miss_layers);
            for (ri, r) in ev.rules.iter().enumerate() {
                if !usable(ri) || r.kind != BufferKind::Cpu {
                    continue;
                }
                let hit_layers = sorted_set(
                    matched[ri]
                        .iter()
                        .filter(|i| m.tensors[**i].routed_expert)
                        .filter_map(|i| m.tensors[*i].layer),
                );
                if hit_layers.is_empty() || matches!(r.raw.origin, RuleOrigin::NCpuMoe { .. }) {
                    continue;
                }
                let hit_digits = digits(&hit_layers);
                let hits = ranges(&hit_layers);
                let widened = r
                    .raw
                    .pattern
                    .as_deref()
                    .and_then(widen_digit_classes)
                    .filter(|wide| match moe::compile(wide) {
                        Pattern::Ok(re) => {
                            by_default.iter().all(|i| re.is_match(&m.tensors[*i].name))
                        }
                        _ => false,
                    });
                match widened {
                    Some(wide) if hit_digits.iter().all(|d| !miss_digits.contains(d)) => {
                        mistake = true;
                        why.push(format!(
                            "{} covers only layers with {} digit(s) (blk.{hits}): a single `[0-9]` or `\\d` matches one digit, so blk.{miss_text} are not matched; `{wide}` (with `[0-9]+`) covers every layer",
                            r.label(),
                            hit_digits.iter().map(|d| d.to_string()).collect::<Vec<_>>().join("/"),
                        ));
                        fixes.push(format!("write rule {} as -ot '{wide}={}'", r.n, r.raw.buffer));
                    }
                    _ => why.push(format!("{} keeps the experts of blk.{hits} in RAM but not those of blk.{miss_text}", r.label())),
                }
            }
            if !dead.is_empty() {
                mistake = true;
                why.append(&mut dead);
            }
            let text = format!("{what}; {}", why.join("; "));
            if mistake || fits == Some(false) {
                fails.push(text);
                if fixes.iter().all(|x| !x.starts_with("write rule")) {
                    fixes.push(format!("put -ot '{GUIDE_RULE}' first among the -ot rules"));
                }
            } else if deliberate {
                notes.push(format!("{text} (--n-cpu-moe leaves the other layers' experts to -ngl: deliberate; see llm.vram_budget)"));
            } else {
                warns.push(format!("{text}: fine if deliberate and it fits (llm.vram_budget); to keep every expert in RAM use -ot '{GUIDE_RULE}'"));
            }
        }
    }
    for d in dead {
        warns.push(format!("{d}; it has no effect"));
    }
    let explicit: Vec<&str> = on_gpu
        .iter()
        .filter(|i| ev.placed[**i].rule.is_some())
        .map(|i| m.tensors[*i].name.as_str())
        .collect();
    if !explicit.is_empty() {
        notes.push(format!("{} routed-expert tensors go to the GPU by an explicit rule ({}): deliberate, see llm.vram_budget", explicit.len(), describe_tensors(&explicit)));
    }
    let mut summary = if !fails.is_empty() {
        f.status = Status::Fail;
        let mut s = format!("{label}: {}", fails.join("; "));
        if !warns.is_empty() {
            s.push_str(&format!("; {}", warns.join("; ")));
        }
        s
    } else if !warns.is_empty() {
        f.status = Status::Warn;
        format!("{label}: {}", warns.join("; "))
    } else if experts.is_empty() {
        format!("{label}: no routed experts to place")
    } else {
        let keep = experts.len() - on_gpu.len();
        let by: Vec<String> = ev
            .rules
            .iter()
            .enumerate()
            .filter(|(ri, _)| {
                won[*ri]
                    .iter()
                    .any(|i| m.tensors[*i].routed_expert && !ev.placed[*i].gpu)
            })
            .map(|(_, r)| r.label())
            .collect();
        let how = if by.is_empty() {
            format!("-ngl {}", ev.ngl)
        } else {
            by.join(", ")
        };
        format!(
            "{label}: {keep} of {} routed-expert tensors ({}) stay in RAM by {how}; {} of weights go to the GPU with -ngl {}",
            experts.len(),
            gib(expert_bytes - on_gpu_bytes),
            gib(moe::gpu_bytes(m, &ev.placed)),
            ev.args.ngl.as_deref().unwrap_or("(none)")
        )
    };
    if !notes.is_empty() {
        summary.push_str(&format!("; note: {}", notes.join("; ")));
    }
    f.summary = summary;
    if f.status.fires() || !fixes.is_empty() {
        fixes.dedup();
        f.remedy = fixes.join("; ");
        if f.remedy.is_empty() && f.status == Status::Warn {
            f.remedy = "reorder or fix the rules named above (the first matching rule wins)".into();
        }
    }
    f
}

struct Budget {
    finding: Finding,
    /// Everything fits in free VRAM (None: unknown).
    fits: Option<bool>,
}

fn vram(ctx: &Ctx<'_>, l: &LlmProbe, src: &LlmSource, ev: &Eval<'_>) -> Budget {
    let id = "llm.vram_budget";
    let label = src.label();
    let m = &ev.model;
    let reserve = ctx.profile.llm.vram_reserve_bytes;
    let mut f = Finding::new(id, Status::Pass, "");
    source_evidence(src, &mut f);
    let kv_args = KvArgs::from_args(ev.args);
    let kv = moe::kv_plan(m, &kv_args);
    let need_with = |rules: &[Rule],
                     winners: &[Option<usize>],
                     ngl: u64,
                     kv: &Option<moe::KvPlan>,
                     nkvo: bool|
     -> (u64, u64, u64) {
        let placed = placement(m, rules, winners, ngl);
        let w = moe::gpu_bytes(m, &placed);
        let k = kv
            .as_ref()
            .map(|p| p.gpu_bytes(m.n_layer, ngl, nkvo))
            .unwrap_or(0);
        let r = if w + k > 0 { reserve } else { 0 };
        (w, k, r)
    };
    let kv_ok = kv.as_ref().ok().cloned();
    let (w, k, r) = need_with(&ev.rules, &ev.winners, ev.ngl, &kv_ok, kv_args.no_offload);
    let need = w + k + r;
    f = f
        .observed("weights_gpu_bytes", w)
        .observed("kv_cache_gpu_bytes", k)
        .observed("reserve_bytes", r)
        .observed("need_bytes", need);
    let mut notes = ev.notes.clone();
    match &kv {
        Ok(p) => {
            f = f
                .observed(
                    "kv_cache_bytes",
                    (p.k_layer_bytes() + p.v_layer_bytes()).saturating_mul(m.n_layer),
                )
                .observed("kv_cells", p.n_ctx)
                .observed("kv_how", p.how.clone());
            let vq = !matches!(p.v_type.name, "F16" | "F32" | "BF16");
            if p.v_elems > 0 && vq && !ev.args.flash_attn {
                notes.push(format!("-ctv {} needs -fa (llama.cpp refuses a quantized V cache without flash attention)", kv_args.v_type));
            }
        }
        Err(e) => notes.push(format!("KV cache not counted: {e}")),
    }
    // What there is.
    let gpus = match &l.gpus {
        Ok(g) => g,
        Err(e) => {
            f.status = if need > 0 { Status::Info } else { Status::Pass };
            f.summary = format!(
                "{label}: needs {} on the GPU (weights {} + KV cache {} + reserve {}); free VRAM unknown ({e})",
                gib(need),
                gib(w),
                gib(k),
                gib(r)
            );
            if !notes.is_empty() {
                f.summary.push_str(&format!("; note: {}", notes.join("; ")));
            }
            return Budget {
                finding: f,
                fits: None,
            };
        }
    };
    let free: u64 = gpus.iter().map(|g| g.free_bytes).sum();
    let total: u64 = gpus.iter().map(|g| g.total_bytes).sum();
    let names: Vec<String> = gpus
        .iter()
        .map(|g| format!("GPU{} {}", g.index, g.name))
        .collect();
    let (have, have_how) = match (src.pid, &l.gpu_apps) {
        (None, _) => (free, format!("{} free", gib(free))),
        (Some(pid), Some(apps)) => {
            let own: u64 = apps
                .iter()
                .filter(|(p, _)| *p == pid)
                .map(|(_, b)| *b)
                .sum();
            if own > 0 {
                (
                    free + own,
                    format!(
                        "{} free + {} this process already holds",
                        gib(free),
                        gib(own)
                    ),
                )
            } else {
                (free, format!("{} free", gib(free)))
            }
        }
        (Some(_), None) => {
            notes.push("the server is running and per-process GPU memory is unknown: compared with total VRAM, an upper bound".into());
            (total, format!("{} total", gib(total)))
        }
    };
    f = f
        .observed("vram_free_bytes", free)
        .observed("vram_total_bytes", total)
        .observed("gpus", names.clone())
        .expected("need_bytes_at_most", have);
    f.push_evidence(
        &l.gpu_source,
        None,
        &gpus
            .iter()
            .map(|g| {
                format!(
                    "{}, {}, total {} MiB, free {} MiB",
                    g.index,
                    g.name,
                    g.total_bytes >> 20,
                    g.free_bytes >> 20
                )
            })
            .collect::<Vec<_>>()
            .join("; "),
    );
    if gpus.len() > 1 {
        notes.push(format!(
            "{} GPUs: compared with their sum; llama.cpp splits layers between them by free memory",
            gpus.len()
        ));
    }
    let fits = need <= have;
    // Options, each with its effect.
    let mut options: Vec<(String, u64)> = Vec::new();
    let experts_gpu: u64 = m
        .tensors
        .iter()
        .zip(&ev.placed)
        .filter(|(t, p)| t.routed_expert && p.gpu)
        .map(|(t, _)| t.bytes)
        .sum();
    if experts_gpu > 0 {
        let mut raw = ev.args.rules.clone();
        raw.insert(
            0,
            crate::parse::llmargs::RawRule {
                text: GUIDE_RULE.into(),
                pattern: Some(GUIDE_RULE.trim_end_matches("=CPU").into()),
                buffer: "CPU".into(),
                origin: crate::parse::llmargs::RuleOrigin::OverrideTensor { arg: 0 },
            },
        );
        let rules = moe::compile_rules(&raw, Some(gpus.len()));
        let wn = winners(m, &rules);
        let (w2, k2, r2) = need_with(&rules, &wn, ev.ngl, &kv_ok, kv_args.no_offload);
        options.push((
            format!("-ot '{GUIDE_RULE}' as the first rule"),
            need.saturating_sub(w2 + k2 + r2),
        ));
    }
    if let Ok(p) = &kv {
        let variant = |ka: KvArgs| {
            moe::kv_plan(m, &ka)
                .ok()
                .map(|q| q.gpu_bytes(m.n_layer, ev.ngl, ka.no_offload))
        };
        if k > 0 && matches!(p.k_type.name, "F16" | "F32" | "BF16") {
            if let Some(k2) = variant(KvArgs {
                k_type: "q8_0".into(),
                ..kv_args.clone()
            }) {
                options.push(("-ctk q8_0".into(), k.saturating_sub(k2)));
            }
        }
        if k > 0
            && p.v_elems > 0
            && matches!(p.v_type.name, "F16" | "F32" | "BF16")
            && ev.args.flash_attn
        {
            if let Some(k2) = variant(KvArgs {
                v_type: "q8_0".into(),
                ..kv_args.clone()
            }) {
                options.push(("-ctv q8_0".into(), k.saturating_sub(k2)));
            }
        }
        let mla_capable = m.header.arch_u64("attention.kv_lora_rank").is_some();
        if k > 0
            && mla_capable
            && kv_args.engine == Engine::IkLlamaCpp
            && !matches!(kv_args.mla, Some(2) | Some(3))
        {
            if let Some(k2) = variant(KvArgs {
                mla: Some(3),
                ..kv_args.clone()
            }) {
                options.push(("-mla 3 (with -fa)".into(), k.saturating_sub(k2)));
            }
        }
    }
    let eff_ngl = ev.ngl.min(m.n_layer + 1);
    if !fits && eff_ngl > 0 {
        let mut best = None;
        for n in (0..eff_ngl).rev() {
            let (w2, k2, r2) = need_with(&ev.rules, &ev.winners, n, &kv_ok, kv_args.no_offload);
            if w2 + k2 + r2 <= have {
                best = Some((n, w2 + k2 + r2));
                break;
            }
        }
        match best {
            Some((n, need2)) => options.push((format!("-ngl {n}"), need.saturating_sub(need2))),
            None => {
                let (w2, k2, r2) = need_with(&ev.rules, &ev.winners, 0, &kv_ok, kv_args.no_offload);
                options.push(("-ngl 0".into(), need.saturating_sub(w2 + k2 + r2)));
            }
        }
    }
    options.retain(|(_, s)| *s > 0);
    let gap = need.saturating_sub(have);
    f = f.observed(
        "options",
        options
            .iter()
            .map(|(o, s)| json!({"flag": o, "saves_bytes": s, "closes_gap": *s >= gap && gap > 0}))
            .collect::<Vec<_>>(),
    );
    let opt_text = |only_closing: bool| -> String {
        options
            .iter()
            .filter(|(_, s)| !only_closing || *s >= gap)
            .map(|(o, s)| format!("{o}: -{}", gib(*s)))
            .collect::<Vec<_>>()
            .join("; ")
    };
    let what = format!(
        "weights {} + KV cache {} + reserve {}",
        gib(w),
        gib(k),
        gib(r)
    );
    let on = names.join(", ");
    if !fits {
        f.status = Status::Fail;
        let closing = opt_text(true);
        f.summary = format!(
            "{label}: needs {} of VRAM ({what}) but {on} has {have_how}: {} short{}",
            gib(need),
            gib(gap),
            if closing.is_empty() {
                "; no single flag closes the gap".to_string()
            } else {
                format!("; closes the gap: {closing}")
            }
        );
        let all = opt_text(false);
        f.remedy = if all.is_empty() {
            "use a smaller quant, or a GPU with more memory".into()
        } else {
            format!("each with its effect: {all}")
        };
    } else if need.saturating_mul(10) > have.saturating_mul(9) {
        f.status = Status::Warn;
        f.summary = format!("{label}: needs {} of VRAM ({what}), within 10% of {on}'s {have_how}: a larger -ub or context will not fit", gib(need));
        f.remedy = opt_text(false);
    } else {
        f.summary = format!(
            "{label}: needs {} of VRAM ({what}); {on} has {have_how}",
            gib(need)
        );
    }
    if let Ok(p) = &kv {
        f.summary.push_str(&format!(" [KV: {}]", p.how));
    }
    if !notes.is_empty() {
        f.summary.push_str(&format!("; note: {}", notes.join("; ")));
    }
    Budget {
        finding: f,
        fits: Some(fits),
    }
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
