//! Sorted-set commands: ZADD (NX/XX/GT/LT/CH/INCR), ZINCRBY, ZSCORE, ZMSCORE, ZRANK,
//! ZREVRANK, ZCARD, ZCOUNT, ZLEXCOUNT, ZRANGE (BYSCORE/BYLEX/REV/LIMIT/WITHSCORES) and the
//! older ZRANGEBYSCORE, ZREVRANGEBYSCORE, ZREVRANGE, ZRANGEBYLEX, ZREVRANGEBYLEX, ZPOPMIN,
//! ZPOPMAX, ZREM, ZREMRANGEBYSCORE, ZREMRANGEBYRANK, ZREMRANGEBYLEX, ZSCAN — Redis 7.0's
//! replies and errors (scores printed as Redis 7.0 prints them, `%.17g`).
//!
//! A sorted set is a metadata record (kind `z`) plus two elements per member:
//! - `<prefix> | 'm' | member` → the score (f64, little-endian): point lookups (ZSCORE,
//!   ZADD's old score);
//! - `<prefix> | 's' | score key (8 bytes) | member` → empty: the score index, where the
//!   score key is the f64 made order-preserving (sign bit flipped for positives, all bits
//!   flipped for negatives, big-endian; -0 stored as 0), so the index sorts by (score,
//!   member) as Redis's skiplist does.
//!
//! Ranges walk the index with the engine's range scan: by score from the first key at or
//! after the minimum, by rank from the start (O(rank), there is no rank index), by lex by
//! filtering the index (which is in member order when the scores are equal, the case
//! BYLEX is defined for). An engine that cannot scan in order answers the range commands
//! with an error saying so (ZADD, ZSCORE, ZMSCORE, ZCARD, ZINCRBY, ZREM work there).
//!
//! Every write runs inside [`Ctx::batched`]: both elements of a member and the metadata
//! change in one crash-atomic batch.
//!
//! Thread-safety: handlers run concurrently on worker threads under the key locks.

use super::collection::{self, Coll, PAGE};
use super::{CmdError, CmdResult, Ctx, is, msg, parse_int};
use crate::encoding::Kind;
use crate::glob;
use crate::resp::{Args, Protocol};

const MEMBER: u8 = b'm';
const INDEX: u8 = b's';
const NOT_FLOAT: &str = "ERR value is not a valid float";

/// The order-preserving 8 bytes of a score.
#[expect(
    clippy::big_endian_bytes,
    reason = "a key suffix: big-endian is what orders scores like the numbers"
)]
fn score_key(score: f64) -> [u8; 8] {
    let score = if score == 0.0 { 0.0 } else { score };
    let bits = score.to_bits();
    let ordered = if bits >> 63 == 1 {
        !bits
    } else {
        bits ^ (1 << 63)
    };
    ordered.to_be_bytes()
}

/// The score of an order-preserving key.
#[expect(
    clippy::big_endian_bytes,
    reason = "a key suffix: big-endian is what orders scores like the numbers"
)]
fn score_of_key(k: [u8; 8]) -> f64 {
    let ordered = u64::from_be_bytes(k);
    let bits = if ordered >> 63 == 1 {
        ordered ^ (1 << 63)
    } else {
        !ordered
    };
    f64::from_bits(bits)
}

fn member_suffix(m: &[u8]) -> Vec<u8> {
    let mut s = Vec::with_capacity(1 + m.len());
    s.push(MEMBER);
    s.extend_from_slice(m);
    s
}

fn index_suffix(score: f64, m: &[u8]) -> Vec<u8> {
    let mut s = Vec::with_capacity(9 + m.len());
    s.push(INDEX);
    s.extend_from_slice(&score_key(score));
    s.extend_from_slice(m);
    s
}

/// Splits an index suffix into its score and member.
fn parse_index(s: &[u8]) -> Option<(f64, &[u8])> {
    let rest = s.strip_prefix(&[INDEX])?;
    let (k, member) = rest.split_first_chunk::<8>()?;
    Some((score_of_key(*k), member))
}

/// A score as Redis 7.0 prints it (`%.17g`; `inf`, `-inf`).
pub(crate) fn format_score(d: f64) -> String {
    if d.is_infinite() {
        return if d > 0.0 { "inf" } else { "-inf" }.into();
    }
    if d == 0.0 {
        return if d.is_sign_negative() { "-0" } else { "0" }.into();
    }
    let e = format!("{d:.16e}");
    let (mantissa, exp) = e.split_once('e').unwrap_or((&e, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let strip = |s: &str| -> String {
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            s.to_string()
        }
    };
    if !(-4..17).contains(&exp) {
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{}e{sign}{:02}", strip(mantissa), exp.unsigned_abs())
    } else {
        let decimals = usize::try_from(16 - exp).unwrap_or(0);
        strip(&format!("{d:.decimals$}"))
    }
}

/// A score argument as Redis reads one (`strtod`, no NaN, no leading space).
fn parse_score(arg: &[u8]) -> Option<f64> {
    let t = std::str::from_utf8(arg).ok()?;
    if t.is_empty() || t.starts_with(|c: char| c.is_whitespace()) {
        return None;
    }
    let lower = t.to_ascii_lowercase();
    let v: f64 = match lower.as_str() {
        "inf" | "+inf" | "infinity" | "+infinity" => f64::INFINITY,
        "-inf" | "-infinity" => f64::NEG_INFINITY,
        _ => t.parse().ok()?,
    };
    (!v.is_nan()).then_some(v)
}

/// One end of a score range.
#[derive(Clone, Copy, Debug)]
struct ScoreBound {
    value: f64,
    exclusive: bool,
}

fn parse_score_bound(arg: &[u8]) -> Result<ScoreBound, CmdError> {
    let bad = || CmdError::new("ERR min or max is not a float");
    let (exclusive, rest) = match arg.split_first() {
        Some((b'(', rest)) => (true, rest),
        _ => (false, arg),
    };
    let value = parse_score(rest).ok_or_else(bad)?;
    Ok(ScoreBound { value, exclusive })
}

impl ScoreBound {
    fn above_min(self, s: f64) -> bool {
        if self.exclusive {
            s > self.value
        } else {
            s >= self.value
        }
    }

    fn below_max(self, s: f64) -> bool {
        if self.exclusive {
            s < self.value
        } else {
            s <= self.value
        }
    }
}

/// One end of a lex range.
#[derive(Clone, Debug)]
enum LexBound {
    Min,
    Max,
    Incl(Vec<u8>),
    Excl(Vec<u8>),
}

fn parse_lex_bound(arg: &[u8]) -> Result<LexBound, CmdError> {
    match arg.split_first() {
        Some((b'-', [])) => Ok(LexBound::Min),
        Some((b'+', [])) => Ok(LexBound::Max),
        Some((b'[', rest)) => Ok(LexBound::Incl(rest.to_vec())),
        Some((b'(', rest)) => Ok(LexBound::Excl(rest.to_vec())),
        _ => Err(CmdError::new("ERR min or max not valid string range item")),
    }
}

fn lex_above_min(b: &LexBound, m: &[u8]) -> bool {
    match b {
        LexBound::Min => true,
        LexBound::Max => false,
        LexBound::Incl(v) => m >= v.as_slice(),
        LexBound::Excl(v) => m > v.as_slice(),
    }
}

fn lex_below_max(b: &LexBound, m: &[u8]) -> bool {
    match b {
        LexBound::Min => false,
        LexBound::Max => true,
        LexBound::Incl(v) => m <= v.as_slice(),
        LexBound::Excl(v) => m < v.as_slice(),
    }
}

/// The score of `member`, if it is in the set.
fn score(ctx: &Ctx<'_>, c: &Coll, member: &[u8]) -> Result<Option<f64>, CmdError> {
    Ok(c.get(ctx, &member_suffix(member))?.and_then(|v| {
        let b: [u8; 8] = v.as_slice().try_into().ok()?;
        Some(f64::from_le_bytes(b))
    }))
}

/// Sets the score of `member` (its old score `old`, if any).
fn set_score(ctx: &Ctx<'_>, c: &mut Coll, member: &[u8], old: Option<f64>, new: f64) -> CmdResult {
    c.elem(ctx, &index_suffix(new, member))?;
    if let Some(o) = old {
        c.delete(ctx, &index_suffix(o, member))?;
    } else {
        c.meta.count += 1;
    }
    c.put(ctx, &member_suffix(member), &new.to_le_bytes())?;
    c.put(ctx, &index_suffix(new, member), b"")
}

/// Removes `member` (whose score is `s`).
fn remove(ctx: &Ctx<'_>, c: &mut Coll, member: &[u8], s: f64) -> CmdResult {
    c.delete(ctx, &member_suffix(member))?;
    c.delete(ctx, &index_suffix(s, member))?;
    c.meta.count -= 1;
    Ok(())
}

/// Walks the index from the index suffix `from` (inclusive), calling `f` with each
/// (score, member) until it returns false.
fn walk(
    ctx: &Ctx<'_>,
    c: &Coll,
    from: Vec<u8>,
    mut f: impl FnMut(f64, &[u8]) -> bool,
) -> CmdResult {
    let mut from = from;
    loop {
        let rows = c.page(ctx, &from, PAGE)?;
        let full = rows.len() == PAGE;
        for (s, _) in &rows {
            let Some((score, member)) = parse_index(s) else {
                return Ok(());
            };
            if !f(score, member) {
                return Ok(());
            }
        }
        match rows.into_iter().last() {
            Some((s, _)) if full => from = crate::keyspace::after(&s),
            _ => return Ok(()),
        }
    }
}

type Scored = Vec<(Vec<u8>, f64)>;

/// Members with index ranks `a..=b` (forward).
fn by_rank(ctx: &Ctx<'_>, c: &Coll, a: i64, b: i64) -> Result<Scored, CmdError> {
    let mut out = Vec::new();
    let mut i = 0i64;
    walk(ctx, c, vec![INDEX], |s, m| {
        if i >= a {
            out.push((m.to_vec(), s));
        }
        i += 1;
        i <= b
    })?;
    Ok(out)
}

/// Members with scores in [min, max], ascending.
fn by_score(ctx: &Ctx<'_>, c: &Coll, min: ScoreBound, max: ScoreBound) -> Result<Scored, CmdError> {
    let mut out = Vec::new();
    let mut from = vec![INDEX];
    from.extend_from_slice(&score_key(min.value));
    walk(ctx, c, from, |s, m| {
        if !max.below_max(s) {
            return false;
        }
        if min.above_min(s) {
            out.push((m.to_vec(), s));
        }
        true
    })?;
    Ok(out)
}

/// Members in the lex range, in index order.
fn by_lex(ctx: &Ctx<'_>, c: &Coll, min: &LexBound, max: &LexBound) -> Result<Scored, CmdError> {
    let mut out = Vec::new();
    walk(ctx, c, vec![INDEX], |s, m| {
        if lex_above_min(min, m) && lex_below_max(max, m) {
            out.push((m.to_vec(), s));
        }
        true
    })?;
    Ok(out)
}

/// Redis's clamping of a rank range over `len` elements.
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

fn len_of(c: &Coll) -> i64 {
    i64::try_from(c.meta.count).unwrap_or(i64::MAX)
}

/// Members, with their scores when `withscores`. As Redis 7 replies: in RESP2 a flat array
/// of members and scores (bulk strings); in RESP3, scores are doubles and, when `nested`
/// (ranges, and pops given a count), each member and its score form a pair of their own
/// (`[[member, score], ...]`).
fn reply_scored(ctx: &mut Ctx<'_>, items: &[(Vec<u8>, f64)], withscores: bool, nested: bool) {
    let pairs = withscores && nested && ctx.out.protocol() == Protocol::Resp3;
    let per_item = if withscores && !pairs { 2 } else { 1 };
    ctx.out.array(items.len() * per_item);
    for (m, s) in items {
        if pairs {
            ctx.out.array(2);
        }
        ctx.out.bulk(m);
        if withscores {
            ctx.out.double(format_score(*s).as_bytes());
        }
    }
}

fn load(ctx: &mut Ctx<'_>, key: &[u8]) -> Result<Option<Coll>, CmdError> {
    collection::load(ctx, key, Kind::ZSet)
}

#[derive(Default)]
struct AddFlags {
    nx: bool,
    xx: bool,
    gt: bool,
    lt: bool,
    ch: bool,
    incr: bool,
}

/// ZADD's work for one (score, member); the new score when processed (not a no-op).
fn add_one(
    ctx: &Ctx<'_>,
    c: &mut Coll,
    f: &AddFlags,
    score_arg: f64,
    member: &[u8],
    added: &mut i64,
    updated: &mut i64,
) -> Result<Option<f64>, CmdError> {
    match score(ctx, c, member)? {
        Some(cur) => {
            if f.nx {
                return Ok(None);
            }
            let new = if f.incr { cur + score_arg } else { score_arg };
            if new.is_nan() {
                return Err(CmdError::new("ERR resulting score is not a number (NaN)"));
            }
            if (f.lt && new >= cur) || (f.gt && new <= cur) {
                return Ok(None);
            }
            if new != cur {
                set_score(ctx, c, member, Some(cur), new)?;
                *updated += 1;
            }
            Ok(Some(new))
        }
        None if f.xx => Ok(None),
        None => {
            set_score(ctx, c, member, None, score_arg)?;
            *added += 1;
            Ok(Some(score_arg))
        }
    }
}

fn zadd_generic(ctx: &mut Ctx<'_>, args: Args<'_>, f: AddFlags, first: usize) -> CmdResult {
    let key = args.get(1);
    let elements = args.len() - first;
    if elements == 0 || !elements.is_multiple_of(2) {
        return Err(CmdError::new(msg::SYNTAX));
    }
    if f.nx && f.xx {
        return Err(CmdError::new(
            "ERR XX and NX options at the same time are not compatible",
        ));
    }
    if (f.nx && (f.gt || f.lt)) || (f.gt && f.lt) {
        return Err(CmdError::new(
            "ERR GT, LT, and/or NX options at the same time are not compatible",
        ));
    }
    if f.incr && elements > 2 {
        return Err(CmdError::new(
            "ERR INCR option supports a single increment-element pair",
        ));
    }
    let mut pairs = Vec::with_capacity(elements / 2);
    for i in (first..args.len()).step_by(2) {
        let s = parse_score(args.get(i)).ok_or_else(|| CmdError::new(NOT_FLOAT))?;
        pairs.push((s, args.get(i + 1)));
    }
    let (added, updated, last) = ctx.batched(|ctx| {
        let existing = load(ctx, key)?;
        let (mut added, mut updated, mut last) = (0, 0, None);
        let Some(mut c) = existing.or_else(|| (!f.xx).then(|| Coll::create(ctx, key, Kind::ZSet)))
        else {
            return Ok((0, 0, None));
        };
        for (s, m) in &pairs {
            last = add_one(ctx, &mut c, &f, *s, m, &mut added, &mut updated)?;
        }
        if added + updated > 0 {
            collection::save(ctx, key, &c)?;
        }
        Ok((added, updated, last))
    })?;
    if f.incr {
        match last {
            Some(s) => ctx.out.double(format_score(s).as_bytes()),
            None => ctx.out.null(),
        }
    } else {
        ctx.out.int(if f.ch { added + updated } else { added });
    }
    Ok(())
}

/// ZADD key [NX|XX] [GT|LT] [CH] [INCR] score member [score member ...]
pub(crate) fn zadd(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    let mut f = AddFlags::default();
    let mut i = 2;
    while i < args.len() {
        let a = args.get(i);
        let flag = match () {
            () if is(a, "NX") => &mut f.nx,
            () if is(a, "XX") => &mut f.xx,
            () if is(a, "GT") => &mut f.gt,
            () if is(a, "LT") => &mut f.lt,
            () if is(a, "CH") => &mut f.ch,
            () if is(a, "INCR") => &mut f.incr,
            () => break,
        };
        *flag = true;
        i += 1;
    }
    zadd_generic(ctx, args, f, i)
}

/// ZINCRBY key increment member
pub(crate) fn zincrby(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    let f = AddFlags {
        incr: true,
        ..AddFlags::default()
    };
    zadd_generic(ctx, args, f, 2)
}

/// ZSCORE key member
pub(crate) fn zscore(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    let c = load(ctx, args.get(1))?;
    match c
        .map(|c| score(ctx, &c, args.get(2)))
        .transpose()?
        .flatten()
    {
        Some(s) => ctx.out.double(format_score(s).as_bytes()),
        None => ctx.out.null(),
    }
    Ok(())
}

/// ZMSCORE key member [member ...]
pub(crate) fn zmscore(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    let c = load(ctx, args.get(1))?;
    ctx.out.array(args.len() - 2);
    for m in args.iter_from(2) {
        match c.as_ref().map(|c| score(ctx, c, m)).transpose()?.flatten() {
            Some(s) => ctx.out.double(format_score(s).as_bytes()),
            None => ctx.out.null(),
        }
    }
    Ok(())
}

/// ZCARD key
pub(crate) fn zcard(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    let c = load(ctx, args.get(1))?;
    ctx.out.int(c.map_or(0, |c| len_of(&c)));
    Ok(())
}

fn rank_generic(ctx: &mut Ctx<'_>, args: Args<'_>, rev: bool) -> CmdResult {
    let member = args.get(2);
    let Some(c) = load(ctx, args.get(1))? else {
        ctx.out.null();
        return Ok(());
    };
    let Some(s) = score(ctx, &c, member)? else {
        ctx.out.null();
        return Ok(());
    };
    let target = index_suffix(s, member);
    let mut rank = 0i64;
    walk(ctx, &c, vec![INDEX], |sc, m| {
        if index_suffix(sc, m) >= target {
            return false;
        }
        rank += 1;
        true
    })?;
    ctx.out.int(if rev { len_of(&c) - 1 - rank } else { rank });
    Ok(())
}

/// ZRANK key member
pub(crate) fn zrank(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    rank_generic(ctx, args, false)
}

/// ZREVRANK key member
pub(crate) fn zrevrank(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    rank_generic(ctx, args, true)
}

/// ZCOUNT key min max
pub(crate) fn zcount(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    let (min, max) = (
        parse_score_bound(args.get(2))?,
        parse_score_bound(args.get(3))?,
    );
    let n = match load(ctx, args.get(1))? {
        Some(c) => by_score(ctx, &c, min, max)?.len(),
        None => 0,
    };
    ctx.out.int(n as i64);
    Ok(())
}

/// ZLEXCOUNT key min max
pub(crate) fn zlexcount(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    let (min, max) = (parse_lex_bound(args.get(2))?, parse_lex_bound(args.get(3))?);
    let n = match load(ctx, args.get(1))? {
        Some(c) => by_lex(ctx, &c, &min, &max)?.len(),
        None => 0,
    };
    ctx.out.int(n as i64);
    Ok(())
}

/// What a range selects by.
#[derive(Clone, Copy, PartialEq, Eq)]
enum By {
    Rank,
    Score,
    Lex,
}

/// A parsed range request (the arguments after the key).
struct RangeReq<'a> {
    by: By,
    rev: bool,
    /// (offset, count); count < 0 = all.
    limit: Option<(i64, i64)>,
    withscores: bool,
    start: &'a [u8],
    stop: &'a [u8],
}

/// The members a range request selects, in reply order.
fn select(ctx: &Ctx<'_>, c: &Coll, r: &RangeReq<'_>) -> Result<Scored, CmdError> {
    let mut items = match r.by {
        By::Rank => {
            let (start, stop) = (parse_int(r.start)?, parse_int(r.stop)?);
            let len = len_of(c);
            let Some((a, b)) = clamp(start, stop, len) else {
                return Ok(Vec::new());
            };
            if r.rev {
                let mut v = by_rank(ctx, c, len - 1 - b, len - 1 - a)?;
                v.reverse();
                v
            } else {
                by_rank(ctx, c, a, b)?
            }
        }
        By::Score => {
            let (lo, hi) = if r.rev {
                (r.stop, r.start)
            } else {
                (r.start, r.stop)
            };
            let (min, max) = (parse_score_bound(lo)?, parse_score_bound(hi)?);
            let mut v = by_score(ctx, c, min, max)?;
            if r.rev {
                v.reverse();
            }
            v
        }
        By::Lex => {
            let (lo, hi) = if r.rev {
                (r.stop, r.start)
            } else {
                (r.start, r.stop)
            };
            let (min, max) = (parse_lex_bound(lo)?, parse_lex_bound(hi)?);
            let mut v = by_lex(ctx, c, &min, &max)?;
            if r.rev {
                v.reverse();
            }
            v
        }
    };
    if let Some((offset, count)) = r.limit {
        if offset < 0 {
            return Ok(Vec::new());
        }
        let offset = usize::try_from(offset).unwrap_or(usize::MAX);
        items = items.into_iter().skip(offset).collect();
        if count >= 0 {
            items.truncate(usize::try_from(count).unwrap_or(usize::MAX));
        }
    }
    Ok(items)
}

/// Parses the bound checks Redis makes before it looks at the key.
fn check_bounds(r: &RangeReq<'_>) -> CmdResult {
    match r.by {
        By::Rank => {
            parse_int(r.start)?;
            parse_int(r.stop)?;
        }
        By::Score => {
            parse_score_bound(r.start)?;
            parse_score_bound(r.stop)?;
        }
        By::Lex => {
            parse_lex_bound(r.start)?;
            parse_lex_bound(r.stop)?;
        }
    }
    Ok(())
}

fn run_range(ctx: &mut Ctx<'_>, key: &[u8], r: &RangeReq<'_>) -> CmdResult {
    check_bounds(r)?;
    let items = match load(ctx, key)? {
        Some(c) => select(ctx, &c, r)?,
        None => Vec::new(),
    };
    reply_scored(ctx, &items, r.withscores, true);
    Ok(())
}

/// Parses `[WITHSCORES] [LIMIT offset count]` options from `from` on; `allow_by`: ZRANGE's
/// BYSCORE/BYLEX/REV are accepted too.
fn parse_range<'a>(
    args: Args<'a>,
    from: usize,
    mut r: RangeReq<'a>,
    allow_by: bool,
) -> Result<RangeReq<'a>, CmdError> {
    let mut i = from;
    while i < args.len() {
        let a = args.get(i);
        if is(a, "WITHSCORES") {
            r.withscores = true;
        } else if is(a, "LIMIT") && i + 2 < args.len() {
            r.limit = Some((parse_int(args.get(i + 1))?, parse_int(args.get(i + 2))?));
            i += 2;
        } else if allow_by && is(a, "BYSCORE") {
            r.by = By::Score;
        } else if allow_by && is(a, "BYLEX") {
            r.by = By::Lex;
        } else if allow_by && is(a, "REV") {
            r.rev = true;
        } else {
            return Err(CmdError::new(msg::SYNTAX));
        }
        i += 1;
    }
    if r.limit.is_some() && r.by == By::Rank {
        return Err(CmdError::new(
            "ERR syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX",
        ));
    }
    if r.withscores && r.by == By::Lex {
        return Err(CmdError::new(
            "ERR syntax error, WITHSCORES not supported in combination with BYLEX",
        ));
    }
    Ok(r)
}

fn request<'a>(args: Args<'a>, by: By, rev: bool) -> RangeReq<'a> {
    RangeReq {
        by,
        rev,
        limit: None,
        withscores: false,
        start: args.get(2),
        stop: args.get(3),
    }
}

/// ZRANGE key start stop [BYSCORE|BYLEX] [REV] [LIMIT offset count] [WITHSCORES]
pub(crate) fn zrange(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    let r = parse_range(args, 4, request(args, By::Rank, false), true)?;
    run_range(ctx, args.get(1), &r)
}

/// ZREVRANGE key start stop [WITHSCORES]
pub(crate) fn zrevrange(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    let r = parse_range(args, 4, request(args, By::Rank, true), false)?;
    run_range(ctx, args.get(1), &r)
}

/// ZRANGEBYSCORE key min max [WITHSCORES] [LIMIT offset count]
pub(crate) fn zrangebyscore(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    let r = parse_range(args, 4, request(args, By::Score, false), false)?;
    run_range(ctx, args.get(1), &r)
}

/// ZREVRANGEBYSCORE key max min [WITHSCORES] [LIMIT offset count]
pub(crate) fn zrevrangebyscore(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    let r = parse_range(args, 4, request(args, By::Score, true), false)?;
    run_range(ctx, args.get(1), &r)
}

/// ZRANGEBYLEX key min max [LIMIT offset count]
pub(crate) fn zrangebylex(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    let r = parse_range(args, 4, request(args, By::Lex, false), false)?;
    run_range(ctx, args.get(1), &r)
}

/// ZREVRANGEBYLEX key max min [LIMIT offset count]
pub(crate) fn zrevrangebylex(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    let r = parse_range(args, 4, request(args, By::Lex, true), false)?;
    run_range(ctx, args.get(1), &r)
}

fn pop_generic(ctx: &mut Ctx<'_>, args: Args<'_>, max: bool) -> CmdResult {
    let key = args.get(1);
    let given = super::pop_count(args)?;
    let count = given.unwrap_or(1);
    let popped = ctx.batched(|ctx| {
        let Some(mut c) = load(ctx, key)? else {
            return Ok(Vec::new());
        };
        let len = len_of(&c);
        let n = count.min(len);
        if n == 0 {
            return Ok(Vec::new());
        }
        let mut items = if max {
            let mut v = by_rank(ctx, &c, len - n, len - 1)?;
            v.reverse();
            v
        } else {
            by_rank(ctx, &c, 0, n - 1)?
        };
        for (m, s) in &items {
            remove(ctx, &mut c, m, *s)?;
        }
        collection::save(ctx, key, &c)?;
        items.truncate(usize::try_from(n).unwrap_or(usize::MAX));
        Ok(items)
    })?;
    reply_scored(ctx, &popped, true, given.is_some());
    Ok(())
}

/// ZPOPMIN key [count]
pub(crate) fn zpopmin(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    pop_generic(ctx, args, false)
}

/// ZPOPMAX key [count]
pub(crate) fn zpopmax(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    pop_generic(ctx, args, true)
}

/// ZREM key member [member ...]
pub(crate) fn zrem(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    let key = args.get(1);
    let removed = ctx.batched(|ctx| {
        let Some(mut c) = load(ctx, key)? else {
            return Ok(0);
        };
        let mut removed = 0;
        for m in args.iter_from(2) {
            if let Some(s) = score(ctx, &c, m)? {
                remove(ctx, &mut c, m, s)?;
                removed += 1;
            }
        }
        if removed > 0 {
            collection::save(ctx, key, &c)?;
        }
        Ok(removed)
    })?;
    ctx.out.int(removed);
    Ok(())
}

fn remrange(ctx: &mut Ctx<'_>, args: Args<'_>, by: By) -> CmdResult {
    let key = args.get(1);
    let r = request(args, by, false);
    check_bounds(&r)?;
    let removed = ctx.batched(|ctx| {
        let Some(mut c) = load(ctx, key)? else {
            return Ok(0);
        };
        let items = select(ctx, &c, &r)?;
        for (m, s) in &items {
            remove(ctx, &mut c, m, *s)?;
        }
        if !items.is_empty() {
            collection::save(ctx, key, &c)?;
        }
        Ok(items.len() as i64)
    })?;
    ctx.out.int(removed);
    Ok(())
}

/// ZREMRANGEBYRANK key start stop
pub(crate) fn zremrangebyrank(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    remrange(ctx, args, By::Rank)
}

/// ZREMRANGEBYSCORE key min max
pub(crate) fn zremrangebyscore(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    remrange(ctx, args, By::Score)
}

/// ZREMRANGEBYLEX key min max
pub(crate) fn zremrangebylex(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    remrange(ctx, args, By::Lex)
}

/// ZSCAN key cursor [MATCH pattern] [COUNT count]: walks the member elements.
pub(crate) fn zscan(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    let o = super::scan::parse_element_scan(args, false)?;
    let mut from = super::scan::cursor_position(ctx, args.get(2))?;
    if from.is_empty() {
        from = vec![MEMBER];
    }
    let c = load(ctx, args.get(1))?;
    let (rows, next) = match &c {
        Some(c) => {
            let rows: Vec<_> = c
                .page(ctx, &from, o.count)?
                .into_iter()
                .filter(|(s, _)| s.first() == Some(&MEMBER))
                .collect();
            let next = (rows.len() == o.count)
                .then(|| rows.last().map(|(s, _)| crate::keyspace::after(s)))
                .flatten();
            (rows, next)
        }
        None => (Vec::new(), None),
    };
    let items: Vec<(Vec<u8>, f64)> = rows
        .into_iter()
        .filter_map(|(s, v)| {
            let member = s.get(1..)?.to_vec();
            let b: [u8; 8] = v.as_slice().try_into().ok()?;
            Some((member, f64::from_le_bytes(b)))
        })
        .filter(|(m, _)| o.pattern.is_none_or(|p| glob::matches(p, m)))
        .collect();
    super::scan::reply_page(ctx, next, items.len() * 2);
    for (m, s) in &items {
        ctx.out.bulk(m);
        ctx.out.bulk(format_score(*s).as_bytes());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn score_keys_sort_like_scores() {
        let scores = [
            f64::NEG_INFINITY,
            -1e300,
            -2.5,
            -1e-300,
            0.0,
            1e-300,
            1.0,
            2.5,
            1e300,
            f64::INFINITY,
        ];
        for w in scores.windows(2) {
            assert!(score_key(w[0]) < score_key(w[1]), "{w:?}");
        }
        for s in scores {
            assert_eq!(score_of_key(score_key(s)), s);
        }
        assert_eq!(score_key(-0.0), score_key(0.0));
    }

    #[test]
    fn scores_print_as_redis_7_0_does() {
        assert_eq!(format_score(1.5), "1.5");
        assert_eq!(format_score(2.0), "2");
        assert_eq!(format_score(0.1), "0.10000000000000001");
        assert_eq!(format_score(-3.25), "-3.25");
        assert_eq!(format_score(1e20), "1e+20");
        assert_eq!(format_score(1.5e-7), "1.4999999999999999e-07");
        assert_eq!(format_score(123456789.0), "123456789");
        assert_eq!(format_score(f64::INFINITY), "inf");
        assert_eq!(format_score(f64::NEG_INFINITY), "-inf");
    }

    #[test]
    fn score_arguments_parse_as_redis_reads_them() {
        assert_eq!(parse_score(b"1.5"), Some(1.5));
        assert_eq!(parse_score(b"-inf"), Some(f64::NEG_INFINITY));
        assert_eq!(parse_score(b"+inf"), Some(f64::INFINITY));
        for bad in [&b"nan"[..], b"", b" 1", b"x", b"1x"] {
            assert_eq!(parse_score(bad), None, "{bad:?}");
        }
    }
}
