//! The seed of a random test, printed so a failure can be replayed. The testkit's policy
//! (`tierkv_testkit::rig::seed`; core's tests cannot depend on the testkit, which depends on
//! core): `TIERKV_SEED` (or `TIERKV_TEST_SEED`) if set, else fixed per test name when
//! `TIERKV_FIXED_SEEDS` is set (CI: a CI run must be reproducible), else random.

/// The seed of the random test `test`.
pub fn seed(test: &str) -> u64 {
    let seed = ["TIERKV_SEED", "TIERKV_TEST_SEED"]
        .iter()
        .find_map(|v| std::env::var(v).ok().and_then(|s| s.trim().parse().ok()))
        .unwrap_or_else(|| {
            if std::env::var("TIERKV_FIXED_SEEDS").is_ok_and(|v| v != "0" && !v.is_empty()) {
                test.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
                    (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
                })
            } else {
                rand::random()
            }
        });
    println!("{test}: seed {seed} (replay with TIERKV_SEED={seed})");
    seed
}
