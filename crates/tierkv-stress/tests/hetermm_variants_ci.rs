//! CI-sized stress runs of the HeterMM index variants besides the default one
//! (`registered_engines_ci.rs` covers `hetermm:btree`): `hetermm:hash` and
//! `hetermm:lockfree` — whose scans are unsupported, so the harness skips them — in
//! pmem-image mode and in kill mode with a power-loss image. (With `oplog=off` the engine
//! promises less — acknowledged writes still in DRAM may be lost — so that configuration is
//! tested by the engine's own `oplog_off_guarantee` test, not here.)

mod common;

#[test]
fn every_hetermm_index_survives_crash_images_and_power_loss_kills() {
    for (i, variant) in ["hetermm:hash", "hetermm:lockfree"].into_iter().enumerate() {
        let seed = 700 + 10 * i as u64;
        println!("== {variant} in pmem-image mode");
        let run = common::ci_run(variant, "pmem-image", seed, 4, &[]);
        common::assert_passed(&run, 4);
        println!("== {variant} in kill mode (power loss)");
        let run = common::ci_run(variant, "kill", seed + 1, 3, &["--pmem-mode", "tracked"]);
        common::assert_passed(&run, 3);
    }
}
