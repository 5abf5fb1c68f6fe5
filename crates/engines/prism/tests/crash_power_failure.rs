//! Power failure (DESIGN §4, failure model 2; FORMAT.md § Crash consistency): writer
//! threads run on a store with a Tracked pool and a fault-injecting flash device; at a
//! random moment a crash image of the pool is taken (every unpersisted line — or, in
//! alternate rounds, every unpersisted word — either kept or lost at random) and the flash
//! device is crashed (unsynced writes dropped whole or torn at 4 KiB). The store is then
//! recovered from the image and must hold every acknowledged write, nothing that was never
//! written, and pass `check`. The moment falls anywhere in user writes and PWB
//! reclamation; GC steps are held off for the instant of the cut (see `round`), so a crash
//! inside a GC step is covered by `fault_flash_errors.rs` instead.
//!
//! The moment is cut consistently: each writer logs its intent before an operation and its
//! acknowledgement after it, under one lock; the image is taken under that lock, so for
//! every key the recovered value is either its last acknowledged one or the one of the
//! operation in flight on it.
//!
//! Two shapes of round, 215 crash images in all by default (`TIERKV_CRASH_SCALE=<n>`
//! multiplies the rounds; `TIERKV_TEST_SEED` sets the first round's seed):
//! - one image per run, on a device small enough that GC runs, the flash crashed too;
//! - ten images at random moments of one run plus a final one, on a device large enough
//!   that no chunk is ever freed during the run (GC never runs, which the test asserts), so
//!   every image is valid against the flash state at the final crash; each earlier image
//!   is recovered on its own copy of that flash state.

#![allow(clippy::unwrap_used, reason = "test code: an unwrap is an assertion")]

mod common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::{Rig, assert_check};
use parking_lot::Mutex;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tierkv_core::KvStore;
use tierkv_core::media::flash::CrashMode;
use tierkv_core::media::pmem::CrashImageOptions;

/// Tiny everything, so that a round of a few hundred operations reclaims and collects.
const SPEC: &str = "prism@pwb_count=2,pwb_size=16KiB,chunk_size=8KiB,svc_size=16KiB";
const WRITERS: usize = 3;
const KEYS: u64 = 24;

/// One writer's log: the last acknowledged state of each of its keys, and the operation
/// in flight (key, value or `None` for a delete).
#[derive(Clone, Debug, Default)]
struct Log {
    acked: BTreeMap<Vec<u8>, Option<Vec<u8>>>,
    intent: Option<(Vec<u8>, Option<Vec<u8>>)>,
}

fn key(w: usize, n: u64) -> Vec<u8> {
    format!("w{w}/k{n:03}").into_bytes()
}

fn writer(store: &dyn KvStore, logs: &Mutex<Vec<Log>>, w: usize, seed: u64, stop: &AtomicBool) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ (w as u64 + 1).wrapping_mul(0x9e37_79b9));
    let mut seq = 0u64;
    while !stop.load(Ordering::Relaxed) {
        seq += 1;
        let k = key(w, rng.random_range(0..KEYS));
        let v = (rng.random_range(0..10) != 0).then(|| {
            let mut v = format!("{}:{seq}:", String::from_utf8_lossy(&k)).into_bytes();
            v.resize(v.len() + rng.random_range(0..900), b'.');
            v
        });
        logs.lock()[w].intent = Some((k.clone(), v.clone()));
        let r = match &v {
            Some(v) => store.put(&k, v),
            None => store.delete(&k),
        };
        if r.is_err() {
            // The flash device was crashed under the store: it poisons itself. Stop.
            return;
        }
        let mut l = logs.lock();
        l[w].acked.insert(k, v);
        l[w].intent = None;
    }
}

fn verify(store: &dyn KvStore, logs: &[Log], ctx: &str) {
    for (w, log) in logs.iter().enumerate() {
        for n in 0..KEYS {
            let k = key(w, n);
            let got = store.get(&k).unwrap_or_else(|e| panic!("{ctx}: get: {e}"));
            let acked = log.acked.get(&k).cloned().unwrap_or(None);
            let in_flight = log
                .intent
                .as_ref()
                .filter(|(ik, _)| *ik == k)
                .map(|(_, v)| v.clone());
            assert!(
                got == acked || in_flight.as_ref() == Some(&got),
                "{ctx}: key {} recovered as {:?}, acknowledged {:?}, in flight {:?}",
                String::from_utf8_lossy(&k),
                got.as_ref().map(|v| String::from_utf8_lossy(&v[..v.len().min(24)]).into_owned()),
                acked.as_ref().map(|v| String::from_utf8_lossy(&v[..v.len().min(24)]).into_owned()),
                in_flight.map(|v| v.map(|v| String::from_utf8_lossy(&v[..v.len().min(24)]).into_owned())),
            );
        }
    }
}

/// Crash image options for `seed`: alternate whole lines and torn words.
fn image_options(seed: u64) -> CrashImageOptions {
    if seed % 2 == 1 {
        CrashImageOptions::torn_words()
    } else {
        CrashImageOptions::lines()
    }
}

/// An image taken during the run: its seed, the pool bytes and the log at that moment.
type Image = (u64, Vec<u8>, Vec<Log>);

/// Runs writers for a random time, taking `extra` images on the way; then takes the final
/// image and crashes the flash device. Returns the final log and the extra images, and
/// the GC steps that ran.
fn run_and_crash(
    rig: &Rig,
    seed: u64,
    extra: usize,
    prefill: u64,
    image_path: &std::path::Path,
) -> (Vec<Log>, Vec<Image>, u64, u64) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let injector = rig.injector.clone().unwrap();
    let (store, pool) = rig.create_with_pool();
    let logs = Mutex::new(vec![Log::default(); WRITERS]);
    // Fill the flash with superseded values first, so that GC is due during the run.
    for pass in 0..prefill {
        let mut l = logs.lock();
        for (w, log) in l.iter_mut().enumerate() {
            for n in 0..KEYS {
                let k = key(w, n);
                let mut v = format!("{}:prefill{pass}:", String::from_utf8_lossy(&k)).into_bytes();
                v.resize(v.len() + rng.random_range(0..900), b'p');
                store.put(&k, &v).unwrap();
                log.acked.insert(k, Some(v));
            }
        }
        drop(l);
        store.flush().unwrap();
    }
    let stop = AtomicBool::new(false);
    let flash_mode = if seed.is_multiple_of(3) {
        CrashMode::DropUnsynced
    } else {
        CrashMode::TearUnsynced { seed }
    };
    let mut images = Vec::new();
    let last = std::thread::scope(|s| {
        for w in 0..WRITERS {
            let (store, logs, stop) = (&*store, &logs, &stop);
            s.spawn(move || writer(store, logs, w, seed, stop));
        }
        for i in 0..extra {
            std::thread::sleep(Duration::from_micros(rng.random_range(500..8_000)));
            let l = logs.lock();
            let img_seed = seed.wrapping_mul(31).wrapping_add(i as u64);
            let img = pool.crash_image(img_seed, image_options(img_seed)).unwrap();
            images.push((img_seed, img, l.clone()));
        }
        std::thread::sleep(Duration::from_micros(rng.random_range(500..40_000)));
        let l = logs.lock();
        {
            // The pmem image first, then the flash crash, with GC held off in between: no
            // chunk the image points into can be freed and rewritten in that window. (The
            // other order would let a sync that was in flight when the flash froze return
            // success and its chunk's pointers reach the image.)
            let _no_gc = store.core().gc_lock.lock();
            pool.write_crash_image(seed, image_options(seed), image_path)
                .unwrap();
            injector.crash(flash_mode).unwrap();
        }
        let snap = l.clone();
        drop(l);
        stop.store(true, Ordering::Relaxed);
        snap
    });
    let st = store.stats();
    (
        last,
        images,
        st.counters["gc_runs"],
        st.counters["pwb_reclaims"],
    )
}

fn context(seed: u64, logs: &[Log]) -> String {
    let keys: usize = logs.iter().map(|l| l.acked.len()).sum();
    format!("seed {seed} (replay: TIERKV_TEST_SEED={seed}), {keys} keys acknowledged")
}

/// Recovers the final image: every acknowledged write, `check`, and the recovered store
/// works and recovers again.
fn verify_final(rig: &Rig, seed: u64, logs: &[Log], image_path: &std::path::Path) {
    let ctx = context(seed, logs);
    let recovered = rig
        .reopen_after_crash(image_path)
        .unwrap_or_else(|e| panic!("{ctx}: recovery failed: {e}"));
    verify(&*recovered, logs, &ctx);
    assert_check(&*recovered);
    recovered.put(b"after", b"crash").unwrap();
    drop(recovered);
    let again = rig.reopen_after_crash(image_path).unwrap();
    verify(&*again, logs, &ctx);
    assert_eq!(again.get(b"after").unwrap().as_deref(), Some(&b"crash"[..]));
}

fn scale() -> u64 {
    std::env::var("TIERKV_CRASH_SCALE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1)
}

fn base_seed(default: u64) -> u64 {
    std::env::var("TIERKV_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

#[test]
fn every_acknowledged_write_survives_a_crash_during_reclamation_and_gc() {
    let rounds = 50 * scale();
    let base = base_seed(0x5eed_0000);
    eprintln!("{rounds} single-image rounds from seed {base}");
    let started = std::time::Instant::now();
    let (mut gc, mut reclaims) = (0, 0);
    for seed in base..base + rounds {
        let rig = Rig::new(SPEC, 4, 1).with_flash_kib(256).with_faults();
        let image_path = rig.root.join("crash.pool");
        let (logs, _, g, r) = run_and_crash(&rig, seed, 0, 4, &image_path);
        gc += g;
        reclaims += r;
        verify_final(&rig, seed, &logs, &image_path);
    }
    eprintln!(
        "{rounds} crash images recovered in {:?} (before the crashes: {reclaims} PWB reclamations, {gc} GC steps)",
        started.elapsed()
    );
    assert!(
        reclaims > rounds,
        "reclamation rarely ran before the crashes"
    );
    assert!(gc > 0, "GC never ran before a crash");
}

#[test]
fn many_crash_images_of_one_run_recover_every_acknowledged_write() {
    const EXTRA: usize = 10;
    let rounds = 15 * scale();
    let base = base_seed(0x1ace_0000);
    eprintln!("{rounds} rounds of {} images from seed {base}", EXTRA + 1);
    let started = std::time::Instant::now();
    let mut images_done = 0;
    for seed in base..base + rounds {
        let rig = Rig::new(SPEC, 4, 4).with_faults();
        let image_path = rig.root.join("crash.pool");
        let (logs, images, gc, _) = run_and_crash(&rig, seed, EXTRA, 0, &image_path);
        assert_eq!(
            gc, 0,
            "seed {seed}: GC ran, so earlier images may point at reused chunks"
        );
        for (img_seed, bytes, img_logs) in images {
            // Each earlier image gets its own copy of the final flash state (recovery may
            // write to chunks that another image still needs).
            let ctx = context(img_seed, &img_logs);
            let early = rig.root.join("early");
            std::fs::create_dir_all(early.join("flash")).unwrap();
            for f in std::fs::read_dir(rig.flash_dir()).unwrap() {
                let f = f.unwrap();
                std::fs::copy(f.path(), early.join("flash").join(f.file_name())).unwrap();
            }
            std::fs::write(early.join("pmem.pool"), &bytes).unwrap();
            let copy = Rig::at(&early, SPEC, 4, 4);
            let recovered = copy
                .reopen()
                .unwrap_or_else(|e| panic!("{ctx} (round {seed}): recovery failed: {e}"));
            verify(&*recovered, &img_logs, &ctx);
            assert_check(&*recovered);
            drop(recovered);
            std::fs::remove_dir_all(&early).unwrap();
            images_done += 1;
        }
        verify_final(&rig, seed, &logs, &image_path);
        images_done += 1;
    }
    eprintln!(
        "{images_done} crash images recovered in {:?}",
        started.elapsed()
    );
}
