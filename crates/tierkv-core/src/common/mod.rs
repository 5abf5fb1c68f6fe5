//! Building blocks shared by engines: concurrent in-DRAM indexes (and, as engines land,
//! bloom filters, caches, epochs, budgets).

pub mod doorkeeper;
pub(crate) mod falloc;
pub mod hugepage;
pub mod index;
pub mod prefetch;
pub mod skipindex;
mod treekey;

pub use treekey::KeyHasher;
