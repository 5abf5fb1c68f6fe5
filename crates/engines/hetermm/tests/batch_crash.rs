//! Crash-atomic write batches (issue 24; `FORMAT.md` § Write batches), judged by the
//! testkit's batch-atomicity kit: Tracked crash images taken at random moments while three
//! threads write batches of 1..=100 keys (every index), and after every persist of chosen
//! batches (whole lines and torn words); each image is recovered and every batch must be
//! whole or absent, none acknowledged lost. Small DRAM and a small log budget make the
//! flusher, the reclaimer and log reclamation and compression run inside the batches. The
//! kit must also catch a non-atomic engine (batches as a loop of puts over the same store),
//! and the named crash points of the commit are cut.

#![allow(clippy::unwrap_used, reason = "test code: an unwrap is an assertion")]

mod common;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use common::{batch_options, counter, create_pool, scratch_dir, seed, span_options, try_open};
use tierkv_core::KvStore;
use tierkv_core::media::pmem::{CrashImageOptions, CrashPoint, DurabilityMode, PmemPool};
use tierkv_hetermm::HeterOptions;
use tierkv_testkit::rig::config;
use tierkv_testkit::{BatchKit, BatchKitConfig, BatchReport, NonAtomicBatches};

const POOL: u64 = 8 << 20;

/// A crash image and the named point it was taken at.
type NamedImage = (String, Vec<u8>);

/// Values of up to 80 bytes beyond their tag: 100 operations take at most ~14 KiB.
/// [`batch_options`] with the paper's two-step write of log entries.
fn batch_options_two_step() -> HeterOptions {
    HeterOptions {
        two_step_write: true,
        ..batch_options()
    }
}

/// [`span_options`] with the paper's two-step write of log entries.
fn span_options_two_step() -> HeterOptions {
    HeterOptions {
        two_step_write: true,
        ..span_options()
    }
}

/// The persists of a batch's commit: one, or two with the two-step write.
fn commit_persists(opts: fn() -> HeterOptions) -> u64 {
    if opts().two_step_write { 2 } else { 1 }
}

fn kit(seed: u64, max_batch: usize) -> BatchKit {
    BatchKit::new(BatchKitConfig {
        seed,
        max_batch,
        value_pad: 0..=80,
        ..BatchKitConfig::default()
    })
}

fn recover(path: &Path, image: &[u8], variant: &str) -> Arc<dyn KvStore> {
    recover_with(path, image, variant, batch_options())
}

fn recover_with(path: &Path, image: &[u8], variant: &str, opts: HeterOptions) -> Arc<dyn KvStore> {
    std::fs::write(path, image).unwrap();
    let pool = PmemPool::open(&config(path, 0, DurabilityMode::Volatile)).unwrap();
    let store = try_open(pool, opts, variant, false)
        .unwrap_or_else(|e| panic!("recovery of {}: {e}", path.display()));
    store
        .check()
        .unwrap_or_else(|e| panic!("check after recovery: {e}"));
    store
}

#[test]
fn batches_survive_crash_images_at_random_moments() {
    let seed = seed("hetermm_batches_survive_crash_images_at_random_moments");
    let (total, flushes, _) = random_moments(seed, batch_options, &kit(seed, 100));
    assert!(total.batches_checked > 30, "too few batches: {total:?}");
    assert!(flushes > 10, "the flusher must run inside the batches");
}

/// Batches of up to 100 operations of up to ~270 bytes with 4 KiB pages: most span two to
/// eight log pages (parts and a commit) and several DRAM pages.
#[test]
fn batches_spanning_pages_survive_crash_images_at_random_moments() {
    let seed = seed("hetermm_batches_spanning_pages_survive_crash_images_at_random_moments");
    let kit = BatchKit::new(BatchKitConfig {
        value_pad: 0..=240,
        ..kit(seed, 100).config().clone()
    });
    let (total, flushes, spanning) = random_moments(seed, span_options, &kit);
    assert!(total.batches_checked > 30, "too few batches: {total:?}");
    assert!(flushes > 10, "the flusher must run inside the batches");
    assert!(spanning > 20, "too few batches spanned pages: {spanning}");
}

/// Tracked crash images at random moments while three threads write the kit's batches
/// (every index) beside a filler thread; returns the verdicts, the flushes and the
/// batches that spanned log pages.
fn random_moments(
    seed: u64,
    opts: fn() -> HeterOptions,
    base: &BatchKit,
) -> (BatchReport, u64, u64) {
    let mut total = BatchReport::default();
    let (mut flushes, mut reclaimed, mut spanning) = (0, 0, 0);
    for (round, variant) in ["btree", "hash", "lockfree"].into_iter().enumerate() {
        let round = round as u64;
        let tmp = scratch_dir();
        let pool = create_pool(&tmp.path().join("pool"), POOL, DurabilityMode::Tracked);
        let live = try_open(pool.clone(), opts(), variant, true).unwrap();
        let store: Arc<dyn KvStore> = live.clone();
        assert!(store.atomic_batches());
        let kit = BatchKit::new(BatchKitConfig {
            batches_per_thread: 150,
            seed: base.config().seed.wrapping_add(round),
            ..base.config().clone()
        });
        // A filler thread keeps the flusher and the reclaimer busy (single puts to keys of
        // its own, overwritten in turn) while the kit's threads write batches.
        let stop = AtomicBool::new(false);
        let cuts = std::thread::scope(|s| {
            s.spawn(|| {
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    store
                        .put(format!("fill/{}", n % 500).as_bytes(), &[n as u8; 300])
                        .unwrap();
                    n += 1;
                }
            });
            let cuts = kit.run_with_cuts(&store, 12, |i| {
                let s = seed ^ (round << 8) ^ i;
                let opts = if s.is_multiple_of(2) {
                    CrashImageOptions::lines()
                } else {
                    CrashImageOptions::torn_words()
                };
                pool.crash_image(s, opts).unwrap()
            });
            stop.store(true, Ordering::Relaxed);
            cuts
        });
        let st = store.stats();
        flushes += counter(&st, "flushes");
        reclaimed += counter(&st, "log_blocks_reclaimed");
        spanning += counter(&st, "spanning_batches");
        for (i, (image, ledger)) in cuts.into_iter().enumerate() {
            let recovered = recover_with(&tmp.path().join("img"), &image, variant, opts());
            total.merge(kit.check(&*recovered, &ledger, &format!("{variant} image {i}")));
            recovered.close().unwrap();
        }
        store.close().unwrap();
    }
    println!(
        "random moments: {} images, {} batches checked, {} torn, {} lost; {flushes} flushes, \
         {reclaimed} log blocks reclaimed, {spanning} batches spanned log pages",
        total.images, total.batches_checked, total.torn, total.lost
    );
    total.assert_clean();
    (total, flushes, spanning)
}

/// Runs the persist-point kit over `store` and returns its verdicts and persists per batch.
fn persist_points(
    tmp: &Path,
    store: Arc<dyn KvStore>,
    pool: &Arc<PmemPool>,
    kit: &BatchKit,
    cut: &[u64],
    stride: u64,
) -> (BatchReport, Vec<u64>) {
    persist_points_with(tmp, store, pool, kit, cut, stride, batch_options)
}

fn persist_points_with(
    tmp: &Path,
    store: Arc<dyn KvStore>,
    pool: &Arc<PmemPool>,
    kit: &BatchKit,
    cut: &[u64],
    stride: u64,
    opts: fn() -> HeterOptions,
) -> (BatchReport, Vec<u64>) {
    let last = cut.iter().max().copied().unwrap_or(1);
    let path = tmp.join("image");
    kit.run_persist_points(&store, pool, last, cut, stride, |_, image| {
        recover_with(&path, &image, "btree", opts())
    })
}

/// The log pages a batch's operations take at least (4 KiB pages; a part holds at most a
/// page less 64 bytes of block header, 40 of entry header and 8 of payload header).
fn log_pages(b: &tierkv_core::WriteBatch) -> u64 {
    let payload: u64 = b
        .iter()
        .map(|(k, op)| (24 + k.len() + op.value().map_or(0, <[u8]>::len)).div_ceil(8) as u64 * 8)
        .sum();
    payload.div_ceil(4096 - 64 - 48)
}

/// A crash after every persist of batches spanning three or more log pages (whole lines
/// and torn words): each part is one persist, the commit one (two with the two-step
/// write); every image holds the batch whole or absent.
#[test]
fn batches_spanning_three_pages_survive_a_crash_after_every_persist() {
    for opts in [span_options as fn() -> HeterOptions, span_options_two_step] {
        let seed = seed("hetermm_batches_spanning_three_pages_survive_a_crash_after_every_persist");
        let tmp = scratch_dir();
        let pool = create_pool(&tmp.path().join("pool"), POOL, DurabilityMode::Tracked);
        let live = try_open(pool.clone(), opts(), "btree", true).unwrap();
        let kit = BatchKit::new(BatchKitConfig {
            value_pad: 100..=240,
            ..kit(seed, 100).config().clone()
        });
        let cut: Vec<u64> = (1..60)
            .filter(|&s| log_pages(&kit.batch(0, s)) >= 3)
            .take(4)
            .collect();
        assert_eq!(cut.len(), 4, "the kit drew too few large batches");
        let pages: Vec<u64> = cut.iter().map(|&s| log_pages(&kit.batch(0, s))).collect();
        let (r, persists) = persist_points_with(tmp.path(), live, &pool, &kit, &cut, 1, opts);
        let commit = commit_persists(opts);
        println!(
            "spanning persist points ({commit}-persist commit): batches {cut:?} of at least \
             {pages:?} log pages: {} images ({persists:?} persists), {} batches checked, {} \
             torn, {} lost",
            r.images, r.batches_checked, r.torn, r.lost
        );
        r.assert_clean();
        // NOTE: the flusher may persist too while a batch runs (an image each), and once
        // more between the batch's return and the count, so not exactly one image per count.
        let least: u64 = pages.iter().map(|pg| pg + commit).sum();
        assert!(
            r.images >= least && r.images <= persists.iter().sum::<u64>(),
            "an image per persist: {} images, {persists:?} persists",
            r.images
        );
        for (p, pg) in persists.iter().zip(&pages) {
            assert!(
                *p >= pg + commit,
                "a part per page and {commit} for the commit: {persists:?}"
            );
        }
    }
}

#[test]
fn batches_survive_a_crash_after_every_persist_of_their_commit() {
    for opts in [
        batch_options as fn() -> HeterOptions,
        batch_options_two_step,
    ] {
        let seed = seed("hetermm_batches_survive_a_crash_after_every_persist_of_their_commit");
        let tmp = scratch_dir();
        let pool = create_pool(&tmp.path().join("pool"), POOL, DurabilityMode::Tracked);
        let live = try_open(pool.clone(), opts(), "btree", true).unwrap();
        let kit = kit(seed, 12);
        let (r, persists) =
            persist_points_with(tmp.path(), live, &pool, &kit, &[1, 5, 9, 40], 1, opts);
        let commit = commit_persists(opts);
        println!(
            "persist points ({commit}-persist commit): {} images ({persists:?} persists in the \
             cut batches), {} batches checked, {} torn, {} lost",
            r.images, r.batches_checked, r.torn, r.lost
        );
        r.assert_clean_with_an_image_per_persist(&persists);
        // A batch that changes nothing (deletes of keys no earlier batch left present)
        // persists nothing: only the others must show their commit. (The kit draws batches
        // of one operation, a delete one time in seven: with a random seed the assertion
        // failed about one run in six, `[7, 0, 1, 1]`: batch 5 of seed 3776690001250395808
        // is one delete of a key never written.)
        let mut present = std::collections::BTreeSet::new();
        let mut changes = std::collections::BTreeMap::new();
        for s in 1..=40u64 {
            let b = kit.batch(0, s);
            let changed = b
                .iter()
                .any(|(k, op)| op.value().is_some() || present.contains(k));
            changes.insert(s, changed);
            for (k, op) in b.iter() {
                match op.value() {
                    Some(_) => present.insert(k.to_vec()),
                    None => present.remove(k),
                };
            }
        }
        for (s, &p) in [1u64, 5, 9, 40].iter().zip(&persists) {
            if changes.get(s).copied().unwrap_or(true) {
                assert!(
                    p >= commit,
                    "a batch's commit is {commit} persists: {persists:?} (batch {s})"
                );
            }
        }
    }
}

/// As above, with a filler thread writing single puts meanwhile: the images of the cut
/// batches then also fall inside the flusher's and the log's persists (every persist of
/// every fifth batch, from the tenth on, while blocks and log blocks turn over).
#[test]
fn batches_survive_a_crash_at_persists_of_background_work_inside_them() {
    let seed = seed("hetermm_batches_survive_a_crash_at_persists_of_background_work");
    let tmp = scratch_dir();
    let pool = create_pool(&tmp.path().join("pool"), POOL, DurabilityMode::Tracked);
    let live = try_open(pool.clone(), batch_options(), "btree", true).unwrap();
    let store: Arc<dyn KvStore> = live.clone();
    let kit = kit(seed, 40);
    let stop = AtomicBool::new(false);
    let (r, persists) = std::thread::scope(|s| {
        s.spawn(|| {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                store
                    .put(format!("fill/{}", n % 300).as_bytes(), &[n as u8; 400])
                    .unwrap();
                n += 1;
                if n.is_multiple_of(64) {
                    std::thread::sleep(std::time::Duration::from_millis(1));
                }
            }
        });
        let cut: Vec<u64> = (2..=14).map(|i| i * 5).collect();
        let out = persist_points(tmp.path(), store.clone(), &pool, &kit, &cut, 1);
        stop.store(true, Ordering::Relaxed);
        out
    });
    let st = store.stats();
    println!(
        "persist points with background work: {} images ({persists:?} persists in the cut \
         batches), {} batches checked, {} torn, {} lost; {} flushes, {} log blocks reclaimed",
        r.images,
        r.batches_checked,
        r.torn,
        r.lost,
        counter(&st, "flushes"),
        counter(&st, "log_blocks_reclaimed")
    );
    r.assert_clean();
    assert!(counter(&st, "flushes") > 5, "the flusher must run");
    assert!(
        persists.iter().any(|&p| p > 2),
        "some cut batch must hold persists of other work: {persists:?}"
    );
}

/// The kit catches a non-atomic engine: the same store, with batches applied as a loop of
/// puts and deletes.
#[test]
fn the_kit_catches_batches_applied_as_a_loop_of_puts() {
    let seed = seed("hetermm_the_kit_catches_batches_applied_as_a_loop_of_puts");
    let tmp = scratch_dir();
    let pool = create_pool(&tmp.path().join("pool"), POOL, DurabilityMode::Tracked);
    let live = try_open(pool.clone(), batch_options(), "btree", true).unwrap();
    let broken: Arc<dyn KvStore> = Arc::new(NonAtomicBatches(live));
    let kit = kit(seed, 12);
    let (r, _) = persist_points(tmp.path(), broken, &pool, &kit, &[1, 2, 3, 4, 5, 6], 4);
    println!(
        "loop of puts: {} images, {} torn, {} lost; first: {:?}",
        r.images,
        r.torn,
        r.lost,
        r.failures.first()
    );
    assert!(
        r.torn > 0,
        "the kit did not catch a non-atomic batch: {r:?}"
    );
}

/// The named crash points of a batch's commit (`hetermm.batch.*`), each cut with whole
/// lines and torn words: before the entry, with the entry written but not committed, and
/// committed. Before the commit the batch is absent (with one persist, an image at
/// `entry_written` may hold every line of the unpersisted entry: then whole); after it,
/// whole.
#[test]
fn named_crash_points_of_the_commit_leave_the_batch_whole_or_absent() {
    for opts in [
        batch_options as fn() -> HeterOptions,
        batch_options_two_step,
    ] {
        let seed = seed("hetermm_named_crash_points_of_the_commit");
        let names = named_points(seed, opts, &kit(seed, 30), 4);
        assert_eq!(
            names,
            vec![
                "hetermm.batch.applied",
                "hetermm.batch.committed",
                "hetermm.batch.entry_written"
            ]
        );
    }
}

/// The same for a batch that spans pages: its parts are written (and persisted) one by
/// one before the commit (`hetermm.batch.part_written`, once per part), and the batch is
/// absent until the commit's ts word.
#[test]
fn named_crash_points_of_a_batch_spanning_pages_leave_it_whole_or_absent() {
    let seed = seed("hetermm_named_crash_points_of_a_batch_spanning_pages");
    let kit = BatchKit::new(BatchKitConfig {
        value_pad: 100..=240,
        ..kit(seed, 100).config().clone()
    });
    let s = (4..100)
        .find(|&s| log_pages(&kit.batch(0, s)) >= 3)
        .expect("a large batch");
    for opts in [span_options as fn() -> HeterOptions, span_options_two_step] {
        let names = named_points(seed, opts, &kit, s);
        assert_eq!(
            names,
            vec![
                "hetermm.batch.applied",
                "hetermm.batch.committed",
                "hetermm.batch.entry_written",
                "hetermm.batch.part_written"
            ]
        );
    }
}

/// Writes the kit's batches 1..=3, then batch `s` with images taken at every named point of
/// a batch's commit (whole lines and torn words); checks each recovered image (absent
/// before the commit's ts word, whole after) and returns the names of the points seen.
fn named_points(seed: u64, opts: fn() -> HeterOptions, kit: &BatchKit, s: u64) -> Vec<String> {
    let tmp = scratch_dir();
    let pool = create_pool(&tmp.path().join("pool"), POOL, DurabilityMode::Tracked);
    let live = try_open(pool.clone(), opts(), "hash", true).unwrap();
    let store: Arc<dyn KvStore> = live;
    // Batches 1..=3 are acknowledged before the points are armed.
    for s in 1..=3 {
        store.write_batch(&kit.batch(0, s)).unwrap();
    }
    let images: Arc<parking_lot::Mutex<Vec<NamedImage>>> = Arc::default();
    let (weak, taken) = (Arc::downgrade(&pool), images.clone());
    pool.arm_crash_points(Arc::new(move |p: CrashPoint<'_>| {
        let CrashPoint::Named(name) = p else {
            return;
        };
        if !name.starts_with("hetermm.batch.") {
            return;
        }
        let Some(pool) = weak.upgrade() else { return };
        for (n, opts) in [CrashImageOptions::lines(), CrashImageOptions::torn_words()]
            .into_iter()
            .enumerate()
        {
            let image = pool.crash_image(seed ^ n as u64, opts).unwrap();
            taken.lock().push((name.to_owned(), image));
        }
    }))
    .unwrap();
    let b = kit.batch(0, s);
    store.write_batch(&b).unwrap();
    pool.disarm_crash_points();
    let images = std::mem::take(&mut *images.lock());
    let names: std::collections::BTreeSet<String> = images.iter().map(|(n, _)| n.clone()).collect();
    for (name, image) in &images {
        let r = recover_with(&tmp.path().join("img"), image, "hash", opts());
        let whole = b
            .iter()
            .all(|(k, op)| r.get(k).unwrap().as_deref() == op.value());
        let absent = b.iter().all(|(k, _)| {
            r.get(k)
                .unwrap()
                .is_none_or(|v| !v.starts_with(tierkv_testkit::batch::batch_tag(0, s).as_bytes()))
        });
        let committed = name == "hetermm.batch.committed";
        let either = name == "hetermm.batch.entry_written" && !opts().two_step_write;
        assert!(
            if committed {
                whole
            } else {
                absent || (either && whole)
            },
            "{name}: the batch must be {}",
            if committed {
                "whole"
            } else if either {
                "whole or absent"
            } else {
                "absent"
            }
        );
        r.close().unwrap();
    }
    println!("batch {s}: {} images at {names:?}", images.len());
    names.into_iter().collect()
}

/// A batch against racing single puts on its own keys, cut by crash images at random
/// moments: one thread rewrites a group of 20 keys with batches (every value names the
/// batch), two threads put single values into random keys of its first half. After recovery,
/// every key that holds a batch's value holds the same batch's (a batch is one write: a
/// key keeps an older batch's value only if the newer batch was lost or torn), that batch
/// is at least the last one acknowledged before the image (none lost), and every other key
/// holds a single put's value.
#[test]
fn batches_racing_single_puts_on_their_keys_stay_whole_across_crashes() {
    let seed = seed("hetermm_batches_racing_single_puts");
    let key = |n: u64| format!("grp/{n:02}").into_bytes();
    for (round, variant) in ["btree", "lockfree"].into_iter().enumerate() {
        let tmp = scratch_dir();
        let pool = create_pool(&tmp.path().join("pool"), POOL, DurabilityMode::Tracked);
        let store = try_open(pool.clone(), batch_options(), variant, true).unwrap();
        let acked = std::sync::atomic::AtomicU64::new(0);
        let stop = AtomicBool::new(false);
        let images = std::thread::scope(|s| {
            s.spawn(|| {
                for b in 1u64.. {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    let mut batch = tierkv_core::WriteBatch::new();
                    for n in 0..20 {
                        batch.put(key(n), format!("b{b:06}"));
                    }
                    store.write_batch(&batch).unwrap();
                    acked.store(b, Ordering::SeqCst);
                }
            });
            for t in 0..2u64 {
                let (store, stop) = (&store, &stop);
                s.spawn(move || {
                    let mut x = seed ^ t;
                    for n in 0u64.. {
                        if stop.load(Ordering::Relaxed) {
                            break;
                        }
                        x = x
                            .wrapping_mul(6364136223846793005)
                            .wrapping_add(1442695040888963407);
                        let k = key((x >> 33) % 10);
                        store.put(&k, format!("p{t}.{n}").as_bytes()).unwrap();
                    }
                });
            }
            let mut images = Vec::new();
            for i in 0..8u64 {
                std::thread::sleep(std::time::Duration::from_millis(3 + i));
                let before = acked.load(Ordering::SeqCst);
                let opts = if i % 2 == 0 {
                    CrashImageOptions::lines()
                } else {
                    CrashImageOptions::torn_words()
                };
                images.push((before, pool.crash_image(seed ^ i, opts).unwrap()));
            }
            stop.store(true, Ordering::Relaxed);
            images
        });
        let mut seen = 0;
        for (i, (before, image)) in images.iter().enumerate() {
            let r = recover(&tmp.path().join("img"), image, variant);
            let vals: Vec<String> = (0..20)
                .map(|n| String::from_utf8(r.get(&key(n)).unwrap().unwrap_or_default()).unwrap())
                .collect();
            let tags: std::collections::BTreeSet<&String> =
                vals.iter().filter(|v| v.starts_with('b')).collect();
            let ctx = format!(
                "seed {seed}, {variant} round {round} image {i} ({before} acknowledged): {vals:?}"
            );
            assert!(tags.len() <= 1, "{ctx}: values of several batches");
            assert!(
                vals.iter()
                    .all(|v| v.starts_with('b') || v.starts_with('p') || *before == 0),
                "{ctx}: a key lost every write"
            );
            if let Some(t) = tags.first() {
                let b: u64 = t[1..].parse().unwrap();
                assert!(b >= *before, "{ctx}: batch {before} was acknowledged");
                seen += 1;
            }
            r.close().unwrap();
        }
        assert!(seen > 0, "{variant}: no image showed a batch");
        println!(
            "{variant}: {} batches, {seen} of {} images showed one",
            acked.load(Ordering::SeqCst),
            images.len()
        );
        store.close().unwrap();
    }
}

/// Batch entries survive log compression: a few batches, then in-place updates of hot keys
/// that grow the log while off_DRAM stays put (plenty of DRAM), so the oldest log blocks —
/// those holding the batch entries — are compressed: each batch entry is copied whole. A
/// crash image taken afterwards recovers every batch and the newest hot values.
#[test]
fn batch_entries_are_copied_whole_by_log_compression() {
    let seed = seed("hetermm_batch_entries_are_copied_whole_by_log_compression");
    let copied = compressed(
        seed,
        "hetermm@page_bits=15,block_bits=16,log_blocks=2",
        128 << 15,
        &kit(seed, 30),
    );
    assert_eq!(copied, 0, "no batch spanned pages");
}

/// The same with batches that span pages: compression copies their parts and commits (each
/// part whole, as an entry of its own), and recovery joins the copies.
#[test]
fn parts_of_batches_spanning_pages_are_copied_by_log_compression() {
    let seed = seed("hetermm_parts_of_batches_spanning_pages_are_copied_by_log_compression");
    let kit = BatchKit::new(BatchKitConfig {
        value_pad: 100..=240,
        ..kit(seed, 100).config().clone()
    });
    let spanning = compressed(
        seed,
        "hetermm@page_bits=12,block_bits=17,log_blocks=2",
        1024 << 12,
        &kit,
    );
    // A batch of n operations fits one 4 KiB log page for n <= ~19 of 1..=100: all six do
    // with a chance of about 5e-5.
    assert!(spanning >= 1, "no batch spanned pages");
}

/// Six of the kit's batches, then in-place updates of hot keys until the log has been
/// compressed three times with nothing flushed; a crash image must recover every batch and
/// the newest hot values. Returns the batches that spanned log pages.
fn compressed(seed: u64, spec: &str, dram: u64, kit: &BatchKit) -> u64 {
    let tmp = scratch_dir();
    let pool = create_pool(&tmp.path().join("pool"), 32 << 20, DurabilityMode::Tracked);
    let spec: tierkv_core::EngineSpec = spec.parse().unwrap();
    let opts = || HeterOptions::from_params(spec.params(), dram).unwrap();
    let store = try_open(pool.clone(), opts(), "hash", true).unwrap();
    for s in 1..=6 {
        store.write_batch(&kit.batch(0, s)).unwrap();
    }
    let hot: Vec<Vec<u8>> = (0..40).map(|k| format!("hot{k:02}").into_bytes()).collect();
    for round in 0..300u64 {
        for k in &hot {
            store.put(k, format!("{round:08}").as_bytes()).unwrap();
        }
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let mut st = store.stats();
    while counter(&st, "log_compressions") < 3 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
        st = store.stats();
    }
    println!(
        "{} compressions, {} entries copied, {} flushes, {} batches spanned pages",
        counter(&st, "log_compressions"),
        counter(&st, "log_entries_copied"),
        counter(&st, "flushes"),
        counter(&st, "spanning_batches")
    );
    assert!(counter(&st, "log_compressions") >= 3, "{st:?}");
    assert_eq!(
        counter(&st, "flushes"),
        0,
        "the batches' records must still be in DRAM"
    );
    let image = pool
        .crash_image(seed, CrashImageOptions::torn_words())
        .unwrap();
    let path = tmp.path().join("img");
    std::fs::write(&path, &image).unwrap();
    let r = try_open(
        PmemPool::open(&config(&path, 0, DurabilityMode::Volatile)).unwrap(),
        opts(),
        "hash",
        false,
    )
    .unwrap();
    let ledger = tierkv_testkit::Ledger {
        threads: vec![(6, false), (0, false), (0, false)],
    };
    let report = kit.check(&*r, &ledger, "after compression");
    report.assert_clean();
    for k in &hot {
        assert_eq!(r.get(k).unwrap(), Some(b"00000299".to_vec()));
    }
    r.check().unwrap();
    counter(&st, "spanning_batches")
}
