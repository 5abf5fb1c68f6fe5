//! What readers see (MioDB §4.1, Fig. 3): the MemTable, the immutable MemTable being
//! flushed, and the PMTables of every level. A [`Version`] is immutable; a change (a
//! MemTable switch, a flush, a compaction) installs a new one under the store's version
//! lock. A reader clones the current `Arc<Version>` and reads from it without locks; the
//! clone keeps every table it lists alive (the reader's epoch: see `table.rs`).
//!
//! Order invariant: every table of level i is newer than every table of level i+1, and a
//! level lists its tables oldest first; the MemTable is newer than the immutable one,
//! which is newer than every table. So the first version of a key met in the order
//! MemTable, immutable, L0 newest .. oldest, L1 .., repository is its newest.
//!
//! Thread safety: `Version` is immutable and `Send + Sync`.

use std::sync::Arc;

use crate::arena::Arena;
use crate::dir::LogMeta;
use crate::table::Table;

/// A MemTable and the log that covers it.
pub struct MemTable {
    /// Its skiplist.
    pub arena: Arena,
    /// Its log.
    pub log: LogMeta,
}

/// One consistent view of the store.
#[derive(Clone)]
pub struct Version {
    /// The MemTable taking writes.
    pub mem: Arc<MemTable>,
    /// The full MemTable being flushed (§4.2: it serves reads until its PMTable is
    /// published).
    pub imm: Option<Arc<MemTable>>,
    /// Tables per level, oldest first; the last level is the repository.
    pub levels: Vec<Vec<Arc<Table>>>,
}

impl Version {
    /// Tables per level (a gauge).
    pub fn tables_per_level(&self) -> Vec<usize> {
        self.levels.iter().map(Vec::len).collect()
    }
}
