//! # tierkv-sstable: sorted tables on the flash tier
//!
//! Immutable sorted tables, written once with `O_DIRECT` through `tierkv_core::media::flash`
//! and read block by block through a DRAM block cache ([`BlockCache`]). A table maps byte
//! keys to byte values (unique keys, in order); what a value means is the embedding
//! engine's business. [`TableSet`] is one immutable version of a set of non-overlapping
//! tables, shared by readers (`Arc`) so a compaction never removes a file a reader still
//! uses (an unlinked file stays readable through its open handle).
//!
//! Used by PrismDB's flash tier (PrismDB §4.1 "data layout on flash", where this code was
//! first written) and by MioDB's SSD extension (`mio:flash`, MioDB §4.1, §5.4). The file
//! layout is written down in `crates/engines/prismdb/FORMAT.md` § "Table file"; decoders
//! are total over untrusted bytes (fuzz target `prismdb_table`).
//!
//! Deviation from PrismDB: the paper keeps table indexes and filters on NVM; we keep them
//! in DRAM (charged to the DRAM budget), since our pmem pool is the scarce fast tier.
//!
//! Thread safety: [`Table`], [`TableSet`] and [`BlockCache`] are `Send + Sync`.

pub mod bloom;
pub mod codec;
pub mod format;

use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;
use tierkv_core::format::checksum::masked_crc32c;
use tierkv_core::media::flash::{AlignedBuf, FLASH_BLOCK, FlashDevice, FlashFile};
use tierkv_core::{Error, Result, Tier};

use bloom::{Bloom, hash64};
use format::{BlockHandle, Footer, build_table, decode_block, decode_footer, decode_index};

/// An open table.
#[derive(Debug)]
pub struct Table {
    /// Table number (unique in its partition).
    pub number: u64,
    /// The file.
    pub file: FlashFile,
    /// Footer (entries, key range).
    pub footer: Footer,
    /// Process-unique id of this open table: its blocks' key in the block cache.
    cache_id: u64,
    index: Vec<BlockHandle>,
    bloom: Bloom,
}

fn corrupt(file: &FlashFile, off: u64, what: &str) -> Error {
    Error::corruption(Tier::Flash, off, format!("table {}: {what}", file.name()))
}

thread_local! {
    /// This thread's aligned buffer for table reads and writes of up to [`SEQ_READ`]
    /// bytes, reused. A fresh zeroed allocation per transfer (16 MiB per table written, 1
    /// MiB per compaction read) cost a page fault and a memset per 4 KiB: about 10% of the
    /// CPU of a 2M-record load. It grows to the largest transfer the thread made (a
    /// block for gets, a scan's run, [`SEQ_READ`] for compactions).
    static IO_BUF: RefCell<Option<AlignedBuf>> = const { RefCell::new(None) };
}

/// Runs `f` on an aligned buffer of `len` bytes whose contents are whatever it held last:
/// this thread's reused one when `len` is at most [`SEQ_READ`], else a fresh one.
fn with_io_buf<R>(len: usize, f: impl FnOnce(&mut AlignedBuf) -> Result<R>) -> Result<R> {
    if len > SEQ_READ {
        return f(&mut AlignedBuf::new(len)?);
    }
    IO_BUF.with(|cell| {
        let Ok(mut slot) = cell.try_borrow_mut() else {
            return f(&mut AlignedBuf::new(len)?);
        };
        let buf = match slot.take() {
            Some(b) if b.capacity() >= len => slot.insert(b),
            _ => slot.insert(AlignedBuf::new(len)?),
        };
        buf.set_len(len)?;
        f(buf)
    })
}

fn read_region(file: &FlashFile, off: u64, len: usize) -> Result<Vec<u8>> {
    let start = off / FLASH_BLOCK as u64 * FLASH_BLOCK as u64;
    let skip = (off - start) as usize;
    let total = (skip + len).div_ceil(FLASH_BLOCK) * FLASH_BLOCK;
    if start + total as u64 > file.len() {
        return Err(corrupt(file, off, "region past the end of the file"));
    }
    with_io_buf(total, |buf| {
        file.read_at(start, buf)?;
        Ok(buf.get(skip..skip + len).unwrap_or_default().to_vec())
    })
}

/// The source of [`Table::cache_id`]s.
static NEXT_CACHE_ID: AtomicU64 = AtomicU64::new(1);

/// Bytes of one sequential read of [`Table::read_all`].
const SEQ_READ: usize = 1 << 20;

/// Where a flash-table lookup found its value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// In the DRAM block cache.
    Cache,
    /// Read from the flash device.
    Device,
}

impl Table {
    /// Writes a table over `entries` (sorted, unique, non-empty) as file `name`, synced.
    pub fn write(
        dev: &FlashDevice,
        name: &str,
        number: u64,
        entries: &[(Vec<u8>, Vec<u8>)],
        bloom_bits: u32,
    ) -> Result<Table> {
        let (img, footer) = build_table(entries, bloom_bits)?;
        let file = dev.create_file(name, img.len() as u64)?;
        Table::write_image(file, number, &img, footer)
    }

    /// Writes the image `img` (from [`format::build_table`], whose footer is `footer`)
    /// into `file`, created with the image's length, and syncs it.
    pub fn write_image(
        file: FlashFile,
        number: u64,
        img: &AlignedBuf,
        footer: Footer,
    ) -> Result<Table> {
        // Straight from the image (aligned memory already, no copy into an I/O buffer), in
        // pieces of SEQ_READ: one request for a whole table held the device's queue for
        // the foreground's 4 KiB reads.
        let mut at = 0;
        while at < img.len() {
            let n = SEQ_READ.min(img.len() - at);
            file.write_from(at as u64, img, at, n)?;
            at += n;
        }
        file.sync()?;
        let region = |(off, len, _): (u64, u32, u32)| {
            img.get(off as usize..off as usize + len as usize)
                .unwrap_or_default()
                .to_vec()
        };
        let (ib, bb) = (region(footer.index), region(footer.bloom));
        Table::assemble(file, number, footer, &ib, &bb)
    }

    /// A table from its checked footer and its index and filter regions' bytes.
    fn assemble(
        file: FlashFile,
        number: u64,
        footer: Footer,
        ib: &[u8],
        bb: &[u8],
    ) -> Result<Table> {
        if masked_crc32c(ib) != footer.index.2 {
            return Err(corrupt(&file, footer.index.0, "index checksum mismatch"));
        }
        let index = decode_index(ib).ok_or_else(|| corrupt(&file, footer.index.0, "bad index"))?;
        if masked_crc32c(bb) != footer.bloom.2 {
            return Err(corrupt(&file, footer.bloom.0, "filter checksum mismatch"));
        }
        let bloom =
            Bloom::decode(bb).ok_or_else(|| corrupt(&file, footer.bloom.0, "bad filter"))?;
        Ok(Table {
            number,
            file,
            footer,
            cache_id: NEXT_CACHE_ID.fetch_add(1, Ordering::Relaxed),
            index,
            bloom,
        })
    }

    /// Opens table `number` from `file`, checking footer, index and filter.
    pub fn open(file: FlashFile, number: u64) -> Result<Table> {
        let len = file.len();
        if len < FLASH_BLOCK as u64 || !len.is_multiple_of(FLASH_BLOCK as u64) {
            return Err(corrupt(&file, 0, "length is not a whole number of blocks"));
        }
        let fb = read_region(&file, len - FLASH_BLOCK as u64, FLASH_BLOCK)?;
        let footer = decode_footer(&fb).ok_or_else(|| corrupt(&file, len - 4096, "bad footer"))?;
        let ib = read_region(&file, footer.index.0, footer.index.1 as usize)?;
        let bb = read_region(&file, footer.bloom.0, footer.bloom.1 as usize)?;
        Table::assemble(file, number, footer, &ib, &bb)
    }

    /// Smallest key.
    pub fn min_key(&self) -> &[u8] {
        &self.footer.min_key
    }
    /// Largest key.
    pub fn max_key(&self) -> &[u8] {
        &self.footer.max_key
    }

    /// False only if the table certainly does not hold `key`.
    pub fn may_contain(&self, key: &[u8]) -> bool {
        key >= self.min_key() && key <= self.max_key() && self.bloom.may_contain(hash64(key))
    }

    /// DRAM held by the index and the filter.
    pub fn dram_bytes(&self) -> usize {
        self.bloom.dram_bytes()
            + self
                .index
                .iter()
                .map(|h| h.last_key.len() + 32)
                .sum::<usize>()
    }

    /// Number of data blocks.
    pub fn blocks(&self) -> usize {
        self.index.len()
    }

    /// Reads (or takes from the cache) data block `i`'s entries.
    pub fn block(&self, i: usize, cache: &BlockCache) -> Result<Block> {
        self.block_traced(i, cache).map(|(b, _)| b)
    }

    /// Data block `i`'s entries, and whether they came from the cache.
    fn block_traced(&self, i: usize, cache: &BlockCache) -> Result<(Block, Source)> {
        let key = (self.cache_id, i);
        if let Some(b) = cache.get(&key) {
            return Ok((b, Source::Cache));
        }
        let h = self
            .index
            .get(i)
            .ok_or_else(|| corrupt(&self.file, 0, "block index out of range"))?;
        let payload = read_region(&self.file, h.offset, h.len as usize)?;
        let entries = Arc::new(self.check_block(h, &payload)?);
        cache.insert(key, entries.clone(), h.len as usize);
        Ok((entries, Source::Device))
    }

    /// Checks and decodes the payload of the block `h` points at.
    fn check_block(&self, h: &BlockHandle, payload: &[u8]) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        if masked_crc32c(payload) != h.crc {
            return Err(corrupt(&self.file, h.offset, "block checksum mismatch"));
        }
        decode_block(payload).ok_or_else(|| corrupt(&self.file, h.offset, "bad block"))
    }

    /// The index of the first block whose last key is `>= key`.
    pub fn seek_block(&self, key: &[u8]) -> usize {
        self.index.partition_point(|h| h.last_key.as_slice() < key)
    }

    /// The value of `key`, reading flash when the filter does not rule it out.
    pub fn get(&self, key: &[u8], cache: &BlockCache) -> Result<Option<Vec<u8>>> {
        self.get_traced(key, cache).map(|v| v.map(|(v, _)| v))
    }

    /// The value of `key` and where it was found.
    pub fn get_traced(&self, key: &[u8], cache: &BlockCache) -> Result<Option<(Vec<u8>, Source)>> {
        if !self.may_contain(key) {
            return Ok(None);
        }
        let i = self.seek_block(key);
        if i >= self.index.len() {
            return Ok(None);
        }
        let (b, src) = self.block_traced(i, cache)?;
        Ok(b.binary_search_by(|(k, _)| k.as_slice().cmp(key))
            .ok()
            .and_then(|j| b.get(j))
            .map(|(_, v)| (v.clone(), src)))
    }

    /// Every entry, in order, as owned pairs ([`Table::read_data`], copied out): read from
    /// flash in sequential reads of up to a MiB, past the block cache.
    pub fn read_all(&self) -> Result<Vec<(Vec<u8>, Vec<u8>)>> {
        Ok(self
            .read_data()?
            .iter()
            .map(|(k, v)| (k.to_vec(), v.to_vec()))
            .collect())
    }

    /// Every entry, checked, read into one buffer (from the image pool) in requests of up
    /// to a MiB, past the block cache (a compaction reads each block once; caching them
    /// would only evict the blocks gets use): what a compaction merges, with no allocation
    /// or copy per entry.
    pub fn read_data(&self) -> Result<TableData> {
        let (Some(first), Some(last)) = (self.index.first(), self.index.last()) else {
            return Ok(TableData::default());
        };
        let start = first.offset;
        let end = last
            .offset
            .checked_add(u64::from(last.len))
            .and_then(|e| e.checked_next_multiple_of(FLASH_BLOCK as u64))
            .unwrap_or(u64::MAX);
        if !start.is_multiple_of(FLASH_BLOCK as u64) || end > self.file.len() {
            return Err(corrupt(
                &self.file,
                start,
                "data blocks past the end of the file",
            ));
        }
        let total = (end - start) as usize;
        let mut buf = format::pooled_buffer(total)?;
        // In pieces of SEQ_READ, as `write_image` writes.
        let mut at = 0;
        while at < total {
            let n = SEQ_READ.min(total - at);
            self.file.read_into(start + at as u64, &mut buf, at, n)?;
            at += n;
        }
        let mut entries = Vec::with_capacity(self.footer.entries as usize);
        for h in &self.index {
            // Checked: an index is only as ordered as the file it came from.
            let place = h
                .offset
                .checked_sub(start)
                .and_then(|a| usize::try_from(a).ok())
                .and_then(|a| Some((a, a.checked_add(h.len as usize)?)));
            let Some((at, payload)) = place.and_then(|(a, e)| buf.get(a..e).map(|p| (a, p))) else {
                return Err(corrupt(&self.file, h.offset, "block past its region"));
            };
            if masked_crc32c(payload) != h.crc {
                return Err(corrupt(&self.file, h.offset, "block checksum mismatch"));
            }
            let spans = format::block_spans(payload)
                .ok_or_else(|| corrupt(&self.file, h.offset, "bad block"))?;
            entries.extend(spans.into_iter().map(|(k, kl, vl)| (at + k, kl, vl)));
        }
        Ok(TableData {
            buf: Some(buf),
            entries,
        })
    }

    /// The end (exclusive) of the run of blocks from `i` that one read of at most `bytes`
    /// covers (at least one block).
    fn run_end(&self, i: usize, bytes: usize) -> usize {
        let Some(first) = self.index.get(i) else {
            return i;
        };
        let mut j = i + 1;
        while let Some(h) = self.index.get(j) {
            if h.offset + u64::from(h.len) - first.offset > bytes as u64 {
                break;
            }
            j += 1;
        }
        j
    }

    /// Data blocks `i..j`, checked and decoded, in one read.
    fn read_run(&self, i: usize, j: usize) -> Result<Vec<Entries>> {
        let hs = self.index.get(i..j).unwrap_or_default();
        let (Some(first), Some(last)) = (hs.first(), hs.last()) else {
            return Ok(Vec::new());
        };
        let start = first.offset;
        let end = last.offset.saturating_add(u64::from(last.len));
        let region = read_region(&self.file, start, (end - start) as usize)?;
        hs.iter()
            .map(|h| {
                let at = (h.offset - start) as usize;
                let payload = region
                    .get(at..at + h.len as usize)
                    .ok_or_else(|| corrupt(&self.file, h.offset, "block past its region"))?;
                self.check_block(h, payload)
            })
            .collect()
    }
}

/// Every entry of a table in one buffer ([`Table::read_data`]).
#[derive(Debug, Default)]
pub struct TableData {
    buf: Option<format::TableImage>,
    /// (key offset in `buf`, key length, value length); the value follows its key.
    entries: Vec<(usize, usize, usize)>,
}

impl TableData {
    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when there is no entry.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The entries, in key order.
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        let buf: &[u8] = self.buf.as_deref().map_or(&[], |b| b);
        self.entries.iter().map(move |&(k, kl, vl)| {
            (
                buf.get(k..k + kl).unwrap_or_default(),
                buf.get(k + kl..k + kl + vl).unwrap_or_default(),
            )
        })
    }
}

/// One version of a set of tables, sorted by key, non-overlapping.
#[derive(Debug, Default)]
pub struct TableSet {
    /// The tables.
    pub tables: Vec<Arc<Table>>,
}

impl TableSet {
    /// The table whose range could hold `key`.
    pub fn find(&self, key: &[u8]) -> Option<&Arc<Table>> {
        let i = self.tables.partition_point(|t| t.max_key() < key);
        self.tables.get(i).filter(|t| t.min_key() <= key)
    }

    /// The value of `key` on flash.
    pub fn get(&self, key: &[u8], cache: &BlockCache) -> Result<Option<Vec<u8>>> {
        self.get_traced(key, cache).map(|v| v.map(|(v, _)| v))
    }

    /// The value of `key` on flash and where it was found.
    pub fn get_traced(&self, key: &[u8], cache: &BlockCache) -> Result<Option<(Vec<u8>, Source)>> {
        match self.find(key) {
            Some(t) => t.get_traced(key, cache),
            None => Ok(None),
        }
    }

    /// False only if no table holds `key`.
    pub fn may_contain(&self, key: &[u8]) -> bool {
        self.find(key).is_some_and(|t| t.may_contain(key))
    }

    /// Entries in total.
    pub fn entries(&self) -> u64 {
        self.tables.iter().map(|t| t.footer.entries).sum()
    }

    /// An iterator over entries with keys `>= start`, in order, reading lazily; `want` is
    /// how many entries the caller takes at most (it sizes the reads, [`TableIter`]).
    pub fn iter_from<'a>(
        &'a self,
        start: &[u8],
        cache: &'a BlockCache,
        want: usize,
    ) -> TableIter<'a> {
        let t = self.tables.partition_point(|t| t.max_key() < start);
        let b = self.tables.get(t).map_or(0, |tb| tb.seek_block(start));
        TableIter {
            set: self,
            cache,
            t,
            b,
            buf: VecDeque::new(),
            start: start.to_vec(),
            ahead: VecDeque::new(),
            run: 1,
            want,
        }
    }
}

/// Most blocks one read-ahead of a [`TableIter`] takes (64 KiB).
const MAX_READ_AHEAD: usize = 16;

/// A lazy ordered iterator over a [`TableSet`].
///
/// Blocks missing from the cache are read in runs sized by what the caller still wants:
/// its entries over the table's mean entries per block, plus one (the first block holds
/// keys before the start), up to `MAX_READ_AHEAD` blocks; a YCSB-E scan of 50 1 KiB
/// objects (13-17 blocks) is one read. With no bound given, runs double from one block.
/// Before 2026-11-27 runs always doubled (1, 2, 4, 8, 16 blocks): 4-5 dependent reads per
/// scan, and 31% more bytes read than RocksDB in YCSB-E. The blocks read ahead stay in the
/// iterator, not in the cache, so a scan does not evict the blocks of the hot keys.
pub struct TableIter<'a> {
    set: &'a TableSet,
    cache: &'a BlockCache,
    t: usize,
    b: usize,
    buf: VecDeque<(Vec<u8>, Vec<u8>)>,
    start: Vec<u8>,
    /// Blocks `b..` of table `t` read ahead.
    ahead: VecDeque<Entries>,
    /// Blocks of the next read when `want` is unbounded.
    run: usize,
    /// Entries the caller may still take (`usize::MAX`: no bound).
    want: usize,
}

impl TableIter<'_> {
    /// Moves block `b` of table `t`'s entries into `buf`.
    fn fill(&mut self, table: &Table) -> Result<()> {
        if let Some(entries) = self.ahead.pop_front() {
            self.buf.extend(entries);
            return Ok(());
        }
        if let Some(block) = self.cache.get(&(table.cache_id, self.b)) {
            self.buf.extend(block.iter().cloned());
            return Ok(());
        }
        let blocks = if self.want == usize::MAX {
            let run = self.run;
            self.run = (self.run * 2).min(MAX_READ_AHEAD);
            run
        } else {
            let per_block = (table.footer.entries as usize / table.blocks().max(1)).max(1);
            (self.want.div_ceil(per_block) + 1).clamp(1, MAX_READ_AHEAD)
        };
        let end = table
            .run_end(self.b, blocks * FLASH_BLOCK)
            .min(self.b + blocks);
        self.ahead = table.read_run(self.b, end)?.into();
        if let Some(entries) = self.ahead.pop_front() {
            self.buf.extend(entries);
        }
        Ok(())
    }
}

impl Iterator for TableIter<'_> {
    type Item = Result<(Vec<u8>, Vec<u8>)>;
    fn next(&mut self) -> Option<Self::Item> {
        loop {
            if let Some(e) = self.buf.pop_front() {
                if e.0 >= self.start {
                    if self.want != usize::MAX {
                        self.want = self.want.saturating_sub(1);
                    }
                    return Some(Ok(e));
                }
                continue;
            }
            let table = self.set.tables.get(self.t)?;
            if self.b >= table.blocks() {
                self.t += 1;
                self.b = 0;
                self.ahead.clear();
                continue;
            }
            if let Err(e) = self.fill(table) {
                self.t = usize::MAX;
                return Some(Err(e));
            }
            self.b += 1;
        }
    }
}

/// A cached block: its table's [`Table::cache_id`] and its number.
type BlockKey = (u64, usize);

/// The decoded entries of a data block.
pub type Entries = Vec<(Vec<u8>, Vec<u8>)>;

/// The decoded entries of a data block, shared between the cache and readers.
pub type Block = Arc<Entries>;

/// The DRAM block cache for flash tables (CLOCK, i.e. FIFO with a second chance for a
/// block read since it was cached, with a byte budget; DESIGN §3: charged to the DRAM
/// budget). Plain FIFO evicted the blocks of the hottest flash keys as readily as any
/// other: 5% of flash-table gets hit it in a zipfian read-only run.
#[derive(Debug, Default)]
pub struct BlockCache {
    /// Shards by block key, each a CLOCK of its own with an equal share of the capacity:
    /// one lock for the whole cache was a fifth of the CPU of a 4-thread read-only run of
    /// `mio:flash` (2026-11-27: the lock spun inside `Table::get_traced`).
    shards: Vec<Mutex<CacheInner>>,
    capacity: usize,
}

/// Most shards of a [`BlockCache`].
const CACHE_SHARDS: usize = 16;
/// Least capacity of a shard: a small cache has fewer shards, so that each still holds
/// many blocks (a cache of a few blocks is one shard).
const MIN_SHARD_BYTES: usize = 256 << 10;

/// A cached block: its entries, its bytes and whether it was read since it was cached or
/// last given its second chance.
#[derive(Debug)]
struct Cached {
    block: Block,
    bytes: usize,
    referenced: bool,
}

#[derive(Debug, Default)]
struct CacheInner {
    map: HashMap<BlockKey, Cached, foldhash::fast::RandomState>,
    fifo: VecDeque<BlockKey>,
    bytes: usize,
}

impl BlockCache {
    /// A cache of `capacity` bytes (0: no caching).
    pub fn new(capacity: usize) -> BlockCache {
        BlockCache {
            shards: (0..(capacity / MIN_SHARD_BYTES).clamp(1, CACHE_SHARDS))
                .map(|_| Mutex::default())
                .collect(),
            capacity,
        }
    }

    /// The shard of block `k` (blocks of one table spread over every shard).
    fn shard(&self, k: &BlockKey) -> &Mutex<CacheInner> {
        let h = (k.0 ^ (k.1 as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15))
            .wrapping_mul(0xff51_afd7_ed55_8ccd);
        &self.shards[(h >> 60) as usize % self.shards.len()]
    }

    /// Each shard's share of the capacity.
    fn shard_capacity(&self) -> usize {
        self.capacity / self.shards.len()
    }

    fn get(&self, k: &BlockKey) -> Option<Block> {
        let mut g = self.shard(k).lock();
        let c = g.map.get_mut(k)?;
        c.referenced = true;
        Some(c.block.clone())
    }

    fn insert(&self, k: BlockKey, v: Block, bytes: usize) {
        let capacity = self.shard_capacity();
        if bytes > capacity {
            return;
        }
        let mut g = self.shard(&k).lock();
        if g.map.contains_key(&k) {
            return;
        }
        // Each pass over the queue clears a reference bit or evicts, so this ends.
        while g.bytes + bytes > capacity {
            let Some(old) = g.fifo.pop_front() else { break };
            match g.map.get_mut(&old) {
                Some(c) if c.referenced => {
                    c.referenced = false;
                    g.fifo.push_back(old);
                }
                Some(_) => {
                    if let Some(c) = g.map.remove(&old) {
                        g.bytes -= c.bytes;
                    }
                }
                None => {}
            }
        }
        g.bytes += bytes;
        g.fifo.push_back(k);
        g.map.insert(
            k,
            Cached {
                block: v,
                bytes,
                referenced: false,
            },
        );
    }

    /// Bytes cached.
    pub fn bytes(&self) -> usize {
        self.shards.iter().map(|s| s.lock().bytes).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use tierkv_core::FlashOptions;

    /// A set of one table of `n` entries of 1000-byte values (three or four per block)
    /// on a fresh device.
    fn table_set(n: u32) -> (tempfile::TempDir, Arc<FlashDevice>, TableSet) {
        let dir = tempfile::tempdir().unwrap();
        let opts = FlashOptions {
            size: tierkv_core::ByteSize::mib(8),
            ..FlashOptions::default()
        };
        let dev = FlashDevice::open(dir.path(), &opts).unwrap();
        let entries: Vec<(Vec<u8>, Vec<u8>)> = (0..n)
            .map(|i| (format!("k{i:06}").into_bytes(), vec![i as u8; 1000]))
            .collect();
        let t = Table::write(&dev, "t-1.sst", 1, &entries, 10).unwrap();
        (
            dir,
            dev,
            TableSet {
                tables: vec![Arc::new(t)],
            },
        )
    }

    #[test]
    fn read_data_yields_every_entry_written_reading_the_data_blocks_and_refuses_a_damaged_block() {
        let (_dir, dev, set) = table_set(400);
        let table = &set.tables[0];
        // What `table_set` wrote.
        let all: Vec<(Vec<u8>, Vec<u8>)> = (0..400u32)
            .map(|i| (format!("k{i:06}").into_bytes(), vec![i as u8; 1000]))
            .collect();
        let before = dev.counters().flash_bytes_read;
        let data = table.read_data().unwrap();
        let read = dev.counters().flash_bytes_read - before;
        let data_end = table
            .index
            .last()
            .map(|h| h.offset + u64::from(h.len))
            .unwrap();
        assert_eq!(
            read,
            data_end.next_multiple_of(FLASH_BLOCK as u64),
            "the data blocks"
        );
        assert_eq!(data.len(), 400);
        let got: Vec<(Vec<u8>, Vec<u8>)> =
            data.iter().map(|(k, v)| (k.to_vec(), v.to_vec())).collect();
        assert_eq!(got, all);
        drop(data);
        // A pooled buffer holding another table's bytes reads this one right.
        let (_dir2, _dev2, other) = table_set(123);
        let again = other.tables[0].read_data().unwrap();
        assert_eq!(again.len(), 123);
        assert_eq!(again.iter().nth(122).unwrap().0, b"k000122");
        // One flipped bit in a block: refused.
        let h = &table.index[2];
        let name = table.file.name().to_owned();
        let path = _dir.path().join(&name);
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[h.offset as usize + 40] ^= 1;
        std::fs::write(&path, &bytes).unwrap();
        let e = table.read_data().unwrap_err().to_string();
        assert!(e.contains("checksum"), "{e}");
    }

    #[test]
    fn a_bounded_scan_reads_its_blocks_in_one_run_and_an_unbounded_one_doubles() {
        let (_dir, dev, set) = table_set(400);
        let table = &set.tables[0];
        let per_block = table.footer.entries as usize / table.blocks();
        assert!(
            (3..=4).contains(&per_block),
            "{per_block} entries per block"
        );
        let cache = BlockCache::new(1 << 20);
        for want in [1usize, 10, 30, 40] {
            let before = dev.counters().flash_bytes_read;
            let mut it = set.iter_from(b"k000100", &cache, want);
            let mut got = vec![it.next().unwrap().unwrap().0];
            // The first read took every block the scan wants, in one run.
            let blocks = (want.div_ceil(per_block) + 1).min(MAX_READ_AHEAD);
            assert_eq!(
                it.ahead.len() + 1,
                blocks,
                "want {want}: blocks in the first read"
            );
            got.extend(it.take(want - 1).map(|e| e.unwrap().0));
            let expected: Vec<_> = (100..100 + want as u32)
                .map(|i| format!("k{i:06}").into_bytes())
                .collect();
            assert_eq!(got, expected);
            let read = (dev.counters().flash_bytes_read - before) as usize;
            // One read of the blocks wanted (plus the block holding keys before the start);
            // a scan beyond 16 blocks reads again, sized by what it still wants.
            let bound = (blocks + want.saturating_sub(MAX_READ_AHEAD * per_block) / per_block + 2)
                * FLASH_BLOCK;
            assert!(
                read <= bound,
                "want {want}: read {read} bytes, at most {bound} expected"
            );
            assert!(read >= want * 1000, "want {want}: read only {read} bytes");
        }
        // No bound: runs of 1, 2, 4, ... blocks, as before.
        let mut it = set.iter_from(b"k000200", &cache, usize::MAX);
        assert!(it.next().is_some_and(|e| e.is_ok()));
        assert!(
            it.ahead.is_empty(),
            "an unbounded scan's first read is one block"
        );
    }

    fn block(n: u8) -> Block {
        Arc::new(vec![(vec![n], vec![n; 10])])
    }

    #[test]
    fn cache_gives_a_read_block_a_second_chance_and_keeps_its_budget() {
        let cache = BlockCache::new(300);
        for i in 0..3u8 {
            cache.insert((1, usize::from(i)), block(i), 100);
        }
        assert!(cache.get(&(1, 0)).is_some());
        // Full: the oldest block was read since cached, so the next one goes.
        cache.insert((1, 3), block(3), 100);
        assert!(cache.get(&(1, 0)).is_some());
        assert!(cache.get(&(1, 1)).is_none());
        assert!(cache.get(&(1, 2)).is_some());
        assert!(cache.get(&(1, 3)).is_some());
        assert_eq!(cache.bytes(), 300);
        // Every block referenced: one pass clears the bits, then the oldest goes.
        cache.insert((2, 0), block(9), 100);
        assert_eq!(cache.bytes(), 300);
        assert!(cache.get(&(2, 0)).is_some());
        assert_eq!(
            [(1, 0), (1, 2), (1, 3)]
                .iter()
                .filter(|k| cache.get(k).is_some())
                .count(),
            2
        );
        // A block larger than the cache is not cached.
        cache.insert((3, 0), block(1), 301);
        assert!(cache.get(&(3, 0)).is_none());
    }
}
