//! HSIT, the Heterogeneous Storage Index Table (PRISM §4.5, §5.4; spec: `FORMAT.md` § HSIT).
//!
//! An array of 16-byte entries on pmem ([`entry`]), one per key, reached from the Persistent
//! Key Index by *slot* number. Word 0 is the forward pointer to the key's current value (in
//! a PWB or in Value Storage) with the dirty bit of flush-on-read; word 1 is the key tag.
//! The array grows in *segments*, each one allocator chunk (tag [`HSIT_CHUNK_TAG`]), listed
//! in a persistent directory of segment offsets. Beside it live two DRAM structures: the
//! cache pointers into the SVC ([`cache_ptr`]) and the free list ([`free_list`]).
//!
//! # Invariants
//! 1. Every forward pointer that is persisted leads to a value that was persisted (with a
//!    backward pointer to this slot) *before* the pointer was stored — so a persisted
//!    pointer is always well-coupled (§5.5).
//! 2. A pointer stored by a user write carries the dirty bit until it is persisted; anyone
//!    who reads a dirty pointer persists it before using it ([`Hsit::load_persisted`]), so
//!    no thread acts on a value a crash could take back (durable linearizability, §5.4).
//! 3. A slot is handed out again only after two epochs have passed since its key left the
//!    key index ([`Hsit::retire_slot`]), so a thread that found it through the index never
//!    sees it reused.
//! 4. The directory is a prefix: segment `i` is recorded only after segments `0..i`; a
//!    segment is zeroed and persisted before it is recorded. A chunk allocated for a segment
//!    but never recorded (crash in between) is freed at open (allocator leak contract).
//!
//! Thread safety: all methods take `&self`; entry updates are lock-free CAS; growth takes a
//! mutex.

pub mod cache_ptr;
pub mod entry;
pub mod epoch;
pub mod free_list;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use crossbeam_epoch::Guard;
use parking_lot::Mutex;
use tierkv_core::media::pmem::{PmemAllocator, PmemPool};
use tierkv_core::{Error, Result, Tier};

use crate::superblock::{HSIT_ENTRY_LEN, REGION_ALIGN, Superblock};
use cache_ptr::CachePointers;
use entry::{ForwardPointer, Location, Relocation};
use free_list::FreeList;

/// Allocator tag of HSIT segment chunks ("HSIT").
pub const HSIT_CHUNK_TAG: u32 = u32::from_le_bytes(*b"HSIT");
/// Offset of the key tag within an entry.
const TAG_WORD: u64 = 8;

/// The table (see the module doc). `V` is the SVC's cached-value handle.
pub struct Hsit<V> {
    pool: Arc<PmemPool>,
    alloc: Arc<PmemAllocator>,
    dir_off: u64,
    seg_entries: u64,
    /// DRAM mirror of the persistent directory: segment offsets, set once each.
    segments: Box<[OnceLock<u64>]>,
    seg_count: AtomicUsize,
    grow_lock: Mutex<()>,
    free: Arc<FreeList>,
    cache: CachePointers<V>,
}

impl<V> std::fmt::Debug for Hsit<V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hsit")
            .field("segments", &self.seg_count.load(Ordering::Relaxed))
            .field("seg_entries", &self.seg_entries)
            .finish_non_exhaustive()
    }
}

impl<V: Clone + Send + Sync + 'static> Hsit<V> {
    fn new(pool: Arc<PmemPool>, alloc: Arc<PmemAllocator>, sb: &Superblock) -> Self {
        let cap = sb.hsit_dir_cap as usize;
        Hsit {
            pool,
            alloc,
            dir_off: sb.hsit_dir_off,
            seg_entries: u64::from(sb.hsit_seg_entries),
            segments: (0..cap).map(|_| OnceLock::new()).collect(),
            seg_count: AtomicUsize::new(0),
            grow_lock: Mutex::new(()),
            free: Arc::new(FreeList::default()),
            cache: CachePointers::new(cap, u64::from(sb.hsit_seg_entries)),
        }
    }

    /// An empty table in a freshly formatted pool (zeroes and persists the directory).
    pub fn create(pool: Arc<PmemPool>, alloc: Arc<PmemAllocator>, sb: &Superblock) -> Result<Self> {
        let len = (u64::from(sb.hsit_dir_cap) * 8).next_multiple_of(REGION_ALIGN);
        let len = usize::try_from(len).map_err(|_| Error::invalid("HSIT directory too large"))?;
        pool.fill(sb.hsit_dir_off, len, 0)?;
        pool.persist(sb.hsit_dir_off, len)?;
        Ok(Self::new(pool, alloc, sb))
    }

    /// Opens the table: reads the directory, frees segment chunks a crash left unrecorded.
    /// The free list stays empty until [`Hsit::rebuild_free_list`] (recovery).
    pub fn open(pool: Arc<PmemPool>, alloc: Arc<PmemAllocator>, sb: &Superblock) -> Result<Self> {
        if alloc.chunk_size() != u64::from(sb.hsit_seg_entries) * HSIT_ENTRY_LEN {
            return Err(Error::corruption(
                Tier::Pmem,
                sb.hsit_dir_off,
                format!(
                    "HSIT segments of {} entries do not match allocator chunks of {} bytes",
                    sb.hsit_seg_entries,
                    alloc.chunk_size()
                ),
            ));
        }
        let h = Self::new(pool, alloc, sb);
        let tagged: std::collections::BTreeSet<u64> = h
            .alloc
            .iter_chunks(HSIT_CHUNK_TAG)
            .map(|a| a.offset)
            .collect();
        let mut ended = false;
        for i in 0..h.segments.len() {
            let at = h.dir_off + i as u64 * 8;
            let off = h.pool.load_u64(at)?;
            if off == 0 {
                ended = true;
                continue;
            }
            if ended || !tagged.contains(&off) {
                return Err(Error::corruption(
                    Tier::Pmem,
                    at,
                    format!(
                        "HSIT directory word {i} = {off:#x} is not an HSIT segment (or follows \
                         an empty word)"
                    ),
                ));
            }
            h.install_segment(i, off);
        }
        let recorded: std::collections::BTreeSet<u64> =
            h.segments.iter().filter_map(|s| s.get().copied()).collect();
        for leaked in tagged.difference(&recorded) {
            h.alloc.free_chunk(*leaked)?;
        }
        Ok(h)
    }

    fn install_segment(&self, i: usize, off: u64) {
        if let Some(cell) = self.segments.get(i) {
            let _ = cell.set(off);
            self.cache.add_segment(i);
            self.seg_count.fetch_max(i + 1, Ordering::AcqRel);
        }
    }

    /// Slots in the segments allocated so far.
    pub fn capacity(&self) -> u64 {
        self.seg_count.load(Ordering::Acquire) as u64 * self.seg_entries
    }

    /// Entries per segment.
    pub fn seg_entries(&self) -> u64 {
        self.seg_entries
    }

    /// The pool offset of `slot`'s entry, or `Corruption` for a slot no segment holds
    /// (slot numbers come from the key index and from backward pointers on media).
    pub fn entry_off(&self, slot: u64) -> Result<u64> {
        usize::try_from(slot / self.seg_entries)
            .ok()
            .and_then(|seg| self.segments.get(seg))
            .and_then(OnceLock::get)
            .map(|base| base + (slot % self.seg_entries) * HSIT_ENTRY_LEN)
            .ok_or_else(|| {
                Error::corruption(
                    Tier::Pmem,
                    self.dir_off,
                    format!("HSIT slot {slot} is beyond the table"),
                )
            })
    }

    /// True when `slot` lies in an allocated segment.
    pub fn contains(&self, slot: u64) -> bool {
        slot < self.capacity()
    }

    /// Adds one segment (if no other thread did meanwhile).
    fn grow(&self, seen_capacity: u64) -> Result<()> {
        let _g = self.grow_lock.lock();
        if self.capacity() != seen_capacity {
            return Ok(());
        }
        let i = self.seg_count.load(Ordering::Acquire);
        if i >= self.segments.len() {
            return Err(Error::no_space(Tier::Pmem, "the HSIT directory is full"));
        }
        let off = self.alloc.alloc_chunk(HSIT_CHUNK_TAG)?;
        let len = usize::try_from(self.seg_entries * HSIT_ENTRY_LEN)
            .map_err(|_| Error::invalid("HSIT segment too large"))?;
        // IMPORTANT: zeroed and persisted before the directory records it (invariant 4).
        self.pool.fill(off, len, 0)?;
        self.pool.persist(off, len)?;
        let at = self.dir_off + i as u64 * 8;
        self.pool.store_u64(at, off)?;
        self.pool.persist(at, 8)?;
        self.install_segment(i, off);
        Ok(())
    }

    /// A free slot, growing the table when none is left.
    pub fn alloc_slot(&self) -> Result<u64> {
        loop {
            let cap = self.capacity();
            if let Some(s) = self.free.pop(cap) {
                return Ok(s);
            }
            self.grow(cap)?;
        }
    }

    /// Makes sure `n` slots can be handed out without growing the table (a write batch
    /// reserves the slots of its new keys before its commit point; nothing else takes
    /// slots meanwhile, as the batch excludes other writes). Grows the table as needed;
    /// `NoSpace` when it cannot.
    pub fn reserve_slots(&self, n: u64) -> Result<()> {
        loop {
            let cap = self.capacity();
            let (high_water, stacked) = self.usage();
            if stacked as u64 + cap.saturating_sub(high_water) >= n {
                return Ok(());
            }
            self.grow(cap)?;
        }
    }

    /// Returns a slot that was never reachable from the key index (no epoch needed).
    pub fn free_slot_now(&self, slot: u64) {
        self.free.push(slot);
    }

    /// Returns a slot whose key has left the key index, after two epochs (invariant 3).
    pub fn retire_slot(&self, slot: u64, guard: &Guard) {
        let free = self.free.clone();
        guard.defer(move || free.push(slot));
    }

    /// Replaces the free list (recovery, §5.5): `high_water` is one past the highest slot
    /// in use, `free` every slot below it that no key reaches.
    pub fn rebuild_free_list(&self, high_water: u64, free: Vec<u64>) {
        self.free.reset(high_water, free);
    }

    /// Slots handed out at least once, and slots waiting in the free stack.
    pub fn usage(&self) -> (u64, usize) {
        (self.free.high_water(), self.free.stacked())
    }

    /// Loads `slot`'s forward pointer as it is (possibly dirty).
    pub fn load(&self, slot: u64) -> Result<ForwardPointer> {
        Ok(ForwardPointer::from_raw(
            self.pool.load_u64(self.entry_off(slot)?)?,
        ))
    }

    /// Loads `slot`'s forward pointer; if it is dirty, persists it on the writer's behalf
    /// and clears the bit first (flush-on-read, §5.4). The result is never dirty.
    pub fn load_persisted(&self, slot: u64) -> Result<ForwardPointer> {
        let off = self.entry_off(slot)?;
        let fp = ForwardPointer::from_raw(self.pool.load_u64(off)?);
        if fp.is_dirty() {
            self.pool.persist(off, HSIT_ENTRY_LEN as usize)?;
            // Losing this CAS is fine: the writer (or another reader) cleared it, or a
            // later writer replaced it after persisting it.
            let _ = self.pool.cas_u64(off, fp.raw(), fp.clean().raw())?;
        }
        Ok(fp.clean())
    }

    /// A user write's pointer update (§5.4): CAS `expected` -> `new` with the dirty bit,
    /// persist, clear the bit. `Ok(Err(actual))` when the entry no longer held `expected`.
    pub fn publish(
        &self,
        slot: u64,
        expected: ForwardPointer,
        new: Location,
    ) -> Result<std::result::Result<(), ForwardPointer>> {
        let off = self.entry_off(slot)?;
        let new = pointer(new, off)?;
        if let Err(actual) = self.pool.cas_u64(off, expected.raw(), new.dirty().raw())? {
            return Ok(Err(ForwardPointer::from_raw(actual)));
        }
        crate::faults::fail_at(crate::faults::Point::HsitPublishPersist)?;
        self.pool.persist(off, HSIT_ENTRY_LEN as usize)?;
        let _ = self.pool.cas_u64(off, new.dirty().raw(), new.raw())?;
        Ok(Ok(()))
    }

    /// A background move of an unchanged value (PWB reclamation, GC): CAS `expected` ->
    /// `new` without the dirty bit (readers of either location get the same value), then
    /// persist. [`Relocation::Lost`] when the entry no longer held `expected` (the key was
    /// written or deleted meanwhile); [`Relocation::Unpersisted`] when the CAS won but the
    /// persist failed. `Err` only when the entry was left unchanged.
    pub fn relocate(&self, slot: u64, expected: Location, new: Location) -> Result<Relocation> {
        let off = self.entry_off(slot)?;
        let old = pointer(expected, off)?;
        let new = pointer(new, off)?;
        crate::faults::fail_at(crate::faults::Point::HsitRelocateCas)?;
        if self.pool.cas_u64(off, old.raw(), new.raw())?.is_err() {
            return Ok(Relocation::Lost);
        }
        let persisted = crate::faults::fail_at(crate::faults::Point::HsitRelocatePersist)
            .and_then(|()| self.pool.persist(off, HSIT_ENTRY_LEN as usize));
        Ok(match persisted {
            Ok(()) => Relocation::Moved,
            Err(e) => Relocation::Unpersisted(e),
        })
    }

    /// Gives a fresh slot to a key: key tag and pointer stored and persisted. The slot is
    /// not reachable yet (the caller inserts it into the key index next).
    pub fn init_slot(&self, slot: u64, tag: u64, loc: Location) -> Result<()> {
        let off = self.entry_off(slot)?;
        self.pool.store_u64(off + TAG_WORD, tag)?;
        self.pool.store_u64(off, pointer(loc, off)?.raw())?;
        self.pool.persist(off, HSIT_ENTRY_LEN as usize)
    }

    /// Stores `loc` in a slot no one else can reach (a fresh slot whose index insertion
    /// lost a race), unpersisted.
    pub fn clear_unreachable(&self, slot: u64) -> Result<()> {
        self.pool.store_u64(self.entry_off(slot)?, 0)
    }

    /// Both words of `slot`'s entry (forward pointer, key tag) with one read of the line
    /// (recovery and `check`: no writer runs concurrently with them).
    pub fn load_entry(&self, slot: u64) -> Result<(ForwardPointer, u64)> {
        let off = self.entry_off(slot)?;
        let bytes = self.pool.read(off, HSIT_ENTRY_LEN as usize)?;
        let word = |at: usize| {
            let mut w = [0u8; 8];
            if let Some(b) = bytes.get(at..at + 8) {
                w.copy_from_slice(b);
            }
            u64::from_le_bytes(w)
        };
        Ok((ForwardPointer::from_raw(word(0)), word(TAG_WORD as usize)))
    }

    /// The key tag of `slot`.
    pub fn key_tag(&self, slot: u64) -> Result<u64> {
        self.pool.load_u64(self.entry_off(slot)? + TAG_WORD)
    }

    /// Recovery: clears a dirty bit that reached the media, and persists the entry.
    pub fn clean_dirty(&self, slot: u64, fp: ForwardPointer) -> Result<()> {
        let off = self.entry_off(slot)?;
        self.pool.store_u64(off, fp.clean().raw())?;
        self.pool.persist(off, HSIT_ENTRY_LEN as usize)
    }

    /// The DRAM cache pointers.
    pub fn cache(&self) -> &CachePointers<V> {
        &self.cache
    }

    /// DRAM bytes this table holds (cache-pointer arrays and directory mirror).
    pub fn dram_bytes(&self) -> u64 {
        let segs = self.seg_count.load(Ordering::Relaxed) as u64;
        segs * self.seg_entries * 8 + self.segments.len() as u64 * 16
    }
}

fn pointer(loc: Location, at: u64) -> Result<ForwardPointer> {
    ForwardPointer::to(loc).ok_or_else(|| {
        Error::corruption(
            Tier::Pmem,
            at,
            format!("location {loc:?} does not fit in a forward pointer"),
        )
    })
}

#[cfg(test)]
mod tests;
