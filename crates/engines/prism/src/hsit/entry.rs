//! The 16-byte HSIT entry (PRISM §4.5, §5.4; spec: `FORMAT.md` § HSIT entry).
//!
//! ```text
//! word 0 (offset 0): the forward pointer
//!   bit  63      dirty: set by a writer between its CAS and the persist of this word (§5.4)
//!   bits 56..62  medium: 0 = none (deleted or never used), 1 = PWB, 2 = Value Storage
//!   bits 0..55   PWB: absolute pool offset of the record; Value Storage: ValueLocation::pack()
//! word 1 (offset 8): the key tag, written once when the entry is given to a key
//!   bits 0..31   CRC-32C of the key
//!   bits 32..47  key length
//!   bits 48..63  zero (reserved)
//! ```
//! Both words are little-endian 8-byte aligned words, each updated with one atomic store or
//! CAS (never torn). The key tag never changes while a key owns the entry, so it needs no
//! atomicity with word 0; recovery and `check` use it to prove that the key index and HSIT
//! agree on which key owns an entry.
//!
//! Thread safety: `Copy` values and pure functions.

use tierkv_core::format::checksum::crc32c;

/// The dirty bit of a forward pointer (flush-on-read, §5.4).
pub const DIRTY: u64 = 1 << 63;
const MEDIUM_SHIFT: u32 = 56;
const MEDIUM_MASK: u64 = 0x7f << MEDIUM_SHIFT;
/// The address bits of a forward pointer.
pub const ADDR_MASK: u64 = (1 << MEDIUM_SHIFT) - 1;
const MEDIUM_NONE: u64 = 0;
const MEDIUM_PWB: u64 = 1;
const MEDIUM_FLASH: u64 = 2;

/// What a background move of a forward pointer (`Hsit::relocate`: PWB reclamation, GC,
/// a scan-chain rewrite) did.
#[derive(Debug)]
pub enum Relocation {
    /// The entry held the old location and now durably holds the new one.
    Moved,
    /// The entry no longer held the old location (the key was written or deleted
    /// meanwhile); it is unchanged.
    Lost,
    /// The entry was switched to the new location, but persisting it failed: the durable
    /// entry may hold either location, so the mover must invalidate neither copy, and stop
    /// with this error (the pool, and with it the engine, is poisoned).
    Unpersisted(tierkv_core::Error),
}

/// Where a forward pointer leads.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Location {
    /// No value: the entry is free, or its key is being deleted.
    None,
    /// A record in a PWB, at this absolute pool offset.
    Pwb(u64),
    /// A value in Value Storage: a packed `ValueLocation`.
    Flash(u64),
}

/// A forward pointer as stored in word 0 of an HSIT entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ForwardPointer(u64);

impl ForwardPointer {
    /// The pointer of a free or deleted entry.
    pub const NONE: ForwardPointer = ForwardPointer(0);

    /// A clean pointer to `loc`, or `None` when the address does not fit in 56 bits.
    pub fn to(loc: Location) -> Option<ForwardPointer> {
        let (medium, addr) = match loc {
            Location::None => return Some(ForwardPointer::NONE),
            Location::Pwb(off) => (MEDIUM_PWB, off),
            Location::Flash(packed) => (MEDIUM_FLASH, packed),
        };
        (addr & !ADDR_MASK == 0).then_some(ForwardPointer((medium << MEDIUM_SHIFT) | addr))
    }

    /// The word as stored.
    pub fn raw(self) -> u64 {
        self.0
    }

    /// A word read from pmem (not validated: see [`ForwardPointer::location`]).
    pub fn from_raw(w: u64) -> ForwardPointer {
        ForwardPointer(w)
    }

    /// True while the writer has not yet persisted this pointer.
    pub fn is_dirty(self) -> bool {
        self.0 & DIRTY != 0
    }

    /// This pointer with the dirty bit set.
    #[must_use]
    pub fn dirty(self) -> ForwardPointer {
        ForwardPointer(self.0 | DIRTY)
    }

    /// This pointer with the dirty bit cleared.
    #[must_use]
    pub fn clean(self) -> ForwardPointer {
        ForwardPointer(self.0 & !DIRTY)
    }

    /// Where the pointer leads (the dirty bit is ignored), or `None` for a medium this
    /// version does not know (a corrupt word).
    pub fn location(self) -> Option<Location> {
        let addr = self.0 & ADDR_MASK;
        match (self.0 & MEDIUM_MASK) >> MEDIUM_SHIFT {
            MEDIUM_NONE if addr == 0 => Some(Location::None),
            MEDIUM_PWB => Some(Location::Pwb(addr)),
            MEDIUM_FLASH => Some(Location::Flash(addr)),
            _ => None,
        }
    }

    /// True when the pointer (dirty or not) leads nowhere.
    pub fn is_none(self) -> bool {
        self.clean() == ForwardPointer::NONE
    }
}

/// The key tag stored in word 1 of the entry a key owns.
pub fn key_tag(key: &[u8]) -> u64 {
    let len = u64::try_from(key.len()).unwrap_or(u64::MAX) & 0xffff;
    u64::from(crc32c(key)) | (len << 32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pointers_round_trip_with_and_without_the_dirty_bit() {
        for loc in [
            Location::None,
            Location::Pwb(4096),
            Location::Pwb(ADDR_MASK),
            Location::Flash(0),
            Location::Flash(0x00ab_cdef_0123_4567),
        ] {
            let p = ForwardPointer::to(loc).unwrap();
            assert_eq!(p.location(), Some(loc));
            assert!(!p.is_dirty());
            let d = p.dirty();
            assert!(d.is_dirty());
            assert_eq!(d.location(), Some(loc));
            assert_eq!(d.clean(), p);
            assert_eq!(ForwardPointer::from_raw(d.raw()), d);
        }
    }

    #[test]
    fn addresses_wider_than_56_bits_are_refused() {
        assert!(ForwardPointer::to(Location::Pwb(1 << 56)).is_none());
        assert!(ForwardPointer::to(Location::Flash(u64::MAX)).is_none());
    }

    #[test]
    fn unknown_medium_or_garbage_none_is_not_a_location() {
        assert_eq!(ForwardPointer::from_raw(3 << 56).location(), None);
        assert_eq!(ForwardPointer::from_raw(0x7f << 56).location(), None);
        // Medium "none" with address bits set is not a valid encoding.
        assert_eq!(ForwardPointer::from_raw(12).location(), None);
    }

    #[test]
    fn deleted_pointer_is_none_even_when_dirty() {
        assert!(ForwardPointer::NONE.is_none());
        assert!(ForwardPointer::NONE.dirty().is_none());
        assert_eq!(
            ForwardPointer::NONE.dirty().location(),
            Some(Location::None)
        );
    }

    #[test]
    fn key_tag_depends_on_content_and_length() {
        assert_ne!(key_tag(b"a"), key_tag(b"b"));
        assert_eq!(key_tag(b"abc") >> 32, 3);
        assert_eq!(key_tag(b"abc") >> 48, 0);
        assert_eq!(key_tag(b"abc"), key_tag(b"abc"));
    }
}
