//! # tierkv-server
//!
//! `tierkv serve`: a Redis-protocol (RESP2 and RESP3) server over any tierkv engine, so
//! that Redis clients, `redis-cli`, `redis-benchmark` and sharding proxies work unchanged
//! (DESIGN §7, issue 8). The user documentation (commands, replies, hash encoding, limits,
//! durability compared with Redis's `appendfsync`) is this crate's `README.md`.
//!
//! Map of the crate:
//! - [`resp`]: the protocol: an incremental, bounded request parser and the reply writer;
//! - `commands` (private): one module per command family, one command table;
//! - [`encoding`]: how values and collections' metadata records are encoded;
//! - [`keyspace`]: the store keys of databases and of collections' elements;
//! - [`list_chunk`]: how a list keeps 32 neighbouring elements in one store value;
//! - [`bindings`]: key prefixes bound to schemas (hashes over rows, issue 20);
//! - [`dbmap`]: which stored database holds each SELECTable one (SWAPDB);
//! - [`swaplog`]: the recent SWAPDBs, which EXEC checks watched keys against;
//! - [`locks`]: the striped lock table that makes commands atomic per key;
//! - [`expiry`]: key deadlines, lazy removal and the active sweep thread;
//! - [`reclaim`]: the walk (on the sweep thread) that deletes dead collections' elements;
//! - [`cursors`]: the resume keys of SCAN cursors;
//! - [`clients`]: the connected clients, for CLIENT LIST / CLIENT INFO;
//! - [`server`]: listener, connections, pipelining, throttling, max clients, shutdown;
//! - [`config`]: the `--config FILE` and the server's settings;
//! - [`settings`]: what CONFIG GET reports and CONFIG SET changes while it runs;
//! - [`cli`]: [`ServeArgs`] and [`run`], the front the `tierkv` binary mounts as
//!   `tierkv serve`.
//!
//! ```
//! # fn main() -> anyhow::Result<()> {
//! let dir = tempfile::tempdir()?;
//! let db = tierkv::Db::open(dir.path(), tierkv::Options::default().engine("dram:hash"))?;
//! let config = tierkv_server::ServerConfig {
//!     bind: "127.0.0.1:0".parse()?,
//!     ..Default::default()
//! };
//! let server = tierkv_server::spawn(db, tierkv::DurabilityMode::default(), config)?;
//! println!("serving on {}", server.addr());
//! server.shutdown()?; // graceful: in-flight commands finish, the store is closed
//! # Ok(()) }
//! ```

#![forbid(unsafe_code)]

pub mod bindings;
pub mod cli;
pub mod clients;
pub(crate) mod commands;
pub mod config;
pub mod cursors;
pub mod dbmap;
pub mod encoding;
pub mod expiry;
pub mod glob;
pub mod keyspace;
pub mod list_chunk;
pub mod locks;
pub mod reclaim;
pub mod resp;
pub mod server;
pub mod settings;
pub mod shared;
pub mod swaplog;

pub use cli::{ServeArgs, run};
pub use config::{ConfigFile, ServerConfig};
pub use server::{Server, ServerHandle, spawn};
