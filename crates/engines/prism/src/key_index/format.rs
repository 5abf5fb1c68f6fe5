//! The on-pmem format of the Persistent Key Index: constants, encoders and decoders of its
//! four records (spec: `key_index/FORMAT.md`; all integers little-endian).
//!
//! ```text
//! leaf node (slot of NodeGeometry::node_size bytes inside a node chunk)
//! off   len   field
//! 0     8     bitmap       u64: bit i set = entry i is live (the commit word)
//! 8     8     next         u64: pool offset of the next leaf in key order, 0 = last
//! 16    4     magic        b"PKIN"
//! 20    2     version      FORMAT_VERSION
//! 22    1     fanout       entries in this node (MIN_FANOUT..=MAX_FANOUT)
//! 23    41    reserved     zero
//! 64    64    fingerprints one byte per entry (derived data, rebuilt at open)
//! 128   56    anchor       an entry (value 0): the smallest key this leaf may hold
//! 184   56*f  entries      f = fanout
//!
//! entry (ENTRY_LEN bytes)
//! 0     8     value        u64 (the HSIT slot)
//! 8     4     crc          masked CRC-32C of bytes 0..8 ++ 12..56
//! 12    2     key_len      u16 (entries 1..=MAX_KEY_LEN; an anchor may be 0)
//! 14    1     key_kind     0 = inline, 1 = blob
//! 15    1     reserved     zero
//! 16    40    key          inline: the key, zero-padded; blob: u64 offset, then zeros
//!
//! chunk header (first CHUNK_HEADER_LEN bytes of every chunk the index owns)
//! 0     4     magic        b"PKIC"
//! 4     2     version      FORMAT_VERSION
//! 6     1     kind         1 = leaf nodes, 2 = key blobs
//! 7     1     class        blob size class (0 for nodes)
//! 8     4     slot_size    u32
//! 12    4     slot_count   u32
//! 16    4     owner        u32: the pool root word of the owning index
//! 20    4     crc          masked CRC-32C of bytes 0..20
//! 24    40    reserved     zero
//!
//! key blob (slot of BLOB_CLASSES[class] bytes inside a blob chunk)
//! 0     2     key_len      u16 (INLINE_KEY_CAP+1..=MAX_KEY_LEN)
//! 2     2     reserved     zero
//! 4     4     crc          masked CRC-32C of the key
//! 8     len   key
//! ```
//!
//! Offsets are derived from the previous offset plus a size. Every decoder here is pure and
//! total: it returns [`Error::Corruption`] (with the pool offset it was given) for any input
//! that a correct writer cannot have produced, and never panics, so the fuzz target
//! `prism_key_index_node` can call [`decode_node`] on arbitrary bytes.
//!
//! Thread safety: plain functions over byte slices and small `Copy` values.

use tierkv_core::format::checksum::{crc32c, crc32c_append, mask, masked_crc32c, unmask};
use tierkv_core::{Error, Result, Tier};

/// The size of a cache line: the unit a crash image keeps or loses.
pub const LINE: usize = 64;
/// The format version this build writes and the newest it reads.
pub const FORMAT_VERSION: u16 = 1;
/// Magic bytes of a leaf node.
pub const NODE_MAGIC: [u8; 4] = *b"PKIN";
/// Magic bytes of a chunk header.
pub const CHUNK_MAGIC: [u8; 4] = *b"PKIC";
/// The longest key the index stores.
pub const MAX_KEY_LEN: usize = 1024;
/// Keys up to this length are stored inside the entry; longer ones in a key blob.
pub const INLINE_KEY_CAP: usize = 40;
/// The most entries a leaf holds (one bit each in the 64-bit bitmap).
pub const MAX_FANOUT: usize = 64;
/// The fewest entries a leaf holds (a split keeps one and moves one).
pub const MIN_FANOUT: usize = 2;

// Leaf node, line 0.
/// Offset of the bitmap word in a node.
pub const NODE_BITMAP: usize = 0;
/// Offset of the next-leaf word in a node.
pub const NODE_NEXT: usize = NODE_BITMAP + 8;
/// Offset of the leaf magic in a node.
pub const NODE_MAGIC_OFF: usize = NODE_NEXT + 8;
const NODE_VERSION_OFF: usize = NODE_MAGIC_OFF + NODE_MAGIC.len();
const NODE_FANOUT_OFF: usize = NODE_VERSION_OFF + 2;
const NODE_RESERVED_OFF: usize = NODE_FANOUT_OFF + 1;
// Line 1: fingerprints.
/// Offset of the fingerprint array in a node.
pub const NODE_FPS: usize = LINE;
/// Bytes a lookup reads first: line 0 and the fingerprint line.
pub const NODE_HEADER_LEN: usize = NODE_FPS + MAX_FANOUT;
/// Offset of the anchor entry in a node.
pub const NODE_ANCHOR: usize = NODE_HEADER_LEN;
/// Offset of entry 0 in a node.
pub const NODE_ENTRIES: usize = NODE_ANCHOR + ENTRY_LEN;

// Entry.
const ENTRY_VALUE: usize = 0;
const ENTRY_CRC: usize = ENTRY_VALUE + 8;
const ENTRY_KEY_LEN: usize = ENTRY_CRC + 4;
const ENTRY_KEY_KIND: usize = ENTRY_KEY_LEN + 2;
const ENTRY_RESERVED: usize = ENTRY_KEY_KIND + 1;
const ENTRY_KEY: usize = ENTRY_RESERVED + 1;
/// Size of an entry (and of the anchor).
pub const ENTRY_LEN: usize = ENTRY_KEY + INLINE_KEY_CAP;
const KIND_INLINE: u8 = 0;
const KIND_BLOB: u8 = 1;

// Chunk header.
const CHUNK_MAGIC_OFF: usize = 0;
const CHUNK_VERSION_OFF: usize = CHUNK_MAGIC_OFF + CHUNK_MAGIC.len();
const CHUNK_KIND_OFF: usize = CHUNK_VERSION_OFF + 2;
const CHUNK_CLASS_OFF: usize = CHUNK_KIND_OFF + 1;
const CHUNK_SLOT_SIZE_OFF: usize = CHUNK_CLASS_OFF + 1;
const CHUNK_SLOT_COUNT_OFF: usize = CHUNK_SLOT_SIZE_OFF + 4;
const CHUNK_OWNER_OFF: usize = CHUNK_SLOT_COUNT_OFF + 4;
const CHUNK_CRC_OFF: usize = CHUNK_OWNER_OFF + 4;
const CHUNK_STATIC_LEN: usize = CHUNK_CRC_OFF + 4;
/// Bytes at the start of every chunk before its first slot.
pub const CHUNK_HEADER_LEN: usize = LINE;

// Key blob.
const BLOB_LEN_OFF: usize = 0;
const BLOB_RESERVED_OFF: usize = BLOB_LEN_OFF + 2;
const BLOB_CRC_OFF: usize = BLOB_RESERVED_OFF + 2;
/// Offset of the key bytes in a key blob.
pub const BLOB_KEY: usize = BLOB_CRC_OFF + 4;
/// Slot sizes of the key-blob classes; class `c` holds keys up to `BLOB_CLASSES[c] - BLOB_KEY`.
pub const BLOB_CLASSES: [usize; 6] = [64, 128, 256, 512, 1024, 2048];

const _: () = assert!(NODE_RESERVED_OFF <= LINE);
const _: () = assert!(CHUNK_STATIC_LEN <= CHUNK_HEADER_LEN);
const _: () = assert!(BLOB_KEY + MAX_KEY_LEN <= BLOB_CLASSES[BLOB_CLASSES.len() - 1]);
const _: () = assert!(INLINE_KEY_CAP >= 8);

fn corrupt(at: u64, what: impl Into<String>) -> Error {
    Error::corruption(Tier::Pmem, at, what)
}

/// `Ok` if the checksum stored with a record equals the one computed from its bytes.
fn check_crc(stored: u32, computed: u32, at: u64) -> Result<()> {
    if stored == computed {
        return Ok(());
    }
    Err(Error::ChecksumMismatch {
        tier: Tier::Pmem,
        offset: at,
        expected: unmask(stored),
        got: unmask(computed),
    })
}

/// `Ok` if the u16 version at `off` is the one this build reads.
fn check_version(b: &[u8], off: usize, what: &'static str, at: u64) -> Result<()> {
    let version = u16_at(b, off).ok_or_else(|| corrupt(at, format!("short {what}")))?;
    if version == FORMAT_VERSION {
        return Ok(());
    }
    Err(Error::UnsupportedFormat {
        what,
        found: u32::from(version),
        supported: u32::from(FORMAT_VERSION),
    })
}

fn u16_at(b: &[u8], off: usize) -> Option<u16> {
    Some(u16::from_le_bytes(b.get(off..off + 2)?.try_into().ok()?))
}

fn u32_at(b: &[u8], off: usize) -> Option<u32> {
    Some(u32::from_le_bytes(b.get(off..off + 4)?.try_into().ok()?))
}

fn u64_at(b: &[u8], off: usize) -> Option<u64> {
    Some(u64::from_le_bytes(b.get(off..off + 8)?.try_into().ok()?))
}

fn put(buf: &mut [u8], off: usize, bytes: &[u8]) {
    if let Some(dst) = buf.get_mut(off..off + bytes.len()) {
        dst.copy_from_slice(bytes);
    }
}

/// The one-byte fingerprint of a key (PACTree's filter: a lookup compares full keys only
/// where the fingerprint matches).
pub fn fingerprint(key: &[u8]) -> u8 {
    let [_, _, _, top] = crc32c(key).to_le_bytes();
    top
}

/// The size of a leaf node with `fanout` entries (a multiple of [`LINE`]).
pub fn node_size(fanout: usize) -> usize {
    (NODE_ENTRIES + ENTRY_LEN * fanout).div_ceil(LINE) * LINE
}

/// Offset of entry `slot` inside a node.
pub fn entry_offset(slot: usize) -> usize {
    NODE_ENTRIES + ENTRY_LEN * slot
}

/// The bitmap with the low `fanout` bits set (a full leaf).
pub fn full_bitmap(fanout: usize) -> u64 {
    if fanout >= 64 {
        u64::MAX
    } else {
        (1u64 << fanout) - 1
    }
}

/// The smallest blob class that holds a key of `len` bytes.
pub fn blob_class(len: usize) -> Option<usize> {
    BLOB_CLASSES.iter().position(|&size| BLOB_KEY + len <= size)
}

/// Where an entry's key lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyRef {
    /// The key itself, in the first `len` bytes (the rest are zero).
    Inline {
        /// Key length.
        len: u16,
        /// The key bytes, zero-padded.
        bytes: [u8; INLINE_KEY_CAP],
    },
    /// A key blob at pool offset `off`.
    Blob {
        /// Key length (more than [`INLINE_KEY_CAP`]).
        len: u16,
        /// Pool offset of the blob.
        off: u64,
    },
}

impl KeyRef {
    /// An inline reference to `key`, or `None` when it is too long to be inline.
    pub fn inline(key: &[u8]) -> Option<KeyRef> {
        let len = u16::try_from(key.len()).ok()?;
        let mut bytes = [0u8; INLINE_KEY_CAP];
        bytes.get_mut(..key.len())?.copy_from_slice(key);
        Some(KeyRef::Inline { len, bytes })
    }

    /// The key length.
    pub fn len(&self) -> usize {
        match *self {
            KeyRef::Inline { len, .. } | KeyRef::Blob { len, .. } => usize::from(len),
        }
    }

    /// True for the empty key (only the head leaf's anchor).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The inline key bytes, or `None` for a blob.
    pub fn inline_bytes(&self) -> Option<&[u8]> {
        match self {
            KeyRef::Inline { len, bytes } => bytes.get(..usize::from(*len)),
            KeyRef::Blob { .. } => None,
        }
    }

    /// The blob offset, or `None` for an inline key.
    pub fn blob(&self) -> Option<u64> {
        match *self {
            KeyRef::Blob { off, .. } => Some(off),
            KeyRef::Inline { .. } => None,
        }
    }
}

/// One entry of a leaf (or its anchor, with value 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    /// The HSIT slot the key maps to.
    pub value: u64,
    /// The key.
    pub key: KeyRef,
}

impl Entry {
    /// The entry's bytes, checksum included.
    pub fn encode(&self) -> [u8; ENTRY_LEN] {
        let mut b = [0u8; ENTRY_LEN];
        put(&mut b, ENTRY_VALUE, &self.value.to_le_bytes());
        match self.key {
            KeyRef::Inline { len, bytes } => {
                put(&mut b, ENTRY_KEY_LEN, &len.to_le_bytes());
                put(&mut b, ENTRY_KEY_KIND, &[KIND_INLINE]);
                put(&mut b, ENTRY_KEY, &bytes);
            }
            KeyRef::Blob { len, off } => {
                put(&mut b, ENTRY_KEY_LEN, &len.to_le_bytes());
                put(&mut b, ENTRY_KEY_KIND, &[KIND_BLOB]);
                put(&mut b, ENTRY_KEY, &off.to_le_bytes());
            }
        }
        let crc = entry_crc(&b);
        put(&mut b, ENTRY_CRC, &crc.to_le_bytes());
        b
    }

    /// Decodes an entry and verifies its checksum; `at` is its pool offset (for errors).
    pub fn decode(b: &[u8], at: u64) -> Result<Entry> {
        let entry = Entry::decode_unchecked(b, at)?;
        let stored = u32_at(b, ENTRY_CRC).ok_or_else(|| corrupt(at, "short key-index entry"))?;
        check_crc(stored, entry_crc(b), at)?;
        Ok(entry)
    }

    /// Decodes an entry without verifying its checksum (the lookup path: the entry is
    /// live, so it was persisted whole before its bit; `open` verified every checksum).
    /// Still checks every length and field, so garbage is an error, never a panic.
    pub fn decode_unchecked(b: &[u8], at: u64) -> Result<Entry> {
        let short = || corrupt(at, "short key-index entry");
        let value = u64_at(b, ENTRY_VALUE).ok_or_else(short)?;
        let len = u16_at(b, ENTRY_KEY_LEN).ok_or_else(short)?;
        let kind = *b.get(ENTRY_KEY_KIND).ok_or_else(short)?;
        let reserved = *b.get(ENTRY_RESERVED).ok_or_else(short)?;
        let key_area: [u8; INLINE_KEY_CAP] = b
            .get(ENTRY_KEY..ENTRY_LEN)
            .and_then(|s| s.try_into().ok())
            .ok_or_else(short)?;
        if reserved != 0 {
            return Err(corrupt(at, "key-index entry: reserved byte is not zero"));
        }
        if usize::from(len) > MAX_KEY_LEN {
            return Err(corrupt(at, format!("key-index entry: key length {len}")));
        }
        let key = match kind {
            KIND_INLINE => {
                let n = usize::from(len);
                if n > INLINE_KEY_CAP || key_area.iter().skip(n).any(|&x| x != 0) {
                    return Err(corrupt(
                        at,
                        format!("key-index entry: bad inline key of length {n}"),
                    ));
                }
                KeyRef::Inline {
                    len,
                    bytes: key_area,
                }
            }
            KIND_BLOB => {
                let off = u64_at(&key_area, 0).ok_or_else(short)?;
                if usize::from(len) <= INLINE_KEY_CAP
                    || off == 0
                    || off % 8 != 0
                    || key_area.iter().skip(8).any(|&x| x != 0)
                {
                    return Err(corrupt(
                        at,
                        format!("key-index entry: bad blob reference (len {len}, off {off})"),
                    ));
                }
                KeyRef::Blob { len, off }
            }
            other => return Err(corrupt(at, format!("key-index entry: key kind {other}"))),
        };
        Ok(Entry { value, key })
    }
}

fn entry_crc(b: &[u8]) -> u32 {
    let head = b.get(..ENTRY_CRC).unwrap_or_default();
    let tail = b.get(ENTRY_KEY_LEN..ENTRY_LEN).unwrap_or_default();
    mask(crc32c_append(crc32c(head), tail))
}

/// The first two lines of a node: what a lookup reads before any entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NodeHeader {
    /// Live entries (bit i = entry i).
    pub bitmap: u64,
    /// Pool offset of the next leaf, 0 for the last.
    pub next: u64,
    /// Entries in this node.
    pub fanout: usize,
    /// One fingerprint per entry.
    pub fps: [u8; MAX_FANOUT],
}

impl NodeHeader {
    /// A header with no live entry and zero fingerprints.
    pub fn new(fanout: usize, next: u64) -> NodeHeader {
        NodeHeader {
            bitmap: 0,
            next,
            fanout,
            fps: [0; MAX_FANOUT],
        }
    }

    /// The header's [`NODE_HEADER_LEN`] bytes.
    pub fn encode(&self) -> [u8; NODE_HEADER_LEN] {
        let mut b = [0u8; NODE_HEADER_LEN];
        put(&mut b, NODE_BITMAP, &self.bitmap.to_le_bytes());
        put(&mut b, NODE_NEXT, &self.next.to_le_bytes());
        put(&mut b, NODE_MAGIC_OFF, &NODE_MAGIC);
        put(&mut b, NODE_VERSION_OFF, &FORMAT_VERSION.to_le_bytes());
        put(
            &mut b,
            NODE_FANOUT_OFF,
            &[u8::try_from(self.fanout).unwrap_or(0)],
        );
        put(&mut b, NODE_FPS, &self.fps);
        b
    }

    /// Decodes and validates a node header; `at` is the node's pool offset.
    pub fn decode(b: &[u8], at: u64) -> Result<NodeHeader> {
        let short = || corrupt(at, "short key-index node header");
        if b.get(NODE_MAGIC_OFF..NODE_VERSION_OFF) != Some(&NODE_MAGIC[..]) {
            return Err(corrupt(at, "key-index node: bad magic"));
        }
        check_version(b, NODE_VERSION_OFF, "prism key-index node", at)?;
        let fanout = usize::from(*b.get(NODE_FANOUT_OFF).ok_or_else(short)?);
        if !(MIN_FANOUT..=MAX_FANOUT).contains(&fanout) {
            return Err(corrupt(at, format!("key-index node: fanout {fanout}")));
        }
        if b.get(NODE_RESERVED_OFF..LINE)
            .ok_or_else(short)?
            .iter()
            .any(|&x| x != 0)
        {
            return Err(corrupt(at, "key-index node: reserved bytes are not zero"));
        }
        let bitmap = u64_at(b, NODE_BITMAP).ok_or_else(short)?;
        if bitmap & !full_bitmap(fanout) != 0 {
            return Err(corrupt(
                at,
                format!("key-index node: bitmap {bitmap:#x} beyond fanout {fanout}"),
            ));
        }
        let next = u64_at(b, NODE_NEXT).ok_or_else(short)?;
        if next % LINE as u64 != 0 {
            return Err(corrupt(
                at,
                format!("key-index node: misaligned next {next}"),
            ));
        }
        let fps = b
            .get(NODE_FPS..NODE_FPS + MAX_FANOUT)
            .and_then(|s| s.try_into().ok())
            .ok_or_else(short)?;
        Ok(NodeHeader {
            bitmap,
            next,
            fanout,
            fps,
        })
    }
}

/// A whole leaf node, decoded: its header, its anchor and its live entries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DecodedNode {
    /// The header.
    pub header: NodeHeader,
    /// The anchor: the smallest key this leaf may hold (value 0).
    pub anchor: Entry,
    /// The live entries as `(slot, entry)`, by slot.
    pub entries: Vec<(usize, Entry)>,
}

/// Decodes a whole leaf node from `bytes` (at least `node_size(fanout)` long), verifying
/// the header, the anchor and every live entry with its checksum; `at` is the node's
/// pool offset. Fingerprints are not checked (they are derived data). This is the
/// decoder the fuzz target `prism_key_index_node` calls.
pub fn decode_node(bytes: &[u8], at: u64) -> Result<DecodedNode> {
    let header = NodeHeader::decode(bytes, at)?;
    if bytes.len() < node_size(header.fanout) {
        return Err(corrupt(
            at,
            format!(
                "key-index node: {} bytes for fanout {}",
                bytes.len(),
                header.fanout
            ),
        ));
    }
    let anchor_at = at.saturating_add(NODE_ANCHOR as u64);
    let anchor = Entry::decode(
        bytes.get(NODE_ANCHOR..NODE_ENTRIES).unwrap_or_default(),
        anchor_at,
    )?;
    if anchor.value != 0 {
        return Err(corrupt(anchor_at, "key-index node: anchor carries a value"));
    }
    let mut entries = Vec::with_capacity(header.bitmap.count_ones() as usize);
    for slot in live_slots(header.bitmap) {
        let off = entry_offset(slot);
        let entry_at = at.saturating_add(off as u64);
        let entry = Entry::decode(
            bytes.get(off..off + ENTRY_LEN).unwrap_or_default(),
            entry_at,
        )?;
        if entry.key.is_empty() {
            return Err(corrupt(entry_at, "key-index entry: empty key"));
        }
        entries.push((slot, entry));
    }
    Ok(DecodedNode {
        header,
        anchor,
        entries,
    })
}

/// The set bits of `bitmap`, lowest first.
pub fn live_slots(bitmap: u64) -> impl Iterator<Item = usize> {
    let mut rest = bitmap;
    std::iter::from_fn(move || {
        if rest == 0 {
            return None;
        }
        let slot = rest.trailing_zeros() as usize;
        rest &= rest - 1;
        Some(slot)
    })
}

/// What a chunk of the index holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ChunkKind {
    /// Leaf nodes.
    Nodes,
    /// Key blobs of one size class (an index into [`BLOB_CLASSES`]).
    Blobs(usize),
}

/// The header of a chunk the index owns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkHeader {
    /// What the slots hold.
    pub kind: ChunkKind,
    /// Bytes per slot.
    pub slot_size: u32,
    /// Slots in the chunk.
    pub slot_count: u32,
    /// The pool root word of the owning index.
    pub owner: u32,
}

impl ChunkHeader {
    /// The header's [`CHUNK_HEADER_LEN`] bytes.
    pub fn encode(&self) -> [u8; CHUNK_HEADER_LEN] {
        let mut b = [0u8; CHUNK_HEADER_LEN];
        let (kind, class) = match self.kind {
            ChunkKind::Nodes => (1u8, 0u8),
            ChunkKind::Blobs(c) => (2, u8::try_from(c).unwrap_or(u8::MAX)),
        };
        put(&mut b, CHUNK_MAGIC_OFF, &CHUNK_MAGIC);
        put(&mut b, CHUNK_VERSION_OFF, &FORMAT_VERSION.to_le_bytes());
        put(&mut b, CHUNK_KIND_OFF, &[kind]);
        put(&mut b, CHUNK_CLASS_OFF, &[class]);
        put(&mut b, CHUNK_SLOT_SIZE_OFF, &self.slot_size.to_le_bytes());
        put(&mut b, CHUNK_SLOT_COUNT_OFF, &self.slot_count.to_le_bytes());
        put(&mut b, CHUNK_OWNER_OFF, &self.owner.to_le_bytes());
        let crc = masked_crc32c(b.get(..CHUNK_CRC_OFF).unwrap_or_default());
        put(&mut b, CHUNK_CRC_OFF, &crc.to_le_bytes());
        b
    }

    /// Decodes and validates a chunk header; `at` is the chunk's pool offset.
    pub fn decode(b: &[u8], at: u64) -> Result<ChunkHeader> {
        let short = || corrupt(at, "short key-index chunk header");
        if b.get(CHUNK_MAGIC_OFF..CHUNK_VERSION_OFF) != Some(&CHUNK_MAGIC[..]) {
            return Err(corrupt(at, "key-index chunk: bad magic"));
        }
        let stored = u32_at(b, CHUNK_CRC_OFF).ok_or_else(short)?;
        check_crc(
            stored,
            masked_crc32c(b.get(..CHUNK_CRC_OFF).ok_or_else(short)?),
            at,
        )?;
        check_version(b, CHUNK_VERSION_OFF, "prism key-index chunk", at)?;
        let class = usize::from(*b.get(CHUNK_CLASS_OFF).ok_or_else(short)?);
        let kind = match *b.get(CHUNK_KIND_OFF).ok_or_else(short)? {
            1 if class == 0 => ChunkKind::Nodes,
            2 if class < BLOB_CLASSES.len() => ChunkKind::Blobs(class),
            k => {
                return Err(corrupt(
                    at,
                    format!("key-index chunk: kind {k} class {class}"),
                ));
            }
        };
        let header = ChunkHeader {
            kind,
            slot_size: u32_at(b, CHUNK_SLOT_SIZE_OFF).ok_or_else(short)?,
            slot_count: u32_at(b, CHUNK_SLOT_COUNT_OFF).ok_or_else(short)?,
            owner: u32_at(b, CHUNK_OWNER_OFF).ok_or_else(short)?,
        };
        let size_ok = match kind {
            ChunkKind::Blobs(c) => BLOB_CLASSES.get(c).copied() == Some(header.slot_size as usize),
            ChunkKind::Nodes => {
                (MIN_FANOUT..=MAX_FANOUT).any(|f| node_size(f) == header.slot_size as usize)
            }
        };
        if !size_ok || header.slot_count == 0 {
            return Err(corrupt(
                at,
                format!(
                    "key-index chunk: slot size {} count {}",
                    header.slot_size, header.slot_count
                ),
            ));
        }
        Ok(header)
    }

    /// Pool offset of slot `i` of the chunk at `chunk`.
    pub fn slot_offset(&self, chunk: u64, i: u32) -> u64 {
        chunk + CHUNK_HEADER_LEN as u64 + u64::from(i) * u64::from(self.slot_size)
    }

    /// The slot index of pool offset `off` in the chunk at `chunk`, if `off` is exactly
    /// the start of one of its slots.
    pub fn slot_index(&self, chunk: u64, off: u64) -> Option<u32> {
        let rel = off.checked_sub(chunk + CHUNK_HEADER_LEN as u64)?;
        let size = u64::from(self.slot_size);
        let i = u32::try_from(rel / size).ok()?;
        (rel % size == 0 && i < self.slot_count).then_some(i)
    }
}

/// The header bytes of a key blob holding `key` (followed by the key itself).
pub fn encode_blob(key: &[u8]) -> Vec<u8> {
    let mut b = vec![0u8; BLOB_KEY + key.len()];
    put(
        &mut b,
        BLOB_LEN_OFF,
        &u16::try_from(key.len()).unwrap_or(u16::MAX).to_le_bytes(),
    );
    put(&mut b, BLOB_CRC_OFF, &masked_crc32c(key).to_le_bytes());
    put(&mut b, BLOB_KEY, key);
    b
}

/// Validates a key blob read at `at` against the `len` its entry records and returns the
/// key bytes; `b` must hold at least `BLOB_KEY + len` bytes.
pub fn decode_blob(b: &[u8], len: usize, at: u64) -> Result<&[u8]> {
    let short = || corrupt(at, "short key blob");
    let stored_len = usize::from(u16_at(b, BLOB_LEN_OFF).ok_or_else(short)?);
    if stored_len != len || u16_at(b, BLOB_RESERVED_OFF) != Some(0) {
        return Err(corrupt(
            at,
            format!("key blob: length {stored_len}, its entry says {len}"),
        ));
    }
    let key = b.get(BLOB_KEY..BLOB_KEY + len).ok_or_else(short)?;
    let stored = u32_at(b, BLOB_CRC_OFF).ok_or_else(short)?;
    check_crc(stored, masked_crc32c(key), at)?;
    Ok(key)
}
