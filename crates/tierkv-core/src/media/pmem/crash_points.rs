//! Crash points (issue 17, item 2; DESIGN §4, STYLE §7 "Crash"): places where a test can
//! take a crash image *deterministically*, instead of at a random moment.
//!
//! - **Persist points.** A Tracked pool numbers its `persist` calls (each is a write-back
//!   plus a fence; the pool has no separate fence). A test arms a handler on the pool
//!   ([`PmemPool::arm_crash_points`](super::PmemPool::arm_crash_points)); after persist
//!   number N returns (its lines are in the persisted image) the handler is called with
//!   [`CrashPoint::Persist`] on the thread that persisted, before that thread stores
//!   anything else, and may take [`PmemPool::crash_image`](super::PmemPool::crash_image)
//!   there: the image a power failure right after that persist could leave. Counting the
//!   persists of a deterministic run, then replaying it and cutting after persist N for
//!   every N of a window, cuts every ordering step of every protocol at least once
//!   (`tierkv stress --mode persist-points`).
//! - **Named points.** Engines mark the steps of background work that a random image
//!   rarely falls in — a GC relocation between copy and switch, a chain rewrite, a flush,
//!   a reorganisation, a reclamation — with
//!   [`PmemPool::crash_point`](super::PmemPool::crash_point)`("prism.gc.after_copy")` (for
//!   the pool the work mutates) or the free function [`crash_point`] (anywhere). A test
//!   arms a handler on the pool (or globally, [`arm_global`]) and receives
//!   [`CrashPoint::Named`] with the name, on the engine's own thread, which is paused
//!   while the handler runs: it can take an image at exactly that step, or record that
//!   the step ran.
//!
//! # Cost when nothing is armed
//! One relaxed load of an `AtomicBool` per persist (Tracked pools only: other modes have
//! no crash-point state at all) and per named point. Engines may leave the calls in
//! release builds.
//!
//! # Naming
//! `<engine>.<work>.<step>`, lower case, e.g. `prism.gc.after_copy`,
//! `prism.chain.before_switch`, `hetermm.reorg.after_publish`, `hetermm.flush.before_free`.
//! Each engine lists its points in its FORMAT.md beside the persist order they cut.
//!
//! # Rules for handlers
//! A handler runs on whatever thread reached the point, possibly holding engine locks: it
//! must not call back into the same store, nor persist to the same pool. Taking a crash
//! image of the pool, copying files, opening *another* store on a copy and checking it
//! are fine.
//!
//! Thread safety: handlers are `Send + Sync` and may be called from several threads at
//! once; arming and disarming are atomic with respect to calls (a call sees the handler
//! before or after the change).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use parking_lot::{Mutex, MutexGuard, RwLock};

/// Where a crash point was reached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CrashPoint<'a> {
    /// Persist number `number` (1-based, counted since the pool was opened) of
    /// `[off, off + len)` just returned.
    Persist {
        /// Its number.
        number: u64,
        /// The persisted range.
        off: u64,
        /// Its length.
        len: usize,
    },
    /// An engine reached the named step of its work.
    Named(&'a str),
}

/// What a test runs at crash points.
pub type CrashPointHandler = Arc<dyn Fn(CrashPoint<'_>) + Send + Sync>;

/// The crash-point state of one Tracked pool.
#[derive(Default)]
pub(super) struct PoolPoints {
    armed: AtomicBool,
    handler: RwLock<Option<CrashPointHandler>>,
    persists: AtomicU64,
}

impl PoolPoints {
    pub(super) fn arm(&self, handler: CrashPointHandler) {
        *self.handler.write() = Some(handler);
        self.armed.store(true, Ordering::SeqCst);
    }

    pub(super) fn disarm(&self) {
        self.armed.store(false, Ordering::SeqCst);
        *self.handler.write() = None;
    }

    fn handler(&self) -> Option<CrashPointHandler> {
        if !self.armed.load(Ordering::Relaxed) {
            return None;
        }
        self.handler.read().clone()
    }

    /// Numbers a persist that just returned and calls the handler, if armed.
    pub(super) fn after_persist(&self, off: u64, len: usize) {
        let number = self.persists.fetch_add(1, Ordering::SeqCst) + 1;
        if let Some(h) = self.handler() {
            h(CrashPoint::Persist { number, off, len });
        }
    }

    /// Persists numbered so far.
    pub(super) fn persists(&self) -> u64 {
        self.persists.load(Ordering::SeqCst)
    }

    /// A named point on this pool: its handler, else the global one.
    pub(super) fn named(&self, name: &str) {
        match self.handler() {
            Some(h) => h(CrashPoint::Named(name)),
            None => crash_point(name),
        }
    }
}

static GLOBAL_ARMED: AtomicBool = AtomicBool::new(false);
static GLOBAL: RwLock<Option<CrashPointHandler>> = RwLock::new(None);
/// Held by the armed [`GlobalGuard`]: one global handler at a time, so tests that arm it
/// concurrently take turns instead of replacing each other's.
static GLOBAL_TURN: Mutex<()> = Mutex::new(());

/// A named crash point reached outside any pool's own work (or by code that has no pool
/// at hand): calls the globally armed handler, if any. See the module doc.
#[inline]
pub fn crash_point(name: &str) {
    if !GLOBAL_ARMED.load(Ordering::Relaxed) {
        return;
    }
    let h = GLOBAL.read().clone();
    if let Some(h) = h {
        h(CrashPoint::Named(name));
    }
}

/// Keeps the global handler armed; disarms it when dropped.
pub struct GlobalGuard {
    _turn: MutexGuard<'static, ()>,
}

impl Drop for GlobalGuard {
    fn drop(&mut self) {
        GLOBAL_ARMED.store(false, Ordering::SeqCst);
        *GLOBAL.write() = None;
    }
}

/// Arms `handler` for every [`crash_point`] call of the process (and every pool's
/// `crash_point` whose pool has no handler of its own) until the guard is dropped. Waits
/// for any other armed global handler to be dropped first.
pub fn arm_global(handler: CrashPointHandler) -> GlobalGuard {
    let turn = GLOBAL_TURN.lock();
    *GLOBAL.write() = Some(handler);
    GLOBAL_ARMED.store(true, Ordering::SeqCst);
    GlobalGuard { _turn: turn }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn persists_are_numbered_and_the_handler_sees_them_only_while_armed() {
        let p = PoolPoints::default();
        let seen = Arc::new(Mutex::new(Vec::new()));
        p.after_persist(0, 8);
        let s = seen.clone();
        p.arm(Arc::new(move |cp| {
            if let CrashPoint::Persist { number, .. } = cp {
                s.lock().push(number);
            }
        }));
        p.after_persist(64, 8);
        p.after_persist(128, 8);
        p.disarm();
        p.after_persist(192, 8);
        assert_eq!(*seen.lock(), vec![2, 3]);
        assert_eq!(p.persists(), 4);
    }

    #[test]
    fn named_points_go_to_the_pool_handler_else_to_the_global_one() {
        let p = PoolPoints::default();
        let global = Arc::new(Mutex::new(Vec::<String>::new()));
        let g = global.clone();
        let guard = arm_global(Arc::new(move |cp| {
            if let CrashPoint::Named(n) = cp {
                g.lock().push(n.to_owned());
            }
        }));
        crash_point("test.free.one");
        p.named("test.pool.unarmed");
        let local = Arc::new(Mutex::new(Vec::<String>::new()));
        let l = local.clone();
        p.arm(Arc::new(move |cp| {
            if let CrashPoint::Named(n) = cp {
                l.lock().push(n.to_owned());
            }
        }));
        p.named("test.pool.armed");
        drop(guard);
        crash_point("test.free.after");
        assert_eq!(*global.lock(), vec!["test.free.one", "test.pool.unarmed"]);
        assert_eq!(*local.lock(), vec!["test.pool.armed"]);
    }

    #[test]
    fn an_image_taken_at_a_persist_point_holds_that_persist_and_nothing_unpersisted() {
        use super::super::{CrashImageOptions, DurabilityMode, PmemConfig, PmemPool};
        let d = tempfile::tempdir().unwrap();
        let pool = PmemPool::create(&PmemConfig {
            path: d.path().join("p"),
            size: 1 << 20,
            mode: DurabilityMode::Tracked,
            latency: Default::default(),
        })
        .unwrap();
        let base = pool.data_start();
        let first = pool.persist_count();
        let images = Arc::new(Mutex::new(Vec::new()));
        let (im, p2) = (images.clone(), Arc::downgrade(&pool));
        pool.arm_crash_points(Arc::new(move |cp| {
            if let (CrashPoint::Persist { number, .. }, Some(p)) = (cp, p2.upgrade()) {
                let img = p.crash_image(number, CrashImageOptions::lines()).unwrap();
                im.lock().push((number, img));
            }
        }))
        .unwrap();
        pool.store_u64(base, 1).unwrap();
        pool.store_u64(base + 64, 2).unwrap();
        pool.persist(base, 8).unwrap();
        pool.store_u64(base + 128, 3).unwrap();
        pool.persist(base + 128, 8).unwrap();
        pool.disarm_crash_points();
        let images = images.lock();
        assert_eq!(images.len(), 2);
        assert_eq!(images[0].0, first + 1);
        let word = |img: &[u8], off: u64| {
            let o = off as usize;
            u64::from_le_bytes(img[o..o + 8].try_into().unwrap())
        };
        for (_, img) in images.iter() {
            assert_eq!(word(img, base), 1, "persisted before the point");
        }
        assert_eq!(
            word(&images[0].1, base + 128),
            0,
            "stored after the first point"
        );
        assert_eq!(word(&images[1].1, base + 128), 3);
        let volatile = PmemPool::create(&PmemConfig {
            path: d.path().join("v"),
            size: 1 << 20,
            mode: DurabilityMode::Volatile,
            latency: Default::default(),
        })
        .unwrap();
        assert!(volatile.arm_crash_points(Arc::new(|_| {})).is_err());
        volatile.crash_point("test.volatile.no_handler");
    }
}
