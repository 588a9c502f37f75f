//! Log evidence as probed and classified: which side wrote a log ([`LogClass`]), the lines of one
//! source ([`LogFile`]), what happened to every source tried ([`LogSource`]), the page size buddy
//! orders are read with, and one classified line ([`LogHit`]).

use crate::parse::logline::LogEvent;
use serde::{Deserialize, Serialize};

/// One classified log line.
#[derive(Debug, Clone)]
pub struct LogHit {
    /// Board path of the log.
    pub file: String,
    /// 1-based line in the part read (the whole file unless `cut`).
    pub line: usize,
    /// The log was longer than the part read: `line` counts from the start of that part.
    pub cut: bool,
    /// The line.
    pub text: String,
    /// Which side wrote it.
    pub class: LogClass,
    /// Its events.
    pub events: Vec<LogEvent>,
}

impl LogHit {
    /// The line number in the file, when known (not for a log read from its tail only).
    pub fn line_no(&self) -> Option<usize> {
        (!self.cut).then_some(self.line)
    }
}

/// Longest log tail read per file (2 MiB).
pub const LOG_TAIL_BYTES: u64 = 2 * 1024 * 1024;

/// Which side a log comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogClass {
    /// The host kernel.
    Kernel,
    /// An NPU workload on the host.
    Workload,
    /// The accelerator's own operating system (not host memory).
    Device,
}

/// Lines of one log source: a file's tail, the kernel ring buffer, or journal entries.
#[derive(Debug, Clone)]
pub struct LogFile {
    /// Board path, or the source's name (`/dev/kmsg`, `journal:_TRANSPORT=kernel`,
    /// `journal:workloads`; see [`evidence`]).
    pub path: String,
    /// Which side wrote it.
    pub class: LogClass,
    /// Lines (at most [`LOG_TAIL_BYTES`] from the end).
    pub lines: Vec<String>,
    /// The file was longer than the tail read, so line numbers in the file are unknown.
    pub cut: bool,
}

/// The page size buddy orders are converted with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageSize {
    /// Bytes per page (4096, 16384, 65536); 4096 when unknown (figures made with it say so).
    pub bytes: u64,
    /// Where it came from: `kernel` (the running agent's own), the capture file, the tree's
    /// kernel release or a driver's line, or `unknown: …`.
    pub source: String,
}

impl PageSize {
    /// The source of a page size nothing in the tree gives.
    pub const UNKNOWN: &'static str = "unknown";

    /// True when the page size comes from the board itself, not an assumption.
    pub fn known(&self) -> bool {
        !self.source.starts_with(Self::UNKNOWN)
    }
}

/// What happened to one evidence source this cycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SourceState {
    /// Read (possibly with nothing new).
    Read,
    /// Exists but the agent may not read it (permissions, sandbox).
    Denied,
    /// Not there (no such device, file, tool or journal).
    Missing,
    /// Not read because a better source of the same messages was read.
    Unused,
}

/// One evidence source and what happened to it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LogSource {
    /// `/dev/kmsg`, `journal:_TRANSPORT=kernel`, `journal:workloads`, or a board file path.
    pub name: String,
    /// Which messages it carries.
    pub class: LogClass,
    /// Read, denied, missing or unused.
    pub state: SourceState,
    /// Why (the error, or which source was used instead); for a read source, what was read.
    pub detail: String,
    /// Lines taken from it this cycle.
    pub lines: usize,
}
