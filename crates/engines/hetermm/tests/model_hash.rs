//! Model-based test of `hetermm:hash` with 4 KiB pages and 32 KiB blocks (scenario in
//! `common::model_scenario`): results match the oracle while flushing, reorganisation,
//! log reclamation and read-cache resizing happen many times. Scans are unsupported on
//! this index and are not part of the mix (`bad_input_*` checks they are refused).

mod common;

use common::model_scenario;

#[test]
fn model_hash_matches_the_oracle_through_flushes_reorganisations_and_cache_resizes() {
    model_scenario("hash", 0);
}
