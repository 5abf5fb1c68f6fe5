//! # tierkv-stress
//!
//! The reliability harness of tierkv (issue 5; DESIGN §4, "Failure model"; STYLE §7,
//! "Crash" and "Fault"): the checks the most trusted stores run on themselves — RocksDB's
//! db_stress with its expected-state oracle and crash test, LevelDB's fault-injection test,
//! PMDK's pmreorder — built once, generic over the engine name, so every engine registered
//! in `tierkv::ENGINES` gets them for free.
//!
//! - [`expected_state`]: a word per key (acknowledged version, pending bits), so the
//!   verifier tells "acknowledged and lost" from "in flight";
//! - [`value_codec`]: values that carry their key's hash, their version and a checksum;
//! - [`race`]: racing writers' histories and the linearizability rule that judges them;
//! - [`workload`]: N threads of put / delete / get / scan / write batch, every read
//!   checked live;
//! - [`batch`]: write batches in the workload and the rule that judges them after a crash
//!   (all or nothing: a torn batch is a violation; issue 24);
//! - [`fields`]: field updates (`put_row`, `update_fields`, `get_fields`, `delete_row`,
//!   `scan_fields`) in the workload and the per-field oracle (issue 20);
//! - [`verify`]: the per-key windows, the full verification after recovery, [`Violation`];
//! - [`modes`]: `kill`, `pmem-image`, `flash-faults`, `persist-points`, `space` (full
//!   tiers: fill until `NoSpace`, delete, write again, reopen; issue 23);
//! - [`report`]: the counters and the verdict;
//! - `reference` (feature `reference-engine`): a small correct persistent engine and two
//!   broken variants, which prove that the harness catches bugs.
//!
//! The command line ([`StressArgs`], [`run`]) is `tierkv stress` and the `tierkv-stress`
//! binary. See the crate's README for the modes, the flags, what a violation report looks
//! like and the long runs to do by hand.
//!
//! Thread safety: see each module; [`run`] owns every thread it starts and joins them.

#![forbid(unsafe_code)]

pub mod batch;
mod cli;
pub mod expected_state;
pub mod fields;
pub mod modes;
pub mod race;
#[cfg(feature = "reference-engine")]
pub mod reference;
pub mod report;
pub mod target;
pub mod value_codec;
pub mod verify;
pub mod workload;

pub use cli::{EXAMPLES, HumanDuration, Mode, StressArgs, run};
pub use report::RunReport;
pub use verify::Violation;
