//! `tierkv check` for FOCUS: every index entry's chain is walked and every record on it
//! checked (kind, key, sequence order, both checksums), down to its complete record.
//!
//! Thread safety: runs against a live store; a concurrent write may make one chain look
//! newer than another, never invalid; GC frees no chunk while it runs (it holds the
//! reclaim lock shared, as readers do).

use std::sync::atomic::Ordering;

use tierkv_core::common::index::ConcurrentIndex;
use tierkv_core::{Error, Result, Tier};

use crate::format::record::{self, RecordKind};
use crate::store::FocusStore;
use crate::swim::{self, MAX_CHAIN};

/// Runs the checks; one line per thing checked.
pub fn check(store: &FocusStore) -> Result<Vec<String>> {
    let pool = store.plog.pool();
    let (mut rows, mut records, mut longest) = (0u64, 0u64, 0usize);
    let mut failure: Option<Error> = None;
    // IMPORTANT: like every reader, hold off reclamation while walking chains: GC frees a
    // victim (and a writer may reuse it) once no reader holds this lock, and a chain
    // entry loaded before a GC step may lie in its victim.
    let _r = store.reclaim.read();
    store.index.for_each(&mut |ikey, e| {
        if failure.is_some() {
            return;
        }
        let mut at = e.tail.load(Ordering::Acquire);
        let mut last_seq = u64::MAX;
        for steps in 1..=MAX_CHAIN {
            let r = swim::header(pool, at).and_then(|h| {
                let rec = pool.read(at, h.total_len() as usize)?;
                // A complete record below deltas may be in the middle of an in-place
                // merge after a crash: its body checksum is renewed by the next merge.
                if h.kind == RecordKind::Row && steps > 1 {
                    record::verify_header(rec, &h, at)?;
                } else {
                    record::verify(rec, &h, at)?;
                }
                let key = rec.get(record::HEADER_LEN..record::HEADER_LEN + usize::from(h.key_len));
                let mut want = h.schema.to_le_bytes().to_vec();
                want.extend_from_slice(key.unwrap_or_default());
                if want != ikey || h.seq >= last_seq {
                    return Err(Error::corruption(
                        Tier::Pmem,
                        at,
                        "a chain entry of another key or out of order",
                    ));
                }
                Ok(h)
            });
            let h = match r {
                Ok(h) => h,
                Err(e) => {
                    failure = Some(e);
                    return;
                }
            };
            records += 1;
            last_seq = h.seq;
            match h.kind {
                RecordKind::Row => {
                    longest = longest.max(steps);
                    break;
                }
                RecordKind::Delta => at = h.prev,
                _ => {
                    failure = Some(Error::corruption(
                        Tier::Pmem,
                        at,
                        "a chain entry that is no row or delta",
                    ));
                    return;
                }
            }
        }
        rows += 1;
    });
    if let Some(e) = failure {
        return Err(e);
    }
    Ok(vec![
        format!(
            "focus: {rows} rows, {records} chain records checked (checksums, keys, order); longest chain {longest}"
        ),
        format!(
            "focus: {} schemas; {} open chunks",
            store.catalog.all().len(),
            store.plog.open_chunks().len()
        ),
    ])
}
