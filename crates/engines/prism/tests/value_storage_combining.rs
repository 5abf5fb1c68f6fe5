//! Thread combining on a real flash file (PRISM §5.3): 32 threads reading at once, in each
//! mode (combining, batch size 1, timeout batching), each get exactly their own values, and
//! combining forms batches larger than one under that load.

mod value_storage_support;

use rand::{Rng, SeedableRng};
use tierkv_prism::combining::CombiningMode;
use tierkv_prism::value_storage::{ValueLocation, ValueStorage};
use value_storage_support::{backends, data_dir, device, parse, storage, value};

const VALUES: u64 = 2000;
const CHUNK: u32 = 128 * 1024;

#[test]
fn thirty_two_threads_read_their_own_values_in_every_mode() {
    let seed = tierkv_testkit::rig::seed("value_storage_combining");
    for backend in backends() {
        let dir = data_dir();
        let dev = device(dir.path(), backend, 64 << 20);
        let vs = storage(&dev, 32, CHUNK, CombiningMode::Combining);
        let vals: Vec<Vec<u8>> = (0..VALUES)
            .map(|s| value(s, 1, 200 + (s as usize * 37) % 3000))
            .collect();
        let mut locs: Vec<ValueLocation> = Vec::new();
        while (locs.len() as u64) < VALUES {
            let from = locs.len();
            let n = vs.values_fitting(vals[from..].iter().map(Vec::len));
            let batch: Vec<(u64, &[u8])> = (from..from + n)
                .map(|s| (s as u64, vals[s].as_slice()))
                .collect();
            locs.extend(vs.write_chunk(&batch).unwrap());
        }
        drop(vs);
        for mode in [
            CombiningMode::Combining,
            CombiningMode::Single,
            CombiningMode::Timeout { micros: 100 },
        ] {
            let vs = ValueStorage::open(0, dev.clone(), CHUNK, mode, 64).unwrap();
            for l in &locs {
                vs.mark_valid(*l).unwrap();
            }
            vs.finish_recovery();
            assert_eq!(vs.combining_mode(), mode);
            std::thread::scope(|s| {
                for t in 0..32u64 {
                    let (vs, locs) = (&vs, &locs);
                    s.spawn(move || {
                        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed ^ t);
                        for _ in 0..60 {
                            let slot = rng.random_range(0..VALUES);
                            let (b, v) = vs.read(locs[slot as usize]).unwrap();
                            assert_eq!(b, slot, "{mode}: another slot's record");
                            assert_eq!(parse(&v), Some((slot, 1)), "{mode}: wrong or torn value");
                        }
                    });
                }
            });
            let st = vs.stats().combining;
            println!(
                "{backend:?} {mode}: {} batches, mean batch {:.2}",
                st.batches(),
                st.mean_batch()
            );
            assert_eq!(st.requests(), 32 * 60);
            if mode == CombiningMode::Single {
                assert_eq!(st.batches(), 32 * 60);
            }
        }
    }
}
