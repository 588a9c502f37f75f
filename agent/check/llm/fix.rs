//! `-ot` rules proposed as fixes, each checked against the model before it is printed: it must
//! send to the CPU the routed experts `-ngl` leaves on the GPU (not only tensors already in
//! RAM), and the VRAM need with it applied is what the remedy reports.

use super::*;

/// What a rule changes when applied to a command line.
pub(super) struct Variant {
    /// The rules with it applied.
    pub raw: Vec<RawRule>,
    /// Tensors it sends from the GPU to the CPU.
    pub moved: usize,
    /// Routed experts on the GPU by `-ngl` (the tensors meant to move) that it sends to the CPU.
    pub targets_moved: usize,
    /// Routed experts on the GPU by `-ngl` before it.
    pub targets: usize,
}

impl Variant {
    /// It moves every tensor meant to move.
    pub fn complete(&self) -> bool {
        self.targets > 0 && self.targets_moved == self.targets
    }
}

/// `rule` (`PATTERN=CPU`) put first, or in place of rule index `replace`; `None` when the pattern
/// does not compile.
pub(super) fn variant(ev: &Eval<'_>, rule: &str, replace: Option<usize>) -> Option<Variant> {
    let (pattern, buffer) = rule.split_once('=')?;
    let new = RawRule {
        text: rule.to_string(),
        pattern: Some(pattern.to_string()),
        buffer: buffer.to_string(),
        origin: RuleOrigin::OverrideTensor { arg: 0 },
    };
    let mut raw = ev.raw_rules.clone();
    match replace {
        Some(i) if i < raw.len() => raw[i] = new,
        _ => raw.insert(0, new),
    }
    let rules = moe::compile_rules(&raw, None);
    if !matches!(
        rules
            .get(replace.filter(|i| *i < raw.len()).unwrap_or(0))
            .and_then(|r| r.pattern.as_ref()),
        Some(Pattern::Ok(_))
    ) {
        return None;
    }
    let w = winners(&ev.model, &rules);
    let placed = placement(&ev.model, &rules, &w, ev.ngl);
    let mut v = Variant {
        raw,
        moved: 0,
        targets_moved: 0,
        targets: 0,
    };
    for ((t, before), after) in ev.model.tensors.iter().zip(&ev.placed).zip(&placed) {
        let target = t.routed_expert && before.gpu && before.rule.is_none();
        v.targets += usize::from(target);
        if before.gpu && !after.gpu {
            v.moved += 1;
            v.targets_moved += usize::from(target);
        }
    }
    Some(v)
}

/// Why a proposed rule is not offered, or `None` when it does what it is meant to.
pub(super) fn rejected(v: &Variant) -> Option<&'static str> {
    if v.moved == 0 {
        Some("it only matches tensors that are already in RAM")
    } else if v.targets > 0 && v.targets_moved == 0 {
        Some("it does not match the routed experts left on the GPU")
    } else {
        None
    }
}

/// The routed-expert kinds of the model in the order llama.cpp lists them (`gate_up`, `up`,
/// `gate`, `down`, then any other), and whether any is a `_chexps` (chunked) tensor.
fn expert_kinds(m: &Model) -> (Vec<String>, bool) {
    let mut kinds: Vec<String> = Vec::new();
    let mut ch = false;
    for t in m.tensors.iter().filter(|t| t.routed_expert) {
        let Some(kind) = t.name.split('.').nth(2) else {
            continue;
        };
        let Some(mid) = kind.strip_prefix("ffn_") else {
            continue;
        };
        let mid = if let Some(x) = mid.strip_suffix("_chexps") {
            ch = true;
            x
        } else {
            mid.strip_suffix("_exps").unwrap_or(mid)
        };
        if !kinds.iter().any(|k| k == mid) {
            kinds.push(mid.to_string());
        }
    }
    let order = |k: &str| {
        ["gate_up", "up", "gate", "down"]
            .iter()
            .position(|x| *x == k)
            .unwrap_or(4)
    };
    kinds.sort_by_key(|k| order(k));
    (kinds, ch)
}

/// `\.ffn_(gate_up|down)_exps=CPU`: every routed-expert kind of this model, by name.
pub(super) fn kinds_rule(m: &Model) -> Option<String> {
    let (kinds, ch) = expert_kinds(m);
    if kinds.is_empty() {
        return None;
    }
    let suffix = if ch { "_(ch|)exps" } else { "_exps" };
    let kinds: Vec<String> = kinds.iter().map(|k| escape_regex(k)).collect();
    Some(format!(r"\.ffn_({}){suffix}=CPU", kinds.join("|")))
}

/// True when the experts left on the GPU are of a kind that older `--cpu-moe` patterns miss
/// (fused `gate_up`, chunked `_chexps`), or `--cpu-moe`/`--n-cpu-moe` are in use: the rule that
/// names the kinds explains the fix better than the guide's catch-all.
fn kinds_first(ev: &Eval<'_>) -> bool {
    ev.has_moe_flags()
        || ev.model.tensors.iter().zip(&ev.placed).any(|(t, p)| {
            t.routed_expert && p.gpu && (t.name.contains("_gate_up_") || t.name.contains("_chexps"))
        })
}

/// A rule keeping every routed expert in RAM, checked: the guide's rule or the model's kinds by
/// name (the first that moves every expert `-ngl` leaves on the GPU and, when `have_bytes` is
/// known, fits), put first or in place of rule index `replace`. With the rule: (rule, variant,
/// need in bytes, fits).
pub(super) fn expert_rule(
    ev: &Eval<'_>,
    replace: Option<usize>,
    need: &dyn Fn(&[RawRule]) -> u64,
    have_bytes: Option<u64>,
) -> Option<(String, Variant, u64, Option<bool>)> {
    let mut candidates = vec![GUIDE_RULE.to_string()];
    if let Some(k) = kinds_rule(&ev.model) {
        if kinds_first(ev) {
            candidates.insert(0, k);
        } else {
            candidates.push(k);
        }
    }
    let mut first_complete = None;
    for c in candidates {
        let Some(v) = variant(ev, &c, replace) else {
            continue;
        };
        if !v.complete() {
            continue;
        }
        let n = need(&v.raw);
        let fits = have_bytes.map(|h| n <= h);
        if fits != Some(false) {
            return Some((c, v, n, fits));
        }
        if first_complete.is_none() {
            first_complete = Some((c, v, n, fits));
        }
    }
    first_complete
}
