//! The asynchronous path: requests submitted from several threads are each delivered once,
//! with their buffers, on the device's completion thread; a notifier may submit more; and
//! dropping the device waits until everything in flight has been delivered.

mod flash_support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, mpsc};

use flash_support::{backends, channel_notifier, data_disk_dir, open, pattern};
use tierkv_core::IoBackend;
use tierkv_core::media::flash::{AlignedBuf, IoBatch, IoCompletion, Notifier};

const BLOCKS: u64 = 128;

fn completion_thread_name(backend: IoBackend, name: &str) -> bool {
    match backend {
        IoBackend::Uring => name == "tierkv:flash-reap",
        _ => name.starts_with("tierkv:flash-io-"),
    }
}

#[test]
fn batches_from_several_threads_are_delivered_once_on_the_completion_thread() {
    for backend in backends() {
        let dir = data_disk_dir();
        let dev = open(dir.path(), backend, 4 << 20);
        let f = dev.create_file("a", BLOCKS * 4096).unwrap();
        let (notifier, rx) = channel_notifier();
        std::thread::scope(|s| {
            for half in 0..2u64 {
                let (dev, f, notifier) = (&dev, &f, &notifier);
                s.spawn(move || {
                    let mut batch = IoBatch::new();
                    for b in (half * BLOCKS / 2)..((half + 1) * BLOCKS / 2) {
                        batch.write(f, b * 4096, pattern(4096, b), b);
                    }
                    dev.submit_async(batch, notifier).unwrap();
                });
            }
        });
        let mut seen = vec![0; BLOCKS as usize];
        for _ in 0..BLOCKS {
            let (thread, c) = rx.next();
            assert!(
                completion_thread_name(backend, &thread),
                "delivered on {thread:?}"
            );
            c.result.unwrap();
            seen[c.request.tag as usize] += 1;
        }
        assert!(seen.iter().all(|&n| n == 1));
        f.sync().unwrap();

        let mut batch = IoBatch::new();
        for b in 0..BLOCKS {
            batch.read(&f, b * 4096, AlignedBuf::new(4096).unwrap(), b);
        }
        dev.submit_async(batch, &notifier).unwrap();
        for _ in 0..BLOCKS {
            let (_, c) = rx.next();
            c.result.unwrap();
            assert!(c.request.buf == pattern(4096, c.request.tag));
        }
    }
}

#[test]
fn a_notifier_may_submit_the_next_request_from_the_completion_thread() {
    for backend in backends() {
        let dir = data_disk_dir();
        let dev = open(dir.path(), backend, 4 << 20);
        let f = dev.create_file("chain", BLOCKS * 4096).unwrap();
        let (done_tx, done_rx) = mpsc::channel::<u64>();
        let done_tx = Mutex::new(done_tx);
        let weak = Arc::downgrade(&dev);
        let chain: Arc<Mutex<Option<Notifier>>> = Arc::new(Mutex::new(None));
        let chain2 = chain.clone();
        let n: Notifier = Arc::new(move |c: IoCompletion| {
            c.result.unwrap();
            let next = c.request.tag + 1;
            if next == BLOCKS {
                done_tx.lock().unwrap().send(next).unwrap();
                return;
            }
            let (Some(dev), Some(me)) = (weak.upgrade(), chain2.lock().unwrap().clone()) else {
                return;
            };
            let mut b = IoBatch::new();
            b.read(&c.request.file, next * 4096, c.request.buf, next);
            dev.submit_async(b, &me).unwrap();
        });
        *chain.lock().unwrap() = Some(n.clone());
        let mut b = IoBatch::new();
        b.read(&f, 0, AlignedBuf::new(4096).unwrap(), 0);
        dev.submit_async(b, &n).unwrap();
        assert_eq!(
            done_rx
                .recv_timeout(std::time::Duration::from_secs(60))
                .unwrap(),
            BLOCKS
        );
        assert_eq!(dev.counters().flash_bytes_read, BLOCKS * 4096);
        chain.lock().unwrap().take(); // break the notifier's self-reference
    }
}

#[test]
fn dropping_the_device_delivers_everything_in_flight_first() {
    for backend in backends() {
        let dir = data_disk_dir();
        let dev = open(dir.path(), backend, 4 << 20);
        let f = dev.create_file("d", BLOCKS * 4096).unwrap();
        let delivered = Arc::new(AtomicUsize::new(0));
        let d2 = delivered.clone();
        let n: Notifier = Arc::new(move |c: IoCompletion| {
            c.result.unwrap();
            d2.fetch_add(1, Ordering::SeqCst);
        });
        let mut batch = IoBatch::new();
        for b in 0..BLOCKS {
            batch.read(&f, b * 4096, AlignedBuf::new(4096).unwrap(), b);
        }
        dev.submit_async(batch, &n).unwrap();
        drop(dev);
        assert_eq!(
            delivered.load(Ordering::SeqCst),
            BLOCKS as usize,
            "{backend}"
        );
    }
}

#[test]
fn a_notifier_may_drop_the_last_handle_of_the_device() {
    for backend in backends() {
        let dir = data_disk_dir();
        let dev = open(dir.path(), backend, 4 << 20);
        let f = dev.create_file("last", 4096).unwrap();
        let holder = Mutex::new(Some(dev.clone()));
        let (go_tx, go_rx) = mpsc::channel::<()>();
        let go_rx = Mutex::new(go_rx);
        let (tx, rx) = mpsc::channel::<bool>();
        let tx = Mutex::new(tx);
        let n: Notifier = Arc::new(move |c: IoCompletion| {
            // Wait until the test has dropped its handle, so this one is the last.
            go_rx.lock().unwrap().recv().unwrap();
            let last = holder.lock().unwrap().take();
            let was_last = last.as_ref().is_some_and(|d| Arc::strong_count(d) == 1);
            drop(last); // drops the device, on the completion thread
            tx.lock()
                .unwrap()
                .send(was_last && c.result.is_ok())
                .unwrap();
        });
        let mut b = IoBatch::new();
        b.read(&f, 0, AlignedBuf::new(4096).unwrap(), 0);
        dev.submit_async(b, &n).unwrap();
        drop(dev);
        go_tx.send(()).unwrap();
        let ok = rx.recv_timeout(std::time::Duration::from_secs(60)).unwrap();
        assert!(
            ok,
            "{backend}: the notifier dropped the last handle and reported"
        );
    }
}
