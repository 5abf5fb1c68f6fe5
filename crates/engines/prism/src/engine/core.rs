//! [`Core`]: everything a PRISM store is made of, shared by the user-facing
//! [`super::PrismStore`] and the background threads (PRISM §4, Figure 2).
//!
//! Fields are constant after open except where a comment names what guards them. The
//! background threads hold an `Arc<Core>`; the store joins them on close, which breaks
//! the cycle. The SVC's eviction callback holds only the HSIT and a channel sender, so the
//! SVC (inside `Core`) never keeps `Core` alive.
//!
//! Thread safety: `Core` is `Send + Sync`; all paths take `&self`.

use std::sync::Arc;

use crossbeam::channel::Receiver;
use parking_lot::{Mutex, MutexGuard};
use tierkv_core::media::pmem::{PmemAllocator, PmemPool};
use tierkv_core::{Error, Limits, Result, Tier};

use super::lifecycle::{ChannelSignal, Lifecycle, Signal, SpaceState};
use crate::hsit::Hsit;
use crate::hsit::entry::Location;
use crate::key_index::PersistentKeyIndex;
use crate::options::PrismOptions;
use crate::pwb::PwbSet;
use crate::stats::{ComponentStats, PrismCounters};
use crate::superblock::Superblock;
use crate::svc::{CachedValue, ScanAwareValueCache};
use crate::value_storage::{ValueLocation, ValueStorage};

/// HSIT with the SVC's entries in its DRAM array.
pub type Table = Hsit<Arc<CachedValue>>;

/// The members of an evicted scan chain, sorted by key, each with the Value Storage
/// location its cached copy was read from; handed to the GC thread to rewrite together.
pub type ChainBatch = Vec<(Arc<CachedValue>, u64)>;

/// The parts of an open store.
pub struct Core {
    /// The pmem pool.
    pub pool: Arc<PmemPool>,
    /// The pmem allocator (HSIT segments, key index).
    pub alloc: Arc<PmemAllocator>,
    /// The layout.
    pub sb: Superblock,
    /// Key -> HSIT slot (§4.1).
    pub index: PersistentKeyIndex,
    /// Forward pointers and cache pointers (§4.5).
    pub hsit: Arc<Table>,
    /// The write buffers (§4.3).
    pub pwbs: PwbSet,
    /// One Value Storage per flash device (§4.2, §5.1).
    pub storages: Vec<ValueStorage>,
    /// The Scan-aware Value Cache (§4.4).
    pub svc: ScanAwareValueCache,
    /// Options.
    pub opts: PrismOptions,
    /// Key and value limits (the engine's own value limit folded in).
    pub limits: Limits,
    /// Counters.
    pub counters: PrismCounters,
    /// Open / closed / poisoned.
    pub life: Lifecycle,
    /// Whether background work is held up by a full device (not a failure: retried).
    pub space: SpaceState,
    /// Wakes the reclaimer (a PWB crossed its watermark, or a writer waits for space).
    pub reclaim_signal: Signal,
    /// Wakes the GC thread (which selects on it with the scan-chain channel).
    pub gc_signal: ChannelSignal,
    /// One per PWB: serialises the reclamation of that PWB (reclaimer threads, `flush`,
    /// `check`); different PWBs are reclaimed in parallel (§5.2: each reclaimer writes its
    /// own chunks).
    pub reclaim_locks: Vec<Mutex<()>>,
    /// Serialises GC passes and scan-chain rewrites.
    pub gc_lock: Mutex<()>,
    /// Evicted scan chains waiting to be rewritten; taken by the GC thread at start.
    pub chains: Mutex<Option<Receiver<ChainBatch>>>,
}

impl std::fmt::Debug for Core {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Core")
            .field("sb", &self.sb)
            .field("opts", &self.opts)
            .finish_non_exhaustive()
    }
}

impl Core {
    /// The Value Storage a packed location names, or corruption.
    pub fn storage_of(&self, loc: ValueLocation) -> Result<&ValueStorage> {
        self.storages.get(usize::from(loc.storage)).ok_or_else(|| {
            Error::corruption(
                Tier::Pmem,
                0,
                format!("a forward pointer names Value Storage {}", loc.storage),
            )
        })
    }

    /// Marks the value at `loc` superseded in its chunk's validity bitmap (a value in a
    /// PWB needs nothing: it is ill-coupled from now on).
    pub fn invalidate(&self, loc: Location) -> Result<()> {
        if let Location::Flash(p) = loc {
            let vl = ValueLocation::unpack(p);
            self.storage_of(vl)?.invalidate(vl)?;
        }
        Ok(())
    }

    /// The Value Storage to write the next chunk to: a random idle one (§5.2: "randomly
    /// chooses one of the idle Value Storages"), else any.
    pub fn pick_storage(&self) -> Result<&ValueStorage> {
        let n = self.storages.len();
        if n == 0 {
            return Err(Error::invalid(
                "a PRISM store needs at least one flash device",
            ));
        }
        let start = rand::random_range(0..n);
        let ring = (0..n).map(|i| (start + i) % n);
        let pick = ring
            .clone()
            .find(|&i| self.storages.get(i).is_some_and(ValueStorage::is_idle))
            .unwrap_or(start);
        self.storages
            .get(pick)
            .ok_or_else(|| Error::invalid("no Value Storage"))
    }

    /// Holds off every reclamation (for `check`): all the per-PWB locks, in order.
    pub fn pause_reclamation(&self) -> Vec<MutexGuard<'_, ()>> {
        self.reclaim_locks.iter().map(|l| l.lock()).collect()
    }

    /// Records a failure: poisons the engine and wakes everyone waiting.
    pub fn fail(&self, e: &Error) {
        if self.life.poisoned().is_some() {
            return;
        }
        let why = self.life.poison(e);
        eprintln!("tierkv prism: background failure, the store refuses writes: {why}");
        for p in self.pwbs.iter() {
            p.wake_writers();
        }
    }

    /// Passes `r` on; a failure of a foreground write step poisons the engine first
    /// ([`Self::fail`]), unless it left nothing half done: no space, a bad argument, or
    /// the engine was closed.
    pub fn poison_on_failure<T>(&self, r: Result<T>) -> Result<T> {
        if let Err(e) = &r
            && !matches!(
                e,
                Error::NoSpace { .. } | Error::InvalidArgument(_) | Error::Closed
            )
        {
            self.fail(e);
        }
        r
    }

    /// What a writer waiting for PWB space checks between waits; `seen` is
    /// `SpaceState::refusals` when it began: once the reclaimer was refused for want of
    /// space after that, the writer gets `NoSpace` rather than waiting on.
    pub fn writer_may_wait(&self, seen: u64) -> Result<()> {
        self.counters.pwb_writer_waits.incr();
        self.life.check_writable()?;
        self.space.check_waiting(seen)
    }

    /// Passes on the outcome of a background step: `NoSpace` (a full device: the step
    /// left nothing half done and is retried once deletes free space) is recorded in
    /// [`Self::space`] and waiting writers are woken to see it; other errors are returned.
    pub fn space_refusal_is_no_failure(&self, r: Result<bool>) -> Result<bool> {
        match r {
            Err(e @ Error::NoSpace { .. }) => {
                self.space.refused(&e);
                for p in self.pwbs.iter() {
                    p.wake_writers();
                }
                Ok(false)
            }
            other => other,
        }
    }

    /// Counters of the components, for `stats`.
    pub fn component_stats(&self) -> ComponentStats {
        let mut c = ComponentStats::default();
        for s in &self.storages {
            let st = s.stats();
            c.gc_runs += st.gc_runs;
            c.gc_bytes_moved += st.gc_bytes_moved;
            c.gc_values_moved += st.gc_values_moved;
            c.gc_chunks_freed += st.gc_chunks_reclaimed;
            c.free_chunks += st.chunks_free;
            c.chunks += st.chunks_total;
            c.read_batches += st.combining.batches();
            c.read_batch_requests += st.combining.requests();
            c.dram_bytes += st.dram_bytes;
        }
        let sv = self.svc.stats();
        c.svc_hits = sv.hits;
        c.svc_misses = sv.misses;
        c.svc_evictions = sv.evictions;
        c.svc_chain_writebacks = sv.chain_writebacks;
        c.svc_bytes = sv.bytes;
        c.svc_touches_dropped = sv.touches_dropped;
        c.svc_touches_coalesced = sv.touches_coalesced;
        c.svc_entries = sv.entries;
        c.dram_bytes += self.hsit.dram_bytes() + self.index.dram_bytes();
        c
    }
}
