//! The DRAM seek index of a buffer PMTable (ours, not in the paper): the keys and pool
//! offsets of the table's nodes that reach level [`INDEX_LEVEL`] (about one node in 4 with
//! p = 1/4), in key order, so that a get or a scan positions itself in the table with a
//! binary search in DRAM and then walks only levels `INDEX_LEVEL..=0` from the node found,
//! instead of descending every level from the head. On pmem each node a search visits is a
//! cache miss (and on a large pool a TLB miss): a search from the head of a table of 250k
//! nodes visits about 20 of them, one from the index about 3.
//!
//! Measured (`tierkv bench`, YCSB, 1M x 1 KiB records, 4 threads, right after the load,
//! about ten tables in the buffer): without an index the seeks were 54% of a YCSB-E scan's
//! time; scan p50 195 µs without an index, 89 µs indexing level 2 (one node in 16), 72 µs
//! indexing level 1; YCSB C read p50 6.8 → 4.4 µs. Level 1 costs about 21 bytes of DRAM per
//! key in the buffer (22 MB for 1M keys, in the store's reported DRAM use and the gauge
//! `mio_seek_index_bytes`).
//!
//! Nothing of it is persisted: it is built from the table's level-`INDEX_LEVEL` list when a
//! table is written (flush, copying compaction), opened (recovery), and when a zero-copy
//! merge ends (the merged table).
//!
//! ## Zero-copy merges
//! A merge moves the newtable's first node into the oldtable and unlinks older versions
//! from both tables; an indexed node that leaves its table would be a wrong place to start
//! from (its links now lead into the other table, or stopped changing). The merge marks such
//! a node dead in its table's index while the move runs ([`SeekIndex::mark_dead`]), and a
//! search starts from the last live node before its key. Nodes moved into the oldtable are
//! not indexed: they are found by the walk at levels `INDEX_LEVEL..=0`, which is right from
//! any node still linked in the table, just longer. When the merge ends, the merged table
//! gets a fresh index ([`IndexSlot::install`]).
//!
//! Readers see the dead marks as they see the links: a lock-free read is kept only if no
//! move ran under it (the tables' move counts, `zerocopy.rs`), and a move marks before it
//! ends, so a read that began after a move began sees its marks. The index lives in the
//! table's run owner (`table.rs` `Runs`), shared by every handle of the table, so a reader
//! holding an old handle sees the same marks and the same newest index.
//!
//! Thread safety: the index is immutable but for its dead marks (atomics); indexes are
//! installed by one thread at a time (the table's writer, or its level's compaction thread)
//! and kept until the table's runs are freed, so a reader's reference stays valid.

use std::cmp::Ordering;
use std::collections::HashMap;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering as AtomicOrdering};

use tierkv_core::Result;

use crate::skiplist::{self, Source};

/// The level whose nodes are indexed (0-based): nodes of height `INDEX_LEVEL + 1` or more.
pub const INDEX_LEVEL: usize = 1;

/// How many dead entries a search steps back over before it starts from the head.
const DEAD_STEPS: usize = 16;

/// Indexes one table's run owner keeps: the first, and one more per zero-copy merge in
/// which the table is the oldtable (at most one per level; `levels` is at most 32). Past
/// this the last one would stay in use: still right (its dead marks go on), only blind to
/// the nodes merged in since.
const GENERATIONS: usize = 33;

/// Entries per block of the fence: a search first finds its block among the fence's
/// prefixes (a few KiB, cache-resident), then its entry among the block's 64 prefixes, so
/// it touches a handful of cache lines instead of one per step of a binary search over the
/// whole index (which cost as much as the walk on pmem it saves).
const BLOCK: usize = 64;

/// One indexed node (its key's prefix is in `SeekIndex::prefixes` at the same position).
#[derive(Debug)]
struct Slot {
    key_at: u32,
    key_len: u32,
    /// The node's pool offset.
    off: u64,
}

/// The first 16 bytes of `key`, zero-padded, as a big-endian integer.
fn prefix(key: &[u8]) -> u128 {
    let mut b = [0u8; 16];
    let n = key.len().min(16);
    b[..n].copy_from_slice(&key[..n]);
    // The first byte most significant (big-endian).
    b.iter().fold(0u128, |p, &x| (p << 8) | u128::from(x))
}

/// The index of one table (see the module doc).
#[derive(Debug, Default)]
pub struct SeekIndex {
    /// Each entry's key's first 16 bytes, zero-padded, big-endian: integer order is key
    /// order wherever two prefixes differ.
    prefixes: Vec<u128>,
    /// The prefix of every [`BLOCK`]-th entry.
    fence: Vec<u128>,
    slots: Vec<Slot>,
    keys: Vec<u8>,
    dead: Vec<AtomicBool>,
}

impl SeekIndex {
    /// Builds the index of the skiplist whose head is at `head` by walking its list at
    /// [`INDEX_LEVEL`] (fails, like any walk, on a node out of order).
    pub fn build<S: Source + ?Sized>(s: &S, head: u64) -> Result<SeekIndex> {
        let mut ix = SeekIndex::default();
        skiplist::walk_level(s, head, INDEX_LEVEL, |off, _h, key| {
            ix.push(key, off);
            Ok(())
        })?;
        ix.dead = (0..ix.slots.len())
            .map(|_| AtomicBool::new(false))
            .collect();
        ix.fence = ix.prefixes.iter().step_by(BLOCK).copied().collect();
        ix.prefixes.shrink_to_fit();
        ix.slots.shrink_to_fit();
        ix.keys.shrink_to_fit();
        Ok(ix)
    }

    fn push(&mut self, key: &[u8], off: u64) {
        self.prefixes.push(prefix(key));
        self.slots.push(Slot {
            key_at: self.keys.len() as u32,
            key_len: key.len() as u32,
            off,
        });
        self.keys.extend_from_slice(key);
    }

    fn key(&self, s: &Slot) -> &[u8] {
        let at = s.key_at as usize;
        &self.keys[at..at + s.key_len as usize]
    }

    /// Where `key` lies among the indexed keys: the number of entries whose key is
    /// smaller.
    fn rank(&self, key: &[u8]) -> usize {
        let p = prefix(key);
        // The first entry whose prefix is not below `p`: in the block before the first
        // fence prefix not below it.
        let block = self.fence.partition_point(|f| *f < p).saturating_sub(1);
        let from = block * BLOCK;
        let to = (from + BLOCK).min(self.prefixes.len());
        let lo = from + self.prefixes[from..to].partition_point(|x| *x < p);
        // Entries with `p` as their prefix (rarely more than one) order by whole key.
        let equal = if self.prefixes.get(lo) == Some(&p) {
            self.prefixes[lo..].partition_point(|x| *x == p)
        } else {
            0
        };
        lo + self.slots[lo..lo + equal].partition_point(|s| self.key(s).cmp(key) == Ordering::Less)
    }

    /// Where a search for `key` may start: the last live indexed node whose key is smaller
    /// than `key` (its height exceeds [`INDEX_LEVEL`]), or `None` (search from the head).
    pub fn start(&self, key: &[u8]) -> Option<u64> {
        self.live_below(key).map(|i| self.slots[i].off)
    }

    /// The entry [`SeekIndex::start`] answers.
    fn live_below(&self, key: &[u8]) -> Option<usize> {
        let r = self.rank(key);
        (r.saturating_sub(DEAD_STEPS)..r)
            .rev()
            .find(|&i| !self.dead[i].load(AtomicOrdering::Acquire))
    }

    /// [`SeekIndex::start`] that never answers a node whose key is `floor` or smaller
    /// (`None` instead: search from the head). A newtable read during a node move
    /// (`zerocopy.rs`) passes the moving node's key: the nodes of that key are the ones
    /// the move relinks, dead-marked or not yet.
    pub fn start_past(&self, key: &[u8], floor: &[u8]) -> Option<u64> {
        self.live_below(key)
            .filter(|&i| self.key(&self.slots[i]) > floor)
            .map(|i| self.slots[i].off)
    }

    /// Marks the node at `off` (key `key`) dead if it is indexed: it is leaving its table.
    pub fn mark_dead(&self, key: &[u8], off: u64) {
        let mut i = self.rank(key);
        while let Some(s) = self.slots.get(i) {
            if self.key(s) != key {
                return;
            }
            if s.off == off {
                self.dead[i].store(true, AtomicOrdering::Release);
                return;
            }
            i += 1;
        }
    }

    /// `tierkv check`: every live entry names a node linked at [`INDEX_LEVEL`] in its table
    /// (`linked`: offset → key of each) with that node's key, and the entries are in key
    /// order. Returns the live entries; a stale one is an error naming it.
    pub fn verify(&self, linked: &HashMap<u64, Vec<u8>>) -> std::result::Result<usize, String> {
        let mut live = 0;
        for (i, s) in self.slots.iter().enumerate() {
            if i > 0 && self.key(&self.slots[i - 1]) > self.key(s) {
                return Err(format!("seek index entry {i} out of key order"));
            }
            if self.prefixes[i] != prefix(self.key(s)) {
                return Err(format!(
                    "seek index entry {i}: prefix does not match its key"
                ));
            }
            if self.dead[i].load(AtomicOrdering::Acquire) {
                continue;
            }
            match linked.get(&s.off) {
                Some(k) if k.as_slice() == self.key(s) => live += 1,
                Some(_) => {
                    return Err(format!(
                        "seek index entry {i}: node {} has another key",
                        s.off
                    ));
                }
                None => {
                    return Err(format!(
                        "seek index entry {i}: node {} is live in the index but not linked at level {INDEX_LEVEL}",
                        s.off
                    ));
                }
            }
        }
        Ok(live)
    }

    /// Entries (live and dead).
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Whether it indexes nothing.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Entries marked dead.
    pub fn dead_entries(&self) -> usize {
        self.dead
            .iter()
            .filter(|d| d.load(AtomicOrdering::Relaxed))
            .count()
    }

    /// DRAM it takes.
    pub fn bytes(&self) -> usize {
        self.slots.capacity() * std::mem::size_of::<Slot>()
            + (self.prefixes.capacity() + self.fence.capacity()) * std::mem::size_of::<u128>()
            + self.keys.capacity()
            + self.dead.capacity()
    }
}

/// The indexes of one table's run owner: the newest is in use; older ones stay until the
/// owner is dropped, so a reader that took one keeps a valid reference.
#[derive(Debug)]
pub struct IndexSlot {
    gens: [OnceLock<SeekIndex>; GENERATIONS],
    installed: AtomicUsize,
}

impl Default for IndexSlot {
    fn default() -> IndexSlot {
        IndexSlot {
            gens: std::array::from_fn(|_| OnceLock::new()),
            installed: AtomicUsize::new(0),
        }
    }
}

impl IndexSlot {
    /// The newest index, if any.
    pub fn current(&self) -> Option<&SeekIndex> {
        match self.installed.load(AtomicOrdering::Acquire) {
            0 => None,
            n => self.gens[n - 1].get(),
        }
    }

    /// Makes `ix` the newest index; `false` (and `ix` dropped) once `GENERATIONS` were
    /// installed. One installer at a time (the table's writer or its level's compaction).
    pub fn install(&self, ix: SeekIndex) -> bool {
        let n = self.installed.load(AtomicOrdering::Acquire);
        if n == GENERATIONS || self.gens[n].set(ix).is_err() {
            return false;
        }
        self.installed.store(n + 1, AtomicOrdering::Release);
        true
    }

    /// DRAM taken by every index it keeps.
    pub fn bytes(&self) -> usize {
        self.gens
            .iter()
            .filter_map(|g| g.get())
            .map(SeekIndex::bytes)
            .sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arena::Arena;
    use crate::node::Kind;

    /// An arena holding `keys` and its index.
    fn indexed(keys: &[String]) -> (Arena, SeekIndex) {
        let refs: Vec<&str> = keys.iter().map(|s| s.as_str()).collect();
        let a = arena_with(&refs);
        let ix = SeekIndex::build(&a, 0).unwrap();
        (a, ix)
    }

    fn arena_with(keys: &[&str]) -> Arena {
        let a = Arena::new(1 << 20, 3);
        for (i, k) in keys.iter().enumerate() {
            a.insert(i as u64 + 1, Kind::Put, k.as_bytes(), b"v")
                .unwrap();
        }
        a
    }

    #[test]
    fn prefixes_order_as_their_keys_wherever_they_differ() {
        let keys: [&[u8]; 8] = [
            b"",
            b"a",
            b"a\0",
            b"ab",
            b"abc",
            b"a\xff",
            b"0123456789abcdefX",
            b"0123456789abcdefY",
        ];
        for x in keys {
            for y in keys {
                let (px, py) = (prefix(x), prefix(y));
                if px != py {
                    assert_eq!(px.cmp(&py), x.cmp(y), "{x:?} vs {y:?}");
                }
            }
        }
    }

    #[test]
    fn the_index_holds_exactly_the_nodes_of_its_level_and_starts_before_the_key() {
        let keys: Vec<String> = (0..4000)
            .map(|i| format!("key{:06}", i * 7 % 4000))
            .collect();
        let refs: Vec<&str> = keys.iter().map(|s| s.as_str()).collect();
        let a = arena_with(&refs);
        let ix = SeekIndex::build(&a, 0).unwrap();
        let mut tall = Vec::new();
        skiplist::walk_level(&a, 0, INDEX_LEVEL, |off, h, k| {
            assert!(h.height > INDEX_LEVEL);
            tall.push((k.to_vec(), off));
            Ok(())
        })
        .unwrap();
        assert_eq!(ix.len(), tall.len());
        // One node in 4^INDEX_LEVEL (p = 1/4).
        let expected = 4000 >> (2 * INDEX_LEVEL);
        assert!(
            ix.len() > expected / 2 && ix.len() < expected * 2,
            "{} entries",
            ix.len()
        );
        for probe in [
            "",
            "key000000",
            "key001234",
            "key001234x",
            "key003999",
            "zzz",
        ] {
            let want = tall
                .iter()
                .rev()
                .find(|(k, _)| k.as_slice() < probe.as_bytes())
                .map(|(_, off)| *off);
            assert_eq!(ix.start(probe.as_bytes()), want, "start for {probe:?}");
        }
    }

    /// The fenced search ranks like a plain count over whole keys, for keys whose 16-byte
    /// prefixes differ, keys that share them (long common prefixes), and probes between,
    /// before, after and equal to indexed keys.
    #[test]
    fn the_fenced_search_ranks_as_a_count_of_smaller_keys() {
        let mut keys: Vec<String> = (0..3000)
            .map(|i| format!("u{:07}", i * 13 % 3000))
            .collect();
        keys.extend((0..1500).map(|i| format!("tenant-00000000042/row/{i:05}")));
        keys.extend((0..300).map(|i| format!("t{i}")));
        let refs: Vec<&str> = keys.iter().map(|s| s.as_str()).collect();
        let a = arena_with(&refs);
        let ix = SeekIndex::build(&a, 0).unwrap();
        assert!(ix.len() > 4 * BLOCK && ix.fence.len() > 4);
        let indexed: Vec<Vec<u8>> = ix.slots.iter().map(|s| ix.key(s).to_vec()).collect();
        let mut probes: Vec<Vec<u8>> = indexed.clone();
        probes.extend(indexed.iter().map(|k| [k.as_slice(), b"\0"].concat()));
        probes.extend(indexed.iter().map(|k| k[..k.len() - 1].to_vec()));
        probes.extend([b"".to_vec(), b"\xff".to_vec(), b"tenant-".to_vec()]);
        for p in &probes {
            let want = indexed
                .iter()
                .filter(|k| k.as_slice() < p.as_slice())
                .count();
            assert_eq!(ix.rank(p), want, "rank of {:?}", String::from_utf8_lossy(p));
        }
    }

    #[test]
    fn a_dead_entry_is_stepped_over_and_many_send_the_search_to_the_head() {
        let keys: Vec<String> = (0..4000).map(|i| format!("k{i:05}")).collect();
        let (_arena, ix) = indexed(&keys);
        assert!(ix.len() > DEAD_STEPS + 2);
        let key_of = |i: usize| ix.key(&ix.slots[i]).to_vec();
        // Just past entry 5: starts at entry 5; with 5 dead, at entry 4.
        let mut probe = key_of(5);
        probe.push(b'!');
        assert_eq!(ix.start(&probe), Some(ix.slots[5].off));
        ix.mark_dead(&key_of(5), ix.slots[5].off);
        assert_eq!(ix.start(&probe), Some(ix.slots[4].off));
        // A mark for another node of the same key changes nothing.
        ix.mark_dead(&key_of(4), ix.slots[4].off + 8);
        assert_eq!(ix.start(&probe), Some(ix.slots[4].off));
        // Every entry before the probe dead (within the steps): from the head.
        for i in 0..5 {
            ix.mark_dead(&key_of(i), ix.slots[i].off);
        }
        assert_eq!(ix.start(&probe), None);
        assert_eq!(ix.dead_entries(), 6);
        // More than DEAD_STEPS dead entries in a row: from the head too (never a walk back
        // over the whole index).
        let last = ix.len() - 1;
        for i in last - DEAD_STEPS..=last {
            ix.mark_dead(&key_of(i), ix.slots[i].off);
        }
        assert_eq!(ix.start(b"zzz"), None);
    }

    /// `verify` accepts the index of a list as built and with dead entries whose nodes
    /// left it, and names an entry still live whose node is no longer linked.
    #[test]
    fn verify_finds_a_live_entry_whose_node_left_the_list() {
        let keys: Vec<String> = (0..600).map(|i| format!("v{i:04}")).collect();
        let (a, ix) = indexed(&keys);
        let mut linked = HashMap::new();
        skiplist::walk_level(&a, 0, INDEX_LEVEL, |off, _h, k| {
            linked.insert(off, k.to_vec());
            Ok(())
        })
        .unwrap();
        assert_eq!(ix.verify(&linked), Ok(ix.len()));
        // The node of entry 3 leaves the list: stale until it is marked dead.
        let (k3, off3) = (ix.key(&ix.slots[3]).to_vec(), ix.slots[3].off);
        linked.remove(&off3);
        let err = ix.verify(&linked).unwrap_err();
        assert!(
            err.contains("entry 3") && err.contains("not linked"),
            "{err}"
        );
        ix.mark_dead(&k3, off3);
        assert_eq!(ix.verify(&linked), Ok(ix.len() - 1));
    }

    #[test]
    fn an_index_slot_serves_its_newest_index_and_stops_at_its_generations() {
        let a = arena_with(&["a", "b", "c"]);
        let slot = IndexSlot::default();
        assert!(slot.current().is_none());
        for _ in 0..GENERATIONS {
            assert!(slot.install(SeekIndex::build(&a, 0).unwrap()));
        }
        assert!(!slot.install(SeekIndex::default()));
        assert!(slot.current().is_some());
        assert_eq!(
            slot.current().unwrap().len(),
            SeekIndex::build(&a, 0).unwrap().len()
        );
    }
}
