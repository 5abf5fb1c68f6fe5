//! PWB reclamation: the policy (when, and how much) and the walk that finds the
//! well-coupled records to move (PRISM §4.3, §5.2 "Asynchronous reclamation of PWB").
//!
//! The mechanism that writes the records to Value Storage and re-points HSIT lives in the
//! engine (`engine/reclaim.rs`, run by `engine/background.rs`), which owns both sides; this module knows only the ring.
//! [`choose`] is a pure function of a ring snapshot; [`collect_live`] walks `[from, to)` —
//! records whose puts have all completed (PWB invariant 2) — and asks its caller whether
//! each record is well-coupled (HSIT points back at it). Only those are moved: later
//! versions of a key supersede earlier ones, deleted keys' records are dropped (§4.3).
//!
//! Thread safety: pure functions; `collect_live` reads the ring through the pool.

use std::ops::Range;

use tierkv_core::{Error, Result, Tier};

use super::Pwb;
use super::record::pad_verifies;
use super::ring::Ring;

/// What to do with one PWB now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Choice {
    /// Nothing.
    Idle,
    /// Reclaim the first `budget` bytes of `[head, upto)` (rounded up to a record).
    Reclaim {
        /// The tail at the time of the decision.
        upto: u64,
        /// Bytes to reclaim from the head.
        budget: u64,
    },
}

/// Reclaim once use reaches `watermark` bytes, moving the oldest records until about
/// `retain` bytes are left; or everything when `force`d (flush, close, a writer waiting for
/// space).
pub fn choose(ring: &Ring, watermark: u64, retain: u64, force: bool) -> Choice {
    let used = ring.used();
    if used > 0 && force {
        Choice::Reclaim {
            upto: ring.tail,
            budget: used,
        }
    } else if used > 0 && used >= watermark {
        Choice::Reclaim {
            upto: ring.tail,
            budget: used.saturating_sub(retain).max(1),
        }
    } else {
        Choice::Idle
    }
}

/// The end of a partial reclamation of `[from, to)`: the first record boundary at or past
/// `from + budget` (or `to`), so that `[from, end)` holds whole records and, with `to` the
/// tail, about `to - from - budget` bytes stay in the ring.
pub fn partial_end(pwb: &Pwb, from: u64, to: u64, budget: u64) -> Result<u64> {
    let goal = from.saturating_add(budget).min(to);
    let mut pos = from;
    while pos < goal {
        let off = pwb.abs(pos);
        let (h, _) = pwb.record_at(off)?;
        let next = pos + h.footprint();
        if next > to || h.footprint() == 0 {
            return Err(Error::corruption(
                Tier::Pmem,
                off,
                format!(
                    "PWB {} record at position {pos}: runs past the tail",
                    pwb.id()
                ),
            ));
        }
        pos = next;
    }
    Ok(pos)
}

/// A record to move to Value Storage.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LiveRecord {
    /// Its HSIT slot.
    pub slot: u64,
    /// Absolute pool offset of the record.
    pub off: u64,
    /// Value length.
    pub len: u32,
}

/// Walks the records in logical positions `[from, to)` of `pwb` and returns those for
/// which `coupled(slot, record offset)` holds, checksums verified.
pub fn collect_live(
    pwb: &Pwb,
    from: u64,
    to: u64,
    coupled: &mut dyn FnMut(u64, u64) -> Result<bool>,
) -> Result<Vec<LiveRecord>> {
    let mut live = Vec::new();
    let mut pos = from;
    while pos < to {
        let off = pwb.abs(pos);
        let (h, value) = pwb.record_at(off)?;
        let next = pos + h.footprint();
        let bad = |what: &str| {
            Error::corruption(
                Tier::Pmem,
                off,
                format!("PWB {} record at position {pos}: {what}", pwb.id()),
            )
        };
        if next > to {
            return Err(bad("runs past the tail"));
        }
        if h.is_pad() {
            if !pad_verifies(&h) || pwb.ring_offset(off) + h.footprint() != pwb.size() {
                return Err(bad("torn pad"));
            }
        } else if coupled(h.backptr, off)? {
            if !h.verifies(value) {
                return Err(bad("checksum mismatch"));
            }
            live.push(LiveRecord {
                slot: h.backptr,
                off,
                len: h.len,
            });
        }
        pos = next;
    }
    Ok(live)
}

/// Splits `lens` (in order) into consecutive batches of one chunk each; `fitting(rest)`
/// says how many of `rest`, from its start, fit in one chunk. A value that fits in no
/// chunk alone is an error (values are limited below a chunk).
pub fn batches(lens: &[u32], fitting: impl Fn(&[u32]) -> usize) -> Result<Vec<Range<usize>>> {
    let mut out = Vec::new();
    let mut start = 0;
    while let Some(rest) = lens.get(start..).filter(|r| !r.is_empty()) {
        let n = fitting(rest);
        if n == 0 {
            return Err(Error::invalid(format!(
                "a value of {} bytes does not fit in a Value Storage chunk",
                rest[0]
            )));
        }
        let end = (start + n).min(lens.len());
        out.push(start..end);
        start = end;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reclaims_the_oldest_part_at_the_watermark_and_everything_when_forced() {
        let r = Ring {
            size: 1000,
            head: 100,
            tail: 500,
        };
        assert_eq!(choose(&r, 500, 0, false), Choice::Idle);
        assert_eq!(
            choose(&r, 400, 0, false),
            Choice::Reclaim {
                upto: 500,
                budget: 400
            }
        );
        assert_eq!(
            choose(&r, 400, 250, false),
            Choice::Reclaim {
                upto: 500,
                budget: 150
            }
        );
        assert_eq!(
            choose(&r, 500, 250, true),
            Choice::Reclaim {
                upto: 500,
                budget: 400
            }
        );
        let empty = Ring { tail: 100, ..r };
        assert_eq!(choose(&empty, 1, 0, true), Choice::Idle);
    }

    /// Values of `cost(len) = len + 2` into chunks of 30.
    fn thirty(rest: &[u32]) -> usize {
        let mut used = 0;
        rest.iter()
            .take_while(|&&l| {
                used += l + 2;
                used <= 30
            })
            .count()
    }

    #[test]
    fn batches_fill_chunks_in_order() {
        let b = batches(&[10, 10, 10, 25, 5], thirty).unwrap();
        assert_eq!(b, vec![0..2, 2..3, 3..4, 4..5]);
        assert!(batches(&[], thirty).unwrap().is_empty());
    }

    #[test]
    fn a_value_larger_than_a_chunk_is_refused() {
        assert!(batches(&[31], thirty).is_err());
    }
}
