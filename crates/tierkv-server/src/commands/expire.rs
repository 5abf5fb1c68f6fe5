//! Expiry commands: EXPIRE, PEXPIRE, EXPIREAT, PEXPIREAT (NX, XX, GT, LT), TTL, PTTL,
//! EXPIRETIME, PEXPIRETIME, PERSIST, SETEX, PSETEX, GETEX — Redis 7.0's replies, error
//! strings and argument checks, in Redis's order (options, then the number, then the key).
//!
//! A deadline is stored with the value (the expiry envelope of [`crate::encoding`]) in the
//! same `put`; how expired keys disappear is [`crate::expiry`]'s business. A deadline in
//! the past given to EXPIRE and friends deletes the key at once (reply 1), as in Redis.
//!
//! Thread-safety: handlers run on worker threads under the key locks.

use super::{CmdError, CmdResult, Ctx, as_string, is, msg, parse_int};
use crate::encoding;
use crate::expiry::now_ms;
use crate::resp::Args;

/// How an expire argument is to be read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Unit {
    /// Seconds from now (EX).
    Seconds,
    /// Milliseconds from now (PX).
    Millis,
    /// Unix time in seconds (EXAT).
    SecondsAt,
    /// Unix time in milliseconds (PXAT).
    MillisAt,
}

impl Unit {
    /// The unit of a SET/GETEX option name.
    pub(crate) fn of_option(word: &[u8]) -> Option<Unit> {
        [
            ("EX", Unit::Seconds),
            ("PX", Unit::Millis),
            ("EXAT", Unit::SecondsAt),
            ("PXAT", Unit::MillisAt),
        ]
        .into_iter()
        .find(|(w, _)| is(word, w))
        .map(|(_, u)| u)
    }

    fn seconds(self) -> bool {
        matches!(self, Unit::Seconds | Unit::SecondsAt)
    }

    fn relative(self) -> bool {
        matches!(self, Unit::Seconds | Unit::Millis)
    }
}

fn invalid_time(command: &str) -> CmdError {
    CmdError::new(format!("ERR invalid expire time in '{command}' command"))
}

/// Converts an expire argument to an absolute time in ms; `None` when it overflows.
fn absolute_ms(n: i64, unit: Unit) -> Option<i64> {
    let ms = if unit.seconds() {
        n.checked_mul(1000)?
    } else {
        n
    };
    if unit.relative() {
        ms.checked_add(i64::try_from(now_ms()).ok()?)
    } else {
        Some(ms)
    }
}

/// The deadline (Unix ms) of a SET/SETEX/GETEX expire argument: a positive integer.
pub(crate) fn deadline_of(arg: &[u8], unit: Unit, command: &str) -> Result<u64, CmdError> {
    let n = parse_int(arg)?;
    if n <= 0 {
        return Err(invalid_time(command));
    }
    absolute_ms(n, unit)
        .and_then(|ms| u64::try_from(ms).ok())
        .filter(|&ms| ms > 0)
        .ok_or_else(|| invalid_time(command))
}

#[derive(Default)]
struct ExpireFlags {
    nx: bool,
    xx: bool,
    gt: bool,
    lt: bool,
}

fn parse_expire_flags(args: Args<'_>) -> Result<ExpireFlags, CmdError> {
    let mut f = ExpireFlags::default();
    for a in args.iter_from(3) {
        if is(a, "NX") {
            f.nx = true;
        } else if is(a, "XX") {
            f.xx = true;
        } else if is(a, "GT") {
            f.gt = true;
        } else if is(a, "LT") {
            f.lt = true;
        } else {
            return Err(CmdError::new(format!(
                "ERR Unsupported option {}",
                String::from_utf8_lossy(a)
            )));
        }
    }
    if f.nx && (f.xx || f.gt || f.lt) {
        return Err(CmdError::new(
            "ERR NX and XX, GT or LT options at the same time are not compatible",
        ));
    }
    if f.gt && f.lt {
        return Err(CmdError::new(
            "ERR GT and LT options at the same time are not compatible",
        ));
    }
    Ok(f)
}

fn expire_generic(ctx: &mut Ctx<'_>, args: Args<'_>, unit: Unit, command: &str) -> CmdResult {
    let flags = parse_expire_flags(args)?;
    let when = absolute_ms(parse_int(args.get(2))?, unit).ok_or_else(|| invalid_time(command))?;
    let key = args.get(1);
    let Some((value, current)) = ctx.load_entry(key)? else {
        ctx.out.int(0);
        return Ok(());
    };
    let refused = (flags.nx && current.is_some())
        || (flags.xx && current.is_none())
        || (flags.gt && current.is_none_or(|c| when <= c as i64))
        || (flags.lt && current.is_some_and(|c| when >= c as i64));
    if refused {
        ctx.out.int(0);
        return Ok(());
    }
    match u64::try_from(when) {
        Ok(at) if at > now_ms() => ctx.store_with_deadline(key, &value, Some(at))?,
        _ => ctx.remove(key)?,
    }
    ctx.out.int(1);
    Ok(())
}

/// EXPIRE key seconds [NX | XX | GT | LT]
pub(crate) fn expire(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    expire_generic(ctx, args, Unit::Seconds, "expire")
}

/// PEXPIRE key milliseconds [NX | XX | GT | LT]
pub(crate) fn pexpire(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    expire_generic(ctx, args, Unit::Millis, "pexpire")
}

/// EXPIREAT key unix-time-seconds [NX | XX | GT | LT]
pub(crate) fn expireat(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    expire_generic(ctx, args, Unit::SecondsAt, "expireat")
}

/// PEXPIREAT key unix-time-milliseconds [NX | XX | GT | LT]
pub(crate) fn pexpireat(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    expire_generic(ctx, args, Unit::MillisAt, "pexpireat")
}

fn ttl_generic(ctx: &mut Ctx<'_>, args: Args<'_>, millis: bool, absolute: bool) -> CmdResult {
    let reply = match ctx.load_entry(args.get(1))? {
        None => -2,
        Some((_, None)) => -1,
        Some((_, Some(at))) => {
            let t = if absolute {
                at
            } else {
                at.saturating_sub(now_ms())
            };
            let t = if millis {
                t
            } else {
                t.saturating_add(500) / 1000
            };
            i64::try_from(t).unwrap_or(i64::MAX)
        }
    };
    ctx.out.int(reply);
    Ok(())
}

/// TTL key
pub(crate) fn ttl(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    ttl_generic(ctx, args, false, false)
}

/// PTTL key
pub(crate) fn pttl(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    ttl_generic(ctx, args, true, false)
}

/// EXPIRETIME key
pub(crate) fn expiretime(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    ttl_generic(ctx, args, false, true)
}

/// PEXPIRETIME key
pub(crate) fn pexpiretime(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    ttl_generic(ctx, args, true, true)
}

/// PERSIST key
pub(crate) fn persist(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    let key = args.get(1);
    match ctx.load_entry(key)? {
        Some((value, Some(_))) => {
            ctx.store_with_deadline(key, &value, None)?;
            ctx.out.int(1);
        }
        _ => ctx.out.int(0),
    }
    Ok(())
}

fn setex_generic(ctx: &mut Ctx<'_>, args: Args<'_>, unit: Unit, command: &str) -> CmdResult {
    let at = deadline_of(args.get(2), unit, command)?;
    let value = args.get(3);
    super::strings::check_string_len(
        ctx,
        encoding::encoded_string_len(value) + encoding::EXPIRY_OVERHEAD,
    )?;
    ctx.store_with_deadline(args.get(1), &encoding::encode_string(value), Some(at))?;
    ctx.out.ok();
    Ok(())
}

/// SETEX key seconds value
pub(crate) fn setex(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    setex_generic(ctx, args, Unit::Seconds, "setex")
}

/// PSETEX key milliseconds value
pub(crate) fn psetex(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    setex_generic(ctx, args, Unit::Millis, "psetex")
}

/// GETEX key [EX s | PX ms | EXAT s | PXAT ms | PERSIST]
///
/// Redis's order: the options' syntax, then the key (missing: null; not a string:
/// WRONGTYPE), then the expire argument's value.
pub(crate) fn getex(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    let mut persist = false;
    let mut expire: Option<(usize, Unit)> = None;
    let mut i = 2;
    while i < args.len() {
        let a = args.get(i);
        let free = !persist && expire.is_none();
        if is(a, "PERSIST") && free {
            persist = true;
        } else if let Some(unit) = Unit::of_option(a)
            && free
            && i + 1 < args.len()
        {
            expire = Some((i + 1, unit));
            i += 1;
        } else {
            return Err(CmdError::new(msg::SYNTAX));
        }
        i += 1;
    }
    let key = args.get(1);
    let Some((stored, current)) = ctx.load_entry(key)? else {
        ctx.out.null();
        return Ok(());
    };
    let value = as_string(&stored)?;
    let new = match expire {
        Some((at, unit)) => Some(deadline_of(args.get(at), unit, "getex")?),
        None => None,
    };
    ctx.out.bulk(value);
    match new {
        Some(at) if at <= now_ms() => ctx.remove(key)?,
        Some(at) if Some(at) != current => ctx.store_with_deadline(key, &stored, Some(at))?,
        None if persist && current.is_some() => ctx.store_with_deadline(key, &stored, None)?,
        _ => {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expire_arguments_convert_and_overflow_as_in_redis() {
        assert_eq!(absolute_ms(5, Unit::SecondsAt), Some(5_000));
        assert_eq!(absolute_ms(5, Unit::MillisAt), Some(5));
        assert_eq!(absolute_ms(i64::MAX, Unit::SecondsAt), None);
        assert_eq!(absolute_ms(i64::MAX, Unit::Millis), None);
        let now = now_ms() as i64;
        let rel = absolute_ms(10, Unit::Seconds).unwrap();
        assert!((now + 10_000..now + 11_000).contains(&rel));
        assert_eq!(Unit::of_option(b"pxat"), Some(Unit::MillisAt));
        assert_eq!(Unit::of_option(b"E"), None);
        assert!(deadline_of(b"0", Unit::Seconds, "set").is_err());
        assert!(deadline_of(b"-3", Unit::Millis, "set").is_err());
        assert!(deadline_of(b"x", Unit::Millis, "set").is_err());
        assert_eq!(deadline_of(b"7", Unit::MillisAt, "set"), Ok(7));
    }
}
