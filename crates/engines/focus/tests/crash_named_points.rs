//! Crash images at the named crash points of the background work (FORMAT.md § Named crash
//! points; issue 17, item 2): racing writers and readers of plain pairs (gets and scans,
//! judged by linearizability: `tierkv_testkit::racing`) fill a small pool so that the
//! `focus:gc` thread collects chunks all the time, while a row thread puts, updates (fixed
//! fields: swim deltas, restore points, and merges by the `focus:merge` thread) and deletes
//! rows of a schema, reading each back (through SeaCache) after every write. At every
//! named point (until `FIRST` of each are verified, then one in `EVERY`, at most
//! `MAX_VERIFIED`; none while the pool is short of room) the handler, on the thread
//! that reached it, paused, takes a Tracked crash image (whole lines or torn words,
//! alternately), recovers a fresh store from it, runs its `check` and judges every key and
//! row: every acknowledged write is there unless a later one overlapped it, a write in
//! flight may be either way. Every point must be reached and verified at least
//! `MIN_VERIFIED` times, so a renamed or dead point fails the test.

#![allow(clippy::unwrap_used, reason = "test code: an unwrap is an assertion")]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use parking_lot::Mutex;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tierkv_core::media::pmem::{CrashImageOptions, CrashPoint, DurabilityMode};
use tierkv_core::{FieldDef, FieldSelection, KvStore, SchemaStore};
use tierkv_focus::FocusStore;
use tierkv_testkit::{PointTally, Racing, RacingConfig, ReadBounds, WriteSpan};

const EXTRA: &str = "chunk_size=16KiB,gc_threshold=0.9,restore_point=3";
/// Every named point of the engine.
const POINTS: [&str; 10] = [
    "focus.swim.delta_persisted",
    "focus.swim.delta_published",
    "focus.swim.restore_point_published",
    "focus.merge.fields_written",
    "focus.merge.lines_persisted",
    "focus.merge.checksum_persisted",
    "focus.gc.row_rewritten",
    "focus.gc.rewrites_done",
    "focus.gc.magic_cleared",
    "focus.gc.chunk_freed",
];
const FIRST: u64 = 8;
/// The longest the racing runs go on for (more runs while a point lacks images).
const RUN_FOR: std::time::Duration = std::time::Duration::from_secs(30);
const EVERY: u64 = 8;
const MIN_VERIFIED: u64 = 3;
/// At most this many images per point (a GC step reaches `focus.gc.row_rewritten` dozens
/// of times).
const MAX_VERIFIED: u64 = 20;
const ROWS: usize = 8;
/// The row thread's writes at most (its history is kept whole).
const MAX_ROW_WRITES: u64 = 20_000;
/// Plain pairs written once before the run: the chunks GC collects hold live data, so its
/// victims have rows to rewrite.
const COLD: usize = 400;

fn cold(i: usize) -> (Vec<u8>, Vec<u8>) {
    let k = format!("cold/{i:04}").into_bytes();
    let v = vec![b'c' ^ (i as u8); 200 + i % 700];
    (k, v)
}

/// Every cold pair is in `s`, whole.
fn check_cold(s: &FocusStore) -> Result<(), String> {
    for i in 0..COLD {
        let (k, v) = cold(i);
        match s.get(&k) {
            Ok(Some(got)) if got == v => {}
            other => return Err(format!("cold/{i:04}: {other:?}")),
        }
    }
    Ok(())
}

type Row = Vec<Vec<u8>>;
/// One write of a row: the state it left (`None`: absent) and when.
type RowWrite = (Option<Row>, WriteSpan);

/// The writes of the row thread, per row: the state each left and when.
#[derive(Default)]
struct RowHistory {
    clock: AtomicU64,
    rows: Mutex<Vec<Vec<RowWrite>>>,
}

impl RowHistory {
    fn tick(&self) -> u64 {
        self.clock.fetch_add(1, Ordering::SeqCst) + 1
    }

    fn begin(&self, r: usize, state: Option<Row>) -> usize {
        let begin = self.tick();
        let mut rows = self.rows.lock();
        rows[r].push((state, WriteSpan { begin, ack: None }));
        rows[r].len() - 1
    }

    fn ack(&self, r: usize, i: usize) {
        let t = self.tick();
        self.rows.lock()[r][i].1.ack = Some(t);
    }

    /// Judges every row of `s`, recovered from an image taken between `cut` and `end`.
    fn check(&self, s: &FocusStore, id: u32, cut: u64, end: u64) -> Result<(), String> {
        let rows = self.rows.lock();
        for (r, hist) in rows.iter().enumerate() {
            let got = s
                .get_fields(id, &row_key(r), &FieldSelection::All)
                .map_err(|e| format!("get row {r}: {e}"))?;
            let mut w = ReadBounds::after_crash(hist.iter().map(|h| h.1), cut);
            w.end = end;
            let ok = (got.is_none() && w.allows_initial())
                || hist.iter().any(|(st, span)| *st == got && w.allows(*span));
            if !ok {
                return Err(format!(
                    "row {r} holds {:?}; its last acknowledged state before the cut is {:?}",
                    got.as_ref()
                        .map(|v| v.iter().map(Vec::len).collect::<Vec<_>>()),
                    hist.iter()
                        .rev()
                        .find(|h| h.1.ack.is_some_and(|a| a < cut))
                        .map(|h| h
                            .0
                            .as_ref()
                            .map(|v| v.iter().map(Vec::len).collect::<Vec<_>>()))
                ));
            }
        }
        Ok(())
    }
}

fn row_key(r: usize) -> Vec<u8> {
    format!("row/{r:02}").into_bytes()
}

/// Puts, updates (fixed fields, mostly) and deletes the rows until `stop`, reading each
/// row back after every write (the thread is its only writer: the answer is exact).
fn row_thread(s: &FocusStore, id: u32, hist: &RowHistory, seed: u64, stop: &AtomicBool) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x524f_5753);
    let mut model: Vec<Option<Row>> = vec![None; ROWS];
    let mut n = 0u64;
    while !stop.load(Ordering::SeqCst) && n < MAX_ROW_WRITES {
        n += 1;
        let r = rng.random_range(0..ROWS);
        let k = row_key(r);
        let choice = rng.random_range(0..20);
        let after = match (&model[r], choice) {
            (_, 0) => None,
            (Some(row), 1..18) => {
                let mut row = row.clone();
                row[rng.random_range(0..2)] = n.to_le_bytes().to_vec();
                Some(row)
            }
            _ => Some(vec![
                n.to_le_bytes().to_vec(),
                (!n).to_le_bytes().to_vec(),
                vec![b'v'; rng.random_range(0..100)],
            ]),
        };
        let i = hist.begin(r, after.clone());
        match (&after, &model[r]) {
            (None, _) => {
                s.delete_row(id, &k).unwrap();
            }
            (Some(new), Some(old)) if choice < 18 => {
                let set: Vec<(u16, &[u8])> = (0..2u16)
                    .filter(|f| new[usize::from(*f)] != old[usize::from(*f)])
                    .map(|f| (f, new[usize::from(f)].as_slice()))
                    .collect();
                assert!(s.update_fields(id, &k, &set).unwrap());
            }
            (Some(new), _) => {
                let refs: Vec<&[u8]> = new.iter().map(Vec::as_slice).collect();
                s.put_row(id, &k, &refs).unwrap();
            }
        }
        hist.ack(r, i);
        model[r] = after;
        let got = s.get_fields(id, &k, &FieldSelection::All).unwrap();
        assert_eq!(got, model[r], "row {r} read back after write {n}");
    }
}

#[test]
fn every_named_point_of_swim_merge_and_gc_recovers_what_was_acknowledged() {
    let seed = common::seed("crash_named_points");
    let dir = common::scratch_dir();
    let s = common::new_store(dir.path(), 8 << 20, DurabilityMode::Tracked, EXTRA);
    let id = s
        .create_schema(
            "t",
            &[
                FieldDef::fixed("n", 8),
                FieldDef::fixed("m", 8),
                FieldDef::var("v", 100),
            ],
        )
        .unwrap()
        .id;
    for i in 0..COLD {
        let (k, v) = cold(i);
        s.put(&k, &v).unwrap();
    }
    let pool = s.plog().pool().clone();
    let cfg = RacingConfig {
        writers: 2,
        writers_per_key: 2,
        readers: 2,
        keys: 48,
        ops_per_writer: 8_000,
        delete_pct: 15,
        scan_pct: 25,
        value_len: 8..=120,
        seed,
    };
    let mut racing = Racing::new(cfg.keys);
    let cuts = racing.cuts(&cfg);
    let hist = Arc::new(RowHistory::default());
    hist.rows.lock().resize(ROWS, Vec::new());
    let tally = Arc::new(PointTally::new(FIRST, EVERY, MAX_VERIFIED));
    {
        let (tally, hist, weak) = (tally.clone(), hist.clone(), Arc::downgrade(&pool));
        let store = Arc::downgrade(&s);
        let images = AtomicU64::new(seed);
        let dir = dir.path().to_owned();
        pool.arm_crash_points(Arc::new(move |cp: CrashPoint<'_>| {
            let CrashPoint::Named(name) = cp else {
                return;
            };
            if !tally.reached(name) {
                return;
            }
            let (Some(pool), Some(live)) = (weak.upgrade(), store.upgrade()) else {
                return;
            };
            // NOTE: an image costs far more than a write; cut only while the pool has
            // room, or writers, never paused, would outrun the paused GC into `NoSpace`.
            if live.plog().free_chunks() < 2 * tierkv_focus::gc::hard_floor(4) {
                tally.skipped();
                return;
            }
            let k = images.fetch_add(1, Ordering::Relaxed);
            let opts = if k.is_multiple_of(2) {
                CrashImageOptions::lines()
            } else {
                CrashImageOptions::torn_words()
            };
            let path = dir.join(format!("image-{k}"));
            let r = cuts.cut(|| {
                let cut = hist.tick();
                pool.write_crash_image(k, opts, &path)
                    .map_err(|e| format!("crash image: {e}"))?;
                let end = hist.tick();
                let r = common::try_reopen(&path, EXTRA)?;
                r.check().map_err(|e| format!("check: {e}"))?;
                hist.check(&r, id, cut, end)?;
                check_cold(&r)?;
                Ok(r)
            });
            let _ = std::fs::remove_file(&path);
            tally.record(name, r, &format!("image seed {k}"));
        }))
        .unwrap();
    }
    let live: Arc<dyn KvStore> = s.clone();
    let stop = AtomicBool::new(false);
    /// Stops the row thread however the racing run ends (a panic included).
    struct StopOnDrop<'a>(&'a AtomicBool);
    impl Drop for StopOnDrop<'_> {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }
    let report = std::thread::scope(|sc| {
        let rows = sc.spawn(|| row_thread(&s, id, &hist, seed, &stop));
        let report = {
            let _stop = StopOnDrop(&stop);
            // Runs until every point is verified often enough (images are slow: how many
            // a run gets depends on the machine), or `RUN_FOR` has passed.
            let started = std::time::Instant::now();
            let mut runs = vec![racing.run(&live, &cfg)];
            while started.elapsed() < RUN_FOR && !tally.all_verified(&POINTS, MIN_VERIFIED) {
                runs.push(racing.run(&live, &cfg));
            }
            runs
        };
        rows.join().unwrap();
        report
    });
    pool.disarm_crash_points();
    println!("{} racing runs: {report:?}", report.len());
    tally.finish(&POINTS, &[], MIN_VERIFIED);
    check_cold(&s).unwrap();
    drop(live);
    s.close().unwrap();
}
