//! GC under load (PRISM §5.2, Figure 17): while writers keep superseding values and GC keeps
//! collecting chunks, readers that follow the contract (pin the epoch, load the location
//! from the "HSIT", read) always get the value of their own slot, intact — never a value of
//! another slot, never a torn or reused chunk. A miniature HSIT (one atomic word per slot)
//! stands in for the core.

mod value_storage_support;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use tierkv_prism::combining::CombiningMode;
use tierkv_prism::value_storage::{Relocation, ValueLocation, ValueStorage};
use value_storage_support::{backends, data_dir, device, parse, storage, value};

const SLOTS: u64 = 64;
const CHUNK: u32 = 16 * 1024;
const VALUE_LEN: usize = 900;

struct MiniHsit {
    slots: Vec<AtomicU64>,
    /// The version last published for each slot (each slot has one writer thread).
    versions: Vec<AtomicU64>,
}

impl MiniHsit {
    fn load(&self, s: u64) -> ValueLocation {
        ValueLocation::unpack(self.slots[s as usize].load(Ordering::Acquire))
    }
    fn cas(&self, s: u64, old: ValueLocation, new: ValueLocation) -> bool {
        self.slots[s as usize]
            .compare_exchange(old.pack(), new.pack(), Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }
}

/// Writes a new version of `slots` into one chunk and publishes each (as PWB reclamation).
/// Gives up (returns false) when `stop` is set while it waits for GC to free a chunk: once the
/// test's GC loop has ended, no chunk will ever be freed again.
fn update(vs: &ValueStorage, h: &MiniHsit, slots: &[u64], stop: &AtomicBool) -> bool {
    let vals: Vec<(u64, Vec<u8>)> = slots
        .iter()
        .map(|&s| {
            (
                s,
                value(
                    s,
                    h.versions[s as usize].load(Ordering::Acquire) + 1,
                    VALUE_LEN,
                ),
            )
        })
        .collect();
    let refs: Vec<(u64, &[u8])> = vals.iter().map(|(s, v)| (*s, v.as_slice())).collect();
    let locs = loop {
        match vs.write_chunk(&refs) {
            Ok(l) => break l,
            Err(tierkv_core::Error::NoSpace { .. }) if stop.load(Ordering::Relaxed) => {
                return false;
            }
            Err(tierkv_core::Error::NoSpace { .. }) => std::thread::yield_now(),
            Err(e) => panic!("{e}"),
        }
    };
    for (&s, new) in slots.iter().zip(locs) {
        loop {
            let old = h.load(s);
            if h.cas(s, old, new) {
                vs.invalidate(old)
                    .expect("invalidate the superseded location");
                h.versions[s as usize].fetch_add(1, Ordering::AcqRel);
                break;
            }
        }
    }
    true
}

#[test]
fn readers_never_see_wrong_data_while_gc_moves_values() {
    let seed = tierkv_testkit::rig::seed("value_storage_gc_concurrent_reads");
    for backend in backends() {
        let dir = data_dir();
        let dev = device(dir.path(), backend, 16 << 20);
        let vs = storage(&dev, 24, CHUNK, CombiningMode::Combining);
        vs.set_gc_threshold(8);
        let h = MiniHsit {
            slots: (0..SLOTS).map(|_| AtomicU64::new(0)).collect(),
            versions: (0..SLOTS).map(|_| AtomicU64::new(0)).collect(),
        };
        for s in (0..SLOTS).collect::<Vec<_>>().chunks(16) {
            let vals: Vec<(u64, Vec<u8>)> =
                s.iter().map(|&s| (s, value(s, 0, VALUE_LEN))).collect();
            let refs: Vec<(u64, &[u8])> = vals.iter().map(|(s, v)| (*s, v.as_slice())).collect();
            for (&slot, l) in s.iter().zip(vs.write_chunk(&refs).unwrap()) {
                h.slots[slot as usize].store(l.pack(), Ordering::Release);
            }
        }
        let stop = AtomicBool::new(false);
        let reads = AtomicU64::new(0);
        let (mut gc_moved, mut gc_retired) = (0, 0);
        std::thread::scope(|s| {
            for t in 0..6u64 {
                let (vs, h, stop, reads) = (&vs, &h, &stop, &reads);
                s.spawn(move || {
                    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed ^ t);
                    while !stop.load(Ordering::Relaxed) {
                        let slot = rng.random_range(0..SLOTS);
                        let _pin = crossbeam_epoch::pin();
                        let before = h.versions[slot as usize].load(Ordering::Acquire);
                        let loc = h.load(slot);
                        let (backptr, v) =
                            vs.read(loc).unwrap_or_else(|e| panic!("read {loc:?}: {e}"));
                        assert_eq!(backptr, slot, "a record of another slot at {loc:?}");
                        let (vslot, version) = parse(&v).expect("intact value");
                        assert_eq!(vslot, slot);
                        assert!(
                            version >= before,
                            "slot {slot}: read version {version} after {before} was published"
                        );
                        reads.fetch_add(1, Ordering::Relaxed);
                    }
                });
            }
            for t in 0..2u64 {
                let (vs, h, stop) = (&vs, &h, &stop);
                s.spawn(move || {
                    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed ^ (100 + t));
                    while !stop.load(Ordering::Relaxed) {
                        let n = rng.random_range(1..=12);
                        // Writer t owns the slots of its parity, so each slot's versions are
                        // published in order.
                        let slots: Vec<u64> = (0..n)
                            .map(|_| rng.random_range(0..SLOTS / 2) * 2 + t)
                            .collect::<std::collections::BTreeSet<_>>()
                            .into_iter()
                            .collect();
                        if !update(vs, h, &slots, stop) {
                            break;
                        }
                    }
                });
            }
            let deadline = Instant::now() + Duration::from_millis(1500);
            while Instant::now() < deadline {
                if vs.needs_gc() {
                    let r = vs
                        .gc_step(&|slot, old, new| {
                            Ok(if h.cas(slot, old, new) {
                                Relocation::Moved
                            } else {
                                Relocation::Lost
                            })
                        })
                        .unwrap();
                    assert!(r.corrupt_chunks.is_empty(), "{r:?}");
                    gc_moved += r.values_moved;
                    gc_retired += r.chunks_retired;
                } else {
                    std::thread::sleep(Duration::from_micros(200));
                }
            }
            stop.store(true, Ordering::Relaxed);
        });
        let st = vs.stats();
        println!(
            "{backend:?}: {} reads, gc moved {gc_moved} values, retired {gc_retired} chunks; {st:?}",
            reads.load(Ordering::Relaxed)
        );
        assert!(gc_retired > 10, "GC must have run many times");
        assert!(reads.load(Ordering::Relaxed) > 100);
        for slot in 0..SLOTS {
            let (b, v) = vs.read(h.load(slot)).unwrap();
            assert_eq!(
                (b, parse(&v).map(|p| p.1)),
                (
                    slot,
                    Some(h.versions[slot as usize].load(Ordering::Acquire))
                )
            );
            assert!(vs.is_valid(h.load(slot)).unwrap());
        }
        assert_eq!(st.live_values, SLOTS, "exactly one valid copy per slot");
        assert!(
            vs.check().unwrap().iter().all(|l| !l.starts_with("error")),
            "{:?}",
            vs.check()
        );
    }
}
