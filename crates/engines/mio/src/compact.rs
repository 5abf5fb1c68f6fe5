//! Compaction of the elastic buffer (MioDB §4.3-4.5). Policy ([`choose`], pure): a buffer
//! level compacts when it holds `trigger` tables — its two oldest go to the next level;
//! the last buffer level instead merges its oldest table into the repository (§4.4).
//! Mechanisms (`Inner::compact_step`): zero-copy relinking (`zerocopy.rs`, the default),
//! or with `compaction=copy` a merge by copying (P2-like: the newest version of each key
//! goes into a new arena written as a new table in one piece, published with one atomic
//! root update; the inputs are retired and their runs freed when the last reader drops
//! them); the lazy copy into the repository (`lazycopy.rs`) in both modes; and, under
//! pmem pressure, directory-only moves of a table one level down.
//!
//! Thread safety: one thread per level (§4.5); levels never pick the same tables, and the
//! publish is serialized by the directory lock.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use tierkv_core::Result;

use crate::builder::TableBuilder;
use crate::merge::Merge;
use crate::options::Compaction;
use crate::skiplist::Source;
use crate::space::Debt;
use crate::store::Inner;
use crate::table::Table;
use crate::version::Version;

/// What a level's compaction thread should do now.
#[derive(Debug, PartialEq, Eq)]
pub enum Choice {
    /// Nothing.
    Idle,
    /// Merge the tables at these indexes of `level` (oldest first) into the next level.
    Merge {
        /// The level.
        level: usize,
        /// Indexes of its tables, oldest first.
        inputs: Vec<usize>,
    },
    /// Merge the oldest table of the last buffer level into the repository.
    IntoRepository,
    /// Move the oldest table of `level` to the next level without copying anything (a
    /// directory change only): under space pressure the buffer drains towards the
    /// repository even where a level holds fewer than `trigger` tables.
    MoveDown {
        /// The level.
        level: usize,
    },
}

/// The policy for `level` given the tables per level (the last entry is the repository)
/// and whether pmem is under pressure (less than half of it free).
pub fn choose(tables: &[usize], level: usize, trigger: usize, pressure: bool) -> Choice {
    let buffer = tables.len().saturating_sub(1);
    let n = tables.get(level).copied().unwrap_or(0);
    let due = n >= trigger || (pressure && n >= 1);
    if level + 1 < buffer && n >= trigger {
        Choice::Merge {
            level,
            inputs: vec![0, 1],
        }
    } else if level + 1 < buffer && due {
        Choice::MoveDown { level }
    } else if level + 1 == buffer && due {
        Choice::IntoRepository
    } else {
        Choice::Idle
    }
}

impl Inner {
    /// Runs one compaction of `level` if the policy asks for one; returns whether it did.
    pub fn compact_step(&self, level: usize) -> Result<bool> {
        let v = self.version();
        let merging = v
            .levels
            .get(level)
            .and_then(|l| l.first())
            .is_some_and(|t| t.merge.is_some());
        if merging {
            return self.zero_copy_step(level);
        }
        let a = self.shared.alloc.stats();
        // Pressure: less than half the pool free, room under the soft limit where puts
        // slow down (`Inner::throttle`), or room for less than two normal MemTables
        // (`space.rs`): the buffer drains towards the repository, where the lazy copies
        // pay the debt and the deletes give space back.
        let room = self.last_room.load(Ordering::Acquire);
        let pressure = a.free_bytes < a.chunks * a.chunk_size / 2
            || room < i64::try_from(self.soft_room()).unwrap_or(i64::MAX)
            || i128::from(room)
                < 2 * i128::from(
                    self.sizes
                        .shape_bytes(self.sizes.normal_shape(crate::space::Footprint::default())),
                )
            // mio:flash with little flash room: the buffer drains to flash, where the
            // tombstones it holds meet what they delete (`flash.rs` § Space).
            || self.flash.as_ref().is_some_and(|repo| {
                self.flash_room()
                    .is_some_and(|r| r < 2 * crate::flash::compaction_headroom(&repo.shape))
            });
        let choice = match choose(&v.tables_per_level(), level, self.opts.trigger, pressure) {
            // A copying merge needs a new table as large as its inputs: under pressure the
            // oldest table moves down instead (no pmem besides the directory).
            Choice::Merge { level, .. } if pressure && self.opts.compaction == Compaction::Copy => {
                Choice::MoveDown { level }
            }
            c => c,
        };
        let (inputs, out_level): (Vec<Arc<Table>>, usize) = match choice {
            // Nothing to compact: under pressure the repository's owner (the last buffer
            // level's thread) gives back chunks its sparse slabs hold (`defrag.rs`).
            Choice::Idle if pressure && level + 2 == self.opts.levels && self.flash.is_none() => {
                return self.defrag_step();
            }
            Choice::Idle => return Ok(false),
            Choice::MoveDown { level } => {
                let Some(t) = v.levels[level].first().cloned() else {
                    return Ok(false);
                };
                self.publish_move(level, t)?;
                self.notify();
                return Ok(true);
            }
            Choice::Merge { level, .. } if self.opts.compaction == Compaction::ZeroCopy => {
                return self.zero_copy_step(level);
            }
            Choice::Merge { level, inputs } => (
                inputs
                    .iter()
                    .filter_map(|i| v.levels[level].get(*i).cloned())
                    .collect(),
                level + 1,
            ),
            Choice::IntoRepository if self.flash.is_some() => {
                return self.flash_write_out_step(level);
            }
            Choice::IntoRepository => return self.lazy_copy_step(level),
        };
        let output = self.merge_tables(&inputs)?;
        self.publish_compaction(level, &inputs, output, out_level)?;
        if let Some(c) = self.shared.counters.compactions.get(level) {
            c.incr();
        }
        self.notify();
        Ok(true)
    }

    /// Copies the newest version of every key of `inputs` into a new table, built in
    /// place on pmem (`builder.rs`).
    fn merge_tables(&self, inputs: &[Arc<Table>]) -> Result<Option<Arc<Table>>> {
        let want = inputs.iter().map(|t| t.bytes).sum::<u64>();
        let mut out = TableBuilder::new(&self.shared, self.shape, want)?;
        let sources: Vec<_> = inputs.iter().map(|t| (t.source(), t.meta.head)).collect();
        let lists: Vec<(&dyn Source, u64)> = sources
            .iter()
            .map(|(s, h)| (s as &dyn Source, *h))
            .collect();
        let mut m = Merge::new(&lists, b"")?;
        let (mut copied, mut cost) = (0u64, Debt::default());
        while let Some(e) = m.next_entry()? {
            out.append(&e)?;
            let value_len = e.value.as_ref().map_or(0, Vec::len);
            copied += (e.key.len() + value_len) as u64;
            // The merge yields one version per key: the debt `Sizes::cost_of` would count.
            if e.value.is_some() {
                cost.add(self.sizes.put_cost(e.key.len(), value_len, e.height));
            }
        }
        self.shared.counters.compaction_bytes_copied.add(copied);
        let max_seq = inputs.iter().map(|t| t.meta.max_seq).max().unwrap_or(0);
        let id = self.take_id();
        Ok(out.finish(id, max_seq, cost)?.map(Arc::new))
    }

    /// Moves table `t` from `level` to the end (newest) of the next level. The order
    /// invariant holds: `t` is newer than every table below it, and it was the oldest of its
    /// level, so it is older than every table left above it.
    fn publish_move(&self, level: usize, t: Arc<Table>) -> Result<()> {
        let mut st = self.dir.lock();
        let mut d = st.cur.clone();
        let Some(pos) = d.levels[level].iter().position(|m| m.id == t.meta.id) else {
            return Ok(());
        };
        let m = d.levels[level].remove(pos);
        d.levels[level + 1].push(m);
        self.publish(&mut st, d)?;
        let mut v = self.version.write();
        let mut nv: Version = (**v).clone();
        nv.levels[level].retain(|x| x.meta.id != t.meta.id);
        nv.levels[level + 1].push(t);
        *v = Arc::new(nv);
        Ok(())
    }

    /// Replaces `inputs` by `output` (in `out_level`) in the directory and the version.
    fn publish_compaction(
        &self,
        level: usize,
        inputs: &[Arc<Table>],
        output: Option<Arc<Table>>,
        out_level: usize,
    ) -> Result<()> {
        let ids: Vec<u64> = inputs.iter().map(|t| t.meta.id).collect();
        let mut st = self.dir.lock();
        let mut d = st.cur.clone();
        for l in &mut d.levels {
            l.retain(|t| !ids.contains(&t.id));
        }
        if let Some(o) = &output {
            d.next_id = d.next_id.max(o.meta.id + 1);
            if let Some(l) = d.levels.get_mut(out_level) {
                l.push(o.meta.clone());
            }
        }
        if let Err(e) = self.publish(&mut st, d) {
            if let Some(o) = &output {
                o.retire();
            }
            return Err(e);
        }
        let mut v = self.version.write();
        let mut nv: Version = (**v).clone();
        for l in &mut nv.levels {
            l.retain(|t| !ids.contains(&t.meta.id));
        }
        if let (Some(o), Some(l)) = (output, nv.levels.get_mut(out_level)) {
            l.push(o);
        }
        *v = Arc::new(nv);
        drop(v);
        drop(st);
        for t in inputs {
            t.retire();
        }
        let _ = level;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policy_merges_the_oldest_pair_and_feeds_the_repository() {
        assert_eq!(choose(&[1, 0, 0, 0], 0, 2, false), Choice::Idle);
        assert_eq!(
            choose(&[2, 0, 0, 0], 0, 2, false),
            Choice::Merge {
                level: 0,
                inputs: vec![0, 1]
            }
        );
        assert_eq!(choose(&[0, 0, 3, 1], 2, 2, false), Choice::IntoRepository);
        assert_eq!(choose(&[0, 0, 1, 1], 2, 2, false), Choice::Idle);
        assert_eq!(
            choose(&[0, 0, 0, 5], 3, 2, true),
            Choice::Idle,
            "the repository has no thread"
        );
    }

    #[test]
    fn pressure_drains_the_buffer_towards_the_repository() {
        assert_eq!(
            choose(&[1, 0, 0, 0], 0, 2, true),
            Choice::MoveDown { level: 0 }
        );
        assert_eq!(choose(&[0, 0, 1, 1], 2, 2, true), Choice::IntoRepository);
        assert_eq!(choose(&[0, 1, 0, 1], 0, 2, true), Choice::Idle);
    }
}
