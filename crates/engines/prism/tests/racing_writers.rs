//! Racing writers (issue 17): groups of threads put and delete the same keys at once while
//! readers get and scan them; reads are judged by linearizability live, and Tracked crash
//! images taken while it all runs (PWB reclamation included) must recover to a
//! linearizable state: each key the last acknowledged write, one overlapping it, or one in
//! flight. The flash device (256 MiB) is far larger than what the rounds write (a few
//! MiB), so GC never frees a chunk during a round and an image stays valid against the
//! flash state at the end of its round (as in `crash_power_failure.rs`'s extra images).

#![allow(clippy::unwrap_used, reason = "test code: an unwrap is an assertion")]

mod common;

use std::path::Path;
use std::sync::Arc;

use common::{Rig, assert_check};
use tierkv_core::format::manifest::Manifest;
use tierkv_core::media::Media;
use tierkv_core::media::pmem::{CrashImageOptions, PmemConfig, PmemPool};
use tierkv_core::{ByteSize, DurabilityMode, EmulatedLatency, EngineContext, KvStore, Options};
use tierkv_prism::PrismStore;
use tierkv_testkit::{Racing, RacingConfig, run_racing};

/// Small buffers, so that PWB reclamation runs within a round.
const SPEC: &str = "prism@pwb_count=2,pwb_size=16KiB,chunk_size=8KiB,svc_size=16KiB";

fn cfg(seed: u64) -> RacingConfig {
    RacingConfig {
        writers: 4,
        writers_per_key: 4,
        readers: 2,
        keys: 48,
        ops_per_writer: 1_200,
        seed,
        ..RacingConfig::default()
    }
}

fn seed() -> u64 {
    let seed = std::env::var("TIERKV_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x7261_6365);
    println!("seed {seed} (replay with TIERKV_TEST_SEED={seed})");
    seed
}

#[test]
fn racing_writers_are_linearizable() {
    let rig = Rig::new(SPEC, 16, 256);
    let store: Arc<dyn KvStore> = rig.create();
    let r = run_racing(&store, &cfg(seed()));
    println!("{r:?}");
    assert!(r.overlapping_writes > 20, "{r:?}");
    assert_check(&*store);
    store.close().unwrap();
}

/// Opens the store on the pool file at `path` (a crash image) and the rig's flash, in
/// Tracked mode, returning the pool too (the next round takes its image).
fn reopen(rig: &Rig, path: &Path) -> tierkv_core::Result<(Arc<PrismStore>, Arc<PmemPool>)> {
    let pool = PmemPool::open(&PmemConfig {
        path: path.to_owned(),
        size: 0,
        mode: DurabilityMode::Tracked,
        latency: EmulatedLatency::default(),
    })?;
    let options = Options::default()
        .engine(&rig.spec)
        .dram_budget(ByteSize::mib(1));
    let ctx = EngineContext {
        dir: rig.root.clone(),
        spec: options.engine_spec()?,
        options,
        manifest: Manifest {
            engine: "prism".into(),
            created_by: "tests".into(),
            pmem: None,
            flash: Vec::new(),
        },
        media: Media {
            pmem: Some(pool.clone()),
            flash: vec![rig.device()],
        },
        created: false,
    };
    Ok((PrismStore::open(&ctx)?, pool))
}

#[test]
fn racing_writers_survive_crash_images() {
    let seed = seed();
    let rig = Rig::new(SPEC, 16, 256);
    let (live, mut pool) = rig.create_with_pool();
    let mut store: Arc<dyn KvStore> = live;
    let mut racing = Racing::new(cfg(seed).keys);
    for round in 0..4u64 {
        let c = cfg(seed.wrapping_add(round));
        let path = rig.root.join(format!("img{round}.pool"));
        let opts = if round % 2 == 0 {
            CrashImageOptions::lines()
        } else {
            CrashImageOptions::torn_words()
        };
        let (cut_pool, cut_path) = (pool.clone(), path.clone());
        let mut next_pool = None;
        let (recovered, r) = racing.crash(
            store,
            &c,
            400 + round * 900,
            move || {
                cut_pool
                    .write_crash_image(seed ^ round, opts, &cut_path)
                    .unwrap()
            },
            |()| {
                let (s, p) = reopen(&rig, &path)
                    .unwrap_or_else(|e| panic!("seed {seed}, round {round}: recovery: {e}"));
                next_pool = Some(p);
                let s: Arc<dyn KvStore> = s;
                s
            },
        );
        println!("round {round}: {r:?}");
        assert_check(&*recovered);
        store = recovered;
        pool = next_pool.unwrap();
    }
    store.close().unwrap();
}
