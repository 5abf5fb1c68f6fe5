//! [`HeterMem`]: the heterogeneous memory of HeterMM (§4) — one logical address space over
//! a ring of DRAM pages and pmem blocks, with the region markers that split it:
//!
//! ```text
//!  persisted region        | overlap region (read-only)  | in-place-update region
//!  pmem blocks             | DRAM pages, being flushed   | DRAM pages
//! -------------------------+-----------------------------+----------------------------> addr
//!                       off_DRAM                   off_ReadOnly                  next page
//! ```
//!
//! Invariants (checked by `check.rs`):
//! 1. `off_DRAM <= off_ReadOnly <= start of the next logical page to hand out`, and both
//!    markers are block aligned (blocks are flushed whole).
//! 2. Every logical page in `[off_DRAM, next page)` that was handed out is mapped in the
//!    write region's pages array until its block is flushed; every block below off_DRAM
//!    that holds a live record is published (directory word + `blocks` array).
//! 3. A record above off_ReadOnly may be updated in place; below it only out of place.
//! 4. Addresses never change: flushing copies pages into a block at the same offsets and
//!    reorganisation keeps the address as the compact block's hash key, so the index is
//!    never touched by background work.
//! 5. Timestamps are unique and, for each key, grow in the order the index installs its
//!    versions.
//!
//! Submodules: `guard` (an operation's pin and its effects), `access` (get_value /
//! set_value / delete, Eq. 1 and §4.2-4.3), `alloc` (Algorithm 2 for logical addresses).
//! Flushing, reorganisation, recovery and the checks are in their own top-level modules.
//!
//! Thread safety: `Send + Sync`. Region markers are `SeqCst` atomics written only by the
//! flusher; see `threads.rs` for the epoch argument.

pub mod access;
pub mod alloc;
pub mod batch;
pub mod guard;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;
use tierkv_core::media::pmem::PmemPool;
use tierkv_core::{Error, Result, Tier};

use crate::cache::ReadCache;
use crate::dram::PagePool;
use crate::dram::ring::{MAX_PAGES, Ring};
use crate::flush::FlushState;
use crate::format::record::MAX_TS;
use crate::geometry::Geometry;
use crate::nvm::Nvm;
use crate::nvm::blocks::BlockTable;
use crate::nvm::reserve;
use crate::oplog::OpLog;
use crate::options::HeterOptions;
use crate::signal::Signal;
use crate::stats::HeterCounters;
use crate::threads::SlotTable;

pub use guard::Guard;

/// The region markers and the page counter of the logical space.
#[derive(Debug, Default)]
pub struct Regions {
    /// off_DRAM: addresses below it are in pmem blocks.
    pub off_dram: AtomicU64,
    /// off_ReadOnly: addresses below it are updated out of place.
    pub off_read_only: AtomicU64,
    /// The alarm (Eq. 2): a thread whose page starts below this leaves it.
    pub alarm: AtomicU64,
    /// GlobalAllocated of Algorithm 2: the next logical page to hand out.
    pub next_page: AtomicU64,
    /// Every logical page below it has been unmapped from the pages array, so the slot of
    /// page `P` is free for page `P + ring length` once `P` is below it. It trails
    /// `off_dram`: a flush moves `off_dram` (readers go to pmem), waits for readers, unmaps
    /// the block's pages, and only then moves this. Reservations are bounded by it, not by
    /// `off_dram`: in between, the flushed block's pages still hold their slots, and a
    /// writer holding a free page (the window has holes, e.g. a forced flush that closed
    /// the tail block and then failed) mapped into one ("pages array slot of page N still
    /// holds page M", M the block's first page).
    pub unmapped_below: AtomicU64,
}

/// Whether the store accepts operations.
#[derive(Debug, Default)]
pub struct Health {
    /// Set by close.
    pub closed: AtomicBool,
    /// The first background failure that makes writes unsafe.
    pub poisoned: OnceLock<String>,
    /// Why the flusher cannot make progress right now (pmem full), if it cannot.
    pub stalled: Mutex<Option<String>>,
}

impl Health {
    /// Fails if the store is closed.
    pub fn check_open(&self) -> Result<()> {
        if self.closed.load(Ordering::Acquire) {
            return Err(Error::Closed);
        }
        Ok(())
    }

    /// Fails if the store is closed or poisoned.
    pub fn check_writable(&self) -> Result<()> {
        self.check_open()?;
        self.check_not_poisoned()
    }

    /// Fails if the store is poisoned (closed or not): the flusher's and the reclaimer's
    /// work on pmem checks this (a close's last flush runs after `closed` is set).
    pub fn check_not_poisoned(&self) -> Result<()> {
        match self.poisoned.get() {
            Some(why) => Err(Error::Poisoned(why.clone())),
            None => Ok(()),
        }
    }

    /// Records a failure that makes further writes unsafe.
    pub fn poison(&self, why: String) {
        let _ = self.poisoned.set(why);
    }
}

/// Requests for defragmentation (`reorg.rs`) and the reclaimer's answers, numbered so that
/// a writer waiting for pmem gets its `NoSpace` once a pass that began after its request
/// found nothing to move — rather than waiting forever while other failures keep asking.
///
/// Requests made while one is pending join it; the reclaimer answers every request up to
/// the one pending when its pass began.
#[derive(Debug, Default)]
pub struct Defrag {
    requested: AtomicU64,
    answered: AtomicU64,
}

impl Defrag {
    /// Asks for a pass (or joins the pending one); returns the request's number.
    pub fn request(&self) -> u64 {
        loop {
            let asked = self.requested.load(Ordering::Acquire);
            if asked > self.answered.load(Ordering::Acquire) {
                return asked;
            }
            if self
                .requested
                .compare_exchange(asked, asked + 1, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                return asked + 1;
            }
        }
    }

    /// True while a request waits for a pass to give up.
    pub fn pending(&self) -> bool {
        self.requested.load(Ordering::Acquire) > self.answered.load(Ordering::Acquire)
    }

    /// The request a pass beginning now answers when it gives up.
    pub fn begin(&self) -> u64 {
        self.requested.load(Ordering::Acquire)
    }

    /// A pass that began at `request` found nothing to move.
    pub fn gave_up(&self, request: u64) {
        self.answered.fetch_max(request, Ordering::AcqRel);
    }

    /// True once a pass that began after request `r` gave up.
    pub fn answered(&self, r: u64) -> bool {
        self.answered.load(Ordering::Acquire) >= r
    }
}

/// Room passes (`flush.rs`): writers waiting while the reserve is dipped ask for one; the
/// flusher runs them. A writer's request is answered only by a pass that began after it
/// asked and ended with the reserve still short (stricter than [`Defrag`], where a request
/// joins the pass already running). A pass that began after the request and refilled the
/// reserve does not answer it: if the reserve has dipped again by the time the writer
/// looks, the writer asks again ([`RoomPasses::next_step`]).
#[derive(Debug, Default)]
pub struct RoomPasses {
    /// Passes begun (the number of the latest).
    begun: AtomicU64,
    /// One more than the latest pass number a waiting writer saw begun.
    asked: AtomicU64,
    /// The highest pass number that ended with the reserve short.
    barren: AtomicU64,
    /// The highest pass number that ended (refilled or not; set after `barren`).
    ended: AtomicU64,
}

/// What a writer waiting for room does next ([`RoomPasses::next_step`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RoomStep {
    /// A pass begun after the request found the pool full: refuse the write.
    Refuse,
    /// A pass begun after the request refilled the reserve, and it dipped again: ask for
    /// a new pass (the old ticket would never be answered, and no pass would start: the
    /// 2026-11-26 hang, writers waiting in `admit_write` with the flusher idle).
    AskAgain,
    /// The pass asked for has not ended: wait.
    Wait,
}

impl RoomPasses {
    /// Asks for a pass; returns the ticket to pass to [`RoomPasses::answered`].
    pub fn request(&self) -> u64 {
        let ticket = self.begun.load(Ordering::SeqCst) + 1;
        self.asked.fetch_max(ticket, Ordering::SeqCst);
        ticket
    }

    /// True while a writer waits for a pass not begun yet.
    pub fn pending(&self) -> bool {
        self.asked.load(Ordering::SeqCst) > self.begun.load(Ordering::SeqCst)
    }

    /// Begins a pass; returns its number.
    pub fn begin(&self) -> u64 {
        self.begun.fetch_add(1, Ordering::SeqCst) + 1
    }

    /// Pass `n` ended with the reserve still short.
    pub fn gave_up(&self, n: u64) {
        self.barren.fetch_max(n, Ordering::SeqCst);
    }

    /// True once a pass numbered `ticket` or later (so begun after the request) gave up.
    pub fn answered(&self, ticket: u64) -> bool {
        self.barren.load(Ordering::SeqCst) >= ticket
    }

    /// Pass `n` ended (after [`RoomPasses::gave_up`], if it gave up).
    pub fn end(&self, n: u64) {
        self.ended.fetch_max(n, Ordering::SeqCst);
    }

    /// What a writer holding `ticket` does while the reserve is still dipped.
    pub fn next_step(&self, ticket: u64) -> RoomStep {
        if self.answered(ticket) {
            RoomStep::Refuse
        } else if self.ended.load(Ordering::SeqCst) >= ticket {
            // A pass begun after the request ended without giving up (`barren` is set
            // before `ended`): it refilled the reserve, which has dipped again since.
            RoomStep::AskAgain
        } else {
            RoomStep::Wait
        }
    }
}

/// Where a test hook runs (`regressions.rs` forces interleavings with it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HookPoint {
    /// At the start of a write attempt (after a lost attempt's entry was retracted).
    Write,
    /// After a write attempt's log entry is committed (a put's: prepared; it is written
    /// once the index's lock is released, `access.rs` `complete`).
    Logged,
    /// A put's log entry is about to be written, its index lock released (the value is
    /// empty).
    Persisting,
    /// In `flush_oldest`, before a run is taken for the block (the value is empty).
    Flushing,
    /// In `flush_oldest`, once the block's directory word is durable (the value is empty).
    Published,
    /// In `flush_oldest`'s freeing stage: `off_dram` has moved past the block and readers
    /// have been waited for; its DRAM pages are not unmapped yet (the value is empty).
    Freeing,
    /// In `apply_marks`, once a block's cell is taken and before it is locked (the value is
    /// the block number, little-endian).
    Marking,
    /// In a write batch's commit, every operation applied in DRAM, before its log entry is
    /// written (the value is empty).
    BatchApplied,
    /// In `reorganise`, once the block's compact copy is published and before the old
    /// copy's directory word is cleared (the value is the block number, little-endian).
    Unpublishing,
}

/// A test hook: sees the point and the value written (empty for a delete); an error it
/// returns fails the attempt there.
#[cfg(test)]
pub type TestHook = Arc<dyn Fn(HookPoint, &[u8]) -> Result<()> + Send + Sync>;

/// How often a writer waiting for room looks again.
const ROOM_POLL: std::time::Duration = std::time::Duration::from_millis(1);

/// Log blocks past its budget before writers wait for the flusher: room for the blocks the
/// flusher itself starts while it compresses.
const LOG_SLACK: usize = 2;

/// Timestamps kept back at the end of the clock for writes already under way.
const TS_HEADROOM: u64 = 1 << 32;

/// The heterogeneous memory of one store.
pub struct HeterMem {
    /// k and m.
    pub geo: Geometry,
    /// The options.
    pub opts: HeterOptions,
    /// freePages.
    pub free_pages: usize,
    /// Free DRAM pages a write batch waits for (ours, `mem/alloc.rs`
    /// `alloc_batch_records`): while it is above `free_pages`, the flusher keeps that many
    /// free instead ([`HeterMem::free_target`]).
    pub batch_pages_wanted: std::sync::atomic::AtomicUsize,
    /// Live log blocks before the oldest is compressed.
    pub log_blocks_max: usize,
    /// Live log blocks at which new writes wait for the flusher (`mem/alloc.rs`).
    pub log_blocks_limit: usize,
    /// The pmem side.
    pub nvm: Nvm,
    /// The `blocks` array and block bookkeeping.
    pub blocks: BlockTable,
    /// Logical blocks kept back from new writes at the end of the block numbers: what a
    /// recovery replays (at most all of DRAM) and its forced flush need (`mem/alloc.rs`).
    pub write_headroom: u64,
    /// Physical DRAM pages.
    pub pages: PagePool,
    /// The write region's pages array.
    pub ring: Ring,
    /// Per-thread slots and epochs.
    pub threads: Arc<SlotTable>,
    /// Region markers.
    pub regions: Regions,
    /// The next timestamp.
    pub clock: AtomicU64,
    /// The operation log (`None` with `oplog=off`).
    pub oplog: Option<OpLog>,
    /// The read cache (`None` with `read_cache=off`).
    pub cache: Option<ReadCache>,
    /// Counters.
    pub counters: HeterCounters,
    /// Open / poisoned / stalled.
    pub health: Health,
    /// The flusher's own state (taken by whoever flushes).
    pub flusher: Mutex<FlushState>,
    /// True while recovery replays the log (replayed writes are not logged again: the old
    /// log stays until they are flushed).
    pub replaying: AtomicBool,
    /// True while recovery rebuilds the index from pmem (guards collect losers).
    pub recovering: AtomicBool,
    /// Set once the store is open (recovery done): the flusher's full-pool work
    /// (`flush.rs`) would retire the old logs under a replay still reading them.
    pub serving: AtomicBool,
    /// Losers found by recovery (marked at its end).
    pub recovery_losers: Mutex<Vec<u64>>,
    /// Wakes the flusher (a writer waits for a page, a flush is requested).
    pub wake_flusher: Signal,
    /// Wakes the reclaimer (a block crossed the reorganisation threshold).
    pub wake_reclaimer: Signal,
    /// Requests to defragment the pool (a run could not be allocated).
    pub defrag: Defrag,
    /// Writers' requests for a room pass while the reserve is dipped (`flush.rs`), and the
    /// flusher's answers: a request is answered when a pass that began after it left the
    /// reserve short.
    pub room: RoomPasses,
    /// Held for a whole reorganisation: the reclaimer and the flusher's room pass both
    /// reorganise (`reorg.rs`).
    pub reorg_lock: Mutex<()>,
    /// The test hook, if set.
    #[cfg(test)]
    pub hook: Mutex<Option<TestHook>>,
}

impl HeterMem {
    /// A memory over `nvm` with empty DRAM, its logical space starting at block
    /// `first_block` and its log at sequence `next_log_seq`.
    pub fn new(
        nvm: Nvm,
        opts: HeterOptions,
        first_block: u64,
        next_log_seq: u64,
    ) -> Result<HeterMem> {
        let geo = Geometry {
            page_bits: opts.page_bits,
            block_bits: nvm.block_bits(),
        };
        opts.check_geometry(geo.block_bits)?;
        let ppb = geo.pages_per_block() as usize;
        let pool_pages =
            (nvm.alloc.layout().chunk_count * nvm.sb.chunk_size / geo.page_size()) as usize;
        let free_pages = opts.free_pages.map_or(ppb, |f| f as usize).max(1);
        let needed = (opts.overlap_blocks as usize + 3) * ppb + free_pages;
        // DRAM is at most an eighth of the pool (a quarter when the minimum needs it): the
        // pmem reserve must cover flushing all of it (`nvm/reserve.rs`), and a quarter of a
        // small pool held back for that, beside the log, left writers short of room under
        // a heavy overwrite load (stress, 64 MiB pool).
        let pages = ((opts.dram_budget / geo.page_size()) as usize)
            .min((pool_pages / 8).max(needed).min(pool_pages / 4))
            .min(MAX_PAGES);
        if pages < needed {
            return Err(Error::invalid(format!(
                "hetermm needs at least {needed} DRAM pages of {} bytes ({} bytes: {} blocks of \
                 2^{} bytes plus freePages), but dram_budget = {} bytes and a quarter of the pmem \
                 pool allow {pages}; raise dram_budget or the pool size, or lower block_bits",
                geo.page_size(),
                needed as u64 * geo.page_size(),
                opts.overlap_blocks + 3,
                geo.block_bits,
                opts.dram_budget,
            )));
        }
        let pool_blocks = (pool_pages / ppb).max(1);
        let log_blocks_max = match opts.log_blocks {
            0 => (2 * pages / ppb + 2).min(pool_blocks / 8).max(4),
            n => n as usize,
        };
        // The reserve (`nvm/reserve.rs`): every block the write region can span, log blocks,
        // one reorganisation copy. Taken now, before recovery replays anything.
        let dram_blocks = pages.div_ceil(ppb) + 1;
        nvm.reserve.set_target(
            dram_blocks + reserve::LOG_BLOCKS + reserve::REORG_BLOCKS + reserve::RACING_BLOCKS,
        );
        nvm.top_up_reserve()?;
        let start = geo.block_start(first_block);
        let regions = Regions {
            off_dram: AtomicU64::new(start),
            off_read_only: AtomicU64::new(start),
            alarm: AtomicU64::new(start),
            next_page: AtomicU64::new(geo.first_page(first_block)),
            unmapped_below: AtomicU64::new(geo.first_page(first_block)),
        };
        Ok(HeterMem {
            geo,
            free_pages,
            batch_pages_wanted: std::sync::atomic::AtomicUsize::new(0),
            log_blocks_max,
            log_blocks_limit: log_blocks_max + LOG_SLACK,
            blocks: BlockTable::with_capacity(match opts.max_blocks {
                0 => geo.block_numbers(),
                n => n.min(geo.block_numbers()),
            }),
            write_headroom: dram_blocks as u64 + 2,
            pages: PagePool::new(pages, geo.page_size()),
            ring: Ring::new(pages),
            threads: SlotTable::new(),
            regions,
            clock: AtomicU64::new(1),
            oplog: opts.oplog.then(|| {
                OpLog::new(geo, next_log_seq)
                    .grouped(opts.group_commit)
                    .two_step(opts.two_step_write)
            }),
            cache: opts.read_cache.then(|| ReadCache::new(geo, pages)),
            counters: HeterCounters::default(),
            health: Health::default(),
            flusher: Mutex::new(FlushState::default()),
            replaying: AtomicBool::new(false),
            recovering: AtomicBool::new(false),
            serving: AtomicBool::new(false),
            recovery_losers: Mutex::new(Vec::new()),
            wake_flusher: Signal::default(),
            wake_reclaimer: Signal::default(),
            defrag: Defrag::default(),
            room: RoomPasses::default(),
            reorg_lock: Mutex::new(()),
            #[cfg(test)]
            hook: Mutex::new(None),
            nvm,
            opts,
        })
    }

    /// Runs the test hook (in tests; nothing otherwise).
    pub fn run_hook(&self, point: HookPoint, value: &[u8]) -> Result<()> {
        #[cfg(test)]
        {
            let hook = self.hook.lock().clone();
            if let Some(h) = hook {
                return h(point, value);
            }
        }
        let _ = (point, value);
        Ok(())
    }

    /// The pool.
    pub fn pool(&self) -> &PmemPool {
        &self.nvm.pool
    }

    /// A new timestamp.
    pub fn next_ts(&self) -> u64 {
        self.clock.fetch_add(1, Ordering::Relaxed)
    }

    /// Makes every later timestamp larger than `ts`.
    pub fn observe_ts(&self, ts: u64) {
        self.clock
            .fetch_max(ts.saturating_add(1).min(MAX_TS), Ordering::Relaxed);
    }

    /// off_DRAM (`SeqCst`: see `threads.rs`).
    pub fn off_dram(&self) -> u64 {
        self.regions.off_dram.load(Ordering::SeqCst)
    }

    /// off_ReadOnly (`SeqCst`).
    pub fn off_read_only(&self) -> u64 {
        self.regions.off_read_only.load(Ordering::SeqCst)
    }

    /// The largest key + value a record (and its log entry) can hold.
    pub fn max_payload(&self) -> u64 {
        self.geo.page_size() - 128
    }

    /// Refuses a key and value that do not fit one page.
    pub fn check_payload(&self, key: &[u8], value: &[u8]) -> Result<()> {
        self.check_payload_len(key.len(), value.len())
    }

    /// [`HeterMem::check_payload`] by lengths.
    pub fn check_payload_len(&self, key_len: usize, value_len: usize) -> Result<()> {
        let n = (key_len + value_len) as u64;
        if n > self.max_payload() || key_len > usize::from(u16::MAX) || key_len == 0 {
            return Err(Error::invalid(format!(
                "a key and value of {n} bytes do not fit a hetermm page of {} bytes (at most {} \
                 bytes; raise page_bits for larger values)",
                self.geo.page_size(),
                self.max_payload()
            )));
        }
        Ok(())
    }

    /// Admits a new write, or refuses it with `NoSpace` while the pool is full
    /// (`nvm/reserve.rs`). A writer that finds the reserve dipped waits (unpinned) until
    /// it is full again — admitted — or until a *room pass* of the flusher that began after
    /// the writer asked for it (flush of all of DRAM, reorganisation of every block over the
    /// threshold, defragmentation, `flush.rs`) ended with the reserve still short: then the
    /// pool is full for good and the write is refused. So a pool that garbage still
    /// clutters is never reported full, and a genuinely full one refuses after one pass.
    pub fn admit_write(&self, g: &Guard<'_>) -> Result<()> {
        self.check_clock()?;
        if self.replaying.load(Ordering::Acquire) {
            return Ok(());
        }
        let mut request = None;
        while self.nvm.reserve.dipped() {
            self.health.check_writable()?;
            let r = *request.get_or_insert_with(|| self.room.request());
            let step = self.room.next_step(r);
            if step == RoomStep::AskAgain {
                request = Some(self.room.request());
            } else if step == RoomStep::Refuse {
                return Err(Error::no_space(
                    Tier::Pmem,
                    format!(
                        "the hetermm pmem pool is full: new writes are refused until deletes \
                         free space (reads, deletes, flush and close go on); {}",
                        self.space_report()
                    ),
                ));
            }
            self.wake_flusher.raise();
            g.unpinned(|| std::thread::sleep(ROOM_POLL));
        }
        Ok(())
    }

    /// Refuses a write when timestamps are about to run out (61 bits; a clean error long
    /// before a timestamp could overflow the meta word, with room for the writes in flight).
    pub fn check_clock(&self) -> Result<()> {
        if self.clock.load(Ordering::Relaxed) >= MAX_TS - TS_HEADROOM {
            return Err(Error::no_space(
                Tier::Pmem,
                "hetermm timestamps are used up: the store takes no more writes",
            ));
        }
        Ok(())
    }

    /// Refuses a logical page in block `b`: writes stop `write_headroom` blocks before the
    /// block numbers run out, and recovery's replay (and forced flush) at the end.
    pub fn check_block_number(&self, b: u64) -> Result<()> {
        let limit = if self.replaying.load(Ordering::Acquire) {
            self.blocks.capacity()
        } else {
            self.blocks.capacity().saturating_sub(self.write_headroom)
        };
        if b >= limit {
            return Err(Error::no_space(
                Tier::Pmem,
                format!(
                    "hetermm logical block numbers are used up (block {b} of {}): reads and \
                     deletes go on, new writes are refused",
                    self.blocks.capacity()
                ),
            ));
        }
        Ok(())
    }

    /// Notes that pmem could not serve an allocation: asks the reclaimer to defragment;
    /// returns the request's number.
    pub fn note_no_space(&self, e: &Error) -> Option<u64> {
        if !matches!(e, Error::NoSpace { .. }) {
            return None;
        }
        let r = self.defrag.request();
        self.wake_reclaimer.raise();
        Some(r)
    }

    /// Starts an operation of the calling thread (during recovery, one whose losers are
    /// collected for marking rather than registered).
    pub fn pin(&self) -> Result<Guard<'_>> {
        self.health.check_open()?;
        let slot = self.threads.current()?;
        self.threads.pin(slot)?;
        Ok(Guard::new(
            self,
            slot,
            self.recovering.load(Ordering::Acquire),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::Defrag;

    /// Regression (stress with `reorg_threshold=0.99` on a full 4 MiB pool): writers waited
    /// for defragmentation forever, because every new failure asked for it again.
    #[test]
    fn a_room_request_is_answered_only_by_a_pass_that_began_after_it() {
        let r = super::RoomPasses::default();
        assert!(!r.pending());
        let first = r.request();
        assert!(r.pending());
        let pass = r.begin();
        assert!(!r.pending(), "the pass running answers it");
        let during = r.request();
        assert!(
            r.pending(),
            "a request made during a pass needs the next one"
        );
        r.gave_up(pass);
        assert!(r.answered(first));
        assert!(!r.answered(during), "the pass began before it");
        let next = r.begin();
        r.gave_up(next);
        assert!(r.answered(during) && !r.pending());
    }

    /// Regression (2026-11-26: `tierkv stress --engine hetermm:btree --mode space --mix
    /// 80,0,15,5,100 --batch-size 16`, seeds 301 and 303 under load: `the fill made no
    /// progress for 20 s`). A writer's room pass refilled the reserve, which dipped again
    /// before the writer looked: its ticket was never answered (no pass gave up) and no pass
    /// started (none was pending), so it waited in `admit_write` forever with the flusher
    /// idle (the stacks the stress printed on the hang). Now it asks again.
    #[test]
    fn a_writer_whose_pass_refilled_a_reserve_that_dipped_again_asks_again() {
        use super::RoomStep;
        let r = super::RoomPasses::default();
        let ticket = r.request();
        assert_eq!(r.next_step(ticket), RoomStep::Wait);
        let pass = r.begin();
        assert_eq!(r.next_step(ticket), RoomStep::Wait, "its pass is running");
        // The pass refills the reserve (no give-up); another writer dips it again.
        r.end(pass);
        assert!(!r.pending(), "nothing asks for a pass any more");
        assert!(!r.answered(ticket));
        assert_eq!(r.next_step(ticket), RoomStep::AskAgain);
        let again = r.request();
        assert!(
            again > ticket && r.pending(),
            "the new request starts a pass"
        );
        let next = r.begin();
        r.gave_up(next);
        r.end(next);
        assert_eq!(r.next_step(again), RoomStep::Refuse, "a full pool refuses");
    }

    #[test]
    fn a_defragmentation_request_is_answered_by_a_pass_that_began_after_it() {
        let d = Defrag::default();
        assert!(!d.pending());
        let first = d.request();
        assert_eq!(d.request(), first, "a request joins the pending one");
        let pass = d.begin();
        let during = d.request();
        assert_eq!(during, first);
        d.gave_up(pass);
        assert!(d.answered(first) && d.answered(during) && !d.pending());
        let second = d.request();
        assert!(second > first && !d.answered(second) && d.pending());
        let older_pass = first;
        d.gave_up(older_pass);
        assert!(
            !d.answered(second),
            "a pass that began before it does not answer it"
        );
        d.gave_up(d.begin());
        assert!(d.answered(second));
    }
}
