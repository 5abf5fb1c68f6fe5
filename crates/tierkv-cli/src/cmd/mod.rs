//! One function per subcommand. Each returns the process exit code or an error (printed as
//! one line by `main`).

mod batch;
mod dump;
pub mod schema;
mod stats;

use std::io::{Read, Write};

use tierkv::{Db, DurabilityMode, Error, Options, Result};

use crate::args::{DumpArgs, GetArgs, KeyArgs, LoadArgs, PutArgs, ScanArgs, StatsArgs, StoreArgs};
use crate::output::{bytes_arg, escaped, hex};

pub use batch::batch;

/// Builds `Options` from `--config` and the flags (flags win).
pub fn options(a: &StoreArgs) -> Result<Options> {
    let mut o = match &a.config {
        Some(path) => {
            let text = std::fs::read_to_string(path).map_err(|e| Error::io("read", path, e))?;
            Options::from_toml(&text)?
        }
        None => Options::default(),
    };
    if let Some(e) = &a.engine {
        o.engine.clone_from(e);
    }
    if let Some(s) = a.dram {
        o.dram_budget = s;
    }
    if let Some(p) = &a.pmem_path {
        o.pmem.dir = Some(p.clone());
    }
    if let Some(s) = a.pmem_size {
        o.pmem.size = s;
    }
    if let Some(m) = a.pmem_mode {
        o.pmem.mode = m;
    }
    if !a.flash_path.is_empty() {
        o.flash.dirs.clone_from(&a.flash_path);
    }
    if let Some(s) = a.flash_size {
        o.flash.size = s;
    }
    Ok(o)
}

/// The options for the store in `a.dir` and its manifest (`None`: the directory holds no
/// store). The engine comes from the manifest unless `--engine` or `--config` says
/// otherwise (and then it must match).
fn resolve(a: &StoreArgs) -> Result<(Options, Option<tierkv::Manifest>)> {
    let mut o = options(a)?;
    let m = tierkv::Manifest::read_from(&a.dir)?;
    if let Some(m) = &m
        && a.engine.is_none()
        && a.config.is_none()
    {
        o.engine.clone_from(&m.engine);
    }
    Ok((o, m))
}

/// Opens an existing store ([`Error::NoStore`] when the directory holds none).
pub(crate) fn open_existing(a: &StoreArgs) -> Result<Db> {
    match resolve(a)? {
        (o, Some(_)) => Db::open_existing(&a.dir, o),
        (_, None) => Err(Error::NoStore(a.dir.clone())),
    }
}

/// Opens the store, creating it if the directory holds none; refuses bad input before it
/// creates anything, and says when what is written is less durable than the store's default.
pub(crate) fn open_or_create(s: &StoreArgs) -> Result<Db> {
    let (o, manifest) = resolve(s)?;
    let db = match manifest {
        Some(_) => Db::open_existing(&s.dir, o)?,
        None => Db::open(&s.dir, o)?,
    };
    warn_if_volatile(&db);
    Ok(db)
}

/// Says on stderr when what this command writes is less durable than a store's default:
/// a volatile engine, or a pmem mode that does not survive power loss (issue 23 finding
/// 7: a weaker mode than the store was created with is never used silently).
fn warn_if_volatile(db: &Db) {
    if db.descriptor().volatile {
        eprintln!(
            "tierkv: note: engine {} keeps everything in DRAM; nothing written survives this command",
            db.spec()
        );
    }
    let Some(pool) = &db.media().pmem else {
        return;
    };
    let mode = pool.mode();
    if matches!(mode, DurabilityMode::Dax | DurabilityMode::Msync) {
        if pool_on_memory(pool.path()) {
            eprintln!(
                "tierkv: warning: pmem pool {} is on tmpfs or ramfs: {mode} writes nothing \
                 back there, so this write survives a process crash but not a power loss or \
                 reboot",
                pool.path().display()
            );
        }
        return;
    }
    let created = db.manifest().pmem.as_ref().map(|p| p.created_mode);
    let downgrade = match created {
        Some(c @ (DurabilityMode::Dax | DurabilityMode::Msync)) => format!(
            " (the store was created with pmem mode {c}; writes of this command are weaker)"
        ),
        _ => String::new(),
    };
    eprintln!(
        "tierkv: warning: pmem mode {mode}: this write is {}{downgrade}",
        mode.guarantee()
    );
}

/// Whether the pool file at `path` is on a filesystem whose page cache is the storage.
fn pool_on_memory(path: &std::path::Path) -> bool {
    path.parent()
        .is_some_and(tierkv::core::media::pmem::memory_backed)
}

pub fn put(s: &StoreArgs, a: &PutArgs) -> Result<u8> {
    let key = bytes_arg(&a.key, a.hex, "key")?;
    let value = if a.stdin {
        let mut v = Vec::new();
        std::io::stdin()
            .read_to_end(&mut v)
            .map_err(|e| Error::io("read", "<stdin>", e))?;
        v
    } else {
        bytes_arg(a.value.as_deref().unwrap_or_default(), a.hex, "value")?
    };
    let (o, manifest) = resolve(s)?;
    // Bad input is refused before a store is created for it.
    let limits = Db::limits_for(&o)?;
    limits.check_key(&key)?;
    limits.check_value(&value)?;
    let db = match manifest {
        Some(_) => Db::open_existing(&s.dir, o)?,
        None => Db::open(&s.dir, o)?,
    };
    warn_if_volatile(&db);
    db.put(&key, &value)?;
    db.close()?;
    Ok(0)
}

pub fn get(s: &StoreArgs, a: &GetArgs) -> Result<u8> {
    let key = bytes_arg(&a.key, a.hex, "key")?;
    let db = open_existing(s)?;
    let v = db.get(&key)?;
    db.close()?;
    match v {
        None => {
            eprintln!("tierkv: key not found");
            Ok(crate::EXIT_NOT_FOUND)
        }
        Some(v) => {
            let mut out = std::io::stdout().lock();
            let r = if a.hex {
                writeln!(out, "{}", hex(&v))
            } else {
                out.write_all(&v).and_then(|()| out.write_all(b"\n"))
            };
            r.and_then(|()| out.flush())
                .map_err(|e| Error::io("write", "<stdout>", e))?;
            Ok(0)
        }
    }
}

pub fn del(s: &StoreArgs, a: &KeyArgs) -> Result<u8> {
    let key = bytes_arg(&a.key, a.hex, "key")?;
    let db = open_existing(s)?;
    warn_if_volatile(&db);
    db.delete(&key)?;
    db.close()?;
    Ok(0)
}

/// Prints pairs in key order; a damaged value is reported on stderr (exit code 4) and the
/// scan goes on past it (issue 23 finding 9).
pub fn scan(s: &StoreArgs, a: &ScanArgs) -> Result<u8> {
    let start = a
        .start
        .as_deref()
        .map(|k| bytes_arg(k, a.hex, "start key"))
        .transpose()?;
    let end = a
        .end
        .as_deref()
        .map(|k| bytes_arg(k, a.hex, "end key"))
        .transpose()?;
    let db = open_existing(s)?;
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let (mut n, mut skipped) = (0usize, 0u64);
    dump::walk(&db, &start.unwrap_or_default(), &mut |item| match item {
        _ if n >= a.limit => Ok(false),
        dump::Item::Record((k, _)) if end.as_ref().is_some_and(|e| k >= *e) => Ok(false),
        dump::Item::Record((k, v)) => {
            let line = if a.hex {
                format!("{}\t{}", hex(&k), hex(&v))
            } else {
                format!("{}\t{}", escaped(&k), escaped(&v))
            };
            n += 1;
            writeln!(out, "{line}").map_err(|e| Error::io("write", "<stdout>", e))?;
            Ok(true)
        }
        dump::Item::Skipped(note) => {
            skipped += 1;
            eprintln!("tierkv: scan: skipped damaged record {note}");
            Ok(true)
        }
    })?;
    out.flush().map_err(|e| Error::io("write", "<stdout>", e))?;
    db.close()?;
    Ok(if skipped > 0 { crate::EXIT_PARTIAL } else { 0 })
}

pub fn stats(s: &StoreArgs, a: &StatsArgs) -> Result<u8> {
    let db = open_existing(s)?;
    let st = db.stats();
    db.close()?;
    if a.json {
        let text = serde_json::to_string_pretty(&st).map_err(|e| Error::invalid(e.to_string()))?;
        println!("{text}");
    } else {
        stats::print_text(&db, &st);
    }
    Ok(0)
}

pub fn check(s: &StoreArgs) -> Result<u8> {
    let db = open_existing(s)?;
    let lines = db.check()?;
    db.close()?;
    for l in lines {
        println!("ok  {l}");
    }
    println!("check passed: {}", s.dir.display());
    Ok(0)
}

pub fn dump(s: &StoreArgs, a: &DumpArgs) -> Result<u8> {
    let (o, manifest) = resolve(s)?;
    if manifest.is_none() {
        return Err(Error::NoStore(s.dir.clone()));
    }
    let mut file = match &a.out {
        Some(p) => Some(std::fs::File::create(p).map_err(|e| Error::io("create", p, e))?),
        None => None,
    };
    let mut stdout = std::io::stdout().lock();
    let out: &mut dyn Write = match file.as_mut() {
        Some(f) => f,
        None => &mut stdout,
    };
    let sum = if a.salvage {
        dump::salvage(&s.dir, &o, out, None)?
    } else {
        match Db::open_existing(&s.dir, o.clone()) {
            Ok(db) => {
                let sum = dump::dump(&db, out)?;
                db.close()?;
                sum
            }
            Err(e) if dump::salvageable(&e) => {
                eprintln!(
                    "tierkv: dump: the store does not open ({e}); salvaging its files read-only"
                );
                dump::salvage(&s.dir, &o, out, Some(&e)).map_err(|se| match se {
                    Error::Unsupported(why) => {
                        eprintln!("tierkv: dump: {why}");
                        e
                    }
                    other => other,
                })?
            }
            Err(e) => return Err(e),
        }
    };
    if let (Some(f), Some(p)) = (&file, &a.out) {
        f.sync_all().map_err(|e| Error::io("fsync", p, e))?;
    }
    eprintln!(
        "tierkv: dumped {} records, skipped {} damaged",
        sum.records, sum.skipped
    );
    Ok(if sum.skipped > 0 {
        crate::EXIT_PARTIAL
    } else {
        0
    })
}

pub fn load(s: &StoreArgs, a: &LoadArgs) -> Result<u8> {
    let mut input: Box<dyn std::io::BufRead> = match &a.input {
        Some(p) => Box::new(std::io::BufReader::new(
            std::fs::File::open(p).map_err(|e| Error::io("open", p, e))?,
        )),
        None => Box::new(std::io::stdin().lock()),
    };
    let (o, manifest) = resolve(s)?;
    let db = match manifest {
        Some(_) => Db::open_existing(&s.dir, o)?,
        None => Db::open(&s.dir, o)?,
    };
    warn_if_volatile(&db);
    let n = dump::load(&db, &mut input)?;
    db.close()?;
    eprintln!("tierkv: loaded {n} records into {}", s.dir.display());
    Ok(0)
}

pub fn engines() -> Result<u8> {
    let describe = |tiers: &[tierkv::Tier]| {
        let tiers: Vec<String> = tiers.iter().map(ToString::to_string).collect();
        if tiers.is_empty() {
            "dram only".to_owned()
        } else {
            format!("dram + {}", tiers.join(" + "))
        }
    };
    for d in tierkv::ENGINES {
        let mut tiers = describe(d.tiers);
        // Variants on other tiers than the default's (`mio:flash`).
        for (variant, t) in d.variant_tiers {
            tiers.push_str(&format!(" ({variant}: {})", describe(t)));
        }
        let limit = Db::limits_for(&Options::default().engine(d.name))?.max_value_len;
        println!(
            "{:<10} variants: {:<22} tiers: {:<22} values up to {limit} bytes. {}",
            d.name,
            d.variants.join("|"),
            tiers,
            d.summary
        );
    }
    Ok(0)
}
