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
        let rows = ctx
            .shared
            .db
            .scan((from, Bound::Unbounded), want)
            .map_err(|e| match e {
                tierkv::Error::Unsupported(_) => unsupported(ctx),
                other => CmdError::from(other),
            })?;
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

fn unsupported(ctx: &Ctx<'_>) -> CmdError {
    CmdError::new(format!(
        "ERR SCAN is not supported by the {} engine: its index is unordered (use an ordered \
         engine, such as dram:btree, to scan)",
        ctx.shared.db.spec()
    ))
}
