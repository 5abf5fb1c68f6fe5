//! Records in DRAM pages (layout: `format::record`), read and updated in place under a
//! seqlock in the meta word.
//!
//! - A new record is written word by word and its meta word last (`Release`); nobody can
//!   reach it before the index holds its address.
//! - An in-place update (HeterMM §4.3: the record is in the mutable region) sets the
//!   `locked` bit with a compare-and-swap, takes a new timestamp, rewrites the value, the
//!   lengths and the checksum, and stores the new meta word, unlocked (`Release`).
//! - A reader loads meta (`Acquire`), waits while it is locked, copies the words, fences
//!   (`Acquire`), and retries if meta changed. The writer fences (`Release`) right after it
//!   takes the lock — the standard seqlock pair (Boehm, "Can seqlocks get along with
//!   programming language memory models?", 2012). Timestamps only grow, so an unchanged meta word means an
//!   unchanged record.
//! - Sealing (an out-of-place update or a delete replaced the record) sets `superseded`
//!   under the lock; an in-place update that finds it set leaves the record alone, so
//!   every in-place update of a record happens before the timestamp of whatever replaced it
//!   (which is taken after the seal) — the order recovery relies on, whatever the index's
//!   own locking.
//!
//! Every access is an atomic word operation (no `unsafe`, no data race); a word holds 8
//! record bytes in little-endian order, exactly as they are copied to pmem.
//!
//! Thread safety: any thread; concurrent in-place writers of one record serialize on the
//! lock bit.

use std::sync::atomic::{AtomicU64, Ordering, fence};

use tierkv_core::{Error, Result, Tier};

use super::Page;
use crate::format::record::{
    FLAG_PADDING, HEADER_LEN, META_LOCKED, META_LOGGED, META_SUPERSEDED, RecordHeader, TS_SHIFT,
    record_crc,
};

/// Word index of a record's meta word.
fn base(at: u64) -> usize {
    (at / 8) as usize
}

fn word(page: &Page, i: usize) -> Result<&AtomicU64> {
    page.get(i)
        .ok_or_else(|| Error::corruption(Tier::Dram, i as u64 * 8, "record runs past its page"))
}

/// Word `j` of the data area (key, then value, then zero padding).
fn data_word(key: &[u8], value: &[u8], j: usize) -> u64 {
    let mut b = [0u8; 8];
    for (i, out) in b.iter_mut().enumerate() {
        let p = j * 8 + i;
        *out = match key.get(p) {
            Some(k) => *k,
            None => value.get(p - key.len()).copied().unwrap_or(0),
        };
    }
    u64::from_le_bytes(b)
}

/// Writes a new record at byte `at` of `page` with `value_cap >= value.len()`.
pub fn write_new(
    page: &Page,
    at: u64,
    ts: u64,
    key: &[u8],
    value: &[u8],
    value_cap: u32,
) -> Result<()> {
    let h = RecordHeader::new(ts, 0, key, value, value_cap);
    write_header_and_data(page, at, &h, key, value)
}

/// Writes a padding record of `len` bytes at `at`: space that was reserved and never
/// used, kept walkable (it belongs to no key; its invalid bit is set when it is flushed).
pub fn write_padding(page: &Page, at: u64, len: u64) -> Result<()> {
    let value_cap = (len - HEADER_LEN - 1) as u32;
    let h = RecordHeader::new(1, FLAG_PADDING, &[0], &[], value_cap);
    write_header_and_data(page, at, &h, &[0], &[])
}

fn write_header_and_data(
    page: &Page,
    at: u64,
    h: &RecordHeader,
    key: &[u8],
    value: &[u8],
) -> Result<()> {
    let b = base(at);
    let data_words = (h.size() - HEADER_LEN) as usize / 8;
    word(page, b + 2 + data_words)?;
    word(page, b + 1)?.store(h.word1(), Ordering::Relaxed);
    word(page, b + 2)?.store(h.word2(), Ordering::Relaxed);
    for j in 0..data_words {
        word(page, b + 3 + j)?.store(data_word(key, value, j), Ordering::Relaxed);
    }
    word(page, b)?.store(h.meta, Ordering::Release);
    Ok(())
}

/// Reads the value of the record at `at`, checking that it belongs to `key` (an index
/// entry pointing at another key's record is corruption).
pub fn read_value(page: &Page, at: u64, key: &[u8]) -> Result<Vec<u8>> {
    read_value_and_meta(page, at, key).map(|(v, _)| v)
}

/// True when a meta word says the version's log entry is durable.
pub fn is_logged(meta: u64) -> bool {
    meta & META_LOGGED != 0
}

/// Waits until the meta word of the record at `at` is no longer `seen` (the version was
/// logged, updated or sealed), or `give_up()` says to stop; returns false then.
pub fn wait_for_change(page: &Page, at: u64, seen: u64, give_up: impl Fn() -> bool) -> bool {
    let Some(meta) = page.get(base(at)) else {
        return false;
    };
    let mut spins = 0u32;
    while meta.load(Ordering::Acquire) == seen {
        spins += 1;
        if spins.is_multiple_of(1024) && give_up() {
            return false;
        }
        backoff(spins);
    }
    true
}

/// [`read_value`], and the meta word the value was read under.
pub fn read_value_and_meta(page: &Page, at: u64, key: &[u8]) -> Result<(Vec<u8>, u64)> {
    let b = base(at);
    let meta = word(page, b)?;
    let mut spins = 0u32;
    loop {
        let m1 = meta.load(Ordering::Acquire);
        if m1 & META_LOCKED != 0 {
            spins += 1;
            backoff(spins);
            continue;
        }
        let h = header(page, at, m1)?;
        let klen = usize::from(h.key_len);
        let end = klen + h.value_len as usize;
        let mut bytes = Vec::with_capacity(end.div_ceil(8) * 8);
        for j in 0..end.div_ceil(8) {
            bytes.extend_from_slice(&word(page, b + 3 + j)?.load(Ordering::Relaxed).to_le_bytes());
        }
        fence(Ordering::Acquire);
        if meta.load(Ordering::Relaxed) != m1 {
            continue;
        }
        if bytes.get(..klen) != Some(key) {
            return Err(Error::corruption(
                Tier::Dram,
                at,
                "an index entry points at another key's record",
            ));
        }
        bytes.truncate(end);
        bytes.drain(..klen);
        return Ok((bytes, m1));
    }
}

fn header(page: &Page, at: u64, meta: u64) -> Result<RecordHeader> {
    let b = base(at);
    let w1 = word(page, b + 1)?.load(Ordering::Relaxed);
    let w2 = word(page, b + 2)?.load(Ordering::Relaxed);
    let h = RecordHeader::from_words(meta & !(META_LOCKED | META_SUPERSEDED), w1, w2)
        .ok_or_else(|| Error::corruption(Tier::Dram, at, "no valid record here"))?;
    if (at % (page.len() as u64 * 8)) + h.size() > page.len() as u64 * 8 {
        return Err(Error::corruption(
            Tier::Dram,
            at,
            "record runs past its page",
        ));
    }
    Ok(h)
}

fn backoff(spins: u32) {
    if spins < 64 {
        std::hint::spin_loop();
    } else {
        std::thread::yield_now();
    }
}

/// Takes the record's lock; returns the meta word it held.
///
/// The seqlock writer's fence: the lock is a compare-and-swap whose store part is relaxed,
/// so without a fence the relaxed data stores that follow may become visible before the
/// locked meta word (weakly ordered CPUs; x86's stores stay in order). A reader that saw
/// some of the new bytes could then still read the old, unlocked meta word after its own
/// acquire fence and return a torn value (DRAM reads carry no checksum). With the release
/// fence here, a reader that reads any store made after it synchronizes with it at its
/// acquire fence, and its second load of meta sees the lock (or a later word): it retries.
fn lock(meta: &AtomicU64) -> u64 {
    let mut spins = 0u32;
    loop {
        let m = meta.load(Ordering::Acquire);
        if m & META_LOCKED == 0
            && meta
                .compare_exchange_weak(m, m | META_LOCKED, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
        {
            // IMPORTANT: the standard seqlock writer fence (see above).
            fence(Ordering::Release);
            return m;
        }
        spins += 1;
        backoff(spins);
    }
}

/// Seals the record at `at`: no in-place update will change it after this returns.
///
/// It waits for an update in progress and sets the bit with a compare-and-swap, never the
/// lock bit: the record may be in a block the flusher is copying (sealing happens below
/// off_ReadOnly too), and a copied lock bit is refused as a torn record (regression:
/// `tierkv stress --mode pmem-image --pmem-size 4MiB`, seed 4242, poisoned the store).
pub fn seal(page: &Page, at: u64) -> Result<()> {
    let meta = word(page, base(at))?;
    let mut spins = 0u32;
    loop {
        let m = meta.load(Ordering::Acquire);
        if m & META_LOCKED == 0
            && meta
                .compare_exchange_weak(m, m | META_SUPERSEDED, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        {
            return Ok(());
        }
        spins += 1;
        backoff(spins);
    }
}

/// Whether a value of `len` bytes is written in place into a record of value capacity
/// `cap`: it must fit, and leave no more slack than its own length (or 64 bytes). The
/// capacity stays with the record through flushing, so a key updated in place kept the room
/// of its largest value: with value sizes varying, records held two to three times the live
/// bytes and the pool was refused full with 16% of it live (stress space mode). A value
/// that would waste more goes out of place, into a record of its own size.
pub fn fits_in_place(len: usize, cap: usize) -> bool {
    len <= cap && cap - len <= len.max(64)
}

/// Updates the record at `at` in place with `value` and a timestamp from `next_ts`
/// (taken under the record's lock, so timestamps follow the order of updates). Returns
/// the new timestamp, or `None` (record unchanged) when the value does not fit its
/// capacity ([`fits_in_place`]) or the record is sealed.
pub fn update_in_place(
    page: &Page,
    at: u64,
    key: &[u8],
    value: &[u8],
    next_ts: impl FnOnce() -> u64,
) -> Result<Option<u64>> {
    let b = base(at);
    let meta = word(page, b)?;
    let old = lock(meta);
    let h = match header(page, at, old) {
        Ok(h)
            if old & META_SUPERSEDED == 0
                && fits_in_place(value.len(), h.value_cap as usize)
                && usize::from(h.key_len) == key.len() =>
        {
            h
        }
        other => {
            meta.store(old, Ordering::Release);
            return other.map(|_| None);
        }
    };
    let ts = next_ts();
    let klen = key.len();
    // Rewrite from the word holding the first value byte (it may hold key bytes too).
    for j in klen / 8..(klen + value.len()).div_ceil(8) {
        word(page, b + 3 + j)?.store(data_word(key, value, j), Ordering::Relaxed);
    }
    let new = RecordHeader {
        meta: ts << TS_SHIFT,
        value_len: value.len() as u32,
        crc: record_crc(ts, h.flags, key, value, h.value_cap),
        ..h
    };
    word(page, b + 1)?.store(new.word1(), Ordering::Relaxed);
    word(page, b + 2)?.store(new.word2(), Ordering::Relaxed);
    meta.store(new.meta, Ordering::Release);
    Ok(Some(ts))
}

/// Sets the `logged` bit of the record at `at` if it still carries timestamp `ts` (its
/// log entry is durable), sealed or not: a put's entry is written after the index's lock is
/// released, so a later writer of the key may have sealed the record meanwhile, and a
/// reader holding its address waits for this bit (`mem/access.rs`). An in-place update in
/// progress is waited for (it gives the record a newer timestamp, or leaves it as it was).
pub fn set_logged(page: &Page, at: u64, ts: u64) {
    let Some(meta) = page.get(base(at)) else {
        return;
    };
    let mut spins = 0u32;
    loop {
        let m = meta.load(Ordering::Acquire);
        if m >> TS_SHIFT != ts || m & META_LOGGED != 0 {
            return;
        }
        if m & META_LOCKED == 0
            && meta
                .compare_exchange_weak(m, m | META_LOGGED, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
        {
            return;
        }
        spins += 1;
        backoff(spins);
    }
}

/// The timestamp of the record at `at` and whether its log entry is durable.
pub fn ts_and_logged(page: &Page, at: u64) -> Option<(u64, bool)> {
    let m = page.get(base(at))?.load(Ordering::Acquire);
    (m != 0).then_some((m >> TS_SHIFT, m & META_LOGGED != 0))
}

/// Copies the whole page into `out` (its bytes, as they go to pmem).
pub fn copy_page(page: &Page, out: &mut [u8]) {
    for (w, chunk) in page.iter().zip(out.chunks_exact_mut(8)) {
        chunk.copy_from_slice(&w.load(Ordering::Relaxed).to_le_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::record;

    fn page() -> Box<Page> {
        (0..512).map(|_| AtomicU64::new(0)).collect()
    }

    #[test]
    fn a_written_record_reads_back_and_decodes_from_its_bytes() {
        let p = page();
        write_new(&p, 64, 5, b"key", b"value", 8).unwrap();
        assert_eq!(read_value(&p, 64, b"key").unwrap(), b"value");
        assert!(read_value(&p, 64, b"kez").unwrap_err().is_corruption());
        let mut bytes = vec![0u8; 4096];
        copy_page(&p, &mut bytes);
        let r = record::decode(&bytes[64..], 64).unwrap();
        assert_eq!(
            (r.key, r.value, r.header.ts()),
            (&b"key"[..], &b"value"[..], 5)
        );
    }

    #[test]
    fn in_place_update_fits_or_leaves_the_record_alone() {
        let p = page();
        write_new(&p, 0, 1, b"k234567", b"aa", 10).unwrap();
        assert_eq!(
            update_in_place(&p, 0, b"k234567", b"0123456789", || 2).unwrap(),
            Some(2)
        );
        assert_eq!(read_value(&p, 0, b"k234567").unwrap(), b"0123456789");
        assert_eq!(
            update_in_place(&p, 0, b"k234567", &[1; 11], || 3).unwrap(),
            None
        );
        assert_eq!(
            update_in_place(&p, 0, b"k234567", b"x", || 4).unwrap(),
            Some(4)
        );
        assert_eq!(read_value(&p, 0, b"k234567").unwrap(), b"x");
        seal(&p, 0).unwrap();
        assert_eq!(
            update_in_place(&p, 0, b"k234567", b"y", || 9).unwrap(),
            None,
            "sealed"
        );
        assert_eq!(read_value(&p, 0, b"k234567").unwrap(), b"x");
        assert_eq!(ts_and_logged(&p, 0), Some((4, false)));
        let mut bytes = vec![0u8; 4096];
        copy_page(&p, &mut bytes);
        assert_eq!(record::decode(&bytes, 0).unwrap().value, b"x");
    }

    #[test]
    fn logged_bit_is_set_only_for_the_current_version() {
        let p = page();
        write_new(&p, 0, 4, b"k", b"v", 8).unwrap();
        set_logged(&p, 0, 3);
        assert_eq!(ts_and_logged(&p, 0), Some((4, false)), "stale ts");
        set_logged(&p, 0, 4);
        assert_eq!(ts_and_logged(&p, 0), Some((4, true)));
        assert_eq!(read_value(&p, 0, b"k").unwrap(), b"v");
    }

    #[test]
    fn readers_never_see_a_torn_in_place_update() {
        let p = page();
        write_new(&p, 0, 1, b"k", &[0u8; 200], 200).unwrap();
        let ts = AtomicU64::new(2);
        std::thread::scope(|s| {
            s.spawn(|| {
                for i in 0..20_000u32 {
                    let v = [(i % 251) as u8; 200];
                    update_in_place(&p, 0, b"k", &v, || ts.fetch_add(1, Ordering::Relaxed))
                        .unwrap();
                }
            });
            for _ in 0..20_000 {
                let v = read_value(&p, 0, b"k").unwrap();
                assert!(v.iter().all(|b| *b == v[0]), "torn read");
            }
        });
    }

    #[test]
    fn a_padding_record_decodes_and_walks_like_any_record() {
        let p = page();
        write_padding(&p, 0, 64).unwrap();
        write_new(&p, 64, 2, b"k", b"v", 7).unwrap();
        let mut bytes = vec![0u8; 4096];
        copy_page(&p, &mut bytes);
        let pad = record::decode(&bytes, 0).unwrap();
        assert!(pad.header.is_padding());
        assert_eq!(pad.header.size(), 64);
        assert_eq!(record::decode(&bytes[64..], 64).unwrap().value, b"v");
    }

    #[test]
    fn garbage_in_a_page_is_corruption() {
        let p = page();
        assert!(
            read_value(&p, 0, b"k").unwrap_err().is_corruption(),
            "zero meta"
        );
        p[0].store(1 << TS_SHIFT, Ordering::Relaxed);
        p[1].store(1 | (1 << 40), Ordering::Relaxed);
        p[2].store(1 << 40, Ordering::Relaxed);
        assert!(
            read_value(&p, 0, b"k").is_err(),
            "value longer than the page"
        );
        assert!(write_new(&p, 4096 - 16, 1, b"k", b"too long", 8).is_err());
    }
}
