//! Requests the flash tier refuses with a clear error before the kernel sees them: past the
//! end of a file that is too small, misaligned offsets and buffer lengths, files beyond the
//! device's capacity, bad names and lengths, bad options; and reads cut short by a file
//! shortened behind the tier's back, which are errors, never zero-filled data.

mod flash_support;

use flash_support::{backends, channel_notifier, data_disk_dir, open, options, pattern};
use tierkv_core::media::flash::{AlignedBuf, FlashDevice, IoBatch};
use tierkv_core::{Error, IoBackend, Tier};

const BLK: usize = 4096;

fn invalid(r: Result<(), Error>, needle: &str) {
    match r {
        Err(Error::InvalidArgument(m)) => assert!(m.contains(needle), "{m:?} lacks {needle:?}"),
        other => panic!("expected InvalidArgument about {needle:?}, got {other:?}"),
    }
}

#[test]
fn buffer_pieces_round_trip_and_bad_pieces_are_refused_on_every_path() {
    for backend in backends() {
        let dir = data_disk_dir();
        let dev = open(dir.path(), backend, 1 << 20);
        let f = dev.create_file("pieces", 4 * BLK as u64).unwrap();
        let src = pattern(4 * BLK, 7);
        // Written in two pieces, read back in three.
        f.write_from(0, &src, 0, BLK).unwrap();
        f.write_from(BLK as u64, &src, BLK, 3 * BLK).unwrap();
        let mut back = AlignedBuf::new(4 * BLK).unwrap();
        f.read_into(0, &mut back, 0, 2 * BLK).unwrap();
        f.read_into(2 * BLK as u64, &mut back, 2 * BLK, BLK)
            .unwrap();
        f.read_into(3 * BLK as u64, &mut back, 3 * BLK, BLK)
            .unwrap();
        assert_eq!(&back[..], &src[..], "{backend:?}");
        invalid(f.write_from(0, &src, 100, BLK), "not block aligned");
        invalid(f.read_into(0, &mut back, 3 * BLK, 2 * BLK), "past its end");
        invalid(f.write_from(0, &src, BLK, usize::MAX), "past its end");
        // A piece that is not whole blocks is refused like any such request.
        assert!(matches!(
            f.read_into(0, &mut back, 0, 100),
            Err(Error::InvalidArgument(_))
        ));
    }
}

#[test]
fn requests_past_the_end_of_a_small_file_are_refused_on_every_path() {
    for backend in backends() {
        let dir = data_disk_dir();
        let dev = open(dir.path(), backend, 1 << 20);
        let f = dev.create_file("small", 2 * BLK as u64).unwrap();
        let mut big = AlignedBuf::new(3 * BLK).unwrap();
        invalid(f.read_at(0, &mut big), "runs past the end");
        invalid(f.write_at(0, &big), "runs past the end");
        invalid(
            f.write_at(2 * BLK as u64, &pattern(BLK, 1)),
            "runs past the end",
        );
        invalid(
            f.write_at(u64::MAX - 4095, &pattern(BLK, 1)),
            "runs past the end",
        );

        let mut b = IoBatch::new();
        b.read(&f, BLK as u64, AlignedBuf::new(2 * BLK).unwrap(), 0);
        b.read(&f, 0, AlignedBuf::new(BLK).unwrap(), 1);
        let done = dev.submit_and_wait(b).unwrap();
        for c in done {
            match c.request.tag {
                0 => invalid(c.result, "runs past the end"),
                _ => c.result.unwrap(),
            }
        }

        let (n, rx) = channel_notifier();
        let mut b = IoBatch::new();
        b.write(&f, 2 * BLK as u64, pattern(BLK, 2), 0);
        dev.submit_async(b, &n).unwrap();
        let (_, c) = rx.next();
        invalid(c.result, "runs past the end");
        assert_eq!(dev.counters().flash_bytes_written, 0);
    }
}

#[test]
fn misaligned_offsets_and_buffer_lengths_are_invalid_arguments() {
    for backend in backends() {
        let dir = data_disk_dir();
        let dev = open(dir.path(), backend, 1 << 20);
        let f = dev.create_file("m", 16 * BLK as u64).unwrap();
        let buf = pattern(BLK, 1);
        invalid(f.write_at(512, &buf), "multiples of 4096");
        invalid(f.write_at(1, &buf), "multiples of 4096");
        let odd = AlignedBuf::new(1000).unwrap();
        invalid(f.write_at(0, &odd), "multiples of 4096");
        let empty = AlignedBuf::new(0).unwrap();
        invalid(f.write_at(0, &empty), "non-zero");
        let mut odd = AlignedBuf::new(BLK + 512).unwrap();
        invalid(f.read_at(0, &mut odd), "multiples of 4096");

        let mut b = IoBatch::new();
        b.write(&f, 100, pattern(BLK, 1), 0);
        b.write(&f, 0, AlignedBuf::new(100).unwrap(), 1);
        b.write(&f, BLK as u64, pattern(BLK, 2), 2);
        let mut ok = 0;
        for c in dev.submit_and_wait(b).unwrap() {
            if c.request.tag == 2 {
                c.result.unwrap();
                ok += 1;
            } else {
                invalid(c.result, "multiples of 4096");
            }
        }
        assert_eq!(ok, 1);
    }
}

#[test]
fn files_beyond_the_capacity_are_no_space() {
    let dir = data_disk_dir();
    let dev = open(dir.path(), IoBackend::Auto, 64 * BLK as u64);
    dev.create_file("a", 48 * BLK as u64).unwrap();
    let e = dev.create_file("b", 32 * BLK as u64).unwrap_err();
    assert!(
        matches!(
            e,
            Error::NoSpace {
                tier: Tier::Flash,
                ..
            }
        ),
        "{e}"
    );
    assert!(!dir.path().join("b").exists(), "nothing created");
    dev.create_file("b", 16 * BLK as u64).unwrap();
    assert_eq!(dev.used(), dev.capacity());
    assert!(matches!(
        dev.create_file("c", BLK as u64),
        Err(Error::NoSpace { .. })
    ));
    dev.remove_file("a").unwrap();
    dev.create_file("c", 48 * BLK as u64).unwrap();
}

#[test]
fn bad_names_lengths_and_options_are_invalid_arguments() {
    let dir = data_disk_dir();
    let dev = open(dir.path(), IoBackend::Auto, 1 << 20);
    for name in ["", "..", "a/b"] {
        assert!(matches!(
            dev.create_file(name, 4096),
            Err(Error::InvalidArgument(_))
        ));
        assert!(matches!(
            dev.open_file(name),
            Err(Error::InvalidArgument(_))
        ));
        assert!(matches!(
            dev.remove_file(name),
            Err(Error::InvalidArgument(_))
        ));
    }
    for len in [0, 100, 4097] {
        let e = dev.create_file("x", len).unwrap_err();
        assert!(matches!(e, Error::InvalidArgument(_)), "{len}: {e}");
    }
    let mut o = options(IoBackend::Auto, 1 << 20);
    o.queue_depth = 3;
    assert!(matches!(
        FlashDevice::open(dir.path(), &o),
        Err(Error::InvalidArgument(_))
    ));
    let mut o = options(IoBackend::Auto, 0);
    o.queue_depth = 8;
    assert!(matches!(
        FlashDevice::open(dir.path(), &o),
        Err(Error::InvalidArgument(_))
    ));
}

#[test]
fn missing_and_duplicate_files_are_io_errors_naming_the_path() {
    let dir = data_disk_dir();
    let dev = open(dir.path(), IoBackend::Auto, 1 << 20);
    let e = dev.open_file("nope").unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ENOENT));
    assert!(e.to_string().contains("nope"), "{e}");
    dev.create_file("dup", 4096).unwrap();
    let e = dev.create_file("dup", 4096).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EEXIST), "{e}");
    let e = dev.remove_file("nope").unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ENOENT));
}

#[test]
fn a_file_shortened_behind_our_back_gives_a_short_read_error_not_zeros() {
    for backend in backends() {
        let dir = data_disk_dir();
        let dev = open(dir.path(), backend, 1 << 20);
        let f = dev.create_file("cut", 16 * BLK as u64).unwrap();
        f.write_at(0, &pattern(16 * BLK, 3)).unwrap();
        f.sync().unwrap();
        std::fs::OpenOptions::new()
            .write(true)
            .open(f.path())
            .unwrap()
            .set_len(4 * BLK as u64)
            .unwrap();
        let mut buf = AlignedBuf::new(8 * BLK).unwrap();
        let e = f.read_at(0, &mut buf).unwrap_err();
        match &e {
            Error::Io {
                op: "read", source, ..
            } => {
                assert_eq!(source.kind(), std::io::ErrorKind::UnexpectedEof, "{e}");
            }
            other => panic!("{backend}: expected a short-read error, got {other:?}"),
        }
        let mut b = IoBatch::new();
        b.read(&f, 8 * BLK as u64, AlignedBuf::new(BLK).unwrap(), 0);
        let c = dev.submit_and_wait(b).unwrap().pop().unwrap();
        assert!(
            matches!(c.result, Err(Error::Io { op: "read", .. })),
            "{:?}",
            c.result
        );
    }
}
