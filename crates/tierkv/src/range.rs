//! [`Range`]: bounded, lazy iteration over a key range (issue 24 item 2; DESIGN §2), built
//! on the one scan every engine has, `KvStore::scan(start, limit)`.
//!
//! # Paging
//! The iterator never holds more than one *page*: it fetches at most
//! [`RangeOptions::page_entries`] pairs per engine scan, and sizes each page so that it
//! holds about [`RangeOptions::page_bytes`] bytes of keys and values, from the average
//! entry size seen so far (the first page assumes entries of the largest size the store's
//! limits allow, so it cannot overshoot; later pages follow the entries actually seen). A
//! scan of a million keys holds one page of them at a time.
//!
//! # What an iterator sees of concurrent writes
//! Each page is a fresh engine scan that starts just after the last key the iterator
//! returned (forward) or covers a segment below it (reverse). So:
//! - keys come out strictly ascending (descending for reverse), each at most once, all
//!   within the bounds;
//! - a key present, with one value, from the creation of the iterator to its end is returned,
//!   with that value;
//! - a key written or deleted while the iterator runs is returned or not, with any value it
//!   held meanwhile, depending on whether its page was fetched before or after the write; a
//!   key never present while the iterator ran is never returned.
//!
//! There is no snapshot: no engine has one today. A write batch that spans two pages may
//! be seen half (the pages are separate scans).
//!
//! # Reverse
//! No engine has a reverse scan, so a reverse range is paged backwards over forward scans.
//! The remaining range is `[lo, upper)`; its last segment starts at the top of a stack of
//! *checkpoint* keys (or at `lo`). The segment is scanned forward: when it holds at most
//! one page of entries it is returned reversed and `upper` moves down to its first key;
//! when it holds more, one forward pass over it pushes every page-th key as a new
//! checkpoint (values are dropped as they arrive) and the last segment is tried again. The
//! first item of a reverse range therefore costs one forward pass over the whole range, and
//! the iterator holds one key per page of the range (a million keys in pages of 256: about
//! 3,900 keys) besides one page of entries. Concurrent writes are seen as above: every
//! segment is a fresh scan, and the segments partition the range.
//!
//! # Unordered engines
//! An engine over a hash index (`dram:hash`, `dram:lockfree`, `hetermm:hash`,
//! `hetermm:lockfree`, see [`crate::is_ordered`]) cannot scan: its range yields one
//! [`Error::Unsupported`] and ends, without calling the engine.
//!
//! # Errors
//! An engine error is an item (`Err`); the iterator ends after it. Empty and inverted
//! bounds (`b".."a"`, `a..a`) yield nothing, without an error.
//!
//! Thread safety: a [`Range`] is `Send`. It holds a weak reference to the engine, not the
//! `Db`: it may outlive the `Db` without keeping its media open (its next page then fails
//! with [`Error::Closed`]).

use std::collections::VecDeque;
use std::ops::{Bound, RangeBounds};
use std::sync::{Arc, Weak};

use tierkv_core::{Error, KvPair, KvStore, Limits, Result};

/// Default [`RangeOptions::page_entries`].
pub const DEFAULT_PAGE_ENTRIES: usize = 256;
/// Default [`RangeOptions::page_bytes`] (1 MiB).
pub const DEFAULT_PAGE_BYTES: usize = 1 << 20;

/// How a [`Range`] pages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RangeOptions {
    /// Most entries one page (one engine scan) fetches; at least 1.
    pub page_entries: usize,
    /// About how many bytes of keys and values one page holds; at least 1.
    pub page_bytes: usize,
    /// Iterate from the upper bound down.
    pub reverse: bool,
}

impl Default for RangeOptions {
    fn default() -> Self {
        RangeOptions {
            page_entries: DEFAULT_PAGE_ENTRIES,
            page_bytes: DEFAULT_PAGE_BYTES,
            reverse: false,
        }
    }
}

impl RangeOptions {
    /// Sets the most entries per page.
    #[must_use]
    pub fn page_entries(mut self, n: usize) -> Self {
        self.page_entries = n;
        self
    }
    /// Sets the bytes per page.
    #[must_use]
    pub fn page_bytes(mut self, n: usize) -> Self {
        self.page_bytes = n;
        self
    }
    /// Sets the direction.
    #[must_use]
    pub fn reverse(mut self, yes: bool) -> Self {
        self.reverse = yes;
        self
    }
    fn check(&self) -> Result<()> {
        if self.page_entries == 0 || self.page_bytes == 0 {
            return Err(Error::invalid(
                "range pages must hold at least one entry and one byte",
            ));
        }
        Ok(())
    }
}

/// The smallest key greater than `k`: `k` followed by a zero byte.
pub(crate) fn successor(k: &[u8]) -> Vec<u8> {
    let mut s = Vec::with_capacity(k.len() + 1);
    s.extend_from_slice(k);
    s.push(0);
    s
}

/// The first key a scan of `range` starts at.
pub(crate) fn scan_start<K: AsRef<[u8]>>(b: Bound<&K>) -> Vec<u8> {
    match b {
        Bound::Unbounded => Vec::new(),
        Bound::Included(k) => k.as_ref().to_vec(),
        Bound::Excluded(k) => successor(k.as_ref()),
    }
}

/// True when `k` is below the upper bound `upper`.
pub(crate) fn below(upper: &Bound<Vec<u8>>, k: &[u8]) -> bool {
    match upper {
        Bound::Unbounded => true,
        Bound::Included(e) => k <= e.as_slice(),
        Bound::Excluded(e) => k < e.as_slice(),
    }
}

fn owned_bound<K: AsRef<[u8]>>(b: Bound<&K>) -> Bound<Vec<u8>> {
    match b {
        Bound::Unbounded => Bound::Unbounded,
        Bound::Included(k) => Bound::Included(k.as_ref().to_vec()),
        Bound::Excluded(k) => Bound::Excluded(k.as_ref().to_vec()),
    }
}

/// Page sizing: at most `page_entries`, about `page_bytes` from the mean entry size seen.
#[derive(Debug)]
struct Pager {
    opts: RangeOptions,
    /// The largest entry the store's limits allow (the guess before any entry is seen).
    max_entry: usize,
    seen_entries: u64,
    seen_bytes: u64,
    pages: u64,
}

impl Pager {
    fn limit(&self) -> usize {
        let mean = if self.seen_entries == 0 {
            self.max_entry as u64
        } else {
            self.seen_bytes.div_ceil(self.seen_entries)
        };
        let by_bytes = (self.opts.page_bytes as u64 / mean.max(1)).max(1);
        usize::try_from(by_bytes)
            .unwrap_or(usize::MAX)
            .min(self.opts.page_entries)
    }

    /// One engine scan, counted.
    fn scan(&mut self, store: &dyn KvStore, start: &[u8]) -> Result<Vec<KvPair>> {
        let rows = store.scan(start, self.limit())?;
        self.pages += 1;
        self.seen_entries += rows.len() as u64;
        self.seen_bytes += rows
            .iter()
            .map(|(k, v)| (k.len() + v.len()) as u64)
            .sum::<u64>();
        Ok(rows)
    }
}

/// Where a forward range goes on.
#[derive(Debug)]
struct Forward {
    /// The start of the next scan; `None` once the range is exhausted.
    next: Option<Vec<u8>>,
    upper: Bound<Vec<u8>>,
}

/// Where a reverse range goes on: what remains is `[lo, upper)`.
#[derive(Debug)]
struct Reverse {
    lo: Vec<u8>,
    upper: Bound<Vec<u8>>,
    /// Checkpoint keys in `[lo, upper)`, ascending; the last segment starts at the top.
    checkpoints: Vec<Vec<u8>>,
    done: bool,
}

#[derive(Debug)]
enum Walk {
    Forward(Forward),
    Reverse(Reverse),
    /// Nothing more (an empty or inverted range, the end, or after an error).
    Done,
    /// Yield this error once, then end (bad options, an engine that cannot scan).
    Failed(Error),
}

/// A lazy, paged iterator over a key range; see the module doc. Made by
/// [`crate::Db::range`], [`crate::Db::range_rev`] and [`crate::Db::range_with`].
pub struct Range {
    /// Weak: an iterator does not keep a closed store's media (and their locks) alive.
    store: Weak<dyn KvStore>,
    pager: Pager,
    walk: Walk,
    page: VecDeque<KvPair>,
}

impl std::fmt::Debug for Range {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Range")
            .field("walk", &self.walk)
            .field("pages", &self.pager.pages)
            .field("buffered", &self.page.len())
            .finish_non_exhaustive()
    }
}

impl Range {
    /// A range over `store`; `refused` is the error to yield first and alone (an engine
    /// that cannot scan).
    pub(crate) fn new<K, R>(
        store: &Arc<dyn KvStore>,
        limits: Limits,
        range: &R,
        opts: RangeOptions,
        refused: Option<Error>,
    ) -> Range
    where
        K: AsRef<[u8]>,
        R: RangeBounds<K>,
    {
        let lo = scan_start(range.start_bound());
        let upper = owned_bound(range.end_bound());
        let empty = match &upper {
            Bound::Unbounded => false,
            Bound::Included(e) => lo.as_slice() > e.as_slice(),
            Bound::Excluded(e) => lo.as_slice() >= e.as_slice(),
        };
        let walk = match refused.map_or_else(|| opts.check(), Err) {
            Err(e) => Walk::Failed(e),
            Ok(()) if empty => Walk::Done,
            Ok(()) if opts.reverse => Walk::Reverse(Reverse {
                lo,
                upper,
                checkpoints: Vec::new(),
                done: false,
            }),
            Ok(()) => Walk::Forward(Forward {
                next: Some(lo),
                upper,
            }),
        };
        Range {
            store: Arc::downgrade(store),
            pager: Pager {
                opts,
                max_entry: limits.max_key_len.saturating_add(limits.max_value_len),
                seen_entries: 0,
                seen_bytes: 0,
                pages: 0,
            },
            walk,
            page: VecDeque::new(),
        }
    }

    /// Engine scans made so far (pages fetched, plus the checkpoint passes of a reverse range).
    pub fn pages_fetched(&self) -> u64 {
        self.pager.pages
    }

    /// Entries the engine returned so far (what a page bound limits).
    pub fn entries_fetched(&self) -> u64 {
        self.pager.seen_entries
    }

    /// Entries fetched and not yet returned (at most one page).
    pub fn buffered(&self) -> usize {
        self.page.len()
    }

    /// Fetches the next page into `self.page`; `Ok(false)` at the end.
    fn refill(&mut self) -> Result<bool> {
        loop {
            let rows = match &mut self.walk {
                Walk::Done => return Ok(false),
                Walk::Failed(_) => {
                    return match std::mem::replace(&mut self.walk, Walk::Done) {
                        Walk::Failed(e) => Err(e),
                        _ => Ok(false),
                    };
                }
                Walk::Forward(f) => {
                    let store = self.store.upgrade().ok_or(Error::Closed)?;
                    forward_page(f, &mut self.pager, &*store)?
                }
                Walk::Reverse(r) => {
                    let store = self.store.upgrade().ok_or(Error::Closed)?;
                    reverse_page(r, &mut self.pager, &*store)?
                }
            };
            match rows {
                None => {
                    self.walk = Walk::Done;
                    return Ok(false);
                }
                Some(rows) if rows.is_empty() => continue,
                Some(rows) => {
                    self.page = rows.into();
                    return Ok(true);
                }
            }
        }
    }
}

impl Iterator for Range {
    type Item = Result<KvPair>;

    fn next(&mut self) -> Option<Self::Item> {
        if let Some(kv) = self.page.pop_front() {
            return Some(Ok(kv));
        }
        match self.refill() {
            Ok(true) => self.page.pop_front().map(Ok),
            Ok(false) => None,
            Err(e) => {
                self.walk = Walk::Done;
                Some(Err(e))
            }
        }
    }
}

impl std::iter::FusedIterator for Range {}

/// The next forward page (ascending, within the bounds), `None` at the end.
fn forward_page(
    f: &mut Forward,
    pager: &mut Pager,
    store: &dyn KvStore,
) -> Result<Option<Vec<KvPair>>> {
    let Some(start) = f.next.take() else {
        return Ok(None);
    };
    let mut rows = pager.scan(store, &start)?;
    // NOTE: a short page does not end the range (the contract says "up to limit"); only
    // an empty page or a key past the upper bound does.
    rows.retain(|(k, _)| k.as_slice() >= start.as_slice());
    if let Some(cut) = rows.iter().position(|(k, _)| !below(&f.upper, k)) {
        rows.truncate(cut);
        return Ok(Some(rows));
    }
    match rows.last() {
        Some((k, _)) => f.next = Some(successor(k)),
        None => return Ok(None),
    }
    Ok(Some(rows))
}

/// The next reverse page (descending), `None` at the end; see "Reverse" in the module doc.
fn reverse_page(
    r: &mut Reverse,
    pager: &mut Pager,
    store: &dyn KvStore,
) -> Result<Option<Vec<KvPair>>> {
    if r.done {
        return Ok(None);
    }
    loop {
        let seg_start = r.checkpoints.last().unwrap_or(&r.lo).clone();
        let cap = pager.limit();
        let mut seg = Vec::new();
        let mut cursor = seg_start.clone();
        let overflow = loop {
            let rows = pager.scan(store, &cursor)?;
            let Some((last, _)) = rows.last() else {
                break false;
            };
            cursor = successor(last);
            let mut past_end = false;
            for kv in rows {
                if kv.0 < seg_start {
                    continue;
                }
                if !below(&r.upper, &kv.0) {
                    past_end = true;
                    break;
                }
                seg.push(kv);
                if seg.len() > cap {
                    break;
                }
            }
            if seg.len() > cap {
                break true;
            }
            if past_end {
                break false;
            }
        };
        if !overflow {
            if r.checkpoints.pop().is_none() {
                r.done = true;
            }
            r.upper = Bound::Excluded(seg_start);
            seg.reverse();
            return Ok(Some(seg));
        }
        // The segment holds more than a page: checkpoint every cap-th key of it. The entry
        // at index cap is the first checkpoint; go on scanning from it.
        if let Some((first, _)) = seg.pop() {
            drop(seg);
            checkpoint_pass(r, pager, store, first, cap)?;
        }
    }
}

/// Pushes `first` and every `cap`-th key after it below `r.upper` onto the checkpoints.
fn checkpoint_pass(
    r: &mut Reverse,
    pager: &mut Pager,
    store: &dyn KvStore,
    first: Vec<u8>,
    cap: usize,
) -> Result<()> {
    let mut cursor = successor(&first);
    r.checkpoints.push(first);
    let mut since = 0usize;
    loop {
        let rows = pager.scan(store, &cursor)?;
        let Some((last, _)) = rows.last() else {
            return Ok(());
        };
        cursor = successor(last);
        for (k, _) in rows {
            if !below(&r.upper, &k) {
                return Ok(());
            }
            since += 1;
            if since == cap {
                since = 0;
                r.checkpoints.push(k);
            }
        }
    }
}
