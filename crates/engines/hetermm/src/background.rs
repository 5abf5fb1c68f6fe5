//! The engine's background threads (STYLE §8): `hetermm:flush` (flushing, the read cache's
//! size, log reclamation and compression, blocks prepared ahead; forced flushes on request)
//! and `hetermm:reorg` (reorganisation of sparse blocks). Both are started at open and
//! stopped and joined at close (and on drop); neither outlives the store.
//!
//! Errors: pmem running out (`NoSpace`) *stalls* the flusher — writers that need a page get
//! `NoSpace` while it lasts, reads go on, and the flusher keeps retrying (deletes and
//! reorganisation may free space). Any other error, or a panic, *poisons* the store: every
//! later write fails until it is reopened (STYLE §5), reads go on, and both threads stop
//! working on pmem (they idle until the store is closed; `flush.rs`, `reorg.rs`).
//!
//! Thread safety: `Send + Sync`; forced-flush requests are a counter pair under a mutex.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use parking_lot::{Condvar, Mutex};
use tierkv_core::{Error, Result};

use crate::mem::HeterMem;

/// Flusher steps between looks at the stop flag and flush requests.
const STEPS_PER_ROUND: usize = 64;
/// How long an idle flusher sleeps.
const FLUSH_IDLE: Duration = Duration::from_millis(1);
/// How long an idle reclaimer sleeps.
const REORG_IDLE: Duration = Duration::from_millis(10);

#[derive(Debug, Default)]
struct Requests {
    requested: u64,
    done: u64,
    failed: Option<String>,
}

#[derive(Debug, Default)]
struct Shared {
    stop: AtomicBool,
    requests: Mutex<Requests>,
    answered: Condvar,
}

/// The running background threads of a store.
pub struct Background {
    mem: Arc<HeterMem>,
    shared: Arc<Shared>,
    handles: Mutex<Vec<JoinHandle<()>>>,
}

impl Background {
    /// Starts the threads.
    pub fn start(mem: Arc<HeterMem>) -> Result<Background> {
        // IMPORTANT: the handles are the `Background`'s as soon as each thread runs, so that
        // a failure to spawn the next one stops and joins those already running (its drop)
        // rather than detaching them, still working on a store whose open failed.
        let bg = Background {
            mem,
            shared: Arc::new(Shared::default()),
            handles: Mutex::new(Vec::new()),
        };
        for (name, body) in [
            ("hetermm:flush", flusher as fn(&HeterMem, &Shared)),
            ("hetermm:reorg", reclaimer),
        ] {
            let (m, s) = (bg.mem.clone(), bg.shared.clone());
            crate::recovery::open_hook(crate::recovery::OpenPoint::Spawning, &bg.mem)?;
            let h = std::thread::Builder::new()
                .name(name.into())
                .spawn(move || body(&m, &s))
                .map_err(|e| Error::io("spawn thread", name, e))?;
            bg.handles.lock().push(h);
        }
        Ok(bg)
    }

    /// Asks the flusher for a forced flush and waits for it.
    pub fn request_flush(&self) -> Result<()> {
        let mine = {
            let mut r = self.shared.requests.lock();
            r.requested += 1;
            r.requested
        };
        self.mem.wake_flusher.raise();
        let mut r = self.shared.requests.lock();
        while r.done < mine {
            if self.shared.stop.load(Ordering::Acquire) {
                return Err(Error::Closed);
            }
            self.shared
                .answered
                .wait_for(&mut r, Duration::from_millis(50));
        }
        match &r.failed {
            Some(why) => Err(Error::Poisoned(why.clone())),
            None => Ok(()),
        }
    }

    /// Asks the flusher for a forced flush without waiting for it; a failure of it poisons
    /// the store (or stalls it, when pmem is full) like any other flusher error.
    pub fn request_flush_soon(&self) {
        self.shared.requests.lock().requested += 1;
        self.mem.wake_flusher.raise();
    }

    /// Stops and joins the threads; reports a panic as poisoning.
    pub fn stop(&self) {
        self.shared.stop.store(true, Ordering::Release);
        self.mem.wake_flusher.raise();
        self.mem.wake_reclaimer.raise();
        self.shared.answered.notify_all();
        for h in self.handles.lock().drain(..) {
            if h.join().is_err() {
                self.mem
                    .health
                    .poison("a hetermm background thread panicked".into());
            }
        }
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        self.stop();
    }
}

/// What the flusher does with a step's error.
fn report(mem: &HeterMem, e: Error) {
    let _ = mem.note_no_space(&e);
    match e {
        Error::NoSpace { what, .. } => {
            *mem.health.stalled.lock() = Some(what);
        }
        other => mem.health.poison(format!("hetermm flusher: {other}")),
    }
    mem.pages.wake_all();
}

fn flusher(mem: &HeterMem, shared: &Shared) {
    while !shared.stop.load(Ordering::Acquire) {
        // IMPORTANT: no flushing once a failure poisoned the store. A flush that failed
        // after its block's directory word was durable (applying the marks on older
        // blocks, say) would, retried, publish the block again under a second generation-0
        // word — which recovery refuses — and the marks it had taken would be lost while
        // the frontier moved on. The store refuses writes; reopening recovers it.
        if let Some(why) = mem.health.poisoned.get() {
            let mut req = shared.requests.lock();
            if req.requested > req.done {
                req.failed = Some(why.clone());
                req.done = req.requested;
                drop(req);
                shared.answered.notify_all();
            }
            mem.wake_flusher.wait(FLUSH_IDLE * 10);
            continue;
        }
        let pending = shared.requests.lock().requested;
        let mut st = mem.flusher.lock();
        if pending > shared.requests.lock().done {
            let r = mem.flush_all(&mut st);
            let mut req = shared.requests.lock();
            req.failed = r.as_ref().err().map(ToString::to_string);
            req.done = pending;
            drop(req);
            shared.answered.notify_all();
            if let Err(e) = r {
                report(mem, e);
            }
        }
        let mut worked = false;
        for _ in 0..STEPS_PER_ROUND {
            match mem.flusher_step(&mut st) {
                Ok(true) => {
                    worked = true;
                    *mem.health.stalled.lock() = None;
                }
                Ok(false) => break,
                Err(e) => {
                    report(mem, e);
                    break;
                }
            }
        }
        drop(st);
        if !worked {
            mem.wake_flusher.wait(FLUSH_IDLE);
        }
    }
}

fn reclaimer(mem: &HeterMem, shared: &Shared) {
    while !shared.stop.load(Ordering::Acquire) {
        // Like the flusher: no reorganisation once a failure poisoned the store (`reorg.rs`
        // `reorganise`); it waits to be stopped.
        if mem.health.poisoned.get().is_some() {
            mem.wake_reclaimer.wait(REORG_IDLE * 10);
            continue;
        }
        match mem.reclaimer_step() {
            Ok(true) => continue,
            Ok(false) => {}
            Err(Error::NoSpace { .. }) => {}
            Err(e) => mem.health.poison(format!("hetermm reclaimer: {e}")),
        }
        mem.wake_reclaimer.wait(REORG_IDLE);
    }
}
