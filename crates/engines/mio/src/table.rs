//! PMTables (MioDB §4.1-4.2): skiplists on pmem in the node layout of `node.rs`, whose
//! links are pool offsets. A table is written once by [`write_table`] — the one-piece
//! flush of an arena image (or of a compaction's output arena): ONE allocation, ONE bulk
//! write, the links rebased by the allocation's offset in ONE pass over the nodes, ONE
//! persist — and is then immutable until the store drops it.
//!
//! Reclamation (§4.4, "never while a reader may hold it"): readers hold a table through an
//! `Arc` inside the version they cloned (the version is the reader's epoch). The runs of a
//! pmem table belong to one [`Runs`] owner that *every* handle of that table shares (a
//! zero-copy merge and its end install new handles of the same tables: a reader may hold
//! an older handle than the one that is later retired), and the owner of a zero-copy
//! merge's oldtable also holds the newtable's owner (the oldtable links to the newtable's
//! nodes from the first move on). A table removed from the directory marks its owner, and
//! every owner it absorbed, obsolete; the runs are freed when the last `Arc` on the owner
//! goes, i.e. after every reader that could reach them has finished.
//!
//! Thread safety: `Table` is `Send + Sync`; reads are lock-free.

use std::borrow::Cow;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering, fence};

use parking_lot::{Mutex, RwLock};
use tierkv_core::media::pmem::{PmemAllocator, PmemPool};
use tierkv_core::{Error, Result, Tier};

use crate::arena::Arena;
use crate::bloom::{self, Bloom};
use crate::dir::{Run, TableMeta};
use crate::node::{self, HEAD_LEN, LINKS_OFF};
use crate::seek_index::{IndexSlot, SeekIndex};
use crate::skiplist::{self, Entry, Source};
use crate::space::{Debt, Sizes};
use crate::stats::Counters;

/// Chunk tag of PMTable runs.
pub const TAG_TABLE: u32 = 0x4d49_0001;
/// Chunk tag of log runs.
pub const TAG_WAL: u32 = 0x4d49_0002;

/// Called with a label just before each of the engine's own persists (tests take crash
/// images there: every persist point of every operation).
pub type PersistHook = Arc<dyn Fn(&'static str) + Send + Sync>;

/// What every table and background job shares: the pool, its allocator, the counters.
pub struct Shared {
    /// The pool.
    pub pool: Arc<PmemPool>,
    /// Its allocator.
    pub alloc: PmemAllocator,
    /// The engine's counters.
    pub counters: Counters,
    /// The persist hook (tests only; `None` in a store opened normally).
    pub hook: Option<PersistHook>,
    /// A writer waits for the flush under way (the MemTable filled first): merges and lazy
    /// copies yield the core after every step until the flush is published, so that the
    /// flush gets it (writers are waiting: nothing else needs it more).
    pub flush_awaited: std::sync::atomic::AtomicBool,
}

impl Shared {
    /// Persists `[off, off + len)`, after calling the hook with `label`.
    pub fn persist(&self, label: &'static str, off: u64, len: usize) -> Result<()> {
        if let Some(h) = &self.hook {
            h(label);
        }
        self.pool.persist(off, len)
    }
}

/// Reads a skiplist in the pool.
#[derive(Clone, Copy)]
pub struct PoolSource<'a>(pub &'a PmemPool);

impl Source for PoolSource<'_> {
    fn word(&self, off: u64) -> Result<u64> {
        self.0.load_u64(off)
    }
    fn bytes(&self, off: u64, len: usize) -> Result<Cow<'_, [u8]>> {
        self.0.read(off, len).map(Cow::Borrowed)
    }
    fn prefetch_node(&self, off: u64) {
        // The header and links, and for most heights the key: the search's next reads.
        self.0.prefetch(off, 64);
    }
}

/// A newtable read around a node move: the head's links are the recorded links past the
/// moving node's key ([`Table::get_around_move`]); every other word is the pool's.
struct PastMove<'a> {
    inner: PoolSource<'a>,
    head: u64,
    past: &'a [u64; node::MAX_HEIGHT],
}

impl Source for PastMove<'_> {
    fn word(&self, off: u64) -> Result<u64> {
        let links = self.head + LINKS_OFF as u64;
        if off >= links && off < links + 8 * node::MAX_HEIGHT as u64 {
            return Ok(self.past[((off - links) / 8) as usize]);
        }
        self.inner.word(off)
    }
    fn bytes(&self, off: u64, len: usize) -> Result<Cow<'_, [u8]>> {
        self.inner.bytes(off, len)
    }
    fn cmp_key(&self, off: u64, len: usize, key: &[u8]) -> Result<std::cmp::Ordering> {
        self.inner.cmp_key(off, len, key)
    }
    fn prefetch_node(&self, off: u64) {
        self.inner.prefetch_node(off)
    }
}

/// One PMTable.
pub struct Table {
    shared: Arc<Shared>,
    /// What the directory lists.
    pub meta: TableMeta,
    /// Its Bloom filter (none in the repository), shared by every handle on this pmem
    /// table: a zero-copy merge ORs the newtable's filter into the oldtable's in place
    /// before the first node moves, so that readers holding an older handle of the
    /// oldtable never skip it for a key it has absorbed.
    pub bloom: Arc<RwLock<Option<Bloom>>>,
    /// Bytes of its runs.
    pub bytes: u64,
    /// The zero-copy compaction this table is part of, if any (`zerocopy.rs`).
    pub merge: Option<Arc<crate::zerocopy::MergeState>>,
    /// What the lazy copy will allocate for its puts (`space.rs`, the debt).
    pub cost: Debt,
    /// The owner of the runs holding its nodes, shared by every handle of this table.
    runs: Arc<Runs>,
}

/// The owner of a pmem table's runs: frees them when the last handle of the table, and of
/// any table that absorbed it in a zero-copy merge, is dropped after the table was
/// retired.
pub struct Runs {
    shared: Arc<Shared>,
    runs: Vec<Run>,
    /// Owners of tables whose nodes this table's nodes may link to (a zero-copy merge's
    /// newtable): kept alive as long as this one.
    absorbed: Mutex<Vec<Arc<Runs>>>,
    obsolete: AtomicBool,
    /// The table's move count, a seqlock: a zero-copy node move into or out of the table
    /// makes it odd before its first link store and even after its last
    /// ([`NodeMoves`]). A get that reads a level without its lock compares the sum of
    /// the level's counts before and after (`store.rs`).
    moves: AtomicU64,
    /// The move this table is the newtable of while its count is odd ([`MoveRecord`]):
    /// what a get needs to read the table without waiting for the move to end.
    moving: MoveRecord,
    /// The table's DRAM seek index (`seek_index.rs`; none for the repository), shared by
    /// every handle like the move count, so that a merge's dead marks reach them all.
    index: IndexSlot,
}

/// The newtable's side of a node move, recorded in DRAM before the move begins
/// (`zerocopy.rs`, readers): the moving node x and the newtable's links *past* every node
/// of x's key, per level (what the head will point at once step 2 is done). `tag` is the
/// newtable's odd move count during that move; a record whose tag is not the count a
/// reader loaded describes another move.
#[derive(Debug, Default)]
struct MoveRecord {
    tag: AtomicU64,
    x: AtomicU64,
    past: [AtomicU64; node::MAX_HEIGHT],
}

/// What a reader of a newtable needs while a node move is under way ([`Runs::move_under_way`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MoveView {
    /// The moving node x (the newest version of its key in the pair).
    pub x: u64,
    /// The newtable's links past x's key, per level: the head a reader searches from for
    /// any other key, which reaches none of the nodes the move relinks.
    pub past: [u64; node::MAX_HEIGHT],
}

/// A zero-copy node move in progress between two tables (`zerocopy.rs`): their move
/// counts are odd from `begin` until it drops.
pub struct NodeMoves<'a>([&'a Runs; 2]);

impl<'a> NodeMoves<'a> {
    /// Marks a move of `view.x` from `new` into `old` as started, recording `view` for the
    /// readers of `new` first. Only the merge of the pair's level calls it (one at a time).
    pub fn begin(old: &'a Table, new: &'a Table, view: &MoveView) -> NodeMoves<'a> {
        let m = NodeMoves([&old.runs, &new.runs]);
        let rec = &new.runs.moving;
        // Orders the last move's even count before this record's stores: a reader that
        // loads one of them (then fences) sees that count, not the odd one it started at.
        fence(Ordering::Release);
        rec.x.store(view.x, Ordering::Relaxed);
        for (slot, link) in rec.past.iter().zip(view.past) {
            slot.store(link, Ordering::Relaxed);
        }
        let odd = new.runs.moves.load(Ordering::Relaxed).wrapping_add(1);
        rec.tag.store(odd, Ordering::Relaxed);
        for r in m.0 {
            // Release: a reader that loads the odd count sees the record.
            r.moves.fetch_add(1, Ordering::Release);
        }
        // Orders the odd counts before every link store of the move (a reader that sees
        // one of those stores sees the odd count at its second load).
        fence(Ordering::Release);
        m
    }
}

impl Drop for NodeMoves<'_> {
    fn drop(&mut self) {
        for r in self.0 {
            r.moves.fetch_add(1, Ordering::Release);
        }
    }
}

impl Runs {
    fn new(shared: &Arc<Shared>, runs: Vec<Run>) -> Arc<Runs> {
        Arc::new(Runs {
            shared: shared.clone(),
            runs,
            absorbed: Mutex::new(Vec::new()),
            obsolete: AtomicBool::new(false),
            moves: AtomicU64::new(0),
            moving: MoveRecord::default(),
            index: IndexSlot::default(),
        })
    }

    /// The table's seek index now, if it has one.
    pub fn index(&self) -> Option<&SeekIndex> {
        self.index.current()
    }

    /// Makes `ix` the table's seek index (one installer at a time: the table's writer or
    /// the compaction thread that owns it).
    pub fn install_index(&self, ix: SeekIndex) {
        self.index.install(ix);
    }

    /// DRAM taken by the table's seek indexes.
    pub fn index_bytes(&self) -> usize {
        self.index.bytes()
    }

    fn retire(&self) {
        self.obsolete.store(true, Ordering::Release);
        for r in self.absorbed.lock().iter() {
            r.retire();
        }
    }

    /// The move count without ordering (a reader's second load, after its fence).
    pub fn moves_relaxed(&self) -> u64 {
        self.moves.load(Ordering::Relaxed)
    }

    /// The node move this table is the newtable of, if `count` (an odd move count the
    /// caller loaded with `Acquire`) is that move's; `None` for a move it is the oldtable
    /// of. The caller keeps what it read only if the count is still `count` afterwards
    /// (a later move overwrites the record).
    pub fn move_under_way(&self, count: u64) -> Option<MoveView> {
        let rec = &self.moving;
        if count.is_multiple_of(2) || rec.tag.load(Ordering::Relaxed) != count {
            return None;
        }
        let mut past = [0u64; node::MAX_HEIGHT];
        for (link, slot) in past.iter_mut().zip(&rec.past) {
            *link = slot.load(Ordering::Relaxed);
        }
        Some(MoveView {
            x: rec.x.load(Ordering::Relaxed),
            past,
        })
    }

    /// The runs this owner frees (not those of the owners it absorbed).
    pub fn runs(&self) -> &[Run] {
        &self.runs
    }
}

impl Drop for Runs {
    fn drop(&mut self) {
        if self.obsolete.load(Ordering::Acquire) {
            for r in &self.runs {
                // A failure here (a poisoned pool) leaves a leak that recovery collects.
                if self.shared.alloc.free_chunk(r.off).is_ok() {
                    self.shared.counters.runs_freed.incr();
                }
            }
        }
    }
}

impl Table {
    /// A table just written (not yet in the directory): its runs are `meta.allocs`,
    /// owned by a fresh owner holding `index`.
    pub(crate) fn assemble(
        shared: &Arc<Shared>,
        meta: TableMeta,
        bloom: Option<Bloom>,
        bytes: u64,
        cost: Debt,
        index: SeekIndex,
    ) -> Table {
        let runs = Runs::new(shared, meta.allocs.clone());
        runs.install_index(index);
        Table {
            shared: shared.clone(),
            runs,
            meta,
            bloom: Arc::new(RwLock::new(bloom)),
            bytes,
            merge: None,
            cost,
        }
    }

    /// The table's reader.
    pub fn source(&self) -> PoolSource<'_> {
        PoolSource(&self.shared.pool)
    }

    /// The newest version of `key` in this table (a tombstone has no value).
    pub fn get(&self, key: &[u8]) -> Result<Option<Entry>> {
        self.get_hashed(key, bloom::hash_key(key))
    }

    /// [`Table::get`] of a key whose [`bloom::hash_key`] is `h` (a get hashes once for
    /// every table it asks).
    pub fn get_hashed(&self, key: &[u8], h: u64) -> Result<Option<Entry>> {
        if !self.admits_hash(h) {
            self.shared.counters.bloom_negatives.incr();
            return Ok(None);
        }
        skiplist::get_from(&self.source(), self.meta.head, self.seek_start(key), key)
    }

    /// Where a search of this table for `key` may start (its seek index's answer), or
    /// `None` (from the head).
    pub fn seek_start(&self, key: &[u8]) -> Option<u64> {
        self.runs.index().and_then(|ix| ix.start(key))
    }

    /// [`Table::get_hashed`] of a newtable while the node move `view` is under way
    /// (`zerocopy.rs`, readers): x's own key is answered by x (the newest version of it in
    /// the pair); any other key by a search from a head whose links are `view.past`,
    /// which never reaches x or the older versions of its key (the only newtable nodes
    /// whose links the move rewrites). Right at every step of the move; the caller checks
    /// that the move count did not change.
    pub fn get_around_move(&self, key: &[u8], h: u64, view: &MoveView) -> Result<Option<Entry>> {
        if !self.admits_hash(h) {
            self.shared.counters.bloom_negatives.incr();
            return Ok(None);
        }
        let src = self.source();
        let hx = skiplist::header(&src, view.x)?;
        let kx = skiplist::key(&src, view.x, &hx)?;
        if kx.as_ref() == key {
            return skiplist::entry(&src, view.x).map(Some);
        }
        // Every indexed node comes at or after x's key (x is the table's first node): a
        // start on x's key would be one of the nodes the move relinks.
        let start = self
            .runs
            .index()
            .and_then(|ix| ix.start_past(key, kx.as_ref()));
        let around = PastMove {
            inner: src,
            head: self.meta.head,
            past: &view.past,
        };
        skiplist::get_from(&around, self.meta.head, start, key)
    }

    /// Whether the table's Bloom filter admits `key` (always, without one); a "no" is
    /// counted. Filters only grow: a zero-copy merge ORs the newtable's into the
    /// oldtable's before the first node moves (`zerocopy.rs`).
    pub fn may_contain(&self, key: &[u8]) -> bool {
        let admits = self.admits(key);
        if !admits {
            self.shared.counters.bloom_negatives.incr();
        }
        admits
    }

    /// [`Table::may_contain`] without counting a "no".
    pub fn admits(&self, key: &[u8]) -> bool {
        self.admits_hash(bloom::hash_key(key))
    }

    /// [`Table::admits`] of the key whose [`bloom::hash_key`] is `h`.
    pub fn admits_hash(&self, h: u64) -> bool {
        self.bloom
            .read()
            .as_ref()
            .is_none_or(|b| b.may_contain_hash(h))
    }

    /// The table's move count (`Acquire`): odd while a zero-copy node move into or out
    /// of it runs; it changes with every move.
    pub fn moves(&self) -> u64 {
        self.runs.moves.load(Ordering::Acquire)
    }

    /// Another handle on the same pmem table (sharing its filter), with other metadata or
    /// merge state. Only a handle that is retired frees the runs it lists.
    pub fn rehandle(
        &self,
        meta: TableMeta,
        merge: Option<Arc<crate::zerocopy::MergeState>>,
    ) -> Table {
        let bytes =
            meta.allocs.iter().map(|r| r.chunks).sum::<u64>() * self.shared.alloc.chunk_size();
        Table {
            shared: self.shared.clone(),
            meta,
            bloom: self.bloom.clone(),
            bytes,
            merge,
            cost: self.cost,
            runs: self.runs.clone(),
        }
    }

    /// This handle with another cost (a merged table carries both inputs' costs).
    pub fn with_cost(mut self, cost: Debt) -> Table {
        self.cost = cost;
        self
    }

    /// Keeps `other`'s runs allocated as long as this table's (a zero-copy merge links
    /// `other`'s nodes into this table), and retires them with this table's.
    pub fn absorb_runs(&self, other: &Table) {
        if !Arc::ptr_eq(&self.runs, &other.runs) {
            self.runs.absorbed.lock().push(other.runs.clone());
        }
    }

    /// The owner of the table's runs.
    pub fn runs(&self) -> &Arc<Runs> {
        &self.runs
    }

    /// ORs `other`'s filter into this table's (§4.6), for every handle of this table.
    pub fn absorb_filter(&self, other: &Table) {
        if Arc::ptr_eq(&self.bloom, &other.bloom) {
            return;
        }
        let theirs = other.bloom.read().clone();
        let mut mine = self.bloom.write();
        // A table without a filter may hold any key: the merged table then has none
        // either (keeping ours would answer "absent" for the keys that move in).
        *mine = match (mine.as_ref(), theirs.as_ref()) {
            (Some(a), Some(b)) => a.merged(b),
            _ => None,
        };
    }

    /// Marks the table removed from the directory: its runs are freed once the last
    /// reader drops it.
    pub fn retire(&self) {
        self.runs.retire();
    }
}

/// Rebases every non-zero link of the nodes in `image` (an arena image, head at 0) by
/// `base`, in one pass over the nodes in arena order; returns the nodes' keys' visitor
/// results through `on_node` (for the Bloom filter). Fails on a malformed image.
pub fn rebase(image: &mut [u8], base: u64, on_node: impl FnMut(&[u8])) -> Result<u64> {
    let len = image.len();
    rebase_nodes(image, 0, len, base, on_node)
}

/// [`rebase`] of a piece of an arena image of `total` bytes: `piece` holds the whole
/// nodes that start at `start` (the head when `start` is 0).
pub fn rebase_nodes(
    piece: &mut [u8],
    start: usize,
    total: usize,
    base: u64,
    mut on_node: impl FnMut(&[u8]),
) -> Result<u64> {
    let at_of = |local: usize| (start + local) as u64;
    let word = |b: &[u8], at: usize| -> Result<u64> {
        b.get(at..at + 8)
            .and_then(|s| s.try_into().ok())
            .map(u64::from_le_bytes)
            .ok_or_else(|| Error::corruption(Tier::Dram, at_of(at), "arena image truncated"))
    };
    let mut at = 0usize;
    let mut nodes = 0u64;
    while at < piece.len() {
        let (height, size, key) = if start + at == 0 {
            (node::MAX_HEIGHT, HEAD_LEN, None)
        } else {
            let h = node::decode_header(word(piece, at)?, word(piece, at + 8)?, at_of(at))?;
            (h.height, h.size(), Some((at + h.key_off(), h.key_len)))
        };
        for level in 0..height {
            let l = at + LINKS_OFF + 8 * level;
            let v = word(piece, l)?;
            if v != 0 {
                if v as usize >= total {
                    return Err(Error::corruption(
                        Tier::Dram,
                        at_of(l),
                        "arena link out of range",
                    ));
                }
                if let Some(dst) = piece.get_mut(l..l + 8) {
                    dst.copy_from_slice(&(v + base).to_le_bytes());
                }
            }
        }
        if let Some((k, n)) = key {
            if let Some(kb) = piece.get(k..k + n) {
                on_node(kb);
            }
            nodes += 1;
        }
        at += size;
    }
    Ok(nodes)
}

/// How tables of one store are shaped.
#[derive(Clone, Copy, Debug)]
pub struct TableShape {
    /// Keys a filter is sized for (0: no filters).
    pub bloom_keys: u64,
    /// Bits per key.
    pub bloom_bits: u32,
}

impl TableShape {
    fn new_bloom(&self) -> Option<Bloom> {
        (self.bloom_keys > 0).then(|| Bloom::new(self.bloom_keys, self.bloom_bits))
    }
}

/// Where a new table goes and what it owes (`space.rs`).
#[derive(Clone, Copy, Debug, Default)]
pub struct Placement {
    /// The run allocated for it in advance (a MemTable's flush target), or `None`: one
    /// allocation now.
    pub target: Option<Run>,
    /// The debt of its puts.
    pub cost: Debt,
}

/// The one-piece write of an arena as a new table (P2 steps 1-2): one run (the MemTable's
/// flush target, allocated at its switch, or allocated now), the arena's image copied
/// into it in order with its links rebased in the same pass (`stream_image`), one
/// persist. Not yet in the directory. The arena must not change meanwhile.
pub fn write_table(
    shared: &Arc<Shared>,
    arena: &Arena,
    id: u64,
    max_seq: u64,
    shape: TableShape,
    place: Placement,
) -> Result<Table> {
    write_table_in_pieces(shared, arena, (id, max_seq), shape, place, STREAM_PIECE)
}

/// [`write_table`] streaming the arena through pieces of about `piece` bytes.
fn write_table_in_pieces(
    shared: &Arc<Shared>,
    arena: &Arena,
    (id, max_seq): (u64, u64),
    shape: TableShape,
    place: Placement,
    piece: usize,
) -> Result<Table> {
    let len = arena.used() as u64;
    let cs = shared.alloc.chunk_size();
    let (off, chunks, owned) = match place.target {
        Some(r) if len <= r.chunks * cs => (r.off, r.chunks, false),
        Some(_) => {
            return Err(Error::corruption(
                Tier::Dram,
                0,
                "a MemTable outgrew its flush target",
            ));
        }
        None => {
            let chunks = len.div_ceil(cs).max(1);
            (shared.alloc.alloc_chunks(TAG_TABLE, chunks)?, chunks, true)
        }
    };
    let mut bloom = shape.new_bloom();
    let written = stream_image(shared, arena, off, &mut bloom, piece).and_then(|entries| {
        shared.persist("flush-table", off, len as usize)?;
        let ix = SeekIndex::build(&PoolSource(&shared.pool), off)?;
        Ok((entries, ix))
    });
    let (entries, index) = match written {
        Ok(n) => n,
        Err(e) => {
            // A run allocated here is freed; a flush target stays allocated (the store
            // is poisoned then, and recovery collects it).
            if owned {
                let _ = shared.alloc.free_chunk(off);
            }
            return Err(e);
        }
    };
    shared.counters.table_bytes_written.add(len);
    let meta = TableMeta {
        id,
        head: off,
        entries,
        max_seq,
        allocs: vec![Run { off, chunks }],
    };
    Ok(Table::assemble(
        shared,
        meta,
        bloom,
        chunks * cs,
        place.cost,
        index,
    ))
}

/// Bytes of the buffer [`write_table`] streams an arena through.
const STREAM_PIECE: usize = 1 << 20;

/// Copies `arena`'s image to `off` in order, a piece of whole nodes at a time through one
/// small buffer, each piece rebased before it is written and its keys added to `bloom`;
/// returns the nodes written. The pieces are written back to back, so the pmem image is
/// the one bulk copy of the arena (§4.2), without a second copy of it in DRAM.
fn stream_image(
    shared: &Shared,
    arena: &Arena,
    off: u64,
    bloom: &mut Option<Bloom>,
    limit: usize,
) -> Result<u64> {
    let total = arena.used();
    let mut piece = Vec::with_capacity(limit.min(total));
    let (mut at, mut entries) = (0usize, 0u64);
    while at < total {
        piece.clear();
        let next = arena.copy_nodes(at, limit, &mut piece)?;
        entries += rebase_nodes(&mut piece, at, total, off, |k| {
            if let Some(b) = bloom.as_mut() {
                b.insert(k);
            }
        })?;
        shared.pool.write(off + at as u64, &piece)?;
        at = next;
    }
    Ok(entries)
}

/// Opens a table the directory lists (recovery §4.7): walks level 0, checking that every
/// node decodes, lies in one of `runs` (the table's own, or in a zero-copy compaction the
/// oldtable's, which owns both tables' runs; `None` for the repository, whose nodes are
/// separate objects) and follows its predecessor in order, and
/// rebuilds the Bloom filter.
pub fn open_table(
    shared: &Arc<Shared>,
    meta: TableMeta,
    runs: Option<&[Run]>,
    shape: TableShape,
    sizes: &Sizes,
) -> Result<Table> {
    let src = PoolSource(&shared.pool);
    let inside = |off: u64, len: u64| {
        let Some(runs) = runs else {
            return true; // the repository: nodes are objects anywhere in the pool
        };
        runs.iter()
            .any(|r| off >= r.off && off + len <= r.off + r.chunks * shared.alloc.chunk_size())
    };
    if !inside(meta.head, HEAD_LEN as u64) {
        return Err(Error::corruption(
            Tier::Pmem,
            meta.head,
            "table head outside its runs",
        ));
    }
    let mut bloom = shape.new_bloom();
    let mut cost = Debt::default();
    let mut last: Option<Vec<u8>> = None;
    let n = skiplist::walk_level(&src, meta.head, 0, |at, h, key| {
        if !inside(at, h.size() as u64) {
            return Err(Error::corruption(
                Tier::Pmem,
                at,
                "table node outside its runs",
            ));
        }
        if let Some(b) = bloom.as_mut() {
            b.insert(key);
        }
        // The debt (`space.rs`): the newest version of each key, if a put.
        if last.as_deref() != Some(key) {
            if h.kind == node::Kind::Put {
                cost.add(sizes.put_cost(h.key_len, h.value_len, h.height));
            }
            last = Some(key.to_vec());
        }
        Ok(())
    })?;
    let bytes = meta.allocs.iter().map(|r| r.chunks).sum::<u64>() * shared.alloc.chunk_size();
    let owner = Runs::new(shared, meta.allocs.clone());
    if runs.is_some() {
        owner.install_index(SeekIndex::build(&src, meta.head)?);
    }
    Ok(Table {
        shared: shared.clone(),
        runs: owner,
        meta: TableMeta { entries: n, ..meta },
        bloom: Arc::new(RwLock::new(bloom)),
        bytes,
        merge: None,
        cost,
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::arena::Arena;
    use crate::node::Kind;
    use crate::stats::Counters;
    use tierkv_core::media::pmem::DurabilityMode;

    /// A volatile pool of `size` bytes in a temporary directory, formatted for tables.
    /// A pool of `size` bytes in a fresh directory, with 4 KiB chunks.
    pub(crate) fn shared(size: u64) -> (tempfile::TempDir, Arc<Shared>) {
        let d = tempfile::tempdir().unwrap();
        let pool = tierkv_testkit::rig::create_pool(
            &d.path().join("pool"),
            size,
            DurabilityMode::Volatile,
        );
        let (start, len) = (pool.data_start(), pool.len());
        let alloc = PmemAllocator::format(pool.clone(), start, len - start, 4096).unwrap();
        let sh = Arc::new(Shared {
            pool,
            alloc,
            counters: Counters::default(),
            hook: None,
            flush_awaited: Default::default(),
        });
        (d, sh)
    }

    #[test]
    fn a_table_absorbing_one_without_a_filter_drops_its_own() {
        let (_d, sh) = shared(4 << 20);
        let table = |id: u64, key: &[u8], bloom_keys: u64| {
            let a = Arena::new(1 << 12, id);
            a.insert(id, Kind::Put, key, b"v").unwrap();
            let shape = TableShape {
                bloom_keys,
                bloom_bits: 16,
            };
            write_table(&sh, &a, id, id, shape, Placement::default()).unwrap()
        };
        let old = table(1, b"old", 64);
        let new = table(2, b"new", 0);
        assert!(old.bloom.read().is_some() && new.bloom.read().is_none());
        old.absorb_filter(&new);
        // The old table's filter must not refuse a key that moves in from the new one.
        assert!(
            old.bloom
                .read()
                .as_ref()
                .is_none_or(|b| b.may_contain(b"new")),
            "a filter that does not cover the absorbed table's keys"
        );
    }

    /// `may_contain` says no only for keys the table cannot hold (counting each no), and
    /// after a table absorbs another's filter it admits that table's keys too (what a get
    /// relies on when every filter of a level refuses its key: `Inner::get_in_level`).
    #[test]
    fn may_contain_refuses_only_keys_the_table_cannot_hold() {
        let (_d, sh) = shared(4 << 20);
        let table = |id: u64, prefix: &str| {
            let a = Arena::new(1 << 16, id);
            for i in 0..200u64 {
                a.insert(
                    id * 1000 + i,
                    Kind::Put,
                    format!("{prefix}{i}").as_bytes(),
                    b"v",
                )
                .unwrap();
            }
            let shape = TableShape {
                bloom_keys: 200,
                bloom_bits: 16,
            };
            write_table(&sh, &a, id, id * 1000 + 199, shape, Placement::default()).unwrap()
        };
        let (old, new) = (table(1, "o"), table(2, "n"));
        assert!((0..200).all(|i| old.may_contain(format!("o{i}").as_bytes())));
        let refused = (0..200)
            .filter(|i| !old.may_contain(format!("n{i}").as_bytes()))
            .count() as u64;
        assert!(
            refused > 190,
            "a 16-bit filter refuses most absent keys: {refused}"
        );
        assert_eq!(sh.counters.bloom_negatives.get(), refused);
        old.absorb_filter(&new);
        assert!((0..200).all(|i| old.may_contain(format!("n{i}").as_bytes())));
    }

    #[test]
    fn one_piece_flush_makes_one_allocation_and_every_rebased_link_lies_inside_it() {
        let (_d, sh) = shared(4 << 20);
        let arena = Arena::new(1 << 18, 3);
        for i in 0..500u64 {
            let k = format!("key{:04}", (i * 37) % 311);
            arena
                .insert(i + 1, Kind::Put, k.as_bytes(), &[b'v'; 100])
                .unwrap();
        }
        let image = arena.snapshot();
        let runs_before = sh.alloc.iter_chunks(TAG_TABLE).count();
        let writes_before = sh.pool.counters().pmem_bytes_written;
        let shape = TableShape {
            bloom_keys: 512,
            bloom_bits: 16,
        };
        let t = write_table(&sh, &arena, 9, 500, shape, Placement::default()).unwrap();
        let runs: Vec<_> = sh.alloc.iter_chunks(TAG_TABLE).collect();
        assert_eq!(runs.len(), runs_before + 1, "one allocation");
        assert_eq!(t.meta.allocs.len(), 1);
        let (off, len) = (t.meta.head, image.len() as u64);
        assert_eq!(runs[0].offset, off);
        // One bulk write of the image: the bytes written are the image's and the
        // allocator's one state word per chunk of the run, nothing else.
        let chunks = t.meta.allocs[0].chunks;
        assert_eq!(
            sh.pool.counters().pmem_bytes_written - writes_before,
            len + 8 * chunks
        );
        // Every link is the arena link rebased by the allocation's offset, inside it.
        let mut links = 0;
        let mut at = 0usize;
        let src = PoolSource(&sh.pool);
        while at < image.len() {
            let height = if at == 0 {
                node::MAX_HEIGHT
            } else {
                skiplist::header(&src, off + at as u64).unwrap().height
            };
            for l in 0..height {
                let word_at = at + LINKS_OFF + 8 * l;
                let dram = u64::from_le_bytes(image[word_at..word_at + 8].try_into().unwrap());
                let pm = sh.pool.load_u64(off + word_at as u64).unwrap();
                if dram == 0 {
                    assert_eq!(pm, 0);
                } else {
                    assert_eq!(pm, dram + off);
                    assert!(
                        pm >= off && pm < off + len,
                        "link {pm} outside [{off}, {})",
                        off + len
                    );
                    links += 1;
                }
            }
            at += if at == 0 {
                HEAD_LEN
            } else {
                skiplist::header(&src, off + at as u64).unwrap().size()
            };
        }
        assert!(links >= 500, "{links} links checked");
        assert_eq!(t.meta.entries, 500);
        for i in 0..311u64 {
            let k = format!("key{i:04}");
            assert!(
                t.get(k.as_bytes()).unwrap().is_some() || (0..500).all(|j| (j * 37) % 311 != i)
            );
        }
    }

    /// The flush streams the arena through a small buffer: whatever the piece size, the
    /// table is the arena's image rebased by its offset, with the same entries and filter.
    #[test]
    fn a_table_written_in_pieces_is_the_rebased_image() {
        let (_d, sh) = shared(8 << 20);
        let arena = Arena::new(1 << 18, 11);
        for i in 0..700u64 {
            let k = format!("k{:05}", (i * 7919) % 1009);
            let (kind, v) = if i % 9 == 0 {
                (Kind::Delete, Vec::new())
            } else {
                (Kind::Put, vec![b'a' + (i % 26) as u8; (i % 300) as usize])
            };
            arena.insert(i + 1, kind, k.as_bytes(), &v).unwrap();
        }
        let shape = TableShape {
            bloom_keys: 1024,
            bloom_bits: 16,
        };
        let whole = write_table(&sh, &arena, 1, 700, shape, Placement::default()).unwrap();
        for piece in [1, 64, 300, 4096, 1 << 20] {
            let t =
                write_table_in_pieces(&sh, &arena, (2, 700), shape, Placement::default(), piece)
                    .unwrap();
            let mut want = arena.snapshot();
            rebase(&mut want, t.meta.head, |_| {}).unwrap();
            let got = sh.pool.read(t.meta.head, want.len()).unwrap();
            assert!(got == want.as_slice(), "piece {piece}: image differs");
            assert_eq!(t.meta.entries, 700);
            assert_eq!(
                t.bloom.read().as_ref().map(|b| b.words().to_vec()),
                whole.bloom.read().as_ref().map(|b| b.words().to_vec())
            );
            for i in 0..1009u64 {
                let k = format!("k{i:05}");
                assert_eq!(
                    t.get(k.as_bytes()).unwrap(),
                    whole.get(k.as_bytes()).unwrap(),
                    "piece {piece}, {k}"
                );
            }
        }
    }
}
