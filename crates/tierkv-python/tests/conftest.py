"""Shared fixtures of the tierkv Python tests: small stores in a temporary directory."""

import os
import subprocess
import sys
import textwrap

import pytest

import tierkv

# Small tiers so that a store is quick to create and light on disk (pool and flash files are
# allocated for real): every test creates a few. The pool is in
# Volatile mode: no msync, and still durable across the crash of a process (SIGKILL), the
# failure these tests inflict (power loss is the Rust crash tests' business).
SMALL = {"pmem_size": "16MiB", "flash_size": "32MiB", "dram": "8MiB", "pmem_mode": "volatile"}

# Engines that scan in key order (their default variant); the model of `range` runs on each.
ORDERED = [e["name"] for e in tierkv.engines()]


@pytest.fixture
def small():
    return dict(SMALL)


def open_small(path, engine="prism", **kw):
    opts = dict(SMALL)
    opts.update(kw)
    return tierkv.open(str(path), engine=engine, **opts)


def run_python(code, *args, timeout=120):
    """Runs `code` in a fresh interpreter (the one running the tests) and returns stdout."""
    out = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=dict(os.environ),
    )
    assert out.returncode == 0, out.stderr
    return out.stdout
