//! The fault-injecting double at a simulated crash (DESIGN §4, failure model item 3):
//! unsynced writes are dropped whole or torn at 4 KiB while synced data survives, files
//! created after the last directory sync vanish, and the crashed device refuses writes.

mod flash_support;
mod seed_policy;

use flash_support::{backends, faulty_device, open, pattern, read};
use tierkv_core::Error;
use tierkv_core::media::flash::{AlignedBuf, CrashMode, IoBatch};

const BLK: usize = 4096;

fn seed() -> u64 {
    seed_policy::seed("flash_crash_rollback")
}

#[test]
fn unsynced_writes_are_dropped_whole_and_synced_ones_survive() {
    for backend in backends() {
        let (dir, inj, dev) = faulty_device(backend, 1 << 20);
        let f = dev.create_file("log", 64 * BLK as u64).unwrap();
        dev.sync_dir().unwrap();
        // Blocks 0..8: written and synced.
        f.write_at(0, &pattern(8 * BLK, 1)).unwrap();
        f.sync().unwrap();
        // Blocks 4..12 rewritten, never synced: one write_at and one batch.
        f.write_at(4 * BLK as u64, &pattern(4 * BLK, 2)).unwrap();
        let mut b = IoBatch::new();
        b.write(&f, 8 * BLK as u64, pattern(4 * BLK, 3), 0);
        for c in dev.submit_and_wait(b).unwrap() {
            c.result.unwrap();
        }
        assert_eq!(inj.unsynced_writes(), 2);
        let r = inj.crash(CrashMode::DropUnsynced).unwrap();
        assert_eq!(
            (r.writes_undone, r.blocks_dropped, r.blocks_kept),
            (2, 8, 0)
        );

        // The crashed device refuses writes and syncs; reads still work.
        let e = f.write_at(0, &pattern(BLK, 9)).unwrap_err();
        assert!(matches!(e, Error::Io { op: "write", .. }), "{e}");
        assert!(f.sync().is_err());
        read(&f, 0, BLK);
        drop((f, dev));

        let dev = open(dir.path(), backend, 1 << 20);
        let f = dev.open_file("log").unwrap();
        assert!(
            read(&f, 0, 8 * BLK) == pattern(8 * BLK, 1),
            "synced data survives"
        );
        assert!(
            read(&f, 8 * BLK as u64, 4 * BLK).iter().all(|&x| x == 0),
            "lost"
        );
    }
}

#[test]
fn unsynced_writes_are_torn_at_4k_blocks_by_a_seeded_crash() {
    let seed = seed();
    for backend in backends() {
        let (dir, inj, dev) = faulty_device(backend, 1 << 20);
        let f = dev.create_file("t", 64 * BLK as u64).unwrap();
        dev.sync_dir().unwrap();
        let (a, b, c) = (
            pattern(64 * BLK, 10),
            pattern(64 * BLK, 11),
            pattern(32 * BLK, 12),
        );
        f.write_at(0, &a).unwrap();
        f.sync().unwrap();
        f.write_at(0, &b).unwrap(); // unsynced
        f.write_at(0, &c).unwrap(); // unsynced, over the first half of b
        let r = inj.crash(CrashMode::TearUnsynced { seed }).unwrap();
        assert_eq!(r.writes_undone, 2);
        assert_eq!(r.blocks_kept + r.blocks_dropped, 64 + 32);
        drop((f, dev));

        let dev = open(dir.path(), backend, 1 << 20);
        let got = read(&dev.open_file("t").unwrap(), 0, 64 * BLK);
        let (mut from_a, mut newer) = (0, 0);
        for i in 0..64 {
            let blk = &got[i * BLK..(i + 1) * BLK];
            let is = |v: &AlignedBuf| v.len() > i * BLK && blk == &v[i * BLK..(i + 1) * BLK];
            assert!(
                is(&a) || is(&b) || is(&c),
                "block {i} holds a version that was written to it (seed {seed})"
            );
            if is(&a) {
                from_a += 1;
            } else {
                newer += 1;
            }
        }
        assert_eq!(from_a + newer, 64);
        eprintln!("{backend}: {newer} of 64 blocks kept newer data, {from_a} rolled back");
    }
}

#[test]
fn files_created_after_the_last_dir_sync_vanish_at_a_crash() {
    for backend in backends() {
        let (dir, inj, dev) = faulty_device(backend, 1 << 20);
        let kept = dev.create_file("kept", 16 * BLK as u64).unwrap();
        kept.write_at(0, &pattern(BLK, 5)).unwrap();
        kept.sync().unwrap();
        dev.sync_dir().unwrap();
        let lost = dev.create_file("lost", 16 * BLK as u64).unwrap();
        lost.write_at(0, &pattern(BLK, 6)).unwrap();
        lost.sync().unwrap(); // data synced, but the directory entry is not
        let r = inj.crash(CrashMode::DropUnsynced).unwrap();
        assert_eq!(r.files_removed, 1);
        assert!(matches!(
            dev.create_file("new", 4096),
            Err(Error::Io { .. })
        ));
        drop((kept, lost, dev));

        let dev = open(dir.path(), backend, 1 << 20);
        assert_eq!(dev.list_files(), vec!["kept".to_owned()]);
        assert_eq!(dev.used(), 16 * BLK as u64);
        assert!(read(&dev.open_file("kept").unwrap(), 0, BLK) == pattern(BLK, 5));
        assert!(dev.open_file("lost").is_err());
    }
}
