//! The engine's background threads (PRISM §4.3, §4.4, §5.2; STYLE §8):
//!
//! - `prism-reclaim-<n>` (`reclaim_threads` of them): PWB reclamation, woken when a PWB
//!   crosses its watermark or a writer waits for space, and every [`TICK`] otherwise; each
//!   PWB is reclaimed by one thread at a time, different PWBs in parallel;
//! - `prism-gc`: Value Storage GC, woken by the reclaimer when a storage runs low on free
//!   chunks (it selects on that signal, the scan-chain channel and stop, so it starts at
//!   once), and the rewrite of evicted scan chains handed over by the SVC (the chains
//!   queued meanwhile together, in shared chunk writes: [`Core::rewrite_chains`]).
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

/// Most queued scan chains the GC thread rewrites together ([`Core::rewrite_chains`]).
const CHAINS_PER_WRITE: usize = 64;

/// The GC thread: rewrites evicted scan chains (all that are queued, up to
/// [`CHAINS_PER_WRITE`], together), and runs a GC pass after each wake-up
/// (a chain, the GC signal, or `tick` without either).
fn collector(core: &Core, chains: &Receiver<ChainBatch>, stop: &Receiver<()>, tick: Duration) {
    let never = crossbeam::channel::never();
    let mut chains = chains;
    run_until_closed(core, || {
        crossbeam::channel::select! {
            recv(chains) -> chain => match chain {
                Ok(chain) if core.life.poisoned().is_none() => {
                    let mut batch = vec![chain];
                    batch.extend(chains.try_iter().take(CHAINS_PER_WRITE - 1));
                    core.rewrite_chains(batch)?;
                }
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

    /// Chains queued while the GC thread was busy are rewritten together: one chunk write
    /// (and one sync) for all of them, each chain still in key order in one run. One write
    /// per chain (the old collector) made the GC thread fall behind a scanning workload and
    /// drop most chains.
    #[test]
    fn queued_scan_chains_share_their_chunk_writes() {
        use crate::hsit::entry::Location;
        use crate::svc::{CachedValue, ScanChainId};
        use crate::value_storage::ValueLocation;

        let dir = tempfile::tempdir().unwrap();
        let ctx = store_context(dir.path(), "prism@chunk_size=64KiB", 32, 16, true);
        let core = super::super::open::open_core(&ctx).unwrap();
        let value = |i: usize| vec![b'a' + (i % 26) as u8; 1000 + i];
        // Each value reclaimed on its own: 32 values in 32 chunks.
        for i in 0..32 {
            core.put(format!("key{i:02}").as_bytes(), &value(i))
                .unwrap();
            assert!(core.reclaim_pass(true, 0, 1).unwrap());
        }
        let rows = core.index.scan(b"", 100).unwrap();
        assert_eq!(rows.len(), 32);
        let loc = |slot: u64| {
            let fp = core.load_for_use(slot).unwrap();
            match core.location_of(slot, fp).unwrap() {
                Location::Flash(p) => p,
                other => panic!("not on flash: {other:?}"),
            }
        };
        let chunks: std::collections::BTreeSet<u32> = rows
            .iter()
            .map(|(_, slot)| ValueLocation::unpack(loc(*slot)).chunk)
            .collect();
        assert_eq!(chunks.len(), 32, "scattered to begin with");
        // Eight chains of four keys each (keys i, i+8, i+16, i+24), all queued at once.
        let (tx, rx) = crossbeam::channel::unbounded::<ChainBatch>();
        for c in 0..8 {
            let chain: ChainBatch = (0..4)
                .map(|m| {
                    let (key, slot) = &rows[c + 8 * m];
                    let v: Arc<[u8]> = Arc::from(value(c + 8 * m));
                    let cv = CachedValue::new(*slot, Some(key), v, Some(ScanChainId(c as u64)));
                    (Arc::new(cv), loc(*slot))
                })
                .collect();
            tx.send(chain).unwrap();
        }
        let written = || core.storages[0].stats().chunks_written;
        let before = written();
        let (stop_tx, stop_rx) = crossbeam::channel::bounded::<()>(0);
        let c = core.clone();
        let gc = std::thread::spawn(move || collector(&c, &rx, &stop_rx, Duration::from_secs(30)));
        let started = Instant::now();
        while core.counters.chain_values_rewritten.get() < 32
            && started.elapsed() < Duration::from_secs(10)
        {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(core.counters.chain_values_rewritten.get(), 32);
        assert_eq!(written() - before, 1, "eight chains, one chunk write");
        for c in 0..8 {
            let locs: Vec<ValueLocation> = (0..4)
                .map(|m| ValueLocation::unpack(loc(rows[c + 8 * m].1)))
                .collect();
            assert!(
                locs.windows(2)
                    .all(|w| w[0].chunk == w[1].chunk && w[0].offset < w[1].offset),
                "chain {c} is one run in key order: {locs:?}"
            );
        }
        for (i, (key, _)) in rows.iter().enumerate() {
            assert_eq!(core.get(key).unwrap(), Some(value(i)), "key {i}");
        }
        core.life.close();
        drop((stop_tx, tx));
        gc.join().unwrap();
    }

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
