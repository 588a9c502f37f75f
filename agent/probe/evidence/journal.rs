//! The systemd journal, read by running `journalctl -b -o json` (after a cursor in the daemon) on
//! the live system or on a captured tree's `/var/log/journal`.

use super::{SourceState, MAX_LINES_PER_SOURCE};
use crate::root::SysRoot;
use crate::sys::process::{run_with_timeout, Finished, RunError};
use serde::Deserialize;
use std::collections::VecDeque;

/// Journal entries read.
pub struct JournalRead {
    /// Messages; workload lines as `IDENT[PID]: message`.
    pub lines: Vec<String>,
    /// Cursor of the last entry read.
    pub last_cursor: Option<String>,
    /// Which journal: `system journal` or the directory.
    pub dir: String,
}

#[derive(Deserialize)]
struct JournalEntry {
    #[serde(rename = "__CURSOR")]
    cursor: Option<String>,
    #[serde(rename = "MESSAGE", default)]
    message: serde_json::Value,
    #[serde(rename = "SYSLOG_IDENTIFIER", default)]
    ident: Option<String>,
    #[serde(rename = "_COMM", default)]
    comm: Option<String>,
    #[serde(rename = "_PID", default)]
    pid: Option<String>,
}

/// Name of the journalctl program (overridable for tests with `NPU_AGENT_JOURNALCTL`).
fn journalctl() -> String {
    std::env::var("NPU_AGENT_JOURNALCTL").unwrap_or_else(|_| "journalctl".into())
}

/// Longest a `journalctl` read may take before the source counts as denied.
pub const JOURNAL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// Runs `journalctl -b -o json` with `matches` (after `cursor` when given) on the live journal,
/// or on `<root>/var/log/journal` for a captured tree, for at most [`JOURNAL_TIMEOUT`].
/// `with_ident` prefixes each message with its `SYSLOG_IDENTIFIER[_PID]:`. Errors are
/// (state, why).
pub fn read_journal(
    root: &SysRoot,
    matches: &[String],
    cursor: Option<&str>,
    with_ident: bool,
) -> Result<JournalRead, (SourceState, String)> {
    let mut cmd = std::process::Command::new(journalctl());
    let dir = if root.is_live() {
        "system journal".to_string()
    } else {
        let host = root
            .join("/var/log/journal")
            .map_err(|e| (SourceState::Missing, e.to_string()))?;
        if !root.is_dir("/var/log/journal") {
            return Err((
                SourceState::Missing,
                "no /var/log/journal in this tree".into(),
            ));
        }
        cmd.arg("-D").arg(&host);
        "/var/log/journal".to_string()
    };
    cmd.args(["-b", "-o", "json", "--no-pager", "-q"]);
    cmd.arg("--output-fields=MESSAGE,SYSLOG_IDENTIFIER,_COMM,_PID");
    if let Some(c) = cursor {
        cmd.arg(format!("--after-cursor={c}"));
    }
    cmd.args(matches);
    let mut lines: VecDeque<String> = VecDeque::new();
    let mut last_cursor = None;
    let done = run_with_timeout(&mut cmd, JOURNAL_TIMEOUT, |l| {
        if let Some(cursor) = journal_entry_lines(l, with_ident, &mut lines) {
            last_cursor = Some(cursor);
        }
    })
    .map_err(|e| match e {
        RunError::NotFound(_) => (SourceState::Missing, "journalctl is not installed".into()),
        other => (SourceState::Denied, format!("journalctl: {other}")),
    })?;
    // journalctl exits 1 when the journal has no entry of this boot or no files at all.
    if !done.status.success() && lines.is_empty() {
        return Err(journal_failure(&dir, &done));
    }
    Ok(JournalRead {
        lines: lines.into(),
        last_cursor,
        dir,
    })
}

/// Appends the message lines of one `journalctl -o json` entry to `lines` (keeping the last
/// [`MAX_LINES_PER_SOURCE`]); returns the entry's cursor. A line that is not an entry is skipped.
fn journal_entry_lines(
    json: &str,
    with_ident: bool,
    lines: &mut VecDeque<String>,
) -> Option<String> {
    let e = serde_json::from_str::<JournalEntry>(json).ok()?;
    let msg = match &e.message {
        serde_json::Value::String(s) => s.clone(),
        // Binary messages come as arrays of bytes.
        serde_json::Value::Array(a) => String::from_utf8_lossy(
            &a.iter()
                .filter_map(|b| b.as_u64().map(|b| b as u8))
                .collect::<Vec<_>>(),
        )
        .into_owned(),
        _ => String::new(),
    };
    for m in msg.lines() {
        let line = if with_ident {
            let id = e.ident.as_deref().or(e.comm.as_deref()).unwrap_or("?");
            match &e.pid {
                Some(p) => format!("{id}[{p}]: {m}"),
                None => format!("{id}: {m}"),
            }
        } else {
            m.to_string()
        };
        lines.push_back(line);
        if lines.len() > MAX_LINES_PER_SOURCE {
            lines.pop_front();
        }
    }
    e.cursor
}

/// Why `journalctl` gave nothing: a missing journal or boot, or a denied read.
fn journal_failure(dir: &str, done: &Finished) -> (SourceState, String) {
    let why = done.stderr.lines().next().unwrap_or("").trim().to_string();
    let lower = why.to_lowercase();
    let state = if lower.contains("no journal")
        || lower.contains("no such")
        || lower.contains("specifies no boot")
        || lower.contains("data from the specified boot")
    {
        SourceState::Missing
    } else if lower.contains("permission") {
        SourceState::Denied
    } else if why.is_empty() {
        SourceState::Missing
    } else {
        SourceState::Denied
    };
    let detail = if why.is_empty() {
        format!("exit {}", done.status)
    } else {
        why
    };
    (state, format!("journalctl ({dir}): {detail}"))
}
