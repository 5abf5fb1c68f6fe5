//! A partition (PrismDB §4.1, §6 "Interface"): its DRAM index over the fast-tier objects,
//! its slabs, its tracker, its buckets and its flash tables, and the foreground operations
//! on them — get, put (out of place: new slot persisted, published, old slot freed), delete
//! (tombstones), scan (the two-level iterator of §6).
//!
//! Locks (FORMAT.md §3 gives the persist orders they protect):
//! - `state` (RwLock): index, slabs, clock `ts`, table set, compaction range. Gets and scans
//!   read under the read lock; allocation, publication and frees take the write lock; the
//!   object write and its persist happen with no lock held.
//! - `tracker` (Mutex): the clock tracker; taken alone, or after `state`'s read lock.
//! - `buckets` (Mutex): approx-MSC counters; taken last.
//!
//! Thread safety: `Send + Sync`; all methods take `&self`.

use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::{Mutex, RwLock};
use tierkv_core::{Counter, Error, KvPair, Result, Tier};

use crate::format::{decode_object, encode_object_into, object_len};
use crate::hot::HotNotes;
use crate::key::{DramKey, dram_key, range_from};
use crate::mapper::{is_pinned, pin_draw, pin_probabilities};
use crate::msc::{Buckets, common_prefix, key_pos};
use crate::shared::Shared;
use crate::slab::Slabs;
use crate::table::{Source, TableSet};
use crate::tracker::{Touch, Tracker};

/// Where a key's fast-tier object is.
#[derive(Debug)]
pub struct Loc {
    /// Pool offset of the slot.
    pub off: u64,
    /// Timestamp of the object.
    pub ts: u64,
    /// Size class.
    pub class: u8,
    /// A tombstone.
    pub tomb: bool,
    /// The key may also be on flash (counted in its bucket's overlap).
    pub on_flash: bool,
    /// Popular: accessed again while tracked (its clock was raised from 0), not evicted
    /// since; counted in its bucket's popular keys (approx-MSC, `msc.rs`).
    pub popular: AtomicBool,
    /// A promoted copy of a flash value (replaced by any write in flight; DRAM only).
    pub promoted: bool,
}

/// The part of a partition guarded by its `state` lock.
#[derive(Debug)]
pub struct State {
    /// Key -> fast-tier object.
    pub index: BTreeMap<DramKey, Loc>,
    /// Slabs.
    pub slabs: Slabs,
    /// Last timestamp given out.
    pub ts: u64,
    /// Current table version.
    pub tables: Arc<TableSet>,
    /// The key range a compaction is moving (from choice to install).
    pub compacting: Option<(Vec<u8>, Option<Vec<u8>>)>,
    /// Sequence of the committed manifest.
    pub manifest_seq: u64,
    /// Next table number.
    pub next_table: u64,
    /// Keys that write batches reserved slots for and have not yet committed or abandoned,
    /// with the timestamps of those batches: promotions leave them alone, and a write with
    /// a higher timestamp waits for them before it publishes (FORMAT.md §3 "Write
    /// batches").
    pub batch_keys: HashMap<Vec<u8>, Vec<u64>>,
}

impl State {
    /// True when `key` lies in the range being compacted.
    pub fn in_compaction(&self, key: &[u8]) -> bool {
        self.compacting.as_ref().is_some_and(|(lo, hi)| {
            key >= lo.as_slice() && hi.as_ref().is_none_or(|h| key < h.as_slice())
        })
    }
}

/// Per-partition operation counters (read-triggered compactions watch them).
#[derive(Debug, Default)]
pub struct PartCounters {
    /// Gets and scans.
    pub reads: Counter,
    /// Puts and deletes.
    pub writes: Counter,
    /// Bytes of the objects puts and deletes wrote (the write rate the compaction thread
    /// measures, `background.rs`).
    pub written_bytes: Counter,
    /// Gets answered from the fast tier.
    pub fast_reads: Counter,
    /// Gets answered from flash.
    pub flash_reads: Counter,
    /// Gets answered by a promoted copy on the fast tier (reads promotions took off
    /// flash: what the read trigger's monitoring measures, `background.rs`).
    pub promoted_reads: Counter,
    /// `reads` and `writes` when the last write-triggered compaction was planned: the
    /// window whose read share decides whether it promotes (`compaction.rs`).
    pub promotion_mark: parking_lot::Mutex<(u64, u64)>,
}

impl PartCounters {
    /// The share of reads among the operations since the last call (1 when there were
    /// none), and a new window from now.
    pub fn read_share_since_mark(&self) -> f64 {
        let reads = self.reads.get();
        let writes = self.writes.get();
        let mut mark = self.promotion_mark.lock();
        let (r, w) = (reads.saturating_sub(mark.0), writes.saturating_sub(mark.1));
        *mark = (reads, writes);
        if r + w == 0 {
            1.0
        } else {
            r as f64 / (r + w) as f64
        }
    }
}

/// One partition.
#[derive(Debug)]
pub struct Partition {
    /// Its number.
    pub id: usize,
    /// First key.
    pub lo: Vec<u8>,
    /// Exclusive end (`None`: the last partition).
    pub hi: Option<Vec<u8>>,
    /// Index, slabs, tables.
    pub state: RwLock<State>,
    /// Popularity.
    pub tracker: Mutex<Tracker>,
    /// approx-MSC counters.
    pub buckets: Mutex<Buckets>,
    /// Writers waiting for space in this partition.
    pub pressure: AtomicU64,
    /// The last compaction error, if the last compaction failed.
    pub last_error: Mutex<Option<String>>,
    /// Operation counters.
    pub counters: PartCounters,
    /// Hot objects gets met on flash (what promotions copy, `hot.rs`).
    pub hot: Mutex<HotNotes>,
    /// Free flash bytes the last compaction that found no room needed (0: none): until
    /// flash has that much, write-triggered compactions drop tombstones first.
    pub room_needed: AtomicU64,
}

/// How long a write waits for compactions to free room on a full fast tier.
pub(crate) const SPACE_WAIT: Duration = Duration::from_secs(30);

/// A writer waiting for space in a partition (counted in its `pressure` while it lives).
pub(crate) struct Pressure<'a>(&'a AtomicU64);

impl<'a> Pressure<'a> {
    pub(crate) fn raise(p: &'a AtomicU64) -> Pressure<'a> {
        p.fetch_add(1, Ordering::AcqRel);
        Pressure(p)
    }
}

impl Drop for Pressure<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

thread_local! {
    /// The object a put encodes before writing it to its slot (reused: no allocation and
    /// no zeroing per put).
    static ENCODED: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Where [`Partition::lookup_locked`] found a key.
pub enum Lookup {
    /// On the fast tier (`None`: a tombstone).
    Pmem(Option<Vec<u8>>),
    /// Not on the fast tier: the tables to read it from (a snapshot).
    Flash(Arc<TableSet>),
}

/// What a slot read found.
enum Found {
    Value(Vec<u8>),
    Tombstone,
}

/// Counts a get answered by a flash table: from DRAM when its block was cached, else
/// from flash.
pub(crate) fn count_table_read(sh: &Shared, src: Source) {
    match src {
        Source::Cache => sh.counters.ops.reads_from_dram.incr(),
        Source::Device => sh.counters.ops.reads_from_flash.incr(),
    }
}

impl Partition {
    /// An empty partition.
    pub fn new(
        id: usize,
        lo: Vec<u8>,
        hi: Option<Vec<u8>>,
        slabs: Slabs,
        tracker_cap: usize,
        hot_cap: usize,
        promote_reads: u32,
    ) -> Partition {
        Partition {
            id,
            lo,
            hi,
            state: RwLock::new(State {
                index: BTreeMap::new(),
                slabs,
                ts: 0,
                tables: Arc::new(TableSet::default()),
                compacting: None,
                manifest_seq: 1,
                next_table: 1,
                batch_keys: HashMap::new(),
            }),
            tracker: Mutex::new(Tracker::new(tracker_cap)),
            buckets: Mutex::new(Buckets::new(0.0, 1.0, 1)),
            pressure: AtomicU64::new(0),
            last_error: Mutex::new(None),
            counters: PartCounters::default(),
            hot: Mutex::new(HotNotes::new(hot_cap, promote_reads)),
            room_needed: AtomicU64::new(0),
        }
    }

    /// How full the fast tier is for this partition's writes, as a fraction of its share
    /// (`capacity / partitions`): one minus the room a put here can take without a
    /// compaction — the free slots of its own slabs (no other partition can use them) and
    /// its share of the chunks no partition holds yet — or the pool-wide ratio if that is
    /// higher (for a partition that holds slab chunks). The watermarks (§4.2) apply to it:
    /// with the pool-wide ratio, free slots stranded in one partition hid that another
    /// had no room left, and its writers waited for space below the low watermark.
    pub fn fullness_of(slabs: &Slabs, sh: &Shared) -> f64 {
        let parts = sh.parts.len().max(1) as f64;
        let share = sh.usage.capacity.max(1) as f64 / parts;
        let room = slabs.free_slot_bytes() as f64 + sh.usage.free_chunk_bytes() as f64 / parts;
        // Never below the pool-wide ratio: when one partition holds most of the pool, its
        // share understates its room and it would stop draining after a sliver. Not for a
        // partition with no slab chunk: it has nothing to demote, and its thread would run
        // a compaction that finds no candidate at every wake-up (every put above the high
        // watermark wakes them all).
        let floor = if slabs.holds_chunks() {
            sh.usage.ratio()
        } else {
            0.0
        };
        (1.0 - room / share).max(floor).clamp(0.0, 1.0)
    }

    /// [`Partition::fullness_of`] this partition's slabs.
    pub fn fullness(&self, sh: &Shared) -> f64 {
        Partition::fullness_of(&self.state.read().slabs, sh)
    }

    fn read_slot(&self, sh: &Shared, key: &[u8], loc: &Loc, st: &State) -> Result<Found> {
        let size = st.slabs.slot_size(loc.class) as usize;
        let bytes = sh.pool.read(loc.off, size)?;
        match decode_object(bytes) {
            Some(o) if o.ts == loc.ts && o.key == key => Ok(match o.value {
                Some(v) => Found::Value(v.to_vec()),
                None => Found::Tombstone,
            }),
            _ => Err(Error::corruption(
                Tier::Pmem,
                loc.off,
                "indexed object does not check",
            )),
        }
    }

    /// What `key` holds as of `st` (a lock on this partition's state the caller holds):
    /// its fast-tier object, read now, or the table set to look it up in afterwards.
    pub fn lookup_locked(&self, sh: &Shared, key: &[u8], st: &State) -> Result<Lookup> {
        Ok(match st.index.get(key) {
            Some(loc) => Lookup::Pmem(match self.read_slot(sh, key, loc, st)? {
                Found::Value(v) => Some(v),
                Found::Tombstone => None,
            }),
            None => Lookup::Flash(st.tables.clone()),
        })
    }

    /// The value of `key`.
    pub fn get(&self, sh: &Shared, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.counters.reads.incr();
        let st = self.state.read();
        let tables = if let Some(loc) = st.index.get(key) {
            let found = self.read_slot(sh, key, loc, &st)?;
            let promoted = loc.promoted;
            drop(st);
            sh.counters.ops.reads_from_pmem.incr();
            self.counters.fast_reads.incr();
            if promoted {
                self.counters.promoted_reads.incr();
            }
            self.touch(key);
            return Ok(match found {
                Found::Value(v) => {
                    sh.counters.ops.user_bytes_read.add(v.len() as u64);
                    Some(v)
                }
                Found::Tombstone => None,
            });
        } else {
            st.tables.clone()
        };
        drop(st);
        let v = tables.get_traced(key, &sh.cache)?;
        let pinned = self.touch_pinned(sh, key);
        if let Some((v, src)) = &v {
            count_table_read(sh, *src);
            sh.counters.ops.user_bytes_read.add(v.len() as u64);
            self.counters.flash_reads.incr();
            if pinned
                && sh.opts.promotions
                && let Some(t) = tables.find(key)
            {
                self.hot.lock().note(key, t.number, v);
            }
        }
        Ok(v.map(|(v, _)| v))
    }

    /// [`Partition::touch`], and whether the mapper pins the key now (it was tracked
    /// before this access, so its clock is at the top, and the pinning probabilities of the
    /// tracker's histogram keep that value on the fast tier).
    fn touch_pinned(&self, sh: &Shared, key: &[u8]) -> bool {
        let (t, pinned) = {
            let mut tracker = self.tracker.lock();
            let t = tracker.touch(key);
            let pinned = !t.inserted
                && is_pinned(
                    &pin_probabilities(tracker.histogram(), sh.opts.pin_threshold),
                    tracker.clock(key),
                    pin_draw(key),
                );
            (t, pinned)
        };
        self.after_touch(key, t);
        pinned
    }

    /// Records an access in the tracker and keeps the popular flags and counts in step: a
    /// key becomes popular when its clock is raised from 0 (a first access only enters it
    /// at 0, which the mapper never pins: counting those made every freshly loaded range
    /// look popular, and approx-MSC chose at random), and stops being popular when evicted.
    pub fn touch(&self, key: &[u8]) {
        let t = self.tracker.lock().touch(key);
        self.after_touch(key, t);
    }

    /// The popular flags and counts after the tracker's `touch` of `key` returned `t`.
    fn after_touch(&self, key: &[u8], t: Touch) {
        if !t.raised && t.evicted.is_none() {
            return;
        }
        let st = self.state.read();
        let mut buckets = self.buckets.lock();
        if t.raised
            && let Some(loc) = st.index.get(key)
            && !loc.popular.swap(true, Ordering::Relaxed)
            && let Some(b) = buckets.at(key)
        {
            b.pop += 1.0;
        }
        if let Some(ev) = t.evicted
            && let Some(loc) = st.index.get(ev.as_slice())
            && loc.popular.swap(false, Ordering::Relaxed)
            && let Some(b) = buckets.at(&ev)
        {
            b.pop -= 1.0;
        }
    }

    /// Stores `value` under `key` (`None`: delete).
    pub fn write(&self, sh: &Shared, key: &[u8], value: Option<&[u8]>) -> Result<()> {
        self.counters.writes.incr();
        sh.check_writable()?;
        if value.is_none() {
            sh.crash_point("prismdb.delete.accepted");
        }
        let len = object_len(key.len(), value.map_or(0, <[u8]>::len));
        self.counters.written_bytes.add(len as u64);
        let (off, ts, class) = match self.reserve(sh, key, value.is_none(), len)? {
            Some(r) => r,
            None => return Ok(()),
        };
        if value.is_some() {
            // The access is recorded before the object is published, so that publish takes
            // its popular flag from it (one tracker search per put, not two); the flags
            // and counts that depend on the index follow the publish.
            let t = self.tracker.lock().touch(key);
            let popular = Some(!t.inserted);
            let r = self.persist_and_publish(sh, key, value, (off, ts, class), false, popular);
            self.after_touch(key, t);
            r?;
        } else {
            self.persist_and_publish(sh, key, value, (off, ts, class), false, None)?;
        }
        Ok(())
    }

    /// Writes the object into its reserved slot, persists it (no lock held), then publishes
    /// it (FORMAT.md §3 "Put", steps 2 and 3); true if published. `popular`: the key's
    /// popular flag if the caller knows it (else the tracker is asked).
    pub fn persist_and_publish(
        &self,
        sh: &Shared,
        key: &[u8],
        value: Option<&[u8]>,
        slot: (u64, u64, u8),
        only_if_absent: bool,
        popular: Option<bool>,
    ) -> Result<bool> {
        let (off, ts, class) = slot;
        let write = |enc: &mut Vec<u8>| {
            encode_object_into(enc, ts, key, value);
            sh.pool
                .write(off, enc)
                .and_then(|()| sh.pool.persist(off, enc.len()))
        };
        // A write nested in another on this thread (a crash-point handler's) gets a fresh
        // buffer.
        let written = ENCODED.with(|cell| match cell.try_borrow_mut() {
            Ok(mut enc) => write(&mut enc),
            Err(_) => write(&mut Vec::new()),
        });
        let kind = match (only_if_absent, value.is_some()) {
            (true, _) => [
                "prismdb.promotion.object_persisted",
                "prismdb.promotion.published",
            ],
            (false, true) => ["prismdb.put.object_persisted", "prismdb.put.published"],
            (false, false) => [
                "prismdb.delete.tombstone_persisted",
                "prismdb.delete.tombstone_published",
            ],
        };
        if written.is_ok() {
            sh.crash_point(kind[0]);
        }
        let mut st = self.state.write();
        if let Err(e) = written {
            let _ = st.slabs.free(off, class);
            return Err(e);
        }
        // A batch that took its timestamp before this write and has not committed yet
        // comes first: this write is published after it (FORMAT.md §3 "Write batches").
        while st
            .batch_keys
            .get(key)
            .is_some_and(|b| b.iter().any(|&bts| bts < ts))
        {
            let seen = sh.batches_seen();
            drop(st);
            sh.wait_for_batches(seen);
            st = self.state.write();
        }
        let published = self.publish(
            &mut st,
            key,
            off,
            ts,
            class,
            value.is_none(),
            only_if_absent,
            popular,
        )?;
        drop(st);
        sh.crash_point(kind[1]);
        Ok(published)
    }

    /// Takes a timestamp and a slot for a write of `len` bytes (waiting for compactions
    /// when the fast tier is full); `None` when a delete needs no tombstone.
    fn reserve(
        &self,
        sh: &Shared,
        key: &[u8],
        delete: bool,
        len: usize,
    ) -> Result<Option<(u64, u64, u8)>> {
        if sh.usage.ratio() >= sh.opts.high_watermark {
            sh.counters.throttled_writes.incr();
            sh.wake_compactors();
            std::thread::sleep(Duration::from_micros(20));
        }
        let mut waiting: Option<(Instant, Pressure<'_>)> = None;
        loop {
            let epoch = sh.space_epoch();
            let mut st = self.state.write();
            let class = st.slabs.class_for(len).ok_or_else(|| {
                Error::invalid(format!(
                    "prismdb: object of {len} bytes is larger than the largest slot"
                ))
            })?;
            if delete && !st.tables.may_contain(key) && !st.in_compaction(key) {
                // IMPORTANT: checked again under the lock. A compaction that failed at its
                // commit may have left its manifest on flash (listing this key's version)
                // without installing its tables here; it poisons the store before it lets
                // go of its range, so a delete that passed the check in `write` before the
                // poison and comes here after the range was let go sees it now (FORMAT.md
                // §3 "Delete"). Without a tombstone, that version would come back at the
                // next open.
                sh.check_writable()?;
                // Nothing on flash can resurface: drop the fast-tier version, if any.
                if let Some(loc) = st.index.remove(key) {
                    st.slabs.free(loc.off, loc.class)?;
                    self.unaccount(key, &loc);
                    drop(st);
                    sh.crash_point("prismdb.delete.slot_freed");
                }
                return Ok(None);
            }
            let purpose = if delete {
                crate::slab::Purpose::Delete
            } else {
                crate::slab::Purpose::Put
            };
            match st.slabs.alloc_for(class, purpose) {
                Ok(off) => {
                    st.ts += 1;
                    return Ok(Some((off, st.ts, class)));
                }
                Err(Error::NoSpace { .. }) => {
                    drop(st);
                    let deadline = waiting
                        .get_or_insert_with(|| {
                            sh.counters.space_waits.incr();
                            *self.last_error.lock() = None;
                            (Instant::now() + SPACE_WAIT, Pressure::raise(&self.pressure))
                        })
                        .0;
                    sh.check_writable()?;
                    if let Some(e) = self.last_error.lock().clone() {
                        return Err(Error::no_space(
                            Tier::Pmem,
                            format!("fast tier full and compaction failed: {e}"),
                        ));
                    }
                    if Instant::now() >= deadline {
                        return Err(Error::no_space(
                            Tier::Pmem,
                            format!("fast tier full: no compaction freed room in {SPACE_WAIT:?}"),
                        ));
                    }
                    sh.wake_compactors();
                    sh.wait_for_space(epoch, Duration::from_millis(25));
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Publishes the object at `off` for `key` unless a newer one (or, with
    /// `only_if_absent`, any) is indexed; frees whichever slot lost. True if published.
    #[allow(clippy::too_many_arguments, reason = "one call per write path")]
    pub fn publish(
        &self,
        st: &mut State,
        key: &[u8],
        off: u64,
        ts: u64,
        class: u8,
        tomb: bool,
        only_if_absent: bool,
        popular: Option<bool>,
    ) -> Result<bool> {
        let on_flash = st.tables.may_contain(key);
        let popular =
            popular.unwrap_or_else(|| self.tracker.lock().clock(key).is_some_and(|c| c > 0));
        let loc = Loc {
            off,
            ts,
            class,
            tomb,
            on_flash,
            popular: AtomicBool::new(popular),
            promoted: only_if_absent,
        };
        // One search of the index: the entry is taken, then kept or replaced.
        match st.index.entry(dram_key(key)) {
            Entry::Occupied(mut e) => {
                // NOTE: a promoted copy is the flash value, older than any write in flight
                // even when its timestamp is higher (it took one after them): such a write
                // replaces it.
                let old = e.get();
                if only_if_absent || (old.ts > ts && !old.promoted) {
                    st.slabs.free(off, class)?;
                    return Ok(false);
                }
                self.account(key, &loc);
                let old = e.insert(loc);
                self.unaccount(key, &old);
                // IMPORTANT: after the new object is durable and published.
                st.slabs.free(old.off, old.class)?;
            }
            Entry::Vacant(e) => {
                self.account(key, &loc);
                e.insert(loc);
            }
        }
        Ok(true)
    }

    fn account(&self, key: &[u8], loc: &Loc) {
        if let Some(b) = self.buckets.lock().at(key) {
            b.nvm += 1.0;
            b.overlap += f64::from(u8::from(loc.on_flash));
            b.pop += f64::from(u8::from(loc.popular.load(Ordering::Relaxed)));
        }
    }

    /// Removes a dropped index entry from the bucket counters.
    pub fn unaccount(&self, key: &[u8], loc: &Loc) {
        if let Some(b) = self.buckets.lock().at(key) {
            b.nvm -= 1.0;
            b.overlap -= f64::from(u8::from(loc.on_flash));
            b.pop -= f64::from(u8::from(loc.popular.load(Ordering::Relaxed)));
        }
    }

    /// Rebuilds the buckets from the index (after a compaction or recovery), with about
    /// `bucket_keys` keys per bucket.
    ///
    /// The caller holds the state lock, a read lock at least: no write publishes meanwhile.
    /// The buckets' lock is held throughout, so that a concurrent [`Partition::touch`]
    /// changes a popular flag and its count either before the rebuild reads the flag or
    /// after it, in the new buckets.
    pub fn rebuild_buckets(&self, st: &State, bucket_keys: usize) {
        let mut current = self.buckets.lock();
        let keys = st.index.len() + usize::try_from(st.tables.entries()).unwrap_or(usize::MAX);
        let n = (keys / bucket_keys.max(1))
            .max(4 * (st.tables.tables.len() + 1))
            .clamp(1, 4096);
        let first = st.index.keys().next().map(DramKey::as_slice);
        let last = st.index.keys().next_back().map(DramKey::as_slice);
        let t = &st.tables.tables;
        let lo = [first, t.first().map(|x| x.min_key())]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or_default();
        let hi = [last, t.last().map(|x| x.max_key())]
            .into_iter()
            .flatten()
            .max()
            .unwrap_or_default();
        let skip = common_prefix(lo, hi);
        let mut pos: Vec<f64> = st.index.keys().map(|k| key_pos(k, skip)).collect();
        pos.extend(
            t.iter()
                .flat_map(|x| [key_pos(x.min_key(), skip), key_pos(x.max_key(), skip)]),
        );
        pos.sort_by(f64::total_cmp);
        let prefix = lo.get(..skip).unwrap_or_default();
        let mut b = Buckets::from_positions(prefix, &pos, (pos.len() / n).max(1));
        // Candidate ranges start at the tables' first keys (`compaction::candidates`).
        let cuts: Vec<f64> = t.iter().map(|x| b.pos(x.min_key())).collect();
        b.cut_at(cuts);
        for (k, loc) in &st.index {
            if let Some(x) = b.at(k) {
                x.nvm += 1.0;
                x.overlap += f64::from(u8::from(loc.on_flash));
                x.pop += f64::from(u8::from(loc.popular.load(Ordering::Relaxed)));
            }
        }
        *current = b;
    }

    /// Up to `limit` pairs with keys `>= start` in this partition.
    pub fn scan(&self, sh: &Shared, start: &[u8], limit: usize) -> Result<Vec<KvPair>> {
        self.counters.reads.incr();
        let st = self.state.read();
        let mut mem: Vec<(Vec<u8>, Option<Vec<u8>>)> = Vec::new();
        let mut live = 0;
        for (k, loc) in range_from(&st.index, start) {
            match self.read_slot(sh, k, loc, &st)? {
                Found::Value(v) => {
                    mem.push((k.to_vec(), Some(v)));
                    live += 1;
                }
                Found::Tombstone => mem.push((k.to_vec(), None)),
            }
            if live >= limit {
                break;
            }
        }
        let cut = if live >= limit {
            mem.last().map(|e| e.0.clone())
        } else {
            None
        };
        let tables = st.tables.clone();
        drop(st);
        let mut out = Vec::with_capacity(limit.min(1024));
        // The scan takes at most `limit` entries from flash: that sizes the table reads.
        let mut flash = tables.iter_from(start, &sh.cache, limit).peekable();
        let mut mem = mem.into_iter().peekable();
        while out.len() < limit {
            let take_flash = match (mem.peek(), flash.peek()) {
                (None, None) => break,
                (Some(_), None) => false,
                (None, Some(_)) => true,
                (Some(m), Some(Ok(f))) => f.0 < m.0,
                (Some(_), Some(Err(_))) => true,
            };
            if take_flash {
                let (k, v) = match flash.next() {
                    Some(r) => r?,
                    None => break,
                };
                if cut.as_ref().is_some_and(|c| &k > c) {
                    break;
                }
                out.push((k, v));
            } else if let Some((k, v)) = mem.next() {
                if flash
                    .peek()
                    .is_some_and(|f| f.as_ref().is_ok_and(|f| f.0 == k))
                {
                    flash.next();
                }
                if let Some(v) = v {
                    out.push((k, v));
                }
            }
        }
        Ok(out)
    }
}
