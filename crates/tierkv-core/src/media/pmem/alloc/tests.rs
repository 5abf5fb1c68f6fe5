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
