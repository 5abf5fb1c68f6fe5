//! Writes through each back end (io_uring, pread/pwrite) with `O_DIRECT` on the data disk,
//! in batches of mixed sizes and one block at a time, and reads it all back.

mod flash_support;

use flash_support::{backends, data_disk_dir, is_tmpfs, open, pattern, read};
use tierkv_core::media::flash::{AlignedBuf, IoBatch};

/// Request sizes of the mixed batches (bytes), cycled.
const SIZES: [usize; 7] = [4096, 8192, 12288, 65536, 131_072, 1 << 20, 524_288];
/// More requests than a ring has slots (2 x queue depth 64), so batches refill the ring.
const REQUESTS: usize = 150;

/// (offset, length) of request `i`, laid out back to back.
fn layout() -> Vec<(u64, usize)> {
    let mut off = 0u64;
    (0..REQUESTS)
        .map(|i| {
            let len = SIZES[i % SIZES.len()];
            let at = off;
            off += len as u64;
            (at, len)
        })
        .collect()
}

#[test]
fn mixed_size_batches_read_back_what_they_wrote_with_direct_io() {
    let spans = layout();
    let total: u64 = spans.iter().map(|s| s.1 as u64).sum();
    for backend in backends() {
        let dir = data_disk_dir();
        let dev = open(dir.path(), backend, 64 << 20);
        assert_eq!(dev.backend(), backend);
        assert_eq!(
            dev.direct_io(),
            !is_tmpfs(dir.path()),
            "O_DIRECT on the data disk"
        );
        let f = dev
            .create_file("data", total.next_multiple_of(1 << 20))
            .unwrap();
        assert_eq!(f.direct_io(), dev.direct_io());

        let mut batch = IoBatch::with_capacity(REQUESTS);
        for (i, &(off, len)) in spans.iter().enumerate() {
            batch.write(&f, off, pattern(len, i as u64), i as u64);
        }
        let done = dev.submit_and_wait(batch).unwrap();
        assert_eq!(done.len(), REQUESTS);
        let mut seen = [false; REQUESTS];
        for c in &done {
            c.result.as_ref().unwrap();
            seen[c.request.tag as usize] = true;
        }
        assert!(
            seen.iter().all(|&s| s),
            "every write completed once ({backend})"
        );
        f.sync().unwrap();

        let mut batch = IoBatch::with_capacity(REQUESTS);
        for (i, &(off, len)) in spans.iter().enumerate() {
            batch.read(&f, off, AlignedBuf::new(len).unwrap(), i as u64);
        }
        for c in dev.submit_and_wait(batch).unwrap() {
            c.result.unwrap();
            let (off, len) = spans[c.request.tag as usize];
            assert_eq!(c.request.offset, off);
            assert!(
                c.request.buf == pattern(len, c.request.tag),
                "batch read {off}"
            );
        }

        let m = dev.counters();
        assert_eq!(m.flash_bytes_written, total);
        assert_eq!(m.flash_bytes_read, total);
        // One sync at creation (the file's length) and one explicit.
        assert_eq!(m.flash_syncs, 2);
    }
}

#[test]
fn single_block_reads_and_writes_round_trip() {
    for backend in backends() {
        let dir = data_disk_dir();
        let dev = open(dir.path(), backend, 1 << 20);
        let f = dev.create_file("blocks", 256 << 10).unwrap();
        for blk in 0..64u64 {
            f.write_at(blk * 4096, &pattern(4096, blk + 7)).unwrap();
        }
        f.sync().unwrap();
        for blk in (0..64u64).rev() {
            assert!(
                read(&f, blk * 4096, 4096) == pattern(4096, blk + 7),
                "block {blk}"
            );
        }
        // A multi-block read spanning blocks written one by one.
        let all = read(&f, 0, 256 << 10);
        for blk in 0..64usize {
            assert_eq!(
                &all[blk * 4096..(blk + 1) * 4096],
                &pattern(4096, blk as u64 + 7)[..]
            );
        }
    }
}

#[test]
fn what_one_back_end_wrote_the_other_reads() {
    let all = backends();
    if all.len() < 2 {
        eprintln!("only one back end here; nothing to cross-check");
        return;
    }
    let dir = data_disk_dir();
    {
        let dev = open(dir.path(), all[0], 1 << 20);
        let f = dev.create_file("x", 64 << 10).unwrap();
        f.write_at(0, &pattern(64 << 10, 99)).unwrap();
        f.sync().unwrap();
        dev.sync_dir().unwrap();
    }
    let dev = open(dir.path(), all[1], 1 << 20);
    let f = dev.open_file("x").unwrap();
    assert!(read(&f, 0, 64 << 10) == pattern(64 << 10, 99));
}
