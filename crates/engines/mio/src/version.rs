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
use std::sync::atomic::AtomicU64;

use parking_lot::Mutex;

use crate::arena::Arena;
use crate::dir::{LogMeta, Run};
use crate::flash::FlashLevels;
use crate::space::Debt;
use crate::table::Table;

/// A MemTable and the log that covers it.
pub struct MemTable {
    /// Its skiplist.
    pub arena: Arena,
    /// Its log.
    pub log: LogMeta,
    /// The run its one-piece flush writes, allocated with the log at the switch
    /// (`space.rs`); `None` for a MemTable rebuilt from a log at recovery (its flush
    /// allocates) and for the placeholder before the first switch.
    pub target: Option<Run>,
    /// What the lazy copy will allocate for its puts (`space.rs`, the debt).
    pub cost: Mutex<Debt>,
    /// Tombstones it holds (space they give back once they reach the repository).
    pub deletes: AtomicU64,
}

impl MemTable {
    /// A MemTable over `arena`, logged in `log`, flushed into `target`.
    pub fn new(arena: Arena, log: LogMeta, target: Option<Run>) -> MemTable {
        MemTable {
            arena,
            log,
            target,
            cost: Mutex::new(Debt::default()),
            deletes: AtomicU64::new(0),
        }
    }

    /// The debt of its puts.
    pub fn cost(&self) -> Debt {
        *self.cost.lock()
    }
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
    /// `mio:flash`: the flash repository's tables (below every level; empty otherwise).
    pub flash: Arc<FlashLevels>,
}

impl Version {
    /// Tables per level (a gauge).
    pub fn tables_per_level(&self) -> Vec<usize> {
        self.levels.iter().map(Vec::len).collect()
    }

    /// The buffer levels (every level but the repository).
    pub fn buffer(&self) -> &[Vec<Arc<Table>>] {
        &self.levels[..self.levels.len().saturating_sub(1)]
    }

    /// The debt of everything above the repository: the buffer tables' costs and the
    /// MemTables' (`space.rs`).
    pub fn debt(&self) -> Debt {
        let mut d = self.mem.cost();
        if let Some(m) = &self.imm {
            d.merge(&m.cost());
        }
        for t in self.buffer().iter().flatten() {
            d.merge(&t.cost);
        }
        d
    }
}
