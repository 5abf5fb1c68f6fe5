//! # The `prism` engine
//!
//! PRISM (Song et al., ASPLOS '23; `shared/papers/000_d69a7359ad220b97.txt`): a key-value
//! store for DRAM + persistent memory + flash. Map of the paper to this crate (filled in as
//! the modules land):
//!
//! | paper | module |
//! |---|---|
//! | §4.1 Persistent Key Index on NVM (PACTree) | `key_index` |
//! | §4.2, §5.1 Value Storage on flash, §5.2 GC | `value_storage` |
//! | §5.3 Opportunistic thread combining | `combining` |
//! | §4.4 Scan-aware Value Cache | `svc` |
//! | §4.3 Persistent Write Buffer, §5.2 reclamation | `pwb` |
//! | §4.5 HSIT, §5.4 concurrency control | `hsit` |
//! | §5.5 crash consistency and recovery | `recovery` |

pub mod combining;
pub mod key_index;
pub mod svc;
pub mod value_storage;
