//! Format-1 hashes (packed: the whole hash in one value), used on engines that cannot
//! walk a key range in order (`dram:hash`, HeterMM over a hash index), where a hash's
//! elements could not be enumerated, and to read the format-1 hashes an ordered store
//! holds from before format 2 (their first write rewrites them per element, see
//! [`super::hashes`]).
//!
//! A hash is stored as one encoded value under its key ([`crate::encoding`], type `h`):
//! reading a field decodes the value, writing one re-encodes the whole hash, so a hash costs
//! O(its size) per write and is bounded by the store's value limit (checked before the
//! write, with a clear error). A hash with no fields left is deleted, as in Redis. A string
//! under the key gives WRONGTYPE. Writers hold the key's stripe exclusively (see
//! [`crate::locks`]), so concurrent HSETs of different fields of one hash both land.
//!
//! A later schema-aware engine (FOCUS) can map fields natively; this encoding is the
//! generic fallback every engine gets for free.
//!
//! Thread-safety: handlers run concurrently on worker threads under the key locks.

use super::strings::reply_too_large;
use super::{CmdError, CmdResult, Ctx, as_hash};
use crate::encoding::{HashEdit, HashRef};
use crate::resp::Args;

pub(crate) use super::scan::hscan_packed as hscan;

/// Applies `field value` pairs from argument 2 on; returns how many fields are new.
fn set_fields(ctx: &mut Ctx<'_>, args: Args<'_>, name: &str) -> Result<i64, CmdError> {
    if !args.len().is_multiple_of(2) {
        return Err(CmdError::new(format!(
            "ERR wrong number of arguments for '{name}' command"
        )));
    }
    let key = args.get(1);
    let (old, deadline) = ctx.load_entry(key)?.unzip();
    let deadline = deadline.flatten();
    let from = old.as_deref().map(as_hash).transpose()?;
    let mut edit = HashEdit::new(from);
    let mut added = 0;
    for i in (2..args.len()).step_by(2) {
        if edit.set(args.get(i), args.get(i + 1)) {
            added += 1;
        }
    }
    let (len, max) = (edit.encoded_len(), ctx.max_value_len());
    if len > max {
        return Err(CmdError::new(format!(
            "ERR hash would take {len} bytes encoded, over the store's value limit of {max} bytes"
        )));
    }
    ctx.store_with_deadline(key, &edit.encode(), deadline)?;
    Ok(added)
}

/// HSET key field value [field value ...]
pub(crate) fn hset(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    let added = set_fields(ctx, args, "hset")?;
    ctx.out.int(added);
    Ok(())
}

/// HMSET key field value [field value ...]
pub(crate) fn hmset(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    set_fields(ctx, args, "hmset")?;
    ctx.out.ok();
    Ok(())
}

/// Runs `f` on the hash under argument 1 (`None` when the key is absent).
fn with_hash<T>(
    ctx: &mut Ctx<'_>,
    args: Args<'_>,
    f: impl FnOnce(&mut Ctx<'_>, Option<HashRef<'_>>) -> Result<T, CmdError>,
) -> Result<T, CmdError> {
    let stored = ctx.load(args.get(1))?;
    let hash = stored.as_deref().map(as_hash).transpose()?;
    f(ctx, hash)
}

/// HGET key field
pub(crate) fn hget(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    with_hash(ctx, args, |ctx, h| {
        match h.and_then(|h| h.get(args.get(2))) {
            Some(v) => ctx.out.bulk(v),
            None => ctx.out.null(),
        }
        Ok(())
    })
}

/// HMGET key field [field ...]
pub(crate) fn hmget(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    let (mark, bound) = (ctx.out.mark(), ctx.max_reply_bytes());
    with_hash(ctx, args, |ctx, h| {
        ctx.out.array(args.len() - 2);
        for field in args.iter_from(2) {
            match h.and_then(|h| h.get(field)) {
                Some(v) => ctx.out.bulk(v),
                None => ctx.out.null(),
            }
            if ctx.out.exceeds(mark, bound) {
                return Err(reply_too_large(bound));
            }
        }
        Ok(())
    })
}

/// HGETALL key
pub(crate) fn hgetall(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    with_hash(ctx, args, |ctx, h| {
        let Some(h) = h else {
            ctx.out.map(0);
            return Ok(());
        };
        ctx.out.map(h.len());
        for (f, v) in h.iter() {
            ctx.out.bulk(f);
            ctx.out.bulk(v);
        }
        Ok(())
    })
}

/// HDEL key field [field ...]
pub(crate) fn hdel(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    let key = args.get(1);
    let (stored, deadline) = ctx.load_entry(key)?.unzip();
    let Some(h) = stored.as_deref().map(as_hash).transpose()? else {
        ctx.out.int(0);
        return Ok(());
    };
    let mut edit = HashEdit::new(Some(h));
    let removed = args.iter_from(2).filter(|f| edit.remove(f)).count();
    if removed > 0 {
        if edit.is_empty() {
            ctx.remove(key)?;
        } else {
            ctx.store_with_deadline(key, &edit.encode(), deadline.flatten())?;
        }
    }
    ctx.out.int(removed as i64);
    Ok(())
}

/// HEXISTS key field
pub(crate) fn hexists(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    with_hash(ctx, args, |ctx, h| {
        let found = h.and_then(|h| h.get(args.get(2))).is_some();
        ctx.out.int(i64::from(found));
        Ok(())
    })
}

/// HLEN key
pub(crate) fn hlen(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    with_hash(ctx, args, |ctx, h| {
        ctx.out.int(h.map_or(0, |h| h.len() as i64));
        Ok(())
    })
}

/// HINCRBY key field increment
pub(crate) fn hincrby(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    let (key, field) = (args.get(1), args.get(2));
    let delta = super::parse_int(args.get(3))?;
    let (old, deadline) = ctx.load_entry(key)?.unzip();
    let from = old.as_deref().map(as_hash).transpose()?;
    let current = match from.and_then(|h| h.get(field)) {
        None => 0,
        Some(v) => super::parse_i64_strict(v)
            .ok_or_else(|| CmdError::new("ERR hash value is not an integer"))?,
    };
    let new = current
        .checked_add(delta)
        .ok_or_else(|| CmdError::new(super::msg::OVERFLOW))?;
    let text = new.to_string();
    let mut edit = HashEdit::new(from);
    edit.set(field, text.as_bytes());
    ctx.store_with_deadline(key, &edit.encode(), deadline.flatten())?;
    ctx.out.int(new);
    Ok(())
}

/// HSETNX key field value
pub(crate) fn hsetnx(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    let exists = with_hash(ctx, args, |_, h| {
        Ok(h.and_then(|h| h.get(args.get(2))).is_some())
    })?;
    if exists {
        ctx.out.int(0);
        return Ok(());
    }
    set_fields(ctx, args, "hsetnx")?;
    ctx.out.int(1);
    Ok(())
}

/// HSTRLEN key field
pub(crate) fn hstrlen(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    with_hash(ctx, args, |ctx, h| {
        let len = h.and_then(|h| h.get(args.get(2))).map_or(0, <[u8]>::len);
        ctx.out.int(len as i64);
        Ok(())
    })
}

/// HINCRBYFLOAT key field increment
pub(crate) fn hincrbyfloat(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    let (key, field) = (args.get(1), args.get(2));
    let (old, deadline) = ctx.load_entry(key)?.unzip();
    let from = old.as_deref().map(as_hash).transpose()?;
    let text = super::hashes::float_step(from.and_then(|h| h.get(field)), args.get(3))?;
    let mut edit = HashEdit::new(from);
    edit.set(field, text.as_bytes());
    ctx.store_with_deadline(key, &edit.encode(), deadline.flatten())?;
    ctx.out.bulk(text.as_bytes());
    Ok(())
}

/// HKEYS key, HVALS key: the fields' names (`values` false) or values.
fn fields_or_values(ctx: &mut Ctx<'_>, args: Args<'_>, values: bool) -> CmdResult {
    with_hash(ctx, args, |ctx, h| {
        let Some(h) = h else {
            ctx.out.array(0);
            return Ok(());
        };
        ctx.out.array(h.len());
        for (f, v) in h.iter() {
            ctx.out.bulk(if values { v } else { f });
        }
        Ok(())
    })
}

/// HKEYS key
pub(crate) fn hkeys(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    fields_or_values(ctx, args, false)
}

/// HVALS key
pub(crate) fn hvals(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    fields_or_values(ctx, args, true)
}
