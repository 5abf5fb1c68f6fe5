//! The *mechanism* of the Scan-aware Value Cache (PRISM §4.4, Figure 3): the active and
//! inactive lists, the byte accounting, and the scan chains, in one single-threaded
//! structure owned by the cache's background thread. What moves where is decided by the
//! pure functions of [`super::policy`].
//!
//! Nodes live in a slab (`Vec<Option<Node>>` plus a free list) and are linked by index:
//! each node is on exactly one of the two lists (`prev`/`next`), and optionally on one scan
//! chain (`chain_prev`/`chain_next`), a doubly-linked list of the entries one scan brought
//! in. When an entry is evicted its whole chain is collected, sorted by key and handed out
//! in the [`EvictionBatch`], and the chain is dissolved (the other members stay cached; the
//! core writes them back together into one chunk, §4.4 ⑤⑥).
//!
//! Invariants (checked by `check` in tests): every slab node is on the list its `list`
//! field names; `List::len`/`bytes` are the count and summed charges of its nodes; a
//! `CachedValue`'s `node` index names the slab node holding that very `Arc` or is `NIL`;
//! chain links are symmetric, and `chain_tails` names the last node of each live chain.
//!
//! Thread safety: not shared; `&mut self` everywhere. The `node` field of each
//! `CachedValue` is written only through this structure, so only by its owning thread.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::policy::{self, ListKind};
use super::{CachedValue, EvictionBatch, NIL, ScanChainId};

#[derive(Debug)]
struct Node {
    value: Arc<CachedValue>,
    /// The scan chain it is on: the one it was admitted with, or the last scan that read
    /// it from the cache ([`TwoQueue::join_chain`]).
    chain: Option<ScanChainId>,
    list: ListKind,
    prev: usize,
    next: usize,
    chain_prev: usize,
    chain_next: usize,
}

#[derive(Debug, Clone, Copy)]
struct List {
    head: usize,
    tail: usize,
    len: usize,
    bytes: u64,
}

impl Default for List {
    fn default() -> Self {
        List {
            head: NIL,
            tail: NIL,
            len: 0,
            bytes: 0,
        }
    }
}

/// Sizes of the two lists, for statistics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ListSizes {
    /// Entries on the inactive list.
    pub inactive_len: usize,
    /// Charged bytes of the inactive list.
    pub inactive_bytes: u64,
    /// Entries on the active list.
    pub active_len: usize,
    /// Charged bytes of the active list.
    pub active_bytes: u64,
}

/// The 2Q lists and scan chains.
#[derive(Debug)]
pub struct TwoQueue {
    nodes: Vec<Option<Node>>,
    free: Vec<usize>,
    inactive: List,
    active: List,
    capacity: u64,
    chain_tails: HashMap<ScanChainId, usize>,
}

impl TwoQueue {
    /// Empty lists for a cache of `capacity` bytes.
    pub fn new(capacity: u64) -> Self {
        TwoQueue {
            nodes: Vec::new(),
            free: Vec::new(),
            inactive: List::default(),
            active: List::default(),
            capacity,
            chain_tails: HashMap::new(),
        }
    }

    /// The list sizes.
    pub fn sizes(&self) -> ListSizes {
        ListSizes {
            inactive_len: self.inactive.len,
            inactive_bytes: self.inactive.bytes,
            active_len: self.active.len,
            active_bytes: self.active.bytes,
        }
    }

    fn node(&self, i: usize) -> Option<&Node> {
        self.nodes.get(i).and_then(Option::as_ref)
    }

    fn node_mut(&mut self, i: usize) -> Option<&mut Node> {
        self.nodes.get_mut(i).and_then(Option::as_mut)
    }

    fn list_mut(&mut self, k: ListKind) -> &mut List {
        match k {
            ListKind::Inactive => &mut self.inactive,
            ListKind::Active => &mut self.active,
        }
    }

    /// The slab index of `v`, if it is cached here.
    fn index_of(&self, v: &Arc<CachedValue>) -> Option<usize> {
        let i = v.node.load(Ordering::Relaxed);
        self.node(i).filter(|n| Arc::ptr_eq(&n.value, v)).map(|_| i)
    }

    fn push_front(&mut self, i: usize, k: ListKind) {
        let head = self.list_mut(k).head;
        let charge = match self.node_mut(i) {
            Some(n) => {
                n.list = k;
                n.prev = NIL;
                n.next = head;
                n.value.charge()
            }
            None => return,
        };
        if let Some(h) = self.node_mut(head) {
            h.prev = i;
        }
        let l = self.list_mut(k);
        l.head = i;
        if l.tail == NIL {
            l.tail = i;
        }
        l.len += 1;
        l.bytes += charge;
    }

    fn unlink(&mut self, i: usize) {
        let Some((k, prev, next, charge)) = self
            .node(i)
            .map(|n| (n.list, n.prev, n.next, n.value.charge()))
        else {
            return;
        };
        match self.node_mut(prev) {
            Some(p) => p.next = next,
            None => self.list_mut(k).head = next,
        }
        match self.node_mut(next) {
            Some(n) => n.prev = prev,
            None => self.list_mut(k).tail = prev,
        }
        let l = self.list_mut(k);
        l.len -= 1;
        l.bytes -= charge;
    }

    /// Adds a value read from flash to the head of the inactive list (①), appending it to
    /// its scan chain if it has one. Admitting a value already cached counts as an access.
    pub fn admit(&mut self, v: Arc<CachedValue>) {
        if self.index_of(&v).is_some() {
            self.access(&v);
            return;
        }
        let chain = v.chain;
        let node = Node {
            value: v,
            chain,
            list: ListKind::Inactive,
            prev: NIL,
            next: NIL,
            chain_prev: NIL,
            chain_next: NIL,
        };
        let i = match self.free.pop() {
            Some(i) => {
                if let Some(slot) = self.nodes.get_mut(i) {
                    *slot = Some(node);
                }
                i
            }
            None => {
                self.nodes.push(Some(node));
                self.nodes.len() - 1
            }
        };
        if let Some(n) = self.node(i) {
            n.value.node.store(i, Ordering::Relaxed);
        }
        self.push_front(i, ListKind::Inactive);
        if let Some(c) = chain {
            self.chain_append(c, i);
        }
    }

    fn chain_append(&mut self, c: ScanChainId, i: usize) {
        if let Some(&tail) = self.chain_tails.get(&c) {
            if let Some(t) = self.node_mut(tail) {
                t.chain_next = i;
            }
            if let Some(n) = self.node_mut(i) {
                n.chain_prev = tail;
            }
        }
        self.chain_tails.insert(c, i);
    }

    /// Records a second (or later) access: the entry moves to the head of the active list
    /// (②). Values no longer cached are ignored.
    pub fn access(&mut self, v: &Arc<CachedValue>) {
        if let Some(i) = self.index_of(v) {
            let to = self
                .node(i)
                .map_or(ListKind::Active, |n| policy::on_access(n.list));
            self.unlink(i);
            self.push_front(i, to);
        }
    }

    /// A scan read `v` from the cache: an access (②), and `v` moves to that scan's chain,
    /// so that the values of the range it scanned are written back together (§4.4), not
    /// only those it had to read from flash. Values no longer cached are ignored, and so
    /// are values cached without their key (point reads): a chain is sorted by key.
    pub fn join_chain(&mut self, v: &Arc<CachedValue>, c: ScanChainId) {
        self.access(v);
        let Some(i) = self.index_of(v).filter(|_| v.key().is_some()) else {
            return;
        };
        if self.node(i).is_some_and(|n| n.chain == Some(c)) {
            return;
        }
        self.chain_unlink(i);
        if let Some(n) = self.node_mut(i) {
            n.chain = Some(c);
            n.chain_prev = NIL;
            n.chain_next = NIL;
        }
        self.chain_append(c, i);
    }

    /// Drops a value the core disconnected itself (superseded or deleted): no callback.
    pub fn remove(&mut self, v: &Arc<CachedValue>) {
        if let Some(i) = self.index_of(v) {
            self.unlink(i);
            self.chain_unlink(i);
            self.release(i);
        }
    }

    fn chain_unlink(&mut self, i: usize) {
        let Some((prev, next, chain)) = self.node(i).map(|n| (n.chain_prev, n.chain_next, n.chain))
        else {
            return;
        };
        if let Some(p) = self.node_mut(prev) {
            p.chain_next = next;
        }
        if let Some(n) = self.node_mut(next) {
            n.chain_prev = prev;
        }
        if let Some(c) = chain
            && self.chain_tails.get(&c) == Some(&i)
        {
            if prev == NIL {
                self.chain_tails.remove(&c);
            } else {
                self.chain_tails.insert(c, prev);
            }
        }
    }

    fn release(&mut self, i: usize) -> Option<Arc<CachedValue>> {
        let n = self.nodes.get_mut(i)?.take()?;
        n.value.node.store(NIL, Ordering::Relaxed);
        self.free.push(i);
        Some(n.value)
    }

    /// Demotes (③) and evicts (④) until the lists fit the capacity; returns the evicted
    /// entries with their scan chains.
    pub fn rebalance(&mut self) -> Vec<EvictionBatch> {
        while policy::should_demote(self.active.bytes, self.capacity) && self.active.tail != NIL {
            let t = self.active.tail;
            self.unlink(t);
            self.push_front(t, ListKind::Inactive);
        }
        let mut out = Vec::new();
        while let Some(k) = policy::eviction_source(
            self.inactive.bytes + self.active.bytes,
            self.capacity,
            self.inactive.len,
            self.active.len,
        ) {
            let victim = match k {
                ListKind::Inactive => self.inactive.tail,
                ListKind::Active => self.active.tail,
            };
            match self.evict(victim) {
                Some(b) => out.push(b),
                None => break,
            }
        }
        out
    }

    fn evict(&mut self, i: usize) -> Option<EvictionBatch> {
        self.unlink(i);
        let chain = self.dissolve_chain(i);
        let evicted = self.release(i)?;
        Some(EvictionBatch { evicted, chain })
    }

    /// Collects the scan chain through node `i` (sorted by key, then slot), unlinks it and
    /// forgets it. A chain of one entry is not returned: there is nothing to co-locate.
    fn dissolve_chain(&mut self, i: usize) -> Vec<Arc<CachedValue>> {
        let mut head = i;
        while let Some(p) = self.node(head).map(|n| n.chain_prev).filter(|&p| p != NIL) {
            head = p;
        }
        let mut members = Vec::new();
        let mut last = NIL;
        let mut cur = head;
        let chain = self.node(i).and_then(|n| n.chain);
        while let Some(n) = self.node_mut(cur) {
            let next = n.chain_next;
            n.chain_prev = NIL;
            n.chain_next = NIL;
            n.chain = None;
            members.push(n.value.clone());
            last = cur;
            cur = next;
        }
        if let Some(c) = chain
            && self.chain_tails.get(&c) == Some(&last)
        {
            self.chain_tails.remove(&c);
        }
        if members.len() < 2 {
            return Vec::new();
        }
        members.sort_by(|a, b| (a.key(), a.slot()).cmp(&(b.key(), b.slot())));
        members
    }

    /// Checks the invariants in the module doc (tests only).
    #[cfg(test)]
    pub fn check(&self) {
        for (k, l) in [
            (ListKind::Inactive, self.inactive),
            (ListKind::Active, self.active),
        ] {
            let (mut len, mut bytes, mut cur, mut prev) = (0, 0, l.head, NIL);
            while cur != NIL {
                let n = self.node(cur).expect("listed node exists");
                assert_eq!(n.list, k);
                assert_eq!(n.prev, prev);
                assert_eq!(n.value.node.load(Ordering::Relaxed), cur);
                len += 1;
                bytes += n.value.charge();
                prev = cur;
                cur = n.next;
            }
            assert_eq!(l.tail, prev);
            assert_eq!((l.len, l.bytes), (len, bytes));
        }
        for (i, n) in self.nodes.iter().enumerate() {
            if let Some(n) = n {
                if let Some(p) = self.node(n.chain_prev) {
                    assert_eq!(p.chain_next, i);
                }
                if let Some(x) = self.node(n.chain_next) {
                    assert_eq!(x.chain_prev, i);
                }
            }
        }
        for &t in self.chain_tails.values() {
            assert_eq!(self.node(t).expect("chain tail exists").chain_next, NIL);
        }
        assert_eq!(
            self.inactive.len + self.active.len,
            self.nodes.iter().flatten().count()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::super::ENTRY_OVERHEAD;
    use super::*;

    fn cv(slot: u64, key: &[u8], len: usize, chain: Option<ScanChainId>) -> Arc<CachedValue> {
        Arc::new(CachedValue::new(
            slot,
            Some(key),
            Arc::from(vec![slot as u8; len]),
            chain,
        ))
    }

    fn charge(len: usize, key: usize) -> u64 {
        (len + key) as u64 + ENTRY_OVERHEAD
    }

    #[test]
    fn a_scan_hit_moves_to_the_scans_chain_and_is_written_back_with_it() {
        let mut q = TwoQueue::new(1 << 20);
        let (old, new) = (ScanChainId(1), ScanChainId(2));
        let a = cv(1, b"a", 100, Some(old));
        let b = cv(2, b"b", 100, Some(old));
        let c = cv(3, b"c", 100, Some(new));
        let unkeyed = Arc::new(CachedValue::new(4, None, Arc::from(vec![4u8; 10]), None));
        for v in [&a, &b, &c, &unkeyed] {
            q.admit(v.clone());
        }
        q.join_chain(&a, new);
        q.join_chain(&unkeyed, new);
        q.check();
        assert_eq!(q.sizes().active_len, 2, "both hits count as accesses");
        let i = q.index_of(&c).unwrap();
        let members: Vec<u64> = q.dissolve_chain(i).iter().map(|m| m.slot()).collect();
        assert_eq!(
            members,
            vec![1, 3],
            "a joined the new chain; the unkeyed value did not"
        );
        let i = q.index_of(&b).unwrap();
        assert!(
            q.dissolve_chain(i).is_empty(),
            "b is alone on the old chain"
        );
        q.check();
    }

    #[test]
    fn first_access_enters_inactive_second_promotes_to_active() {
        let mut q = TwoQueue::new(1 << 20);
        let a = cv(1, b"a", 100, None);
        q.admit(a.clone());
        assert_eq!(q.sizes().inactive_len, 1);
        q.access(&a);
        let s = q.sizes();
        assert_eq!(
            (s.inactive_len, s.active_len, s.active_bytes),
            (0, 1, charge(100, 1))
        );
        q.check();
    }

    #[test]
    fn overflow_evicts_least_recent_inactive_entries_first() {
        let one = charge(100, 1);
        let mut q = TwoQueue::new(3 * one);
        let v: Vec<_> = (0..4)
            .map(|i| cv(i, &[b'a' + i as u8], 100, None))
            .collect();
        for x in &v[..3] {
            q.admit(x.clone());
        }
        q.access(&v[0]);
        assert!(q.rebalance().is_empty());
        q.admit(v[3].clone());
        let ev = q.rebalance();
        assert_eq!(ev.len(), 1);
        assert!(
            Arc::ptr_eq(&ev[0].evicted, &v[1]),
            "the oldest inactive entry goes first"
        );
        assert!(ev[0].chain.is_empty());
        assert_eq!(v[1].node.load(Ordering::Relaxed), NIL);
        q.check();
    }

    #[test]
    fn active_list_past_its_share_is_demoted_not_evicted() {
        let one = charge(100, 1);
        let mut q = TwoQueue::new(4 * one);
        let v: Vec<_> = (0..3)
            .map(|i| cv(i, &[b'a' + i as u8], 100, None))
            .collect();
        for x in &v {
            q.admit(x.clone());
            q.access(x);
        }
        assert!(q.rebalance().is_empty());
        let s = q.sizes();
        assert_eq!((s.active_len, s.inactive_len), (2, 1));
        q.check();
    }

    #[test]
    fn evicting_one_scan_entry_returns_its_whole_chain_sorted_by_key() {
        let one = charge(10, 1);
        let mut q = TwoQueue::new(4 * one);
        let c = ScanChainId(9);
        let keys: [&[u8]; 4] = [b"d", b"b", b"c", b"a"];
        let members: Vec<_> = keys
            .iter()
            .enumerate()
            .map(|(i, k)| cv(i as u64, k, 10, Some(c)))
            .collect();
        for m in &members {
            q.admit(m.clone());
        }
        let other = cv(99, b"z", 10, None);
        q.admit(other.clone());
        let ev = q.rebalance();
        assert_eq!(ev.len(), 1);
        assert!(Arc::ptr_eq(&ev[0].evicted, &members[0]));
        let got: Vec<&[u8]> = ev[0]
            .chain
            .iter()
            .map(|m| m.key().unwrap_or_default())
            .collect();
        assert_eq!(got, vec![&b"a"[..], b"b", b"c", b"d"]);
        q.check();
        assert!(
            q.chain_tails.is_empty(),
            "the chain is dissolved after its write-back"
        );
        q.admit(cv(100, b"y", 10, None));
        let ev = q.rebalance();
        assert!(
            ev[0].chain.is_empty(),
            "a dissolved chain is written back once"
        );
        q.check();
    }

    #[test]
    fn removed_entries_leave_list_and_chain_without_a_callback() {
        let mut q = TwoQueue::new(1 << 20);
        let c = ScanChainId(1);
        let v: Vec<_> = (0..3)
            .map(|i| cv(i, &[b'a' + i as u8], 10, Some(c)))
            .collect();
        for x in &v {
            q.admit(x.clone());
        }
        q.remove(&v[2]);
        q.remove(&v[1]);
        q.check();
        assert_eq!(q.sizes().inactive_len, 1);
        q.remove(&v[1]);
        q.access(&v[1]);
        q.check();
        assert_eq!(
            q.chain_tails.get(&c),
            Some(&v[0].node.load(Ordering::Relaxed))
        );
    }

    #[test]
    fn random_operations_keep_the_invariants() {
        use rand::{Rng, SeedableRng};
        let seed = tierkv_testkit::rig::seed("svc_two_queue_random_operations");
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        let mut q = TwoQueue::new(20 * charge(50, 2));
        let mut live: Vec<Arc<CachedValue>> = Vec::new();
        for step in 0..5000u64 {
            match rng.random_range(0..10) {
                0..=3 => {
                    let chain = rng
                        .random_bool(0.5)
                        .then(|| ScanChainId(rng.random_range(0..4)));
                    let v = cv(
                        step,
                        format!("{step:05}").as_bytes(),
                        rng.random_range(1..100),
                        chain,
                    );
                    q.admit(v.clone());
                    live.push(v);
                }
                4..=6 if !live.is_empty() => {
                    let v = &live[rng.random_range(0..live.len())];
                    q.access(v);
                }
                7 if !live.is_empty() => {
                    let v = live.swap_remove(rng.random_range(0..live.len()));
                    q.remove(&v);
                }
                _ => {
                    for b in q.rebalance() {
                        assert!(
                            b.chain.is_empty()
                                || b.chain.iter().any(|m| Arc::ptr_eq(m, &b.evicted))
                        );
                        assert!(b.chain.windows(2).all(|w| w[0].key() <= w[1].key()));
                    }
                    let s = q.sizes();
                    assert!(s.inactive_bytes + s.active_bytes <= q.capacity);
                }
            }
            q.check();
        }
    }
}
