//! A wake-up signal for a background thread: set a flag and notify; the thread waits with
//! a timeout (so a lost wake-up costs at most one period).
//!
//! Thread safety: `Send + Sync`.

use std::time::Duration;

use parking_lot::{Condvar, Mutex};

/// A wake-up signal.
#[derive(Debug, Default)]
pub struct Signal {
    raised: Mutex<bool>,
    cv: Condvar,
}

impl Signal {
    /// Wakes the waiting thread.
    pub fn raise(&self) {
        *self.raised.lock() = true;
        self.cv.notify_all();
    }

    /// Waits until raised or `timeout` passes; returns whether it was raised (and lowers it).
    pub fn wait(&self, timeout: Duration) -> bool {
        let mut r = self.raised.lock();
        if !*r {
            self.cv.wait_for(&mut r, timeout);
        }
        std::mem::replace(&mut *r, false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_raised_signal_is_seen_once() {
        let s = Signal::default();
        assert!(!s.wait(Duration::from_millis(1)));
        s.raise();
        assert!(s.wait(Duration::from_secs(5)));
        assert!(!s.wait(Duration::from_millis(1)));
    }
}
