//! Unit tests of the pool: lifecycle, header validation on real files, bounds, atomics,
//! counters and modes. Crash images, SIGKILL and the allocator have their own tests.

use super::*;
use crate::api::error::Error;
use std::path::Path;

fn cfg(path: &Path, size: u64, mode: DurabilityMode) -> PmemConfig {
    PmemConfig {
        path: path.to_owned(),
        size,
        mode,
        latency: EmulatedLatency::default(),
    }
}

fn new_pool(mode: DurabilityMode) -> (tempfile::TempDir, std::sync::Arc<PmemPool>) {
    let d = tempfile::tempdir().unwrap();
    let p = PmemPool::create(&cfg(&d.path().join("pool"), 1 << 20, mode)).unwrap();
    (d, p)
}

#[test]
fn pool_and_allocator_are_send_and_sync() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<PmemPool>();
    send_sync::<PmemAllocator>();
}

#[test]
fn create_then_open_keeps_identity_and_data() {
    let d = tempfile::tempdir().unwrap();
    let path = d.path().join("pool");
    let (id, start) = {
        let p = PmemPool::create(&cfg(&path, 1 << 20, DurabilityMode::Msync)).unwrap();
        p.write_persist(p.data_start(), b"hello").unwrap();
        p.set_root(3, 0xfeed).unwrap();
        (p.pool_id(), p.data_start())
    };
    let p = PmemPool::open(&cfg(&path, 0, DurabilityMode::Volatile)).unwrap();
    assert_eq!(p.pool_id(), id);
    assert_ne!(id, 0);
    assert_eq!(p.len(), 1 << 20);
    assert_eq!(p.mode(), DurabilityMode::Volatile);
    assert_eq!(p.read(start, 5).unwrap(), b"hello");
    assert_eq!(p.root(3).unwrap(), 0xfeed);
    assert_eq!(p.root(4).unwrap(), 0);
}

#[test]
fn create_refuses_bad_sizes_and_leaves_no_file() {
    let d = tempfile::tempdir().unwrap();
    let path = d.path().join("pool");
    for size in [0, MIN_POOL_SIZE - 4096, MIN_POOL_SIZE + 100] {
        let e = PmemPool::create(&cfg(&path, size, DurabilityMode::Volatile)).unwrap_err();
        assert!(matches!(e, Error::InvalidArgument(_)), "{size}: {e}");
        assert!(!path.exists());
    }
}

#[test]
fn a_pool_cannot_be_opened_twice() {
    let d = tempfile::tempdir().unwrap();
    let path = d.path().join("pool");
    let _p = PmemPool::create(&cfg(&path, 1 << 16, DurabilityMode::Volatile)).unwrap();
    let e = PmemPool::open(&cfg(&path, 0, DurabilityMode::Volatile)).unwrap_err();
    assert!(e.to_string().contains("already open"), "{e}");
}

fn open_err(bytes: &[u8]) -> Error {
    let d = tempfile::tempdir().unwrap();
    let path = d.path().join("pool");
    std::fs::write(&path, bytes).unwrap();
    PmemPool::open(&cfg(&path, 0, DurabilityMode::Volatile)).unwrap_err()
}

fn valid_image() -> Vec<u8> {
    let mut img = vec![0u8; MIN_POOL_SIZE as usize * 2];
    let h = PoolHeader::new(img.len() as u64, 99);
    img[..HEADER_STATIC_LEN].copy_from_slice(&encode_pool_header(&h));
    img
}

#[test]
fn open_of_an_empty_file_is_truncation() {
    let e = open_err(&[]);
    assert!(
        e.is_corruption() && e.to_string().contains("truncated"),
        "{e}"
    );
}

#[test]
fn open_of_a_truncated_pool_is_corruption() {
    let img = valid_image();
    let e = open_err(&img[..img.len() - 4096]);
    assert!(
        e.is_corruption() && e.to_string().contains("truncated"),
        "{e}"
    );
    assert!(e.to_string().contains("pool "), "names the pool: {e}");
}

#[test]
fn open_of_an_extended_pool_is_corruption() {
    let mut img = valid_image();
    img.extend_from_slice(&[0u8; 4096]);
    assert!(open_err(&img).is_corruption());
}

#[test]
fn open_of_a_garbage_header_is_corruption() {
    let mut img = valid_image();
    img[..64].copy_from_slice(&[0x5a; 64]);
    let e = open_err(&img);
    assert!(e.to_string().contains("bad magic"), "{e}");
}

#[test]
fn open_of_a_torn_header_is_a_checksum_mismatch() {
    let mut img = valid_image();
    img[20] ^= 0xff;
    assert!(matches!(open_err(&img), Error::ChecksumMismatch { .. }));
}

#[test]
fn open_of_a_missing_file_is_an_io_error() {
    let d = tempfile::tempdir().unwrap();
    let e = PmemPool::open(&cfg(&d.path().join("nope"), 0, DurabilityMode::Msync)).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ENOENT), "{e}");
}

#[test]
fn out_of_bounds_calls_are_corruption_errors() {
    let (_d, p) = new_pool(DurabilityMode::Volatile);
    let len = p.len();
    let cases: Vec<(&str, Result<(), Error>)> = vec![
        ("read", p.read(len - 4, 8).map(drop)),
        ("read huge", p.read(u64::MAX, 2).map(drop)),
        ("read_into", p.read_into(len, &mut [0u8; 1])),
        ("write", p.write(len - 1, b"ab")),
        ("fill", p.fill(len, 1, 0)),
        ("load", p.load_u64(len).map(drop)),
        ("store", p.store_u64(len - 8 + 8, 1)),
        ("cas", p.cas_u64(len, 0, 1).map(drop)),
        ("or", p.fetch_or_u64(u64::MAX - 7, 1).map(drop)),
        ("persist", p.persist(len - 10, 11)),
        ("write_persist", p.write_persist(len, b"x")),
    ];
    for (what, r) in cases {
        let e = r.unwrap_err();
        assert!(
            matches!(
                e,
                Error::Corruption {
                    tier: crate::Tier::Pmem,
                    ..
                }
            ),
            "{what}: {e}"
        );
    }
}

#[test]
fn misaligned_words_are_corruption_errors() {
    let (_d, p) = new_pool(DurabilityMode::Volatile);
    let off = p.data_start() + 4;
    for e in [
        p.load_u64(off).unwrap_err(),
        p.store_u64(off, 1).unwrap_err(),
        p.cas_u64(off, 0, 1).unwrap_err(),
        p.fetch_or_u64(off, 1).unwrap_err(),
        p.fetch_and_u64(off, 1).unwrap_err(),
    ] {
        assert!(e.to_string().contains("not 8-byte aligned"), "{e}");
    }
}

#[test]
fn the_header_area_is_not_writable_but_readable() {
    let (_d, p) = new_pool(DurabilityMode::Volatile);
    assert!(p.write(0, b"x").unwrap_err().is_corruption());
    assert!(
        p.fill(p.data_start() - 1, 2, 0)
            .unwrap_err()
            .is_corruption()
    );
    assert!(p.store_u64(64, 1).unwrap_err().is_corruption());
    assert_eq!(p.read(0, 8).unwrap(), &POOL_MAGIC);
    assert!(p.write(p.data_start(), b"").is_ok());
}

#[test]
fn root_words_are_bounded() {
    let (_d, p) = new_pool(DurabilityMode::Volatile);
    assert!(matches!(p.root(ROOT_COUNT), Err(Error::InvalidArgument(_))));
    assert!(matches!(
        p.set_root(ROOT_COUNT, 1),
        Err(Error::InvalidArgument(_))
    ));
    p.set_root(ROOT_COUNT - 1, 7).unwrap();
    assert_eq!(p.root(ROOT_COUNT - 1).unwrap(), 7);
}

#[test]
fn unaligned_writes_merge_with_neighbouring_bytes() {
    let (_d, p) = new_pool(DurabilityMode::Volatile);
    let base = p.data_start();
    p.fill(base, 64, 0xee).unwrap();
    p.write(base + 3, b"abcdefghijklm").unwrap();
    let got = p.read(base, 24).unwrap();
    assert_eq!(&got[..3], &[0xee; 3]);
    assert_eq!(&got[3..16], b"abcdefghijklm");
    assert_eq!(&got[16..24], &[0xee; 8]);
    p.fill(base + 5, 3, 0).unwrap();
    assert_eq!(p.read(base + 3, 6).unwrap(), b"ab\0\0\0f");
}

/// Writes of every alignment and length (head bytes, whole words, tail bytes, and writes
/// inside one word) land exactly where a byte copy would put them.
#[test]
fn writes_at_every_alignment_and_length_match_a_byte_copy() {
    let (_d, p) = new_pool(DurabilityMode::Volatile);
    let base = p.data_start();
    let mut shadow = vec![0x5au8; 256];
    p.write(base, &shadow).unwrap();
    let mut x = 0x2545_f491_4f6c_dd1du64;
    for start in 0..24usize {
        for len in 0..70usize {
            let data: Vec<u8> = (0..len)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u8
                })
                .collect();
            p.write(base + start as u64, &data).unwrap();
            shadow[start..start + len].copy_from_slice(&data);
            assert_eq!(
                p.read(base, 256).unwrap(),
                &shadow[..],
                "write of {len} at +{start}"
            );
        }
    }
}

#[test]
fn words_are_little_endian_and_atomics_report_old_values() {
    let (_d, p) = new_pool(DurabilityMode::Volatile);
    let w = p.data_start() + 64;
    p.store_u64(w, 0x0807_0605_0403_0201).unwrap();
    assert_eq!(p.read(w, 8).unwrap(), &[1, 2, 3, 4, 5, 6, 7, 8]);
    assert_eq!(p.cas_u64(w, 5, 6).unwrap(), Err(0x0807_0605_0403_0201));
    assert_eq!(
        p.cas_u64(w, 0x0807_0605_0403_0201, 0xf0).unwrap(),
        Ok(0x0807_0605_0403_0201)
    );
    assert_eq!(p.fetch_or_u64(w, 0x0f).unwrap(), 0xf0);
    assert_eq!(p.fetch_and_u64(w, 0x3c).unwrap(), 0xff);
    assert_eq!(p.load_u64(w).unwrap(), 0x3c);
}

#[test]
fn counters_count_every_byte_and_persist() {
    let (_d, p) = new_pool(DurabilityMode::Volatile);
    let before = p.counters();
    let b = p.data_start();
    p.write(b, &[1; 100]).unwrap();
    p.fill(b + 100, 28, 0).unwrap();
    p.store_u64(b + 128, 1).unwrap();
    let _ = p.cas_u64(b + 128, 9, 2).unwrap();
    p.read(b, 50).unwrap();
    p.read_into(b, &mut [0u8; 10]).unwrap();
    p.load_u64(b).unwrap();
    p.persist(b, 128).unwrap();
    p.write_persist(b, b"xy").unwrap();
    let c = p.counters();
    assert_eq!(
        c.pmem_bytes_written - before.pmem_bytes_written,
        100 + 28 + 8 + 2
    );
    assert_eq!(c.pmem_bytes_read - before.pmem_bytes_read, 8 + 50 + 10 + 8);
    assert_eq!(c.pmem_persists - before.pmem_persists, 2);
}

#[test]
fn concurrent_writers_of_one_word_keep_each_others_bytes() {
    let (_d, p) = new_pool(DurabilityMode::Volatile);
    let w = p.data_start();
    std::thread::scope(|s| {
        for t in 0..4u8 {
            let p = &p;
            s.spawn(move || {
                for i in 0..2000u32 {
                    p.write(w + u64::from(t), &[(i % 251) as u8 + 1]).unwrap();
                }
            });
        }
    });
    assert!(
        p.read(w, 4)
            .unwrap()
            .iter()
            .all(|b| *b == (1999 % 251) as u8 + 1)
    );
}

#[test]
fn crash_images_need_tracked_mode() {
    let (d, p) = new_pool(DurabilityMode::Msync);
    let e = p.crash_image(1, CrashImageOptions::lines()).unwrap_err();
    assert!(matches!(e, Error::Unsupported(_)), "{e}");
    assert!(
        p.write_crash_image(1, CrashImageOptions::lines(), &d.path().join("img"))
            .is_err()
    );
    assert!(!d.path().join("img").exists());
}

#[test]
fn persist_method_names_the_mode() {
    for (mode, word) in [
        (DurabilityMode::Msync, "msync"),
        (DurabilityMode::Volatile, "volatile"),
        (DurabilityMode::Tracked, "tracked"),
    ] {
        let (_d, p) = new_pool(mode);
        assert!(p.persist_method().contains(word), "{mode}");
        assert!(
            format!("{p:?}").contains(&mode.to_string().to_ascii_lowercase())
                || format!("{p:?}").contains(&format!("{mode:?}"))
        );
    }
}

#[test]
fn latency_off_costs_nothing_and_on_is_accounted() {
    let (_d, p) = new_pool(DurabilityMode::Volatile);
    p.read(p.data_start(), 4096).unwrap();
    p.persist(p.data_start(), 64).unwrap();
    assert_eq!((p.emulated_latency_ns(), p.latency_spins()), (0, 0));
    let d = tempfile::tempdir().unwrap();
    let mut c = cfg(&d.path().join("slow"), 1 << 16, DurabilityMode::Volatile);
    c.latency = EmulatedLatency {
        read_ns_per_line: 100,
        persist_ns: 1000,
    };
    let slow = PmemPool::create(&c).unwrap();
    let before = slow.emulated_latency_ns();
    slow.read(slow.data_start() + 10, 128).unwrap();
    slow.persist(slow.data_start(), 8).unwrap();
    assert_eq!(slow.emulated_latency_ns() - before, 3 * 100 + 1000);
    assert!(slow.latency_spins() > 0);
    assert_eq!(slow.latency(), c.latency);
}

/// Bytes this thread has caused to be written to storage so far (`/proc/thread-self/io`,
/// which the kernel charges when a page-cache folio is dirtied: a store through a mapping
/// into a large folio counts the whole folio). `None` where the file is not there.
fn thread_write_bytes() -> Option<u64> {
    std::fs::read_to_string("/proc/thread-self/io")
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix("write_bytes:"))?
        .trim()
        .parse()
        .ok()
}

/// An 8-byte persist in msync mode on a disk filesystem writes a page, not the large folio
/// a readahead would have put there (`Mapping::advise_base_pages`; on Linux 6.18 ext4 it
/// wrote 1 MiB per persist before).
#[test]
fn a_small_msync_persist_on_a_disk_writes_pages_not_large_folios() {
    let d = tempfile::tempdir().unwrap();
    let path = d.path().join("pool");
    if super::pool::page_cache_is_the_storage(&path) {
        println!(
            "skipped: {} is on tmpfs or ramfs (no writeback)",
            d.path().display()
        );
        return;
    }
    let p = PmemPool::create(&cfg(&path, 64 << 20, DurabilityMode::Msync)).unwrap();
    let Some(before) = thread_write_bytes() else {
        println!("skipped: no /proc/thread-self/io");
        return;
    };
    let n = 32u64;
    for i in 0..n {
        // Spread over the pool: one store per 2 MiB, each persisted at once.
        let off = p.data_start() + i * (2 << 20) + 4096;
        p.store_u64(off, i + 1).unwrap();
        p.persist(off, 8).unwrap();
    }
    let per_persist = (thread_write_bytes().unwrap() - before) / n;
    assert!(
        per_persist <= 16 << 10,
        "an 8-byte persist dirtied {per_persist} bytes of page cache (large folios)"
    );
}

/// Minor page faults of the calling thread so far (`getrusage(RUSAGE_THREAD)`).
#[expect(unsafe_code, reason = "getrusage")]
fn thread_minor_faults() -> Option<i64> {
    let mut u = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: `u` is a valid, writable rusage; RUSAGE_THREAD reads the calling thread's.
    let rc = unsafe { libc::getrusage(libc::RUSAGE_THREAD, u.as_mut_ptr()) };
    // SAFETY: getrusage filled `u` when it returned 0 (and it was zeroed before anyway).
    (rc == 0).then(|| unsafe { u.assume_init() }.ru_minflt)
}

/// A new pool on tmpfs has its pages faulted in by the create (`Mapping::populate_write`):
/// writing every page of it afterwards takes (almost) no page fault, and the pool reads
/// back exactly what was written. Elsewhere (a disk filesystem) the create does not.
#[test]
fn a_new_pool_on_tmpfs_is_faulted_in_by_the_create() {
    let shm = Path::new("/dev/shm");
    if !shm.is_dir() {
        println!("skipped: no /dev/shm");
        return;
    }
    let d = tempfile::tempdir_in(shm).unwrap();
    let path = d.path().join("pool");
    if !super::pool::page_cache_is_the_storage(&path) {
        println!("skipped: /dev/shm is not tmpfs");
        return;
    }
    let size = 16u64 << 20;
    let p = PmemPool::create(&cfg(&path, size, DurabilityMode::Volatile)).unwrap();
    let Some(before) = thread_minor_faults() else {
        println!("skipped: no RUSAGE_THREAD");
        return;
    };
    let pages = (size - p.data_start()) / 4096;
    for i in 0..pages {
        p.store_u64(p.data_start() + i * 4096, i + 1).unwrap();
    }
    let faults = thread_minor_faults().unwrap() - before;
    assert!(
        (faults as u64) < pages / 8,
        "{faults} page faults writing {pages} pages of a new pool"
    );
    for i in 0..pages {
        assert_eq!(p.load_u64(p.data_start() + i * 4096).unwrap(), i + 1);
        assert_eq!(p.load_u64(p.data_start() + i * 4096 + 8).unwrap(), 0);
    }
}
