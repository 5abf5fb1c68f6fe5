//! The allocator's metadata survives every crash image: several threads allocate and free
//! (small objects, large objects, tagged chunks) on a Tracked pool while the main thread
//! takes >= 1,000 crash images at random points, alternately line-level and word-torn.
//! Each image is opened as a pool and as an allocator, and:
//! - `check()` passes (every invariant of the metadata holds after recovery);
//! - every acknowledged allocation (returned, not yet handed to `free`) is allocated;
//! - every acknowledged free is free: the allocations in the image beyond the acknowledged
//!   ones are explained by operations in flight when the image was taken — at most one per
//!   thread with an allocation in flight, plus the offsets whose free was in flight.
//!
//! Some images are reopened in Tracked mode, used, and crashed again (recovery of a
//! recovered pool).

mod pmem_common;

use parking_lot::Mutex;
use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use pmem_common::{config, create_pool, scratch_dir, seed};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tierkv_core::Error;
use tierkv_core::media::pmem::{CrashImageOptions, DurabilityMode, PmemAllocator, PmemPool};

const THREADS: usize = 3;
const IMAGES: u64 = 1_000;
const CHUNK: u64 = 4 << 10;
const POOL_SIZE: u64 = 512 << 10;

/// What one worker has acknowledged, and what it has in flight.
#[derive(Default)]
struct Log {
    /// Acknowledged allocations not yet handed to free: offset -> is a tagged chunk.
    held: std::collections::BTreeMap<u64, bool>,
    in_flight: InFlight,
}

#[derive(Clone, Copy, Default, PartialEq)]
enum InFlight {
    #[default]
    Nothing,
    Alloc,
    Free(u64),
}

fn tag_of(thread: usize) -> u32 {
    100 + thread as u32
}

fn worker(a: &PmemAllocator, log: &Mutex<Log>, stop: &AtomicBool, thread: usize, seed: u64) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    while !stop.load(Ordering::Relaxed) {
        let held = log.lock().held.len();
        if held < 40 && rng.random_bool(0.6) || held == 0 {
            log.lock().in_flight = InFlight::Alloc;
            let (r, chunk) = match rng.random_range(0..20) {
                0 => (a.alloc_chunk(tag_of(thread)), true),
                1 => (a.alloc(rng.random_range(CHUNK / 8 + 1..=3 * CHUNK)), false),
                2..=5 => (a.alloc(rng.random_range(200..=CHUNK / 8)), false),
                _ => (a.alloc(rng.random_range(1..=200)), false),
            };
            let mut l = log.lock();
            match r {
                Ok(off) => assert!(
                    l.held.insert(off, chunk).is_none(),
                    "{off} handed out twice"
                ),
                Err(Error::NoSpace { .. }) => {}
                Err(e) => panic!("alloc failed: {e}"),
            }
            l.in_flight = InFlight::Nothing;
        } else {
            let (off, chunk) = {
                let mut l = log.lock();
                let i = rng.random_range(0..l.held.len());
                let (off, chunk) = l
                    .held
                    .iter()
                    .nth(i)
                    .map(|(o, c)| (*o, *c))
                    .expect("i < held.len()");
                l.held.remove(&off);
                l.in_flight = InFlight::Free(off);
                (off, chunk)
            };
            let freed = if chunk {
                a.free_chunk(off)
            } else {
                a.free(off)
            };
            freed.expect("free of an acknowledged allocation");
            log.lock().in_flight = InFlight::Nothing;
        }
    }
}

/// The acknowledged state at the instant of an image.
struct Expected {
    held: BTreeSet<u64>,
    freeing: BTreeSet<u64>,
    allocating: usize,
}

fn snapshot_and_image(
    pool: &PmemPool,
    logs: &[Mutex<Log>],
    seed: u64,
    opts: CrashImageOptions,
) -> (Expected, Vec<u8>) {
    // Holding every log freezes what counts as acknowledged while the image is taken.
    let guards: Vec<_> = logs.iter().map(|l| l.lock()).collect();
    let image = pool.crash_image(seed, opts).expect("crash image");
    let mut e = Expected {
        held: BTreeSet::new(),
        freeing: BTreeSet::new(),
        allocating: 0,
    };
    for g in &guards {
        e.held.extend(g.held.keys());
        match g.in_flight {
            InFlight::Alloc => e.allocating += 1,
            InFlight::Free(off) => {
                e.freeing.insert(off);
            }
            InFlight::Nothing => {}
        }
    }
    (e, image)
}

/// Everything allocated in a recovered allocator: objects and every worker's chunks.
fn allocated(a: &PmemAllocator) -> BTreeSet<u64> {
    let mut all: BTreeSet<u64> = a.iter_allocated().map(|x| x.offset).collect();
    for t in 0..THREADS {
        all.extend(a.iter_chunks(tag_of(t)).map(|x| x.offset));
    }
    all
}

fn verify(path: &std::path::Path, region: u64, e: &Expected, n: u64) -> PmemAllocator {
    let pool = PmemPool::open(&config(path, 0, DurabilityMode::Volatile)).expect("open image");
    let a =
        PmemAllocator::open(pool, region).unwrap_or_else(|err| panic!("image {n}: open: {err}"));
    a.check()
        .unwrap_or_else(|err| panic!("image {n}: check: {err}"));
    let live = allocated(&a);
    let lost: Vec<_> = e.held.difference(&live).collect();
    assert!(
        lost.is_empty(),
        "image {n}: acknowledged allocations lost: {lost:?}"
    );
    let extra: Vec<_> = live
        .difference(&e.held)
        .filter(|o| !e.freeing.contains(o))
        .collect();
    assert!(
        extra.len() <= e.allocating,
        "image {n}: {} allocations beyond the acknowledged ones, only {} allocations in flight: {extra:?}",
        extra.len(),
        e.allocating
    );
    a
}

/// Reopens an image in Tracked mode, works on it, crashes it again and checks the result.
fn recover_the_recovered(path: &std::path::Path, region: u64, n: u64) {
    let pool =
        PmemPool::open(&config(path, 0, DurabilityMode::Tracked)).expect("open image tracked");
    let a = PmemAllocator::open(pool.clone(), region).expect("open recovered allocator");
    let before = allocated(&a);
    let fresh: Vec<u64> = (1..=20).filter_map(|i| a.alloc(i * 13).ok()).collect();
    for off in before.iter().take(5) {
        a.free(*off)
            .or_else(|_| a.free_chunk(*off))
            .expect("free after recovery");
    }
    let again = path.with_extension("again");
    pool.write_crash_image(n, CrashImageOptions::torn_words(), &again)
        .expect("second crash image");
    let pool2 =
        PmemPool::open(&config(&again, 0, DurabilityMode::Volatile)).expect("open second image");
    let a2 = PmemAllocator::open(pool2, region).expect("open second allocator");
    a2.check()
        .unwrap_or_else(|err| panic!("image {n} recovered twice: check: {err}"));
    let live = allocated(&a2);
    assert!(
        fresh.iter().all(|o| live.contains(o)),
        "image {n}: allocations after recovery lost"
    );
    assert!(
        before.iter().take(5).all(|o| !live.contains(o)),
        "image {n}: frees after recovery lost"
    );
    std::fs::remove_file(&again).expect("remove second image");
}

#[test]
fn allocator_metadata_is_consistent_in_every_crash_image() {
    let dir = scratch_dir();
    let pool = create_pool(dir.path(), "pool", POOL_SIZE, DurabilityMode::Tracked);
    let region = pool.data_start();
    let a = PmemAllocator::format(pool.clone(), region, pool.len() - region, CHUNK).unwrap();
    let logs: Vec<Mutex<Log>> = (0..THREADS).map(|_| Mutex::new(Log::default())).collect();
    let stop = AtomicBool::new(false);
    let seed0 = seed("allocator_metadata_is_consistent_in_every_crash_image");
    let mut rng = ChaCha8Rng::seed_from_u64(seed0);
    let (mut in_flight_seen, mut repaired) = (0u64, 0u64);
    std::thread::scope(|s| {
        for (t, log) in logs.iter().enumerate() {
            let (a, stop) = (&a, &stop);
            s.spawn(move || worker(a, log, stop, t, seed0 ^ (t as u64 + 1)));
        }
        let stop_on_panic = StopOnDrop(&stop);
        for n in 0..IMAGES {
            std::thread::sleep(Duration::from_micros(rng.random_range(0..300)));
            let opts = if n.is_multiple_of(2) {
                CrashImageOptions::lines()
            } else {
                CrashImageOptions::torn_words()
            };
            let (e, image) = snapshot_and_image(&pool, &logs, seed0.wrapping_add(n), opts);
            in_flight_seen += (e.allocating + e.freeing.len()) as u64;
            let path = dir.path().join(format!("image-{n}"));
            std::fs::write(&path, &image).unwrap();
            let recovered = verify(&path, region, &e, n);
            repaired += recovered.stats().repaired_at_open;
            drop(recovered);
            if n % 100 == 7 {
                recover_the_recovered(&path, region, n);
            }
            std::fs::remove_file(&path).unwrap();
        }
        drop(stop_on_panic);
    });
    a.check().unwrap();
    println!(
        "{IMAGES} images: {in_flight_seen} operations in flight across them, {repaired} orphan chunks repaired"
    );
    assert!(
        in_flight_seen > 0,
        "images should catch operations in flight"
    );
}

/// Stops the workers when the checker finishes or panics, so the scope can join them.
struct StopOnDrop<'a>(&'a AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}
