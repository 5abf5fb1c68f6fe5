//! swim, the read side (FOCUS §V-B "Partial Read Process"): a row is a chain — the index
//! points at its newest entry, each delta points at the one before, a complete record
//! ends it. A read walks from the tail towards the head and stops as soon as every
//! requested field is found; in a complete record it reads only the requested fields'
//! bytes through the schema's precomputed offsets (`format/row.rs`).
//!
//! The write side (delta append, index CAS, restore point) is in `store.rs`.
//!
//! Thread safety: records are immutable once published, so a walk needs no lock; it
//! sees the chain as of the tail it loaded.

use tierkv_core::media::pmem::PmemPool;
use tierkv_core::{Error, FieldId, Result, Tier};

use crate::format::delta::Delta;
use crate::format::record::{HEADER_LEN, RecordHeader, RecordKind};
use crate::format::row::{Layout, Source};

/// Chains longer than this are corrupt (a restore point bounds them far below).
pub const MAX_CHAIN: usize = 1 << 16;

/// A record's body in the pool.
pub struct PoolBody<'a> {
    pool: &'a PmemPool,
    at: u64,
}

impl Source for PoolBody<'_> {
    fn bytes(&self, off: u64, len: usize) -> Result<&[u8]> {
        self.pool.read(self.at + off, len)
    }
}

/// Reads the fields `ids` not yet `found` from a complete row's body.
fn fill_from_row<S: Source + ?Sized>(
    layout: &Layout,
    src: &S,
    body_len: u32,
    ids: &[FieldId],
    found: &mut [Option<Vec<u8>>],
) -> Result<()> {
    for (slot, id) in found.iter_mut().zip(ids) {
        if slot.is_none() {
            *slot = Some(layout.read_field(src, body_len, *id)?);
        }
    }
    Ok(())
}

/// The header of the record at `off`.
pub fn header(pool: &PmemPool, off: u64) -> Result<RecordHeader> {
    RecordHeader::decode(pool.read(off, HEADER_LEN)?, off)?
        .ok_or_else(|| Error::corruption(Tier::Pmem, off, "no record where the index points"))
}

/// The body of the record at `off` with header `h`.
pub fn body<'a>(pool: &'a PmemPool, off: u64, h: &RecordHeader) -> Result<&'a [u8]> {
    pool.read(off + h.body_off(), h.body_len as usize)
}

/// What a walk found: the values of the requested fields, and how many chain entries it
/// visited.
#[derive(Debug)]
pub struct Walk {
    /// Values, in the order of the requested ids.
    pub values: Vec<Vec<u8>>,
    /// Chain entries read (1 = the tail only).
    pub steps: usize,
    /// The tail the walk started at and its record's sequence number: the version of the
    /// row it read (an address alone could be reused after GC).
    pub tail: (u64, u64),
}

/// Reads fields `ids` of the row whose chain ends at `tail`. `shortcut` is (the newest
/// delta the in-place merge folded into the complete record, that record) or (0, _): a
/// walk that reaches the former goes on at the latter (`merge.rs`).
pub fn read_fields(
    pool: &PmemPool,
    layout: &Layout,
    tail: u64,
    ids: &[FieldId],
    shortcut: (u64, u64),
) -> Result<Walk> {
    let mut found: Vec<Option<Vec<u8>>> = vec![None; ids.len()];
    let mut missing = ids.len();
    let mut at = tail;
    let mut tail_seq = 0;
    for steps in 1..=MAX_CHAIN {
        if shortcut.0 != 0 && at == shortcut.0 {
            at = shortcut.1;
        }
        let h = header(pool, at)?;
        if steps == 1 {
            tail_seq = h.seq;
        }
        match h.kind {
            RecordKind::Delta => {
                let b = body(pool, at, &h)?;
                let d = Delta::decode(layout, b)?;
                for (slot, id) in found.iter_mut().zip(ids) {
                    if slot.is_none()
                        && let Some(v) = d.value(b, *id)
                    {
                        *slot = Some(v.to_vec());
                        missing -= 1;
                    }
                }
                at = h.prev;
            }
            RecordKind::Row => {
                // NOTE: a few fields are read where they lie (the partial read: a field's
                // bytes only); half the fields or more are read from one read of the whole
                // body, not field by field (each read of the pool touches whole lines, so
                // ten neighbouring 100-byte fields read one by one touch about 25 lines
                // where the body is 18, and pay the emulated latency of each).
                if missing * 2 >= layout.len() {
                    let whole = body(pool, at, &h)?;
                    fill_from_row(layout, whole, h.body_len, ids, &mut found)?;
                } else {
                    let in_place = PoolBody {
                        pool,
                        at: at + h.body_off(),
                    };
                    fill_from_row(layout, &in_place, h.body_len, ids, &mut found)?;
                }
                missing = 0;
            }
            _ => {
                return Err(Error::corruption(
                    Tier::Pmem,
                    at,
                    "a chain entry that is no row or delta",
                ));
            }
        }
        // NOTE: the partial read stops early: once every requested field is found.
        if missing == 0 {
            return Ok(Walk {
                values: found.into_iter().map(Option::unwrap_or_default).collect(),
                steps,
                tail: (tail, tail_seq),
            });
        }
        if h.kind == RecordKind::Row {
            break;
        }
    }
    Err(Error::corruption(
        Tier::Pmem,
        tail,
        "a chain that never reaches a complete record",
    ))
}
