//! The DRAM state of a Value Storage's chunks: each chunk's life-cycle state, validity
//! bitmap, sequence number and written length, and the free-chunk list (PRISM §5.1-5.2).
//!
//! Life cycle of a chunk:
//!
//! ```text
//!  Recovering --finish_recovery--> Free (no live value) | Sealed (live values)
//!  Free --allocate--> Writing --seal--> Sealed --GC choice--> Victim --live == 0--> Retired
//!        <--write failed--                          (live values left at the step's end: back to Sealed)
//!  Retired --grace period (epoch)--> Free
//!  Victim --image unreadable--> Quarantined (kept forever, reported)
//! ```
//!
//! Allocation — popping the free list — is the only critical section of the write path
//! (§5.2); everything else is atomics. A chunk is freed only when (1) no valid value is left
//! in it *and* (2) an epoch grace period has passed after that (`retire` defers the free
//! with `crossbeam_epoch`'s default collector). (1) means no HSIT entry points into it, so
//! no late `invalidate` can hit its next incarnation; (2) means every reader that loaded a
//! location into it before the HSIT entry moved away has finished (readers pin the epoch
//! from loading a location until `read` returns). Freed chunks go to the back of the list
//! (FIFO), so a chunk is reused as late as possible.
//!
//! Thread safety: `Send + Sync`. `free` is a mutex; states are `AtomicU8` changed by CAS
//! where two parties could race (allocation vs. nothing else, GC vs. nothing else: there is
//! one GC at a time, see `ValueStorage::gc_step`).

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU32, AtomicU64, AtomicUsize, Ordering};

use parking_lot::Mutex;

use super::bitmap::ChunkBitmap;
use super::gc_policy::ChunkUsage;

/// The state of one chunk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum ChunkState {
    /// On the free list.
    Free = 0,
    /// Allocated to a `write_chunk` in progress.
    Writing = 1,
    /// Written and synced; holds values (possibly none still valid).
    Sealed = 2,
    /// Chosen by GC; its live values are being moved out.
    Victim = 3,
    /// Empty and waiting for the grace period before it is free.
    Retired = 4,
    /// After open, until the core has re-marked the valid values.
    Recovering = 5,
    /// GC could not read it back intact; never reused, reported by `check`.
    Quarantined = 6,
}

impl ChunkState {
    fn from_u8(v: u8) -> ChunkState {
        match v {
            0 => ChunkState::Free,
            1 => ChunkState::Writing,
            2 => ChunkState::Sealed,
            3 => ChunkState::Victim,
            4 => ChunkState::Retired,
            5 => ChunkState::Recovering,
            _ => ChunkState::Quarantined,
        }
    }
}

/// One chunk's DRAM metadata.
#[derive(Debug)]
pub struct ChunkMeta {
    state: AtomicU8,
    /// The validity bitmap.
    pub bitmap: ChunkBitmap,
    sequence: AtomicU64,
    image_len: AtomicU32,
}

impl ChunkMeta {
    /// The state.
    pub fn state(&self) -> ChunkState {
        ChunkState::from_u8(self.state.load(Ordering::Acquire))
    }
    /// The sequence number of the last write (0 if unknown, e.g. after open).
    pub fn sequence(&self) -> u64 {
        self.sequence.load(Ordering::Acquire)
    }
    /// The bytes of the last written image (0 if unknown: read the whole chunk).
    pub fn image_len(&self) -> u32 {
        self.image_len.load(Ordering::Acquire)
    }
    fn transition(&self, from: ChunkState, to: ChunkState) -> bool {
        self.state
            .compare_exchange(from as u8, to as u8, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }
}

/// Counts of chunks by state.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ChunkCounts {
    /// Free.
    pub free: u64,
    /// Being written.
    pub writing: u64,
    /// Sealed or being collected.
    pub used: u64,
    /// Waiting for the grace period.
    pub retiring: u64,
    /// Awaiting recovery.
    pub recovering: u64,
    /// Unreadable, set aside.
    pub quarantined: u64,
}

/// All chunks of one storage.
#[derive(Debug)]
pub struct ChunkTable {
    chunks: Box<[ChunkMeta]>,
    free: Mutex<VecDeque<u32>>,
    free_len: AtomicUsize,
    retiring: AtomicUsize,
}

impl ChunkTable {
    /// `count` chunks of `chunk_size` bytes, all `Free` (`recovering` false) or all
    /// `Recovering`.
    pub fn new(count: u32, chunk_size: u32, recovering: bool) -> Self {
        let state = if recovering {
            ChunkState::Recovering
        } else {
            ChunkState::Free
        };
        let chunks = (0..count)
            .map(|_| ChunkMeta {
                state: AtomicU8::new(state as u8),
                bitmap: ChunkBitmap::new(chunk_size),
                sequence: AtomicU64::new(0),
                image_len: AtomicU32::new(0),
            })
            .collect();
        let free: VecDeque<u32> = if recovering {
            VecDeque::new()
        } else {
            (0..count).collect()
        };
        ChunkTable {
            free_len: AtomicUsize::new(free.len()),
            free: Mutex::new(free),
            chunks,
            retiring: AtomicUsize::new(0),
        }
    }

    /// The number of chunks.
    pub fn len(&self) -> u32 {
        self.chunks.len() as u32
    }

    /// The metadata of chunk `c`.
    pub fn get(&self, c: u32) -> Option<&ChunkMeta> {
        self.chunks.get(c as usize)
    }

    /// Free chunks.
    pub fn free_count(&self) -> usize {
        self.free_len.load(Ordering::Acquire)
    }

    /// Chunks retired and waiting for their grace period.
    pub fn retiring_count(&self) -> usize {
        self.retiring.load(Ordering::Acquire)
    }

    /// Takes a free chunk, leaving at least `reserve` on the list (the critical section of
    /// §5.2). The chunk is `Writing` on return.
    pub fn allocate(&self, reserve: usize) -> Option<u32> {
        let c = {
            let mut free = self.free.lock();
            if free.len() <= reserve {
                return None;
            }
            let c = free.pop_front()?;
            self.free_len.store(free.len(), Ordering::Release);
            c
        };
        if let Some(m) = self.get(c) {
            m.state.store(ChunkState::Writing as u8, Ordering::Release);
        }
        Some(c)
    }

    /// Marks chunk `c` written: its bits are already set; it becomes `Sealed`.
    pub fn seal(&self, c: u32, sequence: u64, image_len: u32) {
        if let Some(m) = self.get(c) {
            m.sequence.store(sequence, Ordering::Release);
            m.image_len.store(image_len, Ordering::Release);
            m.state.store(ChunkState::Sealed as u8, Ordering::Release);
        }
    }

    /// Returns a chunk whose write failed (nothing points into it) to the free list.
    pub fn release_unwritten(&self, c: u32) {
        self.free_now(c);
    }

    fn free_now(&self, c: u32) {
        let Some(m) = self.get(c) else { return };
        m.bitmap.reset();
        m.image_len.store(0, Ordering::Release);
        m.state.store(ChunkState::Free as u8, Ordering::Release);
        let mut free = self.free.lock();
        free.push_back(c);
        self.free_len.store(free.len(), Ordering::Release);
    }

    /// Moves `c` from `from` to `to`; false if it was not in `from`.
    pub fn transition(&self, c: u32, from: ChunkState, to: ChunkState) -> bool {
        self.get(c).is_some_and(|m| m.transition(from, to))
    }

    /// Retires chunk `c` (state `from`, no live value): it becomes free after a grace
    /// period. False (and nothing changes) if it is not in `from` or still has live values.
    pub fn retire(self: &Arc<Self>, c: u32, from: ChunkState) -> bool {
        let Some(m) = self.get(c) else { return false };
        if m.bitmap.live_values() != 0 || !m.transition(from, ChunkState::Retired) {
            return false;
        }
        self.retiring.fetch_add(1, Ordering::AcqRel);
        let table = Arc::clone(self);
        let guard = crossbeam_epoch::pin();
        // IMPORTANT: the free runs only after every thread pinned now has unpinned, i.e.
        // after every reader that may hold a location into `c` is done (module doc).
        guard.defer(move || {
            table.retiring.fetch_sub(1, Ordering::AcqRel);
            table.free_now(c);
        });
        guard.flush();
        true
    }

    /// Helps the epoch advance so that retired chunks become free (called by a writer that
    /// found no free chunk).
    pub fn nudge_reclamation(&self) {
        crossbeam_epoch::pin().flush();
    }

    /// Ends recovery: chunks with valid values become `Sealed`, the others `Free`.
    pub fn finish_recovery(&self) {
        let mut free = self.free.lock();
        for (i, m) in self.chunks.iter().enumerate() {
            if m.transition(ChunkState::Recovering, ChunkState::Sealed)
                && m.bitmap.live_values() == 0
            {
                m.state.store(ChunkState::Free as u8, Ordering::Release);
                free.push_back(i as u32);
            }
        }
        self.free_len.store(free.len(), Ordering::Release);
    }

    /// Usage of the chunks in `state` (GC takes `Sealed` ones).
    pub fn usage(&self, state: ChunkState) -> Vec<ChunkUsage> {
        self.chunks
            .iter()
            .enumerate()
            .filter(|(_, m)| m.state() == state)
            .map(|(i, m)| ChunkUsage {
                chunk: i as u32,
                live_values: m.bitmap.live_values(),
                live_bytes: m.bitmap.live_bytes(),
                sequence: m.sequence(),
            })
            .collect()
    }

    /// Chunks per state.
    pub fn counts(&self) -> ChunkCounts {
        let mut c = ChunkCounts::default();
        for m in self.chunks.iter() {
            match m.state() {
                ChunkState::Free => c.free += 1,
                ChunkState::Writing => c.writing += 1,
                ChunkState::Sealed | ChunkState::Victim => c.used += 1,
                ChunkState::Retired => c.retiring += 1,
                ChunkState::Recovering => c.recovering += 1,
                ChunkState::Quarantined => c.quarantined += 1,
            }
        }
        c
    }

    /// Total live values and bytes.
    pub fn live(&self) -> (u64, u64) {
        self.chunks.iter().fold((0, 0), |(v, b), m| {
            (
                v + u64::from(m.bitmap.live_values()),
                b + m.bitmap.live_bytes(),
            )
        })
    }

    /// DRAM held by the table.
    pub fn dram_bytes(&self) -> usize {
        self.chunks
            .iter()
            .map(|m| m.bitmap.dram_bytes() + 16)
            .sum::<usize>()
            + self.chunks.len() * 4
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    fn wait_free(t: &ChunkTable, n: usize) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while t.free_count() < n {
            assert!(
                Instant::now() < deadline,
                "retired chunks never became free"
            );
            t.nudge_reclamation();
            std::thread::yield_now();
        }
    }

    #[test]
    fn allocation_keeps_the_reserve_and_write_failures_return_the_chunk() {
        let t = ChunkTable::new(3, 8192, false);
        let a = t.allocate(1).unwrap();
        let b = t.allocate(1).unwrap();
        assert_eq!(t.allocate(1), None);
        assert_eq!(t.get(a).unwrap().state(), ChunkState::Writing);
        t.release_unwritten(b);
        assert_eq!(t.free_count(), 2);
        assert_eq!(
            t.allocate(0),
            Some(2),
            "freed chunks queue behind older free ones"
        );
    }

    #[test]
    fn retired_chunk_is_free_only_after_readers_unpin() {
        let t = Arc::new(ChunkTable::new(2, 8192, false));
        let c = t.allocate(0).unwrap();
        t.get(c).unwrap().bitmap.set(64, 64);
        t.seal(c, 7, 4096);
        assert!(
            !t.retire(c, ChunkState::Sealed),
            "a chunk with a live value is never retired"
        );
        t.get(c).unwrap().bitmap.clear(64, 64);
        let reader = crossbeam_epoch::pin();
        assert!(t.retire(c, ChunkState::Sealed));
        for _ in 0..1000 {
            t.nudge_reclamation();
        }
        assert_eq!(t.free_count(), 1, "freed while a reader was pinned");
        assert_eq!(t.get(c).unwrap().state(), ChunkState::Retired);
        drop(reader);
        wait_free(&t, 2);
        assert_eq!(t.get(c).unwrap().state(), ChunkState::Free);
    }

    #[test]
    fn recovery_frees_exactly_the_chunks_without_valid_values() {
        let t = ChunkTable::new(4, 8192, true);
        assert_eq!(t.allocate(0), None);
        t.get(1).unwrap().bitmap.set(64, 128);
        t.get(3).unwrap().bitmap.set(4096, 64);
        t.finish_recovery();
        let c = t.counts();
        assert_eq!((c.free, c.used, c.recovering), (2, 2, 0));
        assert_eq!(t.live(), (2, 192));
        let used: Vec<u32> = t
            .usage(ChunkState::Sealed)
            .iter()
            .map(|u| u.chunk)
            .collect();
        assert_eq!(used, vec![1, 3]);
    }
}
