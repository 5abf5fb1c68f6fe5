//! The engine's background threads (MioDB §4.5): one flush thread and one compaction
//! thread per buffer level (and with `mio:flash` one flash compaction thread), started at
//! open and joined at close. Each loops: run its step
//! (`flush_step`, `compact_step(level)`) while there is work, otherwise wait for a change
//! (or 100 ms). A step that fails for lack of space waits for other levels to free some
//! (back-pressure: stalled writers time out with `NoSpace`); any other failure poisons the
//! store (later writes are refused until it is reopened).
//!
//! Thread safety: the threads share `Inner`.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::thread::JoinHandle;
use std::time::Duration;

use tierkv_core::{Error, Result};

use crate::store::Inner;

/// One thread's step.
type Step = Box<dyn Fn(&Inner) -> Result<bool> + Send>;

/// Starts the flush thread and one compaction thread per buffer level.
pub(crate) fn start(inner: &Arc<Inner>) -> Result<Vec<JoinHandle<()>>> {
    let buffer_levels = inner.opts.levels - 1;
    let mut threads = Vec::with_capacity(buffer_levels + 1);
    let spawn = |name: String, job: Step| {
        let inner = inner.clone();
        std::thread::Builder::new()
            .name(name)
            .spawn(move || run(&inner, &*job))
            .map_err(|e| Error::io("spawn mio thread", "", e))
    };
    let stop_all = |threads: Vec<JoinHandle<()>>| {
        inner.stop.store(true, Ordering::Release);
        inner.notify();
        for t in threads {
            let _ = t.join();
        }
    };
    match spawn("mio:flush".into(), Box::new(|i: &Inner| i.flush_step())) {
        Ok(t) => threads.push(t),
        Err(e) => return Err(e),
    }
    if inner.flash.is_some() {
        match spawn(
            "mio:flash-compact".into(),
            Box::new(|i: &Inner| i.flash_compact_step()),
        ) {
            Ok(t) => threads.push(t),
            Err(e) => {
                stop_all(threads);
                return Err(e);
            }
        }
    }
    for level in 0..buffer_levels {
        match spawn(
            format!("mio:compact-{level}"),
            Box::new(move |i: &Inner| i.compact_step(level)),
        ) {
            Ok(t) => threads.push(t),
            Err(e) => {
                stop_all(threads);
                return Err(e);
            }
        }
    }
    Ok(threads)
}

fn run(inner: &Inner, step: &dyn Fn(&Inner) -> Result<bool>) {
    while !inner.stop.load(Ordering::Acquire) && inner.poisoned.get().is_none() {
        let seen = inner.signal_now();
        match step(inner) {
            Ok(true) => {}
            Ok(false) => inner.wait(seen, Duration::from_millis(100)),
            Err(Error::NoSpace { .. }) => inner.wait(seen, Duration::from_millis(50)),
            Err(e) => {
                inner.poison(&e);
                return;
            }
        }
    }
}
