//! Block-directory words (spec: `FORMAT.md` § Block directory): one u64 per allocator
//! chunk, non-zero at the head chunk of every *published* pmem block. The directory is the
//! authority on which blocks exist: a run of chunks the allocator holds but no directory
//! word names is garbage from a crash (collected at recovery).
//!
//! ```text
//! bits 63..62  kind   0 = none, 1 = data block, 2 = log block (3 is invalid)
//! data block:  bit 61 compact, bits 60..48 generation (13 bits), bits 47..0 block number
//! log block:   bits 61..0 log sequence number
//! ```
//! Every change is one aligned 8-byte store followed by a persist, so after a crash a word
//! is old or new. A reorganisation publishes the compact copy of block B (generation g+1)
//! before it clears the old word (generation g); a crash between leaves two words for B and
//! recovery keeps the newer generation (compared modulo 2^13: only g and g+1 can coexist).
//!
//! Thread safety: pure functions.

/// Bits of the generation counter.
pub const GEN_BITS: u32 = 13;
/// Largest block number a directory word can hold.
pub const MAX_BLOCK_NO: u64 = (1 << 48) - 1;
/// The largest log sequence number a word can hold.
pub const MAX_LOG_SEQ: u64 = (1 << 62) - 1;
const KIND_SHIFT: u32 = 62;
const KIND_DATA: u64 = 1;
const KIND_LOG: u64 = 2;
const COMPACT_BIT: u64 = 1 << 61;
const GEN_SHIFT: u32 = 48;
const GEN_MASK: u64 = (1 << GEN_BITS) - 1;
const LOW62: u64 = (1 << 62) - 1;

/// What a directory word says about its chunk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DirEntry {
    /// No published block starts at this chunk.
    None,
    /// The data block `block_no` (a full block, or a compact one after reorganisation).
    Data {
        /// The block number (logical addresses `block_no << m ..`).
        block_no: u64,
        /// True for a reorganised (compact) block.
        compact: bool,
        /// Reorganisation generation, modulo 2^13.
        generation: u16,
    },
    /// An operation-log block.
    Log {
        /// Its sequence number (the incarnation its entries are checksummed with).
        seq: u64,
    },
}

impl DirEntry {
    /// The word stored for this entry.
    pub fn encode(self) -> u64 {
        match self {
            DirEntry::None => 0,
            DirEntry::Data {
                block_no,
                compact,
                generation,
            } => {
                KIND_DATA << KIND_SHIFT
                    | if compact { COMPACT_BIT } else { 0 }
                    | (u64::from(generation) & GEN_MASK) << GEN_SHIFT
                    | (block_no & MAX_BLOCK_NO)
            }
            DirEntry::Log { seq } => KIND_LOG << KIND_SHIFT | (seq & LOW62),
        }
    }

    /// Decodes a word; `None` for an invalid one (kind 3, or a data word with its spare
    /// bits set is impossible by construction, so only the kind is checked).
    pub fn decode(w: u64) -> Option<DirEntry> {
        match w >> KIND_SHIFT {
            0 if w == 0 => Some(DirEntry::None),
            KIND_DATA => Some(DirEntry::Data {
                block_no: w & MAX_BLOCK_NO,
                compact: w & COMPACT_BIT != 0,
                generation: ((w >> GEN_SHIFT) & GEN_MASK) as u16,
            }),
            KIND_LOG => Some(DirEntry::Log { seq: w & LOW62 }),
            _ => None,
        }
    }
}

/// True when generation `a` is the successor of `b` (modulo 2^13).
pub fn is_next_generation(a: u16, b: u16) -> bool {
    u64::from(a) == (u64::from(b) + 1) & GEN_MASK
}

/// The generation after `g`.
pub fn next_generation(g: u16) -> u16 {
    ((u64::from(g) + 1) & GEN_MASK) as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directory_words_round_trip() {
        for e in [
            DirEntry::None,
            DirEntry::Data {
                block_no: 0,
                compact: false,
                generation: 0,
            },
            DirEntry::Data {
                block_no: MAX_BLOCK_NO,
                compact: true,
                generation: 8191,
            },
            DirEntry::Log { seq: 12345 },
        ] {
            assert_eq!(DirEntry::decode(e.encode()), Some(e));
        }
        assert_eq!(DirEntry::decode(3 << 62), None);
        assert_eq!(DirEntry::decode(5), None, "kind 0 with bits set");
    }

    #[test]
    fn generations_wrap() {
        assert!(is_next_generation(1, 0));
        assert!(is_next_generation(0, 8191));
        assert!(!is_next_generation(0, 1));
        assert_eq!(next_generation(8191), 0);
    }
}
