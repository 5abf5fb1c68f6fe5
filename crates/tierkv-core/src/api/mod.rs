//! The API every engine implements and every caller uses: [`KvStore`](store::KvStore),
//! [`Options`](options::Options), [`Error`](error::Error),
//! [`WriteBatch`](batch::WriteBatch), engine specs and [`Stats`](stats::Stats).

pub mod batch;
pub mod error;
pub mod options;
pub mod salvage;
pub mod schema;
pub mod size;
pub mod spec;
pub mod stats;
pub mod store;
