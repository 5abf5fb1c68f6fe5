"""Iteration: bounds, reverse, paging, laziness, delete_range, unordered engines."""

import random

import pytest

import tierkv
from conftest import open_small


def keys_of(it):
    return [k for k, _ in it]


@pytest.fixture
def db(tmp_path):
    with open_small(tmp_path) as db:
        for k in [b"a", b"b", b"ba", b"c", b"d\x00", b"d"]:
            db.put(k, k.upper())
        yield db


def test_bounds_are_start_inclusive_end_exclusive(db):
    assert keys_of(db.range(b"b", b"c")) == [b"b", b"ba"]
    assert keys_of(db.range(b"b", b"c", end_inclusive=True)) == [b"b", b"ba", b"c"]
    assert keys_of(db.range(None, b"b")) == [b"a"]
    assert keys_of(db.range(b"c")) == [b"c", b"d", b"d\x00"]
    assert keys_of(db.range()) == [b"a", b"b", b"ba", b"c", b"d", b"d\x00"]
    assert list(db.range(b"ba", b"ba")) == []
    assert list(db.range(b"z", b"a")) == []  # inverted: empty, no error
    assert dict(db.range(b"a", b"b")) == {b"a": b"A"}


def test_reverse_walks_down_in_every_page_size(db):
    full = [b"d\x00", b"d", b"c", b"ba", b"b", b"a"]
    for page in range(1, 8):
        assert keys_of(db.range(reverse=True, page_entries=page)) == full
        assert keys_of(db.range(b"b", b"d", reverse=True, page_entries=page)) == [b"c", b"ba", b"b"]


def test_range_matches_a_sorted_model_with_random_bounds(tmp_path):
    rng = random.Random(24)
    model = {}
    with open_small(tmp_path, "dram") as db:
        for _ in range(300):
            k = bytes(rng.choice(b"ab\x00\xfe") for _ in range(rng.randint(1, 4)))
            v = bytes(rng.randrange(256) for _ in range(rng.randint(0, 20)))
            db.put(k, v)
            model[k] = v
        for _ in range(200):
            lo = rng.choice([None, bytes([rng.choice(b"ab\x00\xfe")])])
            hi = rng.choice([None, bytes(rng.choice(b"ab\x00\xfe") for _ in range(2))])
            rev = rng.random() < 0.5
            want = sorted(
                (k, v)
                for k, v in model.items()
                if (lo is None or k >= lo) and (hi is None or k < hi)
            )
            if rev:
                want.reverse()
            got = list(db.range(lo, hi, reverse=rev, page_entries=rng.randint(1, 20)))
            assert got == want, (lo, hi, rev)


def test_a_100k_key_range_is_not_materialised(tmp_path):
    n = 100_000
    # 100k keys need more than the small pool (prism's key index and batch logs). Batches
    # of 10,000 (the most a batch holds): prism reserves key-index room for a batch's new
    # keys before its commit point, bounded by the splits they can cause (issue 24).
    with open_small(tmp_path, pmem_size="64MiB") as db:
        for base in range(0, n, 10_000):
            b = tierkv.WriteBatch()
            for i in range(base, base + 10_000):
                b.put(b"k%06d" % i, b"v" * 32)
            db.write(b)
        read_before = db.stats()["user_bytes_read"]
        it = db.range(b"k", b"l")
        assert it.pages_fetched == 0  # nothing is read before the first next()
        first = [next(it) for _ in range(1000)]
        assert first[0][0] == b"k000000" and first[-1][0] == b"k000999"
        # 1000 items came from at most 1000 + one page of entries, never from 100k.
        assert it.entries_fetched <= 1000 + 256 + 1
        assert it.buffered < 256
        assert db.stats()["user_bytes_read"] - read_before <= (1000 + 257) * 32
        assert sum(1 for _ in it) == n - 1000
        assert it.pages_fetched >= n // 256


def test_writes_during_iteration_follow_the_page_rule(tmp_path):
    # Each page is a fresh scan from after the last key returned: a key put ahead of the
    # cursor is seen once its page is fetched, one deleted ahead of it is not returned.
    with open_small(tmp_path, "dram") as db:
        for i in range(10):
            db.put(b"k%d" % i, b"old")
        it = db.range(page_entries=2)
        assert next(it)[0] == b"k0"
        db.delete(b"k5")
        db.put(b"k7", b"new")
        db.put(b"k0a", b"inserted")
        rest = dict(it)
        assert b"k5" not in rest
        assert rest[b"k7"] == b"new"
        # k0a sorts right after k0; k1 was already in the first page, k0a was not.
        assert rest[b"k0a"] == b"inserted"
        assert b"k0" not in rest


def test_delete_range_removes_exactly_the_range(db):
    assert db.delete_range(b"b", b"d") == 3
    assert keys_of(db.range()) == [b"a", b"d", b"d\x00"]
    assert db.delete_range(b"d", b"d", end_inclusive=True) == 1
    assert db.delete_range() == 2
    assert list(db.range()) == []


def test_an_unordered_engine_refuses_ranges(tmp_path):
    with open_small(tmp_path, "dram:hash") as db:
        db.put(b"a", b"1")
        assert not db.ordered
        it = db.range()
        with pytest.raises(tierkv.Unsupported, match="unordered"):
            next(it)
        with pytest.raises(StopIteration):
            next(it)  # an error ends the iterator
        with pytest.raises(tierkv.Unsupported):
            db.delete_range(b"a")


def test_range_keys_are_bytes_not_str(db):
    with pytest.raises(TypeError):
        db.range("a", "b")
