//! Grace periods over `crossbeam-epoch` (PRISM §5.4: "PRISM waits for two epochs").
//!
//! Every user operation runs pinned (`crossbeam_epoch::pin()`) from the moment it reads a
//! slot number or a forward pointer until it is done with what they lead to. Deferred
//! closures (`Guard::defer`) run only after every thread pinned at the time has unpinned,
//! which is the paper's two epochs; [`synchronize`] waits for exactly that, for the few
//! places that must *block* until readers are gone (the PWB reclaimer before it lets
//! writers reuse the space it reclaimed).
//!
//! Thread safety: any thread may call [`synchronize`], but never while it is itself pinned
//! (it would wait for itself).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// Blocks until every thread that was pinned when this was called has unpinned.
pub fn synchronize() {
    let done = Arc::new(AtomicBool::new(false));
    {
        let guard = crossbeam_epoch::pin();
        let flag = done.clone();
        guard.defer(move || flag.store(true, Ordering::Release));
        guard.flush();
    }
    let mut rounds = 0u32;
    while !done.load(Ordering::Acquire) {
        crossbeam_epoch::pin().flush();
        rounds += 1;
        if rounds < 64 {
            std::thread::yield_now();
        } else {
            std::thread::sleep(Duration::from_micros(50));
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;
    use std::time::Instant;

    use super::*;

    #[test]
    fn synchronize_returns_at_once_without_readers() {
        let t = Instant::now();
        synchronize();
        assert!(t.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn synchronize_waits_for_a_pinned_reader() {
        let (pinned_tx, pinned_rx) = mpsc::channel();
        let (release_tx, release_rx) = mpsc::channel::<()>();
        let released = Arc::new(AtomicBool::new(false));
        let r = released.clone();
        let reader = std::thread::spawn(move || {
            let _g = crossbeam_epoch::pin();
            pinned_tx.send(()).unwrap();
            release_rx.recv().unwrap();
            r.store(true, Ordering::SeqCst);
        });
        pinned_rx.recv().unwrap();
        let waiter = std::thread::spawn({
            let released = released.clone();
            move || {
                synchronize();
                assert!(
                    released.load(Ordering::SeqCst),
                    "returned while a reader was pinned"
                );
            }
        });
        std::thread::sleep(Duration::from_millis(30));
        release_tx.send(()).unwrap();
        reader.join().unwrap();
        waiter.join().unwrap();
    }
}
