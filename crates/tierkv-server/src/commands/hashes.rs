//! Hash commands: HSET, HMSET, HSETNX, HGET, HMGET, HGETALL, HKEYS, HVALS, HDEL, HEXISTS,
//! HLEN, HSTRLEN, HINCRBY, HINCRBYFLOAT, HSCAN — per element (format 2).
//!
//! On an ordered engine a hash is a metadata record plus one store key per field
//! ([`super::collection`]; the field's suffix is the field's bytes, its value the value),
//! so HSET of one field writes that field and the metadata, whatever the hash's size.
//! HGETALL, HKEYS and HVALS walk the fields in field order (Redis: insertion order for
//! small hashes — a documented difference). HSCAN has real cursors: the cursor table keeps
//! the field to resume from.
//!
//! Format-1 (packed) hashes: on an engine that cannot walk a range in order, hashes stay
//! packed ([`super::packed_hashes`]) — their fields could not be enumerated otherwise. On
//! an ordered engine a format-1 hash left by an older version is read as it is and
//! rewritten per element by its first write, in the same batch as that write.
//!
//! Every write runs inside [`Ctx::batched`]: field writes and the metadata commit as one
//! crash-atomic batch where the engine has them.
//!
//! Thread-safety: handlers run concurrently on worker threads under the key locks.

use super::collection::{self, Coll, Elements};
use super::packed_hashes as packed;

/// The packed handlers, HRANDFIELD included.
mod packed_plus {
    pub(super) use super::p_hrandfield as hrandfield;
    pub(super) use super::packed::*;
}
use super::strings::{format_float, parse_float, reply_too_large};
use super::{CmdError, CmdResult, Ctx, Handler, as_hash, msg, parse_int};
use crate::encoding::{self, Kind, Stored};
use crate::glob;
use crate::resp::Args;

/// How the hash under a key is stored.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Packed,
    Elements,
}

/// Picks the representation for a command on the hash under argument 1; a write to a
/// format-1 hash on an ordered engine first rewrites it per element.
fn mode(ctx: &mut Ctx<'_>, key: &[u8], write: bool) -> Result<Mode, CmdError> {
    if !ctx.shared.db.ordered() {
        return Ok(Mode::Packed);
    }
    if let Some((v, deadline)) = ctx.peek(key)?
        && matches!(encoding::decode(&v)?, Stored::Hash(_))
    {
        if !write {
            return Ok(Mode::Packed);
        }
        migrate(ctx, key, &v, deadline)?;
    }
    Ok(Mode::Elements)
}

/// Rewrites a format-1 hash per element (elements first, then the metadata over the old
/// value).
fn migrate(ctx: &Ctx<'_>, key: &[u8], packed: &[u8], deadline: Option<u64>) -> CmdResult {
    let h = as_hash(packed)?;
    let mut c = Coll::create(ctx, key, Kind::Hash);
    c.deadline = deadline;
    for (f, v) in h.iter() {
        c.put(ctx, f, v)?;
        c.meta.count += 1;
    }
    collection::save(ctx, key, &c)
}

/// Runs a read command in the key's representation.
fn read(ctx: &mut Ctx<'_>, args: Args<'_>, packed: Handler, elements: Handler) -> CmdResult {
    match mode(ctx, args.get(1), false)? {
        Mode::Packed => packed(ctx, args),
        Mode::Elements => elements(ctx, args),
    }
}

/// Runs a write command in one batch, in the key's representation.
fn write(ctx: &mut Ctx<'_>, args: Args<'_>, packed: Handler, elements: Handler) -> CmdResult {
    ctx.batched(|ctx| match mode(ctx, args.get(1), true)? {
        Mode::Packed => packed(ctx, args),
        Mode::Elements => elements(ctx, args),
    })
}

/// Applies `field value` pairs from argument 2 on; returns how many fields are new.
fn set_fields(ctx: &mut Ctx<'_>, args: Args<'_>, name: &str) -> Result<i64, CmdError> {
    if !args.len().is_multiple_of(2) {
        return Err(CmdError::new(format!(
            "ERR wrong number of arguments for '{name}' command"
        )));
    }
    let key = args.get(1);
    let mut c = collection::load_or_create(ctx, key, Kind::Hash)?;
    // Check every field's length before writing any.
    for i in (2..args.len()).step_by(2) {
        c.elem(ctx, args.get(i))?;
    }
    let mut added = 0;
    for i in (2..args.len()).step_by(2) {
        let field = args.get(i);
        if c.get(ctx, field)?.is_none() {
            added += 1;
            c.meta.count += 1;
        }
        c.put(ctx, field, args.get(i + 1))?;
    }
    collection::save(ctx, key, &c)?;
    Ok(added)
}

fn e_hset(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    let added = set_fields(ctx, args, "hset")?;
    ctx.out.int(added);
    Ok(())
}

fn e_hmset(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    set_fields(ctx, args, "hmset")?;
    ctx.out.ok();
    Ok(())
}

fn e_hsetnx(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    let key = args.get(1);
    let mut c = collection::load_or_create(ctx, key, Kind::Hash)?;
    if c.get(ctx, args.get(2))?.is_some() {
        ctx.out.int(0);
        return Ok(());
    }
    c.put(ctx, args.get(2), args.get(3))?;
    c.meta.count += 1;
    collection::save(ctx, key, &c)?;
    ctx.out.int(1);
    Ok(())
}

fn e_hget(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    match collection::load(ctx, args.get(1), Kind::Hash)? {
        Some(c) => match c.get(ctx, args.get(2))? {
            Some(v) => ctx.out.bulk(&v),
            None => ctx.out.null(),
        },
        None => ctx.out.null(),
    }
    Ok(())
}

fn e_hmget(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    let (mark, bound) = (ctx.out.mark(), ctx.max_reply_bytes());
    let c = collection::load(ctx, args.get(1), Kind::Hash)?;
    ctx.out.array(args.len() - 2);
    for field in args.iter_from(2) {
        match c.as_ref().map(|c| c.get(ctx, field)).transpose()?.flatten() {
            Some(v) => ctx.out.bulk(&v),
            None => ctx.out.null(),
        }
        if ctx.out.exceeds(mark, bound) {
            return Err(reply_too_large(bound));
        }
    }
    Ok(())
}

/// HGETALL (`fields`, `values` both), HKEYS (`fields`), HVALS (`values`).
fn e_walk(ctx: &mut Ctx<'_>, args: Args<'_>, fields: bool, values: bool) -> CmdResult {
    let Some(c) = collection::load(ctx, args.get(1), Kind::Hash)? else {
        if fields && values {
            ctx.out.map(0);
        } else {
            ctx.out.array(0);
        }
        return Ok(());
    };
    let all = c.all(ctx, b"", ctx.max_reply_bytes())?;
    if fields && values {
        ctx.out.map(all.len());
    } else {
        ctx.out.array(all.len());
    }
    for (f, v) in &all {
        if fields {
            ctx.out.bulk(f);
        }
        if values {
            ctx.out.bulk(v);
        }
    }
    Ok(())
}

fn e_hgetall(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    e_walk(ctx, args, true, true)
}

fn e_hkeys(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    e_walk(ctx, args, true, false)
}

fn e_hvals(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    e_walk(ctx, args, false, true)
}

fn e_hdel(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    let key = args.get(1);
    let Some(mut c) = collection::load(ctx, key, Kind::Hash)? else {
        ctx.out.int(0);
        return Ok(());
    };
    let mut removed = 0;
    for field in args.iter_from(2) {
        if c.get(ctx, field)?.is_some() {
            c.delete(ctx, field)?;
            c.meta.count = c.meta.count.saturating_sub(1);
            removed += 1;
        }
    }
    if removed > 0 {
        collection::save(ctx, key, &c)?;
    }
    ctx.out.int(removed);
    Ok(())
}

/// The value of a field of the hash under argument 1 (`None` when either is missing).
fn field_of(ctx: &mut Ctx<'_>, args: Args<'_>) -> Result<Option<Vec<u8>>, CmdError> {
    match collection::load(ctx, args.get(1), Kind::Hash)? {
        Some(c) => c.get(ctx, args.get(2)),
        None => Ok(None),
    }
}

fn e_hexists(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    let found = field_of(ctx, args)?.is_some();
    ctx.out.int(i64::from(found));
    Ok(())
}

fn e_hstrlen(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    let len = field_of(ctx, args)?.map_or(0, |v| v.len());
    ctx.out.int(len as i64);
    Ok(())
}

fn e_hlen(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    let c = collection::load(ctx, args.get(1), Kind::Hash)?;
    ctx.out
        .int(c.map_or(0, |c| i64::try_from(c.meta.count).unwrap_or(i64::MAX)));
    Ok(())
}

/// Sets a field to `text`, counting it when new; saves the hash.
fn set_one(ctx: &mut Ctx<'_>, key: &[u8], mut c: Coll, field: &[u8], text: &[u8]) -> CmdResult {
    if c.get(ctx, field)?.is_none() {
        c.meta.count += 1;
    }
    c.put(ctx, field, text)?;
    collection::save(ctx, key, &c)
}

fn e_hincrby(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    let (key, field) = (args.get(1), args.get(2));
    let delta = parse_int(args.get(3))?;
    let c = collection::load_or_create(ctx, key, Kind::Hash)?;
    c.elem(ctx, field)?;
    let current = match c.get(ctx, field)? {
        None => 0,
        Some(v) => super::parse_i64_strict(&v)
            .ok_or_else(|| CmdError::new("ERR hash value is not an integer"))?,
    };
    let new = current
        .checked_add(delta)
        .ok_or_else(|| CmdError::new(msg::OVERFLOW))?;
    set_one(ctx, key, c, field, new.to_string().as_bytes())?;
    ctx.out.int(new);
    Ok(())
}

/// HINCRBYFLOAT's new value of a field holding `current`, as text (Redis's checks).
pub(crate) fn float_step(current: Option<&[u8]>, delta: &[u8]) -> Result<String, CmdError> {
    let not_float = || CmdError::new("ERR value is not a valid float");
    let delta = parse_float(delta).ok_or_else(not_float)?;
    let current = match current {
        None => 0.0,
        Some(v) => parse_float(v).ok_or_else(|| CmdError::new("ERR hash value is not a float"))?,
    };
    let new = current + delta;
    if !new.is_finite() {
        return Err(CmdError::new("ERR increment would produce NaN or Infinity"));
    }
    Ok(format_float(new))
}

fn e_hincrbyfloat(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    let (key, field) = (args.get(1), args.get(2));
    let c = collection::load_or_create(ctx, key, Kind::Hash)?;
    c.elem(ctx, field)?;
    let text = float_step(c.get(ctx, field)?.as_deref(), args.get(3))?;
    set_one(ctx, key, c, field, text.as_bytes())?;
    ctx.out.bulk(text.as_bytes());
    Ok(())
}

/// HSCAN key cursor [MATCH pattern] [COUNT count] [NOVALUES]
fn e_hscan(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    let o = super::scan::parse_element_scan(args, true)?;
    let from = super::scan::cursor_position(ctx, args.get(2))?;
    let c = collection::load(ctx, args.get(1), Kind::Hash)?;
    let (rows, next) = match &c {
        Some(c) => {
            let rows = c.page(ctx, &from, o.count)?;
            let next = (rows.len() == o.count)
                .then(|| rows.last().map(|(f, _)| crate::keyspace::after(f)))
                .flatten();
            (rows, next)
        }
        None => (Vec::new(), None),
    };
    let rows: Vec<_> = rows
        .into_iter()
        .filter(|(f, _)| o.pattern.is_none_or(|p| glob::matches(p, f)))
        .collect();
    super::scan::reply_page(ctx, next, rows.len() * if o.novalues { 1 } else { 2 });
    for (f, v) in &rows {
        ctx.out.bulk(f);
        if !o.novalues {
            ctx.out.bulk(v);
        }
    }
    Ok(())
}

/// HRANDFIELD's arguments: (count, with values); `None` count without one.
fn randfield_args(args: Args<'_>) -> Result<(Option<i64>, bool), CmdError> {
    match args.len() {
        2 => Ok((None, false)),
        3 => Ok((Some(parse_int(args.get(2))?), false)),
        4 if super::is(args.get(3), "WITHVALUES") => Ok((Some(parse_int(args.get(2))?), true)),
        _ => Err(CmdError::new(msg::SYNTAX)),
    }
}

/// Replies HRANDFIELD's picks.
fn reply_randfields(
    ctx: &mut Ctx<'_>,
    count: Option<i64>,
    values: bool,
    picks: &[(Vec<u8>, Vec<u8>)],
) {
    match count {
        None => match picks.first() {
            Some((f, _)) => ctx.out.bulk(f),
            None => ctx.out.null(),
        },
        Some(_) => {
            ctx.out.array(picks.len() * if values { 2 } else { 1 });
            for (f, v) in picks {
                ctx.out.bulk(f);
                if values {
                    ctx.out.bulk(v);
                }
            }
        }
    }
}

/// Picks for a count: distinct for a positive one, |n| with repeats for a negative one.
fn pick_fields(
    count: Option<i64>,
    mut sample: impl FnMut(usize) -> Result<Elements, CmdError>,
) -> Result<Elements, CmdError> {
    match count {
        None => sample(1),
        Some(n) if n >= 0 => sample(usize::try_from(n).unwrap_or(usize::MAX)),
        Some(n) => {
            let want = usize::try_from(n.unsigned_abs()).unwrap_or(usize::MAX);
            let mut out = Vec::new();
            while out.len() < want {
                let Some(p) = sample(1)?.into_iter().next() else {
                    break;
                };
                out.push(p);
            }
            Ok(out)
        }
    }
}

fn e_hrandfield(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    let (count, values) = randfield_args(args)?;
    let c = collection::load(ctx, args.get(1), Kind::Hash)?;
    let picks = match &c {
        Some(c) => pick_fields(count, |n| super::sets::sample_elements(ctx, c, n))?,
        None => Vec::new(),
    };
    reply_randfields(ctx, count, values, &picks);
    Ok(())
}

/// HRANDFIELD on a packed hash: consecutive fields from a random position.
fn p_hrandfield(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    let (count, values) = randfield_args(args)?;
    let stored = ctx.load(args.get(1))?;
    let h = stored.as_deref().map(as_hash).transpose()?;
    let fields: Elements = h
        .map(|h| h.iter().map(|(f, v)| (f.to_vec(), v.to_vec())).collect())
        .unwrap_or_default();
    let mut seed = crate::expiry::now_ms() ^ ctx.shared.new_generation();
    let picks = pick_fields(count, |n| {
        seed = seed.rotate_left(17).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let len = fields.len();
        let start = if len == 0 {
            0
        } else {
            (seed % len as u64) as usize
        };
        Ok(fields
            .iter()
            .cycle()
            .skip(start)
            .take(n.min(len))
            .cloned()
            .collect())
    })?;
    reply_randfields(ctx, count, values, &picks);
    Ok(())
}

macro_rules! dispatch {
    ($($name:ident, $how:ident;)*) => {$(
        #[doc = concat!("`", stringify!($name), "` in the key's representation.")]
        pub(crate) fn $name(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
            paste_handlers!($how, ctx, args, $name)
        }
    )*};
}

macro_rules! paste_handlers {
    (read, $ctx:ident, $args:ident, $name:ident) => {
        read($ctx, $args, packed_plus::$name, elements::$name)
    };
    (write, $ctx:ident, $args:ident, $name:ident) => {
        write($ctx, $args, packed_plus::$name, elements::$name)
    };
}

/// The per-element handlers under the names of the packed ones.
mod elements {
    pub(super) use super::e_hrandfield as hrandfield;
    pub(super) use super::{
        e_hdel as hdel, e_hexists as hexists, e_hget as hget, e_hgetall as hgetall,
        e_hincrby as hincrby, e_hincrbyfloat as hincrbyfloat, e_hkeys as hkeys, e_hlen as hlen,
        e_hmget as hmget, e_hmset as hmset, e_hscan as hscan, e_hset as hset, e_hsetnx as hsetnx,
        e_hstrlen as hstrlen, e_hvals as hvals,
    };
}

dispatch! {
    hset, write;
    hmset, write;
    hsetnx, write;
    hdel, write;
    hincrby, write;
    hincrbyfloat, write;
    hget, read;
    hmget, read;
    hgetall, read;
    hkeys, read;
    hvals, read;
    hexists, read;
    hstrlen, read;
    hlen, read;
    hscan, read;
    hrandfield, read;
}
