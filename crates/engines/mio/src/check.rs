//! `tierkv check` for a mio store (issue 18, item 11): every table's skiplist is in order
//! at every level and every upper-level list is a subsequence of level 0, and no live entry
//! of a table's DRAM seek index names a node that left it; levels and the
//! directory agree; every run the directory references is allocated with its tag; the
//! allocator's own invariants hold. With `mio:flash`: every flash table's blocks read back
//! whole (checksums), keys ascending and every entry a version; deeper levels' tables
//! ordered and disjoint; the directory lists exactly the readers' tables; no table file
//! the directory does not list.
//!
//! Thread safety: reads a cloned version and the directory under its lock.

use std::collections::{HashMap, HashSet};

use tierkv_core::{Error, Result, Tier};

use crate::node::MAX_HEIGHT;
use crate::seek_index::INDEX_LEVEL;
use crate::skiplist;
use crate::store::Inner;
use crate::table::{TAG_TABLE, TAG_WAL, Table};

/// Checks the store; one line per thing checked.
pub(crate) fn check(inner: &Inner) -> Result<Vec<String>> {
    let mut lines = Vec::new();
    // Publishers change the directory and the version under the directory lock, node
    // moves hold their level's lock, and a lazy copy or defragmentation step changes the
    // repository under its mutex (readers of the repository do not stop a lazy copy's
    // inserts, `lazycopy.rs`): with all three held the store stands still. Lock order:
    // the repository's mutex, the directory, the level locks.
    let _repository = inner.repository.lock();
    let st = inner.dir.lock();
    let _frozen: Vec<_> = inner.level_locks.iter().map(|l| l.read()).collect();
    let v = inner.version();
    let cs = inner.shared.alloc.chunk_size();
    let repo = v.levels.len() - 1;
    for (i, level) in v.levels.iter().enumerate() {
        // Where the nodes of this level's tables may lie: their runs (a zero-copy merge's
        // oldtable lists the newtable's too); the repository's nodes are objects anywhere.
        let runs: Option<Vec<(u64, u64)>> = (i != repo).then(|| {
            st.cur
                .levels
                .get(i)
                .into_iter()
                .flatten()
                .flat_map(|t| t.allocs.iter().map(|r| (r.off, r.off + r.chunks * cs)))
                .collect()
        });
        let mut nodes = 0;
        for t in level {
            nodes += check_table(t, runs.as_deref()).map_err(|e| {
                Error::corruption(
                    Tier::Pmem,
                    t.meta.head,
                    format!("level {i} table {} (head {}): {e}", t.meta.id, t.meta.head),
                )
            })?;
        }
        lines.push(format!(
            "level {i}: {} tables, {nodes} nodes in order at every height",
            level.len()
        ));
    }
    let (dir_runs, dir_levels) = {
        let runs: Vec<_> = st.cur.runs().collect();
        let levels: Vec<Vec<u64>> = st
            .cur
            .levels
            .iter()
            .map(|l| l.iter().map(|t| t.id).collect())
            .collect();
        (runs, levels)
    };
    let ver_levels: Vec<Vec<u64>> = v
        .levels
        .iter()
        .map(|l| l.iter().map(|t| t.meta.id).collect())
        .collect();
    if dir_levels != ver_levels {
        return Err(Error::corruption(
            Tier::Pmem,
            0,
            format!("directory levels {dir_levels:?} differ from the readers' {ver_levels:?}"),
        ));
    }
    lines.push("directory and readers' version list the same tables".into());
    if let Some(repo) = &inner.flash {
        lines.extend(check_flash(repo, &v.flash, &st.cur.flash)?);
    }
    let a = &inner.shared.alloc;
    a.check()?;
    let tagged: HashSet<u64> = [TAG_TABLE, TAG_WAL]
        .iter()
        .flat_map(|t| a.iter_chunks(*t))
        .map(|x| x.offset)
        .collect();
    for r in &dir_runs {
        if !tagged.contains(&r.off) {
            return Err(Error::corruption(
                Tier::Pmem,
                r.off,
                "a run the directory references is not allocated",
            ));
        }
    }
    // Runs held outside the directory (`space.rs`): the MemTables' flush targets and the
    // spare pair.
    let mut held: Vec<u64> = std::iter::once(&v.mem)
        .chain(v.imm.iter())
        .filter_map(|m| m.target.map(|r| r.off))
        .collect();
    if let Some(p) = *inner.spare.lock() {
        held.extend([p.log.off, p.table.off]);
    }
    // (Read without the writer lock: a switch or flush in between may change them.)
    held.retain(|off| tagged.contains(off));
    let pending = tagged
        .len()
        .saturating_sub(dir_runs.len())
        .saturating_sub(held.len());
    lines.push(format!(
        "allocator consistent; {} referenced runs allocated; {} flush targets and spare runs held; {pending} runs awaiting reclamation",
        dir_runs.len(),
        held.len()
    ));
    Ok(lines)
}

/// Checks the flash repository against the directory's lists `listed`.
fn check_flash(
    repo: &crate::flash::FlashRepo,
    levels: &crate::flash::FlashLevels,
    listed: &[Vec<u64>],
) -> Result<Vec<String>> {
    let bad = |what: String| Error::corruption(Tier::Flash, 0, format!("mio:flash: {what}"));
    if levels.numbers() != listed {
        return Err(bad(format!(
            "the directory lists tables {listed:?}, the readers see {:?}",
            levels.numbers()
        )));
    }
    let mut lines = Vec::new();
    for (i, tables) in levels.tables().iter().enumerate() {
        let mut entries = 0u64;
        for t in tables {
            let all = t.read_all()?;
            if all.len() as u64 != t.footer.entries {
                return Err(bad(format!(
                    "table {} holds {} entries, its footer says {}",
                    t.number,
                    all.len(),
                    t.footer.entries
                )));
            }
            for (j, (k, raw)) in all.iter().enumerate() {
                if crate::flash::decode_value(raw).is_none() {
                    return Err(bad(format!(
                        "table {} entry {j} is not a version",
                        t.number
                    )));
                }
                if j > 0 && all[j - 1].0 >= *k {
                    return Err(bad(format!("table {} keys out of order at {j}", t.number)));
                }
            }
            if all.first().map(|e| e.0.as_slice()) != Some(t.min_key())
                || all.last().map(|e| e.0.as_slice()) != Some(t.max_key())
            {
                return Err(bad(format!(
                    "table {} key range differs from its footer",
                    t.number
                )));
            }
            entries += all.len() as u64;
        }
        if i > 0 {
            for w in tables.windows(2) {
                if w[0].max_key() >= w[1].min_key() {
                    return Err(bad(format!(
                        "flash level {i}: tables {} and {} overlap or are out of order",
                        w[0].number, w[1].number
                    )));
                }
            }
        }
        lines.push(format!(
            "flash level {i}: {} tables, {entries} versions, blocks checked, keys in order{}",
            tables.len(),
            if i > 0 { ", tables disjoint" } else { "" }
        ));
    }
    let listed_files: HashSet<String> = listed
        .iter()
        .flatten()
        .map(|n| crate::flash::table_name(*n))
        .collect();
    let strays = repo
        .dev
        .list_files()
        .into_iter()
        .filter(|n| crate::flash::parse_table_name(n).is_some() && !listed_files.contains(n))
        .count();
    lines.push(format!(
        "flash: {} tables listed, {strays} table files being written or awaiting removal",
        listed_files.len()
    ));
    Ok(lines)
}

/// Checks one table whose nodes must lie in `runs` (`[start, end)` ranges; `None`: anywhere);
/// returns its node count. Every link of every level is checked before it is followed
/// further: aligned, inside the runs, to a node in order.
fn check_table(t: &Table, runs: Option<&[(u64, u64)]>) -> Result<u64> {
    let src = t.source();
    let mut level0 = HashSet::new();
    let bad = |at: u64, what: &str| {
        Error::corruption(Tier::Pmem, at, format!("table {}: {what}", t.meta.id))
    };
    let placed = |at: u64, h: &crate::node::NodeHeader| -> Result<()> {
        let end = at + h.size() as u64;
        if !at.is_multiple_of(8) {
            return Err(bad(at, "link to an unaligned node"));
        }
        if let Some(runs) = runs
            && !runs.iter().any(|(s, e)| at >= *s && end <= *e)
        {
            return Err(bad(at, "link to a node outside the table's runs"));
        }
        Ok(())
    };
    let n = skiplist::walk_level(&src, t.meta.head, 0, |at, h, _| {
        placed(at, h)?;
        level0.insert(at);
        Ok(())
    })?;
    let mut indexed = HashMap::new();
    for level in 1..MAX_HEIGHT {
        skiplist::walk_level(&src, t.meta.head, level, |at, h, key| {
            placed(at, h)?;
            if h.height <= level {
                return Err(bad(at, "node linked above its height"));
            }
            if !level0.contains(&at) {
                return Err(bad(at, "upper-level node missing from level 0"));
            }
            if level == INDEX_LEVEL {
                indexed.insert(at, key.to_vec());
            }
            Ok(())
        })?;
    }
    // The DRAM seek index (`seek_index.rs`): no live entry may name a node that left
    // the table (a zero-copy move marks those dead).
    if let Some(ix) = t.runs().index() {
        ix.verify(&indexed).map_err(|e| bad(t.meta.head, &e))?;
    }
    Ok(n)
}
