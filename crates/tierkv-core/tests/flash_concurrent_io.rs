//! Many threads (more than the ring pool has rings) doing single transfers, batches and
//! queues on one device at once: every thread reads back exactly what it wrote.

mod flash_support;

use flash_support::{backends, data_disk_dir, open, pattern, read};
use tierkv_core::media::flash::{AlignedBuf, IoBatch, IoRequest};

const THREADS: u64 = 16;
const BLOCKS_PER_THREAD: u64 = 32;

#[test]
fn threads_beyond_the_pool_size_each_read_back_their_own_writes() {
    for backend in backends() {
        let dir = data_disk_dir();
        let dev = open(dir.path(), backend, 16 << 20);
        let f = dev
            .create_file("shared", THREADS * BLOCKS_PER_THREAD * 4096)
            .unwrap();
        std::thread::scope(|s| {
            for t in 0..THREADS {
                let (dev, f) = (&dev, &f);
                s.spawn(move || {
                    let base = t * BLOCKS_PER_THREAD;
                    let off = |b: u64| (base + b) * 4096;
                    let seed = |b: u64| (t << 32) | b;
                    let half = BLOCKS_PER_THREAD / 2;
                    for b in 0..half {
                        f.write_at(off(b), &pattern(4096, seed(b))).unwrap();
                    }
                    let mut batch = IoBatch::new();
                    for b in half..BLOCKS_PER_THREAD {
                        batch.write(f, off(b), pattern(4096, seed(b)), b);
                    }
                    for c in dev.submit_and_wait(batch).unwrap() {
                        c.result.unwrap();
                    }
                    let mut q = dev.queue();
                    for b in 0..BLOCKS_PER_THREAD {
                        q.push(IoRequest::read(
                            f,
                            off(b),
                            AlignedBuf::new(4096).unwrap(),
                            b,
                        ));
                    }
                    let mut out = Vec::new();
                    q.wait(BLOCKS_PER_THREAD as usize, &mut out).unwrap();
                    assert_eq!(out.len(), BLOCKS_PER_THREAD as usize);
                    for c in out {
                        c.result.unwrap();
                        assert!(c.request.buf == pattern(4096, seed(c.request.tag)));
                    }
                    assert!(read(f, off(0), 4096) == pattern(4096, seed(0)));
                });
            }
        });
        let total = THREADS * BLOCKS_PER_THREAD * 4096;
        let m = dev.counters();
        assert_eq!(m.flash_bytes_written, total);
        assert_eq!(m.flash_bytes_read, total + THREADS * 4096);
    }
}
