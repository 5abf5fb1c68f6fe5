//! Value Storage (PRISM §4.2, §5.1-5.2): work in progress.
pub mod bitmap;
pub mod chunk_format;
pub mod chunk_reader;
pub mod chunk_writer;
pub mod gc_policy;
pub mod location;
pub use location::ValueLocation;
