//! The Persistent Write Buffers (PRISM §4.3, §5.2; spec: `FORMAT.md` § PWB).
//!
//! Each PWB is an append-only ring of [`record`]s on pmem; writer threads map onto PWBs by
//! a thread-local id ([`PwbSet::for_current_thread`]), so with no more writers than PWBs no
//! two writers share one. A put appends its value with the backward pointer (its HSIT slot)
//! and persists it, then publishes the HSIT forward pointer — all while holding its PWB's
//! *append lock* ([`Append`]). When a ring's use crosses the watermark, the background
//! reclaimer moves its well-coupled records to Value Storage and advances the head, while
//! writers keep appending behind the tail.
//!
//! # Invariants (the crash argument in `FORMAT.md` § Crash consistency relies on them)
//! 1. Appends to one ring are serialised by its append lock, and each record is persisted
//!    before the lock is released; so every record before a persisted record is persisted.
//! 2. A put holds the append lock until its HSIT update is done, and the reclaimer only
//!    looks at `[head, tail)` read under that lock: it never judges a record whose put is
//!    still deciding where HSIT points.
//! 3. The head moves only after every well-coupled record before it has been moved to
//!    Value Storage, the HSIT pointers persisted, and a grace period has passed (no reader
//!    still reading the old records); it is persisted before writers may reuse the space.
//! 4. Only the head is persisted; the tail is recovered from HSIT (§5.5, [`ring`]).
//!
//! Thread safety: `Pwb` is `Send + Sync`; `append` blocks while its ring is full.

pub mod reclaim;
pub mod record;
pub mod ring;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use parking_lot::{Condvar, Mutex, MutexGuard};
use tierkv_core::media::pmem::PmemPool;
use tierkv_core::{Error, Result, Tier};

use crate::superblock::Superblock;
use record::{HEADER_LEN, RecordHeader, decode_header, encode_header, encode_pad, footprint};
use ring::Ring;

/// How long a writer waits on a full ring before re-checking for shutdown or poison.
const FULL_WAIT: Duration = Duration::from_millis(10);

/// One PWB ring.
pub struct Pwb {
    id: u32,
    pool: Arc<PmemPool>,
    ring_off: u64,
    size: u64,
    desc_off: u64,
    /// Head and tail; this mutex is the append lock.
    ring: Mutex<Ring>,
    /// Signalled when the head moves.
    space: Condvar,
    /// Writers waiting for space.
    waiters: AtomicUsize,
    watermark: u64,
    retain: u64,
}

/// When a PWB is reclaimed and how much of it: fractions of the ring.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ReclaimLimits {
    /// Use at which reclamation starts (§4.3: 50%).
    pub watermark: f64,
    /// Use a watermark-triggered reclamation leaves behind: the newest records stay in
    /// the PWB (where reads find them on pmem and overwrites never reach flash); the
    /// oldest are moved. 0 drains the ring. Forced reclamations always drain it.
    pub retain: f64,
}

impl std::fmt::Debug for Pwb {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pwb")
            .field("id", &self.id)
            .field("ring", &*self.ring.lock())
            .finish_non_exhaustive()
    }
}

/// An append in progress: holds the PWB's append lock until dropped (or, for a record of
/// a [`ReservedRun`], borrows the run, which holds it).
pub struct Append<'a> {
    pwb: &'a Pwb,
    _lock: Option<MutexGuard<'a, Ring>>,
    record: u64,
}

/// Room reserved in a PWB for a run of records (a write batch, `batch/mod.rs`): holds the
/// append lock until dropped; [`ReservedRun::write`] appends the next record, which always
/// fits (the run's room was found before it was handed out, and the head cannot move
/// while the lock is held).
pub struct ReservedRun<'a> {
    pwb: &'a Pwb,
    ring: MutexGuard<'a, Ring>,
    /// Footprints of the records not yet written, in order.
    left: std::collections::VecDeque<u64>,
}

impl ReservedRun<'_> {
    /// Writes the next record of the run (its length must be the next one reserved) and
    /// persists it; the returned [`Append`] borrows the run (which keeps the lock).
    pub fn write(&mut self, backptr: u64, value: &[u8]) -> Result<Append<'_>> {
        let fp = footprint(value.len());
        if self.left.front() != Some(&fp) {
            return Err(Error::invalid(format!(
                "PWB run: a record of {} bytes is not the next one reserved",
                value.len()
            )));
        }
        let res = self.ring.reserve(fp).ok_or_else(|| {
            Error::invalid("PWB run: the reserved room is gone (the head moved back?)")
        })?;
        self.left.pop_front();
        let off = self.pwb.write_record(&mut self.ring, res, backptr, value)?;
        Ok(Append {
            pwb: self.pwb,
            _lock: None,
            record: off,
        })
    }
}

/// True when records of `footprints`, appended in order from `ring`'s tail, all fit now.
fn run_fits(ring: &Ring, footprints: &[u64]) -> bool {
    let mut r = *ring;
    for &fp in footprints {
        match r.reserve(fp) {
            Some(res) => r.tail = res.new_tail,
            None => return false,
        }
    }
    true
}

/// Room reserved in a PWB: holds the append lock; [`Reserved::write`] fills it.
pub struct Reserved<'a> {
    pwb: &'a Pwb,
    ring: MutexGuard<'a, Ring>,
    res: ring::Reservation,
    len: usize,
}

impl<'a> Reserved<'a> {
    /// Writes the record (and the pad before it, if any) and persists it; the returned
    /// [`Append`] keeps the append lock until the caller has published the record in
    /// HSIT (or given up). `value` must have the length that was reserved.
    pub fn write(self, backptr: u64, value: &[u8]) -> Result<Append<'a>> {
        let Reserved {
            pwb,
            mut ring,
            res,
            len,
        } = self;
        if value.len() != len {
            return Err(Error::invalid(format!(
                "PWB: {len} bytes reserved, {} written",
                value.len()
            )));
        }
        let off = pwb.write_record(&mut ring, res, backptr, value)?;
        Ok(Append {
            pwb,
            _lock: Some(ring),
            record: off,
        })
    }
}

impl Append<'_> {
    /// Absolute pool offset of the appended record.
    pub fn record_off(&self) -> u64 {
        self.record
    }

    /// Rewrites the record's backward pointer (the put lost an index race and now updates
    /// the winner's slot). Persisted on return; the record is not yet reachable.
    pub fn rebind(&self, backptr: u64, value: &[u8]) -> Result<()> {
        let h = encode_header(backptr, value);
        self.pwb.pool.write(self.record, &h)?;
        self.pwb.pool.persist(self.record, HEADER_LEN)
    }
}

impl Pwb {
    fn new(
        pool: Arc<PmemPool>,
        sb: &Superblock,
        id: u32,
        head: u64,
        limits: ReclaimLimits,
    ) -> Self {
        let size = sb.pwb_size;
        let watermark = ((size as f64 * limits.watermark) as u64).clamp(1, size);
        Pwb {
            id,
            pool,
            ring_off: sb.pwb_ring(id),
            size,
            desc_off: sb.pwb_desc(id),
            ring: Mutex::new(Ring {
                size,
                head,
                tail: head,
            }),
            space: Condvar::new(),
            waiters: AtomicUsize::new(0),
            watermark,
            retain: ((size as f64 * limits.retain) as u64).min(watermark - 1),
        }
    }

    /// Formats PWB `id` of a new store: head 0, persisted.
    pub fn create(
        pool: Arc<PmemPool>,
        sb: &Superblock,
        id: u32,
        limits: ReclaimLimits,
    ) -> Result<Pwb> {
        pool.store_u64(sb.pwb_desc(id), 0)?;
        pool.persist(sb.pwb_desc(id), 8)?;
        Ok(Pwb::new(pool, sb, id, 0, limits))
    }

    /// Opens PWB `id`: its head from the descriptor; the tail equals the head until
    /// recovery sets it ([`Pwb::set_recovered_tail`]).
    pub fn open(
        pool: Arc<PmemPool>,
        sb: &Superblock,
        id: u32,
        limits: ReclaimLimits,
    ) -> Result<Pwb> {
        let head = pool.load_u64(sb.pwb_desc(id))?;
        if !head.is_multiple_of(record::RECORD_ALIGN) {
            return Err(Error::corruption(
                Tier::Pmem,
                sb.pwb_desc(id),
                format!("PWB {id} head {head} is not record-aligned"),
            ));
        }
        Ok(Pwb::new(pool, sb, id, head, limits))
    }

    /// This PWB's number.
    pub fn id(&self) -> u32 {
        self.id
    }

    /// A copy of the head and tail.
    pub fn ring(&self) -> Ring {
        *self.ring.lock()
    }

    /// Ring size in bytes.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// True while a writer waits for space in this ring.
    pub fn has_waiters(&self) -> bool {
        self.waiters.load(Ordering::Acquire) > 0
    }

    /// Bytes in use at which reclamation starts.
    pub fn watermark(&self) -> u64 {
        self.watermark
    }

    /// Bytes in use a watermark-triggered reclamation leaves behind.
    pub fn retain(&self) -> u64 {
        self.retain
    }

    /// True when `off` is inside this PWB's ring.
    pub fn holds(&self, off: u64) -> bool {
        off >= self.ring_off && off < self.ring_off + self.size
    }

    /// Absolute pool offset of logical position `x`.
    pub fn abs(&self, x: u64) -> u64 {
        self.ring_off + x % self.size
    }

    /// Ring offset of an absolute pool offset inside this PWB.
    pub fn ring_offset(&self, abs: u64) -> u64 {
        abs - self.ring_off
    }

    /// Appends `value` for HSIT slot `backptr` and persists it: [`Pwb::reserve`] then
    /// [`Reserved::write`].
    pub fn append(
        &self,
        backptr: u64,
        value: &[u8],
        wake: &dyn Fn(),
        check: &dyn Fn() -> Result<()>,
    ) -> Result<Append<'_>> {
        self.reserve(value.len(), wake, check)?
            .write(backptr, value)
    }

    /// Takes the append lock and room for a value of `len` bytes. Waits while the ring is
    /// full, calling `wake` (to start reclamation) and `check` (to give up on shutdown or
    /// poison) between waits.
    ///
    /// IMPORTANT: the caller must not be pinned (`crossbeam_epoch`) while this waits: the
    /// reclaimer that makes room waits for pinned threads (invariant 3).
    pub fn reserve(
        &self,
        len: usize,
        wake: &dyn Fn(),
        check: &dyn Fn() -> Result<()>,
    ) -> Result<Reserved<'_>> {
        let fp = footprint(len);
        if Ring::never_fits(self.size, fp) {
            return Err(Error::invalid(format!(
                "a value of {len} bytes does not fit in a PWB of {} bytes (raise pwb_size)",
                self.size
            )));
        }
        let mut ring = self.ring.lock();
        if let Some(res) = ring.reserve(fp) {
            if res.new_tail - ring.head >= self.watermark {
                wake();
            }
            return Ok(Reserved {
                pwb: self,
                ring,
                res,
                len,
            });
        }
        self.waiters.fetch_add(1, Ordering::AcqRel);
        let res = loop {
            wake();
            if let Err(e) = check() {
                self.waiters.fetch_sub(1, Ordering::AcqRel);
                return Err(e);
            }
            self.space.wait_for(&mut ring, FULL_WAIT);
            if let Some(res) = ring.reserve(fp) {
                break res;
            }
        };
        self.waiters.fetch_sub(1, Ordering::AcqRel);
        Ok(Reserved {
            pwb: self,
            ring,
            res,
            len,
        })
    }

    /// Writes the record of reservation `res` (and the pad before it, if any) and persists
    /// it; moves the tail. The caller holds the append lock (`ring` is its guard's ring).
    fn write_record(
        &self,
        ring: &mut Ring,
        res: ring::Reservation,
        backptr: u64,
        value: &[u8],
    ) -> Result<u64> {
        if let Some((at, span)) = res.pad {
            let off = self.ring_off + ring.offset(at);
            self.pool.write(off, &encode_pad(span))?;
            self.pool.persist(off, HEADER_LEN)?;
        }
        let off = self.ring_off + ring.offset(res.at);
        self.pool.write(off, &encode_header(backptr, value))?;
        self.pool.write(off + HEADER_LEN as u64, value)?;
        // IMPORTANT: the record is durable before anything can point at it (invariant 1).
        self.pool.persist(off, HEADER_LEN + value.len())?;
        ring.tail = res.new_tail;
        Ok(off)
    }

    /// Takes the append lock and room for records of `lens` bytes, appended in order (a
    /// write batch reserves all its records before its commit point). Waits while the
    /// ring lacks the room, as [`Pwb::reserve`] does; `InvalidArgument` when the records
    /// take more than half the ring (then they might never fit).
    ///
    /// IMPORTANT: the caller must not be pinned (`crossbeam_epoch`) while this waits.
    pub fn reserve_run(
        &self,
        lens: &[usize],
        wake: &dyn Fn(),
        check: &dyn Fn() -> Result<()>,
    ) -> Result<ReservedRun<'_>> {
        let fps: Vec<u64> = lens.iter().map(|&l| footprint(l)).collect();
        let total: u64 = fps.iter().sum();
        // Half the ring: the run then fits an empty ring wherever its tail is (one pad of
        // less than the largest record at most, and each record is at most the run).
        if total > self.size / 2 {
            return Err(Error::invalid(format!(
                "the records of a write batch take {total} bytes, more than half a PWB of {} \
                 bytes (raise pwb_size or split the batch)",
                self.size
            )));
        }
        let mut ring = self.ring.lock();
        if !run_fits(&ring, &fps) {
            self.waiters.fetch_add(1, Ordering::AcqRel);
            let waited = loop {
                wake();
                if let Err(e) = check() {
                    break Err(e);
                }
                self.space.wait_for(&mut ring, FULL_WAIT);
                if run_fits(&ring, &fps) {
                    break Ok(());
                }
            };
            self.waiters.fetch_sub(1, Ordering::AcqRel);
            waited?;
        }
        if ring.tail + total - ring.head >= self.watermark {
            wake();
        }
        Ok(ReservedRun {
            pwb: self,
            ring,
            left: fps.into(),
        })
    }

    /// Reads the value of the record at absolute offset `off`, checking that it belongs to
    /// `slot` and that its checksum holds.
    pub fn read(&self, off: u64, slot: u64) -> Result<Vec<u8>> {
        let (h, value) = self.record_at(off)?;
        if h.backptr != slot {
            return Err(Error::corruption(
                Tier::Pmem,
                off,
                format!(
                    "PWB record's backward pointer {} is not slot {slot}",
                    h.backptr
                ),
            ));
        }
        if !h.verifies(value) {
            return Err(Error::corruption(
                Tier::Pmem,
                off,
                "PWB record checksum mismatch",
            ));
        }
        Ok(value.to_vec())
    }

    /// The header and value bytes of the record at absolute offset `off` (bounds checked
    /// against the ring, checksum not verified).
    pub fn record_at(&self, off: u64) -> Result<(RecordHeader, &[u8])> {
        let end = self.ring_off + self.size;
        let bad = |what: &str| Error::corruption(Tier::Pmem, off, format!("PWB record: {what}"));
        if off < self.ring_off || off + HEADER_LEN as u64 > end {
            return Err(bad("offset outside the ring"));
        }
        let h = decode_header(self.pool.read(off, HEADER_LEN)?).ok_or_else(|| bad("short"))?;
        let body = off + HEADER_LEN as u64;
        if body + u64::from(h.len) > end {
            return Err(bad("runs past the end of the ring"));
        }
        let value = self.pool.read(body, h.len as usize)?;
        Ok((h, value))
    }

    /// Moves the head to `new_head` (reclamation done up to it): persisted first, then
    /// published to writers (invariant 3; the caller has waited out the grace period).
    pub fn advance_head(&self, new_head: u64) -> Result<()> {
        {
            let ring = self.ring.lock();
            if new_head < ring.head || new_head > ring.tail {
                return Err(Error::corruption(
                    Tier::Pmem,
                    self.desc_off,
                    format!("PWB {} head cannot move to {new_head} ({ring:?})", self.id),
                ));
            }
        }
        self.pool.store_u64(self.desc_off, new_head)?;
        self.pool.persist(self.desc_off, 8)?;
        self.ring.lock().head = new_head;
        self.space.notify_all();
        Ok(())
    }

    /// Recovery: resume appending at `tail` (found from HSIT, §5.5).
    pub fn set_recovered_tail(&self, tail: u64) {
        let mut ring = self.ring.lock();
        ring.tail = tail.max(ring.head);
    }

    /// Wakes writers waiting for space (shutdown, poison).
    pub fn wake_writers(&self) {
        self.space.notify_all();
    }
}

/// All PWBs of a store, and the mapping of threads onto them.
#[derive(Debug)]
pub struct PwbSet {
    pwbs: Vec<Pwb>,
    base: u64,
    size: u64,
}

static NEXT_THREAD: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    static THREAD_ID: usize = NEXT_THREAD.fetch_add(1, Ordering::Relaxed);
}

impl PwbSet {
    /// The set of `pwbs`, laid out back to back from PWB 0's ring (as the superblock
    /// places them).
    pub fn new(pwbs: Vec<Pwb>) -> Self {
        let base = pwbs.first().map_or(0, |p| p.ring_off);
        let size = pwbs.first().map_or(1, |p| p.size);
        PwbSet { pwbs, base, size }
    }

    /// The PWB the calling thread appends to.
    pub fn for_current_thread(&self) -> Result<&Pwb> {
        let n = self.pwbs.len().max(1);
        let i = THREAD_ID.with(|id| *id) % n;
        self.pwbs
            .get(i)
            .ok_or_else(|| Error::invalid("a PRISM store needs at least one PWB"))
    }

    /// The PWB holding absolute pool offset `off`, if any.
    pub fn holding(&self, off: u64) -> Option<&Pwb> {
        let i = usize::try_from(off.checked_sub(self.base)? / self.size).ok()?;
        self.pwbs.get(i).filter(|p| p.holds(off))
    }

    /// Every PWB.
    pub fn iter(&self) -> impl Iterator<Item = &Pwb> {
        self.pwbs.iter()
    }

    /// PWB `i`.
    pub fn get(&self, i: usize) -> Option<&Pwb> {
        self.pwbs.get(i)
    }

    /// Number of PWBs.
    pub fn len(&self) -> usize {
        self.pwbs.len()
    }

    /// True when there is none (never, for an open store).
    pub fn is_empty(&self) -> bool {
        self.pwbs.is_empty()
    }
}

#[cfg(test)]
mod tests;
