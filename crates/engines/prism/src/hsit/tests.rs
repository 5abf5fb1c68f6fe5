//! Unit tests of HSIT on a Tracked pool: growth by segments, the dirty-bit publish and
//! flush-on-read, relocation, bounds, reopen with leaked segments, epoch-deferred slot reuse.

use std::sync::Arc;

use super::entry::{ForwardPointer, Location, Relocation, key_tag};
use super::*;
use crate::test_support::pmem_fixture;

type Table = Hsit<Arc<[u8]>>;

#[test]
fn slots_grow_the_table_one_segment_at_a_time() {
    let f = pmem_fixture(8 << 20, 1, 64 << 10);
    let h = Table::create(f.pool.clone(), f.alloc.clone(), &f.sb).unwrap();
    assert_eq!(h.capacity(), 0);
    let first = h.alloc_slot().unwrap();
    assert_eq!(first, 0);
    assert_eq!(h.capacity(), h.seg_entries());
    for _ in 1..=h.seg_entries() {
        h.alloc_slot().unwrap();
    }
    assert_eq!(h.capacity(), 2 * h.seg_entries());
}

#[test]
fn init_then_publish_sets_a_clean_persisted_pointer() {
    let f = pmem_fixture(8 << 20, 1, 64 << 10);
    let h = Table::create(f.pool.clone(), f.alloc.clone(), &f.sb).unwrap();
    let s = h.alloc_slot().unwrap();
    h.init_slot(s, key_tag(b"k"), Location::Pwb(8192)).unwrap();
    assert_eq!(h.key_tag(s).unwrap(), key_tag(b"k"));
    let cur = h.load(s).unwrap();
    assert_eq!(cur.location(), Some(Location::Pwb(8192)));
    h.publish(s, cur, Location::Flash(77)).unwrap().unwrap();
    let now = h.load(s).unwrap();
    assert!(!now.is_dirty());
    assert_eq!(now.location(), Some(Location::Flash(77)));
    // A stale expectation loses and reports what is there.
    let lost = h.publish(s, cur, Location::Flash(78)).unwrap();
    assert_eq!(lost, Err(now));
}

#[test]
fn a_reader_persists_and_cleans_a_dirty_pointer() {
    let f = pmem_fixture(8 << 20, 1, 64 << 10);
    let h = Table::create(f.pool.clone(), f.alloc.clone(), &f.sb).unwrap();
    let s = h.alloc_slot().unwrap();
    h.init_slot(s, 1, Location::Pwb(4096)).unwrap();
    let off = h.entry_off(s).unwrap();
    let dirty = ForwardPointer::to(Location::Flash(5)).unwrap().dirty();
    f.pool.store_u64(off, dirty.raw()).unwrap();
    // Not yet persisted: a crash image may lose it.
    let got = h.load_persisted(s).unwrap();
    assert_eq!(got.location(), Some(Location::Flash(5)));
    assert!(!h.load(s).unwrap().is_dirty());
    // Persisted by the reader: every crash image keeps the new pointer.
    for seed in 0..32 {
        let img = f
            .pool
            .crash_image(seed, tierkv_core::media::pmem::CrashImageOptions::lines())
            .unwrap();
        let at = usize::try_from(off).unwrap();
        let w = u64::from_le_bytes(img[at..at + 8].try_into().unwrap());
        assert_eq!(
            ForwardPointer::from_raw(w).location(),
            Some(Location::Flash(5))
        );
    }
}

#[test]
fn relocate_only_moves_the_expected_pointer() {
    let f = pmem_fixture(8 << 20, 1, 64 << 10);
    let h = Table::create(f.pool.clone(), f.alloc.clone(), &f.sb).unwrap();
    let s = h.alloc_slot().unwrap();
    h.init_slot(s, 1, Location::Pwb(4096)).unwrap();
    assert!(matches!(
        h.relocate(s, Location::Pwb(4112), Location::Flash(1)),
        Ok(Relocation::Lost)
    ));
    assert!(matches!(
        h.relocate(s, Location::Pwb(4096), Location::Flash(1)),
        Ok(Relocation::Moved)
    ));
    assert_eq!(h.load(s).unwrap().location(), Some(Location::Flash(1)));
}

#[test]
fn slots_beyond_the_table_are_corruption_not_panics() {
    let f = pmem_fixture(8 << 20, 1, 64 << 10);
    let h = Table::create(f.pool.clone(), f.alloc.clone(), &f.sb).unwrap();
    assert!(h.load(0).unwrap_err().is_corruption());
    h.alloc_slot().unwrap();
    assert!(h.load(h.seg_entries()).unwrap_err().is_corruption());
    assert!(h.load(u64::MAX).unwrap_err().is_corruption());
}

#[test]
fn reopen_finds_recorded_segments_and_frees_unrecorded_ones() {
    let f = pmem_fixture(8 << 20, 1, 64 << 10);
    let h = Table::create(f.pool.clone(), f.alloc.clone(), &f.sb).unwrap();
    let s = h.alloc_slot().unwrap();
    h.init_slot(s, 9, Location::Flash(3)).unwrap();
    // A segment chunk allocated but never recorded: what a crash during growth leaves.
    let leaked = f.alloc.alloc_chunk(HSIT_CHUNK_TAG).unwrap();
    drop(h);
    let h = Table::open(f.pool.clone(), f.alloc.clone(), &f.sb).unwrap();
    assert_eq!(h.capacity(), h.seg_entries());
    assert_eq!(h.load(s).unwrap().location(), Some(Location::Flash(3)));
    assert!(
        f.alloc
            .iter_chunks(HSIT_CHUNK_TAG)
            .all(|a| a.offset != leaked)
    );
}

#[test]
fn retired_slots_come_back_after_the_grace_period() {
    let f = pmem_fixture(8 << 20, 1, 64 << 10);
    let h = Table::create(f.pool.clone(), f.alloc.clone(), &f.sb).unwrap();
    let s = h.alloc_slot().unwrap();
    {
        let g = crossbeam_epoch::pin();
        h.retire_slot(s, &g);
        // Still pinned: the slot must not be handed out again.
        assert_ne!(h.alloc_slot().unwrap(), s);
    }
    let mut back = false;
    for _ in 0..256 {
        crossbeam_epoch::pin().flush();
        if h.usage().1 > 0 {
            back = true;
            break;
        }
    }
    assert!(back, "the retired slot never reached the free list");
    assert_eq!(h.alloc_slot().unwrap(), s);
}

#[test]
fn load_entry_reads_both_words() {
    let f = pmem_fixture(8 << 20, 1, 64 << 10);
    let h = Table::create(f.pool.clone(), f.alloc.clone(), &f.sb).unwrap();
    let s = h.alloc_slot().unwrap();
    h.init_slot(s, key_tag(b"key"), Location::Flash(99))
        .unwrap();
    let (fp, tag) = h.load_entry(s).unwrap();
    assert_eq!(fp.location(), Some(Location::Flash(99)));
    assert_eq!(tag, key_tag(b"key"));
}

#[test]
fn reserved_slots_are_handed_out_without_growing() {
    let f = pmem_fixture(8 << 20, 1, 64 << 10);
    let h = Table::create(f.pool.clone(), f.alloc.clone(), &f.sb).unwrap();
    let n = h.seg_entries() * 2 + 5;
    h.reserve_slots(n).unwrap();
    let cap = h.capacity();
    assert!(cap >= n);
    // Nothing left to grow into: the reserved slots must not need it.
    while f.alloc.alloc_chunk(u32::from_le_bytes(*b"FILL")).is_ok() {}
    for _ in 0..n {
        h.alloc_slot().unwrap();
    }
    assert_eq!(h.capacity(), cap);
    assert!(matches!(
        h.reserve_slots(cap + 1),
        Err(Error::NoSpace { .. })
    ));
}
