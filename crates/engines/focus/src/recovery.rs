//! Creating a store and recovering one (FORMAT.md § Recovery; the paper describes no
//! recovery, §V leaves it out).
//!
//! Recovery, in order:
//! 1. the superblock (root word 0) and the allocator region;
//! 2. every chunk the allocator holds under a FOCUS tag: a chunk whose header does not
//!    check was allocated but never initialised (a crash in between) and is freed; in the
//!    others records are read from the first until one fails (a kind byte that is no
//!    record's, the chunk's epoch, lengths, or either checksum): that is the end of the
//!    chunk's records, since a chunk's records are persisted one after another;
//! 3. the catalog from the schema records;
//! 4. records of write batches whose commit record is not valid are dropped (FORMAT.md
//!    § Write batches); then per key the record with the highest sequence number; a tombstone leaves the key
//!    out; a delta's chain is followed through `prev` (each entry must be a recovered
//!    record of the same key with a lower sequence number, down to a complete record), which
//!    also restores its restore-point counter (the deltas on the chain);
//! 5. the index, built in key order; sequence numbers continue above the highest seen;
//!    chunks that still have room become the shards' open chunks again.
//!
//! Thread safety: runs before the store is shared.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use tierkv_core::common::index::ConcurrentIndex;
use tierkv_core::media::pmem::{PmemAllocator, PmemPool};
use tierkv_core::schema::codec::decode_schema_bytes;
use tierkv_core::{Error, Limits, Result, Schema, Tier};

use crate::format::chunk::{ChunkHeader, ChunkKind, HEADER_LEN as CHUNK_HEADER_LEN};
use crate::format::record::{self, HEADER_LEN, RecordHeader, RecordKind};
use crate::format::superblock::{self, NEXT_EPOCH_OFF, ROOT_SUPERBLOCK, Superblock};
use crate::options::FocusOptions;
use crate::plog::{Active, PLog};
use crate::store::{Entry, FocusStore, index_key};

/// Formats a new store in `pool`. The root word is written last: a crash before it leaves
/// a pool that `open` refuses (and the facade re-creates).
pub fn create(pool: Arc<PmemPool>, opts: FocusOptions, limits: Limits) -> Result<FocusStore> {
    let sb_off = pool.data_start();
    let alloc_off = sb_off + 4096;
    let region = pool
        .len()
        .checked_sub(alloc_off)
        .ok_or_else(|| Error::no_space(Tier::Pmem, "the pool is too small for a FOCUS store"))?;
    let chunk_size = opts.chunk_size_for(pool.len());
    let alloc = PmemAllocator::format(pool.clone(), alloc_off, region, chunk_size)?;
    let sb = Superblock {
        chunk_size,
        alloc_off,
    };
    pool.write_persist(sb_off, &sb.encode())?;
    pool.store_u64(sb_off + NEXT_EPOCH_OFF, 1)?;
    pool.persist(sb_off + NEXT_EPOCH_OFF, 8)?;
    pool.set_root(ROOT_SUPERBLOCK, sb_off)?;
    let plog = PLog::new(pool, alloc, sb_off, 1, opts.log_shards);
    FocusStore::assemble(plog, Vec::new(), opts, limits, 1)
}

/// One valid record found by the scan.
#[derive(Clone, Debug)]
struct Found {
    kind: RecordKind,
    seq: u64,
    prev: u64,
    ikey: Vec<u8>,
    /// The write batch it belongs to (0: none).
    batch: u64,
    /// Its chunk.
    chunk: u64,
}

/// How a record of a chunk checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Checked {
    /// Both checksums match.
    Valid,
    /// The header checksum matches, the body's does not: a torn append, or a complete
    /// record in the middle of an in-place merge (FORMAT.md § Merge).
    BodyUnchecked,
}

/// Reads the records of the chunk at `off` (header `h`); returns where the last record
/// whose header checks ends, and whether that record's body checked too.
pub(crate) fn scan_chunk(
    pool: &PmemPool,
    off: u64,
    size: u64,
    h: ChunkHeader,
    mut each: impl FnMut(u64, &RecordHeader, &[u8], Checked) -> Result<()>,
) -> Result<(u64, Checked)> {
    let mut last = Checked::Valid;
    let mut at = CHUNK_HEADER_LEN as u64;
    while at + HEADER_LEN as u64 <= size {
        let Some(rh) = RecordHeader::decode(pool.read(off + at, HEADER_LEN)?, off + at)? else {
            break;
        };
        let len = rh.total_len();
        if rh.epoch != h.epoch || at + len > size {
            break;
        }
        let rec = pool.read(off + at, len as usize)?;
        if record::verify_header(rec, &rh, off + at).is_err() {
            break;
        }
        last = match record::verify(rec, &rh, off + at) {
            Ok(()) => Checked::Valid,
            Err(_) => Checked::BodyUnchecked,
        };
        each(off + at, &rh, rec, last)?;
        at += len;
    }
    Ok((at, last))
}

/// Opens the store in `pool`, recovering it.
pub fn open(pool: Arc<PmemPool>, mut opts: FocusOptions, limits: Limits) -> Result<FocusStore> {
    let started = Instant::now();
    let sb_off = pool.root(ROOT_SUPERBLOCK)?;
    if sb_off == 0 {
        return Err(Error::corruption(
            Tier::Pmem,
            0,
            "the pool holds no focus store (its creation never completed)",
        ));
    }
    let sb = Superblock::decode(pool.read(sb_off, superblock::LEN as usize)?, sb_off)?;
    let next_epoch = pool.load_u64(sb_off + NEXT_EPOCH_OFF)?;
    let alloc = PmemAllocator::open(pool.clone(), sb.alloc_off)?;
    if opts.chunk_size.is_some_and(|c| c != sb.chunk_size) {
        return Err(Error::invalid(format!(
            "this focus store was created with chunk_size {}",
            sb.chunk_size
        )));
    }
    if alloc.chunk_size() != sb.chunk_size {
        return Err(Error::corruption(
            Tier::Pmem,
            sb_off,
            "the allocator's chunk size is not the superblock's",
        ));
    }
    opts.chunk_size = Some(sb.chunk_size);
    let mut records: HashMap<u64, Found> = HashMap::new();
    let mut schemas: Vec<Schema> = Vec::new();
    let mut open_chunks: Vec<(ChunkKind, Active)> = Vec::new();
    let mut sealed: Vec<(ChunkKind, Active)> = Vec::new();
    // Complete records whose body did not check: kept only if a delta points at them.
    let mut unchecked: Vec<u64> = Vec::new();
    let mut max_seq = 0;
    // The batch ids whose commit record is valid (FORMAT.md § Write batches).
    let mut commits: std::collections::HashSet<u64> = std::collections::HashSet::new();
    for kind in ChunkKind::ALL {
        for a in alloc.iter_chunks(kind.tag()).collect::<Vec<_>>() {
            let Some(h) = ChunkHeader::decode(pool.read(a.offset, CHUNK_HEADER_LEN)?, a.offset)?
            else {
                // Allocated, never initialised: a crash between alloc and header.
                alloc.free_chunk(a.offset)?;
                continue;
            };
            if h.kind != kind || u64::from(h.epoch) >= next_epoch {
                return Err(Error::corruption(
                    Tier::Pmem,
                    a.offset,
                    "a chunk header that does not match its allocation or the superblock",
                ));
            }
            let (end, last) = scan_chunk(&pool, a.offset, a.size, h, |off, rh, rec, checked| {
                if checked == Checked::BodyUnchecked {
                    if rh.kind != RecordKind::Row {
                        return Ok(());
                    }
                    unchecked.push(off);
                }
                let key = rec
                    .get(HEADER_LEN..HEADER_LEN + usize::from(rh.key_len))
                    .unwrap_or_default();
                if rh.kind == RecordKind::Schema {
                    let body = rec.get(rh.body_off() as usize..).unwrap_or_default();
                    let body = body.get(..rh.body_len as usize).unwrap_or_default();
                    schemas.push(decode_schema_bytes(body)?);
                    return Ok(());
                }
                max_seq = max_seq.max(rh.seq);
                if rh.kind == RecordKind::Commit {
                    commits.insert(rh.seq);
                    return Ok(());
                }
                records.insert(
                    off,
                    Found {
                        kind: rh.kind,
                        seq: rh.seq,
                        prev: rh.prev,
                        ikey: index_key(rh.schema, key),
                        batch: rh.batch,
                        chunk: a.offset,
                    },
                );
                Ok(())
            })?;
            let act = Active {
                off: a.offset,
                epoch: h.epoch,
                used: end,
            };
            // A chunk ending in a record whose body did not check is not appended to.
            if last == Checked::Valid {
                open_chunks.push((kind, act));
            } else {
                sealed.push((kind, act));
            }
        }
    }
    let plog = PLog::new(pool, alloc, sb_off, next_epoch, opts.log_shards);
    for (kind, a) in open_chunks.iter().chain(&sealed) {
        plog.register(a.off, *kind, a.epoch);
    }
    drop_torn_rows(&mut records, &unchecked);
    // IMPORTANT: the members of a batch without a valid commit record were never
    // acknowledged; they leave before the newest version of each key is chosen.
    let before = records.len();
    records.retain(|_, f| f.batch == 0 || commits.contains(&f.batch));
    let uncommitted = (before - records.len()) as u64;
    // Chunks with room for a small record are appended to again.
    open_chunks.sort_by_key(|(_, a)| std::cmp::Reverse(a.used));
    for (kind, a) in open_chunks {
        if a.used + 256 <= plog.chunk_size() {
            plog.adopt(kind, a);
        }
    }
    schemas.sort_by_key(|s| s.id);
    let n_records = records.len() as u64;
    let store = FocusStore::assemble(plog, schemas, opts, limits, max_seq + 1)?;
    build_index(&store, &records)?;
    for f in records.values().filter(|f| f.batch != 0) {
        store.batches.add(f.batch, f.chunk);
    }
    store.counters.recovered_records.set(n_records);
    store.counters.uncommitted_dropped.set(uncommitted);
    store
        .counters
        .recovery_micros
        .set(started.elapsed().as_micros() as u64);
    Ok(store)
}

/// Keeps a complete record whose body checksum failed only when a valid delta of its key
/// points at it (a merge was writing it; the deltas hold every field it touched);
/// otherwise it was a torn append and is dropped.
fn drop_torn_rows(records: &mut HashMap<u64, Found>, unchecked: &[u64]) {
    let pointed: std::collections::HashSet<(u64, &[u8])> = records
        .values()
        .filter(|f| f.kind == RecordKind::Delta)
        .map(|f| (f.prev, f.ikey.as_slice()))
        .collect();
    let torn: Vec<u64> = unchecked
        .iter()
        .copied()
        .filter(|off| {
            records
                .get(off)
                .is_none_or(|f| !pointed.contains(&(*off, f.ikey.as_slice())))
        })
        .collect();
    for off in torn {
        records.remove(&off);
    }
}

/// Steps 4 and 5: newest version per key, chains checked, the index built.
fn build_index(store: &FocusStore, records: &HashMap<u64, Found>) -> Result<()> {
    let mut newest: HashMap<&[u8], (u64, u64)> = HashMap::new();
    for (off, f) in records {
        let e = newest.entry(&f.ikey).or_insert((f.seq, *off));
        if f.seq >= e.0 {
            *e = (f.seq, *off);
        }
    }
    let mut entries: Vec<(&[u8], Arc<Entry>)> = Vec::with_capacity(newest.len());
    for (ikey, (_, off)) in newest {
        let Some(f) = records.get(&off) else { continue };
        match f.kind {
            RecordKind::Tombstone => continue,
            RecordKind::Row => entries.push((ikey, Entry::new(off, 0))),
            _ => {
                let deltas = chain_deltas(records, off, f)?;
                entries.push((ikey, Entry::new(off, deltas)));
            }
        }
    }
    entries.sort_by(|a, b| a.0.cmp(b.0));
    store.index.insert_sorted(&mut entries.into_iter());
    Ok(())
}

/// Follows a delta's chain to its complete record; the deltas on it.
fn chain_deltas(records: &HashMap<u64, Found>, tail: u64, f: &Found) -> Result<u32> {
    let (mut cur, mut deltas) = (f, 0u32);
    loop {
        match cur.kind {
            RecordKind::Row => return Ok(deltas),
            RecordKind::Delta => {
                deltas += 1;
                let next = records
                    .get(&cur.prev)
                    .filter(|p| p.ikey == f.ikey && p.seq < cur.seq);
                cur = next.ok_or_else(|| {
                    Error::corruption(
                        Tier::Pmem,
                        tail,
                        "a delta chain that breaks before its complete record",
                    )
                })?;
            }
            _ => {
                return Err(Error::corruption(
                    Tier::Pmem,
                    tail,
                    "a delta chain through a tombstone",
                ));
            }
        }
    }
}
