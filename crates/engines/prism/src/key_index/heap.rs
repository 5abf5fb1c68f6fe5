//! The key index's slot heap: leaf nodes and key blobs carved out of whole allocator
//! chunks that the index owns (allocator tag [`chunk_tag`]).
//!
//! Why not one `PmemAllocator::alloc` per node: a node or blob becomes live when it is
//! *linked* (a leaf on the list, a blob referenced by a live entry), so reachability from
//! the leaf list already says which slots are in use; a durable per-slot allocation record
//! would be a second source of truth with its own crash window and leak. Instead:
//! - a chunk is taken with `alloc_chunk(tag)` (durable), and its header (FORMAT.md § Chunk
//!   header) is written and persisted before any of its slots is handed out;
//! - handing out and freeing slots is DRAM only (free lists per kind);
//! - at open, recovery computes the live slots by walking the leaf list, rebuilds the free
//!   lists from them, and returns every owned chunk with no live slot — including chunks
//!   whose header never became durable — to the allocator (the allocator's leak-collection
//!   contract: iterate the chunks of your tag, free what you did not link).
//!
//! Chunks that become empty at run time stay with the index (their slots are reused) until
//! the next open.
//!
//! Thread safety: one mutex per kind (nodes, and each blob class); slots are handed out and
//! returned under it. A freed blob may be reused while an optimistic reader still reads it:
//! the reader's leaf version changed when the blob's entry was removed, so it retries.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use parking_lot::Mutex;
use tierkv_core::media::pmem::{PmemAllocator, PmemPool};
use tierkv_core::{Error, Result, Tier};

use super::format::{BLOB_CLASSES, CHUNK_HEADER_LEN, ChunkHeader, ChunkKind, blob_class};

/// Allocator tags of the key index: `TAG_BASE | root word`.
const TAG_BASE: u32 = u32::from_le_bytes([0, 0, b'K', b'P']);

/// The allocator tag of the chunks owned by the index rooted at pool root word `root`.
pub fn chunk_tag(root: usize) -> Result<u32> {
    u32::try_from(root)
        .ok()
        .filter(|&r| r <= 0xffff)
        .map(|r| TAG_BASE | r)
        .ok_or_else(|| Error::invalid(format!("key index root word {root} out of range")))
}

fn kind_index(kind: ChunkKind) -> usize {
    match kind {
        ChunkKind::Nodes => 0,
        ChunkKind::Blobs(c) => 1 + c,
    }
}

const KINDS: usize = 1 + BLOB_CLASSES.len();

#[derive(Default)]
struct FreeSlots {
    /// Free slots; the next allocation pops the last.
    free: Vec<u64>,
    /// Chunks of this kind.
    chunks: Vec<u64>,
}

/// The chunks an index owns, by offset, as read at open.
#[derive(Default)]
pub(crate) struct ChunkMap {
    /// Chunks with a valid header of this index.
    pub(crate) formatted: BTreeMap<u64, ChunkHeader>,
    /// Chunks of this index's tag whose header is missing or torn (taken just before a
    /// crash, or stale from an earlier owner): nothing can live in them.
    pub(crate) unformatted: Vec<u64>,
}

impl ChunkMap {
    /// Reads the header of every chunk of `tag`.
    pub(crate) fn read(
        pool: &PmemPool,
        alloc: &PmemAllocator,
        tag: u32,
        owner: u32,
    ) -> Result<ChunkMap> {
        let mut map = ChunkMap::default();
        for chunk in alloc.iter_chunks(tag).map(|a| a.offset) {
            match ChunkHeader::decode(pool.read(chunk, CHUNK_HEADER_LEN)?, chunk) {
                Ok(h)
                    if h.owner == owner
                        && h.slot_offset(chunk, h.slot_count) <= chunk + alloc.chunk_size() =>
                {
                    map.formatted.insert(chunk, h);
                }
                _ => map.unformatted.push(chunk),
            }
        }
        Ok(map)
    }

    /// The chunk holding slot `off` of `kind`: `Ok` only if `off` is exactly the start of
    /// one of its slots.
    pub(crate) fn locate(&self, off: u64, kind: ChunkKind) -> Result<u64> {
        let found = self.formatted.range(..=off).next_back();
        match found {
            Some((&chunk, h)) if h.kind == kind && h.slot_index(chunk, off).is_some() => Ok(chunk),
            _ => Err(Error::corruption(
                Tier::Pmem,
                off,
                format!("key index: {off} is not a {kind:?} slot of a chunk the index owns"),
            )),
        }
    }
}

/// The slot heap.
pub(crate) struct SlotHeap {
    pool: Arc<PmemPool>,
    alloc: Arc<PmemAllocator>,
    tag: u32,
    owner: u32,
    node_slot_size: u32,
    kinds: [Mutex<FreeSlots>; KINDS],
}

impl SlotHeap {
    /// An empty heap for the index at root word `owner` whose nodes are `node_size` bytes.
    pub(crate) fn new(
        pool: Arc<PmemPool>,
        alloc: Arc<PmemAllocator>,
        owner: usize,
        node_size: usize,
    ) -> Result<SlotHeap> {
        let largest = node_size.max(BLOB_CLASSES[BLOB_CLASSES.len() - 1]);
        let chunk = alloc.chunk_size();
        if (CHUNK_HEADER_LEN + largest) as u64 > chunk {
            return Err(Error::invalid(format!(
                "pmem allocator chunks of {chunk} bytes cannot hold a {largest}-byte key-index slot"
            )));
        }
        Ok(SlotHeap {
            tag: chunk_tag(owner)?,
            owner: u32::try_from(owner).map_err(|_| Error::invalid("key index root word"))?,
            node_slot_size: u32::try_from(node_size).map_err(|_| Error::invalid("node size"))?,
            pool,
            alloc,
            kinds: Default::default(),
        })
    }

    /// Rebuilds the heap at open from the chunk map and the live slots found by walking
    /// the leaf list; frees every owned chunk without a live slot and returns how many.
    pub(crate) fn recover(
        pool: Arc<PmemPool>,
        alloc: Arc<PmemAllocator>,
        owner: usize,
        node_size: usize,
        chunks: &ChunkMap,
        live: &BTreeSet<u64>,
    ) -> Result<(SlotHeap, usize)> {
        let heap = SlotHeap::new(pool, alloc, owner, node_size)?;
        let mut freed = 0;
        for &chunk in &chunks.unformatted {
            heap.alloc.free_chunk(chunk)?;
            freed += 1;
        }
        for (&chunk, h) in &chunks.formatted {
            let end = h.slot_offset(chunk, h.slot_count);
            if live.range(chunk..end).next().is_none() {
                heap.alloc.free_chunk(chunk)?;
                freed += 1;
                continue;
            }
            let mut kind = heap.kinds[kind_index(h.kind)].lock();
            kind.chunks.push(chunk);
            kind.free.extend(
                (0..h.slot_count)
                    .rev()
                    .map(|i| h.slot_offset(chunk, i))
                    .filter(|off| !live.contains(off)),
            );
        }
        Ok((heap, freed))
    }

    /// A free leaf-node slot.
    pub(crate) fn alloc_node(&self) -> Result<u64> {
        self.alloc_slot(ChunkKind::Nodes)
    }

    /// A free blob slot for a key of `len` bytes.
    pub(crate) fn alloc_blob(&self, len: usize) -> Result<u64> {
        let class = blob_class(len).ok_or_else(|| Error::invalid(format!("key of {len} bytes")))?;
        self.alloc_slot(ChunkKind::Blobs(class))
    }

    /// Returns the blob of a `len`-byte key. The entry that referenced it must already be
    /// durably dead.
    pub(crate) fn free_blob(&self, off: u64, len: usize) {
        if let Some(class) = blob_class(len) {
            self.kinds[kind_index(ChunkKind::Blobs(class))]
                .lock()
                .free
                .push(off);
        }
    }

    /// Returns a node slot that was never linked (a split that failed).
    pub(crate) fn free_node(&self, off: u64) {
        self.kinds[kind_index(ChunkKind::Nodes)]
            .lock()
            .free
            .push(off);
    }

    /// Makes sure at least `nodes` node slots and, per blob class `c`, `blobs[c]` blob
    /// slots are free, formatting chunks as needed (a write batch reserves room for its
    /// inserts before its commit point). Chunks formatted here and never used are freed at
    /// the next open, like any chunk with nothing live in it.
    pub(crate) fn reserve(&self, nodes: usize, blobs: &[usize; BLOB_CLASSES.len()]) -> Result<()> {
        let wanted = std::iter::once((ChunkKind::Nodes, nodes)).chain(
            blobs
                .iter()
                .enumerate()
                .map(|(c, &n)| (ChunkKind::Blobs(c), n)),
        );
        for (kind, n) in wanted {
            let mut slots = self.kinds[kind_index(kind)].lock();
            while slots.free.len() < n {
                self.add_chunk(&mut slots, kind)?;
            }
        }
        Ok(())
    }

    fn alloc_slot(&self, kind: ChunkKind) -> Result<u64> {
        let mut slots = self.kinds[kind_index(kind)].lock();
        if slots.free.is_empty() {
            self.add_chunk(&mut slots, kind)?;
        }
        slots
            .free
            .pop()
            .ok_or_else(|| Error::invalid("a key-index chunk with no slot"))
    }

    /// Formats a chunk of `kind` and adds its slots to `slots` (popped lowest first).
    fn add_chunk(&self, slots: &mut FreeSlots, kind: ChunkKind) -> Result<()> {
        let (chunk, header) = self.format_chunk(kind)?;
        slots.chunks.push(chunk);
        slots.free.extend(
            (0..header.slot_count)
                .rev()
                .map(|i| header.slot_offset(chunk, i)),
        );
        Ok(())
    }

    /// The header of a new chunk of `kind`: as many slots as fit after the header.
    fn chunk_header(&self, kind: ChunkKind) -> ChunkHeader {
        let slot_size = match kind {
            ChunkKind::Nodes => self.node_slot_size,
            ChunkKind::Blobs(c) => BLOB_CLASSES[c] as u32,
        };
        let usable = self.alloc.chunk_size() - CHUNK_HEADER_LEN as u64;
        ChunkHeader {
            kind,
            slot_size,
            slot_count: u32::try_from(usable / u64::from(slot_size)).unwrap_or(u32::MAX),
            owner: self.owner,
        }
    }

    fn format_chunk(&self, kind: ChunkKind) -> Result<(u64, ChunkHeader)> {
        let header = self.chunk_header(kind);
        let chunk = self.alloc.alloc_chunk(self.tag)?;
        // IMPORTANT: the header is durable before any slot of the chunk can be linked, so
        // open never finds a live slot in an unformatted chunk.
        if let Err(e) = self.pool.write_persist(chunk, &header.encode()) {
            let _ = self.alloc.free_chunk(chunk);
            return Err(e);
        }
        Ok((chunk, header))
    }

    /// Every chunk the heap holds, with its free slots (for `check`).
    pub(crate) fn snapshot(&self) -> (Vec<u64>, BTreeSet<u64>) {
        let mut chunks = Vec::new();
        let mut free = BTreeSet::new();
        for kind in &self.kinds {
            let k = kind.lock();
            chunks.extend_from_slice(&k.chunks);
            free.extend(k.free.iter().copied());
        }
        chunks.sort_unstable();
        (chunks, free)
    }

    /// Slots handed out and not returned: node slots, then per blob class (tests measure
    /// what a run of inserts allocated with it).
    #[cfg(test)]
    pub(crate) fn used_slots(&self) -> (usize, [usize; BLOB_CLASSES.len()]) {
        let used = |kind: ChunkKind| {
            let k = self.kinds[kind_index(kind)].lock();
            let per_chunk = self.chunk_header(kind).slot_count as usize;
            k.chunks.len() * per_chunk - k.free.len()
        };
        let mut blobs = [0; BLOB_CLASSES.len()];
        for (c, n) in blobs.iter_mut().enumerate() {
            *n = used(ChunkKind::Blobs(c));
        }
        (used(ChunkKind::Nodes), blobs)
    }

    /// The allocator tag of the heap's chunks.
    pub(crate) fn tag(&self) -> u32 {
        self.tag
    }

    /// Re-reads the headers of the chunks of the heap's tag (for `check`).
    pub(crate) fn chunk_map(&self) -> Result<ChunkMap> {
        ChunkMap::read(&self.pool, &self.alloc, self.tag, self.owner)
    }

    /// Pmem bytes held by the heap (whole chunks).
    pub(crate) fn pmem_bytes(&self) -> u64 {
        let chunks: usize = self.kinds.iter().map(|k| k.lock().chunks.len()).sum();
        chunks as u64 * self.alloc.chunk_size()
    }
}
