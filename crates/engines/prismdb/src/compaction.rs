//! Compaction: demotion of cold objects to flash and promotion of hot ones (PrismDB §4.2,
//! §5, §6 "Compaction thread"). The persist order and its crash cases are FORMAT.md §3
//! "Compaction" and "Promotion".
//!
//! One step ([`compact`]) of one partition:
//! 1. *choose* (state lock): the candidate key ranges are the spans of the partition's
//!    tables (compaction key range `i = 1`, §5.2); the victim policy picks one
//!    ([`crate::policy`]); the mapper's pinning probabilities split its fast-tier objects
//!    into pinned and victims (tombstones are always victims); the victims' objects are
//!    copied; the range is marked as being compacted;
//! 2. *merge* (no lock): the overlapping tables are read, merged with the victims (the
//!    fast-tier version wins, tombstones drop the key), hot flash objects are noted;
//! 3. *write*: new tables (synced), then the manifest (synced, directory synced: commit);
//! 4. *install* (state lock): the new table set; each victim still indexed at the same slot
//!    is unpublished and its slot freed; the range mark is cleared;
//! 5. the hot flash objects the merge met are promoted (copied to the fast tier; the new
//!    tables keep them too), then — in a read-dominated window — the hot objects gets
//!    noted on flash (`hot.rs`), within the room below the low watermark; old tables and
//!    the old manifest are removed.
//!
//! A read-triggered compaction is for the hot objects gets noted on flash; it does
//! nothing when there are none. When the room below the low watermark holds them, it
//! picks no range: steps 1 to 4 are skipped (no table is read or rewritten), and step 5
//! promotes them. Otherwise it demotes first, in the range MSC chooses (the most room
//! freed at the least cost), when they are at least `read_min_promote` of that range's
//! table bytes, and then promotes them into the room freed.
//!
//! A failed flash write aborts before the commit with the fast tier untouched (the new
//! files are removed, or left to the next load when the manifest may have been written).
//!
//! Thread safety: one compaction at a time per partition (its compaction thread, or a test
//! calling [`compact`] with the thread stopped).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use parking_lot::MutexGuard;
use tierkv_core::media::flash::FlashFile;

use tierkv_core::{Error, Result};

use crate::format::{OBJECT_HEADER_LEN, decode_object, object_len};
use crate::key::{DramKey, dram_key, range_from, range_from_mut};
use crate::manifest::{ManifestData, TableEntry, commit_file, manifest_name};
use crate::mapper::{is_pinned, pin_draw, pin_probabilities};
use crate::partition::{Partition, State};
use crate::policy::{Candidate, choose};
use crate::shared::Shared;
use crate::table::format::{build_table, table_len};
use crate::table::{Table, TableData, TableSet, table_name};

/// What started a compaction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Trigger {
    /// The fast tier is above its high watermark, or a writer waits for space.
    Write,
    /// A read-dominated phase with hot objects on flash.
    Read,
}

/// A fast-tier object chosen for demotion: a checked copy of its slot's object (one
/// allocation; key and value are spans of it).
struct Victim {
    /// The object's bytes, header included, as [`decode_object`] accepted them.
    object: Vec<u8>,
    key_len: usize,
    tomb: bool,
    off: u64,
    ts: u64,
}

impl Victim {
    /// A victim from a copy of the object at `off` indexed under `key` with timestamp
    /// `ts`; `None` unless the copy decodes to exactly that object.
    fn from_copy(object: Vec<u8>, key: &[u8], off: u64, ts: u64) -> Option<Victim> {
        let (key_len, tomb) = {
            let o = decode_object(&object).filter(|o| o.ts == ts && o.key == key)?;
            (o.key.len(), o.value.is_none())
        };
        Some(Victim {
            object,
            key_len,
            tomb,
            off,
            ts,
        })
    }

    fn key(&self) -> &[u8] {
        self.object
            .get(OBJECT_HEADER_LEN..OBJECT_HEADER_LEN + self.key_len)
            .unwrap_or_default()
    }

    /// The value; `None` for a tombstone.
    fn value(&self) -> Option<&[u8]> {
        if self.tomb {
            return None;
        }
        self.object.get(OBJECT_HEADER_LEN + self.key_len..)
    }

    /// Bytes the object takes on the fast tier (its encoded length).
    fn len(&self) -> u64 {
        self.object.len() as u64
    }
}

/// The outcome of choosing.
struct Plan {
    lo: Vec<u8>,
    hi: Option<Vec<u8>>,
    victims: Vec<Victim>,
    old: Vec<Arc<Table>>,
    probs: [f64; 4],
    /// Whether the merge promotes the hot flash objects it meets, and the hot objects
    /// gets noted on flash are promoted after it (`hot.rs`).
    promote: bool,
}

/// What a compaction did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    /// Objects demoted.
    pub demoted: u64,
    /// Tombstones removed with the flash versions they hid.
    pub tombstones: u64,
    /// Objects promoted.
    pub promoted: u64,
    /// Tables written.
    pub tables_written: u64,
}

/// Runs one compaction of `part`; `None` when there was nothing to do. `force`: writers
/// are waiting for space, so a chosen range with nothing but pinned objects is demoted
/// whole (as above the high watermark).
///
/// When flash has no room for the output beyond its reserve (FORMAT.md §3 "Room on
/// flash"), a write-triggered compaction is planned again with the fast tier's tombstones
/// only (they shrink the range's table, so the reserve is always enough); with no
/// tombstone to drop either, it fails with `NoSpace`, which writers waiting for room
/// report.
pub fn compact(
    sh: &Shared,
    part: &Partition,
    trigger: Trigger,
    force: bool,
) -> Result<Option<Outcome>> {
    let started = Instant::now();
    // Flash had no room for this partition's last compaction and still has not: drop
    // tombstones first (then try a full compaction once if there are none).
    let mut tombs_only =
        trigger == Trigger::Write && sh.flash_free() < part.room_needed.load(Ordering::Acquire);
    let mut tried_full = !tombs_only;
    let no_room = |why: &str| {
        let e = Error::no_space(tierkv_core::Tier::Flash, format!("prismdb: {why}"));
        *part.last_error.lock() = Some(e.to_string());
        Err(e)
    };
    let outcome = loop {
        let plan = match plan(sh, part, trigger, force, tombs_only) {
            Ok(Some(p)) => p,
            Ok(None) if tombs_only && !tried_full => {
                tombs_only = false;
                tried_full = true;
                continue;
            }
            Ok(None) if tombs_only => {
                return no_room(
                    "no room on flash for a compaction beyond its reserve, and no tombstone \
                     to drop",
                );
            }
            Ok(None) => return Ok(None),
            Err(e) => {
                *part.last_error.lock() = Some(e.to_string());
                return Err(e);
            }
        };
        match execute(sh, part, &plan) {
            Ok(Some(o)) => {
                if !tombs_only {
                    part.room_needed.store(0, Ordering::Release);
                }
                break o;
            }
            Ok(None) => {
                part.state.write().compacting = None;
                sh.counters.compactions_no_room.incr();
                if trigger == Trigger::Read {
                    return Ok(None);
                }
                if tombs_only {
                    return no_room("no room on flash even in its reserve to drop tombstones");
                }
                tombs_only = true;
            }
            Err(e) => {
                part.state.write().compacting = None;
                sh.counters.compactions_failed.incr();
                *part.last_error.lock() = Some(e.to_string());
                return Err(e);
            }
        }
    };
    match trigger {
        Trigger::Write => sh.counters.compactions_write.incr(),
        Trigger::Read => sh.counters.compactions_read.incr(),
    }
    sh.counters
        .compaction_micros
        .add(u64::try_from(started.elapsed().as_micros()).unwrap_or(u64::MAX));
    Ok(Some(outcome))
}

/// The candidate ranges of a partition: one per table (from its first key to the next
/// table's), or the whole partition when it has no table.
pub fn candidates(part: &Partition, st: &State) -> Vec<Candidate> {
    let t = &st.tables.tables;
    if t.is_empty() {
        return vec![Candidate {
            lo: part.lo.clone(),
            hi: part.hi.clone(),
            table: None,
        }];
    }
    (0..t.len())
        .map(|j| Candidate {
            lo: if j == 0 {
                part.lo.clone()
            } else {
                t.get(j).map(|x| x.min_key().to_vec()).unwrap_or_default()
            },
            hi: t
                .get(j + 1)
                .map(|x| x.min_key().to_vec())
                .or_else(|| part.hi.clone()),
            table: Some(j),
        })
        .collect()
}

/// The tombstones of the fast tier in candidate range `c`.
fn tombstones_in(st: &State, c: &Candidate) -> usize {
    range_from(&st.index, &c.lo)
        .take_while(|(k, _)| c.hi.as_ref().is_none_or(|h| k.as_slice() < h.as_slice()))
        .filter(|(_, l)| l.tomb)
        .count()
}

fn plan(
    sh: &Shared,
    part: &Partition,
    trigger: Trigger,
    force: bool,
    tombs_only: bool,
) -> Result<Option<Plan>> {
    let probs = pin_probabilities(part.tracker.lock().histogram(), sh.opts.pin_threshold);
    // A read-triggered compaction is for the hot objects gets noted on flash (`hot.rs`,
    // the ready notes): with none, there is nothing to do. It only promotes, into the room
    // the fast tier has below the low watermark, when that room holds them all, or when
    // they are not worth the rewrite of a table — less than `read_min_promote` of its bytes
    // (a table's target size before a range is chosen: choosing takes the write lock and,
    // with `victim=precise`, scores every range object by object, which stalled YCSB-C's
    // gets for seconds when it ran at every trigger only to be skipped), or no range can be
    // demoted. Otherwise it demotes first, in the range MSC chooses (the most room freed at
    // the least cost).
    let (noted, room) = match trigger {
        Trigger::Read => {
            let fullness = part.fullness(sh);
            (
                part.hot.lock().ready_bytes() as u64,
                room_below_low_watermark(sh, fullness),
            )
        }
        Trigger::Write => (0, 0),
    };
    let promote_only = || {
        if room == 0 {
            sh.counters.read_compactions_skipped.incr();
            return Ok(None);
        }
        Ok(Some(Plan {
            lo: part.lo.clone(),
            hi: part.hi.clone(),
            victims: Vec::new(),
            old: Vec::new(),
            probs,
            promote: true,
        }))
    };
    let worth = |table_bytes: u64| noted as f64 >= sh.opts.read_min_promote * table_bytes as f64;
    if trigger == Trigger::Read {
        if noted == 0 {
            return Ok(None);
        }
        if room >= noted || !worth(sh.opts.table_size) {
            return promote_only();
        }
    }
    let mut st = part.state.write();
    let fullness = Partition::fullness_of(&st.slabs, sh);
    let cands = candidates(part, &st);
    let c = if tombs_only {
        // The range with the most tombstones (none: nothing to drop).
        cands
            .iter()
            .enumerate()
            .map(|(i, c)| (tombstones_in(&st, c), i))
            .filter(|(n, _)| *n > 0)
            .max()
            .map(|(_, i)| i)
    } else {
        choose(sh, part, &st, &cands, &probs)
    };
    let Some(c) = c else {
        drop(st);
        return if trigger == Trigger::Read {
            promote_only()
        } else {
            Ok(None)
        };
    };
    let Some(cand) = cands.get(c) else {
        return Ok(None);
    };
    let old: Vec<Arc<Table>> = cand
        .table
        .and_then(|j| st.tables.tables.get(j).cloned())
        .into_iter()
        .collect();
    if trigger == Trigger::Read && !worth(old.iter().map(|t| t.file.len()).sum()) {
        drop(st);
        return promote_only();
    }
    // The range is marked before its victims are picked, and the state lock is let go
    // while they are: gets and writes of the partition go on meanwhile (copying up to a
    // table's worth of victims under the write lock stalled every get of the partition
    // for milliseconds: YCSB-A's and F's p99.9 of 5-9 ms). Marked, the range takes
    // tombstones for its deletes; a write that replaces a picked victim meanwhile keeps
    // its slot, as `install` frees only victims still indexed at the picked slot.
    st.compacting = Some((cand.lo.clone(), cand.hi.clone()));
    drop(st);
    let picked = (|| -> Result<Vec<Victim>> {
        // NOTE: pins hold under pressure too (writers waiting): ignoring them there
        // demoted the hot set with the cold, and the next reads of the hottest keys went to
        // flash. Only a range with nothing unpinned is taken whole.
        let mut victims = pick_victims(sh, part, cand, &probs, tombs_only, tombs_only)?;
        if victims.is_empty()
            && trigger == Trigger::Write
            && !tombs_only
            && (force || fullness >= sh.opts.high_watermark)
        {
            victims = pick_victims(sh, part, cand, &probs, true, false)?;
        }
        Ok(victims)
    })();
    let victims = match picked {
        Ok(v) if !v.is_empty() => v,
        other => {
            part.state.write().compacting = None;
            return other.map(|_| None);
        }
    };
    // A write-triggered compaction promotes only in a read-dominated window: in a
    // write-heavy one every promoted object takes room the incoming writes need and brings
    // the next compaction (a table rewrite) closer, while the hot keys are written back to
    // the fast tier by their own updates anyway (YCSB-F, 100,000 ops at 2M records: 225
    // MiB written to flash and 36,117 ops/s with these promotions, 145 MiB and 44,516
    // without).
    let promote = sh.opts.promotions
        && (trigger == Trigger::Read
            || part.counters.read_share_since_mark() >= sh.opts.promote_read_share);
    Ok(Some(Plan {
        lo: cand.lo.clone(),
        hi: cand.hi.clone(),
        victims,
        old,
        probs,
        promote,
    }))
}

/// Fast-tier bytes below the low watermark in a partition as full as `fullness`.
fn room_below_low_watermark(sh: &Shared, fullness: f64) -> u64 {
    let share = sh.usage.capacity as f64 / sh.parts.len().max(1) as f64;
    ((sh.opts.low_watermark - fullness).max(0.0) * share) as u64
}

/// Index entries [`pick_victims`] looks at per hold of the state lock.
const PICK_CHUNK: usize = 256;
/// Victims [`install`] takes out of the index per hold of the state's write lock.
const INSTALL_CHUNK: usize = 512;

/// The objects of `cand` to demote (only its tombstones with `tombs_only`), in key
/// order, up to a table's worth of bytes. The range is marked as compacting (`plan`); the
/// state's read lock is taken for [`PICK_CHUNK`] index entries at a time, and only to
/// list them: the objects are copied and checked with no lock held, so that writers of
/// the partition are not held up by the copy.
///
/// A slot read without the lock may have been freed and reused since it was listed (its
/// key was written again, or deleted): each object is copied first and the copy checked
/// (checksum, timestamp and key as listed), so a victim is always the listed object
/// whole. A copy that does not check is looked up again under the lock: a key no longer
/// indexed at the listed slot is skipped (its newer version stays on the fast tier); one
/// still indexed there is read again under the lock, and corruption if it still does not
/// check.
fn pick_victims(
    sh: &Shared,
    part: &Partition,
    cand: &Candidate,
    probs: &[f64; 4],
    ignore_pins: bool,
    tombs_only: bool,
) -> Result<Vec<Victim>> {
    /// One listed index entry: key (inline up to 24 bytes, as the index keeps it: no
    /// allocation per listed entry), slot, timestamp, slot size, tombstone.
    type Listed = (DramKey, u64, u64, usize, bool);
    let mut out = Vec::new();
    let mut bytes = 0u64;
    let mut from: Vec<u8> = cand.lo.clone();
    let mut chunk: Vec<Listed> = Vec::with_capacity(PICK_CHUNK);
    loop {
        chunk.clear();
        let mut next = None;
        {
            let st = part.state.read();
            for (seen, (k, loc)) in range_from(&st.index, &from).enumerate() {
                if cand
                    .hi
                    .as_ref()
                    .is_some_and(|h| k.as_slice() >= h.as_slice())
                {
                    break;
                }
                if seen == PICK_CHUNK {
                    next = Some(k.to_vec());
                    break;
                }
                if tombs_only && !loc.tomb {
                    continue;
                }
                chunk.push((
                    k.clone(),
                    loc.off,
                    loc.ts,
                    st.slabs.slot_size(loc.class) as usize,
                    loc.tomb,
                ));
            }
        }
        // The tracker's lock only for the clock values (every put and get of the
        // partition takes it), not while the objects are read.
        if !ignore_pins {
            let tracker = part.tracker.lock();
            chunk.retain(|(k, _, _, _, tomb)| {
                *tomb || !is_pinned(probs, tracker.clock(k), pin_draw(k))
            });
        }
        for (k, off, ts, slot_size, _) in chunk.drain(..) {
            if bytes >= sh.opts.table_size {
                return Ok(out);
            }
            let victim = match Victim::from_copy(copy_object(sh, off, slot_size)?, &k, off, ts) {
                Some(v) => Some(v),
                None => {
                    let st = part.state.read();
                    match st.index.get(k.as_slice()) {
                        Some(loc) if loc.off == off && loc.ts == ts => Some(
                            Victim::from_copy(copy_object(sh, off, slot_size)?, &k, off, ts)
                                .ok_or_else(|| {
                                    Error::corruption(
                                        tierkv_core::Tier::Pmem,
                                        off,
                                        "indexed object does not check",
                                    )
                                })?,
                        ),
                        // Written again or deleted since it was listed.
                        _ => None,
                    }
                }
            };
            if let Some(v) = victim {
                bytes += v.len();
                out.push(v);
            }
        }
        if bytes >= sh.opts.table_size {
            return Ok(out);
        }
        match next {
            Some(k) => from = k,
            None => return Ok(out),
        }
    }
}

/// A copy of the object in the slot of `slot_size` bytes at `off` (its encoded length
/// when the header's lengths fit the slot, else the whole slot; checked by the caller).
fn copy_object(sh: &Shared, off: u64, slot_size: usize) -> Result<Vec<u8>> {
    let slot = sh.pool.read(off, slot_size)?;
    let len = crate::format::stored_len(slot)
        .filter(|&n| n <= slot_size)
        .unwrap_or(slot_size);
    Ok(slot.get(..len).unwrap_or(slot).to_vec())
}

/// Runs a plan; `None` when flash has no room for its output (nothing was changed).
fn execute(sh: &Shared, part: &Partition, plan: &Plan) -> Result<Option<Outcome>> {
    let mut outcome = Outcome::default();
    if plan.victims.is_empty() {
        // Nothing to demote (a read-triggered compaction with room on the fast tier): no
        // table is read or rewritten; the noted hot objects are promoted into the room.
        let mut budget = PromotionBudget::now(sh, part);
        outcome.promoted = promote_noted(sh, part, &mut budget)?;
        sh.counters.promoted.add(outcome.promoted);
        return Ok(Some(outcome));
    }
    let flash: Vec<TableData> = plan
        .old
        .iter()
        .map(|t| t.read_data())
        .collect::<Result<_>>()?;
    // Merge: the fast-tier version wins; a tombstone drops the key. The merged entries
    // borrow the victims' and the old tables' bytes: each is copied once more, into the new
    // table's image.
    let flash_entries: usize = flash.iter().map(TableData::len).sum();
    let mut merged: Vec<(&[u8], &[u8])> = Vec::with_capacity(flash_entries + plan.victims.len());
    let mut promote: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
    let mut fi = flash.iter().flat_map(TableData::iter).peekable();
    let mut vi = plan.victims.iter().peekable();
    let promoting = plan.promote;
    loop {
        let take_victim = match (vi.peek(), fi.peek()) {
            (None, None) => break,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (Some(v), Some(f)) => v.key() <= f.0,
        };
        if take_victim {
            let Some(v) = vi.next() else { break };
            if fi.peek().is_some_and(|f| f.0 == v.key()) {
                fi.next();
            }
            match v.value() {
                Some(val) => {
                    merged.push((v.key(), val));
                    outcome.demoted += 1;
                }
                None => outcome.tombstones += 1,
            }
        } else if let Some(f) = fi.next() {
            if promoting && is_hot(part, f.0, &plan.probs) {
                promote.push((f.0.to_vec(), f.1.to_vec()));
            }
            merged.push(f);
        }
    }
    // Held until the old files are removed (`PrismDbStore::hold_flash_commits`).
    let commit_gate = sh.flash_commit.read();
    let Some((new_tables, seq, reserve)) = write_and_commit(sh, part, plan, &merged)? else {
        return Ok(None);
    };
    outcome.tables_written = new_tables.len() as u64;
    install(sh, part, plan, new_tables, seq)?;
    // Writers waiting for room go on now, not after the promotions and the removal of the
    // old files (a directory sync).
    sh.space_freed();
    drop(merged);
    // Promotions, after the victims' slots are free (FORMAT.md §3 "Promotion"): copies of
    // values the new tables keep, so no crash can lose them ([`PromotionBudget`]).
    let mut budget = PromotionBudget::now(sh, part);
    for (k, v) in &promote {
        if !budget.open(sh, part) || !budget.admits(sh, part, k, v) {
            break;
        }
        if promote_one(sh, part, k, v, None)? {
            budget.spend(k, v);
            outcome.promoted += 1;
        }
    }
    if promoting {
        outcome.promoted += promote_noted(sh, part, &mut budget)?;
    } else {
        // A write-heavy window: hot keys go back to the fast tier by their own updates,
        // and the notes of those are stale (their versions moved); drop them all.
        part.hot.lock().clear();
    }
    sh.counters.demoted.add(outcome.demoted);
    sh.counters.promoted.add(outcome.promoted);
    sh.counters.tombstones_dropped.add(outcome.tombstones);
    // Leftovers: removal failures are harmless (the next load removes them).
    if remove_old(sh, part, plan, seq).is_ok() {
        sh.crash_point("prismdb.compaction.old_files_removed");
    }
    // The reserve is back once the replaced tables are gone.
    drop(reserve);
    drop(commit_gate);
    Ok(Some(outcome))
}

/// What a compaction may still promote: at most the room below the low watermark (measured
/// when promotions start), and nothing while a writer of any partition waits for room: the
/// slots a compaction frees for it are not the promotions' (each promotion took back a slot
/// the demotion had freed, so writers waiting for a slot of the largest class saw none for
/// 30 s while compaction after compaction demoted and promoted the same bytes).
struct PromotionBudget {
    left: u64,
}

impl PromotionBudget {
    /// NOTE: the room is measured after install freed the victims' slots, so it already
    /// counts the demoted bytes; adding them again let every compaction promote back what
    /// it demoted, up to the high watermark, and the next write-triggered compaction
    /// started at once (in a read-only run: 127 write-triggered compactions, 2.7 GiB
    /// written to flash in 10 s).
    fn now(sh: &Shared, part: &Partition) -> PromotionBudget {
        PromotionBudget {
            left: room_below_low_watermark(sh, part.fullness(sh)),
        }
    }

    /// True while anything may be promoted at all.
    fn open(&self, sh: &Shared, part: &Partition) -> bool {
        self.left > 0 && part.fullness(sh) < sh.opts.low_watermark && !sh.writers_waiting()
    }

    /// True when `k = v` fits what is left.
    fn admits(&self, sh: &Shared, part: &Partition, k: &[u8], v: &[u8]) -> bool {
        self.left >= object_len(k.len(), v.len()) as u64 && self.open(sh, part)
    }

    fn spend(&mut self, k: &[u8], v: &[u8]) {
        self.left = self
            .left
            .saturating_sub(object_len(k.len(), v.len()) as u64);
    }
}

fn is_hot(part: &Partition, key: &[u8], probs: &[f64; 4]) -> bool {
    let clock = part.tracker.lock().clock(key);
    is_pinned(probs, clock, pin_draw(key))
}

/// Promotes the hot objects gets noted on flash (`hot.rs`), most read first, within
/// `budget`; returns how many. A note is promoted only while the table it was read from
/// is still the one the table set has for its key (tables are immutable: the noted value
/// is the key's flash version then) and no fast-tier version exists; notes left when the
/// budget runs out are kept for the next promotion.
fn promote_noted(sh: &Shared, part: &Partition, budget: &mut PromotionBudget) -> Result<u64> {
    let mut notes = part.hot.lock().take_ready().into_iter();
    let mut promoted = 0;
    for (k, n) in notes.by_ref() {
        if !budget.open(sh, part) {
            break;
        }
        if !budget.admits(sh, part, &k, &n.value) {
            continue;
        }
        if promote_one(sh, part, &k, &n.value, Some(n.table))? {
            budget.spend(&k, &n.value);
            promoted += 1;
        }
    }
    part.hot.lock().restore(notes.collect());
    Ok(promoted)
}

/// Writes `k = v` to the fast tier unless a fast-tier version exists (and, with
/// `from_table`, unless the table set's table for `k` is another than that one); true if
/// published.
fn promote_one(
    sh: &Shared,
    part: &Partition,
    k: &[u8],
    v: &[u8],
    from_table: Option<u64>,
) -> Result<bool> {
    let len = object_len(k.len(), v.len());
    let (off, ts, class) = {
        let mut st = part.state.write();
        // NOTE: a key a write batch has reserved a slot for is left alone: a copy taking a
        // timestamp after the batch's could outrank it after a crash (FORMAT.md §3 "Write
        // batches").
        if st.index.contains_key(k) || st.batch_keys.contains_key(k) {
            return Ok(false);
        }
        if let Some(n) = from_table
            && (st.tables.find(k).map(|t| t.number) != Some(n) || st.in_compaction(k))
        {
            return Ok(false);
        }
        let Some(class) = st.slabs.class_for(len) else {
            return Ok(false);
        };
        match st.slabs.alloc(class) {
            Ok(off) => {
                st.ts += 1;
                (off, st.ts, class)
            }
            Err(Error::NoSpace { .. }) => return Ok(false),
            Err(e) => return Err(e),
        }
    };
    part.persist_and_publish(sh, k, Some(v), (off, ts, class), true, None)
}

/// Writes the merged entries as tables and commits the manifest that lists them in place
/// of the old ones. Returns the new tables and the manifest sequence.
/// Cuts sorted entries into runs of about `table_size` bytes, one per new table.
fn split_tables<'m, 'e>(
    merged: &'m [(&'e [u8], &'e [u8])],
    table_size: u64,
) -> Vec<&'m [(&'e [u8], &'e [u8])]> {
    let mut groups = Vec::new();
    let mut start = 0;
    let mut bytes = 0u64;
    for (i, (k, v)) in merged.iter().enumerate() {
        bytes += (k.len() + v.len() + 6) as u64;
        if bytes >= table_size {
            groups.push(merged.get(start..=i).unwrap_or_default());
            start = i + 1;
            bytes = 0;
        }
    }
    if start < merged.len() {
        groups.push(merged.get(start..).unwrap_or_default());
    }
    groups
}

/// A compaction's new files, planned: the tables' lengths and the manifest image.
struct Output {
    tables: Vec<u64>,
    manifest: Vec<u8>,
}

impl Output {
    fn tables_len(&self) -> u64 {
        self.tables.iter().sum()
    }
}

/// The table files a compaction created, and the flash reserve's guard if it uses it.
type Claimed<'a> = (Vec<FlashFile>, Option<MutexGuard<'a, ()>>);

/// Claims room on flash for `out` and creates its table files (FORMAT.md §3 "Room on
/// flash"): a compaction that leaves the flash reserve free goes ahead; one that does not
/// but whose tables take no more than those it replaces waits for the reserve (one at a
/// time) and uses it; any other gets `None`. The manifest's bytes stay claimed until it is
/// created. Returns the files and the reserve's guard, if taken.
fn claim_room<'a>(
    sh: &'a Shared,
    part: &Partition,
    plan: &Plan,
    out: &Output,
    first: u64,
) -> Result<Option<Claimed<'a>>> {
    let tables_len = out.tables_len();
    let man_len = out.manifest.len() as u64;
    let need = tables_len + man_len;
    let old_len: u64 = plan.old.iter().map(|t| t.file.len()).sum();
    let largest = out.tables.iter().copied().max().unwrap_or(0);
    // The reserve as it will be once these files exist.
    let reserve = sh.flash_reserve_bytes().max(
        largest.max(sh.largest_files.0.load(Ordering::Acquire))
            + man_len.max(sh.largest_files.1.load(Ordering::Acquire))
            + 8192,
    );
    let mut guard = None;
    loop {
        let mut claims = sh.flash_claims.lock();
        let free = sh
            .dev
            .capacity()
            .saturating_sub(sh.dev.used().saturating_add(*claims));
        let fits = match guard {
            Some(_) => free >= need,
            None => free >= need.saturating_add(reserve),
        };
        if fits {
            let mut files = Vec::with_capacity(out.tables.len());
            for (i, &len) in out.tables.iter().enumerate() {
                let name = table_name(part.id, first + i as u64);
                match sh.dev.create_file(&name, len) {
                    Ok(f) => files.push(f),
                    Err(e) => {
                        drop(claims);
                        for f in &files {
                            let _ = sh.dev.remove_file(f.name());
                        }
                        return Err(e);
                    }
                }
            }
            *claims += man_len;
            return Ok(Some((files, guard)));
        }
        drop(claims);
        if guard.is_some() || tables_len > old_len {
            if guard.is_none() {
                part.room_needed
                    .store(need.saturating_add(reserve), Ordering::Release);
            }
            return Ok(None);
        }
        guard = Some(sh.flash_reserve.lock());
    }
}

/// Writes the merged entries as tables and commits the manifest that lists them in place
/// of the old ones. Returns the new tables, the manifest sequence and the flash reserve's
/// guard if the compaction uses it; `None` when flash has no room (nothing written).
#[allow(clippy::type_complexity, reason = "one caller")]
fn write_and_commit<'a>(
    sh: &'a Shared,
    part: &Partition,
    plan: &Plan,
    merged: &[(&[u8], &[u8])],
) -> Result<Option<(Vec<Arc<Table>>, u64, Option<MutexGuard<'a, ()>>)>> {
    let groups = split_tables(merged, sh.opts.table_size);
    let (first, seq, keep) = {
        let mut st = part.state.write();
        let first = st.next_table;
        st.next_table += groups.len() as u64;
        let keep: Vec<Arc<Table>> = st
            .tables
            .tables
            .iter()
            .filter(|t| !plan.old.iter().any(|o| o.number == t.number))
            .cloned()
            .collect();
        (first, st.manifest_seq + 1, keep)
    };
    // The tables' lengths are computed first, so that room is claimed and the files are
    // created before any image is built; the images are then built and written one at a
    // time (a compaction holds one image, not one per output table: with three or four
    // compactions at once the images outgrew their pool, and the kernel zeroed fresh ones
    // — 8% of a 2M load's CPU).
    let tables: Vec<u64> = groups
        .iter()
        .map(|g| table_len(g, sh.opts.bloom_bits))
        .collect();
    let mut entries: Vec<TableEntry> = keep
        .iter()
        .map(|t| TableEntry {
            number: t.number,
            file_len: t.file.len(),
            entries: t.footer.entries,
            min_key: t.min_key().to_vec(),
            max_key: t.max_key().to_vec(),
        })
        .chain(
            groups
                .iter()
                .zip(&tables)
                .enumerate()
                .map(|(i, (g, &len))| TableEntry {
                    number: first + i as u64,
                    file_len: len,
                    entries: g.len() as u64,
                    min_key: g.first().map(|e| e.0.to_vec()).unwrap_or_default(),
                    max_key: g.last().map(|e| e.0.to_vec()).unwrap_or_default(),
                }),
        )
        .collect();
    entries.sort_by(|a, b| a.min_key.cmp(&b.min_key));
    let m = ManifestData {
        partition: u32::try_from(part.id).unwrap_or(0),
        seq,
        next_table: first + groups.len() as u64,
        tables: entries,
    };
    let out = Output {
        tables,
        manifest: m.encode(),
    };
    let man_len = out.manifest.len() as u64;
    let Some((files, reserve)) = claim_room(sh, part, plan, &out, first)? else {
        return Ok(None);
    };
    let created: Vec<String> = files.iter().map(|f| f.name().to_owned()).collect();
    let mut claimed = true;
    let mut written: Vec<Arc<Table>> = Vec::new();
    let mut manifest_tried = false;
    let result = (|| -> Result<()> {
        for (i, ((g, &len), f)) in groups.iter().zip(&out.tables).zip(files).enumerate() {
            let (img, footer) = build_table(g, sh.opts.bloom_bits)?;
            if img.len() as u64 != len {
                return Err(Error::invalid(format!(
                    "prismdb: table image of {} bytes, {len} planned",
                    img.len()
                )));
            }
            written.push(Arc::new(Table::write_image(
                f,
                first + i as u64,
                &img,
                footer,
            )?));
        }
        sh.crash_point("prismdb.compaction.tables_synced");
        manifest_tried = true;
        let f = {
            let mut claims = sh.flash_claims.lock();
            *claims -= man_len;
            claimed = false;
            sh.dev.create_file(&manifest_name(part.id, seq), man_len)?
        };
        commit_file(&sh.dev, &f, &out.manifest)?;
        sh.crash_point("prismdb.compaction.manifest_committed");
        Ok(())
    })();
    if claimed {
        *sh.flash_claims.lock() -= man_len;
    }
    if let Err(e) = result {
        let name = manifest_name(part.id, seq);
        // A manifest that may exist (torn or whole) is removed durably, or else the store
        // refuses writes until reopened: the next load decides whether it committed, and a
        // write accepted meanwhile (a delete without tombstone) could be undone by it.
        let undone = !manifest_tried
            || ((!sh.dev.list_files().contains(&name) || sh.dev.remove_file(&name).is_ok())
                && sh.dev.sync_dir().is_ok());
        if undone {
            for n in &created {
                let _ = sh.dev.remove_file(n);
            }
        } else {
            part.state.write().manifest_seq = seq;
            sh.poison(format!(
                "compaction of partition {} failed at its commit: {e}",
                part.id
            ));
        }
        return Err(e);
    }
    for &len in &out.tables {
        sh.note_file(len, false);
    }
    sh.note_file(man_len, true);
    Ok(Some((written, seq, reserve)))
}

fn install(
    sh: &Shared,
    part: &Partition,
    plan: &Plan,
    new_tables: Vec<Arc<Table>>,
    seq: u64,
) -> Result<()> {
    let mut st = part.state.write();
    let mut all: Vec<Arc<Table>> = st
        .tables
        .tables
        .iter()
        .filter(|t| !plan.old.iter().any(|o| o.number == t.number))
        .cloned()
        .chain(new_tables)
        .collect();
    all.sort_by(|a, b| a.min_key().cmp(b.min_key()));
    st.tables = Arc::new(TableSet { tables: all });
    st.manifest_seq = seq;
    // The victims leave the index in chunks, the write lock let go between them: every
    // victim is in the new tables now, so a get that finds one still indexed reads the same
    // value from the fast tier, and one that does not reads it from the tables. (Freeing a
    // whole table's worth of victims in one hold kept the partition's writers spinning on
    // the lock.) The range stays marked until the end, so deletes in it leave tombstones.
    for (i, chunk) in plan.victims.chunks(INSTALL_CHUNK).enumerate() {
        if i > 0 {
            drop(st);
            st = part.state.write();
        }
        for v in chunk {
            // One search: the entry is taken out, and put back if a write replaced the
            // victim meanwhile.
            let Some(loc) = st.index.remove(v.key()) else {
                continue;
            };
            if loc.off == v.off && loc.ts == v.ts {
                part.unaccount(v.key(), &loc);
                st.slabs.free(loc.off, loc.class)?;
                sh.crash_point("prismdb.compaction.victim_freed");
            } else {
                st.index.insert(dram_key(v.key()), loc);
            }
        }
    }
    // Refresh the flash flags of the range (approx-MSC overlap counts).
    let tables = st.tables.clone();
    for (k, loc) in range_from_mut(&mut st.index, &plan.lo) {
        if plan
            .hi
            .as_ref()
            .is_some_and(|h| k.as_slice() >= h.as_slice())
        {
            break;
        }
        loc.on_flash = tables.may_contain(k);
    }
    st.compacting = None;
    // Gets go on while the buckets are rebuilt (a pass over the whole partition index).
    let st = parking_lot::RwLockWriteGuard::downgrade(st);
    part.rebuild_buckets(&st, sh.opts.bucket_keys);
    let keys = st.index.len() as f64 + tables.entries() as f64;
    let cap = ((keys * sh.opts.tracker_fraction) as usize).max(sh.opts.tracker_min);
    drop(st);
    {
        let mut tr = part.tracker.lock();
        if cap > tr.capacity() {
            tr.set_capacity(cap);
        }
    }
    *part.last_error.lock() = None;
    Ok(())
}

fn remove_old(sh: &Shared, part: &Partition, plan: &Plan, seq: u64) -> Result<()> {
    for t in &plan.old {
        sh.dev.remove_file(t.file.name())?;
    }
    // The previous manifest is kept as a fallback (a checksum failure of the newest one is
    // then reported, not silently rolled back; FORMAT.md §2).
    if seq > 2 {
        let old = manifest_name(part.id, seq - 2);
        if sh.dev.list_files().contains(&old) {
            sh.dev.remove_file(&old)?;
        }
    }
    sh.dev.sync_dir()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::encode_object;

    #[test]
    fn a_victim_is_exactly_the_listed_object_or_none() {
        let obj = encode_object(7, b"user42", Some(b"value bytes"));
        let v = Victim::from_copy(obj.clone(), b"user42", 4096, 7).unwrap();
        assert_eq!(v.key(), b"user42");
        assert_eq!(v.value(), Some(&b"value bytes"[..]));
        assert_eq!(v.len(), obj.len() as u64);
        // The slot was reused: another key, or the same key written again (a new
        // timestamp), is not the listed object.
        assert!(Victim::from_copy(obj.clone(), b"user43", 4096, 7).is_none());
        assert!(Victim::from_copy(obj.clone(), b"user42", 4096, 8).is_none());
        // A copy taken while the slot was being rewritten: torn bytes do not check.
        let mut torn = obj.clone();
        if let Some(b) = torn.last_mut() {
            *b ^= 0x55;
        }
        assert!(Victim::from_copy(torn, b"user42", 4096, 7).is_none());
        // A freed slot (timestamp word zeroed).
        let mut freed = obj;
        freed.get_mut(..8).unwrap().fill(0);
        assert!(Victim::from_copy(freed, b"user42", 4096, 7).is_none());
        // A tombstone has no value.
        let t = Victim::from_copy(encode_object(9, b"k", None), b"k", 0, 9).unwrap();
        assert_eq!((t.key(), t.value()), (&b"k"[..], None));
    }
}
