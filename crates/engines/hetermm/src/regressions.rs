//! Regression tests of the second review (issue 22), each named after what it reproduces,
//! on a memory without background threads (the test decides when blocks are flushed,
//! marked and reorganised) and with a plain variable or a tierkv index standing in for the
//! plugged-in index.

#![allow(clippy::unwrap_used, reason = "tests")]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use tierkv_core::media::pmem::{CrashImageOptions, PmemPool};
use tierkv_core::{EngineSpec, Error, KvStore, Limits, Result, Tier};

use crate::format::record::MAX_TS;
use crate::mem::{HeterMem, HookPoint, TestHook};
use crate::options::HeterOptions;
use crate::plugin::{CoreIndex, PluggedIndex};
use crate::recovery::open_memory;
use crate::recovery::tests::pool_config;
use crate::reorg::Reason;
use crate::store::HeterStore;

/// A memory of 64 DRAM pages of 4 KiB, blocks of 32 KiB, in an 8 MiB pool.
struct Rig {
    mem: Arc<HeterMem>,
    pool: Arc<PmemPool>,
    dir: tempfile::TempDir,
}

fn options(extra: &str) -> HeterOptions {
    let spec = format!("hetermm@page_bits=12,block_bits=15{extra}");
    let spec: EngineSpec = spec.parse().unwrap();
    HeterOptions::from_params(spec.params(), 64 * 4096).unwrap()
}

impl Rig {
    fn new(extra: &str) -> Rig {
        let dir = tempfile::tempdir().unwrap();
        let pool = PmemPool::create(&pool_config(dir.path().join("pool"))).unwrap();
        let (mem, _) = open_memory(pool.clone(), options(extra), true).unwrap();
        Rig {
            mem: Arc::new(mem),
            pool,
            dir,
        }
    }

    /// A whole put under one guard (`old` is the key's current address); its new address.
    fn put(&self, key: &[u8], value: &[u8], old: Option<u64>) -> u64 {
        let g = self.mem.pin().unwrap();
        self.mem.reserve(&g, key.len(), value.len()).unwrap();
        self.mem.write_value(&g, old, key, value).unwrap()
    }

    fn flush_oldest(&self) {
        let mut st = self.mem.flusher.lock();
        self.mem.flush_oldest(&mut st).unwrap();
    }
}

/// Polls `done` for up to two seconds.
fn eventually(what: &str, done: impl Fn() -> bool) {
    let until = Instant::now() + Duration::from_secs(2);
    while !done() {
        assert!(Instant::now() < until, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Bug 1: a reader pinned while the key was updated still holds the old address; the old
/// record is marked (its replacement flushed) and its block reorganised away while the
/// reader is still pinned — the reader must still read it, not get `Corruption`.
///
/// The interleaving: the writer holds its reservation (pinned) in block 1; the flusher
/// begins to flush block 1 (it moves off_ReadOnly and waits for the writer's epoch); the
/// reader pins only now — so the flusher does not wait for it — and reads the index; the
/// writer installs the new version and unpins; the flusher flushes block 1 and marks the
/// old record in block 0; block 0 is reorganised; the reader reads.
#[test]
fn a_reader_pinned_before_an_update_reads_the_old_record_after_its_block_is_reorganised() {
    let rig = Rig::new("");
    let mem = rig.mem.clone();
    let x = rig.put(b"k", b"old value", None);
    rig.flush_oldest();
    assert!(x < mem.off_dram(), "the old version is in pmem");
    let g = mem.pin().unwrap();
    mem.reserve(&g, 1, 9).unwrap();
    let marks_before = mem.counters.marks.get();
    let reorganised = AtomicBool::new(false);
    let read_now = AtomicBool::new(false);
    let pinned = AtomicBool::new(false);
    let epoch = mem.threads.epoch();
    std::thread::scope(|s| {
        let flusher = s.spawn(|| {
            let mut st = mem.flusher.lock();
            mem.flush_oldest(&mut st).unwrap();
        });
        eventually("the flusher's synchronization", || {
            mem.threads.epoch() > epoch
        });
        // The reader pins after the flusher's synchronization began.
        let reader = s.spawn(|| {
            let r = mem.pin().unwrap();
            pinned.store(true, Ordering::SeqCst);
            eventually("the test to let the reader read", || {
                read_now.load(Ordering::SeqCst)
            });
            let got = mem.read_value(&r, x, b"k");
            drop(r);
            got
        });
        eventually("the reader to pin", || pinned.load(Ordering::SeqCst));
        mem.write_value(&g, Some(x), b"k", b"new value").unwrap();
        drop(g);
        eventually("the old record's mark", || {
            mem.counters.marks.get() > marks_before
        });
        let reorganiser = s.spawn(|| {
            let done = mem.reorganise(0, Reason::Sparse).unwrap();
            reorganised.store(true, Ordering::SeqCst);
            done
        });
        // Before the fix the reorganisation finished here, with the reader still pinned.
        let until = Instant::now() + Duration::from_millis(300);
        while !reorganised.load(Ordering::SeqCst) && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(1));
        }
        read_now.store(true, Ordering::SeqCst);
        let got = reader.join().unwrap();
        assert_eq!(
            got.unwrap(),
            b"old value",
            "a pinned reader lost the record it was reading"
        );
        assert!(reorganiser.join().unwrap(), "block 0 was reorganised");
        flusher.join().unwrap();
    });
    let _ = (&rig.pool, &rig.dir);
}

/// Recovers a crash image of the rig's pool (everything above was persisted) with the index
/// `variant`.
fn crash_and_recover(rig: &Rig, variant: &str) -> Arc<HeterStore> {
    let path = rig.dir.path().join("image");
    let image = rig.pool.crash_image(1, CrashImageOptions::torn_words());
    std::fs::write(&path, image.unwrap()).unwrap();
    let pool = PmemPool::open(&pool_config(path)).unwrap();
    let index = CoreIndex::new(variant).unwrap();
    HeterStore::open(pool, options(""), Limits::default(), index, false).unwrap()
}

/// Writer B puts "winner" and pauses after its log entry, before its index update; writer
/// A — a put of "loser" or a delete — runs its first attempt (a newer timestamp), pauses
/// after its entry; B installs and returns; A's compare-and-swap fails, and its retry
/// fails. Returns what each returned and the rig (A's record is flushed when
/// `flush_loser`).
fn lost_race_then_failure(a_deletes: bool, flush_loser: bool) -> (Rig, Arc<CoreIndex>) {
    let rig = Rig::new("");
    let mem = rig.mem.clone();
    let index = CoreIndex::new("lockfree").unwrap();
    if a_deletes {
        PluggedIndex::put(&*index, &*mem, b"k", b"first").unwrap();
        rig.flush_oldest();
    }
    let b_logged = Arc::new(AtomicBool::new(false));
    let a_logged = Arc::new(AtomicBool::new(false));
    let release_b = Arc::new(AtomicBool::new(false));
    let release_a = Arc::new(AtomicBool::new(false));
    let a_value: &'static [u8] = if a_deletes { b"" } else { b"loser" };
    let hook: TestHook = {
        let (b_logged, a_logged) = (b_logged.clone(), a_logged.clone());
        let (release_b, release_a) = (release_b.clone(), release_a.clone());
        Arc::new(move |point, value| {
            let wait =
                |flag: &AtomicBool| eventually("the test's go", || flag.load(Ordering::SeqCst));
            match (point, value) {
                (HookPoint::Logged, b"winner") => {
                    b_logged.store(true, Ordering::SeqCst);
                    wait(&release_b);
                }
                (HookPoint::Logged, v) if v == a_value => {
                    a_logged.store(true, Ordering::SeqCst);
                    wait(&release_a);
                }
                (HookPoint::Write, v) if v == a_value && a_logged.load(Ordering::SeqCst) => {
                    return Err(Error::no_space(Tier::Pmem, "injected: the retry fails"));
                }
                _ => {}
            }
            Ok(())
        })
    };
    *mem.hook.lock() = Some(hook);
    std::thread::scope(|s| {
        let b = s.spawn(|| PluggedIndex::put(&*index, &*mem, b"k", b"winner"));
        eventually("B's entry", || b_logged.load(Ordering::SeqCst));
        let a = s.spawn(|| {
            if a_deletes {
                PluggedIndex::delete(&*index, &*mem, b"k")
            } else {
                PluggedIndex::put(&*index, &*mem, b"k", b"loser")
            }
        });
        eventually("A's entry", || a_logged.load(Ordering::SeqCst));
        release_b.store(true, Ordering::SeqCst);
        b.join().unwrap().expect("B's put is acknowledged");
        release_a.store(true, Ordering::SeqCst);
        assert!(a.join().unwrap().is_err(), "A's retry was made to fail");
    });
    *mem.hook.lock() = None;
    let g = mem.pin().unwrap();
    let at = PluggedIndex::<HeterMem>::address(&*index, b"k").unwrap();
    assert_eq!(mem.read_value(&g, at.0, b"k").unwrap(), b"winner");
    drop(g);
    if flush_loser {
        let last_page = mem.regions.next_page.load(Ordering::SeqCst) - 1;
        while mem.geo.block_of(mem.off_dram()) <= mem.geo.block_of_page(last_page) {
            rig.flush_oldest();
        }
    }
    (rig, index)
}

/// Bug 2: writer A's first attempt took its timestamp after writer B's and committed its
/// entry; it lost the compare-and-swap to B, and its retry failed. For a put, once the flush
/// frontier passed A's record (an orphan, marked), recovery took A's entry for a flushed
/// newest version of the key and dropped B's acknowledged record: the key was gone. For a
/// delete, A's entry, newer than B's put, deleted the key at recovery.
fn assert_the_acknowledged_winner_survives(a_deletes: bool, flush_loser: bool) {
    let (rig, _index) = lost_race_then_failure(a_deletes, flush_loser);
    let store = crash_and_recover(&rig, "lockfree");
    assert_eq!(
        store.get(b"k").unwrap().as_deref(),
        Some(&b"winner"[..]),
        "B's acknowledged put was lost"
    );
    store.close().unwrap();
}

#[test]
fn an_acknowledged_lockfree_put_survives_a_crash_after_a_newer_attempt_lost_its_race_and_failed() {
    assert_the_acknowledged_winner_survives(false, true);
}

#[test]
fn an_acknowledged_lockfree_put_survives_a_crash_after_a_delete_lost_its_race_and_failed() {
    assert_the_acknowledged_winner_survives(true, false);
}

/// Bug 3: the in-place update came before the log append, and the append could still fail:
/// the reclaimer took the thread's log page after `reserve` made room in it, and no pmem
/// was left for a new one. The put failed — and its value was visible.
#[test]
fn a_put_whose_log_append_fails_leaves_the_value_unchanged() {
    let rig = Rig::new("");
    let mem = rig.mem.clone();
    let a = rig.put(b"k", b"v1", None);
    let log = mem.oplog.as_ref().unwrap();
    log.close_current();
    let g = mem.pin().unwrap();
    mem.reserve(&g, 1, 2).unwrap();
    assert!(
        log.frozen_oldest().is_some(),
        "the thread's page is taken away"
    );
    while mem.nvm.alloc.alloc_chunks(0x484d_00ff, 1).is_ok() {}
    while mem.nvm.reserve.take("the test").is_ok() {}
    let r = mem.write_value(&g, Some(a), b"k", b"v2");
    drop(g);
    assert!(r.is_err(), "no pmem for the log entry: {r:?}");
    let g = mem.pin().unwrap();
    assert_eq!(
        mem.read_value(&g, a, b"k").unwrap(),
        b"v1",
        "a failed put changed the value"
    );
}

/// Bug 5 (timestamps): a clock at the end of its 61 bits handed out a timestamp that the
/// meta word cannot hold (`ts << 3` overflows to 0) and the record became unreadable. Writes
/// are refused cleanly well before that now.
#[test]
fn a_clock_at_its_end_refuses_writes_and_damages_nothing() {
    let rig = Rig::new("");
    let mem = rig.mem.clone();
    let index = CoreIndex::new("btree").unwrap();
    PluggedIndex::put(&*index, &*mem, b"k", b"v").unwrap();
    mem.clock.store(MAX_TS, Ordering::SeqCst);
    for v in [&b"one"[..], b"two", b"three"] {
        let r = PluggedIndex::put(&*index, &*mem, b"k", v);
        assert!(matches!(r, Err(Error::NoSpace { .. }) | Ok(())), "{r:?}");
    }
    let g = mem.pin().unwrap();
    let at = PluggedIndex::<HeterMem>::address(&*index, b"k").unwrap();
    let got = mem.read_value(&g, at.0, b"k");
    assert!(got.is_ok(), "the record was damaged: {got:?}");
    drop(g);
    assert!(
        matches!(
            PluggedIndex::put(&*index, &*mem, b"other", b"x"),
            Err(Error::NoSpace { .. })
        ),
        "writes are refused"
    );
}

/// Item 6: the descriptor declares the value limit the engine enforces with its default
/// pages (the facade used to advertise 1 MiB and the engine refused past 32 KiB).
#[test]
fn the_declared_value_limit_is_the_largest_value_a_default_store_takes() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = pool_config(dir.path().join("pool"));
    config.size = 32 << 20;
    let pool = PmemPool::create(&config).unwrap();
    let opts = HeterOptions {
        dram_budget: 4 << 20,
        ..HeterOptions::default()
    };
    let store = HeterStore::open(
        pool,
        opts,
        Limits::default(),
        CoreIndex::new("hash").unwrap(),
        true,
    )
    .unwrap();
    // The promise holds for the longest default key: a page less its header holds both.
    let max = crate::DESCRIPTOR.max_value_len.unwrap();
    let key = vec![b'k'; tierkv_core::api::options::DEFAULT_MAX_KEY_LEN];
    store.put(&key, &vec![1; max]).unwrap();
    assert_eq!(store.get(&key).unwrap().map(|v| v.len()), Some(max));
    let e = store.put(&key, &vec![1; max + 1]).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
    store.close().unwrap();
}

/// Item 6: `dram_bytes` counts the index (keys, addresses, structure), not only the pages.
#[test]
fn dram_bytes_count_the_index() {
    let rig = Rig::new("");
    let index = CoreIndex::new("btree").unwrap();
    for i in 0..1000u32 {
        PluggedIndex::put(&*index, &*rig.mem, format!("key{i:017}").as_bytes(), b"v").unwrap();
    }
    PluggedIndex::delete(&*index, &*rig.mem, b"key00000000000000000").unwrap();
    let bytes = PluggedIndex::<HeterMem>::dram_bytes(&*index);
    assert_eq!(bytes, 999 * (20 + 64), "keys and their entries");
}

/// Item 6: a run that cannot be freed after a failure is reported (it leaks until the next
/// recovery), not ignored.
#[test]
fn a_run_that_cannot_be_freed_after_a_failure_is_reported() {
    let rig = Rig::new("");
    let nvm = &rig.mem.nvm;
    let off = nvm.alloc_block().unwrap();
    let e = nvm.free_after(off, Error::no_space(Tier::Pmem, "the first failure"));
    assert!(
        matches!(e, Error::NoSpace { .. }),
        "freed: the first error stands"
    );
    let e = nvm.free_after(off, Error::no_space(Tier::Pmem, "the first failure"));
    assert!(e.is_corruption(), "{e}");
    let text = e.to_string();
    assert!(
        text.contains("the first failure") && text.contains("could not be freed"),
        "{text}"
    );
}

/// Bug B of the release stress runs (`tierkv-stress --engine hetermm:lockfree --mode kill
/// --pmem-mode tracked --seed 1105 --writers-per-key 4`: a live get failed with `compact
/// block 30 holds no record at offset 118312`). On a lock-free index a delete's first
/// attempt registered the invalidation of the key's record at once, before its
/// compare-and-swap; an in-place update of the same record won the race and put the same
/// address back, the delete's retry failed — and the record, still the key's, was marked:
/// reorganisation dropped it and the next get found nothing there. Readers raced against
/// that reorganisation: the get below runs after it, as any later reader would.
#[test]
fn a_lockfree_delete_that_lost_to_an_in_place_update_and_failed_leaves_the_record_readable() {
    let rig = Rig::new("");
    let mem = rig.mem.clone();
    let index = CoreIndex::new("lockfree").unwrap();
    PluggedIndex::put(&*index, &*mem, b"k", b"first").unwrap();
    let at = PluggedIndex::<HeterMem>::address(&*index, b"k").unwrap();
    let d_waiting = Arc::new(AtomicBool::new(false));
    let release_d = Arc::new(AtomicBool::new(false));
    let d_attempts = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let hook: TestHook = {
        let (d_waiting, release_d, d_attempts) =
            (d_waiting.clone(), release_d.clone(), d_attempts.clone());
        Arc::new(move |point, value| {
            if (point, value) == (HookPoint::Write, &b""[..]) {
                if d_attempts.fetch_add(1, Ordering::SeqCst) > 0 {
                    return Err(Error::no_space(Tier::Pmem, "injected: the retry fails"));
                }
                d_waiting.store(true, Ordering::SeqCst);
                eventually("the test's go", || release_d.load(Ordering::SeqCst));
            }
            Ok(())
        })
    };
    *mem.hook.lock() = Some(hook);
    std::thread::scope(|s| {
        let d = s.spawn(|| PluggedIndex::delete(&*index, &*mem, b"k"));
        eventually("the delete's first attempt", || {
            d_waiting.load(Ordering::SeqCst)
        });
        PluggedIndex::put(&*index, &*mem, b"k", b"second").unwrap();
        assert_eq!(
            PluggedIndex::<HeterMem>::address(&*index, b"k"),
            Some(at),
            "the put went in place"
        );
        release_d.store(true, Ordering::SeqCst);
        assert!(
            d.join().unwrap().is_err(),
            "the delete's retry was made to fail"
        );
    });
    *mem.hook.lock() = None;
    assert_eq!(
        d_attempts.load(Ordering::SeqCst),
        2,
        "the delete lost its race once"
    );
    assert_eq!(PluggedIndex::<HeterMem>::address(&*index, b"k"), Some(at));
    // Flush (marks applied), then reorganise the record's block.
    {
        let mut st = mem.flusher.lock();
        mem.flush_all(&mut st).unwrap();
    }
    let b = mem.geo.block_of(at.0);
    assert!(
        mem.reorganise(b, Reason::Sparse).unwrap(),
        "block {b} reorganised"
    );
    assert_eq!(
        PluggedIndex::get(&*index, &*mem, b"k").unwrap().as_deref(),
        Some(&b"second"[..]),
        "the key's record was dropped by reorganisation"
    );
}

/// Noted last session: a flush that failed after its block's directory word was durable
/// (applying the marks on older blocks, say) poisoned the store, but the flusher went on
/// and retried it — publishing the block a second time, under a second generation-0 word,
/// so recovery refused the store ("block 0 is named at … and at …"). A poisoned store no
/// longer flushes; it reopens with everything acknowledged.
#[test]
fn a_flush_that_fails_after_publishing_is_not_retried_and_the_store_reopens() {
    let dir = tempfile::tempdir().unwrap();
    let pool = PmemPool::create(&pool_config(dir.path().join("pool"))).unwrap();
    let index = CoreIndex::new("btree").unwrap();
    let store =
        HeterStore::open(pool.clone(), options(""), Limits::default(), index, true).unwrap();
    let failed = Arc::new(AtomicBool::new(false));
    let hook: TestHook = {
        let failed = failed.clone();
        Arc::new(move |point, _| {
            if point == HookPoint::Published && !failed.swap(true, Ordering::SeqCst) {
                return Err(Error::corruption(
                    Tier::Pmem,
                    0,
                    "injected after publishing",
                ));
            }
            Ok(())
        })
    };
    *store.memory().hook.lock() = Some(hook);
    // Fill DRAM until the flusher flushes on its own (and fails): then it still wants to.
    let value = vec![5u8; 1000];
    let mut acked = 0u32;
    for i in 0..10_000u32 {
        match store.put(format!("k{i:05}").as_bytes(), &value) {
            Ok(()) => acked = i + 1,
            Err(Error::Poisoned(_)) => break,
            Err(e) => panic!("put {i}: {e}"),
        }
    }
    assert!(failed.load(Ordering::SeqCst), "the flusher's flush failed");
    // Time for a retry, if the flusher still made one.
    std::thread::sleep(Duration::from_millis(200));
    assert!(matches!(store.close(), Err(Error::Poisoned(_))));
    drop(store);
    let path = dir.path().join("image");
    std::fs::write(
        &path,
        pool.crash_image(3, CrashImageOptions::lines()).unwrap(),
    )
    .unwrap();
    let pool = PmemPool::open(&pool_config(path)).unwrap();
    let index = CoreIndex::new("btree").unwrap();
    let store = HeterStore::open(pool, options(""), Limits::default(), index, false)
        .unwrap_or_else(|e| panic!("the store does not reopen: {e}"));
    for i in 0..acked {
        assert_eq!(
            store.get(format!("k{i:05}").as_bytes()).unwrap().as_deref(),
            Some(&value[..]),
            "k{i:05}"
        );
    }
    store.close().unwrap();
}

/// Stress (pmem-image, racing writers: hash 2003, lockfree 2005, 1006, 3051) failed with
/// `pages array slot of page N still holds page M`, N = M + the ring's length and M the
/// first page of a block. Reservations were bounded by `off_dram`, which a flush moves
/// before it unmaps the block's pages; a writer holding a free page — possible when the
/// window has holes, here the tail block closed by a forced flush that then failed (the
/// full-pool path) — reserved page M + ring length in between and found its slot held.
/// Now they are bounded by `unmapped_below`, moved after the unmap.
#[test]
fn a_writer_never_maps_into_a_slot_the_flushed_block_still_holds() {
    let rig = Rig::new("");
    let ring = rig.mem.ring.len() as u64;
    let ppb = rig.mem.geo.pages_per_block();
    let value = vec![7u8; 300];
    let mut i = 0u32;
    let put_until = |page: u64, i: &mut u32| {
        while rig.mem.regions.next_page.load(Ordering::SeqCst) < page {
            rig.put(format!("k{i:06}").as_bytes(), &value, None);
            *i += 1;
        }
    };
    // Pages into the middle of block 2, then a forced flush that closes block 2 (its
    // unused pages become holes) and fails after flushing block 0.
    put_until(2 * ppb + 3, &mut i);
    let flushes = Arc::new(std::sync::atomic::AtomicU32::new(0));
    let hook: TestHook = {
        let flushes = flushes.clone();
        Arc::new(move |point, _| {
            if point == HookPoint::Flushing && flushes.fetch_add(1, Ordering::SeqCst) == 1 {
                return Err(Error::no_space(
                    Tier::Pmem,
                    "injected: no run for the block",
                ));
            }
            Ok(())
        })
    };
    *rig.mem.hook.lock() = Some(hook);
    {
        let mut st = rig.mem.flusher.lock();
        assert!(
            rig.mem.flush_all(&mut st).is_err(),
            "the forced flush fails"
        );
    }
    *rig.mem.hook.lock() = None;
    let m = rig.mem.geo.page_of(rig.mem.off_dram());
    assert_eq!(m, ppb, "block 0 flushed, block 1 not");
    // Fill the window of block 1: free pages remain (the holes of block 2).
    put_until(m + ring, &mut i);
    assert!(rig.mem.pages.free_count() > 0, "the window has holes");
    let (tx, rx) = std::sync::mpsc::channel::<Result<()>>();
    let mem = rig.mem.clone();
    let hook: TestHook = Arc::new(move |point, _| {
        if point == HookPoint::Freeing {
            // Block 1 is past off_dram, its pages still mapped: a writer needs page
            // M + ring length, whose slot block 1's first page M holds.
            let (mem, tx, v) = (mem.clone(), tx.clone(), vec![9u8; 300]);
            std::thread::spawn(move || {
                let r = (|| {
                    for j in 0..32u32 {
                        let g = mem.pin()?;
                        let key = format!("w{j:04}");
                        mem.reserve(&g, key.len(), v.len())?;
                        mem.write_value(&g, None, key.as_bytes(), &v)?;
                    }
                    Ok(())
                })();
                let _ = tx.send(r);
            });
            std::thread::sleep(Duration::from_millis(300));
        }
        Ok(())
    });
    *rig.mem.hook.lock() = Some(hook);
    rig.flush_oldest();
    *rig.mem.hook.lock() = None;
    rx.recv_timeout(Duration::from_secs(20))
        .expect("the writer finished")
        .unwrap_or_else(|e| panic!("a writer racing the flusher's freeing stage failed: {e}"));
}

/// Stress space seed 3271 ('free_chunk of offset …, which is not the start of a tagged chunk
/// allocation') and the lockfree racing test ('no hetermm block header here (bad magic)'):
/// the flusher took the cell of a block to apply a mark (a duplicate: a record marked
/// twice), the reclaimer dropped the block meanwhile — every record marked, so nothing to
/// copy — and freed its run, which was allocated again; the flusher then locked the stale
/// cell and set invalid bits in the run, now someone else's.
///
/// The interleaving: block 0's records are all marked (their keys updated in block 1, which
/// is flushed); a duplicate mark of one of them is applied, and between taking block 0's
/// cell and locking it the hook reorganises block 0 (dropped, run freed) and allocates and
/// writes the run again. The run's new contents must stay as written.
#[test]
fn a_mark_never_lands_in_the_run_of_a_block_the_reclaimer_dropped_meanwhile() {
    let rig = Rig::new("");
    let mem = rig.mem.clone();
    let old: Vec<u64> = (0..8u8)
        .map(|i| rig.put(&[b'k', i], &[i; 200], None))
        .collect();
    rig.flush_oldest();
    let run = mem.blocks.info(0).unwrap().lock().off;
    for (i, &x) in old.iter().enumerate() {
        rig.put(&[b'k', i as u8], &[0xee; 200], Some(x));
    }
    rig.flush_oldest();
    rig.flush_oldest();
    assert_eq!(
        mem.blocks.info(0).unwrap().lock().live,
        0,
        "block 0's records are all marked"
    );
    let pattern = vec![0u8; 64 * 1024];
    let reused = Arc::new(std::sync::Mutex::new(None));
    let hook: TestHook = {
        let (mem, reused, pattern) = (mem.clone(), reused.clone(), pattern.clone());
        Arc::new(move |point, value| {
            if point != HookPoint::Marking || value != 0u64.to_le_bytes() {
                return Ok(());
            }
            let mut reused = reused.lock().unwrap();
            if reused.is_none() {
                assert!(mem.reorganise(0, Reason::Sparse)?, "block 0 was dropped");
                assert!(mem.blocks.info(0).is_none());
                let off = mem.nvm.alloc_block()?;
                let len = mem.nvm.chunks_for(mem.geo.block_size()) * mem.nvm.sb.chunk_size;
                let len = len.min(pattern.len() as u64) as usize;
                mem.pool().write(off, &pattern[..len])?;
                mem.pool().persist(off, len)?;
                *reused = Some((off, len));
            }
            Ok(())
        })
    };
    *mem.hook.lock() = Some(hook);
    let marked = mem.apply_marks(&old[..1]);
    *mem.hook.lock() = None;
    let (off, len) = reused.lock().unwrap().expect("the hook ran");
    assert_eq!(off, run, "the dropped block's run was allocated again");
    marked.unwrap_or_else(|e| panic!("a mark after the drop failed: {e}"));
    assert!(
        mem.pool().read(off, len).unwrap() == &pattern[..len],
        "a mark was written into the run the dropped block had freed"
    );
    let _ = (&rig.pool, &rig.dir);
}

/// Stress seeds 5542 (hash, SIGKILL) and 6533 (btree, power loss): a write batch deleted a
/// key — removed it from the index — and before the batch's entry was committed another
/// thread's single delete of the key found it absent, changed nothing, logged nothing and
/// returned. A crash before the batch's commit then brought back the value both had
/// deleted: the acknowledged delete was lost. The single delete must not return before the
/// removal it saw is durable.
#[test]
fn a_delete_that_finds_a_key_an_uncommitted_batch_removed_waits_for_its_commit() {
    use std::sync::mpsc;
    for variant in ["btree", "hash", "lockfree"] {
        let dir = tempfile::tempdir().unwrap();
        let pool = PmemPool::create(&pool_config(dir.path().join("pool"))).unwrap();
        let index = CoreIndex::new(variant).unwrap();
        let store =
            HeterStore::open(pool.clone(), options(""), Limits::default(), index, true).unwrap();
        store.put(b"k", b"old").unwrap();
        // The batch pauses between applying its operations and writing its entry.
        let (applied_tx, applied_rx) = mpsc::channel::<()>();
        let (release_tx, release_rx) = mpsc::channel::<()>();
        let release_rx = std::sync::Mutex::new(release_rx);
        let applied_tx = std::sync::Mutex::new(applied_tx);
        let hook: TestHook = Arc::new(move |point, _| {
            if point == HookPoint::BatchApplied {
                applied_tx.lock().unwrap().send(()).unwrap();
                release_rx.lock().unwrap().recv().unwrap();
            }
            Ok(())
        });
        *store.memory().hook.lock() = Some(hook);
        let batcher = {
            let store = store.clone();
            std::thread::spawn(move || {
                let mut b = tierkv_core::WriteBatch::new();
                b.delete(b"k");
                b.put(b"other", b"x");
                store.write_batch(&b)
            })
        };
        applied_rx.recv().unwrap();
        let deleted = Arc::new(AtomicBool::new(false));
        let deleter = {
            let (store, deleted) = (store.clone(), deleted.clone());
            std::thread::spawn(move || {
                let r = store.delete(b"k");
                deleted.store(true, Ordering::SeqCst);
                r
            })
        };
        // Give the single delete time to return if it does not wait; then cut the image
        // while the batch is still uncommitted.
        let until = Instant::now() + Duration::from_millis(300);
        while !deleted.load(Ordering::SeqCst) && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(1));
        }
        let acknowledged = deleted.load(Ordering::SeqCst);
        let image = pool
            .crash_image(7, CrashImageOptions::torn_words())
            .unwrap();
        release_tx.send(()).unwrap();
        batcher.join().unwrap().unwrap();
        deleter.join().unwrap().unwrap();
        *store.memory().hook.lock() = None;
        store.close().unwrap();
        // The image: the batch is uncommitted, so it is absent. An acknowledged delete must
        // still hold; an unacknowledged one may be absent too.
        let path = dir.path().join("image");
        std::fs::write(&path, image).unwrap();
        let recovered = HeterStore::open(
            PmemPool::open(&pool_config(path)).unwrap(),
            options(""),
            Limits::default(),
            CoreIndex::new(variant).unwrap(),
            false,
        )
        .unwrap();
        let expected: Option<&[u8]> = if acknowledged { None } else { Some(b"old") };
        assert_eq!(
            recovered.get(b"k").unwrap().as_deref(),
            expected,
            "{variant}: delete acknowledged before the crash: {acknowledged}"
        );
        assert_eq!(recovered.get(b"other").unwrap(), None);
        recovered.close().unwrap();
        assert!(
            !acknowledged,
            "{variant}: the single delete returned while the batch that removed the key was \
             uncommitted"
        );
        drop((store, pool));
        let reopened = HeterStore::open(
            PmemPool::open(&pool_config(dir.path().join("pool"))).unwrap(),
            options(""),
            Limits::default(),
            CoreIndex::new(variant).unwrap(),
            false,
        )
        .unwrap();
        assert_eq!(reopened.get(b"k").unwrap(), None);
        assert_eq!(reopened.get(b"other").unwrap().as_deref(), Some(&b"x"[..]));
    }
}

/// Stress space seed 3271 (2026-11-26, twice): the reclaimer stopped with `free_chunk of
/// offset …, which is not the start of a tagged chunk allocation`, and a saved pool named a
/// block at two runs, both generation 1 — two compact copies of one record, each made from
/// the block's generation-0 copy.
///
/// Cause: `BlockTable::publish` inserted a new block's cell into the table with its info,
/// released the table's map, and only then locked the cell to store the info a second
/// time. A reclaimer that found the block through the map in between (the flusher
/// preempted there, or waiting for the cell's lock while the reclaimer held it) reorganised
/// it — compact copy published at generation 1, old run unpublished and freed, cell and
/// base swapped — before that second store, which put the cell back to the freed run at
/// generation 0 (the base stayed on the copy). From then on the flusher's marks for the
/// block were skipped (base and cell disagree; before 2582305 they went into the freed
/// run), and the next reorganisation copied the block again out of the freed run: a second
/// generation-1 copy, which recovery refuses, and a second free of the run, which the
/// allocator refuses. Since bbd7d0a `publish` writes the cell once, complete, before it can
/// be found.
///
/// The interleaving: block 0 (eight records of 200 bytes: sparse) is flushed; inside
/// `publish`, once its cell can be found, the hook reorganises it; then the flush goes on.
#[test]
fn a_reorganisation_racing_the_publish_of_its_block_is_not_undone() {
    use crate::format::dir::DirEntry;
    use crate::nvm::blocks::Layout;
    let rig = Rig::new("");
    let mem = rig.mem.clone();
    let addrs: Vec<u64> = (0..8u8)
        .map(|i| rig.put(&[b'k', i], &[i; 200], None))
        .collect();
    // Two chunks held below the run the flush takes, freed after it: a later compact copy
    // lands in this hole, as in the fragmented stress pool, not in a run freed above it.
    let hole = mem
        .nvm
        .alloc_compact(2 * mem.nvm.sb.chunk_size, false)
        .unwrap();
    // (the run the flush published, the hook's reorganisation)
    type Seen = Option<(u64, Result<bool>)>;
    let seen: Arc<std::sync::Mutex<Seen>> = Arc::new(std::sync::Mutex::new(None));
    {
        let (weak, seen) = (Arc::downgrade(&mem), seen.clone());
        *mem.blocks.publish_hook.lock() = Some(Arc::new(move |b| {
            let Some(mem) = weak.upgrade() else { return };
            let mut seen = seen.lock().unwrap();
            if b == 0 && seen.is_none() {
                let run = mem.blocks.info(0).map(|c| c.lock().off).unwrap_or_default();
                *seen = Some((run, mem.reorganise(0, Reason::Sparse)));
            }
        }));
    }
    rig.flush_oldest();
    *mem.blocks.publish_hook.lock() = None;
    let (run, raced) = seen.lock().unwrap().take().expect("the hook ran");
    assert!(
        matches!(raced, Ok(true)),
        "the racing reorganisation: {raced:?}"
    );
    assert!(
        hole < run,
        "the hole ({hole}) is below the flushed run ({run})"
    );
    mem.nvm.free_run(hole).unwrap();

    // What the store holds after the flush, a second reorganisation, and a recovery.
    let mut wrong = Vec::new();
    let info = *mem.blocks.info(0).unwrap().lock();
    if info.off == run || info.generation != 1 || !matches!(info.layout, Layout::Compact { .. }) {
        wrong.push(format!(
            "block 0's cell names the run at {} (generation {}, {:?}); the flush published \
             it at {run} and the reorganisation moved it",
            info.off, info.generation, info.layout
        ));
    }
    if mem.blocks.base(0) != Some((info.off, true)) {
        wrong.push(format!(
            "block 0's base is {:?}, its cell says {}",
            mem.blocks.base(0),
            info.off
        ));
    }
    // The copy holds valid records only: nothing to do.
    match mem.reorganise(0, Reason::Sparse) {
        Ok(false) => {}
        other => wrong.push(format!("a second reorganisation of block 0: {other:?}")),
    }
    for &a in &addrs {
        if let Err(e) = crate::nvm::read::locate(rig.pool.as_ref(), &mem.blocks, &mem.geo, a)
            .and_then(|l| crate::nvm::read::read_record(rig.pool.as_ref(), &l).map(drop))
        {
            wrong.push(format!("the record at {a:#x}: {e}"));
        }
    }
    let copies: Vec<(u64, DirEntry)> = mem
        .nvm
        .published()
        .unwrap()
        .into_iter()
        .filter(|(_, e)| matches!(e, DirEntry::Data { block_no: 0, .. }))
        .collect();
    if copies.len() != 1 {
        wrong.push(format!("the directory names block 0 at {copies:?}"));
    }
    let path = rig.dir.path().join("image");
    std::fs::write(
        &path,
        rig.pool.crash_image(5, CrashImageOptions::lines()).unwrap(),
    )
    .unwrap();
    if let Err(e) = open_memory(
        PmemPool::open(&pool_config(path)).unwrap(),
        options(""),
        false,
    ) {
        wrong.push(format!("recovery: {e}"));
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

fn logged_key(i: usize) -> Vec<u8> {
    format!("key{i:05}").into_bytes()
}

fn logged_value(i: usize) -> Vec<u8> {
    format!("value of {i}").into_bytes()
}

/// The crash image (in `dir`, returned) of a store that acknowledged `keys` puts, all still
/// in its log (and most in DRAM): a store whose open replays them.
fn image_with_logged_puts(dir: &tempfile::TempDir, keys: usize) -> std::path::PathBuf {
    let pool = PmemPool::create(&pool_config(dir.path().join("pool"))).unwrap();
    let index = CoreIndex::new("btree").unwrap();
    let store =
        HeterStore::open(pool.clone(), options(""), Limits::default(), index, true).unwrap();
    for i in 0..keys {
        store.put(&logged_key(i), &logged_value(i)).unwrap();
    }
    let path = dir.path().join("image");
    std::fs::write(
        &path,
        pool.crash_image(7, CrashImageOptions::lines()).unwrap(),
    )
    .unwrap();
    store.close().unwrap();
    path
}

/// Task h22 (suspected last session): an open that failed after the log replay had begun
/// dropped its half-open store, and the drop closed it — a forced flush that persisted the
/// records replayed so far, moved the flush frontier and retired the old log blocks, with
/// the entries not replayed yet in them: acknowledged writes were gone at the next open.
/// A store whose open failed writes nothing now; its next open replays the whole log again.
///
/// Each failure point of the open: once the memory is open (directory read, blocks
/// published, the reserve taken: no store exists yet, so nothing closes — its runs are
/// collected by the next open), after the second batch of replayed records, once the index
/// is built, and at the very end. Before the fix only the replay point lost writes (273 of
/// 785): at the last two every entry had been replayed, so the close's forced flush
/// persisted them all before it retired the old logs — a failure there lost nothing, but
/// wrote to a store that had not opened.
#[test]
fn an_open_that_fails_after_the_replay_began_loses_no_acknowledged_write() {
    use crate::recovery::{OPEN_HOOK, OpenPoint, REPLAY_BATCH};
    let keys = 3 * REPLAY_BATCH + 17;
    let points = [
        OpenPoint::Memory,
        OpenPoint::Replayed,
        OpenPoint::Built,
        OpenPoint::Opened,
    ];
    for point in points {
        let dir = tempfile::tempdir().unwrap();
        let path = image_with_logged_puts(&dir, keys);
        let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        OPEN_HOOK.with(|h| {
            let calls = calls.clone();
            *h.borrow_mut() = Some(Box::new(move |at, _| {
                if at != point {
                    return Ok(());
                }
                // The second batch, so that some records were replayed and others not yet.
                if calls.fetch_add(1, Ordering::SeqCst) + 1 == 2 || point != OpenPoint::Replayed {
                    return Err(Error::corruption(Tier::Pmem, 0, "injected in open"));
                }
                Ok(())
            }));
        });
        let failed = HeterStore::open(
            PmemPool::open(&pool_config(path.clone())).unwrap(),
            options(""),
            Limits::default(),
            CoreIndex::new("btree").unwrap(),
            false,
        );
        OPEN_HOOK.with(|h| h.borrow_mut().take());
        assert!(failed.is_err(), "{point:?}: the open did not fail");
        drop(failed);
        if point == OpenPoint::Replayed {
            assert!(
                calls.load(Ordering::SeqCst) >= 2,
                "fewer than two batches were replayed"
            );
        }

        let store = HeterStore::open(
            PmemPool::open(&pool_config(path)).unwrap(),
            options(""),
            Limits::default(),
            CoreIndex::new("btree").unwrap(),
            false,
        )
        .unwrap_or_else(|e| panic!("{point:?}: the store does not reopen: {e}"));
        let lost: Vec<usize> = (0..keys)
            .filter(|&i| store.get(&logged_key(i)).unwrap() != Some(logged_value(i)))
            .collect();
        assert!(
            lost.is_empty(),
            "{point:?}: {} acknowledged writes lost after a failed open, the first {:?}",
            lost.len(),
            &lost[..lost.len().min(5)]
        );
        store.close().unwrap();
    }
}

/// Task h22, found while reading the open path: when the second background thread could not
/// be spawned, the first one's handle was dropped — the thread was detached, not stopped —
/// and went on flushing a store that had failed to open, holding the pool (and its file's
/// lock: the pool could not be opened again by this process).
#[test]
fn an_open_whose_second_thread_cannot_start_stops_the_first() {
    use crate::recovery::{OPEN_HOOK, OpenPoint};
    let dir = tempfile::tempdir().unwrap();
    let config = pool_config(dir.path().join("pool"));
    let pool = PmemPool::create(&config).unwrap();
    let store = HeterStore::open(
        pool,
        options(""),
        Limits::default(),
        CoreIndex::new("btree").unwrap(),
        true,
    )
    .unwrap();
    store.put(b"k", b"v").unwrap();
    store.close().unwrap();
    drop(store);
    let mut spawned = 0;
    OPEN_HOOK.with(|h| {
        *h.borrow_mut() = Some(Box::new(move |at, _| {
            if at == OpenPoint::Spawning {
                spawned += 1;
                if spawned == 2 {
                    return Err(Error::io(
                        "spawn thread",
                        "hetermm:reorg",
                        std::io::Error::other("injected"),
                    ));
                }
            }
            Ok(())
        }));
    });
    let failed = HeterStore::open(
        PmemPool::open(&config).unwrap(),
        options(""),
        Limits::default(),
        CoreIndex::new("btree").unwrap(),
        false,
    );
    OPEN_HOOK.with(|h| h.borrow_mut().take());
    assert!(failed.is_err(), "the open did not fail");
    drop(failed);
    let pool = PmemPool::open(&config)
        .unwrap_or_else(|e| panic!("the pool is still held after the failed open: {e}"));
    let store = HeterStore::open(
        pool,
        options(""),
        Limits::default(),
        CoreIndex::new("btree").unwrap(),
        false,
    )
    .unwrap();
    assert_eq!(store.get(b"k").unwrap().as_deref(), Some(&b"v"[..]));
    store.close().unwrap();
}

/// The blocks the directory names twice with one generation (recovery refuses those).
fn blocks_named_twice(mem: &HeterMem) -> Vec<(u64, u16)> {
    use crate::format::dir::DirEntry;
    let mut seen = std::collections::BTreeMap::new();
    for (_, e) in mem.nvm.published().unwrap() {
        if let DirEntry::Data {
            block_no,
            generation,
            ..
        } = e
        {
            *seen.entry((block_no, generation)).or_insert(0) += 1;
        }
    }
    seen.into_iter()
        .filter(|(_, n)| *n > 1)
        .map(|(bg, _)| bg)
        .collect()
}

/// Task h22 (issue 22, suspected last session): a reorganisation that failed after its
/// compact copy was published (clearing the old copy's directory word failed) poisoned the
/// store, but the reclaimer went on: the block was still the old copy in memory and still
/// sparse, so it was reorganised again — a second copy under the same generation, which
/// recovery refuses ("block N is named at … and at …"). A poisoned store's reclaimer does
/// nothing now; reads go on, writes fail with the poison error, and it reopens with every
/// acknowledged write.
///
/// The pool offers no fault injection (a persist fails only when msync does, and then the
/// pool refuses every later mutation, so a second copy could not be written — the danger is
/// a failure that poisons the store and not the pool), so the hook fails the step.
#[test]
fn a_poisoned_store_does_not_reorganise_a_block_again() {
    let dir = tempfile::tempdir().unwrap();
    let pool = PmemPool::create(&pool_config(dir.path().join("pool"))).unwrap();
    let store = HeterStore::open(
        pool.clone(),
        options(""),
        Limits::default(),
        CoreIndex::new("btree").unwrap(),
        true,
    )
    .unwrap();
    let failed: Arc<std::sync::Mutex<Option<u64>>> = Arc::default();
    let hook: TestHook = {
        let failed = failed.clone();
        Arc::new(move |point, value| {
            if point == HookPoint::Unpublishing {
                let mut f = failed.lock().unwrap();
                if f.is_none() {
                    *f = Some(u64::from_le_bytes(value.try_into().unwrap()));
                    return Err(Error::corruption(Tier::Pmem, 0, "injected in reorganise"));
                }
            }
            Ok(())
        })
    };
    *store.memory().hook.lock() = Some(hook);
    let key = |i: usize| format!("key{i:04}").into_bytes();
    let mut model = std::collections::BTreeMap::new();
    for i in 0..200 {
        store.put(&key(i), &[1; 300]).unwrap();
        model.insert(key(i), vec![1u8; 300]);
    }
    store.flush().unwrap();
    // Four keys in five again: their blocks in pmem are 80% invalid once this is flushed.
    // The reclaimer may fail (and poison the store) before these are done.
    for i in (0..200).filter(|i| i % 5 != 0) {
        match store.put(&key(i), &[2; 300]) {
            Ok(()) => model.insert(key(i), vec![2u8; 300]),
            Err(Error::Poisoned(_)) => break,
            Err(e) => panic!("put: {e}"),
        };
    }
    match store.flush() {
        Ok(()) | Err(Error::Poisoned(_)) => {}
        Err(e) => panic!("flush: {e}"),
    }
    eventually("the failed reorganisation", || {
        store.memory().health.poisoned.get().is_some()
    });
    let b = failed.lock().unwrap().expect("a reorganisation failed");
    // Time for the reclaimer's next steps (it sleeps 10 ms when idle).
    std::thread::sleep(Duration::from_millis(300));
    let twice = blocks_named_twice(store.memory());
    assert!(
        twice.is_empty(),
        "block {b}'s reorganisation failed; the directory names (block, generation) {twice:?} twice"
    );
    assert!(matches!(store.put(b"k", b"v"), Err(Error::Poisoned(_))));
    assert_eq!(
        store.get(&key(1)).as_ref().ok(),
        Some(&model.get(&key(1)).cloned())
    );
    assert!(matches!(store.close(), Err(Error::Poisoned(_))));
    drop(store);
    let path = dir.path().join("image");
    std::fs::write(
        &path,
        pool.crash_image(11, CrashImageOptions::lines()).unwrap(),
    )
    .unwrap();
    let store = HeterStore::open(
        PmemPool::open(&pool_config(path)).unwrap(),
        options(""),
        Limits::default(),
        CoreIndex::new("btree").unwrap(),
        false,
    )
    .unwrap_or_else(|e| panic!("the store does not reopen: {e}"));
    for (k, v) in &model {
        assert_eq!(store.get(k).unwrap().as_ref(), Some(v));
    }
    store.close().unwrap();
}

/// Task h22, found while reading the flusher: after a forced flush failed and poisoned the
/// store, the flusher went on with the same round's steps before it looked at the poison —
/// and after recovery the first of them retries that forced flush (the old logs still
/// stand), publishing the block it had published already under a second generation-0
/// word, which recovery refuses. Flushing and reorganising now refuse a poisoned store
/// themselves.
#[test]
fn a_forced_flush_that_fails_after_publishing_is_not_retried_by_the_next_step() {
    use crate::recovery::{OPEN_HOOK, OpenPoint};
    let keys = 500;
    let dir = tempfile::tempdir().unwrap();
    let path = image_with_logged_puts(&dir, keys);
    // Armed once the store serves: the forced flush after recovery fails after publishing.
    let armed = Arc::new(AtomicBool::new(false));
    OPEN_HOOK.with(|h| {
        let armed = armed.clone();
        *h.borrow_mut() = Some(Box::new(move |at, mem| {
            match at {
                OpenPoint::Memory => {
                    let armed = armed.clone();
                    let hook: TestHook = Arc::new(move |point, _| {
                        if point == HookPoint::Published && armed.swap(false, Ordering::SeqCst) {
                            return Err(Error::corruption(Tier::Pmem, 0, "injected in flush"));
                        }
                        Ok(())
                    });
                    *mem.hook.lock() = Some(hook);
                }
                OpenPoint::Opened => armed.store(true, Ordering::SeqCst),
                _ => {}
            }
            Ok(())
        }));
    });
    let pool = PmemPool::open(&pool_config(path)).unwrap();
    let opened = HeterStore::open(
        pool.clone(),
        options(""),
        Limits::default(),
        CoreIndex::new("btree").unwrap(),
        false,
    );
    OPEN_HOOK.with(|h| h.borrow_mut().take());
    let store = opened.unwrap();
    eventually("the failed forced flush", || {
        store.memory().health.poisoned.get().is_some()
    });
    std::thread::sleep(Duration::from_millis(200));
    let twice = blocks_named_twice(store.memory());
    assert!(
        twice.is_empty(),
        "the directory names (block, generation) {twice:?} twice"
    );
    assert!(matches!(store.close(), Err(Error::Poisoned(_))));
    drop(store);
    let path = dir.path().join("image2");
    std::fs::write(
        &path,
        pool.crash_image(13, CrashImageOptions::lines()).unwrap(),
    )
    .unwrap();
    drop(pool);
    let store = HeterStore::open(
        PmemPool::open(&pool_config(path)).unwrap(),
        options(""),
        Limits::default(),
        CoreIndex::new("btree").unwrap(),
        false,
    )
    .unwrap_or_else(|e| panic!("the store does not reopen: {e}"));
    for i in 0..keys {
        assert_eq!(store.get(&logged_key(i)).unwrap(), Some(logged_value(i)));
    }
    store.close().unwrap();
}
