//! The command-line front of `tierkv serve`: [`ServeArgs`] (clap) and [`run`].
//!
//! `run` merges the flags over the `--config FILE` over the defaults, opens the store
//! (when neither a flag nor the file names the engine, an existing store's own engine from
//! its manifest), says on stderr what it serves and how durable an acknowledged write is,
//! then serves until SIGTERM or SIGINT and shuts down gracefully (see [`crate::server`]).
//! It returns `Ok` (exit code 0) only when the store closed cleanly.
//!
//! Thread-safety: runs on the calling thread; the server gets its own runtime.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::Context;
use tierkv::{ByteSize, Db, DurabilityMode, Manifest, Options};
use tokio::signal::unix::{SignalKind, signal};

use crate::commands::info::durability;
use crate::config::{ConfigFile, ServerConfig};
use crate::server::{Server, runtime};

/// `tierkv serve`: serve a store over the Redis protocol (RESP2/RESP3).
#[derive(clap::Args, Debug, Clone, Default)]
pub struct ServeArgs {
    /// Data directory of the store (created if it holds none).
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// Engine spec, e.g. `dram:hash` [default: the store's own engine, else `prism`].
    #[arg(long, value_name = "SPEC")]
    pub engine: Option<String>,
    /// Address to listen on [default: 127.0.0.1:6379].
    #[arg(long, value_name = "ADDR")]
    pub bind: Option<SocketAddr>,
    /// Most clients connected at once [default: 10000].
    #[arg(long, value_name = "N")]
    pub max_clients: Option<usize>,
    /// TOML file with `dir`, a `[server]` table and a `[store]` table (flags override it).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Password clients must give with AUTH (prefer the config file: flags are visible in
    /// the process list).
    #[arg(long, value_name = "PASSWORD")]
    pub requirepass: Option<String>,
    /// DRAM budget of the engine (caches, buffers), e.g. `1GiB`.
    #[arg(long, value_name = "SIZE")]
    pub dram: Option<ByteSize>,
    /// Directory of the pmem pool file.
    #[arg(long, value_name = "DIR")]
    pub pmem_path: Option<PathBuf>,
    /// Size of the pmem pool, e.g. `256MiB`.
    #[arg(long, value_name = "SIZE")]
    pub pmem_size: Option<ByteSize>,
    /// Pmem durability mode: dax, msync, volatile or tracked.
    #[arg(long, value_name = "MODE")]
    pub pmem_mode: Option<DurabilityMode>,
    /// Flash directory (repeat for several devices).
    #[arg(long, value_name = "DIR")]
    pub flash_path: Vec<PathBuf>,
    /// Flash capacity per directory, e.g. `4GiB`.
    #[arg(long, value_name = "SIZE")]
    pub flash_size: Option<ByteSize>,
    /// Bind a key prefix to a schema of the store, `PREFIX=SCHEMA` (repeatable): keys
    /// under the prefix are rows, read and updated with the hash commands.
    #[arg(long, value_name = "PREFIX=SCHEMA")]
    pub schema_prefix: Vec<String>,
}

/// Everything `run` needs, resolved from flags, file and defaults.
#[derive(Debug)]
pub struct Resolved {
    /// The data directory.
    pub dir: PathBuf,
    /// The store's options.
    pub options: Options,
    /// The server's settings.
    pub config: ServerConfig,
}

impl ServeArgs {
    /// Merges the flags over the config file over the defaults.
    pub fn resolve(&self) -> anyhow::Result<Resolved> {
        let file = match &self.config {
            Some(p) => ConfigFile::load(p)?,
            None => ConfigFile::default(),
        };
        let dir =
            self.dir.clone().or_else(|| file.dir.clone()).context(
                "no data directory: give --dir DIR (or dir = \"...\" in the config file)",
            )?;
        let engine_in_file = file
            .store
            .as_ref()
            .is_some_and(|t| t.contains_key("engine"));
        let mut options = file.store_options()?;
        match &self.engine {
            Some(e) => options.engine.clone_from(e),
            None if !engine_in_file => {
                if let Some(m) = Manifest::read_from(&dir)? {
                    options.engine = m.engine;
                }
            }
            None => {}
        }
        self.apply_tier_flags(&mut options);
        let mut config = file.server;
        if let Some(b) = self.bind {
            config.bind = b;
        }
        if let Some(n) = self.max_clients {
            config.max_clients = n;
        }
        if let Some(p) = &self.requirepass {
            config.requirepass = Some(p.clone());
        }
        config
            .schema_prefixes
            .extend(self.schema_prefix.iter().cloned());
        Ok(Resolved {
            dir,
            options,
            config,
        })
    }

    fn apply_tier_flags(&self, o: &mut Options) {
        if let Some(s) = self.dram {
            o.dram_budget = s;
        }
        if let Some(p) = &self.pmem_path {
            o.pmem.dir = Some(p.clone());
        }
        if let Some(s) = self.pmem_size {
            o.pmem.size = s;
        }
        if let Some(m) = self.pmem_mode {
            o.pmem.mode = m;
        }
        if !self.flash_path.is_empty() {
            o.flash.dirs.clone_from(&self.flash_path);
        }
        if let Some(s) = self.flash_size {
            o.flash.size = s;
        }
    }
}

/// Opens the store, serves it until SIGTERM/SIGINT, shuts down gracefully.
pub fn run(args: &ServeArgs) -> anyhow::Result<()> {
    let r = args.resolve()?;
    let mode = r.options.pmem.mode;
    let db = open_store(&r.dir, r.options)?;
    eprintln!(
        "tierkv serve: {} store in {} ({})",
        db.spec(),
        db.dir().display(),
        if db.created() { "created" } else { "reopened" }
    );
    eprintln!("tierkv serve: durability: {}", durability(&db, mode));
    for spec in &r.config.schema_prefixes {
        eprintln!("tierkv serve: schema prefix {spec} (keys under the prefix are rows)");
    }
    let rt = runtime(&r.config)?;
    rt.block_on(async move {
        let server = Server::bind(db, mode, r.config).await?;
        let mut term = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
        let mut int = signal(SignalKind::interrupt()).context("installing the SIGINT handler")?;
        eprintln!("tierkv serve: listening on {}", server.local_addr()?);
        server
            .serve(async move {
                let name = tokio::select! {
                    _ = term.recv() => "SIGTERM",
                    _ = int.recv() => "SIGINT",
                };
                eprintln!(
                    "tierkv serve: {name}: finishing in-flight commands, then closing the store"
                );
            })
            .await
    })?;
    eprintln!("tierkv serve: stopped; the store is closed");
    Ok(())
}

fn open_store(dir: &Path, options: Options) -> anyhow::Result<Db> {
    let engine = options.engine.clone();
    Db::open(dir, options)
        .with_context(|| format!("opening the {engine} store in {}", dir.display()))
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        serve: ServeArgs,
    }

    #[test]
    fn flags_override_the_file_and_the_defaults() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = dir.path().join("serve.toml");
        std::fs::write(
            &cfg,
            "dir = \"/from/file\"\n[server]\nmax_clients = 5\nrequirepass = \"filepw\"\n\
             schema_prefixes = [\"user:=users\"]\n[store]\nengine = \"dram:btree\"\n",
        )
        .unwrap();
        let cli = Cli::parse_from([
            "x",
            "--config",
            cfg.to_str().unwrap(),
            "--engine",
            "dram:hash",
            "--max-clients",
            "7",
            "--pmem-size",
            "64MiB",
            "--pmem-mode",
            "volatile",
            "--schema-prefix",
            "item:=items",
            "--schema-prefix",
            "o:=orders",
        ]);
        let r = cli.serve.resolve().unwrap();
        assert_eq!(r.dir, PathBuf::from("/from/file"));
        assert_eq!(r.options.engine, "dram:hash");
        assert_eq!(r.config.max_clients, 7);
        assert_eq!(r.config.requirepass.as_deref(), Some("filepw"));
        assert_eq!(r.options.pmem.size, ByteSize::mib(64));
        assert_eq!(r.options.pmem.mode, DurabilityMode::Volatile);
        assert_eq!(r.config.bind.to_string(), crate::config::DEFAULT_BIND);
        assert_eq!(
            r.config.schema_prefixes,
            ["user:=users", "item:=items", "o:=orders"],
            "the flags add to the file's bindings"
        );
    }

    #[test]
    fn missing_dir_is_a_clear_error() {
        let cli = Cli::parse_from(["x"]);
        let e = cli.serve.resolve().unwrap_err().to_string();
        assert!(e.contains("--dir"), "{e}");
    }

    #[test]
    fn existing_store_engine_is_the_default() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path(), Options::default().engine("dram:hash")).unwrap();
        drop(db);
        let cli = Cli::parse_from(["x", "--dir", dir.path().to_str().unwrap()]);
        assert_eq!(cli.serve.resolve().unwrap().options.engine, "dram:hash");
    }
}
