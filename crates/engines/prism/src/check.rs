//! `tierkv check` for PRISM: verifies the invariants the crash argument rests on
//! (`FORMAT.md` § Crash consistency, § Invariants checked).
//!
//! 1. The allocator's metadata and the key index's structure are sound (their own checks).
//! 2. Every key reached through the index owns its HSIT entry (key tag), no entry is
//!    reached twice, and the entry's forward pointer is well-coupled: a PWB record with
//!    this backward pointer and a valid checksum, or a Value Storage value (read from
//!    flash) with this backward pointer whose validity bit is set.
//! 3. The validity bitmaps agree with HSIT: each storage's live values are exactly the
//!    values HSIT points to.
//! 4. Each PWB's `[head, tail)` parses as a sequence of records and pads.
//!
//! Background reclamation and GC are held off while it runs (their locks); user writes are
//! not, so run it on a quiescent store (as `tierkv check` does) for an exact answer.
//!
//! Thread safety: takes the reclamation and GC locks for its duration.

use std::collections::BTreeSet;

use tierkv_core::{Error, Result, Tier};

use crate::engine::core::Core;
use crate::hsit::entry::{Location, key_tag};
use crate::pwb::reclaim::collect_live;
use crate::value_storage::ValueLocation;

/// Problems listed in the error before the rest are counted.
const MAX_LISTED: usize = 20;

/// Runs every check; one line per thing checked, or a corruption error listing problems.
pub fn run(core: &Core) -> Result<Vec<String>> {
    let _reclaim = core.pause_reclamation();
    let _gc = core.gc_lock.lock();
    let mut lines = Vec::new();
    let mut problems: Vec<Problem> = Vec::new();
    core.alloc.check()?;
    lines.push(format!(
        "prism: allocator ok ({} chunks of {} bytes)",
        core.alloc.stats().chunks,
        core.alloc.chunk_size()
    ));
    let index_problems = core.index.check()?;
    if index_problems.is_empty() {
        lines.push(format!("prism: key index ok ({} keys)", core.index.len()));
    }
    problems.extend(
        index_problems
            .into_iter()
            .map(|p| Problem::from(format!("key index: {p}"))),
    );
    for s in &core.storages {
        for line in s.check()? {
            if line.starts_with("error:") {
                problems.push(Problem {
                    tier: Some(Tier::Flash),
                    offset: None,
                    text: line,
                });
            } else {
                lines.push(format!("prism: {line}"));
            }
        }
    }
    let walk = walk_index(core, &mut problems)?;
    lines.push(format!(
        "prism: {} keys, every HSIT entry well-coupled ({} values in PWBs, {} in Value Storage, {} deletes in flight)",
        walk.keys, walk.pwb, walk.flash.iter().sum::<u64>(), walk.deleting
    ));
    for (i, s) in core.storages.iter().enumerate() {
        let live = s.stats().live_values;
        let want = walk.flash.get(i).copied().unwrap_or(0);
        if live != want {
            problems.push(Problem::from(format!(
                "Value Storage {i}: validity bitmaps hold {live} live values, HSIT points to {want}"
            )));
        }
    }
    lines.push(format!(
        "prism: validity bitmaps of {} Value Storages agree with HSIT",
        core.storages.len()
    ));
    for pwb in core.pwbs.iter() {
        let ring = pwb.ring();
        if let Err(e) = collect_live(pwb, ring.head, ring.tail, &mut |_, _| Ok(false)) {
            problems.push(Problem::of(&e, format!("PWB {}: {e}", pwb.id())));
        }
    }
    lines.push(format!(
        "prism: {} PWBs parse from head to tail",
        core.pwbs.len()
    ));
    if problems.is_empty() {
        return Ok(lines);
    }
    let n = problems.len();
    // The error names the tier (and offset) of the first problem that has one; each
    // problem names its own place (issue 23, finding 9: a flash problem was reported as
    // "corruption in pmem at offset 0").
    let tier = problems.iter().find_map(|p| p.tier).unwrap_or(Tier::Pmem);
    let offset = problems
        .iter()
        .find_map(|p| p.offset.filter(|_| p.tier == Some(tier)));
    problems.truncate(MAX_LISTED);
    let listed: Vec<&str> = problems.iter().map(|p| p.text.as_str()).collect();
    let place = offset.map_or(String::new(), |_| {
        " (the offset is that of the first problem naming one)".to_owned()
    });
    Err(Error::corruption(
        tier,
        offset.unwrap_or(0),
        format!(
            "prism check found {n} problems{place}: {}",
            listed.join("; ")
        ),
    ))
}

/// One problem `check` found, with its place when an error named one.
struct Problem {
    tier: Option<Tier>,
    offset: Option<u64>,
    text: String,
}

impl Problem {
    /// A problem described by `text`, located where `e` says.
    fn of(e: &Error, text: String) -> Problem {
        let (tier, offset) = match e {
            Error::Corruption { tier, offset, .. }
            | Error::ChecksumMismatch { tier, offset, .. } => (Some(*tier), Some(*offset)),
            _ => (None, None),
        };
        Problem { tier, offset, text }
    }
}

impl From<String> for Problem {
    fn from(text: String) -> Problem {
        Problem {
            tier: None,
            offset: None,
            text,
        }
    }
}

/// Counts from the index walk.
#[derive(Debug, Default)]
struct WalkCounts {
    keys: u64,
    pwb: u64,
    /// Values per Value Storage.
    flash: Vec<u64>,
    deleting: u64,
}

fn walk_index(core: &Core, problems: &mut Vec<Problem>) -> Result<WalkCounts> {
    let mut counts = WalkCounts {
        flash: vec![0; core.storages.len()],
        ..WalkCounts::default()
    };
    let mut seen = BTreeSet::new();
    for range in core.index.partitions(1) {
        core.index.for_each_in(&range, &mut |key, slot| {
            counts.keys += 1;
            let name = String::from_utf8_lossy(key).into_owned();
            if let Some(p) = check_entry(core, key, slot, &mut seen, &mut counts)? {
                problems.push(Problem {
                    text: format!("key {name:?} (slot {slot}): {}", p.text),
                    ..p
                });
            }
            Ok(())
        })?;
    }
    Ok(counts)
}

/// Checks one index entry; `Some(problem)` when an invariant fails.
fn check_entry(
    core: &Core,
    key: &[u8],
    slot: u64,
    seen: &mut BTreeSet<u64>,
    counts: &mut WalkCounts,
) -> Result<Option<Problem>> {
    if !core.hsit.contains(slot) {
        return Ok(Some(Problem::from("slot beyond the HSIT".to_owned())));
    }
    if !seen.insert(slot) {
        return Ok(Some(Problem::from("slot reached by two keys".to_owned())));
    }
    if core.hsit.key_tag(slot)? != key_tag(key) {
        return Ok(Some(Problem::from(
            "the HSIT entry's key tag belongs to another key".to_owned(),
        )));
    }
    let fp = core.hsit.load(slot)?;
    let Some(loc) = fp.location() else {
        return Ok(Some(Problem::from(format!(
            "unknown forward pointer {:#x}",
            fp.raw()
        ))));
    };
    match loc {
        Location::None => counts.deleting += 1,
        Location::Pwb(off) => {
            counts.pwb += 1;
            let Some(pwb) = core.pwbs.holding(off) else {
                return Ok(Some(Problem::from(format!(
                    "pointer {off:#x} outside every PWB"
                ))));
            };
            match pwb.record_at(off) {
                Ok((h, v)) if h.backptr == slot && h.verifies(v) => {}
                Ok((h, _)) => {
                    return Ok(Some(Problem::from(format!(
                        "PWB record at {off:#x} is ill-coupled (backward pointer {}) or damaged",
                        h.backptr
                    ))));
                }
                Err(e) => return Ok(Some(Problem::of(&e, e.to_string()))),
            }
        }
        Location::Flash(p) => {
            let vl = ValueLocation::unpack(p);
            let Some(storage) = core.storages.get(usize::from(vl.storage)) else {
                return Ok(Some(Problem::from(format!(
                    "pointer names Value Storage {}",
                    vl.storage
                ))));
            };
            if let Some(c) = counts.flash.get_mut(usize::from(vl.storage)) {
                *c += 1;
            }
            if !storage.is_valid(vl)? {
                return Ok(Some(Problem::from(format!(
                    "value at {vl:?} is not marked valid"
                ))));
            }
            match storage.read(vl) {
                Ok((bp, _)) if bp == slot => {}
                Ok((bp, _)) => {
                    return Ok(Some(Problem::from(format!(
                        "value at {vl:?} is ill-coupled (backward pointer {bp})"
                    ))));
                }
                Err(e) => return Ok(Some(Problem::of(&e, format!("value at {vl:?}: {e}")))),
            }
        }
    }
    Ok(None)
}
