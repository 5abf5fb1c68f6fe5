//! The unified logical address space (HeterMM §4.1, Fig. 5) and its arithmetic.
//!
//! Every record gets a [`LogicalAddress`] when it is written; the address grows with
//! allocation and never changes while the record lives, whether its bytes are in a DRAM
//! page or a pmem block. Logical page `p` covers `[p << k, (p + 1) << k)` and logical block
//! `b` covers `[b << m, (b + 1) << m)`; a block is `2^(m-k)` consecutive pages. The first
//! `prefix_len(m)` bytes of every block (the pmem block's header and invalid bitmap) are
//! never handed out, so the offset of a record in its pmem block equals its address modulo
//! 2^m and a flush is a plain copy.
//!
//! Eq. 1 of the paper — `pages[(addr >> k) mod pageNum] + addr mod 2^k` above `off_DRAM`,
//! `blocks[addr >> m] + addr mod 2^m` below it — is implemented by `dram::ring` and
//! `nvm::blocks` with these helpers.
//!
//! Thread safety: plain values.

use crate::format::block::prefix_len;

/// A record's place in the unified space (the value a plugged-in index stores).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct LogicalAddress(pub u64);

impl LogicalAddress {
    /// The raw address.
    pub fn get(self) -> u64 {
        self.0
    }
}

/// The index holds an address in one atomic word (`tierkv_core`'s `WordCell`): logical
/// addresses stay below 2^63 ([`Geometry::block_numbers`]), far from `u64::MAX`, the cell's
/// "no value" word.
impl tierkv_core::common::skipindex::WordValue for LogicalAddress {
    fn to_word(self) -> u64 {
        self.0
    }
    fn from_word(w: u64) -> Self {
        LogicalAddress(w)
    }
}

impl std::fmt::Display for LogicalAddress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "@{:#x}", self.0)
    }
}

/// Logical block numbers a store with blocks of 2^`block_bits` bytes can use: those a block
/// directory word can name (2^48), and no more than keep every logical address below 2^63,
/// so that `(b + 1) << m` never overflows and no address is the index's "no value" word. At
/// the default m = 21 that is 2^42 blocks, 8 EiB of writes (FORMAT.md § Counters).
pub const fn block_numbers(block_bits: u32) -> u64 {
    let by_address = 1u64 << (63 - block_bits);
    if by_address < crate::nvm::blocks::MAX_BLOCKS {
        by_address
    } else {
        crate::nvm::blocks::MAX_BLOCKS
    }
}

/// Page and block sizes: k and m.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Geometry {
    /// k.
    pub page_bits: u32,
    /// m.
    pub block_bits: u32,
}

impl Geometry {
    /// Logical block numbers a store of this geometry can use ([`block_numbers`]).
    pub const fn block_numbers(&self) -> u64 {
        block_numbers(self.block_bits)
    }

    /// Bytes per DRAM page.
    pub const fn page_size(&self) -> u64 {
        1 << self.page_bits
    }

    /// Bytes per pmem block.
    pub const fn block_size(&self) -> u64 {
        1 << self.block_bits
    }

    /// Pages per block.
    pub const fn pages_per_block(&self) -> u64 {
        1 << (self.block_bits - self.page_bits)
    }

    /// The logical page holding `a`.
    pub const fn page_of(&self, a: u64) -> u64 {
        a >> self.page_bits
    }

    /// The logical block holding `a`.
    pub const fn block_of(&self, a: u64) -> u64 {
        a >> self.block_bits
    }

    /// The block a logical page belongs to.
    pub const fn block_of_page(&self, page: u64) -> u64 {
        page >> (self.block_bits - self.page_bits)
    }

    /// First address of logical page `p`.
    pub const fn page_start(&self, p: u64) -> u64 {
        p << self.page_bits
    }

    /// First address of logical block `b`.
    pub const fn block_start(&self, b: u64) -> u64 {
        b << self.block_bits
    }

    /// First logical page of block `b`.
    pub const fn first_page(&self, b: u64) -> u64 {
        b << (self.block_bits - self.page_bits)
    }

    /// `a` modulo the page size.
    pub const fn page_offset(&self, a: u64) -> u64 {
        a & (self.page_size() - 1)
    }

    /// `a` modulo the block size.
    pub const fn block_offset(&self, a: u64) -> u64 {
        a & (self.block_size() - 1)
    }

    /// Bytes at the start of every block that hold no records.
    pub const fn prefix(&self) -> u64 {
        prefix_len(self.block_bits)
    }

    /// The first address of page `p` that may hold a record.
    pub const fn first_usable(&self, p: u64) -> u64 {
        let start = self.page_start(p);
        if self.block_offset(start) == 0 {
            start + self.prefix()
        } else {
            start
        }
    }

    /// Bytes of records a full block can hold.
    pub const fn block_capacity(&self) -> u64 {
        self.block_size() - self.prefix()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_split_into_pages_and_blocks() {
        let g = Geometry {
            page_bits: 12,
            block_bits: 15,
        };
        assert_eq!(g.pages_per_block(), 8);
        let a = (5 << 15) + 3 * 4096 + 100;
        assert_eq!(g.block_of(a), 5);
        assert_eq!(g.page_of(a), 5 * 8 + 3);
        assert_eq!(g.block_of_page(g.page_of(a)), 5);
        assert_eq!(g.page_offset(a), 100);
        assert_eq!(g.block_offset(a), 3 * 4096 + 100);
        assert_eq!(g.first_usable(40), (5 << 15) + g.prefix());
        assert_eq!(g.first_usable(41), 41 * 4096);
        assert_eq!(g.block_capacity(), (1 << 15) - 192);
        let at = |m| Geometry {
            page_bits: 12,
            block_bits: m,
        };
        assert_eq!(at(14).block_numbers(), 1 << 48, "the directory's limit");
        assert_eq!(at(15).block_numbers(), 1 << 48);
        assert_eq!(at(16).block_numbers(), 1 << 47, "the address limit");
        assert_eq!(at(21).block_numbers(), 1 << 42);
        assert_eq!(at(30).block_numbers(), 1 << 33);
        let last = at(30).block_numbers() - 1;
        assert_eq!(
            u128::from(last + 1) << 30,
            1u128 << 63,
            "the last block ends at 2^63"
        );
    }
}
