//! `tierkv check` for a mio store (issue 18, item 11): every table's skiplist is in order
//! at every level and every upper-level list is a subsequence of level 0; levels and the
//! directory agree; every run the directory references is allocated with its tag; the
//! allocator's own invariants hold.
//!
//! Thread safety: reads a cloned version and the directory under its lock.

use std::collections::HashSet;

use tierkv_core::{Error, Result, Tier};

use crate::node::MAX_HEIGHT;
use crate::skiplist::{self, Source};
use crate::store::Inner;
use crate::table::{TAG_TABLE, TAG_WAL, Table};

/// Checks the store; one line per thing checked.
pub(crate) fn check(inner: &Inner) -> Result<Vec<String>> {
    let mut lines = Vec::new();
    let v = inner.version();
    for (i, level) in v.levels.iter().enumerate() {
        let mut nodes = 0;
        for t in level {
            nodes += check_table(t)?;
        }
        lines.push(format!(
            "level {i}: {} tables, {nodes} nodes in order at every height",
            level.len()
        ));
    }
    let (dir_runs, dir_levels) = {
        let st = inner.dir.lock();
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
    let pending = tagged.len().saturating_sub(dir_runs.len());
    lines.push(format!(
        "allocator consistent; {} referenced runs allocated; {pending} runs awaiting reclamation",
        dir_runs.len()
    ));
    Ok(lines)
}

/// Checks one table; returns its node count.
fn check_table(t: &Table) -> Result<u64> {
    let src = t.source();
    let mut level0 = HashSet::new();
    let mut n = 0;
    for level in 0..MAX_HEIGHT {
        let mut at = skiplist::next(&src, t.meta.head, level)?;
        let mut prev: Option<(Vec<u8>, u64)> = None;
        while at != 0 {
            let h = skiplist::header(&src, at)?;
            let key = skiplist::key(&src, at, &h)?.into_owned();
            if let Some((pk, ps)) = &prev
                && skiplist::cmp_node(pk, *ps, &key, h.seq) != std::cmp::Ordering::Less
            {
                return Err(Error::corruption(
                    Tier::Pmem,
                    at,
                    format!("table {}: level {level} out of order", t.meta.id),
                ));
            }
            if h.height <= level {
                return Err(Error::corruption(
                    Tier::Pmem,
                    at,
                    format!("table {}: node linked above its height", t.meta.id),
                ));
            }
            if level == 0 {
                level0.insert(at);
                n += 1;
            } else if !level0.contains(&at) {
                return Err(Error::corruption(
                    Tier::Pmem,
                    at,
                    format!(
                        "table {}: level {level} node missing from level 0",
                        t.meta.id
                    ),
                ));
            }
            prev = Some((key, h.seq));
            at = skiplist::next(&src, at, level)?;
        }
    }
    let _ = src.word(t.meta.head)?;
    Ok(n)
}
