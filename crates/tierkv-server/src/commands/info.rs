//! Introspection commands: INFO, COMMAND (COUNT, INFO, DOCS, LIST) and a read-only
//! CONFIG GET.
//!
//! INFO has Redis's `server`, `clients`, `memory`, `stats` and `keyspace` sections (the
//! fields clients and dashboards read) and a `tierkv` section: the engine, its durability
//! in plain words, its limits, and every counter of `Db::stats()` flattened
//! (`Stats::flatten`). `COMMAND` and `COMMAND DOCS` are generated from the command table,
//! which is what `redis-cli` needs for its hints and help. CONFIG GET answers a few
//! parameters that tools such as `redis-benchmark` ask for; nothing can be changed at run
//! time.
//!
//! Thread-safety: reads shared state only (atomics, the store's stats).

use std::fmt::Write as _;

use tierkv::{DurabilityMode, Tier};

use super::connection::REDIS_COMPAT_VERSION;
use super::keys::key_counts;
use super::{COMMANDS, CmdError, CmdResult, CommandSpec, Ctx, is, lookup, unknown_subcommand};
use crate::glob;
use crate::resp::Args;
use crate::shared::{ServerStats, Shared};

/// Writes one INFO section.
type Section = fn(&Shared, &mut String);

/// INFO's sections, in order; `default`, `all` and `everything` mean all of them.
const SECTIONS: &[(&str, Section)] = &[
    ("server", server_section),
    ("clients", clients_section),
    ("memory", memory_section),
    ("stats", stats_section),
    ("persistence", persistence_section),
    ("cpu", cpu_section),
    ("keyspace", keyspace_section),
    ("tierkv", tierkv_section),
];

/// INFO [section ...]
pub(crate) fn info(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    let everything = args.len() == 1
        || args
            .iter_from(1)
            .any(|a| is(a, "all") || is(a, "everything") || is(a, "default"));
    let mut text = String::new();
    for (name, write) in SECTIONS {
        if everything || args.iter_from(1).any(|a| is(a, name)) {
            if !text.is_empty() {
                text.push_str("\r\n");
            }
            write(ctx.shared, &mut text);
        }
    }
    ctx.out.verbatim(text.as_bytes());
    Ok(())
}

fn line(text: &mut String, key: &str, value: impl std::fmt::Display) {
    // Writing to a String cannot fail.
    let _ = write!(text, "{key}:{value}\r\n");
}

fn server_section(s: &Shared, t: &mut String) {
    let up = s.started.elapsed().as_secs();
    t.push_str("# Server\r\n");
    line(t, "redis_version", REDIS_COMPAT_VERSION);
    line(t, "tierkv_version", env!("CARGO_PKG_VERSION"));
    line(t, "redis_mode", "standalone");
    line(
        t,
        "os",
        format!("{} {}", std::env::consts::OS, std::env::consts::ARCH),
    );
    line(t, "arch_bits", usize::BITS);
    line(t, "process_id", std::process::id());
    line(t, "tcp_port", s.port);
    line(t, "uptime_in_seconds", up);
    line(t, "uptime_in_days", up / 86_400);
}

fn clients_section(s: &Shared, t: &mut String) {
    t.push_str("# Clients\r\n");
    let connected = s
        .stats
        .connected_clients
        .load(std::sync::atomic::Ordering::Relaxed);
    line(t, "connected_clients", connected);
    line(t, "maxclients", s.config.max_clients);
    line(t, "blocked_clients", 0);
}

fn memory_section(s: &Shared, t: &mut String) {
    let dram = s.db.stats().dram_bytes;
    t.push_str("# Memory\r\n");
    line(t, "used_memory", dram);
    line(t, "used_memory_human", tierkv::ByteSize(dram));
    line(
        t,
        "tierkv_note",
        "used_memory is the engine's DRAM accounting, not the process RSS",
    );
}

fn stats_section(s: &Shared, t: &mut String) {
    let st = &s.stats;
    t.push_str("# Stats\r\n");
    let rows = [
        ("total_connections_received", &st.total_connections),
        ("total_commands_processed", &st.total_commands),
        ("rejected_connections", &st.rejected_connections),
        ("keyspace_hits", &st.keyspace_hits),
        ("keyspace_misses", &st.keyspace_misses),
        ("total_net_input_bytes", &st.net_input_bytes),
        ("total_net_output_bytes", &st.net_output_bytes),
        ("tierkv_output_throttles", &st.output_throttles),
        ("tierkv_protocol_errors", &st.protocol_errors),
        ("tierkv_atomic_batches", &st.atomic_batches),
    ];
    for (name, counter) in rows {
        line(t, name, ServerStats::get(counter));
    }
    line(t, "expired_keys", ServerStats::get(&s.expiry.expired_keys));
    line(
        t,
        "tierkv_reclaimed_elements",
        ServerStats::get(&s.expiry.reclaimed_elements),
    );
}

fn persistence_section(s: &Shared, t: &mut String) {
    t.push_str("# Persistence\r\n");
    line(t, "loading", 0);
    // Every acknowledged write is in the store (see "Durability" in the README); there is
    // no RDB or AOF to speak of.
    line(t, "rdb_changes_since_last_save", 0);
    line(t, "aof_enabled", 0);
    line(
        t,
        "tierkv_persistent",
        u8::from(!s.db.descriptor().volatile),
    );
}

/// User and system CPU seconds of the process, from `/proc/self/stat` (Linux; zeros
/// elsewhere). Clock ticks are taken as 100 per second, the Linux default.
fn cpu_seconds() -> (f64, f64) {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return (0.0, 0.0);
    };
    // Fields after the parenthesised command name; utime and stime are fields 14 and 15.
    let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
            / 100.0
    };
    (ticks(11), ticks(12))
}

fn cpu_section(_s: &Shared, t: &mut String) {
    let (user, sys) = cpu_seconds();
    t.push_str("# CPU\r\n");
    line(t, "used_cpu_sys", format!("{sys:.6}"));
    line(t, "used_cpu_user", format!("{user:.6}"));
}

fn keyspace_section(s: &Shared, t: &mut String) {
    t.push_str("# Keyspace\r\n");
    // Like Redis, an empty database is not listed; neither is one that cannot be counted.
    let counts = key_counts(s).unwrap_or_default();
    for db in 0..crate::keyspace::DATABASES {
        if let Some(Some(n)) = counts.get(usize::from(s.dbmap.physical(db)))
            && *n > 0
        {
            line(
                t,
                &format!("db{db}"),
                format!("keys={n},expires=0,avg_ttl=0"),
            );
        }
    }
}

fn tierkv_section(s: &Shared, t: &mut String) {
    let limits = s.db.limits();
    t.push_str("# tierkv\r\n");
    line(t, "engine", s.db.spec());
    line(t, "engine_summary", s.db.descriptor().summary);
    line(t, "data_dir", s.db.dir().display());
    line(t, "durability", durability(&s.db, s.pmem_mode));
    line(t, "max_key_len", limits.max_key_len);
    line(t, "max_value_len", limits.max_value_len);
    // MSET, MSETNX, multi-key DEL/UNLINK and EXEC are crash-atomic only on engines with
    // atomic write batches; elsewhere their writes land one by one.
    line(
        t,
        "crash_atomic_multi_key",
        u8::from(s.db.atomic_batches() && !s.db.descriptor().volatile),
    );
    line(t, "atomic_batches", u8::from(s.db.atomic_batches()));
    for (name, value) in s.db.stats().flatten() {
        line(t, &name, value);
    }
}

/// What an acknowledged write survives, in plain words.
pub(crate) fn durability(db: &tierkv::Db, pmem_mode: DurabilityMode) -> String {
    let d = db.descriptor();
    if d.volatile {
        return format!(
            "none: the {} engine keeps everything in DRAM, nothing survives a restart",
            d.name
        );
    }
    let mut parts = Vec::new();
    if d.uses(Tier::Pmem) {
        parts.push(format!("pmem mode {pmem_mode}: {}", pmem_mode.guarantee()));
    }
    if d.uses(Tier::Flash) {
        parts.push("flash: synced (fdatasync) before the reply".to_owned());
    }
    format!("acknowledged writes are durable; {}", parts.join("; "))
}

/// COMMAND [COUNT | INFO [name ...] | DOCS [name ...] | LIST | HELP]
pub(crate) fn command(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    if args.len() == 1 {
        ctx.out.array(COMMANDS.len());
        COMMANDS.iter().for_each(|c| command_info(ctx, c));
        return Ok(());
    }
    let sub = args.get(1);
    let named = || args.iter_from(2).map(lookup);
    if is(sub, "COUNT") {
        ctx.out.int(COMMANDS.len() as i64);
    } else if is(sub, "LIST") {
        ctx.out.array(COMMANDS.len());
        COMMANDS
            .iter()
            .for_each(|c| ctx.out.bulk(c.name.as_bytes()));
    } else if is(sub, "INFO") {
        let specs: Vec<Option<&CommandSpec>> = if args.len() == 2 {
            COMMANDS.iter().map(Some).collect()
        } else {
            named().collect()
        };
        ctx.out.array(specs.len());
        for s in specs {
            match s {
                Some(c) => command_info(ctx, c),
                None => ctx.out.null(),
            }
        }
    } else if is(sub, "DOCS") {
        let specs: Vec<&CommandSpec> = if args.len() == 2 {
            COMMANDS.iter().collect()
        } else {
            named().flatten().collect()
        };
        ctx.out.map(specs.len());
        specs.into_iter().for_each(|c| command_docs(ctx, c));
    } else {
        return Err(unknown_subcommand(sub, "COMMAND"));
    }
    Ok(())
}

/// One entry of `COMMAND INFO`, in Redis 7's ten-element shape.
fn command_info(ctx: &mut Ctx<'_>, c: &CommandSpec) {
    let out = &mut *ctx.out;
    out.array(10);
    out.bulk(c.name.as_bytes());
    out.int(i64::from(c.arity));
    // `multi_now`, `allkeys` and `numkeys` steer this server's dispatcher; Redis has no
    // such flags (a `numkeys` command is Redis's `movablekeys`).
    let mut flags: Vec<_> = c
        .flags
        .iter()
        .filter(|f| !matches!(**f, "multi_now" | "allkeys" | "numkeys"))
        .collect();
    if c.has_flag("numkeys") {
        flags.push(&"movablekeys");
    }
    out.array(flags.len());
    flags.iter().for_each(|f| out.simple(f));
    out.int(i64::from(c.first_key));
    out.int(i64::from(c.last_key));
    out.int(i64::from(c.step));
    let rw = if c.has_flag("write") {
        "@write"
    } else {
        "@read"
    };
    let group = format!("@{}", c.group);
    out.array(2);
    out.simple(rw);
    out.simple(&group);
    out.array(0);
    out.array(0);
    out.array(0);
}

/// One entry of `COMMAND DOCS`.
fn command_docs(ctx: &mut Ctx<'_>, c: &CommandSpec) {
    let out = &mut *ctx.out;
    out.bulk(c.name.as_bytes());
    out.map(3);
    out.bulk(b"summary");
    out.bulk(c.summary.as_bytes());
    out.bulk(b"since");
    out.bulk(c.since.as_bytes());
    out.bulk(b"group");
    out.bulk(c.group.as_bytes());
}

/// The parameters fixed at start, with their values (CONFIG SET accepts only these values).
fn fixed_params(s: &Shared) -> Vec<(&'static str, String)> {
    vec![
        ("bind", s.config.bind.ip().to_string()),
        ("port", s.port.to_string()),
        ("databases", crate::keyspace::DATABASES.to_string()),
        ("save", String::new()),
        ("appendonly", "no".to_owned()),
        (
            "protected-mode",
            if s.config.protected_mode { "yes" } else { "no" }.to_owned(),
        ),
        ("proto-max-bulk-len", s.max_arg_len().to_string()),
        (
            "client-query-buffer-limit",
            s.config.max_request_bytes.bytes().to_string(),
        ),
    ]
}

/// The parameters CONFIG GET knows ([`crate::settings`]).
fn config_params(s: &Shared) -> Vec<(&'static str, String)> {
    let mut all = fixed_params(s);
    all.push(("maxclients", s.settings.max_clients().to_string()));
    all.extend(s.settings.accepted());
    all
}

/// CONFIG GET pattern [pattern ...] | SET parameter value [parameter value ...]
/// (REWRITE and RESETSTAT are refused)
pub(crate) fn config(ctx: &mut Ctx<'_>, args: Args<'_>) -> CmdResult {
    let sub = args.get(1);
    if is(sub, "GET") {
        if args.len() < 3 {
            return Err(CmdError::new(
                "ERR wrong number of arguments for 'config|get' command",
            ));
        }
        let found: Vec<_> = config_params(ctx.shared)
            .into_iter()
            .filter(|(name, _)| {
                args.iter_from(2)
                    .any(|p| glob::matches(&p.to_ascii_lowercase(), name.as_bytes()))
            })
            .collect();
        ctx.out.map(found.len());
        for (name, value) in found {
            ctx.out.bulk(name.as_bytes());
            ctx.out.bulk(value.as_bytes());
        }
        Ok(())
    } else if is(sub, "SET") {
        if args.len() < 4 || !args.len().is_multiple_of(2) {
            return Err(CmdError::new(
                "ERR wrong number of arguments for 'config|set' command",
            ));
        }
        let pairs: Vec<(String, String)> = (2..args.len())
            .step_by(2)
            .map(|i| {
                (
                    String::from_utf8_lossy(args.get(i)).into_owned(),
                    String::from_utf8_lossy(args.get(i + 1)).into_owned(),
                )
            })
            .collect();
        ctx.shared
            .settings
            .set(&pairs, &fixed_params(ctx.shared))
            .map_err(|e| CmdError::new(e.0))?;
        ctx.out.ok();
        Ok(())
    } else if ["REWRITE", "RESETSTAT"].iter().any(|w| is(sub, w)) {
        Err(CmdError::new(format!(
            "ERR CONFIG {} is not supported: tierkv reads its settings at start (tierkv serve --config FILE)",
            String::from_utf8_lossy(sub).to_ascii_uppercase()
        )))
    } else {
        Err(unknown_subcommand(sub, "CONFIG"))
    }
}
