//! Optimistic readers against splitting writers: keys loaded before the run must be found
//! by every `get` and every scan while other threads insert and remove different keys in
//! the same leaves, splitting them over and over (fanout 4). This pins the reader protocol:
//! search layer lookup, seqlock validation, then the split-count check.

#![allow(clippy::unwrap_used, reason = "test code: an unwrap is an assertion")]

mod key_index_support;

use std::sync::atomic::{AtomicBool, Ordering};

use key_index_support::{Media, key, seed};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tierkv_core::DurabilityMode;

const STABLE: u32 = 600;

#[test]
fn readers_always_find_stable_keys_while_leaves_split() {
    let seed = seed("key_index_readers");
    let media = Media::new(16 << 20, DurabilityMode::Volatile);
    let index = media.create_index(4);
    // Stable keys: even ids. Writers churn odd ids, which interleave with them.
    let mut stable: Vec<(Vec<u8>, u64)> = (0..STABLE).map(|i| (key(2 * i), u64::from(i))).collect();
    for (k, v) in &stable {
        index.insert_if_absent(k, *v).unwrap().unwrap();
    }
    stable.sort();
    let stop = AtomicBool::new(false);
    let (reads, scans) = std::thread::scope(|s| {
        let writer = s.spawn(|| {
            let mut rng = ChaCha8Rng::seed_from_u64(seed);
            for _ in 0..30_000 {
                let k = key(2 * rng.random_range(0..4 * STABLE) + 1);
                if rng.random_bool(0.6) {
                    index.insert_if_absent(&k, 7).unwrap().ok();
                } else {
                    index.remove(&k).unwrap();
                }
            }
            stop.store(true, Ordering::Relaxed);
        });
        let reader = s.spawn(|| {
            let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 1);
            let (mut reads, mut scans) = (0u64, 0u64);
            while !stop.load(Ordering::Relaxed) {
                let i = rng.random_range(0..stable.len());
                let (k, v) = &stable[i];
                assert_eq!(index.get(k).unwrap(), Some(*v), "stable key {i}");
                reads += 1;
                if reads % 16 == 0 {
                    let got = index.scan(k, 50).unwrap();
                    let seen: Vec<_> = got
                        .iter()
                        .filter(|(k, _)| stable.binary_search_by(|p| p.0.cmp(k)).is_ok())
                        .collect();
                    let upper = &got.last().unwrap().0;
                    let want: Vec<_> = stable[i..].iter().take_while(|(k, _)| k <= upper).collect();
                    assert_eq!(seen, want, "scan from stable key {i}");
                    scans += 1;
                }
            }
            (reads, scans)
        });
        writer.join().unwrap();
        reader.join().unwrap()
    });
    println!(
        "{reads} gets and {scans} scans during {} splits",
        index.stats().splits
    );
    assert!(index.stats().splits > 100);
    media.assert_checks_pass(&index, "after the run");
}
