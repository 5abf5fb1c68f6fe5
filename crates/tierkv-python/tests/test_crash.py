"""Batch atomicity seen from Python: a child process writes batches in a loop and is killed
with SIGKILL at a random moment; after each kill the store is reopened and every batch must
be all or nothing, and no acknowledged batch lost (prism: crash-atomic batches)."""

import os
import random
import signal
import subprocess
import sys
import textwrap
import time

import tierkv
from conftest import SMALL

KEYS = 50

CHILD = textwrap.dedent(
    """
    import ast, sys, tierkv
    path, first = sys.argv[1], int(sys.argv[2])
    db = tierkv.open(path, engine="prism", **ast.literal_eval(sys.argv[3]))
    i = first
    while True:
        n = 1 + (i * 7) % NKEYS
        b = tierkv.WriteBatch()
        for j in range(n):
            b.put(b"k%02d" % j, b"%d" % i)
        b.put(b"seq", b"%d" % i)
        db.write(b)
        print(i, flush=True)   # acknowledged
        i += 1
    """
).replace("NKEYS", str(KEYS))


def size(i):
    return 1 + (i * 7) % KEYS


def expected(seq):
    """What keys k00..k49 hold after batches 0..seq (all of each, in order)."""
    want = {}
    for i in range(seq + 1):
        for j in range(size(i)):
            want[b"k%02d" % j] = b"%d" % i
    return want


def test_batches_are_all_or_nothing_after_sigkill(tmp_path):
    rng = random.Random(int(os.environ.get("TIERKV_SEED", "2024")))
    path = str(tmp_path)
    seq = -1
    for round_ in range(10):
        err = open(tmp_path / f"child{round_}.err", "w+")
        proc = subprocess.Popen(
            [sys.executable, "-c", CHILD, path, str(seq + 1), repr(SMALL)],
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
        )
        stop_after = rng.randint(1, 40)
        acked = seq
        for _ in range(stop_after):
            line = proc.stdout.readline()
            assert line, (tmp_path / f"child{round_}.err").read_text()
            acked = int(line)
        time.sleep(rng.random() * 0.02)  # kill inside a later batch, at a random moment
        proc.send_signal(signal.SIGKILL)
        assert proc.wait(timeout=60) == -signal.SIGKILL
        err.close()
        # What the child printed before it died, including what this side's reader
        # buffered already: acknowledged too.
        for line in proc.stdout.read().split():
            acked = int(line)
        with tierkv.open(path) as db:
            got_seq = int(db.get(b"seq"))
            # No acknowledged batch lost; at most the one in flight beyond it.
            assert acked <= got_seq <= acked + 1, (round_, acked, got_seq)
            keys = [b"k%02d" % j for j in range(KEYS)]
            got = dict(zip(keys, db.multi_get(keys)))
            want = expected(got_seq)
            assert {k: v for k, v in got.items() if v is not None} == want, round_
            assert db.check()
        seq = got_seq
    assert seq >= 10
