"""Round trips, reopen in another process, batches, stats, check, engines, closing."""

import pytest

import tierkv
from conftest import SMALL, open_small, run_python


@pytest.mark.parametrize("engine", ["prism", "dram", "hetermm", "focus", "mio", "prismdb"])
def test_round_trip_on_every_engine(tmp_path, engine):
    with open_small(tmp_path, engine) as db:
        assert db.get(b"k") is None
        db.put(b"k", b"v1")
        db.put(bytearray(b"k2"), bytearray(b"\x00\xff" * 100))
        assert db.get(b"k") == b"v1"
        assert db.get(b"k2") == b"\x00\xff" * 100
        db.put(b"k", b"")
        assert db.get(b"k") == b""
        db.delete(b"k")
        db.delete(b"never-there")
        assert db.get(b"k") is None
        assert db.multi_get([b"k", b"k2"]) == [None, b"\x00\xff" * 100]
        assert db.engine.startswith(engine)
    assert db.closed


def test_reopen_in_another_process_sees_every_write(tmp_path):
    with open_small(tmp_path) as db:
        for i in range(200):
            db.put(b"key%03d" % i, b"value%d" % i)
        db.delete(b"key007")
    out = run_python(
        """
        import sys, tierkv
        with tierkv.open(sys.argv[1]) as db:   # the engine comes from the manifest
            print(db.engine)
            print(sum(1 for _ in db.range()))
            print(db.get(b"key199").decode(), db.get(b"key007"))
            db.put(b"from-child", b"yes")
        """,
        tmp_path,
    )
    assert out.split("\n")[:3] == ["prism", "199", "value199 None"]
    with tierkv.open(str(tmp_path), engine="prism") as db:
        assert db.get(b"from-child") == b"yes"


def test_write_batch_applies_puts_and_deletes_and_chains(tmp_path):
    with open_small(tmp_path) as db:
        db.put(b"gone", b"x")
        b = tierkv.WriteBatch().put(b"a", b"1").put(b"b", b"2").delete(b"gone")
        b.put(b"a", b"3")  # the later op on a key wins
        assert len(b) == 3 and b.nbytes == len(b"a3b2gone")
        db.write(b)
        assert db.multi_get([b"a", b"b", b"gone"]) == [b"3", b"2", None]
        assert db.atomic_batches
        b.clear()
        assert len(b) == 0
        db.write(b)  # an empty batch is a no-op


def test_stats_is_a_dict_of_numbers_that_count(tmp_path):
    with open_small(tmp_path) as db:
        before = db.stats()
        db.put(b"k", b"v" * 1000)
        db.get(b"k")
        after = db.stats()
    assert isinstance(after, dict)
    assert all(isinstance(v, (int, float)) for v in after.values())
    assert after["user_bytes_written"] - before["user_bytes_written"] == 1001
    assert after["user_bytes_read"] - before["user_bytes_read"] == 1000
    assert after["pmem_bytes_written"] > before["pmem_bytes_written"]


def test_check_reports_the_manifest_and_the_pool(tmp_path):
    with open_small(tmp_path) as db:
        db.put(b"k", b"v")
        lines = db.check()
    assert lines[0].startswith("manifest: format ok, engine prism")
    assert any(line.startswith("pmem pool") for line in lines)


def test_engines_lists_the_registry():
    es = tierkv.engines()
    assert [e["name"] for e in es][:2] == ["prism", "dram"]
    by_name = {e["name"]: e for e in es}
    assert by_name["dram"]["volatile"] and not by_name["prism"]["volatile"]
    assert by_name["prism"]["atomic_batches"] and by_name["mio"]["atomic_batches"]
    assert by_name["hetermm"]["unordered_variants"] == ["hash", "lockfree"]
    assert "pmem" in by_name["prism"]["tiers"]
    assert by_name["mio"]["tiers"] == ["pmem"]
    assert by_name["mio"]["variant_tiers"] == {"flash": ["pmem", "flash"]}


def test_every_call_after_close_raises_closed(tmp_path):
    db = open_small(tmp_path)
    db.put(b"a", b"1")
    it = db.range()
    db.close()
    db.close()  # twice is harmless
    calls = [
        lambda: db.get(b"a"),
        lambda: db.put(b"a", b"2"),
        lambda: db.delete(b"a"),
        lambda: db.write(tierkv.WriteBatch().put(b"a", b"2")),
        lambda: db.multi_get([b"a"]),
        lambda: db.range(),
        lambda: db.delete_range(),
        lambda: db.stats(),
        lambda: db.check(),
        lambda: db.flush(),
        lambda: next(it),  # an iterator made before the close
    ]
    for call in calls:
        with pytest.raises(tierkv.Closed):
            call()
    assert "closed" in repr(db)
    # The directory is free again.
    with tierkv.open(str(tmp_path)) as again:
        assert again.get(b"a") == b"1"


def test_the_context_manager_closes_on_an_exception(tmp_path):
    with pytest.raises(KeyError):
        with open_small(tmp_path) as db:
            db.put(b"a", b"1")
            raise KeyError("boom")
    assert db.closed


def test_options_take_sizes_as_ints_or_strings(tmp_path):
    with tierkv.open(
        str(tmp_path),
        engine="prism",
        pmem_size=64 << 20,
        flash_size="64MiB",
        dram="16MiB",
        pmem_mode="volatile",
        max_value_len=100,
    ) as db:
        db.put(b"k", b"x" * 100)
        with pytest.raises(tierkv.InvalidArgument, match="longer than the limit of 100"):
            db.put(b"k", b"x" * 101)
    assert (tmp_path / "pmem.pool").stat().st_size == 64 << 20
