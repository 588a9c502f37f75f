//! Routed experts that `-ngl` leaves on the GPU: no rule for them, a rule that covers only some
//! layers (a `[0-9]` that should be `[0-9]+`) or only some expert kinds (a `--cpu-moe` pattern
//! without the fused `gate_up`), or a deliberate `--n-cpu-moe`.

use super::*;

/// Judges the routed experts no rule placed; `dead` (rules that match nothing) is taken when it
/// explains them.
pub(super) fn left_on_gpu(
    t: &Tally<'_>,
    fits: Option<bool>,
    fx: &Fixer<'_>,
    dead: &mut Vec<String>,
    v: &mut Lists,
) {
    let (ev, m) = (t.ev, t.m);
    if t.experts.is_empty() {
        v.notes.push(format!(
            "the model ({}) has no routed-expert tensors",
            m.arch
        ));
        return;
    }
    if t.by_default.is_empty() {
        return;
    }
    let names = t.names(&t.by_default);
    let what = format!(
        "{} routed-expert tensors ({}) stay on the GPU: {}",
        t.by_default.len(),
        gib(t.default_bytes),
        describe_tensors(&names)
    );
    if let Some(why) = &ev.fit {
        // llama.cpp's --fit placed them: it keeps what fits on the GPU.
        v.notes.push(format!("{what} ({why})"));
        return;
    }
    let unevaluated: Vec<String> = ev
        .rules
        .iter()
        .filter(|r| matches!(r.pattern, Some(Pattern::NotEvaluated(_))))
        .map(Rule::label)
        .collect();
    let touches_experts = ev.rules.iter().enumerate().any(|(ri, r)| {
        t.usable(ri)
            && r.kind == BufferKind::Cpu
            && t.matched[ri].iter().any(|i| m.tensors[*i].routed_expert)
    });
    if !unevaluated.is_empty() {
        v.warns.push(format!("{what}, as far as this agent can tell: the placement ignores {}, which it cannot evaluate", unevaluated.join(", ")));
    } else if !touches_experts && dead.is_empty() {
        no_rule(t, fits, fx, &what, v);
    } else {
        partial(t, fits, fx, &what, dead, v);
    }
}

/// The fix that keeps every routed expert in RAM, checked; `replace`: the rule it replaces.
fn expert_fix(
    t: &Tally<'_>,
    fx: &Fixer<'_>,
    replace: Option<usize>,
    v: &mut Lists,
) -> Option<String> {
    let need = |raw: &[RawRule]| fx.need(raw);
    let (rule, var, _, _) = fix::expert_rule(t.ev, replace, &need, fx.budget.have_bytes)?;
    v.checked.push(fx.describe(&rule, &var));
    Some(rule)
}

/// No rule touches the experts: a failure unless they fit in free VRAM.
fn no_rule(t: &Tally<'_>, fits: Option<bool>, fx: &Fixer<'_>, what: &str, v: &mut Lists) {
    let (ev, m) = (t.ev, t.m);
    let offloaded = (0..m.n_layer)
        .filter(|il| moe::layer_on_gpu(*il, m.n_layer, ev.ngl))
        .count();
    let s = format!(
        "no -ot rule keeps the experts in RAM: -ngl {} offloads {offloaded} of {} layers and {what}",
        ev.args.ngl.as_deref().unwrap_or("(unset)"),
        m.n_layer
    );
    if fits == Some(true) {
        v.notes
            .push(format!("{s}; they fit in free VRAM (see llm.vram_budget)"));
    } else {
        v.fails.push(s);
        match expert_fix(t, fx, None, v) {
            Some(rule) => v.fixes.push(format!("add -ot '{rule}'")),
            None => v.fixes.push(format!("add -ot '{GUIDE_RULE}'")),
        }
    }
}

/// Some rules keep experts in RAM, not all: a mistake (failure) when a rule misses layers by its
/// digit count, misses expert kinds (`--cpu-moe`'s pattern without `gate_up`), or matches
/// nothing; a note under `--n-cpu-moe`, else a warning.
fn partial(
    t: &Tally<'_>,
    fits: Option<bool>,
    fx: &Fixer<'_>,
    what: &str,
    dead: &mut Vec<String>,
    v: &mut Lists,
) {
    let miss_layers = sorted_set(t.by_default.iter().filter_map(|i| t.m.tensors[*i].layer));
    let (mut why, mut mistake) = coverage(t, &miss_layers, fx, &mut v.fixes, &mut v.checked);
    let kind_gap = kinds(t, &mut why, &mut v.fixes);
    mistake |= kind_gap;
    let dead_cpu =
        t.ev.rules.iter().enumerate().position(|(ri, r)| {
            t.usable(ri) && t.matched[ri].is_empty() && r.kind == BufferKind::Cpu
        });
    if !dead.is_empty() {
        mistake = true;
        why.append(dead);
    }
    let deliberate =
        t.ev.rules
            .iter()
            .any(|r| matches!(r.raw.origin, RuleOrigin::NCpuMoe { .. }));
    let text = format!("{what}; {}", why.join("; "));
    if mistake || fits == Some(false) {
        v.fails.push(text);
        if v.fixes.iter().all(|x| !x.starts_with("write rule")) {
            // A dead CPU rule was meant for the experts: the checked rule takes its place.
            let fix = match dead_cpu {
                Some(ri) => expert_fix(t, fx, Some(ri), v)
                    .map(|r| format!("write rule {} as -ot '{r}'", t.ev.rules[ri].n)),
                None => expert_fix(t, fx, None, v)
                    .map(|r| format!("put -ot '{r}' first among the -ot rules")),
            };
            v.fixes.insert(
                0,
                fix.unwrap_or_else(|| format!("put -ot '{GUIDE_RULE}' first among the -ot rules")),
            );
        }
    } else if deliberate {
        v.notes.push(format!("{text} (--n-cpu-moe leaves the other layers' experts to -ngl: deliberate; see llm.vram_budget)"));
    } else {
        v.warns.push(format!("{text}: fine if deliberate and it fits (llm.vram_budget); to keep every expert in RAM use -ot '{GUIDE_RULE}'"));
    }
}

/// The digit counts of layer numbers (`[10, 12]` → `[2]`), sorted.
fn digit_counts(s: &[u64]) -> Vec<u64> {
    sorted_set(s.iter().map(|l| l.to_string().len() as u64))
}

/// `ffn_gate_up_exps` from `blk.7.ffn_gate_up_exps.weight`.
fn kind_of(name: &str) -> &str {
    name.split('.').nth(2).unwrap_or(name)
}

/// What each CPU rule (not `--n-cpu-moe`, not `--cpu-moe`) covers of the experts, and whether
/// one misses `miss_layers` only by the digit count of its `[0-9]` (a mistake, fixed in `fixes`).
fn coverage(
    t: &Tally<'_>,
    miss_layers: &[u64],
    fx: &Fixer<'_>,
    fixes: &mut Vec<String>,
    checked: &mut Vec<String>,
) -> (Vec<String>, bool) {
    let (ev, m) = (t.ev, t.m);
    let mut why = Vec::new();
    let mut mistake = false;
    let miss_text = ranges(miss_layers);
    let miss_digits = digit_counts(miss_layers);
    for (ri, r) in ev.rules.iter().enumerate() {
        if !t.usable(ri) || r.kind != BufferKind::Cpu {
            continue;
        }
        let hit_layers = sorted_set(
            t.matched[ri]
                .iter()
                .filter(|i| m.tensors[**i].routed_expert)
                .filter_map(|i| m.tensors[*i].layer),
        );
        if hit_layers.is_empty()
            || matches!(
                r.raw.origin,
                RuleOrigin::NCpuMoe { .. } | RuleOrigin::CpuMoe | RuleOrigin::Fit { .. }
            )
        {
            continue;
        }
        let hit_digits = digit_counts(&hit_layers);
        let hits = ranges(&hit_layers);
        // The rule with every `[0-9]` widened to `[0-9]+`, when that covers every missed expert.
        let widened = r
            .raw
            .pattern
            .as_deref()
            .and_then(widen_digit_classes)
            .filter(|wide| match moe::compile(wide) {
                Pattern::Ok(re) => t
                    .by_default
                    .iter()
                    .all(|i| re.is_match(&m.tensors[*i].name)),
                _ => false,
            })
            .filter(|wide| {
                fx.check(&format!("{wide}={}", r.raw.buffer), Some(ri))
                    .is_ok()
            });
        let overlap = hit_layers.iter().any(|l| miss_layers.contains(l));
        match widened {
            Some(wide) if hit_digits.iter().all(|d| !miss_digits.contains(d)) => {
                mistake = true;
                why.push(format!(
                    "{} covers only layers with {} digit(s) (blk.{hits}): a single `[0-9]` or `\\d` matches one digit, so blk.{miss_text} are not matched; `{wide}` (with `[0-9]+`) covers every layer",
                    r.label(),
                    hit_digits.iter().map(|d| d.to_string()).collect::<Vec<_>>().join("/"),
                ));
                let rule = format!("{wide}={}", r.raw.buffer);
                if let Ok(var) = fx.check(&rule, Some(ri)) {
                    checked.push(fx.describe(&rule, &var));
                }
                fixes.push(format!("write rule {} as -ot '{rule}'", r.n));
            }
            _ if overlap => {
                let hit_kinds =
                    sorted_names(t.matched[ri].iter().map(|i| kind_of(&m.tensors[*i].name)));
                let miss_kinds =
                    sorted_names(t.by_default.iter().map(|i| kind_of(&m.tensors[*i].name)));
                why.push(format!(
                    "{} keeps {} in RAM but not {}",
                    r.label(),
                    hit_kinds.join(", "),
                    miss_kinds.join(", ")
                ));
            }
            _ => why.push(format!(
                "{} keeps the experts of blk.{hits} in RAM but not those of blk.{miss_text}",
                r.label()
            )),
        }
    }
    (why, mistake)
}

fn sorted_names<'s>(it: impl Iterator<Item = &'s str>) -> Vec<&'s str> {
    let mut v: Vec<&str> = it.collect();
    v.sort();
    v.dedup();
    v
}

/// `--cpu-moe` / `--n-cpu-moe` rules that leave expert kinds of their layers on the GPU (the
/// program's pattern lacks them): a mistake, with the build that has them when there is one.
fn kinds(t: &Tally<'_>, why: &mut Vec<String>, fixes: &mut Vec<String>) -> bool {
    let (ev, m) = (t.ev, t.m);
    let flag_rules: Vec<usize> = (0..ev.rules.len())
        .filter(|ri| {
            t.usable(*ri)
                && matches!(
                    ev.rules[*ri].raw.origin,
                    RuleOrigin::CpuMoe | RuleOrigin::NCpuMoe { .. }
                )
        })
        .collect();
    if flag_rules.is_empty() {
        return false;
    }
    let covered_layers = sorted_set(
        flag_rules
            .iter()
            .flat_map(|ri| t.matched[*ri].iter())
            .filter(|i| m.tensors[**i].routed_expert)
            .filter_map(|i| m.tensors[*i].layer),
    );
    let left: Vec<usize> = t
        .by_default
        .iter()
        .copied()
        .filter(|i| {
            m.tensors[*i]
                .layer
                .is_some_and(|l| covered_layers.contains(&l))
        })
        .collect();
    if left.is_empty() {
        return false;
    }
    let hit_kinds = sorted_names(
        flag_rules
            .iter()
            .flat_map(|ri| t.matched[*ri].iter())
            .filter(|i| m.tensors[**i].routed_expert)
            .map(|i| kind_of(&m.tensors[*i].name)),
    );
    let miss_kinds = sorted_names(left.iter().map(|i| kind_of(&m.tensors[*i].name)));
    let pattern = flag_rules
        .first()
        .and_then(|ri| ev.rules[*ri].raw.pattern.clone())
        .unwrap_or_default();
    let flags: Vec<&str> = ev.args.moe_flags.iter().map(|f| f.text.as_str()).collect();
    let fused = miss_kinds.iter().any(|k| k.contains("gate_up"));
    let mut s = format!(
        "{} ({} adds `{pattern}`) keeps {} of blk.{} in RAM but not {}: its pattern does not match {}",
        flags.join(", "),
        ev.program.describe(),
        hit_kinds.join(", "),
        ranges(&covered_layers),
        miss_kinds.join(", "),
        if fused {
            "the fused gate+up experts (`ffn_gate_up_exps`) this model stores"
        } else {
            "every expert tensor of this model"
        }
    );
    if let Some(upgrade) = upgrade_hint(ev, fused) {
        s.push_str(&format!(" ({upgrade})"));
        fixes.push(format!("or {upgrade}"));
    }
    why.push(s);
    true
}

/// The release that gives `--cpu-moe`/`--n-cpu-moe` the fused `gate_up` experts, for a build
/// that predates it.
fn upgrade_hint(ev: &Eval<'_>, fused: bool) -> Option<String> {
    if !fused {
        return None;
    }
    let b = ev.program.build?;
    match ev.program.engine {
        Engine::IkLlamaCpp => (b < 4290).then(|| {
            format!("update ik_llama.cpp past build {b}: PR #1422 (build 4290) adds gate_up to the --cpu-moe/--n-cpu-moe pattern")
        }),
        _ => (b <= upstream::LLAMA_CPP_LAST_WITHOUT_GATE_UP).then(|| {
            format!("update llama.cpp past build {b}: PR #20416 (merged 2026-03-11) adds gate_up to the --cpu-moe/--n-cpu-moe pattern")
        }),
    }
}
