//! Racing writers (issue 17, items 1 and 3): groups of threads put and delete the *same*
//! keys at once while other threads get and scan them, and every answer is judged by
//! linearizability — live, and after a crash image taken while all of it runs.
//!
//! # The rule (the same as `tierkv stress --writers-per-key`; see its README)
//! Every write takes a logical tick before it calls the engine (`begin`) and one after
//! the engine returned (`ack`). A key's *frontier* is the latest `begin` among its
//! acknowledged writes. A write acknowledged before the frontier is *superseded*: an
//! acknowledged write began after it returned, so it can no longer be the key's value.
//! - A read that loaded the frontier `f` before calling the engine and took the tick `end`
//!   after it returned may return the value of a write (a delete: absence; the initial
//!   state: absence) that began before `end` and was not superseded at `f`.
//! - After a crash cut at tick `cut`, acknowledgements after `cut` count as in flight; a key
//!   may hold the value of any write not superseded by the writes acknowledged before
//!   `cut`: the last acknowledged one, those that overlapped it, those in flight.
//! - After a clean shutdown (or with everything acknowledged), the same rule with no cut.
//!
//! Values are `v<version>|` followed by filler that is a pure function of (key, version),
//! so a value is recognised whole or reported as torn, foreign or never written.
//!
//! Thread safety: per-key mutexes around the histories, one atomic clock.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tierkv_core::KvStore;

/// Shape of a racing-writers run.
#[derive(Clone, Debug)]
pub struct RacingConfig {
    /// Writer threads; groups of `writers_per_key` share their current key.
    pub writers: usize,
    /// Threads per group that write the same key at once.
    pub writers_per_key: usize,
    /// Threads that only read (gets and scans) meanwhile.
    pub readers: usize,
    /// Keys (`race/0000` ...): few, so that groups collide too.
    pub keys: u32,
    /// Operations per writer thread (writers also read: a tenth of their operations).
    pub ops_per_writer: usize,
    /// Percent of writes that are deletes.
    pub delete_pct: u32,
    /// Percent of reader operations that are scans (0 for engines without scans).
    pub scan_pct: u32,
    /// Value lengths (at least the `v<version>|` tag).
    pub value_len: std::ops::RangeInclusive<usize>,
    /// The seed (overridden by `TIERKV_SEED`).
    pub seed: u64,
}

impl Default for RacingConfig {
    fn default() -> Self {
        RacingConfig {
            writers: 4,
            writers_per_key: 4,
            readers: 2,
            keys: 64,
            ops_per_writer: 2_000,
            delete_pct: 20,
            scan_pct: 20,
            value_len: 8..=200,
            seed: 0x5241_4345,
        }
    }
}

/// What a racing run did.
#[derive(Clone, Debug, Default)]
pub struct RacingReport {
    /// Writes acknowledged.
    pub writes: u64,
    /// Reads checked (gets, and keys covered by scans).
    pub reads: u64,
    /// Writes whose key had another write in flight when they began.
    pub overlapping_writes: u64,
    /// Keys checked after the crash or at the end.
    pub keys_checked: u64,
}

/// The logical moments of one write: `begin` (taken before the engine was called) and
/// `ack` (after it returned; `None` while in flight or if it failed).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WriteSpan {
    /// Before the call.
    pub begin: u64,
    /// After the return.
    pub ack: Option<u64>,
}

/// What a read, or a key of a recovered store, may return: the values of writes not
/// superseded at `frontier` that began before `end`, with acknowledgements at or after
/// `cut` counted as in flight (the rule of the module doc; `tierkv-stress` uses it too).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadBounds {
    /// Writes acknowledged before this are superseded.
    pub frontier: u64,
    /// Writes that began at or after this were not visible yet.
    pub end: u64,
    /// Acknowledgements at or after this count as in flight.
    pub cut: u64,
}

impl ReadBounds {
    /// The bounds of a live read that loaded `frontier` before the call and took `end`
    /// after it.
    pub fn live(frontier: u64, end: u64) -> Self {
        ReadBounds {
            frontier,
            end,
            cut: u64::MAX,
        }
    }

    /// The bounds of a key after a crash cut at `cut` (`u64::MAX`: a clean end), given
    /// every write of the key.
    pub fn after_crash(writes: impl Iterator<Item = WriteSpan>, cut: u64) -> Self {
        let frontier = writes
            .filter(|w| w.ack.is_some_and(|a| a < cut))
            .map(|w| w.begin)
            .max()
            .unwrap_or(0);
        ReadBounds {
            frontier,
            end: u64::MAX,
            cut,
        }
    }

    /// The acknowledgement of `w` as far as these bounds count it.
    pub fn counted_ack(&self, w: WriteSpan) -> Option<u64> {
        w.ack.filter(|a| *a < self.cut)
    }

    /// True when the value of `w` may be returned.
    pub fn allows(&self, w: WriteSpan) -> bool {
        w.begin < self.end && self.counted_ack(w).is_none_or(|a| a >= self.frontier)
    }

    /// True when a write acknowledged at time 0 (the state a store started from) may.
    pub fn allows_initial(&self) -> bool {
        self.frontier == 0
    }
}

/// One write of a key's history: a delete or a put, and its moments.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RacingWrite {
    /// A delete (its value is absence).
    pub delete: bool,
    /// Before the call.
    pub begin: u64,
    /// After the return (`None`: in flight, or failed).
    pub ack: Option<u64>,
}

impl RacingWrite {
    /// Its moments.
    pub fn span(&self) -> WriteSpan {
        WriteSpan {
            begin: self.begin,
            ack: self.ack,
        }
    }
}

type Rec = RacingWrite;

#[derive(Debug, Default)]
struct Hist {
    /// The key holds what an earlier run left (its `writes` then start with that, as a
    /// write acknowledged at time 0); otherwise it starts absent.
    carried: bool,
    frontier: u64,
    next_version: u32,
    in_flight: u32,
    writes: BTreeMap<u32, Rec>,
}

/// The write histories of every key (see the module doc).
struct Histories {
    clock: AtomicU64,
    keys: Vec<Mutex<Hist>>,
    /// Held (shared) by a [`Cuts::cut`] while it checks, and (exclusively) by the final
    /// check of a run while it rewrites a key's history.
    gate: std::sync::RwLock<()>,
}

type Window = ReadBounds;

fn race_key(n: u32) -> Vec<u8> {
    format!("race/{n:04}").into_bytes()
}

fn key_number(k: &[u8]) -> Option<u32> {
    std::str::from_utf8(k.strip_prefix(b"race/")?)
        .ok()?
        .parse()
        .ok()
}

fn splitmix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The value written as `version` of key number `k`.
fn race_value(cfg: &RacingConfig, k: u32, version: u32) -> Vec<u8> {
    let mut v = format!("v{version}|").into_bytes();
    let h = splitmix((u64::from(k) << 32) | u64::from(version));
    let span = (cfg.value_len.end() - cfg.value_len.start() + 1) as u64;
    let len = (*cfg.value_len.start() + (h % span) as usize).max(v.len());
    let mut x = h;
    while v.len() < len {
        x = splitmix(x);
        v.push(b'a' + (x % 26) as u8);
    }
    v
}

fn version_of(v: &[u8]) -> Option<u32> {
    let rest = v.strip_prefix(b"v")?;
    let end = rest.iter().position(|b| *b == b'|')?;
    std::str::from_utf8(rest.get(..end)?).ok()?.parse().ok()
}

impl Histories {
    fn new(keys: u32) -> Self {
        Histories {
            clock: AtomicU64::new(0),
            keys: (0..keys).map(|_| Mutex::default()).collect(),
            gate: std::sync::RwLock::new(()),
        }
    }

    fn tick(&self) -> u64 {
        self.clock.fetch_add(1, Ordering::SeqCst) + 1
    }

    fn hist(&self, k: u32) -> MutexGuard<'_, Hist> {
        self.keys[k as usize]
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Announces a write; returns its version and whether another write was in flight.
    fn begin(&self, k: u32, delete: bool) -> (u32, bool) {
        let mut h = self.hist(k);
        h.next_version += 1;
        let v = h.next_version;
        let overlapping = h.in_flight > 0;
        h.in_flight += 1;
        let begin = self.tick();
        h.writes.insert(
            v,
            Rec {
                delete,
                begin,
                ack: None,
            },
        );
        (v, overlapping)
    }

    fn ack(&self, k: u32, v: u32) {
        let mut h = self.hist(k);
        let t = self.tick();
        h.in_flight -= 1;
        if let Some(r) = h.writes.get_mut(&v) {
            r.ack = Some(t);
            let b = r.begin;
            h.frontier = h.frontier.max(b);
        }
    }

    /// After a check of a quiescent store: the key holds `found` (a version, or absent),
    /// which the next run starts from.
    fn resolve(&self, k: u32, found: Option<u32>) {
        let mut h = self.hist(k);
        let (version, delete) = match found {
            Some(v) => (v, false),
            None => {
                h.next_version += 1;
                (h.next_version, true)
            }
        };
        h.writes.clear();
        h.writes.insert(
            version,
            Rec {
                delete,
                begin: 0,
                ack: Some(0),
            },
        );
        h.carried = true;
        h.frontier = 0;
        h.in_flight = 0;
    }

    fn frontier(&self, k: u32) -> u64 {
        self.hist(k).frontier
    }

    /// The window of a key after a crash at `cut` (u64::MAX: a clean end).
    fn recovered(&self, k: u32, cut: u64) -> Window {
        ReadBounds::after_crash(self.hist(k).writes.values().map(Rec::span), cut)
    }

    /// Checks one answer for key number `k`; `Err` describes the violation.
    fn check(
        &self,
        cfg: &RacingConfig,
        k: u32,
        w: Window,
        found: Option<&[u8]>,
    ) -> Result<(), String> {
        let h = self.hist(k);
        let allowed = || {
            let mut s: Vec<String> = Vec::new();
            if w.allows_initial() && !h.carried {
                s.push("absent (initial)".into());
            }
            for (v, r) in h.writes.iter().filter(|(_, r)| w.allows(r.span())) {
                s.push(if r.delete {
                    format!("absent (delete v{v})")
                } else {
                    format!("v{v}")
                });
            }
            s.join(" or ")
        };
        let Some(bytes) = found else {
            let ok = (w.allows_initial() && !h.carried)
                || h.writes.values().any(|r| r.delete && w.allows(r.span()));
            return if ok {
                Ok(())
            } else {
                Err(format!("absent; allowed: {}", allowed()))
            };
        };
        let shown = String::from_utf8_lossy(&bytes[..bytes.len().min(24)]).into_owned();
        let Some(v) = version_of(bytes) else {
            return Err(format!(
                "{shown:?}, not a value of this test; allowed: {}",
                allowed()
            ));
        };
        match h.writes.get(&v) {
            Some(r) if !r.delete && w.allows(r.span()) && bytes == race_value(cfg, k, v) => Ok(()),
            Some(r) if !r.delete && w.allows(r.span()) => {
                Err(format!("a torn or foreign v{v}: {shown:?}"))
            }
            Some(_) => Err(format!(
                "v{v}, superseded or not yet written; allowed: {}",
                allowed()
            )),
            None => Err(format!("v{v}, never written; allowed: {}", allowed())),
        }
    }
}

/// Shared state of one run.
struct Run<'a> {
    cfg: &'a RacingConfig,
    seed: u64,
    hist: &'a Histories,
    /// Writers and readers stop.
    stop: AtomicBool,
    /// Each group's current key.
    group_keys: Vec<std::sync::atomic::AtomicU32>,
    writes: AtomicU64,
    reads: AtomicU64,
    overlapping: AtomicU64,
    failure: Mutex<Option<String>>,
}

impl Run<'_> {
    fn fail(&self, what: String) {
        let mut f = self
            .failure
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        f.get_or_insert(format!("seed {}: {what}", self.seed));
        self.stop.store(true, Ordering::SeqCst);
    }

    fn get(&self, store: &dyn KvStore, k: u32) {
        let frontier = self.hist.frontier(k);
        let got = store.get(&race_key(k));
        let end = self.hist.tick();
        let w = Window::live(frontier, end);
        match got {
            Ok(found) => {
                if let Err(e) = self.hist.check(self.cfg, k, w, found.as_deref()) {
                    self.fail(format!("get race/{k:04} returned {e}"));
                }
                self.reads.fetch_add(1, Ordering::Relaxed);
            }
            Err(e) => self.fail(format!("get race/{k:04}: an error: {e}")),
        }
    }

    fn scan(&self, store: &dyn KvStore, from: u32, limit: usize) {
        let frontiers: Vec<u64> = (from..self.cfg.keys)
            .map(|k| self.hist.frontier(k))
            .collect();
        let got = match store.scan(&race_key(from), limit) {
            Ok(g) => g,
            Err(tierkv_core::Error::Unsupported(_)) => return,
            Err(e) => return self.fail(format!("scan from race/{from:04}: an error: {e}")),
        };
        let end = self.hist.tick();
        let mut next = from;
        let mut last = None;
        for (key, value) in &got {
            let Some(k) = key_number(key).filter(|k| (from..self.cfg.keys).contains(k)) else {
                continue; // another test's keys may share the store
            };
            if last.is_some_and(|l| l >= k) {
                return self.fail(format!(
                    "scan from race/{from:04}: race/{k:04} out of order"
                ));
            }
            last = Some(k);
            // Keys skipped before this one must have been allowed to be absent.
            for s in next..=k {
                let w = Window::live(frontiers[(s - from) as usize], end);
                let found = (s == k).then_some(value.as_slice());
                if let Err(e) = self.hist.check(self.cfg, s, w, found) {
                    return self.fail(format!("scan from race/{from:04}: race/{s:04} {e}"));
                }
                self.reads.fetch_add(1, Ordering::Relaxed);
            }
            next = k + 1;
        }
        if got.len() < limit {
            for s in next..self.cfg.keys {
                let w = Window::live(frontiers[(s - from) as usize], end);
                if let Err(e) = self.hist.check(self.cfg, s, w, None) {
                    return self.fail(format!("scan from race/{from:04}: race/{s:04} {e}"));
                }
            }
        }
    }

    fn writer(&self, store: &dyn KvStore, t: usize) {
        let cfg = self.cfg;
        let mut rng = ChaCha8Rng::seed_from_u64(self.seed ^ (t as u64 + 1).wrapping_mul(0x9e37));
        let group = &self.group_keys[t / cfg.writers_per_key.max(1)];
        for _ in 0..cfg.ops_per_writer {
            if self.stop.load(Ordering::SeqCst) {
                return;
            }
            let k = group.load(Ordering::Relaxed);
            if rng.random_range(0..4 * cfg.writers_per_key.max(1)) == 0 {
                let _ = group.compare_exchange(
                    k,
                    rng.random_range(0..cfg.keys),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                );
            }
            if rng.random_range(0..10) == 0 {
                self.get(store, k);
                continue;
            }
            let delete = rng.random_range(0..100) < cfg.delete_pct;
            let (v, overlapping) = self.hist.begin(k, delete);
            let r = if delete {
                store.delete(&race_key(k))
            } else {
                store.put(&race_key(k), &race_value(cfg, k, v))
            };
            match r {
                Ok(()) => {
                    self.hist.ack(k, v);
                    self.writes.fetch_add(1, Ordering::Relaxed);
                    self.overlapping
                        .fetch_add(u64::from(overlapping), Ordering::Relaxed);
                }
                Err(e) => return self.fail(format!("write v{v} of race/{k:04}: {e}")),
            }
        }
    }

    fn reader(&self, store: &dyn KvStore, t: usize) {
        let cfg = self.cfg;
        let mut rng = ChaCha8Rng::seed_from_u64(self.seed ^ (t as u64 + 77).wrapping_mul(0x51ed));
        while !self.stop.load(Ordering::SeqCst) {
            // Readers follow the writers' current keys half of the time.
            let k = if rng.random_bool(0.5) {
                let g = rng.random_range(0..self.group_keys.len());
                self.group_keys[g].load(Ordering::Relaxed)
            } else {
                rng.random_range(0..cfg.keys)
            };
            if rng.random_range(0..100) < cfg.scan_pct {
                self.scan(store, k, rng.random_range(1..=16));
            } else {
                self.get(store, k);
            }
        }
    }

    fn failure(&self) -> Option<String> {
        self.failure
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
    }

    /// Checks every key of a quiescent store (recovered after a cut at `cut`, or at the
    /// end of a clean run with `cut` = u64::MAX).
    fn check_all(&self, store: &dyn KvStore, cut: u64, what: &str) -> u64 {
        for k in 0..self.cfg.keys {
            let w = self.hist.recovered(k, cut);
            let got = store
                .get(&race_key(k))
                .unwrap_or_else(|e| panic!("seed {}: {what}: get race/{k:04}: {e}", self.seed));
            if let Err(e) = self.hist.check(self.cfg, k, w, got.as_deref()) {
                panic!("seed {}: {what}: race/{k:04} holds {e}", self.seed);
            }
            // NOTE: the gate only around the rewrite, never around a call into the store:
            // a cut runs on an engine thread that may hold locks the store call needs.
            let _gate = self
                .hist
                .gate
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            self.hist.resolve(k, got.as_deref().and_then(version_of));
        }
        u64::from(self.cfg.keys)
    }

    fn report(&self, keys_checked: u64) -> RacingReport {
        RacingReport {
            writes: self.writes.load(Ordering::Relaxed),
            reads: self.reads.load(Ordering::Relaxed),
            overlapping_writes: self.overlapping.load(Ordering::Relaxed),
            keys_checked,
        }
    }
}

fn new_run<'a>(cfg: &'a RacingConfig, hist: &'a Histories) -> Run<'a> {
    let seed = crate::rig::env_seed().unwrap_or(cfg.seed);
    eprintln!("racing-writers seed {seed} (replay with TIERKV_SEED={seed})");
    let groups = cfg.writers.div_ceil(cfg.writers_per_key.max(1)).max(1);
    Run {
        cfg,
        seed,
        hist,
        stop: AtomicBool::new(false),
        group_keys: (0..groups)
            .map(|g| std::sync::atomic::AtomicU32::new(g as u32 % cfg.keys.max(1)))
            .collect(),
        writes: AtomicU64::new(0),
        reads: AtomicU64::new(0),
        overlapping: AtomicU64::new(0),
        failure: Mutex::new(None),
    }
}

/// Racing-writer runs over one store and the stores recovered from it: the histories
/// carry what each run left to the next.
pub struct Racing {
    hist: Arc<Histories>,
}

impl Racing {
    /// For stores that hold no `race/` keys yet; `keys` must match the configs' `keys`.
    pub fn new(keys: u32) -> Self {
        Racing {
            hist: Arc::new(Histories::new(keys.max(1))),
        }
    }

    /// Runs racing writers and readers on `store` until every writer did its operations;
    /// panics (with the seed) on the first read that is not linearizable, then checks
    /// every key of the quiescent store.
    pub fn run(&mut self, store: &Arc<dyn KvStore>, cfg: &RacingConfig) -> RacingReport {
        let run = new_run(cfg, &self.hist);
        run_threads(&run, store, || {});
        if let Some(f) = run.failure() {
            panic!("{f}");
        }
        let n = run.check_all(&**store, u64::MAX, "after the run");
        run.report(n)
    }

    /// Like [`Racing::run`], but once `cut_after` writes are acknowledged, while writers
    /// and readers still run (and are still judged), calls `cut` (which takes a crash
    /// image, say); then stops the threads, drops `store`, opens the recovered store with
    /// `reopen(cut's result)`, checks every key by the crash rule and returns the
    /// recovered store.
    pub fn crash<I>(
        &mut self,
        store: Arc<dyn KvStore>,
        cfg: &RacingConfig,
        cut_after: u64,
        cut: impl FnOnce() -> I,
        reopen: impl FnOnce(I) -> Arc<dyn KvStore>,
    ) -> (Arc<dyn KvStore>, RacingReport) {
        let run = new_run(cfg, &self.hist);
        let mut image = None;
        let mut cut_tick = u64::MAX;
        run_threads(&run, &store, || {
            while run.writes.load(Ordering::SeqCst) < cut_after && !run.stop.load(Ordering::SeqCst)
            {
                std::thread::yield_now();
            }
            // NOTE: reads stay judged through the cut: taking an image does not touch the
            // live store, so readers inside the crash window must still be linearizable.
            cut_tick = run.hist.tick();
            image = Some(cut());
            run.stop.store(true, Ordering::SeqCst);
        });
        if let Some(f) = run.failure() {
            panic!("{f}");
        }
        drop(store);
        let image = image.unwrap_or_else(|| panic!("seed {}: the cut never ran", run.seed));
        let recovered = reopen(image);
        let n = run.check_all(&*recovered, cut_tick, "after the crash");
        (recovered, run.report(n))
    }
}

impl Racing {
    /// A handle with which crash-point handlers check stores recovered from images cut
    /// while a later [`Racing::run`] with `cfg` goes on (see [`Cuts`]).
    pub fn cuts(&self, cfg: &RacingConfig) -> Cuts {
        Cuts {
            hist: self.hist.clone(),
            cfg: cfg.clone(),
        }
    }
}

/// Crash images cut at named crash points while a [`Racing::run`] goes on (issue 17,
/// item 2): a handler, on whatever engine thread reached the point, calls [`Cuts::cut`]
/// with a closure that takes the image and recovers a store from it; every key of that
/// store is judged by the crash rule of the module doc with the cut at the tick taken
/// just before the image (and writes that began after the image refused).
///
/// Thread safety: `Send + Sync`; cuts from several threads at once are fine. A cut after
/// the writers stopped judges every key by its final state (which the run's final check
/// writes back into the histories, a key at a time, between cuts).
#[derive(Clone)]
pub struct Cuts {
    hist: Arc<Histories>,
    cfg: RacingConfig,
}

impl Cuts {
    /// Takes a crash image with `recover` (which returns the store recovered from it, or
    /// `Err` with why it could not be recovered) and checks every key of that store.
    /// `Ok(Some(keys))`: keys checked; `Err`: the first violation, or the recovery error.
    pub fn cut<S: KvStore + ?Sized>(
        &self,
        recover: impl FnOnce() -> Result<Arc<S>, String>,
    ) -> Result<u64, String> {
        let _gate = self
            .hist
            .gate
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let cut = self.hist.tick();
        let store = recover()?;
        let end = self.hist.tick();
        for k in 0..self.cfg.keys {
            let mut w = self.hist.recovered(k, cut);
            w.end = end;
            let got = store
                .get(&race_key(k))
                .map_err(|e| format!("get race/{k:04}: {e}"))?;
            self.hist
                .check(&self.cfg, k, w, got.as_deref())
                .map_err(|e| format!("race/{k:04} holds {e}"))?;
        }
        Ok(u64::from(self.cfg.keys))
    }
}

/// One [`Racing::run`] on a store without `race/` keys.
pub fn run_racing(store: &Arc<dyn KvStore>, cfg: &RacingConfig) -> RacingReport {
    Racing::new(cfg.keys).run(store, cfg)
}

/// Runs the writers and readers; `main` runs on the calling thread meanwhile.
fn run_threads(run: &Run<'_>, store: &Arc<dyn KvStore>, main: impl FnOnce()) {
    std::thread::scope(|s| {
        let writers: Vec<_> = (0..run.cfg.writers)
            .map(|t| {
                let store = store.clone();
                s.spawn(move || run.writer(&*store, t))
            })
            .collect();
        for t in 0..run.cfg.readers {
            let store = store.clone();
            s.spawn(move || run.reader(&*store, t));
        }
        main();
        for w in writers {
            if let Err(e) = w.join() {
                run.stop.store(true, Ordering::SeqCst);
                std::panic::resume_unwind(e);
            }
        }
        run.stop.store(true, Ordering::SeqCst);
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> RacingConfig {
        RacingConfig::default()
    }

    #[test]
    fn values_name_their_version_and_are_pure() {
        let c = cfg();
        let v = race_value(&c, 3, 17);
        assert_eq!(version_of(&v), Some(17));
        assert_eq!(v, race_value(&c, 3, 17));
        assert_ne!(v, race_value(&c, 4, 17));
        assert!(c.value_len.contains(&v.len()));
    }

    #[test]
    fn the_crash_rule_refuses_a_superseded_value_and_allows_an_overlapping_one() {
        let c = cfg();
        let h = Histories::new(1);
        let (v1, _) = h.begin(0, false);
        let (v2, _) = h.begin(0, false);
        h.ack(0, v1);
        h.ack(0, v2);
        let (v3, _) = h.begin(0, false);
        h.ack(0, v3);
        let (v4, _) = h.begin(0, true);
        let cut = h.tick();
        let w = h.recovered(0, cut);
        let val = |v| race_value(&c, 0, v);
        assert!(h.check(&c, 0, w, Some(&val(v1))).is_err());
        assert!(h.check(&c, 0, w, Some(&val(v2))).is_err());
        assert!(h.check(&c, 0, w, Some(&val(v3))).is_ok());
        assert!(h.check(&c, 0, w, None).is_ok(), "delete v{v4} in flight");
        h.ack(0, v4);
        let w = h.recovered(0, u64::MAX);
        assert!(h.check(&c, 0, w, Some(&val(v3))).is_err());
        assert!(h.check(&c, 0, w, None).is_ok());
        let mut torn = val(v3);
        torn.push(b'!');
        let w = h.recovered(0, cut);
        assert!(h.check(&c, 0, w, Some(&torn)).unwrap_err().contains("torn"));
    }
}
