//! What `fleet serve` keeps of a board beyond `fleet watch`'s row ([`super::super::BoardRow`]):
//! the firing findings with their summary, evidence and remedy, every check's status, the
//! versions, NPU load, throttling and the last commands; and the changes between two of them
//! ([`changes`]), which are the history's rows. Everything is cut to fixed lengths when read
//! (a board's status is hostile): at most [`MAX_FINDINGS`] findings, [`MAX_EVIDENCE`] evidence
//! lines each, [`MAX_TEXT_CHARS`] characters a text.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use std::collections::{BTreeMap, VecDeque};

/// The most findings kept of one status.
pub const MAX_FINDINGS: usize = 32;
/// The most evidence lines kept of one finding.
pub const MAX_EVIDENCE: usize = 8;
/// The most characters kept of a summary, remedy or evidence text.
pub const MAX_TEXT_CHARS: usize = 600;
/// The most characters kept of an id, version, status word or file name.
pub const MAX_WORD_CHARS: usize = 128;
/// The most check ids kept of one status.
pub const MAX_CHECKS: usize = 64;
/// The most commands kept per board (the newest).
pub const MAX_COMMANDS: usize = 10;

/// `s` cut to `n` characters.
pub fn cut(s: &str, n: usize) -> String {
    s.chars().take(n).collect()
}

/// A board's versions; empty when the board has not said.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Versions {
    /// The agent's (`agent_version`).
    pub agent: String,
    /// The kernel release (`kernel_release` of a finding).
    pub kernel: String,
    /// The NPU driver's (`driver_version`).
    pub driver: String,
    /// The NPU runtime library's (`library_version`).
    pub runtime: String,
    /// The NPU firmware's (`device_firmware_version`).
    pub firmware: String,
}

impl Versions {
    /// (name, value) of each version, in a fixed order.
    pub fn pairs(&self) -> [(&'static str, &str); 5] {
        [
            ("agent", &self.agent),
            ("kernel", &self.kernel),
            ("driver", &self.driver),
            ("runtime", &self.runtime),
            ("firmware", &self.firmware),
        ]
    }
}

/// One evidence line of a finding.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvidenceView {
    /// Board path.
    pub file: String,
    /// 1-based line, when one line.
    pub line: Option<u64>,
    /// The line or value as read.
    pub text: String,
}

/// A finding that is not `pass`/`skip`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FindingView {
    /// Check id.
    pub id: String,
    /// `fail`, `warn`, `error` or `info`.
    pub status: String,
    /// One line a person reads first.
    pub summary: String,
    /// What to do, as text.
    pub remedy: String,
    /// `fix` can carry the remedy out (`fleet send fix`).
    pub fixable: bool,
    /// Files and lines the verdict rests on.
    pub evidence: Vec<EvidenceView>,
}

/// A command's outcome, from the status's `last_action`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CommandView {
    /// The action (`compact`, `set_cma`, ...).
    pub action: String,
    /// Its state (`successful`, `failed`, `rejected`, `executing`).
    pub status: String,
    /// The command id, when it came as a command.
    pub cmd_id: String,
    /// What the board said of it.
    pub detail: String,
    /// When (RFC 3339, the board's clock).
    pub time: String,
}

/// What `fleet serve` keeps of a board's last trusted status, and its link state.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Detail {
    /// `ok`, `warn`, `fail` (or what the board said, cut).
    pub health: String,
    /// `online`, `offline`, `stale`, `deaf` or `unknown`.
    pub link: String,
    /// Versions: a status that leaves one out keeps the last one known.
    pub versions: Versions,
    /// Findings that are not `pass`/`skip`, most severe first.
    pub findings: Vec<FindingView>,
    /// Every check id's status.
    pub checks: BTreeMap<String, String>,
    /// Mean NPU load, percent.
    pub npu_load_percent: Option<f64>,
    /// The thermal check fires (the board is at or past its throttling temperature).
    pub throttling: bool,
    /// The hottest thermal zone's name.
    pub hottest_zone: String,
    /// The newest commands' outcomes, oldest first.
    pub commands: VecDeque<CommandView>,
    /// The time of the newest sealed status the history took, Unix seconds: after a restart,
    /// a sealed status no newer is a replay (older baselines lack it).
    #[serde(default)]
    pub sealed_s: Option<i64>,
}

/// A status's severity order for a finding status (higher is worse).
pub fn severity(status: &str) -> u8 {
    match status {
        "fail" => 4,
        "warn" => 3,
        "error" => 2,
        "info" => 1,
        _ => 0,
    }
}

fn text(v: Option<&Value>, n: usize) -> String {
    v.and_then(Value::as_str)
        .map(|s| cut(s, n))
        .unwrap_or_default()
}

fn finding_view(f: &Map<String, Value>) -> FindingView {
    let evidence = f
        .get("evidence")
        .and_then(Value::as_array)
        .map(|list| {
            list.iter()
                .filter_map(Value::as_object)
                .take(MAX_EVIDENCE)
                .map(|e| EvidenceView {
                    file: text(e.get("file"), MAX_WORD_CHARS),
                    line: e.get("line").and_then(Value::as_u64),
                    text: text(e.get("text"), MAX_TEXT_CHARS),
                })
                .collect()
        })
        .unwrap_or_default();
    FindingView {
        id: text(f.get("id"), MAX_WORD_CHARS),
        status: text(f.get("status"), 16),
        summary: text(f.get("summary"), MAX_TEXT_CHARS),
        remedy: text(f.get("remedy"), MAX_TEXT_CHARS),
        fixable: f.get("fix").is_some_and(|x| !x.is_null()),
        evidence,
    }
}

/// The first non-empty `observed[key]` text among the findings.
fn observed(findings: &[Value], key: &str) -> String {
    findings
        .iter()
        .filter_map(|f| f.get("observed")?.get(key)?.as_str())
        .find(|s| !s.is_empty())
        .map(|s| cut(s, MAX_WORD_CHARS))
        .unwrap_or_default()
}

/// The NPU runtime's version: HailoRT's `library_version` as it is, the Rockchip runtimes
/// named (`librknnrt 2.3.0, rkllm-runtime 1.1.4`), which `rknpu.runtime_library` may know only
/// from a workload's log.
fn runtime_version(findings: &[Value]) -> String {
    let hailo = observed(findings, "library_version");
    if !hailo.is_empty() {
        return hailo;
    }
    let named: Vec<String> = [
        ("librknnrt", "librknnrt_version"),
        ("rkllm-runtime", "rkllm_runtime_version"),
    ]
    .into_iter()
    .filter_map(|(name, key)| {
        let v = observed(findings, key);
        (!v.is_empty()).then(|| format!("{name} {v}"))
    })
    .collect();
    cut(&named.join(", "), MAX_WORD_CHARS)
}

/// The detail of a trusted status `doc` (an agent's status JSON), on top of `prev` (versions
/// and commands carry over when the status leaves them out). `link` is set by the caller.
pub fn read_status(doc: &Value, prev: &Detail) -> Detail {
    let empty = Vec::new();
    let findings = doc
        .get("findings")
        .and_then(Value::as_array)
        .unwrap_or(&empty);
    let mut views: Vec<FindingView> = findings
        .iter()
        .filter_map(Value::as_object)
        .map(finding_view)
        .filter(|f| severity(&f.status) > 0)
        .collect();
    views.sort_by_key(|f| std::cmp::Reverse(severity(&f.status)));
    views.truncate(MAX_FINDINGS);
    let mut checks = BTreeMap::new();
    if let Some(c) = doc.get("checks").and_then(Value::as_object) {
        for (id, s) in c.iter().take(MAX_CHECKS) {
            checks.insert(cut(id, MAX_WORD_CHARS), text(Some(s), 16));
        }
    }
    for f in findings.iter().take(MAX_CHECKS) {
        let id = text(f.get("id"), MAX_WORD_CHARS);
        let s = text(f.get("status"), 16);
        let worse = checks.get(&id).is_none_or(|o| severity(&s) > severity(o));
        if !id.is_empty() && worse && checks.len() < MAX_CHECKS {
            checks.insert(id, s);
        }
    }
    let keep = |new: String, old: &str| match new.is_empty() {
        true => old.to_string(),
        false => new,
    };
    let p = &prev.versions;
    let versions = Versions {
        agent: keep(text(doc.get("agent_version"), MAX_WORD_CHARS), &p.agent),
        kernel: keep(observed(findings, "kernel_release"), &p.kernel),
        driver: keep(observed(findings, "driver_version"), &p.driver),
        runtime: keep(runtime_version(findings), &p.runtime),
        firmware: keep(observed(findings, "device_firmware_version"), &p.firmware),
    };
    let metrics = doc.get("metrics");
    let mut commands = prev.commands.clone();
    if let Some(c) = doc.get("last_action").and_then(Value::as_object) {
        let view = CommandView {
            action: text(c.get("action"), MAX_WORD_CHARS),
            status: text(c.get("status"), 16),
            cmd_id: text(c.get("cmd_id"), MAX_WORD_CHARS),
            detail: text(c.get("detail"), MAX_TEXT_CHARS),
            time: text(c.get("time"), 40),
        };
        if commands.back() != Some(&view) {
            commands.push_back(view);
        }
        while commands.len() > MAX_COMMANDS {
            commands.pop_front();
        }
    }
    let thermal = checks.get("board.thermal").map(|s| severity(s) >= 3);
    Detail {
        health: text(doc.get("health"), 16),
        link: prev.link.clone(),
        versions,
        findings: views,
        checks,
        npu_load_percent: metrics
            .and_then(|m| m.get("npu_load_percent"))
            .and_then(Value::as_f64),
        throttling: thermal.unwrap_or(false),
        hottest_zone: observed(findings, "hottest_zone"),
        commands,
        sealed_s: prev.sealed_s,
    }
}

/// One change of a board: one row of its history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Change {
    /// `health`, `finding_start`, `finding_stop`, `version`, `link` or `command`.
    pub kind: String,
    /// The check id, version name or action (empty for health and link).
    pub subject: String,
    /// The new value (a status, a version, a link state, a command's state).
    pub value: String,
    /// The value before (empty when there was none).
    pub previous: String,
    /// The finding's summary, or the command's detail.
    pub summary: String,
}

fn change(kind: &str, subject: &str, value: &str, previous: &str, summary: &str) -> Change {
    Change {
        kind: kind.into(),
        subject: subject.into(),
        value: value.into(),
        previous: previous.into(),
        summary: summary.into(),
    }
}

/// Whether a command's state is final (`executing` and `received` are not).
fn is_final(status: &str) -> bool {
    matches!(status, "successful" | "failed" | "rejected")
}

/// The changes from `old` to `new`: health, each finding that starts or stops firing (or
/// changes its status), each version, the link state, each command newly in a final state.
/// An unchanged board has none.
pub fn changes(old: &Detail, new: &Detail) -> Vec<Change> {
    let mut out = Vec::new();
    if old.health != new.health {
        out.push(change("health", "", &new.health, &old.health, ""));
    }
    let firing = |d: &Detail| -> BTreeMap<String, (String, String)> {
        d.findings
            .iter()
            .filter(|f| severity(&f.status) >= 3)
            .map(|f| (f.id.clone(), (f.status.clone(), f.summary.clone())))
            .collect()
    };
    let (was, now) = (firing(old), firing(new));
    for (id, (s, summary)) in &now {
        match was.get(id) {
            None => out.push(change("finding_start", id, s, "", summary)),
            Some((o, _)) if o != s => out.push(change("finding_start", id, s, o, summary)),
            Some(_) => {}
        }
    }
    for (id, (s, _)) in &was {
        if !now.contains_key(id) {
            let to = new.checks.get(id).map_or("", String::as_str);
            out.push(change("finding_stop", id, to, s, ""));
        }
    }
    for ((name, o), (_, n)) in old.versions.pairs().into_iter().zip(new.versions.pairs()) {
        if o != n {
            out.push(change("version", name, n, o, ""));
        }
    }
    if old.link != new.link {
        out.push(change("link", "", &new.link, &old.link, ""));
    }
    for c in new.commands.iter().filter(|c| is_final(&c.status)) {
        if !old.commands.contains(c) {
            out.push(change(
                "command", &c.action, &c.status, &c.cmd_id, &c.detail,
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn status(health: &str, findings: Value) -> Value {
        json!({"health": health, "agent_version": "0.1.0", "findings": findings,
               "metrics": {"npu_load_percent": 12.5}})
    }

    #[test]
    fn a_status_that_repeats_is_no_change_and_a_finding_that_starts_is_one() {
        let ok = status(
            "ok",
            json!([{"id":"board.identity","status":"pass","summary":"s",
                                    "observed":{"kernel_release":"6.1.0"}}]),
        );
        let first = read_status(&ok, &Detail::default());
        assert_eq!(first.versions.kernel, "6.1.0");
        assert_eq!(first.npu_load_percent, Some(12.5));
        assert!(changes(&first, &read_status(&ok, &first)).is_empty());
        let bad = status(
            "fail",
            json!([{"id":"cma.free","status":"fail","summary":"CMA low",
             "remedy":"compact","fix":{"steps":[]},"evidence":[{"file":"/proc/meminfo","line":3,"text":"CmaFree: 0 kB"}]}]),
        );
        let second = read_status(&bad, &first);
        assert_eq!(second.versions.kernel, "6.1.0", "kept when left out");
        assert!(second.findings[0].fixable);
        assert_eq!(second.findings[0].evidence[0].line, Some(3));
        let c = changes(&first, &second);
        assert_eq!(c.len(), 2, "{c:?}");
        assert_eq!(
            (c[0].kind.as_str(), c[0].value.as_str()),
            ("health", "fail")
        );
        assert_eq!(
            (
                c[1].kind.as_str(),
                c[1].subject.as_str(),
                c[1].summary.as_str()
            ),
            ("finding_start", "cma.free", "CMA low")
        );
        let back = changes(&second, &read_status(&ok, &second));
        assert!(back
            .iter()
            .any(|c| c.kind == "finding_stop" && c.subject == "cma.free"));
    }

    /// An RK board's runtime, known from `rknpu.runtime_library` (maybe only from a workload's
    /// log), is its runtime version: the inventory answers "which boards run rkllm 1.1.4".
    #[test]
    fn a_rockchip_runtime_is_named_with_its_version() {
        let rk = status(
            "ok",
            json!([{"id":"rknpu.runtime_library","status":"pass","summary":"s",
                    "observed":{"rkllm_runtime_version":"1.1.4","librknnrt_version":"2.3.0"}}]),
        );
        let d = read_status(&rk, &Detail::default());
        assert_eq!(d.versions.runtime, "librknnrt 2.3.0, rkllm-runtime 1.1.4");
        let hailo = status(
            "ok",
            json!([{"id":"hailo.version_mismatch","status":"pass","summary":"s",
                    "observed":{"library_version":"4.20.0"}}]),
        );
        assert_eq!(
            read_status(&hailo, &Detail::default()).versions.runtime,
            "4.20.0"
        );
    }

    #[test]
    fn versions_commands_and_hostile_lengths() {
        let d = read_status(
            &json!({"health":"ok","agent_version":"0.2.0",
            "last_action":{"action":"compact","status":"successful","cmd_id":"c1","detail":"x".repeat(5000)},
            "findings":[{"id":"y".repeat(1000),"status":"warn","summary":"s".repeat(100_000)}]}),
            &Detail::default(),
        );
        assert_eq!(d.findings[0].summary.chars().count(), MAX_TEXT_CHARS);
        assert_eq!(d.findings[0].id.chars().count(), MAX_WORD_CHARS);
        let c = changes(&Detail::default(), &d);
        assert!(c
            .iter()
            .any(|c| c.kind == "version" && c.subject == "agent" && c.value == "0.2.0"));
        assert!(c
            .iter()
            .any(|c| c.kind == "command" && c.value == "successful" && c.previous == "c1"));
        // The same command again is not a new row.
        let again = read_status(
            &json!({"health":"ok","last_action":{"action":"compact","status":"successful","cmd_id":"c1","detail":"x".repeat(5000)}}),
            &d,
        );
        assert!(changes(&d, &again).iter().all(|c| c.kind != "command"));
        assert_eq!(again.versions.agent, "0.2.0");
    }
}
