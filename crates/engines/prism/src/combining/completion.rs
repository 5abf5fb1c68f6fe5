//! One-shot completion slots: how a thread waiting for its flash read is handed the result
//! by whichever thread finishes the read (the flash tier's completion thread, PRISM §5.3
//! ④), and woken.
//!
//! A [`Completer`] is the sending half; [`Waiter`] the receiving one. The waiter parks
//! (after a short spin) until the result is in; the completer stores the result, then
//! publishes it with a Release store of `done`, then unparks the waiter. A completer that
//! is dropped without completing (its batch failed to submit, a panic unwound it) delivers
//! an error instead, so no waiter can hang.
//!
//! Thread safety: `Completer` is `Send`; `Waiter` stays with its thread. No `unsafe`: the
//! slot is shared through an `Arc`, the result travels through a mutex.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::Thread;

use parking_lot::Mutex;
use tierkv_core::{Error, Result};

#[derive(Debug)]
struct Slot<T> {
    result: Mutex<Option<Result<T>>>,
    done: AtomicBool,
    thread: Thread,
}

/// Delivers one result to one waiting thread.
#[derive(Debug)]
pub struct Completer<T> {
    slot: Option<Arc<Slot<T>>>,
}

/// Waits for the result a [`Completer`] delivers.
#[derive(Debug)]
pub struct Waiter<T> {
    slot: Arc<Slot<T>>,
}

/// A completer/waiter pair for the calling thread.
pub fn pair<T>() -> (Completer<T>, Waiter<T>) {
    let slot = Arc::new(Slot {
        result: Mutex::new(None),
        done: AtomicBool::new(false),
        thread: std::thread::current(),
    });
    (
        Completer {
            slot: Some(slot.clone()),
        },
        Waiter { slot },
    )
}

impl<T> Completer<T> {
    /// Hands `result` to the waiter and wakes it.
    pub fn complete(mut self, result: Result<T>) {
        if let Some(slot) = self.slot.take() {
            deliver(&slot, result);
        }
    }
}

fn deliver<T>(slot: &Slot<T>, result: Result<T>) {
    *slot.result.lock() = Some(result);
    slot.done.store(true, Ordering::Release);
    slot.thread.unpark();
}

impl<T> Drop for Completer<T> {
    fn drop(&mut self) {
        if let Some(slot) = self.slot.take() {
            deliver(
                &slot,
                Err(Error::io(
                    "read",
                    "value storage (thread combining)",
                    std::io::Error::other("the read was abandoned before it completed"),
                )),
            );
        }
    }
}

/// Spins this many times (with a spin-loop hint) before yielding.
const SPINS: u32 = 64;

/// Then yields the CPU for up to this long before parking. A flash read takes ~100 µs, so
/// a reader that yields is usually there when its result (or the lead) arrives: the
/// thread that hands it over then does not have to wake a parked thread, a system call and
/// a context switch per read that cost more than the read path itself on a small machine.
/// Yielding gives the CPU to any runnable thread, so it costs nothing when the cores are
/// busy.
const YIELD_FOR: std::time::Duration = std::time::Duration::from_micros(200);

impl<T> Waiter<T> {
    /// True once the result is in.
    pub fn is_done(&self) -> bool {
        self.slot.done.load(Ordering::Acquire)
    }

    /// Takes the result, if it is in.
    pub fn try_take(&self) -> Option<Result<T>> {
        if self.is_done() {
            self.slot.result.lock().take()
        } else {
            None
        }
    }

    /// Parks (after a short spin) until the result is in, or until `wake` says to stop
    /// waiting (checked after every wake-up); returns the result if it came.
    pub fn wait_or(&self, wake: impl Fn() -> bool) -> Option<Result<T>> {
        let mut spins = 0;
        let mut yielding_since = None;
        loop {
            if let Some(r) = self.try_take() {
                return Some(r);
            }
            if wake() {
                return None;
            }
            if spins < SPINS {
                spins += 1;
                std::hint::spin_loop();
            } else if yielding_since
                .get_or_insert_with(std::time::Instant::now)
                .elapsed()
                < YIELD_FOR
            {
                std::thread::yield_now();
            } else {
                std::thread::park();
            }
        }
    }

    /// Parks until the result is in.
    pub fn wait(self) -> Result<T> {
        loop {
            if let Some(r) = self.wait_or(|| false) {
                return r;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn result_crosses_threads_and_wakes_the_waiter() {
        let (c, w) = pair::<u32>();
        let t = std::thread::spawn(move || c.complete(Ok(7)));
        assert_eq!(w.wait().unwrap(), 7);
        t.join().unwrap();
    }

    #[test]
    fn dropped_completer_delivers_an_error() {
        let (c, w) = pair::<u32>();
        drop(c);
        let e = w.wait().unwrap_err();
        assert!(e.to_string().contains("abandoned"), "{e}");
    }
}
