//! Room on a full pool (issue 23; MioDB §4.5's "writes never stall" meets a pool that
//! runs out): what a write may take from the allocator so that the store never reaches a
//! state it cannot drain, and deletes always find room. The rule (`FORMAT.md` § Space):
//!
//! - **Every MemTable owns its flush target.** A MemTable switch allocates a *pair*: the
//!   new MemTable's log run and the run its one-piece flush will write, and the MemTable
//!   is full when the next node could overflow that run. A flush therefore never needs
//!   pool space (but a directory object, from the slack below) and can always proceed.
//! - **Debt.** Every put above the repository will be copied into a repository node by a
//!   lazy copy (§4.4) before the space of its table is freed; the *debt* is what those
//!   nodes will take from the allocator, per slab size class and in whole chunks for
//!   large nodes ([`Debt`]): each buffer table's (the newest version of each key that is
//!   a put), the MemTables' (counted at insert), less what the lazy copy in flight has
//!   copied already.
//! - **Room** = whole free chunks − the chunks the debt needs − slack, in bytes. The debt
//!   of a class first fills the free slots of that class's slabs (after deletes, slabs are
//!   partly empty: counting whole free chunks only would refuse more and more puts over
//!   the rounds of a workload); what is left needs new slab chunks. The slack covers two
//!   directory objects (a publish writes the new one before freeing the old), mark words,
//!   one partly used new slab chunk per class, and a margin that only deletes may use
//!   ([`Sizes::delete_margin`]). A put is admitted while its footprint
//!   fits the room, and a switch while its pair does: the pipeline flush → zero-copy /
//!   moves → lazy copy then always finds what it allocates, and each table it retires
//!   gives its runs back, so room grows back whenever the buffer drains.
//! - **The spare pair.** One small pair is kept allocated (not counted as free); a delete
//!   (or `flush`) whose switch finds no room takes it, so a delete never needs room a put
//!   could have taken. Puts switch only while the spare is held; it is allocated again as
//!   soon as the room allows. The spare is in no directory: after a crash recovery frees
//!   it as an unreferenced run, and the open allocates a new one.
//! - **Writes slow first.** While the room last measured is under an eighth of the pool
//!   and the buffer can drain, a put sleeps before admission, up to 0.5 ms as the room
//!   goes to zero (`Inner::throttle`, counter `mio_throttle_micros`): on few cores the
//!   writers otherwise starve the flushes and compactions that give room back, and a
//!   sustained write load ran into refusals on a pool four times the data's size. Puts
//!   take budget in steps of at most a 32nd of the pool, so the room is measured often.
//! - **No fixed timer.** A write that finds no room waits only while the background makes
//!   progress (a flush, a table moved or merged, an entry lazily copied); when nothing is
//!   left to drain, or (for a put) nothing moved for `progress_wait_ms` (400 ms), it is
//!   refused with `NoSpace` (`stall_timeout_ms`, 3 s, caps a wait that keeps seeing
//!   progress, and a delete's wait).
//!
//! Thread safety: the pure functions are plain; [`Sizes`] is immutable.

use tierkv_core::media::pmem::PmemAllocator;
use tierkv_core::media::pmem::alloc::SizeClasses;

use crate::dir::Run;
use tierkv_core::{Result, WriteBatch};

use crate::node::{self, HEAD_LEN, Kind, MAX_HEIGHT};
use crate::skiplist::{self, Source};
use crate::wal;

/// Debt slots: one per slab size class, the last for whole-chunk objects.
pub const SLOTS: usize = 32;
/// The slot of whole-chunk objects.
pub const RUNS: usize = SLOTS - 1;

/// What lazy copies will allocate, in bytes per slot (slab class, or whole chunks).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Debt(pub [u64; SLOTS]);

impl Default for Debt {
    fn default() -> Self {
        Debt([0; SLOTS])
    }
}

impl Debt {
    /// Adds `bytes` to `slot`.
    pub fn add(&mut self, (slot, bytes): (usize, u64)) {
        if let Some(d) = self.0.get_mut(slot) {
            *d += bytes;
        }
    }

    /// Adds another debt.
    pub fn merge(&mut self, o: &Debt) {
        for (a, b) in self.0.iter_mut().zip(o.0.iter()) {
            *a += b;
        }
    }

    /// Pays `o` off (never below 0 per slot).
    pub fn pay(&mut self, o: &Debt) {
        for (a, b) in self.0.iter_mut().zip(o.0.iter()) {
            *a = a.saturating_sub(*b);
        }
    }

    /// Bytes in all.
    pub fn total(&self) -> u64 {
        self.0.iter().sum()
    }
}

/// The allocation sizes of one store (fixed at open).
#[derive(Clone, Debug)]
pub struct Sizes {
    /// Chunk size.
    pub chunk: u64,
    /// Largest object served from a slab.
    pub max_small: u64,
    /// The slab classes, ascending: (object size, objects per slab chunk).
    pub classes: Vec<(u64, u64)>,
    /// A normal MemTable's flush target (bytes, before rounding to chunks).
    pub memtable: u64,
    /// A normal MemTable's log (bytes, before rounding).
    pub log: u64,
    /// The longest key.
    pub max_key: usize,
    /// Bytes of the pool's chunks (all of them, free or not).
    pub pool: u64,
}

/// Free space as the allocator has it: whole free chunks, and free slot bytes per class.
#[derive(Clone, Copy, Debug, Default)]
pub struct Free {
    /// Whole free chunks.
    pub chunks: u64,
    /// Free slot bytes in the slabs of each class (slot index as in [`Debt`]).
    pub slots: Debt,
}

/// A log run and a flush-target run for one MemTable (or the spare).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pair {
    /// The log's run.
    pub log: Run,
    /// The flush target's run.
    pub table: Run,
}

impl Pair {
    /// Chunks of both runs.
    pub fn chunks(&self) -> u64 {
        self.log.chunks + self.table.chunks
    }
}

/// How big a pair to ask for, in chunks: `(log, table)`.
pub type PairShape = (u64, u64);

/// What one write — a put, a delete, or a whole write batch, which goes into one MemTable
/// and one log record — takes: bytes of its log record, bytes of its MemTable nodes at the
/// tallest height, and the worst-case debt of its puts (0 for deletes).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Footprint {
    /// Bytes of its log record (padded).
    pub log: u64,
    /// Bytes of its MemTable nodes, each at [`MAX_HEIGHT`].
    pub nodes: u64,
    /// What the lazy copies of its puts may allocate (each node at [`MAX_HEIGHT`]).
    pub cost: u64,
}

impl Sizes {
    /// The sizes of a store whose allocator is `alloc`.
    pub fn new(alloc: &PmemAllocator, memtable: u64, log: u64, max_key: usize) -> Sizes {
        let chunk = alloc.chunk_size();
        let sc = SizeClasses::new(chunk);
        let classes = (0..sc.count().min(RUNS))
            .filter_map(|c| u8::try_from(c).ok().and_then(|c| sc.get(c)))
            .map(|g| (g.size, u64::from(g.capacity)))
            .collect();
        Sizes {
            chunk,
            max_small: alloc.max_small_size(),
            classes,
            memtable,
            log,
            max_key,
            pool: alloc.stats().chunks * chunk,
        }
    }

    /// The debt slot and bytes of an `alloc(len)`: its slab class, or whole chunks.
    pub fn slot(&self, len: u64) -> (usize, u64) {
        if len <= self.max_small
            && let Some(i) = self.classes.iter().position(|c| c.0 >= len)
        {
            return (i, self.classes[i].0);
        }
        (RUNS, len.div_ceil(self.chunk) * self.chunk)
    }

    /// The bytes an `alloc(len)` takes from the pool.
    pub fn footprint(&self, len: u64) -> u64 {
        self.slot(len).1
    }

    /// What the lazy copy will allocate for a put of this key and value in a node of
    /// `height` (the repository node keeps the table node's height): slot and bytes.
    pub fn put_cost(&self, key_len: usize, value_len: usize, height: usize) -> (usize, u64) {
        self.slot(node::node_len(key_len, value_len, height) as u64)
    }

    /// Whole chunks a debt needs beyond the free slots of `free`.
    pub fn chunks_for(&self, debt: &Debt, free: &Free) -> u64 {
        let mut n = debt.0[RUNS].div_ceil(self.chunk);
        for (i, (size, cap)) in self.classes.iter().enumerate() {
            let short = debt.0[i].saturating_sub(free.slots.0[i]);
            n += short.div_ceil((size * cap).max(1));
        }
        n
    }

    /// The free space of `alloc` now (O(chunks): the allocator's per-slab occupancy).
    pub fn free(&self, alloc: &PmemAllocator) -> Free {
        let chunks = alloc.stats().free_chunks;
        let mut slots = Debt::default();
        for s in alloc.slabs() {
            let slot = usize::from(s.class);
            if slot < self.classes.len() {
                slots.add((slot, u64::from(s.capacity - s.used) * s.object_size));
            }
        }
        Free { chunks, slots }
    }

    /// The worst-case footprint of a put before its height is drawn.
    pub fn put_cost_max(&self, key_len: usize, value_len: usize) -> u64 {
        self.put_cost(key_len, value_len, MAX_HEIGHT).1
    }

    /// The footprint of one put (`put`) or delete of this key and value.
    pub fn one(&self, key_len: usize, value_len: usize, put: bool) -> Footprint {
        Footprint {
            log: wal::record_len(key_len, value_len) as u64,
            nodes: node::node_len(key_len, value_len, MAX_HEIGHT) as u64,
            cost: if put {
                self.put_cost_max(key_len, value_len)
            } else {
                0
            },
        }
    }

    /// The footprint of a write batch: one batch record, a node per operation.
    pub fn batch(&self, batch: &WriteBatch) -> Footprint {
        let mut fp = Footprint {
            log: wal::batch_record_len(batch) as u64,
            ..Footprint::default()
        };
        for (k, op) in batch.iter() {
            let v = op.value().map_or(0, <[u8]>::len);
            fp.nodes += node::node_len(k.len(), v, MAX_HEIGHT) as u64;
            if op.value().is_some() {
                fp.cost += self.put_cost_max(k.len(), v);
            }
        }
        fp
    }

    /// The debt of the skiplist at `head`: what a lazy copy of it would allocate, the
    /// newest version of each key that is a put (older versions are never copied).
    pub fn cost_of<S: Source + ?Sized>(&self, src: &S, head: u64) -> Result<Debt> {
        let mut cost = Debt::default();
        let mut last: Option<Vec<u8>> = None;
        skiplist::walk_level(src, head, 0, |_, h, key| {
            if last.as_deref() != Some(key) {
                if h.kind == Kind::Put {
                    cost.add(self.put_cost(h.key_len, h.value_len, h.height));
                }
                last = Some(key.to_vec());
            }
            Ok(())
        })?;
        Ok(cost)
    }

    /// Room kept for metadata: two directory objects of `dir_len` bytes (and growth),
    /// mark words, one fresh slab chunk per size class, and the deletes' margin.
    pub fn slack(&self, dir_len: u64) -> u64 {
        (2 * self.footprint(2 * dir_len.max(64))).next_multiple_of(self.chunk)
            + (self.classes.len() as u64 + 2) * self.chunk
            + self.delete_margin()
    }

    /// The part of the slack only deletes may take (two of the smallest pairs that take a
    /// delete of the longest key): the MemTable a delete's switch gets when the spare is
    /// in use, e.g. to send a MemTable full of tombstones down when the puts had used all
    /// the room (its log comes back at its flush, its table when the tombstones reach the
    /// repository).
    pub fn delete_margin(&self) -> u64 {
        2 * self.shape_bytes(self.min_shape(self.one(self.max_key, 0, false)))
    }

    /// The smallest pair that takes the write `fp`: `(log, table)` chunks.
    pub fn min_shape(&self, fp: Footprint) -> PairShape {
        let nd = HEAD_LEN as u64 + fp.nodes;
        (
            fp.log.div_ceil(self.chunk).max(1),
            nd.div_ceil(self.chunk).max(1),
        )
    }

    /// The pair of a normal MemTable, made large enough for the write.
    pub fn normal_shape(&self, fp: Footprint) -> PairShape {
        let (l, t) = self.min_shape(fp);
        (
            self.log.div_ceil(self.chunk).max(l),
            self.memtable.div_ceil(self.chunk).max(t),
        )
    }

    /// A quarter MemTable (when a normal pair does not fit the room), or the spare's shape
    /// (room for any delete).
    pub fn quarter_shape(&self, fp: Footprint) -> PairShape {
        let (l, t) = self.min_shape(fp);
        let (nl, nt) = self.normal_shape(Footprint::default());
        ((nl / 4).max(l), (nt / 4).max(t))
    }

    /// The spare pair's shape: a quarter MemTable that takes a delete of the longest key.
    pub fn spare_shape(&self) -> PairShape {
        self.quarter_shape(self.one(self.max_key, 0, false))
    }

    /// Bytes of a pair of this shape.
    pub fn shape_bytes(&self, s: PairShape) -> u64 {
        (s.0 + s.1) * self.chunk
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tierkv_core::media::pmem::DurabilityMode;
    use tierkv_testkit::rig::{create_pool, scratch_dir};

    #[test]
    fn footprints_are_slab_classes_or_whole_chunks_and_shapes_hold_their_write() {
        let d = scratch_dir();
        let pool = create_pool(&d.path().join("pool"), 4 << 20, DurabilityMode::Volatile);
        let (start, len) = (pool.data_start(), pool.len());
        let alloc = PmemAllocator::format(pool, start, len - start, 16 << 10).unwrap();
        let s = Sizes::new(&alloc, 256 << 10, 256 << 10, 1024);
        // Every footprint is what the allocator really takes: allocate and compare the
        // allocator's used bytes.
        for len in [
            1u64,
            16,
            17,
            100,
            2047,
            2048,
            2049,
            16 << 10,
            (16 << 10) + 1,
        ] {
            let before = alloc.stats().used_bytes;
            let off = alloc.alloc(len).unwrap();
            let used = alloc.stats().used_bytes - before;
            assert_eq!(s.footprint(len), used, "len {len}");
            alloc.free(off).unwrap();
        }
        assert_eq!(s.normal_shape(s.one(10, 10, true)), (16, 16));
        assert_eq!(
            s.normal_shape(s.one(10, 1 << 20, true)),
            (65, 65),
            "a huge value gets its room"
        );
        assert_eq!(s.min_shape(s.one(10, 10, true)), (1, 1));
        let (sl, st) = s.spare_shape();
        assert!(sl * s.chunk >= wal::record_len(1024, 0) as u64);
        assert!(st * s.chunk >= (HEAD_LEN + node::node_len(1024, 0, MAX_HEIGHT)) as u64);
        assert_eq!(s.spare_shape(), (4, 4));
        assert!(s.slack(1000) >= (s.classes.len() as u64 + 4) * s.chunk);
        // Free slots: after a slab of 100-byte objects is half freed, its class has free
        // slot bytes that a debt of that class uses before it needs new chunks.
        let (slot, size) = s.slot(100);
        let offs: Vec<u64> = (0..100).map(|_| alloc.alloc(100).unwrap()).collect();
        for o in offs.iter().step_by(2) {
            alloc.free(*o).unwrap();
        }
        let free = s.free(&alloc);
        let per_slab = s.classes[slot].1;
        let expect = (per_slab * offs.len().div_ceil(per_slab as usize) as u64 - 50) * size;
        assert_eq!(free.slots.0[slot], expect);
        let mut debt = Debt::default();
        debt.add((slot, expect));
        assert_eq!(s.chunks_for(&debt, &free), 0, "the free slots hold it");
        debt.add((slot, size));
        assert_eq!(
            s.chunks_for(&debt, &free),
            1,
            "one more object needs a chunk"
        );
        debt.add((RUNS, 3 * s.chunk));
        assert_eq!(s.chunks_for(&debt, &free), 4);
    }
}
