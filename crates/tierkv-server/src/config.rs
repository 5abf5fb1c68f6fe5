//! [`ServerConfig`] (the server's own settings) and [`ConfigFile`] (the `--config FILE`,
//! TOML), with their defaults and checks.
//!
//! The file holds the data directory, a `[server]` table ([`ServerConfig`]) and a `[store]`
//! table (the store's [`tierkv::Options`], exactly as `Options::from_toml` reads them):
//!
//! ```toml
//! dir = "/var/lib/tierkv"
//! [server]
//! bind = "127.0.0.1:6379"
//! requirepass = "a long secret"
//! max_clients = 10000
//! [store]
//! engine = "dram:hash"
//! dram_budget = "1GiB"
//! ```
//!
//! Flags on the command line override the file; the file overrides the defaults. Unknown
//! keys are errors, so a typo is not silently ignored.
//!
//! Thread-safety: plain data.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail};
use serde::{Deserialize, Serialize};
use tierkv::{ByteSize, Options};

use crate::resp::ParserLimits;

/// The address `tierkv serve` listens on by default: loopback only.
pub const DEFAULT_BIND: &str = "127.0.0.1:6379";

/// The server's settings.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ServerConfig {
    /// Address to listen on.
    pub bind: SocketAddr,
    /// Most clients connected at once; one more is told `ERR max number of clients
    /// reached` and disconnected.
    pub max_clients: usize,
    /// The password of Redis's `requirepass`: when set, every command but `AUTH`, `HELLO`
    /// and `QUIT` is refused with `NOAUTH` until the client authenticates.
    pub requirepass: Option<String>,
    /// Refuse to listen on a non-loopback address without `requirepass` (as Redis's
    /// protected mode does).
    pub protected_mode: bool,
    /// Threads that run the network (the tokio reactor); 0 = half the cores (at least 1).
    pub io_threads: usize,
    /// Threads that run commands against the store; 0 = one per core for a volatile
    /// engine, four per core for a persistent one (whose writes wait on their device, so
    /// more of them should be able to wait at once).
    pub workers: usize,
    /// Run each burst's commands on the network thread that read it instead of handing
    /// it to a worker thread (`true`/`false`; unset: `true` for a volatile engine, whose
    /// calls never wait on a device and whose commands are all short, `false` for a
    /// persistent one). Inline execution saves the two thread hand-offs of a burst (see
    /// the crate README's "Threads and performance"); no worker threads are started.
    pub inline_commands: Option<bool>,
    /// Most bytes of arguments in one command (the query buffer bound).
    pub max_request_bytes: ByteSize,
    /// Most commands of one pipelined burst run as one job.
    pub max_batch_commands: usize,
    /// Output bound: above it a connection stops running commands and stops reading its
    /// socket until the client has read its replies.
    pub output_soft_limit: ByteSize,
    /// Largest single reply (an `MGET` of many large values); a larger one is replaced by
    /// an error.
    pub max_reply_bytes: ByteSize,
    /// On SIGTERM, how long a connection may take to hand its last replies to a client
    /// that does not read them.
    pub shutdown_grace_secs: u64,
    /// Key prefixes bound to schemas, each `PREFIX=SCHEMA` (see [`crate::bindings`]).
    pub schema_prefixes: Vec<String>,
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            bind: SocketAddr::from(([127, 0, 0, 1], 6379)),
            max_clients: 10_000,
            requirepass: None,
            protected_mode: true,
            io_threads: 0,
            workers: 0,
            inline_commands: None,
            max_request_bytes: ByteSize::mib(64),
            max_batch_commands: 1024,
            output_soft_limit: ByteSize::kib(256),
            max_reply_bytes: ByteSize::mib(256),
            shutdown_grace_secs: 10,
            schema_prefixes: Vec::new(),
        }
    }
}

impl ServerConfig {
    /// Checks the settings; `max_value_len` is the store's value limit.
    pub fn validate(&self, max_value_len: usize) -> anyhow::Result<()> {
        if self.max_clients == 0 {
            bail!("max_clients must be at least 1");
        }
        if self.max_batch_commands == 0 {
            bail!("max_batch_commands must be at least 1");
        }
        let req = self.max_request_bytes.bytes();
        if req == 0 || req > ParserLimits::MAX_REQUEST_BYTES as u64 {
            bail!(
                "max_request_bytes = {} must be between 1 byte and {}",
                self.max_request_bytes,
                ByteSize(ParserLimits::MAX_REQUEST_BYTES as u64)
            );
        }
        if self.output_soft_limit.bytes() < 1024 {
            bail!("output_soft_limit must be at least 1KiB");
        }
        // A reply must be able to carry one value of the largest size, plus framing.
        let need = max_value_len as u64 + 64;
        if self.max_reply_bytes.bytes() < need {
            bail!(
                "max_reply_bytes = {} cannot hold one value of the store's limit ({max_value_len} bytes)",
                self.max_reply_bytes
            );
        }
        if self.requirepass.as_deref() == Some("") {
            bail!("requirepass must not be empty (leave it out to require no password)");
        }
        if self.protected_mode && !self.bind.ip().is_loopback() && self.requirepass.is_none() {
            bail!(
                "refusing to listen on {} without a password: set requirepass (or \
                 protected_mode = false in the config file if the network is trusted)",
                self.bind
            );
        }
        Ok(())
    }

    /// The request parser's limits, for a store whose arguments are at most `max_arg`.
    pub fn parser_limits(&self, max_arg: usize) -> ParserLimits {
        ParserLimits {
            max_bulk_len: max_arg,
            max_args: 1 << 20,
            max_request_bytes: self.max_request_bytes.bytes() as usize,
            max_commands: self.max_batch_commands,
        }
    }

    /// Reactor threads to start.
    pub fn io_thread_count(&self) -> usize {
        match self.io_threads {
            0 => (cores() / 2).max(1),
            n => n,
        }
    }

    /// Worker threads to start for an engine that is `volatile` or not.
    pub fn worker_count(&self, volatile: bool) -> usize {
        match (self.workers, volatile) {
            (0, true) => cores(),
            (0, false) => 4 * cores(),
            (n, _) => n,
        }
    }

    /// True when commands run on the network threads for an engine that is `volatile`
    /// or not ([`ServerConfig::inline_commands`]).
    pub fn inline(&self, volatile: bool) -> bool {
        self.inline_commands.unwrap_or(volatile)
    }

    /// [`ServerConfig::shutdown_grace_secs`] as a duration.
    pub fn shutdown_grace(&self) -> Duration {
        Duration::from_secs(self.shutdown_grace_secs)
    }
}

fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, usize::from)
}

/// The `--config FILE`.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ConfigFile {
    /// The data directory.
    pub dir: Option<PathBuf>,
    /// The server's settings.
    pub server: ServerConfig,
    /// The store's options (`[store]`).
    pub store: Option<toml::Table>,
}

impl ConfigFile {
    /// Reads and parses a config file.
    pub fn load(path: &Path) -> anyhow::Result<ConfigFile> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading config file {}", path.display()))?;
        ConfigFile::parse(&text).with_context(|| format!("config file {}", path.display()))
    }

    /// Parses config text.
    pub fn parse(text: &str) -> anyhow::Result<ConfigFile> {
        Ok(toml::from_str(text)?)
    }

    /// The store's options from `[store]`, or the defaults.
    pub fn store_options(&self) -> anyhow::Result<Options> {
        match &self.store {
            None => Ok(Options::default()),
            Some(t) => Ok(Options::from_toml(&toml::to_string(t)?)?),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_listen_on_loopback_and_validate() {
        let c = ServerConfig::default();
        assert_eq!(c.bind.to_string(), DEFAULT_BIND);
        c.validate(1 << 20).unwrap();
    }

    #[test]
    fn file_with_all_three_parts_parses() {
        let f = ConfigFile::parse(
            "dir = \"/tmp/x\"\n[server]\nrequirepass = \"pw\"\nmax_clients = 3\n\
             max_request_bytes = \"1MiB\"\n[store]\nengine = \"dram:hash\"\n",
        )
        .unwrap();
        assert_eq!(f.dir.as_deref(), Some(Path::new("/tmp/x")));
        assert_eq!(f.server.requirepass.as_deref(), Some("pw"));
        assert_eq!(f.server.max_clients, 3);
        assert_eq!(f.server.max_request_bytes, ByteSize::mib(1));
        assert_eq!(f.store_options().unwrap().engine, "dram:hash");
    }

    #[test]
    fn commands_run_inline_for_volatile_engines_unless_configured() {
        let d = ServerConfig::default();
        assert!(d.inline(true) && !d.inline(false));
        for (text, want) in [("true", true), ("false", false)] {
            let f = ConfigFile::parse(&format!("[server]\ninline_commands = {text}\n")).unwrap();
            assert_eq!(f.server.inline(true), want);
            assert_eq!(f.server.inline(false), want);
        }
    }

    #[test]
    fn typos_are_errors() {
        assert!(ConfigFile::parse("[server]\nmax_client = 3\n").is_err());
        let f = ConfigFile::parse("[store]\nengin = \"dram\"\n").unwrap();
        assert!(f.store_options().is_err());
    }

    #[test]
    fn public_bind_without_password_is_refused() {
        let c = ServerConfig {
            bind: "0.0.0.0:6379".parse().unwrap(),
            ..ServerConfig::default()
        };
        assert!(
            c.validate(1 << 20)
                .unwrap_err()
                .to_string()
                .contains("requirepass")
        );
        let c = ServerConfig {
            requirepass: Some("pw".into()),
            ..c
        };
        c.validate(1 << 20).unwrap();
    }

    #[test]
    fn reply_bound_must_hold_one_value() {
        let c = ServerConfig {
            max_reply_bytes: ByteSize::kib(4),
            ..ServerConfig::default()
        };
        assert!(c.validate(1 << 20).is_err());
        c.validate(1000).unwrap();
    }
}
