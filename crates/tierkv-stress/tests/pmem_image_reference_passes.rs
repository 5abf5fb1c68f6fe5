//! pmem-image mode: the correct reference engine survives every crash image, line-level and
//! word-torn, each recovered in a fresh engine (issue 5, CI-sized run).

mod common;

#[test]
fn correct_reflog_survives_every_crash_image() {
    let run = common::ci_run("reflog", "pmem-image", 101, 8, &[]);
    common::assert_passed(&run, 8);
    assert_eq!(run.count("keys"), 8 * 300);
    assert!(
        run.stdout.starts_with("tierkv stress: seed 101\n"),
        "{}",
        run.stdout
    );
    assert!(
        run.verdict().contains("8 pmem crash images"),
        "{}",
        run.verdict()
    );
}
