//! On /dev/shm (tmpfs) the flash tier uses buffered I/O instead of `O_DIRECT`, says so once
//! per process on stderr however many devices are opened, and still reads back what it
//! wrote on every back end.
//!
//! The check of "once" runs this test binary again as a child and counts the notice in its
//! stderr, since a process-wide notice cannot be reset within one process.

mod flash_support;

use flash_support::{backends, open, pattern, read};
use std::path::Path;
use tierkv_core::media::flash::{IoBatch, direct_io_fallback_announced};

const CHILD_ENV: &str = "TIERKV_FLASH_TMPFS_CHILD";
const NOTICE: &str = "flash files there use buffered I/O";

/// The child's work: three devices on /dev/shm, each written and read back.
fn run_on_dev_shm() {
    for backend in backends() {
        for round in 0..3u64 {
            let dir = tempfile::tempdir_in("/dev/shm").expect("dir on /dev/shm");
            let dev = open(dir.path(), backend, 4 << 20);
            assert!(!dev.direct_io(), "tmpfs has no direct I/O");
            let f = dev.create_file("shm", 1 << 20).expect("create");
            assert!(!f.direct_io());
            let mut batch = IoBatch::new();
            for b in 0..16u64 {
                let len = 4096 * (1 + (b as usize % 4));
                batch.write(&f, b * 65536, pattern(len, b + round), b);
            }
            for c in dev.submit_and_wait(batch).expect("batch") {
                c.result.expect("write");
            }
            f.sync().expect("sync");
            for b in 0..16u64 {
                let len = 4096 * (1 + (b as usize % 4));
                assert!(read(&f, b * 65536, len) == pattern(len, b + round));
            }
        }
    }
    assert!(direct_io_fallback_announced());
}

#[test]
fn dev_shm_falls_back_to_buffered_io_and_says_so_once() {
    if !Path::new("/dev/shm").is_dir() {
        eprintln!("no /dev/shm on this machine; nothing to check");
        return;
    }
    if std::env::var_os(CHILD_ENV).is_some() {
        run_on_dev_shm();
        return;
    }
    let notices = flash_support::child_stderr_lines(
        "dev_shm_falls_back_to_buffered_io_and_says_so_once",
        CHILD_ENV,
        NOTICE,
    );
    assert_eq!(notices, 1, "the fallback is said exactly once");
}
