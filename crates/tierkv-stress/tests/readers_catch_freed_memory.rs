//! Readers during crash windows (issue 17, items 3 and 4): gets and scans run beside the
//! writers and the engine's moves in every round, and are checked; `reflog:free-while-read`
//! (a get reads through an offset that compaction frees meanwhile) is caught by them, and
//! the correct engine under the same load is not.

mod common;

fn run(engine: &str) -> common::Run {
    common::stress(&[
        "--engine",
        engine,
        "--mode",
        "pmem-image",
        "--seed",
        "1724",
        "--rounds",
        "8",
        "--round-time",
        "200ms",
        "--threads",
        "3",
        "--keys",
        "100",
        "--pmem-size",
        "512KiB",
        "--max-value",
        "4KiB",
        "--mix",
        "45,5,40,10",
    ])
}

#[test]
fn a_reader_of_freed_memory_is_caught() {
    let r = run("reflog:free-while-read");
    assert_eq!(r.code, 1, "{}", r.stdout);
    let v = r.violations();
    assert!(!v.is_empty(), "{}", r.stdout);
    assert!(
        v.iter()
            .any(|l| l.contains(", get)") || l.contains(", scan from")),
        "caught by a live read: {}",
        r.stdout
    );
}

#[test]
fn the_correct_engine_passes_the_same_reads() {
    let r = run("reflog");
    common::assert_passed(&r, 8);
    assert!(r.count("gets") > 100, "{}", r.verdict());
}
