//! Throughput figures an NPU runtime or app logs for a model: `hailortcli benchmark`/`run`
//! summaries (`FPS (hw_only) = 398.43`) and RKNN benchmark lines (`Avg FPS = 75.6`). The model a
//! figure belongs to is the last `.hef`/`.rknn` path named above it in the same log.

/// One throughput figure.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// The model file the figure is for (basename), when the log names one.
    pub model: Option<String>,
    /// What was measured (`hw_only`, `streaming`, `avg`).
    pub kind: String,
    /// Frames per second.
    pub fps: f64,
    /// 1-based line of the figure.
    pub line: usize,
}

/// The last model file (`*.hef`, `*.rknn`, `*.rkllm`) a line names.
fn model_in(line: &str) -> Option<String> {
    line.split(|c: char| c.is_whitespace() || c == '=' || c == '"' || c == '\'')
        .filter(|w| w.ends_with(".hef") || w.ends_with(".rknn") || w.ends_with(".rkllm"))
        .map(|w| w.rsplit('/').next().unwrap_or(w).to_string())
        .next_back()
}

/// `FPS (kind) = N`, a continuation `(kind) = N` right after one, or `Avg FPS = N`.
fn figure(line: &str, after_fps: bool) -> Option<(String, f64)> {
    let t = line.trim();
    let (label, value) = t.split_once('=')?;
    let value: f64 = value.split_whitespace().next()?.parse().ok()?;
    if !value.is_finite() || value < 0.0 {
        return None;
    }
    let label = label.trim();
    let kind = |l: &str| {
        l.split_once('(')
            .and_then(|(_, r)| r.split_once(')'))
            .map(|(k, _)| k.trim().to_string())
    };
    if let Some(rest) = label.strip_prefix("FPS") {
        return Some((kind(rest).unwrap_or_else(|| "fps".into()), value));
    }
    if label.ends_with("Avg FPS") || label.ends_with("avg fps") {
        return Some(("avg".into(), value));
    }
    if after_fps && label.starts_with('(') {
        return kind(label).map(|k| (k, value));
    }
    None
}

/// Every throughput figure in `lines`, in order.
pub fn samples(lines: &[String]) -> Vec<Sample> {
    let mut out = Vec::new();
    let mut model = None;
    let mut after_fps = false;
    for (i, line) in lines.iter().enumerate() {
        if let Some(m) = model_in(line) {
            model = Some(m);
        }
        match figure(line, after_fps) {
            Some((kind, fps)) => {
                after_fps = true;
                out.push(Sample {
                    model: model.clone(),
                    kind,
                    fps,
                    line: i + 1,
                });
            }
            None => after_fps = false,
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn l(s: &str) -> Vec<String> {
        s.lines().map(str::to_string).collect()
    }

    #[test]
    fn hailortcli_summaries() {
        let s = samples(&l("hailortcli benchmark resources/yolov8s.hef\nSummary\nFPS     (hw_only)                 = 398.43\n        (streaming)               = 318.27\nLatency (hw)                      = 6.71 ms\n"));
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].model.as_deref(), Some("yolov8s.hef"));
        assert_eq!(
            (s[0].kind.as_str(), s[0].fps, s[0].line),
            ("hw_only", 398.43, 3)
        );
        assert_eq!((s[1].kind.as_str(), s[1].fps), ("streaming", 318.27));
    }

    #[test]
    fn rknn_avg_and_junk() {
        let s = samples(&l("model: ./yolov5s.rknn\nAvg Time 13.21ms, Avg FPS = 75.7\nFPS = NaN\nFPS = -3\nLatency (hw) = 6 ms"));
        assert_eq!(s.len(), 1);
        assert_eq!(s[0].model.as_deref(), Some("yolov5s.rknn"));
        assert_eq!(s[0].fps, 75.7);
        assert!(samples(&l("(streaming) = 3\n= =\nFPS (x = 1")).len() <= 1);
    }
}
