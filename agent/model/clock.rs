//! Whether the wall clock is synchronised, as a time service reports it (`clock.sync`).

/// What the board's files say about its clock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClockSync {
    /// A time service reports the clock synchronised: which service (and what it said), and the
    /// file or command read.
    Synchronised {
        /// The service and its words.
        source: String,
        /// The file or command read.
        file: String,
    },
    /// A time service runs and has not synchronised the clock: the evidence, and the file or
    /// command read.
    NotSynchronised {
        /// What shows it.
        why: String,
        /// The file or command read.
        file: String,
    },
    /// Nothing to judge from (why).
    Unknown(String),
}

impl ClockSync {
    /// True only when the clock is known not to be synchronised.
    pub fn is_unsynchronised(&self) -> bool {
        matches!(self, ClockSync::NotSynchronised { .. })
    }
}
