//! The engine's lifecycle state (open, closed, poisoned) and the wake-up signals of its
//! background threads (STYLE §5, §8).
//!
//! - After `close`, every call returns [`Error::Closed`].
//! - The first failure of a background job or of a foreground write step (a persist, a
//!   key-index update: `Core::poison_on_failure`) *poisons* the engine: writes are refused
//!   with [`Error::Poisoned`] until the store is reopened (reads still work). A failed
//!   persist or sync is never retried.
//! - A *full device* is not a failure ([`SpaceState`]): a background step that meets
//!   `NoSpace` leaves nothing half done, so it is retried later (after deletes have freed
//!   space); meanwhile a writer that waits for PWB space gets `NoSpace` as soon as the
//!   reclaimer has been refused once more, and deletes are accepted throughout.
//!
//! Thread safety: atomics, a `OnceLock` and a mutex/condvar pair; all `&self`.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use crossbeam::channel::{Receiver, Sender};
use parking_lot::{Condvar, Mutex};
use tierkv_core::{Error, Result};

/// Open / closed / poisoned.
#[derive(Debug, Default)]
pub struct Lifecycle {
    closed: AtomicBool,
    poison: OnceLock<String>,
}

impl Lifecycle {
    /// `Err(Closed)` after close.
    pub fn check_open(&self) -> Result<()> {
        if self.closed.load(Ordering::Acquire) {
            Err(Error::Closed)
        } else {
            Ok(())
        }
    }

    /// `Err(Closed)` after close, `Err(Poisoned)` after a failure.
    pub fn check_writable(&self) -> Result<()> {
        self.check_open()?;
        match self.poison.get() {
            Some(why) => Err(Error::Poisoned(why.clone())),
            None => Ok(()),
        }
    }

    /// Records the first failure; later ones are ignored. Returns the poison message.
    pub fn poison(&self, why: &Error) -> String {
        self.poison.get_or_init(|| why.to_string()).clone()
    }

    /// The failure that poisoned the engine, if any.
    pub fn poisoned(&self) -> Option<&str> {
        self.poison.get().map(String::as_str)
    }

    /// Marks the engine closed; true if it was open.
    pub fn close(&self) -> bool {
        !self.closed.swap(true, Ordering::AcqRel)
    }

    /// True once closed.
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }
}

/// Whether background work is held up by a full device (issue 23): set when a PWB
/// reclamation (or a GC pass) is refused with `NoSpace`, cleared when a reclamation moves
/// data again.
#[derive(Debug, Default)]
pub struct SpaceState {
    /// Background steps refused with `NoSpace` so far (a writer compares it with the count
    /// it saw when it began to wait).
    refusals: AtomicU64,
    /// The last refusal, while no reclamation has succeeded since.
    full: Mutex<Option<String>>,
}

impl SpaceState {
    /// Records a refusal for want of space.
    pub fn refused(&self, why: &Error) {
        *self.full.lock() = Some(why.to_string());
        self.refusals.fetch_add(1, Ordering::AcqRel);
    }

    /// A reclamation moved data: the device is no longer known to be full.
    pub fn cleared(&self) {
        let mut full = self.full.lock();
        if full.is_some() {
            *full = None;
        }
    }

    /// The refusal count now (taken by a writer before it may wait).
    pub fn refusals(&self) -> u64 {
        self.refusals.load(Ordering::Acquire)
    }

    /// `Err(NoSpace)` if the device is full and a background step was refused after
    /// `seen` (the count a waiting writer took): waiting longer would not help.
    pub fn check_waiting(&self, seen: u64) -> Result<()> {
        if self.refusals() <= seen {
            return Ok(());
        }
        match &*self.full.lock() {
            Some(why) => Err(Error::no_space(
                tierkv_core::Tier::Flash,
                format!("the write buffers cannot be drained ({why}); delete keys to free space"),
            )),
            None => Ok(()),
        }
    }
}

/// A level-triggered wake-up that a thread can `select!` on together with channels (the GC
/// thread also waits for scan chains and for stop): a one-slot channel.
#[derive(Debug)]
pub struct ChannelSignal {
    tx: Sender<()>,
    rx: Receiver<()>,
}

impl Default for ChannelSignal {
    fn default() -> Self {
        let (tx, rx) = crossbeam::channel::bounded(1);
        ChannelSignal { tx, rx }
    }
}

impl ChannelSignal {
    /// Wakes the waiter (or makes its next wait return at once).
    pub fn raise(&self) {
        // Full: a wake-up is pending already.
        let _ = self.tx.try_send(());
    }

    /// What the waiter selects on: a message means "raised".
    pub fn receiver(&self) -> &Receiver<()> {
        &self.rx
    }
}

/// A level-triggered wake-up for a background thread.
#[derive(Debug, Default)]
pub struct Signal {
    pending: Mutex<bool>,
    cv: Condvar,
}

impl Signal {
    /// Wakes the waiters (or makes the next wait return at once).
    pub fn raise(&self) {
        let mut p = self.pending.lock();
        if !*p {
            *p = true;
            self.cv.notify_all();
        }
    }

    /// Waits until raised or `timeout` passes; returns true if it was raised.
    pub fn wait(&self, timeout: Duration) -> bool {
        let mut p = self.pending.lock();
        if !*p {
            self.cv.wait_for(&mut p, timeout);
        }
        std::mem::replace(&mut *p, false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn poison_refuses_writes_but_not_reads_and_keeps_the_first_cause() {
        let l = Lifecycle::default();
        l.check_writable().unwrap();
        l.poison(&Error::invalid("first"));
        l.poison(&Error::invalid("second"));
        assert!(l.check_open().is_ok());
        match l.check_writable() {
            Err(Error::Poisoned(why)) => assert!(why.contains("first"), "{why}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn close_is_idempotent_and_refuses_everything() {
        let l = Lifecycle::default();
        assert!(l.close());
        assert!(!l.close());
        assert!(matches!(l.check_open(), Err(Error::Closed)));
        assert!(matches!(l.check_writable(), Err(Error::Closed)));
    }

    #[test]
    fn a_raised_signal_is_seen_once() {
        let s = Signal::default();
        s.raise();
        assert!(s.wait(Duration::from_millis(1)));
        assert!(!s.wait(Duration::from_millis(1)));
        std::thread::scope(|sc| {
            sc.spawn(|| {
                std::thread::sleep(Duration::from_millis(20));
                s.raise();
            });
            assert!(s.wait(Duration::from_secs(10)));
        });
    }

    #[test]
    fn a_raised_channel_signal_is_seen_once() {
        let s = ChannelSignal::default();
        s.raise();
        s.raise();
        assert!(s.receiver().try_recv().is_ok());
        assert!(s.receiver().try_recv().is_err());
    }

    #[test]
    fn a_writer_gets_no_space_only_after_a_refusal_since_it_began_to_wait() {
        let s = SpaceState::default();
        let seen = s.refusals();
        assert!(s.check_waiting(seen).is_ok());
        s.refused(&Error::no_space(tierkv_core::Tier::Flash, "no free chunk"));
        let err = s.check_waiting(seen).unwrap_err();
        assert!(matches!(err, Error::NoSpace { .. }), "{err}");
        assert!(err.to_string().contains("delete keys"), "{err}");
        // A writer that began after the refusal waits for the next attempt.
        assert!(s.check_waiting(s.refusals()).is_ok());
        // A reclamation that moved data clears the state.
        s.cleared();
        assert!(s.check_waiting(seen).is_ok());
    }
}
