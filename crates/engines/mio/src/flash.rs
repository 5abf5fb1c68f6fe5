//! The SSD extension (MioDB §4.1 "Supporting Memory/Storage Hierarchy", §5.4; variant
//! `mio:flash`): the data repository is multi-level sorted tables on the flash tier instead
//! of one huge pmem skiplist, so the dataset can outgrow the pmem pool. The elastic buffer
//! is unchanged; the last buffer level's oldest PMTable is *written out* as flash level-0
//! tables (what the paper's lazy copy becomes: "multi-level SSTables replace the huge
//! PMTable", the authors' `ssd_extension` branch runs LevelDB's `BuildTable` on it), and
//! flash levels are compacted the traditional way (LevelDB-style leveled compaction).
//!
//! - **Tables** are `tierkv-sstable` files `mio-NNNNNNNNNNNNNNNN.sst` (N = table number,
//!   hex) on the store's first flash device. A table maps each key to one version encoded
//!   as `u8 kind (0 put, 1 tombstone) | u64 seq | value` ([`encode_value`]), so every
//!   version keeps the seq it was written with and merges across pmem and flash order by
//!   seq, as everywhere else in the engine.
//! - **Levels**: flash level 0 holds one write-out's tables per PMTable, oldest first
//!   (different write-outs overlap); levels 1.. hold non-overlapping tables in key order.
//!   Level 0 compacts into level 1 when it holds `flash_l0_trigger` tables (its oldest, up
//!   to four tables' worth, and the level-1 tables they overlap); level i >= 1 compacts
//!   when it holds more than its limit (`flash_base` x `flash_ratio`^(i-1) bytes): one
//!   table, picked round-robin by key as LevelDB's compaction pointer does, with the tables
//!   of level i+1 it overlaps. A tombstone is dropped only where no deeper level holds the
//!   key's range. The output is published in pieces of about two tables, so a compaction
//!   needs room for a few tables only; under space pressure every level may compact.
//! - **Commit**: every output table is written with `O_DIRECT`, synced, and the directory
//!   synced, before the pmem directory (`dir.rs`, version 3) is published with the new
//!   table lists: the publish is the one commit point of a write-out (which removes the
//!   PMTable from its level in the same publish) and of a flash compaction. Replaced tables
//!   are unlinked after the publish; readers holding an older [`FlashLevels`] keep reading
//!   them through their open handles. At open, every `mio-*.sst` file the directory does
//!   not list is an orphan of a cut write-out or compaction and is removed; a listed table
//!   that is missing or damaged is `Corruption`.
//! - **Reads**: after the MemTables and the buffer levels, level 0 newest first, then one
//!   table per deeper level (its Bloom filter first), through the DRAM block cache.
//!
//! `FORMAT.md` § Flash repository has the persist order. Thread safety: [`FlashLevels`] is
//! immutable and shared by readers; [`FlashRepo`] is `Send + Sync`. Write-outs run on the
//! last buffer level's thread and flash compactions on their own thread, side by side: a
//! write-out only appends to level 0, a compaction removes only its own inputs, and each
//! applies its change to the lists current at its publish (`flash_work.rs`).

use std::collections::HashSet;
use std::iter::Peekable;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;
use tierkv_core::media::flash::FlashDevice;
use tierkv_core::{Error, Result, Tier};
use tierkv_sstable::{BlockCache, Table, TableIter, TableSet};

use crate::options::FlashShape;
use crate::skiplist::Entry;

/// Table kind byte of a put.
const PUT: u8 = 0;
/// Table kind byte of a tombstone.
const TOMBSTONE: u8 = 1;
/// Bytes before the value in a table entry's value.
pub const VALUE_HEADER: usize = 9;

/// The file name of flash table `number`.
pub fn table_name(number: u64) -> String {
    format!("mio-{number:016x}.sst")
}

/// The number in a flash table's file name (`None`: not a mio table file).
pub fn parse_table_name(name: &str) -> Option<u64> {
    let hex = name.strip_prefix("mio-")?.strip_suffix(".sst")?;
    if hex.len() != 16 {
        return None;
    }
    u64::from_str_radix(hex, 16).ok()
}

/// A version as a flash table stores it: kind, seq, value.
pub fn encode_value(seq: u64, value: Option<&[u8]>) -> Vec<u8> {
    let v = value.unwrap_or_default();
    let mut b = Vec::with_capacity(VALUE_HEADER + v.len());
    b.push(if value.is_some() { PUT } else { TOMBSTONE });
    b.extend_from_slice(&seq.to_le_bytes());
    b.extend_from_slice(v);
    b
}

/// Decodes [`encode_value`] (`None`: not one; total over untrusted bytes, fuzz target
/// `mio_flash_value`).
pub fn decode_value(b: &[u8]) -> Option<(u64, Option<&[u8]>)> {
    let (&kind, rest) = b.split_first()?;
    let seq = u64::from_le_bytes(rest.get(..8)?.try_into().ok()?);
    let value = rest.get(8..)?;
    match kind {
        PUT => Some((seq, Some(value))),
        TOMBSTONE if value.is_empty() => Some((seq, None)),
        _ => None,
    }
}

fn bad_entry(t: &Table, key: &[u8]) -> Error {
    Error::corruption(
        Tier::Flash,
        0,
        format!(
            "mio flash table {}: the entry of key {:?} is not a version",
            t.file.name(),
            String::from_utf8_lossy(key)
        ),
    )
}

/// An entry read from table `t`, decoded.
fn entry_of(t: &Table, key: Vec<u8>, raw: &[u8]) -> Result<Entry> {
    let (seq, value) = decode_value(raw).ok_or_else(|| bad_entry(t, &key))?;
    Ok(Entry {
        key,
        seq,
        value: value.map(<[u8]>::to_vec),
        height: 1,
    })
}

/// The flash tables as one reader sees them: immutable, shared through the store's
/// version.
#[derive(Debug, Default)]
pub struct FlashLevels {
    /// Level 0: one set per table, oldest first (they may overlap).
    pub l0: Vec<TableSet>,
    /// Levels 1..: non-overlapping tables in key order.
    pub deeper: Vec<TableSet>,
}

impl FlashLevels {
    /// Empty levels for `shape`.
    pub fn empty(levels: usize) -> FlashLevels {
        FlashLevels {
            l0: Vec::new(),
            deeper: (1..levels).map(|_| TableSet::default()).collect(),
        }
    }

    /// Builds the levels from their tables (level 0 oldest first; deeper levels are
    /// sorted here).
    pub fn from_tables(levels: Vec<Vec<Arc<Table>>>) -> FlashLevels {
        let mut it = levels.into_iter();
        let l0 = it
            .next()
            .unwrap_or_default()
            .into_iter()
            .map(|t| TableSet { tables: vec![t] })
            .collect();
        let deeper = it
            .map(|mut ts| {
                ts.sort_by(|a, b| a.min_key().cmp(b.min_key()));
                TableSet { tables: ts }
            })
            .collect();
        FlashLevels { l0, deeper }
    }

    /// The tables of every level (level 0 oldest first).
    pub fn tables(&self) -> Vec<Vec<Arc<Table>>> {
        let mut out = vec![self.l0.iter().flat_map(|s| s.tables.clone()).collect()];
        out.extend(self.deeper.iter().map(|s| s.tables.clone()));
        out
    }

    /// The table numbers of every level, as the directory lists them.
    pub fn numbers(&self) -> Vec<Vec<u64>> {
        self.tables()
            .iter()
            .map(|l| l.iter().map(|t| t.number).collect())
            .collect()
    }

    /// Tables per level.
    pub fn counts(&self) -> Vec<usize> {
        std::iter::once(self.l0.len())
            .chain(self.deeper.iter().map(|s| s.tables.len()))
            .collect()
    }

    /// File bytes of level `level`.
    pub fn bytes(&self, level: usize) -> u64 {
        let sum = |s: &TableSet| s.tables.iter().map(|t| t.file.len()).sum::<u64>();
        match level {
            0 => self.l0.iter().map(sum).sum(),
            l => self.deeper.get(l - 1).map_or(0, sum),
        }
    }

    /// DRAM held by the tables' indexes and filters.
    pub fn dram_bytes(&self) -> u64 {
        self.tables()
            .iter()
            .flatten()
            .map(|t| t.dram_bytes() as u64)
            .sum()
    }

    /// The newest version of `key` on flash (a tombstone included), and whether a table's
    /// filter ruled the key out somewhere.
    pub fn get(&self, key: &[u8], cache: &BlockCache) -> Result<Option<Entry>> {
        let level0 = self.l0.iter().rev().filter_map(|s| s.tables.first());
        let deeper = self.deeper.iter().filter_map(|s| s.find(key));
        for t in level0.chain(deeper) {
            if let Some(raw) = t.get(key, cache)? {
                return entry_of(t, key.to_vec(), &raw).map(Some);
            }
        }
        Ok(None)
    }

    /// One ordered stream per level-0 table and per deeper level, each from `start`;
    /// `want` (entries the caller takes at most) sizes each stream's read-ahead by the
    /// stream's share of the flash bytes: a scan's keys come from the levels about in
    /// proportion to their sizes (the deepest holds most), and sizing every stream for all
    /// of `want` read each level's blocks for the whole scan (about 160 KiB per 1-100 key
    /// YCSB-E scan of 1 KiB values over three levels, 2026-11-27).
    pub fn streams<'a>(
        &'a self,
        start: &[u8],
        cache: &'a BlockCache,
        want: usize,
    ) -> Vec<FlashStream<'a>> {
        let sets: Vec<&TableSet> = self
            .l0
            .iter()
            .chain(self.deeper.iter())
            .filter(|s| !s.tables.is_empty())
            .collect();
        let bytes = |s: &TableSet| s.tables.iter().map(|t| t.file.len()).sum::<u64>();
        let total: u64 = sets.iter().map(|s| bytes(s)).sum::<u64>().max(1);
        sets.into_iter()
            .map(|s| {
                let share = if want == usize::MAX {
                    usize::MAX
                } else {
                    let w = (want as u128 * u128::from(bytes(s))).div_ceil(u128::from(total));
                    usize::try_from(w).unwrap_or(want).clamp(1, want.max(1))
                };
                FlashStream::new(s, start, cache, share)
            })
            .collect()
    }
}

/// An ordered stream of the versions of one table set (a level-0 table or a deeper level).
pub struct FlashStream<'a> {
    it: Peekable<TableIter<'a>>,
}

fn bad_stream_entry(key: &[u8]) -> Error {
    Error::corruption(
        Tier::Flash,
        0,
        format!(
            "mio flash table: the entry of key {:?} is not a version",
            String::from_utf8_lossy(key)
        ),
    )
}

impl<'a> FlashStream<'a> {
    /// A stream over `set` from `start` (`want`: entries the caller takes at most, which
    /// sizes the read-ahead; `usize::MAX` for a compaction).
    pub fn new(set: &'a TableSet, start: &[u8], cache: &'a BlockCache, want: usize) -> Self {
        FlashStream {
            it: set.iter_from(start, cache, want).peekable(),
        }
    }

    /// The current entry's key, seq and raw value (an error read is returned once).
    fn peek(&mut self) -> Result<Option<(&[u8], &[u8])>> {
        if matches!(self.it.peek(), Some(Err(_))) {
            return match self.it.next() {
                Some(Err(e)) => Err(e),
                _ => Ok(None),
            };
        }
        Ok(match self.it.peek() {
            Some(Ok((k, raw))) => Some((k.as_slice(), raw.as_slice())),
            _ => None,
        })
    }

    /// The current entry's key copied into `key` (its old contents replaced) and its seq;
    /// `None` at the end.
    pub fn current_key_into(&mut self, key: &mut Vec<u8>) -> Result<Option<u64>> {
        match self.peek()? {
            None => Ok(None),
            Some((k, raw)) => {
                let (seq, _) = decode_value(raw).ok_or_else(|| bad_stream_entry(k))?;
                key.clear();
                key.extend_from_slice(k);
                Ok(Some(seq))
            }
        }
    }

    /// The current entry, decoded.
    pub fn current(&mut self) -> Result<Option<Entry>> {
        match self.peek()? {
            None => Ok(None),
            Some((k, raw)) => {
                let (seq, value) = decode_value(raw).ok_or_else(|| bad_stream_entry(k))?;
                Ok(Some(Entry {
                    key: k.to_vec(),
                    seq,
                    value: value.map(<[u8]>::to_vec),
                    height: 1,
                }))
            }
        }
    }

    /// Moves to the next entry.
    pub fn advance(&mut self) -> Result<()> {
        match self.it.next() {
            Some(Err(e)) => Err(e),
            _ => Ok(()),
        }
    }
}

/// The flash repository of a `mio:flash` store.
pub struct FlashRepo {
    /// The device the tables live on.
    pub dev: Arc<FlashDevice>,
    /// The DRAM block cache.
    pub cache: BlockCache,
    /// Its shape (options).
    pub shape: FlashShape,
    /// Bits per key of the tables' Bloom filters.
    pub bloom_bits: u32,
    /// The next table number (above every number a directory or a file ever used).
    pub next: AtomicU64,
    /// Per level: the largest key of the last table compacted out of it (LevelDB's
    /// compaction pointer; level 0 compacts whole and has none).
    pub pointers: Mutex<Vec<Vec<u8>>>,
    /// Key and value bytes written out of PMTables since the open, and the table-file
    /// bytes they took (block padding, index, filter, footer): the expansion the room
    /// rule applies to what the buffer will write out ([`FlashRepo::expansion`]).
    pub written_out: (AtomicU64, AtomicU64),
}

impl FlashRepo {
    /// Table-file bytes per key and value byte written out, in 1/1024ths: measured since
    /// the open, at least 1, and 2 until a MiB was written out (a 4 KiB block holds whole
    /// entries only, so an entry just over 2 KiB takes a block to itself).
    pub fn expansion(&self) -> u64 {
        let logical = self.written_out.0.load(Ordering::Acquire);
        let file = self.written_out.1.load(Ordering::Acquire);
        if logical < 1 << 20 {
            2048
        } else {
            (file.saturating_mul(1024) / logical).max(1024)
        }
    }

    /// Takes a fresh table number.
    pub fn take_number(&self) -> u64 {
        self.next.fetch_add(1, Ordering::AcqRel)
    }

    /// Writes `entries` (sorted, unique keys, encoded values) as one synced table.
    pub fn write_table(&self, entries: &[(Vec<u8>, Vec<u8>)]) -> Result<Arc<Table>> {
        let number = self.take_number();
        let name = table_name(number);
        match Table::write(&self.dev, &name, number, entries, self.bloom_bits) {
            Ok(t) => Ok(Arc::new(t)),
            Err(e) => {
                let _ = self.dev.remove_file(&name);
                Err(e)
            }
        }
    }

    /// Removes the files of `tables` (after a publish that no longer lists them, or after
    /// a failure before one), best effort: a file left behind is an orphan the next open
    /// removes.
    pub fn remove_tables(&self, tables: &[Arc<Table>]) {
        for t in tables {
            let _ = self.dev.remove_file(t.file.name());
        }
        let _ = self.dev.sync_dir();
    }

    /// Opens the tables the directory lists and removes every other `mio-*.sst` file
    /// (orphans of a cut write-out or compaction). A listed table that is missing or
    /// damaged is an error.
    pub fn open_tables(&self, numbers: &[Vec<u64>]) -> Result<Vec<Vec<Arc<Table>>>> {
        let listed: HashSet<u64> = numbers.iter().flatten().copied().collect();
        for name in self.dev.list_files() {
            if let Some(n) = parse_table_name(&name)
                && !listed.contains(&n)
            {
                self.dev.remove_file(&name)?;
            }
        }
        self.dev.sync_dir()?;
        numbers
            .iter()
            .map(|level| {
                level
                    .iter()
                    .map(|&n| {
                        let name = table_name(n);
                        let file = self.dev.open_file(&name).map_err(|e| {
                            Error::corruption(
                                Tier::Flash,
                                0,
                                format!("mio flash table {name}, listed in the directory: {e}"),
                            )
                        })?;
                        Table::open(file, n).map(Arc::new)
                    })
                    .collect()
            })
            .collect()
    }
}

/// Splits sorted entries into tables of about `target` bytes each and writes them; on a
/// failure, removes what it wrote.
pub struct TableWriter<'a> {
    repo: &'a FlashRepo,
    target: u64,
    buf: Vec<(Vec<u8>, Vec<u8>)>,
    bytes: u64,
    /// Tables written so far.
    pub out: Vec<Arc<Table>>,
}

impl<'a> TableWriter<'a> {
    /// A writer of tables of about `target` bytes.
    pub fn new(repo: &'a FlashRepo, target: u64) -> TableWriter<'a> {
        TableWriter {
            repo,
            target,
            buf: Vec::new(),
            bytes: 0,
            out: Vec::new(),
        }
    }

    /// Bytes added since the last table was cut, plus those of the tables written.
    pub fn bytes_written(&self) -> u64 {
        self.bytes + self.out.iter().map(|t| t.file.len()).sum::<u64>()
    }

    /// Adds the next entry (keys ascending).
    pub fn add(&mut self, key: Vec<u8>, value: Vec<u8>) -> Result<()> {
        self.bytes += (key.len() + value.len() + 6) as u64;
        self.buf.push((key, value));
        if self.bytes >= self.target {
            self.cut()?;
        }
        Ok(())
    }

    fn cut(&mut self) -> Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        match self.repo.write_table(&self.buf) {
            Ok(t) => {
                self.out.push(t);
                self.buf.clear();
                self.bytes = 0;
                Ok(())
            }
            Err(e) => {
                self.abandon();
                Err(e)
            }
        }
    }

    /// Writes what is left and syncs the directory; returns the tables.
    pub fn finish(mut self) -> Result<Vec<Arc<Table>>> {
        self.cut()?;
        if let Err(e) = self.repo.dev.sync_dir() {
            self.abandon();
            return Err(e);
        }
        Ok(std::mem::take(&mut self.out))
    }

    /// Ends a run that fed this writer: `Ok(true)` (it ran to its end) writes what is left
    /// and returns the tables; `Ok(false)` (stopped: the store is closing) and an error
    /// remove what was written.
    pub fn conclude(mut self, ran: Result<bool>) -> Result<Option<Vec<Arc<Table>>>> {
        match ran {
            Ok(true) => self.finish().map(Some),
            Ok(false) => {
                self.abandon();
                Ok(None)
            }
            Err(e) => {
                self.abandon();
                Err(e)
            }
        }
    }

    /// Removes every table written so far.
    pub fn abandon(&mut self) {
        let out = std::mem::take(&mut self.out);
        self.repo.remove_tables(&out);
    }
}

/// Flash bytes kept free for compactions (`flash_room`). A compaction's inputs leave with
/// its last piece, so it holds its inputs' bytes twice at most: at most four tables of
/// level 0, or one table of a deeper level (`flash_work.rs`); its output is published in
/// pieces of about two tables, cut between next-level tables, which free the next-level
/// tables they replace: a piece holds two tables, the next-level table it was inside of
/// at the threshold, and the table being written. Four plus four tables, and one for
/// slack.
pub fn compaction_headroom(shape: &FlashShape) -> u64 {
    (crate::flash_work::L0_INPUT_TABLES + 5).saturating_mul(shape.sst_size)
}

/// What a flash compaction should do now.
#[derive(Debug, PartialEq, Eq)]
pub enum FlashChoice {
    /// Nothing.
    Idle,
    /// Merge level `level`'s tables at `inputs` (indexes into [`FlashLevels::tables`]'s
    /// level) with the overlapping tables of the next level.
    Compact {
        /// The level.
        level: usize,
        /// The indexes of its input tables.
        inputs: Vec<usize>,
    },
}

/// The policy (pure): the level whose score is highest, if at least 1 — level 0's score is
/// its table count over the trigger, a deeper level's its bytes over its limit; the last
/// level never compacts. Under `pressure` (flash nearly full, `flash_room`) any level but
/// the last that holds a table qualifies: data moves down until tombstones meet what they
/// delete and both go (each such compaction moves bytes strictly deeper, so this ends
/// with everything in the last level). `pointer` is level `level`'s compaction pointer.
pub fn choose(
    counts: &[usize],
    bytes: &[u64],
    shape: &FlashShape,
    pointers: &[Vec<u8>],
    min_keys: &[Vec<Vec<u8>>],
    pressure: bool,
) -> FlashChoice {
    let last = counts.len().saturating_sub(1);
    let mut best: Option<(f64, usize)> = None;
    for level in 0..last {
        let score = if level == 0 {
            counts.first().copied().unwrap_or(0) as f64 / shape.l0_trigger as f64
        } else {
            bytes.get(level).copied().unwrap_or(0) as f64 / shape.level_limit(level) as f64
        };
        let due = score >= 1.0 || pressure && counts.get(level).copied().unwrap_or(0) > 0;
        if due && best.is_none_or(|(s, _)| score > s) {
            best = Some((score, level));
        }
    }
    let Some((_, level)) = best else {
        return FlashChoice::Idle;
    };
    let n = counts.get(level).copied().unwrap_or(0);
    if level == 0 {
        return FlashChoice::Compact {
            level,
            inputs: (0..n).collect(),
        };
    }
    // Round-robin by key: the first table that starts after the pointer, else the first.
    let keys = min_keys.get(level).map(Vec::as_slice).unwrap_or_default();
    let pointer = pointers.get(level).map(Vec::as_slice).unwrap_or_default();
    let pick = keys
        .iter()
        .position(|k| pointer.is_empty() || k.as_slice() > pointer)
        .unwrap_or(0);
    FlashChoice::Compact {
        level,
        inputs: vec![pick],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_round_trip_and_garbage_is_refused() {
        assert_eq!(
            decode_value(&encode_value(7, Some(b"abc"))),
            Some((7, Some(&b"abc"[..])))
        );
        assert_eq!(decode_value(&encode_value(9, None)), Some((9, None)));
        assert_eq!(
            decode_value(&encode_value(9, Some(b""))),
            Some((9, Some(&b""[..])))
        );
        assert_eq!(decode_value(&[]), None);
        assert_eq!(decode_value(&[0, 1, 2]), None);
        assert_eq!(decode_value(&[2, 0, 0, 0, 0, 0, 0, 0, 0]), None);
        let mut t = encode_value(1, None);
        t.push(5);
        assert_eq!(decode_value(&t), None, "a tombstone with a value");
    }

    #[test]
    fn table_names_round_trip() {
        assert_eq!(parse_table_name(&table_name(0x1f)), Some(0x1f));
        assert_eq!(parse_table_name("mio-1f.sst"), None);
        assert_eq!(parse_table_name("p00-000000000000001f.sst"), None);
    }

    #[test]
    fn policy_compacts_level_0_at_its_trigger_and_deeper_levels_over_their_limit() {
        let shape = FlashShape {
            sst_size: 1 << 10,
            l0_trigger: 4,
            base: 10 << 10,
            ratio: 10,
            levels: 4,
            block_cache: None,
        };
        let none: Vec<Vec<u8>> = vec![Vec::new(); 4];
        let keys = |l1: &[&str]| {
            vec![
                Vec::new(),
                l1.iter().map(|k| k.as_bytes().to_vec()).collect(),
                Vec::new(),
                Vec::new(),
            ]
        };
        let c = |counts: &[usize], bytes: &[u64], ptr: &[Vec<u8>], k: &[Vec<Vec<u8>>]| {
            choose(counts, bytes, &shape, ptr, k, false)
        };
        assert_eq!(
            c(
                &[3, 2, 0, 0],
                &[3 << 10, 2 << 10, 0, 0],
                &none,
                &keys(&["a", "m"])
            ),
            FlashChoice::Idle
        );
        assert_eq!(
            c(
                &[4, 2, 0, 0],
                &[4 << 10, 2 << 10, 0, 0],
                &none,
                &keys(&["a", "m"])
            ),
            FlashChoice::Compact {
                level: 0,
                inputs: vec![0, 1, 2, 3]
            }
        );
        // Level 1 over its 10 KiB: the table after the pointer "c" is "m" (index 1); past
        // the last table the pointer wraps to the first.
        let mut ptr = none.clone();
        ptr[1] = b"c".to_vec();
        assert_eq!(
            c(
                &[0, 12, 0, 0],
                &[0, 12 << 10, 0, 0],
                &ptr,
                &keys(&["a", "m"])
            ),
            FlashChoice::Compact {
                level: 1,
                inputs: vec![1]
            }
        );
        ptr[1] = b"z".to_vec();
        assert_eq!(
            c(
                &[0, 12, 0, 0],
                &[0, 12 << 10, 0, 0],
                &ptr,
                &keys(&["a", "m"])
            ),
            FlashChoice::Compact {
                level: 1,
                inputs: vec![0]
            }
        );
        // The last level never compacts, however large.
        assert_eq!(
            c(&[0, 0, 0, 99], &[0, 0, 0, 1 << 40], &none, &keys(&[])),
            FlashChoice::Idle
        );
        // Under pressure a level under its limit compacts too (the fullest first); the last
        // level still never does.
        let under = [0usize, 1, 1, 5];
        let ub = [0u64, 1 << 10, 1 << 10, 1 << 20];
        assert_eq!(c(&under, &ub, &none, &keys(&["a"])), FlashChoice::Idle);
        assert_eq!(
            choose(&under, &ub, &shape, &none, &keys(&["a"]), true),
            FlashChoice::Compact {
                level: 1,
                inputs: vec![0]
            }
        );
        assert_eq!(
            choose(
                &[0, 0, 0, 5],
                &[0, 0, 0, 1 << 20],
                &shape,
                &none,
                &keys(&[]),
                true
            ),
            FlashChoice::Idle
        );
        // The highest score wins: level 2 at 2x its 100 KiB beats level 0 at 1x.
        assert_eq!(
            c(
                &[4, 0, 9, 0],
                &[4 << 10, 0, 200 << 10, 0],
                &none,
                &[Vec::new(), Vec::new(), vec![b"k".to_vec()], Vec::new()]
            ),
            FlashChoice::Compact {
                level: 2,
                inputs: vec![0]
            }
        );
    }
}
