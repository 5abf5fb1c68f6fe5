//! Set commands: SADD, SREM, SISMEMBER, SMISMEMBER, SCARD, SMEMBERS, SRANDMEMBER, SPOP,
//! SMOVE, SINTER, SUNION, SDIFF and their STORE forms, SINTERCARD, SSCAN — Redis 7.0's
//! replies and errors.
//!
//! A set is a metadata record (kind `s`) plus one element per member (`<prefix> |
//! member`, an empty value). Membership, SADD and SREM are point operations on every
//! engine; the commands that enumerate members (SMEMBERS, the algebra, SRANDMEMBER, SPOP,
//! SSCAN) walk the elements in member order and need an ordered engine (elsewhere they
//! answer an error saying so). SRANDMEMBER and SPOP take consecutive members from a
//! random point of the member space (cheap, not uniform: a documented difference).
//!
//! Every write runs inside [`Ctx::batched`].
//!
//! Thread-safety: handlers run concurrently on worker threads under the key locks.

use std::collections::BTreeSet;

use super::collection::{self, Coll, PAGE};
use super::{CmdError, CmdResult, Ctx, is, msg, parse_int};
use crate::encoding::Kind;
use crate::glob;
use crate::resp::Args;

/// Members of a set, sorted.
type Members = BTreeSet<Vec<u8>>;

/// SADD key member [member ...]
pub(crate) fn sadd(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    let key = args.get(1);
    let added = ctx.batched(|ctx| {
        let mut c = collection::load_or_create(ctx, key, Kind::Set)?;
        for m in args.iter_from(2) {
            c.elem(ctx, m)?;
        }
        let mut added = 0;
        for m in args.iter_from(2) {
            if c.get(ctx, m)?.is_none() {
                c.put(ctx, m, b"")?;
                c.meta.count += 1;
                added += 1;
            }
        }
        if added > 0 {
            collection::save(ctx, key, &c)?;
        }
        Ok(added)
    })?;
    ctx.out.int(added);
    Ok(())
}

/// Removes `members` from `c` (those present); how many.
fn remove_members<'m>(
    ctx: &Ctx<'_>,
    c: &mut Coll,
    members: impl Iterator<Item = &'m [u8]>,
) -> Result<i64, CmdError> {
    let mut removed = 0;
    for m in members {
        if c.get(ctx, m)?.is_some() {
            c.delete(ctx, m)?;
            c.meta.count -= 1;
            removed += 1;
        }
    }
    Ok(removed)
}

/// SREM key member [member ...]
pub(crate) fn srem(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    let key = args.get(1);
    let removed = ctx.batched(|ctx| {
        let Some(mut c) = collection::load(ctx, key, Kind::Set)? else {
            return Ok(0);
        };
        let removed = remove_members(ctx, &mut c, args.iter_from(2))?;
        if removed > 0 {
            collection::save(ctx, key, &c)?;
        }
        Ok(removed)
    })?;
    ctx.out.int(removed);
    Ok(())
}

fn is_member(ctx: &Ctx<'_>, c: Option<&Coll>, m: &[u8]) -> Result<bool, CmdError> {
    Ok(match c {
        Some(c) => c.get(ctx, m)?.is_some(),
        None => false,
    })
}

/// SISMEMBER key member
pub(crate) fn sismember(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    let c = collection::load(ctx, args.get(1), Kind::Set)?;
    let yes = is_member(ctx, c.as_ref(), args.get(2))?;
    ctx.out.int(i64::from(yes));
    Ok(())
}

/// SMISMEMBER key member [member ...]
pub(crate) fn smismember(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    let c = collection::load(ctx, args.get(1), Kind::Set)?;
    ctx.out.array(args.len() - 2);
    for m in args.iter_from(2) {
        let yes = is_member(ctx, c.as_ref(), m)?;
        ctx.out.int(i64::from(yes));
    }
    Ok(())
}

/// SCARD key
pub(crate) fn scard(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    let c = collection::load(ctx, args.get(1), Kind::Set)?;
    ctx.out
        .int(c.map_or(0, |c| i64::try_from(c.meta.count).unwrap_or(i64::MAX)));
    Ok(())
}

/// The members of the set under `key` (empty when missing; WRONGTYPE for another type).
fn members(ctx: &mut Ctx<'_>, key: &[u8]) -> Result<Members, CmdError> {
    let Some(c) = collection::load(ctx, key, Kind::Set)? else {
        return Ok(Members::new());
    };
    let all = c.all(ctx, b"", ctx.max_reply_bytes())?;
    Ok(all.into_iter().map(|(m, _)| m).collect())
}

fn reply_members<'m>(ctx: &mut Ctx<'_>, n: usize, members: impl Iterator<Item = &'m Vec<u8>>) {
    ctx.out.array(n);
    for m in members {
        ctx.out.bulk(m);
    }
}

/// SMEMBERS key
pub(crate) fn smembers(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    let m = members(ctx, args.get(1))?;
    reply_members(ctx, m.len(), m.iter());
    Ok(())
}

/// The set algebra.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Op {
    Inter,
    Union,
    Diff,
}

/// The result of `op` over the sets under `keys` (every key's type checked, as Redis).
fn combine<'k>(
    ctx: &mut Ctx<'_>,
    op: Op,
    keys: impl Iterator<Item = &'k [u8]>,
) -> Result<Members, CmdError> {
    let mut acc: Option<Members> = None;
    for key in keys {
        let m = members(ctx, key)?;
        acc = Some(match (acc, op) {
            (None, _) => m,
            (Some(a), Op::Inter) => a.intersection(&m).cloned().collect(),
            (Some(mut a), Op::Union) => {
                a.extend(m);
                a
            }
            (Some(a), Op::Diff) => a.difference(&m).cloned().collect(),
        });
    }
    Ok(acc.unwrap_or_default())
}

fn algebra(ctx: &mut Ctx<'_>, args: Args<'_>, op: Op) -> CmdResult {
    let m = combine(ctx, op, args.iter_from(1))?;
    reply_members(ctx, m.len(), m.iter());
    Ok(())
}

/// Replaces whatever is under `dst` with a set of `members` (deleted when empty); the
/// size.
fn store_set(ctx: &mut Ctx<'_>, dst: &[u8], members: &Members) -> Result<i64, CmdError> {
    ctx.batched(|ctx| {
        let mut c = Coll::create(ctx, dst, Kind::Set);
        for m in members {
            c.put(ctx, m, b"")?;
            c.meta.count += 1;
        }
        if c.meta.count == 0 {
            // Redis deletes the destination when the result is empty.
            if ctx.load(dst)?.is_some() {
                ctx.remove(dst)?;
            }
            return Ok(0);
        }
        collection::save(ctx, dst, &c)?;
        Ok(i64::try_from(c.meta.count).unwrap_or(i64::MAX))
    })
}

fn algebra_store(ctx: &mut Ctx<'_>, args: Args<'_>, op: Op) -> CmdResult {
    let m = combine(ctx, op, args.iter_from(2))?;
    let n = store_set(ctx, args.get(1), &m)?;
    ctx.out.int(n);
    Ok(())
}

/// SINTER key [key ...]
pub(crate) fn sinter(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    algebra(ctx, args, Op::Inter)
}

/// SUNION key [key ...]
pub(crate) fn sunion(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    algebra(ctx, args, Op::Union)
}

/// SDIFF key [key ...]
pub(crate) fn sdiff(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    algebra(ctx, args, Op::Diff)
}

/// SINTERSTORE destination key [key ...]
pub(crate) fn sinterstore(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    algebra_store(ctx, args, Op::Inter)
}

/// SUNIONSTORE destination key [key ...]
pub(crate) fn sunionstore(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    algebra_store(ctx, args, Op::Union)
}

/// SDIFFSTORE destination key [key ...]
pub(crate) fn sdiffstore(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    algebra_store(ctx, args, Op::Diff)
}

/// SINTERCARD numkeys key [key ...] [LIMIT limit]
pub(crate) fn sintercard(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    let n = parse_int(args.get(1))
        .ok()
        .filter(|n| *n > 0)
        .ok_or_else(|| CmdError::new("ERR numkeys should be greater than 0"))?;
    let n = usize::try_from(n).unwrap_or(usize::MAX);
    if n > args.len() - 2 {
        return Err(CmdError::new(
            "ERR Number of keys can't be greater than number of args",
        ));
    }
    let mut limit = 0i64;
    let mut i = 2 + n;
    while i < args.len() {
        if is(args.get(i), "LIMIT") && i + 1 < args.len() {
            limit = parse_int(args.get(i + 1))
                .ok()
                .filter(|l| *l >= 0)
                .ok_or_else(|| CmdError::new("ERR LIMIT can't be negative"))?;
            i += 2;
        } else {
            return Err(CmdError::new(msg::SYNTAX));
        }
    }
    let m = combine(ctx, Op::Inter, args.iter_from(2).take(n))?;
    let card = i64::try_from(m.len()).unwrap_or(i64::MAX);
    ctx.out.int(if limit > 0 { card.min(limit) } else { card });
    Ok(())
}

/// SMOVE source destination member
pub(crate) fn smove(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    let (src, dst, m) = (args.get(1), args.get(2), args.get(3));
    let moved = ctx.batched(|ctx| {
        let Some(mut s) = collection::load(ctx, src, Kind::Set)? else {
            return Ok(0);
        };
        let mut d = collection::load_or_create(ctx, dst, Kind::Set)?;
        if s.get(ctx, m)?.is_none() {
            return Ok(0);
        }
        if src == dst {
            return Ok(1);
        }
        s.delete(ctx, m)?;
        s.meta.count -= 1;
        if d.get(ctx, m)?.is_none() {
            d.put(ctx, m, b"")?;
            d.meta.count += 1;
        }
        collection::save(ctx, src, &s)?;
        collection::save(ctx, dst, &d)?;
        Ok(1)
    })?;
    ctx.out.int(moved);
    Ok(())
}

/// A random position in the member space.
fn random_start(ctx: &Ctx<'_>) -> Vec<u8> {
    let seed = crate::expiry::now_ms().wrapping_mul(0x9E37_79B9_7F4A_7C15)
        ^ ctx.shared.new_generation()
        ^ ctx.session.id;
    seed.to_le_bytes().to_vec()
}

/// Up to `n` distinct members, consecutive from a random point (wrapping around).
fn sample(ctx: &Ctx<'_>, c: &Coll, n: usize) -> Result<Vec<Vec<u8>>, CmdError> {
    Ok(sample_elements(ctx, c, n)?
        .into_iter()
        .map(|(m, _)| m)
        .collect())
}

/// Up to `n` distinct elements (suffix, value) of `c`, consecutive from a random point of
/// its element space (wrapping around): cheap, not uniform.
pub(crate) fn sample_elements(
    ctx: &Ctx<'_>,
    c: &Coll,
    n: usize,
) -> Result<super::collection::Elements, CmdError> {
    let n = n.min(usize::try_from(c.meta.count).unwrap_or(usize::MAX));
    let start = random_start(ctx);
    let mut out = Vec::with_capacity(n);
    let (mut from, mut wrapped) = (start.clone(), false);
    while out.len() < n {
        let want = (n - out.len()).min(PAGE);
        let rows = c.page(ctx, &from, want)?;
        let full = rows.len() == want;
        for (m, v) in rows {
            if wrapped && m >= start {
                return Ok(out);
            }
            from = crate::keyspace::after(&m);
            out.push((m, v));
        }
        if !full {
            if wrapped {
                break;
            }
            (from, wrapped) = (Vec::new(), true);
        }
    }
    Ok(out)
}

/// SRANDMEMBER key [count]
pub(crate) fn srandmember(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    let count = match args.len() {
        2 => None,
        3 => Some(parse_int(args.get(2))?),
        _ => return Err(CmdError::new(msg::SYNTAX)),
    };
    let c = collection::load(ctx, args.get(1), Kind::Set)?;
    let Some(c) = c else {
        match count {
            Some(_) => ctx.out.array(0),
            None => ctx.out.null(),
        }
        return Ok(());
    };
    match count {
        None => {
            let m = sample(ctx, &c, 1)?;
            match m.first() {
                Some(m) => ctx.out.bulk(m),
                None => ctx.out.null(),
            }
        }
        Some(n) if n >= 0 => {
            let m = sample(ctx, &c, usize::try_from(n).unwrap_or(usize::MAX))?;
            reply_members(ctx, m.len(), m.iter());
        }
        Some(n) => {
            // Negative: |n| members, repeats allowed.
            let want = usize::try_from(n.unsigned_abs()).unwrap_or(usize::MAX);
            let mut out = Vec::new();
            let (mark, bound) = (ctx.out.mark(), ctx.max_reply_bytes());
            while out.len() < want {
                let m = sample(ctx, &c, 1)?;
                let Some(m) = m.into_iter().next() else { break };
                out.push(m);
                if out.len() % 1024 == 0 && ctx.out.exceeds(mark, bound) {
                    return Err(super::strings::reply_too_large(bound));
                }
            }
            reply_members(ctx, out.len(), out.iter());
        }
    }
    Ok(())
}

/// SPOP key [count]
pub(crate) fn spop(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    let key = args.get(1);
    let count = super::pop_count(args)?;
    let popped = ctx.batched(|ctx| {
        let Some(mut c) = collection::load(ctx, key, Kind::Set)? else {
            return Ok(None);
        };
        let n = count.map_or(1, |n| usize::try_from(n).unwrap_or(usize::MAX));
        let m = sample(ctx, &c, n)?;
        let refs = m.iter().map(Vec::as_slice);
        remove_members(ctx, &mut c, refs)?;
        collection::save(ctx, key, &c)?;
        Ok(Some(m))
    })?;
    match (popped, count) {
        (None, None) => ctx.out.null(),
        (None, Some(_)) => ctx.out.array(0),
        (Some(m), None) => match m.first() {
            Some(m) => ctx.out.bulk(m),
            None => ctx.out.null(),
        },
        (Some(m), Some(_)) => reply_members(ctx, m.len(), m.iter()),
    }
    Ok(())
}

/// SSCAN key cursor [MATCH pattern] [COUNT count]
pub(crate) fn sscan(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    let o = super::scan::parse_element_scan(args, false)?;
    let from = super::scan::cursor_position(ctx, args.get(2))?;
    let c = collection::load(ctx, args.get(1), Kind::Set)?;
    let (rows, next) = match &c {
        Some(c) => {
            let rows = c.page(ctx, &from, o.count)?;
            let next = (rows.len() == o.count)
                .then(|| rows.last().map(|(m, _)| crate::keyspace::after(m)))
                .flatten();
            (rows, next)
        }
        None => (Vec::new(), None),
    };
    let members: Vec<_> = rows
        .into_iter()
        .map(|(m, _)| m)
        .filter(|m| o.pattern.is_none_or(|p| glob::matches(p, m)))
        .collect();
    super::scan::reply_page(ctx, next, members.len());
    for m in &members {
        ctx.out.bulk(m);
    }
    Ok(())
}
