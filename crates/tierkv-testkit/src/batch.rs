//! The batch-atomicity crash kit (issue 24): writers apply [`WriteBatch`]es of 1..=100 keys
//! while crash images are taken; every recovered image must show each batch whole or not
//! at all, and no acknowledged batch may be missing.
//!
//! # How a recovered image is judged
//! Each writer thread owns a partition of keys (`bk<t>/<n>`) and writes a deterministic
//! sequence of batches (batch `s` of thread `t` is drawn from `(seed, t, s)`; about one op
//! in seven is a delete, some keys repeat inside a batch so the later op must win). Every
//! value starts with its batch's tag `t<t>b<s>:`. The [`Ledger`] records, per thread, how
//! many batches were acknowledged and whether one was in flight, under one lock that the
//! cut also takes. The partition read back from a recovered store must then equal the
//! state after exactly `acked` batches, or `acked + 1` if one was in flight. Otherwise:
//! - equal to the state after fewer batches: an acknowledged batch was **lost**;
//! - equal to no prefix: a batch is **torn** (part of it applied).
//!
//! # Ways to cut
//! - [`BatchKit::run_with_cuts`]: several threads, images at random moments (the caller's
//!   `cut`, usually `pool.crash_image`), judged afterwards by [`BatchKit::check`].
//! - [`BatchKit::run_persist_points`]: one thread; during chosen batches, an image after
//!   *every* persist of the pool (`PmemPool::arm_crash_points`), each recovered and judged
//!   at once inside the handler (the writer is paused meanwhile).
//!
//! [`NonAtomicBatches`] is the broken engine the kit must catch: batches as a loop of puts.
//!
//! Test helpers: they panic on unexpected errors; verdicts are returned as a
//! [`BatchReport`] so that a test can also assert that a broken engine *is* caught.

#![allow(clippy::unwrap_used, reason = "test helpers fail the test on errors")]

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tierkv_core::media::pmem::{CrashImageOptions, CrashPoint, PmemPool};
use tierkv_core::{BatchOp, KvPair, KvStore, Result, Stats, WriteBatch};

/// Shape of a batch-atomicity run.
#[derive(Clone, Debug)]
pub struct BatchKitConfig {
    /// Writer threads ([`BatchKit::run_with_cuts`]; the persist-point run uses one).
    pub threads: usize,
    /// Keys per thread.
    pub keys_per_thread: u64,
    /// Most operations per batch (sizes are drawn from `1..=max_batch`).
    pub max_batch: usize,
    /// Value sizes (beyond the tag) are drawn from this range.
    pub value_pad: std::ops::RangeInclusive<usize>,
    /// Most batches a thread writes.
    pub batches_per_thread: u64,
    /// The seed.
    pub seed: u64,
}

impl Default for BatchKitConfig {
    fn default() -> Self {
        BatchKitConfig {
            threads: 3,
            keys_per_thread: 150,
            max_batch: 100,
            value_pad: 0..=200,
            batches_per_thread: 400,
            seed: 24,
        }
    }
}

/// Per thread: batches acknowledged, and whether the next one is in flight.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Ledger {
    /// `(acknowledged, in flight)` per thread.
    pub threads: Vec<(u64, bool)>,
}

impl Ledger {
    /// The ledger a [`BatchKit::run_logged`] log describes: per thread, the highest `A`
    /// (acknowledged) batch, and whether a later `B` (begun) one was in flight. Lines that
    /// do not parse (a line cut by the kill) are skipped.
    pub fn from_log<'a>(threads: usize, lines: impl IntoIterator<Item = &'a str>) -> Ledger {
        let mut l = Ledger {
            threads: vec![(0, false); threads],
        };
        for line in lines {
            let f: Vec<&str> = line.split(' ').collect();
            let [kind, t, s] = f.as_slice() else { continue };
            let (Ok(t), Ok(s)) = (t.parse::<usize>(), s.parse::<u64>()) else {
                continue;
            };
            let Some(e) = l.threads.get_mut(t) else {
                continue;
            };
            match *kind {
                "B" if s > e.0 => e.1 = true,
                "A" if s >= e.0 => *e = (s, false),
                _ => {}
            }
        }
        l
    }
}

/// What the judged images showed.
#[derive(Clone, Debug, Default)]
pub struct BatchReport {
    /// Images recovered and judged.
    pub images: u64,
    /// Batches whose all-or-nothing and durability were checked (acknowledged or in
    /// flight at the cut, summed over images).
    pub batches_checked: u64,
    /// Threads (per image) whose keys showed a batch partly applied.
    pub torn: u64,
    /// Threads (per image) that lost an acknowledged batch.
    pub lost: u64,
    /// The first few failures, described.
    pub failures: Vec<String>,
}

impl BatchReport {
    /// Adds another report's counts (and first failures) to this one.
    pub fn merge(&mut self, other: BatchReport) {
        self.images += other.images;
        self.batches_checked += other.batches_checked;
        self.torn += other.torn;
        self.lost += other.lost;
        for f in other.failures {
            if self.failures.len() < 5 {
                self.failures.push(f);
            }
        }
    }

    /// Prints the verdict on a deliberately broken engine (`what`) and panics unless the
    /// kit caught it tearing a batch.
    pub fn assert_caught(&self, what: &str) {
        println!(
            "{what}: {} images, {} torn, {} lost; first: {:?}",
            self.images,
            self.torn,
            self.lost,
            self.failures.first()
        );
        assert!(
            self.torn > 0,
            "the kit did not catch a non-atomic batch ({what}): {self:?}"
        );
    }

    /// Panics, naming the first failures, unless every batch was whole and none lost.
    pub fn assert_clean(&self) {
        assert!(
            self.torn == 0 && self.lost == 0,
            "{} torn and {} lost in {} images: {:#?}",
            self.torn,
            self.lost,
            self.images,
            self.failures
        );
    }

    /// [`BatchReport::assert_clean`], and one image taken per persist counted in the cut
    /// batches (`persists`, from [`BatchKit::run_persist_points`]).
    pub fn assert_clean_with_an_image_per_persist(&self, persists: &[u64]) {
        self.assert_clean();
        assert_eq!(
            self.images,
            persists.iter().sum::<u64>(),
            "an image per persist"
        );
    }
}

/// The kit: a config and the batches it draws.
#[derive(Clone, Debug)]
pub struct BatchKit {
    cfg: BatchKitConfig,
}

/// The key `n` of thread `t`.
pub fn batch_key(t: usize, n: u64) -> Vec<u8> {
    format!("bk{t}/{n:04}").into_bytes()
}

/// The tag every value of batch `s` of thread `t` starts with.
pub fn batch_tag(t: usize, s: u64) -> String {
    format!("t{t}b{s}:")
}

type State = BTreeMap<Vec<u8>, Vec<u8>>;

fn apply(state: &mut State, batch: &WriteBatch) {
    for (k, op) in batch.iter() {
        match op {
            BatchOp::Put(v) => state.insert(k.to_vec(), v.clone()),
            BatchOp::Delete => state.remove(k),
        };
    }
}

fn tag_of(v: &[u8]) -> String {
    let end = v.iter().position(|&b| b == b':').unwrap_or(v.len().min(16));
    String::from_utf8_lossy(&v[..end]).into_owned()
}

impl BatchKit {
    /// A kit with `cfg` (the seed replaced by `TIERKV_SEED` when set).
    pub fn new(mut cfg: BatchKitConfig) -> Self {
        cfg.seed = crate::rig::env_seed().unwrap_or(cfg.seed);
        cfg.max_batch = cfg.max_batch.max(1);
        BatchKit { cfg }
    }

    /// The config.
    pub fn config(&self) -> &BatchKitConfig {
        &self.cfg
    }

    /// Batch `s` (1-based) of thread `t`.
    pub fn batch(&self, t: usize, s: u64) -> WriteBatch {
        let c = &self.cfg;
        let mut rng = ChaCha8Rng::seed_from_u64(
            c.seed
                ^ (t as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15)
                ^ s.wrapping_mul(0xd6e8_feb8_6659_fd93),
        );
        let size = rng.random_range(1..=c.max_batch);
        let mut b = WriteBatch::new();
        for i in 0..size {
            let k = batch_key(t, rng.random_range(0..c.keys_per_thread.max(1)));
            if rng.random_range(0..7) == 0 {
                b.delete(k);
            } else {
                let mut v = format!("{}{i}:", batch_tag(t, s)).into_bytes();
                v.resize(
                    v.len() + rng.random_range(c.value_pad.clone()),
                    b'a' + (s % 26) as u8,
                );
                b.put(k, v);
            }
        }
        b
    }

    /// Judges one recovered store against the ledger of its cut.
    pub fn check(&self, store: &dyn KvStore, ledger: &Ledger, what: &str) -> BatchReport {
        let mut r = BatchReport {
            images: 1,
            ..BatchReport::default()
        };
        for (t, &(acked, in_flight)) in ledger.threads.iter().enumerate() {
            let mut got = State::new();
            for n in 0..self.cfg.keys_per_thread {
                let k = batch_key(t, n);
                let v = store
                    .get(&k)
                    .unwrap_or_else(|e| panic!("{what}: get {}: {e}", String::from_utf8_lossy(&k)));
                if let Some(v) = v {
                    got.insert(k, v);
                }
            }
            let newest = acked + u64::from(in_flight);
            r.batches_checked += newest;
            let mut state = State::new();
            let mut matched = (state == got).then_some(0);
            for s in 1..=newest {
                apply(&mut state, &self.batch(t, s));
                if state == got {
                    matched = Some(s);
                }
            }
            match matched {
                Some(n) if n >= acked => {}
                Some(n) => {
                    r.lost += 1;
                    r.failures.push(format!(
                        "{what} (seed {}): thread {t} recovered the state after batch {n}, but \
                         {acked} batches were acknowledged",
                        self.cfg.seed
                    ));
                }
                None => {
                    r.torn += 1;
                    let tags: std::collections::BTreeSet<String> =
                        got.values().map(|v| tag_of(v)).collect();
                    r.failures.push(format!(
                        "{what} (seed {}): thread {t} ({acked} acknowledged, in flight: \
                         {in_flight}) matches no batch boundary; its keys show batches {tags:?}",
                        self.cfg.seed
                    ));
                }
            }
        }
        r
    }

    /// Runs the writers on `store`; at `cuts` random moments calls `cut(i)` with the ledger
    /// held (so that it is exact), and returns each cut's result with its ledger. A writer
    /// stops at its first error (a crashed device, say).
    pub fn run_with_cuts<I>(
        &self,
        store: &Arc<dyn KvStore>,
        cuts: usize,
        mut cut: impl FnMut(u64) -> I,
    ) -> Vec<(I, Ledger)> {
        let c = &self.cfg;
        let ledger = parking_lot::Mutex::new(Ledger {
            threads: vec![(0, false); c.threads],
        });
        let stop = AtomicBool::new(false);
        let mut rng = ChaCha8Rng::seed_from_u64(c.seed.wrapping_add(7));
        std::thread::scope(|s| {
            for t in 0..c.threads {
                let (ledger, stop, store) = (&ledger, &stop, store.clone());
                s.spawn(move || {
                    for seq in 1..=c.batches_per_thread {
                        if stop.load(Ordering::Relaxed) {
                            break;
                        }
                        let b = self.batch(t, seq);
                        ledger.lock().threads[t].1 = true;
                        if store.write_batch(&b).is_err() {
                            break;
                        }
                        ledger.lock().threads[t] = (seq, false);
                    }
                });
            }
            let mut out = Vec::with_capacity(cuts);
            for i in 0..cuts as u64 {
                std::thread::sleep(Duration::from_micros(rng.random_range(300..6_000)));
                let l = ledger.lock();
                out.push((cut(i), l.clone()));
            }
            stop.store(true, Ordering::Relaxed);
            out
        })
    }

    /// Runs `cmd`, a child process whose writers are [`BatchKit::run_logged`]'s, until
    /// `kill_after` has passed and it acknowledged at least 21 batches, SIGKILLs it, and
    /// returns the ledger its log gives.
    pub fn run_child_until_killed(
        &self,
        cmd: std::process::Command,
        kill_after: Duration,
    ) -> Ledger {
        let lines = crate::rig::run_until_killed(cmd, kill_after, 21, |l| l.starts_with("A "));
        Ledger::from_log(self.cfg.threads, lines.iter().map(String::as_str))
    }

    /// The writers of a process that is killed (SIGKILL tests): each thread writes its
    /// batches in order, printing `B <t> <s>` before and `A <t> <s>` after batch `s`
    /// (flushed, under one lock), so that the parent can rebuild the [`Ledger`] with
    /// [`Ledger::from_log`] from what it read before the kill.
    pub fn run_logged<W: Write + Send>(&self, store: &dyn KvStore, out: &parking_lot::Mutex<W>) {
        std::thread::scope(|s| {
            for t in 0..self.cfg.threads {
                s.spawn(move || {
                    for seq in 1..=self.cfg.batches_per_thread {
                        let b = self.batch(t, seq);
                        writeln!(out.lock(), "B {t} {seq}").unwrap();
                        store.write_batch(&b).unwrap();
                        let mut o = out.lock();
                        writeln!(o, "A {t} {seq}").unwrap();
                        o.flush().unwrap();
                    }
                });
            }
        });
    }

    /// One writer (thread 0) writes batches `1..=batches`; during each batch listed in
    /// `cut_batches`, after every `stride`-th persist of `pool`, an image is taken
    /// (alternately whole lines and torn words). When the batch returns, each image is
    /// recovered with `reopen(number, image)` and judged. Returns the verdicts and the persists each cut
    /// batch made.
    ///
    /// NOTE: images are judged after their batch returns, not inside the handler: the
    /// handler may run on a thread pinned in `crossbeam_epoch` (the writer inside a put),
    /// and a store opened there could wait for that very thread (a grace period) while the
    /// handler waits for it to close. A batch's images are kept as page diffs against its
    /// first one.
    pub fn run_persist_points(
        &self,
        store: &Arc<dyn KvStore>,
        pool: &Arc<PmemPool>,
        batches: u64,
        cut_batches: &[u64],
        stride: u64,
        mut reopen: impl FnMut(u64, Vec<u8>) -> Arc<dyn KvStore>,
    ) -> (BatchReport, Vec<u64>) {
        let inside = Arc::new(parking_lot::Mutex::new(None::<Ledger>));
        let taken: Arc<parking_lot::Mutex<Taken>> = Arc::default();
        // NOTE: the persists of a cut batch are counted here, where the images are taken:
        // counting them as the pool's persist count after the batch returned also counted
        // a background persist that came between the batch's return and the count, for
        // which no image was taken (hetermm under load: `an image per persist`, 15 != 16).
        let seen = Arc::new(AtomicU64::new(0));
        let weak = Arc::downgrade(pool);
        let (inside2, taken2, seen2) = (inside.clone(), taken.clone(), seen.clone());
        let stride = stride.max(1);
        pool.arm_crash_points(Arc::new(move |p: CrashPoint<'_>| {
            let CrashPoint::Persist { number, .. } = p else {
                return;
            };
            let Some(ledger) = inside2.lock().clone() else {
                return;
            };
            seen2.fetch_add(1, Ordering::SeqCst);
            let Some(pool) = weak.upgrade() else { return };
            if number % stride != 0 {
                return;
            }
            let opts = if number % 2 == 1 {
                CrashImageOptions::torn_words()
            } else {
                CrashImageOptions::lines()
            };
            let image = pool.crash_image(number, opts).unwrap();
            taken2.lock().push(number, ledger, image);
        }))
        .unwrap();
        let mut persists = Vec::new();
        let mut report = BatchReport::default();
        for seq in 1..=batches {
            let b = self.batch(0, seq);
            let cutting = cut_batches.contains(&seq);
            seen.store(0, Ordering::SeqCst);
            if cutting {
                *inside.lock() = Some(Ledger {
                    threads: vec![(seq - 1, true)],
                });
            }
            let done = store.write_batch(&b);
            *inside.lock() = None;
            done.unwrap_or_else(|e| panic!("batch {seq}: {e}"));
            if cutting {
                persists.push(seen.load(Ordering::SeqCst));
                let Taken { base, images } = std::mem::take(&mut *taken.lock());
                for (number, ledger, diff) in images {
                    let recovered = reopen(number, diff.expand(&base));
                    let what = format!("image after persist {number}");
                    report.merge(self.check(&*recovered, &ledger, &what));
                }
            }
        }
        pool.disarm_crash_points();
        (report, persists)
    }
}

/// Which side of a batch's commit a named crash point lies on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CommitSide {
    /// Before the commit is durable: recovery must show none of the batch.
    Before,
    /// After: recovery must show all of it.
    After,
}

impl BatchKit {
    /// One writer (thread 0) writes batches `1..=batches`; at each named crash point of
    /// `points` reached on the writer's thread inside a batch, an image is taken
    /// (alternately whole lines and torn words), recovered with `reopen` once the batch
    /// returned, and judged exactly: the batch absent (`Before`) or present (`After`).
    /// Returns the verdicts and how often each point was reached.
    pub fn run_named_points(
        &self,
        store: &dyn KvStore,
        pool: &Arc<PmemPool>,
        batches: u64,
        points: &[(&'static str, CommitSide)],
        mut reopen: impl FnMut(Vec<u8>) -> Arc<dyn KvStore>,
    ) -> (BatchReport, BTreeMap<&'static str, u64>) {
        type Taken = Vec<(&'static str, Ledger, Vec<u8>)>;
        let current = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let taken: Arc<parking_lot::Mutex<Taken>> = Arc::default();
        let (cur, tk, weak) = (current.clone(), taken.clone(), Arc::downgrade(pool));
        let points = points.to_vec();
        pool.arm_crash_points(Arc::new(move |cp: CrashPoint<'_>| {
            let CrashPoint::Named(name) = cp else { return };
            let Some(&(name, side)) = points.iter().find(|(n, _)| *n == name) else {
                return;
            };
            let Some(pool) = weak.upgrade() else { return };
            let s = cur.load(Ordering::Acquire);
            let done = if side == CommitSide::Before { s - 1 } else { s };
            let opts = if s % 2 == 0 {
                CrashImageOptions::lines()
            } else {
                CrashImageOptions::torn_words()
            };
            let image = pool.crash_image(s, opts).unwrap();
            let ledger = Ledger {
                threads: vec![(done, false)],
            };
            tk.lock().push((name, ledger, image));
        }))
        .unwrap();
        let mut report = BatchReport::default();
        let mut seen = BTreeMap::<&'static str, u64>::new();
        for s in 1..=batches {
            current.store(s, Ordering::Release);
            store
                .write_batch(&self.batch(0, s))
                .unwrap_or_else(|e| panic!("batch {s}: {e}"));
            for (name, ledger, image) in std::mem::take(&mut *taken.lock()) {
                *seen.entry(name).or_default() += 1;
                let recovered = reopen(image);
                report.merge(self.check(&*recovered, &ledger, &format!("{name} of batch {s}")));
            }
        }
        pool.disarm_crash_points();
        (report, seen)
    }
}

/// The environment of a SIGKILL child (see [`batch_child`]): its store directory and seed,
/// or `None` in the parent.
pub fn batch_child_env() -> Option<(std::path::PathBuf, u64)> {
    let dir = std::env::var_os("TIERKV_BATCH_CHILD")?;
    let seed = std::env::var("TIERKV_BATCH_CHILD_SEED")
        .ok()?
        .parse()
        .ok()?;
    Some((dir.into(), seed))
}

/// A command that re-runs this test binary as the SIGKILL child: only the test `entry`,
/// with [`batch_child_env`] giving it `dir` and `seed`.
pub fn batch_child(entry: &str, dir: &std::path::Path, seed: u64) -> std::process::Command {
    let mut cmd = std::process::Command::new(std::env::current_exe().unwrap());
    cmd.args(["--exact", entry, "--nocapture", "--test-threads=1"])
        .env("TIERKV_BATCH_CHILD", dir)
        .env("TIERKV_BATCH_CHILD_SEED", seed.to_string());
    cmd
}

/// The images of one batch: the first in full, the others as the 4 KiB pages in which
/// they differ from it (a batch changes few pages of a pool).
#[derive(Default)]
struct Taken {
    base: Vec<u8>,
    images: Vec<(u64, Ledger, SparseImage)>,
}

impl Taken {
    fn push(&mut self, number: u64, ledger: Ledger, image: Vec<u8>) {
        if self.images.is_empty() {
            self.base.clone_from(&image);
        }
        let diff = SparseImage::diff(&self.base, &image);
        self.images.push((number, ledger, diff));
    }
}

/// A pool image kept as the 4 KiB pages in which it differs from a base image.
struct SparseImage {
    len: usize,
    pages: Vec<(usize, Vec<u8>)>,
}

impl SparseImage {
    const PAGE: usize = 4096;

    fn diff(base: &[u8], image: &[u8]) -> Self {
        let pages = image
            .chunks(Self::PAGE)
            .enumerate()
            .filter(|(i, p)| base.get(i * Self::PAGE..i * Self::PAGE + p.len()) != Some(*p))
            .map(|(i, p)| (i * Self::PAGE, p.to_vec()))
            .collect();
        SparseImage {
            len: image.len(),
            pages,
        }
    }

    fn expand(&self, base: &[u8]) -> Vec<u8> {
        let mut out = base.to_vec();
        out.resize(self.len, 0);
        for (off, p) in &self.pages {
            out[*off..*off + p.len()].copy_from_slice(p);
        }
        out
    }
}

/// A deliberately broken engine: batches applied as a plain loop of puts and deletes (not
/// crash-atomic). The kit must catch it.
pub struct NonAtomicBatches(pub Arc<dyn KvStore>);

impl KvStore for NonAtomicBatches {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.0.get(key)
    }
    fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        self.0.put(key, value)
    }
    fn delete(&self, key: &[u8]) -> Result<()> {
        self.0.delete(key)
    }
    fn scan(&self, start: &[u8], limit: usize) -> Result<Vec<KvPair>> {
        self.0.scan(start, limit)
    }
    fn write_batch(&self, batch: &WriteBatch) -> Result<()> {
        for (k, op) in batch.iter() {
            match op {
                BatchOp::Put(v) => self.0.put(k, v)?,
                BatchOp::Delete => self.0.delete(k)?,
            }
        }
        Ok(())
    }
    fn flush(&self) -> Result<()> {
        self.0.flush()
    }
    fn stats(&self) -> Stats {
        self.0.stats()
    }
    fn close(&self) -> Result<()> {
        self.0.close()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_log_gives_the_ledger_and_skips_cut_lines() {
        let log = "B 0 1\nA 0 1\nB 1 1\nB 0 2\nA 0 2\nB 0 3\nA 1 1\nB 1 2\nA 1";
        let l = Ledger::from_log(3, log.lines());
        assert_eq!(l.threads, vec![(2, true), (1, true), (0, false)]);
    }

    #[test]
    fn sparse_images_expand_to_the_original() {
        let base: Vec<u8> = (0..5 * 4096 + 100).map(|i| (i % 251) as u8).collect();
        let mut img = base.clone();
        img[4096 + 7] ^= 1;
        img[5 * 4096 + 99] ^= 9;
        let s = SparseImage::diff(&base, &img);
        assert_eq!(s.pages.len(), 2);
        assert_eq!(s.expand(&base), img);
        assert!(SparseImage::diff(&base, &base).pages.is_empty());
    }

    #[test]
    fn batches_are_deterministic_tagged_and_bounded() {
        let kit = BatchKit::new(BatchKitConfig {
            seed: 5,
            ..BatchKitConfig::default()
        });
        assert_eq!(kit.batch(1, 9), kit.batch(1, 9));
        assert_ne!(kit.batch(1, 9), kit.batch(1, 10));
        let mut sizes = Vec::new();
        for s in 1..200 {
            let b = kit.batch(2, s);
            sizes.push(b.len());
            for (k, op) in b.iter() {
                assert!(k.starts_with(b"bk2/"));
                if let BatchOp::Put(v) = op {
                    assert!(v.starts_with(batch_tag(2, s).as_bytes()));
                }
            }
        }
        assert!(sizes.iter().all(|&n| (1..=100).contains(&n)));
        assert!(
            sizes.iter().any(|&n| n > 60) && sizes.iter().any(|&n| n < 10),
            "{sizes:?}"
        );
    }
}
