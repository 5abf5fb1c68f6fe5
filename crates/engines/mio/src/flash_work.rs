//! The background work of the SSD extension (`mio:flash`; `flash.rs` has the layout):
//!
//! - [`Inner::flash_write_out_step`]: what the lazy copy becomes (§4.4 → §4.1's "multi-level
//!   SSTables replace the huge PMTable"). The oldest PMTable of the last buffer level is
//!   written out, newest version per key (tombstones kept: older versions may lie deeper),
//!   as level-0 tables of about `sst_size` bytes; then one directory publish removes the
//!   PMTable from its level and lists the tables in level 0.
//! - [`Inner::flash_compact_step`]: leveled compaction (the policy is `flash::choose`):
//!   the inputs and the next level's overlapping tables are merged, newest version per key,
//!   into new tables of the next level, published in pieces of about two tables (each
//!   dropping the next-level tables it replaces; the last one the inputs too).
//!
//! Persist order of both (`FORMAT.md` § Flash repository): write every output table and
//! sync it, sync the flash directory, publish the pmem directory (the commit point), then
//! unlink the replaced tables. A crash before the publish leaves orphans the next open
//! removes; after it, replaced files the next open removes; never a listed table missing.
//!
//! Thread safety: a write-out runs on the last buffer level's thread, compactions on the
//! `mio:flash-compact` thread; [`Inner::publish_flash`] applies each change to the lists
//! current at its publish, under the directory and version locks, so the two never undo
//! each other's work.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use tierkv_core::{Error, Result};
use tierkv_sstable::{Table, TableSet};

use crate::flash::{FlashChoice, FlashLevels, FlashStream, TableWriter, choose, encode_value};
use crate::merge::Merge;
use crate::skiplist::Source;
use crate::store::Inner;
use crate::table::Table as PmTable;
use crate::version::Version;

/// A change of the flash lists.
struct FlashChange<'a> {
    /// The PMTable a write-out drops from `pm_level` (with its max seq).
    written_out: Option<(usize, &'a Arc<PmTable>)>,
    /// Table numbers that leave the flash levels.
    removed: Vec<u64>,
    /// The level the new tables join.
    level: usize,
    /// The new tables.
    added: Vec<Arc<Table>>,
}

/// Tables a flash compaction writes before it publishes a piece (`flash_compact_step`).
const PIECE_TABLES: u64 = 2;
/// Most level-0 bytes, in tables of `sst_size`, one level-0 compaction takes.
pub(crate) const L0_INPUT_TABLES: u64 = 4;

/// True when a cut just after key `a` would split one of `tables` (sorted, disjoint): some
/// table's range holds `a` and goes on past it. (Not "holds keys on both sides of the cut
/// and of the next key written": entries between the two may have been dropped, and a
/// table whose rest was all dropped tombstones still covers that range until it is
/// replaced — publishing outputs up to `a` beside it made two tables of one level overlap,
/// and scans returned deleted keys out of order; stress space mode, seed 2310.)
fn straddles(tables: &[Arc<Table>], a: &[u8]) -> bool {
    let ranges: Vec<(&[u8], &[u8])> = tables.iter().map(|t| (t.min_key(), t.max_key())).collect();
    range_straddles(&ranges, a)
}

/// [`straddles`] over key ranges `(min, max)` (sorted, disjoint).
fn range_straddles(ranges: &[(&[u8], &[u8])], a: &[u8]) -> bool {
    let i = ranges.partition_point(|(_, max)| *max < a);
    ranges
        .get(i)
        .is_some_and(|(min, max)| *min <= a && *max > a)
}

/// True when `t` holds keys in `lo ..= hi`.
fn overlaps(t: &Table, lo: &[u8], hi: &[u8]) -> bool {
    t.min_key() <= hi && t.max_key() >= lo
}

impl Inner {
    /// Writes the oldest PMTable of the last buffer level `level` out to flash level 0
    /// (mio:flash's lazy copy); returns whether there was one.
    pub fn flash_write_out_step(&self, level: usize) -> Result<bool> {
        let Some(repo) = &self.flash else {
            return Ok(false);
        };
        let v = self.version();
        let Some(t) = v.levels.get(level).and_then(|l| l.first()).cloned() else {
            return Ok(false);
        };
        let src = t.source();
        let mut w = TableWriter::new(repo, repo.shape.sst_size);
        let mut copied = 0u64;
        let written: Result<bool> = (|| {
            let mut m = Merge::new(&[(&src as &dyn Source, t.meta.head)], b"")?;
            while let Some(e) = m.next_entry()? {
                if self.stop.load(Ordering::Acquire) {
                    return Ok(false); // written out again at the next open
                }
                copied += (e.key.len() + e.value.as_ref().map_or(0, Vec::len)) as u64;
                w.add(e.key, encode_value(e.seq, e.value.as_deref()))?;
                self.progress.fetch_add(1, Ordering::AcqRel);
            }
            Ok(true)
        })();
        let Some(out) = w.conclude(written)? else {
            return Ok(true); // closing: written out again at the next open
        };
        let c = &self.shared.counters;
        c.flash_tables_written.add(out.len() as u64);
        c.flash_bytes_written_out
            .add(out.iter().map(|t| t.file.len()).sum());
        c.compaction_bytes_copied.add(copied);
        repo.written_out.0.fetch_add(copied, Ordering::AcqRel);
        repo.written_out
            .1
            .fetch_add(out.iter().map(|t| t.file.len()).sum(), Ordering::AcqRel);
        self.publish_flash(FlashChange {
            written_out: Some((level, &t)),
            removed: Vec::new(),
            level: 0,
            added: out,
        })?;
        if let Some(n) = c.compactions.get(level) {
            n.incr();
        }
        self.notify();
        Ok(true)
    }

    /// Runs one flash compaction if the policy asks for one; returns whether it did.
    pub fn flash_compact_step(&self) -> Result<bool> {
        let Some(repo) = &self.flash else {
            return Ok(false);
        };
        let v = self.version();
        let tables = v.flash.tables();
        let counts = v.flash.counts();
        let bytes: Vec<u64> = (0..counts.len()).map(|l| v.flash.bytes(l)).collect();
        let min_keys: Vec<Vec<Vec<u8>>> = tables
            .iter()
            .map(|l| l.iter().map(|t| t.min_key().to_vec()).collect())
            .collect();
        // Pressure: flash room for less than a compaction's headroom (puts are being or
        // will soon be refused for flash).
        let pressure = self
            .flash_room()
            .is_some_and(|r| r < crate::flash::compaction_headroom(&repo.shape));
        let choice = {
            let pointers = repo.pointers.lock();
            choose(&counts, &bytes, &repo.shape, &pointers, &min_keys, pressure)
        };
        let FlashChoice::Compact { level, inputs } = choice else {
            return Ok(false);
        };
        let mut upper: Vec<Arc<Table>> = inputs
            .iter()
            .filter_map(|&i| tables.get(level).and_then(|l| l.get(i)).cloned())
            .collect();
        // Level 0: its oldest tables up to `L0_INPUT_TABLES` tables' worth (at least one).
        // The inputs leave only with the last piece, so their bytes are what a compaction
        // holds twice at most; the newer level-0 tables left behind stay above level 1.
        if level == 0 {
            let cap = L0_INPUT_TABLES * repo.shape.sst_size;
            let mut sum = 0u64;
            let keep = upper
                .iter()
                .take_while(|t| {
                    sum += t.file.len();
                    sum <= cap
                })
                .count()
                .max(1);
            upper.truncate(keep);
        }
        let (Some(lo), Some(hi)) = (
            upper.iter().map(|t| t.min_key()).min(),
            upper.iter().map(|t| t.max_key()).max(),
        ) else {
            return Ok(false);
        };
        let (lo, hi) = (lo.to_vec(), hi.to_vec());
        let lower: Vec<Arc<Table>> = tables
            .get(level + 1)
            .map(|l| {
                l.iter()
                    .filter(|t| overlaps(t, &lo, &hi))
                    .cloned()
                    .collect()
            })
            .unwrap_or_default();
        let lo2 = lower
            .iter()
            .map(|t| t.min_key())
            .fold(lo.as_slice(), |a, b| a.min(b));
        let hi2 = lower
            .iter()
            .map(|t| t.max_key())
            .fold(hi.as_slice(), |a, b| a.max(b));
        // A tombstone can go only where nothing deeper may hold an older version.
        let bottom = tables
            .iter()
            .skip(level + 2)
            .flatten()
            .all(|t| !overlaps(t, lo2, hi2));
        let mut sets: Vec<TableSet> = upper
            .iter()
            .map(|t| TableSet {
                tables: vec![t.clone()],
            })
            .collect();
        if !lower.is_empty() {
            sets.push(TableSet {
                tables: lower.clone(),
            });
        }
        // The output is published in pieces of about `PIECE_TABLES` tables: at a key
        // between two next-level tables (never inside one), once that much is written, the
        // outputs so far are listed in the next level together with the removal of the
        // next-level tables they replace. The inputs stay listed until the last piece:
        // they are newer than every output, so a reader meets their versions first, and a
        // crash between pieces leaves a state that reads the same and a compaction that
        // runs again. A piece needs flash room for a few tables, not for the whole
        // compaction (`compaction_headroom`): a compaction of all of a large level 0 into
        // an empty level 1 could not run on a nearly full device, and deletes then never
        // gave room back.
        let cut_bytes = PIECE_TABLES * repo.shape.sst_size;
        let c = &self.shared.counters;
        let mut next_lower = 0usize; // lower tables before it are published as replaced
        let mut w = TableWriter::new(repo, repo.shape.sst_size);
        let mut dropped = 0u64;
        let mut last_key: Option<Vec<u8>> = None;
        let merged: Result<bool> = (|| {
            let streams = sets
                .iter()
                .map(|s| FlashStream::new(s, b"", &repo.cache, usize::MAX))
                .collect();
            let mut m = Merge::with_flash(&[], streams, b"")?;
            while let Some(e) = m.next_entry()? {
                if self.stop.load(Ordering::Acquire) {
                    return Ok(false);
                }
                if let Some(k) = &last_key
                    && w.bytes_written() >= cut_bytes
                    && !straddles(&lower, k)
                {
                    let done = lower.partition_point(|t| t.max_key() <= k.as_slice());
                    let out =
                        std::mem::replace(&mut w, TableWriter::new(repo, repo.shape.sst_size))
                            .finish()?;
                    let replaced: Vec<Arc<Table>> =
                        lower.get(next_lower..done).unwrap_or_default().to_vec();
                    self.publish_piece(level, &replaced, out, &[])?;
                    next_lower = done.max(next_lower);
                }
                if e.value.is_none() && bottom {
                    dropped += 1;
                    continue;
                }
                last_key = Some(e.key.clone());
                w.add(e.key, encode_value(e.seq, e.value.as_deref()))?;
            }
            Ok(true)
        })();
        let Some(out) = w.conclude(merged)? else {
            return Ok(false);
        };
        c.flash_tombstones_dropped.add(dropped);
        let replaced: Vec<Arc<Table>> = lower.get(next_lower..).unwrap_or_default().to_vec();
        self.publish_piece(level, &replaced, out, &upper)?;
        if level > 0
            && let Some(p) = repo.pointers.lock().get_mut(level)
        {
            *p = hi;
        }
        if let Some(n) = c.flash_compactions.get(level) {
            n.incr();
        }
        Ok(true)
    }

    /// Publishes one piece of a flash compaction of `level`: `out` joins the next level,
    /// `replaced` (next-level tables) and `inputs` (the compaction's own, with its last
    /// piece) leave; then their files are unlinked.
    fn publish_piece(
        &self,
        level: usize,
        replaced: &[Arc<Table>],
        out: Vec<Arc<Table>>,
        inputs: &[Arc<Table>],
    ) -> Result<()> {
        let c = &self.shared.counters;
        c.flash_tables_written.add(out.len() as u64);
        c.flash_bytes_compacted
            .add(out.iter().map(|t| t.file.len()).sum());
        let removed: Vec<u64> = replaced.iter().chain(inputs).map(|t| t.number).collect();
        self.publish_flash(FlashChange {
            written_out: None,
            removed,
            level: level + 1,
            added: out,
        })?;
        if let Some(repo) = &self.flash {
            repo.remove_tables(replaced);
            repo.remove_tables(inputs);
        }
        Ok(())
    }

    /// Publishes `ch` (the commit point of a write-out or a flash compaction) and installs
    /// it in the readers' version. The new tables are written and synced already. If the
    /// directory could not even be allocated, nothing was published and they are removed;
    /// after any other failure the publish may or may not be durable, so they are left for
    /// the next open (which keeps them if listed, removes them if not).
    fn publish_flash(&self, ch: FlashChange<'_>) -> Result<()> {
        let Some(repo) = &self.flash else {
            return Err(Error::invalid("mio: not a mio:flash store"));
        };
        let mut st = self.dir.lock();
        let mut d = st.cur.clone();
        if let Some((level, t)) = ch.written_out {
            d.levels[level].retain(|m| m.id != t.meta.id);
            d.last_seq = d.last_seq.max(t.meta.max_seq);
        }
        let v = self.version();
        let mut lists = v.flash.tables();
        for l in &mut lists {
            l.retain(|t| !ch.removed.contains(&t.number));
        }
        let Some(target) = lists.get_mut(ch.level) else {
            return Err(Error::invalid(format!(
                "mio: flash level {} does not exist",
                ch.level
            )));
        };
        target.extend(ch.added.iter().cloned());
        if ch.level > 0 {
            target.sort_by(|a, b| a.min_key().cmp(b.min_key()));
        }
        let levels = FlashLevels::from_tables(lists);
        d.flash = levels.numbers();
        d.flash_next = d.flash_next.max(repo.next.load(Ordering::Acquire));
        self.shared.pool.crash_point("mio.flash.before_publish");
        if let Err(e) = self.publish(&mut st, d) {
            if matches!(e, Error::NoSpace { .. }) && st.cur.flash != levels.numbers() {
                repo.remove_tables(&ch.added);
            }
            return Err(e);
        }
        self.shared.pool.crash_point("mio.flash.after_publish");
        let mut vw = self.version.write();
        let mut nv: Version = (**vw).clone();
        if let Some((level, t)) = ch.written_out {
            nv.levels[level].retain(|x| x.meta.id != t.meta.id);
        }
        nv.flash = Arc::new(levels);
        *vw = Arc::new(nv);
        drop(vw);
        drop(st);
        if let Some((_, t)) = ch.written_out {
            t.retire();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::range_straddles;

    #[test]
    fn a_piece_is_cut_only_where_no_next_level_table_goes_on() {
        let r: [(&[u8], &[u8]); 2] = [(b"b", b"d"), (b"g", b"k")];
        // Before, between and after the tables, and at a table's last key: a cut is fine.
        for a in [&b"a"[..], b"d", b"e", b"k", b"z"] {
            assert!(!range_straddles(&r, a), "{a:?}");
        }
        // Inside a table (its first key included): no cut, even when the next key written
        // lies past the table (its rest was dropped tombstones: seed 2310's overlap).
        for a in [&b"b"[..], b"c", b"g", b"h"] {
            assert!(range_straddles(&r, a), "{a:?}");
        }
    }
}
