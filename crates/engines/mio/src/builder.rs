//! A PMTable built in place on pmem, node by node in skiplist order: the output of a
//! copying merge (`compaction=copy`, `compact.rs`). Each node is encoded once, into a
//! small DRAM piece that is written to the pool when it fills (one copy of the key and
//! value, no table-sized DRAM arena); a node's links are set as the next node of each
//! level is appended — in the piece while the earlier node is still there, by one 8-byte
//! store into the pool once it was written. The table takes runs of chunks as it grows
//! (`RUN_BYTES` or a node's size, whichever is more), so it never holds much more pmem
//! than its nodes, and needs no contiguous room as large as its inputs.
//!
//! Persist order (`FORMAT.md` § Copying merge): every node and link is written, then each
//! run's written bytes are persisted (label `copy-table`); the table is published by the
//! caller afterwards. Until then its runs are unreferenced `TAG_TABLE` runs: a crash
//! leaves them to recovery's leak collection, and a failed build frees them.
//!
//! Thread safety: one thread (the level's compaction thread) owns a builder.

use std::sync::Arc;

use tierkv_core::{Error, Result, Tier};

use crate::bloom::Bloom;
use crate::dir::{Run, TableMeta};
use crate::node::{self, HEAD_LEN, Kind, MAX_HEIGHT, link_off};
use crate::seek_index::SeekIndex;
use crate::skiplist::Entry;
use crate::space::Debt;
use crate::table::{PoolSource, Shared, TAG_TABLE, Table, TableShape};

/// Bytes of DRAM a builder encodes nodes into before it writes them to the pool.
const PIECE: usize = 1 << 20;
/// The most pmem a builder takes in one run (its inputs' size when smaller).
const RUN_BYTES: u64 = 8 << 20;

/// A table being built (see the module doc).
pub struct TableBuilder<'a> {
    sh: &'a Arc<Shared>,
    /// Chunks of a run taken for ordinary nodes.
    run_chunks: u64,
    /// The runs taken, each with the bytes written into it.
    runs: Vec<(Run, u64)>,
    /// Pool offset where the next node goes, and where the current run ends.
    next: u64,
    end: u64,
    /// Encoded nodes not yet in the pool: they belong at `piece_at`.
    piece: Vec<u8>,
    piece_at: u64,
    /// Per level, the pool offset of the last node linked at it (the head at first).
    tails: [u64; MAX_HEIGHT],
    bloom: Option<Bloom>,
    entries: u64,
    /// False until `finish` hands the runs to a table.
    done: bool,
}

impl<'a> TableBuilder<'a> {
    /// A builder of a table of `shape` holding at most about `want` bytes of nodes: takes
    /// its first run and places the head node.
    pub fn new(sh: &'a Arc<Shared>, shape: TableShape, want: u64) -> Result<TableBuilder<'a>> {
        let cs = sh.alloc.chunk_size();
        let run = (want + HEAD_LEN as u64).clamp(cs, RUN_BYTES.max(cs));
        let mut b = TableBuilder {
            sh,
            run_chunks: run.div_ceil(cs),
            runs: Vec::new(),
            next: 0,
            end: 0,
            piece: Vec::with_capacity(PIECE.min(run as usize) + HEAD_LEN),
            piece_at: 0,
            tails: [0; MAX_HEIGHT],
            bloom: (shape.bloom_keys > 0).then(|| Bloom::new(shape.bloom_keys, shape.bloom_bits)),
            entries: 0,
            done: false,
        };
        b.new_run(HEAD_LEN as u64)?;
        let head = b.next;
        // The head: seq_kind 0 (no seq, no kind), its height, every link empty.
        let [_, w1] = node::encode_header(0, Kind::Put, 0, MAX_HEIGHT, 0);
        b.piece.extend_from_slice(&0u64.to_le_bytes());
        b.piece.extend_from_slice(&w1.to_le_bytes());
        b.piece.resize(HEAD_LEN, 0);
        b.next += HEAD_LEN as u64;
        b.tails = [head; MAX_HEIGHT];
        Ok(b)
    }

    /// Appends the node of `e` (a tombstone when it has no value, at its height) after
    /// every node so far (the caller feeds them in skiplist order).
    pub fn append(&mut self, e: &Entry) -> Result<()> {
        let (key, height, seq) = (e.key.as_slice(), e.height, e.seq);
        let (kind, value) = match &e.value {
            Some(v) => (Kind::Put, v.as_slice()),
            None => (Kind::Delete, &[][..]),
        };
        if !(1..=MAX_HEIGHT).contains(&height) {
            return Err(Error::corruption(
                Tier::Pmem,
                0,
                "a node height out of range",
            ));
        }
        let len = node::node_len(key.len(), value.len(), height) as u64;
        if self.next + len > self.end {
            self.new_run(len)?;
        }
        let at = self.next;
        let start = self.piece.len();
        let [w0, w1] = node::encode_header(seq, kind, key.len(), height, value.len());
        self.piece.extend_from_slice(&w0.to_le_bytes());
        self.piece.extend_from_slice(&w1.to_le_bytes());
        self.piece.resize(start + node::LINKS_OFF + 8 * height, 0);
        self.piece.extend_from_slice(key);
        self.piece.extend_from_slice(value);
        self.piece.resize(start + len as usize, 0);
        for level in 0..height {
            self.link(level, at)?;
        }
        self.next += len;
        self.entries += 1;
        if let Some(b) = self.bloom.as_mut() {
            b.insert(key);
        }
        if self.piece.len() >= PIECE {
            self.write_piece()?;
        }
        Ok(())
    }

    /// Nodes appended so far.
    pub fn entries(&self) -> u64 {
        self.entries
    }

    /// Persists every node and hands the runs to a new table `id` (not yet in the
    /// directory); `None` (every run freed) if no node was appended.
    pub fn finish(mut self, id: u64, max_seq: u64, cost: Debt) -> Result<Option<Table>> {
        self.write_piece()?;
        if self.entries == 0 {
            return Ok(None);
        }
        if let Some((run, used)) = self.runs.last_mut() {
            *used = self.next - run.off;
        }
        for (run, used) in &self.runs {
            self.sh.persist("copy-table", run.off, *used as usize)?;
        }
        let head = self.runs.first().map_or(0, |(r, _)| r.off);
        let index = SeekIndex::build(&PoolSource(&self.sh.pool), head)?;
        let written: u64 = self.runs.iter().map(|(_, used)| used).sum();
        self.sh.counters.table_bytes_written.add(written);
        let cs = self.sh.alloc.chunk_size();
        let allocs: Vec<Run> = self.runs.iter().map(|(r, _)| *r).collect();
        let meta = TableMeta {
            id,
            head,
            entries: self.entries,
            max_seq,
            allocs: allocs.clone(),
        };
        let bytes = allocs.iter().map(|r| r.chunks * cs).sum();
        self.done = true;
        Ok(Some(Table::assemble(
            self.sh,
            meta,
            self.bloom.take(),
            bytes,
            cost,
            index,
        )))
    }

    /// Points `level`'s last node at the node at `at`.
    fn link(&mut self, level: usize, at: u64) -> Result<()> {
        let slot = self.tails[level] + link_off(level);
        match slot.checked_sub(self.piece_at) {
            Some(i) if (i as usize) + 8 <= self.piece.len() => {
                let i = i as usize;
                self.piece[i..i + 8].copy_from_slice(&at.to_le_bytes());
            }
            _ => self.sh.pool.store_u64(slot, at)?,
        }
        self.tails[level] = at;
        Ok(())
    }

    /// Writes the piece to the pool where it belongs.
    fn write_piece(&mut self) -> Result<()> {
        if !self.piece.is_empty() {
            self.sh.pool.write(self.piece_at, &self.piece)?;
            self.piece_at += self.piece.len() as u64;
            self.piece.clear();
        }
        Ok(())
    }

    /// Closes the current run and takes the next, large enough for a node of `len` bytes.
    fn new_run(&mut self, len: u64) -> Result<()> {
        self.write_piece()?;
        let cs = self.sh.alloc.chunk_size();
        let chunks = self.run_chunks.max(len.div_ceil(cs));
        let off = self.sh.alloc.alloc_chunks(TAG_TABLE, chunks)?;
        if let Some((run, used)) = self.runs.last_mut() {
            *used = self.next - run.off;
        }
        self.runs.push((Run { off, chunks }, 0));
        self.next = off;
        self.end = off + chunks * cs;
        self.piece_at = off;
        Ok(())
    }
}

impl Drop for TableBuilder<'_> {
    /// Frees the runs of a build that did not finish (an error, or an empty table).
    fn drop(&mut self) {
        if !self.done {
            for (r, _) in &self.runs {
                let _ = self.sh.alloc.free_chunk(r.off);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::skiplist;
    use crate::table::tests::shared;

    fn key(i: u32) -> Vec<u8> {
        format!("key{i:06}").into_bytes()
    }

    fn value(i: u32) -> Vec<u8> {
        vec![(i % 251) as u8; 50 + (i as usize * 37) % 700]
    }

    fn entry(i: u32, value: Option<Vec<u8>>, height: usize) -> Entry {
        Entry {
            key: key(i),
            seq: u64::from(i) + 1,
            value,
            height,
        }
    }

    fn height(i: u32) -> usize {
        1 + (i.wrapping_mul(2_654_435_761) >> 28) as usize % 5
    }

    /// Builds `n` nodes with a builder asked for `want` bytes; checks the table against
    /// what was appended: every level in order holding exactly its nodes, every node in
    /// the table's runs, every key found with its value and admitted by the filter, the
    /// written bytes counted.
    fn build_and_check(n: u32, want: u64) -> Table {
        let (_d, sh) = shared(64 << 20);
        let shape = TableShape {
            bloom_keys: 4096,
            bloom_bits: 10,
        };
        let mut b = TableBuilder::new(&sh, shape, want).unwrap();
        for i in 0..n {
            b.append(&entry(i, (i % 7 != 3).then(|| value(i)), height(i)))
                .unwrap();
        }
        let t = b.finish(9, u64::from(n), Debt::default()).unwrap().unwrap();
        let cs = sh.alloc.chunk_size();
        let inside = |off: u64, len: u64| {
            t.meta
                .allocs
                .iter()
                .any(|r| off >= r.off && off + len <= r.off + r.chunks * cs)
        };
        assert!(inside(t.meta.head, HEAD_LEN as u64));
        let src = PoolSource(&sh.pool);
        for level in 0..MAX_HEIGHT {
            let mut seen = Vec::new();
            skiplist::walk_level(&src, t.meta.head, level, |at, h, k| {
                assert!(inside(at, h.size() as u64), "node at {at} outside the runs");
                seen.push(k.to_vec());
                Ok(())
            })
            .unwrap();
            let want: Vec<Vec<u8>> = (0..n).filter(|i| height(*i) > level).map(key).collect();
            assert_eq!(seen, want, "level {level}");
        }
        for i in 0..n {
            let e = skiplist::get(&src, t.meta.head, &key(i)).unwrap().unwrap();
            let want = (i % 7 != 3).then(|| value(i));
            assert_eq!(
                (e.seq, e.value, e.height),
                (u64::from(i) + 1, want, height(i))
            );
            assert!(t.may_contain(&key(i)));
        }
        assert_eq!(t.meta.entries, u64::from(n));
        let used: u64 = HEAD_LEN as u64
            + (0..n)
                .map(|i| {
                    let v = if i % 7 == 3 { 0 } else { value(i).len() };
                    node::node_len(key(i).len(), v, height(i)) as u64
                })
                .sum::<u64>();
        let written = sh.counters.table_bytes_written.get();
        assert_eq!(
            written, used,
            "bytes counted as written vs bytes of the nodes"
        );
        t
    }

    /// Small runs (one 4 KiB chunk each): most links cross from one run into the next
    /// and are set by a store into the pool.
    #[test]
    fn a_table_built_over_many_runs_reads_back_whole() {
        let t = build_and_check(600, 1);
        assert!(t.meta.allocs.len() > 50, "{} runs", t.meta.allocs.len());
    }

    /// One run larger than the DRAM piece: the piece is written mid-run, and links from
    /// nodes already written are set in the pool.
    #[test]
    fn a_table_larger_than_its_piece_reads_back_whole() {
        let t = build_and_check(4000, 8 << 20);
        assert_eq!(t.meta.allocs.len(), 1);
        assert!(t.bytes > PIECE as u64);
    }

    /// A build that does not finish (an error, or nothing appended) leaves no run taken.
    #[test]
    fn an_unfinished_or_empty_build_frees_its_runs() {
        let (_d, sh) = shared(16 << 20);
        let shape = TableShape {
            bloom_keys: 0,
            bloom_bits: 10,
        };
        let free = sh.alloc.stats().free_bytes;
        let mut b = TableBuilder::new(&sh, shape, 1).unwrap();
        for i in 0..100 {
            b.append(&entry(i, Some(value(i)), 2)).unwrap();
        }
        assert!(sh.alloc.stats().free_bytes < free);
        drop(b);
        assert_eq!(sh.alloc.stats().free_bytes, free);
        let b = TableBuilder::new(&sh, shape, 1 << 20).unwrap();
        assert!(b.finish(1, 0, Debt::default()).unwrap().is_none());
        assert_eq!(sh.alloc.stats().free_bytes, free);
        let mut b = TableBuilder::new(&sh, shape, 1).unwrap();
        assert!(b.append(&entry(1, None, MAX_HEIGHT + 1)).is_err());
    }
}
