//! Striped mutexes: one lock per hash bucket of keys, so that the read-modify-write of one
//! row excludes every other write of that row while rows in other stripes proceed.
//!
//! Thread safety: `Send + Sync`; a caller holds at most one stripe at a time (no lock
//! order to respect).

use parking_lot::{Mutex, MutexGuard};

/// Stripes of a [`Stripes`] set.
pub const STRIPES: usize = 1024;

/// A fixed set of mutexes indexed by key hash.
pub struct Stripes {
    locks: Box<[Mutex<()>]>,
}

impl Default for Stripes {
    fn default() -> Self {
        Stripes {
            locks: (0..STRIPES).map(|_| Mutex::new(())).collect(),
        }
    }
}

impl Stripes {
    /// Locks the stripe of `key`.
    pub fn lock(&self, key: &[u8]) -> MutexGuard<'_, ()> {
        let i = crate::format::checksum::crc32c(key) as usize % self.locks.len();
        // NOTE: `i < len` by the modulo; `get` keeps the lint quiet without a panic path.
        match self.locks.get(i) {
            Some(m) => m.lock(),
            None => self.locks[0].lock(),
        }
    }
}
