//! The same `--seed` gives the same operation stream: two single-threaded runs issue the
//! same number of each operation kind, write the same bytes and miss the same reads; another
//! seed gives another stream.

mod common;

use tierkv_ycsb::report::BenchReport;
use tierkv_ycsb::runner::progress::Progress;
use tierkv_ycsb::workload::OpKind;

/// Per workload: each kind's completed count, plus the user bytes written.
fn fingerprint(report: &BenchReport) -> Vec<(String, Vec<u64>, u64)> {
    report
        .results
        .iter()
        .map(|r| {
            let counts = OpKind::ALL
                .iter()
                .map(|k| r.ops.latency(*k).map_or(0, |h| h.count()))
                .collect();
            (
                r.phase.name().to_owned(),
                counts,
                r.counters.user_bytes_written,
            )
        })
        .collect()
}

fn run(seed: u64) -> anyhow::Result<BenchReport> {
    let tmp = tempfile::tempdir()?;
    let mut args = common::tiny_args(tmp.path(), "dram:btree");
    args.threads = Some(1);
    args.seed = seed;
    args.fields = Some(4);
    args.field_size = Some(tierkv::ByteSize(10));
    args.value_size = None;
    tierkv_ycsb::run_with(&args, &mut Vec::new(), Progress::new(false))
}

#[test]
fn the_same_seed_replays_the_same_operations() {
    let seed = 0x5eed_1000;
    println!("seed {seed:#x}");
    let (a, b, other) = (
        run(seed).unwrap(),
        run(seed).unwrap(),
        run(seed + 1).unwrap(),
    );
    assert_eq!(fingerprint(&a), fingerprint(&b));
    assert_ne!(
        fingerprint(&a),
        fingerprint(&other),
        "another seed, another stream"
    );
}
