//! Hashes bound to a schema (issue 20; FOCUS `papers/003` §IV, Table I): the keys under a
//! prefix bound with `--schema-prefix PREFIX=SCHEMA` ([`crate::bindings`]) are rows of the
//! schema, and the hash commands read and update their fields through the store's schema
//! API (`tierkv::SchemaStore`: FOCUS's own on `focus`, the consolidated adapter
//! elsewhere). The user-facing rules and the differences from Redis are in "Hashes bound
//! to a schema" in this crate's `README.md`.
//!
//! - HSET/HMSET name fields; each resolves to its field id through the schema. On a row
//!   that exists they are one `update_fields` (atomic, durable when it returns, and never
//!   losing a concurrent update of other fields: the engine's guarantee; the server does
//!   not read and rewrite the row). On a new row they are one `put_row` of every field:
//!   the named ones, the others zero bytes (fixed) or empty (variable).
//! - HGET/HMGET/HGETALL/HKEYS/HVALS/HSTRLEN/HLEN/HEXISTS/HSCAN are `get_fields` of the
//!   fields they need (HLEN and HEXISTS read one field to learn whether the row exists).
//! - HDEL is refused (a row has every field of its schema); HSETNX works per row; HINCRBY
//!   works on a variable field holding a decimal integer (read one field, update one field,
//!   under the key's lock); HINCRBYFLOAT, HRANDFIELD are refused; any other command on a
//!   bound key is `WRONGTYPE`.
//! - DEL/UNLINK, EXISTS and TYPE check each key ([`bound_delete`], [`bound_exists`]);
//!   SCAN, KEYS, DBSIZE and RANDOMKEY see rows through [`merge_rows`]; FLUSHDB/FLUSHALL
//!   remove them with [`flush_rows`].
//! - A row's key in the schema is the store key of the Redis key in its *physical*
//!   database ([`crate::keyspace::user_key`]), so databases and SWAPDB apply to rows too.
//! - Inside MULTI these commands are refused when queued (the transaction is then
//!   discarded, EXECABORT): their writes go through the schema API, which a transaction's
//!   write batch cannot hold.
//!
//! Every row command runs under the key's stripe lock like any command ([`crate::locks`]):
//! exclusive for writers, which also makes "create the row if missing" of two concurrent
//! HSETs on a new key safe. Writes touch the key's stripe, so WATCH sees them.
//!
//! Thread-safety: handlers on worker threads, as every command.

use std::sync::Arc;

use tierkv::{FieldId, FieldKind, FieldSelection, Schema, SchemaStore};

use super::{CmdError, CmdResult, CommandSpec, Ctx, Handler, msg};
use crate::bindings::{Binding, Bindings};
use crate::keyspace;
use crate::resp::Args;

/// The handler that replaces `spec`'s for this call, when one of its keys is bound.
pub(crate) fn route(ctx: &Ctx<'_>, spec: &CommandSpec, args: Args<'_>) -> Option<Handler> {
    let b = &ctx.shared.bindings;
    if b.is_empty() || !spec.keys(args).any(|k| b.of(k).is_some()) {
        return None;
    }
    Some(match spec.name {
        // These look at each key themselves; WATCH's versions cover rows (writes touch).
        "del" | "unlink" | "exists" | "type" | "watch" => return None,
        "hset" => hset,
        "hmset" => hmset,
        "hsetnx" => hsetnx,
        "hget" => hget,
        "hmget" => hmget,
        "hgetall" => hgetall,
        "hkeys" => hkeys,
        "hvals" => hvals,
        "hlen" => hlen,
        "hexists" => hexists,
        "hstrlen" => hstrlen,
        "hscan" => hscan,
        "hincrby" => hincrby,
        "hdel" => hdel,
        _ if spec.group == "hash" => unsupported_hash,
        _ => wrong_type,
    })
}

/// The error of a command that may not be queued because it names a bound key (inside
/// MULTI), if it does.
pub(crate) fn refuse_in_multi(ctx: &Ctx<'_>, spec: &CommandSpec, args: Args<'_>) -> Option<String> {
    let b = &ctx.shared.bindings;
    if b.is_empty() {
        return None;
    }
    let key = spec.keys(args).find(|k| b.of(k).is_some())?;
    Some(format!(
        "ERR {} on {}: commands on keys bound to a schema cannot be part of a transaction \
         (their writes go through the schema API, outside the transaction's write batch)",
        spec.name.to_uppercase(),
        describe(ctx, key)
    ))
}

/// "key 'user:1' (a row of schema 'users', prefix 'user:')".
fn describe(ctx: &Ctx<'_>, key: &[u8]) -> String {
    match ctx.shared.bindings.of(key) {
        Some(b) => format!(
            "key '{}' (a row of schema '{}', prefix '{}')",
            String::from_utf8_lossy(key),
            b.schema.name,
            String::from_utf8_lossy(&b.prefix)
        ),
        None => format!("key '{}'", String::from_utf8_lossy(key)),
    }
}

/// A bound key being worked on: its schema, the schema API and its row key.
struct RowRef<'s> {
    schema: &'s Arc<Schema>,
    store: &'s Arc<dyn SchemaStore>,
    key: Vec<u8>,
}

impl RowRef<'_> {
    fn id(&self) -> tierkv::SchemaId {
        self.schema.id
    }

    /// The selected values, `None` when the row does not exist.
    fn get(&self, ids: &[FieldId]) -> Result<Option<Vec<Vec<u8>>>, CmdError> {
        let sel = if ids.is_empty() {
            FieldSelection::All
        } else {
            FieldSelection::Only(ids.to_vec())
        };
        Ok(self.store.get_fields(self.id(), &self.key, &sel)?)
    }

    fn exists(&self) -> Result<bool, CmdError> {
        Ok(self.get(&[0])?.is_some())
    }
}

/// The row of the bound key `key` in the physical database `db`.
fn row_of_in<'s>(ctx: &Ctx<'s>, key: &[u8], db: u8) -> Option<RowRef<'s>> {
    let shared = ctx.shared;
    let (b, store) = (shared.bindings.of(key)?, shared.bindings.store()?);
    Some(RowRef {
        schema: &b.schema,
        store,
        key: keyspace::user_key(db, key).into_owned(),
    })
}

/// The row of the bound key `key` (in the selected database).
fn row_of<'s>(ctx: &Ctx<'s>, key: &[u8]) -> Result<Option<RowRef<'s>>, CmdError> {
    Ok(row_of_in(ctx, key, ctx.pdb()))
}

/// [`row_of`] for a handler [`route`] chose: the key is bound.
fn bound_row<'s>(ctx: &Ctx<'s>, key: &[u8]) -> Result<RowRef<'s>, CmdError> {
    row_of(ctx, key)?.ok_or_else(|| CmdError::new(msg::WRONGTYPE))
}

/// The id of the field `name`, or an error naming the schema and its fields.
fn field_id(ctx: &Ctx<'_>, key: &[u8], schema: &Schema, name: &[u8]) -> Result<FieldId, CmdError> {
    std::str::from_utf8(name)
        .ok()
        .and_then(|n| schema.field_id(n))
        .ok_or_else(|| {
            let names: Vec<&str> = schema.fields.iter().map(|f| f.name.as_str()).collect();
            CmdError::new(format!(
                "ERR unknown field '{}' of {}; its fields are: {}",
                String::from_utf8_lossy(name),
                describe(ctx, key),
                names.join(", ")
            ))
        })
}

/// Checks a value's length against its field, with Redis-style error text.
fn check_value(schema: &Schema, id: FieldId, value: &[u8]) -> CmdResult {
    let f = schema.field(id)?;
    let bad = match f.kind {
        FieldKind::Fixed { len } if value.len() != usize::from(len) => {
            format!("is fixed at {len} bytes")
        }
        FieldKind::Var { max_len } if value.len() > usize::from(max_len) => {
            format!("holds at most {max_len} bytes")
        }
        _ => return Ok(()),
    };
    Err(CmdError::new(format!(
        "ERR field '{}' of schema '{}' {bad}; the value has {} bytes",
        f.name,
        schema.name,
        value.len()
    )))
}

/// The (field id, value) pairs of `args` from index 2, checked; a field named twice keeps
/// its last value (as Redis's HSET).
fn field_pairs<'a>(
    ctx: &Ctx<'_>,
    key: &[u8],
    schema: &Schema,
    args: Args<'a>,
) -> Result<Vec<(FieldId, &'a [u8])>, CmdError> {
    if args.len() < 4 || !args.len().is_multiple_of(2) {
        return Err(CmdError::new(format!(
            "ERR wrong number of arguments for '{}' command",
            String::from_utf8_lossy(args.get(0)).to_lowercase()
        )));
    }
    let mut set: Vec<(FieldId, &[u8])> = Vec::new();
    for i in (2..args.len()).step_by(2) {
        let id = field_id(ctx, key, schema, args.get(i))?;
        let value = args.get(i + 1);
        check_value(schema, id, value)?;
        match set.iter_mut().find(|(f, _)| *f == id) {
            Some(slot) => slot.1 = value,
            None => set.push((id, value)),
        }
    }
    Ok(set)
}

/// Sets `set` on the row: `update_fields` when it exists, else `put_row` with the other
/// fields zero-filled (fixed) or empty (variable). True when the row was created.
fn write_fields(
    ctx: &Ctx<'_>,
    user_key: &[u8],
    row: &RowRef<'_>,
    set: &[(FieldId, &[u8])],
) -> Result<bool, CmdError> {
    let created = if row.store.update_fields(row.id(), &row.key, set)? {
        false
    } else {
        let mut values: Vec<Vec<u8>> = row
            .schema
            .fields
            .iter()
            .map(|f| match f.kind {
                FieldKind::Fixed { len } => vec![0; usize::from(len)],
                FieldKind::Var { .. } => Vec::new(),
            })
            .collect();
        for (id, v) in set {
            if let Some(slot) = values.get_mut(usize::from(*id)) {
                *slot = v.to_vec();
            }
        }
        let refs: Vec<&[u8]> = values.iter().map(Vec::as_slice).collect();
        row.store.put_row(row.id(), &row.key, &refs)?;
        true
    };
    ctx.shared.locks.touch(user_key);
    Ok(created)
}

/// HSET key field value [field value ...]: fields added (all of them on a new row, none on
/// an existing one: a row has every field of its schema).
fn hset(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    let key = args.get(1);
    let row = bound_row(ctx, key)?;
    let set = field_pairs(ctx, key, row.schema, args)?;
    let created = write_fields(ctx, key, &row, &set)?;
    ctx.out.int(if created { set.len() as i64 } else { 0 });
    Ok(())
}

/// HMSET key field value [field value ...]
fn hmset(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    let key = args.get(1);
    let row = bound_row(ctx, key)?;
    let set = field_pairs(ctx, key, row.schema, args)?;
    write_fields(ctx, key, &row, &set)?;
    ctx.out.ok();
    Ok(())
}

/// HSETNX key field value: 1 when it created the row, 0 when the row (hence the field)
/// exists.
fn hsetnx(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    let key = args.get(1);
    let row = bound_row(ctx, key)?;
    let set = field_pairs(ctx, key, row.schema, args)?;
    if row.exists()? {
        ctx.out.int(0);
        return Ok(());
    }
    write_fields(ctx, key, &row, &set)?;
    ctx.out.int(1);
    Ok(())
}

/// HGET key field
fn hget(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    let key = args.get(1);
    let row = bound_row(ctx, key)?;
    let id = field_id(ctx, key, row.schema, args.get(2))?;
    match row.get(&[id])?.and_then(|mut v| v.pop()) {
        Some(v) => ctx.out.bulk(&v),
        None => ctx.out.null(),
    }
    Ok(())
}

/// HMGET key field [field ...]: one `get_fields` of the distinct fields named.
fn hmget(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    let key = args.get(1);
    let row = bound_row(ctx, key)?;
    let mut asked = Vec::with_capacity(args.len() - 2);
    let mut distinct: Vec<FieldId> = Vec::new();
    for name in args.iter_from(2) {
        let id = field_id(ctx, key, row.schema, name)?;
        if !distinct.contains(&id) {
            distinct.push(id);
        }
        asked.push(id);
    }
    let values = row.get(&distinct)?;
    ctx.out.array(asked.len());
    for id in asked {
        let at = distinct.iter().position(|d| *d == id);
        match values.as_ref().zip(at).and_then(|(v, i)| v.get(i)) {
            Some(v) => ctx.out.bulk(v),
            None => ctx.out.null(),
        }
    }
    Ok(())
}

/// A row and its values (schema order; `None`: no such row).
type WholeRow<'s> = (RowRef<'s>, Option<Vec<Vec<u8>>>);

/// The whole row of a bound key (field values in schema order), if it exists.
fn whole<'s>(ctx: &Ctx<'s>, args: Args<'_>) -> Result<WholeRow<'s>, CmdError> {
    let row = bound_row(ctx, args.get(1))?;
    let values = row.get(&[])?;
    Ok((row, values))
}

/// HGETALL key: every field, in schema order (RESP3: a map).
fn hgetall(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    let (row, values) = whole(ctx, args)?;
    let values = values.unwrap_or_default();
    ctx.out.map(values.len());
    for (f, v) in row.schema.fields.iter().zip(&values) {
        ctx.out.bulk(f.name.as_bytes());
        ctx.out.bulk(v);
    }
    Ok(())
}

/// HKEYS key: the schema's field names when the row exists.
fn hkeys(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    let row = bound_row(ctx, args.get(1))?;
    if !row.exists()? {
        ctx.out.array(0);
        return Ok(());
    }
    ctx.out.array(row.schema.len());
    for f in &row.schema.fields {
        ctx.out.bulk(f.name.as_bytes());
    }
    Ok(())
}

/// HVALS key
fn hvals(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    let (_, values) = whole(ctx, args)?;
    let values = values.unwrap_or_default();
    ctx.out.array(values.len());
    for v in &values {
        ctx.out.bulk(v);
    }
    Ok(())
}

/// HLEN key: the schema's field count when the row exists, else 0.
fn hlen(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    let row = bound_row(ctx, args.get(1))?;
    let n = if row.exists()? { row.schema.len() } else { 0 };
    ctx.out.int(n as i64);
    Ok(())
}

/// HEXISTS key field: 1 when the row exists and the schema has the field (an unknown field
/// is simply absent here, not an error).
fn hexists(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    let row = bound_row(ctx, args.get(1))?;
    let known = std::str::from_utf8(args.get(2))
        .ok()
        .and_then(|n| row.schema.field_id(n))
        .is_some();
    ctx.out.int(i64::from(known && row.exists()?));
    Ok(())
}

/// HSTRLEN key field
fn hstrlen(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    let key = args.get(1);
    let row = bound_row(ctx, key)?;
    let id = field_id(ctx, key, row.schema, args.get(2))?;
    let n = row.get(&[id])?.and_then(|v| v.first().map(Vec::len));
    ctx.out.int(n.unwrap_or(0) as i64);
    Ok(())
}

/// HSCAN key cursor [MATCH p] [COUNT n] [NOVALUES]: the whole row in one page (cursor 0),
/// fields in schema order, as Redis answers for a small hash.
fn hscan(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    let o = super::scan::parse_element_scan(args, true)?;
    let cursor = super::scan::cursor_position(ctx, args.get(2))?;
    let (row, values) = whole(ctx, args)?;
    let values = if cursor.is_empty() {
        values.unwrap_or_default()
    } else {
        Vec::new()
    };
    let pairs: Vec<(&[u8], &[u8])> = row
        .schema
        .fields
        .iter()
        .zip(&values)
        .map(|(f, v)| (f.name.as_bytes(), v.as_slice()))
        .filter(|(f, _)| o.pattern.is_none_or(|p| crate::glob::matches(p, f)))
        .collect();
    super::scan::reply_page(ctx, None, pairs.len() * if o.novalues { 1 } else { 2 });
    for (f, v) in pairs {
        ctx.out.bulk(f);
        if !o.novalues {
            ctx.out.bulk(v);
        }
    }
    Ok(())
}

/// HINCRBY key field n: on a variable field holding a decimal integer (empty counts as 0);
/// a fixed field is refused (its bytes are binary, not text). The field is read and then
/// updated alone (`update_fields` of that field), under the key's exclusive lock.
fn hincrby(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    let key = args.get(1);
    let row = bound_row(ctx, key)?;
    let id = field_id(ctx, key, row.schema, args.get(2))?;
    let by = super::parse_int(args.get(3))?;
    let f = row.schema.field(id)?;
    if let FieldKind::Fixed { len } = f.kind {
        return Err(CmdError::new(format!(
            "ERR HINCRBY on field '{}' of schema '{}': a fixed field ({len} bytes) holds binary \
             values, not decimal text; only variable fields can be incremented",
            f.name, row.schema.name
        )));
    }
    let old = row
        .get(&[id])?
        .and_then(|mut v| v.pop())
        .unwrap_or_default();
    let old = if old.is_empty() {
        0
    } else {
        super::parse_i64_strict(&old)
            .ok_or_else(|| CmdError::new("ERR hash value is not an integer"))?
    };
    let new = old
        .checked_add(by)
        .ok_or_else(|| CmdError::new(msg::OVERFLOW))?;
    let text = new.to_string();
    check_value(row.schema, id, text.as_bytes())?;
    write_fields(ctx, key, &row, &[(id, text.as_bytes())])?;
    ctx.out.int(new);
    Ok(())
}

/// HDEL: refused, a row has every field of its schema.
fn hdel(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    Err(CmdError::new(format!(
        "ERR HDEL on {}: a row has every field of its schema, so fields cannot be removed; \
         set the field to another value, or DEL the row",
        describe(ctx, args.get(1))
    )))
}

/// A hash command with no meaning on a row here (HINCRBYFLOAT, HRANDFIELD).
fn unsupported_hash(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    Err(CmdError::new(format!(
        "ERR {} is not supported on {}",
        String::from_utf8_lossy(args.get(0)).to_uppercase(),
        describe(ctx, args.get(1))
    )))
}

/// Any command that is not a hash command, on a bound key.
fn wrong_type(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    let b = &ctx.shared.bindings;
    let key = args
        .iter_from(1)
        .find(|k| b.of(k).is_some())
        .unwrap_or_default();
    Err(CmdError::new(format!(
        "{} ({}: hash commands, DEL, EXISTS and TYPE only)",
        msg::WRONGTYPE,
        describe(ctx, key)
    )))
}

/// DEL of `key` if it is bound: `Some(removed)`; `None` for a key that is not.
pub(crate) fn bound_delete(ctx: &Ctx<'_>, key: &[u8]) -> Result<Option<i64>, CmdError> {
    let Some(row) = row_of(ctx, key)? else {
        return Ok(None);
    };
    if !row.exists()? {
        return Ok(Some(0));
    }
    row.store.delete_row(row.id(), &row.key)?;
    ctx.shared.locks.touch(key);
    Ok(Some(1))
}

/// Whether the bound `key` has a row in the physical database `db`; `None` for a key that
/// is not bound (WATCH across SWAPDB).
pub(crate) fn row_in(ctx: &Ctx<'_>, key: &[u8], db: u8) -> Result<Option<bool>, CmdError> {
    row_of_in(ctx, key, db).map(|row| row.exists()).transpose()
}

/// Whether the bound `key` exists; `None` for a key that is not bound.
pub(crate) fn bound_exists(ctx: &Ctx<'_>, key: &[u8]) -> Result<Option<bool>, CmdError> {
    match row_of(ctx, key)? {
        Some(row) => row.exists().map(Some),
        None => Ok(None),
    }
}

/// The store keys of the rows of binding `b` in physical database `db`: `[start, end)`.
fn row_range(b: &Binding, db: u8) -> (Vec<u8>, Option<Vec<u8>>) {
    let start = keyspace::user_key(db, &b.prefix).into_owned();
    let end = keyspace::successor(&b.prefix).map(|s| keyspace::user_key(db, &s).into_owned());
    (start, end)
}

/// Up to `limit` row keys of `b` in database `db` from `from` (inclusive) up to `until`
/// (exclusive), in key order.
fn row_keys(
    bindings: &Bindings,
    b: &Binding,
    db: u8,
    from: &[u8],
    until: Option<&[u8]>,
    limit: usize,
) -> Result<Vec<Vec<u8>>, tierkv::Error> {
    let Some(store) = bindings.store() else {
        return Ok(Vec::new());
    };
    let (start, end) = row_range(b, db);
    let lo = from.max(start.as_slice());
    let hi = match (until, end.as_deref()) {
        (Some(a), Some(e)) => Some(a.min(e)),
        (a, e) => a.or(e),
    };
    if hi.is_some_and(|h| lo >= h) {
        return Ok(Vec::new());
    }
    let rows = store.scan_fields(b.schema.id, lo, &FieldSelection::Only(vec![0]), limit)?;
    Ok(rows
        .into_iter()
        .map(|(k, _)| k)
        .take_while(|k| hi.is_none_or(|h| k.as_slice() < h))
        .collect())
}

/// Merges the rows of bound prefixes into a page of a walk of database `db` that covered
/// the store keys from `from` to `page.next` (the end of the keyspace when `None`): at
/// most `want` rows per binding; when a binding has more, the page ends after its last
/// row taken (the walk resumes there). Plain values stored under a bound prefix (written
/// before it was bound) are dropped: bound keys are rows only. A row reads as an empty
/// hash-typed value here (TYPE filters, expiry checks: rows have no TTL).
pub(crate) fn merge_rows(
    bindings: &Bindings,
    db: u8,
    from: &[u8],
    page: &mut super::scan::DbPage,
    want: usize,
) -> Result<(), tierkv::Error> {
    if bindings.is_empty() {
        return Ok(());
    }
    page.rows.retain(|(k, _)| bindings.of(k).is_none());
    let mut end = page.next.clone();
    let mut found: Vec<Vec<u8>> = Vec::new();
    for b in bindings.all() {
        let keys = row_keys(bindings, b, db, from, end.as_deref(), want)?;
        if keys.len() == want
            && let Some(last) = keys.last()
        {
            end = Some(keyspace::after(last));
        }
        found.extend(keys);
    }
    if end != page.next {
        let cut = end.clone();
        let below = |k: &[u8]| cut.as_deref().is_none_or(|c| k < c);
        page.rows.retain(|(k, _)| below(&keyspace::user_key(db, k)));
        found.retain(|k| below(k));
        page.next = end;
    }
    if found.is_empty() {
        return Ok(());
    }
    page.examined += found.len();
    let value = crate::encoding::Meta {
        count: 1,
        ..crate::encoding::Meta::new(crate::encoding::Kind::Hash, 0)
    }
    .encode();
    for k in found {
        if let Some(user) = keyspace::user_key_of(db, &k) {
            page.rows.push((user.to_vec(), value.clone()));
        }
    }
    page.rows.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(())
}

/// Deletes every row of every binding in the physical databases `dbs` (FLUSHDB,
/// FLUSHALL; all locks held): O(rows), through the schema API.
pub(crate) fn flush_rows(ctx: &Ctx<'_>, dbs: &[u8]) -> CmdResult {
    let bindings = &ctx.shared.bindings;
    let Some(store) = bindings.store() else {
        return Ok(());
    };
    for b in bindings.all() {
        for &db in dbs {
            loop {
                let keys = row_keys(bindings, b, db, &[], None, 1000)?;
                if keys.is_empty() {
                    break;
                }
                for k in &keys {
                    store.delete_row(b.schema.id, k)?;
                }
            }
        }
    }
    Ok(())
}
