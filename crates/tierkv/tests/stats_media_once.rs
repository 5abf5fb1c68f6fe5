//! Every engine's per-tier byte counters through the facade equal what its media counted:
//! `Db::stats` adds the pool's and the flash devices' counters to the engine's, so an engine
//! must not add them itself. (Regression, 2026-11-26: `mio` and `prismdb` did, and every
//! pmem and flash byte they wrote was reported twice — `tierkv bench` showed mio's load at a
//! pmem write amplification of 4.9 where the pool had written 2.4 times the user bytes.)

#![allow(clippy::unwrap_used, reason = "test code: an unwrap is an assertion")]

use tierkv::{Db, ENGINES};
use tierkv_core::{ByteSize, DurabilityMode, Options, Tier};

#[test]
fn every_engine_reports_each_media_byte_once() {
    for d in ENGINES {
        let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
        let opts = Options::default()
            .engine(d.name)
            .pmem_size(ByteSize(d.min_pmem_size.max(64 << 20)))
            .pmem_mode(DurabilityMode::Volatile)
            .flash_size(ByteSize::mib(64))
            .dram_budget(ByteSize::mib(8));
        let db = Db::open(dir.path(), opts).unwrap();
        for i in 0..3000u32 {
            db.put(format!("key{i:06}").as_bytes(), &[i as u8; 700])
                .unwrap();
        }
        for i in (0..3000u32).step_by(3) {
            db.delete(format!("key{i:06}").as_bytes()).unwrap();
        }
        db.flush().unwrap();
        for i in 0..3000u32 {
            db.get(format!("key{i:06}").as_bytes()).unwrap();
        }
        // Background work may write between two readings: the engine's figure must lie
        // between the media's before and after it (twice the media's is far outside).
        let before = db.media().counters();
        let s = db.stats();
        let after = db.media().counters();
        let name = d.name;
        let within = |what: &str, got: u64, lo: u64, hi: u64| {
            assert!(
                (lo..=hi).contains(&got),
                "{name}: stats report {got} {what}, the media counted {lo}..={hi}"
            );
        };
        within(
            "pmem bytes written",
            s.pmem_bytes_written,
            before.pmem_bytes_written,
            after.pmem_bytes_written,
        );
        within(
            "pmem bytes read",
            s.pmem_bytes_read,
            before.pmem_bytes_read,
            after.pmem_bytes_read,
        );
        within(
            "pmem persists",
            s.pmem_persists,
            before.pmem_persists,
            after.pmem_persists,
        );
        within(
            "flash bytes written",
            s.flash_bytes_written,
            before.flash_bytes_written,
            after.flash_bytes_written,
        );
        within(
            "flash bytes read",
            s.flash_bytes_read,
            before.flash_bytes_read,
            after.flash_bytes_read,
        );
        within(
            "flash syncs",
            s.flash_syncs,
            before.flash_syncs,
            after.flash_syncs,
        );
        let m = after;
        if d.tiers.contains(&Tier::Pmem) {
            assert!(m.pmem_bytes_written > 0, "{name} wrote nothing to pmem");
        }
        db.close().unwrap();
    }
}
