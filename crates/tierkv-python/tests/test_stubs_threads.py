"""The type stubs name what the module has; a Db is shared between threads."""

import ast
import pathlib
import threading

import tierkv
from conftest import open_small

STUBS = pathlib.Path(tierkv.__file__).with_name("__init__.pyi")


def test_every_name_in_the_stubs_exists():
    tree = ast.parse(STUBS.read_text())
    stub_classes = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            assert callable(getattr(tierkv, node.name)), node.name
        elif isinstance(node, ast.ClassDef) and node.name != "EngineInfo":
            stub_classes.add(node.name)
            cls = getattr(tierkv, node.name)
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name != "__init__":
                    assert hasattr(cls, item.name), f"{node.name}.{item.name}"
    # Every class the module exports has a stub, and the other way round.
    exported = {n for n in tierkv.__all__ if isinstance(getattr(tierkv, n), type)}
    assert stub_classes == exported


def test_threads_share_one_db(tmp_path):
    with open_small(tmp_path) as db:
        errors = []

        def writer(t):
            try:
                for i in range(300):
                    db.put(b"t%d-%04d" % (t, i), b"%d" % i)
                    if i % 50 == 0:
                        db.write(tierkv.WriteBatch().put(b"batch-%d" % t, b"%d" % i))
            except Exception as e:  # pragma: no cover - reported below
                errors.append(e)

        threads = [threading.Thread(target=writer, args=(t,)) for t in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        assert sum(1 for _ in db.range(b"t", b"u")) == 4 * 300
        assert db.multi_get([b"batch-%d" % t for t in range(4)]) == [b"250"] * 4
