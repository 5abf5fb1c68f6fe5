//! What every partition and background thread shares: the media, the options, the
//! fast-tier usage, the block cache, the counters and the wake-up signals (PrismDB §6,
//! Fig. 7).
//!
//! Thread safety: `Send + Sync`; fields are immutable after open or atomics/locks.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::{Condvar, Mutex, RwLock};
use tierkv_core::media::flash::FlashDevice;
use tierkv_core::media::pmem::{PmemAllocator, PmemPool};
use tierkv_core::{Counter, Limits, OpCounters};

use crate::options::PrismDbOptions;
use crate::partition::Partition;
use crate::partition_map::PartitionMap;
use crate::slab::Usage;
use crate::table::BlockCache;

/// PrismDB's own counters (reported in `stats`).
#[derive(Debug, Default)]
pub struct EngineCounters {
    /// Reads, bytes, reads per tier.
    pub ops: OpCounters,
    /// Write-triggered compactions.
    pub compactions_write: Counter,
    /// Read-triggered compactions.
    pub compactions_read: Counter,
    /// Compactions that failed (flash errors).
    pub compactions_failed: Counter,
    /// Compactions given up before writing: no room on flash beyond its reserve.
    pub compactions_no_room: Counter,
    /// Read-triggered compactions skipped: they would rewrite a table to promote less
    /// than `read_min_promote` of its bytes.
    pub read_compactions_skipped: Counter,
    /// Objects demoted to flash.
    pub demoted: Counter,
    /// Objects promoted to the fast tier.
    pub promoted: Counter,
    /// Tombstones dropped by compactions.
    pub tombstones_dropped: Counter,
    /// Microseconds spent in compactions.
    pub compaction_micros: Counter,
    /// Puts delayed by the rate limiter (fast tier above the high watermark).
    pub throttled_writes: Counter,
    /// Puts that waited for a compaction to free space.
    pub space_waits: Counter,
    /// Recovery time of the last open (gauge).
    pub recovery_micros: Counter,
    /// Live objects found by the last recovery (gauge).
    pub recovered_objects: Counter,
    /// Slots freed by the last recovery (losers, torn and dead objects).
    pub recovery_freed: Counter,
    /// Write batches committed.
    pub batches: Counter,
    /// Operations of the committed write batches.
    pub batch_ops: Counter,
    /// Pending write batches voided by the last recovery.
    pub batches_rolled_back: Counter,
}

/// The engine's shared state.
pub struct Shared {
    /// The pmem pool.
    pub pool: Arc<PmemPool>,
    /// The allocator over the slab region.
    pub alloc: Arc<PmemAllocator>,
    /// The flash device.
    pub dev: Arc<FlashDevice>,
    /// Options (layout options as recorded in the superblock).
    pub opts: PrismDbOptions,
    /// Key and value limits.
    pub limits: Limits,
    /// Partition boundaries.
    pub map: PartitionMap,
    /// The partitions.
    pub parts: Vec<Partition>,
    /// Fast-tier usage.
    pub usage: Arc<Usage>,
    /// The DRAM block cache.
    pub cache: BlockCache,
    /// Counters.
    pub counters: EngineCounters,
    /// Set at close: background threads exit.
    pub stop: AtomicBool,
    /// Set after close.
    pub closed: AtomicBool,
    /// Wakes the compaction threads.
    pub wake: (Mutex<u64>, Condvar),
    /// Signalled after every compaction (writers waiting for space).
    pub space: (Mutex<u64>, Condvar),
    /// The count in `space`, readable without its lock ([`Shared::space_epoch`]).
    pub space_epoch: AtomicU64,
    /// Operations since open (read-triggered compaction epochs).
    pub op_clock: AtomicU64,
    /// Why the store refuses writes (a commit that may or may not have happened), if so.
    pub poisoned: Mutex<Option<String>>,
    /// Set once `poisoned` holds a reason (read by every write without the mutex).
    pub is_poisoned: AtomicBool,
    /// Room on flash (FORMAT.md §3 "Room on flash"): compactions check it and create
    /// their files under this lock; it holds the bytes of manifests claimed and not yet
    /// created.
    pub flash_claims: Mutex<u64>,
    /// Held by the one compaction at a time that may use the flash reserve.
    pub flash_reserve: Mutex<()>,
    /// The largest table file and manifest file written or found (the reserve's size).
    pub largest_files: (AtomicU64, AtomicU64),
    /// Held (shared) by a compaction from its manifest commit until its old files are
    /// removed; [`crate::PrismDbStore::hold_flash_commits`] takes it exclusively, so the
    /// flash directory and the pool change together only while it is free.
    pub flash_commit: RwLock<()>,
    /// Counts write batches committed or abandoned (writes waiting for one wait on it).
    pub batches_done: (Mutex<u64>, Condvar),
}

impl Shared {
    /// Wakes every compaction thread.
    pub fn wake_compactors(&self) {
        let mut g = self.wake.0.lock();
        *g += 1;
        self.wake.1.notify_all();
    }

    /// Waits up to `d` for a wake-up; true if one came.
    pub fn wait_for_work(&self, d: Duration) -> bool {
        let mut g = self.wake.0.lock();
        let seen = *g;
        if self.stop.load(Ordering::Acquire) {
            return false;
        }
        self.wake.1.wait_for(&mut g, d);
        *g != seen
    }

    /// The count of write batches committed or abandoned so far.
    pub fn batches_seen(&self) -> u64 {
        *self.batches_done.0.lock()
    }

    /// Tells writers waiting for a batch that one committed or was abandoned.
    pub fn batch_done(&self) {
        let mut g = self.batches_done.0.lock();
        *g += 1;
        self.batches_done.1.notify_all();
    }

    /// Waits until a batch commits or is abandoned after `seen` was read (or 10 ms).
    pub fn wait_for_batches(&self, seen: u64) {
        let mut g = self.batches_done.0.lock();
        if *g == seen {
            self.batches_done
                .1
                .wait_for(&mut g, Duration::from_millis(10));
        }
    }

    /// Tells writers waiting for space that a compaction finished.
    pub fn space_freed(&self) {
        let mut g = self.space.0.lock();
        *g += 1;
        self.space_epoch.store(*g, Ordering::Release);
        self.space.1.notify_all();
    }

    /// True while a writer of any partition waits for room on the fast tier.
    pub fn writers_waiting(&self) -> bool {
        self.parts
            .iter()
            .any(|p| p.pressure.load(Ordering::Acquire) > 0)
    }

    /// How many times room was freed so far: read before a failed allocation, and
    /// passed to [`Shared::wait_for_space`].
    pub fn space_epoch(&self) -> u64 {
        // A copy of the count outside its mutex: every put reads it.
        self.space_epoch.load(Ordering::Acquire)
    }

    /// Waits up to `d` for room to be freed after `seen` ([`Shared::space_epoch`]) was
    /// read; returns at once if it was already (a notification between the failed
    /// allocation and this wait is not lost: it cost a writer the whole `d`).
    pub fn wait_for_space(&self, seen: u64, d: Duration) {
        let mut g = self.space.0.lock();
        if *g == seen {
            self.space.1.wait_for(&mut g, d);
        }
    }

    /// Makes the store refuse writes until it is reopened.
    pub fn poison(&self, why: String) {
        self.poisoned.lock().get_or_insert(why);
        self.is_poisoned.store(true, Ordering::Release);
        self.space_freed();
    }

    /// `Err(Poisoned)` once the store refuses writes.
    pub fn check_writable(&self) -> tierkv_core::Result<()> {
        if !self.is_poisoned.load(Ordering::Acquire) {
            return Ok(());
        }
        match self.poisoned.lock().as_ref() {
            Some(why) => Err(tierkv_core::Error::Poisoned(why.clone())),
            None => Ok(()),
        }
    }

    /// Marks named crash point `name` (FORMAT.md §3 "Named crash points") through the
    /// core mechanism: a test that armed the pool's crash points
    /// (`PmemPool::arm_crash_points`) receives `CrashPoint::Named(name)` here, on this
    /// thread, paused.
    pub fn crash_point(&self, name: &'static str) {
        self.pool.crash_point(name);
    }

    /// Bytes a compaction that makes flash use grow must leave free: room for a
    /// compaction that rewrites the largest table without growing it, with its manifest.
    pub fn flash_reserve_bytes(&self) -> u64 {
        self.largest_files.0.load(Ordering::Acquire)
            + self.largest_files.1.load(Ordering::Acquire)
            + 8192
    }

    /// Flash bytes neither used nor claimed.
    pub fn flash_free(&self) -> u64 {
        let claims = *self.flash_claims.lock();
        self.dev
            .capacity()
            .saturating_sub(self.dev.used().saturating_add(claims))
    }

    /// Notes a table or manifest file of `len` bytes (`manifest`).
    pub fn note_file(&self, len: u64, manifest: bool) {
        let a = if manifest {
            &self.largest_files.1
        } else {
            &self.largest_files.0
        };
        a.fetch_max(len, Ordering::AcqRel);
    }

    /// The partition of `key`.
    pub fn part(&self, key: &[u8]) -> Option<&Partition> {
        self.parts.get(self.map.partition_of(key))
    }
}
