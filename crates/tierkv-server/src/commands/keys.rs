//! Keyspace commands: DEL, UNLINK, EXISTS, TYPE, DBSIZE.
//!
//! DBSIZE never answers a wrong number. On an ordered engine it counts the keys by walking
//! a scan (O(keys); the count is exact for the keys that existed throughout the walk). On
//! an engine that cannot scan it takes the engine's `keys` counter from `stats()` when the
//! engine reports one; otherwise it answers an error saying so.
//!
//! Thread-safety: handlers run concurrently on worker threads; DEL and EXISTS under the
//! key locks, DBSIZE without (it reads the store as a scan would).

use std::ops::Bound;

use super::{CmdError, CmdResult, Ctx};
use crate::encoding::{self, Stored};
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
            // NOTE: `delete` does not say whether the key existed; DEL must.
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
        if ctx.load(key)?.is_some() {
            n += 1;
        }
    }
    ctx.out.int(n);
    Ok(())
}

/// TYPE key
pub(crate) fn type_of(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    let t = match ctx.load(args.get(1))? {
        None => "none",
        Some(v) => match encoding::decode(&v)? {
            Stored::Str(_) => "string",
            Stored::Hash(_) => "hash",
        },
    };
    ctx.out.simple(t);
    Ok(())
}

/// DBSIZE
pub(crate) fn dbsize(ctx: &mut Ctx<'_>, _args: Args<'_>) -> CmdResult {
    match key_count(&ctx.shared.db)? {
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

/// The number of keys, when it can be known exactly (see the module doc).
pub(crate) fn key_count(db: &tierkv::Db) -> Result<Option<u64>, tierkv::Error> {
    match count_by_scan(db) {
        Ok(n) => Ok(Some(n)),
        Err(tierkv::Error::Unsupported(_)) => Ok(db.stats().counters.get("keys").copied()),
        Err(e) => Err(e),
    }
}

fn count_by_scan(db: &tierkv::Db) -> Result<u64, tierkv::Error> {
    let mut n = 0u64;
    let mut from: Bound<Vec<u8>> = Bound::Unbounded;
    loop {
        let rows = db.scan((from, Bound::Unbounded), COUNT_PAGE)?;
        let full = rows.len() == COUNT_PAGE;
        n += rows.len() as u64;
        match rows.into_iter().last() {
            Some((k, _)) if full => from = Bound::Excluded(k),
            _ => return Ok(n),
        }
    }
}

/// RENAME key newkey / RENAMENX key newkey (`nx`): moves the value and its deadline.
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
    ctx.store_with_deadline(to, &value, deadline)?;
    ctx.remove(from)?;
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

/// FLUSHDB [ASYNC | SYNC], FLUSHALL [ASYNC | SYNC]: deletes every key (all locks held, see
/// [`crate::locks`]). The engines offer no range drop yet, so this deletes key by key
/// over a scan; an engine that cannot scan gets an error saying so.
pub(crate) fn flushdb(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    match args.len() {
        1 => {}
        2 if super::is(args.get(1), "ASYNC") || super::is(args.get(1), "SYNC") => {}
        _ => return Err(CmdError::new(super::msg::SYNTAX)),
    }
    let db = &ctx.shared.db;
    loop {
        let rows = db
            .scan((Bound::<Vec<u8>>::Unbounded, Bound::Unbounded), COUNT_PAGE)
            .map_err(|e| match e {
                tierkv::Error::Unsupported(_) => CmdError::new(format!(
                    "ERR FLUSHDB is not available on the {} engine: it cannot enumerate its keys",
                    db.spec()
                )),
                other => CmdError::from(other),
            })?;
        if rows.is_empty() {
            break;
        }
        for (k, _) in rows {
            ctx.remove(&k)?;
        }
    }
    ctx.shared
        .flush_epoch
        .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
    ctx.out.ok();
    Ok(())
}

/// COPY source destination [DB 0] [REPLACE]: copies the value and its deadline.
pub(crate) fn copy(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    let (from, to) = (args.get(1), args.get(2));
    let mut replace = false;
    let mut i = 3;
    while i < args.len() {
        let opt = args.get(i);
        if super::is(opt, "REPLACE") {
            replace = true;
            i += 1;
        } else if super::is(opt, "DB") && i + 1 < args.len() {
            let db = super::parse_int(args.get(i + 1))?;
            if db != 0 {
                return Err(CmdError::new("ERR DB index is out of range"));
            }
            i += 2;
        } else {
            return Err(CmdError::new(super::msg::SYNTAX));
        }
    }
    if from == to {
        return Err(CmdError::new(
            "ERR source and destination objects are the same",
        ));
    }
    let Some((value, deadline)) = ctx.load_entry(from)? else {
        ctx.out.int(0);
        return Ok(());
    };
    if !replace && ctx.load(to)?.is_some() {
        ctx.out.int(0);
        return Ok(());
    }
    ctx.store_with_deadline(to, &value, deadline)?;
    ctx.out.int(1);
    Ok(())
}
