//! Blocking list commands: BLPOP, BRPOP, BLMOVE, BRPOPLPUSH (Redis 7.0's replies).
//!
//! A blocking command that finds an element behaves as its non-blocking form. When every
//! key is empty it writes no reply and marks the session blocked
//! ([`crate::shared::Block`]: its deadline, and the [`crate::shared::Waiters`] version it
//! saw while holding its keys' locks). The worker then stops the connection's burst there
//! and hands it back; the connection (an async task, so no worker thread is held) waits
//! for the version to move — every push to a list moves it, under the pushed key's lock —
//! or for the deadline, and runs the command again. On timeout the command answers a null
//! array (BLPOP/BRPOP) or null (BLMOVE). Timeout 0 waits forever. Inside EXEC (and so on
//! a `MULTI` block) the commands never block: an empty key answers at once as on timeout,
//! as in Redis.
//!
//! Clients blocked on the same key are woken together and race for the element (Redis
//! serves them in blocking order: a documented difference).
//!
//! Thread-safety: handlers run on worker threads under the key locks.

use std::time::{Duration, Instant};

use super::collection;
use super::lists::{End, move_one, pop};
use super::{CmdError, CmdResult, Ctx};
use crate::encoding::Kind;
use crate::resp::Args;
use crate::shared::Block;

/// The timeout argument: seconds as a float, >= 0 (`None`: forever).
fn timeout_of(arg: &[u8]) -> Result<Option<Duration>, CmdError> {
    let secs = std::str::from_utf8(arg)
        .ok()
        .filter(|t| !t.is_empty() && !t.starts_with(|c: char| c.is_whitespace()))
        .and_then(|t| t.parse::<f64>().ok())
        .filter(|t| t.is_finite())
        .ok_or_else(|| CmdError::new("ERR timeout is not a float or out of range"))?;
    let ms = (secs * 1000.0).ceil();
    if ms < 0.0 {
        return Err(CmdError::new("ERR timeout is negative"));
    }
    Ok((ms > 0.0).then(|| Duration::from_millis(ms as u64)))
}

/// What a blocking command does when it found nothing: true when it must answer its
/// timeout now (inside EXEC, or the deadline passed), false when it blocked.
fn block_or_time_out(ctx: &mut Ctx<'_>, timeout: Option<Duration>) -> bool {
    if ctx.in_exec {
        return true;
    }
    let block = ctx.session.block.get_or_insert(Block {
        deadline: timeout.map(|t| Instant::now() + t),
        seen: 0,
        waiting: false,
        timed_out: false,
    });
    if block.timed_out || block.deadline.is_some_and(|d| d <= Instant::now()) {
        ctx.session.block = None;
        return true;
    }
    block.seen = ctx.shared.waiters.version();
    block.waiting = true;
    false
}

fn bpop(ctx: &mut Ctx<'_>, args: Args<'_>, end: End) -> CmdResult {
    let timeout = timeout_of(args.get(args.len() - 1))?;
    let keys: Vec<&[u8]> = args.iter_from(1).take(args.len() - 2).collect();
    let popped = ctx
        .batched(|ctx| {
            for key in &keys {
                if let Some(mut c) = collection::load(ctx, key, Kind::List)? {
                    let v = pop(ctx, &mut c, end)?;
                    collection::save(ctx, key, &c)?;
                    return Ok(Some((key.to_vec(), v)));
                }
            }
            Ok(None)
        })
        .inspect_err(|_| ctx.session.block = None)?;
    match popped {
        Some((k, v)) => {
            ctx.session.block = None;
            ctx.out.array(2);
            ctx.out.bulk(&k);
            ctx.out.bulk(&v);
        }
        None if block_or_time_out(ctx, timeout) => ctx.out.null_array(),
        None => {}
    }
    Ok(())
}

/// BLPOP key [key ...] timeout
pub(crate) fn blpop(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    bpop(ctx, args, End::Left)
}

/// BRPOP key [key ...] timeout
pub(crate) fn brpop(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    bpop(ctx, args, End::Right)
}

fn bmove(ctx: &mut Ctx<'_>, args: Args<'_>, from: End, to: End, timeout: &[u8]) -> CmdResult {
    let timeout = timeout_of(timeout)?;
    let moved = move_one(ctx, args.get(1), args.get(2), from, to)
        .inspect_err(|_| ctx.session.block = None)?;
    match moved {
        Some(v) => {
            ctx.session.block = None;
            ctx.out.bulk(&v);
        }
        None if block_or_time_out(ctx, timeout) => ctx.out.null(),
        None => {}
    }
    Ok(())
}

/// BLMOVE source destination LEFT|RIGHT LEFT|RIGHT timeout
pub(crate) fn blmove(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    let (from, to) = (End::parse(args.get(3))?, End::parse(args.get(4))?);
    bmove(ctx, args, from, to, args.get(5))
}

/// BRPOPLPUSH source destination timeout
pub(crate) fn brpoplpush(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    bmove(ctx, args, End::Right, End::Left, args.get(3))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timeouts_parse_as_redis_reads_them() {
        assert_eq!(timeout_of(b"0").unwrap(), None);
        assert_eq!(
            timeout_of(b"1.5").unwrap(),
            Some(Duration::from_millis(1500))
        );
        assert_eq!(
            timeout_of(b"0.0001").unwrap(),
            Some(Duration::from_millis(1))
        );
        assert_eq!(timeout_of(b"-1").unwrap_err().0, "ERR timeout is negative");
        for bad in [&b"x"[..], b"", b" 1", b"inf", b"nan"] {
            assert_eq!(
                timeout_of(bad).unwrap_err().0,
                "ERR timeout is not a float or out of range",
                "{bad:?}"
            );
        }
    }
}
