//! Unit tests of the PWB on a Tracked pool: append and read, rebinding, the watermark wake-up,
//! a full ring, wrap-around with pads, damaged records, reopen, and the thread mapping.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::reclaim::{LiveRecord, collect_live, partial_end};
use super::*;
use crate::test_support::pmem_fixture;

const LIMITS: ReclaimLimits = ReclaimLimits {
    watermark: 0.5,
    retain: 0.0,
};

fn no_wake() {}
fn ok() -> Result<()> {
    Ok(())
}

/// A fresh single PWB of 64 KiB with `n` records of 4000 bytes appended.
fn pwb_with_records(n: usize) -> (crate::test_support::PmemFixture, Pwb) {
    let f = pmem_fixture(8 << 20, 1, 64 << 10);
    let p = Pwb::create(f.pool.clone(), &f.sb, 0, LIMITS).unwrap();
    let v = vec![1u8; 4000];
    for _ in 0..n {
        drop(p.append(0, &v, &no_wake, &ok).unwrap());
    }
    (f, p)
}

#[test]
fn appended_records_read_back_and_check_their_slot() {
    let f = pmem_fixture(8 << 20, 2, 64 << 10);
    let p = Pwb::create(f.pool.clone(), &f.sb, 1, LIMITS).unwrap();
    let off = p.append(7, b"value", &no_wake, &ok).unwrap().record_off();
    assert_eq!(p.read(off, 7).unwrap(), b"value");
    assert!(p.read(off, 8).unwrap_err().is_corruption());
    assert_eq!(p.ring().tail, 32);
}

#[test]
fn rebind_moves_the_record_to_another_slot() {
    let f = pmem_fixture(8 << 20, 1, 64 << 10);
    let p = Pwb::create(f.pool.clone(), &f.sb, 0, LIMITS).unwrap();
    let a = p.append(1, b"v", &no_wake, &ok).unwrap();
    a.rebind(2, b"v").unwrap();
    let off = a.record_off();
    drop(a);
    assert_eq!(p.read(off, 2).unwrap(), b"v");
}

#[test]
fn crossing_the_watermark_wakes_the_reclaimer() {
    let f = pmem_fixture(8 << 20, 1, 64 << 10);
    let p = Pwb::create(f.pool.clone(), &f.sb, 0, LIMITS).unwrap();
    let woken = AtomicUsize::new(0);
    let wake = || {
        woken.fetch_add(1, Ordering::Relaxed);
    };
    let v = vec![1u8; 1000];
    while p.ring().used() < p.watermark() {
        assert_eq!(woken.load(Ordering::Relaxed), 0);
        drop(p.append(0, &v, &wake, &ok).unwrap());
    }
    assert_eq!(woken.load(Ordering::Relaxed), 1);
}

#[test]
fn a_full_ring_waits_for_the_head_and_gives_up_on_check() {
    let (_f, p) = pwb_with_records(16);
    let v = vec![1u8; 4000];
    let stop = || Err(Error::Closed);
    assert!(matches!(
        p.append(0, &v, &no_wake, &stop),
        Err(Error::Closed)
    ));
    // Reclaim everything, and the writer gets through.
    let tail = p.ring().tail;
    p.advance_head(tail).unwrap();
    drop(p.append(0, &v, &no_wake, &ok).unwrap());
}

#[test]
fn values_larger_than_half_the_ring_are_refused() {
    let f = pmem_fixture(8 << 20, 1, 64 << 10);
    let p = Pwb::create(f.pool.clone(), &f.sb, 0, LIMITS).unwrap();
    let v = vec![0u8; 33 << 10];
    assert!(matches!(
        p.append(0, &v, &no_wake, &ok),
        Err(Error::InvalidArgument(_))
    ));
}

#[test]
fn collect_live_keeps_coupled_records_across_a_wrap() {
    let f = pmem_fixture(8 << 20, 1, 64 << 10);
    let p = Pwb::create(f.pool.clone(), &f.sb, 0, LIMITS).unwrap();
    let mut offs = Vec::new();
    let v = vec![9u8; 3000];
    for round in 0..60u64 {
        let off = p.append(round, &v, &no_wake, &ok).unwrap().record_off();
        offs.push(off);
        let ring = p.ring();
        if ring.used() > 40_000 {
            // Reclaim: everything but odd slots is dead.
            let live =
                collect_live(&p, ring.head, ring.tail, &mut |slot, _| Ok(slot % 2 == 1)).unwrap();
            assert!(live.iter().all(|r| r.slot % 2 == 1 && r.len == 3000));
            p.advance_head(ring.tail).unwrap();
        }
    }
    let ring = p.ring();
    let live = collect_live(&p, ring.head, ring.tail, &mut |_, _| Ok(true)).unwrap();
    let last = offs.last().copied().unwrap();
    assert_eq!(
        live.last().copied(),
        Some(LiveRecord {
            slot: 59,
            off: last,
            len: 3000
        })
    );
    assert!(ring.tail > 64 << 10, "the test never wrapped");
}

#[test]
fn a_partial_reclamation_ends_on_the_first_record_boundary_past_its_budget() {
    let f = pmem_fixture(8 << 20, 1, 64 << 10);
    let p = Pwb::create(f.pool.clone(), &f.sb, 0, LIMITS).unwrap();
    let v = vec![5u8; 3000];
    let mut ends = Vec::new();
    // Wrap once so that the walk crosses the pad at the end of the ring.
    for round in 0..40u64 {
        let a = p.append(round, &v, &no_wake, &ok).unwrap();
        drop(a);
        let ring = p.ring();
        if ring.used() > 40_000 {
            p.advance_head(ring.tail).unwrap();
        }
    }
    let ring = p.ring();
    let mut pos = ring.head;
    while pos < ring.tail {
        let (h, _) = p.record_at(p.abs(pos)).unwrap();
        pos += h.footprint();
        ends.push(pos);
    }
    assert!(ends.len() >= 3, "{ring:?}");
    for budget in [1, 3000, 3016, 3017, 9000, ring.used(), ring.used() + 99] {
        let end = partial_end(&p, ring.head, ring.tail, budget).unwrap();
        let want = ends
            .iter()
            .copied()
            .find(|&e| e >= ring.head + budget)
            .unwrap_or(ring.tail);
        assert_eq!(end, want, "budget {budget}");
    }
    assert_eq!(partial_end(&p, ring.head, ring.tail, 0).unwrap(), ring.head);
    // Reclaiming the part leaves the newest records readable.
    let end = partial_end(&p, ring.head, ring.tail, ring.used() / 2).unwrap();
    p.advance_head(end).unwrap();
    let rest = collect_live(&p, end, ring.tail, &mut |_, _| Ok(true)).unwrap();
    assert!(!rest.is_empty() && rest.iter().all(|r| r.len == 3000));
    assert_eq!(rest.last().map(|r| r.slot), Some(39));
}

#[test]
fn collect_live_reports_a_damaged_live_record() {
    let f = pmem_fixture(8 << 20, 1, 64 << 10);
    let p = Pwb::create(f.pool.clone(), &f.sb, 0, LIMITS).unwrap();
    let off = p.append(3, b"abcdef", &no_wake, &ok).unwrap().record_off();
    f.pool.write(off + 16, b"X").unwrap();
    let ring = p.ring();
    let err = collect_live(&p, ring.head, ring.tail, &mut |_, _| Ok(true)).unwrap_err();
    assert!(err.is_corruption(), "{err}");
    // A dead record's damage is irrelevant.
    assert!(collect_live(&p, ring.head, ring.tail, &mut |_, _| Ok(false)).is_ok());
}

#[test]
fn reopen_keeps_the_persisted_head() {
    let f = pmem_fixture(8 << 20, 2, 64 << 10);
    let p = Pwb::create(f.pool.clone(), &f.sb, 1, LIMITS).unwrap();
    drop(p.append(0, b"x", &no_wake, &ok).unwrap());
    drop(p.append(0, b"y", &no_wake, &ok).unwrap());
    p.advance_head(32).unwrap();
    let q = Pwb::open(f.pool.clone(), &f.sb, 1, LIMITS).unwrap();
    assert_eq!(q.ring().head, 32);
    assert_eq!(q.ring().tail, 32);
    q.set_recovered_tail(64);
    assert_eq!(q.ring().used(), 32);
}

#[test]
fn threads_map_onto_pwbs_and_offsets_onto_their_ring() {
    let f = pmem_fixture(8 << 20, 3, 64 << 10);
    let set = PwbSet::new(
        (0..3)
            .map(|i| Pwb::create(f.pool.clone(), &f.sb, i, LIMITS).unwrap())
            .collect(),
    );
    let mine = set.for_current_thread().unwrap().id();
    assert_eq!(set.for_current_thread().unwrap().id(), mine);
    let set = Arc::new(set);
    let ids: Vec<u32> = (0..6)
        .map(|_| {
            let s = set.clone();
            std::thread::spawn(move || s.for_current_thread().unwrap().id())
                .join()
                .unwrap()
        })
        .collect();
    assert!(ids.iter().all(|&i| i < 3));
    assert!(ids.windows(2).any(|w| w[0] != w[1]));
    assert_eq!(set.holding(f.sb.pwb_ring(2) + 100).unwrap().id(), 2);
    assert!(set.holding(f.sb.pwb_ring(0) - 1).is_none());
    assert!(set.holding(f.sb.pwb_ring(2) + f.sb.pwb_size).is_none());
}

#[test]
fn a_reserved_run_is_written_in_order_across_the_ring_end() {
    // Move the tail near the ring's end (and the head behind it), so the run wraps.
    let (_f, p) = pwb_with_records(15);
    let tail = p.ring().tail;
    p.advance_head(tail).unwrap();
    let values: Vec<Vec<u8>> = (0..6u8).map(|i| vec![i; 1500 + 700 * i as usize]).collect();
    let lens: Vec<usize> = values.iter().map(Vec::len).collect();
    let mut run = p.reserve_run(&lens, &no_wake, &ok).unwrap();
    let mut offs = Vec::new();
    for (i, v) in values.iter().enumerate() {
        offs.push(run.write(10 + i as u64, v).unwrap().record_off());
    }
    // A record out of turn is refused (nothing is left to write).
    assert!(run.write(99, b"x").is_err());
    drop(run);
    assert!(offs.windows(2).any(|w| w[1] < w[0]), "the run did not wrap");
    for (i, (off, v)) in offs.iter().zip(&values).enumerate() {
        assert_eq!(&p.read(*off, 10 + i as u64).unwrap(), v);
    }
}

#[test]
fn a_run_waits_for_room_gives_up_on_check_and_refuses_more_than_half_the_ring() {
    let (_f, p) = pwb_with_records(13);
    // 4 x 4000 bytes do not fit beside 13 x 4016 in 64 KiB: the run waits, then gives up.
    let stop = || Err(Error::no_space(tierkv_core::Tier::Flash, "test"));
    assert!(matches!(
        p.reserve_run(&[4000; 4], &no_wake, &stop),
        Err(Error::NoSpace { .. })
    ));
    assert!(!p.has_waiters());
    assert!(matches!(
        p.reserve_run(&[11 << 10; 3], &no_wake, &ok),
        Err(Error::InvalidArgument(_))
    ));
    let tail = p.ring().tail;
    p.advance_head(tail).unwrap();
    drop(p.reserve_run(&[4000; 4], &no_wake, &ok).unwrap());
}
