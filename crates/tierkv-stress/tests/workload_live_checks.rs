//! The workload's live checks, in-process: they pass on a linearizable engine under heavy
//! races on a tiny key space (no false alarms), and they catch an engine that loses
//! acknowledged puts or returns scans out of order (no false passes).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tierkv::{Db, Options};
use tierkv_core::{EngineContext, EngineDescriptor, KvPair, KvStore, Result, Stats};
use tierkv_stress::expected_state::{ExpectedState, KeySpace};
use tierkv_stress::value_codec::ValueSizes;
use tierkv_stress::verify::verify_store;
use tierkv_stress::workload::{NoObserver, OpMix, Workload, WorkloadConfig, WorkloadEnd};

/// A tiny in-memory engine; `lie` makes it break one guarantee on purpose.
struct Toy {
    map: Mutex<BTreeMap<Vec<u8>, Vec<u8>>>,
    lie: &'static str,
    puts: Mutex<u64>,
}

impl KvStore for Toy {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(self.map.lock().get(key).cloned())
    }
    fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        let mut n = self.puts.lock();
        *n += 1;
        if self.lie == "drop-put" && n.is_multiple_of(50) {
            return Ok(()); // acknowledged, never applied
        }
        self.map.lock().insert(key.to_vec(), value.to_vec());
        Ok(())
    }
    fn delete(&self, key: &[u8]) -> Result<()> {
        self.map.lock().remove(key);
        Ok(())
    }
    fn scan(&self, start: &[u8], limit: usize) -> Result<Vec<KvPair>> {
        let mut rows: Vec<KvPair> = self
            .map
            .lock()
            .range(start.to_vec()..)
            .take(limit)
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        if self.lie == "unordered-scan" {
            rows.reverse();
        }
        Ok(rows)
    }
    fn flush(&self) -> Result<()> {
        Ok(())
    }
    fn stats(&self) -> Stats {
        Stats::default()
    }
    fn close(&self) -> Result<()> {
        Ok(())
    }
}

fn open_toy(ctx: EngineContext) -> Result<Arc<dyn KvStore>> {
    let lie = TOY.variant(&ctx.spec)?;
    let lie = TOY
        .variants
        .iter()
        .find(|v| **v == lie)
        .copied()
        .unwrap_or("honest");
    Ok(Arc::new(Toy {
        map: Mutex::new(BTreeMap::new()),
        lie,
        puts: Mutex::new(0),
    }))
}

static TOY: EngineDescriptor = EngineDescriptor {
    name: "toy",
    variants: &["honest", "drop-put", "unordered-scan"],
    summary: "test engine",
    tiers: &[],
    variant_tiers: &[],
    volatile: false,
    min_pmem_size: 0,
    max_value_len: None,
    open: open_toy,
};

fn run_workload(db: &Db, state: &ExpectedState, seed: u64, time: Duration) -> (WorkloadEnd, u64) {
    let cfg = WorkloadConfig {
        threads: 4,
        mix: OpMix::default(),
        max_scan: 16,
        sizes: ValueSizes::up_to(2048),
        seed,
        writers_per_key: 1,
        max_batch: 8,
    };
    println!("workload seed {seed}");
    let wl = Workload::new(db, state, cfg, &NoObserver, "test".into());
    let end = std::thread::scope(|s| {
        let h = s.spawn(|| wl.run());
        wl.run_until(Instant::now() + time);
        wl.stop();
        h.join().expect("workload thread")
    });
    (end, wl.counts.total())
}

fn open(engine: &str, dir: &std::path::Path) -> Db {
    Db::open_with_engine(dir, Options::default().engine(engine), &TOY).expect("open toy")
}

#[test]
fn live_checks_raise_no_false_alarm_on_a_linearizable_engine() {
    let d = tempfile::tempdir().unwrap();
    let db = open("toy:honest", d.path());
    // 32 keys and 4 threads: reads race with writes of the same key all the time.
    let state = ExpectedState::new(KeySpace::new(32));
    let (end, ops) = run_workload(&db, &state, 7, Duration::from_millis(1500));
    assert!(end.violations.is_empty(), "{:#?}", end.violations);
    assert!(end.write_error.is_none());
    assert!(ops > 1000, "only {ops} operations");
    let v = verify_store(&db, &state, &ValueSizes::up_to(2048), "final", true);
    assert!(v.ok(), "{:#?}", v.violations);
    assert_eq!(v.keys_verified, 32);
    assert!(v.scanned);
}

#[test]
fn a_dropped_acknowledged_put_is_caught_while_running() {
    let d = tempfile::tempdir().unwrap();
    let db = open("toy:drop-put", d.path());
    let state = ExpectedState::new(KeySpace::new(32));
    let (end, _) = run_workload(&db, &state, 8, Duration::from_secs(10));
    let v = end.violations.first().expect("the lost put went unnoticed");
    println!("{v}");
    // Seen by a get (an older version, or nothing) or by a scan (the key is skipped).
    assert!(
        [
            "older than acknowledged",
            "acknowledged and lost",
            "resurrected",
            "missing from the scan"
        ]
        .iter()
        .any(|what| v.found.contains(what)),
        "{v}"
    );
    assert!(v.expected.contains("(acknowledged)"), "{v}");
}

#[test]
fn an_unordered_scan_is_caught_while_running() {
    let d = tempfile::tempdir().unwrap();
    let db = open("toy:unordered-scan", d.path());
    let state = ExpectedState::new(KeySpace::new(32));
    let (end, _) = run_workload(&db, &state, 9, Duration::from_secs(10));
    assert!(
        end.violations
            .iter()
            .any(|v| v.expected.contains("strictly ascending")),
        "{:#?}",
        end.violations
    );
}
