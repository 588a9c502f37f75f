//! `llm.override_tensor`: what the `-ot` rules of one command line do to the model's tensors —
//! which rule wins each tensor, where the expert weights end up, and the rule that would put
//! them on the CPU when they do not.

use super::*;

pub(super) fn override_tensor(src: &LlmSource, ev: &Eval<'_>, fits: Option<bool>) -> Finding {
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
