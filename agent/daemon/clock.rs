//! Where the daemon's routing reads the time: the system clock in service, a test clock in the
//! unit tests (rate limits and cooldowns are then judged without sleeping).

use std::sync::atomic::{AtomicI64, Ordering};

/// A wall clock in Unix seconds, with a monotonic reading beside it.
pub trait Clock: Send + Sync {
    /// Seconds since the epoch (UTC) now.
    fn now_s(&self) -> i64;
    /// Seconds on a clock that never steps (the gate bounds the wall clock by it).
    fn mono_s(&self) -> u64;
}

/// The system clock (0 before 1970).
#[derive(Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_s(&self) -> i64 {
        crate::action::now_unix_s()
    }

    fn mono_s(&self) -> u64 {
        static START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
        START
            .get_or_init(std::time::Instant::now)
            .elapsed()
            .as_secs()
    }
}

/// A clock that moves only when told to (tests).
#[derive(Debug, Default)]
pub struct TestClock(AtomicI64);

impl TestClock {
    /// A clock standing at `now_s`.
    pub fn at(now_s: i64) -> TestClock {
        TestClock(AtomicI64::new(now_s))
    }

    /// Moves the clock forward by `s` seconds.
    pub fn advance(&self, s: i64) {
        self.0.fetch_add(s, Ordering::Relaxed);
    }
}

impl Clock for TestClock {
    fn now_s(&self) -> i64 {
        self.0.load(Ordering::Relaxed)
    }

    /// Moves with the wall clock (a test clock never steps on its own).
    fn mono_s(&self) -> u64 {
        u64::try_from(self.0.load(Ordering::Relaxed)).unwrap_or(0)
    }
}
