//! Value Storage: PRISM's log-structured value store on one flash device (PRISM §4.2, §5.1
//! "Organization of Value Storage", §5.2 "Asynchronous bandwidth-optimized write" and
//! "Garbage collection in Value Storage", §5.3 for reads). The on-flash format and its
//! torn-write analysis are in `value_storage/FORMAT.md`.
//!
//! One [`ValueStorage`] per flash device, each one file of fixed-size chunks (default
//! 512 KiB). Chunks are written whole by [`ValueStorage::write_chunk`] — values from PWB
//! reclamation, SVC scan write-back or GC, each with its backward pointer (HSIT slot) —
//! through the flash tier's io_uring path, then synced: a chunk is durable before any HSIT
//! entry can point into it. Each chunk has a DRAM validity bitmap with live counts; the
//! bitmaps are not persistent: after [`ValueStorage::open`] the core re-marks the valid
//! values from HSIT ([`ValueStorage::mark_valid`], §5.5) and calls
//! [`ValueStorage::finish_recovery`]. Reads go through thread combining (§5.3).
//!
//! # The contract with the core (HSIT owner)
//! 1. A location is published in HSIT only after `write_chunk` returned it.
//! 2. When an HSIT entry stops pointing at a location (update, delete, GC or SVC relocation
//!    won by someone else), whoever moved it calls [`ValueStorage::invalidate`] on the old
//!    location, exactly once, and only after the new forward pointer is persisted (§5.4):
//!    an invalidated chunk may be freed and overwritten, so no durable pointer may still
//!    lead into it (FORMAT.md, "Rules that make crashes harmless").
//! 3. A reader pins the epoch (`crossbeam_epoch::pin()`, default collector) from loading a
//!    location out of HSIT until [`ValueStorage::read`] returns; a chunk is reused only
//!    after such readers are done (see `chunk_table`). A reader that finds a backward
//!    pointer other than its slot retries through HSIT.
//! 4. `relocate(backptr, old, new)` of [`ValueStorage::gc_step`] CASes the HSIT entry of
//!    `backptr` from `old` to `new`, persists it (§5.4), and says what it did
//!    ([`Relocation`]); it returns `Err` only if it left the entry unchanged. When the CAS
//!    won but the persist failed ([`Relocation::Unpersisted`]) GC invalidates neither copy
//!    (either may be the durable one) and stops with the error.
//!
//! Thread safety: `Send + Sync`, every method takes `&self`. Writers run concurrently, each
//! on its own chunk (allocation is the only critical section, §5.2); readers are never
//! blocked, not even by GC; one GC step runs at a time per storage.

#![forbid(unsafe_code)]

mod bitmap;
pub mod chunk_format;
pub mod chunk_reader;
mod chunk_table;
pub mod chunk_writer;
mod gc;
pub mod gc_policy;
pub mod location;
mod reader;
mod stats;
pub mod superblock;
mod verify;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tierkv_core::media::flash::{AlignedBuf, FlashDevice, FlashFile, IoBatch};
use tierkv_core::{Error, Result, Tier};

use crate::combining::{CombiningMode, completion};
pub use crate::hsit::entry::Relocation;
use chunk_format::*;
use chunk_reader::decode_record;
use chunk_table::ChunkTable;
use chunk_writer::{ChunkEncoder, ChunkId};
pub use gc::GcReport;
pub use location::ValueLocation;
use reader::{BatchNotifier, ChunkReader, ReadSpec};
use stats::Counters;
pub use stats::ValueStorageStats;
use superblock::{Superblock, check_geometry, encode_superblock, newest_superblock};

/// The paper's chunk size (§5.1).
pub const DEFAULT_CHUNK_SIZE: u32 = 512 * 1024;
/// Free chunks kept for GC's own writes: user writes never take the last ones.
pub const GC_RESERVE: usize = 2;
/// Most chunks with live values one GC step collects.
pub const MAX_GC_VICTIMS: usize = 8;
/// Chunk buffers kept for reuse by writers.
const BUFFER_POOL: usize = 4;
/// How long a writer that found no free chunk waits for retired chunks to come free.
const ALLOCATION_WAIT: Duration = Duration::from_secs(1);

/// A record read back: its backward pointer and its value.
pub type Record = (u64, Vec<u8>);

/// One Value Storage (one flash device).
pub struct ValueStorage {
    id: u8,
    chunk_size: u32,
    device: Arc<FlashDevice>,
    file: FlashFile,
    table: Arc<ChunkTable>,
    reader: ChunkReader,
    generation: u64,
    next_sequence: AtomicU64,
    in_flight_writes: AtomicUsize,
    recovering: AtomicBool,
    gc_lock: Mutex<()>,
    gc_threshold: AtomicUsize,
    buffers: Mutex<Vec<AlignedBuf>>,
    counters: Counters,
}

impl std::fmt::Debug for ValueStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ValueStorage")
            .field("id", &self.id)
            .field("file", &self.file)
            .finish()
    }
}

/// Decrements the in-flight write count when a write ends, however it ends.
struct InFlight<'a>(&'a AtomicUsize);

impl<'a> InFlight<'a> {
    fn enter(c: &'a AtomicUsize) -> Self {
        c.fetch_add(1, Ordering::AcqRel);
        InFlight(c)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

impl ValueStorage {
    /// Creates the Value Storage file of storage `id` on `device`, with as many chunks of
    /// `chunk_size` bytes as fit in `capacity` bytes (after the superblock), and makes it
    /// durable. Fails if the file exists.
    pub fn create(
        id: u8,
        device: Arc<FlashDevice>,
        capacity: u64,
        chunk_size: u32,
        combining: CombiningMode,
        queue_depth: u32,
    ) -> Result<Self> {
        let count = capacity.saturating_sub(CHUNKS_START) / u64::from(chunk_size.max(1));
        let count = u32::try_from(count)
            .map_err(|_| Error::invalid(format!("{count} chunks is too many")))?;
        check_geometry(id, chunk_size, count)?;
        if (count as usize) < GC_RESERVE + 2 {
            return Err(Error::invalid(format!(
                "value storage capacity {capacity} holds {count} chunks of {chunk_size} bytes; at least {} are needed",
                GC_RESERVE + 2
            )));
        }
        let sb = Superblock {
            storage: id,
            chunk_size,
            chunk_count: count,
            generation: 0,
        };
        let file = device.create_file(&storage_file_name(id), sb.file_len())?;
        let mut block = AlignedBuf::new(SUPERBLOCK_SLOTS * BLOCK)?;
        encode_superblock(&sb, &mut block)?;
        file.write_at(0, &block)?;
        file.sync()?;
        device.sync_dir()?;
        Self::assemble(sb, device, file, combining, queue_depth, false)
    }

    /// Opens the Value Storage file of storage `id` on `device`. Every chunk starts
    /// `Recovering` with an empty bitmap: the core marks the valid values from HSIT
    /// ([`Self::mark_valid`]) and then calls [`Self::finish_recovery`]; writes are refused
    /// until then. Fails if the file's chunk size is not `chunk_size`.
    pub fn open(
        id: u8,
        device: Arc<FlashDevice>,
        chunk_size: u32,
        combining: CombiningMode,
        queue_depth: u32,
    ) -> Result<Self> {
        let file = device.open_file(&storage_file_name(id))?;
        let mut head = AlignedBuf::new(SUPERBLOCK_SLOTS * BLOCK)?;
        file.read_at(0, &mut head)?;
        let mut sb = newest_superblock(&head)?;
        if sb.storage != id || sb.chunk_size != chunk_size {
            return Err(Error::invalid(format!(
                "{} holds storage {} with {}-byte chunks; opened as storage {id} with {chunk_size}-byte chunks",
                file.path().display(),
                sb.storage,
                sb.chunk_size
            )));
        }
        if sb.file_len() > file.len() {
            return Err(Error::corruption(
                Tier::Flash,
                0,
                format!(
                    "superblock describes {} bytes, the file has {}",
                    sb.file_len(),
                    file.len()
                ),
            ));
        }
        sb.generation += 1;
        let mut block = AlignedBuf::new(BLOCK)?;
        encode_superblock(&sb, &mut block)?;
        file.write_at(sb.slot_offset(), &block)?;
        file.sync()?;
        Self::assemble(sb, device, file, combining, queue_depth, true)
    }

    fn assemble(
        sb: Superblock,
        device: Arc<FlashDevice>,
        file: FlashFile,
        combining: CombiningMode,
        queue_depth: u32,
        recovering: bool,
    ) -> Result<Self> {
        let reader = ChunkReader::new(device.clone(), file.clone(), combining, queue_depth)?;
        let threshold = (GC_RESERVE + 2).max(sb.chunk_count as usize / 20);
        Ok(ValueStorage {
            id: sb.storage,
            chunk_size: sb.chunk_size,
            device,
            file,
            table: Arc::new(ChunkTable::new(sb.chunk_count, sb.chunk_size, recovering)),
            reader,
            generation: sb.generation,
            next_sequence: AtomicU64::new(1),
            in_flight_writes: AtomicUsize::new(0),
            recovering: AtomicBool::new(recovering),
            gc_lock: Mutex::new(()),
            gc_threshold: AtomicUsize::new(threshold),
            buffers: Mutex::new(Vec::new()),
            counters: Counters::default(),
        })
    }

    /// The storage id.
    pub fn id(&self) -> u8 {
        self.id
    }

    /// The chunk size.
    pub fn chunk_size(&self) -> u32 {
        self.chunk_size
    }

    /// How reads are batched.
    pub fn combining_mode(&self) -> CombiningMode {
        self.reader.mode()
    }

    /// The number of chunks.
    pub fn chunk_count(&self) -> u32 {
        self.table.len()
    }

    /// The room for records in one chunk.
    pub fn payload_capacity(&self) -> usize {
        payload_capacity(self.chunk_size)
    }

    /// The longest value a chunk can hold (the engine's value limit must not exceed it).
    pub fn max_value_len(&self) -> usize {
        max_value_len(self.chunk_size)
    }

    /// How many of `value_lens`, taken in order, fit together in one chunk of packed
    /// records: the caller splits its values into `write_chunk` calls with this.
    pub fn values_fitting(&self, value_lens: impl IntoIterator<Item = usize>) -> usize {
        values_fitting(self.chunk_size, value_lens, Placement::Packed)
    }

    /// True when no chunk write is in flight (§5.2: writes go to an idle storage).
    pub fn is_idle(&self) -> bool {
        self.in_flight_writes.load(Ordering::Acquire) == 0
    }

    fn chunk_offset(&self, chunk: u32) -> u64 {
        CHUNKS_START + u64::from(chunk) * u64::from(self.chunk_size)
    }

    /// Writes `values` (backward pointer, value) into one new chunk through io_uring, syncs
    /// it, marks the values valid and returns their locations, in order. The values must
    /// fit in one chunk ([`Self::values_fitting`]); `InvalidArgument` otherwise. `NoSpace`
    /// when no free chunk is left (run [`Self::gc_step`]); when only retired chunks are
    /// left it first waits (up to a second) for their grace period, unless the calling
    /// thread is itself pinned (`crossbeam_epoch::is_pinned`), which would block it.
    pub fn write_chunk(&self, values: &[(u64, &[u8])]) -> Result<Vec<ValueLocation>> {
        self.write_values(values, GC_RESERVE, Placement::Packed)
    }

    /// [`Self::write_chunk`] with the records laid out by `placement` (which
    /// [`chunk_format::values_fitting`] must have been asked with).
    pub fn write_chunk_placed(
        &self,
        values: &[(u64, &[u8])],
        placement: Placement,
    ) -> Result<Vec<ValueLocation>> {
        self.write_values(values, GC_RESERVE, placement)
    }

    fn write_values(
        &self,
        values: &[(u64, &[u8])],
        reserve: usize,
        placement: Placement,
    ) -> Result<Vec<ValueLocation>> {
        if self.recovering.load(Ordering::Acquire) {
            return Err(Error::invalid(
                "value storage is recovering: call finish_recovery before writing",
            ));
        }
        if values.is_empty() {
            return Ok(Vec::new());
        }
        if values_fitting(
            self.chunk_size,
            values.iter().map(|(_, v)| v.len()),
            placement,
        ) < values.len()
        {
            return Err(Error::invalid(format!(
                "{} values do not fit in one chunk of {} bytes",
                values.len(),
                self.chunk_size
            )));
        }
        let _busy = InFlight::enter(&self.in_flight_writes);
        let chunk = self.allocate(reserve)?;
        match self.write_into(chunk, values, placement) {
            Ok((locs, sequence, image_len)) => {
                let meta = self
                    .table
                    .get(chunk)
                    .ok_or_else(|| Error::invalid("chunk out of range"))?;
                for l in &locs {
                    meta.bitmap.set(l.offset, l.len);
                }
                self.table.seal(chunk, sequence, image_len);
                self.counters.chunks_written.incr();
                self.counters.chunk_bytes_written.add(u64::from(image_len));
                self.counters.values_written.add(locs.len() as u64);
                Ok(locs)
            }
            Err(e) => {
                // NOTE: nothing points into the chunk, whatever reached the device.
                self.table.release_unwritten(chunk);
                self.counters.write_errors.incr();
                Err(e)
            }
        }
    }

    fn allocate(&self, reserve: usize) -> Result<u32> {
        let deadline = Instant::now() + ALLOCATION_WAIT;
        let mut pause = Duration::from_micros(50);
        loop {
            if let Some(c) = self.table.allocate(reserve) {
                return Ok(c);
            }
            // NOTE: a caller holding an epoch guard would block the very grace period it
            // waits for; it gets NoSpace at once instead.
            if self.table.retiring_count() == 0
                || crossbeam_epoch::is_pinned()
                || Instant::now() >= deadline
            {
                return Err(Error::no_space(
                    Tier::Flash,
                    format!(
                        "value storage {} has no free chunk ({} free, {} kept for GC)",
                        self.id,
                        self.table.free_count(),
                        reserve
                    ),
                ));
            }
            self.table.nudge_reclamation();
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(10));
        }
    }

    fn next_sequence(&self) -> Result<u64> {
        let n = self.next_sequence.fetch_add(1, Ordering::AcqRel);
        if n > u64::from(u32::MAX) {
            return Err(Error::Unsupported(format!(
                "value storage {}: 2^32 chunk writes in one open; reopen it",
                self.id
            )));
        }
        Ok(self.generation << 32 | n)
    }

    fn write_into(
        &self,
        chunk: u32,
        values: &[(u64, &[u8])],
        placement: Placement,
    ) -> Result<(Vec<ValueLocation>, u64, u32)> {
        let sequence = self.next_sequence()?;
        let mut buf = self.take_buffer()?;
        let mut enc = ChunkEncoder::with_placement(
            &mut buf,
            ChunkId {
                storage: self.id,
                chunk,
                sequence,
            },
            placement,
        )?;
        let locs = values
            .iter()
            .map(|(b, v)| enc.push(*b, v))
            .collect::<Result<Vec<_>>>()?;
        let image_len = enc.finish();
        buf.set_len(image_len)?;
        let buf = self.submit_write(self.chunk_offset(chunk), buf)?;
        self.return_buffer(buf);
        // IMPORTANT: durable before the caller may publish any of these locations.
        self.file.sync()?;
        Ok((locs, sequence, image_len as u32))
    }

    /// A chunk-sized buffer, reused from earlier writes when one is free. Reuse is safe:
    /// the encoder writes every byte of the image it returns (header, records, padding,
    /// zeroed tail of the last block), and nothing past the image is written.
    fn take_buffer(&self) -> Result<AlignedBuf> {
        let reused = self.buffers.lock().pop();
        let mut buf = match reused {
            Some(b) => b,
            None => AlignedBuf::new(self.chunk_size as usize)?,
        };
        buf.set_len(self.chunk_size as usize)?;
        Ok(buf)
    }

    fn return_buffer(&self, buf: AlignedBuf) {
        let mut pool = self.buffers.lock();
        if pool.len() < BUFFER_POOL {
            pool.push(buf);
        }
    }

    /// Submits one write on the flash tier's asynchronous io_uring path, waits for it and
    /// returns the buffer. Returns only once the request is finished or will never run, so
    /// a failed write's chunk can be freed safely (see `reader::BatchNotifier`).
    fn submit_write(&self, offset: u64, buf: AlignedBuf) -> Result<AlignedBuf> {
        let (completer, waiter) = completion::pair();
        let mut io = IoBatch::with_capacity(1);
        io.write(&self.file, offset, buf, 0);
        reader::submit_async(
            &self.device,
            io,
            Arc::new(BatchNotifier::new(vec![Some(completer)])),
        );
        waiter.wait()
    }

    fn check_location(&self, loc: ValueLocation) -> Result<()> {
        if loc.storage != self.id {
            return Err(Error::invalid(format!(
                "location {loc:?} belongs to storage {}, not {}",
                loc.storage, self.id
            )));
        }
        loc.check(self.table.len(), self.chunk_size)
    }

    /// Reads the value at `loc` through thread combining and verifies its checksum.
    /// Returns the backward pointer and the value (see the module doc, contract item 3).
    pub fn read(&self, loc: ValueLocation) -> Result<(u64, Vec<u8>)> {
        self.check_location(loc)?;
        let _pin = crossbeam_epoch::pin();
        let start = self.chunk_offset(loc.chunk) + u64::from(loc.offset);
        let spec = ReadSpec::covering(start, u64::from(loc.len));
        self.counters.reads.incr();
        let out = self.reader.read(spec).and_then(|buf| {
            let from = (start - spec.offset) as usize;
            let decoded = buf
                .get(from..from + loc.len as usize)
                .ok_or_else(|| Error::invalid("record outside its read"))
                .and_then(|bytes| decode_record(bytes, loc.chunk, loc.offset, Some(loc.len), start))
                .map_err(|e| in_file(e, self.file.path()))
                .map(|r| (r.backptr, r.value.to_vec()));
            self.reader.recycle(buf);
            decoded
        });
        match &out {
            Ok((_, v)) => self.counters.value_bytes_read.add(v.len() as u64),
            Err(_) => self.counters.read_errors.incr(),
        }
        out
    }

    /// Reads many values at once (a scan): records whose blocks touch are read together,
    /// and all reads go out as batches of at most the queue depth. Returns the backward
    /// pointers and values in the order of `locs`, or the first error.
    pub fn read_many(&self, locs: &[ValueLocation]) -> Result<Vec<(u64, Vec<u8>)>> {
        for l in locs {
            self.check_location(*l)?;
        }
        let _pin = crossbeam_epoch::pin();
        let ranges: Vec<(u64, u64)> = locs
            .iter()
            .map(|l| {
                (
                    self.chunk_offset(l.chunk) + u64::from(l.offset),
                    u64::from(l.len),
                )
            })
            .collect();
        let mut out: Vec<Option<Result<Record>>> = locs.iter().map(|_| None).collect();
        let path = self.file.path();
        let ios = self.reader.read_many(&ranges, &mut |i, bytes| {
            let (Some(l), Some(slot), Some(r)) = (locs.get(i), out.get_mut(i), ranges.get(i))
            else {
                return;
            };
            *slot = Some(bytes.and_then(|b| {
                decode_record(b, l.chunk, l.offset, Some(l.len), r.0)
                    .map(|r| (r.backptr, r.value.to_vec()))
                    .map_err(|e| in_file(e, path))
            }));
        });
        self.counters.multi_reads.incr();
        self.counters.multi_read_values.add(locs.len() as u64);
        self.counters.multi_read_ios.add(ios as u64);
        let out = out
            .into_iter()
            .map(|r| r.unwrap_or_else(|| Err(Error::invalid("value was not read"))))
            .collect::<Result<Vec<_>>>();
        match &out {
            Ok(values) => self
                .counters
                .value_bytes_read
                .add(values.iter().map(|(_, v)| v.len() as u64).sum()),
            Err(_) => self.counters.read_errors.incr(),
        }
        out
    }

    /// Marks the value at `loc` invalid (superseded or deleted; contract item 2).
    pub fn invalidate(&self, loc: ValueLocation) -> Result<()> {
        self.check_location(loc)?;
        if let Some(m) = self.table.get(loc.chunk) {
            m.bitmap.clear(loc.offset, loc.len);
        }
        Ok(())
    }

    /// Recovery (§5.5): marks the value at `loc`, reachable from HSIT, valid. Only between
    /// [`Self::open`] and [`Self::finish_recovery`]; may be called from many threads.
    pub fn mark_valid(&self, loc: ValueLocation) -> Result<()> {
        self.check_location(loc)?;
        if !self.recovering.load(Ordering::Acquire) {
            return Err(Error::invalid(
                "mark_valid is for recovery, before finish_recovery",
            ));
        }
        if let Some(m) = self.table.get(loc.chunk) {
            m.bitmap.set(loc.offset, loc.len);
        }
        Ok(())
    }

    /// Ends recovery: chunks without valid values become free, writes are accepted.
    pub fn finish_recovery(&self) {
        if self.recovering.swap(false, Ordering::AcqRel) {
            self.table.finish_recovery();
        }
    }

    /// The chunks in GC's victim state. Outside a GC step there are none: a victim that
    /// keeps live values goes back to sealed at the end of its step (`gc.rs`).
    pub fn victim_chunks(&self) -> Vec<u32> {
        (0..self.table.len())
            .filter(|&c| {
                self.table
                    .get(c)
                    .is_some_and(|m| m.state() == chunk_table::ChunkState::Victim)
            })
            .collect()
    }

    /// Test only: leaves sealed chunk `c` in GC's victim state, as the reclaimer/GC race
    /// of issue 21 (defect 1) used to. False if `c` was not sealed.
    #[cfg(test)]
    pub(crate) fn strand_as_victim(&self, c: u32) -> bool {
        self.table.transition(
            c,
            chunk_table::ChunkState::Sealed,
            chunk_table::ChunkState::Victim,
        )
    }

    /// True if the value at `loc` is marked valid (for `check`).
    pub fn is_valid(&self, loc: ValueLocation) -> Result<bool> {
        self.check_location(loc)?;
        Ok(self
            .table
            .get(loc.chunk)
            .is_some_and(|m| m.bitmap.is_set(loc.offset)))
    }

    /// Free chunks.
    pub fn free_chunks(&self) -> usize {
        self.table.free_count()
    }

    /// True when free chunks are below the GC threshold (§5.2).
    pub fn needs_gc(&self) -> bool {
        gc_policy::needs_gc(
            self.table.free_count(),
            self.gc_threshold.load(Ordering::Relaxed),
        )
    }

    /// Sets the GC threshold (free chunks below which [`Self::needs_gc`] says yes). A
    /// storage opens with 5% of its chunks, at least `GC_RESERVE + 2`; the engine then sets
    /// its `gc_threshold` option (default 10%, `options.rs`).
    pub fn set_gc_threshold(&self, chunks: usize) {
        self.gc_threshold
            .store(chunks.max(GC_RESERVE + 1), Ordering::Relaxed);
    }

    /// One GC step (§5.2): frees empty chunks, and moves the live values of the chunks with
    /// the fewest live values into one new chunk, calling `relocate` for each (module doc,
    /// contract item 4). Never blocks readers. See [`GcReport`].
    pub fn gc_step(
        &self,
        relocate: &dyn Fn(u64, ValueLocation, ValueLocation) -> Result<Relocation>,
    ) -> Result<GcReport> {
        gc::step(self, relocate)
    }

    /// Reads every chunk holding values back and verifies it: header and payload checksums,
    /// and that every valid bit marks the start of a record. One line per finding.
    pub fn check(&self) -> Result<Vec<String>> {
        verify::check(self)
    }

    /// The counters.
    pub fn stats(&self) -> ValueStorageStats {
        let c = self.table.counts();
        let (live_values, live_bytes) = self.table.live();
        let k = &self.counters;
        ValueStorageStats {
            id: self.id,
            chunk_size: self.chunk_size,
            chunks_total: u64::from(self.table.len()),
            chunks_free: c.free,
            chunks_used: c.used + c.recovering,
            chunks_writing: c.writing,
            chunks_retiring: c.retiring,
            chunks_quarantined: c.quarantined,
            live_values,
            live_bytes,
            chunks_written: k.chunks_written.get(),
            chunk_bytes_written: k.chunk_bytes_written.get(),
            values_written: k.values_written.get(),
            write_errors: k.write_errors.get(),
            reads: k.reads.get(),
            read_errors: k.read_errors.get(),
            value_bytes_read: k.value_bytes_read.get(),
            multi_reads: k.multi_reads.get(),
            multi_read_values: k.multi_read_values.get(),
            multi_read_ios: k.multi_read_ios.get(),
            gc_runs: k.gc_runs.get(),
            gc_chunks_reclaimed: k.gc_chunks_reclaimed.get(),
            gc_values_moved: k.gc_values_moved.get(),
            gc_bytes_moved: k.gc_bytes_moved.get(),
            gc_values_dropped: k.gc_values_dropped.get(),
            gc_micros: k.gc_micros.get(),
            gc_corrupt_chunks: k.gc_corrupt_chunks.get(),
            dram_bytes: (self.table.dram_bytes() + self.reader.dram_bytes()) as u64,
            combining: self.reader.stats(),
        }
    }
}
/// `e` (an error decoding bytes read from the Value Storage file at `path`) with the file
/// named (issue 23, finding 9: a flash error names the tier, the file and the offset).
/// A checksum mismatch becomes a corruption error that keeps both checksums in its text,
/// because [`Error::ChecksumMismatch`] has no room for a path.
pub(crate) fn in_file(e: Error, path: &std::path::Path) -> Error {
    match e {
        Error::Corruption {
            tier: Tier::Flash,
            offset,
            what,
        } => Error::corruption(
            Tier::Flash,
            offset,
            format!("value storage file {}: {what}", path.display()),
        ),
        Error::ChecksumMismatch {
            tier: Tier::Flash,
            offset,
            expected,
            got,
        } => Error::corruption(
            Tier::Flash,
            offset,
            format!(
                "value storage file {}: checksum mismatch: expected {expected:#010x}, got {got:#010x}",
                path.display()
            ),
        ),
        other => other,
    }
}
