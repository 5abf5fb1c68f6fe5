//! List commands: LPUSH, RPUSH, LPUSHX, RPUSHX, LPOP, RPOP, LLEN, LRANGE, LINDEX, LSET,
//! LREM, LTRIM, LINSERT, LPOS, LMOVE, RPOPLPUSH (and, in [`super::blocking`], BLPOP, BRPOP,
//! BLMOVE) — Redis 7.0's replies and errors.
//!
//! A list is a metadata record ([`crate::encoding::Meta`], kind `L`, or `l` for a list
//! created before chunks) whose `head` and `tail` are the positions of its first element
//! and one past its last; a position is a signed 64-bit number, and the element at index
//! `i` is at position `head + i`. Where the elements of each position are stored is
//! [`super::list_slots`]'s business: 32 neighbouring positions share one chunk (layout 2),
//! or each has its own sub-key (layout 1). A push at either end rewrites one chunk and the
//! metadata; a pop likewise; LINDEX/LSET/LRANGE address positions directly (point reads,
//! so lists work on every engine, ordered or not). LREM, LINSERT rewrite the elements from
//! the change to the end (O(n), as in Kvrocks) in the same write batch, which bounds them
//! by the batch limit (10 000 operations).
//!
//! Every write runs inside [`Ctx::batched`] (elements and metadata crash-atomic where the
//! engine has atomic batches); pushes and pops inside [`Ctx::batched_meta_last`], which
//! skips the batch on a volatile engine (elements first, metadata last).
//!
//! Thread-safety: handlers run concurrently on worker threads under the key locks.

use super::collection::{self, Coll};
use super::list_slots::{self, Slots, missing};
use super::strings::reply_too_large;
use super::{CmdError, CmdResult, Ctx, is, msg, parse_int};
use crate::encoding::Kind;
use crate::resp::Args;

/// The element suffix of position `p`: order-preserving (sign flipped, big-endian).
#[expect(
    clippy::big_endian_bytes,
    reason = "a key suffix: big-endian is what orders positions like the list"
)]
pub(crate) fn pos_suffix(p: i64) -> [u8; 8] {
    ((p as u64) ^ (1 << 63)).to_be_bytes()
}

/// Which end of a list.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum End {
    Left,
    Right,
}

impl End {
    pub(crate) fn parse(arg: &[u8]) -> Result<End, CmdError> {
        if is(arg, "LEFT") {
            Ok(End::Left)
        } else if is(arg, "RIGHT") {
            Ok(End::Right)
        } else {
            Err(CmdError::new(msg::SYNTAX))
        }
    }
}

fn len_of(c: &Coll) -> i64 {
    c.meta.tail - c.meta.head
}

/// Pushes `value` at `end` (written when `slots` is flushed).
fn push_in(ctx: &Ctx<'_>, slots: &mut Slots, c: &mut Coll, end: End, value: &[u8]) -> CmdResult {
    let p = match end {
        End::Left => c.meta.head - 1,
        End::Right => c.meta.tail,
    };
    slots.put(ctx, c, p, value)?;
    match end {
        End::Left => c.meta.head = p,
        End::Right => c.meta.tail = p + 1,
    }
    c.meta.count += 1;
    Ok(())
}

/// Pops the element at `end` (the list is not empty; written when `slots` is flushed).
fn pop_in(ctx: &Ctx<'_>, slots: &mut Slots, c: &mut Coll, end: End) -> Result<Vec<u8>, CmdError> {
    let p = match end {
        End::Left => c.meta.head,
        End::Right => c.meta.tail - 1,
    };
    let v = slots.at(ctx, c, p)?;
    slots.delete(ctx, c, p)?;
    match end {
        End::Left => c.meta.head += 1,
        End::Right => c.meta.tail -= 1,
    }
    c.meta.count -= 1;
    Ok(v)
}

/// Pops the element at `end` of `c` (not empty) and writes its elements; the caller saves
/// the metadata.
pub(crate) fn pop(ctx: &Ctx<'_>, c: &mut Coll, end: End) -> Result<Vec<u8>, CmdError> {
    let mut slots = Slots::new();
    let v = pop_in(ctx, &mut slots, c, end)?;
    slots.flush(ctx)?;
    Ok(v)
}

/// Every element, head to tail.
fn read_all(ctx: &Ctx<'_>, c: &Coll) -> Result<Vec<Vec<u8>>, CmdError> {
    let mut all = Vec::new();
    read_range(ctx, c, 0, len_of(c) - 1, |v| {
        all.push(v.to_vec());
        Ok(())
    })?;
    Ok(all)
}

/// Calls `f` with the elements at indexes `a..=b` in order. A chunked list: one read per
/// chunk ([`list_slots::read_chunked`]). A list of layout 1: one range scan per page on an
/// ordered engine, on the others one [`tierkv::Db::get_many_with`] per page (each value
/// lent by the engine, the page's element keys built in one buffer), or inside a write
/// batch a point read per element (the batch's own writes first).
fn read_range(
    ctx: &Ctx<'_>,
    c: &Coll,
    a: i64,
    b: i64,
    mut f: impl FnMut(&[u8]) -> CmdResult,
) -> CmdResult {
    if c.meta.chunked {
        return list_slots::read_chunked(ctx, c, c.meta.head + a, c.meta.head + b, &mut f);
    }
    if !ctx.shared.db.ordered() {
        let mut key = c.elem(ctx, &pos_suffix(c.meta.head + a))?;
        let at = key.len() - 8;
        if ctx.pending.borrow().is_some() {
            for i in a..=b {
                if let Some(suffix) = key.get_mut(at..) {
                    suffix.copy_from_slice(&pos_suffix(c.meta.head + i));
                }
                let mut result = Ok(());
                if !ctx.read_raw_with(&key, &mut |v| result = f(v))? {
                    return Err(missing());
                }
                result?;
            }
            return Ok(());
        }
        let (klen, mut buf) = (key.len(), Vec::new());
        key.truncate(at);
        let mut next = a;
        while next <= b {
            let want = usize::try_from(b - next + 1)
                .unwrap_or(usize::MAX)
                .min(collection::PAGE);
            buf.clear();
            for i in 0..want as i64 {
                buf.extend_from_slice(&key);
                buf.extend_from_slice(&pos_suffix(c.meta.head + next + i));
            }
            let keys: Vec<&[u8]> = buf.chunks_exact(klen).collect();
            let (mut result, mut expect) = (Ok(()), 0);
            let found = ctx.shared.db.get_many_with(&keys, &mut |i, v| {
                if i != expect {
                    result = Err(missing());
                }
                expect = i + 1;
                if result.is_ok() {
                    result = f(v);
                }
            })?;
            result?;
            if found != want {
                return Err(missing());
            }
            next += want as i64;
        }
        return Ok(());
    }
    let mut next = a;
    while next <= b {
        let want = usize::try_from(b - next + 1)
            .unwrap_or(usize::MAX)
            .min(collection::PAGE);
        let rows = c.page(ctx, &pos_suffix(c.meta.head + next), want)?;
        if rows.len() != want {
            return Err(missing());
        }
        for (_, v) in rows {
            f(&v)?;
        }
        next += want as i64;
    }
    Ok(())
}

/// Replaces the elements from index `from` on by `rest` (elements written; the caller
/// saves the metadata).
fn rewrite_from(ctx: &Ctx<'_>, c: &mut Coll, from: i64, rest: &[Vec<u8>]) -> CmdResult {
    let mut slots = Slots::new();
    let start = c.meta.head + from;
    for (i, v) in rest.iter().enumerate() {
        slots.put(ctx, c, start + i as i64, v)?;
    }
    let new_tail = start + rest.len() as i64;
    for p in new_tail..c.meta.tail {
        slots.delete(ctx, c, p)?;
    }
    slots.flush(ctx)?;
    c.meta.tail = new_tail;
    c.meta.count = u64::try_from(new_tail - c.meta.head).unwrap_or(0);
    Ok(())
}

fn push_generic(ctx: &mut Ctx<'_>, args: Args<'_>, end: End, only_existing: bool) -> CmdResult {
    let key = args.get(1);
    let n = ctx.batched_meta_last(|ctx| {
        let c = if only_existing {
            collection::load(ctx, key, Kind::List)?
        } else {
            Some(collection::load_or_create(ctx, key, Kind::List)?)
        };
        let Some(mut c) = c else {
            return Ok(0);
        };
        let mut slots = Slots::new();
        for v in args.iter_from(2) {
            push_in(ctx, &mut slots, &mut c, end, v)?;
        }
        slots.flush(ctx)?;
        collection::save(ctx, key, &c)?;
        Ok(len_of(&c))
    })?;
    ctx.shared.waiters.notify(ctx.session.db, key);
    ctx.out.int(n);
    Ok(())
}

/// LPUSH key element [element ...]
pub(crate) fn lpush(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    push_generic(ctx, args, End::Left, false)
}

/// RPUSH key element [element ...]
pub(crate) fn rpush(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    push_generic(ctx, args, End::Right, false)
}

/// LPUSHX key element [element ...]
pub(crate) fn lpushx(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    push_generic(ctx, args, End::Left, true)
}

/// RPUSHX key element [element ...]
pub(crate) fn rpushx(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    push_generic(ctx, args, End::Right, true)
}

fn pop_generic(ctx: &mut Ctx<'_>, args: Args<'_>, end: End) -> CmdResult {
    let key = args.get(1);
    let count = super::pop_count(args)?;
    ctx.batched_meta_last(|ctx| {
        let Some(mut c) = collection::load(ctx, key, Kind::List)? else {
            match count {
                Some(_) => ctx.out.null_array(),
                None => ctx.out.null(),
            }
            return Ok(());
        };
        let Some(n) = count else {
            let v = pop(ctx, &mut c, end)?;
            collection::save(ctx, key, &c)?;
            ctx.out.bulk(&v);
            return Ok(());
        };
        let n = n.min(len_of(&c));
        let mut popped = Vec::new();
        let mut slots = Slots::new();
        for _ in 0..n {
            popped.push(pop_in(ctx, &mut slots, &mut c, end)?);
        }
        slots.flush(ctx)?;
        if n > 0 {
            collection::save(ctx, key, &c)?;
        }
        ctx.out.array(popped.len());
        for v in &popped {
            ctx.out.bulk(v);
        }
        Ok(())
    })
}

/// LPOP key [count]
pub(crate) fn lpop(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    pop_generic(ctx, args, End::Left)
}

/// RPOP key [count]
pub(crate) fn rpop(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    pop_generic(ctx, args, End::Right)
}

/// LLEN key
pub(crate) fn llen(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    let c = collection::load(ctx, args.get(1), Kind::List)?;
    ctx.out.int(c.map_or(0, |c| len_of(&c)));
    Ok(())
}

/// Redis's clamping of a (start, stop) index pair over a list of `len`: the index range
/// to return, or `None` when it is empty.
fn clamp(start: i64, stop: i64, len: i64) -> Option<(i64, i64)> {
    let start = if start < 0 {
        (len + start).max(0)
    } else {
        start
    };
    let stop = if stop < 0 { len + stop } else { stop };
    let stop = stop.min(len - 1);
    (start <= stop && start < len).then_some((start, stop))
}

/// LRANGE key start stop
pub(crate) fn lrange(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    let (start, stop) = (parse_int(args.get(2))?, parse_int(args.get(3))?);
    let Some(c) = collection::load(ctx, args.get(1), Kind::List)? else {
        ctx.out.array(0);
        return Ok(());
    };
    let Some((a, b)) = clamp(start, stop, len_of(&c)) else {
        ctx.out.array(0);
        return Ok(());
    };
    let (mark, bound) = (ctx.out.mark(), ctx.max_reply_bytes());
    ctx.out.array(usize::try_from(b - a + 1).unwrap_or(0));
    let mut out = std::mem::take(ctx.out);
    let result = read_range(ctx, &c, a, b, |v| {
        out.bulk(v);
        if out.exceeds(mark, bound) {
            return Err(reply_too_large(bound));
        }
        Ok(())
    });
    *ctx.out = out;
    result
}

/// A Redis list index resolved against `len`: `None` when out of range.
fn resolve(i: i64, len: i64) -> Option<i64> {
    let i = if i < 0 { len + i } else { i };
    (0..len).contains(&i).then_some(i)
}

/// LINDEX key index
pub(crate) fn lindex(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    let i = parse_int(args.get(2))?;
    let c = collection::load(ctx, args.get(1), Kind::List)?;
    match c.and_then(|c| resolve(i, len_of(&c)).map(|i| (c, i))) {
        Some((c, i)) => {
            let v = Slots::new().at(ctx, &c, c.meta.head + i)?;
            ctx.out.bulk(&v);
        }
        None => ctx.out.null(),
    }
    Ok(())
}

/// LSET key index element
pub(crate) fn lset(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    let key = args.get(1);
    let i = parse_int(args.get(2))?;
    ctx.batched(|ctx| {
        let Some(c) = collection::load(ctx, key, Kind::List)? else {
            return Err(CmdError::new("ERR no such key"));
        };
        let i = resolve(i, len_of(&c)).ok_or_else(|| CmdError::new("ERR index out of range"))?;
        let mut slots = Slots::new();
        slots.put(ctx, &c, c.meta.head + i, args.get(3))?;
        slots.flush(ctx)?;
        // The metadata is unchanged, but WATCH must see the write.
        collection::save(ctx, key, &c)
    })?;
    ctx.out.ok();
    Ok(())
}

/// LREM key count element
pub(crate) fn lrem(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    let key = args.get(1);
    let count = parse_int(args.get(2))?;
    let target = args.get(3);
    let removed = ctx.batched(|ctx| {
        let Some(mut c) = collection::load(ctx, key, Kind::List)? else {
            return Ok(0);
        };
        let all = read_all(ctx, &c)?;
        let limit = if count == 0 {
            usize::MAX
        } else {
            usize::try_from(count.unsigned_abs()).unwrap_or(usize::MAX)
        };
        let mut drop = vec![false; all.len()];
        let mut removed = 0usize;
        let order: Box<dyn Iterator<Item = usize>> = if count < 0 {
            Box::new((0..all.len()).rev())
        } else {
            Box::new(0..all.len())
        };
        for i in order {
            if removed == limit {
                break;
            }
            if all.get(i).is_some_and(|v| v.as_slice() == target) {
                drop[i] = true;
                removed += 1;
            }
        }
        let Some(first) = drop.iter().position(|d| *d) else {
            return Ok(0);
        };
        let rest: Vec<Vec<u8>> = all
            .into_iter()
            .zip(drop)
            .skip(first)
            .filter_map(|(v, d)| (!d).then_some(v))
            .collect();
        rewrite_from(ctx, &mut c, first as i64, &rest)?;
        collection::save(ctx, key, &c)?;
        Ok(removed as i64)
    })?;
    ctx.out.int(removed);
    Ok(())
}

/// LTRIM key start stop
pub(crate) fn ltrim(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    let key = args.get(1);
    let (start, stop) = (parse_int(args.get(2))?, parse_int(args.get(3))?);
    ctx.batched(|ctx| {
        let Some(mut c) = collection::load(ctx, key, Kind::List)? else {
            return Ok(());
        };
        let (a, b) = clamp(start, stop, len_of(&c)).unwrap_or((len_of(&c), len_of(&c) - 1));
        let (head, tail) = (c.meta.head, c.meta.tail);
        let mut slots = Slots::new();
        for p in (head..head + a).chain(head + b + 1..tail) {
            slots.delete(ctx, &c, p)?;
        }
        slots.flush(ctx)?;
        c.meta.head = head + a;
        c.meta.tail = (head + b + 1).max(c.meta.head);
        c.meta.count = u64::try_from(c.meta.tail - c.meta.head).unwrap_or(0);
        collection::save(ctx, key, &c)
    })?;
    ctx.out.ok();
    Ok(())
}

/// LINSERT key BEFORE|AFTER pivot element
pub(crate) fn linsert(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    let key = args.get(1);
    let after = if is(args.get(2), "AFTER") {
        true
    } else if is(args.get(2), "BEFORE") {
        false
    } else {
        return Err(CmdError::new(msg::SYNTAX));
    };
    let (pivot, value) = (args.get(3), args.get(4));
    let n = ctx.batched(|ctx| {
        let Some(mut c) = collection::load(ctx, key, Kind::List)? else {
            return Ok(0);
        };
        let all = read_all(ctx, &c)?;
        let Some(i) = all.iter().position(|v| v.as_slice() == pivot) else {
            return Ok(-1);
        };
        let at = i + usize::from(after);
        let mut rest = Vec::with_capacity(all.len() - at + 1);
        rest.push(value.to_vec());
        rest.extend(all.into_iter().skip(at));
        rewrite_from(ctx, &mut c, at as i64, &rest)?;
        collection::save(ctx, key, &c)?;
        Ok(len_of(&c))
    })?;
    ctx.out.int(n);
    Ok(())
}

/// LPOS key element [RANK rank] [COUNT num-matches] [MAXLEN len]
pub(crate) fn lpos(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    let (mut rank, mut count, mut maxlen) = (1i64, None, 0i64);
    let mut i = 3;
    while i < args.len() {
        if i + 1 >= args.len() {
            return Err(CmdError::new(msg::SYNTAX));
        }
        let (opt, v) = (args.get(i), args.get(i + 1));
        if is(opt, "RANK") {
            rank = parse_int(v)?;
            if rank == 0 {
                return Err(CmdError::new(
                    "ERR RANK can't be zero: use 1 to start from the first match, 2 from the \
                     second ... or use negative to start from the end of the list",
                ));
            }
        } else if is(opt, "COUNT") {
            let n = parse_int(v)?;
            if n < 0 {
                return Err(CmdError::new("ERR COUNT can't be negative"));
            }
            count = Some(n);
        } else if is(opt, "MAXLEN") {
            maxlen = parse_int(v)?;
            if maxlen < 0 {
                return Err(CmdError::new("ERR MAXLEN can't be negative"));
            }
        } else {
            return Err(CmdError::new(msg::SYNTAX));
        }
        i += 2;
    }
    let target = args.get(2);
    let c = collection::load(ctx, args.get(1), Kind::List)?;
    let mut found = Vec::new();
    if let Some(c) = c {
        let len = len_of(&c);
        let want = match count {
            Some(0) => i64::MAX,
            Some(n) => n,
            None => 1,
        };
        let mut skip = rank.unsigned_abs() - 1;
        let limit = if maxlen == 0 { len } else { maxlen.min(len) };
        let mut slots = Slots::new();
        for step in 0..limit {
            let idx = if rank > 0 { step } else { len - 1 - step };
            if slots.at(ctx, &c, c.meta.head + idx)? == target {
                if skip > 0 {
                    skip -= 1;
                    continue;
                }
                found.push(idx);
                if found.len() as i64 >= want {
                    break;
                }
            }
        }
    }
    match count {
        None => match found.first() {
            Some(&i) => ctx.out.int(i),
            None => ctx.out.null(),
        },
        Some(_) => {
            ctx.out.array(found.len());
            for i in found {
                ctx.out.int(i);
            }
        }
    }
    Ok(())
}

/// Moves one element from the `from` end of `src` to the `to` end of `dst`; the element,
/// or `None` when `src` is missing. Both keys' types are checked before anything moves.
pub(crate) fn move_one(
    ctx: &mut Ctx<'_>,
    src: &[u8],
    dst: &[u8],
    from: End,
    to: End,
) -> Result<Option<Vec<u8>>, CmdError> {
    let moved = ctx.batched(|ctx| {
        let Some(mut s) = collection::load(ctx, src, Kind::List)? else {
            return Ok(None);
        };
        if src == dst {
            let mut slots = Slots::new();
            let v = pop_in(ctx, &mut slots, &mut s, from)?;
            push_in(ctx, &mut slots, &mut s, to, &v)?;
            slots.flush(ctx)?;
            collection::save(ctx, src, &s)?;
            return Ok(Some(v));
        }
        let mut d = collection::load_or_create(ctx, dst, Kind::List)?;
        let v = pop(ctx, &mut s, from)?;
        let mut slots = Slots::new();
        push_in(ctx, &mut slots, &mut d, to, &v)?;
        slots.flush(ctx)?;
        collection::save(ctx, src, &s)?;
        collection::save(ctx, dst, &d)?;
        Ok(Some(v))
    })?;
    if moved.is_some() {
        ctx.shared.waiters.notify(ctx.session.db, dst);
    }
    Ok(moved)
}

/// LMOVE source destination LEFT|RIGHT LEFT|RIGHT
pub(crate) fn lmove(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    let (from, to) = (End::parse(args.get(3))?, End::parse(args.get(4))?);
    match move_one(ctx, args.get(1), args.get(2), from, to)? {
        Some(v) => ctx.out.bulk(&v),
        None => ctx.out.null(),
    }
    Ok(())
}

/// RPOPLPUSH source destination
pub(crate) fn rpoplpush(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    match move_one(ctx, args.get(1), args.get(2), End::Right, End::Left)? {
        Some(v) => ctx.out.bulk(&v),
        None => ctx.out.null(),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn positions_sort_like_the_list() {
        let ps = [i64::MIN, -5, -1, 0, 1, 7, i64::MAX];
        for w in ps.windows(2) {
            assert!(pos_suffix(w[0]) < pos_suffix(w[1]), "{w:?}");
        }
    }

    #[test]
    fn ranges_clamp_as_redis_does() {
        assert_eq!(clamp(0, -1, 3), Some((0, 2)));
        assert_eq!(clamp(-100, 100, 3), Some((0, 2)));
        assert_eq!(clamp(2, 1, 3), None);
        assert_eq!(clamp(5, 10, 3), None);
        assert_eq!(clamp(0, -1, 0), None);
        assert_eq!(resolve(-1, 3), Some(2));
        assert_eq!(resolve(3, 3), None);
        assert_eq!(resolve(-4, 3), None);
    }
}
