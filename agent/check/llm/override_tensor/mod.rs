//! `llm.override_tensor`: what the `-ot` rules of one command line (with `--cpu-moe` /
//! `--n-cpu-moe` as the program's build expands them) do to the model's tensors — which rule wins
//! each tensor, where the expert weights end up, whether the server's own log agrees, and the
//! rule that would put them on the CPU when they do not (checked against the model first).

use super::*;

mod experts;
mod rules;

/// Which tensors each rule matches and wins, and where the routed experts end up (tensor
/// indices into the model).
struct Tally<'a> {
    ev: &'a Eval<'a>,
    m: &'a Model,
    /// Routed-expert tensors.
    experts: Vec<usize>,
    expert_bytes: u64,
    /// Per rule: every tensor its pattern matches.
    matched: Vec<Vec<usize>>,
    /// Per rule: the tensors it wins (the first matching rule wins).
    won: Vec<Vec<usize>>,
    /// Routed experts placed on the GPU, by a rule or by `-ngl`.
    on_gpu: Vec<usize>,
    /// Routed experts on the GPU by `-ngl` alone (no rule placed them).
    by_default: Vec<usize>,
    on_gpu_bytes: u64,
    default_bytes: u64,
}

impl<'a> Tally<'a> {
    fn new(ev: &'a Eval<'a>) -> Self {
        let m = &ev.model;
        let all = 0..m.tensors.len();
        let experts: Vec<usize> = all
            .clone()
            .filter(|i| m.tensors[*i].routed_expert)
            .collect();
        let mut matched: Vec<Vec<usize>> = vec![Vec::new(); ev.rules.len()];
        for (ri, r) in ev.rules.iter().enumerate() {
            if let Some(Pattern::Ok(re)) = &r.pattern {
                matched[ri] = all
                    .clone()
                    .filter(|i| re.is_match(&m.tensors[*i].name))
                    .collect();
            }
        }
        let won: Vec<Vec<usize>> = (0..ev.rules.len())
            .map(|ri| all.clone().filter(|i| ev.winners[*i] == Some(ri)).collect())
            .collect();
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
        let bytes = |v: &[usize]| -> u64 { v.iter().map(|i| m.tensors[*i].bytes).sum() };
        Tally {
            ev,
            m,
            expert_bytes: bytes(&experts),
            on_gpu_bytes: bytes(&on_gpu),
            default_bytes: bytes(&by_default),
            experts,
            matched,
            won,
            on_gpu,
            by_default,
        }
    }

    /// Rule `ri` has a pattern this agent evaluates and a known buffer.
    fn usable(&self, ri: usize) -> bool {
        let r = &self.ev.rules[ri];
        matches!(r.pattern, Some(Pattern::Ok(_))) && !matches!(r.kind, BufferKind::Unknown(_))
    }

    /// The names of tensors `idx`.
    fn names<'s>(&'s self, idx: impl IntoIterator<Item = &'s usize>) -> Vec<&'s str> {
        idx.into_iter()
            .map(|i| self.m.tensors[*i].name.as_str())
            .collect()
    }
}

/// What the rules found, by weight, and the edits that fix it.
struct Lists {
    fails: Vec<String>,
    warns: Vec<String>,
    notes: Vec<String>,
    fixes: Vec<String>,
    /// What the proposed rules were checked against (said once, after the findings).
    checked: Vec<String>,
}

/// Checks proposed rules against the model and the VRAM.
struct Fixer<'a> {
    ev: &'a Eval<'a>,
    budget: &'a Budget<'a>,
}

impl Fixer<'_> {
    /// `rule` (`PATTERN=BUFFER`) in place of rule index `replace` (or first): the variant, or why
    /// it is not offered. Rules to a GPU buffer only need to match something.
    fn check(&self, rule: &str, replace: Option<usize>) -> Result<fix::Variant, &'static str> {
        let v = fix::variant(self.ev, rule, replace).ok_or("its pattern does not compile")?;
        if !rule.ends_with("=CPU") {
            return Ok(v);
        }
        match fix::rejected(&v) {
            Some(why) => Err(why),
            None => Ok(v),
        }
    }

    /// GPU bytes with `raw` as the rules.
    fn need(&self, raw: &[RawRule]) -> u64 {
        self.budget.need_with(raw, self.ev.ngl)
    }

    /// "it keeps 60 tensors (135.00 GiB) off the GPU; the GPU then needs 1.00 GiB of 23.30 GiB".
    fn describe(&self, rule: &str, v: &fix::Variant) -> String {
        let n = self.need(&v.raw);
        let have = match self.budget.have_bytes {
            Some(h) if n <= h => format!(", within the {} the GPU has", gib(h)),
            Some(h) => format!(
                ", still more than the {} the GPU has (see llm.vram_budget)",
                gib(h)
            ),
            None => String::new(),
        };
        format!(
            "-ot '{rule}' checked on this model: it sends {} more tensor(s) to the CPU, {} of them routed experts -ngl left on the GPU; the GPU then needs {}{have}",
            v.moved,
            v.targets_moved,
            gib(n)
        )
    }
}

pub(super) fn override_tensor(src: &LlmSource, ev: &Eval<'_>, budget: &Budget<'_>) -> Finding {
    let t = Tally::new(ev);
    let mut f = observe(src, &t);
    let fx = Fixer { ev, budget };
    let mut v = Lists {
        fails: startup_errors(&ev.rules),
        warns: Vec::new(),
        notes: ev.notes.clone(),
        fixes: Vec::new(),
        checked: Vec::new(),
    };
    rules::unevaluated(&t, &mut v);
    let mut dead = rules::dead(&t, &fx, &mut v);
    rules::shadowed(&t, &mut v);
    for ri in 0..ev.rules.len() {
        if t.usable(ri) && !t.matched[ri].is_empty() {
            rules::literal_dots(&t, ri, &mut v.notes);
            rules::broad_cpu(&t, ri, &mut v.notes);
        }
    }
    experts::left_on_gpu(&t, budget.fits, &fx, &mut dead, &mut v);
    for d in dead {
        v.warns.push(format!("{d}; it has no effect"));
    }
    let explicit = t.names(t.on_gpu.iter().filter(|i| ev.placed[**i].rule.is_some()));
    if !explicit.is_empty() {
        v.notes.push(format!("{} routed-expert tensors go to the GPU by an explicit rule ({}): deliberate, see llm.vram_budget", explicit.len(), describe_tensors(&explicit)));
    }
    if let Some(g) = &ev.log {
        let c = serverlog::compare(ev, g, &mut f);
        if g.run.unknown_buffer.is_some() && v.fails.is_empty() {
            v.fails.push(c.said.join("; "));
            v.fixes.push("write the buffer of every -ot rule as CPU or CUDA<n> after its `=` (names are case-sensitive)".into());
        } else if c.refutes && v.fails.is_empty() && v.warns.is_empty() {
            v.warns.push(format!(
                "{}: the log outranks this analysis",
                c.said.join("; ")
            ));
        } else if !c.said.is_empty() {
            v.notes.push(c.said.join("; "));
        }
        f.observed.insert("log_agrees".into(), json!(!c.refutes));
    }
    if let Some(b) = &ev.program.from {
        f.observed.insert("build_from".into(), json!(b));
    }
    verdict(f, &src.label(), &t, v)
}

/// A passing finding with the model, the rules and where the routed experts go observed.
fn observe(src: &LlmSource, t: &Tally<'_>) -> Finding {
    let (ev, m) = (t.ev, t.m);
    let mut f = Finding::new("llm.override_tensor", Status::Pass, "");
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
    f.observed("engine", ev.program.engine.name())
        .observed("build", ev.program.build)
        .observed("model", ev.model_path.clone())
        .observed("n_layer", m.n_layer)
        .observed("ngl", ev.ngl)
        .observed(
            "rules",
            ev.rules
                .iter()
                .map(|r| r.raw.text.clone())
                .collect::<Vec<_>>(),
        )
        .observed("routed_expert_tensors", t.experts.len())
        .observed("routed_expert_bytes", t.expert_bytes)
        .observed(
            "rule_matches",
            ev.rules
                .iter()
                .enumerate()
                .map(|(ri, r)| json!({"rule": r.n, "text": r.raw.text, "buffer": r.raw.buffer, "matched": t.matched[ri].len(), "applied": t.won[ri].len()}))
                .collect::<Vec<_>>(),
        )
        .observed(
            "experts_on_gpu",
            t.on_gpu
                .iter()
                .map(|i| m.tensors[*i].name.clone())
                .collect::<Vec<_>>(),
        )
        .observed("experts_on_gpu_bytes", t.on_gpu_bytes)
        .observed("gpu_weight_bytes", moe::gpu_bytes(m, &ev.placed))
        .observed("experts_on_gpu_by_ngl", t.by_default.len())
        .expected("experts_on_gpu_by_ngl", 0)
}

/// Status, summary and remedy: failures first, then warnings, then where the experts stay.
fn verdict(mut f: Finding, label: &str, t: &Tally<'_>, mut v: Lists) -> Finding {
    let mut summary = if !v.fails.is_empty() {
        f.status = Status::Fail;
        let mut s = format!("{label}: {}", v.fails.join("; "));
        if !v.warns.is_empty() {
            s.push_str(&format!("; {}", v.warns.join("; ")));
        }
        s
    } else if !v.warns.is_empty() {
        f.status = Status::Warn;
        format!("{label}: {}", v.warns.join("; "))
    } else if t.experts.is_empty() {
        format!("{label}: no routed experts to place")
    } else {
        placed_summary(label, t)
    };
    if !v.checked.is_empty() && f.status.fires() {
        summary.push_str(&format!("; {}", v.checked.join("; ")));
    }
    if !v.notes.is_empty() {
        summary.push_str(&format!("; note: {}", v.notes.join("; ")));
    }
    f.summary = summary;
    if f.status.fires() || !v.fixes.is_empty() {
        v.fixes.dedup();
        f.remedy = v.fixes.join("; ");
        if f.remedy.is_empty() && f.status == Status::Warn {
            f.remedy = "reorder or fix the rules named above (the first matching rule wins)".into();
        }
    }
    f
}

/// "N of M routed-expert tensors (X GiB) stay in RAM by <rules or -ngl>; Y GiB of weights go
/// to the GPU with -ngl N".
fn placed_summary(label: &str, t: &Tally<'_>) -> String {
    let (ev, m) = (t.ev, t.m);
    let keep = t.experts.len() - t.on_gpu.len();
    let by: Vec<String> = ev
        .rules
        .iter()
        .enumerate()
        .filter(|(ri, _)| {
            t.won[*ri]
                .iter()
                .any(|i| m.tensors[*i].routed_expert && !ev.placed[*i].gpu)
        })
        .map(|(_, r)| r.label())
        .collect();
    let how = if ev.fit.is_some() && !by.is_empty() {
        "llama.cpp's --fit".to_string()
    } else if by.is_empty() {
        format!("-ngl {}", ev.ngl)
    } else {
        by.join(", ")
    };
    format!(
        "{label}: {keep} of {} routed-expert tensors ({}) stay in RAM by {how}; {} of weights go to the GPU with -ngl {}",
        t.experts.len(),
        gib(t.expert_bytes - t.on_gpu_bytes),
        gib(moe::gpu_bytes(m, &ev.placed)),
        ev.args.ngl.as_deref().unwrap_or("(none)")
    )
}
