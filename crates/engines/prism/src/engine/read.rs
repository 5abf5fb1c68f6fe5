//! The read paths: get and scan (PRISM §4.4, §5.3, §5.4).
//!
//! A get finds the key's slot in the key index and follows its forward pointer (persisting
//! it first if it is dirty, §5.4): a PWB record is read from pmem; a Value Storage value is
//! taken from the SVC when HSIT's DRAM array holds a copy read from that very location,
//! else read from flash through the thread combiner (§5.3) and admitted to the SVC (§4.4:
//! admission only on a flash read).
//!
//! A flash read is trusted only if HSIT still points at the location after the read: if the
//! value moved meanwhile (reclamation, GC, a put) the read is retried, so a chunk that GC
//! recycled under a slow reader can never leak another value. The same check after
//! installing the SVC link removes a link that raced with an update.
//!
//! A scan takes `(key, slot)` pairs from the index in key order, resolves the PWB and SVC
//! hits at once, and fetches the rest from flash in one batch per Value Storage, admitting
//! them with one new scan chain (§4.4 "Accelerating scan operation") — except values
//! already in a run of key-order neighbours on flash (ours): a chain write-back put them
//! there so that a scan reads them in one merged read, which it does again next time;
//! admitting them too made every scanned value an SVC admission and an eviction (YCSB-E
//! at 32 threads: the SVC thread took a fifth of the CPU, mostly freeing evicted values
//! allocated by other threads). Keys found deleted
//! are skipped and the index is asked for more, so a scan returns `limit` pairs whenever
//! that many keys exist.
//!
//! Thread safety: any number of threads; readers take no locks besides the index's and
//! the combiner's queue.

use std::sync::Arc;

use crossbeam_epoch::Guard;
use tierkv_core::{Error, KvPair, Result, Tier};

use super::core::Core;
use crate::hsit::entry::{ForwardPointer, Location};
use crate::svc::{CachedValue, ScanChainId};
use crate::value_storage::ValueLocation;

use super::reclaim::scattered_members;

/// Reads of one slot that found its value moving before giving up with an error.
const MAX_READ_ATTEMPTS: u32 = 10_000;

/// What reading one slot found.
enum SlotRead {
    /// The value.
    Value(Vec<u8>),
    /// The key is being deleted.
    Absent,
    /// The value moved while it was read: read again.
    Moved,
}

/// A scan row waiting for its flash read.
struct Pending {
    row: usize,
    slot: u64,
    fp: ForwardPointer,
    loc: ValueLocation,
}

impl Core {
    /// The value of `key`.
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.life.check_open()?;
        self.limits.check_key(key)?;
        let guard = crossbeam_epoch::pin();
        for _ in 0..MAX_READ_ATTEMPTS {
            let Some(slot) = self.index.get(key)? else {
                return Ok(None);
            };
            match self.read_slot(slot, None, &guard)? {
                SlotRead::Value(v) => {
                    self.counters.ops.user_bytes_read.add(v.len() as u64);
                    return Ok(Some(v));
                }
                SlotRead::Absent => return Ok(None),
                SlotRead::Moved => {}
            }
        }
        Err(moving(key))
    }

    /// Follows `slot`'s forward pointer.
    fn read_slot(&self, slot: u64, key: Option<&[u8]>, guard: &Guard) -> Result<SlotRead> {
        let fp = self.load_for_use(slot)?;
        match self.location_of(slot, fp)? {
            Location::None => Ok(SlotRead::Absent),
            Location::Pwb(off) => self.read_pwb(slot, off).map(SlotRead::Value),
            Location::Flash(p) => {
                if let Some(v) = self.read_cached(slot, p, None, guard) {
                    return Ok(SlotRead::Value(v));
                }
                let loc = ValueLocation::unpack(p);
                let got = self.storage_of(loc)?.read(loc);
                self.finish_flash_read(slot, fp, got, key, None, true, guard)
            }
        }
    }

    fn read_pwb(&self, slot: u64, off: u64) -> Result<Vec<u8>> {
        let pwb = self.pwbs.holding(off).ok_or_else(|| {
            Error::corruption(
                Tier::Pmem,
                off,
                format!("HSIT slot {slot} points outside every PWB"),
            )
        })?;
        let v = pwb.read(off, slot)?;
        self.counters.ops.reads_from_pmem.incr();
        Ok(v)
    }

    /// The SVC's copy of the value at `packed`, if it has one. A point read's hit is
    /// touched at once; a scan's is added to `scan_hits`, touched with the scan's chain
    /// in one message at the end of the batch.
    fn read_cached(
        &self,
        slot: u64,
        packed: u64,
        scan_hits: Option<&mut Vec<Arc<CachedValue>>>,
        guard: &Guard,
    ) -> Option<Vec<u8>> {
        let cv = self.hsit.cache().get(slot, packed, guard)?;
        self.counters.ops.reads_from_dram.incr();
        let value = cv.value().to_vec();
        match scan_hits {
            Some(hits) => hits.push(cv),
            None => self.svc.touch(&cv),
        }
        Some(value)
    }

    /// Accepts a flash read of `slot` made while HSIT held `fp`, admits it to the SVC
    /// (with `chain`, a scan's) unless `admit` is false.
    #[allow(
        clippy::too_many_arguments,
        reason = "one read's context, passed through"
    )]
    fn finish_flash_read(
        &self,
        slot: u64,
        fp: ForwardPointer,
        got: Result<(u64, Vec<u8>)>,
        key: Option<&[u8]>,
        chain: Option<ScanChainId>,
        admit: bool,
        guard: &Guard,
    ) -> Result<SlotRead> {
        // IMPORTANT: a read is only as good as the pointer that is still there after it.
        if self.hsit.load(slot)?.clean() != fp.clean() {
            return Ok(SlotRead::Moved);
        }
        let (backptr, value) = got?;
        let Some(Location::Flash(packed)) = fp.location() else {
            return Ok(SlotRead::Moved);
        };
        if backptr != slot {
            return Err(Error::corruption(
                Tier::Flash,
                packed,
                format!("value for HSIT slot {slot} carries backward pointer {backptr}"),
            ));
        }
        if !admit {
            self.svc.miss();
            self.counters.ops.reads_from_flash.incr();
            return Ok(SlotRead::Value(value));
        }
        // One copy for the cache; the caller gets the buffer the read produced.
        let cv = self.svc.admit(slot, key, Arc::from(&value[..]), chain);
        self.hsit.cache().install(slot, packed, cv.clone(), guard);
        if self.hsit.load(slot)?.clean() != fp.clean()
            && self
                .hsit
                .cache()
                .clear_if(slot, |v| Arc::ptr_eq(v, &cv), guard)
                .is_some()
        {
            self.svc.remove(&cv);
        }
        self.counters.ops.reads_from_flash.incr();
        Ok(SlotRead::Value(value))
    }

    /// Up to `limit` pairs with keys `>= start`, in key order.
    pub fn scan(&self, start: &[u8], limit: usize) -> Result<Vec<KvPair>> {
        self.life.check_open()?;
        let guard = crossbeam_epoch::pin();
        let mut out: Vec<KvPair> = Vec::new();
        let mut cursor = start.to_vec();
        while out.len() < limit {
            let want = limit - out.len();
            let rows = self.index.scan(&cursor, want)?;
            let got = rows.len();
            let Some(last) = rows.last().map(|r| r.0.clone()) else {
                break;
            };
            out.extend(self.fetch_rows(rows, &guard)?);
            if got < want {
                break;
            }
            cursor = last;
            cursor.push(0);
        }
        self.counters
            .ops
            .user_bytes_read
            .add(out.iter().map(|(_, v)| v.len() as u64).sum());
        Ok(out)
    }

    /// Values of index rows: PWB and SVC hits directly, the rest in one flash batch per
    /// Value Storage. Rows whose key is being deleted are dropped.
    fn fetch_rows(&self, rows: Vec<(Vec<u8>, u64)>, guard: &Guard) -> Result<Vec<KvPair>> {
        let chain = self.svc.new_scan_chain();
        let mut values: Vec<Option<Vec<u8>>> = Vec::with_capacity(rows.len());
        let mut pending = Vec::new();
        let mut hits = Vec::new();
        for (row, (_, slot)) in rows.iter().enumerate() {
            let slot = *slot;
            let fp = self.load_for_use(slot)?;
            let v = match self.location_of(slot, fp)? {
                Location::None => None,
                Location::Pwb(off) => Some(self.read_pwb(slot, off)?),
                Location::Flash(p) => {
                    let hit = self.read_cached(slot, p, Some(&mut hits), guard);
                    if hit.is_none() {
                        let loc = ValueLocation::unpack(p);
                        pending.push(Pending { row, slot, fp, loc });
                    }
                    hit
                }
            };
            values.push(v);
        }
        self.svc.touch_in_scan(hits, chain);
        if !pending.is_empty() {
            self.fetch_pending(&rows, &pending, &mut values, chain, guard)?;
        }
        Ok(rows
            .into_iter()
            .zip(values)
            .filter_map(|((k, _), v)| v.map(|v| (k, v)))
            .collect())
    }

    fn fetch_pending(
        &self,
        rows: &[(Vec<u8>, u64)],
        pending: &[Pending],
        values: &mut [Option<Vec<u8>>],
        chain: ScanChainId,
        guard: &Guard,
    ) -> Result<()> {
        for (sid, storage) in self.storages.iter().enumerate() {
            let mine: Vec<&Pending> = pending
                .iter()
                .filter(|p| usize::from(p.loc.storage) == sid)
                .collect();
            if mine.is_empty() {
                continue;
            }
            let locs: Vec<ValueLocation> = mine.iter().map(|p| p.loc).collect();
            // Values in a run of key-order neighbours (a chain write-back put them there)
            // are not cached by the scan: the next scan of the range reads the run again
            // in one merged read, and caching them only churned the SVC (ours; module doc).
            let scattered = scattered_members(&locs);
            // A failed batch (a chunk recycled under us, an I/O error) falls back to reading
            // each row on its own, which tells moved values from real errors.
            let mut batch = storage.read_many(&locs).ok();
            for (i, p) in mine.iter().enumerate() {
                let key = rows.get(p.row).map(|r| r.0.as_slice());
                let got = match batch.as_mut().and_then(|b| b.get_mut(i)) {
                    Some((bp, v)) => Ok((*bp, std::mem::take(v))),
                    None => storage.read(p.loc),
                };
                let admit = scattered.binary_search(&i).is_ok();
                let mut r =
                    self.finish_flash_read(p.slot, p.fp, got, key, Some(chain), admit, guard)?;
                let mut attempts = 0;
                while matches!(r, SlotRead::Moved) {
                    attempts += 1;
                    if attempts > MAX_READ_ATTEMPTS {
                        return Err(moving(key.unwrap_or_default()));
                    }
                    r = self.read_slot(p.slot, key, guard)?;
                }
                if let (SlotRead::Value(v), Some(dst)) = (r, values.get_mut(p.row)) {
                    *dst = Some(v);
                }
            }
        }
        Ok(())
    }
}

fn moving(key: &[u8]) -> Error {
    Error::corruption(
        Tier::Pmem,
        0,
        format!(
            "the value of key {:?} kept moving while it was read ({MAX_READ_ATTEMPTS} attempts)",
            String::from_utf8_lossy(key)
        ),
    )
}
