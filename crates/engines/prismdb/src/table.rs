//! PrismDB's sorted tables on flash (§4.1 "data layout on flash"): the shared
//! `tierkv-sstable` crate (written for this engine first, now shared with `mio:flash`),
//! and the names of a partition's table files.

pub use tierkv_sstable::*;

/// The file name of table `number` of `partition`.
pub fn table_name(partition: usize, number: u64) -> String {
    format!("p{partition:02}-{number:016x}.sst")
}
