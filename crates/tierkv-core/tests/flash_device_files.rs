//! The files of a flash device: created preallocated, listed, counted against the
//! capacity, removed, and found again (with their data) when the directory is reopened.

mod flash_support;

use flash_support::{backends, data_disk_dir, open, pattern, read};
use tierkv_core::IoBackend;

const MIB: u64 = 1 << 20;

#[test]
fn files_are_listed_counted_and_found_again_after_reopen() {
    for backend in backends() {
        let dir = data_disk_dir();
        let dev = open(dir.path(), backend, 8 * MIB);
        assert_eq!((dev.capacity(), dev.used()), (8 * MIB, 0));
        let a = dev.create_file("a", MIB).unwrap();
        let b = dev.create_file("b", 2 * MIB).unwrap();
        assert_eq!((a.len(), b.len()), (MIB, 2 * MIB));
        assert_eq!(
            std::fs::metadata(b.path()).unwrap().len(),
            2 * MIB,
            "preallocated"
        );
        assert_eq!(dev.list_files(), ["a", "b"]);
        assert_eq!(dev.used(), 3 * MIB);
        b.write_at(MIB, &pattern(8192, 4)).unwrap();
        b.sync().unwrap();
        dev.remove_file("a").unwrap();
        assert_eq!(dev.list_files(), ["b"]);
        assert_eq!(dev.used(), 2 * MIB);
        dev.sync_dir().unwrap();
        drop((a, b, dev));

        let dev = open(dir.path(), backend, 8 * MIB);
        assert_eq!(dev.list_files(), ["b"]);
        assert_eq!(dev.used(), 2 * MIB);
        let b = dev.open_file("b").unwrap();
        assert_eq!(b.len(), 2 * MIB);
        assert!(read(&b, MIB, 8192) == pattern(8192, 4));
    }
}

#[test]
fn open_creates_the_directory_and_counters_start_at_zero() {
    let base = data_disk_dir();
    let dir = base.path().join("nested/flash");
    let dev = open(&dir, IoBackend::Auto, MIB);
    assert!(dir.is_dir());
    assert_eq!(dev.dir(), dir);
    assert_eq!(dev.counters(), tierkv_core::MediaCounters::default());
    assert!(dev.list_files().is_empty());
}
