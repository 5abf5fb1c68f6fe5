//! On-media formats shared by all engines: the manifest and checksums. Engine formats live
//! beside their engines (`engines/*/FORMAT.md`).

pub mod checksum;
pub mod manifest;
