//! Routed experts that `-ngl` leaves on the GPU: no rule for them, a rule that covers only some
//! layers (a `[0-9]` that should be `[0-9]+`), or a deliberate `--n-cpu-moe`.

use super::*;

/// Judges the routed experts no rule placed; `dead` (rules that match nothing) is taken when it
/// explains them.
pub(super) fn left_on_gpu(
    t: &Tally<'_>,
    fits: Option<bool>,
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
        no_rule(t, fits, &what, v);
    } else {
        partial(t, fits, &what, dead, v);
    }
}

/// No rule touches the experts: a failure unless they fit in free VRAM.
fn no_rule(t: &Tally<'_>, fits: Option<bool>, what: &str, v: &mut Lists) {
    let (ev, m) = (t.ev, t.m);
    let offloaded = (0..m.n_layer)
        .filter(|il| moe::layer_on_gpu(*il, m.n_layer, ev.ngl))
        .count();
    let s = format!(
        "no -ot rule keeps the experts in RAM: -ngl {} offloads {offloaded} of {} layers and {what}",
        ev.args.ngl.as_deref().unwrap_or("?"),
        m.n_layer
    );
    if fits == Some(true) {
        v.notes
            .push(format!("{s}; they fit in free VRAM (see llm.vram_budget)"));
    } else {
        v.fails.push(s);
        v.fixes.push(format!("add -ot '{GUIDE_RULE}'"));
    }
}

/// Some rules keep experts in RAM, not all: a mistake (failure) when a rule misses layers by its
/// digit count or matches nothing, a note under `--n-cpu-moe`, else a warning.
fn partial(t: &Tally<'_>, fits: Option<bool>, what: &str, dead: &mut Vec<String>, v: &mut Lists) {
    let miss_layers = sorted_set(t.by_default.iter().filter_map(|i| t.m.tensors[*i].layer));
    let (mut why, mut mistake) = coverage(t, &miss_layers, &mut v.fixes);
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
            v.fixes
                .push(format!("put -ot '{GUIDE_RULE}' first among the -ot rules"));
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

/// What each CPU rule (not `--n-cpu-moe`) covers of the experts, and whether one misses
/// `miss_layers` only by the digit count of its `[0-9]` (a mistake, fixed in `fixes`).
fn coverage(t: &Tally<'_>, miss_layers: &[u64], fixes: &mut Vec<String>) -> (Vec<String>, bool) {
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
        if hit_layers.is_empty() || matches!(r.raw.origin, RuleOrigin::NCpuMoe { .. }) {
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
            });
        match widened {
            Some(wide) if hit_digits.iter().all(|d| !miss_digits.contains(d)) => {
                mistake = true;
                why.push(format!(
                    "{} covers only layers with {} digit(s) (blk.{hits}): a single `[0-9]` or `\\d` matches one digit, so blk.{miss_text} are not matched; `{wide}` (with `[0-9]+`) covers every layer",
                    r.label(),
                    hit_digits.iter().map(|d| d.to_string()).collect::<Vec<_>>().join("/"),
                ));
                fixes.push(format!(
                    "write rule {} as -ot '{wide}={}'",
                    r.n, r.raw.buffer
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
