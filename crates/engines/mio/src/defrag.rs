//! Repository defragmentation (not in the MioDB paper; `FORMAT.md` § Defragmentation).
//!
//! The data repository's nodes are individual slab objects (§4.4), so after deletes its
//! slabs are partly empty, and their free slots serve only their own size class: deleting
//! many small values and then writing large ones found the pool "full" with a third of it
//! free in slots (stress space mode, seed 9566). Under space pressure the repository's
//! owner therefore empties sparse slabs by moving their nodes into other slabs of the same
//! class, which gives whole chunks back:
//!
//! 1. **Pick** ([`pick_victim`]): the least used slab of a class whose free slots, less one
//!    whole chunk's worth, still hold the class's debt (what lazy copies will put there,
//!    `space.rs`) — so the move never takes room the room rule promised, and the chunk it
//!    frees is a gain. Slabs holding objects that are not repository nodes (the head, the
//!    directory object, merge marks) are left alone.
//! 2. **Evacuate** (`PmemAllocator::evacuate_slab`): nothing new lands in the slab.
//! 3. **Move** each node ([`move_node`]), holding the repository level's lock exclusively
//!    (no reader is inside the repository): copy it whole into a slot of another slab and
//!    persist; link the copy at level 0, then at each upper level where the old node is
//!    linked, each link persisted; free the old node. The slab is released with its last
//!    object.
//!
//! Crash cases (recovery walks level 0 and keeps what it reaches, `recovery.rs`):
//! - before the level-0 link: the copy is unreferenced and freed as a leak;
//! - after it: level 0 reaches the copy, some upper levels may still reach the old node.
//!   Recovery unlinks, at every upper level, each node that level 0 does not reach
//!   (`recovery::unlink_upper_only`) before it frees the unreferenced objects, so no link
//!   is left pointing at a freed object. (No other operation leaves such a node: a lazy
//!   copy links level 0 first and unlinks it last.)
//!
//! Thread safety: a step holds `Inner::repository` (as a lazy copy step does), so one
//! thread at a time changes the repository's structure.

use std::collections::HashSet;
use std::sync::atomic::Ordering;

use tierkv_core::media::pmem::alloc::{SlabEvacuation, SlabUsage};
use tierkv_core::{Error, Result};

use crate::node::{MAX_HEIGHT, link_off as link};
use crate::skiplist;
use crate::space::{Debt, Sizes};
use crate::store::Inner;
use crate::table::{PoolSource, Shared};

/// The slab to evacuate, if any: per class, the least used slab whose removal leaves the
/// class's other free slots holding its objects and the class's debt. `pinned` are
/// chunk offsets that hold objects other than repository nodes.
pub fn pick_victim(
    sizes: &Sizes,
    slabs: &[SlabUsage],
    debt: &Debt,
    pinned: &HashSet<u64>,
) -> Option<SlabUsage> {
    let mut free = Debt::default();
    for s in slabs {
        let slot = usize::from(s.class);
        if slot < sizes.classes.len() {
            free.add((slot, u64::from(s.capacity - s.used) * s.object_size));
        }
    }
    slabs
        .iter()
        .filter(|s| {
            let slot = usize::from(s.class);
            let whole = u64::from(s.capacity) * s.object_size;
            slot < sizes.classes.len()
                && s.used < s.capacity
                && !pinned.contains(&s.offset)
                && free.0[slot] >= whole + debt.0[slot]
        })
        .min_by_key(|s| (s.used, s.offset))
        .copied()
}

/// What moving one object did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Moved {
    /// The node was copied, relinked and freed (its bytes).
    Node(u64),
    /// The object is not a node linked at level 0 of the repository.
    NotANode,
}

/// Moves the repository node at `old` (in the slab `ev` evacuates) to a slot of another
/// slab: copy, persist, link at level 0, then the upper levels, then free `old`. The
/// caller holds the repository level's lock exclusively.
pub fn move_node(
    sh: &Shared,
    head: u64,
    old: u64,
    object_size: u64,
    ev: &SlabEvacuation<'_>,
) -> Result<Moved> {
    let pool = &sh.pool;
    let src = PoolSource(pool);
    // Whatever the object holds, a failed decode only means "not a node".
    let Ok(h) = skiplist::header(&src, old) else {
        return Ok(Moved::NotANode);
    };
    let Ok(key) = skiplist::key(&src, old, &h).map(|k| k.into_owned()) else {
        return Ok(Moved::NotANode);
    };
    if h.size() as u64 > object_size {
        return Ok(Moved::NotANode);
    }
    let mut preds = [0u64; MAX_HEIGHT];
    if skiplist::find_preds(&src, head, &key, h.seq, &mut preds)? != old {
        return Ok(Moved::NotANode);
    }
    let len = h.size();
    let bytes = pool.read(old, len)?.to_vec();
    let new = ev.alloc_elsewhere()?;
    let copied = pool
        .write(new, &bytes)
        .and_then(|()| sh.persist("df-node", new, len));
    if let Err(e) = copied {
        let _ = sh.alloc.free(new);
        return Err(e);
    }
    pool.crash_point("mio.defrag.after_copy");
    // IMPORTANT: level 0 first (the copy is whole and persisted before it is reachable);
    // recovery unlinks an old node left reachable only from upper levels.
    for (l, p) in preds.iter().enumerate().take(h.height) {
        if skiplist::next(&src, *p, l)? == old {
            pool.store_u64(p + link(l), new)?;
            sh.persist("df-link", p + link(l), 8)?;
            pool.crash_point("mio.defrag.after_link");
        }
    }
    sh.alloc.free(old)?;
    Ok(Moved::Node(len as u64))
}

impl Inner {
    /// Chunks holding objects that are not repository nodes: the repository head, the
    /// directory object, merge marks.
    fn pinned_chunks(&self) -> HashSet<u64> {
        let chunk = self.sizes.chunk;
        let start = self.shared.alloc.layout().chunks_off;
        let of = |off: u64| start + (off.saturating_sub(start) / chunk) * chunk;
        let st = self.dir.lock();
        let mut out: HashSet<u64> = st.cur.merges.iter().map(|m| of(m.mark)).collect();
        out.insert(of(st.off));
        if let Some(r) = st.cur.levels.last().and_then(|l| l.first()) {
            out.insert(of(r.head));
        }
        out.extend(self.defrag_skip.lock().iter().copied());
        out
    }

    /// The slab a defragmentation step would evacuate now, if any.
    pub fn defrag_victim(&self) -> Option<SlabUsage> {
        let debt = {
            let v = self.version.read();
            let mut d = v.debt();
            d.pay(&self.lazy_done.lock());
            d
        };
        let slabs = self.shared.alloc.slabs();
        pick_victim(&self.sizes, &slabs, &debt, &self.pinned_chunks())
    }

    /// One defragmentation step: evacuates one slab (see the module doc). Returns whether
    /// a chunk went back to the pool.
    pub fn defrag_step(&self) -> Result<bool> {
        let _owner = self.repository.lock();
        let Some(victim) = self.defrag_victim() else {
            return Ok(false);
        };
        let v = self.version();
        let repo = v.levels.len() - 1;
        let Some(r) = v.levels[repo].first() else {
            return Ok(false);
        };
        // The slab was picked from a snapshot: flushes and compactions free objects
        // meanwhile, so it may be gone (released, or a chunk of another use) by now.
        let Some(ev) = self
            .shared
            .alloc
            .evacuate_slab_of(victim.offset, victim.class)?
        else {
            return Ok(false);
        };
        let c = &self.shared.counters;
        for old in ev.objects()? {
            if self.stop.load(Ordering::Acquire) {
                return Ok(false);
            }
            let moved = {
                let _exclusive = self.level_locks[repo].write();
                move_node(&self.shared, r.meta.head, old, victim.object_size, &ev)
            };
            match moved {
                Ok(Moved::Node(bytes)) => {
                    c.defrag_nodes_moved.incr();
                    c.defrag_bytes_moved.add(bytes);
                    self.progress.fetch_add(1, Ordering::AcqRel);
                }
                Ok(Moved::NotANode) => {
                    self.defrag_skip.lock().insert(victim.offset);
                    return Ok(false);
                }
                // The class's other slabs filled up meanwhile: stop; the slab is an
                // ordinary one again when `ev` drops.
                Err(Error::NoSpace { .. }) => return Ok(false),
                Err(e) => return Err(e),
            }
        }
        let released = ev.is_released();
        drop(ev);
        if released {
            c.defrag_chunks_freed.incr();
            self.notify();
        }
        Ok(released)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tierkv_core::media::pmem::alloc::SizeClasses;

    fn usage(offset: u64, class: u8, used: u32, capacity: u32, size: u64) -> SlabUsage {
        SlabUsage {
            offset,
            class,
            object_size: size,
            used,
            capacity,
        }
    }

    fn sizes() -> Sizes {
        let sc = SizeClasses::new(16 << 10);
        Sizes {
            chunk: 16 << 10,
            max_small: sc.max_small(),
            classes: (0..sc.count())
                .filter_map(|c| sc.get(c as u8))
                .map(|g| (g.size, u64::from(g.capacity)))
                .collect(),
            memtable: 64 << 10,
            log: 64 << 10,
            max_key: 64,
            pool: 64 << 20,
        }
    }

    #[test]
    fn the_least_used_slab_of_a_class_with_a_chunk_of_spare_slots_is_picked() {
        let s = sizes();
        let (size, cap) = s.classes[5];
        let cap = cap as u32;
        let slabs = [
            usage(0, 5, cap / 2, cap, size),
            usage(1 << 14, 5, cap / 4, cap, size),
            usage(2 << 14, 5, cap / 3, cap, size),
        ];
        let none = HashSet::new();
        let got = pick_victim(&s, &slabs, &Debt::default(), &none).unwrap();
        assert_eq!(got.offset, 1 << 14);
        // Pinned: the next least used.
        let pinned: HashSet<u64> = [1 << 14].into();
        assert_eq!(
            pick_victim(&s, &slabs, &Debt::default(), &pinned)
                .unwrap()
                .offset,
            2 << 14
        );
        // A debt that needs the slots: nothing (moving would only trade a free chunk for
        // a chunk the lazy copies then need).
        let mut debt = Debt::default();
        debt.add((5, u64::from(cap) * size));
        assert_eq!(pick_victim(&s, &slabs, &debt, &none), None);
    }

    #[test]
    fn slabs_without_a_chunk_of_spare_slots_are_left_alone() {
        let s = sizes();
        let (size, cap) = s.classes[3];
        let cap = cap as u32;
        // Free slots: 1 + cap/2 < one chunk's worth.
        let slabs = [
            usage(0, 3, cap - 1, cap, size),
            usage(1 << 14, 3, cap / 2, cap, size),
            usage(2 << 14, 3, cap, cap, size),
        ];
        assert_eq!(
            pick_victim(&s, &slabs, &Debt::default(), &HashSet::new()),
            None
        );
    }
}
