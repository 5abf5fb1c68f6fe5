//! Crash-atomic write batches (issue 24; `FORMAT.md` § Write batches), MioDB's way: the
//! whole batch is ONE record of the MemTable's write-ahead log (§4.7), checksummed and
//! persisted once, its operations at consecutive seqs, then inserted into ONE MemTable
//! under the writer lock. Admission makes the MemTable (and its log) take the whole batch
//! before anything is written — switching MemTables first when it does not fit — so a
//! MemTable switch or flush never splits a batch, and a batch that does not fit the pool's
//! room is refused whole (`NoSpace`, nothing written). Replay applies a batch record whole
//! or stops before it.
//!
//! Readers: `get` and `scan` may see a batch while its operations go into the MemTable;
//! `multi_get` holds the batch gate shared and sees none or all of each batch.
//!
//! Thread safety: called on `&Inner` from any thread; the writer lock orders batches and
//! single writes as one sequence.

use tierkv_core::{BatchOp, Error, Result, WriteBatch};

use crate::node::{self, Kind};
use crate::store::{Inner, Need};

impl Inner {
    /// The largest write batch footprint (log record and MemTable nodes, at the tallest
    /// heights) a store accepts: an eighth of the allocator's chunks.
    pub fn max_batch_bytes(&self) -> u64 {
        self.shared.alloc.stats().chunks / 8 * self.sizes.chunk
    }

    /// A write batch (`FORMAT.md` § Write batches): admitted whole into ONE MemTable (a
    /// switch first when it does not fit the current one, so a flush never splits it),
    /// logged as ONE checksummed record with one persist, its operations at consecutive
    /// seqs, then inserted into the MemTable under the batch gate.
    pub(crate) fn write_batch(&self, batch: &WriteBatch) -> Result<()> {
        self.check_writable()?;
        let fp = self.sizes.batch(batch);
        let pair = self.sizes.shape_bytes(self.sizes.min_shape(fp));
        if pair > self.max_batch_bytes() {
            return Err(Error::invalid(format!(
                "mio: a write batch of {} operations needs a MemTable and log of {pair} bytes, \
                 over the limit of {} bytes (an eighth of the pool)",
                batch.len(),
                self.max_batch_bytes()
            )));
        }
        let need = if batch.iter().any(|(_, op)| op.value().is_some()) {
            Need::Put
        } else {
            Need::Delete
        };
        if need == Need::Put {
            self.throttle();
        }
        let mut w = self.admit(self.writer.lock(), need, fp, false)?;
        let first = w.next_seq;
        let n = batch.len() as u64;
        if first + n - 1 > node::MAX_SEQ {
            return Err(Error::invalid("mio: sequence numbers exhausted"));
        }
        let pool = &self.shared.pool;
        pool.crash_point("mio.batch.before_log");
        w.log.append_batch(&self.shared, first, batch)?;
        w.next_seq += n;
        pool.crash_point("mio.batch.after_log");
        let c = &self.shared.counters;
        c.wal_bytes.add(fp.log);
        c.batches.incr();
        c.batch_ops.add(n);
        let _gate = self.batch_gate.write();
        for ((k, op), seq) in batch.iter().zip(first..) {
            let (kind, v) = match op {
                BatchOp::Put(v) => (Kind::Put, v.as_slice()),
                BatchOp::Delete => (Kind::Delete, &[][..]),
            };
            if let Err(e) = self.insert(&mut w, seq, kind, k, v) {
                // IMPORTANT: the batch is durable in the log but only part of it is in the
                // MemTable: refuse every later write until a reopen replays it whole.
                self.poison(&e);
                return Err(e);
            }
        }
        Ok(())
    }

    /// The values of `keys` with no batch half inserted (the batch gate held shared).
    pub(crate) fn multi_get(&self, keys: &[&[u8]]) -> Result<Vec<Option<Vec<u8>>>> {
        let _gate = self.batch_gate.read();
        let v = self.version();
        keys.iter().map(|k| self.get_in(&v, k)).collect()
    }
}
