//! A target whose operations fail has every failure counted and the phase marked failed
//! (the CLI then exits with an error); a target that answers `Unsupported` stops the phase
//! and is reported unsupported, with nothing counted as failed.

use std::sync::atomic::{AtomicU64, Ordering};

mod common;

use tierkv::{Error, Stats};
use tierkv_ycsb::BenchTarget;
use tierkv_ycsb::runner::progress::Progress;
use tierkv_ycsb::runner::{PhaseStatus, RunSettings, run_target};
use tierkv_ycsb::workload::{OpKind, Phase, workload};

/// Fails every tenth put with an I/O error; scans are unsupported.
#[derive(Default)]
struct Flaky {
    puts: AtomicU64,
}

impl BenchTarget for Flaky {
    fn get(&self, _key: &[u8]) -> tierkv::Result<Option<Vec<u8>>> {
        Ok(Some(Vec::new()))
    }
    fn put(&self, _key: &[u8], _value: &[u8]) -> tierkv::Result<()> {
        if self.puts.fetch_add(1, Ordering::Relaxed) % 10 == 9 {
            return Err(Error::io(
                "write",
                "/flaky",
                std::io::Error::other("injected"),
            ));
        }
        Ok(())
    }
    fn scan(&self, _start: &[u8], _limit: usize) -> tierkv::Result<usize> {
        Err(Error::Unsupported("scan on a flaky target".into()))
    }
    fn stats(&self) -> Stats {
        Stats::default()
    }
    fn close(&self) -> tierkv::Result<()> {
        Ok(())
    }
}

fn settings() -> RunSettings {
    common::runner_settings(1_000, Some(1_000))
}

#[test]
fn failed_operations_are_counted_and_mark_the_phase_failed() {
    let target = Flaky::default();
    let phases = [Phase::Load, Phase::Run(*workload("a").unwrap())];
    let results = run_target(&target, "flaky", &phases, &settings(), Progress::new(false)).unwrap();
    let load = &results[0];
    assert!(
        matches!(&load.status, PhaseStatus::Failed(m) if m.contains("injected")),
        "{:?}",
        load.status
    );
    assert_eq!(
        load.errors(),
        100,
        "one put in ten of the 1000 loaded records failed"
    );
    assert_eq!(load.ops.latency(OpKind::Insert).unwrap().count(), 900);
    let a = &results[1];
    assert!(matches!(a.status, PhaseStatus::Failed(_)));
    // Updates fail one in ten; reads never fail; every operation is either.
    assert!(a.ops.errors(OpKind::Update) > 0);
    assert_eq!(a.ops.errors(OpKind::Read), 0);
    assert_eq!(a.ops.completed() + a.errors(), 1_000);
}

#[test]
fn unsupported_operations_stop_the_phase_without_counting_failures() {
    let target = Flaky::default();
    let phases = [Phase::Run(*workload("e").unwrap())];
    let mut s = settings();
    s.records = 10;
    let results = run_target(&target, "flaky", &phases, &s, Progress::new(false)).unwrap();
    assert_eq!(results.len(), 1);
    let e = &results[0];
    assert!(
        matches!(&e.status, PhaseStatus::Unsupported(m) if m.contains("scan")),
        "{:?}",
        e.status
    );
    assert_eq!(e.ops.errors(OpKind::Scan), 0);
}
