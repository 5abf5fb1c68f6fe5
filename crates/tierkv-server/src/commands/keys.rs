//! Keyspace commands: DEL, UNLINK, EXISTS, TYPE, DBSIZE.
//!
//! DBSIZE never answers a wrong number. It counts the selected database's keys by a walk:
//! a scan in key order on an ordered engine, a cursor iteration on an unordered one
//! ([`super::scan::cursor_walk`]; O(store keys) there, the elements of collections and the
//! other databases included, as they cannot be jumped over). The count is exact for the
//! keys that existed throughout the walk. (The engine's `keys` counter is not used: it
//! counts every store key, elements and other databases included.)
//!
//! Thread-safety: handlers run concurrently on worker threads; DEL and EXISTS under the
//! key locks, DBSIZE without (it reads the store as a scan would).

use std::ops::Bound;

use super::collection;
use super::{CmdError, CmdResult, Ctx};
use crate::encoding::{self, Stored};
use crate::keyspace;
use crate::resp::Args;

/// Pairs fetched per scan page when counting keys.
const COUNT_PAGE: usize = 1024;

/// DEL key [key ...]
/// UNLINK key [key ...] (the same: deletes are not deferred here)
///
/// The deletes of several keys form one crash-atomic batch where the engine offers it.
pub(crate) fn del(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    let mut removed = 0;
    let mut delete_all = |ctx: &mut Ctx<'_>| {
        for key in args.iter_from(1) {
            if let Some(n) = super::rows::bound_delete(ctx, key)? {
                removed += n;
                continue;
            }
            // NOTE: `delete` does not say whether the key existed; DEL must. A collection's
            // elements go with its metadata: the sweep reclaims them (crate::reclaim).
            if ctx.load(key)?.is_some() {
                ctx.remove(key)?;
                removed += 1;
            }
        }
        Ok(())
    };
    if args.len() > 2 {
        ctx.batched(delete_all)?;
    } else {
        delete_all(ctx)?;
    }
    ctx.out.int(removed);
    Ok(())
}

/// EXISTS key [key ...] (a key given twice counts twice, as in Redis)
pub(crate) fn exists(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    let mut n = 0;
    for key in args.iter_from(1) {
        let exists = match super::rows::bound_exists(ctx, key)? {
            Some(e) => e,
            None => ctx.load(key)?.is_some(),
        };
        if exists {
            n += 1;
        }
    }
    ctx.out.int(n);
    Ok(())
}

/// TYPE key
pub(crate) fn type_of(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    if let Some(exists) = super::rows::bound_exists(ctx, args.get(1))? {
        ctx.out.simple(if exists { "hash" } else { "none" });
        return Ok(());
    }
    let t = match ctx.load(args.get(1))? {
        None => "none",
        Some(v) => match encoding::decode(&v)? {
            Stored::Str(_) => "string",
            Stored::Hash(_) => "hash",
            Stored::Meta(m) => m.kind.name(),
        },
    };
    ctx.out.simple(t);
    Ok(())
}

/// DBSIZE
pub(crate) fn dbsize(ctx: &mut Ctx<'_>, _args: Args<'_>) -> CmdResult {
    match key_count(ctx.shared, ctx.pdb())? {
        Some(n) => ctx.out.int(i64::try_from(n).unwrap_or(i64::MAX)),
        None => {
            return Err(CmdError::new(format!(
                "ERR DBSIZE is not available on the {} engine: it can neither scan its keys in \
                 order nor count them",
                ctx.shared.db.spec()
            )));
        }
    }
    Ok(())
}

/// The number of keys of database `dbi`, when it can be known (see the module doc).
pub(crate) fn key_count(
    shared: &crate::shared::Shared,
    dbi: u8,
) -> Result<Option<u64>, tierkv::Error> {
    let counted = if shared.db.ordered() {
        count_by_scan(shared, dbi)
    } else {
        count_by_cursor(shared, dbi)
    };
    match counted {
        Ok(n) => Ok(Some(n)),
        Err(tierkv::Error::Unsupported(_)) => Ok(None),
        Err(e) => Err(e),
    }
}

/// The number of keys of every *physical* database (indexed by it), when they can be known:
/// on an unordered engine one walk counts them all (INFO keyspace would otherwise walk
/// the whole store once per database), on an ordered one a scan per database.
pub(crate) fn key_counts(
    shared: &crate::shared::Shared,
) -> Result<[Option<u64>; keyspace::DATABASES as usize], tierkv::Error> {
    let mut counts = [None; keyspace::DATABASES as usize];
    if shared.db.ordered() || !shared.bindings.is_empty() {
        for (db, n) in (0u8..).zip(counts.iter_mut()) {
            *n = key_count(shared, db)?;
        }
        return Ok(counts);
    }
    let mut cursor = 0;
    let mut n = [0u64; keyspace::DATABASES as usize];
    loop {
        let page = shared.db.scan_cursor(cursor, COUNT_PAGE)?;
        for (k, _) in &page.entries {
            if let Some(c) = keyspace::db_of(k).and_then(|db| n.get_mut(usize::from(db))) {
                *c += 1;
            }
        }
        cursor = page.next;
        if cursor == 0 {
            break;
        }
    }
    for (c, n) in counts.iter_mut().zip(n) {
        *c = Some(n);
    }
    Ok(counts)
}

fn count_by_cursor(shared: &crate::shared::Shared, dbi: u8) -> Result<u64, tierkv::Error> {
    let (mut n, mut cursor) = (0u64, 0u64);
    loop {
        let page = super::scan::cursor_db_page(shared, dbi, cursor, COUNT_PAGE)?;
        n += page.rows.len() as u64;
        cursor = page.next;
        if cursor == 0 {
            return Ok(n);
        }
    }
}

fn count_by_scan(shared: &crate::shared::Shared, dbi: u8) -> Result<u64, tierkv::Error> {
    let mut n = 0u64;
    let mut pos = Some(Vec::new());
    while let Some(from) = pos.take() {
        let page = super::scan::db_page(shared, dbi, from, COUNT_PAGE)?;
        n += page.rows.len() as u64;
        pos = page.next;
    }
    Ok(n)
}

/// Copies the value under `from` (current database) with its deadline to `to` in database
/// `to_db`: a string or format-1 hash as it is, a collection element by element into a
/// new generation. Does not check or remove anything.
fn copy_value(
    ctx: &mut Ctx<'_>,
    from: &[u8],
    value: &[u8],
    deadline: Option<u64>,
    to_db: u8,
    to: &[u8],
) -> CmdResult {
    let source = match encoding::decode(value)? {
        Stored::Meta(m) => collection::load(ctx, from, m.kind)?,
        _ => None,
    };
    let here = ctx.session.db;
    ctx.session.db = to_db;
    let done = match &source {
        Some(c) => collection::copy_elements(ctx, c, ctx.pdb(), to)
            .and_then(|copy| collection::save(ctx, to, &copy)),
        None => ctx.store_with_deadline(to, value, deadline),
    };
    ctx.session.db = here;
    done
}

/// RENAME key newkey / RENAMENX key newkey (`nx`): moves the value and its deadline (a
/// collection's elements are copied into a new generation under the new key, O(size);
/// the old ones are reclaimed by the sweep).
fn rename_generic(ctx: &mut Ctx<'_>, args: Args<'_>, nx: bool) -> CmdResult {
    let (from, to) = (args.get(1), args.get(2));
    let Some((value, deadline)) = ctx.load_entry(from)? else {
        return Err(CmdError::new("ERR no such key"));
    };
    if from == to {
        if nx {
            ctx.out.int(0);
        } else {
            ctx.out.ok();
        }
        return Ok(());
    }
    if nx && ctx.load(to)?.is_some() {
        ctx.out.int(0);
        return Ok(());
    }
    let db = ctx.session.db;
    ctx.batched(|ctx| {
        copy_value(ctx, from, &value, deadline, db, to)?;
        ctx.remove(from)
    })?;
    if nx {
        ctx.out.int(1);
    } else {
        ctx.out.ok();
    }
    Ok(())
}

/// RENAME key newkey
pub(crate) fn rename(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    rename_generic(ctx, args, false)
}

/// RENAMENX key newkey
pub(crate) fn renamenx(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    rename_generic(ctx, args, true)
}

/// TIME
pub(crate) fn time(ctx: &mut Ctx<'_>, _args: Args<'_>) -> CmdResult {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    ctx.out.array(2);
    ctx.out.bulk(now.as_secs().to_string().as_bytes());
    ctx.out.bulk(now.subsec_micros().to_string().as_bytes());
    Ok(())
}

/// Checks FLUSHDB/FLUSHALL's optional argument.
fn flush_args(args: Args<'_>) -> CmdResult {
    match args.len() {
        1 => Ok(()),
        2 if super::is(args.get(1), "ASYNC") || super::is(args.get(1), "SYNC") => Ok(()),
        _ => Err(CmdError::new(super::msg::SYNTAX)),
    }
}

/// Deletes every store key for which `doomed` holds, found by a cursor iteration (an
/// unordered engine: no range to drop; all locks are held by the caller): in write batches
/// of up to [`tierkv::MAX_BATCH_OPS`] keys where the engine has them, one delete per key
/// otherwise. O(store keys).
fn drop_by_cursor(ctx: &Ctx<'_>, doomed: &dyn Fn(&[u8]) -> bool) -> CmdResult {
    let db = &ctx.shared.db;
    let mut cursor = 0;
    loop {
        let page = db.scan_cursor(cursor, COUNT_PAGE)?;
        let keys: Vec<Vec<u8>> = page
            .entries
            .into_iter()
            .map(|(k, _)| k)
            .filter(|k| doomed(k))
            .collect();
        if db.atomic_batches() {
            let mut batch = tierkv::WriteBatch::new();
            for k in keys {
                if batch.len() == tierkv::MAX_BATCH_OPS
                    || batch.bytes() + k.len() > tierkv::MAX_BATCH_BYTES
                {
                    db.write(&batch)?;
                    batch.clear();
                }
                batch.delete(k);
            }
            if !batch.is_empty() {
                db.write(&batch)?;
            }
        } else {
            for k in keys {
                db.delete(&k)?;
            }
        }
        cursor = page.next;
        if cursor == 0 {
            return Ok(());
        }
    }
}

/// Deletes the store keys in `range` (all locks are held by the caller).
fn drop_range(ctx: &Ctx<'_>, range: (Bound<Vec<u8>>, Bound<Vec<u8>>)) -> CmdResult {
    let db = &ctx.shared.db;
    db.delete_range(range).map_err(|e| match e {
        tierkv::Error::Unsupported(_) => CmdError::new(format!(
            "ERR FLUSHDB is not available on the {} engine: it cannot enumerate its keys",
            db.spec()
        )),
        other => CmdError::from(other),
    })?;
    Ok(())
}

fn flushed(ctx: &mut Ctx<'_>) -> CmdResult {
    ctx.shared
        .flush_epoch
        .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
    crate::reclaim::Reclaimer::removed(&ctx.shared.expiry.removals);
    ctx.out.ok();
    Ok(())
}

/// FLUSHDB [ASYNC | SYNC]: deletes every key of the selected database (all locks held, see
/// [`crate::locks`]) with the store's range delete: database 0 is everything below and
/// above the internal range, database n its prefix. The elements of collections go with
/// their metadata: the sweep reclaims them. An unordered engine has no range delete: its
/// keys of the database are found by a cursor iteration and deleted (O(store keys)).
pub(crate) fn flushdb(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    flush_args(args)?;
    let db = ctx.pdb();
    super::rows::flush_rows(ctx, &[db])?;
    if !ctx.shared.db.ordered() {
        drop_by_cursor(ctx, &|k| keyspace::user_key_of(db, k).is_some())?;
    } else if db == 0 {
        for range in keyspace::db0_ranges() {
            drop_range(ctx, range)?;
        }
    } else {
        let prefix = keyspace::db_prefix(db);
        let end = keyspace::successor(&prefix).map_or(Bound::Unbounded, Bound::Excluded);
        drop_range(ctx, (Bound::Included(prefix), end))?;
    }
    flushed(ctx)
}

/// FLUSHALL [ASYNC | SYNC]: deletes every store key (every database, every element, the
/// database map: with every database empty, the identity map is as good as any) but the
/// schema adapters' ranges (the catalog; rows of bound prefixes go through the schema API,
/// rows of schemas not bound stay).
pub(crate) fn flushall(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    flush_args(args)?;
    let all: Vec<u8> = (0..keyspace::DATABASES).collect();
    super::rows::flush_rows(ctx, &all)?;
    let adapter: Vec<&[u8]> = keyspace::ADAPTER_PREFIXES.iter().map(|p| &p[..]).collect();
    if !ctx.shared.db.ordered() {
        drop_by_cursor(ctx, &|k| keyspace::adapter_prefix(k).is_none())?;
    }
    let ranges = if ctx.shared.db.ordered() {
        keyspace::ranges_outside(&adapter)
    } else {
        Vec::new()
    };
    for range in ranges {
        drop_range(ctx, range)?;
    }
    ctx.shared.dbmap.set(&crate::dbmap::IDENTITY);
    flushed(ctx)
}

/// SWAPDB index1 index2: exchanges two databases' contents as clients see them, by
/// exchanging their entries in the database map ([`crate::dbmap`]): one `put` of the map's
/// key, O(1) whatever the databases hold, made under every key lock (flag `allkeys`), so
/// no command sees half of it. As in Redis, keys keep their TTLs (they are stored with the
/// values, which do not move), WATCHed keys of the two databases that exist in either are
/// touched (recorded in [`crate::swaplog`], checked by EXEC) and clients blocked on a list
/// that the swap fills are woken.
pub(crate) fn swapdb(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    let index = |arg: &[u8], which: &str| {
        // Redis reads the index as a C int: anything else is "invalid".
        super::parse_i64_strict(arg)
            .filter(|n| i32::try_from(*n).is_ok())
            .ok_or_else(|| CmdError::new(format!("ERR invalid {which} DB index")))
            .and_then(|n| {
                u8::try_from(n)
                    .ok()
                    .filter(|n| *n < keyspace::DATABASES)
                    .ok_or_else(|| CmdError::new("ERR DB index is out of range"))
            })
    };
    let a = index(args.get(1), "first")?;
    let b = index(args.get(2), "second")?;
    if a != b {
        let before = ctx.shared.dbmap.get();
        let map = crate::dbmap::swapped(&before, a, b);
        let bytes = crate::dbmap::encode(&map);
        ctx.put_raw(&keyspace::dbmap_key(), &bytes)?;
        ctx.shared.dbmap.set(&map);
        let physical = [before[usize::from(a)], before[usize::from(b)]];
        ctx.shared
            .swaps
            .record([a, b], physical, crate::expiry::now_ms());
        ctx.shared.waiters.notify(a, b"");
    }
    ctx.out.ok();
    Ok(())
}

/// COPY source destination [DB n] [REPLACE]: copies the value and its deadline (a
/// collection element by element, O(size)).
pub(crate) fn copy(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    let (from, to) = (args.get(1), args.get(2));
    let mut replace = false;
    let mut to_db = ctx.session.db;
    let mut i = 3;
    while i < args.len() {
        let opt = args.get(i);
        if super::is(opt, "REPLACE") {
            replace = true;
            i += 1;
        } else if super::is(opt, "DB") && i + 1 < args.len() {
            to_db = db_index(args.get(i + 1))?;
            i += 2;
        } else {
            return Err(CmdError::new(super::msg::SYNTAX));
        }
    }
    if from == to && to_db == ctx.session.db {
        return Err(CmdError::new(
            "ERR source and destination objects are the same",
        ));
    }
    let Some((value, deadline)) = ctx.load_entry(from)? else {
        ctx.out.int(0);
        return Ok(());
    };
    let here = ctx.session.db;
    ctx.session.db = to_db;
    let occupied = ctx.load(to);
    ctx.session.db = here;
    if !replace && occupied?.is_some() {
        ctx.out.int(0);
        return Ok(());
    }
    ctx.batched(|ctx| copy_value(ctx, from, &value, deadline, to_db, to))?;
    ctx.out.int(1);
    Ok(())
}

/// MOVE key db: moves the key with its deadline to another database (a collection element
/// by element), unless it exists there.
pub(crate) fn move_key(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    let key = args.get(1);
    let to_db = db_index(args.get(2))?;
    if to_db == ctx.session.db {
        return Err(CmdError::new(
            "ERR source and destination objects are the same",
        ));
    }
    let Some((value, deadline)) = ctx.load_entry(key)? else {
        ctx.out.int(0);
        return Ok(());
    };
    let here = ctx.session.db;
    ctx.session.db = to_db;
    let occupied = ctx.load(key);
    ctx.session.db = here;
    if occupied?.is_some() {
        ctx.out.int(0);
        return Ok(());
    }
    ctx.batched(|ctx| {
        copy_value(ctx, key, &value, deadline, to_db, key)?;
        ctx.remove(key)
    })?;
    ctx.out.int(1);
    Ok(())
}

/// A database index argument (SELECT, COPY ... DB): 0 to 15.
pub(crate) fn db_index(arg: &[u8]) -> Result<u8, CmdError> {
    let n = super::parse_int(arg)?;
    u8::try_from(n)
        .ok()
        .filter(|n| *n < keyspace::DATABASES)
        .ok_or_else(|| CmdError::new("ERR DB index is out of range"))
}
