//! The RocksDB peer's files on the pmem path pay the emulated pmem latency of
//! `--pmem-latency`, as the engines' pools do (`slow_pmem_env.cc`, built by `build.rs`):
//! the same nanoseconds per 64-byte line read and per persist (a WAL or table `Sync`).
//! Without it a run with emulated latency would slow every engine and not the peer.

use std::ffi::{CString, c_char, c_int};
use std::path::Path;

use anyhow::{Context, bail};
use rocksdb::Options;
use tierkv::EmulatedLatency;

// FFI to `slow_pmem_env.cc` (the one unsafe boundary of this crate).
#[allow(unsafe_code)]
unsafe extern "C" {
    /// Registers an `Env` slowing the files under `dir` and returns its number
    /// (`env=tierkv-slow-pmem-<n>`), or -1 for an empty `dir`.
    fn tierkv_slow_pmem_env(dir: *const c_char, read_ns_per_line: u32, persist_ns: u32) -> c_int;
    /// The lines read and syncs `Env` number `n` charged so far; false for no such `Env`.
    fn tierkv_slow_pmem_charged(n: c_int, lines: *mut u64, syncs: *mut u64) -> bool;
}

/// One peer's slowed pmem path: what it has charged since the peer opened.
#[derive(Debug)]
pub struct SlowPmem {
    env: c_int,
    base: Charged,
}

/// 64-byte lines read from, and syncs of, files on the pmem path.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Charged {
    /// Lines read (each paid `read_ns_per_line`).
    pub lines: u64,
    /// `Sync`, `Fsync` and `RangeSync` calls (each paid `persist_ns`).
    pub syncs: u64,
}

impl SlowPmem {
    /// What this peer's pmem files were charged since it opened.
    pub fn charged(&self) -> Charged {
        let now = charged(self.env);
        Charged {
            lines: now.lines.saturating_sub(self.base.lines),
            syncs: now.syncs.saturating_sub(self.base.syncs),
        }
    }
}

fn charged(env: c_int) -> Charged {
    let mut c = Charged::default();
    // SAFETY: both pointers are to live, writable u64s for the duration of the call.
    #[allow(unsafe_code)]
    let known = unsafe { tierkv_slow_pmem_charged(env, &mut c.lines, &mut c.syncs) };
    debug_assert!(known, "env {env} was registered by base_options");
    c
}

/// Default options whose `Env` slows every file under `pmem_dir` by `latency`, and the
/// handle that reads what it charged; plain defaults and `None` when `latency` is off.
pub fn base_options(
    pmem_dir: &Path,
    latency: EmulatedLatency,
) -> anyhow::Result<(Options, Option<SlowPmem>)> {
    let mut o = Options::default();
    if !latency.is_on() {
        return Ok((o, None));
    }
    let dir = pmem_dir
        .to_str()
        .and_then(|d| CString::new(d).ok())
        .with_context(|| format!("pmem path {} is not UTF-8 without NUL", pmem_dir.display()))?;
    // SAFETY: `dir` is a NUL-terminated string that outlives the call; the function copies
    // it and keeps nothing of ours.
    #[allow(unsafe_code)]
    let env =
        unsafe { tierkv_slow_pmem_env(dir.as_ptr(), latency.read_ns_per_line, latency.persist_ns) };
    if env < 0 {
        bail!("the pmem path {} is empty", pmem_dir.display());
    }
    let o = o
        .get_options_from_string(format!("env=tierkv-slow-pmem-{env}"))
        .context("RocksDB did not take the slowed pmem Env")?;
    Ok((
        o,
        Some(SlowPmem {
            env,
            base: charged(env),
        }),
    ))
}
