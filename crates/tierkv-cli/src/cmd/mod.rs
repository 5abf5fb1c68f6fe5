//! One function per subcommand. Each returns the process exit code or an error (printed as
//! one line by `main`).

pub mod schema;

use std::io::{Read, Write};

use tierkv::{Db, Error, Options, Result};

use crate::args::{GetArgs, KeyArgs, PutArgs, ScanArgs, StatsArgs, StoreArgs};
use crate::output::{bytes_arg, escaped, hex};

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

/// Opens an existing store; the engine comes from the manifest unless `--engine` says
/// otherwise (and then it must match).
pub(crate) fn open_existing(a: &StoreArgs) -> Result<Db> {
    let mut o = options(a)?;
    if a.engine.is_none() && a.config.is_none() {
        match tierkv::Manifest::read_from(&a.dir) {
            Ok(Some(m)) => o.engine = m.engine,
            Ok(None) => return Err(Error::NoStore(a.dir.clone())),
            Err(e) => return Err(e),
        }
    }
    Db::open_existing(&a.dir, o)
}

/// Opens the store, creating it if the directory holds none (with a note when the engine
/// is volatile).
pub(crate) fn open_or_create(s: &StoreArgs) -> Result<Db> {
    let db = if tierkv::Manifest::read_from(&s.dir)?.is_some() {
        open_existing(s)?
    } else {
        Db::open(&s.dir, options(s)?)?
    };
    warn_if_volatile(&db);
    Ok(db)
}

fn warn_if_volatile(db: &Db) {
    if db.descriptor().volatile {
        eprintln!(
            "tierkv: note: engine {} keeps everything in DRAM; nothing written survives this command",
            db.spec()
        );
    }
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
    let db = open_or_create(s)?;
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
    db.delete(&key)?;
    db.close()?;
    Ok(0)
}

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
    let start = start.unwrap_or_default();
    let rows = match &end {
        Some(e) => db.scan(start.as_slice()..e.as_slice(), a.limit)?,
        None => db.scan(start.as_slice().., a.limit)?,
    };
    db.close()?;
    let mut out = std::io::stdout().lock();
    for (k, v) in rows {
        let line = if a.hex {
            format!("{}\t{}", hex(&k), hex(&v))
        } else {
            format!("{}\t{}", escaped(&k), escaped(&v))
        };
        writeln!(out, "{line}").map_err(|e| Error::io("write", "<stdout>", e))?;
    }
    Ok(0)
}

pub fn stats(s: &StoreArgs, a: &StatsArgs) -> Result<u8> {
    let db = open_existing(s)?;
    let st = db.stats();
    db.close()?;
    if a.json {
        let text = serde_json::to_string_pretty(&st).map_err(|e| Error::invalid(e.to_string()))?;
        println!("{text}");
    } else {
        println!("engine {} in {}", db.spec(), db.dir().display());
        for (k, v) in st.flatten() {
            if v.fract() == 0.0 {
                println!("{k:<28} {v:.0}");
            } else {
                println!("{k:<28} {v:.4}");
            }
        }
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

pub fn engines() -> Result<u8> {
    for d in tierkv::ENGINES {
        let tiers: Vec<String> = d.tiers.iter().map(ToString::to_string).collect();
        let tiers = if tiers.is_empty() {
            "dram only".to_owned()
        } else {
            format!("dram + {}", tiers.join(" + "))
        };
        println!(
            "{:<10} variants: {:<22} tiers: {:<22} {}",
            d.name,
            d.variants.join("|"),
            tiers,
            d.summary
        );
    }
    Ok(0)
}
