//! Zero-copy compaction (MioDB §4.3, Fig. 5; P3 in `FORMAT.md`): the two oldest tables of
//! a buffer level are merged by relinking the newtable's nodes, one at a time, into the
//! oldtable, dropping the older versions of each moved key; no key or value byte is
//! written. The merged table, which now owns both tables' runs, moves to the next level.
//!
//! Per node x (always the newtable's first node), each step persisted before the next:
//! 1. insertion mark := x;
//! 2. the newtable's head skips x and the older versions of x's key after it, every level;
//! 3. x's links := its successors in the oldtable; then x is linked into the oldtable,
//!    level 0 first, then upward;
//! 4. the older versions of x's key that follow x in the oldtable are unlinked, top down;
//! 5. insertion mark := 0.
//!
//! Recovery ([`repair_mark`]) redoes 2-4 for the marked node, each step idempotent ("skip
//! if already done"), so a merge interrupted at any persist point rolls forward; the
//! compaction thread then resumes the merge from the directory's record.
//!
//! Readers (deviation, argued): the paper's readers are lock-free and consult the mark
//! between the newtable and the oldtable. A cursor standing on x when x moves follows x's
//! new links into the oldtable and skips the newtable's remaining nodes (a case the
//! paper's two cases do not cover): a get looking for a key the newtable still holds
//! after x would find an older version in the oldtable; and a reader whose version
//! predates the merge reads the pair without knowing it is merging. So readers check that
//! no move ran under them instead of consulting the mark:
//! - each node move holds its level's lock exclusively and makes the move counts of both
//!   tables odd while it runs ([`NodeMoves`]);
//! - a get reads a buffer level without locks (every node it may reach stays allocated:
//!   the oldtable's handles hold both tables' runs, and links only ever point forward in
//!   key order, so a walk ends) and keeps the answer only if the level's move counts were
//!   unchanged across the read (a seqlock). It does not wait for a move under way
//!   ([`read_level`]): before the counts turn odd, the merge records in DRAM the moving
//!   node x and the newtable's links *past* every node of x's key (what step 2 will point
//!   the head at; the merge reads them before the move, as it finds x's place), tagged
//!   with the newtable's odd count ([`NodeMoves::begin`]). A get that loads that count
//!   answers x's key kx with x (the newest version of kx in the pair), and any other key
//!   from the newtable searched from a head made of the recorded links, which reaches
//!   neither x nor kx's older versions (the only newtable nodes whose links the move
//!   rewrites), then from the oldtable as it is (step 3 sets x's links before linking it,
//!   step 4's unlinked versions keep theirs: every other key reads right at every step);
//!   a seek-index start on kx is replaced by that head. So a merge thread taken off its
//!   core in the middle of a move holds up no get. After two tries that a move's start or
//!   end spoiled, a get asks the merges to pause between moves ([`MovePause`]) and reads
//!   again ([`read_paused`]); a scan (which does not read around a move) waits for the
//!   move under way to end instead, after one failed try, or at once while a table of its
//!   version is merging (its try would race). Only if moves still race (a merge whose
//!   level has a backlog does not pause) does a reader read with every buffer level's
//!   lock shared (a get searches the DRAM MemTables first, without either);
//! - under the locks a reader sees a frozen state, in which every node is in exactly one
//!   table. A validated lock-free read saw that same state, or (around a move) the state
//!   in which x is in the newtable alone and every other node where the move found it.
//!
//! That state is right for any version the reader holds: nodes only move from a table into
//! its next-older neighbour, so a reader that walks its version's tables newest first
//! still meets the versions of a key newest first (every table between the two in the
//! reader's order has been absorbed into the older one before). The counts live in the
//! tables' shared run owners, so a reader holding an older handle of either table (or a
//! version in which the pair sits one level up) still sees them change. The paper's
//! corner cases thus arise only at recovery, where the mark resolves them. Writers are
//! never blocked.
//!
//! Cost: the newtable's nodes move in key order and only the merge changes the pair, so
//! each move's search for its place in the oldtable starts where the last one's ended
//! ([`Finger`]): a merge visits about as many nodes as the two tables hold, not one
//! search from the head per node.
//!
//! Thread safety: one compaction thread per level runs the merge of that level.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering, fence};

use tierkv_core::{Error, Result, Tier};

use crate::dir::MergeMeta;
use crate::node::{MAX_HEIGHT, NodeHeader, link_off as link};
use crate::seek_index::{INDEX_LEVEL, SeekIndex};
use crate::skiplist::{self, Entry, Finger};
use crate::store::Inner;
use crate::table::{MoveView, NodeMoves, PoolSource, Shared, Table};
use crate::version::Version;

/// The DRAM side of a zero-copy compaction in progress.
pub struct MergeState {
    /// What the directory records.
    pub meta: MergeMeta,
}

/// What one node move did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Moved {
    /// Link and mark words stored.
    pub words: u64,
    /// Older versions dropped (from either table).
    pub dropped: u64,
}

/// The seek indexes (`seek_index.rs`) of a merging pair, where a move marks the indexed
/// nodes that leave their table (none at recovery: indexes are built after the repair).
#[derive(Clone, Copy, Default)]
pub struct Indexes<'a> {
    /// The oldtable's: older versions unlinked from it.
    pub old: Option<&'a SeekIndex>,
    /// The newtable's: the moved node and the older versions its head skips.
    pub new: Option<&'a SeekIndex>,
}

impl<'a> Indexes<'a> {
    /// The indexes of the pair (`old`, `new`).
    pub fn of(old: &'a Table, new: &'a Table) -> Indexes<'a> {
        Indexes {
            old: old.runs().index(),
            new: new.runs().index(),
        }
    }
}

/// Stores a word and counts it.
fn put(sh: &Shared, off: u64, v: u64, m: &mut Moved) -> Result<()> {
    sh.pool.store_u64(off, v)?;
    m.words += 1;
    Ok(())
}

/// Step 2: the newtable's head skips every node of key `kx` at every level (`past`, read
/// before: [`past_key`]). Indexed nodes it skips are marked dead in `index` (the
/// newtable's seek index).
fn unlink_from_new(
    sh: &Shared,
    new_head: u64,
    kx: &[u8],
    past: &PastKey,
    index: Option<&SeekIndex>,
    m: &mut Moved,
) -> Result<()> {
    if let Some(ix) = index {
        for &(s, height) in &past.nodes {
            if height > INDEX_LEVEL {
                ix.mark_dead(kx, s);
            }
        }
    }
    // The first is x (or, at recovery, the newest version left).
    m.dropped += past.nodes.len().saturating_sub(1) as u64;
    let src = PoolSource(&sh.pool);
    for l in (0..MAX_HEIGHT).rev() {
        if past.links[l] != skiplist::next(&src, new_head, l)? {
            put(sh, new_head + link(l), past.links[l], m)?;
        }
    }
    sh.persist("zc-unlink-new", new_head + link(0), 8 * MAX_HEIGHT)
}

/// The nodes of one key at the front of a newtable and the head's links past them.
#[derive(Clone, Debug, Default)]
struct PastKey {
    /// Per level, the first node after the head whose key is not the key (0: none): what
    /// step 2 points the head at.
    links: [u64; MAX_HEIGHT],
    /// The key's nodes the head reaches at level 0 (offset, height), newest first.
    nodes: Vec<(u64, usize)>,
}

/// [`PastKey`] of `kx` in the newtable whose head is at `head`. Reads only. The key's
/// nodes follow the head at level 0 (the newtable's first key). With `whole` (a head no
/// move has half rewritten: a merge planning its next move) the upper levels reach only
/// those, so their first other node needs no key compared; at recovery a crash image may
/// hold any subset of step 2's link stores, so every level's first node is compared.
fn past_key(src: &PoolSource<'_>, head: u64, kx: &[u8], whole: bool) -> Result<PastKey> {
    let mut past = PastKey::default();
    let mut s = skiplist::next(src, head, 0)?;
    while s != 0 {
        let h = skiplist::header(src, s)?;
        if skiplist::key(src, s, &h)?.as_ref() != kx {
            break;
        }
        past.nodes.push((s, h.height));
        s = skiplist::next(src, s, 0)?;
    }
    past.links[0] = s;
    for l in 1..MAX_HEIGHT {
        let mut s = skiplist::next(src, head, l)?;
        while s != 0 {
            if !past.nodes.iter().any(|n| n.0 == s) {
                if whole {
                    break;
                }
                let h = skiplist::header(src, s)?;
                if skiplist::key(src, s, &h)?.as_ref() != kx {
                    break;
                }
                past.nodes.push((s, h.height));
            }
            s = skiplist::next(src, s, l)?;
        }
        past.links[l] = s;
    }
    Ok(past)
}

/// Where `x` goes in the oldtable: its predecessors per level, found from `finger` (where
/// the last move's search ended: the newtable's nodes come in key order). Reads only, so
/// a merge finds it before its move begins and readers wait for less.
fn find_place(
    sh: &Shared,
    old_head: u64,
    x: u64,
    finger: &Finger,
) -> Result<(NodeHeader, Vec<u8>, [u64; MAX_HEIGHT])> {
    let src = PoolSource(&sh.pool);
    let hx = skiplist::header(&src, x)?;
    let kx = skiplist::key(&src, x, &hx)?.into_owned();
    let mut preds = [0u64; MAX_HEIGHT];
    skiplist::find_preds_from(&src, old_head, finger, &kx, hx.seq, &mut preds)?;
    Ok((hx, kx, preds))
}

/// Steps 3-4: links `x` into the oldtable (skipping levels where it is linked already) and
/// unlinks the older versions after it. The search for x's place starts at `finger`,
/// which then moves to x.
fn link_into_old(
    sh: &Shared,
    old_head: u64,
    x: u64,
    finger: &mut Finger,
    m: &mut Moved,
) -> Result<()> {
    let place = find_place(sh, old_head, x, finger)?;
    link_at(sh, x, place, finger, None, m)
}

/// [`link_into_old`] at a place [`find_place`] found (nothing changed the oldtable since).
/// Indexed older versions it unlinks are marked dead in `index` (the oldtable's).
fn link_at(
    sh: &Shared,
    x: u64,
    (hx, kx, preds): (NodeHeader, Vec<u8>, [u64; MAX_HEIGHT]),
    finger: &mut Finger,
    index: Option<&SeekIndex>,
    m: &mut Moved,
) -> Result<()> {
    let src = PoolSource(&sh.pool);
    let h = hx.height;
    let linked: Vec<bool> = (0..h)
        .map(|l| skiplist::next(&src, preds[l], l).map(|n| n == x))
        .collect::<Result<_>>()?;
    for l in 0..h {
        if !linked[l] {
            put(sh, x + link(l), skiplist::next(&src, preds[l], l)?, m)?;
        }
    }
    sh.persist("zc-x-links", x + link(0), 8 * h)?;
    sh.pool.crash_point("mio.zerocopy.after_x_links");
    // IMPORTANT: level 0 first; each link persisted before the next (FORMAT.md P3).
    for l in 0..h {
        if !linked[l] {
            put(sh, preds[l] + link(l), x, m)?;
            sh.persist("zc-link-old", preds[l] + link(l), 8)?;
            sh.pool.crash_point(if l == 0 {
                "mio.zerocopy.after_link_level0"
            } else {
                "mio.zerocopy.after_link_upper"
            });
        }
    }
    loop {
        let y = skiplist::next(&src, x, 0)?;
        if y == 0 {
            break;
        }
        let hy = skiplist::header(&src, y)?;
        if skiplist::key(&src, y, &hy)?.as_ref() != kx.as_slice() {
            break;
        }
        if hy.height > INDEX_LEVEL
            && let Some(ix) = index
        {
            ix.mark_dead(&kx, y);
        }
        for l in (0..hy.height).rev() {
            let p = if l < h { x } else { preds[l] };
            if skiplist::next(&src, p, l)? == y {
                put(sh, p + link(l), skiplist::next(&src, y, l)?, m)?;
                sh.persist("zc-drop-old", p + link(l), 8)?;
            }
        }
        m.dropped += 1;
    }
    finger.after_insert(&preds, x, h);
    Ok(())
}

/// A move of the newtable's first node, planned before it begins ([`plan_first`]).
pub struct PlannedMove {
    x: u64,
    place: (NodeHeader, Vec<u8>, [u64; MAX_HEIGHT]),
    /// x's key at the front of the newtable ([`past_key`]).
    past: PastKey,
}

impl PlannedMove {
    /// What the newtable's readers need while this move is under way
    /// ([`NodeMoves::begin`] records it).
    pub fn view(&self) -> MoveView {
        MoveView {
            x: self.x,
            past: self.past.links,
        }
    }
}

/// Plans the move of the newtable's first node: the node and its place in the oldtable
/// (reads only); `None` when the newtable is empty. Valid until the pair changes, which
/// only the merge does.
pub fn plan_first(
    sh: &Shared,
    old_head: u64,
    new_head: u64,
    finger: &Finger,
) -> Result<Option<PlannedMove>> {
    let src = PoolSource(&sh.pool);
    let x = skiplist::next(&src, new_head, 0)?;
    if x == 0 {
        return Ok(None);
    }
    let place = find_place(sh, old_head, x, finger)?;
    let past = past_key(&src, new_head, &place.1, true)?;
    Ok(Some(PlannedMove { x, place, past }))
}

/// Moves a planned node (steps 1-5, each persisted before the next), marking the indexed
/// nodes that leave either table dead in `indexes` (before the move ends: `seek_index.rs`).
pub fn apply_move(
    sh: &Shared,
    meta: &MergeMeta,
    new_head: u64,
    planned: PlannedMove,
    finger: &mut Finger,
    indexes: Indexes<'_>,
) -> Result<Moved> {
    let PlannedMove { x, place, past } = planned;
    let mut m = Moved::default();
    put(sh, meta.mark, x, &mut m)?;
    sh.persist("zc-mark", meta.mark, 8)?;
    sh.pool.crash_point("mio.zerocopy.after_mark");
    unlink_from_new(sh, new_head, &place.1, &past, indexes.new, &mut m)?;
    sh.pool.crash_point("mio.zerocopy.after_unlink_new");
    link_at(sh, x, place, finger, indexes.old, &mut m)?;
    sh.pool.crash_point("mio.zerocopy.after_drop_old");
    put(sh, meta.mark, 0, &mut m)?;
    sh.persist("zc-unmark", meta.mark, 8)?;
    sh.pool.crash_point("mio.zerocopy.after_unmark");
    Ok(m)
}

/// Moves the newtable's first node into the oldtable (steps 1-5); `None` when the
/// newtable is empty. `finger`: where the last move of this merge linked its node
/// ([`Finger::default`] for the first move, or after anything else changed the oldtable).
/// `indexes`: the pair's seek indexes ([`apply_move`]).
pub fn move_first(
    sh: &Shared,
    meta: &MergeMeta,
    (old_head, new_head): (u64, u64),
    finger: &mut Finger,
    indexes: Indexes<'_>,
) -> Result<Option<Moved>> {
    match plan_first(sh, old_head, new_head, finger)? {
        Some(p) => apply_move(sh, meta, new_head, p, finger, indexes).map(Some),
        None => Ok(None),
    }
}

/// Runs `read` over some buffer tables without their level locks and returns its answer
/// if no node moved into or out of any of `tables` while it ran (their move counts were
/// even and unchanged: a seqlock over [`NodeMoves`]); `None` after `tries` tries that a
/// move raced (or `tries` is 0), when the caller reads under the locks. `retries` counts
/// the tries thrown away.
///
/// Sound because a racing read only ever reads nodes that stay allocated (the oldtable's
/// handles hold both tables' runs) through links that point forward in key order, so it
/// ends; whatever it returned is dropped unless the counts say nothing moved.
pub fn read_unmoved<'t, T>(
    tables: impl Iterator<Item = &'t Table> + Clone,
    tries: usize,
    retries: &tierkv_core::Counter,
    mut read: impl FnMut() -> Result<T>,
) -> Option<Result<T>> {
    read_validated(tables, tries, retries, false, |_| read())
}

/// A node move a get reads around: the newtable it moves out of and what that table's
/// readers need ([`Table::get_around_move`]).
pub type AroundMove<'t> = Option<(&'t Table, MoveView)>;

/// The newest version of `key` (hashed `h`) in `tables`, asked newest first, reading the
/// newtable of the move under way around it ([`read_level`]).
pub fn newest_in<'t>(
    tables: impl Iterator<Item = &'t Table>,
    key: &[u8],
    h: u64,
    moving: &AroundMove<'_>,
) -> Result<Option<Entry>> {
    for t in tables {
        let found = match moving {
            Some((n, view)) if Arc::ptr_eq(n.runs(), t.runs()) => {
                t.get_around_move(key, h, view)?
            }
            _ => t.get_hashed(key, h)?,
        };
        if found.is_some() {
            return Ok(found);
        }
    }
    Ok(None)
}

/// [`read_unmoved`] of a get in one buffer level, which also reads while a node move is
/// under way instead of waiting for it: `read` is given the move ([`AroundMove`]) and
/// must read its newtable with [`Table::get_around_move`] and every other table as it
/// is; the answer is kept if no count changed meanwhile (the move neither ended nor was
/// followed by another). So a merge thread that the scheduler takes off its core in the
/// middle of a move holds up no get.
pub fn read_level<'t, T>(
    tables: impl Iterator<Item = &'t Table> + Clone,
    tries: usize,
    retries: &tierkv_core::Counter,
    read: impl FnMut(AroundMove<'t>) -> Result<T>,
) -> Option<Result<T>> {
    read_validated(tables, tries, retries, true, read)
}

/// The seqlock loop of [`read_unmoved`] (`around: false`: a move under way sends the
/// caller on) and [`read_level`] (`around: true`).
fn read_validated<'t, T>(
    tables: impl Iterator<Item = &'t Table> + Clone,
    tries: usize,
    retries: &tierkv_core::Counter,
    around: bool,
    mut read: impl FnMut(AroundMove<'t>) -> Result<T>,
) -> Option<Result<T>> {
    for _ in 0..tries {
        // Counts only grow: an unchanged sum means every count is unchanged.
        let mut before = 0u64;
        let mut moving: AroundMove<'t> = None;
        for t in tables.clone() {
            let m = t.moves();
            if m % 2 == 1 {
                if !around {
                    return None; // a move is under way: the locks wait for its end
                }
                // The newtable of the move has its record; the oldtable is read as it is
                // (step 3 sets x's links before linking it, step 4's unlinked versions
                // keep theirs: every other key reads right at every step).
                if let Some(view) = t.runs().move_under_way(m) {
                    if moving.is_some() {
                        return None; // two moves in one set of tables: not a level's
                    }
                    moving = Some((t, view));
                }
            }
            before = before.wrapping_add(m);
        }
        let answer = read(moving);
        fence(Ordering::Acquire);
        let after = tables
            .clone()
            .fold(0u64, |sum, t| sum.wrapping_add(t.runs().moves_relaxed()));
        if after == before {
            return Some(answer);
        }
        retries.incr();
    }
    None
}

/// How many moves a merge makes between two looks at its level's backlog.
const YIELD_CHECK_EVERY: u64 = 256;
/// Moves per batch of a merge that runs `merge_share` of the time: after each batch it
/// sleeps in proportion to how long the batch took.
const SHARE_BATCH: u64 = 64;

/// Readers whose lock-free read of a merging level raced a node move ask every merge to
/// pause between two moves until their retry is done ([`MovePause::hold`]). Such a get
/// then reads around at most the move under way (a scan waits for it), instead of
/// queueing on the level locks
/// behind the merge: on a machine with fewer cores than busy threads, each hand-off of a
/// contended lock waits for a scheduler slot, and a get that queued there took
/// milliseconds (issue 18's p99.9 on YCSB A). A merge waits ([`MovePause::wait`]) only
/// between moves, holding no lock, and readers hold a pause only while they retry, so
/// with no raced reader in flight the merge goes on. Under a steady read load a merge
/// thus moves about one node per read, which defers it to quieter times; it stops
/// pausing once its level holds three times the trigger's tables while writers wait for a
/// flush, or six times in any case (writes go on and the backlog would grow), so the
/// buffer's shape stays bounded.
#[derive(Debug, Default)]
pub struct MovePause {
    readers: AtomicUsize,
}

/// A reader's request that merges pause; released on drop.
pub struct PauseHold<'a>(&'a MovePause);

impl MovePause {
    /// Asks every merge to pause after the move under way.
    pub fn hold(&self) -> PauseHold<'_> {
        self.readers.fetch_add(1, Ordering::AcqRel);
        PauseHold(self)
    }

    /// Called by a merge between moves: returns once no reader asks for a pause (or `stop`
    /// is set). The merge sleeps rather than yields while it waits, so that it takes no
    /// CPU from the readers it waits for.
    pub fn wait(&self, stop: &AtomicBool) {
        let mut spins = 0u32;
        while self.readers.load(Ordering::Acquire) > 0 && !stop.load(Ordering::Acquire) {
            if spins < 64 {
                std::hint::spin_loop();
                spins += 1;
            } else {
                std::thread::sleep(std::time::Duration::from_micros(50));
            }
        }
    }
}

impl Drop for PauseHold<'_> {
    fn drop(&mut self) {
        self.0.readers.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Spins a little, then yields the core.
fn backoff(spins: &mut u32) {
    if *spins < 64 {
        std::hint::spin_loop();
    } else if *spins < 80 {
        std::thread::yield_now();
    } else {
        std::thread::sleep(std::time::Duration::from_micros(20));
    }
    *spins = spins.saturating_add(1);
}

/// Returns once no node move into or out of any of `tables` is under way (their move
/// counts are even), or after `patience`; whether they were.
fn wait_unmoving<'t>(
    tables: impl Iterator<Item = &'t Table> + Clone,
    patience: std::time::Duration,
) -> bool {
    let mut spins = 0u32;
    let mut since: Option<std::time::Instant> = None;
    loop {
        if tables.clone().all(|t| t.moves() % 2 == 0) {
            return true;
        }
        if spins >= 64 {
            let start = *since.get_or_insert_with(std::time::Instant::now);
            if start.elapsed() >= patience {
                return false;
            }
        }
        backoff(&mut spins);
    }
}

/// Tries of a read that pauses the merges ([`read_paused`]) before the caller takes the
/// level locks: a merge that has seen the pause starts no further move, so one try after
/// the move under way normally holds.
const PAUSED_TRIES: usize = 4;
/// How long a paused read waits for the move under way to end (a merge thread the
/// scheduler took off its core mid-move) before the caller takes the locks, which wait
/// for it just the same.
const MOVE_PATIENCE: std::time::Duration = std::time::Duration::from_millis(100);

/// A lock-free read that raced node moves, tried again while the merges pause between
/// moves ([`MovePause`]): each try first waits for the move under way to end. `None` if
/// moves still raced every try (a merge with a backlog does not pause) or one never
/// ended, when the caller reads under the level locks.
///
/// `around`: a get of one level ([`read_level`]), which does not wait for the move under
/// way but reads around it (the merges then start no further move, so a try after the
/// one it raced holds).
pub fn read_paused<'t, T>(
    pause: &MovePause,
    tables: impl Iterator<Item = &'t Table> + Clone,
    retries: &tierkv_core::Counter,
    around: bool,
    mut read: impl FnMut(AroundMove<'t>) -> Result<T>,
) -> Option<Result<T>> {
    let _pause = pause.hold();
    for _ in 0..PAUSED_TRIES {
        if !around && !wait_unmoving(tables.clone(), MOVE_PATIENCE) {
            return None;
        }
        if let Some(found) = read_validated(tables.clone(), 1, retries, around, &mut read) {
            return Some(found);
        }
    }
    None
}

/// Recovery (§4.7): finishes the move of the marked node, if any, and clears the mark.
pub fn repair_mark(sh: &Shared, meta: &MergeMeta, old_head: u64, new_head: u64) -> Result<bool> {
    let x = sh.pool.load_u64(meta.mark)?;
    if x == 0 {
        return Ok(false);
    }
    let src = PoolSource(&sh.pool);
    let hx = skiplist::header(&src, x)?;
    let kx = skiplist::key(&src, x, &hx)?.into_owned();
    let mut m = Moved::default();
    // While the newtable's head still points at a node of x's key at some level, step 2
    // was not persisted, so step 3 has not touched x's links: skipping along them is
    // right. Where it points past them, nothing is done again.
    let past = past_key(&src, new_head, &kx, false)?;
    unlink_from_new(sh, new_head, &kx, &past, None, &mut m)?;
    link_into_old(sh, old_head, x, &mut Finger::default(), &mut m)?;
    sh.pool.store_u64(meta.mark, 0)?;
    sh.persist("zc-repair-unmark", meta.mark, 8)?;
    Ok(true)
}

impl Inner {
    /// Runs (or resumes) the zero-copy compaction of `level`'s two oldest tables; returns
    /// whether there was one.
    pub fn zero_copy_step(&self, level: usize) -> Result<bool> {
        let v = self.version();
        let (Some(o), Some(n)) = (v.levels[level].first(), v.levels[level].get(1)) else {
            return Ok(false);
        };
        if o.merge.is_none() {
            self.start_merge(level, o, n)?;
        }
        let v = self.version();
        let (Some(o), Some(n)) = (
            v.levels[level].first().cloned(),
            v.levels[level].get(1).cloned(),
        ) else {
            return Err(Error::corruption(
                Tier::Pmem,
                0,
                "zero-copy merge lost its tables",
            ));
        };
        let Some(state) = o.merge.clone() else {
            return Err(Error::corruption(
                Tier::Pmem,
                0,
                "zero-copy merge without state",
            ));
        };
        // Only this thread changes the pair: the finger stays valid across the moves.
        let mut finger = Finger::default();
        // (runs in bursts, pauses for raced readers, shares the CPU with a busy foreground)
        let (mut yields, mut pauses, mut shares) = (true, true, true);
        let mut batch = (std::time::Instant::now(), self.foreground_ops());
        let mut bursts = crate::background::Bursts::start();
        for moves in 0u64.. {
            if self.stop.load(Ordering::Acquire) {
                return Ok(true); // resumed at the next open
            }
            // A busy foreground gets all but `merge_share` of the merge's time while the
            // level holds fewer than twice the trigger's tables, and the merge runs in
            // bursts (`Bursts`) while it holds fewer than three times as many; past that
            // it runs flat out, so the buffer's shape stays bounded. Raced readers get a
            // pause up to three times the trigger's tables, and up to six times while no
            // writer waits for a flush: a merge that does not pause sends them to the level
            // locks, where each hand-off waits for a scheduler slot (after a 1M load, YCSB
            // A's L0 reached 6 tables with its first flush, and 200-350 of its reads went
            // to the locks: read p99.9 1.5-2.8 ms).
            if moves % YIELD_CHECK_EVERY == 0 {
                let tables = self.version().levels[level].len();
                let trigger = self.opts.trigger;
                shares = tables < 2 * trigger;
                yields = tables < 3 * trigger;
                pauses = yields
                    || (tables < 6 * trigger && !self.shared.flush_awaited.load(Ordering::Relaxed));
            }
            if self.opts.merge_share < 100 && moves > 0 && moves % SHARE_BATCH == 0 {
                let ops = self.foreground_ops();
                if shares && ops != batch.1 {
                    let ran = batch.0.elapsed();
                    let share = f64::from(self.opts.merge_share) / 100.0;
                    std::thread::sleep(ran.mul_f64((1.0 - share) / share));
                    bursts.restart();
                }
                batch = (std::time::Instant::now(), ops);
            }
            bursts.between_steps(yields, &self.shared);
            // The search for the node's place reads only: readers need not wait for it.
            let Some(planned) = plan_first(&self.shared, o.meta.head, n.meta.head, &finger)? else {
                break;
            };
            if pauses {
                self.move_pause.wait(&self.stop);
            }
            let m = {
                let _exclusive = self.level_locks[level].write();
                let _moving = NodeMoves::begin(&o, &n, &planned.view());
                let indexes = Indexes::of(&o, &n);
                apply_move(
                    &self.shared,
                    &state.meta,
                    n.meta.head,
                    planned,
                    &mut finger,
                    indexes,
                )?
            };
            self.progress.fetch_add(1, Ordering::AcqRel);
            self.shared.counters.relinked_words.add(m.words);
            self.shared.counters.nodes_relinked.incr();
            self.shared.counters.versions_dropped.add(m.dropped);
        }
        // The merged table gets an index of all its nodes (the oldtable's indexed only
        // its own); only this thread changes the pair, so the walk sees it whole.
        o.runs()
            .install_index(SeekIndex::build(&o.source(), o.meta.head)?);
        self.finish_merge(level, &o, &n, &state)?;
        if let Some(c) = self.shared.counters.compactions.get(level) {
            c.incr();
        }
        self.notify();
        Ok(true)
    }

    /// Records the merge (the oldtable takes the newtable's runs; a fresh mark word) with
    /// one publish, and installs handles that carry the merge state and the OR of the two
    /// Bloom filters (§4.6: the oldtable will hold the newtable's keys).
    fn start_merge(&self, level: usize, o: &Arc<Table>, n: &Arc<Table>) -> Result<()> {
        let pool = &self.shared.pool;
        let mark = self.shared.alloc.alloc(8)?;
        pool.store_u64(mark, 0)?;
        self.shared.persist("zc-new-mark", mark, 8)?;
        let meta = MergeMeta {
            level: level as u64,
            old: o.meta.id,
            new: n.meta.id,
            mark,
        };
        let mut om = o.meta.clone();
        om.allocs.extend(n.meta.allocs.iter().copied());
        om.entries += n.meta.entries;
        om.max_seq = om.max_seq.max(n.meta.max_seq);
        let mut nm = n.meta.clone();
        nm.allocs.clear();
        let mut st = self.dir.lock();
        let mut d = st.cur.clone();
        for t in d.levels[level].iter_mut() {
            if t.id == om.id {
                *t = om.clone();
            } else if t.id == nm.id {
                *t = nm.clone();
            }
        }
        d.merges.push(meta);
        if let Err(e) = self.publish(&mut st, d) {
            let _ = self.shared.alloc.free(mark);
            return Err(e);
        }
        pool.crash_point("mio.zerocopy.after_start");
        let state = Arc::new(MergeState { meta });
        o.absorb_filter(n);
        // Before the first node moves: every handle of the oldtable, old ones included,
        // keeps the newtable's runs allocated (`table.rs`, reclamation).
        o.absorb_runs(n);
        let o2 = Arc::new(o.rehandle(om, Some(state.clone())));
        let n2 = Arc::new(n.rehandle(nm, Some(state)));
        let mut v = self.version.write();
        let mut nv: Version = (**v).clone();
        for t in nv.levels[level].iter_mut() {
            if t.meta.id == o2.meta.id {
                *t = o2.clone();
            } else if t.meta.id == n2.meta.id {
                *t = n2.clone();
            }
        }
        *v = Arc::new(nv);
        Ok(())
    }

    /// Publishes the merged table in the next level, without the newtable and the merge
    /// record; frees the mark word.
    fn finish_merge(
        &self,
        level: usize,
        o: &Arc<Table>,
        n: &Arc<Table>,
        state: &MergeState,
    ) -> Result<()> {
        let mut st = self.dir.lock();
        let mut d = st.cur.clone();
        d.merges.retain(|m| m.old != o.meta.id);
        d.levels[level].retain(|t| t.id != o.meta.id && t.id != n.meta.id);
        d.levels[level + 1].push(o.meta.clone());
        self.shared.pool.crash_point("mio.zerocopy.before_finish");
        self.publish(&mut st, d)?;
        self.shared.pool.crash_point("mio.zerocopy.after_finish");
        // The merged table owes the newest version of each key only.
        let cost = self
            .sizes
            .cost_of(&PoolSource(&self.shared.pool), o.meta.head)
            .unwrap_or_else(|_| {
                let mut d = o.cost;
                d.merge(&n.cost);
                d
            });
        let merged = Arc::new(o.rehandle(o.meta.clone(), None).with_cost(cost));
        {
            let mut v = self.version.write();
            let mut nv: Version = (**v).clone();
            nv.levels[level].retain(|t| t.meta.id != o.meta.id && t.meta.id != n.meta.id);
            nv.levels[level + 1].push(merged);
            *v = Arc::new(nv);
        }
        drop(st);
        self.shared.alloc.free(state.meta.mark)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arena::Arena;
    use crate::node::Kind;
    use crate::skiplist::{Cursor, Entry};
    use crate::stats::Counters;
    use crate::table::{Shared, TableShape, write_table};
    use std::collections::BTreeMap;
    use tierkv_core::media::pmem::{
        DurabilityMode, EmulatedLatency, PmemAllocator, PmemConfig, PmemPool,
    };

    fn shared(dir: &std::path::Path) -> Arc<Shared> {
        shared_in(dir, DurabilityMode::Volatile, 8 << 20, None)
    }

    fn shared_in(
        dir: &std::path::Path,
        mode: DurabilityMode,
        size: u64,
        hook: Option<crate::table::PersistHook>,
    ) -> Arc<Shared> {
        let pool = PmemPool::create(&PmemConfig {
            path: dir.join("pool"),
            size,
            mode,
            latency: EmulatedLatency::default(),
        })
        .unwrap();
        let start = pool.data_start();
        let alloc =
            PmemAllocator::format(pool.clone(), start, pool.len() - start, 16 << 10).unwrap();
        Arc::new(Shared {
            pool,
            alloc,
            counters: Counters::default(),
            hook,
            flush_awaited: Default::default(),
        })
    }

    /// A table of `(key, seq, value)` written in one piece.
    pub(crate) fn table(
        sh: &Arc<Shared>,
        id: u64,
        rows: &[(String, u64, Option<String>)],
    ) -> Table {
        let a = Arena::new((rows.len() * 160).max(1 << 16), id);
        for (k, s, v) in rows {
            match v {
                Some(v) => a.insert(*s, Kind::Put, k.as_bytes(), v.as_bytes()).unwrap(),
                None => a.insert(*s, Kind::Delete, k.as_bytes(), b"").unwrap(),
            };
        }
        let max = rows.iter().map(|r| r.1).max().unwrap_or(0);
        let shape = TableShape {
            bloom_keys: 64,
            bloom_bits: 16,
        };
        write_table(sh, &a, id, max, shape, Default::default()).unwrap()
    }

    fn contents(pool: &PmemPool, head: u64) -> Vec<(Vec<u8>, u64)> {
        let mut c = Cursor::seek(PoolSource(pool), head, b"").unwrap();
        let mut out = Vec::new();
        while let Some(k) = c.current_key().unwrap() {
            out.push(k);
            c.advance().unwrap();
        }
        out
    }

    /// The next move of the merge of the pair (`o`, `n`) with their seek indexes.
    fn move_pair(
        sh: &Shared,
        meta: &MergeMeta,
        (o, n): (&Table, &Table),
        finger: &mut Finger,
    ) -> Option<Moved> {
        let planned = plan_first(sh, o.meta.head, n.meta.head, finger).unwrap()?;
        let _moving = NodeMoves::begin(o, n, &planned.view());
        Some(apply_move(sh, meta, n.meta.head, planned, finger, Indexes::of(o, n)).unwrap())
    }

    /// A xorshift generator from `seed` (non-zero).
    fn xorshift(mut rng: u64) -> impl FnMut() -> u64 {
        move || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        }
    }

    /// A seek that starts where a table's seek index says lands where a seek from the
    /// head lands, in both tables of a pair, after every move of a merge (the moved node and
    /// the older versions it drops leave their tables: their entries must be dead) and in
    /// the merged table with its fresh index.
    #[test]
    fn seeks_from_the_seek_indexes_match_seeks_from_the_head_through_a_merge() {
        let d = tempfile::tempdir().unwrap();
        let sh = shared(d.path());
        let mut next = xorshift(11);
        let (mut old_rows, mut new_rows) = (Vec::new(), Vec::new());
        for seq in 1..=3000u64 {
            let k = format!("k{:04}", next() % 1500);
            let row = (k, seq, Some(format!("v{seq}")));
            if seq <= 1800 {
                old_rows.push(row);
            } else {
                new_rows.push(row);
            }
        }
        let o = table(&sh, 1, &old_rows);
        let n = table(&sh, 2, &new_rows);
        let (oi, ni) = (o.runs().index().unwrap(), n.runs().index().unwrap());
        assert!(
            oi.len() > 40 && ni.len() > 20,
            "{} and {} entries",
            oi.len(),
            ni.len()
        );
        let meta = MergeMeta {
            level: 0,
            old: 1,
            new: 2,
            mark: sh.alloc.alloc(8).unwrap(),
        };
        let probes: Vec<String> = (0..1510).step_by(7).map(|i| format!("k{i:04}")).collect();
        let src = PoolSource(&sh.pool);
        let check = |ctx: &str| {
            let mut from_index = 0;
            for t in [&o, &n] {
                for p in &probes {
                    let start = t.seek_start(p.as_bytes());
                    from_index += usize::from(start.is_some());
                    let a = skiplist::seek_from(&src, t.meta.head, start, p.as_bytes()).unwrap();
                    let b = skiplist::seek(&src, t.meta.head, p.as_bytes()).unwrap();
                    assert_eq!(a, b, "{ctx}: table {} key {p}", t.meta.id);
                }
            }
            from_index
        };
        assert!(check("before the merge") > probes.len());
        let mut finger = Finger::default();
        let mut moves = 0;
        while move_pair(&sh, &meta, (&o, &n), &mut finger).is_some() {
            moves += 1;
            if moves % 25 == 0 {
                check(&format!("after {moves} moves"));
            }
        }
        assert!(
            ni.dead_entries() == ni.len(),
            "every indexed newtable node left it"
        );
        assert!(
            oi.dead_entries() > 0,
            "older versions dropped from the oldtable"
        );
        check("after the last move");
        o.runs()
            .install_index(SeekIndex::build(&src, o.meta.head).unwrap());
        let fresh = o.runs().index().unwrap();
        assert_eq!(fresh.dead_entries(), 0);
        assert!(
            fresh.len() > oi.len() - oi.dead_entries(),
            "the merged table's nodes"
        );
        assert!(check("merged, fresh index") > probes.len() / 2);
    }

    #[test]
    fn merge_relinks_every_node_keeps_newest_and_writes_no_key_or_value_bytes() {
        let d = tempfile::tempdir().unwrap();
        let sh = shared(d.path());
        let mut next = xorshift(7);
        let mut old_rows = Vec::new();
        let mut new_rows = Vec::new();
        let mut newest: BTreeMap<String, u64> = BTreeMap::new();
        for seq in 1..=400u64 {
            let k = format!("k{:03}", next() % 150);
            let row = (k.clone(), seq, Some(format!("v{seq}")));
            if seq <= 200 {
                old_rows.push(row);
            } else {
                new_rows.push(row);
            }
            newest.insert(k, seq);
        }
        let o = table(&sh, 1, &old_rows);
        let n = table(&sh, 2, &new_rows);
        let mark = sh.alloc.alloc(8).unwrap();
        let meta = MergeMeta {
            level: 0,
            old: 1,
            new: 2,
            mark,
        };
        let before = sh.pool.counters().pmem_bytes_written;
        let mut words = 0;
        let mut finger = Finger::default();
        while let Some(m) = move_pair(&sh, &meta, (&o, &n), &mut finger) {
            words += m.words;
        }
        let written = sh.pool.counters().pmem_bytes_written - before;
        assert_eq!(written, 8 * words, "only link and mark words were written");
        assert!(contents(&sh.pool, n.meta.head).is_empty());
        let got = contents(&sh.pool, o.meta.head);
        let old_keys: BTreeMap<String, u64> = old_rows.iter().map(|r| (r.0.clone(), r.1)).collect();
        // Keys of the newtable appear once (their newest version); keys only in the
        // oldtable keep all their versions (a zero-copy merge drops only what it relinks
        // over).
        for (k, s) in &newest {
            let versions: Vec<u64> = got
                .iter()
                .filter(|g| g.0 == k.as_bytes())
                .map(|g| g.1)
                .collect();
            assert_eq!(versions.first(), Some(s), "{k}: {versions:?}");
            if new_rows.iter().any(|r| &r.0 == k) {
                assert_eq!(versions.len(), 1, "{k}: {versions:?}");
            } else {
                assert!(old_keys.contains_key(k));
            }
        }
        for w in got.windows(2) {
            assert!(skiplist::cmp_node(&w[0].0, w[0].1, &w[1].0, w[1].1).is_lt());
        }
        for level in 1..MAX_HEIGHT {
            skiplist::walk_level(&PoolSource(&sh.pool), o.meta.head, level, |_, _, _| Ok(()))
                .unwrap();
        }
    }

    /// Crash images with the persist point each was taken before.
    type Images = Vec<(&'static str, Vec<u8>)>;

    /// The newest version of `key` reading the newtable, then the oldtable.
    fn newest_of_pair(n: &Table, o: &Table, key: &[u8]) -> Result<Option<Entry>> {
        for t in [n, o] {
            if let Some(e) = t.get(key)? {
                return Ok(Some(e));
            }
        }
        Ok(None)
    }

    /// A pair to merge for the racing-reader tests (tables `2 round + 1` and `+ 2`): the
    /// oldtable holds k0000..k1999 (values "old<i>"), the newtable newer versions of every
    /// other key ("new<i>"), which a get must find.
    fn racing_pair(sh: &Arc<Shared>, round: u64) -> (Arc<Table>, Arc<Table>, MergeMeta) {
        let old_rows: Vec<_> = (0..2000u64)
            .map(|i| (format!("k{i:04}"), 1 + i, Some(format!("old{i}"))))
            .collect();
        let new_rows: Vec<_> = (0..2000u64)
            .step_by(2)
            .map(|i| (format!("k{i:04}"), 10_000 + i, Some(format!("new{i}"))))
            .collect();
        let o = Arc::new(table(sh, 2 * round + 1, &old_rows));
        let n = Arc::new(table(sh, 2 * round + 2, &new_rows));
        let mark = sh.alloc.alloc(8).unwrap();
        sh.pool.store_u64(mark, 0).unwrap();
        let meta = MergeMeta {
            level: 0,
            old: o.meta.id,
            new: n.meta.id,
            mark,
        };
        (o, n, meta)
    }

    /// The newest value of `key` reading the newtable, then the oldtable.
    #[test]
    fn gets_without_locks_racing_node_moves_keep_only_answers_no_move_raced() {
        let d = tempfile::tempdir().unwrap();
        let sh = shared(d.path());
        let (mut retries_seen, mut gave_up, mut unchecked_wrong, mut reads) = (0, 0, 0, 0u64);
        for round in 0..6u64 {
            let (o, n, meta) = racing_pair(&sh, round);
            let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
            let retries = Arc::new(tierkv_core::Counter::default());
            let readers: Vec<_> = (0..2u64)
                .map(|r| {
                    let (o, n, done, retries) =
                        (o.clone(), n.clone(), done.clone(), retries.clone());
                    std::thread::spawn(move || {
                        let want = |i: u64| {
                            if i.is_multiple_of(2) {
                                format!("new{i}")
                            } else {
                                format!("old{i}")
                            }
                        };
                        let (mut nones, mut wrong, mut reads, mut i) = (0u64, 0u64, 0u64, r);
                        while !done.load(Ordering::Acquire) {
                            i = (i * 7919 + 13) % 2000;
                            let key = format!("k{i:04}");
                            let search = || newest_of_pair(&n, &o, key.as_bytes());
                            let value = |e: Option<Entry>| {
                                e.and_then(|e| e.value)
                                    .map(|v| String::from_utf8(v).unwrap())
                            };
                            // What a get without the check would have answered.
                            if let Ok(e) = search()
                                && value(e).as_deref() != Some(want(i).as_str())
                            {
                                wrong += 1;
                            }
                            match read_unmoved([&*n, &*o].into_iter(), 1000, &retries, search) {
                                Some(e) => {
                                    assert_eq!(
                                        value(e.unwrap()),
                                        Some(want(i)),
                                        "a get kept an answer read while a node moved"
                                    );
                                    reads += 1;
                                }
                                None => nones += 1,
                            }
                        }
                        (nones, wrong, reads)
                    })
                })
                .collect();
            let mut finger = Finger::default();
            loop {
                if move_pair(&sh, &meta, (&o, &n), &mut finger).is_none() {
                    break;
                }
                // Room for whole reads between moves (a move on real media persists
                // several times; here it takes about as long as a read).
                let t = std::time::Instant::now();
                while t.elapsed() < std::time::Duration::from_micros(10) {
                    std::hint::spin_loop();
                }
            }
            done.store(true, Ordering::Release);
            for r in readers {
                let (nones, wrong, n) = r.join().unwrap();
                gave_up += nones;
                unchecked_wrong += wrong;
                reads += n;
            }
            retries_seen += retries.get();
            assert_eq!(
                contents(&sh.pool, o.meta.head).len(),
                2000,
                "the merged table holds one version per key"
            );
        }
        println!(
            "{reads} checked reads, {retries_seen} thrown away, {gave_up} left to the locks, \
             {unchecked_wrong} wrong answers without the check"
        );
        assert!(reads > 0);
        assert!(
            retries_seen + gave_up > 0,
            "no read ever raced a move: the test checked nothing"
        );
    }

    #[test]
    fn a_merge_waits_between_moves_while_a_reader_holds_a_pause() {
        let pause = Arc::new(MovePause::default());
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        pause.wait(&stop); // nobody holds one: returns at once
        let hold = pause.hold();
        let waiter = {
            let (pause, stop) = (pause.clone(), stop.clone());
            std::thread::spawn(move || pause.wait(&stop))
        };
        std::thread::sleep(std::time::Duration::from_millis(30));
        assert!(!waiter.is_finished(), "the merge went on under a pause");
        drop(hold);
        waiter.join().unwrap();
        // A store that closes stops every wait, pauses or not.
        let _held = pause.hold();
        let waiter = {
            let (pause, stop) = (pause.clone(), stop.clone());
            std::thread::spawn(move || pause.wait(&stop))
        };
        stop.store(true, Ordering::Release);
        waiter.join().unwrap();
    }

    /// Gets racing a merge that moves nodes back to back: a get whose lock-free read a
    /// move spoiled pauses the merge and reads again, and never has to fall back to the
    /// level locks; every answer is the newest version.
    #[test]
    fn gets_racing_a_merge_that_pauses_for_them_never_fall_back_to_the_locks() {
        let d = tempfile::tempdir().unwrap();
        let sh = shared(d.path());
        let (mut paused, mut gave_up, mut reads) = (0u64, 0u64, 0u64);
        for round in 0..4u64 {
            let (o, n, meta) = racing_pair(&sh, round);
            let pause = Arc::new(MovePause::default());
            let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
            let readers: Vec<_> = (0..2u64)
                .map(|r| {
                    let (o, n, done, pause) = (o.clone(), n.clone(), done.clone(), pause.clone());
                    std::thread::spawn(move || {
                        let retries = tierkv_core::Counter::default();
                        let (mut paused, mut gave_up, mut reads, mut i) = (0u64, 0u64, 0u64, r);
                        while !done.load(Ordering::Acquire) {
                            i = (i * 7919 + 13) % 2000;
                            let key = format!("k{i:04}");
                            let search = || newest_of_pair(&n, &o, key.as_bytes());
                            let tables = [&*n, &*o].into_iter();
                            let found = match read_unmoved(tables.clone(), 1, &retries, search) {
                                Some(found) => Some(found),
                                None => {
                                    let again =
                                        read_paused(&pause, tables, &retries, false, |_| search());
                                    paused += u64::from(again.is_some());
                                    again
                                }
                            };
                            let Some(found) = found else {
                                gave_up += 1;
                                continue;
                            };
                            let want = if i.is_multiple_of(2) { "new" } else { "old" };
                            assert_eq!(
                                found.unwrap().and_then(|e| e.value),
                                Some(format!("{want}{i}").into_bytes()),
                                "a get kept an answer read while a node moved"
                            );
                            reads += 1;
                        }
                        (paused, gave_up, reads)
                    })
                })
                .collect();
            let stop = std::sync::atomic::AtomicBool::new(false);
            let mut finger = Finger::default();
            loop {
                pause.wait(&stop);
                if move_pair(&sh, &meta, (&o, &n), &mut finger).is_none() {
                    break;
                }
            }
            done.store(true, Ordering::Release);
            for r in readers {
                let (p, g, n) = r.join().unwrap();
                (paused, gave_up, reads) = (paused + p, gave_up + g, reads + n);
            }
        }
        println!("{reads} checked reads, {paused} after a pause, {gave_up} left to the locks");
        assert!(
            paused > 0,
            "no read ever raced a move: the test checked nothing"
        );
        assert_eq!(
            gave_up, 0,
            "a read that paused the merge still raced its moves"
        );
        assert!(reads > paused);
    }

    fn lookup(pool: &PmemPool, old: u64, new: u64, key: &[u8]) -> Option<u64> {
        let src = PoolSource(pool);
        skiplist::get(&src, new, key)
            .unwrap()
            .or_else(|| skiplist::get(&src, old, key).unwrap())
            .map(|e| e.seq)
    }

    /// A crash at every persist point of a zero-copy merge (line-level and word-torn
    /// images alternately): after recovery repairs the mark, both tables are well-formed
    /// skiplists, every key reads its newest version through the newtable then the
    /// oldtable, and the merge rolls forward to the same result as an uninterrupted one.
    #[test]
    fn crash_at_every_persist_point_of_a_merge_rolls_forward() {
        use std::sync::Mutex;
        use tierkv_core::media::pmem::CrashImageOptions;
        let d = tempfile::tempdir().unwrap();
        let images: Arc<Mutex<Images>> = Arc::default();
        let pool_cell: Arc<Mutex<Option<Arc<PmemPool>>>> = Arc::default();
        let hook: crate::table::PersistHook = {
            let (images, pool_cell) = (images.clone(), pool_cell.clone());
            Arc::new(move |label| {
                if let Some(p) = pool_cell.lock().unwrap().as_ref() {
                    let mut imgs = images.lock().unwrap();
                    let opts = if imgs.len() % 2 == 0 {
                        CrashImageOptions::lines()
                    } else {
                        CrashImageOptions::torn_words()
                    };
                    let seed = imgs.len() as u64;
                    imgs.push((label, p.crash_image(seed, opts).unwrap()));
                }
            })
        };
        let sh = shared_in(d.path(), DurabilityMode::Tracked, 1 << 20, Some(hook));
        let rows = |range: std::ops::Range<u64>| -> Vec<(String, u64, Option<String>)> {
            range
                .map(|s| (format!("k{:02}", (s * 7) % 23), s, Some(format!("v{s}"))))
                .collect()
        };
        let o = table(&sh, 1, &rows(1..40));
        let n = table(&sh, 2, &rows(40..70));
        let mark = sh.alloc.alloc(8).unwrap();
        sh.pool.store_u64(mark, 0).unwrap();
        sh.pool.persist(mark, 8).unwrap();
        let meta = MergeMeta {
            level: 0,
            old: 1,
            new: 2,
            mark,
        };
        let mut newest: BTreeMap<String, u64> = BTreeMap::new();
        for (k, s, _) in rows(1..70) {
            newest.insert(k, s);
        }
        *pool_cell.lock().unwrap() = Some(sh.pool.clone());
        let mut finger = Finger::default();
        while move_pair(&sh, &meta, (&o, &n), &mut finger).is_some() {}
        *pool_cell.lock().unwrap() = None;
        let final_old = contents(&sh.pool, o.meta.head);
        let images = std::mem::take(&mut *images.lock().unwrap());
        let mut labels: BTreeMap<&str, usize> = BTreeMap::new();
        for (i, (label, image)) in images.iter().enumerate() {
            *labels.entry(label).or_default() += 1;
            let path = d.path().join(format!("img{i}"));
            std::fs::write(&path, image).unwrap();
            let pool = PmemPool::open(&PmemConfig {
                path: path.clone(),
                size: 0,
                mode: DurabilityMode::Volatile,
                latency: EmulatedLatency::default(),
            })
            .unwrap();
            let alloc = PmemAllocator::open(pool.clone(), pool.data_start()).unwrap();
            let rec = Shared {
                pool: pool.clone(),
                alloc,
                counters: Counters::default(),
                hook: None,
                flush_awaited: Default::default(),
            };
            let ctx = format!("image {i} (before persist {label})");
            repair_mark(&rec, &meta, o.meta.head, n.meta.head).unwrap();
            assert_eq!(pool.load_u64(mark).unwrap(), 0, "{ctx}: mark cleared");
            for head in [o.meta.head, n.meta.head] {
                for level in 0..MAX_HEIGHT {
                    skiplist::walk_level(&PoolSource(&pool), head, level, |_, _, _| Ok(()))
                        .unwrap_or_else(|e| panic!("{ctx}: level {level}: {e}"));
                }
            }
            for (k, s) in &newest {
                let got = lookup(&pool, o.meta.head, n.meta.head, k.as_bytes());
                assert_eq!(got, Some(*s), "{ctx}: key {k}");
            }
            while move_first(
                &rec,
                &meta,
                (o.meta.head, n.meta.head),
                &mut Finger::default(),
                Indexes::default(),
            )
            .unwrap()
            .is_some()
            {}
            assert_eq!(
                contents(&pool, o.meta.head),
                final_old,
                "{ctx}: rolled forward"
            );
            drop(rec);
            drop(pool);
            std::fs::remove_file(&path).unwrap();
        }
        println!("{} crash images by persist point: {labels:?}", images.len());
        for label in [
            "zc-mark",
            "zc-unlink-new",
            "zc-x-links",
            "zc-link-old",
            "zc-drop-old",
            "zc-unmark",
        ] {
            assert!(
                labels.get(label).copied().unwrap_or(0) >= 5,
                "{label}: {labels:?}"
            );
        }
    }

    /// Gets of a merging pair read around the move under way ([`read_level`]) at every
    /// persist point of every move (the merge stands there while they read): each is
    /// answered at its one try, without waiting for the move to end, and each answer is
    /// the newest version in the pair (tombstones included; keys with several versions
    /// in either table; keys in neither).
    #[test]
    fn gets_reading_around_a_move_are_right_at_every_persist_point_of_it() {
        type Probe = Box<dyn Fn(&'static str) + Send + Sync>;
        let d = tempfile::tempdir().unwrap();
        let probe: Arc<parking_lot::Mutex<Option<Probe>>> = Arc::default();
        let hook: crate::table::PersistHook = {
            let probe = probe.clone();
            Arc::new(move |label| {
                if let Some(p) = probe.lock().as_ref() {
                    p(label);
                }
            })
        };
        let sh = shared_in(d.path(), DurabilityMode::Volatile, 8 << 20, Some(hook));
        let mut next = xorshift(29);
        let (mut old_rows, mut new_rows) = (Vec::new(), Vec::new());
        let mut newest: BTreeMap<String, (u64, Option<Vec<u8>>)> = BTreeMap::new();
        for seq in 1..=900u64 {
            let k = format!("k{:03}", next() % 300);
            let v = (!next().is_multiple_of(6)).then(|| format!("v{seq}"));
            newest.insert(k.clone(), (seq, v.clone().map(String::into_bytes)));
            if seq <= 540 {
                old_rows.push((k, seq, v));
            } else {
                new_rows.push((k, seq, v));
            }
        }
        let o = Arc::new(table(&sh, 1, &old_rows));
        let n = Arc::new(table(&sh, 2, &new_rows));
        assert!(n.runs().index().is_some_and(|ix| ix.len() > 5));
        o.absorb_filter(&n); // as `start_merge` does
        let mark = sh.alloc.alloc(8).unwrap();
        sh.pool.store_u64(mark, 0).unwrap();
        let meta = MergeMeta {
            level: 0,
            old: 1,
            new: 2,
            mark,
        };
        let seen: Arc<parking_lot::Mutex<BTreeMap<&'static str, u64>>> = Arc::default();
        let failures: Arc<parking_lot::Mutex<Vec<String>>> = Arc::default();
        *probe.lock() = Some({
            let (o, n, seen, failures) = (o.clone(), n.clone(), seen.clone(), failures.clone());
            Box::new(move |label| {
                let retries = tierkv_core::Counter::default();
                let mut around = false;
                for i in 0..305u64 {
                    let key = format!("k{i:03}");
                    let h = crate::bloom::hash_key(key.as_bytes());
                    let found = read_level([&*n, &*o].into_iter(), 1, &retries, |moving| {
                        around |= moving.is_some();
                        newest_in([&*n, &*o].into_iter(), key.as_bytes(), h, &moving)
                    });
                    let got = match found {
                        None => {
                            failures.lock().push(format!("{label}: {key} waited"));
                            continue;
                        }
                        Some(found) => found.unwrap().map(|e| (e.seq, e.value)),
                    };
                    if got.as_ref() != newest.get(&key) {
                        failures.lock().push(format!(
                            "{label}: {key} read {got:?}, newest {:?}",
                            newest.get(&key)
                        ));
                    }
                }
                if around {
                    *seen.lock().entry(label).or_default() += 1;
                }
            })
        });
        let mut finger = Finger::default();
        let mut moves = 0;
        while move_pair(&sh, &meta, (&o, &n), &mut finger).is_some() {
            moves += 1;
        }
        *probe.lock() = None;
        let failures = failures.lock();
        assert!(
            failures.is_empty(),
            "{} wrong or waiting gets, the first: {:#?}",
            failures.len(),
            &failures[..failures.len().min(6)]
        );
        let seen = seen.lock();
        println!("{moves} moves; gets read around them at {seen:?}");
        assert!(moves > 100, "{moves} moves");
        for label in [
            "zc-mark",
            "zc-unlink-new",
            "zc-x-links",
            "zc-link-old",
            "zc-unmark",
        ] {
            assert!(
                seen.get(label).copied().unwrap_or(0) >= 50,
                "{label}: {seen:?}"
            );
        }
        assert!(
            seen.get("zc-drop-old").copied().unwrap_or(0) > 0,
            "{seen:?}"
        );
    }
}
