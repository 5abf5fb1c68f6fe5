//! The database map behind `SWAPDB` (value encoding format 2, "Databases and SWAPDB" in
//! this crate's `README.md`): which stored database (the `db` byte of
//! [`crate::keyspace`]'s store keys, the *physical* database) holds the keys a client sees
//! as database n after `SELECT n` (the *logical* database).
//!
//! Every store key carries its physical database, so swapping two databases' contents by
//! rewriting keys would cost O(keys). Instead SWAPDB exchanges two entries of this
//! permutation of 0..16, and every command turns the selected database into a physical
//! one through it ([`DbMap::physical`]) while it holds its key locks. SWAPDB holds every
//! lock ([`crate::locks::KeyLocks::lock_all`]), so no command sees half a swap.
//!
//! # Stored form
//! One internal store key, [`crate::keyspace::dbmap_key`], written with one `put` (atomic
//! on every engine: the old map or the new one survives a crash, never a mix):
//!
//! ```text
//! value   version (1 byte) = 1 | physical database of logical 0, 1, ..., 15 (16 bytes)
//! ```
//!
//! The 16 bytes must be a permutation of 0..16; anything else is a [`DbMapError`] and the
//! server refuses to start (never guesses which data belongs to which database). No key
//! means the identity (a store that never saw SWAPDB, or one emptied by FLUSHALL, which
//! deletes the key and resets the map).
//!
//! Thread-safety: the entries are relaxed atomics; the key locks order them (a command
//! reads the map after taking its locks, SWAPDB and FLUSHALL write it under all locks).
//! Commands that take no key lock (SCAN, KEYS, DBSIZE, INFO keyspace) read one entry
//! once and walk that physical database, as they would walk one database while another
//! client fills it.

use std::fmt;
use std::sync::atomic::{AtomicU8, Ordering};

use crate::keyspace::DATABASES;

/// Version byte of the stored map.
const VERSION: u8 = 1;
/// Bytes of the stored map.
pub const ENCODED_LEN: usize = 1 + DATABASES as usize;

/// A logical→physical database permutation.
pub type Map = [u8; DATABASES as usize];

/// The identity map: database n is stored as database n.
pub const IDENTITY: Map = {
    let mut m = [0u8; DATABASES as usize];
    let mut i = 0;
    while i < m.len() {
        m[i] = i as u8;
        i += 1;
    }
    m
};

/// A stored map that is not one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DbMapError(String);

impl fmt::Display for DbMapError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "the stored database map (SWAPDB) is not valid: {}",
            self.0
        )
    }
}

impl std::error::Error for DbMapError {}

/// Encodes a map for [`crate::keyspace::dbmap_key`].
pub fn encode(map: &Map) -> Vec<u8> {
    let mut v = Vec::with_capacity(ENCODED_LEN);
    v.push(VERSION);
    v.extend_from_slice(map);
    v
}

/// Decodes a stored map: the version, the length and the permutation are checked.
pub fn decode(bytes: &[u8]) -> Result<Map, DbMapError> {
    let (&version, body) = bytes
        .split_first()
        .ok_or_else(|| DbMapError("empty value".into()))?;
    if version != VERSION {
        return Err(DbMapError(format!("unknown version {version}")));
    }
    let map: Map = body
        .try_into()
        .map_err(|_| DbMapError(format!("{} bytes, expected {ENCODED_LEN}", bytes.len())))?;
    let mut seen = [false; DATABASES as usize];
    for &p in &map {
        let slot = seen
            .get_mut(usize::from(p))
            .ok_or_else(|| DbMapError(format!("database {p} is out of range")))?;
        if *slot {
            return Err(DbMapError(format!("database {p} appears twice")));
        }
        *slot = true;
    }
    Ok(map)
}

/// The map with logical databases `a` and `b` exchanged.
pub fn swapped(map: &Map, a: u8, b: u8) -> Map {
    let mut m = *map;
    m.swap(usize::from(a), usize::from(b));
    m
}

/// The live map of a running server.
#[derive(Debug)]
pub struct DbMap {
    entries: [AtomicU8; DATABASES as usize],
}

impl Default for DbMap {
    fn default() -> DbMap {
        DbMap {
            entries: IDENTITY.map(AtomicU8::new),
        }
    }
}

impl DbMap {
    /// Reads the stored map of `db` (the identity when there is none).
    pub fn load(db: &tierkv::Db) -> anyhow::Result<DbMap> {
        let map = DbMap::default();
        if let Some(v) = db.get(&crate::keyspace::dbmap_key())? {
            map.set(&decode(&v)?);
        }
        Ok(map)
    }

    /// The physical database that holds logical database `logical` (< 16).
    pub fn physical(&self, logical: u8) -> u8 {
        self.entries
            .get(usize::from(logical))
            .map_or(logical, |e| e.load(Ordering::Relaxed))
    }

    /// The whole map now.
    pub fn get(&self) -> Map {
        let mut m = IDENTITY;
        for (slot, e) in m.iter_mut().zip(&self.entries) {
            *slot = e.load(Ordering::Relaxed);
        }
        m
    }

    /// Installs `map` (the caller holds every key lock and has stored it).
    pub fn set(&self, map: &Map) {
        for (e, &p) in self.entries.iter().zip(map) {
            e.store(p, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_round_trip_and_swaps_compose() {
        let m = swapped(&swapped(&IDENTITY, 0, 3), 3, 15);
        assert_eq!((m[0], m[3], m[15], m[1]), (3, 15, 0, 1));
        assert_eq!(decode(&encode(&m)), Ok(m));
        assert_eq!(swapped(&m, 4, 4), m);
        let live = DbMap::default();
        assert_eq!(live.get(), IDENTITY);
        live.set(&m);
        assert_eq!((live.physical(0), live.physical(15)), (3, 0));
        assert_eq!(live.get(), m);
    }

    #[test]
    fn bad_stored_maps_are_refused() {
        let mut twice = encode(&IDENTITY);
        twice[2] = 0;
        assert!(decode(&twice).unwrap_err().to_string().contains("twice"));
        let mut high = encode(&IDENTITY);
        high[16] = 16;
        assert!(
            decode(&high)
                .unwrap_err()
                .to_string()
                .contains("out of range")
        );
        let mut version = encode(&IDENTITY);
        version[0] = 2;
        assert!(decode(&version).is_err());
        assert!(decode(&encode(&IDENTITY)[..16]).is_err());
        assert!(decode(&[]).is_err());
        let mut long = encode(&IDENTITY);
        long.push(0);
        assert!(decode(&long).is_err());
    }
}
