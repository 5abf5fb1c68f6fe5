//! Model-based tests of `hetermm:btree` with 4 KiB pages and 32 KiB blocks: the shared
//! testkit driver (concurrent partitions + racing writers of shared keys, scans), then a
//! phased run whose read-only phases make the read cache grow and whose write phases take
//! its pages back — while flushing, reorganisation and log reclamation run many times.

#![allow(clippy::unwrap_used, reason = "tests")]

mod common;

use common::model_scenario;

#[test]
fn model_btree_matches_the_oracle_through_flushes_reorganisations_and_cache_resizes() {
    model_scenario("btree", 5);
}
