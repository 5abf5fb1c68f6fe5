//! Slabs on the fast tier (PrismDB §4.1 "data layout on NVM", §6): per partition and size
//! class, chunks of the pool's allocator cut into fixed-size slots (FORMAT.md §1).
//!
//! This module owns the DRAM side (free slots per chunk, live counts) and the persistent
//! steps of slot life: a new slab is zero-filled and then gets its header; a slot is freed
//! by zeroing its timestamp word and persisting it *before* it goes back on a free list, so
//! a slot is never reused while a stale object in it could still be recovered. A chunk whose
//! slots are all free is returned to the allocator (its slots' timestamps are all zero).
//!
//! Thread safety: [`Slabs`] is owned by one partition and used under its lock; the byte
//! usage counter ([`Usage`]) is shared by all partitions (atomics).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tierkv_core::media::pmem::{PmemAllocator, PmemPool};
use tierkv_core::{Error, Result, Tier};

use crate::format::{CHUNK_HEADER_LEN, SLAB_TAG, encode_chunk_header};

/// Fast-tier usage shared by the partitions: bytes of slots holding live objects, and the
/// slab chunks taken from the allocator (FORMAT.md §3 "Room for deletes").
#[derive(Debug, Default)]
pub struct Usage {
    /// Bytes of occupied slots.
    pub used: AtomicU64,
    /// Bytes the slabs of puts could hold (the allocator's chunks but the reserve for
    /// deletes, headers excluded): the watermarks are fractions of it.
    pub capacity: u64,
    /// Slab chunks held by all partitions.
    pub chunks: AtomicU64,
    /// Chunks of the allocator region.
    pub chunk_limit: u64,
    /// Chunks a put never takes: a partition's first slab of a tombstone's class comes
    /// from them, so that every partition can always record a delete.
    pub reserve_chunks: u64,
    /// Chunks no slab takes beyond `reserve_chunks`: kept for the record runs of write
    /// batches, which need whole chunks that freeing slots never gives back (FORMAT.md §3
    /// "Room for batch records").
    pub record_chunks: u64,
}

impl Usage {
    /// Occupied fraction of the fast tier.
    pub fn ratio(&self) -> f64 {
        self.used.load(Ordering::Relaxed) as f64 / self.capacity.max(1) as f64
    }

    /// Chunks the slabs of puts may hold: all but the reserves for deletes and for batch
    /// records.
    pub fn put_chunks(&self) -> u64 {
        self.chunk_limit
            .saturating_sub(self.reserve_chunks)
            .saturating_sub(self.record_chunks)
    }

    /// Bytes of the chunks no partition holds yet that a put may still take.
    pub fn free_chunk_bytes(&self) -> u64 {
        let put_chunks = self.put_chunks();
        let per_chunk = self.capacity / put_chunks.max(1);
        put_chunks.saturating_sub(self.chunks.load(Ordering::Relaxed)) * per_chunk
    }
}

#[derive(Debug, Default)]
struct ChunkSlots {
    free: Vec<u32>,
    live: u32,
}

#[derive(Debug, Default)]
struct ClassSlabs {
    chunks: BTreeMap<u64, ChunkSlots>,
    with_free: BTreeSet<u64>,
    /// Free slots over all chunks of the class.
    free_slots: u64,
}

/// Free slots of class 0 (the class of every tombstone of a key up to 104 bytes) that
/// only deletes may take, per partition: at least 16, or an eighth of a chunk's slots.
pub fn delete_slots(slots_per_chunk: u32) -> u64 {
    u64::from(slots_per_chunk / 8).max(16)
}

/// What a slot is taken for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Purpose {
    /// A put or a promotion: never the reserve for deletes.
    Put,
    /// A delete's tombstone: may take the reserve.
    Delete,
}

/// One partition's slabs.
#[derive(Debug)]
pub struct Slabs {
    partition: u32,
    classes: Vec<u32>,
    per_class: Vec<ClassSlabs>,
    alloc: Arc<PmemAllocator>,
    usage: Arc<Usage>,
}

impl Slabs {
    /// Empty slabs of `partition` with these slot sizes.
    pub fn new(
        partition: u32,
        classes: Vec<u32>,
        alloc: Arc<PmemAllocator>,
        usage: Arc<Usage>,
    ) -> Slabs {
        let per_class = classes.iter().map(|_| ClassSlabs::default()).collect();
        Slabs {
            partition,
            classes,
            per_class,
            alloc,
            usage,
        }
    }

    fn pool(&self) -> &Arc<PmemPool> {
        self.alloc.pool()
    }

    /// Bytes of the free slots of this partition's slabs (a free slot serves only its
    /// partition and class).
    pub fn free_slot_bytes(&self) -> u64 {
        self.per_class
            .iter()
            .zip(&self.classes)
            .map(|(cs, &size)| cs.free_slots * u64::from(size))
            .sum()
    }

    /// The smallest class whose slots hold `len` bytes.
    pub fn class_for(&self, len: usize) -> Option<u8> {
        self.classes
            .iter()
            .position(|&c| c as usize >= len)
            .and_then(|i| u8::try_from(i).ok())
    }

    /// Slot size of `class`.
    pub fn slot_size(&self, class: u8) -> u32 {
        self.classes.get(usize::from(class)).copied().unwrap_or(0)
    }

    fn slots_per_chunk(&self, class: u8) -> u32 {
        let s = u64::from(self.slot_size(class)).max(1);
        u32::try_from((self.alloc.chunk_size() - CHUNK_HEADER_LEN) / s).unwrap_or(u32::MAX)
    }

    /// The chunk holding pool offset `off`.
    pub fn chunk_of(&self, off: u64) -> u64 {
        let base = self.alloc.layout().chunks_off;
        let cs = self.alloc.chunk_size();
        base + (off.saturating_sub(base) / cs) * cs
    }

    fn slot_off(&self, chunk: u64, class: u8, i: u32) -> u64 {
        chunk + CHUNK_HEADER_LEN + u64::from(i) * u64::from(self.slot_size(class))
    }

    /// Takes a free slot of `class` for a put (a new slab if none); its offset.
    pub fn alloc(&mut self, class: u8) -> Result<u64> {
        self.alloc_for(class, Purpose::Put)
    }

    /// Takes a free slot of `class` (a new slab if none); its offset. The slot counts as
    /// used from now on. A put leaves the last [`delete_slots`] free slots of class 0 and
    /// the last `reserve_chunks` chunks of the allocator to deletes (and `record_chunks` to
    /// batch records); a delete takes any free slot, a new chunk while a put could, and the
    /// first chunk of its class in this partition even from the reserve (FORMAT.md §3
    /// "Room for deletes").
    pub fn alloc_for(&mut self, class: u8, purpose: Purpose) -> Result<u64> {
        let c = usize::from(class);
        let reserved = if class == 0 && purpose == Purpose::Put {
            delete_slots(self.slots_per_chunk(0))
        } else {
            0
        };
        let (free, first) = self
            .per_class
            .get(c)
            .map_or((0, true), |cs| (cs.free_slots, cs.chunks.is_empty()));
        let existing = if free > reserved {
            self.per_class
                .get(c)
                .and_then(|cs| cs.with_free.iter().next().copied())
        } else {
            None
        };
        let chunk = match existing {
            Some(ch) => ch,
            None => self.new_slab(class, purpose == Purpose::Delete && first)?,
        };
        let cs = self
            .per_class
            .get_mut(c)
            .ok_or_else(|| Error::invalid("bad class"))?;
        let slots = cs
            .chunks
            .get_mut(&chunk)
            .ok_or_else(|| Error::invalid("lost chunk"))?;
        let i = slots
            .free
            .pop()
            .ok_or_else(|| Error::invalid("empty free list"))?;
        slots.live += 1;
        if slots.free.is_empty() {
            cs.with_free.remove(&chunk);
        }
        cs.free_slots = cs.free_slots.saturating_sub(1);
        self.usage
            .used
            .fetch_add(u64::from(self.slot_size(class)), Ordering::Relaxed);
        Ok(self.slot_off(chunk, class, i))
    }

    /// Zero-fills a new chunk, then writes its header (FORMAT.md §1 "Slab chunk"). Only
    /// `from_reserve` may take one of the allocator's last `reserve_chunks` chunks; no slab
    /// takes the `record_chunks` kept for batch records.
    fn new_slab(&mut self, class: u8, from_reserve: bool) -> Result<u64> {
        let u = &self.usage;
        let held = u.chunks.fetch_add(1, Ordering::AcqRel) + 1;
        if !from_reserve && held > u.put_chunks() {
            u.chunks.fetch_sub(1, Ordering::AcqRel);
            return Err(Error::no_space(
                Tier::Pmem,
                "prismdb: no free slab chunk beyond the reserves for deletes and batch records",
            ));
        }
        let chunk = match self.alloc.alloc_chunk(SLAB_TAG) {
            Ok(c) => c,
            Err(e) => {
                u.chunks.fetch_sub(1, Ordering::AcqRel);
                return Err(e);
            }
        };
        let pool = self.pool().clone();
        let cs = usize::try_from(self.alloc.chunk_size()).unwrap_or(usize::MAX);
        // IMPORTANT: zero before the header, so no object of an earlier use of the chunk
        // can be read as live once the header makes the chunk a slab.
        let formatted = pool
            .fill(chunk, cs, 0)
            .and_then(|()| pool.persist(chunk, cs))
            .and_then(|()| {
                let h =
                    encode_chunk_header(self.partition, u32::from(class), self.slot_size(class));
                pool.write(chunk, &h)?;
                pool.persist(chunk, h.len())
            });
        if let Err(e) = formatted {
            u.chunks.fetch_sub(1, Ordering::AcqRel);
            return Err(e);
        }
        self.insert_chunk(chunk, class, &[]);
        Ok(chunk)
    }

    /// Registers a slab chunk found at recovery, with its live slot indexes.
    pub fn adopt_chunk(&mut self, chunk: u64, class: u8, live: &[u32]) {
        self.usage.chunks.fetch_add(1, Ordering::AcqRel);
        self.insert_chunk(chunk, class, live);
    }

    fn insert_chunk(&mut self, chunk: u64, class: u8, live: &[u32]) {
        let n = self.slots_per_chunk(class);
        let mut is_live = vec![false; n as usize];
        for &i in live {
            if let Some(x) = is_live.get_mut(i as usize) {
                *x = true;
            }
        }
        let free: Vec<u32> = (0..n)
            .rev()
            .filter(|&i| !is_live.get(i as usize).copied().unwrap_or(true))
            .collect();
        let live_n = n - u32::try_from(free.len()).unwrap_or(n);
        self.usage.used.fetch_add(
            u64::from(live_n) * u64::from(self.slot_size(class)),
            Ordering::Relaxed,
        );
        if let Some(cs) = self.per_class.get_mut(usize::from(class)) {
            if !free.is_empty() {
                cs.with_free.insert(chunk);
            }
            cs.free_slots += free.len() as u64;
            cs.chunks.insert(chunk, ChunkSlots { free, live: live_n });
        }
    }

    /// Frees the slot at `off` of `class`: zero its timestamp, persist, then make it
    /// reusable; an emptied chunk goes back to the allocator.
    pub fn free(&mut self, off: u64, class: u8) -> Result<()> {
        // IMPORTANT: durable before the slot can be reused or the caller goes on.
        self.pool().store_u64(off, 0)?;
        self.pool().persist(off, 8)?;
        self.release_slot(off, class)
    }

    /// Returns a slot whose object is already dead on pmem (never written, or its free is
    /// durable) to the free list.
    pub fn release_slot(&mut self, off: u64, class: u8) -> Result<()> {
        let chunk = self.chunk_of(off);
        let size = self.slot_size(class);
        let i = u32::try_from((off - chunk - CHUNK_HEADER_LEN) / u64::from(size.max(1)))
            .unwrap_or(u32::MAX);
        let cs = self
            .per_class
            .get_mut(usize::from(class))
            .ok_or_else(|| Error::corruption(Tier::Pmem, off, "slot of an unknown class"))?;
        let slots = cs.chunks.get_mut(&chunk).ok_or_else(|| {
            Error::corruption(Tier::Pmem, off, "slot outside this partition's slabs")
        })?;
        slots.free.push(i);
        slots.live = slots.live.saturating_sub(1);
        let chunk_slots = slots.free.len() as u64;
        cs.free_slots += 1;
        self.usage
            .used
            .fetch_sub(u64::from(size), Ordering::Relaxed);
        let empty = slots.live == 0;
        cs.with_free.insert(chunk);
        if empty && cs.chunks.len() > 1 {
            cs.chunks.remove(&chunk);
            cs.with_free.remove(&chunk);
            cs.free_slots = cs.free_slots.saturating_sub(chunk_slots);
            self.alloc.free_chunk(chunk)?;
            self.usage.chunks.fetch_sub(1, Ordering::AcqRel);
        }
        Ok(())
    }

    /// Whether the partition holds any slab chunk (anything a compaction could demote).
    pub fn holds_chunks(&self) -> bool {
        self.per_class.iter().any(|c| !c.chunks.is_empty())
    }

    /// Number of slab chunks and occupied slots, per class.
    pub fn census(&self) -> Vec<(usize, u64)> {
        self.per_class
            .iter()
            .map(|c| {
                (
                    c.chunks.len(),
                    c.chunks.values().map(|s| u64::from(s.live)).sum(),
                )
            })
            .collect()
    }

    /// Releases every chunk that holds no live slot (after recovery).
    pub fn release_empty(&mut self) -> Result<()> {
        for c in 0..self.per_class.len() {
            let empty: Vec<u64> = self
                .per_class
                .get(c)
                .map(|cs| {
                    cs.chunks
                        .iter()
                        .filter(|(_, s)| s.live == 0)
                        .map(|(k, _)| *k)
                        .collect()
                })
                .unwrap_or_default();
            for ch in empty {
                if let Some(cs) = self.per_class.get_mut(c)
                    && let Some(slots) = cs.chunks.remove(&ch)
                {
                    cs.with_free.remove(&ch);
                    cs.free_slots = cs.free_slots.saturating_sub(slots.free.len() as u64);
                }
                self.alloc.free_chunk(ch)?;
                self.usage.chunks.fetch_sub(1, Ordering::AcqRel);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, reason = "tests")]
    use super::*;
    use crate::format::{decode_chunk_header, encode_object};
    use tierkv_core::media::pmem::{DurabilityMode, EmulatedLatency, PmemConfig};

    fn slabs(dir: &std::path::Path) -> (Slabs, Arc<PmemPool>, Arc<Usage>) {
        let cfg = PmemConfig {
            path: dir.join("pool"),
            size: 1 << 20,
            mode: DurabilityMode::Volatile,
            latency: EmulatedLatency::default(),
        };
        let pool = PmemPool::create(&cfg).unwrap();
        let start = pool.data_start();
        let alloc =
            Arc::new(PmemAllocator::format(pool.clone(), start, pool.len() - start, 4096).unwrap());
        let usage = Arc::new(Usage {
            used: AtomicU64::new(0),
            capacity: 1 << 20,
            chunk_limit: alloc.layout().chunk_count,
            ..Usage::default()
        });
        (
            Slabs::new(2, vec![128, 256, 1024], alloc, usage.clone()),
            pool,
            usage,
        )
    }

    #[test]
    fn slots_come_from_zeroed_slabs_of_their_class_and_empty_slabs_are_released() {
        let dir = tempfile::tempdir().unwrap();
        let (mut s, pool, usage) = slabs(dir.path());
        assert_eq!(s.class_for(100), Some(0));
        assert_eq!(s.class_for(129), Some(1));
        assert_eq!(s.class_for(1025), None);
        let per_chunk = (4096 - 64) / 256;
        let offs: Vec<u64> = (0..per_chunk * 2 + 1)
            .map(|_| s.alloc(1).unwrap())
            .collect();
        assert_eq!(usage.used.load(Ordering::Relaxed), offs.len() as u64 * 256);
        let chunks: std::collections::BTreeSet<u64> = offs.iter().map(|&o| s.chunk_of(o)).collect();
        assert_eq!(chunks.len(), 3);
        for &c in &chunks {
            assert_eq!(
                decode_chunk_header(pool.read(c, 64).unwrap()),
                Some((2, 1, 256))
            );
        }
        // A live object, then its free: the timestamp word is zero afterwards.
        let o = encode_object(5, b"k", Some(b"v"));
        pool.write(offs[0], &o).unwrap();
        s.free(offs[0], 1).unwrap();
        assert_eq!(pool.load_u64(offs[0]).unwrap(), 0);
        for &off in &offs[1..] {
            s.free(off, 1).unwrap();
        }
        assert_eq!(usage.used.load(Ordering::Relaxed), 0);
        // Emptied chunks went back to the allocator, all but one of the class.
        assert_eq!(s.census()[1], (1, 0));
        assert_eq!(s.census()[0], (0, 0));
    }

    #[test]
    fn puts_leave_the_slots_and_chunks_reserved_for_deletes() {
        let dir = tempfile::tempdir().unwrap();
        let (s0, _pool, _) = slabs(dir.path());
        let limit = s0.alloc.layout().chunk_count;
        // Puts may hold two chunks; the rest is the reserve.
        let usage = Arc::new(Usage {
            chunk_limit: limit,
            reserve_chunks: limit - 2,
            ..Usage::default()
        });
        let mut s = Slabs::new(2, vec![128, 256, 1024], s0.alloc.clone(), usage.clone());
        let per_chunk = (4096 - 64) / 128;
        let kept = delete_slots(per_chunk);
        let mut puts = 0;
        let refusal = loop {
            match s.alloc_for(0, Purpose::Put) {
                Ok(_) => puts += 1,
                Err(e) => break e,
            }
        };
        assert!(matches!(refusal, Error::NoSpace { .. }), "{refusal:?}");
        assert_eq!(puts, u64::from(2 * per_chunk) - kept);
        assert_eq!(usage.chunks.load(Ordering::Relaxed), 2);
        // Deletes take the kept slots, and no chunk beyond the puts' share.
        for _ in 0..kept {
            s.alloc_for(0, Purpose::Delete).unwrap();
        }
        assert!(s.alloc_for(0, Purpose::Delete).is_err());
        // A put of another class finds no chunk; a delete's first slab of that class
        // comes from the reserve.
        assert!(s.alloc_for(1, Purpose::Put).is_err());
        s.alloc_for(1, Purpose::Delete).unwrap();
        assert_eq!(usage.chunks.load(Ordering::Relaxed), 3);
    }

    #[test]
    fn adopted_chunks_hand_out_only_their_free_slots() {
        let dir = tempfile::tempdir().unwrap();
        let (mut s, _pool, usage) = slabs(dir.path());
        let first = s.alloc(0).unwrap();
        let chunk = s.chunk_of(first);
        let mut t = Slabs::new(2, vec![128, 256, 1024], s.alloc.clone(), usage.clone());
        t.adopt_chunk(chunk, 0, &[0, 2]);
        // One slot of `s` plus the two live ones adopted by `t`.
        assert_eq!(usage.used.load(Ordering::Relaxed), 128 * 3);
        let a = t.alloc(0).unwrap();
        let b = t.alloc(0).unwrap();
        assert_eq!(a, chunk + 64 + 128);
        assert_eq!(b, chunk + 64 + 3 * 128);
    }
}
