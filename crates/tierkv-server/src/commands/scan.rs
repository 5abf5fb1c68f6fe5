//! `SCAN cursor [MATCH pattern] [COUNT count] [TYPE type]`: walks the keyspace in key order
//! on ordered engines.
//!
//! # Cursor
//! The position of a scan is the next key to visit. `0` starts a scan; every reply carries
//! either `0` (the walk is over) or a cursor number under which [`crate::cursors`] keeps
//! that next key (the last key returned, followed by a zero byte: the smallest key after
//! it). Why a number and not the key itself is explained there: clients parse cursors as
//! 64-bit integers.
//!
//! # Guarantees (as Redis's)
//! Every key present from the start to the end of a full iteration is returned, exactly
//! once (the walk is in key order and resumes strictly after the last key returned). A key
//! added or removed meanwhile may or may not be returned. A page may hold fewer keys than
//! COUNT (MATCH and TYPE filter the keys examined), even none, with a nonzero cursor.
//!
//! # Bounds
//! COUNT is how many keys a call examines, clamped to [`MAX_COUNT`]; the store is read in
//! pages of at most [`PAGE`] pairs, because a scan of the store returns values as well.
//! With MATCH, the walk starts at the pattern's literal prefix and stops when keys pass it.
//!
//! On an engine whose index cannot scan (`dram:hash`), SCAN answers an error that says so,
//! never a partial walk.
//!
//! Thread-safety: takes no key locks; reads the store like any scan.

use std::ops::Bound;

use super::{CmdError, CmdResult, Ctx, is, msg, parse_int};
use crate::encoding::{self, Stored};
use crate::expiry;
use crate::glob;
use crate::resp::Args;

/// Largest COUNT honoured (COUNT is a hint in Redis too).
pub const MAX_COUNT: usize = 10_000;
/// Pairs read from the store per step.
pub const PAGE: usize = 32;
/// COUNT when none is given (as in Redis).
const DEFAULT_COUNT: usize = 10;

/// The TYPE filter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum TypeFilter {
    Any,
    String,
    Hash,
    /// A Redis type this server never stores (list, set, ...): nothing matches.
    Never,
}

struct ScanOptions<'a> {
    pattern: Option<&'a [u8]>,
    count: usize,
    type_filter: TypeFilter,
}

fn parse_options<'a>(args: Args<'a>) -> Result<ScanOptions<'a>, CmdError> {
    let mut o = ScanOptions {
        pattern: None,
        count: DEFAULT_COUNT,
        type_filter: TypeFilter::Any,
    };
    let mut i = 2;
    while i < args.len() {
        let (opt, value) = (args.get(i), args.get(i + 1));
        if i + 1 >= args.len() {
            return Err(CmdError::new(msg::SYNTAX));
        }
        if is(opt, "MATCH") {
            o.pattern = Some(value).filter(|p| *p != b"*");
        } else if is(opt, "COUNT") {
            let n = parse_int(value)?;
            if n < 1 {
                return Err(CmdError::new(msg::SYNTAX));
            }
            o.count = usize::try_from(n).unwrap_or(MAX_COUNT).min(MAX_COUNT);
        } else if is(opt, "TYPE") {
            o.type_filter = type_filter(value)?;
        } else {
            return Err(CmdError::new(msg::SYNTAX));
        }
        i += 2;
    }
    Ok(o)
}

fn type_filter(name: &[u8]) -> Result<TypeFilter, CmdError> {
    Ok(if is(name, "string") {
        TypeFilter::String
    } else if is(name, "hash") {
        TypeFilter::Hash
    } else if ["list", "set", "zset", "stream"]
        .iter()
        .any(|t| is(name, t))
    {
        TypeFilter::Never
    } else {
        return Err(CmdError::new(format!(
            "ERR unknown type name '{}'",
            String::from_utf8_lossy(name)
        )));
    })
}

/// Where the walk starts: the cursor's key, moved up to the pattern's literal prefix.
fn start_key(ctx: &Ctx<'_>, cursor_arg: &[u8], prefix: &[u8]) -> Result<Vec<u8>, CmdError> {
    let cursor = std::str::from_utf8(cursor_arg)
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .ok_or_else(|| CmdError::new("ERR invalid cursor"))?;
    let from = if cursor == 0 {
        Vec::new()
    } else {
        ctx.shared.cursors.get(cursor).ok_or_else(|| {
            CmdError::new(
                "ERR invalid cursor: this server does not know it (it expired or comes from an \
                 earlier run); start the scan again from 0",
            )
        })?
    };
    Ok(if from.as_slice() < prefix {
        prefix.to_vec()
    } else {
        from
    })
}

/// SCAN cursor [MATCH pattern] [COUNT count] [TYPE type]
pub(crate) fn scan(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    let o = parse_options(args)?;
    let prefix = o.pattern.map(glob::literal_prefix).unwrap_or_default();
    let mut from = Bound::Included(start_key(ctx, args.get(1), &prefix)?);
    let mut keys = Vec::new();
    let mut examined = 0;
    let mut last: Option<Vec<u8>> = None;
    while examined < o.count {
        let want = (o.count - examined).min(PAGE);
        let rows = scan_store(ctx, from, want)?;
        let full = rows.len() == want;
        examined += rows.len();
        for (k, v) in rows {
            if !k.starts_with(&prefix) {
                last = None;
                examined = o.count;
                break;
            }
            if wanted(&o, &k, &v)? {
                keys.push(k.clone());
            }
            last = Some(k);
        }
        match (&last, full) {
            (Some(k), true) => from = Bound::Excluded(k.clone()),
            _ => {
                last = None;
                break;
            }
        }
    }
    let cursor = last.map_or(0, |mut k| {
        k.push(0);
        ctx.shared.cursors.insert(&k)
    });
    ctx.out.array(2);
    ctx.out.bulk(cursor.to_string().as_bytes());
    ctx.out.array(keys.len());
    for k in &keys {
        ctx.out.bulk(k);
    }
    Ok(())
}

fn wanted(o: &ScanOptions<'_>, key: &[u8], value: &[u8]) -> Result<bool, CmdError> {
    if o.pattern.is_some_and(|p| !glob::matches(p, key)) {
        return Ok(false);
    }
    let (deadline, _) = encoding::split_expiry(value)?;
    if expiry::expired(deadline, expiry::now_ms()) {
        return Ok(false);
    }
    Ok(match o.type_filter {
        TypeFilter::Any => true,
        TypeFilter::Never => false,
        TypeFilter::String => matches!(encoding::decode(value)?, Stored::Str(_)),
        TypeFilter::Hash => matches!(encoding::decode(value)?, Stored::Hash(_)),
    })
}

/// A page of the store from `from`, or the error that says this engine cannot scan.
fn scan_store(
    ctx: &Ctx<'_>,
    from: Bound<Vec<u8>>,
    limit: usize,
) -> Result<Vec<tierkv::KvPair>, CmdError> {
    ctx.shared
        .db
        .scan((from, Bound::Unbounded), limit)
        .map_err(|e| match e {
            tierkv::Error::Unsupported(_) => unsupported(ctx),
            other => CmdError::from(other),
        })
}

fn unsupported(ctx: &Ctx<'_>) -> CmdError {
    CmdError::new(format!(
        "ERR SCAN is not supported by the {} engine: its index is unordered (use an ordered \
         engine, such as dram:btree, to scan)",
        ctx.shared.db.spec()
    ))
}

/// KEYS pattern: every live key matching the pattern, in key order (ordered engines only;
/// bounded by `max_reply_bytes`).
pub(crate) fn keys(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    let pattern = args.get(1);
    let prefix = glob::literal_prefix(pattern);
    let (mark, bound) = (ctx.out.mark(), ctx.max_reply_bytes());
    let mut found: Vec<Vec<u8>> = Vec::new();
    let mut bytes = 0usize;
    let mut from = Bound::Included(prefix.clone());
    let now = expiry::now_ms();
    'walk: loop {
        let rows = scan_store(ctx, from, PAGE * 32)?;
        let full = rows.len() == PAGE * 32;
        let mut last = None;
        for (k, v) in rows {
            if !k.starts_with(&prefix) {
                break 'walk;
            }
            let (deadline, _) = encoding::split_expiry(&v)?;
            if glob::matches(pattern, &k) && !expiry::expired(deadline, now) {
                bytes += k.len() + 16;
                if bytes > bound {
                    return Err(super::strings::reply_too_large(bound));
                }
                found.push(k.clone());
            }
            last = Some(k);
        }
        match last {
            Some(k) if full => from = Bound::Excluded(k),
            _ => break,
        }
    }
    ctx.out.truncate(mark);
    ctx.out.array(found.len());
    for k in &found {
        ctx.out.bulk(k);
    }
    Ok(())
}

/// RANDOMKEY: a live key chosen by scanning from a random point of the key space (keys
/// after long gaps are likelier, unlike Redis's uniform choice); null when there is none.
pub(crate) fn randomkey(ctx: &mut Ctx<'_>, _args: Args<'_>) -> CmdResult {
    let seed = expiry::now_ms().wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ ctx.session.id;
    let start = seed.to_le_bytes().to_vec();
    let now = expiry::now_ms();
    for from in [Bound::Included(start), Bound::Unbounded] {
        let rows = scan_store(ctx, from, PAGE)?;
        for (k, v) in rows {
            let (deadline, _) = encoding::split_expiry(&v)?;
            if !expiry::expired(deadline, now) {
                ctx.out.bulk(&k);
                return Ok(());
            }
        }
    }
    ctx.out.null();
    Ok(())
}

/// HSCAN key cursor [MATCH pattern] [COUNT count] [NOVALUES]: a hash is one stored value,
/// so the whole (matching) hash comes back in one page with cursor 0, as Redis does for
/// small hashes.
pub(crate) fn hscan(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    let cursor = std::str::from_utf8(args.get(2))
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .ok_or_else(|| CmdError::new("ERR invalid cursor"))?;
    let mut pattern = None;
    let mut novalues = false;
    let mut i = 3;
    while i < args.len() {
        let opt = args.get(i);
        if is(opt, "NOVALUES") {
            novalues = true;
            i += 1;
            continue;
        }
        if i + 1 >= args.len() {
            return Err(CmdError::new(msg::SYNTAX));
        }
        if is(opt, "MATCH") {
            pattern = Some(args.get(i + 1)).filter(|p| *p != b"*");
        } else if is(opt, "COUNT") {
            if parse_int(args.get(i + 1))? < 1 {
                return Err(CmdError::new(msg::SYNTAX));
            }
        } else {
            return Err(CmdError::new(msg::SYNTAX));
        }
        i += 2;
    }
    let stored = ctx.load(args.get(1))?;
    let hash = stored.as_deref().map(super::as_hash).transpose()?;
    let pairs: Vec<(&[u8], &[u8])> = match hash {
        Some(h) if cursor == 0 => h
            .iter()
            .filter(|(f, _)| pattern.is_none_or(|p| glob::matches(p, f)))
            .collect(),
        _ => Vec::new(),
    };
    ctx.out.array(2);
    ctx.out.bulk(b"0");
    ctx.out.array(pairs.len() * if novalues { 1 } else { 2 });
    for (f, v) in pairs {
        ctx.out.bulk(f);
        if !novalues {
            ctx.out.bulk(v);
        }
    }
    Ok(())
}
