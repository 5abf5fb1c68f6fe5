//! Injected I/O errors (DESIGN §4, failure model item 4): EIO and ENOSPC on the n-th write
//! or read, and a failed sync, each surface as an `Error` (never a panic) and leave the
//! device usable for reads; a failed sync poisons writes and is never retried.

mod flash_support;

use flash_support::{backends, channel_notifier, faulty_device, pattern, read};
use tierkv_core::Error;
use tierkv_core::media::flash::{AlignedBuf, IoBatch};

const BLK: usize = 4096;

fn is_io(e: &Error, op: &str, errno: i32) -> bool {
    matches!(e, Error::Io { op: o, .. } if *o == op) && e.raw_os_error() == Some(errno)
}

#[test]
fn eio_and_enospc_on_the_nth_write_are_errors_and_the_rest_succeed() {
    for backend in backends() {
        for errno in [libc::EIO, libc::ENOSPC] {
            let (_dir, inj, dev) = faulty_device(backend, 1 << 20);
            let f = dev.create_file("w", 16 * BLK as u64).unwrap();
            inj.fail_nth_write(3, errno);
            for i in 0..5u64 {
                let r = f.write_at(i * BLK as u64, &pattern(BLK, i));
                if i == 2 {
                    let e = r.unwrap_err();
                    assert!(is_io(&e, "write", errno), "{backend}: {e}");
                    assert!(e.to_string().contains(&f.path().display().to_string()));
                } else {
                    r.unwrap();
                }
            }
            // In a batch: exactly one of four writes fails.
            inj.fail_nth_write(2, errno);
            let mut b = IoBatch::new();
            for i in 5..9u64 {
                b.write(&f, i * BLK as u64, pattern(BLK, i), i);
            }
            let done = dev.submit_and_wait(b).unwrap();
            let failed: Vec<_> = done.iter().filter(|c| c.result.is_err()).collect();
            assert_eq!(failed.len(), 1);
            assert!(is_io(
                failed[0].result.as_ref().unwrap_err(),
                "write",
                errno
            ));
            assert_eq!(inj.injected().writes_failed, 2);
            // Still usable.
            f.write_at(0, &pattern(BLK, 42)).unwrap();
            f.sync().unwrap();
            assert!(read(&f, 0, BLK) == pattern(BLK, 42));
            assert_eq!(dev.counters().flash_bytes_written, 8 * BLK as u64);
        }
    }
}

#[test]
fn eio_on_the_nth_read_is_an_error_on_every_path() {
    for backend in backends() {
        let (_dir, inj, dev) = faulty_device(backend, 1 << 20);
        let f = dev.create_file("r", 16 * BLK as u64).unwrap();
        f.write_at(0, &pattern(16 * BLK, 1)).unwrap();

        inj.fail_nth_read(1, libc::EIO);
        let mut buf = AlignedBuf::new(BLK).unwrap();
        let e = f.read_at(0, &mut buf).unwrap_err();
        assert!(is_io(&e, "read", libc::EIO), "{e}");
        f.read_at(0, &mut buf).unwrap();

        inj.fail_nth_read(3, libc::EIO);
        let mut b = IoBatch::new();
        for i in 0..4u64 {
            b.read(&f, i * BLK as u64, AlignedBuf::new(BLK).unwrap(), i);
        }
        let errs = dev
            .submit_and_wait(b)
            .unwrap()
            .into_iter()
            .filter(|c| c.result.is_err())
            .count();
        assert_eq!(errs, 1);

        inj.fail_nth_read(1, libc::EIO);
        let (n, rx) = channel_notifier();
        let mut b = IoBatch::new();
        b.read(&f, 0, AlignedBuf::new(BLK).unwrap(), 0);
        dev.submit_async(b, &n).unwrap();
        let (_, c) = rx.next();
        assert!(is_io(c.result.as_ref().unwrap_err(), "read", libc::EIO));
        assert_eq!(inj.injected().reads_failed, 3);
    }
}

#[test]
fn a_failed_sync_poisons_writes_and_is_never_retried_but_reads_work() {
    for backend in backends() {
        let (_dir, inj, dev) = faulty_device(backend, 1 << 20);
        let f = dev.create_file("s", 16 * BLK as u64).unwrap();
        f.write_at(0, &pattern(BLK, 1)).unwrap();
        inj.fail_nth_sync(1, libc::EIO);
        let e = f.sync().unwrap_err();
        assert!(is_io(&e, "fdatasync", libc::EIO), "{e}");
        assert!(dev.poisoned().is_some());
        let syncs_before = dev.counters().flash_syncs;
        assert!(matches!(f.sync(), Err(Error::Poisoned(_))), "never retried");
        assert_eq!(dev.counters().flash_syncs, syncs_before);
        assert!(matches!(
            f.write_at(0, &pattern(BLK, 2)),
            Err(Error::Poisoned(_))
        ));
        assert!(matches!(
            dev.create_file("x", 4096),
            Err(Error::Poisoned(_))
        ));
        assert!(matches!(dev.sync_dir(), Err(Error::Poisoned(_))));
        let mut b = IoBatch::new();
        b.write(&f, 0, pattern(BLK, 3), 0);
        let done = dev.submit_and_wait(b).unwrap();
        assert!(matches!(done[0].result, Err(Error::Poisoned(_))));
        assert!(read(&f, 0, BLK) == pattern(BLK, 1), "reads still work");
    }
}

#[test]
fn fail_all_writes_lasts_until_cleared() {
    for backend in backends() {
        let (_dir, inj, dev) = faulty_device(backend, 1 << 20);
        let f = dev.create_file("a", 16 * BLK as u64).unwrap();
        inj.fail_all_writes(libc::ENOSPC);
        for i in 0..3u64 {
            let e = f.write_at(i * BLK as u64, &pattern(BLK, i)).unwrap_err();
            assert!(is_io(&e, "write", libc::ENOSPC));
        }
        inj.clear_failures();
        f.write_at(0, &pattern(BLK, 7)).unwrap();
        assert_eq!(inj.injected().writes_failed, 3);
        assert_eq!(dev.counters().flash_bytes_written, BLK as u64);
    }
}
