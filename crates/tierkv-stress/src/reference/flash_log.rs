//! `reflog-flash`: the reference engine on flash, an append-only record log in one segment
//! file at a time, with a DRAM index. It exists so that the `flash-faults` mode has a
//! correct flash engine to pass and a broken one to catch.
//!
//! Files in the (first) flash directory:
//!
//! ```text
//! SUPER          two 4 KiB slots; the slot of generation g is g % 2:
//!                  0 8 magic b"TKREFSUP" | 8 8 gen | 16 8 first_seq | 24 4 masked CRC-32C of 0..24
//! log-<gen:08>   the segment of generation gen: records (super::record) from offset 0,
//!                consecutive seqs from first_seq, zero padding after the last one
//! ```
//!
//! # Protocol (correct variant)
//! put/delete, under the writer lock: the record is appended after the last one, the
//! 4 KiB blocks it touches are written (the partly filled last block is rewritten with its
//! earlier records), the segment is synced (fdatasync), then the DRAM index is updated and
//! the call returns. Media assumption (MEDIA.md of the flash tier): a 4 KiB block write is
//! atomic at a crash (kept or dropped whole), so rewriting the last block never loses the
//! synced records in it. Recovery reads records from offset 0 while they decode with a valid
//! checksum and consecutive seqs; the first that does not ends the log (a torn or dropped
//! unsynced append, never an acknowledged one).
//!
//! Compaction (segment full): the live pairs are written to `log-<gen+1>`, which is synced,
//! then the directory is synced, then the super slot of gen+1 is written and synced (the
//! commit point), then the old segment is removed. Recovery takes the valid slot with the
//! highest generation and removes any other segment.
//!
//! # Broken variants
//! - `ack-before-persist`: the segment is synced only every 16 writes (a group commit that
//!   acknowledges before the group is durable).
//! - `skip-persist`: compaction does not sync the new super slot before it removes the
//!   segment the old slot names (a crash then leaves a super block naming a removed file).
//!
//! Thread safety: writers serialise on `writer`; readers take the index's read lock only.

use std::sync::Arc;
use std::time::Instant;

use parking_lot::Mutex;
use tierkv_core::format::checksum::masked_crc32c;
use tierkv_core::media::flash::{AlignedBuf, FLASH_BLOCK, FlashDevice, FlashFile};
use tierkv_core::{EngineContext, Error, KvPair, KvStore, Result, Stats, Tier};

use super::Fault;
use super::log_core::{Index, LogCore, apply};
use super::record::{self, Kind, RecordError};

const SUPER_FILE: &str = "SUPER";
const SUPER_MAGIC: &[u8; 8] = b"TKREFSUP";
const SLOT_GEN_OFF: usize = 8;
const SLOT_SEQ_OFF: usize = SLOT_GEN_OFF + 8;
const SLOT_CRC_OFF: usize = SLOT_SEQ_OFF + 8;
const SLOT_LEN: usize = SLOT_CRC_OFF + 4;
/// Default segment size.
pub const DEFAULT_SEGMENT: u64 = 16 << 20;
/// Bytes read per request at recovery and written per request at compaction.
const IO_CHUNK: usize = 1 << 20;
const DEFERRED_GROUP: u32 = 16;
const BLOCK: u64 = FLASH_BLOCK as u64;

fn segment_name(gen_: u64) -> String {
    format!("log-{gen_:08}")
}

fn corrupt(off: u64, what: impl Into<String>) -> Error {
    Error::corruption(Tier::Flash, off, what)
}

/// One super slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Slot {
    gen_: u64,
    first_seq: u64,
}

fn encode_slot(s: Slot) -> [u8; SLOT_LEN] {
    let mut b = [0u8; SLOT_LEN];
    b[..SLOT_GEN_OFF].copy_from_slice(SUPER_MAGIC);
    b[SLOT_GEN_OFF..SLOT_SEQ_OFF].copy_from_slice(&s.gen_.to_le_bytes());
    b[SLOT_SEQ_OFF..SLOT_CRC_OFF].copy_from_slice(&s.first_seq.to_le_bytes());
    let crc = masked_crc32c(&b[..SLOT_CRC_OFF]);
    b[SLOT_CRC_OFF..].copy_from_slice(&crc.to_le_bytes());
    b
}

fn decode_slot(b: &[u8]) -> Option<Slot> {
    let b = b.get(..SLOT_LEN)?;
    if b.get(..SLOT_GEN_OFF)? != SUPER_MAGIC {
        return None;
    }
    let crc = u32::from_le_bytes(b.get(SLOT_CRC_OFF..)?.try_into().ok()?);
    if crc != masked_crc32c(b.get(..SLOT_CRC_OFF)?) {
        return None;
    }
    Some(Slot {
        gen_: u64::from_le_bytes(b.get(SLOT_GEN_OFF..SLOT_SEQ_OFF)?.try_into().ok()?),
        first_seq: u64::from_le_bytes(b.get(SLOT_SEQ_OFF..SLOT_CRC_OFF)?.try_into().ok()?),
    })
}

/// The writer's view of the log (guarded by `FlashLog::writer`).
struct Writer {
    file: FlashFile,
    gen_: u64,
    /// Bytes of records in the segment.
    len: u64,
    /// The records in the last, partly filled block (`len % 4096` bytes).
    tail: Vec<u8>,
    next_seq: u64,
    deferred: u32,
}

/// The engine.
pub struct FlashLog {
    dev: Arc<FlashDevice>,
    segment_len: u64,
    fault: Fault,
    writer: Mutex<Writer>,
    core: LogCore,
}

/// Opens (formats or recovers) the log in the context's first flash directory.
pub(super) fn open(ctx: EngineContext, fault: Fault, segment_len: u64) -> Result<Arc<dyn KvStore>> {
    if segment_len < 4 * BLOCK || !segment_len.is_multiple_of(BLOCK) {
        return Err(Error::invalid(format!(
            "reflog-flash segment={segment_len}: a multiple of 4096 of at least 16384"
        )));
    }
    let dev = ctx
        .media
        .flash
        .first()
        .cloned()
        .ok_or_else(|| Error::invalid("reflog-flash needs a flash directory"))?;
    let started = Instant::now();
    let (writer, index) = if ctx.created {
        format(&dev, segment_len)?
    } else {
        recover(&dev)?
    };
    Ok(Arc::new(FlashLog {
        dev,
        segment_len,
        fault,
        writer: Mutex::new(writer),
        core: LogCore::new(index, ctx.options.limits, started),
    }))
}

type Opened = (Writer, Index);

fn write_slot(dev: &FlashDevice, slot: Slot, sync: bool) -> Result<()> {
    let file = dev.open_file(SUPER_FILE)?;
    let mut buf = AlignedBuf::new(FLASH_BLOCK)?;
    buf[..SLOT_LEN].copy_from_slice(&encode_slot(slot));
    file.write_at(slot.gen_ % 2 * BLOCK, &buf)?;
    if sync { file.sync() } else { Ok(()) }
}

fn format(dev: &FlashDevice, segment_len: u64) -> Result<Opened> {
    let file = dev.create_file(&segment_name(1), segment_len)?;
    dev.create_file(SUPER_FILE, 2 * BLOCK)?;
    dev.sync_dir()?;
    write_slot(
        dev,
        Slot {
            gen_: 1,
            first_seq: 1,
        },
        true,
    )?;
    Ok((
        Writer {
            file,
            gen_: 1,
            len: 0,
            tail: Vec::new(),
            next_seq: 1,
            deferred: 0,
        },
        Index::new(),
    ))
}

fn read_super(dev: &FlashDevice) -> Result<Slot> {
    let file = dev.open_file(SUPER_FILE)?;
    let mut buf = AlignedBuf::new(2 * FLASH_BLOCK)?;
    file.read_at(0, &mut buf)?;
    let slots = [
        decode_slot(&buf[..FLASH_BLOCK]),
        decode_slot(&buf[FLASH_BLOCK..]),
    ];
    slots
        .into_iter()
        .flatten()
        .filter(|s| s.gen_ > 0)
        .max_by_key(|s| s.gen_)
        .ok_or_else(|| corrupt(0, "no valid super slot in the reflog-flash SUPER file"))
}

fn recover(dev: &FlashDevice) -> Result<Opened> {
    let slot = read_super(dev)?;
    let name = segment_name(slot.gen_);
    for stale in dev.list_files() {
        if stale != name && stale != SUPER_FILE && stale.starts_with("log-") {
            dev.remove_file(&stale)?;
        }
    }
    dev.sync_dir()?;
    let file = dev.open_file(&name)?;
    let mut index = Index::new();
    let (len, next_seq) = replay(&file, slot.first_seq, |kind, key, value| {
        apply(&mut index, kind, key, value);
    })?;
    let tail = read_tail(&file, len)?;
    Ok((
        Writer {
            file,
            gen_: slot.gen_,
            len,
            tail,
            next_seq,
            deferred: 0,
        },
        index,
    ))
}

/// Applies the segment's records in order; returns the log's length and the next seq.
fn replay(
    file: &FlashFile,
    first_seq: u64,
    mut apply: impl FnMut(Kind, &[u8], &[u8]),
) -> Result<(u64, u64)> {
    let mut data: Vec<u8> = Vec::new();
    let mut read_to = 0u64;
    let mut pos = 0usize;
    let mut next_seq = first_seq;
    loop {
        let rest = data.get(pos..).unwrap_or_default();
        match record::decode(rest) {
            Ok((rec, n)) if rec.seq == next_seq => {
                apply(rec.kind, rec.key, rec.value);
                next_seq += 1;
                pos += n;
            }
            Err(RecordError::Truncated { .. }) if read_to < file.len() => {
                let n = (file.len() - read_to).min(IO_CHUNK as u64);
                let mut buf = AlignedBuf::new(usize::try_from(n).unwrap_or(IO_CHUNK))?;
                file.read_at(read_to, &mut buf)?;
                data.drain(..pos);
                pos = 0;
                data.extend_from_slice(&buf);
                read_to += n;
            }
            // The end of the log: zeros, a torn append, or a stale record.
            _ => break,
        }
    }
    let consumed = read_to - (data.len() - pos) as u64;
    Ok((consumed, next_seq))
}

fn read_tail(file: &FlashFile, len: u64) -> Result<Vec<u8>> {
    let partial = (len % BLOCK) as usize;
    if partial == 0 {
        return Ok(Vec::new());
    }
    let mut buf = AlignedBuf::new(FLASH_BLOCK)?;
    file.read_at(len - len % BLOCK, &mut buf)?;
    Ok(buf[..partial].to_vec())
}

/// Writes `bytes` (which start at a block boundary) at `off`, in whole zero-padded blocks.
fn write_blocks(file: &FlashFile, off: u64, bytes: &[u8]) -> Result<()> {
    for (i, chunk) in bytes.chunks(IO_CHUNK).enumerate() {
        let mut buf = AlignedBuf::new(chunk.len().next_multiple_of(FLASH_BLOCK))?;
        buf[..chunk.len()].copy_from_slice(chunk);
        file.write_at(off + (i * IO_CHUNK) as u64, &buf)?;
    }
    Ok(())
}

impl FlashLog {
    fn append(&self, kind: Kind, key: &[u8], value: &[u8]) -> Result<()> {
        self.core.check_write(key, value)?;
        let mut w = self.writer.lock();
        let len = record::encoded_len(key.len(), value.len()) as u64;
        if w.len + len > self.segment_len {
            let r = self.compact(&mut w);
            self.core.poison_on_error(r)?;
            if w.len + len > self.segment_len {
                return Err(Error::no_space(
                    Tier::Flash,
                    "the live data fills a reflog-flash segment",
                ));
            }
        }
        // NOTE: encoded after a compaction, which moves the sequence numbers on.
        let rec = record::encode(w.next_seq, kind, key, value)
            .ok_or_else(|| Error::invalid("key or value too long for a reflog record"))?;
        let r = self.write_record(&mut w, &rec);
        self.core.poison_on_error(r)?;
        self.core.applied(kind, key, value);
        w.next_seq += 1;
        Ok(())
    }

    fn write_record(&self, w: &mut Writer, rec: &[u8]) -> Result<()> {
        let block_start = w.len - w.len % BLOCK;
        let mut bytes = w.tail.clone();
        bytes.extend_from_slice(rec);
        write_blocks(&w.file, block_start, &bytes)?;
        let new_len = w.len + rec.len() as u64;
        let keep = (new_len % BLOCK) as usize;
        w.tail = bytes.split_off(bytes.len() - keep);
        w.len = new_len;
        match self.fault {
            Fault::AckBeforePersist => {
                // BUG (deliberate): acknowledged before the group is synced.
                w.deferred += 1;
                if w.deferred >= DEFERRED_GROUP {
                    w.deferred = 0;
                    w.file.sync()?;
                }
                Ok(())
            }
            Fault::None
            | Fault::SkipPersist
            | Fault::LoseRaceWinner
            | Fault::AckBeforeMovePersist
            | Fault::FreeWhileRead
            | Fault::LoseOnRefusal
            | Fault::RefuseDeletesWhenFull
            | Fault::HangWhenFull
            | Fault::LoopBatches
            | Fault::LoseFieldUpdates => w.file.sync(),
        }
    }

    /// Writes the live pairs to a new segment and publishes it (see the module doc).
    fn compact(&self, w: &mut Writer) -> Result<()> {
        let gen_ = w.gen_ + 1;
        let name = segment_name(gen_);
        if self.dev.list_files().contains(&name) {
            self.dev.remove_file(&name)?;
        }
        let file = self.dev.create_file(&name, self.segment_len)?;
        let first_seq = w.next_seq;
        let mut seq = first_seq;
        let mut bytes = Vec::new();
        for (k, v) in self.core.index().iter() {
            let rec = record::encode(seq, Kind::Put, k, v)
                .ok_or_else(|| Error::invalid("pair too long for a reflog record"))?;
            bytes.extend_from_slice(&rec);
            seq += 1;
        }
        if bytes.len() as u64 > self.segment_len {
            self.dev.remove_file(&name)?;
            return Err(Error::no_space(
                Tier::Flash,
                "the live data does not fit a reflog-flash segment",
            ));
        }
        write_blocks(&file, 0, &bytes)?;
        file.sync()?;
        self.dev.sync_dir()?;
        // BUG (deliberate, skip-persist): the new super slot is not synced, yet the old
        // segment it replaces is removed below.
        let sync = self.fault != Fault::SkipPersist;
        write_slot(&self.dev, Slot { gen_, first_seq }, sync)?;
        let old = segment_name(w.gen_);
        let len = bytes.len() as u64;
        let keep = (len % BLOCK) as usize;
        let tail = bytes.split_off(bytes.len() - keep);
        *w = Writer {
            file,
            gen_,
            len,
            tail,
            next_seq: seq,
            deferred: 0,
        };
        self.dev.remove_file(&old)?;
        self.dev.sync_dir()?;
        self.core.compacted();
        Ok(())
    }
}

impl KvStore for FlashLog {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.core.get(key)
    }

    fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        self.append(Kind::Put, key, value)
    }

    fn delete(&self, key: &[u8]) -> Result<()> {
        self.append(Kind::Delete, key, &[])
    }

    fn scan(&self, start: &[u8], limit: usize) -> Result<Vec<KvPair>> {
        self.core.scan(start, limit)
    }

    fn flush(&self) -> Result<()> {
        self.core.check_writable()?;
        let r = self.writer.lock().file.sync();
        self.core.poison_on_error(r)
    }

    fn stats(&self) -> Stats {
        self.core.stats()
    }

    fn close(&self) -> Result<()> {
        if self.core.close() || self.core.is_poisoned() {
            return Ok(());
        }
        self.writer.lock().file.sync()
    }

    fn check(&self) -> Result<Vec<String>> {
        let w = self.writer.lock();
        let mut index = Index::new();
        let slot = read_super(&self.dev)?;
        let (len, _) = replay(&w.file, slot.first_seq, |kind, key, value| {
            apply(&mut index, kind, key, value);
        })?;
        if slot.gen_ != w.gen_ || len != w.len || index != *self.core.index() {
            return Err(corrupt(0, "the segment does not replay to the live index"));
        }
        Ok(vec![format!(
            "reflog-flash: generation {}, {len} of {} bytes, {} keys; replay matches",
            w.gen_,
            self.segment_len,
            index.len()
        )])
    }
}

impl Drop for FlashLog {
    fn drop(&mut self) {
        let _ = self.close();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn super_slots_round_trip_and_refuse_damage() {
        let s = Slot {
            gen_: 7,
            first_seq: 1234,
        };
        let b = encode_slot(s);
        assert_eq!(decode_slot(&b), Some(s));
        for i in 0..SLOT_LEN {
            let mut bad = b;
            bad[i] ^= 0x10;
            assert_eq!(decode_slot(&bad), None, "flip in byte {i}");
        }
        assert_eq!(decode_slot(&[0u8; 64]), None);
        assert_eq!(decode_slot(&b[..SLOT_LEN - 1]), None);
    }
}

#[cfg(test)]
mod store_tests {
    use std::path::Path;

    use tierkv::{ByteSize, Db, Options};

    use super::super::REFLOG_FLASH;

    fn open(dir: &Path) -> tierkv::Result<Db> {
        let o = Options::default()
            .engine("reflog-flash@segment=64KiB")
            .flash_dir(dir.join("flash"))
            .flash_size(ByteSize::mib(64));
        Db::open_with_engine(dir, o, &REFLOG_FLASH)
    }

    #[test]
    fn reopen_replays_across_compactions() {
        let d = tempfile::tempdir().unwrap();
        let db = open(d.path()).unwrap();
        for i in 0..400u32 {
            let key = format!("key{:02}", i % 20).into_bytes();
            db.put(&key, &vec![(i % 200) as u8; 500 + i as usize])
                .unwrap();
        }
        db.delete(b"key07").unwrap();
        assert!(db.stats().counters["reflog_compactions"] > 0);
        let lines = db.check().unwrap();
        assert!(
            lines.iter().any(|l| l.contains("replay matches")),
            "{lines:?}"
        );
        drop(db);
        let db = open(d.path()).unwrap();
        assert_eq!(db.get(b"key07").unwrap(), None);
        assert_eq!(
            db.get(b"key19").unwrap(),
            Some(vec![(399 % 200) as u8; 899])
        );
        assert_eq!(db.scan::<Vec<u8>, _>(.., 100).unwrap().len(), 19);
        let files = std::fs::read_dir(d.path().join("flash")).unwrap().count();
        assert_eq!(files, 2, "one segment and the super block");
    }

    #[test]
    fn a_torn_tail_ends_the_log_and_keeps_what_came_before() {
        let d = tempfile::tempdir().unwrap();
        let db = open(d.path()).unwrap();
        db.put(b"first", &[1; 3000]).unwrap();
        db.put(b"second", &[2; 3000]).unwrap();
        drop(db);
        let seg = d.path().join("flash").join(super::segment_name(1));
        let mut bytes = std::fs::read(&seg).unwrap();
        // A byte in the second record's value (it starts after the first, ~3040 bytes).
        bytes[5000] ^= 1;
        std::fs::write(&seg, &bytes).unwrap();
        let db = open(d.path()).unwrap();
        assert_eq!(db.get(b"first").unwrap(), Some(vec![1; 3000]));
        assert_eq!(db.get(b"second").unwrap(), None);
        // The log continues after the last good record.
        db.put(b"third", b"3").unwrap();
        drop(db);
        let db = open(d.path()).unwrap();
        assert_eq!(db.get(b"third").unwrap().as_deref(), Some(&b"3"[..]));
    }
}
