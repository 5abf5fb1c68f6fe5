//! The data path of [`PmemPool`]: bounds-checked reads, writes, aligned atomic words and
//! `persist` in each durability mode (DESIGN §4).
//!
//! Rules every call follows:
//! - Offsets are absolute pool offsets. A range outside the pool, or a word offset that is
//!   not 8-aligned, is [`Error::Corruption`] with tier Pmem (such offsets come from
//!   pointers read off pmem) — never a panic, never an access outside the mapping.
//! - Mutations are refused below [`PmemPool::data_start`] (the header area; root words
//!   change through `set_root`) and after a persist failure ([`Error::Poisoned`]).
//! - Every mutation is made of aligned 8-byte atomic stores: `write`/`fill` store whole
//!   words and merge partial words at the ends with a compare-and-swap loop, so no aligned
//!   word is ever torn by a write and concurrent writers of neighbouring bytes never lose
//!   each other's bytes. Data stores are `Relaxed`; publication is the engine's job
//!   (`store_u64`/`cas_u64` are `Release`, `load_u64` is `Acquire`; see `mapping.rs`).
//! - Word values are stored little-endian (as FORMAT.md says), whatever the host order.
//! - A write is NOT durable until a `persist` covering it returns.
//! - Counters: every byte written or read through these calls is counted; CAS counts 8
//!   bytes written when it succeeds and 8 read when it fails.
//!
//! Thread safety: every method takes `&self` and may be called from any thread; in Tracked
//! mode each mutation holds the shared side of the shadow's gate (`tracked.rs`).

use std::sync::atomic::{AtomicU64, Ordering};

use super::latency::lines_touched;
use super::mapping::{memory_bytes, word_from_memory_bytes};
use super::persist::store_fence;
use super::pool::PmemPool;
use crate::api::error::{Error, Result, Tier};
use crate::api::options::DurabilityMode;

impl PmemPool {
    /// The bytes `[off, off + len)` as a slice of the mapping (no copy). See `mapping.rs`
    /// for what concurrent writers may do to them.
    pub fn read(&self, off: u64, len: usize) -> Result<&[u8]> {
        let start = self.span(off, len, "read")?;
        let bytes = self
            .map
            .slice(start, len)
            .ok_or_else(|| self.outside(off, len, "read"))?;
        self.bytes_read.add(len as u64);
        self.latency.on_read(lines_touched(off, len));
        Ok(bytes)
    }

    /// Hints that `[off, off + len)` will be read soon (see `common::prefetch`): not a
    /// read, so neither counted nor charged emulated latency; a range outside the pool is
    /// ignored.
    pub fn prefetch(&self, off: u64, len: usize) {
        if let Some(bytes) = usize::try_from(off)
            .ok()
            .and_then(|start| self.map.slice(start, len))
        {
            crate::common::prefetch::prefetch_bytes(bytes);
        }
    }

    /// Copies `[off, off + buf.len())` into `buf`.
    pub fn read_into(&self, off: u64, buf: &mut [u8]) -> Result<()> {
        buf.copy_from_slice(self.read(off, buf.len())?);
        Ok(())
    }

    /// Writes `data` at `off`. NOT durable until a `persist` covering it returns.
    pub fn write(&self, off: u64, data: &[u8]) -> Result<()> {
        let start = self.mutable_span(off, data.len(), "write")?;
        self.mutate(start, data.len(), || self.store_bytes(start, data));
        self.bytes_written.add(data.len() as u64);
        Ok(())
    }

    /// Sets `len` bytes at `off` to `byte`. NOT durable until persisted.
    pub fn fill(&self, off: u64, len: usize, byte: u8) -> Result<()> {
        let start = self.mutable_span(off, len, "fill")?;
        self.mutate(start, len, || self.fill_bytes(start, len, byte));
        self.bytes_written.add(len as u64);
        Ok(())
    }

    /// Writes `data` at `off` and persists it.
    pub fn write_persist(&self, off: u64, data: &[u8]) -> Result<()> {
        self.write(off, data)?;
        self.persist(off, data.len())
    }

    /// Loads the aligned word at `off` (`Acquire`).
    pub fn load_u64(&self, off: u64) -> Result<u64> {
        let (_, w) = self.word_at(off, "load", false)?;
        self.bytes_read.add(8);
        Ok(u64::from_le(w.load(Ordering::Acquire)))
    }

    /// Stores `v` in the aligned word at `off` (`Release`; one atomic store, never torn).
    /// NOT durable until persisted.
    pub fn store_u64(&self, off: u64, v: u64) -> Result<()> {
        let (at, w) = self.word_at(off, "store", true)?;
        self.mutate(at, 8, || w.store(v.to_le(), Ordering::Release));
        self.bytes_written.add(8);
        Ok(())
    }

    /// Compare-and-swap of the aligned word at `off` (`AcqRel`): `Ok(Ok(current))` if it
    /// held `current` and now holds `new`, `Ok(Err(actual))` if it held `actual`.
    pub fn cas_u64(&self, off: u64, current: u64, new: u64) -> Result<Result<u64, u64>> {
        let (at, w) = self.word_at(off, "compare-and-swap", true)?;
        let r = self.mutate(at, 8, || {
            w.compare_exchange(
                current.to_le(),
                new.to_le(),
                Ordering::AcqRel,
                Ordering::Acquire,
            )
        });
        let r = r.map(u64::from_le).map_err(u64::from_le);
        match r {
            Ok(_) => self.bytes_written.add(8),
            Err(_) => self.bytes_read.add(8),
        }
        Ok(r)
    }

    /// Atomically ORs `bits` into the aligned word at `off` (`AcqRel`); returns the old value.
    pub fn fetch_or_u64(&self, off: u64, bits: u64) -> Result<u64> {
        let (at, w) = self.word_at(off, "fetch-or", true)?;
        let old = self.mutate(at, 8, || w.fetch_or(bits.to_le(), Ordering::AcqRel));
        self.bytes_written.add(8);
        Ok(u64::from_le(old))
    }

    /// Atomically ANDs `bits` into the aligned word at `off` (`AcqRel`); returns the old value.
    pub fn fetch_and_u64(&self, off: u64, bits: u64) -> Result<u64> {
        let (at, w) = self.word_at(off, "fetch-and", true)?;
        let old = self.mutate(at, 8, || w.fetch_and(bits.to_le(), Ordering::AcqRel));
        self.bytes_written.add(8);
        Ok(u64::from_le(old))
    }

    /// Makes every store to `[off, off + len)` made before this call durable (per the
    /// mode: cache-line write-back + fence, msync, nothing, or a copy to the tracked
    /// image). Lines are the unit: the whole 64-byte lines (msync: pages) covering the range
    /// are persisted, neighbours included.
    pub fn persist(&self, off: u64, len: usize) -> Result<()> {
        self.check_poisoned()?;
        let start = self.span(off, len, "persist")?;
        self.persists.incr();
        self.latency.on_persist();
        match self.mode {
            DurabilityMode::Dax => {
                if let Some(instr) = self.flush {
                    self.map.write_back(start, len, instr);
                }
                store_fence();
                Ok(())
            }
            DurabilityMode::Msync if len > 0 => self.map.msync(start, len).map_err(|e| {
                let err = Error::io("msync", &self.path, e);
                let _ = self.poisoned.set(format!("pmem persist failed: {err}"));
                err
            }),
            DurabilityMode::Msync | DurabilityMode::Volatile => Ok(()),
            DurabilityMode::Tracked => {
                if let Some(shadow) = &self.shadow {
                    let _gate = shadow.gate();
                    shadow.persist_lines(&self.map, start, len);
                }
                // NOTE: after the gate is released, so a handler can take a crash image.
                if let Some(points) = &self.points {
                    points.after_persist(off, len);
                }
                Ok(())
            }
        }
    }

    /// Runs the stores of one mutation of `[start, start + len)`; in Tracked mode under the
    /// shared side of the gate, marking the lines dirty before releasing it.
    pub(super) fn mutate<R>(&self, start: usize, len: usize, stores: impl FnOnce() -> R) -> R {
        match &self.shadow {
            None => stores(),
            Some(shadow) => {
                let _gate = shadow.gate();
                let r = stores();
                shadow.mark_dirty(start, len);
                r
            }
        }
    }

    /// Checks that `[off, off + len)` is inside the pool; returns `off` as a usize.
    fn span(&self, off: u64, len: usize, op: &str) -> Result<usize> {
        let end = off.checked_add(len as u64);
        match (usize::try_from(off), end) {
            (Ok(start), Some(end)) if end <= self.len() => Ok(start),
            _ => Err(self.outside(off, len, op)),
        }
    }

    /// [`Self::span`], plus: not in the header area, and the pool is not poisoned.
    fn mutable_span(&self, off: u64, len: usize, op: &str) -> Result<usize> {
        self.check_poisoned()?;
        let start = self.span(off, len, op)?;
        if off < self.data_start() && len > 0 {
            return Err(Error::corruption(
                Tier::Pmem,
                off,
                format!(
                    "{op} of {len} bytes at offset {off} would overwrite the pool header \
                     (the engine region starts at {})",
                    self.data_start()
                ),
            ));
        }
        Ok(start)
    }

    /// The aligned word at `off` and its offset, checked (and, for mutations, outside the
    /// header area).
    fn word_at(&self, off: u64, op: &str, mutating: bool) -> Result<(usize, &AtomicU64)> {
        if !off.is_multiple_of(8) {
            return Err(Error::corruption(
                Tier::Pmem,
                off,
                format!("{op} of a word at offset {off}, which is not 8-byte aligned"),
            ));
        }
        let start = if mutating {
            self.mutable_span(off, 8, op)?
        } else {
            self.span(off, 8, op)?
        };
        let w = self
            .map
            .word(start)
            .ok_or_else(|| self.outside(off, 8, op))?;
        Ok((start, w))
    }

    fn outside(&self, off: u64, len: usize, op: &str) -> Error {
        Error::corruption(
            Tier::Pmem,
            off,
            format!(
                "{op} of {len} bytes at offset {off} is outside the pool of {} bytes",
                self.len()
            ),
        )
    }

    /// Stores `data` at `start` as aligned word stores (partial end words merged by CAS).
    /// The range is checked by the caller.
    pub(super) fn store_bytes(&self, start: usize, data: &[u8]) {
        let mut pos = start;
        let mut rest = data;
        // The whole words in the middle through one bounds check (a 1 KiB write is 128
        // words; checking each one cost more than storing it).
        let head = ((8 - pos % 8) % 8).min(rest.len());
        let (first, after) = rest.split_at(head);
        if !first.is_empty() {
            self.merge_into_word(pos - pos % 8, pos % 8, first);
            pos += first.len();
        }
        let whole = after.len() / 8;
        if let Some(words) = self.map.words(pos, whole) {
            let (mid, tail) = after.split_at(whole * 8);
            for (w, b) in words.iter().zip(mid.chunks_exact(8)) {
                let mut bytes = [0u8; 8];
                bytes.copy_from_slice(b);
                w.store(word_from_memory_bytes(bytes), Ordering::Relaxed);
            }
            pos += mid.len();
            rest = tail;
        } else {
            rest = after;
        }
        while !rest.is_empty() {
            let in_word = pos % 8;
            let n = (8 - in_word).min(rest.len());
            let (now, later) = rest.split_at(n);
            if n == 8 {
                let mut b = [0u8; 8];
                b.copy_from_slice(now);
                if let Some(w) = self.map.word(pos) {
                    w.store(word_from_memory_bytes(b), Ordering::Relaxed);
                }
            } else {
                self.merge_into_word(pos - in_word, in_word, now);
            }
            pos += n;
            rest = later;
        }
    }

    /// Sets `len` bytes at `start` to `byte` (range checked by the caller).
    fn fill_bytes(&self, start: usize, len: usize, byte: u8) {
        let end = start + len;
        let mut pos = start;
        let pattern = [byte; 8];
        while pos < end {
            let in_word = pos % 8;
            let n = (8 - in_word).min(end - pos);
            if n == 8 {
                if let Some(w) = self.map.word(pos) {
                    w.store(word_from_memory_bytes(pattern), Ordering::Relaxed);
                }
            } else {
                self.merge_into_word(pos - in_word, in_word, pattern.get(..n).unwrap_or_default());
            }
            pos += n;
        }
    }

    /// Replaces bytes `[at, at + bytes.len())` of the word at `word_off`, atomically with
    /// respect to other writers of the same word.
    fn merge_into_word(&self, word_off: usize, at: usize, bytes: &[u8]) {
        let Some(w) = self.map.word(word_off) else {
            return;
        };
        let merge = |old: u64| {
            let mut b = memory_bytes(old);
            if let Some(dst) = b.get_mut(at..at + bytes.len()) {
                dst.copy_from_slice(bytes);
            }
            Some(word_from_memory_bytes(b))
        };
        // The closure always returns Some, so fetch_update cannot fail.
        let _ = w.fetch_update(Ordering::Relaxed, Ordering::Relaxed, merge);
    }
}
