//! Crash-atomic write batches (issue 24; FORMAT.md § Write batches): a commit record in
//! FOCUS's CLog. The paper has no multi-key write; this is ours, built from its parts.
//!
//! - **Members.** Under the stripe locks of every key of the batch (taken in stripe order,
//!   so batches and single writes never deadlock), the batch takes a block of `n + 1`
//!   sequence numbers: the first is the batch id, the others go to its operations in key
//!   order. Each put is a complete record, each delete of a present key a tombstone, in the
//!   writer's CLog, flagged `FLAG_BATCH` with the batch id (covered by the header
//!   checksum), each persisted as usual.
//! - **Commit.** Then one commit record (kind 5, seq = the batch id), persisted. Only then
//!   does the index move, under the batch gate, and the call return.
//! - **Recovery** keeps a flagged record only if its batch's commit record is valid; the
//!   others were never acknowledged and are dropped *before* "newest version per key by
//!   sequence number" is taken, so an uncommitted member never outranks the key's older
//!   version. Sequence numbers continue above every record seen, members included, so a
//!   batch id is never reused.
//! - **GC** must not free a commit record while a member of its batch may still be read by
//!   recovery: [`BatchChunks`] knows the chunks holding members of each committed batch;
//!   a victim's commit record is appended again (GC's CLog, same batch id) while members
//!   of its batch remain in other chunks, and dropped once none does. A live member GC
//!   meets is rewritten as an ordinary (unflagged) complete record, as every live row is.
//!
//! Readers: `multi_get` holds the batch gate shared and sees none or all of each batch; a
//! lone `get` or `scan` may see a batch half installed in the index (the moment the index
//! moves), never after the call returned.
//!
//! Thread safety: called from any thread on `&FocusStore`.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::Ordering;

use parking_lot::Mutex;
use tierkv_core::{BatchOp, Error, Result, Tier, WriteBatch};

use crate::format::chunk::{ChunkKind, HEADER_LEN as CHUNK_HEADER_LEN};
use crate::format::record::{HEADER_LEN, RecordHeader, RecordKind};
use crate::store::{Admit, FocusStore, PLAIN_SCHEMA, index_key};

/// The chunks holding members of each committed batch, and the batches with members in
/// each chunk (rebuilt by recovery; kept by writers and GC).
#[derive(Debug, Default)]
pub struct BatchChunks {
    inner: Mutex<Maps>,
}

#[derive(Debug, Default)]
struct Maps {
    by_batch: HashMap<u64, BTreeSet<u64>>,
    by_chunk: HashMap<u64, BTreeSet<u64>>,
}

impl BatchChunks {
    /// A member of batch `id` lies in the chunk at `chunk`.
    pub fn add(&self, id: u64, chunk: u64) {
        let mut m = self.inner.lock();
        m.by_batch.entry(id).or_default().insert(chunk);
        m.by_chunk.entry(chunk).or_default().insert(id);
    }

    /// Batch `id` was not committed (or all of it is gone): forgets it.
    pub fn forget(&self, id: u64) {
        let mut m = self.inner.lock();
        for c in m.by_batch.remove(&id).unwrap_or_default() {
            if let Some(ids) = m.by_chunk.get_mut(&c) {
                ids.remove(&id);
                if ids.is_empty() {
                    m.by_chunk.remove(&c);
                }
            }
        }
    }

    /// True when members of batch `id` lie in chunks other than `victim`.
    pub fn members_beyond(&self, id: u64, victim: u64) -> bool {
        self.inner
            .lock()
            .by_batch
            .get(&id)
            .is_some_and(|cs| cs.iter().any(|c| *c != victim))
    }

    /// The chunk at `chunk` was freed: its members are gone.
    pub fn chunk_freed(&self, chunk: u64) {
        let mut m = self.inner.lock();
        for id in m.by_chunk.remove(&chunk).unwrap_or_default() {
            if let Some(cs) = m.by_batch.get_mut(&id) {
                cs.remove(&chunk);
            }
        }
    }

    /// Batches tracked (tests).
    pub fn len(&self) -> usize {
        self.inner.lock().by_batch.len()
    }

    /// True when no batch is tracked.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The commit record's body: the number of member records (for tools; recovery does not
/// need it).
fn commit_body(members: u32) -> [u8; 4] {
    members.to_le_bytes()
}

impl FocusStore {
    /// The pool offset of the chunk holding pool offset `off`.
    pub(crate) fn chunk_of(&self, off: u64) -> u64 {
        let start = self.plog.alloc().layout().chunks_off;
        let cs = self.plog.chunk_size();
        start + (off - start) / cs * cs
    }

    /// The most record bytes one batch may append: a quarter of the pool's chunks.
    pub fn max_batch_bytes(&self) -> u64 {
        self.plog.total_chunks() / 4 * (self.plog.chunk_size() - CHUNK_HEADER_LEN as u64)
    }

    /// Appends a commit record of batch `id` (GC's CLog when `gc`).
    pub(crate) fn append_commit(&self, id: u64, members: u32, gc: bool) -> Result<u64> {
        let body = commit_body(members);
        let h = RecordHeader {
            kind: RecordKind::Commit,
            key_len: 0,
            body_len: body.len() as u32,
            seq: id,
            schema: PLAIN_SCHEMA,
            epoch: 0,
            prev: 0,
            batch: 0,
        };
        if gc {
            self.plog.append_gc(ChunkKind::CLog, h, b"", &body)
        } else {
            self.plog.append(ChunkKind::CLog, h, b"", &body)
        }
    }

    /// Applies `batch` (checked against the limits) crash-atomically (module doc).
    pub(crate) fn commit_batch(&self, batch: &WriteBatch) -> Result<()> {
        if batch.is_empty() {
            return Ok(());
        }
        let rec = |k: &[u8], v: usize| (HEADER_LEN + k.len() + v).next_multiple_of(8) as u64;
        let bytes: u64 = batch
            .iter()
            .map(|(k, op)| rec(k, op.value().map_or(0, <[u8]>::len)))
            .sum::<u64>()
            + rec(b"", 4);
        if bytes > self.max_batch_bytes() {
            return Err(Error::invalid(format!(
                "focus: a write batch of {} operations needs {bytes} bytes of records, over \
                 the limit of {} bytes (a quarter of the pool)",
                batch.len(),
                self.max_batch_bytes()
            )));
        }
        let puts = batch.iter().any(|(_, op)| op.value().is_some());
        let room = self.plog.chunk_size() - CHUNK_HEADER_LEN as u64;
        let admit = if puts { Admit::Data } else { Admit::Delete };
        self.admit(admit, bytes.div_ceil(room))?;
        let ikeys: Vec<Vec<u8>> = batch
            .iter()
            .map(|(k, _)| index_key(PLAIN_SCHEMA, k))
            .collect();
        let _stripes = self.stripes.lock_all(ikeys.iter().map(Vec::as_slice));
        let n = batch.len() as u64;
        let id = self.seq.fetch_add(n + 1, Ordering::Relaxed);
        let members = match self.append_members(batch, &ikeys, id) {
            Ok(m) => m,
            Err(e) => {
                self.batches.forget(id);
                return Err(e);
            }
        };
        if members.is_empty() {
            return Ok(()); // deletes of absent keys only: nothing to do
        }
        let pool = self.plog.pool();
        pool.crash_point("focus.batch.members_persisted");
        match self.append_commit(id, members.len() as u32, false) {
            Ok(_) => {}
            Err(e) => {
                self.batches.forget(id);
                if !matches!(e, Error::NoSpace { .. }) {
                    // IMPORTANT: the commit may be durable though its persist failed:
                    // what a reopen shows is unknown, so no later write may build on it.
                    self.poison(format!("focus: a batch commit failed: {e}"));
                }
                return Err(e);
            }
        }
        pool.crash_point("focus.batch.committed");
        if let Err(e) = self.install_members(&ikeys, &members) {
            self.poison(format!(
                "focus: a committed batch could not be indexed: {e}"
            ));
            return Err(e);
        }
        let c = &self.counters;
        c.batches.incr();
        c.batch_records.add(members.len() as u64);
        Ok(())
    }

    /// Appends the batch's member records (stripe locks held); per member its index in the
    /// batch and its pool offset (`None`: a tombstone).
    fn append_members(
        &self,
        batch: &WriteBatch,
        ikeys: &[Vec<u8>],
        id: u64,
    ) -> Result<Vec<(usize, Option<u64>)>> {
        let mut out = Vec::with_capacity(batch.len());
        for (i, ((k, op), ikey)) in batch.iter().zip(ikeys).enumerate() {
            let (kind, body) = match op {
                BatchOp::Put(v) => (RecordKind::Row, v.as_slice()),
                BatchOp::Delete if self.index_get(ikey).is_some() => {
                    (RecordKind::Tombstone, &[][..])
                }
                BatchOp::Delete => continue,
            };
            let h = RecordHeader {
                kind,
                key_len: k.len() as u16,
                body_len: body.len() as u32,
                seq: id + 1 + i as u64,
                schema: PLAIN_SCHEMA,
                epoch: 0,
                prev: 0,
                batch: id,
            };
            let off = self.plog.append(ChunkKind::CLog, h, k, body)?;
            self.batches.add(id, self.chunk_of(off));
            let user = (k.len() + body.len()) as u64;
            self.counters.ops.user_bytes_written.add(user);
            out.push((i, (kind == RecordKind::Row).then_some(off)));
        }
        Ok(out)
    }

    /// Moves the index to the committed members, under the batch gate.
    fn install_members(&self, ikeys: &[Vec<u8>], members: &[(usize, Option<u64>)]) -> Result<()> {
        let _gate = self.batch_gate.write();
        for (i, off) in members {
            let ikey = ikeys
                .get(*i)
                .ok_or_else(|| Error::corruption(Tier::Dram, 0, "a batch member without key"))?;
            let old = self.index_get(ikey);
            match off {
                Some(off) => {
                    self.install(ikey, old.as_deref(), *off)?;
                    self.counters.rows_put.incr();
                }
                None => {
                    if let Some(e) = old {
                        self.unindex(ikey, &e);
                    }
                }
            }
        }
        Ok(())
    }

    /// The values of plain `keys`, with no batch half installed.
    pub(crate) fn multi_get_plain(&self, keys: &[&[u8]]) -> Result<Vec<Option<Vec<u8>>>> {
        let _gate = self.batch_gate.read();
        keys.iter()
            .map(|k| match self.index_get(&index_key(PLAIN_SCHEMA, k)) {
                None => Ok(None),
                Some(e) => self.get_plain(&e).map(Some),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_chunks_follow_members_through_frees() {
        let b = BatchChunks::default();
        b.add(10, 4096);
        b.add(10, 8192);
        b.add(20, 8192);
        assert!(b.members_beyond(10, 4096));
        b.chunk_freed(8192);
        assert!(!b.members_beyond(10, 4096), "only the victim holds members");
        assert!(b.members_beyond(10, 0));
        assert!(!b.members_beyond(20, 0));
        b.forget(10);
        b.forget(20);
        assert!(b.is_empty());
        assert!(b.inner.lock().by_chunk.is_empty());
    }
}
