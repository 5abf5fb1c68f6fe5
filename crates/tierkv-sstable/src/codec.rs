//! Little-endian codec helpers shared by the table format and the engines that embed it:
//! fixed-width reads at an offset and a bounds-checked cursor over untrusted bytes (every
//! read returns `None` past the end, never panics).
//!
//! Thread safety: pure functions and a cursor owned by its caller.

/// Little-endian u16 at `off`.
pub fn read_u16(b: &[u8], off: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(off..off + 2)?.try_into().ok()?))
}
/// Little-endian u32 at `off`.
pub fn read_u32(b: &[u8], off: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(off..off + 4)?.try_into().ok()?))
}
/// Little-endian u64 at `off`.
pub fn read_u64(b: &[u8], off: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(off..off + 8)?.try_into().ok()?))
}

/// A cursor over untrusted bytes.
pub struct Reader<'a> {
    b: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    /// A reader at the start of `b`.
    pub fn new(b: &'a [u8]) -> Self {
        Reader { b, pos: 0 }
    }
    /// The next `n` bytes.
    pub fn bytes(&mut self, n: usize) -> Option<&'a [u8]> {
        let s = self.b.get(self.pos..self.pos.checked_add(n)?)?;
        self.pos += n;
        Some(s)
    }
    /// The next u16.
    pub fn u16(&mut self) -> Option<u16> {
        Some(u16::from_le_bytes(self.bytes(2)?.try_into().ok()?))
    }
    /// The next u32.
    pub fn u32(&mut self) -> Option<u32> {
        Some(u32::from_le_bytes(self.bytes(4)?.try_into().ok()?))
    }
    /// The next u64.
    pub fn u64(&mut self) -> Option<u64> {
        Some(u64::from_le_bytes(self.bytes(8)?.try_into().ok()?))
    }
    /// A `u16`-length-prefixed byte string.
    pub fn key(&mut self) -> Option<&'a [u8]> {
        let n = usize::from(self.u16()?);
        self.bytes(n)
    }
    /// Bytes consumed.
    pub fn pos(&self) -> usize {
        self.pos
    }
}

/// Appends a `u16`-length-prefixed key.
pub fn push_key(b: &mut Vec<u8>, key: &[u8]) {
    b.extend_from_slice(&u16::try_from(key.len()).unwrap_or(u16::MAX).to_le_bytes());
    b.extend_from_slice(key);
}
