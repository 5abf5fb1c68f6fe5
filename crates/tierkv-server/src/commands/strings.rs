//! String commands: GET, SET (NX/XX/GET), SETNX, GETSET, MGET, MSET,
//! INCR/INCRBY/DECR/DECRBY, APPEND, STRLEN — with Redis's replies and error strings.
//!
//! Every read-modify-write here (SET NX|XX|GET, SETNX, GETSET, INCR..., APPEND) is atomic
//! per key because [`super::execute`] holds the key's stripe exclusively around the
//! handler; MSET holds all its keys' stripes, so no reader sees half of it.
//! A string is stored raw (escaped only if it starts with the encoding's tag, see
//! [`crate::encoding`]); a hash under the key gives WRONGTYPE (MGET answers nil for it,
//! as Redis does).
//!
//! Thread-safety: handlers run concurrently on worker threads under the key locks.

use super::{CmdError, CmdResult, Ctx, as_string, expire, is, msg, parse_i64_strict, parse_int};
use crate::encoding::{self, Stored};
use crate::resp::Args;
use crate::resp::writer::format_decimal;

/// GET key
pub(crate) fn get(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    match ctx.load(args.get(1))? {
        None => ctx.out.null(),
        Some(v) => ctx.out.bulk(as_string(&v)?),
    }
    Ok(())
}

/// The condition of a SET.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Condition {
    Always,
    IfAbsent,
    IfPresent,
}

/// SET's options after the value.
#[derive(Debug)]
struct SetOptions {
    condition: Condition,
    get: bool,
    expiry: NewExpiry,
}

/// What a write does to the key's deadline.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum NewExpiry {
    /// No deadline (a plain SET clears the old one).
    Clear,
    /// Keep the old deadline (KEEPTTL).
    Keep,
    /// This deadline, Unix ms.
    At(u64),
}

fn parse_set_options(args: Args<'_>) -> Result<SetOptions, CmdError> {
    let mut o = SetOptions {
        condition: Condition::Always,
        get: false,
        expiry: NewExpiry::Clear,
    };
    let mut keep = false;
    let mut expire: Option<(usize, expire::Unit)> = None;
    let mut i = 3;
    while i < args.len() {
        let a = args.get(i);
        let cond = if is(a, "NX") {
            Some(Condition::IfAbsent)
        } else if is(a, "XX") {
            Some(Condition::IfPresent)
        } else {
            None
        };
        if let Some(c) = cond {
            if o.condition != Condition::Always && o.condition != c {
                return Err(CmdError::new(msg::SYNTAX));
            }
            o.condition = c;
        } else if is(a, "GET") {
            o.get = true;
        } else if is(a, "KEEPTTL") {
            if expire.is_some() {
                return Err(CmdError::new(msg::SYNTAX));
            }
            keep = true;
        } else if let Some(unit) = expire::Unit::of_option(a) {
            if keep || expire.is_some() || i + 1 >= args.len() {
                return Err(CmdError::new(msg::SYNTAX));
            }
            expire = Some((i + 1, unit));
            i += 1;
        } else {
            return Err(CmdError::new(msg::SYNTAX));
        }
        i += 1;
    }
    if keep {
        o.expiry = NewExpiry::Keep;
    }
    if let Some((at, unit)) = expire {
        o.expiry = NewExpiry::At(expire::deadline_of(args.get(at), unit, "set")?);
    }
    Ok(o)
}

/// SET key value [NX | XX] [GET] [EX s | PX ms | EXAT s | PXAT ms | KEEPTTL]
pub(crate) fn set(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    let (key, value) = (args.get(1), args.get(2));
    let o = if args.len() > 3 {
        parse_set_options(args)?
    } else {
        SetOptions {
            condition: Condition::Always,
            get: false,
            expiry: NewExpiry::Clear,
        }
    };
    if !o.get && o.condition == Condition::Always && o.expiry == NewExpiry::Clear {
        ctx.store_string(key, value)?;
        ctx.out.ok();
        return Ok(());
    }
    let old = ctx.load_entry(key)?;
    let old_string = match (&old, o.get) {
        (Some((v, _)), true) => Some(as_string(v)?),
        _ => None,
    };
    let write = match o.condition {
        Condition::Always => true,
        Condition::IfAbsent => old.is_none(),
        Condition::IfPresent => old.is_some(),
    };
    if write {
        let deadline = match o.expiry {
            NewExpiry::Clear => None,
            NewExpiry::Keep => old.as_ref().and_then(|(_, d)| *d),
            NewExpiry::At(at) => Some(at),
        };
        ctx.store_with_deadline(key, &encoding::encode_string(value), deadline)?;
    }
    match (o.get, old_string, write) {
        (true, Some(s), _) => ctx.out.bulk(s),
        (true, None, _) | (false, _, false) => ctx.out.null(),
        (false, _, true) => ctx.out.ok(),
    }
    Ok(())
}

/// SETNX key value
pub(crate) fn setnx(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    let key = args.get(1);
    if ctx.load(key)?.is_some() {
        ctx.out.int(0);
    } else {
        ctx.store_string(key, args.get(2))?;
        ctx.out.int(1);
    }
    Ok(())
}

/// GETSET key value
pub(crate) fn getset(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    let key = args.get(1);
    let old = ctx.load(key)?;
    if let Some(v) = &old {
        as_string(v)?;
    }
    ctx.store_string(key, args.get(2))?;
    match &old {
        Some(v) => ctx.out.bulk(as_string(v)?),
        None => ctx.out.null(),
    }
    Ok(())
}

/// MGET key [key ...]
pub(crate) fn mget(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    let mark = ctx.out.mark();
    let bound = ctx.max_reply_bytes();
    ctx.out.array(args.len() - 1);
    for key in args.iter_from(1) {
        match ctx.load(key)? {
            Some(v) => match encoding::decode(&v)? {
                Stored::Str(s) => ctx.out.bulk(s),
                Stored::Hash(_) | Stored::Meta(_) => ctx.out.null(),
            },
            None => ctx.out.null(),
        }
        if ctx.out.exceeds(mark, bound) {
            return Err(reply_too_large(bound));
        }
    }
    Ok(())
}

/// The error that replaces a reply over `max_reply_bytes`.
pub(crate) fn reply_too_large(bound: usize) -> CmdError {
    CmdError::new(format!(
        "ERR the reply would exceed max_reply_bytes ({bound} bytes): ask for fewer keys"
    ))
}

/// MSET key value [key value ...]
pub(crate) fn mset(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    if args.len().is_multiple_of(2) {
        return Err(CmdError::new(
            "ERR wrong number of arguments for 'mset' command",
        ));
    }
    // Check every pair first, so that a refused pair leaves no half-done MSET behind.
    let limits = ctx.shared.db.limits();
    let pairs = || {
        (1..args.len())
            .step_by(2)
            .map(|i| (args.get(i), args.get(i + 1)))
    };
    for (k, v) in pairs() {
        limits.check_key(k).map_err(CmdError::from)?;
        check_string_len(ctx, encoding::encoded_string_len(v))?;
    }
    // One crash-atomic batch where the engine offers it (see `Ctx::batched`).
    ctx.batched(|ctx| {
        for (k, v) in pairs() {
            ctx.store_string(k, v)?;
        }
        Ok(())
    })?;
    ctx.out.ok();
    Ok(())
}

pub(crate) fn check_string_len(ctx: &Ctx<'_>, encoded_len: usize) -> CmdResult {
    let max = ctx.max_value_len();
    if encoded_len > max {
        return Err(CmdError::new(format!(
            "ERR string exceeds maximum allowed size ({encoded_len} bytes stored; the store's value limit is {max} bytes)"
        )));
    }
    Ok(())
}

fn incr_by(ctx: &mut Ctx<'_>, key: &[u8], delta: i64) -> CmdResult {
    let (current, deadline) = match ctx.load_entry(key)? {
        None => (0, None),
        Some((v, deadline)) => (
            parse_i64_strict(as_string(&v)?).ok_or_else(|| CmdError::new(msg::NOT_INTEGER))?,
            deadline,
        ),
    };
    let new = current
        .checked_add(delta)
        .ok_or_else(|| CmdError::new(msg::OVERFLOW))?;
    let mut digits = [0u8; 20];
    ctx.store_with_deadline(key, format_decimal(new, &mut digits), deadline)?;
    ctx.out.int(new);
    Ok(())
}

/// INCR key
pub(crate) fn incr(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    incr_by(ctx, args.get(1), 1)
}

/// DECR key
pub(crate) fn decr(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    incr_by(ctx, args.get(1), -1)
}

/// INCRBY key increment
pub(crate) fn incrby(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    let delta = parse_int(args.get(2))?;
    incr_by(ctx, args.get(1), delta)
}

/// DECRBY key decrement
pub(crate) fn decrby(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    let delta = parse_int(args.get(2))?
        .checked_neg()
        .ok_or_else(|| CmdError::new("ERR decrement would overflow"))?;
    incr_by(ctx, args.get(1), delta)
}

/// APPEND key value
pub(crate) fn append(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    let (key, tail) = (args.get(1), args.get(2));
    let (mut new, deadline) = match ctx.load_entry(key)? {
        Some((v, deadline)) => (as_string(&v)?.to_vec(), deadline),
        None => (Vec::new(), None),
    };
    new.extend_from_slice(tail);
    check_string_len(ctx, encoding::encoded_string_len(&new))?;
    ctx.store_with_deadline(key, &encoding::encode_string(&new), deadline)?;
    ctx.out.int(new.len() as i64);
    Ok(())
}

/// STRLEN key
pub(crate) fn strlen(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    let n = match ctx.load(args.get(1))? {
        Some(v) => as_string(&v)?.len(),
        None => 0,
    };
    ctx.out.int(n as i64);
    Ok(())
}

/// GETDEL key
pub(crate) fn getdel(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    let key = args.get(1);
    match ctx.load(key)? {
        None => ctx.out.null(),
        Some(v) => {
            let s = as_string(&v)?;
            ctx.remove(key)?;
            ctx.out.bulk(s);
        }
    }
    Ok(())
}

/// The byte range `start..=end` of a string of `len` bytes, Redis's GETRANGE rules
/// (negative indexes count from the end, out-of-range ends are clamped).
fn clamp_range(start: i64, end: i64, len: usize) -> Option<std::ops::Range<usize>> {
    let len = i64::try_from(len).unwrap_or(i64::MAX);
    if (start < 0 && end < 0 && start > end) || len == 0 {
        return None;
    }
    let fix = |i: i64| if i < 0 { (len + i).max(0) } else { i };
    let (start, end) = (fix(start), fix(end).min(len - 1));
    if start > end {
        return None;
    }
    Some(start as usize..end as usize + 1)
}

/// GETRANGE key start end
pub(crate) fn getrange(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    let (start, end) = (parse_int(args.get(2))?, parse_int(args.get(3))?);
    let v = ctx.load(args.get(1))?;
    let s = match &v {
        Some(v) => as_string(v)?,
        None => &[][..],
    };
    let part = clamp_range(start, end, s.len())
        .and_then(|r| s.get(r))
        .unwrap_or_default();
    ctx.out.bulk(part);
    Ok(())
}

/// SETRANGE key offset value
pub(crate) fn setrange(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    let (key, patch) = (args.get(1), args.get(3));
    let offset = usize::try_from(parse_int(args.get(2))?)
        .map_err(|_| CmdError::new("ERR offset is out of range"))?;
    let entry = ctx.load_entry(key)?;
    let (mut s, deadline) = match &entry {
        Some((v, d)) => (as_string(v)?.to_vec(), *d),
        None => (Vec::new(), None),
    };
    if patch.is_empty() {
        ctx.out.int(s.len() as i64);
        return Ok(());
    }
    let end = offset
        .checked_add(patch.len())
        .ok_or_else(|| CmdError::new("ERR string exceeds maximum allowed size"))?;
    check_string_len(ctx, end)?;
    if s.len() < end {
        s.resize(end, 0);
    }
    if let Some(dst) = s.get_mut(offset..end) {
        dst.copy_from_slice(patch);
    }
    ctx.store_with_deadline(key, &encoding::encode_string(&s), deadline)?;
    ctx.out.int(s.len() as i64);
    Ok(())
}

/// MSETNX key value [key value ...]
pub(crate) fn msetnx(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    if args.len().is_multiple_of(2) {
        return Err(CmdError::new(
            "ERR wrong number of arguments for 'msetnx' command",
        ));
    }
    for i in (1..args.len()).step_by(2) {
        if ctx.load(args.get(i))?.is_some() {
            ctx.out.int(0);
            return Ok(());
        }
    }
    mset(ctx, args)?;
    // `mset` answered +OK; MSETNX answers 1 instead.
    ctx.out.truncate(ctx.out.len() - b"+OK\r\n".len());
    ctx.out.int(1);
    Ok(())
}

/// A float as Redis's `string2ld` reads one: no spaces, no NaN or infinity.
pub(crate) fn parse_float(s: &[u8]) -> Option<f64> {
    let text = std::str::from_utf8(s).ok()?;
    if text.is_empty() || text.starts_with(|c: char| c.is_whitespace() || c == '+') {
        return None;
    }
    let v: f64 = text.parse().ok()?;
    v.is_finite().then_some(v)
}

/// Formats a float as Redis's INCRBYFLOAT reply does (shortest exact decimal, no exponent).
pub(crate) fn format_float(v: f64) -> String {
    let s = format!("{v}");
    if s == "-0" { "0".to_string() } else { s }
}

/// INCRBYFLOAT key increment
pub(crate) fn incrbyfloat(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    let key = args.get(1);
    let not_float = || CmdError::new("ERR value is not a valid float");
    let delta = parse_float(args.get(2)).ok_or_else(not_float)?;
    let (current, deadline) = match ctx.load_entry(key)? {
        None => (0.0, None),
        Some((v, d)) => (parse_float(as_string(&v)?).ok_or_else(not_float)?, d),
    };
    let new = current + delta;
    if !new.is_finite() {
        return Err(CmdError::new("ERR increment would produce NaN or Infinity"));
    }
    let text = format_float(new);
    ctx.store_with_deadline(key, text.as_bytes(), deadline)?;
    ctx.out.bulk(text.as_bytes());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn getrange_clamps_as_redis_does() {
        assert_eq!(clamp_range(0, 3, 10), Some(0..4));
        assert_eq!(clamp_range(-3, -1, 10), Some(7..10));
        assert_eq!(clamp_range(5, 100, 10), Some(5..10));
        assert_eq!(clamp_range(-100, 2, 10), Some(0..3));
        assert_eq!(clamp_range(4, 2, 10), None);
        assert_eq!(clamp_range(-1, -5, 10), None);
        assert_eq!(clamp_range(0, -1, 0), None);
        assert_eq!(clamp_range(0, -100, 10), Some(0..1));
    }

    #[test]
    fn floats_parse_and_print_as_redis_does() {
        assert_eq!(parse_float(b"1.5"), Some(1.5));
        assert_eq!(parse_float(b"-3"), Some(-3.0));
        assert_eq!(parse_float(b"5e2"), Some(500.0));
        for bad in [&b""[..], b" 1", b"+1", b"nan", b"inf", b"1x"] {
            assert_eq!(parse_float(bad), None, "{bad:?}");
        }
        assert_eq!(format_float(10.5), "10.5");
        assert_eq!(format_float(3.0), "3");
        assert_eq!(format_float(-0.0), "0");
    }
}
