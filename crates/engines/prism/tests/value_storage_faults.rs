//! Injected flash faults (DESIGN §4, failure model items 3 and 4) with the flash tier's
//! fault-injecting double: an EIO/ENOSPC on a chunk write or read is an error and nothing
//! acknowledged is damaged; a failed sync poisons writes but not reads; a crash during a
//! chunk write leaves the torn chunk unreferenced and every acknowledged value intact; a
//! bit flip on flash is reported, never returned, and GC sets the chunk aside.

mod value_storage_support;

use std::os::unix::fs::FileExt;
use std::sync::Arc;

use tierkv_core::Error;
use tierkv_core::media::flash::{CrashMode, FaultInjector};
use tierkv_prism::combining::CombiningMode;
use tierkv_prism::value_storage::chunk_format::storage_file_name;
use tierkv_prism::value_storage::{Relocation, ValueLocation, ValueStorage};
use value_storage_support::{backends, data_dir, device, faulty_device, parse, storage, value};

const CHUNK: u32 = 32 * 1024;

fn write_some(vs: &ValueStorage, first_slot: u64, n: u64) -> Vec<(u64, ValueLocation)> {
    let vals: Vec<(u64, Vec<u8>)> = (first_slot..first_slot + n)
        .map(|s| (s, value(s, 1, 1500)))
        .collect();
    let refs: Vec<(u64, &[u8])> = vals.iter().map(|(s, v)| (*s, v.as_slice())).collect();
    let locs = vs.write_chunk(&refs).expect("write chunk");
    vals.iter().map(|(s, _)| *s).zip(locs).collect()
}

fn assert_intact(vs: &ValueStorage, written: &[(u64, ValueLocation)]) {
    for (s, l) in written {
        let (b, v) = vs.read(*l).expect("acknowledged value reads back");
        assert_eq!((b, parse(&v)), (*s, Some((*s, 1))));
    }
}

#[test]
fn failed_chunk_write_is_an_error_and_damages_nothing() {
    for backend in backends() {
        for errno in [libc::EIO, libc::ENOSPC] {
            let dir = data_dir();
            let inj = Arc::new(FaultInjector::new());
            let dev = faulty_device(dir.path(), backend, 16 << 20, &inj);
            let vs = storage(&dev, 8, CHUNK, CombiningMode::Combining);
            let written = write_some(&vs, 0, 10);
            let free = vs.free_chunks();
            inj.fail_nth_write(1, errno);
            let e = vs.write_chunk(&[(99, &value(99, 1, 100)[..])]).unwrap_err();
            assert_eq!(e.raw_os_error(), Some(errno), "{backend:?}: {e}");
            assert_eq!(
                vs.free_chunks(),
                free,
                "the chunk of a failed write is free again"
            );
            assert_eq!(vs.stats().write_errors, 1);
            assert!(vs.is_idle());
            assert_intact(&vs, &written);
            let more = write_some(&vs, 10, 10);
            assert_intact(&vs, &more);
        }
    }
}

#[test]
fn failed_read_is_an_error_and_the_next_read_succeeds() {
    for backend in backends() {
        let dir = data_dir();
        let inj = Arc::new(FaultInjector::new());
        let dev = faulty_device(dir.path(), backend, 16 << 20, &inj);
        let vs = storage(&dev, 8, CHUNK, CombiningMode::Combining);
        let written = write_some(&vs, 0, 10);
        inj.fail_nth_read(1, libc::EIO);
        let e = vs.read(written[3].1).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EIO), "{backend:?}: {e}");
        inj.fail_nth_read(1, libc::EIO);
        assert!(
            vs.read_many(&written.iter().map(|w| w.1).collect::<Vec<_>>())
                .is_err()
        );
        assert_intact(&vs, &written);
        assert_eq!(vs.stats().read_errors, 2);
    }
}

#[test]
fn failed_sync_poisons_writes_but_reads_keep_working() {
    let dir = data_dir();
    let inj = Arc::new(FaultInjector::new());
    let dev = faulty_device(dir.path(), backends()[0], 16 << 20, &inj);
    let vs = storage(&dev, 8, CHUNK, CombiningMode::Combining);
    let written = write_some(&vs, 0, 10);
    inj.fail_nth_sync(1, libc::EIO);
    assert!(vs.write_chunk(&[(99, &value(99, 1, 100)[..])]).is_err());
    let e = vs.write_chunk(&[(98, &value(98, 1, 100)[..])]).unwrap_err();
    assert!(
        matches!(e, Error::Poisoned(_)),
        "a failed fdatasync is never retried: {e}"
    );
    assert_intact(&vs, &written);
}

#[test]
fn crash_during_a_chunk_write_leaves_acknowledged_values_intact() {
    let seed = tierkv_testkit::rig::seed("value_storage_faults");
    let dir = data_dir();
    let backend = backends()[0];
    let written = {
        let inj = Arc::new(FaultInjector::new());
        let dev = faulty_device(dir.path(), backend, 16 << 20, &inj);
        let vs = storage(&dev, 8, CHUNK, CombiningMode::Combining);
        let written = write_some(&vs, 0, 15);
        inj.fail_nth_sync(1, libc::EIO);
        assert!(
            vs.write_chunk(&[(50, &vec![0xEE; 20_000][..])]).is_err(),
            "the write is not acknowledged"
        );
        let report = inj.crash(CrashMode::TearUnsynced { seed }).unwrap();
        assert!(report.writes_undone >= 1, "{report:?}");
        written
    };
    let dev = device(dir.path(), backend, 16 << 20);
    let vs = ValueStorage::open(0, dev, CHUNK, CombiningMode::Combining, 64).unwrap();
    for (_, l) in &written {
        vs.mark_valid(*l).unwrap();
    }
    vs.finish_recovery();
    assert_intact(&vs, &written);
    assert_eq!(
        vs.free_chunks(),
        7,
        "the torn chunk is unreferenced, hence free"
    );
    let more = write_some(&vs, 100, 15);
    assert_intact(&vs, &more);
}

#[test]
fn bit_flip_on_flash_is_reported_and_gc_quarantines_the_chunk() {
    let dir = data_dir();
    let dev = device(dir.path(), backends()[0], 16 << 20);
    let vs = storage(&dev, 8, CHUNK, CombiningMode::Combining);
    let a = write_some(&vs, 0, 10);
    let b = write_some(&vs, 10, 10);
    let victim = a[4].1;
    let path = dir.path().join(storage_file_name(0));
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    let at = 8192 + u64::from(victim.chunk) * u64::from(CHUNK) + u64::from(victim.offset) + 100;
    let mut byte = [0u8; 1];
    file.read_exact_at(&mut byte, at).unwrap();
    file.write_all_at(&[byte[0] ^ 0x10], at).unwrap();
    file.sync_all().unwrap();

    let e = vs.read(victim).unwrap_err();
    // Issue 23 finding 9: the error names the tier, the file and the offset.
    assert!(e.is_corruption(), "{e}");
    let text = e.to_string();
    assert!(
        text.starts_with("corruption in flash at offset ")
            && text.contains(&path.display().to_string())
            && text.contains("checksum mismatch"),
        "{text}"
    );
    assert!(vs.read_many(&[a[0].1, victim]).unwrap_err().is_corruption());
    assert!(
        vs.check().unwrap().iter().any(|l| l.starts_with("error")),
        "check sees the damage"
    );

    // Leave few live values in both chunks so GC picks them; the damaged one is set aside.
    for (_, l) in a.iter().chain(&b).filter(|(s, _)| s % 10 != 4) {
        vs.invalidate(*l).unwrap();
    }
    let r = vs.gc_step(&|_, _, _| Ok(Relocation::Moved)).unwrap();
    assert_eq!(r.corrupt_chunks.len(), 1, "{r:?}");
    assert_eq!(r.corrupt_chunks[0].0, victim.chunk);
    assert_eq!(
        (vs.stats().chunks_quarantined, vs.stats().gc_corrupt_chunks),
        (1, 1)
    );
    assert_eq!(
        r.values_moved, 1,
        "the intact chunk's live value moved: {r:?}"
    );
}
