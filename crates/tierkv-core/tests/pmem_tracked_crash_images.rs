//! Tracked mode: a persisted write survives every crash image, an unpersisted one is lost
//! in some and kept in others; images open as pools in every mode (including Tracked
//! again, so recovery of a recovered pool can be tested); and an image taken while other
//! threads keep writing holds everything they had persisted before it was started.

mod pmem_common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use pmem_common::{config, create_pool, scratch_dir, seed};
use tierkv_core::media::pmem::{CrashImageOptions, DurabilityMode, PmemPool};

const IMAGES: u64 = 1_000;

fn opts(i: u64) -> CrashImageOptions {
    if i.is_multiple_of(2) {
        CrashImageOptions::lines()
    } else {
        CrashImageOptions::torn_words()
    }
}

#[test]
fn persisted_write_survives_every_image_and_unpersisted_one_only_some() {
    let dir = scratch_dir();
    let pool = create_pool(dir.path(), "pool", 64 << 10, DurabilityMode::Tracked);
    let base = pool.data_start();
    // 200 bytes across 4 lines, persisted; then 200 more, not persisted.
    let persisted: Vec<u8> = (0..200u32).map(|i| (i * 7 + 1) as u8).collect();
    let unpersisted: Vec<u8> = (0..200u32).map(|i| (i * 11 + 3) as u8).collect();
    pool.write_persist(base + 10, &persisted).unwrap();
    pool.set_root(0, 42).unwrap();
    pool.write(base + 1024, &unpersisted).unwrap();
    pool.store_u64(base + 2048, 77).unwrap();

    let seed0 = seed("persisted_write_survives_every_image");
    let (mut whole, mut none, mut torn) = (0, 0, 0);
    for i in 0..IMAGES {
        let img = pool.crash_image(seed0.wrapping_add(i), opts(i)).unwrap();
        assert_eq!(img.len() as u64, pool.len());
        let at = |off: u64, len: usize| &img[off as usize..off as usize + len];
        assert_eq!(
            at(base + 10, 200),
            &persisted[..],
            "image {i} lost a persisted write"
        );
        assert_eq!(
            at(64, 8),
            &42u64.to_le_bytes(),
            "image {i} lost a persisted root"
        );
        let kept = at(base + 1024, 200);
        let word = u64::from_le_bytes(at(base + 2048, 8).try_into().unwrap());
        assert!(
            word == 0 || word == 77,
            "image {i}: an aligned word tore: {word:#x}"
        );
        let same: usize = kept
            .iter()
            .zip(&unpersisted)
            .filter(|(a, b)| a == b)
            .count();
        match same {
            200 => whole += 1,
            _ if kept.iter().all(|b| *b == 0) => none += 1,
            _ => torn += 1,
        }
    }
    println!(
        "unpersisted write: whole in {whole}, absent in {none}, partial in {torn} of {IMAGES} images"
    );
    assert!(
        whole > 0,
        "an unpersisted write may have been evicted early: it must appear in some image"
    );
    assert!(none > 0, "an unpersisted write must be lost in some image");
    assert!(
        torn > 0,
        "a multi-line unpersisted write must be partly present in some image"
    );
}

#[test]
fn crash_image_opens_in_every_mode_and_again_in_tracked() {
    let dir = scratch_dir();
    let pool = create_pool(dir.path(), "pool", 64 << 10, DurabilityMode::Tracked);
    let base = pool.data_start();
    pool.write_persist(base, b"generation 1").unwrap();
    let img1 = dir.path().join("img1");
    pool.write_crash_image(1, CrashImageOptions::torn_words(), &img1)
        .unwrap();
    assert!(
        pool.write_crash_image(1, CrashImageOptions::lines(), &img1)
            .is_err(),
        "refuses to overwrite"
    );

    for mode in [DurabilityMode::Volatile, DurabilityMode::Msync] {
        let p = PmemPool::open(&config(&img1, 0, mode)).unwrap();
        assert_eq!(p.pool_id(), pool.pool_id());
        assert_eq!(p.read(base, 12).unwrap(), b"generation 1");
    }
    // Recovery of a recovered pool: open the image Tracked, write, crash again.
    let recovered = PmemPool::open(&config(&img1, 0, DurabilityMode::Tracked)).unwrap();
    recovered.write_persist(base + 64, b"generation 2").unwrap();
    recovered.write(base + 128, b"lost maybe").unwrap();
    let img2 = dir.path().join("img2");
    recovered
        .write_crash_image(2, CrashImageOptions::lines(), &img2)
        .unwrap();
    drop(recovered);
    let p = PmemPool::open(&config(&img2, 0, DurabilityMode::Volatile)).unwrap();
    assert_eq!(p.read(base, 12).unwrap(), b"generation 1");
    assert_eq!(p.read(base + 64, 12).unwrap(), b"generation 2");
}

/// Writers store 40-byte records (writer id, sequence number, fill), interleaved so that
/// records of different writers share cache lines, persist each, then publish how many
/// they have persisted. The checker reads the published counts, then takes an image: every
/// record counted must be in it, whole — even though other writers were storing to and
/// persisting the same lines meanwhile. Writers pause every `STEP` records until the
/// checker has taken another image, so images interleave with the writes.
#[test]
fn image_taken_while_threads_write_holds_all_they_had_persisted() {
    const WRITERS: u64 = 3;
    const RECORDS: u64 = 2_000;
    const STEP: u64 = 50;
    let dir = scratch_dir();
    let pool = create_pool(dir.path(), "pool", 512 << 10, DurabilityMode::Tracked);
    let at = |w: u64, i: u64| pool.data_start() + (i * WRITERS + w) * RECORD_LEN as u64;
    let persisted: Arc<Vec<AtomicU64>> =
        Arc::new((0..WRITERS).map(|_| AtomicU64::new(0)).collect());
    let images = AtomicU64::new(0);
    std::thread::scope(|s| {
        for w in 0..WRITERS {
            let (pool, persisted, images) = (&pool, persisted.clone(), &images);
            s.spawn(move || {
                for i in 0..RECORDS {
                    while images.load(Ordering::Acquire) < i / STEP {
                        std::thread::yield_now();
                    }
                    pool.write_persist(at(w, i), &record(w, i)).unwrap();
                    persisted[w as usize].store(i + 1, Ordering::Release);
                }
            });
        }
        let seed0 = seed("image_taken_while_threads_write");
        for n in 0.. {
            let counts: Vec<u64> = persisted
                .iter()
                .map(|c| c.load(Ordering::Acquire))
                .collect();
            let img = pool.crash_image(seed0.wrapping_add(n), opts(n)).unwrap();
            images.store(n + 1, Ordering::Release);
            for (w, count) in counts.iter().enumerate() {
                for i in 0..*count {
                    let off = at(w as u64, i) as usize;
                    assert_eq!(
                        &img[off..off + RECORD_LEN],
                        &record(w as u64, i)[..],
                        "writer {w} record {i}, image {n}"
                    );
                }
            }
            if counts.iter().all(|c| *c == RECORDS) {
                break;
            }
        }
    });
    let n = images.load(Ordering::Relaxed);
    println!("{n} images checked against concurrent writers");
    assert!(n >= RECORDS / STEP);
}

const RECORD_LEN: usize = 40;

fn record(w: u64, i: u64) -> [u8; RECORD_LEN] {
    let mut r = [(w * 31 + i) as u8 | 1; RECORD_LEN];
    r[..8].copy_from_slice(&w.to_le_bytes());
    r[8..16].copy_from_slice(&i.to_le_bytes());
    r
}
