//! Reading and writing one leaf node on pmem, through the pool API only (so that Tracked
//! crash images are truthful). The byte layout is in `format.rs` and `FORMAT.md`.
//!
//! The write primitives are the steps of the commit protocol (FORMAT.md § Crash
//! consistency); each says what it persists:
//! - [`NodeRef::write_entry`]: an entry into a free slot, persisted (not yet live);
//! - [`NodeRef::publish`] / [`NodeRef::retire`]: the bitmap word (one atomic 8-byte
//!   store), then its line(s) persisted: the commit point of inserts / removes;
//! - [`NodeRef::link_next`]: the next word (atomic store), persisted: a split's commit;
//! - [`write_new_node`]: a whole unreachable node, persisted before it is linked.
//!
//! Thread safety: readers may call the read functions at any time (an optimistic read may
//! see torn bytes and decode garbage: every decoder returns an error, never panics, and
//! the caller's version check discards the result); the write functions must be called
//! with the leaf locked (`leaf.rs`), except `write_new_node` on a node nobody can reach.

use tierkv_core::media::pmem::PmemPool;
use tierkv_core::{Error, Result, Tier};

use super::format::{
    BLOB_KEY, ENTRY_LEN, Entry, KeyRef, LINE, NODE_ANCHOR, NODE_BITMAP, NODE_FPS, NODE_HEADER_LEN,
    NODE_NEXT, NodeHeader, decode_blob, entry_offset, fingerprint, live_slots, node_size,
};

/// A leaf node at a pool offset.
#[derive(Clone, Copy)]
pub(crate) struct NodeRef<'p> {
    pub(crate) pool: &'p PmemPool,
    pub(crate) off: u64,
}

/// A live entry with its key bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct LiveEntry {
    /// The entry's slot in its node.
    pub(crate) slot: usize,
    /// The key.
    pub(crate) key: Vec<u8>,
    /// The entry (value and key reference).
    pub(crate) entry: Entry,
}

impl<'p> NodeRef<'p> {
    pub(crate) fn new(pool: &'p PmemPool, off: u64) -> Self {
        NodeRef { pool, off }
    }

    /// Reads and validates the header lines.
    pub(crate) fn header(&self) -> Result<NodeHeader> {
        NodeHeader::decode(self.pool.read(self.off, NODE_HEADER_LEN)?, self.off)
    }

    fn entry_at(&self, slot: usize) -> u64 {
        self.off + entry_offset(slot) as u64
    }

    /// Reads entry `slot` (checks its fields, not its checksum).
    pub(crate) fn entry(&self, slot: usize) -> Result<Entry> {
        let at = self.entry_at(slot);
        Entry::decode_unchecked(self.pool.read(at, ENTRY_LEN)?, at)
    }

    /// True if the key `r` refers to equals `key`.
    pub(crate) fn key_eq(&self, r: &KeyRef, key: &[u8]) -> Result<bool> {
        if r.len() != key.len() {
            return Ok(false);
        }
        match r {
            KeyRef::Inline { .. } => Ok(r.inline_bytes() == Some(key)),
            KeyRef::Blob { off, .. } => {
                let stored = self.pool.read(*off, BLOB_KEY + key.len())?;
                Ok(stored.get(BLOB_KEY..) == Some(key))
            }
        }
    }

    /// The key `r` refers to (a blob is verified against its checksum).
    pub(crate) fn key(&self, r: &KeyRef) -> Result<Vec<u8>> {
        load_key(self.pool, r)
    }

    /// The live entry holding `key`, if any.
    pub(crate) fn find(&self, header: &NodeHeader, key: &[u8]) -> Result<Option<(usize, Entry)>> {
        let fp = fingerprint(key);
        for slot in live_slots(header.bitmap) {
            if header.fps.get(slot) != Some(&fp) {
                continue;
            }
            let entry = self.entry(slot)?;
            if self.key_eq(&entry.key, key)? {
                return Ok(Some((slot, entry)));
            }
        }
        Ok(None)
    }

    /// Every live entry with its key, by slot.
    pub(crate) fn live_entries(&self, header: &NodeHeader) -> Result<Vec<LiveEntry>> {
        live_slots(header.bitmap)
            .map(|slot| {
                let entry = self.entry(slot)?;
                let key = self.key(&entry.key)?;
                Ok(LiveEntry { slot, key, entry })
            })
            .collect()
    }

    /// Writes `entry` into slot `slot` and persists it. The slot must be free in the
    /// persisted bitmap, so the entry stays invisible until [`NodeRef::publish`].
    pub(crate) fn write_entry(&self, slot: usize, entry: &Entry) -> Result<()> {
        self.pool
            .write_persist(self.entry_at(slot), &entry.encode())
    }

    /// Writes the fingerprint of slot `slot` (persisted by the next `publish`; a
    /// stale fingerprint after a crash is rebuilt at open).
    pub(crate) fn write_fingerprint(&self, slot: usize, fp: u8) -> Result<()> {
        self.pool.write(self.off + (NODE_FPS + slot) as u64, &[fp])
    }

    /// IMPORTANT: the commit point of an insert. Stores the new bitmap with one atomic
    /// 8-byte store and persists both header lines (bitmap and fingerprints).
    pub(crate) fn publish(&self, bitmap: u64) -> Result<()> {
        self.pool.store_u64(self.off + NODE_BITMAP as u64, bitmap)?;
        self.pool.persist(self.off, NODE_HEADER_LEN)
    }

    /// IMPORTANT: the commit point of a remove (and the last step of a split). Stores the
    /// new bitmap with one atomic 8-byte store and persists its line.
    pub(crate) fn retire(&self, bitmap: u64) -> Result<()> {
        self.pool.store_u64(self.off + NODE_BITMAP as u64, bitmap)?;
        self.pool.persist(self.off, LINE)
    }

    /// Persists the fingerprint line (recovery, after rewriting stale fingerprints).
    pub(crate) fn persist_fingerprints(&self) -> Result<()> {
        self.pool.persist(self.off + NODE_FPS as u64, LINE)
    }

    /// IMPORTANT: the commit point of a split. Stores the next pointer with one atomic
    /// 8-byte store and persists it.
    pub(crate) fn link_next(&self, next: u64) -> Result<()> {
        self.pool.store_u64(self.off + NODE_NEXT as u64, next)?;
        self.pool.persist(self.off, LINE)
    }
}

/// The key `r` refers to; a blob must lie inside the pool and match its checksum.
pub(crate) fn load_key(pool: &PmemPool, r: &KeyRef) -> Result<Vec<u8>> {
    match r {
        KeyRef::Inline { .. } => r
            .inline_bytes()
            .map(<[u8]>::to_vec)
            .ok_or_else(|| Error::corruption(Tier::Pmem, 0, "inline key longer than its area")),
        KeyRef::Blob { len, off } => {
            let len = usize::from(*len);
            Ok(decode_blob(pool.read(*off, BLOB_KEY + len)?, len, *off)?.to_vec())
        }
    }
}

/// Writes a whole node that no one can reach yet (a split's right sibling, or the first
/// leaf) and persists it: `header` (with its bitmap and fingerprints), `anchor`, and
/// `entries` as `(slot, entry)`. Slots not listed are zero.
pub(crate) fn write_new_node(
    pool: &PmemPool,
    off: u64,
    header: &NodeHeader,
    anchor: &Entry,
    entries: &[(usize, Entry)],
) -> Result<()> {
    let mut image = vec![0u8; node_size(header.fanout)];
    let mut place = |at: usize, bytes: &[u8]| -> Result<()> {
        image
            .get_mut(at..at + bytes.len())
            .ok_or_else(|| Error::invalid(format!("key-index node write beyond its size at {at}")))?
            .copy_from_slice(bytes);
        Ok(())
    };
    place(0, &header.encode())?;
    place(NODE_ANCHOR, &anchor.encode())?;
    for (slot, entry) in entries {
        place(entry_offset(*slot), &entry.encode())?;
    }
    pool.write_persist(off, &image)
}
