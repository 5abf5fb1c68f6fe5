//! The key side of the salvage walk (FORMAT.md, "Salvage", steps 2-3): which keys the
//! Persistent Key Index holds, and the HSIT slot each maps to, read from the leaves
//! without trusting the index as a whole.
//!
//! 1. Every allocator chunk is probed for a key-index chunk header (checksummed, owner =
//!    the index's root word); the allocator's own metadata is not needed.
//! 2. Every node slot of those chunks that decodes as a leaf header is a *leaf*.
//! 3. The leaf list is followed from root word 1, as recovery does: each step must land on
//!    a leaf, never revisit one, and see anchors strictly increase. Those leaves are
//!    *linked*. A damaged link ends the walk ("broken list").
//! 4. Each live entry of a leaf is decoded on its own (its checksum covers the slot number
//!    and the key; a blob key must pass its own checksum and length): one damaged entry
//!    loses one key, not its leaf.
//!
//! With a complete list only linked leaves count (exactly what recovery reads; unlinked
//! ones are free or split leftovers). With a broken list, the entries of unlinked leaves
//! are candidates too, marked `linked: false`: they may be stale copies of deleted keys,
//! which the value side rejects unless the key's HSIT entry still names them
//! (`values.rs`).
//!
//! Thread safety: pure functions over a [`Source`].

use std::collections::{HashMap, HashSet};

use tierkv_core::media::pmem::alloc::RegionLayout;

use super::source::Source;
use crate::key_index::format::{
    BLOB_CLASSES, CHUNK_HEADER_LEN, ChunkHeader, ChunkKind, ENTRY_LEN, Entry, KeyRef, MAX_FANOUT,
    MIN_FANOUT, NODE_ANCHOR, NODE_ENTRIES, NODE_MAGIC, NODE_MAGIC_OFF, NodeHeader, blob_class,
    decode_blob, entry_offset, full_bitmap, live_slots, node_size,
};
use crate::superblock::ROOT_KEY_INDEX;

/// A key the index maps to an HSIT slot.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Candidate {
    /// The key.
    pub key: Vec<u8>,
    /// Its HSIT slot.
    pub slot: u64,
    /// True when its leaf is on the list from the root.
    pub linked: bool,
}

/// What the key side found.
#[derive(Debug, Default)]
pub struct KeyWalk {
    /// Keys with their slots (a key may appear more than once).
    pub candidates: Vec<Candidate>,
    /// Damaged entries and links, one note each.
    pub skipped: Vec<String>,
    /// One line for the report.
    pub summary: String,
    /// True when the list from the root ended cleanly.
    pub complete: bool,
}

struct Leaf {
    header: NodeHeader,
    bytes: Vec<u8>,
    /// False for a node slot whose header does not decode but where some entry passes
    /// its checksum: its bitmap and link are unknown, so every entry slot is read (each
    /// one checked on its own, and against HSIT), and the list never passes through it.
    header_ok: bool,
}

/// The key-index chunks of the allocator region: node chunks and blob chunks.
fn index_chunks(pool: &dyn Source, alloc: &RegionLayout) -> (Vec<(u64, ChunkHeader)>, usize) {
    let mut found = Vec::new();
    let count = u32::try_from(alloc.chunk_count).unwrap_or(u32::MAX);
    let mut blobs = 0;
    for k in 0..count {
        let off = alloc.chunk_off(k);
        let Some(b) = pool.bytes(off, CHUNK_HEADER_LEN as u64) else {
            break;
        };
        let Ok(h) = ChunkHeader::decode(&b, off) else {
            continue;
        };
        let fits = u64::from(h.slot_count)
            .checked_mul(u64::from(h.slot_size))
            .and_then(|n| n.checked_add(CHUNK_HEADER_LEN as u64))
            .is_some_and(|n| n <= alloc.chunk_size);
        if h.owner == ROOT_KEY_INDEX as u32 && fits {
            blobs += usize::from(matches!(h.kind, ChunkKind::Blobs(_)));
            found.push((off, h));
        }
    }
    (found, blobs)
}

/// Every node slot that decodes as a leaf header: in the node chunks, and (with the node
/// sizes those chunks or the root leaf show) in every other chunk, whose header may be
/// the damaged part. Entries are checked one by one later, so a leaf found this way is
/// only a place to read keys from, and only used if linked or if the list is broken.
fn leaves(
    pool: &dyn Source,
    alloc: &RegionLayout,
    chunks: &[(u64, ChunkHeader)],
    root: u64,
) -> HashMap<u64, Leaf> {
    let mut out = HashMap::new();
    let mut sizes: Vec<u32> = chunks
        .iter()
        .filter(|(_, h)| h.kind == ChunkKind::Nodes)
        .map(|(_, h)| h.slot_size)
        .collect();
    if let Some(h) = pool
        .bytes(root, NODE_ENTRIES as u64)
        .and_then(|b| NodeHeader::decode(&b, root).ok())
    {
        sizes.push(u32::try_from(node_size(h.fanout)).unwrap_or(u32::MAX));
    }
    sizes.sort_unstable();
    sizes.dedup();
    let slots_of = |size: u32| {
        u32::try_from(
            alloc.chunk_size.saturating_sub(CHUNK_HEADER_LEN as u64) / u64::from(size.max(1)),
        )
        .unwrap_or(0)
    };
    let mut plan: Vec<(u64, u32, u32)> = Vec::new();
    let count = u32::try_from(alloc.chunk_count).unwrap_or(u32::MAX);
    for k in 0..count {
        let off = alloc.chunk_off(k);
        match chunks.iter().find(|(c, _)| *c == off) {
            Some((_, h)) if h.kind == ChunkKind::Nodes => {
                plan.push((off, h.slot_size, h.slot_count));
            }
            Some(_) => {}
            None => {
                // A chunk whose header does not decode: probe each slot's magic.
                for &size in &sizes {
                    let n = slots_of(size);
                    let has_leaf = (0..n).any(|i| {
                        let at = off
                            + CHUNK_HEADER_LEN as u64
                            + u64::from(i) * u64::from(size)
                            + NODE_MAGIC_OFF as u64;
                        pool.bytes(at, 4).as_deref() == Some(&NODE_MAGIC[..])
                    });
                    if has_leaf {
                        plan.push((off, size, n));
                    }
                }
            }
        }
    }
    for (off, slot_size, slot_count) in plan {
        let Some(bytes) = pool.bytes(off, alloc.chunk_size) else {
            continue;
        };
        for i in 0..slot_count {
            let at = off + CHUNK_HEADER_LEN as u64 + u64::from(i) * u64::from(slot_size);
            let start = (at - off) as usize;
            let Some(b) = bytes.get(start..start + slot_size as usize) else {
                break;
            };
            match NodeHeader::decode(b, at) {
                Ok(header) if node_size(header.fanout) == slot_size as usize => {
                    out.insert(
                        at,
                        Leaf {
                            header,
                            bytes: b.to_vec(),
                            header_ok: true,
                        },
                    );
                }
                _ => {
                    if let Some(leaf) = headless_leaf(b, at, slot_size) {
                        out.insert(at, leaf);
                    }
                }
            }
        }
    }
    out
}

/// A node slot whose header is damaged, as a leaf with every entry slot to be read, if at
/// least one of its entries passes its checksum.
fn headless_leaf(b: &[u8], at: u64, slot_size: u32) -> Option<Leaf> {
    let fanout = (MIN_FANOUT..=MAX_FANOUT).find(|&f| node_size(f) == slot_size as usize)?;
    let any = (0..fanout).any(|i| {
        let off = entry_offset(i);
        b.get(off..off + ENTRY_LEN)
            .is_some_and(|e| Entry::decode(e, at + off as u64).is_ok())
    });
    any.then(|| {
        let mut header = NodeHeader::new(fanout, 0);
        header.bitmap = full_bitmap(fanout);
        Leaf {
            header,
            bytes: b.to_vec(),
            header_ok: false,
        }
    })
}

/// The key of `entry`, reading and checking its blob when it is not inline.
fn key_of(pool: &dyn Source, entry: &Entry) -> Result<Vec<u8>, String> {
    match entry.key {
        KeyRef::Inline { .. } => entry
            .key
            .inline_bytes()
            .map(<[u8]>::to_vec)
            .ok_or_else(|| "bad inline key".to_owned()),
        KeyRef::Blob { len, off } => {
            let len = usize::from(len);
            let class = blob_class(len).ok_or("key blob length")?;
            let size = BLOB_CLASSES.get(class).copied().ok_or("key blob class")?;
            // NOTE: the blob chunk's header is not required (it may be the damaged part):
            // the entry's checksum covers the blob's offset, and the blob's own checksum
            // and length cover the key.
            let b = pool
                .bytes(off, size as u64)
                .ok_or_else(|| format!("key blob {off} outside the pool"))?;
            decode_blob(&b, len, off)
                .map(<[u8]>::to_vec)
                .map_err(|e| e.to_string())
        }
    }
}

fn anchor_of(pool: &dyn Source, leaf: &Leaf, at: u64) -> Option<Vec<u8>> {
    let e = Entry::decode(
        leaf.bytes.get(NODE_ANCHOR..NODE_ENTRIES)?,
        at + NODE_ANCHOR as u64,
    )
    .ok()?;
    (e.value == 0).then_some(())?;
    key_of(pool, &e).ok()
}

/// Walks the key index of `pool` (allocator region `alloc`).
pub fn walk(pool: &dyn Source, alloc: &RegionLayout, root: u64) -> KeyWalk {
    let (chunks, blob_chunks) = index_chunks(pool, alloc);
    let leaves = leaves(pool, alloc, &chunks, root);
    let mut out = KeyWalk::default();

    // The list from the root: bounded by the number of leaves (a visited set).
    let mut linked: Vec<u64> = Vec::new();
    let mut seen = HashSet::new();
    let mut prev: Option<Vec<u8>> = None;
    let mut cur = root;
    let broken = loop {
        if cur == 0 {
            break if linked.is_empty() {
                Some("root word 1 is 0 (no index)".to_owned())
            } else {
                None
            };
        }
        let Some(leaf) = leaves.get(&cur).filter(|l| l.header_ok) else {
            break Some(format!("link to {cur}, which is not a readable leaf"));
        };
        if !seen.insert(cur) {
            break Some(format!("the list returns to leaf {cur} (a cycle)"));
        }
        let Some(anchor) = anchor_of(pool, leaf, cur) else {
            break Some(format!("leaf {cur}: damaged anchor"));
        };
        let increasing = match &prev {
            None => anchor.is_empty(),
            Some(p) => anchor > *p,
        };
        if !increasing {
            break Some(format!("leaf {cur}: anchors out of order"));
        }
        prev = Some(anchor);
        linked.push(cur);
        cur = leaf.header.next;
    };
    out.complete = broken.is_none();
    let mut used: Vec<(u64, bool)> = linked.iter().map(|&l| (l, true)).collect();
    if let Some(why) = &broken {
        out.skipped.push(format!(
            "key index list broken after {} leaves ({why}); entries of unlinked leaves are used, checked against HSIT",
            linked.len()
        ));
        let on_list: HashSet<u64> = linked.iter().copied().collect();
        let mut rest: Vec<u64> = leaves
            .keys()
            .filter(|l| !on_list.contains(l))
            .copied()
            .collect();
        rest.sort_unstable();
        used.extend(rest.into_iter().map(|l| (l, false)));
    }
    let mut entries = 0u64;
    let mut damaged = 0u64;
    for (at, is_linked) in used {
        let Some(leaf) = leaves.get(&at) else {
            continue;
        };
        for i in live_slots(leaf.header.bitmap) {
            let off = entry_offset(i);
            let eat = at + off as u64;
            let decoded = leaf
                .bytes
                .get(off..off + ENTRY_LEN)
                .ok_or_else(|| "short entry".to_owned())
                .and_then(|b| Entry::decode(b, eat).map_err(|e| e.to_string()))
                .and_then(|e| {
                    let k = key_of(pool, &e)?;
                    if k.is_empty() {
                        Err("empty key".to_owned())
                    } else {
                        Ok((k, e.value))
                    }
                });
            match decoded {
                Ok((key, slot)) => {
                    entries += 1;
                    out.candidates.push(Candidate {
                        key,
                        slot,
                        linked: is_linked,
                    });
                }
                // A leaf with a damaged header has no bitmap: its free entry slots hold
                // anything, so their failures are not damage.
                Err(_) if !leaf.header_ok => {}
                Err(e) => {
                    damaged += 1;
                    out.skipped.push(format!(
                        "key-index entry at pool offset {eat} (key unknown): {e}"
                    ));
                }
            }
        }
    }
    out.summary = format!(
        "key index: {} index chunks ({} of key blobs), {} leaves ({} with a damaged header), {} linked from the root ({}), {} entries read, {} damaged",
        chunks.len(),
        blob_chunks,
        leaves.len(),
        leaves.values().filter(|l| !l.header_ok).count(),
        linked.len(),
        broken.map_or("list complete".to_owned(), |w| format!("list broken: {w}")),
        entries,
        damaged
    );
    out
}
