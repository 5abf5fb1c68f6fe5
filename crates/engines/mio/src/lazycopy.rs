//! Lazy-copy compaction (MioDB §4.4; P4 in `FORMAT.md`): the oldest table of the last
//! buffer level is merged into the data repository, one huge skiplist whose nodes are
//! individual pool objects. For the newest version of each key of the table:
//!
//! 1. if the repository holds no version at least as new: allocate a node, write it with
//!    its links already pointing at its successors, persist; link it at level 0, persist,
//!    then at the upper levels, each persisted;
//! 2. unlink the older versions of the key that follow (for a tombstone: every version),
//!    top level first, each link persisted; then free them.
//!
//! Every step is idempotent (an insert is skipped when the repository already holds a
//! version at least as new), and the source table stays listed in its level until the copy
//! ends with one directory publish, so a crash anywhere re-runs the copy at the next open;
//! a node allocated but not linked, or unlinked but not freed, is an unreferenced object
//! that recovery frees. Only the newest version of each key reaches the repository, and
//! tombstones are dropped there (nothing older exists).
//!
//! Readers and reclamation: readers never take a lock against the copy itself. A node is
//! whole and persisted before a single-word store links it (level 0 first), and an unlinked
//! node keeps its links, so a reader walking the repository meanwhile sees each node
//! linked or not, and one standing on a node being unlinked walks on through its links;
//! while a key's new node is linked and its older version not yet unlinked, the reader
//! meets the newer first (versions are ordered newest first), and the source table, which
//! its version still lists and it searches before the repository, holds that newer
//! version anyway. Only the free of an unlinked node excludes readers: it takes the
//! repository level's lock exclusively, which waits until no reader (they hold it shared
//! for their whole read of the repository, `store.rs`) can still stand on the node; one
//! that comes later cannot reach it. So an insert of a new key takes no lock at all (it
//! used to hold the lock exclusively for each entry, and every get waited behind it). The
//! source table's runs are freed when the last version that lists it is dropped
//! (`table.rs`).
//!
//! Cost: the table's entries come in key order and only this copy changes the repository
//! meanwhile (its mutex keeps defragmentation out), so each entry's search starts where
//! the last one's ended ([`Finger`]) instead of at the head.
//!
//! Thread safety: run by the last buffer level's compaction thread only.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use parking_lot::RwLock;
use tierkv_core::Result;

use crate::merge::Merge;
use crate::node::{self, Kind, MAX_HEIGHT, link_off as link};
use crate::skiplist::{self, Entry, Finger, Source};
use crate::store::Inner;
use crate::table::{PoolSource, Shared, Table};
use crate::version::Version;

/// What applying one entry did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Applied {
    /// Key and value bytes copied into a new node.
    pub copied: u64,
    /// Bytes of the node allocated (0: none).
    pub node_bytes: u64,
    /// Older versions unlinked and freed.
    pub freed: u64,
}

/// Encodes a whole node (header, links, key, value, padding).
fn encode_node(e: &Entry, kind: Kind, height: usize, links: &[u64]) -> Vec<u8> {
    let value = e.value.as_deref().unwrap_or_default();
    let mut b = Vec::with_capacity(node::node_len(e.key.len(), value.len(), height));
    for w in node::encode_header(e.seq, kind, e.key.len(), height, value.len()) {
        b.extend_from_slice(&w.to_le_bytes());
    }
    for l in links {
        b.extend_from_slice(&l.to_le_bytes());
    }
    b.extend_from_slice(&e.key);
    b.extend_from_slice(value);
    b.resize(b.len().next_multiple_of(8), 0);
    b
}

/// Applies the newest version `e` of a key to the repository whose head is at `head`
/// (steps 1-2). `height` is the height a new node gets. `readers`: the lock readers of the
/// repository hold shared (none at recovery, where older versions are freed at once);
/// with one, the older versions it unlinks are pushed on `unlinked`, for
/// [`free_unlinked`] to free under that lock. `finger`: where the last entry of this copy
/// was applied (entries come in key order and the caller owns the repository's changes
/// meanwhile), or [`Finger::default`].
pub fn apply(
    sh: &Shared,
    head: u64,
    e: &Entry,
    height: usize,
    (readers, unlinked): (Option<&RwLock<()>>, &mut Vec<u64>),
    finger: &mut Finger,
) -> Result<Applied> {
    let pool = &sh.pool;
    let src = PoolSource(pool);
    let mut preds = [0u64; MAX_HEIGHT];
    let after = skiplist::find_preds_from(&src, head, finger, &e.key, u64::MAX, &mut preds)?;
    let newest = if after == 0 {
        None
    } else {
        let h = skiplist::header(&src, after)?;
        (skiplist::key(&src, after, &h)?.as_ref() == e.key.as_slice()).then_some((after, h))
    };
    let mut out = Applied::default();
    // The node older versions follow, with its height (0: none, remove from preds).
    let anchor: (u64, usize) = match (&e.value, newest) {
        (Some(_), Some((n, h))) if h.seq >= e.seq => {
            // A re-run after a crash in the middle of this node's insert: it is linked at
            // level 0 but perhaps not above; finish linking it before it anchors the
            // unlinks (whose predecessors at a level are the anchor only if it is there).
            for (l, p) in preds.iter().enumerate().take(h.height) {
                let succ = skiplist::next(&src, *p, l)?;
                if succ != n {
                    pool.store_u64(n + link(l), succ)?;
                    sh.persist("lc-node", n + link(l), 8)?;
                    pool.store_u64(p + link(l), n)?;
                    sh.persist("lc-link", p + link(l), 8)?;
                }
            }
            (n, h.height)
        }
        (Some(v), _) => {
            let links: Vec<u64> = (0..height)
                .map(|l| skiplist::next(&src, preds[l], l))
                .collect::<Result<_>>()?;
            let bytes = encode_node(e, Kind::Put, height, &links);
            let n = sh.alloc.alloc(bytes.len() as u64)?;
            pool.write(n, &bytes)?;
            sh.persist("lc-node", n, bytes.len())?;
            pool.crash_point("mio.lazycopy.after_copy");
            // IMPORTANT: level 0 first; the node is whole and persisted before it is
            // reachable.
            for (l, p) in preds.iter().enumerate().take(height) {
                pool.store_u64(p + link(l), n)?;
                sh.persist("lc-link", p + link(l), 8)?;
                pool.crash_point("mio.lazycopy.after_link");
            }
            out.copied = (e.key.len() + v.len()) as u64;
            out.node_bytes = bytes.len() as u64;
            (n, height)
        }
        (None, _) => (0, 0),
    };
    loop {
        let y = match anchor {
            (0, _) => skiplist::next(&src, preds[0], 0)?,
            (a, _) => skiplist::next(&src, a, 0)?,
        };
        if y == 0 {
            break;
        }
        let hy = skiplist::header(&src, y)?;
        if skiplist::key(&src, y, &hy)?.as_ref() != e.key.as_slice()
            || hy.seq >= e.seq && anchor.0 == 0
        {
            break;
        }
        for l in (0..hy.height).rev() {
            let p = if l < anchor.1 { anchor.0 } else { preds[l] };
            if skiplist::next(&src, p, l)? == y {
                pool.store_u64(p + link(l), skiplist::next(&src, y, l)?)?;
                sh.persist("lc-unlink", p + link(l), 8)?;
            }
        }
        pool.crash_point("mio.lazycopy.before_free");
        match readers {
            Some(_) => unlinked.push(y),
            None => sh.alloc.free(y)?,
        }
        out.freed += 1;
    }
    // The freed nodes followed the anchor: the finger never holds one.
    match anchor {
        (0, _) => finger.after_search(&preds),
        (a, h) => finger.after_insert(&preds, a, h),
    }
    Ok(out)
}

/// Unlinked repository nodes a lazy copy frees at once: one exclusive hold of the
/// repository's reader lock per this many, not one per node (gets read the repository
/// under it shared, so each exclusive hold waits for every get inside and stops new ones:
/// held per node, a copy under a read-heavy load crawled and gets queued behind it).
const FREE_BATCH: usize = 1024;

/// Frees the nodes in `unlinked` (unlinked from the repository at every level) holding
/// `readers` exclusively once: no reader still stands on one (every reader that could
/// reach one entered before its unlink, and holds the lock shared until it leaves), and
/// none can reach one after. A crash before leaves them unreferenced objects, which
/// recovery frees.
pub fn free_unlinked(sh: &Shared, readers: &RwLock<()>, unlinked: &mut Vec<u64>) -> Result<()> {
    if unlinked.is_empty() {
        return Ok(());
    }
    let _no_reader = readers.write();
    for y in unlinked.drain(..) {
        sh.alloc.free(y)?;
    }
    Ok(())
}

impl Inner {
    /// Copies the oldest table of the last buffer level `level` into the repository, then
    /// drops it from the directory (§4.4); returns whether there was one.
    pub fn lazy_copy_step(&self, level: usize) -> Result<bool> {
        let _owner = self.repository.lock();
        let v = self.version();
        let repo = v.levels.len() - 1;
        let (Some(t), Some(r)) = (
            v.levels[level].first().cloned(),
            v.levels[repo].first().cloned(),
        ) else {
            return Ok(false);
        };
        let src = t.source();
        let mut m = Merge::new(&[(&src as &dyn Source, t.meta.head)], b"")?;
        let c = &self.shared.counters;
        // The repository mutex keeps defragmentation out: only this copy changes it.
        let mut finger = Finger::default();
        let readers = &self.level_locks[repo];
        let mut unlinked = Vec::new();
        // In bursts while the level is within the bound the merges keep (`zerocopy.rs`).
        let yields = v.levels[level].len() < 3 * self.opts.trigger;
        let mut bursts = crate::background::Bursts::start();
        while let Some(e) = m.next_entry()? {
            bursts.between_steps(yields, &self.shared);
            if self.stop.load(Ordering::Acquire) {
                free_unlinked(&self.shared, readers, &mut unlinked)?;
                return Ok(true); // re-run (idempotently) at the next open
            }
            // The repository node keeps the table node's height (random when the MemTable
            // drew it), which is what the table's cost counted (`space.rs`).
            let height = e.height.clamp(1, MAX_HEIGHT);
            let a = apply(
                &self.shared,
                r.meta.head,
                &e,
                height,
                (Some(readers), &mut unlinked),
                &mut finger,
            )?;
            if unlinked.len() >= FREE_BATCH {
                free_unlinked(&self.shared, readers, &mut unlinked)?;
            }
            if a.node_bytes > 0 {
                self.lazy_done.lock().add(self.sizes.slot(a.node_bytes));
            }
            self.progress.fetch_add(1, Ordering::AcqRel);
            c.compaction_bytes_copied.add(a.copied);
            c.repository_nodes_freed.add(a.freed);
        }
        free_unlinked(&self.shared, readers, &mut unlinked)?;
        self.publish_lazy_copy(level, &t)?;
        if let Some(c) = c.compactions.get(level) {
            c.incr();
        }
        self.notify();
        Ok(true)
    }

    fn publish_lazy_copy(&self, level: usize, t: &Arc<Table>) -> Result<()> {
        let mut st = self.dir.lock();
        let mut d = st.cur.clone();
        d.levels[level].retain(|m| m.id != t.meta.id);
        d.last_seq = d.last_seq.max(t.meta.max_seq);
        self.shared.pool.crash_point("mio.lazycopy.before_publish");
        self.publish(&mut st, d)?;
        self.shared.pool.crash_point("mio.lazycopy.after_publish");
        let mut v = self.version.write();
        let mut nv: Version = (**v).clone();
        nv.levels[level].retain(|x| x.meta.id != t.meta.id);
        *v = Arc::new(nv);
        // The table's debt leaves with it (what it still owed was never needed).
        *self.lazy_done.lock() = Default::default();
        // Slabs a defragmentation step found holding a non-node object are tried again
        // (such objects come and go: directory objects, merge marks).
        self.defrag_skip.lock().clear();
        drop(v);
        drop(st);
        t.retire();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arena::Arena;
    use crate::stats::Counters;
    use std::collections::{BTreeMap, HashSet};
    use tierkv_core::media::pmem::{
        DurabilityMode, EmulatedLatency, PmemAllocator, PmemConfig, PmemPool,
    };

    fn repository(dir: &std::path::Path) -> (Arc<Shared>, u64) {
        let pool = PmemPool::create(&PmemConfig {
            path: dir.join("pool"),
            size: 8 << 20,
            mode: DurabilityMode::Volatile,
            latency: EmulatedLatency::default(),
        })
        .unwrap();
        let start = pool.data_start();
        let alloc =
            PmemAllocator::format(pool.clone(), start, pool.len() - start, 16 << 10).unwrap();
        let sh = Arc::new(Shared {
            pool,
            alloc,
            counters: Counters::default(),
            hook: None,
            flush_awaited: Default::default(),
        });
        let head = sh.alloc.alloc(node::HEAD_LEN as u64).unwrap();
        sh.pool.write(head, &Arena::new(0, 1).snapshot()).unwrap();
        (sh, head)
    }

    /// Every level in order and a subset of level 0; returns level 0's (key, seq).
    fn walk(sh: &Shared, head: u64) -> Vec<(Vec<u8>, u64)> {
        let src = PoolSource(&sh.pool);
        let mut l0 = Vec::new();
        let mut offs = HashSet::new();
        skiplist::walk_level(&src, head, 0, |at, h, k| {
            offs.insert(at);
            l0.push((k.to_vec(), h.seq));
            Ok(())
        })
        .unwrap();
        for level in 1..MAX_HEIGHT {
            skiplist::walk_level(&src, head, level, |at, _, _| {
                assert!(offs.contains(&at), "level {level} node {at} not in level 0");
                Ok(())
            })
            .unwrap();
        }
        l0
    }

    #[test]
    fn lazy_copy_keeps_one_version_per_key_and_drops_tombstones() {
        let d = tempfile::tempdir().unwrap();
        let (sh, head) = repository(d.path());
        let mut model: BTreeMap<Vec<u8>, u64> = BTreeMap::new();
        let mut rng = 99u64;
        let mut seq = 0;
        for _round in 0..40 {
            // One "table": newest version per key, in key order.
            let mut batch: BTreeMap<Vec<u8>, Option<Vec<u8>>> = BTreeMap::new();
            for _ in 0..30 {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                let k = format!("k{:03}", rng % 97).into_bytes();
                let v = (!rng.is_multiple_of(5)).then(|| vec![b'x'; (rng % 200) as usize]);
                batch.insert(k, v);
            }
            for (k, v) in batch {
                seq += 1;
                let e = Entry {
                    key: k.clone(),
                    seq,
                    value: v.clone(),
                    height: 1,
                };
                let h = node::random_height(&mut rng);
                apply(
                    &sh,
                    head,
                    &e,
                    h,
                    (None, &mut Vec::new()),
                    &mut Finger::default(),
                )
                .unwrap();
                // Applying the same entry again changes nothing (idempotent re-run).
                assert_eq!(
                    apply(
                        &sh,
                        head,
                        &e,
                        h,
                        (None, &mut Vec::new()),
                        &mut Finger::default()
                    )
                    .unwrap(),
                    Applied::default()
                );
                match v {
                    Some(_) => model.insert(k, seq),
                    None => model.remove(&k),
                };
            }
            let got = walk(&sh, head);
            let want: Vec<(Vec<u8>, u64)> = model.iter().map(|(k, s)| (k.clone(), *s)).collect();
            assert_eq!(got, want, "one version per key, newest, no tombstones");
        }
        // Freed older versions went back to the allocator: only live nodes (+ the head).
        let objects = sh.alloc.iter_allocated().count();
        assert_eq!(objects, model.len() + 1);
    }

    /// With the repository's reader lock, the older versions a lazy copy unlinks are kept
    /// for one batched free: still allocated after `apply`, unreachable at every level, and
    /// freed by `free_unlinked` only once the reader that holds the lock shared is gone.
    #[test]
    fn unlinked_versions_are_freed_in_a_batch_once_no_reader_holds_the_repository() {
        let d = tempfile::tempdir().unwrap();
        let (sh, head) = repository(d.path());
        let readers = RwLock::new(());
        let mut unlinked = Vec::new();
        let entry = |i: u64, seq: u64| Entry {
            key: format!("key{i:03}").into_bytes(),
            seq,
            value: Some(vec![b'v'; 100]),
            height: 1,
        };
        let mut used = 0;
        for seq in 1..=2u64 {
            for i in 0..50 {
                let at = (Some(&readers), &mut unlinked);
                let a = apply(&sh, head, &entry(i, seq), 2, at, &mut Finger::default());
                assert_eq!(
                    a.unwrap().freed,
                    seq - 1,
                    "the second version unlinks the first"
                );
            }
            if seq == 1 {
                used = sh.alloc.stats().used_bytes;
            }
        }
        assert_eq!(unlinked.len(), 50);
        assert!(
            sh.alloc.stats().used_bytes > used,
            "the old versions are still allocated"
        );
        let l0 = walk(&sh, head);
        assert_eq!(l0.len(), 50);
        assert!(
            l0.iter().all(|(_, seq)| *seq == 2),
            "only the new versions are linked"
        );
        let freed = std::sync::atomic::AtomicBool::new(false);
        std::thread::scope(|s| {
            let reader = readers.read();
            let h = s.spawn(|| {
                free_unlinked(&sh, &readers, &mut unlinked).unwrap();
                freed.store(true, std::sync::atomic::Ordering::Release);
            });
            std::thread::sleep(std::time::Duration::from_millis(100));
            assert!(
                !freed.load(std::sync::atomic::Ordering::Acquire),
                "freed while a reader held the repository"
            );
            drop(reader);
            h.join().unwrap();
        });
        assert!(unlinked.is_empty());
        assert_eq!(sh.alloc.stats().used_bytes, used, "every old version freed");
    }
}
