//! Values written through io_uring with O_DIRECT read back intact, one at a time and as a
//! scan batch, on both back ends; after reopening, the core's re-marking of valid values
//! (recovery, PRISM §5.5) frees exactly the chunks nobody points into.

mod value_storage_support;

use tierkv_core::Error;
use tierkv_prism::combining::CombiningMode;
use tierkv_prism::value_storage::{ValueLocation, ValueStorage};
use value_storage_support::{backends, data_dir, device, parse, storage, value};

const CHUNK: u32 = 64 * 1024;

#[test]
fn values_round_trip_through_io_uring_with_direct_io() {
    for backend in backends() {
        let dir = data_dir();
        let dev = device(dir.path(), backend, 16 << 20);
        assert!(dev.direct_io(), "the data disk must take O_DIRECT");
        let vs = storage(&dev, 16, CHUNK, CombiningMode::Combining);
        let mut written: Vec<(u64, Vec<u8>, ValueLocation)> = Vec::new();
        let sizes = [0usize, 1, 47, 48, 1000, 4096, 5000, 20_000];
        for round in 0..4u64 {
            let vals: Vec<(u64, Vec<u8>)> = sizes
                .iter()
                .enumerate()
                .map(|(i, &n)| {
                    (
                        round * 100 + i as u64,
                        value(round * 100 + i as u64, round, n),
                    )
                })
                .collect();
            let refs: Vec<(u64, &[u8])> = vals.iter().map(|(s, v)| (*s, v.as_slice())).collect();
            let n = vs.values_fitting(refs.iter().map(|(_, v)| v.len()));
            let locs = vs.write_chunk(&refs[..n]).unwrap();
            assert!(vs.is_idle());
            for ((s, v), l) in vals.into_iter().zip(locs) {
                written.push((s, v, l));
            }
        }
        for (s, v, l) in &written {
            let (b, got) = vs.read(*l).unwrap();
            assert_eq!((b, &got), (*s, v), "{backend:?} {l:?}");
        }
        let locs: Vec<ValueLocation> = written.iter().rev().map(|w| w.2).collect();
        let many = vs.read_many(&locs).unwrap();
        for ((b, got), (s, v, _)) in many.iter().zip(written.iter().rev()) {
            assert_eq!((b, got), (s, v));
        }
        let st = vs.stats();
        assert!(
            st.multi_read_ios < st.multi_read_values,
            "neighbouring records share reads: {st:?}"
        );
        assert_eq!(st.chunks_free, 16 - st.chunks_used);
        assert!(vs.check().unwrap().iter().all(|l| !l.starts_with("error")));
    }
}

#[test]
fn reopen_recovers_valid_values_and_frees_the_rest() {
    let dir = data_dir();
    let dev = device(dir.path(), backends()[0], 16 << 20);
    let vs = storage(&dev, 8, CHUNK, CombiningMode::Combining);
    let a = vs
        .write_chunk(&[(1, &value(1, 1, 3000)[..]), (2, &value(2, 1, 3000)[..])])
        .unwrap();
    let b = vs.write_chunk(&[(3, &value(3, 1, 100)[..])]).unwrap();
    drop(vs);

    let vs = ValueStorage::open(0, dev.clone(), CHUNK, CombiningMode::Single, 64).unwrap();
    assert!(
        matches!(vs.write_chunk(&[(9, b"x")]), Err(Error::InvalidArgument(_))),
        "writes wait for recovery"
    );
    vs.mark_valid(a[1]).unwrap();
    vs.finish_recovery();
    assert!(
        vs.mark_valid(b[0]).is_err(),
        "mark_valid is for recovery only"
    );
    assert_eq!(
        vs.free_chunks(),
        7,
        "only the chunk HSIT points into stays used"
    );
    let (slot, v) = vs.read(a[1]).unwrap();
    assert_eq!((slot, parse(&v)), (2, Some((2, 1))));
    assert!(vs.is_valid(a[1]).unwrap() && !vs.is_valid(a[0]).unwrap());
    let c = vs.write_chunk(&[(4, &value(4, 1, 10)[..])]).unwrap();
    assert_ne!(c[0].chunk, a[1].chunk);
    assert_eq!(vs.read(c[0]).unwrap().1, value(4, 1, 10));

    let e = ValueStorage::open(0, dev.clone(), 2 * CHUNK, CombiningMode::Single, 64).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
    assert!(
        ValueStorage::create(0, dev, 1 << 20, CHUNK, CombiningMode::Single, 64).is_err(),
        "create refuses an existing file"
    );
}

#[test]
fn oversized_batches_and_foreign_locations_are_refused() {
    let dir = data_dir();
    let dev = device(dir.path(), backends()[0], 16 << 20);
    let vs = storage(&dev, 4, CHUNK, CombiningMode::Combining);
    let big = vec![7u8; vs.max_value_len() + 1];
    assert!(matches!(
        vs.write_chunk(&[(1, &big[..])]),
        Err(Error::InvalidArgument(_))
    ));
    let max = vec![7u8; vs.max_value_len()];
    let l = vs.write_chunk(&[(1, &max[..])]).unwrap();
    assert_eq!(vs.read(l[0]).unwrap().1, max);
    let foreign = ValueLocation { storage: 1, ..l[0] };
    assert!(vs.read(foreign).is_err());
    let outside = ValueLocation { chunk: 4, ..l[0] };
    assert!(vs.read(outside).unwrap_err().is_corruption());
    assert!(vs.invalidate(outside).is_err());
}

#[test]
fn check_reports_a_valid_bit_that_marks_no_record() {
    let dir = data_dir();
    let dev = device(dir.path(), backends()[0], 16 << 20);
    let vs = storage(&dev, 4, CHUNK, CombiningMode::Combining);
    let l = vs.write_chunk(&[(1, &value(1, 1, 1000)[..])]).unwrap();
    drop(vs);
    let vs = ValueStorage::open(0, dev, CHUNK, CombiningMode::Combining, 64).unwrap();
    vs.mark_valid(l[0]).unwrap();
    let bogus = ValueLocation {
        offset: l[0].offset + 256,
        len: 64,
        ..l[0]
    };
    vs.mark_valid(bogus).unwrap();
    vs.finish_recovery();
    let lines = vs.check().unwrap();
    assert!(
        lines
            .iter()
            .any(|s| s.starts_with("error") && s.contains("2 values marked valid, 1 of them")),
        "{lines:?}"
    );
}
