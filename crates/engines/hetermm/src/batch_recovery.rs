//! Recovery of write batches that span log pages (ours, issue 24; spec: `FORMAT.md` §
//! Batches that span pages): step 2 of recovery (recoverWAL, HeterMM §5.3.2) reads log
//! blocks in parallel, and a batch's parts and its commit may lie in different blocks, so
//! each reader only collects them ([`Spanning`]) and [`join`] decides once all are read.
//!
//! A commit stands for the operations of the parts with its timestamp, numbered 0 to
//! p − 1, when every one of them is there (copies left by log compression are the same
//! part twice and count once). Parts without a commit stand for nothing: the batch never
//! committed. A commit whose parts are not all there is **flushed** when its covered
//! address is below the flush frontier — its parts' log blocks were reclaimed or compressed
//! away because everything the batch wrote is in pmem, as they would have been for the
//! commit itself — and is then skipped, as a reclaimed entry would be; otherwise it is
//! `Corruption` (the parts were persisted before the commit was started, and a block
//! holding one is not retired while the commit's covered address is at or above
//! off_DRAM, which the frontier never trails).
//!
//! Thread safety: pure functions over the collected parts.

use std::collections::HashMap;

use tierkv_core::{Error, Result, Tier};

use crate::format::batch::{self, BatchOp};
use crate::format::log::{Entry, EntryKind};

/// A batch part read from a log block.
#[derive(Debug)]
struct Part<'a> {
    ts: u64,
    number: u32,
    ops: Vec<BatchOp<'a>>,
}

/// A batch commit read from a log block.
#[derive(Clone, Copy, Debug)]
struct Commit {
    ts: u64,
    parts: u32,
    ops: u32,
    address: u64,
    /// Pool offset of the log block it was read from (for errors).
    block: u64,
}

/// The parts and commits of batches that span pages, collected by one log reader.
#[derive(Debug, Default)]
pub struct Spanning<'a> {
    parts: Vec<Part<'a>>,
    commits: Vec<Commit>,
}

impl<'a> Spanning<'a> {
    /// Collects `e` if it is a batch part or commit (returns false for any other entry);
    /// `block` is its log block's pool offset. A part or commit that does not decode is
    /// `Corruption` (its checksum held, so its bytes are as written).
    pub fn collect(&mut self, e: &Entry<'a>, block: u64) -> Result<bool> {
        let bad = |what: &str| {
            Error::corruption(
                Tier::Pmem,
                block,
                format!("a hetermm batch {what} whose contents do not decode"),
            )
        };
        match e.kind {
            EntryKind::BatchPart => {
                let (number, ops) =
                    batch::decode_part(e.value, e.address).ok_or_else(|| bad("part"))?;
                self.parts.push(Part {
                    ts: e.ts,
                    number,
                    ops,
                });
                Ok(true)
            }
            EntryKind::BatchCommit => {
                let (parts, ops) = batch::decode_commit(e.value).ok_or_else(|| bad("commit"))?;
                self.commits.push(Commit {
                    ts: e.ts,
                    parts,
                    ops,
                    address: e.address,
                    block,
                });
                Ok(true)
            }
            _ => Ok(false),
        }
    }
}

/// Joins what the readers collected: calls `f` for every operation of every committed
/// batch that is not flushed away (see the module doc), with the operation's own
/// timestamp.
pub fn join<'a>(
    read: Vec<Spanning<'a>>,
    frontier: u64,
    mut f: impl FnMut(&BatchOp<'a>),
) -> Result<()> {
    let mut commits: HashMap<u64, Commit> = HashMap::new();
    let mut parts: Vec<Part<'a>> = Vec::new();
    for s in read {
        for c in s.commits {
            commits.entry(c.ts).or_insert(c);
        }
        parts.extend(s.parts);
    }
    let mut by_ts: HashMap<u64, Vec<Option<Part<'a>>>> = HashMap::new();
    for p in parts {
        let Some(c) = commits.get(&p.ts) else {
            continue; // never committed
        };
        if p.number >= c.parts {
            return Err(Error::corruption(
                Tier::Pmem,
                c.block,
                format!(
                    "a hetermm batch part numbered {} for a commit of {} parts",
                    p.number, c.parts
                ),
            ));
        }
        let slots = by_ts
            .entry(p.ts)
            .or_insert_with(|| (0..c.parts).map(|_| None).collect());
        if let Some(slot) = slots.get_mut(p.number as usize) {
            // A compressed copy is the same part again: keep the first.
            slot.get_or_insert(p);
        }
    }
    for (ts, c) in &commits {
        let found = by_ts.remove(ts).unwrap_or_default();
        let whole = found.len() == c.parts as usize && found.iter().all(Option::is_some);
        let ops: usize = found.iter().flatten().map(|p| p.ops.len()).sum();
        if !whole {
            if c.address < frontier {
                continue; // flushed: its parts were retired with everything in pmem
            }
            return Err(Error::corruption(
                Tier::Pmem,
                c.block,
                format!(
                    "a committed hetermm batch of {} parts is missing some of them",
                    c.parts
                ),
            ));
        }
        if ops != c.ops as usize {
            return Err(Error::corruption(
                Tier::Pmem,
                c.block,
                format!(
                    "a committed hetermm batch of {} operations has {ops} in its parts",
                    c.ops
                ),
            ));
        }
        for op in found.iter().flatten().flat_map(|p| &p.ops) {
            f(op);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::log::{self, Place};

    fn op(key: &'static [u8], ts: u64) -> BatchOp<'static> {
        BatchOp {
            ts,
            record: 64,
            kind: EntryKind::Put,
            key,
            value: b"v",
        }
    }

    /// Encodes a committed entry and collects it.
    fn collect(s: &mut Spanning<'static>, kind: EntryKind, ts: u64, address: u64, value: Vec<u8>) {
        let at = Place { address, record: 0 };
        let mut e = Vec::new();
        log::encode_entry(&mut e, 1, ts, at, kind, b"", &value);
        let bytes: &'static [u8] = Box::leak(e.into_boxed_slice());
        let d = log::decode_entry(bytes, 1, log::VERSION).unwrap();
        assert!(s.collect(&d, 0).unwrap());
    }

    fn joined(read: Vec<Spanning<'static>>, frontier: u64) -> Result<Vec<&'static [u8]>> {
        let mut keys = Vec::new();
        join(read, frontier, |o| keys.push(o.key))?;
        keys.sort();
        Ok(keys)
    }

    #[test]
    fn a_commit_stands_for_all_its_parts_across_readers_and_copies() {
        let (mut a, mut b) = (Spanning::default(), Spanning::default());
        collect(
            &mut a,
            EntryKind::BatchPart,
            9,
            4096,
            batch::encode_part(&[op(b"a", 3)], 0),
        );
        collect(
            &mut b,
            EntryKind::BatchPart,
            9,
            4096,
            batch::encode_part(&[op(b"b", 4), op(b"c", 5)], 1),
        );
        collect(
            &mut b,
            EntryKind::BatchPart,
            9,
            4096,
            batch::encode_part(&[op(b"a", 3)], 0),
        );
        collect(
            &mut b,
            EntryKind::BatchCommit,
            9,
            4096,
            batch::encode_commit(2, 3).to_vec(),
        );
        collect(
            &mut a,
            EntryKind::BatchPart,
            11,
            4096,
            batch::encode_part(&[op(b"x", 10)], 0),
        );
        let keys = joined(vec![a, b], 0).unwrap();
        assert_eq!(
            keys,
            vec![&b"a"[..], b"b", b"c"],
            "parts without a commit stand for nothing"
        );
    }

    #[test]
    fn a_commit_missing_a_part_is_flushed_below_the_frontier_and_corruption_above() {
        let make = || {
            let mut a = Spanning::default();
            collect(
                &mut a,
                EntryKind::BatchPart,
                9,
                4096,
                batch::encode_part(&[op(b"a", 3)], 1),
            );
            collect(
                &mut a,
                EntryKind::BatchCommit,
                9,
                4096,
                batch::encode_commit(2, 2).to_vec(),
            );
            a
        };
        assert_eq!(joined(vec![make()], 8192).unwrap(), Vec::<&[u8]>::new());
        assert!(matches!(
            joined(vec![make()], 4096),
            Err(Error::Corruption { .. })
        ));
        let mut wrong = Spanning::default();
        collect(
            &mut wrong,
            EntryKind::BatchPart,
            9,
            4096,
            batch::encode_part(&[op(b"a", 3)], 0),
        );
        collect(
            &mut wrong,
            EntryKind::BatchPart,
            9,
            4096,
            batch::encode_part(&[op(b"b", 3)], 1),
        );
        collect(
            &mut wrong,
            EntryKind::BatchCommit,
            9,
            4096,
            batch::encode_commit(2, 3).to_vec(),
        );
        assert!(
            matches!(joined(vec![wrong], 0), Err(Error::Corruption { .. })),
            "an operation count that does not add up"
        );
        let mut past = Spanning::default();
        collect(
            &mut past,
            EntryKind::BatchPart,
            9,
            4096,
            batch::encode_part(&[op(b"a", 3)], 2),
        );
        collect(
            &mut past,
            EntryKind::BatchCommit,
            9,
            4096,
            batch::encode_commit(2, 2).to_vec(),
        );
        assert!(
            matches!(joined(vec![past], 0), Err(Error::Corruption { .. })),
            "a part past the count"
        );
    }
}
