//! Where the daemon's routing reads the time: the system clock in service, a test clock in the
//! unit tests (rate limits and cooldowns are then judged without sleeping).

use std::sync::atomic::{AtomicI64, Ordering};

/// A wall clock in Unix seconds.
pub trait Clock: Send + Sync {
    /// Seconds since the epoch (UTC) now.
    fn now_s(&self) -> i64;
}

/// The system clock (0 before 1970).
#[derive(Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_s(&self) -> i64 {
        crate::action::now_unix_s()
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
}
