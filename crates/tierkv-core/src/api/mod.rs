//! The API every engine implements and every caller uses: [`KvStore`], [`Options`],
//! [`Error`], [`WriteBatch`](batch::WriteBatch), engine specs and [`Stats`].

pub mod batch;
pub mod error;
pub mod options;
pub mod salvage;
pub mod schema;
pub mod size;
pub mod spec;
pub mod stats;
pub mod store;
