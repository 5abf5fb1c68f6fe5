//! `SCAN cursor [MATCH pattern] [COUNT count] [TYPE type]`: walks the keyspace in key order
//! on ordered engines, by index shard on unordered ones (and KEYS, RANDOMKEY, the walks
//! behind DBSIZE and FLUSHDB on those: [`cursor_db_page`]).
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
//! # Unordered engines (`dram:hash`, `dram:lockfree`, `hetermm:hash`, `hetermm:lockfree`)
//! Their store cannot scan from a key; it iterates by cursor instead
//! ([`tierkv::Db::scan_cursor`]: whole index shards per call, a `u64` cursor that is the
//! number of the next shard). SCAN's cursor there *is* the store's cursor, so no table is
//! needed and any cursor a client sends is valid (one past the last shard ends the walk).
//! A call reads whole shards until at least COUNT store keys were examined and keeps the
//! user keys of the selected database among them (the store's one keyspace also holds the
//! other databases and the elements of collections, which a walk there cannot jump over:
//! a full SCAN costs O(store keys), elements included). The guarantees are Redis's, and
//! stronger: a key present throughout is returned exactly once (it stays in its shard).
//! Rows of `--schema-prefix` bindings cannot be listed there (the schema adapter scans in
//! order): with bindings, these walks answer an error saying so.
//!
//! Thread-safety: takes no key locks; reads the store like any scan.

use std::ops::Bound;

use super::{CmdError, CmdResult, Ctx, is, msg, parse_int};
use crate::encoding::{self, Stored};
use crate::expiry;
use crate::glob;
use crate::keyspace;
use crate::resp::Args;

/// Largest COUNT honoured (COUNT is a hint in Redis too).
pub const MAX_COUNT: usize = 10_000;
/// Pairs read from the store per step.
pub const PAGE: usize = 32;
/// COUNT when none is given (as in Redis).
const DEFAULT_COUNT: usize = 10;

/// The TYPE filter: the type name keys must have (`None`: any). A Redis type this server
/// never stores (stream) matches nothing.
struct ScanOptions<'a> {
    pattern: Option<&'a [u8]>,
    count: usize,
    type_filter: Option<&'static str>,
}

fn parse_options<'a>(args: Args<'a>) -> Result<ScanOptions<'a>, CmdError> {
    let mut o = ScanOptions {
        pattern: None,
        count: DEFAULT_COUNT,
        type_filter: None,
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
            o.count = parse_count(value)?;
        } else if is(opt, "TYPE") {
            o.type_filter = Some(type_filter(value)?);
        } else {
            return Err(CmdError::new(msg::SYNTAX));
        }
        i += 2;
    }
    Ok(o)
}

fn parse_count(value: &[u8]) -> Result<usize, CmdError> {
    let n = parse_int(value)?;
    if n < 1 {
        return Err(CmdError::new(msg::SYNTAX));
    }
    Ok(usize::try_from(n).unwrap_or(MAX_COUNT).min(MAX_COUNT))
}

fn type_filter(name: &[u8]) -> Result<&'static str, CmdError> {
    ["string", "hash", "list", "set", "zset", "stream"]
        .into_iter()
        .find(|t| is(name, t))
        .ok_or_else(|| {
            CmdError::new(format!(
                "ERR unknown type name '{}'",
                String::from_utf8_lossy(name)
            ))
        })
}

/// The type name of a stored value (TYPE's reply).
pub(crate) fn type_name(value: &[u8]) -> Result<&'static str, CmdError> {
    Ok(match encoding::decode(value)? {
        Stored::Str(_) => "string",
        Stored::Hash(_) => "hash",
        Stored::Meta(m) => m.kind.name(),
    })
}

/// A cursor argument: a number as Redis reads one (any `u64`).
fn parse_cursor(arg: &[u8]) -> Result<u64, CmdError> {
    std::str::from_utf8(arg)
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .ok_or_else(|| CmdError::new("ERR invalid cursor"))
}

/// The position (a store key, inclusive) a cursor stands for: `0` is the start (the
/// empty key), any other number must be in the cursor table.
pub(crate) fn cursor_position(ctx: &Ctx<'_>, cursor_arg: &[u8]) -> Result<Vec<u8>, CmdError> {
    let cursor = parse_cursor(cursor_arg)?;
    if cursor == 0 {
        return Ok(Vec::new());
    }
    ctx.shared.cursors.get(cursor).ok_or_else(|| {
        CmdError::new(
            "ERR invalid cursor: this server does not know it (it expired or comes from an \
             earlier run); start the scan again from 0",
        )
    })
}

/// Writes the head of a scan reply: the cursor of the position `next` (where the walk
/// goes on, inclusive; `None` when it is over) and the array header of `n` items.
pub(crate) fn reply_page(ctx: &mut Ctx<'_>, next: Option<Vec<u8>>, n: usize) {
    let cursor = next.map_or(0, |k| ctx.shared.cursors.insert(&k));
    ctx.out.array(2);
    ctx.out.bulk(cursor.to_string().as_bytes());
    ctx.out.array(n);
}

/// The options of HSCAN/SSCAN/ZSCAN.
pub(crate) struct ElementScan<'a> {
    pub pattern: Option<&'a [u8]>,
    pub count: usize,
    pub novalues: bool,
}

/// Parses `[MATCH p] [COUNT n]` (and `NOVALUES` when `novalues` is allowed) from arg 3.
pub(crate) fn parse_element_scan(
    args: Args<'_>,
    novalues: bool,
) -> Result<ElementScan<'_>, CmdError> {
    let mut o = ElementScan {
        pattern: None,
        count: DEFAULT_COUNT,
        novalues: false,
    };
    let mut i = 3;
    while i < args.len() {
        let opt = args.get(i);
        if novalues && is(opt, "NOVALUES") {
            o.novalues = true;
            i += 1;
            continue;
        }
        if i + 1 >= args.len() {
            return Err(CmdError::new(msg::SYNTAX));
        }
        if is(opt, "MATCH") {
            o.pattern = Some(args.get(i + 1)).filter(|p| *p != b"*");
        } else if is(opt, "COUNT") {
            o.count = parse_count(args.get(i + 1))?;
        } else {
            return Err(CmdError::new(msg::SYNTAX));
        }
        i += 2;
    }
    Ok(o)
}

/// One page of a walk of a database's user keys.
pub(crate) struct DbPage {
    /// (user key, stored value) in key order.
    pub rows: Vec<(Vec<u8>, Vec<u8>)>,
    /// Where the walk goes on (a store key, inclusive); `None` when it is over.
    pub next: Option<Vec<u8>>,
    /// Store keys examined.
    pub examined: usize,
}

/// Reads up to `want` store pairs from the store key `from` on and keeps the user keys of
/// database `db` (internal keys skipped by jumping over their range).
pub(crate) fn db_page(
    shared: &crate::shared::Shared,
    db: u8,
    from: Vec<u8>,
    want: usize,
) -> Result<DbPage, tierkv::Error> {
    let from = from.max(keyspace::walk_start(db, b""));
    let mut page = plain_page(&shared.db, db, &from, want)?;
    super::rows::merge_rows(&shared.bindings, db, &from, &mut page, want)?;
    Ok(page)
}

/// [`db_page`] over the store's own keys (no rows of bound prefixes).
fn plain_page(
    store: &tierkv::Db,
    db: u8,
    from: &[u8],
    want: usize,
) -> Result<DbPage, tierkv::Error> {
    let rows = store.scan((Bound::Included(from.to_vec()), Bound::Unbounded), want)?;
    let (full, examined) = (rows.len() == want, rows.len());
    let mut page = DbPage {
        rows: Vec::with_capacity(rows.len()),
        next: None,
        examined,
    };
    for (k, v) in rows {
        match keyspace::user_key_of(db, &k) {
            Some(uk) => {
                page.next = Some(keyspace::after(&k));
                page.rows.push((uk.to_vec(), v));
            }
            None => {
                page.next = keyspace::walk_skip(db, &k);
                return Ok(page);
            }
        }
    }
    if !full {
        page.next = None;
    }
    Ok(page)
}

/// One step of a cursor walk (unordered engines) of a database's user keys.
pub(crate) struct CursorDbPage {
    /// (user key, stored value), in no particular order.
    pub rows: Vec<(Vec<u8>, Vec<u8>)>,
    /// The store cursor of the next step; 0 when the walk is over.
    pub next: u64,
}

/// The user keys of database `db` among the store keys of whole index shards from
/// `cursor` on, until at least `count` store keys were examined (module doc, "Unordered
/// engines"). `Unsupported` with bindings (their rows cannot be listed here).
pub(crate) fn cursor_db_page(
    shared: &crate::shared::Shared,
    db: u8,
    cursor: u64,
    count: usize,
) -> Result<CursorDbPage, tierkv::Error> {
    if !shared.bindings.is_empty() {
        return Err(tierkv::Error::Unsupported(format!(
            "the {} engine cannot list the rows of --schema-prefix bindings (its index is \
             unordered; use an ordered engine such as dram:btree)",
            shared.db.spec()
        )));
    }
    let page = shared.db.scan_cursor(cursor, count)?;
    let rows = page
        .entries
        .into_iter()
        .filter_map(|(k, v)| keyspace::user_key_of(db, &k).map(|uk| (uk.to_vec(), v)))
        .collect();
    Ok(CursorDbPage {
        rows,
        next: page.next,
    })
}

/// Calls `f` with every (user key, stored value) of database `db`, by cursor (unordered
/// engines), pages of at least `page` store keys.
pub(crate) fn cursor_walk(
    shared: &crate::shared::Shared,
    db: u8,
    page: usize,
    f: &mut dyn FnMut(Vec<u8>, Vec<u8>) -> Result<(), CmdError>,
) -> Result<(), CmdError> {
    let mut cursor = 0;
    loop {
        let p = cursor_db_page(shared, db, cursor, page).map_err(walk_error)?;
        for (k, v) in p.rows {
            f(k, v)?;
        }
        cursor = p.next;
        if cursor == 0 {
            return Ok(());
        }
    }
}

/// The error of a cursor walk (its `Unsupported` says why).
fn walk_error(e: tierkv::Error) -> CmdError {
    match e {
        tierkv::Error::Unsupported(why) => CmdError::new(format!("ERR {why}")),
        other => CmdError::from(other),
    }
}

/// SCAN on an unordered engine (module doc): the cursor is the store's.
fn scan_by_cursor(ctx: &mut Ctx<'_>, args: Args<'_>, o: &ScanOptions<'_>) -> CmdResult {
    let cursor = parse_cursor(args.get(1))?;
    let page = cursor_db_page(ctx.shared, ctx.pdb(), cursor, o.count).map_err(walk_error)?;
    let mut keys = Vec::new();
    for (k, v) in page.rows {
        if wanted(o, &k, &v)? {
            keys.push(k);
        }
    }
    ctx.out.array(2);
    ctx.out.bulk(page.next.to_string().as_bytes());
    ctx.out.array(keys.len());
    for k in &keys {
        ctx.out.bulk(k);
    }
    Ok(())
}

/// SCAN cursor [MATCH pattern] [COUNT count] [TYPE type]
pub(crate) fn scan(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    let o = parse_options(args)?;
    if !ctx.shared.db.ordered() {
        return scan_by_cursor(ctx, args, &o);
    }
    let db = ctx.pdb();
    let prefix = o.pattern.map(glob::literal_prefix).unwrap_or_default();
    let at = cursor_position(ctx, args.get(1))?;
    let mut pos = Some(at.max(keyspace::walk_start(db, &prefix)));
    let mut keys = Vec::new();
    let mut examined = 0;
    while examined < o.count
        && let Some(from) = pos.take()
    {
        let want = (o.count - examined).min(PAGE);
        let page = db_page(ctx.shared, db, from, want).map_err(|e| scan_error(ctx, e))?;
        examined += page.examined.max(1);
        pos = page.next;
        for (k, v) in page.rows {
            if !k.starts_with(&prefix) {
                pos = None;
                break;
            }
            if wanted(&o, &k, &v)? {
                keys.push(k);
            }
        }
    }
    reply_page(ctx, pos, keys.len());
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
        None => true,
        Some(t) => type_name(value)? == t,
    })
}

/// The error of a keyspace walk: on an engine that cannot scan, one that says so.
pub(crate) fn scan_error(ctx: &Ctx<'_>, e: tierkv::Error) -> CmdError {
    match e {
        tierkv::Error::Unsupported(_) => unsupported(ctx),
        other => CmdError::from(other),
    }
}

fn unsupported(ctx: &Ctx<'_>) -> CmdError {
    CmdError::new(format!(
        "ERR SCAN is not supported by the {} engine: its index is unordered (use an ordered \
         engine, such as dram:btree, to scan)",
        ctx.shared.db.spec()
    ))
}

/// KEYS pattern: every live key matching the pattern, in key order on an ordered engine,
/// in shard order on the others (bounded by `max_reply_bytes`).
pub(crate) fn keys(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    let pattern = args.get(1);
    let db = ctx.pdb();
    let prefix = glob::literal_prefix(pattern);
    let bound = ctx.max_reply_bytes();
    let mut found: Vec<Vec<u8>> = Vec::new();
    let mut bytes = 0usize;
    let now = expiry::now_ms();
    // The one filter of both walks: the pattern, the expiry, the reply bound.
    let mut offer = |k: Vec<u8>, v: &[u8]| -> Result<(), CmdError> {
        let (deadline, _) = encoding::split_expiry(v)?;
        if glob::matches(pattern, &k) && !expiry::expired(deadline, now) {
            bytes += k.len() + 16;
            if bytes > bound {
                return Err(super::strings::reply_too_large(bound));
            }
            found.push(k);
        }
        Ok(())
    };
    if !ctx.shared.db.ordered() {
        cursor_walk(ctx.shared, db, PAGE * 32, &mut |k, v| offer(k, &v))?;
    }
    let mut pos = ctx
        .shared
        .db
        .ordered()
        .then(|| keyspace::walk_start(db, &prefix));
    'walk: while let Some(from) = pos.take() {
        let page = db_page(ctx.shared, db, from, PAGE * 32).map_err(|e| scan_error(ctx, e))?;
        pos = page.next;
        for (k, v) in page.rows {
            if !k.starts_with(&prefix) {
                break 'walk;
            }
            offer(k, &v)?;
        }
    }
    ctx.out.array(found.len());
    for k in &found {
        ctx.out.bulk(k);
    }
    Ok(())
}

/// RANDOMKEY: a live key chosen by scanning from a random point of the key space (keys
/// after long gaps are likelier, unlike Redis's uniform choice; on an unordered engine: a
/// random key of the first index shards from a random one on that hold a live key of
/// the database); null when there is none.
pub(crate) fn randomkey(ctx: &mut Ctx<'_>, _args: Args<'_>) -> CmdResult {
    let db = ctx.pdb();
    let seed = expiry::now_ms().wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ ctx.session.id;
    if !ctx.shared.db.ordered() {
        return randomkey_by_cursor(ctx, db, seed);
    }
    let start = keyspace::walk_start(db, &seed.to_le_bytes());
    let now = expiry::now_ms();
    for from in [start, Vec::new()] {
        let mut pos = Some(from);
        while let Some(from) = pos.take() {
            let page = db_page(ctx.shared, db, from, PAGE).map_err(|e| scan_error(ctx, e))?;
            pos = page.next;
            for (k, v) in page.rows {
                let (deadline, _) = encoding::split_expiry(&v)?;
                if !expiry::expired(deadline, now) {
                    ctx.out.bulk(&k);
                    return Ok(());
                }
            }
        }
    }
    ctx.out.null();
    Ok(())
}

/// RANDOMKEY on an unordered engine: the walk starts at a random shard and wraps around.
fn randomkey_by_cursor(ctx: &mut Ctx<'_>, db: u8, seed: u64) -> CmdResult {
    use tierkv::core::common::index::CURSOR_SHARDS;
    let start = seed % CURSOR_SHARDS as u64;
    let now = expiry::now_ms();
    let mut cursor = start;
    let mut wrapped = false;
    loop {
        let page = cursor_db_page(ctx.shared, db, cursor, 1).map_err(walk_error)?;
        let mut live = Vec::new();
        for (k, v) in page.rows {
            let (deadline, _) = encoding::split_expiry(&v)?;
            if !expiry::expired(deadline, now) {
                live.push(k);
            }
        }
        if let Some(k) = live.get((seed >> 17) as usize % live.len().max(1)) {
            ctx.out.bulk(k);
            return Ok(());
        }
        cursor = page.next;
        if cursor == 0 {
            if wrapped || start == 0 {
                break;
            }
            wrapped = true;
        }
        if wrapped && cursor >= start {
            break;
        }
    }
    ctx.out.null();
    Ok(())
}

/// HSCAN on a format-1 (packed) hash: a hash is one stored value, so the whole (matching)
/// hash comes back in one page with cursor 0, as Redis does for small hashes.
pub(crate) fn hscan_packed(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    let o = parse_element_scan(args, true)?;
    let cursor = cursor_position(ctx, args.get(2))?;
    let stored = ctx.load(args.get(1))?;
    let hash = stored.as_deref().map(super::as_hash).transpose()?;
    let pairs: Vec<(&[u8], &[u8])> = match hash {
        Some(h) if cursor.is_empty() => h
            .iter()
            .filter(|(f, _)| o.pattern.is_none_or(|p| glob::matches(p, f)))
            .collect(),
        _ => Vec::new(),
    };
    reply_page(ctx, None, pairs.len() * if o.novalues { 1 } else { 2 });
    for (f, v) in pairs {
        ctx.out.bulk(f);
        if !o.novalues {
            ctx.out.bulk(v);
        }
    }
    Ok(())
}
