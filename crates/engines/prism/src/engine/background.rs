//! The engine's background threads (PRISM §4.3, §4.4, §5.2; STYLE §8):
//!
//! - `prism-reclaim-<n>` (`reclaim_threads` of them): PWB reclamation, woken when a PWB
//!   crosses its watermark or a writer waits for space, and every [`TICK`] otherwise; each
//!   PWB is reclaimed by one thread at a time, different PWBs in parallel;
//! - `prism-gc`: Value Storage GC, woken by the reclaimer when a storage runs low on free
//!   chunks (it selects on that signal, the scan-chain channel and stop, so it starts at
//!   once), and the rewrite of evicted scan chains handed over by the SVC.
//!
//! (The SVC's list thread and the combiner's completion threads belong to those
//! components, which start and join them.)
//!
//! Each thread is named, holds an `Arc<Core>`, and stops when the engine closes; the store
//! joins them ([`Background::stop`]). The first error or panic on a thread poisons the
//! engine (writes are refused until reopen) and ends that thread — except `NoSpace`: a
//! full device leaves nothing half done, so it is recorded (`Core::space`) and the step
//! is retried at the next wake-up, when deletes may have freed space (issue 23).
//!
//! Thread safety: [`Background`] is owned by the store; its handles are behind a mutex.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam::channel::{Receiver, Sender};
use parking_lot::Mutex;
use tierkv_core::{Error, Result};

use super::core::{ChainBatch, Core};

/// How often an idle background thread looks for work it was not woken for.
pub const TICK: Duration = Duration::from_millis(50);

/// The handles of the running threads.
#[derive(Debug, Default)]
pub struct Background {
    handles: Mutex<Vec<JoinHandle<()>>>,
    /// Dropped at stop: wakes the GC thread at once (its receiver sees a disconnect).
    stop_tx: Mutex<Option<Sender<()>>>,
}

impl Background {
    /// Starts the reclaimer and the GC thread.
    pub fn start(core: &Arc<Core>) -> Result<Background> {
        let chains = core
            .chains
            .lock()
            .take()
            .ok_or_else(|| Error::invalid("background threads started twice"))?;
        let (stop_tx, stop_rx) = crossbeam::channel::bounded::<()>(0);
        let bg = Background {
            stop_tx: Mutex::new(Some(stop_tx)),
            ..Background::default()
        };
        let workers = core.opts.reclaim_threads.max(1);
        for w in 0..workers {
            let c = core.clone();
            bg.spawn(&format!("prism-reclaim-{w}"), move || {
                reclaimer(&c, w, workers)
            })?;
        }
        let c = core.clone();
        bg.spawn("prism-gc", move || collector(&c, &chains, &stop_rx, TICK))?;
        Ok(bg)
    }

    fn spawn(&self, name: &str, body: impl FnOnce() + Send + 'static) -> Result<()> {
        let h = std::thread::Builder::new()
            .name(name.to_owned())
            .spawn(body)
            .map_err(|e| Error::io("spawn", name, e))?;
        self.handles.lock().push(h);
        Ok(())
    }

    /// Joins every thread (the caller has closed the engine and raised the signals).
    pub fn stop(&self) {
        drop(self.stop_tx.lock().take());
        let handles: Vec<_> = self.handles.lock().drain(..).collect();
        for h in handles {
            let _ = h.join();
        }
    }
}

/// Runs `step` until the engine closes; an error or a panic poisons the engine.
fn run_until_closed(core: &Core, mut step: impl FnMut() -> Result<()>) {
    while !core.life.is_closed() {
        match catch_unwind(AssertUnwindSafe(&mut step)) {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                core.fail(&e);
                return;
            }
            Err(panic) => {
                let what = panic
                    .downcast_ref::<&str>()
                    .map(|s| (*s).to_owned())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "a panic".to_owned());
                core.fail(&Error::Poisoned(format!(
                    "background thread panicked: {what}"
                )));
                return;
            }
        }
    }
}

fn reclaimer(core: &Core, worker: usize, workers: usize) {
    run_until_closed(core, || {
        core.reclaim_signal.wait(TICK);
        if core.life.is_closed() || core.life.poisoned().is_some() {
            return Ok(());
        }
        // A full device is retried at the next wake-up (deletes may have freed space).
        while core.space_refusal_is_no_failure(core.reclaim_pass(false, worker, workers))? {}
        Ok(())
    });
}

/// The GC thread: rewrites evicted scan chains, and runs a GC pass after each wake-up
/// (a chain, the GC signal, or `tick` without either).
fn collector(core: &Core, chains: &Receiver<ChainBatch>, stop: &Receiver<()>, tick: Duration) {
    let never = crossbeam::channel::never();
    let mut chains = chains;
    run_until_closed(core, || {
        crossbeam::channel::select! {
            recv(chains) -> chain => match chain {
                Ok(chain) if core.life.poisoned().is_none() => core.rewrite_chain(chain)?,
                Ok(_) => {}
                // The SVC is gone (closing): wait for the signal and stop only.
                Err(_) => chains = &never,
            },
            recv(core.gc_signal.receiver()) -> _ => {}
            recv(stop) -> _ => return Ok(()),
            default(tick) => {}
        }
        if core.life.is_closed() || core.life.poisoned().is_some() {
            return Ok(());
        }
        core.counters.gc_passes.incr();
        core.space_refusal_is_no_failure(core.gc_pass())?;
        Ok(())
    });
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;
    use crate::test_support::store_context;

    #[test]
    fn gc_starts_promptly_when_signalled() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = store_context(dir.path(), "prism@chunk_size=16KiB", 32, 16, true);
        let core = super::super::open::open_core(&ctx).unwrap();
        let chains = core.chains.lock().take().unwrap();
        let (stop_tx, stop_rx) = crossbeam::channel::bounded::<()>(0);
        // A tick far longer than the wait below: only the signal can start the pass.
        let tick = Duration::from_secs(30);
        let c = core.clone();
        let gc = std::thread::spawn(move || collector(&c, &chains, &stop_rx, tick));
        std::thread::sleep(Duration::from_millis(50));
        let before = core.counters.gc_passes.get();
        let raised = Instant::now();
        core.gc_signal.raise();
        while core.counters.gc_passes.get() == before && raised.elapsed() < Duration::from_secs(3) {
            std::thread::sleep(Duration::from_millis(1));
        }
        let waited = raised.elapsed();
        core.life.close();
        drop(stop_tx);
        gc.join().unwrap();
        assert!(
            core.counters.gc_passes.get() > before,
            "no GC pass within {waited:?} of the signal (tick {tick:?})"
        );
    }
}
