//! approx-MSC picks the range precise-MSC picks (PrismDB §5.3, Fig. 6): after a load
//! phase every fast-tier object was written once (tracked at clock 0, never pinned) and
//! one range holds many of them while another holds two; a third holds as many objects
//! read again since (hot, pinned). Both metrics must prefer the full cold range.

#![allow(clippy::unwrap_used, reason = "tests")]

mod common;

use tierkv_core::KvStore;
use tierkv_prismdb::compaction::{Trigger, candidates, compact};
use tierkv_prismdb::mapper::pin_probabilities;
use tierkv_prismdb::msc::msc;
use tierkv_prismdb::policy::{approx_stats, choose, precise_stats};

use common::Rig;

/// The tracker holds every key, as during a load where the fast tier holds about the
/// tracker's share of the keys (a fifth of them).
const SPEC: &str = "prismdb@partitions=2,bounds=k2,chunk_size=16KiB,table_size=64KiB,\
high_watermark=0.95,low_watermark=0.9,bucket_keys=16,tracker_min=100000,\
read_compactions=off,promotions=off";

fn key(i: u32) -> Vec<u8> {
    format!("k{i:05}").into_bytes()
}

#[test]
fn approx_picks_the_full_cold_range_that_precise_picks() {
    let rig = Rig::new(SPEC, 8);
    let store = rig.create();
    store.stop_background();
    let value = vec![b'v'; 200];
    for i in 0..1200 {
        store.put(&key(i), &value).unwrap();
    }
    let sh = store.shared();
    let part = sh.parts.first().unwrap();
    while compact(sh, part, Trigger::Write, true)
        .unwrap()
        .is_some_and(|o| o.demoted > 0)
    {}
    // The tables' spans, and keys of each that are not on the fast tier yet.
    let spans: Vec<Vec<Vec<u8>>> = {
        let st = part.state.read();
        assert!(st.index.is_empty(), "everything demoted");
        assert!(
            st.tables.tables.len() >= 3,
            "{} tables",
            st.tables.tables.len()
        );
        let cands = candidates(part, &st);
        cands
            .iter()
            .map(|c| {
                (0..1200)
                    .map(key)
                    .filter(|k| *k >= c.lo && c.hi.as_ref().is_none_or(|h| k < h))
                    .map(|mut k| {
                        k.push(b'x');
                        k
                    })
                    .collect()
            })
            .collect()
    };
    let fresh = |j: usize, n: usize| spans.get(j).unwrap().iter().take(n).cloned();
    // The full cold range is the partition's last, which ends at the next partition's
    // bound ("k2", outside the keys' common prefix "k0").
    let last = spans.len() - 1;
    let (sparse, cold, hot) = (0, last, 1);
    for k in fresh(sparse, 2) {
        store.put(&k, &value).unwrap();
    }
    for k in fresh(cold, 120) {
        store.put(&k, &value).unwrap();
    }
    for k in fresh(hot, 120) {
        store.put(&k, &value).unwrap();
        for _ in 0..3 {
            store.get(&k).unwrap().unwrap();
        }
    }
    let st = part.state.read();
    let cands = candidates(part, &st);
    let probs = pin_probabilities(part.tracker.lock().histogram(), sh.opts.pin_threshold);
    let precise: Vec<f64> = cands
        .iter()
        .map(|c| msc(&precise_stats(part, &st, c, &probs)))
        .collect();
    let approx: Vec<f64> = cands
        .iter()
        .map(|c| msc(&approx_stats(part, &st, c)))
        .collect();
    let argmax = |s: &[f64]| {
        s.iter()
            .enumerate()
            .max_by(|a, b| a.1.total_cmp(b.1))
            .map(|(i, _)| i)
    };
    assert_eq!(argmax(&precise), Some(cold), "precise {precise:?}");
    assert_eq!(argmax(&approx), Some(cold), "approx {approx:?}");
    for (j, a) in approx.iter().enumerate() {
        if j != cold {
            assert!(
                *a < approx[cold] / 10.0,
                "range {j} scores {a}, the full cold one {}: approx {approx:?}",
                approx[cold]
            );
        }
    }
    // The candidates' counts are exact (buckets cut at the tables' first keys).
    let est = approx_stats(part, &st, cands.get(cold).unwrap());
    assert!((est.nvm - 120.0).abs() < 1e-6, "{est:?}");
    assert!(est.pop.abs() < 1e-6, "written once: not popular: {est:?}");
    let est = approx_stats(part, &st, cands.get(hot).unwrap());
    assert!(
        (est.pop - 120.0).abs() < 1e-6,
        "read again: popular: {est:?}"
    );
    // The policy itself (k = 8 covers every candidate), never the random fallback.
    for _ in 0..20 {
        assert_eq!(choose(sh, part, &st, &cands, &probs), Some(cold));
    }
}
