"""Each exception class, raised by a real cause; all are subclasses of tierkv.Error."""

import os
import struct

import pytest

import tierkv
from conftest import SMALL, open_small


def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def masked(crc):
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def make_store(path):
    with open_small(path) as db:
        db.put(b"k", b"v")
    return path / "MANIFEST"


def test_every_class_is_a_tierkv_error():
    classes = [
        tierkv.IoError,
        tierkv.Corruption,
        tierkv.ChecksumMismatch,
        tierkv.UnsupportedFormat,
        tierkv.InvalidArgument,
        tierkv.NoSpace,
        tierkv.Unsupported,
        tierkv.NoStore,
        tierkv.Locked,
        tierkv.Closed,
        tierkv.Poisoned,
    ]
    assert len(set(classes)) == len(classes)
    for c in classes:
        assert issubclass(c, tierkv.Error) and issubclass(c, Exception)
    assert issubclass(tierkv.ChecksumMismatch, tierkv.Corruption)


def test_invalid_argument_for_bad_keys_values_and_options(tmp_path):
    with open_small(tmp_path / "a") as db:
        with pytest.raises(tierkv.InvalidArgument, match="empty key"):
            db.put(b"", b"v")
        with pytest.raises(tierkv.InvalidArgument, match="longer than the limit"):
            db.get(b"k" * 2000)
        with pytest.raises(tierkv.InvalidArgument, match="longer than the limit"):
            db.write(tierkv.WriteBatch().put(b"k", b"v" * ((1 << 20) + 1)))
        with pytest.raises(tierkv.InvalidArgument, match="at least one entry"):
            next(db.range(page_entries=0))
    with pytest.raises(tierkv.InvalidArgument, match="pmem mode"):
        tierkv.open(str(tmp_path / "b"), pmem_mode="sometimes")
    with pytest.raises(tierkv.InvalidArgument, match="unknown unit"):
        tierkv.open(str(tmp_path / "c"), pmem_size="64XiB")
    with pytest.raises(tierkv.InvalidArgument, match="unknown engine"):
        tierkv.open(str(tmp_path / "d"), engine="leveldb")


def test_type_errors_for_str_and_unknown_keywords(tmp_path):
    with open_small(tmp_path) as db:
        with pytest.raises(TypeError):
            db.put("k", b"v")
        with pytest.raises(TypeError):
            db.get(1)
        with pytest.raises(TypeError):
            tierkv.WriteBatch().put(b"k", "v")
    with pytest.raises(TypeError, match="pmem_sise"):
        tierkv.open(str(tmp_path / "x"), pmem_sise="1GiB")


def test_unsupported_batch_on_an_engine_without_atomic_batches(tmp_path):
    with open_small(tmp_path, "hetermm@oplog=off") as db:
        assert not db.atomic_batches
        with pytest.raises(tierkv.Unsupported, match="oplog=off"):
            db.write(tierkv.WriteBatch().put(b"a", b"1"))
        assert db.get(b"a") is None  # nothing of it applied


def test_no_store_and_locked(tmp_path):
    with pytest.raises(tierkv.NoStore):
        tierkv.open(str(tmp_path / "none"), create_if_missing=False)
    with open_small(tmp_path / "s"):
        with pytest.raises(tierkv.Locked):
            tierkv.open(str(tmp_path / "s"))


def test_io_error_with_errno_for_an_impossible_pool_path(tmp_path):
    with pytest.raises(tierkv.IoError) as e:
        tierkv.open(str(tmp_path), engine="prism", pmem_path="/proc/no-such-dir", **{
            k: v for k, v in SMALL.items() if k != "pmem_path"
        })
    assert e.value.errno in (2, 13, 30)  # ENOENT, EACCES or EROFS, as /proc says


def test_corruption_for_a_manifest_with_a_bad_magic(tmp_path):
    m = make_store(tmp_path)
    data = bytearray(m.read_bytes())
    data[0] ^= 0xFF
    m.write_bytes(bytes(data))
    with pytest.raises(tierkv.Corruption, match="bad magic") as e:
        tierkv.open(str(tmp_path))
    assert not isinstance(e.value, tierkv.ChecksumMismatch)


def test_checksum_mismatch_for_a_flipped_manifest_byte(tmp_path):
    m = make_store(tmp_path)
    data = bytearray(m.read_bytes())
    data[-2] ^= 0x01
    m.write_bytes(bytes(data))
    with pytest.raises(tierkv.ChecksumMismatch, match="checksum mismatch"):
        tierkv.open(str(tmp_path))


def test_unsupported_format_for_a_newer_manifest(tmp_path):
    m = make_store(tmp_path)
    data = bytearray(m.read_bytes())
    # Header: magic (8), version, body length, body crc, header crc (u32 LE each).
    struct.pack_into("<I", data, 8, 99)
    struct.pack_into("<I", data, 20, masked(crc32c(bytes(data[:20]))))
    m.write_bytes(bytes(data))
    with pytest.raises(tierkv.UnsupportedFormat, match="version 99"):
        tierkv.open(str(tmp_path))


def test_no_space_when_the_pool_is_full(tmp_path):
    # hetermm keeps every value in its pmem pool (values up to 31616 bytes): a small pool
    # fills.
    with tierkv.open(
        str(tmp_path), engine="hetermm", pmem_size="16MiB", pmem_mode="volatile", dram="4MiB"
    ) as db:
        with pytest.raises(tierkv.NoSpace):
            for i in range(2000):
                db.put(b"k%04d" % i, os.urandom(30_000))
        # The store stays usable: reads work, and a delete makes room.
        assert db.get(b"k0000") is not None


def test_closed_after_close(tmp_path):
    db = open_small(tmp_path)
    db.close()
    with pytest.raises(tierkv.Closed, match="closed"):
        db.put(b"k", b"v")
