//! The read side of a Value Storage (PRISM §5.3): turning value locations into aligned
//! flash reads, submitting them through the [`ThreadCombiner`] to the flash tier's
//! asynchronous path, and decoding the records that come back.
//!
//! - A point read fetches the 4 KiB blocks covering one record and goes through the
//!   combiner, so concurrent readers share io_uring batches (§5.3).
//! - A multi-read ([`ChunkReader::read_many`], used by scans) sorts the records by position
//!   and merges records whose blocks touch or overlap into one read — this is where the
//!   scan-aware write-back of the SVC (§4.4: a scan's values rewritten together into one
//!   chunk) saves I/O — then submits all reads as batches of at most the queue depth.
//! - GC reads whole chunk images the same way.
//!
//! Point reads (combining and single modes): the leader pushes its batch onto one of the
//! device's io_uring rings it checks out ([`FlashDevice::queue`]), submits, hands the queue
//! on to the next leader (before the submission when the batch is its own read alone:
//! YCSB-C at 4 threads on 2 cores went from 44k to 50k ops/s, close to batch size 1's),
//! waits for its batch on that ring and completes each reader's [`Completer`] itself
//! ([`ReapFn`]). The paper has a completion thread poll the
//! completions (§5.3 ④); here the leader that submitted is that poller for its batch. On
//! our 2-core machine the completion-thread hop cost a wake-up of the submitter (io_uring
//! runs a read's completion work in the task that submitted it), one of the completion
//! thread and one of the reader for every read: YCSB-C at 4 threads went from 44k to 60k
//! ops/s with the leader reaping (1M x 1 KiB, DRAM 128 MiB). Timeout batching and
//! multi-reads keep the asynchronous path: the submit function builds one [`IoBatch`]
//! and hands it to [`FlashDevice::submit_async`]; the device's completion thread delivers
//! each request to a [`BatchNotifier`], which completes the waiting thread's [`Completer`].
//!
//! Buffers: the aligned buffer of a point read or of a scan's merged read comes from a
//! small lock-free pool (size classes up to [`MAX_MERGED_READ`]) and goes back to it once
//! the records are decoded, so a read neither allocates nor zeroes memory (the authors
//! register fixed buffers per ring; the pool is the portable half of that). The pool holds
//! at most 3.5 MiB, counted in the storage's DRAM use.
//!
//! Thread safety: `Send + Sync`; all methods take `&self`.

use std::io;
use std::sync::Arc;

use crossbeam::queue::ArrayQueue;
use parking_lot::Mutex;
use tierkv_core::media::flash::{
    AlignedBuf, CompletionNotifier, FlashDevice, FlashFile, IoBatch, IoCompletion, IoRequest,
    Notifier,
};
use tierkv_core::{Error, Result};

use super::chunk_format::{BLOCK, round_up_block};
use crate::combining::completion::Completer;
use crate::combining::tcq::Batch;
use crate::combining::{CombiningMode, CombiningStats, ReapFn, SubmitFn, ThreadCombiner};

/// Capacity of the smallest pooled read buffer: two blocks (a record of up to a block that
/// straddles a block boundary). Larger classes double up to [`MAX_MERGED_READ`] (a scan's
/// merged reads).
pub const POOLED_LEN: usize = 2 * BLOCK;
/// Size classes: `POOLED_LEN << i`.
const CLASSES: usize = (MAX_MERGED_READ / POOLED_LEN).trailing_zeros() as usize + 1;
/// Buffers kept per class: many small ones (one per concurrent point read), a few large
/// ones (a scan holds its merged reads until it has decoded them). Beyond them, buffers are
/// freed as before.
const KEPT: [usize; CLASSES] = [128, 32, 16, 8, 4, 2];

/// Read buffers for reuse (see the module doc).
#[derive(Debug)]
pub struct BufPool {
    free: [ArrayQueue<AlignedBuf>; CLASSES],
}

impl BufPool {
    fn new() -> Arc<BufPool> {
        Arc::new(BufPool {
            free: KEPT.map(ArrayQueue::new),
        })
    }

    /// The class of a buffer of `len` bytes, if pooled.
    fn class(len: usize) -> Option<usize> {
        let c = len
            .div_ceil(POOLED_LEN)
            .max(1)
            .next_power_of_two()
            .trailing_zeros() as usize;
        (c < CLASSES).then_some(c)
    }

    /// A buffer of `len` bytes: a pooled one when it fits a class (its bytes are stale: the
    /// read overwrites all `len` of them, a short read being an error), else a new one.
    fn take(&self, len: usize) -> Result<AlignedBuf> {
        let Some(c) = Self::class(len) else {
            return AlignedBuf::new(len);
        };
        let mut buf = match self.free.get(c).and_then(ArrayQueue::pop) {
            Some(buf) => buf,
            None => AlignedBuf::new(POOLED_LEN << c)?,
        };
        buf.set_len(len)?;
        Ok(buf)
    }

    /// Gives a buffer back (only buffers of a class size are kept).
    fn give(&self, buf: AlignedBuf) {
        let cap = buf.capacity();
        if let Some(c) = Self::class(cap)
            && cap == POOLED_LEN << c
            && let Some(q) = self.free.get(c)
        {
            let _ = q.push(buf);
        }
    }

    /// DRAM the pooled buffers hold now.
    fn dram_bytes(&self) -> usize {
        self.free
            .iter()
            .enumerate()
            .map(|(c, q)| q.len() * (POOLED_LEN << c))
            .sum()
    }
}

/// One aligned read: `len` bytes at `offset` of the storage file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadSpec {
    /// File offset (a multiple of 4 KiB).
    pub offset: u64,
    /// Length (a non-zero multiple of 4 KiB).
    pub len: usize,
}

impl ReadSpec {
    /// The smallest aligned read covering `[start, start + len)`.
    pub fn covering(start: u64, len: u64) -> ReadSpec {
        let offset = start / BLOCK as u64 * BLOCK as u64;
        let end = round_up_block(start + len.max(1));
        ReadSpec {
            offset,
            len: (end - offset) as usize,
        }
    }

    /// The end offset.
    pub fn end(&self) -> u64 {
        self.offset + self.len as u64
    }
}

/// Delivers the completions of one batch to the threads waiting for them: request `tag`
/// goes to completer `tag`.
///
/// IMPORTANT: a submitter never fails its waiters on its own when `submit_async` returns
/// `Err`, because the flash tier may still hold (and later run and deliver) the requests.
/// It records the error with [`BatchNotifier::submission_failed`] and drops its handle:
/// if the device holds the requests, their completions arrive as usual; if it does not,
/// the last handle goes, and `Drop` fails every waiter still waiting with that error.
/// So a buffer is never reused, nor a chunk freed, while a request on it may still run.
pub struct BatchNotifier {
    completers: Mutex<Vec<Option<Completer<AlignedBuf>>>>,
    failure: Mutex<Option<String>>,
}

impl BatchNotifier {
    /// A notifier for a batch whose request `i` is tagged `i`.
    pub fn new(completers: Vec<Option<Completer<AlignedBuf>>>) -> Self {
        BatchNotifier {
            completers: Mutex::new(completers),
            failure: Mutex::new(None),
        }
    }

    /// Records why the submission failed, for requests that will never be delivered.
    pub fn submission_failed(&self, e: &Error) {
        *self.failure.lock() = Some(e.to_string());
    }
}

impl Drop for BatchNotifier {
    fn drop(&mut self) {
        let why = self
            .failure
            .lock()
            .take()
            .unwrap_or_else(|| "the flash tier dropped the request".to_owned());
        for c in self.completers.lock().iter_mut().filter_map(Option::take) {
            c.complete(Err(Error::io(
                "submit",
                "value storage",
                io::Error::other(why.clone()),
            )));
        }
    }
}

/// Submits `io` on the flash tier's asynchronous path with completions going to
/// `notifier` (see [`BatchNotifier`] for what an error means).
pub fn submit_async(device: &FlashDevice, io: IoBatch, notifier: Arc<BatchNotifier>) {
    let dyn_notifier: Notifier = notifier.clone();
    if let Err(e) = device.submit_async(io, &dyn_notifier) {
        notifier.submission_failed(&e);
    }
}

impl CompletionNotifier for BatchNotifier {
    fn complete(&self, c: IoCompletion) {
        let slot = usize::try_from(c.request.tag)
            .ok()
            .and_then(|i| self.completers.lock().get_mut(i)?.take());
        if let Some(completer) = slot {
            completer.complete(c.result.map(|()| c.request.buf));
        }
    }
}

fn submit_fn(
    device: Arc<FlashDevice>,
    file: FlashFile,
    pool: Arc<BufPool>,
) -> SubmitFn<ReadSpec, AlignedBuf> {
    Arc::new(move |batch: Batch<ReadSpec, AlignedBuf>| {
        let mut io = IoBatch::with_capacity(batch.len());
        let mut completers = Vec::with_capacity(batch.len());
        for (spec, completer) in batch {
            match pool.take(spec.len) {
                Ok(buf) => {
                    io.read(&file, spec.offset, buf, completers.len() as u64);
                    completers.push(Some(completer));
                }
                Err(e) => completer.complete(Err(e)),
            }
        }
        if io.is_empty() {
            return;
        }
        submit_async(&device, io, Arc::new(BatchNotifier::new(completers)));
    })
}

/// Submits a batch on one of the device's rings checked out by the leader, hands the
/// queue on, waits for the batch and completes each reader (see [`ReapFn`]).
fn reap_fn(
    device: Arc<FlashDevice>,
    file: FlashFile,
    pool: Arc<BufPool>,
) -> ReapFn<ReadSpec, AlignedBuf> {
    Arc::new(
        move |batch: Batch<ReadSpec, AlignedBuf>, hand_off: &mut dyn FnMut()| {
            let mut completers: Vec<Option<Completer<AlignedBuf>>> =
                Vec::with_capacity(batch.len());
            let mut queue = device.queue();
            for (spec, completer) in batch {
                match pool.take(spec.len) {
                    Ok(buf) => {
                        let tag = completers.len() as u64;
                        queue.push(IoRequest::read(&file, spec.offset, buf, tag));
                        completers.push(Some(completer));
                    }
                    Err(e) => completer.complete(Err(e)),
                }
            }
            if completers.len() == 1 {
                // No follower was queued behind this leader: the reads are few, and the
                // next reader should not wait out this system call (nor this leader's
                // preemption in it, on a machine with fewer cores than readers). With
                // followers, the leader keeps the queue while it submits, so the readers
                // arriving meanwhile form the next, larger batch. Handing off only now,
                // with a ring held, keeps the ring pool from becoming the queue.
                hand_off();
            }
            // NOTE: a refused submission is retried by `wait`, which reports the error if
            // the ring itself has failed.
            let _ = queue.submit();
            hand_off();
            let mut done = Vec::with_capacity(completers.len());
            while queue.outstanding() > 0 {
                if let Err(e) = queue.wait(queue.outstanding(), &mut done) {
                    // The queue's drop waits for what is still in flight; the readers
                    // whose reads never came back get the ring's error.
                    let why = e.to_string();
                    for c in completers.iter_mut().filter_map(Option::take) {
                        c.complete(Err(Error::io(
                            "read",
                            "value storage",
                            io::Error::other(why.clone()),
                        )));
                    }
                    break;
                }
                for c in done.drain(..) {
                    let slot = usize::try_from(c.request.tag)
                        .ok()
                        .and_then(|i| completers.get_mut(i)?.take());
                    if let Some(completer) = slot {
                        completer.complete(c.result.map(|()| c.request.buf));
                    }
                }
            }
        },
    )
}

/// Reads a Value Storage file through a thread combiner.
pub struct ChunkReader {
    combiner: ThreadCombiner<ReadSpec, AlignedBuf>,
    pool: Arc<BufPool>,
}

/// The largest merged read of [`ChunkReader::read_many`].
pub const MAX_MERGED_READ: usize = 256 * 1024;

impl ChunkReader {
    /// A reader of `file` on `device`, batching as `mode` says, up to `queue_depth`.
    pub fn new(
        device: Arc<FlashDevice>,
        file: FlashFile,
        mode: CombiningMode,
        queue_depth: u32,
    ) -> Result<Self> {
        let pool = BufPool::new();
        Ok(ChunkReader {
            combiner: ThreadCombiner::with_reaping(
                mode,
                queue_depth,
                submit_fn(device.clone(), file.clone(), pool.clone()),
                reap_fn(device, file, pool.clone()),
            )?,
            pool,
        })
    }

    /// One read through the combiner.
    pub fn read(&self, spec: ReadSpec) -> Result<AlignedBuf> {
        self.combiner.execute(spec)
    }

    /// Returns a buffer a read produced, for reuse.
    pub fn recycle(&self, buf: AlignedBuf) {
        self.pool.give(buf);
    }

    /// DRAM held by pooled buffers.
    pub fn dram_bytes(&self) -> usize {
        self.pool.dram_bytes()
    }

    /// Many reads, bypassing the queue, as batches of at most the queue depth; results in
    /// the order of `specs`.
    pub fn read_batch(&self, specs: Vec<ReadSpec>) -> Vec<Result<AlignedBuf>> {
        self.combiner.execute_batch(specs)
    }

    /// Reads the byte ranges `[start, start + len)` of the file, merging ranges whose blocks
    /// touch into one read. Calls `f(i, bytes)` for range `i` with exactly its bytes.
    /// Returns the number of reads issued.
    pub fn read_many(
        &self,
        ranges: &[(u64, u64)],
        f: &mut dyn FnMut(usize, Result<&[u8]>),
    ) -> usize {
        let mut order: Vec<usize> = (0..ranges.len()).collect();
        order.sort_by_key(|&i| ranges.get(i).map_or(0, |r| r.0));
        let mut groups: Vec<(ReadSpec, Vec<usize>)> = Vec::new();
        for i in order {
            let Some(&(start, len)) = ranges.get(i) else {
                continue;
            };
            let spec = ReadSpec::covering(start, len);
            match groups.last_mut() {
                Some((g, members))
                    if spec.offset <= g.end()
                        && (spec.end().max(g.end()) - g.offset) as usize <= MAX_MERGED_READ =>
                {
                    g.len = (spec.end().max(g.end()) - g.offset) as usize;
                    members.push(i);
                }
                _ => groups.push((spec, vec![i])),
            }
        }
        let specs: Vec<ReadSpec> = groups.iter().map(|g| g.0).collect();
        let issued = specs.len();
        for ((spec, members), result) in groups.iter().zip(self.read_batch(specs)) {
            match result {
                Ok(buf) => {
                    for &i in members {
                        let Some(&(start, len)) = ranges.get(i) else {
                            continue;
                        };
                        let from = (start - spec.offset) as usize;
                        f(
                            i,
                            buf.get(from..from + len as usize)
                                .ok_or_else(|| Error::invalid("range outside its read")),
                        );
                    }
                    self.pool.give(buf);
                }
                Err(e) => {
                    // The first range gets the error itself, the others a description.
                    let what = e.to_string();
                    let mut first = Some(e);
                    for &i in members {
                        let e = first.take().unwrap_or_else(|| {
                            Error::io("read", "value storage", io::Error::other(what.clone()))
                        });
                        f(i, Err(e));
                    }
                }
            }
        }
        issued
    }

    /// The batch-size histogram.
    pub fn stats(&self) -> CombiningStats {
        self.combiner.stats()
    }

    /// The combining mode.
    pub fn mode(&self) -> CombiningMode {
        self.combiner.mode()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::combining::completion::pair;

    #[test]
    fn notifier_dropped_before_delivery_fails_its_waiters_with_the_submit_error() {
        let (c1, w1) = pair::<AlignedBuf>();
        let (c2, w2) = pair::<AlignedBuf>();
        let n = BatchNotifier::new(vec![Some(c1), None, Some(c2)]);
        n.submission_failed(&Error::invalid("ring refused"));
        drop(n);
        for w in [w1, w2] {
            let e = w.wait().unwrap_err();
            assert!(e.to_string().contains("ring refused"), "{e}");
        }
    }

    #[test]
    fn the_pool_reuses_buffers_by_size_class_and_frees_others() {
        let pool = BufPool::new();
        let a = pool.take(BLOCK).unwrap();
        assert_eq!((a.len(), a.capacity()), (BLOCK, POOLED_LEN));
        let at = a[..].as_ptr();
        pool.give(a);
        let b = pool.take(POOLED_LEN).unwrap();
        assert_eq!(b[..].as_ptr(), at, "the buffer given back is reused");
        assert_eq!(b.len(), POOLED_LEN);
        let merged = pool.take(5 * BLOCK).unwrap();
        assert_eq!((merged.len(), merged.capacity()), (5 * BLOCK, 8 * BLOCK));
        pool.give(merged);
        assert_eq!(pool.dram_bytes(), 8 * BLOCK);
        let huge = pool.take(MAX_MERGED_READ + BLOCK).unwrap();
        assert_eq!(huge.capacity(), MAX_MERGED_READ + BLOCK);
        pool.give(huge);
        pool.give(AlignedBuf::new(3 * BLOCK).unwrap());
        assert_eq!(
            pool.dram_bytes(),
            8 * BLOCK,
            "only class-sized buffers are kept"
        );
        pool.give(b);
        assert_eq!(pool.dram_bytes(), 8 * BLOCK + POOLED_LEN);
        assert_eq!(BufPool::class(MAX_MERGED_READ), Some(CLASSES - 1));
    }

    #[test]
    fn covering_read_is_block_aligned() {
        assert_eq!(
            ReadSpec::covering(8192 + 64, 1040),
            ReadSpec {
                offset: 8192,
                len: 4096
            }
        );
        assert_eq!(
            ReadSpec::covering(8192 + 4000, 200),
            ReadSpec {
                offset: 8192,
                len: 8192
            }
        );
        assert_eq!(
            ReadSpec::covering(4096, 4096),
            ReadSpec {
                offset: 4096,
                len: 4096
            }
        );
    }
}
