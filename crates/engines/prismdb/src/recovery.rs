//! Recovery (PrismDB §6 "Crash consistency and recovery", FORMAT.md §3 "Recovery"): the
//! authors' code never rebuilt its index (the rebuild is commented out); this is ours.
//!
//! 1. every chunk tagged as a slab is checked (its header); bad ones are freed; the
//!    slots of pending write batches are zeroed and their record runs freed
//!    ([`crate::batch::roll_back`]);
//! 2. per partition, in parallel: the table manifest is loaded (orphans removed), then
//!    every slot of its slabs is decoded; for each key the live object with the highest
//!    timestamp wins, losers are freed durably; the index, the free lists, the buckets and
//!    the timestamp clock are rebuilt; slabs with no live object are released.
//!
//! Thread safety: runs at open, before the store is shared; partitions are recovered on
//! scoped threads, each touching only its own partition.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use tierkv_core::{Error, Result, Tier};

use crate::format::{CHUNK_HEADER_LEN, SLAB_TAG, decode_chunk_header, decode_object};
use crate::manifest;
use crate::partition::{Loc, Partition};
use crate::shared::Shared;
use crate::table::{Table, TableSet, table_name};

/// A slab chunk found at recovery: (offset, class).
type FoundChunk = (u64, u8);

/// Recovers every partition of `sh` (whose partitions are empty).
pub fn recover(sh: &Shared) -> Result<()> {
    let chunks = classify_chunks(sh)?;
    // Pending write batches are voided before any slab is scanned (FORMAT.md §3 "Write
    // batches").
    let slot_sizes: HashMap<u64, u32> = chunks
        .iter()
        .flatten()
        .map(|&(off, class)| {
            let size = sh.opts.classes.get(usize::from(class)).copied();
            (off, size.unwrap_or(0))
        })
        .collect();
    let rolled = crate::batch::roll_back(sh, &slot_sizes)?;
    sh.counters.batches_rolled_back.set(rolled);
    let results: Vec<Result<(u64, u64)>> = std::thread::scope(|s| {
        let handles: Vec<_> = sh
            .parts
            .iter()
            .map(|part| {
                let mine: Vec<FoundChunk> = chunks.get(part.id).cloned().unwrap_or_default();
                s.spawn(move || recover_partition(sh, part, &mine))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(Error::invalid("prismdb: recovery thread panicked")))
            })
            .collect()
    });
    for r in results {
        let (live, freed) = r?;
        sh.counters.recovered_objects.add(live);
        sh.counters.recovery_freed.add(freed);
    }
    Ok(())
}

/// Sorts the tagged chunks by partition; frees those whose header does not check.
fn classify_chunks(sh: &Shared) -> Result<Vec<Vec<FoundChunk>>> {
    let mut out: Vec<Vec<FoundChunk>> = vec![Vec::new(); sh.parts.len()];
    let chunks: Vec<u64> = sh.alloc.iter_chunks(SLAB_TAG).map(|a| a.offset).collect();
    for off in chunks {
        let h = decode_chunk_header(sh.pool.read(off, CHUNK_HEADER_LEN as usize)?);
        let ok = h.and_then(|(p, class, size)| {
            let c = u8::try_from(class).ok()?;
            (sh.opts.classes.get(usize::from(c)) == Some(&size) && (p as usize) < sh.parts.len())
                .then_some((p as usize, c))
        });
        match ok {
            Some((p, c)) => {
                if let Some(v) = out.get_mut(p) {
                    v.push((off, c));
                }
            }
            // A slab whose header never became durable (FORMAT.md §1 "Slab chunk").
            None => sh.alloc.free_chunk(off)?,
        }
    }
    Ok(out)
}

struct Best {
    ts: u64,
    off: u64,
    class: u8,
    tomb: bool,
}

/// Opens the tables manifest `m` lists, each checked against its entry.
fn open_tables(
    sh: &Shared,
    part: &Partition,
    m: &manifest::ManifestData,
) -> Result<Vec<Arc<Table>>> {
    let mut tables = Vec::with_capacity(m.tables.len());
    for t in &m.tables {
        let file = sh.dev.open_file(&table_name(part.id, t.number))?;
        let table = Table::open(file, t.number)?;
        if table.min_key() != t.min_key.as_slice() || table.max_key() != t.max_key.as_slice() {
            return Err(Error::corruption(
                Tier::Flash,
                0,
                format!("table {} does not match its manifest entry", t.number),
            ));
        }
        sh.note_file(table.file.len(), false);
        tables.push(Arc::new(table));
    }
    Ok(tables)
}

fn recover_partition(sh: &Shared, part: &Partition, chunks: &[FoundChunk]) -> Result<(u64, u64)> {
    let m = manifest::load(&sh.dev, part.id)?;
    sh.note_file(m.encode().len() as u64, true);
    let tables = open_tables(sh, part, &m)?;
    let mut st = part.state.write();
    st.tables = Arc::new(TableSet { tables });
    st.manifest_seq = m.seq;
    st.next_table = m.next_table;
    let mut best: HashMap<Vec<u8>, Best> = HashMap::new();
    let mut freed = 0u64;
    let mut max_ts = 0u64;
    for &(chunk, class) in chunks {
        let size = u64::from(st.slabs.slot_size(class));
        let n = (sh.alloc.chunk_size() - CHUNK_HEADER_LEN) / size.max(1);
        for i in 0..n {
            let off = chunk + CHUNK_HEADER_LEN + i * size;
            let bytes = sh.pool.read(off, size as usize)?;
            let Some(o) = decode_object(bytes) else {
                continue;
            };
            if sh.map.partition_of(o.key) != part.id {
                return Err(Error::corruption(
                    Tier::Pmem,
                    off,
                    "object in another partition's slab",
                ));
            }
            max_ts = max_ts.max(o.ts);
            let cand = Best {
                ts: o.ts,
                off,
                class,
                tomb: o.value.is_none(),
            };
            let loser = match best.get_mut(o.key) {
                Some(b) if b.ts >= cand.ts => Some(cand),
                Some(b) => Some(std::mem::replace(b, cand)),
                None => {
                    best.insert(o.key.to_vec(), cand);
                    None
                }
            };
            if let Some(l) = loser {
                // IMPORTANT: a loser must be dead before its slot can be reused.
                sh.pool.store_u64(l.off, 0)?;
                sh.pool.persist(l.off, 8)?;
                freed += 1;
            }
        }
    }
    let mut live: HashMap<u64, Vec<u32>> = HashMap::new();
    for b in best.values() {
        let chunk = st.slabs.chunk_of(b.off);
        let size = u64::from(st.slabs.slot_size(b.class)).max(1);
        live.entry(chunk)
            .or_default()
            .push(u32::try_from((b.off - chunk - CHUNK_HEADER_LEN) / size).unwrap_or(u32::MAX));
    }
    for &(chunk, class) in chunks {
        st.slabs.adopt_chunk(
            chunk,
            class,
            live.get(&chunk).map_or(&[][..], Vec::as_slice),
        );
    }
    st.slabs.release_empty()?;
    let objects = best.len() as u64;
    let tables = st.tables.clone();
    for (k, b) in best {
        let on_flash = tables.may_contain(&k);
        st.index.insert(
            crate::key::dram_key(&k),
            Loc {
                off: b.off,
                ts: b.ts,
                class: b.class,
                tomb: b.tomb,
                on_flash,
                popular: AtomicBool::new(false),
                promoted: false,
            },
        );
    }
    st.ts = max_ts;
    part.rebuild_buckets(&st, sh.opts.bucket_keys);
    let keys = st.index.len() as f64 + tables.entries() as f64;
    let cap = ((keys * sh.opts.tracker_fraction) as usize).max(sh.opts.tracker_min);
    part.tracker.lock().set_capacity(cap);
    Ok((objects, freed))
}
