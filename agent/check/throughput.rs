//! Performance decay: the same model's throughput, as the runtime or app logged it, falling by a
//! large factor within one log. A host that is healthy while the figure falls points at the
//! accelerator itself (a clock or power state stuck low).

use super::Ctx;
use crate::model::LogClass;
use crate::parse::throughput::{samples, Sample};

/// A fall this large (best earlier figure / latest figure) on one model is a fault, not noise.
pub const DECAY_FACTOR: f64 = 3.0;

/// One model's throughput fall.
#[derive(Debug, Clone, PartialEq)]
pub struct Decay {
    /// Board path of the log.
    pub file: String,
    /// The model file, when the log names it.
    pub model: Option<String>,
    /// What was measured (`hw_only`, `avg`).
    pub kind: String,
    /// The best earlier figure and its line.
    pub best: (f64, usize),
    /// The latest figure and its line.
    pub latest: (f64, usize),
}

impl Decay {
    /// `yolov8s.hef hw_only fell from 398.43 to 38.00 FPS (10.5x)`.
    pub fn describe(&self) -> String {
        format!(
            "{}{} fell from {:.2} to {:.2} FPS ({:.1}x lower)",
            self.model
                .as_deref()
                .map(|m| format!("{m} "))
                .unwrap_or_default(),
            self.kind,
            self.best.0,
            self.latest.0,
            self.best.0 / self.latest.0.max(0.01)
        )
    }
}

/// The largest throughput fall in the host-side workload logs, if one reaches [`DECAY_FACTOR`].
pub fn worst_decay(ctx: &Ctx<'_>) -> Option<Decay> {
    let mut worst: Option<Decay> = None;
    for log in ctx
        .snap
        .logs
        .iter()
        .filter(|l| l.class == LogClass::Workload)
    {
        let all = samples(&log.lines);
        for last in latest_per_series(&all) {
            let best = all
                .iter()
                .filter(|s| s.line < last.line && same_series(s, last))
                .max_by(|a, b| a.fps.total_cmp(&b.fps));
            let Some(best) = best else { continue };
            if best.fps < DECAY_FACTOR * last.fps {
                continue;
            }
            let d = Decay {
                file: log.path.clone(),
                model: last.model.clone(),
                kind: last.kind.clone(),
                best: (best.fps, best.line),
                latest: (last.fps, last.line),
            };
            let ratio = |d: &Decay| d.best.0 / d.latest.0.max(0.01);
            if worst.as_ref().is_none_or(|w| ratio(&d) > ratio(w)) {
                worst = Some(d);
            }
        }
    }
    worst
}

fn same_series(a: &Sample, b: &Sample) -> bool {
    a.model == b.model && a.kind == b.kind
}

/// The latest sample of each (model, kind) series.
fn latest_per_series(all: &[Sample]) -> Vec<&Sample> {
    let mut out: Vec<&Sample> = Vec::new();
    for s in all.iter().rev() {
        if !out.iter().any(|o| same_series(o, s)) {
            out.push(s);
        }
    }
    out
}
