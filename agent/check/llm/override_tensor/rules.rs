//! Per-rule verdicts of `llm.override_tensor`: patterns this agent cannot evaluate, unknown
//! buffers, rules that match nothing, rules shadowed by an earlier one, unescaped dots and CPU
//! rules that also keep non-expert tensors in RAM.

use super::*;

/// Patterns this agent does not evaluate (warned) and buffers it does not know (a fix).
pub(super) fn unevaluated(t: &Tally<'_>, v: &mut Lists) {
    for r in &t.ev.rules {
        if let Some(Pattern::NotEvaluated(why)) = &r.pattern {
            v.warns.push(format!(
                "{} uses {why}, which this agent does not evaluate: the placement below ignores it",
                r.label()
            ));
        }
        if let BufferKind::Unknown(_) = r.kind {
            v.fixes
                .push(format!("write the buffer of {} as CPU or CUDA0", r.label()));
        }
    }
}

/// Rules that match no tensor, each with why; the corrected rule goes to the fixes when there is
/// one that does what the rule was meant to (checked on the model: a "did you mean" that only
/// matches tensors already in RAM is not offered).
pub(super) fn dead(t: &Tally<'_>, fx: &Fixer<'_>, v: &mut Lists) -> Vec<String> {
    let mut dead = Vec::new();
    for (ri, r) in t.ev.rules.iter().enumerate() {
        if t.usable(ri) && t.matched[ri].is_empty() {
            let accept = |p: &str| fx.check(&format!("{p}={}", r.raw.buffer), Some(ri)).is_ok();
            let (why, fixed) = explain_no_match(r, t.m, &accept);
            dead.push(format!("{} matches no tensor: {why}", r.label()));
            if let Some(fixed) = fixed {
                let rule = format!("{fixed}={}", r.raw.buffer);
                if let Ok(var) = fx.check(&rule, Some(ri)) {
                    v.checked.push(fx.describe(&rule, &var));
                }
                v.fixes.push(format!("write rule {} as -ot '{rule}'", r.n));
            }
        }
    }
    dead
}

/// Rules that match tensors but win none: a warning when the earlier winner sends them
/// elsewhere, a note when it sends them to the same buffer.
pub(super) fn shadowed(t: &Tally<'_>, v: &mut Lists) {
    let ev = t.ev;
    for (ri, r) in ev.rules.iter().enumerate() {
        if !t.usable(ri) || t.matched[ri].is_empty() || !t.won[ri].is_empty() {
            continue;
        }
        let first = t.matched[ri]
            .iter()
            .filter_map(|i| ev.winners[*i])
            .min()
            .unwrap_or(0);
        let earlier = &ev.rules[first];
        if earlier.to_gpu() != r.to_gpu() || earlier.raw.buffer != r.raw.buffer {
            v.warns.push(format!(
                "{} never applies: every tensor it matches ({}) is taken first by {}, which sends it to {} (the first matching rule wins: put {} before it)",
                r.label(),
                t.matched[ri].len(),
                earlier.label(),
                earlier.raw.buffer,
                r.label()
            ));
        } else {
            v.notes.push(format!(
                "{} is redundant: {} already sends the same tensors to {}",
                r.label(),
                earlier.label(),
                r.raw.buffer
            ));
        }
    }
}

/// A note when rule `ri` has an unescaped `.`: whether `\.` would match the same tensors.
pub(super) fn literal_dots(t: &Tally<'_>, ri: usize, notes: &mut Vec<String>) {
    let (r, m) = (&t.ev.rules[ri], t.m);
    let p = r.raw.pattern.as_deref().unwrap_or("");
    let Some(esc) = escape_literal_dots(p) else {
        return;
    };
    let Pattern::Ok(re) = moe::compile(&esc) else {
        return;
    };
    let strict: Vec<usize> = (0..m.tensors.len())
        .filter(|i| re.is_match(&m.tensors[*i].name))
        .collect();
    if strict == t.matched[ri] {
        notes.push(format!("{} has unescaped `.` (any character); on this model it matches the same {} tensors as `\\.` would", r.label(), strict.len()));
    } else {
        let extra = t.names(t.matched[ri].iter().filter(|i| !strict.contains(i)));
        notes.push(format!(
            "{} has unescaped `.` (any character) and matches {} tensors more than with `\\.`: {}",
            r.label(),
            extra.len(),
            describe_tensors(&extra)
        ));
    }
}

/// A note when CPU rule `ri` also keeps tensors in RAM that `-ngl` would offload (not experts).
pub(super) fn broad_cpu(t: &Tally<'_>, ri: usize, notes: &mut Vec<String>) {
    let (ev, m) = (t.ev, t.m);
    let r = &ev.rules[ri];
    if r.kind != BufferKind::Cpu {
        return;
    }
    let extra: Vec<usize> = t.won[ri]
        .iter()
        .copied()
        .filter(|i| {
            !m.tensors[*i].routed_expert && moe::default_on_gpu(&m.tensors[*i], m.n_layer, ev.ngl)
        })
        .collect();
    if extra.is_empty() {
        return;
    }
    let b: u64 = extra.iter().map(|i| m.tensors[*i].bytes).sum();
    let names = t.names(&extra);
    notes.push(format!(
        "{} also keeps {} tensors that -ngl {} would offload in RAM ({}; {}): slower, not wrong",
        r.label(),
        extra.len(),
        ev.ngl,
        gib(b),
        describe_tensors(&names)
    ));
}
