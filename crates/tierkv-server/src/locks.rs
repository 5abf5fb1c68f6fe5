//! [`KeyLocks`]: the striped lock table that makes each command atomic per key.
//!
//! `KvStore` offers get, put and delete, each linearizable, but no compare-and-swap. Redis
//! commands such as `INCR`, `APPEND`, `SET NX`, `GETSET` or `HSET` read a value and write a
//! new one; two of them racing on one key would lose an update. And `MSET` must look atomic
//! to other clients: no client may see some of its keys updated and others not.
//!
//! So every command that touches keys locks them here first, for its whole duration:
//! *shared* for commands that only read (`GET`, `MGET`, `EXISTS`, `HGET`, ...), *exclusive*
//! for commands that write (every write, including a plain `SET`: a blind write racing a
//! read-modify-write would otherwise be lost inside it). A key maps to one of
//! [`KeyLocks::STRIPES`] reader-writer locks by a hash of its bytes; two keys may share a
//! stripe (they then serialize, which is correct, merely slower).
//!
//! # Deadlock freedom
//! A command takes all its stripes at once, in increasing stripe order, duplicates merged,
//! and releases them when its [`KeyGuard`] drops at the end of the command. No code takes a
//! stripe while holding a guard. With one global order and no lock taken while holding
//! another out of that order, no cycle of waits can form.
//!
//! What this does not give: atomicity across a crash. `MSET` writes its keys one by one; if
//! the process dies in the middle, the keys written so far stay written (each one is
//! durable when `put` returns), the rest do not. Clients are only told `OK` after all.
//!
//! # Versions (WATCH)
//! Each stripe also counts the writes to its keys: a handler that changes a key calls
//! [`KeyLocks::touch`] while it holds the key's stripe exclusively. `WATCH` remembers the
//! versions of its keys' stripes; `EXEC` compares them under the locks. A write to another
//! key of the same stripe therefore also fails the transaction: a spurious abort (the
//! client retries, as after any lost race), never a missed change.
//!
//! # Everything at once
//! [`KeyLocks::lock_all`] takes every stripe exclusively, in stripe order (FLUSHDB, and an
//! EXEC whose commands walk the whole keyspace). It follows the same global order, so it
//! keeps the deadlock argument above.
//!
//! Thread-safety: `Sync`; the whole point.

use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::{RwLock, RwLockReadGuard, RwLockWriteGuard};

/// Whether a command reads or writes the keys it locks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    /// Shared: the command only reads.
    Read,
    /// Exclusive: the command writes.
    Write,
}

/// One lock and its write counter on their own cache line, so that two stripes never
/// share a line.
#[repr(align(64))]
#[derive(Default)]
struct Stripe(RwLock<()>, AtomicU64);

/// The lock table.
pub struct KeyLocks {
    stripes: Box<[Stripe]>,
}

impl Default for KeyLocks {
    fn default() -> Self {
        KeyLocks {
            stripes: (0..KeyLocks::STRIPES).map(|_| Stripe::default()).collect(),
        }
    }
}

impl std::fmt::Debug for KeyLocks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyLocks")
            .field("stripes", &self.stripes.len())
            .finish()
    }
}

enum Guard<'a> {
    Shared(#[allow(dead_code)] RwLockReadGuard<'a, ()>),
    Exclusive(#[allow(dead_code)] RwLockWriteGuard<'a, ()>),
}

enum Held<'a> {
    Nothing,
    One(#[allow(dead_code)] Guard<'a>),
    Many(#[allow(dead_code)] Vec<Guard<'a>>),
}

/// The stripes a command holds; dropping it releases them.
pub struct KeyGuard<'a> {
    _held: Held<'a>,
}

impl KeyGuard<'_> {
    /// A guard that holds nothing (a command without keys).
    pub fn none() -> KeyGuard<'static> {
        KeyGuard {
            _held: Held::Nothing,
        }
    }
}

impl KeyLocks {
    /// Number of stripes (a power of two).
    pub const STRIPES: usize = 4096;

    /// The stripe of `key`: FNV-1a over its bytes.
    pub fn stripe_of(key: &[u8]) -> usize {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for &b in key {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
        (h ^ (h >> 32)) as usize & (Self::STRIPES - 1)
    }

    fn take(&self, stripe: usize, access: Access) -> Option<Guard<'_>> {
        let s = &self.stripes.get(stripe)?.0;
        Some(match access {
            Access::Read => Guard::Shared(s.read()),
            Access::Write => Guard::Exclusive(s.write()),
        })
    }

    /// Counts a change of `key`; the caller holds its stripe exclusively (or at least
    /// shared, for a lazy expiry removal, which changes nothing a reader could see).
    pub fn touch(&self, key: &[u8]) {
        if let Some(s) = self.stripes.get(Self::stripe_of(key)) {
            s.1.fetch_add(1, Ordering::Release);
        }
    }

    /// The write count of `key`'s stripe.
    pub fn version(&self, key: &[u8]) -> u64 {
        self.stripes
            .get(Self::stripe_of(key))
            .map_or(0, |s| s.1.load(Ordering::Acquire))
    }

    /// Locks every stripe exclusively, in stripe order.
    pub fn lock_all(&self) -> KeyGuard<'_> {
        let all = (0..Self::STRIPES)
            .filter_map(|s| self.take(s, Access::Write))
            .collect();
        KeyGuard {
            _held: Held::Many(all),
        }
    }

    /// Locks the stripes of `keys` (in stripe order; see the module doc).
    pub fn lock<'k>(&self, keys: impl Iterator<Item = &'k [u8]>, access: Access) -> KeyGuard<'_> {
        let mut stripes = keys.map(Self::stripe_of);
        let Some(first) = stripes.next() else {
            return KeyGuard::none();
        };
        let held = match stripes.next() {
            None => self.take(first, access).map_or(Held::Nothing, Held::One),
            Some(second) => {
                let mut all = vec![first, second];
                all.extend(stripes);
                all.sort_unstable();
                all.dedup();
                Held::Many(
                    all.into_iter()
                        .filter_map(|s| self.take(s, access))
                        .collect(),
                )
            }
        };
        KeyGuard { _held: held }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicU64, Ordering};

    use super::*;

    #[test]
    fn stripes_spread_keys() {
        let used: std::collections::HashSet<_> = (0..10_000)
            .map(|i| KeyLocks::stripe_of(format!("key:{i}").as_bytes()))
            .collect();
        assert!(used.len() > KeyLocks::STRIPES * 9 / 10, "{}", used.len());
        assert!(used.iter().all(|&s| s < KeyLocks::STRIPES));
    }

    #[test]
    fn exclusive_lock_serializes_read_modify_write() {
        let locks = Arc::new(KeyLocks::default());
        let cell = Arc::new(AtomicU64::new(0));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let (locks, cell) = (locks.clone(), cell.clone());
                std::thread::spawn(move || {
                    for _ in 0..2_000 {
                        let _g = locks.lock([&b"counter"[..]].into_iter(), Access::Write);
                        // A deliberately non-atomic read-modify-write.
                        let v = cell.load(Ordering::Relaxed);
                        std::hint::spin_loop();
                        cell.store(v + 1, Ordering::Relaxed);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(cell.load(Ordering::Relaxed), 8_000);
    }

    #[test]
    fn overlapping_multi_key_locks_in_any_order_do_not_deadlock() {
        let locks = Arc::new(KeyLocks::default());
        let keys: Vec<Vec<u8>> = (0..16).map(|i| format!("k{i}").into_bytes()).collect();
        let keys = Arc::new(keys);
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let (locks, keys) = (locks.clone(), keys.clone());
                std::thread::spawn(move || {
                    for round in 0..2_000usize {
                        let mut mine: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
                        let n = mine.len();
                        mine.rotate_left((t * 5 + round) % n);
                        if t % 2 == 1 {
                            mine.reverse();
                        }
                        let _g = locks.lock(mine.into_iter().take(5), Access::Write);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
    }

    #[test]
    fn touch_changes_the_version_of_the_stripe_only() {
        let locks = KeyLocks::default();
        let (a, b) = (b"alpha".as_slice(), b"beta".as_slice());
        assert_ne!(KeyLocks::stripe_of(a), KeyLocks::stripe_of(b));
        let (va, vb) = (locks.version(a), locks.version(b));
        locks.touch(a);
        assert_eq!(locks.version(a), va + 1);
        assert_eq!(locks.version(b), vb);
    }

    #[test]
    fn lock_all_excludes_every_key() {
        let locks = KeyLocks::default();
        let all = locks.lock_all();
        for s in [0, 1, KeyLocks::STRIPES - 1] {
            assert!(locks.stripes[s].0.try_read().is_none());
        }
        drop(all);
        let _g = locks.lock([&b"k"[..]].into_iter(), Access::Write);
    }

    #[test]
    fn readers_share_a_stripe() {
        let locks = KeyLocks::default();
        let _a = locks.lock([&b"k"[..]].into_iter(), Access::Read);
        let _b = locks.lock([&b"k"[..], &b"k"[..]].into_iter(), Access::Read);
        assert!(
            locks.stripes[KeyLocks::stripe_of(b"k")]
                .0
                .try_write()
                .is_none()
        );
    }
}
