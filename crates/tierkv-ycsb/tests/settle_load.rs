//! `--settle-load`: after the load, the runner waits until the target's written bytes stop
//! changing and reports the load's counters again up to then, so that work a load leaves
//! to background threads counts in its write amplification; a target that never settles
//! is reported as such once the wait gives up.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

mod common;

use tierkv::Stats;
use tierkv_ycsb::BenchTarget;
use tierkv_ycsb::runner::progress::Progress;
use tierkv_ycsb::runner::{RunSettings, run_target};
use tierkv_ycsb::workload::Phase;

/// Counts 100 pmem bytes per put, and its "background work" goes on adding 1,000 bytes
/// every 20 ms for `background` after the last put (forever with `None`).
struct Deferred {
    written: Arc<AtomicU64>,
    last_put: Arc<std::sync::Mutex<Option<Instant>>>,
    stop: Arc<AtomicBool>,
    worker: Option<std::thread::JoinHandle<()>>,
}

impl Deferred {
    fn new(background: Option<Duration>) -> Deferred {
        let written = Arc::new(AtomicU64::new(0));
        let last_put = Arc::new(std::sync::Mutex::new(None::<Instant>));
        let stop = Arc::new(AtomicBool::new(false));
        let worker = {
            let (written, last_put, stop) = (written.clone(), last_put.clone(), stop.clone());
            std::thread::spawn(move || {
                while !stop.load(Ordering::Acquire) {
                    std::thread::sleep(Duration::from_millis(20));
                    let busy = last_put
                        .lock()
                        .expect("last put")
                        .is_some_and(|t| background.is_none_or(|b| t.elapsed() < b));
                    if busy {
                        written.fetch_add(1_000, Ordering::Relaxed);
                    }
                }
            })
        };
        Deferred {
            written,
            last_put,
            stop,
            worker: Some(worker),
        }
    }
}

impl Drop for Deferred {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(w) = self.worker.take() {
            w.join().expect("background thread");
        }
    }
}

impl BenchTarget for Deferred {
    fn get(&self, _key: &[u8]) -> tierkv::Result<Option<Vec<u8>>> {
        Ok(None)
    }
    fn put(&self, _key: &[u8], _value: &[u8]) -> tierkv::Result<()> {
        self.written.fetch_add(100, Ordering::Relaxed);
        *self.last_put.lock().expect("last put") = Some(Instant::now());
        Ok(())
    }
    fn scan(&self, _start: &[u8], _limit: usize) -> tierkv::Result<usize> {
        Ok(0)
    }
    fn stats(&self) -> Stats {
        Stats {
            pmem_bytes_written: self.written.load(Ordering::Relaxed),
            ..Stats::default()
        }
    }
    fn close(&self) -> tierkv::Result<()> {
        Ok(())
    }
}

fn settings(settle: Duration) -> RunSettings {
    RunSettings {
        settle_load: Some(settle),
        ..common::runner_settings(500, None)
    }
}

#[test]
fn the_settled_load_counts_the_work_left_to_the_background() {
    let target = Deferred::new(Some(Duration::from_millis(600)));
    let s = settings(Duration::from_secs(20));
    let results = run_target(
        &target,
        "deferred",
        &[Phase::Load],
        &s,
        Progress::new(false),
    )
    .unwrap();
    let load = &results[0];
    let settled = load.settled.as_ref().expect("settled counters");
    assert!(settled.quiet, "the background work ended");
    assert!(
        settled.waited >= Duration::from_millis(300) && settled.waited < Duration::from_secs(10),
        "waited {:?}",
        settled.waited
    );
    assert!(load.counters.pmem_bytes_written >= 500 * 100);
    assert!(
        settled.counters.pmem_bytes_written >= load.counters.pmem_bytes_written + 10_000,
        "settled {} against {} in the load",
        settled.counters.pmem_bytes_written,
        load.counters.pmem_bytes_written
    );
}

#[test]
fn a_target_that_never_settles_is_reported_still_writing() {
    let target = Deferred::new(None);
    let s = settings(Duration::from_millis(1_500));
    let started = Instant::now();
    let results = run_target(&target, "busy", &[Phase::Load], &s, Progress::new(false)).unwrap();
    let settled = results[0].settled.as_ref().expect("settled counters");
    assert!(!settled.quiet);
    assert!(settled.waited >= Duration::from_millis(1_500));
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "the wait gave up"
    );
}

#[test]
fn without_the_flag_nothing_waits() {
    let target = Deferred::new(None);
    let mut s = settings(Duration::from_secs(60));
    s.settle_load = None;
    let started = Instant::now();
    let results = run_target(&target, "busy", &[Phase::Load], &s, Progress::new(false)).unwrap();
    assert!(results[0].settled.is_none());
    assert!(started.elapsed() < Duration::from_secs(5));
}
