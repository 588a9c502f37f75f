//! The daemon's operator log: a lean `tracing` subscriber that writes one line per event to
//! stderr (the systemd journal when run as a service), rate-limited per call site.
//!
//! Line shape: `npu-agent: LEVEL target: message key=value ...`. When stderr is connected to
//! the journal (systemd sets `JOURNAL_STREAM`), each line starts with the syslog priority prefix
//! (`<3>` error, `<4>` warn, `<6>` info, `<7>` debug) that journald turns into the entry's
//! priority, so `journalctl -u npu-agent -p warning` works.
//!
//! Rate limit: at most [`BURST_PER_WINDOW`] lines per call site in each [`WINDOW_S`]-second
//! window; the lines dropped are counted and reported on the next line that call site writes
//! (`(N similar lines suppressed)`). A flood of hostile commands therefore cannot flood the journal.
//!
//! Levels: `RUST_LOG`, else the `[log] level` setting (`NPU_AGENT_LOG_LEVEL`), else the
//! command's default (`info` for `npu-agent run`, `warn` for the others) decides what is written.
//! A value is a level (`debug`) or `target=level` directives separated by commas
//! (`warn,mqtt::link=debug`), read by `tracing-subscriber`'s [`Targets`]; a target is the
//! module path as the lines print it (without `npu_agent::`), matched as a prefix.
//!
//! Spans are not used by the agent; the subscriber gives every span the same id and records
//! nothing for them.

use std::fmt::Write as _;
use std::io::Write as _;
use std::sync::Mutex;
use std::time::Instant;

use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Level, Metadata, Subscriber};
use tracing_subscriber::filter::{LevelFilter, Targets};

/// Lines one call site may write per window.
pub const BURST_PER_WINDOW: u32 = 20;
/// Length of a rate-limit window, seconds.
pub const WINDOW_S: u64 = 60;
/// Longest line written (bytes); longer ones are cut at a character boundary and end in `…`.
pub const MAX_LINE_BYTES: usize = 2048;

/// Per call site: window start, lines written in it, lines suppressed since the last written one.
struct SiteState {
    window_start: Instant,
    written: u32,
    suppressed: u64,
}

/// A `tracing` subscriber writing rate-limited lines to stderr. See the module docs.
pub struct StderrLog {
    filter: Targets,
    journal_prefix: bool,
    /// Per call site, in the order first seen (a few dozen call sites: a list is enough).
    sites: Mutex<Vec<(tracing::callsite::Identifier, SiteState)>>,
}

impl StderrLog {
    /// A subscriber that writes events at `max_level` and more severe. `journal_prefix` adds
    /// the syslog priority prefix (`<N>`) journald reads.
    pub fn new(max_level: Level, journal_prefix: bool) -> Self {
        Self::with_filter(Targets::new().with_default(max_level), journal_prefix)
    }

    /// A subscriber that writes the events `filter` enables (targets without `npu_agent::`).
    pub fn with_filter(filter: Targets, journal_prefix: bool) -> Self {
        StderrLog {
            filter,
            journal_prefix,
            sites: Mutex::new(Vec::new()),
        }
    }

    /// Formats one event as the line written (without the trailing newline), or `None` when the
    /// call site is over its rate limit. `now` is the monotonic time of the event.
    pub fn format_event(&self, event: &Event<'_>, now: Instant) -> Option<String> {
        let meta = event.metadata();
        let suppressed = {
            let mut sites = self.sites.lock().unwrap_or_else(|p| p.into_inner());
            let id = meta.callsite();
            let at = match sites.iter().position(|(s, _)| *s == id) {
                Some(i) => i,
                None => {
                    let st = SiteState {
                        window_start: now,
                        written: 0,
                        suppressed: 0,
                    };
                    sites.push((id, st));
                    sites.len() - 1
                }
            };
            let st = &mut sites[at].1;
            if now.duration_since(st.window_start).as_secs() >= WINDOW_S {
                st.window_start = now;
                st.written = 0;
            }
            if st.written >= BURST_PER_WINDOW {
                st.suppressed = st.suppressed.saturating_add(1);
                return None;
            }
            st.written += 1;
            std::mem::take(&mut st.suppressed)
        };
        let mut v = LineVisitor::default();
        event.record(&mut v);
        let mut line = String::with_capacity(96);
        if self.journal_prefix {
            let prio = match *meta.level() {
                Level::ERROR => 3,
                Level::WARN => 4,
                Level::INFO => 6,
                _ => 7,
            };
            let _ = write!(line, "<{prio}>");
        }
        let target = short_target(meta.target());
        let _ = write!(
            line,
            "npu-agent: {} {}: {}",
            meta.level(),
            target,
            v.message
        );
        line.push_str(&v.fields);
        if suppressed > 0 {
            let _ = write!(line, " ({suppressed} similar lines suppressed)");
        }
        Some(sanitize(line))
    }
}

/// A target as the lines print it: the module path without `npu_agent::`.
fn short_target(target: &str) -> &str {
    target.strip_prefix("npu_agent::").unwrap_or(target)
}

/// Replaces control characters (a board or broker controls much of what is logged) so that one
/// event stays one journal line, and cuts the line at [`MAX_LINE_BYTES`].
fn sanitize(line: String) -> String {
    let mut out = String::with_capacity(line.len().min(MAX_LINE_BYTES + 4));
    for c in line.chars() {
        if out.len() + c.len_utf8() > MAX_LINE_BYTES {
            out.push('…');
            break;
        }
        if c.is_control() {
            let _ = write!(out, "\\u{{{:x}}}", c as u32);
        } else {
            out.push(c);
        }
    }
    out
}

/// Collects an event's `message` and its other fields as ` key=value`.
#[derive(Default)]
struct LineVisitor {
    message: String,
    fields: String,
}

impl Visit for LineVisitor {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.message.push_str(value);
        } else if value.is_empty() || value.contains([' ', '"', '=']) {
            let _ = write!(self.fields, " {}={:?}", field.name(), value);
        } else {
            let _ = write!(self.fields, " {}={}", field.name(), value);
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            let _ = write!(self.message, "{value:?}");
        } else {
            let _ = write!(self.fields, " {}={:?}", field.name(), value);
        }
    }
}

impl Subscriber for StderrLog {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        self.filter
            .would_enable(short_target(metadata.target()), metadata.level())
    }

    fn max_level_hint(&self) -> Option<LevelFilter> {
        let directives = (&self.filter).into_iter().map(|(_, level)| level);
        directives
            .chain(self.filter.default_level())
            .max()
            .or(Some(LevelFilter::OFF))
    }

    fn new_span(&self, _span: &Attributes<'_>) -> Id {
        Id::from_u64(1)
    }

    fn record(&self, _span: &Id, _values: &Record<'_>) {}

    fn record_follows_from(&self, _span: &Id, _follows: &Id) {}

    fn event(&self, event: &Event<'_>) {
        if let Some(mut line) = self.format_event(event, Instant::now()) {
            line.push('\n');
            // One write per line; a closed stderr is not worth dying for.
            let _ = std::io::stderr().lock().write_all(line.as_bytes());
        }
    }

    fn enter(&self, _span: &Id) {}

    fn exit(&self, _span: &Id) {}
}

/// Reads a level setting: a level (`info`) or `target=level` directives separated by commas
/// (`warn,mqtt::link=debug`).
///
/// Errors: the value is not such a list (the message quotes it, cut to 64 characters).
pub fn parse_level(spec: &str) -> Result<Targets, String> {
    let spec = spec.trim();
    let shown: String = spec.chars().take(64).collect();
    if spec.is_empty() {
        return Err("log level is empty (expected e.g. info, or warn,mqtt::link=debug)".into());
    }
    // `Targets` reads a bare word as a target with every level on; here a bare word must be a
    // level, so a misspelt level is an error rather than a silent filter.
    if let Some(word) = spec
        .split(',')
        .map(str::trim)
        .find(|d| !d.contains('=') && d.parse::<LevelFilter>().is_err())
    {
        let word: String = word.chars().take(64).collect();
        return Err(format!(
            "log level {shown:?}: {word:?} is not a level (error, warn, info, debug, trace, off)"
        ));
    }
    spec.parse::<Targets>().map_err(|e| {
        format!("log level {shown:?} is not a level or target=level list ({e}; expected e.g. info, or warn,mqtt::link=debug)")
    })
}

/// The filter in force: `RUST_LOG` when set (an unusable one is an error, as the setting is),
/// else `configured` (`[log] level`), else `default`.
///
/// Errors: [`parse_level`]'s, naming where the value came from.
pub fn choose_filter(
    rust_log: Option<&str>,
    configured: Option<&str>,
    default: Level,
) -> Result<Targets, String> {
    match (rust_log, configured) {
        (Some(v), _) => parse_level(v).map_err(|e| format!("RUST_LOG: {e}")),
        (None, Some(v)) => parse_level(v).map_err(|e| format!("[log] level: {e}")),
        (None, None) => Ok(Targets::new().with_default(default)),
    }
}

/// Installs [`StderrLog`] as the process-wide subscriber with `filter` (the journal prefix when
/// `JOURNAL_STREAM` is set). The first call wins; later calls are no-ops.
pub fn init(filter: Targets) {
    let journal = std::env::var_os("JOURNAL_STREAM").is_some();
    let _ = tracing::subscriber::set_global_default(StderrLog::with_filter(filter, journal));
}

/// Installs the log for a command: `RUST_LOG`, else `configured`, else `default`. An unusable
/// `RUST_LOG` is logged as a warning and `configured`/`default` used instead: a typo in the
/// environment must not keep the agent from running.
pub fn init_for(configured: Option<&str>, default: Level) {
    match choose_filter(rust_log_env().as_deref(), configured, default) {
        Ok(f) => init(f),
        Err(e) => {
            let fallback = choose_filter(None, configured, default)
                .unwrap_or_else(|_| Targets::new().with_default(default));
            init(fallback);
            tracing::warn!("{e}; ignored");
        }
    }
}

/// `RUST_LOG` as set, when it is valid Unicode.
pub fn rust_log_env() -> Option<String> {
    std::env::var("RUST_LOG")
        .ok()
        .filter(|v| !v.trim().is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// Captures formatted lines instead of writing them.
    struct Capture {
        log: StderrLog,
        lines: Mutex<Vec<String>>,
    }

    impl Subscriber for Capture {
        fn enabled(&self, m: &Metadata<'_>) -> bool {
            self.log.enabled(m)
        }
        fn new_span(&self, _span: &Attributes<'_>) -> Id {
            Id::from_u64(1)
        }
        fn record(&self, _span: &Id, _values: &Record<'_>) {}
        fn record_follows_from(&self, _span: &Id, _follows: &Id) {}
        fn event(&self, event: &Event<'_>) {
            if let Some(l) = self.log.format_event(event, Instant::now()) {
                self.lines.lock().unwrap().push(l);
            }
        }
        fn enter(&self, _span: &Id) {}
        fn exit(&self, _span: &Id) {}
    }

    fn capture(journal: bool, f: impl FnOnce()) -> Vec<String> {
        capture_with(StderrLog::new(Level::INFO, journal), f)
    }

    fn capture_with(log: StderrLog, f: impl FnOnce()) -> Vec<String> {
        let c = Arc::new(Capture {
            log,
            lines: Mutex::new(Vec::new()),
        });
        tracing::subscriber::with_default(c.clone(), f);
        let lines = c.lines.lock().unwrap().clone();
        lines
    }

    #[test]
    fn line_shape_fields_and_priority() {
        let lines = capture(true, || {
            tracing::warn!(cmd_id = "c1", reason = "rate limited", "command rejected");
            tracing::debug!("not written at info");
            tracing::error!(code = 5u8, "connection refused");
        });
        assert_eq!(lines.len(), 2);
        assert_eq!(
            lines[0],
            "<4>npu-agent: WARN sys::log::tests: command rejected cmd_id=c1 reason=\"rate limited\""
        );
        assert_eq!(
            lines[1],
            "<3>npu-agent: ERROR sys::log::tests: connection refused code=5"
        );
    }

    #[test]
    fn rate_limited_per_call_site_with_a_count() {
        let lines = capture(false, || {
            for i in 0..(BURST_PER_WINDOW + 5) {
                tracing::info!(i, "flood");
            }
            tracing::info!("other site");
        });
        // The flooding site wrote its burst; the other site is unaffected.
        assert_eq!(lines.len() as u32, BURST_PER_WINDOW + 1);
        assert_eq!(
            lines.last().unwrap(),
            "npu-agent: INFO sys::log::tests: other site"
        );
    }

    #[test]
    fn control_characters_and_long_lines_are_neutralised() {
        let long = "x".repeat(MAX_LINE_BYTES * 2);
        let lines = capture(false, || {
            tracing::info!(model = "evil\n<0>root\x1b[31m", "board");
            tracing::info!(blob = long.as_str(), "long");
        });
        assert!(!lines[0].contains('\n') && !lines[0].contains('\x1b'));
        assert!(lines[0].contains("\\u{a}<0>root"), "{}", lines[0]);
        assert!(lines[1].len() <= MAX_LINE_BYTES + '…'.len_utf8());
        assert!(lines[1].ends_with('…'));
    }

    #[test]
    fn levels_and_target_directives_filter_events() {
        let log = |spec: &str| StderrLog::with_filter(parse_level(spec).unwrap(), false);
        let emit = || {
            tracing::debug!("debug line");
            tracing::info!("info line");
            tracing::warn!("warn line");
        };
        assert_eq!(capture_with(log("warn"), emit).len(), 1);
        assert_eq!(capture_with(log("debug"), emit).len(), 3);
        // This module's target is sys::log::tests: a directive for it beats the default.
        assert_eq!(capture_with(log("error,sys::log=debug"), emit).len(), 3);
        assert_eq!(capture_with(log("info,mqtt=debug"), emit).len(), 2);
        assert_eq!(capture_with(log("off"), emit).len(), 0);
    }

    #[test]
    fn rust_log_wins_and_bad_values_are_named() {
        let f = choose_filter(Some("debug"), Some("error"), Level::WARN).unwrap();
        assert!(f.would_enable("daemon", &Level::DEBUG));
        let f = choose_filter(None, Some("error"), Level::WARN).unwrap();
        assert!(!f.would_enable("daemon", &Level::WARN));
        let f = choose_filter(None, None, Level::WARN).unwrap();
        assert!(f.would_enable("daemon", &Level::WARN) && !f.would_enable("daemon", &Level::INFO));
        let e = choose_filter(None, Some("loud"), Level::INFO).unwrap_err();
        assert!(
            e.starts_with("[log] level: log level \"loud\": \"loud\" is not a level"),
            "{e}"
        );
        let e = choose_filter(Some("a=b=c"), None, Level::INFO).unwrap_err();
        assert!(e.starts_with("RUST_LOG:"), "{e}");
        assert!(parse_level("  ").is_err());
    }
}
