//! A full Value Storage (PRISM §5.2): writers get `NoSpace` while GC keeps its reserved
//! chunks; a GC step frees space by merging the chunks with the fewest live values, copes
//! with relocations it loses or that fail, and never frees a chunk that still holds a
//! value HSIT points to.

mod value_storage_support;

use std::collections::HashMap;
use std::sync::Mutex;

use tierkv_core::{Error, Tier};
use tierkv_prism::combining::CombiningMode;
use tierkv_prism::value_storage::{GC_RESERVE, Relocation, ValueLocation, ValueStorage};
use value_storage_support::{backends, data_dir, device, parse, storage, value};

const CHUNK: u32 = 16 * 1024;
const CHUNKS: u64 = 10;

/// The core's side of a relocation: the entry must hold `old`; it now holds `new`.
fn relocate(
    hsit: &Mutex<HashMap<u64, ValueLocation>>,
    slot: u64,
    old: ValueLocation,
    new: ValueLocation,
) -> tierkv_core::Result<Relocation> {
    let mut h = hsit.lock().expect("hsit");
    let cur = h.get_mut(&slot).expect("only live values are moved");
    assert_eq!(*cur, old);
    *cur = new;
    Ok(Relocation::Moved)
}

/// Fills every chunk a writer may use with 4 values each; returns slot -> location.
fn fill(vs: &ValueStorage) -> HashMap<u64, ValueLocation> {
    let mut hsit = HashMap::new();
    let mut slot = 0;
    loop {
        let vals: Vec<(u64, Vec<u8>)> = (slot..slot + 4).map(|s| (s, value(s, 1, 3000))).collect();
        let refs: Vec<(u64, &[u8])> = vals.iter().map(|(s, v)| (*s, v.as_slice())).collect();
        match vs.write_chunk(&refs) {
            Ok(locs) => {
                hsit.extend((slot..slot + 4).zip(locs));
                slot += 4;
            }
            Err(Error::NoSpace {
                tier: Tier::Flash, ..
            }) => return hsit,
            Err(e) => panic!("{e}"),
        }
    }
}

#[test]
fn full_storage_refuses_writes_until_gc_frees_chunks() {
    let dir = data_dir();
    let dev = device(dir.path(), backends()[0], 16 << 20);
    let vs = storage(&dev, CHUNKS, CHUNK, CombiningMode::Combining);
    let hsit = Mutex::new(fill(&vs));
    assert_eq!(
        vs.free_chunks(),
        GC_RESERVE,
        "user writes leave the GC reserve"
    );
    assert!(vs.needs_gc());
    // Supersede three of every four values: each chunk keeps one live value.
    for (_, l) in hsit.lock().unwrap().iter().filter(|(s, _)| *s % 4 != 0) {
        vs.invalidate(*l).unwrap();
    }
    hsit.lock().unwrap().retain(|s, _| s % 4 == 0);
    let r = vs
        .gc_step(&|slot, old, new| relocate(&hsit, slot, old, new))
        .unwrap();
    println!("{r:?}");
    let fit = vs.payload_capacity() / 3024;
    assert_eq!(
        r.victims, fit,
        "as many one-value chunks as fit one new chunk merge into it"
    );
    assert_eq!((r.values_moved, r.chunks_retired), (fit as u64, fit));
    for (s, l) in hsit.lock().unwrap().iter() {
        let (b, v) = vs.read(*l).unwrap();
        assert_eq!((b, parse(&v)), (*s, Some((*s, 1))));
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while vs.free_chunks() < GC_RESERVE + 1 {
        assert!(
            std::time::Instant::now() < deadline,
            "retired chunks never became free"
        );
        crossbeam_epoch::pin().flush();
    }
    let l = vs.write_chunk(&[(1000, &value(1000, 1, 10)[..])]).unwrap();
    hsit.lock().unwrap().insert(1000, l[0]);
    assert_eq!(vs.stats().live_values, 9);
    let r = vs
        .gc_step(&|slot, old, new| relocate(&hsit, slot, old, new))
        .unwrap();
    assert!(r.values_moved > 0, "a second step merges the rest: {r:?}");
}

#[test]
fn lost_and_failed_relocations_leave_every_referenced_value_in_place() {
    let dir = data_dir();
    let dev = device(dir.path(), backends()[0], 16 << 20);
    let vs = storage(&dev, CHUNKS, CHUNK, CombiningMode::Combining);
    let mut hsit = fill(&vs);
    for (_, l) in hsit.iter().filter(|(s, _)| *s % 4 >= 2) {
        vs.invalidate(*l).unwrap();
    }
    hsit.retain(|s, _| s % 4 < 2);
    let before = vs.stats().live_values;

    // The first relocation errs: GC stops, nothing moves, the victims stay collectable.
    let e = vs
        .gc_step(&|_, _, _| Err(Error::invalid("HSIT busy")))
        .unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)));
    assert_eq!(
        vs.stats().live_values,
        before,
        "copies of unmoved values are not live"
    );
    for (s, l) in &hsit {
        assert_eq!(vs.read(*l).unwrap().0, *s);
    }

    // Every relocation is lost (the core updated the keys meanwhile): the copies are
    // invalid, and the victims are retired only once the core invalidates the old values.
    let r = vs.gc_step(&|_, _, _| Ok(Relocation::Lost)).unwrap();
    assert!(r.victims >= 2 && r.values_moved == 0, "{r:?}");
    assert_eq!(r.values_dropped, 2 * r.victims as u64, "{r:?}");
    for (s, l) in &hsit {
        assert!(vs.is_valid(*l).unwrap(), "slot {s} lost its value");
        assert_eq!(vs.read(*l).unwrap().0, *s);
    }
    assert_eq!(vs.stats().live_values, before);
    // The core's updates invalidate the old values; the next step retires the drained
    // victims (and every other chunk left without live values).
    for l in hsit.values() {
        vs.invalidate(*l).unwrap();
    }
    let r = vs.gc_step(&|_, _, _| Ok(Relocation::Moved)).unwrap();
    assert!(
        r.chunks_retired >= 8,
        "every drained chunk is retired: {r:?}"
    );
    assert_eq!(vs.stats().live_values, 0);
}
