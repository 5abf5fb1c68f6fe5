//! `compaction_nice`: the compaction threads run at the nice value it adds, the flush
//! thread and the caller's threads at their own (read back from `/proc`, Linux only).

#![cfg(target_os = "linux")]
#![allow(clippy::unwrap_used, reason = "test code: an unwrap is an assertion")]

mod common;

use common::*;
use tierkv_core::KvStore;
use tierkv_core::media::pmem::DurabilityMode;

/// Nice value of every thread of this process whose name starts with `prefix`.
fn nice_of_threads(prefix: &str) -> Vec<(String, i64)> {
    let mut out = Vec::new();
    for task in std::fs::read_dir("/proc/self/task").unwrap() {
        let dir = task.unwrap().path();
        let Ok(name) = std::fs::read_to_string(dir.join("comm")) else {
            continue; // the thread ended meanwhile
        };
        let name = name.trim().to_owned();
        if !name.starts_with(prefix) {
            continue;
        }
        let Ok(stat) = std::fs::read_to_string(dir.join("stat")) else {
            continue;
        };
        // Field 19 is the nice value; the name (field 2) is in parentheses and may hold
        // spaces, so count from its closing one.
        let after = &stat[stat.rfind(')').unwrap() + 2..];
        let nice: i64 = after.split(' ').nth(16).unwrap().parse().unwrap();
        out.push((name, nice));
    }
    out
}

#[test]
fn compaction_threads_run_at_the_nice_value_the_option_adds() {
    let d = scratch_dir();
    let pool = create_pool(&d.path().join("pool"), 16 << 20, DurabilityMode::Volatile);
    let own = nice_of_threads("")
        .into_iter()
        .map(|(_, n)| n)
        .min()
        .unwrap();
    let store = open(pool, "memtable=16KiB,levels=4,compaction_nice=7", true);
    store.put(b"k", b"v").unwrap();
    // Each thread names itself and lowers its own priority as it starts: give them a
    // moment.
    let want = (own + 7).min(19);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let mut compact = nice_of_threads("mio:compact");
    let mut flush = nice_of_threads("mio:flush");
    while (compact.len() != 3 || flush.len() != 1 || compact.iter().any(|(_, n)| *n != want))
        && std::time::Instant::now() < deadline
    {
        std::thread::sleep(std::time::Duration::from_millis(5));
        compact = nice_of_threads("mio:compact");
        flush = nice_of_threads("mio:flush");
    }
    assert_eq!(
        compact.len(),
        3,
        "one compaction thread per buffer level: {compact:?}"
    );
    for (name, nice) in &compact {
        assert_eq!(*nice, want, "{name}");
    }
    assert_eq!(flush.len(), 1);
    assert_eq!(
        flush[0].1, own,
        "the flush thread keeps the opener's priority"
    );
    store.close().unwrap();
}
