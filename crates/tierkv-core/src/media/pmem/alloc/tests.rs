//! Unit tests of the allocator: format/open, small and large objects, chunks, bad frees,
//! NoSpace, reuse, recovery of orphans, invalid metadata, and `check`.

use std::collections::BTreeSet;
use std::sync::Arc;

use super::*;
use crate::api::options::{DurabilityMode, EmulatedLatency};
use crate::media::pmem::{PmemConfig, PmemPool};

const CHUNK: u64 = 16 << 10;

fn pool(size: u64) -> (tempfile::TempDir, Arc<PmemPool>) {
    let d = tempfile::tempdir().unwrap();
    let p = PmemPool::create(&PmemConfig {
        path: d.path().join("pool"),
        size,
        mode: DurabilityMode::Volatile,
        latency: EmulatedLatency::default(),
    })
    .unwrap();
    (d, p)
}

fn allocator(size: u64) -> (tempfile::TempDir, PmemAllocator) {
    let (d, p) = pool(size);
    let start = p.data_start();
    let a = PmemAllocator::format(p.clone(), start, p.len() - start, CHUNK).unwrap();
    (d, a)
}

fn reopen(a: PmemAllocator) -> PmemAllocator {
    let pool = a.pool().clone();
    let start = a.layout().region_start;
    drop(a);
    PmemAllocator::open(pool, start).unwrap()
}

#[test]
fn small_objects_are_distinct_aligned_and_survive_reopen() {
    let (_d, a) = allocator(1 << 20);
    let mut offs = BTreeSet::new();
    for size in [1u64, 8, 16, 17, 24, 100, 1000, 2048] {
        for _ in 0..20 {
            let off = a.alloc(size).unwrap();
            assert_eq!(off % 8, 0);
            a.pool().write(off, &vec![0xcd; size as usize]).unwrap();
            assert!(offs.insert(off), "{off} handed out twice");
        }
    }
    a.check().unwrap();
    let a = reopen(a);
    a.check().unwrap();
    let live: BTreeSet<u64> = a.iter_allocated().map(|x| x.offset).collect();
    assert_eq!(live, offs);
}

#[test]
fn large_objects_take_runs_of_chunks() {
    let (_d, a) = allocator(1 << 20);
    let big = a.alloc(3 * CHUNK + 1).unwrap();
    let one = a.alloc(CHUNK).unwrap();
    assert_eq!((big - a.layout().chunks_off) % CHUNK, 0);
    let sizes: Vec<Allocation> = a.iter_allocated().collect();
    assert!(sizes.contains(&Allocation {
        offset: big,
        size: 4 * CHUNK
    }));
    assert!(sizes.contains(&Allocation {
        offset: one,
        size: CHUNK
    }));
    a.free(big).unwrap();
    a.check().unwrap();
    let a = reopen(a);
    assert_eq!(
        a.iter_allocated().map(|x| x.offset).collect::<Vec<_>>(),
        [one]
    );
}

#[test]
fn tagged_chunks_are_listed_by_tag() {
    let (_d, a) = allocator(1 << 20);
    let x = a.alloc_chunk(7).unwrap();
    let y = a.alloc_chunks(7, 2).unwrap();
    let z = a.alloc_chunk(8).unwrap();
    let sevens: Vec<Allocation> = a.iter_chunks(7).collect();
    assert_eq!(
        sevens,
        [
            Allocation {
                offset: x,
                size: CHUNK
            },
            Allocation {
                offset: y,
                size: 2 * CHUNK
            }
        ]
    );
    assert_eq!(a.iter_chunks(8).map(|c| c.offset).collect::<Vec<_>>(), [z]);
    assert_eq!(a.iter_allocated().count(), 0);
    a.free_chunk(y).unwrap();
    let a = reopen(a);
    assert_eq!(a.iter_chunks(7).map(|c| c.offset).collect::<Vec<_>>(), [x]);
    a.check().unwrap();
}

#[test]
fn bad_frees_are_corruption_errors_and_change_nothing() {
    let (_d, a) = allocator(1 << 20);
    let small = a.alloc(40).unwrap();
    let chunk = a.alloc_chunk(1).unwrap();
    let big = a.alloc(2 * CHUNK).unwrap();
    let layout = a.layout();
    let cases = [
        ("before the chunks", a.free(layout.chunks_off - 8)),
        (
            "past the region",
            a.free(layout.chunk_off(layout.chunk_count as u32)),
        ),
        ("inside an object", a.free(small + 8)),
        ("a never-allocated slot", a.free(small + 48)),
        ("a tagged chunk", a.free(chunk)),
        ("inside a run", a.free(big + CHUNK)),
        (
            "a free chunk",
            a.free(layout.chunk_off(layout.chunk_count as u32 - 1)),
        ),
        ("free_chunk of an object", a.free_chunk(small)),
        ("free_chunk of a large object", a.free_chunk(big)),
        ("free_chunk mid-chunk", a.free_chunk(chunk + 64)),
    ];
    for (what, r) in cases {
        let e = r.unwrap_err();
        assert!(e.is_corruption(), "{what}: {e}");
    }
    a.free(small).unwrap();
    let e = a.free(small).unwrap_err();
    assert!(e.to_string().contains("double free"), "{e}");
    a.check().unwrap();
}

#[test]
fn invalid_requests_are_invalid_arguments() {
    let (_d, a) = allocator(1 << 20);
    assert!(matches!(a.alloc(0), Err(Error::InvalidArgument(_))));
    assert!(matches!(
        a.alloc_chunk(OBJECT_TAG),
        Err(Error::InvalidArgument(_))
    ));
    assert!(matches!(
        a.alloc_chunks(1, 0),
        Err(Error::InvalidArgument(_))
    ));
}

#[test]
fn no_space_when_full_then_space_after_free() {
    let (_d, a) = allocator(256 << 10);
    let chunks = a.layout().chunk_count;
    let mut got = Vec::new();
    let err = loop {
        match a.alloc_chunk(3) {
            Ok(off) => got.push(off),
            Err(e) => break e,
        }
    };
    assert_eq!(got.len() as u64, chunks);
    assert!(
        matches!(
            err,
            Error::NoSpace {
                tier: crate::Tier::Pmem,
                ..
            }
        ),
        "{err}"
    );
    assert!(matches!(a.alloc(16), Err(Error::NoSpace { .. })));
    assert!(matches!(
        a.alloc(chunks * CHUNK + 1),
        Err(Error::NoSpace { .. })
    ));
    a.free_chunk(got[2]).unwrap();
    let small = a.alloc(16).unwrap();
    assert_eq!(a.layout().chunk_of(small), a.layout().chunk_of(got[2]));
    a.check().unwrap();
}

#[test]
fn empty_slabs_are_reclaimed_when_chunks_run_out() {
    let (_d, a) = allocator(256 << 10);
    let chunks = a.layout().chunk_count;
    // One object in each of several size classes pins a slab chunk each.
    let objs: Vec<u64> = [16u64, 64, 256, 1024]
        .iter()
        .map(|s| a.alloc(*s).unwrap())
        .collect();
    for o in &objs {
        a.free(*o).unwrap();
    }
    a.check().unwrap();
    // Every chunk is available again as a whole chunk.
    let all: Vec<u64> = (0..chunks).map(|_| a.alloc_chunk(1).unwrap()).collect();
    assert_eq!(all.len() as u64, chunks);
    a.check().unwrap();
}

#[test]
fn freed_slots_are_reused() {
    let (_d, a) = allocator(1 << 20);
    let first: Vec<u64> = (0..100).map(|_| a.alloc(32).unwrap()).collect();
    for o in &first {
        a.free(*o).unwrap();
    }
    let second: Vec<u64> = (0..100).map(|_| a.alloc(32).unwrap()).collect();
    // The emptied slab is kept for its class (it is the only one) and serves again.
    assert_eq!(a.stats().slab_chunks, 1);
    let chunk = a.layout().chunk_of(first[0]);
    assert!(second.iter().all(|o| a.layout().chunk_of(*o) == chunk));
    assert!(second.iter().any(|o| first.contains(o)));
}

#[test]
fn stats_add_up() {
    let (_d, a) = allocator(1 << 20);
    let s0 = a.stats();
    assert_eq!(s0.free_chunks, s0.chunks);
    assert_eq!(s0.free_bytes, s0.chunks * CHUNK);
    a.alloc(100).unwrap();
    a.alloc_chunk(2).unwrap();
    let s = a.stats();
    assert_eq!(s.run_chunks, 1);
    assert_eq!(s.slab_chunks, 1);
    assert_eq!(s.used_bytes, CHUNK + 128);
    assert!(s.free_bytes + s.used_bytes <= s.chunks * CHUNK);
}

#[test]
fn open_resets_orphan_continuations() {
    let (_d, a) = allocator(1 << 20);
    let keep = a.alloc_chunks(4, 2).unwrap();
    let pool = a.pool().clone();
    let l = a.layout();
    drop(a);
    // A crash after the continuations of a 3-chunk run at chunk 5 became durable, but
    // before its head did.
    for j in 1..3u32 {
        pool.store_u64(l.state_off(5 + j), ChunkState::Cont { back: j }.encode())
            .unwrap();
    }
    let a = PmemAllocator::open(pool, l.region_start).unwrap();
    assert_eq!(a.stats().repaired_at_open, 2);
    a.check().unwrap();
    assert_eq!(
        a.iter_chunks(4).map(|c| c.offset).collect::<Vec<_>>(),
        [keep]
    );
    assert_eq!(a.stats().free_chunks, l.chunk_count - 2);
}

#[test]
fn open_refuses_invalid_metadata() {
    let (_d, a) = allocator(1 << 20);
    let small = a.alloc(16).unwrap();
    let run = a.alloc_chunks(9, 3).unwrap();
    let pool = a.pool().clone();
    let l = a.layout();
    drop(a);
    let k_small = l.chunk_of(small).unwrap();
    let k_run = l.chunk_of(run).unwrap();
    let capacity = SizeClasses::new(CHUNK).get(0).unwrap().capacity;
    let cases: [(u64, u64, &str); 4] = [
        (
            l.state_off(k_small),
            0x7700_0000_0000_0000,
            "invalid state word",
        ),
        (
            l.state_off(k_small),
            ChunkState::Slab { class: 200 }.encode(),
            "size class",
        ),
        (l.state_off(k_run + 2), 0, "inside the run"),
        (
            l.chunk_off(k_small) + u64::from(capacity / 64) * 8,
            1 << (capacity % 64),
            "past",
        ),
    ];
    for (off, w, what) in cases {
        let old = pool.load_u64(off).unwrap();
        pool.store_u64(off, w).unwrap();
        let e = PmemAllocator::open(pool.clone(), l.region_start)
            .err()
            .unwrap();
        assert!(
            e.is_corruption() && e.to_string().contains(what),
            "{what}: {e}"
        );
        pool.store_u64(off, old).unwrap();
    }
    PmemAllocator::open(pool, l.region_start)
        .unwrap()
        .check()
        .unwrap();
}

#[test]
fn open_refuses_a_region_that_is_not_there() {
    let (_d, p) = pool(1 << 20);
    let e = PmemAllocator::open(p.clone(), p.data_start())
        .err()
        .unwrap();
    assert!(e.to_string().contains("bad magic"), "{e}");
    let e = PmemAllocator::open(p.clone(), 0).err().unwrap();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
    let e = PmemAllocator::format(p.clone(), p.data_start(), p.len(), CHUNK)
        .err()
        .unwrap();
    assert!(e.to_string().contains("not inside the pool"), "{e}");
}

#[test]
fn check_detects_dram_and_pool_disagreeing() {
    let (_d, a) = allocator(1 << 20);
    let small = a.alloc(16).unwrap();
    a.check().unwrap();
    let l = a.layout();
    let word = l.chunk_off(l.chunk_of(small).unwrap());
    // Something other than the allocator clears the bit behind its back.
    a.pool().store_u64(word, 0).unwrap();
    let e = a.check().unwrap_err();
    assert!(e.to_string().contains("differs"), "{e}");
}

#[test]
fn threads_allocate_disjoint_objects() {
    let (_d, a) = allocator(4 << 20);
    let per_thread: Vec<Vec<u64>> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..4)
            .map(|t| {
                let a = &a;
                s.spawn(move || {
                    let mut mine = Vec::new();
                    for i in 0..300u64 {
                        let off = a.alloc(8 + (i * 7 + t) % 200).unwrap();
                        mine.push(off);
                        if i % 3 == 0 {
                            a.free(mine.swap_remove((i as usize * 13) % mine.len()))
                                .unwrap();
                        }
                    }
                    mine
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let all: Vec<u64> = per_thread.concat();
    let set: BTreeSet<u64> = all.iter().copied().collect();
    assert_eq!(set.len(), all.len());
    a.check().unwrap();
    let live: BTreeSet<u64> = a.iter_allocated().map(|x| x.offset).collect();
    assert_eq!(live, set);
}

/// Three slabs of one class, the middle one sparse: evacuating it moves its objects into
/// the others' free slots and gives its chunk back; nothing lands in it meanwhile.
#[test]
fn an_evacuated_slab_takes_no_allocation_and_returns_to_the_free_chunks() {
    let (_d, a) = allocator(1 << 20);
    let size = 1024u64;
    let per = a.slabs().len(); // none yet
    assert_eq!(per, 0);
    let mut live: Vec<u64> = (0..40).map(|_| a.alloc(size).unwrap()).collect();
    let slabs = a.slabs();
    assert!(slabs.len() >= 2, "{slabs:?}");
    let cap = slabs[0].capacity as usize;
    // Free most of the first slab's objects and a few of the others'.
    let victim = slabs[0].offset;
    let in_victim = |off: u64| off >= victim && off < victim + CHUNK;
    let mut kept = Vec::new();
    for (i, off) in live.drain(..).enumerate() {
        if (in_victim(off) && i % 4 != 0) || (!in_victim(off) && i % 2 == 0) {
            a.free(off).unwrap();
        } else {
            kept.push(off);
        }
    }
    let usage = a.slabs();
    let u = usage.iter().find(|s| s.offset == victim).unwrap();
    assert!(u.used > 0 && (u.used as usize) < cap);
    let free_before = a.stats().free_chunks;
    let ev = a.evacuate_slab(victim).unwrap();
    assert!(a.evacuate_slab(victim).is_err(), "evacuated twice");
    a.check().unwrap();
    // Ordinary allocations avoid the slab.
    let extra: Vec<u64> = (0..3).map(|_| a.alloc(size).unwrap()).collect();
    assert!(extra.iter().all(|o| !in_victim(*o)));
    let objects = ev.objects().unwrap();
    assert_eq!(objects.len(), u.used as usize);
    for old in objects {
        let new = ev.alloc_elsewhere().unwrap();
        assert!(!in_victim(new));
        a.pool().write(new, &vec![7; size as usize]).unwrap();
        a.free(old).unwrap();
        kept.retain(|o| *o != old);
        kept.push(new);
    }
    assert!(ev.is_released());
    drop(ev);
    a.check().unwrap();
    assert_eq!(a.stats().free_chunks, free_before + 1);
    let a = reopen(a);
    a.check().unwrap();
    let got: BTreeSet<u64> = a.iter_allocated().map(|x| x.offset).collect();
    let want: BTreeSet<u64> = kept.iter().chain(extra.iter()).copied().collect();
    assert_eq!(got, want);
}

/// An evacuation dropped half way leaves an ordinary slab that allocations use again, and
/// `alloc_elsewhere` never makes a new slab.
#[test]
fn an_abandoned_evacuation_leaves_an_ordinary_slab() {
    let (_d, a) = allocator(1 << 20);
    let only = a.alloc(2048).unwrap();
    let slab = a.slabs()[0].offset;
    let ev = a.evacuate_slab(slab).unwrap();
    assert!(matches!(ev.alloc_elsewhere(), Err(Error::NoSpace { .. })));
    assert_eq!(a.slabs().len(), 1, "alloc_elsewhere made a slab");
    assert!(a.evacuate_slab(slab + 8).is_err());
    drop(ev);
    a.check().unwrap();
    let next = a.alloc(2048).unwrap();
    assert!(
        next >= slab && next < slab + CHUNK,
        "the slab is used again"
    );
    a.free(only).unwrap();
    a.free(next).unwrap();
    // An evacuation of an empty slab releases it when it ends.
    let free = a.stats().free_chunks;
    if let Some(s) = a.slabs().first() {
        drop(a.evacuate_slab(s.offset).unwrap());
        assert_eq!(a.stats().free_chunks, free + 1);
    }
    a.check().unwrap();
}

/// Evacuations racing with threads that allocate and free in the same class: while a slab
/// is evacuated no object appears in it, and the allocator's state stays consistent.
#[test]
fn evacuations_race_with_allocating_threads() {
    let (_d, a) = allocator(4 << 20);
    let stop = std::sync::atomic::AtomicBool::new(false);
    let per_thread: Vec<Vec<u64>> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..3u64)
            .map(|t| {
                let (a, stop) = (&a, &stop);
                s.spawn(move || {
                    let mut mine = Vec::new();
                    let mut i = t;
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) || i < 3_000 {
                        i += 1;
                        mine.push(a.alloc(200).unwrap());
                        if mine.len() > 400 || i % 2 == 0 {
                            a.free(mine.swap_remove((i as usize * 13) % mine.len()))
                                .unwrap();
                        }
                    }
                    mine
                })
            })
            .collect();
        let mut evacuated = 0;
        while evacuated < 200 {
            let Some(victim) = a.slabs().into_iter().min_by_key(|s| s.used) else {
                continue;
            };
            let Ok(ev) = a.evacuate_slab(victim.offset) else {
                continue; // released meanwhile
            };
            let before: BTreeSet<u64> = ev.objects().unwrap().into_iter().collect();
            std::thread::yield_now();
            let after: BTreeSet<u64> = ev.objects().unwrap().into_iter().collect();
            assert!(
                after.is_subset(&before),
                "an object appeared in an evacuated slab"
            );
            drop(ev);
            evacuated += 1;
        }
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    a.check().unwrap();
    let live: BTreeSet<u64> = a.iter_allocated().map(|x| x.offset).collect();
    let want: BTreeSet<u64> = per_thread.concat().into_iter().collect();
    assert_eq!(live, want);
}

/// A slab picked from a `slabs()` snapshot may be gone by the time the engine evacuates
/// it (its last object freed by another thread, the chunk given back): `evacuate_slab_of`
/// then says None; and once the chunk is a slab of another class, that slab is not
/// evacuated in the picked one's place.
#[test]
fn evacuating_a_slab_that_went_away_meanwhile_is_no_error() {
    let (_d, a) = allocator(1 << 20);
    let mut objs = Vec::new();
    while a.slabs().len() < 2 {
        objs.push(a.alloc(2048).unwrap());
    }
    let picked = a.slabs()[0];
    let in_picked = |o: u64| o >= picked.offset && o < picked.offset + CHUNK;
    for o in objs.iter().filter(|o| in_picked(**o)) {
        a.free(*o).unwrap();
    }
    assert!(
        a.slabs().iter().all(|s| s.offset != picked.offset),
        "an emptied slab beside another of its class goes back to the pool"
    );
    assert!(
        a.evacuate_slab_of(picked.offset, picked.class)
            .unwrap()
            .is_none()
    );
    assert!(
        a.evacuate_slab(picked.offset).is_err(),
        "the plain call still refuses"
    );
    // Other allocations take chunks until the picked one is a slab of another class.
    let mut small = Vec::new();
    while !a.slabs().iter().any(|s| s.offset == picked.offset) {
        small.push(a.alloc(64).unwrap());
    }
    let now = *a
        .slabs()
        .iter()
        .find(|s| s.offset == picked.offset)
        .unwrap();
    assert_ne!(now.class, picked.class);
    assert!(
        a.evacuate_slab_of(picked.offset, picked.class)
            .unwrap()
            .is_none(),
        "a slab of another class is not the one picked"
    );
    let ev = a.evacuate_slab_of(now.offset, now.class).unwrap();
    assert!(ev.is_some(), "the slab of the class asked for");
    drop(ev);
    a.check().unwrap();
}
