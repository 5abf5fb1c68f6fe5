//! An [`IoQueue`] keeps its depth full: completions are reaped one at a time while new
//! requests are pushed, as fio does; dropping a queue with requests in flight waits for them.

mod flash_support;

use flash_support::{backends, data_disk_dir, open, pattern};
use tierkv_core::media::flash::{AlignedBuf, IoRequest};

const BLOCKS: u64 = 512;

#[test]
fn queue_kept_full_completes_every_request_once() {
    for backend in backends() {
        let dir = data_disk_dir();
        let dev = open(dir.path(), backend, 4 << 20);
        let f = dev.create_file("q", BLOCKS * 4096).unwrap();
        let mut q = dev.queue();
        let depth = 32u64;
        let mut next = 0u64;
        let mut out = Vec::new();
        let mut done = vec![0u32; BLOCKS as usize];
        while next < depth {
            q.push(IoRequest::write(&f, next * 4096, pattern(4096, next), next));
            next += 1;
        }
        while q.outstanding() > 0 {
            out.clear();
            let n = q.wait(1, &mut out).unwrap();
            assert!(n >= 1 && n == out.len());
            for c in out.drain(..) {
                c.result.unwrap();
                done[c.request.tag as usize] += 1;
                if next < BLOCKS {
                    // Reuse the completed request's buffer for the next write.
                    let mut buf = c.request.buf;
                    flash_support::fill(&mut buf, next);
                    q.push(IoRequest::write(&f, next * 4096, buf, next));
                    next += 1;
                }
            }
        }
        assert!(
            done.iter().all(|&d| d == 1),
            "{backend}: each block written once"
        );
        drop(q);
        f.sync().unwrap();
        let all = flash_support::read(&f, 0, (BLOCKS * 4096) as usize);
        for b in 0..BLOCKS as usize {
            assert_eq!(&all[b * 4096..(b + 1) * 4096], &pattern(4096, b as u64)[..]);
        }
    }
}

#[test]
fn dropping_a_queue_with_requests_in_flight_waits_and_frees_the_ring() {
    for backend in backends() {
        let dir = data_disk_dir();
        let dev = open(dir.path(), backend, 4 << 20);
        let f = dev.create_file("q", BLOCKS * 4096).unwrap();
        {
            let mut q = dev.queue();
            for b in 0..BLOCKS {
                q.push(IoRequest::read(
                    &f,
                    b * 4096,
                    AlignedBuf::new(4096).unwrap(),
                    b,
                ));
            }
            q.submit().unwrap();
            assert!(q.outstanding() > 0);
        }
        // The rings are usable again.
        let mut q = dev.queue();
        q.push(IoRequest::read(&f, 0, AlignedBuf::new(4096).unwrap(), 0));
        let mut out = Vec::new();
        assert_eq!(q.wait(1, &mut out).unwrap(), 1);
        out[0].result.as_ref().unwrap();
        assert_eq!(dev.counters().flash_bytes_read, (BLOCKS + 1) * 4096);
    }
}

#[test]
fn a_thread_holding_every_ring_still_does_io_without_deadlock() {
    for backend in backends() {
        let dir = data_disk_dir();
        let dev = open(dir.path(), backend, 4 << 20);
        let f = dev.create_file("n", 16 * 4096).unwrap();
        // More queues than any ring pool holds (at most 64 rings).
        let mut held: Vec<_> = (0..65).map(|_| dev.queue()).collect();
        f.write_at(0, &pattern(4096, 1)).unwrap();
        assert!(flash_support::read(&f, 0, 4096) == pattern(4096, 1));
        let mut out = Vec::new();
        for (i, q) in held.iter_mut().enumerate() {
            q.push(IoRequest::read(
                &f,
                0,
                AlignedBuf::new(4096).unwrap(),
                i as u64,
            ));
            assert_eq!(q.wait(1, &mut out).unwrap(), 1);
        }
        assert!(
            out.iter()
                .all(|c| c.result.is_ok() && c.request.buf == pattern(4096, 1))
        );
    }
}
